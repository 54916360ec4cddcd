//! The kinds of hold, one room each: a lock ([`lock`]), a semaphore's
//! permit ([`permit`]), a reader-writer lock's sides ([`rw`]) and an
//! election's leadership ([`leadership`]). A room keeps its kind's keys,
//! its commands (plain, and as the gate node's copy) and the shape of its
//! replies; this file dispatches to the rooms, one `match` each, and says
//! what the core asks of a kind (whether it queues, is fenced, may be
//! called). Adding a kind is a variant of [`Kind`], a room beside these,
//! its scripts, and the arms the compiler then asks for here.
//!
//! Every key is derived from the request's [`Kind`], laid out for its node
//! ([`Layout`]); nothing parses a key name back.

pub(crate) mod leadership;
mod lock;
mod permit;
mod rw;

use std::borrow::Cow;
use std::sync::Arc;

use super::keys::{ALIVE_PREFIX, FENCE_PREFIX, Layout, QUEUE_PREFIX};
use super::request::{Keys, Kind, Op, Request};
use super::scripts::Sent;

#[cfg(test)]
pub(crate) use leadership::elect_keys;
pub(crate) use permit::MAX_PERMITS;
#[cfg(test)]
pub(crate) use permit::slot_key;
pub(super) use permit::slots_held;
pub(crate) use rw::Role;

/// Prefixes no resource name may start with.
pub(crate) const RESERVED: [&str; 6] = [
    FENCE_PREFIX,
    QUEUE_PREFIX,
    ALIVE_PREFIX,
    permit::PREFIX,
    rw::PREFIX,
    leadership::PREFIX,
];

impl Kind {
    /// The keys it holds by: a lock's resources; a permit's slot key; the
    /// readers' set of a reader-writer lock, or its writer's key; an
    /// election's lock key.
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
    /// first key, a semaphore's `redlock-sem:s` (every slot shares it), a
    /// reader-writer lock's `redlock-rw:l`, an election's lock key.
    pub(crate) fn gate_name(&self) -> Cow<'_, str> {
        match self {
            Kind::Lock(keys) => Cow::Borrowed(keys.first().map_or("", |k| k)),
            _ => Cow::Owned(Layout::Plain.gate(self)),
        }
    }

    /// Whether its waiters may queue on the gate node (a lock on several
    /// keys takes part in no queue).
    pub(crate) fn queues(&self) -> bool {
        match self {
            Kind::Lock(keys) => keys.len() == 1,
            Kind::Permit { .. }
            | Kind::Read { .. }
            | Kind::Write { .. }
            | Kind::Leadership { .. } => true,
        }
    }

    /// Whether a waiter comes back at least every queue refresh, in a queue
    /// or not: a reader-writer lock's, whose waiting writer renews the mark
    /// that turns new readers away (its readers are paced the same).
    pub(crate) fn renews(&self) -> bool {
        matches!(self, Kind::Read { .. } | Kind::Write { .. })
    }

    /// Whether it is a side of a reader-writer lock, whose readers share
    /// it: an inspection reports the readers apart from the writer.
    pub(crate) fn reader_writer(&self) -> bool {
        matches!(self, Kind::Read { .. } | Kind::Write { .. })
    }

    /// Whether the gate node may call its waiter in (grant it on the
    /// waiter's behalf): a lock's and an election's.
    pub(crate) fn may_be_called(&self) -> bool {
        matches!(self, Kind::Lock(_) | Kind::Leadership { .. })
    }

    /// Whether its acquisition carries a fencing token, on a client that
    /// fences (`fencing`): readers exclude nobody but writers, so nothing
    /// to fence; an election's lock is always fenced (its token is the
    /// term).
    pub(crate) fn fenced(&self, fencing: bool) -> bool {
        match self {
            Kind::Read { .. } => false,
            Kind::Leadership { .. } => true,
            Kind::Lock(_) | Kind::Permit { .. } | Kind::Write { .. } => fencing,
        }
    }

    /// Whether a hold of `held` keeps this one out: one of the same
    /// resources, a slot of the same semaphore, the same leadership, or the
    /// same reader-writer lock (a read waits for a writer only; a write for
    /// both).
    pub(crate) fn waits_for(&self, held: &Kind) -> bool {
        match (held, self) {
            (Kind::Lock(held), Kind::Lock(asked)) => asked.iter().any(|key| held.contains(key)),
            (Kind::Read { .. }, Kind::Read { .. }) => false,
            _ => held.gate_name() == self.gate_name(),
        }
    }
}

impl Layout {
    /// The keys `kind` holds by (see [`Kind::lock_keys`]), laid out. A
    /// lock's are its resources' names on every node, shared, not copied.
    pub(crate) fn lock_keys(self, kind: &Kind) -> Keys {
        let key = match kind {
            Kind::Lock(keys) => return keys.clone(),
            Kind::Permit {
                semaphore, slot, ..
            } => permit::slot(self, semaphore, *slot),
            Kind::Read { lock } => rw::lock_key(self, lock, Role::Read),
            Kind::Write { lock, .. } => rw::lock_key(self, lock, Role::Write),
            Kind::Leadership { election } => leadership::lock_key(self, election),
        };
        Arc::from([Arc::from(key)])
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

    /// The gate name (see [`Kind::gate_name`]), laid out.
    fn gate(self, kind: &Kind) -> String {
        match kind {
            Kind::Lock(keys) => keys.first().map_or_else(String::new, |k| k.to_string()),
            Kind::Permit { semaphore, .. } => permit::gate(self, semaphore),
            Kind::Read { lock } | Kind::Write { lock, .. } => rw::gate(self, lock),
            Kind::Leadership { election } => leadership::lock_key(self, election),
        }
    }
}

/// Adds `req`'s plain command (on every node but a queue's gate node) to
/// `cmd`.
pub(super) fn encode_plain(req: &Request, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
    match &req.kind {
        Kind::Read { lock } => rw::encode_read(req, l, lock, sent, cmd),
        Kind::Write { lock, waits } => rw::encode_write(req, l, lock, *waits, sent, cmd),
        Kind::Permit {
            semaphore,
            slot,
            permits,
        } => permit::encode(req, l, (semaphore, *slot, *permits), sent, cmd),
        Kind::Lock(_) | Kind::Leadership { .. } => {
            lock::encode(req, &l.lock_keys(&req.kind), l, sent, cmd);
        }
    }
}

/// Adds the gate node's copy of `req`, for the waiter `member` (`""`: not
/// waiting), to `cmd`: an acquisition that may be granted only in turn, a
/// release that wakes the next waiter, a leave (see
/// `scripts/lib_queue.lua`).
pub(super) fn encode_gate(
    req: &Request,
    l: Layout,
    member: &str,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let acquires = matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
    let gate = lock::GateKeys {
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
        (_, Op::Leave) => lock::leave(&watched(&req.kind, l, &gate), &gate, sent, cmd),
        (Kind::Read { lock }, _) if acquires => {
            rw::gate_acquire(req, l, (lock, None), &gate, sent, cmd);
        }
        (Kind::Write { lock, waits }, _) if acquires => {
            rw::gate_acquire(req, l, (lock, Some(*waits)), &gate, sent, cmd);
        }
        (Kind::Read { lock }, Op::Release { held }) => {
            rw::gate_read_release(req, l, lock, (&gate, *held), sent, cmd);
        }
        (_, Op::Acquire { ttl_ms }) => {
            lock::gate_acquire(req, &l.lock_keys(&req.kind), (&gate, *ttl_ms), sent, cmd);
        }
        (_, Op::AcquireFenced { .. }) => {
            lock::encode_fenced(req, &l.lock_keys(&req.kind), l, Some(&gate), sent, cmd);
        }
        (_, Op::Release { held }) => {
            lock::gate_release(req, &l.lock_keys(&req.kind), (&gate, *held), sent, cmd);
        }
        // Never a gate node's copy (see `codec::gate_member`): nothing to
        // queue for, so the plain command.
        (
            _,
            Op::Extend { .. }
            | Op::Proclaim { .. }
            | Op::ReadLeader
            | Op::Resign
            | Op::Inspect
            | Op::ForceRelease { .. },
        ) => encode_plain(req, l, sent, cmd),
    }
}

/// What lets the next waiter in once free, which a leave watches: a
/// semaphore's slots, a reader-writer lock's writer key, else the (first)
/// lock key.
fn watched(kind: &Kind, l: Layout, gate: &lock::GateKeys<'_>) -> Vec<String> {
    match kind {
        Kind::Permit { .. } => gate.slots.clone(),
        Kind::Read { lock } | Kind::Write { lock, .. } => {
            vec![rw::lock_key(l, lock, Role::Write)]
        }
        Kind::Lock(_) | Kind::Leadership { .. } => l
            .lock_keys(kind)
            .iter()
            .take(1)
            .map(|k| k.to_string())
            .collect(),
    }
}

/// What an inspection of `kind` reads: the keys a holder holds one each,
/// and the readers' set, if any.
pub(super) fn inspected(kind: &Kind, l: Layout) -> (Vec<String>, Option<String>) {
    match kind {
        Kind::Permit {
            semaphore, permits, ..
        } => (l.slots(semaphore, *permits), None),
        Kind::Read { lock } | Kind::Write { lock, .. } => (
            vec![rw::lock_key(l, lock, Role::Write)],
            Some(rw::lock_key(l, lock, Role::Read)),
        ),
        Kind::Lock(_) | Kind::Leadership { .. } => (
            l.lock_keys(kind).iter().map(|k| k.to_string()).collect(),
            None,
        ),
    }
}

/// How a node's reply to `req` reads: whether it also reports the slots
/// the node holds (`{answer, held}`), and whether a script sent it (else
/// `SET … NX GET`).
pub(super) fn reply_shape(req: &Request) -> (bool, bool) {
    match &req.kind {
        Kind::Permit { .. } => (permit::reports(req), true),
        Kind::Read { .. } | Kind::Write { .. } => (false, true),
        Kind::Lock(keys) => (false, keys.len() > 1 || req.queue.is_some()),
        Kind::Leadership { .. } => (false, req.queue.is_some()),
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

    /// What the core asks of each kind, as a table: a change of policy
    /// shows here, kind by kind.
    #[test]
    fn each_kind_answers_the_cores_questions_as_its_table_says() {
        let [one, slot, read, write, leader] = kinds("n");
        let two = lock(&["a", "b"]);
        // (kind, queues, renews, may be called, fenced on a fencing client,
        // fenced on one that does not fence, a reader-writer lock's side)
        let table = [
            (&one, true, false, true, true, false, false),
            (&two, false, false, true, true, false, false),
            (&slot, true, false, false, true, false, false),
            (&read, true, true, false, false, false, true),
            (&write, true, true, false, true, false, true),
            (&leader, true, false, true, true, true, false),
        ];
        for (kind, queues, renews, called, fenced, always, rw) in table {
            assert_eq!(kind.queues(), queues, "{kind:?} queues");
            assert_eq!(kind.renews(), renews, "{kind:?} renews");
            assert_eq!(kind.may_be_called(), called, "{kind:?} may be called");
            assert_eq!(kind.fenced(true), fenced, "{kind:?} fenced");
            assert_eq!(kind.fenced(false), always, "{kind:?} fenced anyway");
            assert_eq!(kind.reader_writer(), rw, "{kind:?} reader-writer");
        }
    }

    /// Which hold of this client keeps an asked one out: the same
    /// resources (any of several), any slot of the same semaphore, the same
    /// leadership; of a reader-writer lock, a write keeps out both sides
    /// and a read only a write.
    #[test]
    fn a_hold_keeps_out_what_shares_its_resource_and_readers_share() {
        let [one, slot, read, write, leader] = kinds("n");
        let waits = |asked: &Kind, held: &Kind| asked.waits_for(held);
        assert!(waits(&one, &one));
        assert!(waits(&lock(&["x", "n"]), &one), "one of several");
        assert!(waits(&one, &lock(&["n", "x"])));
        assert!(!waits(&lock(&["x"]), &one));
        assert!(waits(&permit("n", 1), &slot), "another slot of it");
        assert!(!waits(&permit("m", 2), &slot));
        assert!(waits(&leader, &leader));
        assert!(!waits(&read, &read), "readers share");
        assert!(waits(&write, &read));
        assert!(waits(&read, &write));
        assert!(waits(&write, &write));
        // A name is a different thing per kind: none keeps another out.
        for (i, asked) in [&one, &slot, &read, &leader].into_iter().enumerate() {
            for (j, held) in [&one, &slot, &read, &leader].into_iter().enumerate() {
                assert_eq!(waits(asked, held), i == j && i != 2, "{asked:?} / {held:?}");
            }
        }
    }

    /// How a reply to an acquisition reads, per kind and copy, and that it
    /// matches what was sent: a slot's acquisition off the gate node reports
    /// the slots held; a plain lock on one key, not queued, is `SET … NX
    /// GET`, everything else a script. (An election's acquisition is always
    /// fenced, a script whose reply reads the same whatever the shape.)
    #[test]
    fn each_kinds_reply_reads_as_its_command_was_sent() {
        let [one, slot, read, write, _] = kinds("n");
        let two = lock(&["a", "b"]);
        let request = |kind: &Kind, queued: bool| {
            let timeout = crate::settings::NodeTimeout::fixed(std::time::Duration::from_millis(5));
            let now = std::time::Instant::now();
            let mut req = Request::new(
                Op::Acquire { ttl_ms: 1 },
                kind.clone(),
                Arc::from("t"),
                timeout,
                now,
            );
            req.queue = queued.then(|| Arc::from("m"));
            req
        };
        // The command's name, as encoded: `SET`, `EVAL` or `EVALSHA`.
        let sent = |req: &Request| {
            let mut out = Vec::new();
            let mut sent = super::super::scripts::Sent::none();
            super::super::codec::encode(req, Layout::Plain, &mut sent, &mut out);
            let text = String::from_utf8_lossy(&out).into_owned();
            text.split("\r\n").nth(2).unwrap_or_default().to_owned()
        };
        let table = [
            (&one, false, (false, false)),
            (&one, true, (false, true)),
            (&two, false, (false, true)),
            (&slot, false, (true, true)),
            (&slot, true, (false, true)),
            (&read, false, (false, true)),
            (&read, true, (false, true)),
            (&write, false, (false, true)),
            (&write, true, (false, true)),
        ];
        for (kind, queued, shape) in table {
            let req = request(kind, queued);
            assert_eq!(reply_shape(&req), shape, "{kind:?} queued {queued}");
            let name = sent(&req);
            assert_eq!(
                name != "SET",
                shape.1,
                "{kind:?} queued {queued} sends {name}"
            );
            assert!(["SET", "EVAL"].contains(&name.as_str()), "{name}");
        }
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
}
