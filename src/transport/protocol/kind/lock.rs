//! A lock's room: its commands on `keys`, one or several at once, plain,
//! fenced, and as the gate node's copy. A semaphore slot's, a writer's and
//! an election leader's lock key are sent these too, for what those kinds
//! do not do their own way. The caller passes the keys (see
//! `Layout::lock_keys`); nothing here asks a kind for them.

use super::super::keys::Layout;
use super::super::request::{Keys, Op, Request};
use super::super::scripts::{self, Sent, eval};

/// A lock's plain command on the request's keys (a semaphore slot's, a
/// writer's or an election's lock key, where they act as one).
pub(super) fn encode(req: &Request, keys: &Keys, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
    let token = req.token.as_bytes();
    let (script, ttl_ms) = match (&req.op, &keys[..]) {
        (Op::AcquireFenced { .. }, _) => return encode_fenced(req, keys, l, None, sent, cmd),
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
    each(cmd, keys).arg(token);
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
    keys: &Keys,
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
        return encode(req, keys, l, sent, cmd);
    };
    let script = match gate {
        Some(_) => &scripts::GATE_ACQUIRE_FENCED,
        None => &scripts::ACQUIRE_FENCED,
    };
    let gate_keys = gate.map_or(0, |g| g.slots.len() + 2);
    eval(cmd, script, sent).arg(keys.len() * 2 + gate_keys);
    each(cmd, keys);
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

/// The gate node's copy of a lock's acquisition for `ttl_ms`, granted only
/// in turn (a semaphore slot's, a writer's and an election's lock key's
/// too; a fenced one's is [`encode_fenced`]'s).
pub(super) fn gate_acquire(
    req: &Request,
    keys: &Keys,
    (gate, ttl_ms): (&GateKeys<'_>, u64),
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let slots = &gate.slots;
    eval(cmd, &scripts::GATE_ACQUIRE, sent).arg(keys.len() + 2 + slots.len());
    each(cmd, keys).arg(slots).arg(&gate.queue[..]);
    cmd.arg(req.token.as_bytes()).arg(ttl_ms).arg(slots.len());
    cmd.arg(grace_ms(req)).arg(gate.member);
}

/// The gate node's copy of a lock's release, which wakes the next waiter
/// (`held`: a lease's release, not a failed round's clean-up).
pub(super) fn gate_release(
    req: &Request,
    keys: &Keys,
    (gate, held): (&GateKeys<'_>, bool),
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    eval(cmd, &scripts::GATE_RELEASE, sent).arg(keys.len() + 2);
    each(cmd, keys)
        .arg(&gate.queue[..])
        .arg(req.token.as_bytes())
        .arg(gate.member)
        .arg(u8::from(held));
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
