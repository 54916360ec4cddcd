//! The transport: per-node connection pools, per-node worker threads, and the
//! parallel fan-out of one request to every node.
//!
//! A caller never talks to Redis itself: it puts one job on every node's queue
//! (a non-blocking `try_send`) and waits on a private reply channel only until
//! the outcome is decided or its deadline passes. A stalled node therefore
//! costs the caller nothing once a majority has answered, and jobs for it
//! expire in its queue instead of piling up.

mod conn;
mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use parking_lot::{Condvar, Mutex};

use crate::algorithm::{Answer, Tally, missing_answer};
use crate::config::{NodeSpec, Settings};
use crate::error::{Error, FailureKind, NodeFailure};
use conn::{HealthErrors, HealthEvents, NodeManager, NodeShared};
use worker::Worker;

/// What to do on every node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`.
    Acquire { ttl_ms: u64 },
    /// Compare-and-pexpire.
    Extend { ttl_ms: u64 },
    /// Compare-and-delete.
    Release,
}

/// One operation, shared by the jobs sent to every node.
pub(crate) struct Request {
    pub(crate) op: Op,
    pub(crate) key: Arc<str>,
    pub(crate) token: Arc<str>,
    /// The per-node socket timeout for this operation.
    pub(crate) io_timeout: Duration,
    /// After this instant the job is pointless and a worker skips it.
    pub(crate) expires: Instant,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("key", &self.key)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A request on one node's queue, and where to send the answer (if anyone
/// waits for it).
pub(crate) struct Job {
    req: Arc<Request>,
    index: usize,
    reply: Option<Arc<RoundShared>>,
}

impl Job {
    fn finish(&self, node: &NodeShared, answer: Answer) {
        match &answer {
            Ok(vote) => log::debug!(
                "redlock: node {} {:?} {:?}: {}",
                node.address,
                self.req.op,
                self.req.key,
                if *vote { "ok" } else { "refused" }
            ),
            Err(failure) => log::debug!(
                "redlock: node {} {:?} {:?}: {failure}",
                node.address,
                self.req.op,
                self.req.key
            ),
        }
        if let Some(round) = &self.reply {
            round.record(self.index, answer);
        }
    }
}

struct NodeHandle {
    shared: Arc<NodeShared>,
    queue: Sender<Job>,
}

/// Every node's queue. Dropping the last clone of the client (and every
/// guard) closes the queues, and the workers stop once they are drained.
pub(crate) struct Transport {
    nodes: Vec<NodeHandle>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.nodes.iter().map(|n| &n.shared.address))
            .finish()
    }
}

impl Transport {
    /// Connects to every node in parallel (at most the connect timeout), then
    /// starts one pool and one worker per node. Nodes that are down are
    /// reconnected in the background.
    pub(crate) fn start(specs: Vec<NodeSpec>, settings: &Settings) -> Result<Self, Error> {
        let managers: Vec<(Arc<NodeShared>, NodeManager)> = specs
            .into_iter()
            .map(|spec| {
                let shared = Arc::new(NodeShared::new(&spec.address));
                (
                    shared,
                    NodeManager::new(spec.client, settings.connect_timeout),
                )
            })
            .collect();
        std::thread::scope(|scope| {
            for (shared, manager) in &managers {
                scope.spawn(move || match manager.open() {
                    Ok(conn) => manager.preload(conn),
                    Err(err) => shared.mark_down(&err),
                });
            }
        });
        let mut nodes = Vec::with_capacity(managers.len());
        for (index, (shared, manager)) in managers.into_iter().enumerate() {
            let name = format!("redlock-conn-{index}");
            let helper = scheduled_thread_pool::ScheduledThreadPool::builder()
                .num_threads(1)
                .thread_name_pattern(&name)
                .build();
            let pool = r2d2::Pool::builder()
                .max_size(1)
                .min_idle(Some(1))
                .test_on_check_out(false)
                .idle_timeout(None)
                .max_lifetime(None)
                .connection_timeout(settings.connect_timeout)
                .thread_pool(Arc::new(helper))
                .error_handler(Box::new(HealthErrors(shared.clone())))
                .event_handler(Box::new(HealthEvents(shared.clone())))
                .build_unchecked(manager);
            let (queue, jobs) = crossbeam_channel::bounded(settings.queue_capacity);
            let worker = Worker::new(shared.clone(), pool, jobs, settings.connect_timeout);
            std::thread::Builder::new()
                .name(format!("redlock-node-{index}"))
                .spawn(move || worker.run())
                .map_err(|e| Error::System {
                    reason: format!("could not start a worker thread: {e}"),
                })?;
            nodes.push(NodeHandle { shared, queue });
        }
        Ok(Transport { nodes })
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// How many nodes must agree: `N/2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        crate::algorithm::quorum(self.nodes.len())
    }

    /// Sends `req` to every node and collects answers until the outcome is
    /// decided or `wait_until` passes; nodes that have not answered by then
    /// count as timed out.
    pub(crate) fn round(&self, req: Request, wait_until: Instant) -> Tally {
        self.start_round(req).collect(self, wait_until)
    }

    /// Sends `req` to every node; collect the answers with
    /// [`PendingRound::collect`]. Lets one thread run many rounds at once.
    pub(crate) fn start_round(&self, req: Request) -> PendingRound {
        let n = self.nodes.len();
        let round = Arc::new(RoundShared {
            state: Mutex::new(RoundState {
                tally: Some(Tally::new(n)),
                answered: vec![false; n],
            }),
            decided: Condvar::new(),
        });
        let req = Arc::new(req);
        for (index, node) in self.nodes.iter().enumerate() {
            if let Err(failure) = self.enqueue(node, &req, index, Some(round.clone())) {
                round.record(index, Err(failure));
            }
        }
        PendingRound {
            round,
            started: Instant::now(),
        }
    }

    /// Sends `req` to every node without waiting for any answer.
    pub(crate) fn broadcast(&self, req: Request) {
        let req = Arc::new(req);
        for (index, node) in self.nodes.iter().enumerate() {
            if let Err(failure) = self.enqueue(node, &req, index, None) {
                log::warn!(
                    "redlock: could not queue {:?} {:?}: {failure}",
                    req.op,
                    req.key
                );
            }
        }
    }

    fn enqueue(
        &self,
        node: &NodeHandle,
        req: &Arc<Request>,
        index: usize,
        reply: Option<Arc<RoundShared>>,
    ) -> Result<(), NodeFailure> {
        let job = Job {
            req: req.clone(),
            index,
            reply,
        };
        node.queue.try_send(job).map_err(|err| {
            let (kind, detail) = match err {
                TrySendError::Full(_) => (FailureKind::Overloaded, "request queue full"),
                TrySendError::Disconnected(_) => (FailureKind::Connection, "worker stopped"),
            };
            NodeFailure::new(node.shared.address.clone(), kind, detail)
        })
    }
}

/// A round whose requests are queued; its answers are still to be collected.
pub(crate) struct PendingRound {
    round: Arc<RoundShared>,
    started: Instant,
}

/// The answers of one round, filled in by the workers. The caller sleeps
/// until the verdict is decided, so it wakes once per round, not per answer.
pub(crate) struct RoundShared {
    state: Mutex<RoundState>,
    decided: Condvar,
}

struct RoundState {
    /// `None` once the caller has taken it: late answers are ignored.
    tally: Option<Tally>,
    answered: Vec<bool>,
}

impl RoundShared {
    fn record(&self, index: usize, answer: Answer) {
        let mut state = self.state.lock();
        if std::mem::replace(&mut state.answered[index], true) {
            return;
        }
        if let Some(tally) = &mut state.tally {
            tally.record(answer);
            if tally.verdict().is_some() {
                self.decided.notify_one();
            }
        }
    }
}

impl PendingRound {
    /// Waits until the outcome is decided or `wait_until` passes; nodes that
    /// have not answered by then count as timed out.
    pub(crate) fn collect(self, transport: &Transport, wait_until: Instant) -> Tally {
        let mut state = self.round.state.lock();
        let decided = |s: &RoundState| s.tally.as_ref().is_some_and(|t| t.verdict().is_some());
        while !decided(&state) {
            if self
                .round
                .decided
                .wait_until(&mut state, wait_until)
                .timed_out()
            {
                break;
            }
        }
        let RoundState { tally, answered } = &mut *state;
        let mut tally = tally.take().unwrap_or_else(|| Tally::new(0));
        if tally.verdict().is_none() {
            let waited = self.started.elapsed();
            for (index, done) in answered.iter_mut().enumerate() {
                if !*done {
                    *done = true;
                    let node = transport.nodes[index].shared.address.clone();
                    tally.record_missing(missing_answer(node, waited));
                }
            }
        }
        tally
    }
}
