//! The plain command of each request, on every node but a queue's gate
//! node: a lock's (one key, or several all at once), a fenced one's, a
//! semaphore slot's, a reader's and a writer's.

use super::keys::{Layout, QUEUE_ALIVE};
use super::request::{Keys, Kind, Op, Request};
use super::scripts::{self, Sent, eval};

/// How long a waiting writer's mark turns new readers away without a new
/// round from that writer: four of its longest pauses between rounds
/// (a writer waits at most [`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)
/// between rounds).
const WRITER_MARK: std::time::Duration = QUEUE_ALIVE;

/// Adds `req`'s plain command to `cmd`: one `match` over what is asked.
pub(super) fn encode(req: &Request, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
    match &req.kind {
        Kind::Read { lock } => encode_read(req, l, lock, sent, cmd),
        Kind::Write { lock, waits } => encode_write(req, l, lock, *waits, sent, cmd),
        Kind::Permit {
            semaphore, permits, ..
        } => encode_slot(req, l, (semaphore, *permits), sent, cmd),
        Kind::Lock(_) | Kind::Leadership { .. } => encode_lock(req, l, sent, cmd),
    }
}

/// An ordinary lock's command on the request's keys (a semaphore slot's,
/// a writer's or an election's lock key, where they act as one).
pub(super) fn encode_lock(req: &Request, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
    let keys = l.lock_keys(&req.kind);
    let token = req.token.as_bytes();
    let (script, ttl_ms) = match (&req.op, &keys[..]) {
        (Op::AcquireFenced { .. }, _) => return encode_fenced(req, l, None, sent, cmd),
        (Op::Acquire { ttl_ms }, [key]) => {
            // `GET`: a refusal names the holder (its token, which a vote
            // keeps only as a hash), so a round can tell a split from a
            // holder. Redis 7.0 or later.
            *cmd = redis::cmd("SET");
            cmd.arg(&**key)
                .arg(token)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(ttl_ms);
            return;
        }
        (Op::Release { .. }, [_]) => (&scripts::RELEASE, None),
        (Op::Extend { ttl_ms }, [_]) => (&scripts::EXTEND, Some(*ttl_ms)),
        // Several keys: one script that acts on all of them or on none.
        (Op::Acquire { ttl_ms }, _) => (&scripts::ACQUIRE_ALL, Some(*ttl_ms)),
        (Op::Extend { ttl_ms }, _) => (&scripts::EXTEND_ALL, Some(*ttl_ms)),
        (Op::Release { .. }, _) => (&scripts::RELEASE_ALL, None),
        // Only ever sent to the gate node (see `gate.rs`), or as an
        // election's (see `encode`): a no.
        (Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign | Op::Inspect, _)
        | (Op::ForceRelease { .. }, _) => {
            eval(cmd, &scripts::NO, sent).arg(0);
            return;
        }
    };
    eval(cmd, script, sent).arg(keys.len());
    each(cmd, &keys).arg(token);
    if let Some(ttl_ms) = ttl_ms {
        cmd.arg(ttl_ms);
    }
}

/// Adds every one of `keys` to `cmd`.
pub(super) fn each<'c>(cmd: &'c mut redis::Cmd, keys: &Keys) -> &'c mut redis::Cmd {
    for key in keys.iter() {
        cmd.arg(&**key);
    }
    cmd
}

/// How long the gate node counts a grant's key as the queue's (see
/// `grant` in `scripts/lib_queue.lua`): the granted round's per-node
/// timeout, in whole ms (at least 1).
pub(super) fn grace_ms(req: &Request) -> u64 {
    u64::try_from(req.timeout.value.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The queue's part of a gate node's copy: its keys, the semaphore's slot
/// keys (if any), and the waiter.
pub(super) struct GateKeys<'a> {
    pub(super) queue: [String; 2],
    pub(super) slots: Vec<String>,
    pub(super) member: &'a str,
}

/// The fenced acquisition: lock keys, then fence keys (then, on the gate
/// node, the slot keys, the queue keys and the member).
pub(super) fn encode_fenced(
    req: &Request,
    l: Layout,
    gate: Option<&GateKeys<'_>>,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let Op::AcquireFenced {
        ttl_ms,
        proposed,
        idle_ms,
    } = req.op
    else {
        return encode_lock(req, l, sent, cmd);
    };
    let keys = l.lock_keys(&req.kind);
    let script = match gate {
        Some(_) => &scripts::GATE_ACQUIRE_FENCED,
        None => &scripts::ACQUIRE_FENCED,
    };
    let gate_keys = gate.map_or(0, |g| g.slots.len() + 2);
    eval(cmd, script, sent).arg(keys.len() * 2 + gate_keys);
    each(cmd, &keys);
    for key in keys.iter() {
        cmd.arg(l.fence(key));
    }
    if let Some(gate) = gate {
        cmd.arg(&gate.slots).arg(&gate.queue[..]);
    }
    cmd.arg(req.token.as_bytes())
        .arg(ttl_ms)
        .arg(keys.len())
        .arg(proposed)
        .arg(idle_ms);
    if let Some(gate) = gate {
        cmd.arg(gate.slots.len())
            .arg(grace_ms(req))
            .arg(gate.member);
    }
}

/// A semaphore slot's acquisition, which also reports the slots held
/// (`semaphore`: its name and number of slots); its other commands are a
/// lock's on the slot key.
fn encode_slot(
    req: &Request,
    l: Layout,
    (semaphore, permits): (&str, u32),
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let (script, ttl_ms, fence) = match req.op {
        Op::AcquireFenced {
            ttl_ms,
            proposed,
            idle_ms,
        } => (
            &scripts::SLOT_ACQUIRE_FENCED,
            ttl_ms,
            Some((proposed, idle_ms)),
        ),
        Op::Acquire { ttl_ms } => (&scripts::SLOT_ACQUIRE, ttl_ms, None),
        _ => return encode_lock(req, l, sent, cmd),
    };
    let keys = l.lock_keys(&req.kind);
    let lock_keys = if fence.is_some() { 2 } else { 1 };
    eval(cmd, script, sent).arg(lock_keys + usize::try_from(permits).unwrap_or(0));
    each(cmd, &keys);
    if fence.is_some() {
        cmd.arg(keys.iter().map(|k| l.fence(k)).collect::<Vec<_>>());
    }
    cmd.arg(l.slots(semaphore, permits))
        .arg(req.token.as_bytes())
        .arg(ttl_ms);
    if let Some((proposed, idle_ms)) = fence {
        cmd.arg(1).arg(proposed).arg(idle_ms);
    }
    cmd.arg(permits);
}

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
fn encode_read(req: &Request, l: Layout, lock: &str, sent: &mut Sent, cmd: &mut redis::Cmd) {
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
fn encode_write(
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
        _ => return encode_lock(req, l, sent, cmd),
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
