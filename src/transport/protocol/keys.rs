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

/// How a node lays the client's keys out: as named above (a standalone
/// master, a Sentinel service's), or so that every key of one resource
/// lives in one Redis Cluster hash slot.
///
/// On a cluster node a lock key stays the resource's name, so other
/// Redlock clients still exclude and are excluded. Every key the client
/// derives from a name keeps that name's hash slot: the name's hash part
/// (its `{tag}`, or the whole name) goes in braces first, followed by the
/// name itself when it had a tag of its own. So resource `orders:42`
/// keeps its fence value in `redlock-fence:{orders:42}`, resource
/// `{user1}:a` in `redlock-fence:{user1}{user1}:a`, and slot 0 of the
/// semaphore `jobs` is `redlock-sem:{jobs}#0`. A name without a tag that
/// contains `}` cannot be put in braces ([`Layout::problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The names above, unchanged.
    Plain,
    /// Every resource's keys in the slot of its name (see above).
    Cluster,
}

/// The prefixes of the keys that belong to one key (its fence value) or to
/// one gate name (its queue of waiters).
const COMPANIONS: [&str; 3] = ["redlock-fence:", "redlock-queue:", "redlock-alive:"];

/// The prefixes of keys that hold a name and then `#` and a suffix.
const STRUCTURED: [&str; 3] = [SLOT_PREFIX, RW_PREFIX, ELECT_PREFIX];

impl Layout {
    /// The key this node uses for `key`, one of the names above.
    pub(crate) fn key<'k>(self, key: &'k str) -> std::borrow::Cow<'k, str> {
        use std::borrow::Cow;
        if self == Layout::Plain {
            return Cow::Borrowed(key);
        }
        for prefix in COMPANIONS {
            if let Some(owner) = key.strip_prefix(prefix) {
                let owner = match prefix {
                    "redlock-fence:" => self.key(owner).into_owned(),
                    _ => gate_key(owner),
                };
                return Cow::Owned(format!("{prefix}{}", braced(&owner)));
            }
        }
        for prefix in STRUCTURED {
            if let Some((name, suffix)) = key
                .strip_prefix(prefix)
                .and_then(|rest| rest.rsplit_once('#'))
            {
                return Cow::Owned(format!("{prefix}{}#{suffix}", braced(name)));
            }
        }
        Cow::Borrowed(key)
    }

    /// The hash slot every key of `key`'s request lives in (cluster), the
    /// slot of its name.
    pub(crate) fn slot(key: &str) -> u16 {
        super::hash_slot::slot(owner_name(key).as_bytes())
    }

    /// Why a resource name cannot be laid out on a cluster node: one
    /// without a hash tag that contains `}`. The hash tag's text would end
    /// at it.
    pub(crate) fn problem(key: &str) -> Option<String> {
        let name = owner_name(key);
        let tagged = super::hash_slot::tag(name.as_bytes()).is_some();
        (!tagged && name.contains('}')).then(|| {
            format!(
                "the name {name:?} contains '}}' without a hash tag before it, so a cluster node \
                 cannot keep its keys in one hash slot; remove the '}}', or give the name a tag \
                 such as {{{}}}",
                name.replace('}', "")
            )
        })
    }
}

/// The user's name inside one of a request's keys: a lock key's own, a
/// semaphore's, a reader-writer lock's or an election's.
fn owner_name(key: &str) -> &str {
    for prefix in STRUCTURED {
        if let Some((name, _)) = key
            .strip_prefix(prefix)
            .and_then(|rest| rest.rsplit_once('#'))
        {
            return name;
        }
    }
    key
}

/// A gate name's key on a cluster node (see [`gate_name`]): a semaphore's
/// or a reader-writer lock's name braced, an election's lock key laid
/// out, a lock key as it is.
fn gate_key(gate: &str) -> String {
    for prefix in [SLOT_PREFIX, RW_PREFIX] {
        if let Some(name) = gate.strip_prefix(prefix) {
            return format!("{prefix}{}", braced(name));
        }
    }
    Layout::Cluster.key(gate).into_owned()
}

/// `name`'s hash part in braces, then `name` itself if it has a tag (so
/// that no two names give one text): the text keeps `name`'s hash slot.
fn braced(name: &str) -> String {
    match super::hash_slot::tag(name.as_bytes()) {
        Some(_) => format!(
            "{{{}}}{name}",
            String::from_utf8_lossy(super::hash_slot::hash_part(name.as_bytes()))
        ),
        None => format!("{{{name}}}"),
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

#[cfg(test)]
mod layout_tests {
    use super::*;
    use crate::transport::protocol::hash_slot::slot;

    /// Every key one request's script touches, for the request key `key`.
    fn family(key: &str) -> Vec<String> {
        let mut all = vec![key.to_owned(), fence_key(key)];
        all.extend(queue_keys(key));
        if let Some((_, keys)) = rw_parts(key) {
            all.extend(keys.iter().map(|k| fence_key(k)));
            all.extend(keys);
        }
        if key.starts_with(SLOT_PREFIX) {
            all.extend(slot_siblings(key, 3));
        }
        if let Some(value) = elect_value_key(key) {
            all.push(value);
        }
        all
    }

    #[test]
    fn a_cluster_node_keeps_every_key_of_a_resource_in_its_names_slot() {
        let names = [
            "orders:42",
            "{user1}:a",
            "a{b",
            "a{b}{}",
            "x#1",
            "{",
            "é{ü}",
        ];
        for name in names {
            let [elect, ..] = elect_keys(name);
            for key in [
                name.to_owned(),
                slot_key(name, 2),
                rw_key(name, Role::Read),
                rw_key(name, Role::Write),
                elect,
            ] {
                for logical in family(&key) {
                    let laid = Layout::Cluster.key(&logical);
                    assert_eq!(
                        slot(laid.as_bytes()),
                        slot(name.as_bytes()),
                        "{name}: {logical} as {laid}"
                    );
                    assert_eq!(Layout::slot(&key), slot(name.as_bytes()), "{key}");
                    assert_eq!(Layout::Plain.key(&logical), logical);
                }
            }
            assert_eq!(Layout::problem(name), None, "{name}");
        }
        assert_eq!(Layout::Cluster.key("orders:42"), "orders:42");
        assert_eq!(
            Layout::Cluster.key(&fence_key("orders:42")),
            "redlock-fence:{orders:42}"
        );
        assert_eq!(
            Layout::Cluster.key(&fence_key("{user1}:a")),
            "redlock-fence:{user1}{user1}:a"
        );
        assert_eq!(
            Layout::Cluster.key(&slot_key("jobs", 0)),
            "redlock-sem:{jobs}#0"
        );
        assert_eq!(
            Layout::Cluster.key(&queue_keys(&slot_key("jobs", 0))[0]),
            "redlock-queue:{jobs}redlock-sem:{jobs}"
        );
    }

    #[test]
    fn two_names_never_share_a_cluster_key() {
        let names = ["k", "{k}", "{k}{k}", "a{k}", "k#0", "{k}#0", "redlock-semx"];
        let mut all = std::collections::HashMap::new();
        for name in names {
            let [elect, ..] = elect_keys(name);
            for key in [
                name.to_owned(),
                slot_key(name, 0),
                rw_key(name, Role::Read),
                elect,
            ] {
                for logical in family(&key) {
                    let laid = Layout::Cluster.key(&logical).into_owned();
                    if let Some(other) = all.insert(laid.clone(), logical.clone()) {
                        assert_eq!(other, logical, "{laid}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_name_whose_braces_would_move_its_slot_is_refused() {
        for name in ["a}b", "}", "x{}y", "{}", "a{}b{c}"] {
            let problem = Layout::problem(name).expect(name);
            assert!(problem.contains("hash tag"), "{problem}");
            assert!(Layout::problem(&slot_key(name, 1)).is_some(), "{name}");
        }
    }
}
