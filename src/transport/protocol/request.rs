//! What the client asks of every node: one operation on one or more keys,
//! all or nothing.

use std::sync::Arc;
use std::time::Instant;

use crate::algorithm::Decides;
use crate::settings::NodeTimeout;

/// The keys of one lock: one, or several locked all at once.
pub(crate) type Keys = Arc<[Arc<str>]>;

/// What a call asks for: the kind of hold, whose, and the kind's own data.
/// Every key a request touches is derived from it (`kind/`, `keys.rs`);
/// nothing reads a kind back from a key's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock on these resources: one, or several at once.
    Lock(Keys),
    /// Slot `slot` of the semaphore `semaphore`, which has `permits`
    /// slots: every node but the gate also reports which of them it holds
    /// (see `Vote::slots`).
    Permit {
        semaphore: Arc<str>,
        slot: u32,
        permits: u32,
    },
    /// A read hold of the reader-writer lock `lock`.
    Read { lock: Arc<str> },
    /// The write hold of the reader-writer lock `lock`. `waits`: the
    /// caller tries again if readers refuse it, so it marks that it waits
    /// (new readers are turned away); a `try_write` leaves no mark.
    Write { lock: Arc<str>, waits: bool },
    /// The leadership of the election `election`: its lock key, always
    /// fenced (the token is the term), and its value and observers.
    Leadership { election: Arc<str> },
}

/// What an [`Op::Proclaim`] sets: the leader's value. Its `Debug` shows
/// only its length.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Value(pub(crate) Arc<str>);

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

/// What to do on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl` (several keys: all or none, in one script).
    Acquire { ttl_ms: u64 },
    /// Compare-and-pexpire (several keys: only if every key is ours).
    Extend { ttl_ms: u64 },
    /// Compare-and-delete (several keys: yes only if every key was ours).
    /// On the gate node it also wakes the next queued waiter. `held`: the
    /// caller held the resource (a lease's release), not a failed round's
    /// clean-up; after a lease's release the gate node wakes the next
    /// waiter whatever it holds, after a clean-up only where the resource
    /// is free there (see `codec.rs`).
    Release { held: bool },
    /// Leave the queue of waiters (gate node only), waking the next waiter
    /// if the resource is free.
    Leave,
    /// `SET NX PX` on every key (all or none, one script) only if the
    /// `proposed` fencing token is larger than every fence value stored for
    /// the keys, storing it with the grant (kept for `idle_ms`); a node
    /// whose fence value is not below it refuses and reports that value.
    AcquireFenced {
        ttl_ms: u64,
        proposed: u64,
        idle_ms: u64,
    },
    /// An election's leader sets its `value`, with its `term` and the
    /// proclamation's `seq`, on the value key while the lock key holds its
    /// token; a later `seq` of the same leader already there is kept (a
    /// late proclamation changes nothing).
    Proclaim { term: u64, seq: u64, value: Value },
    /// Reads an election's leader: the value proclaimed by whoever holds
    /// the lock key now, from the value key.
    ReadLeader,
    /// A resigning leader deletes the value key while the lock key holds
    /// its token (its lock is released after, as any).
    Resign,
    /// Reads what holds the kind's keys, for an operator: a lock's key, a
    /// semaphore's slots, a reader-writer lock's writer and readers.
    /// Writes nothing.
    Inspect,
    /// An operator's release of a lock's holder, whoever it is: deletes
    /// the key where it holds `holder`'s token (named as an inspection
    /// names holders), and nothing else; the fence value stays, so fencing
    /// tokens still only grow. A yes: the holder is not on that node any
    /// more.
    ForceRelease { holder: u64 },
}

impl Op {
    /// Undoes what a hold or a wait left on the nodes: always queued, even
    /// on a full queue (see `Transport`'s `send`).
    pub(crate) fn cleans_up(&self) -> bool {
        matches!(
            self,
            Op::Release { .. } | Op::Leave | Op::Resign | Op::ForceRelease { .. }
        )
    }

    /// One of an election's own commands (not its lock's).
    pub(crate) fn elects(&self) -> bool {
        matches!(self, Op::Proclaim { .. } | Op::ReadLeader | Op::Resign)
    }

    /// One of an operator's requests (see `inspect.rs`).
    pub(crate) fn inspects(&self) -> bool {
        matches!(self, Op::Inspect | Op::ForceRelease { .. })
    }

    /// The TTL it sets, in milliseconds, if it sets one.
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        match self {
            Op::Acquire { ttl_ms } | Op::Extend { ttl_ms } | Op::AcquireFenced { ttl_ms, .. } => {
                Some(*ttl_ms)
            }
            _ => None,
        }
    }

    /// What its caller makes of a round's outcome, and so what the round
    /// waits for.
    pub(crate) fn decides(&self) -> Decides {
        match self {
            Op::Acquire { .. } => Decides::Acquisition { fenced: false },
            Op::AcquireFenced { .. } => Decides::Acquisition { fenced: true },
            Op::Inspect => Decides::Holdings,
            _ => Decides::Verdict,
        }
    }
}

/// One operation, shared by the jobs sent to every node.
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) op: Op,
    /// What it is about.
    pub(crate) kind: Kind,
    /// The keys it holds by, derived from `kind` when built (see
    /// [`Kind::lock_keys`]).
    keys: Keys,
    pub(crate) token: Arc<str>,
    /// The per-node socket timeout for this operation, and its origin.
    pub(crate) timeout: NodeTimeout,
    /// After this instant the job is pointless and a worker skips it.
    pub(crate) expires: Instant,
    /// Takes part in the kind's queue of waiters, as this member (`""`:
    /// not waiting). The transport sends it so to the gate node only; the
    /// other nodes get the plain command (see `codec.rs`). How a request
    /// is delivered, not what it asks: an acquisition, a release, a leave
    /// and an election read may carry one.
    pub(crate) queue: Option<Arc<str>>,
    /// A caller waits for its answer (not a request sent and forgotten: a
    /// failed round's clean-up, an abandoned lease's release, a leave).
    /// On a cluster, only such a request is sent again after `TRYAGAIN`
    /// for as long as its caller waits (see `cluster_link.rs`): one no
    /// caller waits for must not hold up the others' answers.
    pub(crate) awaited: bool,
}

impl Request {
    /// `op` on `kind`, awaited, in no queue.
    pub(crate) fn new(
        op: Op,
        kind: Kind,
        token: Arc<str>,
        timeout: NodeTimeout,
        expires: Instant,
    ) -> Self {
        Request {
            op,
            keys: kind.lock_keys(),
            kind,
            token,
            timeout,
            expires,
            queue: None,
            awaited: true,
        }
    }

    /// A lock on `keys` with the token `tok`, as unit tests write it.
    #[cfg(test)]
    pub(crate) fn lock(op: Op, keys: &[&str], timeout: NodeTimeout, expires: Instant) -> Self {
        let keys = Kind::Lock(keys.iter().map(|k| Arc::from(*k)).collect());
        Request::new(op, keys, Arc::from("tok"), timeout, expires)
    }

    /// The keys it holds by: a lock's resources, else the one key its kind
    /// holds by (see [`Kind::lock_keys`]).
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The part of a lock on several keys that holds these of them (a
    /// cluster runs each hash slot's keys on their own).
    pub(crate) fn part(&self, keys: Keys) -> Self {
        Request {
            kind: Kind::Lock(keys.clone()),
            keys,
            ..self.clone()
        }
    }
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("kind", &self.kind)
            .field("token", &"<redacted>")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}
