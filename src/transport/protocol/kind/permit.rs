//! A semaphore's room: slot `i` of the semaphore `s` is the ordinary lock
//! key `redlock-sem:s#i`; every slot queues under `redlock-sem:s`, so that
//! a release of any slot wakes its waiters. A slot's acquisition off the
//! gate node also reports which slots the node holds.

use std::sync::Arc;

use super::super::keys::Layout;
use super::super::request::{Keys, Op, Request};
use super::super::scripts::{self, Sent, eval};
use super::lock::{self, each};

/// What every key of a semaphore starts with.
pub(super) const PREFIX: &str = "redlock-sem:";

/// The most permits a semaphore may have: a node reports the slots it
/// holds as one 64-bit set.
pub(crate) const MAX_PERMITS: u32 = 64;

impl Layout {
    /// Every slot key of the semaphore `semaphore` of `permits` slots.
    pub(crate) fn slots(self, semaphore: &str, permits: u32) -> Vec<String> {
        (0..permits).map(|i| slot(self, semaphore, i)).collect()
    }
}

/// Slot `slot`'s key of the semaphore `semaphore`.
pub(super) fn slot(l: Layout, semaphore: &str, slot: u32) -> String {
    l.named(PREFIX, semaphore, &format!("#{slot}"))
}

/// Slot `slot`'s key of the semaphore `name`, as a standalone node lays it out.
#[cfg(test)]
pub(crate) fn slot_key(name: &str, slot: u32) -> String {
    self::slot(Layout::Plain, name, slot)
}

/// The name every slot's waiters queue under: `redlock-sem:s`.
pub(super) fn gate(l: Layout, semaphore: &str) -> String {
    l.named(PREFIX, semaphore, "")
}

/// Whether a node's reply to `req` also reports the slots it holds: an
/// acquisition's, except on the gate node.
pub(super) fn reports(req: &Request) -> bool {
    matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. }) && req.queue.is_none()
}

/// A semaphore slot's acquisition, which also reports the slots held
/// (`semaphore`: its name and number of slots); its other commands are a
/// lock's on the slot key.
pub(super) fn encode(
    req: &Request,
    l: Layout,
    (semaphore, slot, permits): (&str, u32, u32),
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let keys: Keys = Arc::from([Arc::from(self::slot(l, semaphore, slot))]);
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
        _ => return lock::encode(req, &keys, l, sent, cmd),
    };
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

/// A slot report (`0`/`1` per slot) as a set of slots.
pub(crate) fn slots_held(held: &[u8]) -> Option<u64> {
    if held.len() > 64 {
        return None;
    }
    held.iter()
        .enumerate()
        .try_fold(0u64, |set, (i, c)| match c {
            b'0' => Some(set),
            b'1' => Some(set | 1 << i),
            _ => None,
        })
}
