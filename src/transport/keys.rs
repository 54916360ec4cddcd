//! The key layout on every node: which Redis keys a lock, a semaphore
//! permit and a queue of waiters use, so that they never collide.
//!
//! * a plain lock on resource `r`: the key `r` (its fence value, on a
//!   fencing client: `redlock-fence:r`);
//! * slot `i` of the semaphore `s`: `redlock-sem:s#i`, an ordinary lock key
//!   (fence value `redlock-fence:redlock-sem:s#i`);
//! * the queue of waiters for a lock or a semaphore, on its gate node:
//!   `redlock-queue:{g}` and `redlock-alive:{g}`, where `g` is the lock's
//!   first key or `redlock-sem:s` (see [`gate_name`]).
//!
//! Resource names that start with one of [`RESERVED`] are refused, so no
//! user's lock lands on these keys.

/// What every semaphore slot key starts with.
pub(crate) const SLOT_PREFIX: &str = "redlock-sem:";

/// Prefixes no resource name may start with (and the restart marker).
pub(crate) const RESERVED: [&str; 4] = [
    "redlock-fence:",
    "redlock-queue:",
    "redlock-alive:",
    SLOT_PREFIX,
];

/// The most permits a semaphore may have: a node reports the slots it
/// holds as one 64-bit set.
pub(crate) const MAX_PERMITS: u32 = 64;

/// Slot `slot`'s key of the semaphore `name`.
pub(crate) fn slot_key(name: &str, slot: u32) -> String {
    format!("{SLOT_PREFIX}{name}#{slot}")
}

/// Every slot key of the semaphore that `slot` (a slot key) belongs to,
/// when it has `permits` slots.
pub(crate) fn slot_siblings(slot: &str, permits: u32) -> impl Iterator<Item = String> + '_ {
    let base = gate_name(slot);
    (0..permits).map(move |i| format!("{base}#{i}"))
}

/// The name whose gate node and queue of waiters a key uses: the key
/// itself, except that every slot of a semaphore shares the semaphore's
/// (`redlock-sem:s`), so that a release of any slot wakes its waiters.
pub(crate) fn gate_name(key: &str) -> &str {
    match key
        .strip_prefix(SLOT_PREFIX)
        .and_then(|rest| rest.rsplit_once('#'))
    {
        Some((name, _)) => &key[..SLOT_PREFIX.len() + name.len()],
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_shares_the_semaphores_gate_and_nothing_else_does() {
        assert_eq!(gate_name(&slot_key("jobs", 0)), "redlock-sem:jobs");
        assert_eq!(gate_name(&slot_key("jobs", 63)), "redlock-sem:jobs");
        assert_eq!(gate_name(&slot_key("a#b", 2)), "redlock-sem:a#b");
        for plain in ["jobs", "jobs#1", "x:redlock-sem:y#1", ""] {
            assert_eq!(gate_name(plain), plain);
        }
    }
}
