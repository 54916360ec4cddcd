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
//! * the queue of waiters for a lock, a semaphore, a reader-writer lock or
//!   an election, on its gate node:
//!   `redlock-queue:{g}` and `redlock-alive:{g}`, where `g` is the lock's
//!   first key, `redlock-sem:s`, `redlock-rw:l` or the election's lock key
//!   (see [`Kind::gate_name`]).
//!
//! Every key is derived here from the request's [`Kind`], laid out for
//! its node ([`Layout`]); nothing parses a key name back. Resource names
//! that start with one of [`RESERVED`] are refused, so no user's lock
//! lands on these keys.

use std::borrow::Cow;
use std::sync::Arc;

use super::hash_slot;
use super::request::{Keys, Kind};

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

const FENCE_PREFIX: &str = "redlock-fence:";
const QUEUE_PREFIX: &str = "redlock-queue:";
const ALIVE_PREFIX: &str = "redlock-alive:";
const SLOT_PREFIX: &str = "redlock-sem:";
const RW_PREFIX: &str = "redlock-rw:";
const ELECT_PREFIX: &str = "redlock-elect:";

/// Prefixes no resource name may start with.
pub(crate) const RESERVED: [&str; 6] = [
    FENCE_PREFIX,
    QUEUE_PREFIX,
    ALIVE_PREFIX,
    SLOT_PREFIX,
    RW_PREFIX,
    ELECT_PREFIX,
];

/// The most permits a semaphore may have: a node reports the slots it
/// holds as one 64-bit set.
pub(crate) const MAX_PERMITS: u32 = 64;

/// Which side of a reader-writer lock a caller takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Read,
    Write,
}

impl Kind {
    /// The keys it holds by, as named above: a lock's resources; a permit's
    /// slot key; the readers' set of a reader-writer lock, or its writer's
    /// key; an election's lock key.
    pub(crate) fn lock_keys(&self) -> Keys {
        Layout::Plain.lock_keys(self)
    }

    /// The user's names it is about: a lock's resources, else the one name
    /// of the semaphore, reader-writer lock or election.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        let (keys, name): (&[Arc<str>], Option<&str>) = match self {
            Kind::Lock(keys) => (keys, None),
            Kind::Permit {
                semaphore: name, ..
            }
            | Kind::Read { lock: name }
            | Kind::Write { lock: name, .. }
            | Kind::Leadership { election: name } => (&[], Some(name)),
        };
        keys.iter().map(|k| &**k).chain(name)
    }

    /// The name whose gate node and queue of waiters it uses: a lock's
    /// first key, a semaphore's `redlock-sem:s` (every slot shares it, so
    /// that a release of any slot wakes its waiters), a reader-writer
    /// lock's `redlock-rw:l`, an election's lock key.
    pub(crate) fn gate_name(&self) -> Cow<'_, str> {
        match self {
            Kind::Lock(keys) => Cow::Borrowed(keys.first().map_or("", |k| k)),
            _ => Cow::Owned(Layout::Plain.gate(self)),
        }
    }
}

/// The key that keeps `key`'s fence value: `redlock-fence:{key}`.
#[cfg(test)]
pub(crate) fn fence_key(key: &str) -> String {
    Layout::Plain.fence(key)
}

/// Slot `slot`'s key of the semaphore `name`.
#[cfg(test)]
pub(crate) fn slot_key(name: &str, slot: u32) -> String {
    Layout::Plain.named(SLOT_PREFIX, name, &format!("#{slot}"))
}

/// The election `name`'s keys: the leader's lock key, its value key and
/// its observers.
#[cfg(test)]
pub(crate) fn elect_keys(name: &str) -> [String; 3] {
    Layout::Plain.election(name)
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

impl Layout {
    /// The keys `kind` holds by (see [`Kind::lock_keys`]), laid out. A
    /// lock's are its resources' names on every node, shared, not copied.
    pub(crate) fn lock_keys(self, kind: &Kind) -> Keys {
        let key = match kind {
            Kind::Lock(keys) => return keys.clone(),
            Kind::Permit {
                semaphore, slot, ..
            } => self.named(SLOT_PREFIX, semaphore, &format!("#{slot}")),
            Kind::Read { lock } => self.named(RW_PREFIX, lock, "#r"),
            Kind::Write { lock, .. } => self.named(RW_PREFIX, lock, "#w"),
            Kind::Leadership { election } => self.named(ELECT_PREFIX, election, "#l"),
        };
        Arc::from([Arc::from(key)])
    }

    /// The key that keeps the fence value of `key` (a key as this layout
    /// lays it out).
    pub(crate) fn fence(self, key: &str) -> String {
        self.companion(FENCE_PREFIX, key)
    }

    /// The gate node's queue keys for `kind`: arrival order, and alive
    /// times.
    pub(crate) fn queue(self, kind: &Kind) -> [String; 2] {
        let gate = self.gate(kind);
        [
            self.companion(QUEUE_PREFIX, &gate),
            self.companion(ALIVE_PREFIX, &gate),
        ]
    }

    /// The reader-writer lock `lock`'s keys: the writer's, the readers',
    /// the waiting writer's mark.
    pub(crate) fn rw(self, lock: &str) -> [String; 3] {
        ["#w", "#r", "#wait"].map(|suffix| self.named(RW_PREFIX, lock, suffix))
    }

    /// Every slot key of the semaphore `semaphore` of `permits` slots.
    pub(crate) fn slots(self, semaphore: &str, permits: u32) -> Vec<String> {
        (0..permits)
            .map(|i| self.named(SLOT_PREFIX, semaphore, &format!("#{i}")))
            .collect()
    }

    /// The election `election`'s keys: its lock key, its value key and its
    /// observers. (The suffixes differ, so no name's key is another's.)
    pub(crate) fn election(self, election: &str) -> [String; 3] {
        ["#l", "#v", "#o"].map(|suffix| self.named(ELECT_PREFIX, election, suffix))
    }

    /// The hash slot every key about the user's `name` lives in (cluster).
    pub(crate) fn slot(name: &str) -> u16 {
        hash_slot::slot(name.as_bytes())
    }

    /// Why a user's name cannot be laid out on a cluster node: one without
    /// a hash tag that contains `}`. The hash tag's text would end at it.
    pub(crate) fn problem(name: &str) -> Option<String> {
        let tagged = hash_slot::tag(name.as_bytes()).is_some();
        (!tagged && name.contains('}')).then(|| {
            format!(
                "the name {name:?} contains '}}' without a hash tag before it, so a cluster node \
                 cannot keep its keys in one hash slot; remove the '}}', or give the name a tag \
                 such as {{{}}}",
                name.replace('}', "")
            )
        })
    }

    /// The gate name (see [`Kind::gate_name`]), laid out.
    fn gate(self, kind: &Kind) -> String {
        match kind {
            Kind::Lock(keys) => keys.first().map_or_else(String::new, |k| k.to_string()),
            Kind::Permit { semaphore, .. } => self.named(SLOT_PREFIX, semaphore, ""),
            Kind::Read { lock } | Kind::Write { lock, .. } => self.named(RW_PREFIX, lock, ""),
            Kind::Leadership { election } => {
                let [lock, ..] = self.election(election);
                lock
            }
        }
    }

    /// `prefix`, the user's `name` (braced on a cluster), `suffix`.
    fn named(self, prefix: &str, name: &str, suffix: &str) -> String {
        match self {
            Layout::Plain => format!("{prefix}{name}{suffix}"),
            Layout::Cluster => format!("{prefix}{}{suffix}", braced(name)),
        }
    }

    /// A key that belongs to `owner`, a key as this layout lays it out:
    /// `prefix` and `owner` (braced on a cluster).
    fn companion(self, prefix: &str, owner: &str) -> String {
        match self {
            Layout::Plain => format!("{prefix}{owner}"),
            Layout::Cluster => format!("{prefix}{}", braced(owner)),
        }
    }
}

/// `name`'s hash part in braces, then `name` itself if it has a tag (so
/// that no two names give one text): the text keeps `name`'s hash slot.
fn braced(name: &str) -> String {
    match hash_slot::tag(name.as_bytes()) {
        Some(_) => format!(
            "{{{}}}{name}",
            String::from_utf8_lossy(hash_slot::hash_part(name.as_bytes()))
        ),
        None => format!("{{{name}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::protocol::hash_slot::slot;

    fn lock(names: &[&str]) -> Kind {
        Kind::Lock(names.iter().map(|n| Arc::from(*n)).collect())
    }

    fn permit(name: &str, slot: u32) -> Kind {
        Kind::Permit {
            semaphore: Arc::from(name),
            slot,
            permits: 3,
        }
    }

    /// One of each kind about the user's `name`.
    fn kinds(name: &str) -> [Kind; 5] {
        let name: Arc<str> = Arc::from(name);
        [
            Kind::Lock(Arc::from([name.clone()])),
            permit(&name, 2),
            Kind::Read { lock: name.clone() },
            Kind::Write {
                lock: name.clone(),
                waits: true,
            },
            Kind::Leadership { election: name },
        ]
    }

    /// Every key a request about `kind` may touch, laid out by `l`.
    fn family(kind: &Kind, l: Layout) -> Vec<String> {
        let mut all: Vec<String> = l.lock_keys(kind).iter().map(|k| k.to_string()).collect();
        all.extend(all.clone().iter().map(|k| l.fence(k)));
        all.extend(l.queue(kind));
        match kind {
            Kind::Lock(_) => {}
            Kind::Permit {
                semaphore, permits, ..
            } => all.extend(l.slots(semaphore, *permits)),
            Kind::Read { lock } | Kind::Write { lock, .. } => {
                let keys = l.rw(lock);
                all.push(l.fence(&keys[0]));
                all.extend(keys);
            }
            Kind::Leadership { election } => all.extend(l.election(election)),
        }
        all
    }

    #[test]
    fn the_keys_are_the_names_every_earlier_release_used() {
        let plain = |kind: &Kind| family(kind, Layout::Plain);
        assert_eq!(
            plain(&lock(&["orders:42"])),
            [
                "orders:42",
                "redlock-fence:orders:42",
                "redlock-queue:orders:42",
                "redlock-alive:orders:42",
            ]
        );
        assert_eq!(
            plain(&permit("jobs", 0))[..4],
            [
                "redlock-sem:jobs#0",
                "redlock-fence:redlock-sem:jobs#0",
                "redlock-queue:redlock-sem:jobs",
                "redlock-alive:redlock-sem:jobs",
            ]
        );
        assert_eq!(
            Layout::Plain.rw("l"),
            ["redlock-rw:l#w", "redlock-rw:l#r", "redlock-rw:l#wait"]
        );
        assert_eq!(
            elect_keys("e"),
            [
                "redlock-elect:e#l",
                "redlock-elect:e#v",
                "redlock-elect:e#o"
            ]
        );
        assert_eq!(
            Layout::Cluster.fence("orders:42"),
            "redlock-fence:{orders:42}"
        );
        assert_eq!(
            Layout::Cluster.rw("l"),
            [
                "redlock-rw:{l}#w",
                "redlock-rw:{l}#r",
                "redlock-rw:{l}#wait"
            ]
        );
        assert_eq!(
            Layout::Cluster.election("{t}e"),
            [
                "redlock-elect:{t}{t}e#l",
                "redlock-elect:{t}{t}e#v",
                "redlock-elect:{t}{t}e#o"
            ]
        );
        let cluster = |kind: &Kind| family(kind, Layout::Cluster);
        assert_eq!(
            cluster(&lock(&["{user1}:a"]))[..3],
            [
                "{user1}:a",
                "redlock-fence:{user1}{user1}:a",
                "redlock-queue:{user1}{user1}:a",
            ]
        );
        assert_eq!(
            cluster(&permit("jobs", 0))[..3],
            [
                "redlock-sem:{jobs}#0",
                "redlock-fence:{jobs}redlock-sem:{jobs}#0",
                "redlock-queue:{jobs}redlock-sem:{jobs}",
            ]
        );
        assert_eq!(
            Layout::Cluster.queue(&Kind::Leadership {
                election: Arc::from("e")
            })[0],
            "redlock-queue:{e}redlock-elect:{e}#l"
        );
    }

    #[test]
    fn every_slot_shares_the_semaphores_gate_and_each_kind_has_its_own() {
        assert_eq!(permit("jobs", 0).gate_name(), "redlock-sem:jobs");
        assert_eq!(permit("jobs", 2).gate_name(), "redlock-sem:jobs");
        assert_eq!(permit("a#b", 1).gate_name(), "redlock-sem:a#b");
        let [lock_kind, _, read, write, leader] = kinds("l");
        assert_eq!(read.gate_name(), "redlock-rw:l");
        assert_eq!(write.gate_name(), "redlock-rw:l");
        assert_eq!(leader.gate_name(), "redlock-elect:l#l");
        assert_eq!(lock_kind.gate_name(), "l");
        assert_eq!(lock(&["a", "b"]).gate_name(), "a");
    }

    #[test]
    fn no_key_of_one_name_is_another_names_key() {
        let names = [
            "e",
            "e#l",
            "e#v",
            "#l",
            "l#r",
            "l#w",
            "l#wait",
            "",
            "e#",
            "x#1",
            "k",
            "{k}",
            "{k}{k}",
            "a{k}",
            "{k}#0",
            "redlock-semx",
        ];
        for l in [Layout::Plain, Layout::Cluster] {
            let mut all = std::collections::HashMap::new();
            for name in names {
                for kind in kinds(name) {
                    for key in family(&kind, l) {
                        if let Some(other) = all.insert(key.clone(), name) {
                            assert_eq!(other, name, "{l:?}: {key}");
                        }
                    }
                }
            }
        }
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
            for kind in kinds(name) {
                assert_eq!(kind.names().collect::<Vec<_>>(), [name]);
                for key in family(&kind, Layout::Cluster) {
                    assert_eq!(slot(key.as_bytes()), slot(name.as_bytes()), "{name}: {key}");
                }
            }
            assert_eq!(Layout::problem(name), None, "{name}");
        }
    }

    #[test]
    fn a_name_whose_braces_would_move_its_slot_is_refused() {
        for name in ["a}b", "}", "x{}y", "{}", "a{}b{c}"] {
            let problem = Layout::problem(name).expect(name);
            assert!(problem.contains("hash tag"), "{problem}");
        }
    }
}
