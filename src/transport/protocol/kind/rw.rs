//! A reader-writer lock's room: the readers' set `redlock-rw:l#r` (token →
//! until when, in the node's milliseconds), the writer's key
//! `redlock-rw:l#w` (an ordinary lock key) and a waiting writer's mark
//! `redlock-rw:l#wait`, which turns new readers away; their commands, plain
//! and as the gate node's copy.

use std::sync::Arc;

use super::super::keys::{Layout, QUEUE_ALIVE};
use super::super::request::{Keys, Op, Request};
use super::super::scripts::{self, Sent, eval};
use super::lock::{self, GateKeys, grace_ms};

/// What every key of a reader-writer lock starts with.
pub(super) const PREFIX: &str = "redlock-rw:";

/// Which side of a reader-writer lock a caller takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Read,
    Write,
}

impl Layout {
    /// The reader-writer lock `lock`'s keys: the writer's, the readers',
    /// the waiting writer's mark.
    pub(crate) fn rw(self, lock: &str) -> [String; 3] {
        ["#w", "#r", "#wait"].map(|suffix| self.named(PREFIX, lock, suffix))
    }
}

/// The key a side holds by: the readers' set, or the writer's key.
pub(super) fn lock_key(l: Layout, lock: &str, role: Role) -> String {
    let [writer, readers, _] = l.rw(lock);
    match role {
        Role::Read => readers,
        Role::Write => writer,
    }
}

/// The name both sides' waiters queue under: `redlock-rw:l`.
pub(super) fn gate(l: Layout, lock: &str) -> String {
    l.named(PREFIX, lock, "")
}

/// How long a waiting writer's mark turns new readers away without a new
/// round from that writer: four of its longest pauses between rounds
/// (a writer waits at most [`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)
/// between rounds).
const WRITER_MARK: std::time::Duration = QUEUE_ALIVE;

/// How long a writer refused by readers marks that it waits: `0` (no
/// mark) for one that will not try again.
pub(super) fn mark_for(waits: bool) -> u64 {
    if waits {
        u64::try_from(WRITER_MARK.as_millis()).unwrap_or(u64::MAX)
    } else {
        0
    }
}

/// A reader's command on the reader-writer lock `lock`.
pub(super) fn encode_read(
    req: &Request,
    l: Layout,
    lock: &str,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let [writer, readers, mark] = l.rw(lock);
    let token = req.token.as_bytes();
    match req.op {
        Op::Acquire { ttl_ms } | Op::AcquireFenced { ttl_ms, .. } => {
            // Readers exclude nobody but writers: nothing to fence.
            eval(cmd, &scripts::READ_ACQUIRE, sent)
                .arg(3)
                .arg(writer)
                .arg(readers)
                .arg(mark)
                .arg(token)
                .arg(ttl_ms);
        }
        Op::Release { .. } => {
            eval(cmd, &scripts::READ_RELEASE, sent)
                .arg(1)
                .arg(readers)
                .arg(token);
        }
        Op::Extend { ttl_ms } => {
            eval(cmd, &scripts::READ_EXTEND, sent)
                .arg(1)
                .arg(readers)
                .arg(token)
                .arg(ttl_ms);
        }
        // Never sent: a reader's leave goes to the gate node. A no.
        Op::Leave
        | Op::Proclaim { .. }
        | Op::ReadLeader
        | Op::Resign
        | Op::Inspect
        | Op::ForceRelease { .. } => {
            eval(cmd, &scripts::NO, sent).arg(0);
        }
    }
}

/// The writer's acquisition of the reader-writer lock `lock` (`waits`: it
/// marks that it waits when readers refuse it); its other commands are a
/// lock's on the writer's key.
pub(super) fn encode_write(
    req: &Request,
    l: Layout,
    lock: &str,
    waits: bool,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let fence = match req.op {
        Op::Acquire { .. } => None,
        Op::AcquireFenced {
            proposed, idle_ms, ..
        } => Some((proposed, idle_ms)),
        _ => {
            let writer: Keys = Arc::from([Arc::from(lock_key(l, lock, Role::Write))]);
            return lock::encode(req, &writer, l, sent, cmd);
        }
    };
    let [writer, readers, mark] = l.rw(lock);
    let fence_key = l.fence(&writer);
    eval(cmd, &scripts::WRITE_ACQUIRE, sent)
        .arg(if fence.is_some() { 4 } else { 3 })
        .arg(writer)
        .arg(readers)
        .arg(mark);
    if fence.is_some() {
        cmd.arg(fence_key);
    }
    let ttl_ms = req.op.ttl_ms().unwrap_or(0);
    cmd.arg(req.token.as_bytes())
        .arg(ttl_ms)
        .arg(mark_for(waits));
    if let Some((proposed, idle_ms)) = fence {
        cmd.arg(proposed).arg(idle_ms);
    }
}

/// A reader's (`waits`: `None`) or the writer's acquisition of the
/// reader-writer lock `lock`, in turn.
pub(super) fn gate_acquire(
    req: &Request,
    l: Layout,
    (lock, waits): (&str, Option<bool>),
    gate: &GateKeys<'_>,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let [writer, readers, mark] = l.rw(lock);
    let (proposed, idle_ms) = match req.op {
        Op::AcquireFenced {
            proposed, idle_ms, ..
        } if waits.is_some() => (proposed, idle_ms),
        _ => (0, 0),
    };
    let fenced = proposed > 0;
    let fence = l.fence(&writer);
    eval(cmd, &scripts::GATE_RW_ACQUIRE, sent)
        .arg(if fenced { 6 } else { 5 })
        .arg(writer)
        .arg(readers)
        .arg(mark);
    if fenced {
        cmd.arg(fence);
    }
    let ttl_ms = req.op.ttl_ms().unwrap_or(0);
    cmd.arg(&gate.queue[..])
        .arg(req.token.as_bytes())
        .arg(ttl_ms);
    // A reader leaves no mark.
    cmd.arg(mark_for(waits.unwrap_or(false)))
        .arg(proposed)
        .arg(idle_ms);
    cmd.arg(if waits.is_none() { "r" } else { "w" });
    cmd.arg(grace_ms(req)).arg(gate.member);
}

/// A reader's release on the gate node, which wakes the next waiter
/// (`held`: a lease's release, not a failed round's clean-up).
pub(super) fn gate_read_release(
    req: &Request,
    l: Layout,
    lock: &str,
    (gate, held): (&GateKeys<'_>, bool),
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let [writer, readers, mark] = l.rw(lock);
    eval(cmd, &scripts::GATE_READ_RELEASE, sent)
        .arg(5)
        .arg(readers)
        .arg(writer)
        .arg(mark)
        .arg(&gate.queue[..])
        .arg(req.token.as_bytes())
        .arg(gate.member)
        .arg(u8::from(held));
}
