//! The gate node's copy of a request that takes part in a queue of
//! waiters (see `scripts/lib_queue.lua`): an acquisition that may be
//! granted only in turn, a release that wakes the next waiter, a leave.

use super::commands::{GateKeys, each, encode_fenced, grace_ms, mark_for};
use super::keys::Layout;
use super::request::{Kind, Op, Request};
use super::scripts::{self, Sent, eval};

/// Adds the gate node's copy of `req`, for the waiter `member` (`""`: not
/// waiting), to `cmd`.
pub(super) fn encode(
    req: &Request,
    l: Layout,
    member: &str,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let acquires = matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
    let gate = GateKeys {
        queue: l.queue(&req.kind),
        slots: match &req.kind {
            Kind::Permit {
                semaphore, permits, ..
            } => l.slots(semaphore, *permits),
            _ => Vec::new(),
        },
        member,
    };
    match (&req.kind, &req.op) {
        (Kind::Read { lock }, _) if acquires => rw_acquire(req, l, (lock, None), &gate, sent, cmd),
        (Kind::Write { lock, waits }, _) if acquires => {
            rw_acquire(req, l, (lock, Some(*waits)), &gate, sent, cmd);
        }
        (Kind::Read { lock }, Op::Release { held }) => {
            let [writer, readers, mark] = l.rw(lock);
            eval(cmd, &scripts::GATE_READ_RELEASE, sent)
                .arg(5)
                .arg(readers)
                .arg(writer)
                .arg(mark)
                .arg(&gate.queue[..])
                .arg(req.token.as_bytes())
                .arg(member)
                .arg(u8::from(*held));
        }
        _ => lock(req, l, &gate, sent, cmd),
    }
}

/// A reader's (`waits`: `None`) or the writer's acquisition of the
/// reader-writer lock `lock`, in turn.
fn rw_acquire(
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

/// The gate node's copy for a lock's keys (and a semaphore slot's, a
/// writer's and an election's lock key, and a reader's leave).
fn lock(req: &Request, l: Layout, gate: &GateKeys<'_>, sent: &mut Sent, cmd: &mut redis::Cmd) {
    let keys = l.lock_keys(&req.kind);
    let token = req.token.as_bytes();
    let slots = &gate.slots;
    match req.op {
        Op::Acquire { ttl_ms } => {
            eval(cmd, &scripts::GATE_ACQUIRE, sent).arg(keys.len() + 2 + slots.len());
            each(cmd, &keys).arg(slots).arg(&gate.queue[..]);
            cmd.arg(token).arg(ttl_ms).arg(slots.len());
            cmd.arg(grace_ms(req)).arg(gate.member);
        }
        Op::AcquireFenced { .. } => encode_fenced(req, l, Some(gate), sent, cmd),
        Op::Release { held } => {
            eval(cmd, &scripts::GATE_RELEASE, sent).arg(keys.len() + 2);
            each(cmd, &keys)
                .arg(&gate.queue[..])
                .arg(token)
                .arg(gate.member)
                .arg(u8::from(held));
        }
        Op::Leave => {
            // What lets the next waiter in once free: a semaphore's slots,
            // a reader-writer lock's writer key, else the (first) key.
            let watched = match &req.kind {
                Kind::Permit { .. } => slots.clone(),
                Kind::Read { lock } | Kind::Write { lock, .. } => {
                    let [writer, ..] = l.rw(lock);
                    vec![writer]
                }
                Kind::Lock(_) | Kind::Leadership { .. } => {
                    keys.iter().take(1).map(|k| k.to_string()).collect()
                }
            };
            eval(cmd, &scripts::LEAVE, sent)
                .arg(watched.len() + 2)
                .arg(&watched)
                .arg(&gate.queue[..])
                .arg(gate.member);
        }
        // Never a gate node's copy (see `codec::gate_member`): nothing to
        // queue for, so the plain command.
        Op::Extend { .. }
        | Op::Proclaim { .. }
        | Op::ReadLeader
        | Op::Resign
        | Op::Inspect
        | Op::ForceRelease { .. } => {
            super::commands::encode(req, l, sent, cmd);
        }
    }
}
