//! A lock's room: its commands on one key or several at once, plain,
//! fenced, and as the gate node's copy. Every kind that holds by one lock
//! key (a semaphore slot, a writer, an election's leader) sends these for
//! what it does not do its own way.

use super::super::keys::Layout;
use super::super::request::{Keys, Op, Request};
use super::super::scripts::{self, Sent, eval};

/// A lock's plain command on the request's keys (a semaphore slot's, a
/// writer's or an election's lock key, where they act as one).
pub(super) fn encode(req: &Request, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
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
        // Only ever sent to the gate node, or as an election's: a no.
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
        return encode(req, l, sent, cmd);
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

/// The gate node's copy of a lock's acquisition or release (a semaphore
/// slot's, a writer's and an election's lock key's too).
pub(super) fn gate(
    req: &Request,
    l: Layout,
    gate: &GateKeys<'_>,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
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
        // Never a lock's gate copy (see `kind::encode_gate`): the plain
        // command.
        Op::Leave
        | Op::Extend { .. }
        | Op::Proclaim { .. }
        | Op::ReadLeader
        | Op::Resign
        | Op::Inspect
        | Op::ForceRelease { .. } => encode(req, l, sent, cmd),
    }
}

/// A waiter's leave of its queue, on the gate node: the `watched` keys
/// are what lets the next waiter in once free.
pub(super) fn leave(
    watched: &[String],
    gate: &GateKeys<'_>,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    eval(cmd, &scripts::LEAVE, sent)
        .arg(watched.len() + 2)
        .arg(watched)
        .arg(&gate.queue[..])
        .arg(gate.member);
}
