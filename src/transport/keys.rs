//! The key layout on every node: which Redis keys a lock, a semaphore
//! permit and a queue of waiters use, so that they never collide.
//!
//! * a plain lock on resource `r`: the key `r` (its fence value, on a
//!   fencing client: `redlock-fence:r`);
//! * slot `i` of the semaphore `s`: `redlock-sem:s#i`, an ordinary lock key
//!   (fence value `redlock-fence:redlock-sem:s#i`);
//! * the reader-writer lock `l`: `redlock-rw:l#w` (the writer's token, an
//!   ordinary lock key; fence value `redlock-fence:redlock-rw:l#w`),
//!   `redlock-rw:l#r` (the readers: a sorted set, token → until when, in
//!   the node's milliseconds) and `redlock-rw:l#wait` (a waiting writer's
//!   mark, which turns new readers away);
//! * the election `e`: `redlock-elect:e#l` (the leader's lock key, an
//!   ordinary lock key, always fenced: `redlock-fence:redlock-elect:e#l`)
//!   and `redlock-elect:e#v` (the leader's proclaimed value, with its lock
//!   token, term and sequence number; it expires with the leader's lock
//!   and is extended with it, the next leader overwrites it, a resigning
//!   leader deletes it) and, on its gate node,
//!   `redlock-elect:e#o` (the observers to wake when the value changes: a
//!   sorted set, member → until when, living as long as its latest);
//! * the queue of waiters for a lock or a semaphore, on its gate node:
//!   `redlock-queue:{g}` and `redlock-alive:{g}`, where `g` is the lock's
//!   first key or `redlock-sem:s` (see [`gate_name`]).
//!
//! Resource names that start with one of [`RESERVED`] are refused, so no
//! user's lock lands on these keys.

/// How long a queued waiter keeps its place without a round (`ALIVE` in
/// the gate scripts): four of its longest sleeps between rounds
/// ([`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)).
pub(crate) const QUEUE_ALIVE: std::time::Duration = std::time::Duration::from_millis(2000);

/// The channel a client's queued waiters are woken on:
/// `redlock-wake:{client id}`.
pub(crate) fn wake_channel(client: &str) -> String {
    format!("{WAKE_PREFIX}{client}")
}

/// What every wake channel's name starts with.
pub(crate) const WAKE_PREFIX: &str = "redlock-wake:";

/// The key that keeps `key`'s fence value: `redlock-fence:{key}`.
pub(crate) fn fence_key(key: &str) -> String {
    format!("redlock-fence:{key}")
}

/// The gate node's queue keys for `key`: arrival order, and alive times.
pub(crate) fn queue_keys(key: &str) -> [String; 2] {
    let key = gate_name(key);
    [
        format!("redlock-queue:{key}"),
        format!("redlock-alive:{key}"),
    ]
}

/// What every semaphore slot key starts with.
pub(crate) const SLOT_PREFIX: &str = "redlock-sem:";

/// What every reader-writer lock key starts with.
pub(crate) const RW_PREFIX: &str = "redlock-rw:";

/// What every election key starts with.
pub(crate) const ELECT_PREFIX: &str = "redlock-elect:";

/// Prefixes no resource name may start with (and the restart marker).
pub(crate) const RESERVED: [&str; 6] = [
    "redlock-fence:",
    "redlock-queue:",
    "redlock-alive:",
    SLOT_PREFIX,
    RW_PREFIX,
    ELECT_PREFIX,
];

/// The election `name`'s keys: the leader's lock key, its value key and
/// its observers. (The suffixes differ, so no name's key is another's.)
pub(crate) fn elect_keys(name: &str) -> [String; 3] {
    [
        format!("{ELECT_PREFIX}{name}#l"),
        format!("{ELECT_PREFIX}{name}#v"),
        format!("{ELECT_PREFIX}{name}#o"),
    ]
}

/// The value key of the election whose lock key is `lock`.
pub(crate) fn elect_value_key(lock: &str) -> Option<String> {
    is_elect_lock(lock).then(|| format!("{}#v", &lock[..lock.len() - 2]))
}

/// Whether `key` is an election's lock key: its acquisitions are always
/// fenced (the token is the term).
pub(crate) fn is_elect_lock(key: &str) -> bool {
    key.starts_with(ELECT_PREFIX) && key.ends_with("#l")
}

/// Which side of a reader-writer lock a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Read,
    Write,
}

/// The key a reader (`Role::Read`) or the writer of the lock `name` holds
/// by: the readers' set, or the writer's key.
pub(crate) fn rw_key(name: &str, role: Role) -> String {
    match role {
        Role::Read => format!("{RW_PREFIX}{name}#r"),
        Role::Write => format!("{RW_PREFIX}{name}#w"),
    }
}

/// For a key from [`rw_key`]: its role, and the lock's three keys — the
/// writer's, the readers', the waiting writer's mark.
pub(crate) fn rw_parts(key: &str) -> Option<(Role, [String; 3])> {
    let (base, role) = key.strip_prefix(RW_PREFIX)?.rsplit_once('#')?;
    let role = match role {
        "r" => Role::Read,
        "w" => Role::Write,
        _ => return None,
    };
    let base = &key[..RW_PREFIX.len() + base.len()];
    Some((
        role,
        [
            format!("{base}#w"),
            format!("{base}#r"),
            format!("{base}#wait"),
        ],
    ))
}

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
/// (`redlock-sem:s`), so that a release of any slot wakes its waiters (and
/// a reader-writer lock's keys share `redlock-rw:l`).
pub(crate) fn gate_name(key: &str) -> &str {
    for prefix in [SLOT_PREFIX, RW_PREFIX] {
        if let Some((name, _)) = key
            .strip_prefix(prefix)
            .and_then(|rest| rest.rsplit_once('#'))
        {
            return &key[..prefix.len() + name.len()];
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_shares_the_semaphores_gate_and_nothing_else_does() {
        assert_eq!(gate_name(&slot_key("jobs", 0)), "redlock-sem:jobs");
        assert_eq!(gate_name(&slot_key("jobs", 63)), "redlock-sem:jobs");
        assert_eq!(gate_name(&slot_key("a#b", 2)), "redlock-sem:a#b");
        assert_eq!(gate_name(&rw_key("l", Role::Read)), "redlock-rw:l");
        assert_eq!(gate_name(&rw_key("l", Role::Write)), "redlock-rw:l");
        for plain in [
            "jobs",
            "jobs#1",
            "x:redlock-sem:y#1",
            "x:redlock-rw:y#r",
            "",
        ] {
            assert_eq!(gate_name(plain), plain);
        }
    }
}

#[cfg(test)]
mod elect_tests {
    use super::*;

    #[test]
    fn the_election_keys_of_two_names_never_meet() {
        let names = ["e", "e#l", "e#v", "#l", "#v", "", "e#"];
        let mut all = std::collections::HashSet::new();
        for name in names {
            let [lock, value, observers] = elect_keys(name);
            assert!(is_elect_lock(&lock), "{lock}");
            assert!(!is_elect_lock(&value), "{value}");
            assert!(!is_elect_lock(&observers), "{observers}");
            assert_eq!(gate_name(&lock), lock);
            for key in [lock, value, observers] {
                assert!(all.insert(key), "{name}");
            }
        }
    }
}

#[cfg(test)]
mod rw_tests {
    use super::*;

    #[test]
    fn the_lock_keys_of_two_names_never_meet() {
        let names = ["l", "l#r", "l#w", "l#wait", "l#", "#r", ""];
        let mut all = std::collections::HashSet::new();
        for name in names {
            let (role, keys) = rw_parts(&rw_key(name, Role::Read)).unwrap();
            assert_eq!(role, Role::Read);
            assert_eq!(rw_parts(&rw_key(name, Role::Write)).unwrap().1, keys);
            for key in keys {
                assert!(all.insert(key), "{name}");
            }
        }
        assert!(rw_parts("redlock-rw:l#wait").is_none());
        assert!(rw_parts("l#r").is_none());
    }
}
