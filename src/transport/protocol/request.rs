//! What the client asks of every node: one operation on one or more keys,
//! all or nothing.

use std::sync::Arc;
use std::time::Instant;

use crate::algorithm::Decides;
use crate::settings::NodeTimeout;

/// The keys of one lock: one, or several locked all at once.
pub(crate) type Keys = Arc<[Arc<str>]>;

/// What to do on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl` (several keys: all or none, in one script).
    Acquire { ttl_ms: u64 },
    /// Compare-and-pexpire (several keys: only if every key is ours).
    Extend { ttl_ms: u64 },
    /// Compare-and-delete (several keys: yes only if every key was ours).
    /// On the gate node it also wakes the next queued waiter.
    Release,
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
    /// An election's leader sets its value (the request's `value`), with
    /// its `term` and the proclamation's `seq`, on the value key (second)
    /// while the lock key (first) holds its token; a later `seq` of the
    /// same leader already there is kept (a late proclamation changes
    /// nothing).
    Proclaim { term: u64, seq: u64 },
    /// Reads an election's leader: the value proclaimed by whoever holds
    /// the lock key (first) now, from the value key (second).
    ReadLeader,
    /// A resigning leader deletes the value key (second) while the lock
    /// key (first) holds its token (its lock is released after, as any).
    Resign,
}

impl Op {
    /// Undoes what a hold or a wait left on the nodes: always queued, even
    /// on a full queue (see `Transport`'s `send`).
    pub(crate) fn cleans_up(self) -> bool {
        matches!(self, Op::Release | Op::Leave | Op::Resign)
    }

    /// The TTL it sets, in milliseconds, if it sets one.
    pub(crate) fn ttl_ms(self) -> Option<u64> {
        match self {
            Op::Acquire { ttl_ms } | Op::Extend { ttl_ms } | Op::AcquireFenced { ttl_ms, .. } => {
                Some(ttl_ms)
            }
            _ => None,
        }
    }

    /// What its caller makes of a round's outcome, and so what the round
    /// waits for.
    pub(crate) fn decides(self) -> Decides {
        match self {
            Op::Acquire { .. } => Decides::Acquisition { fenced: false },
            Op::AcquireFenced { .. } => Decides::Acquisition { fenced: true },
            _ => Decides::Verdict,
        }
    }
}

/// One operation, shared by the jobs sent to every node.
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) op: Op,
    /// The keys, at least one; a lock on several is atomic on each node.
    pub(crate) keys: Keys,
    pub(crate) token: Arc<str>,
    /// The per-node socket timeout for this operation, and its origin.
    pub(crate) timeout: NodeTimeout,
    /// After this instant the job is pointless and a worker skips it.
    pub(crate) expires: Instant,
    /// Takes part in the first key's queue of waiters, as this member
    /// (`""`: not waiting). The transport sends it so to the gate node
    /// only; the other nodes get the plain command (see `codec.rs`).
    pub(crate) queue: Option<Arc<str>>,
    /// A semaphore slot's acquisition (the one key is a slot key): every
    /// node but the gate also reports which of the semaphore's this many
    /// slots it holds (see `Vote::slots`).
    pub(crate) report: Option<u32>,
    /// What an [`Op::Proclaim`] sets.
    pub(crate) value: Option<Arc<str>>,
    /// The caller tries again if refused: a writer that readers refuse
    /// marks that it waits (new readers are turned away). A `try_write`
    /// does not wait, so it leaves no mark.
    pub(crate) waits: bool,
    /// For a release: the caller held the resource (a lease's release),
    /// not a failed round's clean-up. After a lease's release the gate
    /// node wakes the next waiter whatever it holds; after a clean-up only
    /// where the resource is free there (see `codec.rs`).
    pub(crate) held: bool,
    /// A caller waits for its answer (not a request sent and forgotten: a
    /// failed round's clean-up, an abandoned lease's release, a leave).
    /// On a cluster, only such a request is sent again after `TRYAGAIN`
    /// for as long as its caller waits (see `cluster_link.rs`): one no
    /// caller waits for must not hold up the others' answers.
    pub(crate) awaited: bool,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("keys", &self.keys)
            .field("token", &"<redacted>")
            .field("queue", &self.queue)
            .field("report", &self.report)
            .field("value", &self.value.as_ref().map(|v| v.len()))
            .finish_non_exhaustive()
    }
}
