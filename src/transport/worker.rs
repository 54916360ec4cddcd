//! One long-lived worker thread per node. It takes jobs from the node's queue,
//! drops those whose caller has stopped waiting, and hands the rest to the
//! node's [`Link`] as one batch.
//!
//! With a single node there is nothing to run in parallel and no majority
//! to decide early, so a caller whose node is idle (its link free, its
//! queue empty) runs its round on its own thread ([`Served::try_inline`]):
//! two thread hops less per round. Either way the link is used by one
//! thread at a time, under [`Served`]'s lock, and jobs keep their order: a
//! caller runs inline only while the queue is empty, and the worker waits
//! until a job is queued *without taking it* before it takes the lock.
//!
//! One worker per node runs each node's jobs in the order they were queued,
//! and the link keeps that order on the node (within a batch, but for a
//! script the node answered `NOSCRIPT`, sent again after its batch: see
//! `redis_link.rs`). The crate relies on it only for speed, never for safety:
//! a local waiter woken when a release is *queued* finds the key gone because
//! its `SET` runs after the delete on every node.
//!
//! The queue is crossbeam's channel, whose receive spins and yields the CPU
//! a few times before it sleeps. A queue that sleeps at once was measured
//! side by side: about 10 % less client CPU per contended hand-off (S3x),
//! but 1.36–1.43× floor-pipe5's single-thread pair latency (S1) against
//! 1.26–1.28×, as a worker that lingers catches the caller's next request
//! without being woken. Latency wins: the spin stays.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Select};
use parking_lot::Mutex;

use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};
use crate::transport::connect::conn::NodeShared;
use crate::transport::connect::link::Link;
use crate::transport::protocol::request::Request;
use crate::transport::round::RoundShared;

/// At most this many jobs share one pipelined round trip.
const MAX_BATCH: usize = 128;

/// A node's link and what serving it keeps, used by one thread at a time:
/// the worker, or a caller running its round inline.
pub(crate) struct Served {
    shared: Arc<NodeShared>,
    link: Box<dyn Link>,
    /// Whether the last batch failed, so that failures are warned about once
    /// per outage rather than once per request.
    failing: bool,
}

impl Served {
    pub(crate) fn new(shared: Arc<NodeShared>, link: Box<dyn Link>) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Served {
            shared,
            link,
            failing: false,
        }))
    }

    /// Runs `job` on the caller's thread if the link is free and nothing is
    /// queued before it; else gives it back, to be queued.
    pub(crate) fn try_inline(
        served: &Mutex<Self>,
        queue_empty: impl Fn() -> bool,
        job: Job,
    ) -> Option<Job> {
        let Some(mut served) = served.try_lock() else {
            return Some(job);
        };
        if !queue_empty() {
            return Some(job);
        }
        served.serve(&mut vec![job]);
        None
    }

    /// Drops the link (the node's connections and pool): the worker stops.
    /// A caller that still gets the link is answered that the client is
    /// shut down.
    fn close(&mut self) {
        self.link = Box::new(Closed(self.shared.address.clone()));
    }

    fn serve(&mut self, batch: &mut Vec<Job>) {
        let now = Instant::now();
        batch.retain(|job| {
            let live = job.req.expires > now;
            if !live {
                let failure = NodeFailure::timed_out(
                    self.shared.address.clone(),
                    job.req.timeout.value,
                    format!(
                        "still queued when its deadline passed: the node did not keep up within {}",
                        job.req.timeout
                    ),
                );
                job.finish(&self.shared, Err(failure));
            }
            live
        });
        if batch.is_empty() {
            return;
        }
        let started = Instant::now();
        let requests: Vec<&Request> = batch.iter().map(|job| &*job.req).collect();
        let answers = self.link.run(&requests);
        let took = started.elapsed();
        debug_assert_eq!(answers.len(), batch.len());
        let mut answers: Vec<_> = answers.into_iter().map(Some).collect();
        answers.resize_with(batch.len(), || None);
        // A node that answered but does not count (its admission) is not
        // failing: only its answers' use changes.
        let failure = answers.iter().find_map(|a| match a {
            Some(Ok(_)) => None,
            Some(Err(failure)) if failure.kind().is_admission() => None,
            Some(Err(failure)) => Some(format!("{}: {}", failure.kind(), failure.detail())),
            None => Some("a request got no answer".to_owned()),
        });
        let failed = failure.is_some();
        // Health first: whoever wakes on these answers sees it up to date.
        self.shared.note_batch(failed);
        self.note_health(failure);
        for (job, answer) in batch.iter().zip(answers) {
            let answer = answer.unwrap_or_else(|| {
                Err(NodeFailure::new(
                    self.shared.address.clone(),
                    FailureKind::Server,
                    "no answer for this request",
                ))
            });
            job.finish(&self.shared, answer);
        }
        log::trace!(
            "redlock: node {} served {} request(s) in {took:?}",
            self.shared.address,
            batch.len(),
        );
    }

    /// Says when requests start failing (with the first failure) and when
    /// they succeed again.
    fn note_health(&mut self, failure: Option<String>) {
        let failed = failure.is_some();
        if let Some(failure) = failure.filter(|_| !self.failing) {
            log::warn!(
                "redlock: requests to node {} are failing: {failure}",
                self.shared.address
            );
        } else if !failed && self.failing {
            log::info!(
                "redlock: requests to node {} succeed again",
                self.shared.address
            );
        }
        self.failing = failed;
    }
}

/// The link of a node whose worker stopped.
struct Closed(Arc<str>);

impl Link for Closed {
    fn run(&mut self, batch: &[&Request]) -> Vec<crate::algorithm::Answer> {
        batch
            .iter()
            .map(|_| {
                Err(NodeFailure::new(
                    self.0.clone(),
                    FailureKind::Connection,
                    "the client was shut down (Redlock::shutdown)",
                ))
            })
            .collect()
    }
}

pub(crate) struct Worker {
    served: Arc<Mutex<Served>>,
    queue: Receiver<Job>,
    /// Disconnected when the transport closes.
    stop: Receiver<()>,
}

impl Worker {
    pub(crate) fn new(
        served: Arc<Mutex<Served>>,
        queue: Receiver<Job>,
        stop: Receiver<()>,
    ) -> Self {
        Worker {
            served,
            queue,
            stop,
        }
    }

    /// Serves jobs until the transport closes (or every sender is gone),
    /// then serves what is still queued, drops the node's link (its
    /// connections) and stops.
    pub(crate) fn run(self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut queued = Select::new();
        queued.recv(&self.queue);
        queued.recv(&self.stop);
        loop {
            // Wait for a job without taking it: a caller that finds the
            // queue empty may run its own job inline meanwhile.
            queued.ready();
            let mut stopping = matches!(
                self.stop.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            );
            let mut served = self.served.lock();
            while batch.len() < MAX_BATCH {
                match self.queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        stopping = true;
                        break;
                    }
                }
            }
            if stopping && batch.is_empty() {
                served.close();
                log::trace!("redlock: worker for node {} stops", served.shared.address);
                return;
            }
            served.serve(&mut batch);
            drop(served);
            batch.clear();
        }
    }
}

/// A request on one node's queue, and where to send the answer (if anyone
/// waits for it).
pub(crate) struct Job {
    pub(super) req: Arc<Request>,
    pub(super) index: usize,
    pub(super) reply: Option<Arc<RoundShared>>,
}

impl Job {
    pub(super) fn finish(&self, node: &NodeShared, answer: Answer) {
        match &answer {
            Ok(vote) => log::debug!(
                "redlock: node {} {:?} {:?}: {}",
                node.address,
                self.req.op,
                self.req.keys(),
                if vote.yes { "ok" } else { "refused" }
            ),
            Err(failure) => {
                log::debug!(
                    "redlock: node {} {:?} {:?}: {failure}",
                    node.address,
                    self.req.op,
                    self.req.keys()
                );
                node.note_failure(failure);
            }
        }
        if let Some(round) = &self.reply {
            round.record(self.index, answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::Verdict;
    use crate::settings::NodeTimeout;
    use crate::transport::fake::FakeNode;
    use crate::transport::protocol::request::Op;
    use crate::transport::round::{PendingRound, RoundShared};

    /// A lock request for `key`, and the round its answer goes to.
    fn job(key: &str) -> (Job, PendingRound) {
        let timeout = NodeTimeout::fixed(Duration::from_secs(2));
        let expires = Instant::now() + Duration::from_secs(10);
        let req = Request::lock(Op::Acquire { ttl_ms: 10_000 }, &[key], timeout, expires);
        let round = RoundShared::new(1, crate::algorithm::Decides::Verdict);
        let pending = PendingRound {
            round: round.clone(),
            started: Instant::now(),
            timeout,
            nodes: Arc::from([Arc::from("fake:0")]),
            gate_until: Instant::now(),
        };
        let job = Job {
            req: Arc::new(req),
            index: 0,
            reply: Some(round),
        };
        (job, pending)
    }

    fn served(node: &FakeNode) -> Arc<Mutex<Served>> {
        Served::new(Arc::new(NodeShared::new("fake:0")), node.link())
    }

    /// A job queued before the caller's (the worker has not taken it yet)
    /// runs first: the caller queues behind it instead of running inline.
    #[test]
    fn a_caller_runs_inline_only_with_nothing_queued() {
        let node = FakeNode::new("fake:0");
        let served = served(&node);
        let (queued_behind, _) = job("a");
        assert!(Served::try_inline(&served, || false, queued_behind).is_some());
        assert!(node.received().is_empty(), "nothing ran");
        let (inline, pending) = job("b");
        assert!(Served::try_inline(&served, || true, inline).is_none());
        let by = Instant::now() + Duration::from_secs(5);
        assert_eq!(pending.collect(by).verdict, Verdict::Confirmed);
        assert_eq!(node.holder("b").as_deref(), Some("tok"));
    }

    /// The worker takes a queued job only once it holds the link: while a
    /// caller runs inline, the queue keeps what came after it, so a caller
    /// arriving next sees the queue non-empty and queues behind.
    #[test]
    fn the_worker_leaves_a_job_queued_while_the_link_is_in_use() {
        let node = FakeNode::new("fake:0");
        let served = served(&node);
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker = {
            let (served, rx) = (served.clone(), rx.clone());
            std::thread::spawn(move || Worker::new(served, rx, crossbeam_channel::never()).run())
        };
        let inline = served.lock();
        let (queued, pending) = job("a");
        tx.send(queued).unwrap();
        // No event says the worker is waiting for the lock: give it time
        // to take the job if it would.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rx.len(), 1, "still queued while the link is in use");
        drop(inline);
        let by = Instant::now() + Duration::from_secs(5);
        assert_eq!(pending.collect(by).verdict, Verdict::Confirmed);
        drop(tx);
        worker.join().unwrap();
    }
}
