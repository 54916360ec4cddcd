//! The crate's one error type and the per-node failure it carries.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::human::Human;

/// Everything that can go wrong when building a client or taking, extending or
/// releasing a lock.
///
/// Match on the variant to decide what to do; the `Display` text says what the
/// caller can do about it. No variant ever contains a lock token or a password.
///
/// ```
/// use redlock_sync::Error;
///
/// fn describe(err: &Error) -> &'static str {
///     match err {
///         Error::Config { .. } => "fix the input",
///         Error::Busy { .. } => "someone else holds it: try later",
///         Error::NoQuorum { .. } => "too many nodes are failing",
///         Error::LockLost { .. } => "stop the protected work",
///         _ => "other",
///     }
/// }
/// # let _ = describe;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// Bad input: no nodes, a malformed or duplicate node URL, a TTL that is zero,
    /// too large or not above the drift allowance, an empty resource name, or an
    /// out-of-range setting. Retrying cannot help; fix the call.
    Config {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The resource is held by another client: a majority of the nodes
    /// answered and too few of them granted it (or the refusals alone rule
    /// out a majority), so others hold it on nodes this client reaches.
    /// Try later. Nodes that did not answer do not make this `NoQuorum`:
    /// the answer is about the resource, and the nodes that answered
    /// settle it. (`try_*` calls report it as `Ok(None)`.)
    #[non_exhaustive]
    Busy {
        /// The resource (Redis key) that was asked for (for a
        /// [`lock_all`](crate::Redlock::lock_all), the resources joined by
        /// `, `; for a semaphore, a reader-writer lock or an election, its
        /// name).
        resource: String,
        /// How many tries were made before giving up: the first round and
        /// each retry (`retry_count` of them for `lock`). Rounds re-tried at
        /// once (split votes, a stale fencing token, a semaphore's next
        /// slot) or that only keep a waiter's place in the queue are not
        /// counted.
        attempts: u32,
        /// What was asked for: a lock, a permit, a read or write hold, a
        /// leadership. The message names the call that waits longer for it.
        wanted: Wanted,
        /// A guard of this very client holds it (or, for a semaphore, one
        /// of its permits): release that guard first. Locks are not
        /// re-entrant: asking again in the thread that holds the guard
        /// waits in vain until the TTL runs out.
        held_here: bool,
    },
    /// Too many nodes failed, timed out or were unreachable for a majority to
    /// answer: for an acquisition, fewer than a majority of the nodes
    /// answered, whatever they said (or failures that will not heal, such as
    /// rejected credentials, rule a majority out); for an extension, a
    /// release or a leader read, the nodes that failed could still have
    /// made the majority. The nodes are not there to tell: check them (each
    /// failing node's cause is kept in `failures`).
    NoQuorum {
        /// The resource (Redis key) concerned (for several, joined by `, `).
        resource: String,
        /// How many nodes confirmed the operation.
        confirmed: usize,
        /// How many confirmations were needed (`N/2 + 1`).
        quorum: usize,
        /// One entry per node that failed, with its cause, and one of kind
        /// [`FailureKind::Unanswered`] per node that had not answered yet when
        /// a majority had already become impossible.
        failures: Vec<NodeFailure>,
    },
    /// The lock is no longer held (and may now belong to someone else):
    /// its validity ran out, or the nodes said our token is gone. `cause`
    /// says which; work protected by the lock must stop.
    #[non_exhaustive]
    LockLost {
        /// The resource (Redis key) concerned (for several, joined by `, `).
        resource: String,
        /// How many nodes still held our token: of the round that found it
        /// gone ([`LostCause::NotHeld`]), or of the last renewal that
        /// failed before the validity ran out ([`LostCause::Expired`]; 0
        /// when none failed).
        confirmed: usize,
        /// How many were needed (`N/2 + 1`).
        quorum: usize,
        /// Nodes that failed to answer that round, with their causes, and
        /// nodes that had not answered yet ([`FailureKind::Unanswered`]).
        /// Nodes that answered "not ours" are not failures and are not
        /// listed.
        failures: Vec<NodeFailure>,
        /// What is known of how it was lost.
        cause: LostCause,
    },
    /// A majority granted the lock, but the round took so long that no validity
    /// was left of the TTL. The partial lock was released again. Also
    /// returned after a round that failed, without retrying, when the
    /// nodes' measured round trips (of a majority) leave the TTL no chance:
    /// the quickest answer would take all its validity, or, with the
    /// per-node timeout derived from the TTL, a request needs more than a
    /// third of it.
    TooSlow {
        /// The resource (Redis key) concerned (for several, joined by `, `).
        resource: String,
        /// How long the acquisition round took.
        elapsed: Duration,
        /// The TTL that was asked for.
        ttl: Duration,
    },
    /// The wait for the lock was cancelled through a
    /// [`CancelToken`](crate::CancelToken). Nothing is held: a round in
    /// flight was released.
    Cancelled {
        /// The resource (Redis key) concerned (for several, joined by `, `).
        resource: String,
    },
    /// The client was shut down with
    /// [`Redlock::shutdown`](crate::Redlock::shutdown), through this clone or
    /// another: it released what it held (or tried to: see what the
    /// shutdown returned) and takes no more calls. A guard of it is no
    /// longer valid. Build a new client to lock again.
    Shutdown,
    /// The operating system refused something the client needs to start (a
    /// thread). The machine is out of resources; retry once it has recovered.
    System {
        /// What was refused, with the system's reason.
        reason: String,
    },
}

impl Error {
    /// A setting or node URL given to the builder is wrong.
    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::Config {
            reason: format!("invalid configuration: {}", reason.into()),
        }
    }

    /// The one way a [`Error::LockLost`] is made: the hold on `resource`
    /// is gone for `cause`; `confirmed` of the `quorum` needed still held
    /// it in the round that found out, and `failures` are that round's.
    pub(crate) fn lock_lost(
        resource: &str,
        cause: LostCause,
        (confirmed, quorum): (usize, usize),
        failures: Vec<NodeFailure>,
    ) -> Self {
        Error::LockLost {
            resource: resource.to_owned(),
            confirmed,
            quorum,
            failures,
            cause,
        }
    }

    /// An argument of a call is wrong; [`in_call`](Self::in_call) names the
    /// call.
    pub(crate) fn argument(reason: impl Into<String>) -> Self {
        Error::Config {
            reason: reason.into(),
        }
    }

    /// An [`argument`](Self::argument) error, naming the call it came from.
    pub(crate) fn in_call(self, call: &str) -> Self {
        match self {
            Error::Config { reason } => Error::Config {
                reason: format!("invalid argument to {call}: {reason}"),
            },
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { reason } => f.write_str(reason),
            Error::Busy {
                resource,
                attempts,
                wanted,
                held_here,
            } => busy(f, resource, *attempts, *wanted, *held_here),
            Error::NoQuorum {
                resource,
                confirmed,
                quorum,
                failures,
            } => no_quorum(f, resource, *confirmed, *quorum, failures),
            Error::LockLost {
                resource,
                confirmed,
                quorum,
                failures,
                cause,
            } => lock_lost(f, resource, *confirmed, *quorum, failures, *cause),
            Error::System { reason } => write!(f, "system resource unavailable: {reason}"),
            Error::Shutdown => f.write_str(
                "the client was shut down (Redlock::shutdown): what it held was released, and \
                 it takes no more calls; build a new client to lock again",
            ),
            Error::Cancelled { resource } => {
                write!(f, "waiting for {resource:?} was cancelled; nothing is held")
            }
            Error::TooSlow {
                resource,
                elapsed,
                ttl,
            } => too_slow(f, resource, *elapsed, *ttl),
        }
    }
}

/// What is known of how a lock was lost ([`Error::LockLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// Its validity ran out before a renewal got through: no renewal was
    /// tried in time (no keep-alive, a process paused past it), or the
    /// renewals failed for want of nodes (listed in `failures`). Nothing
    /// was asked of the nodes about it: they may still hold its keys until
    /// their TTL, but another client may hold the lock now.
    Expired,
    /// The nodes were asked, and too few of them still held its token: it
    /// expired there, or was deleted or taken.
    NotHeld,
}

/// What an acquisition that found its resource held asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Wanted {
    /// A lock on one resource or several ([`Redlock::lock`](crate::Redlock::lock),
    /// [`lock_all`](crate::Redlock::lock_all), [`acquire`](crate::Redlock::acquire)).
    Lock,
    /// A permit of a [`Semaphore`](crate::Semaphore).
    Permit,
    /// A read hold of a [`RwLock`](crate::RwLock).
    Read,
    /// The write hold of a [`RwLock`](crate::RwLock).
    Write,
    /// The leadership of an [`Election`](crate::Election).
    Leadership,
}

/// `Busy`'s message: who holds it, and how to wait longer for it.
fn busy(
    f: &mut fmt::Formatter<'_>,
    resource: &str,
    attempts: u32,
    wanted: Wanted,
    held_here: bool,
) -> fmt::Result {
    // What it is, who holds it (another client; this one), how to wait.
    let (what, other, here, wait) = match wanted {
        Wanted::Lock => (
            "resource",
            "is held by another client",
            "is held by this client",
            "Redlock::lock_for",
        ),
        Wanted::Permit => (
            "semaphore",
            "has every permit held by other clients",
            "has every permit held, some by this client",
            "Semaphore::acquire(ttl).wait(..)",
        ),
        Wanted::Read => (
            "reader-writer lock",
            "is held (or awaited first) by a writer of another client",
            "is held for writing by this client",
            "RwLock::acquire_read(ttl).wait(..)",
        ),
        Wanted::Write => (
            "reader-writer lock",
            "is held by readers or a writer of other clients",
            "is held by this client (a read or the write)",
            "RwLock::acquire_write(ttl).wait(..)",
        ),
        Wanted::Leadership => (
            "election",
            "is led by another client",
            "is led by this client",
            "Campaign::wait",
        ),
    };
    let rounds = format!("gave up after {attempts} attempt(s)");
    if !held_here {
        return write!(
            f,
            "{what} {resource:?} {other} ({rounds}); retry later, or wait longer with {wait}"
        );
    }
    if wanted == Wanted::Permit {
        // Other clients may hold the rest: they may still release.
        return write!(
            f,
            "{what} {resource:?} {here} ({rounds}); release one of this process's permits \
             first, or wait longer with {wait}"
        );
    }
    write!(
        f,
        "{what} {resource:?} {here} ({rounds}): a guard of this process holds it (for several \
         resources, one of them); release that guard first. It is not re-entrant: asking again \
         in the thread that holds the guard waits in vain, until its ttl runs out or, kept \
         alive, until the wait gives up"
    )
}

/// `NoQuorum`'s message: how many nodes confirmed, what to check, and each
/// failing node's cause.
fn no_quorum(
    f: &mut fmt::Formatter<'_>,
    resource: &str,
    confirmed: usize,
    quorum: usize,
    failures: &[NodeFailure],
) -> fmt::Result {
    write!(
        f,
        "no quorum for {resource:?}: {confirmed} node(s) confirmed, {quorum} needed; "
    )?;
    match slower_than_timeout(failures) {
        Some(timeout) => write!(
            f,
            "the nodes answered more slowly than the {} per-node timeout (paused, \
             overloaded, or farther away than it allows: raise it with \
             RedlockBuilder::node_timeout if they are far)",
            Human(timeout)
        )?,
        None => f.write_str(what_to_check(failures))?,
    }
    write_failures(f, failures)
}

/// `LockLost`'s message: how the lock was lost, and each failing node's
/// cause.
fn lock_lost(
    f: &mut fmt::Formatter<'_>,
    resource: &str,
    confirmed: usize,
    quorum: usize,
    failures: &[NodeFailure],
    cause: LostCause,
) -> fmt::Result {
    match cause {
        LostCause::Expired if failures.is_empty() => write!(
            f,
            "lock on {resource:?} was lost: its validity ran out before a renewal \
             got through (no keep-alive, or the process was paused past it); \
             another client may hold it now; stop the work it protected"
        )?,
        LostCause::Expired => write!(
            f,
            "lock on {resource:?} was lost: its validity ran out while renewals \
             failed (the last was confirmed by {confirmed} node(s), {quorum} \
             needed); stop the work it protected"
        )?,
        LostCause::NotHeld => write!(
            f,
            "lock on {resource:?} was lost: only {confirmed} node(s) still held it, \
             {quorum} needed; the other nodes that answered no longer hold its \
             token (it expired there, or was deleted or taken); stop the work it \
             protected"
        )?,
    }
    write_failures(f, failures)
}

/// `TooSlow`'s message: how long acquiring takes against the TTL.
fn too_slow(
    f: &mut fmt::Formatter<'_>,
    resource: &str,
    elapsed: Duration,
    ttl: Duration,
) -> fmt::Result {
    write!(
        f,
        "acquiring {resource:?} takes {} (this round, or the nodes' quickest measured \
         round trip): too long for the {} ttl, which it leaves no validity of, or whose \
         third (the most the per-node timeout may be) it exceeds; use a longer ttl or \
         check node latency",
        Human(elapsed),
        Human(ttl),
    )
}

/// The per-node timeout, when timeouts alone decided a `NoQuorum`: every
/// failure (but the nodes not waited for) is a node that did not answer
/// within it.
fn slower_than_timeout(failures: &[NodeFailure]) -> Option<Duration> {
    let mut timeouts = failures
        .iter()
        .filter(|failure| failure.kind != FailureKind::Unanswered)
        .map(NodeFailure::timeout)
        .peekable();
    timeouts.peek()?;
    timeouts.try_fold(Duration::ZERO, |most, timeout| Some(most.max(timeout?)))
}

/// What a `NoQuorum` asks the caller to check, from its failures' kinds.
fn what_to_check(failures: &[NodeFailure]) -> &'static str {
    let mut kinds = failures
        .iter()
        .map(NodeFailure::kind)
        .filter(|kind| *kind != FailureKind::Unanswered)
        .peekable();
    let first = kinds.peek().copied();
    match first {
        Some(FailureKind::Auth) if kinds.all(|k| k == FailureKind::Auth) => {
            "the nodes rejected the credentials: check the user name and password in the node \
             URLs (percent-encode any of : / ? # @ in them)"
        }
        Some(FailureKind::Unsupported) if kinds.all(|k| k == FailureKind::Unsupported) => {
            "the nodes lack what redlock-sync needs (Redis 7.0 or later, INFO allowed): see each \
             node's reason"
        }
        Some(kind) if kind.is_admission() && kinds.all(FailureKind::is_admission) => {
            "nodes that answered do not count toward a quorum (see each node's reason, or \
             Redlock::verify)"
        }
        Some(FailureKind::NotRedis) if kinds.all(|k| k == FailureKind::NotRedis) => {
            "something else than Redis answers at the nodes' addresses: check the hosts and \
             ports in the node URLs"
        }
        _ => "check that a majority of the nodes is up and reachable",
    }
}

fn write_failures(f: &mut fmt::Formatter<'_>, failures: &[NodeFailure]) -> fmt::Result {
    if failures.is_empty() {
        return Ok(());
    }
    f.write_str(" (")?;
    for (i, failure) in failures.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{failure}")?;
    }
    f.write_str(")")
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NoQuorum { failures, .. } | Error::LockLost { failures, .. } => failures
                .first()
                .map(|failure| failure as &(dyn std::error::Error + 'static)),
            _ => None,
        }
    }
}

/// Why one node did not answer an operation usefully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The node did not answer within the per-node timeout (it may be paused,
    /// overloaded or behind a slow network). A timed-out `SET` may still have
    /// landed, so it is released like any other.
    Timeout,
    /// The node could not be reached or the connection broke.
    Connection,
    /// The node rejected our credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    /// Retrying does not help: fix the URL.
    Auth,
    /// The node is a read-only replica or still loading its data set
    /// (`READONLY`, `LOADING`). Point the client at independent masters.
    NotWritable,
    /// The node answered with another error.
    Server,
    /// The node's request queue in this client was full: the node is too slow
    /// for the load placed on it.
    Overloaded,
    /// The node had not answered yet when the outcome was decided: the other
    /// nodes had already made a majority impossible. Not a fault of its own.
    Unanswered,
    /// The node restarted without its data (or is new) and is in its restart
    /// quarantine: its votes do not count until it has been up for the
    /// period set with
    /// [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine).
    Quarantined,
    /// Something else than Redis answers at the node's address (its
    /// replies are not the Redis protocol). Retrying does not help: fix the
    /// URL's host or port.
    NotRedis,
    /// The node does not offer what this client needs: Redis 7.0 or later
    /// (for `SET … NX GET`), and `INFO` (to tell which server it is and
    /// whether it evicts keys); or it is not what its URL says (a Redis
    /// Cluster member listed as `redis://`). Retrying does not help; the
    /// detail says which.
    Unsupported,
    /// The node is the same Redis server as another node of the list (one
    /// `run_id`, reached under two addresses, or one Redis Cluster listed
    /// twice): it would count twice, so only one counts — the one listed
    /// first if both answered while the client started, else the one that
    /// reached the server first (one that counts is never pushed aside).
    /// List each server once.
    Duplicate,
    /// The node has a memory limit with an eviction policy other than
    /// `noeviction`: lock keys (which all have a TTL) may be evicted before
    /// they expire, letting a second holder in. Set `maxmemory-policy
    /// noeviction`, use a dedicated instance, or accept the risk with
    /// [`RedlockBuilder::allow_eviction`](crate::RedlockBuilder::allow_eviction).
    Eviction,
    /// The node's wall clock, by which Redis expires keys, cannot be
    /// trusted: it jumped ahead (its keys expired early by the jump; it
    /// counts again once every key it may have dropped no longer matters),
    /// or it disagrees with the other nodes' clocks by more than a round's
    /// drift allowance or, steadily, by more than
    /// [`RedlockBuilder::max_clock_offset`](crate::RedlockBuilder::max_clock_offset).
    /// Fix the node's time synchronisation (NTP); the detail gives the size.
    Clock,
}

impl FailureKind {
    /// Whether the failure will not go away by itself (bad credentials,
    /// not a Redis server, a Redis too old).
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            FailureKind::Auth
                | FailureKind::NotRedis
                | FailureKind::Unsupported
                | FailureKind::Duplicate
                | FailureKind::Eviction
        )
    }

    /// Whether the node answered but the client does not count its votes
    /// (see [`NodeHealth::refusal`](crate::NodeHealth::refusal)): not a
    /// failure of the request.
    pub(crate) fn is_admission(self) -> bool {
        matches!(
            self,
            FailureKind::Quarantined
                | FailureKind::Unsupported
                | FailureKind::Duplicate
                | FailureKind::Eviction
                | FailureKind::Clock
        )
    }

    fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timed out",
            FailureKind::Connection => "connection failed",
            FailureKind::Auth => "authentication failed",
            FailureKind::NotWritable => "not writable",
            FailureKind::Server => "server error",
            FailureKind::Overloaded => "overloaded",
            FailureKind::Unanswered => "had not answered yet",
            FailureKind::Quarantined => "in restart quarantine",
            FailureKind::NotRedis => "not a Redis server",
            FailureKind::Unsupported => "unsupported",
            FailureKind::Duplicate => "the same server as another node",
            FailureKind::Eviction => "may evict keys",
            FailureKind::Clock => "clock not trusted",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node's failure: which node (by address, never by URL) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    node: Arc<str>,
    kind: FailureKind,
    detail: Arc<str>,
    /// The per-node timeout it did not answer within (a timeout's).
    timeout: Option<Duration>,
}

impl NodeFailure {
    pub(crate) fn new(node: Arc<str>, kind: FailureKind, detail: impl Into<Arc<str>>) -> Self {
        NodeFailure {
            node,
            kind,
            detail: detail.into(),
            timeout: None,
        }
    }

    /// A [`FailureKind::Timeout`]: no answer within `timeout`, the
    /// per-node timeout (the detail says where it came from).
    pub(crate) fn timed_out(
        node: Arc<str>,
        timeout: Duration,
        detail: impl Into<Arc<str>>,
    ) -> Self {
        NodeFailure {
            timeout: Some(timeout),
            ..NodeFailure::new(node, FailureKind::Timeout, detail)
        }
    }

    /// For a node that did not answer within the per-node timeout, that
    /// timeout; `None` for every other failure.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The node's address: `host:port`, or the socket path for `unix://` nodes.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What kind of failure this was.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// A human-readable detail (the server's error text, or the I/O error).
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: {}", self.node, self.kind)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for NodeFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_traits<T: Send + Sync + 'static + std::error::Error>() {}

    #[test]
    fn error_is_send_sync_static() {
        assert_traits::<Error>();
        assert_traits::<NodeFailure>();
    }

    #[test]
    fn no_quorum_lists_causes_and_exposes_source() {
        let failure = NodeFailure::new("127.0.0.1:7000".into(), FailureKind::Timeout, "50ms");
        let err = Error::NoQuorum {
            resource: "r".into(),
            confirmed: 1,
            quorum: 2,
            failures: vec![failure.clone()],
        };
        let text = err.to_string();
        assert!(
            text.contains("node 127.0.0.1:7000: timed out: 50ms"),
            "{text}"
        );
        assert!(text.starts_with("no quorum"), "{text}");
        let source = std::error::Error::source(&err).expect("source");
        assert_eq!(source.to_string(), failure.to_string());
    }
}
