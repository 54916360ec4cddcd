//! One node's connections: our `r2d2::ManageConnection`, the node's health as
//! seen by the pool, and the mapping of Redis errors to [`FailureKind`]s.
//! (Nothing is preloaded: a connection sends each script's source with its
//! first call, see [`Sent`].)
//!
//! Traps of `redis`/`r2d2` handled here: `get_connection_with_timeout` switches
//! I/O timeouts off (we set them back); a timed-out connection stays "open"
//! (we flag it broken so the pool drops it); r2d2's own manager has no
//! timeouts and pings on every checkout (ours has timeouts and does not ping);
//! r2d2's default error handler logs every failed reconnect at `error!` (ours
//! warns once when a node goes down and once when it comes back).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::source::{Source, address_of};
use crate::error::{FailureKind, NodeFailure};
use crate::health::NodeHealth;
use crate::metrics;
use crate::transport::protocol::scripts::Sent;
use crate::transport::trust::admission::{Admission, examine};
use crate::transport::trust::failure::{classify, server_error};
use crate::transport::trust::rtt::RoundTrip;

/// How long a node that answered with an error keeps out of the per-node
/// timeout's reckoning (see [`NodeShared::times_rounds`]).
const FAST_FAILURE_MEMORY: Duration = Duration::from_secs(10);

/// A node's first answer at start-up: its index, and what to say at once
/// when its Sentinels do not know its service.
pub(crate) type Answered = (usize, Option<String>);

/// Where a node's first connection attempt tells the start-up how it went,
/// once. Shared by the start-up and the node's connection manager.
#[derive(Clone, Default)]
pub(crate) struct FirstAnswer(Arc<Mutex<Option<Teller>>>);

/// A node's index and where it tells its first answer.
type Teller = (usize, Sender<Answered>);

impl FirstAnswer {
    /// Node `index`'s first answer goes to `answers`.
    pub(crate) fn new(index: usize, answers: Sender<Answered>) -> Self {
        FirstAnswer(Arc::new(Mutex::new(Some((index, answers)))))
    }

    /// Tells the start-up that the node answered (`unknown`: what to say
    /// about a Sentinel service no Sentinel knows); only the first call
    /// tells, and none after [`give_up`](Self::give_up). Whether it told
    /// (false: the start gave up on the node first).
    pub(crate) fn tell(&self, unknown: impl FnOnce() -> Option<String>) -> bool {
        let mut slot = self.0.lock();
        match slot.take() {
            Some((index, answers)) => {
                let _ = answers.send((index, unknown()));
                true
            }
            None => false,
        }
    }

    /// Stops waiting for a node that has not told: runs `unanswered` and
    /// returns true, under the lock its first answer takes, so that the
    /// answer (and the node's "reachable" that follows it) comes after.
    pub(crate) fn give_up(&self, unanswered: impl FnOnce()) -> bool {
        let mut slot = self.0.lock();
        let waiting = slot.take().is_some();
        if waiting {
            unanswered();
        }
        waiting
    }
}

/// A connection plus what the pool needs to know about it.
pub(crate) struct NodeConn {
    pub(crate) conn: redis::Connection,
    /// Set after a timeout or I/O error: the reply stream is no longer in step
    /// with our requests, so the pool must drop this connection.
    pub(crate) broken: bool,
    /// The socket timeout currently set, to skip redundant `setsockopt` calls.
    io_timeout: Duration,
    /// The address it went to (for a Sentinel-managed node, the master's
    /// then).
    pub(crate) address: String,
    /// The master incarnation it reaches, as its last examination found
    /// (`None`: unidentified); see `Admission::is_current`.
    pub(crate) identity: Option<String>,
    /// The scripts this connection has sent with their source.
    pub(crate) sent: Sent,
}

impl NodeConn {
    /// Sets the read and write timeout (at least 1 ms: zero means "forever").
    pub(crate) fn set_io_timeout(&mut self, timeout: Duration) -> redis::RedisResult<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        if timeout != self.io_timeout {
            self.conn.set_read_timeout(Some(timeout))?;
            self.conn.set_write_timeout(Some(timeout))?;
            self.io_timeout = timeout;
        }
        Ok(())
    }

    /// The read and write timeout [`set_io_timeout`](Self::set_io_timeout)
    /// set last.
    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }
}

/// What every part of the client knows about one node. Written by the
/// node's worker and its pool's connection helpers, read by `node_health`.
#[derive(Debug)]
pub(crate) struct NodeShared {
    /// `host:port` or socket path; safe to log.
    pub(crate) address: Arc<str>,
    /// `Some` while the last connection attempt failed and none succeeded since.
    down: Mutex<Option<NodeFailure>>,
    /// Whether the worker's last batch failed.
    failing: AtomicBool,
    /// The last failure of any request, and when.
    last_failure: Mutex<Option<(NodeFailure, Instant)>>,
    /// Its measured round trip: for the per-node timeout, gated rounds and
    /// `node_health`.
    round_trip: Mutex<RoundTrip>,
    /// Whether its votes count (decided on connect and every few seconds,
    /// read per batch).
    pub(crate) admission: Admission,
    /// A Sentinel-managed node: the master's address its last connection
    /// went to.
    resolved: Mutex<Option<String>>,
    /// A cluster node: its masters (set by its link as its map changes).
    masters: Mutex<Vec<Arc<NodeShared>>>,
}

/// The shortest wait for a gate node's answer. Unit tests make it long:
/// they pin the order of rounds at the gate, not this timeout, and a busy
/// machine can delay a fake node's answer past a millisecond.
#[cfg(not(test))]
const GATE_WAIT_FLOOR: Duration = Duration::from_millis(1);
#[cfg(test)]
const GATE_WAIT_FLOOR: Duration = Duration::from_millis(500);

impl NodeShared {
    /// A node with no admission rules (the fake nodes of unit tests).
    #[cfg(test)]
    pub(crate) fn new(address: &str) -> Self {
        Self::admitted_by(address, Admission::standalone(address))
    }

    pub(crate) fn admitted_by(address: &str, admission: Admission) -> Self {
        NodeShared {
            address: address.into(),
            down: Mutex::new(None),
            failing: AtomicBool::new(false),
            last_failure: Mutex::new(None),
            round_trip: Mutex::new(RoundTrip::default()),
            resolved: Mutex::new(None),
            masters: Mutex::new(Vec::new()),
            admission,
        }
    }

    /// Records a failed request (for `node_health` and metrics).
    pub(crate) fn note_failure(&self, failure: &NodeFailure) {
        if failure.kind() == FailureKind::Unanswered {
            return;
        }
        metrics::node_failure(&self.address, failure.kind());
        *self.last_failure.lock() = Some((failure.clone(), Instant::now()));
    }

    /// Records the outcome of a batch: whether it failed.
    pub(crate) fn note_batch(&self, failed: bool) {
        self.failing.store(failed, Ordering::Relaxed);
    }

    /// Records one measured round trip (a batch's exchange or a new
    /// connection's first question; never a timed-out one).
    pub(crate) fn note_round_trip(&self, sample: Duration) {
        self.round_trip.lock().sample(sample);
    }

    /// The measured round trip, smoothed (`None` before any).
    pub(crate) fn round_trip(&self) -> RoundTrip {
        *self.round_trip.lock()
    }

    /// How long a gated round waits for this node before it asks the
    /// others anyway: four usual round trips, at least 1 ms. `None` while
    /// the node is down or failing: it is no gate then.
    pub(crate) fn gate_wait(&self) -> Option<Duration> {
        if self.failing.load(Ordering::Relaxed) || self.down.lock().is_some() {
            return None;
        }
        let usual = self.round_trip().smoothed().unwrap_or_default();
        Some(usual.saturating_mul(4).max(GATE_WAIT_FLOOR))
    }

    /// Whether its round trips count toward the per-node timeout: it is up,
    /// its votes count, and it did not fail with an error it answered fast
    /// (out of memory, say) in the last [`FAST_FAILURE_MEMORY`]: such a
    /// node looks near while a node the majority needs is far. (Its next
    /// clean-up may well succeed, so whether its last batch failed says
    /// little.) A node failing by timeouts counts: its estimate is how the
    /// timeout learns that it is far.
    pub(crate) fn times_rounds(&self) -> bool {
        if self.is_down() || self.admission.refusal().is_some() {
            return false;
        }
        self.last_failure
            .lock()
            .as_ref()
            .is_none_or(|(failure, at)| {
                failure.kind() == FailureKind::Timeout || at.elapsed() >= FAST_FAILURE_MEMORY
            })
    }

    /// What `Redlock::node_health` reports for this node.
    pub(crate) fn health(&self) -> NodeHealth {
        // A copy: a master's health may log (its standing changed), and the
        // logger may ask for this node's health again.
        let masters = self.masters.lock().clone();
        let down = self.down.lock().is_some();
        let last = self.last_failure.lock().clone();
        let latency = self.round_trip().smoothed();
        let refusal = self.down().or_else(|| self.admission.refusal());
        NodeHealth::new(
            self.address.to_string(),
            !down && !self.failing.load(Ordering::Relaxed),
            last.map(|(failure, at)| (failure, at.elapsed())),
            latency,
        )
        .with_resolved(self.resolved.lock().clone())
        .with_refusal(refusal)
        .with_masters(masters.iter().map(|m| m.health()).collect())
    }

    /// A cluster node's masters now.
    pub(crate) fn set_masters(&self, masters: Vec<Arc<NodeShared>>) {
        *self.masters.lock() = masters;
    }

    /// Whether the last connection attempt failed (and none succeeded
    /// since).
    pub(crate) fn is_down(&self) -> bool {
        self.down.lock().is_some()
    }

    /// The failure that keeps this node down, if it is down.
    pub(crate) fn down(&self) -> Option<NodeFailure> {
        self.down.lock().clone()
    }

    pub(crate) fn mark_down(&self, err: &redis::RedisError) {
        self.mark_down_for(self.failure(err));
    }

    /// Marks the node down while its first connection attempt, still under
    /// way, has not answered the `waited` of a client's start: it counts
    /// once it answers.
    pub(crate) fn mark_unanswered(&self, waited: Duration) {
        self.mark_down_for(NodeFailure::new(
            self.address.clone(),
            FailureKind::Connection,
            format!(
                "no answer within the {} ms the client's start waited; connecting in the \
                 background, it counts once it answers",
                waited.as_millis()
            ),
        ));
    }

    fn mark_down_for(&self, failure: NodeFailure) {
        *self.last_failure.lock() = Some((failure.clone(), Instant::now()));
        // Logged once the lock is released: the logger is the user's code,
        // and may ask for the nodes' health, which takes it.
        let was_up = self.down.lock().replace(failure.clone()).is_none();
        if was_up {
            log::warn!("redlock: node {} is down: {failure}", self.address);
        } else {
            log::debug!("redlock: node {} still down: {failure}", self.address);
        }
        self.admission.reachable(false);
    }

    pub(crate) fn mark_up(&self) {
        let was_down = self.down.lock().take().is_some();
        if was_down {
            log::info!("redlock: node {} is reachable again", self.address);
        }
        self.admission.reachable(true);
    }

    /// Turns a Redis error into this node's failure.
    pub(crate) fn failure(&self, err: &redis::RedisError) -> NodeFailure {
        // Redis error texts never include the password, and ours carry no
        // token. One line: the `redis` crate's parse errors span several.
        let kind = classify(err);
        let detail = match kind {
            FailureKind::NotRedis => {
                "its replies are not the Redis protocol; check the host and port in the node URL"
                    .to_owned()
            }
            _ if err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel => err
                .detail()
                .unwrap_or("no Sentinel knows the service")
                .to_owned(),
            _ => {
                // A pipeline's refusal as the node said it, not as the
                // `redis` crate lists a pipeline's failures.
                let reply = server_error(err);
                let said = match &reply {
                    Some(reply) => format!("{} {}", reply.code(), reply.details().unwrap_or("")),
                    None => err.to_string(),
                };
                said.split_whitespace().collect::<Vec<_>>().join(" ")
            }
        };
        NodeFailure::new(self.address.clone(), kind, detail)
    }
}

/// Opens connections for one node's r2d2 pool.
pub(crate) struct NodeManager {
    source: Source,
    connect_timeout: Duration,
    /// The node whose admission and resolved address to set.
    shared: Arc<NodeShared>,
    /// A connection opened at start-up, handed to the pool's first `connect`.
    preconnected: Mutex<Option<NodeConn>>,
    /// Where the first connection attempt tells the client's start.
    first: FirstAnswer,
}

impl std::fmt::Debug for NodeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeManager")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl NodeManager {
    pub(crate) fn new(source: Source, connect_timeout: Duration, shared: Arc<NodeShared>) -> Self {
        NodeManager {
            source,
            connect_timeout,
            shared,
            preconnected: Mutex::new(None),
            first: FirstAnswer::default(),
        }
    }

    /// The same manager, telling `first` how its first connection attempt
    /// went.
    pub(crate) fn telling(mut self, first: FirstAnswer) -> Self {
        self.first = first;
        self
    }

    /// Connects and sets socket timeouts, bounded by the connect timeout.
    pub(crate) fn open(&self) -> redis::RedisResult<NodeConn> {
        let timeout = self.connect_timeout.max(Duration::from_millis(1));
        let client = self.source.client(timeout)?;
        let address = address_of(&client);
        if self.source.is_sentinel() {
            *self.shared.resolved.lock() = Some(address.clone());
        }
        let conn = super::dial::connect(&client, timeout)?;
        let mut conn = NodeConn {
            conn,
            broken: false,
            io_timeout: Duration::ZERO,
            address,
            identity: None,
            sent: Sent::none(),
        };
        conn.set_io_timeout(timeout)?;
        // Its first question is also the node's first round trip measured
        // (and a fresh one after each reconnect: a connection dropped for a
        // timeout is replaced by one that measures the network as it is).
        let asked = Instant::now();
        let within = conn.io_timeout();
        conn.identity = examine(&mut conn.conn, &self.shared.admission, within)?;
        self.shared.note_round_trip(asked.elapsed());
        Ok(conn)
    }

    /// Stops what its source runs in the background (see
    /// [`Source::close`]).
    pub(crate) fn close(&self) {
        self.source.close();
    }

    /// Opens a fresh connection (which asks the node what it is) and
    /// closes it: the failure, if it could not.
    pub(crate) fn probe(&self) -> Option<NodeFailure> {
        self.open().err().map(|err| self.shared.failure(&err))
    }

    /// Keeps a connection opened before the pool existed for its first use.
    pub(crate) fn keep_for_pool(&self, conn: NodeConn) {
        *self.preconnected.lock() = Some(conn);
    }
}

impl r2d2::ManageConnection for NodeManager {
    type Connection = NodeConn;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<NodeConn, redis::RedisError> {
        if let Some(conn) = self.preconnected.lock().take() {
            return Ok(conn);
        }
        let opened = self.open();
        self.first.tell(|| {
            let err = opened.as_ref().err()?;
            self.shared.mark_down(err);
            (err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel).then(|| {
                let detail = self.shared.failure(err).detail().to_owned();
                format!("node {}: {detail}", self.shared.address)
            })
        });
        opened
    }

    fn is_valid(&self, conn: &mut NodeConn) -> Result<(), redis::RedisError> {
        // Only called if test_on_check_out were enabled; it is not.
        redis::cmd("PING").query::<()>(&mut conn.conn)
    }

    fn has_broken(&self, conn: &mut NodeConn) -> bool {
        conn.broken || !redis::ConnectionLike::is_open(&conn.conn)
    }
}

/// Records failed (re)connects in the node's health instead of r2d2's
/// default `error!` on every attempt.
#[derive(Debug)]
pub(crate) struct HealthErrors(pub(crate) Arc<NodeShared>);

impl r2d2::HandleError<redis::RedisError> for HealthErrors {
    fn handle_error(&self, error: redis::RedisError) {
        self.0.mark_down(&error);
    }
}

/// Clears the node's down state when a connection succeeds.
#[derive(Debug)]
pub(crate) struct HealthEvents(pub(crate) Arc<NodeShared>);

impl r2d2::HandleEvent for HealthEvents {
    fn handle_acquire(&self, _event: r2d2::event::AcquireEvent) {
        self.0.mark_up();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_timeout_or_connection() {
        let timeout: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::WouldBlock, "x").into();
        assert_eq!(classify(&timeout), FailureKind::Timeout);
        let refused: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "x").into();
        assert_eq!(classify(&refused), FailureKind::Connection);
    }
}
