//! The transport: per-node connection pools, per-node worker threads, and the
//! parallel fan-out of one request to every node.
//!
//! With several nodes a caller never talks to Redis itself: it puts one job
//! on every node's queue (never blocking: see `send`) and waits on the round
//! only until the outcome is decided or its deadline passes. A stalled node
//! therefore costs the caller nothing once a majority has answered, and jobs
//! for it expire in its queue instead of piling up. With a single node,
//! whose answer the caller needs whatever it is, a caller whose node is idle
//! runs the round on its own thread, bounded by the same per-node timeout
//! (see `worker.rs`).

mod connect;
#[cfg(test)]
pub(crate) mod fake;
mod protocol;
mod round;
mod trust;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, FailureKind, NodeFailure};
use crate::health::NodeHealth;
use crate::settings::Config;
pub(crate) use connect::cluster::ClusterSource;
use connect::cluster_link::ClusterLink;
use connect::cluster_opening::ClusterOpening;
use connect::conn::{FirstAnswer, NodeManager, NodeShared};
pub(crate) use connect::link::Link;
use connect::notify::Hub;
pub(crate) use connect::notify::{Sink, Watch};
use connect::opening::Answers;
use connect::redis_link::{Pools, RedisLink};
pub(crate) use connect::source::{SentinelSource, Source};
pub(crate) use protocol::inspect::OTHER_TYPE;
pub(crate) use protocol::keys::QUEUE_ALIVE;
#[cfg(test)]
pub(crate) use protocol::keys::fence_key;
pub(crate) use protocol::kind::{MAX_PERMITS, RESERVED, Role};
#[cfg(test)]
pub(crate) use protocol::kind::{elect_keys, slot_key};
pub(crate) use protocol::request::{Keys, Kind, Op, Request, Value};
pub(crate) use protocol::token::new as new_token;
use round::RoundShared;
pub(crate) use round::{GateAnswer, PendingRound};
pub(crate) use trust::OWN_KEYS;
use trust::admission::{Admission, Registry, Rules};
pub(crate) use trust::clock::Clocks;
use worker::{Job, Served, Worker};

/// What a majority of the nodes' measured round trips say; see
/// [`Transport::round_trips`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RoundTrips {
    /// What a request needs before it counts as unanswered.
    pub(crate) need: Duration,
    /// What a round takes at the least.
    pub(crate) least: Duration,
}

/// One node, parsed: where to connect and the name to log it by.
#[derive(Clone)]
pub(crate) struct NodeSpec {
    /// `host:port`, the socket path or `sentinel:{service}`: safe to log
    /// (no password, no URL).
    pub(crate) address: String,
    pub(crate) source: Source,
}

impl std::fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `ConnectionInfo`'s own Debug would print the password.
        f.debug_struct("NodeSpec")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

struct NodeHandle {
    shared: Arc<NodeShared>,
    /// Unbounded: `send` bounds what is not a clean-up by `capacity`.
    queue: Sender<Job>,
    capacity: usize,
    /// The node's link, which its worker uses (and, with a single node, a
    /// caller whose node is idle: see `worker.rs`).
    served: Arc<parking_lot::Mutex<Served>>,
    /// The transport's [`closing`](Transport::closing).
    closing: Arc<AtomicU8>,
}

/// A node [`Transport::start`] is opening: its pooled link, or a cluster
/// node's source and first answer.
type Opening = (
    Arc<NodeShared>,
    Result<RedisLink, (Arc<ClusterSource>, FirstAnswer)>,
);

/// A node opened, or a cluster node whose opening thread hands its link
/// over when done.
type Opened = Result<(Arc<NodeShared>, RedisLink), (Arc<NodeShared>, Receiver<ClusterLink>)>;

/// A node's link once the start waited for first answers, and what keeps
/// the node out for good.
struct OpenedLink {
    shared: Arc<NodeShared>,
    link: Box<dyn Link>,
    problems: Vec<String>,
}

/// What [`Transport::open_nodes`] leaves for the start, one entry per node.
struct Openings {
    /// A way to open a fresh connection for `verify` (none for a cluster).
    probes: Vec<Option<NodeManager>>,
    /// Whose first answer the start waits for.
    waited: Vec<(Arc<NodeShared>, FirstAnswer)>,
    opening: Vec<Opening>,
}

/// How long the nodes' round trips, once read, serve the calls that ask.
const ROUND_TRIPS_FRESH: Duration = Duration::from_millis(20);

/// Every request is queued.
const OPEN: u8 = 0;
/// Only clean-ups are queued (a shutdown has begun).
const CLEAN_UPS_ONLY: u8 = 1;
/// Nothing is queued (the workers stop).
const STOPPED: u8 = 2;

/// Every node's queue. Closing the transport (or dropping it) refuses new
/// jobs, and the workers stop once they have sent what was queued.
pub(crate) struct Transport {
    nodes: Vec<NodeHandle>,
    addresses: Arc<[Arc<str>]>,
    /// [`OPEN`], [`CLEAN_UPS_ONLY`] or [`STOPPED`]: which requests `send`
    /// still queues.
    closing: Arc<AtomicU8>,
    /// Dropped by [`stop`](Self::stop): tells the workers to drain their
    /// queues and stop.
    stop: parking_lot::Mutex<Option<Sender<()>>>,
    /// Disconnected once every worker has stopped.
    stopped: Receiver<()>,
    /// The last [`round_trips`](Self::round_trips) and when they were read:
    /// every call asks for them (the per-node timeout), and reading every
    /// node's estimate, health and admission each time measurably slowed
    /// a lock+release pair (S1 p50 196 → 206 µs).
    round_trips: parking_lot::Mutex<Option<(Instant, Option<RoundTrips>)>>,
    /// Wake-ups, subscribed while callers wait.
    hub: Hub,
    /// Which node is a resource's gate.
    gate_of: GateOf,
    /// This client's name in the gate nodes' queues (random).
    client_id: Arc<str>,
    /// Per node, a way to open a fresh connection for
    /// [`verify`](Self::verify) (none for fake nodes).
    probes: Vec<Option<NodeManager>>,
    /// Some node is a Redis Cluster (whose key layout refuses some names).
    clustered: bool,
    /// The nodes' clocks (see `clock.rs`).
    clocks: Arc<Clocks>,
}

/// Picks a resource's gate node: by a hash of its name (FNV-1a) among the
/// nodes in address order, so that clients listing the same nodes by the
/// same addresses, in any order, pick the same one.
#[derive(Debug, Clone)]
pub(crate) struct GateOf {
    by_address: Arc<[usize]>,
}

impl GateOf {
    fn new(addresses: &[Arc<str>]) -> Self {
        let mut by_address: Vec<usize> = (0..addresses.len()).collect();
        by_address.sort_by(|&a, &b| addresses[a].cmp(&addresses[b]));
        GateOf {
            by_address: by_address.into(),
        }
    }

    /// The gate node's index for `kind`.
    pub(crate) fn gate(&self, kind: &Kind) -> usize {
        self.gate_named(&kind.gate_name())
    }

    /// The gate node's index for the gate name `name` (see
    /// `Kind::gate_name`).
    fn gate_named(&self, name: &str) -> usize {
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let n = self.by_address.len().max(1) as u64;
        self.by_address
            .get(usize::try_from(hash % n).unwrap_or(0))
            .copied()
            .unwrap_or(0)
    }
}

/// How long dropping the transport waits for the workers to send what is
/// already queued (a release issued just before a program exits).
const DRAIN: Duration = Duration::from_secs(1);

impl Drop for Transport {
    /// Closes the transport, waiting at most [`DRAIN`]: a release whose
    /// majority answered is also delivered to the other nodes before a
    /// program that exits right after kills the threads.
    fn drop(&mut self) {
        self.stop(Instant::now() + DRAIN);
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.addresses.iter()).finish()
    }
}

impl Transport {
    /// Opens every node at once and starts one pool and one worker per
    /// node: each pool connects on a helper thread of its own, and a
    /// cluster node reads its map and opens its masters on a thread of its
    /// own, which hands its link over when done (`cluster_opening.rs`).
    /// Waits for the nodes' first answers only while they come (see
    /// `opening.rs`), then refuses a deployment mistake found on a node that
    /// answered.
    pub(crate) fn start(specs: Vec<NodeSpec>, settings: &Config) -> Result<Self, Error> {
        // rustls panics on the first TLS connection when no crypto provider
        // was chosen (or when two are compiled in); choose ring unless the
        // program already installed one.
        #[cfg(feature = "tls-rustls")]
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let subscribers = specs
            .iter()
            .map(|spec| Some((Arc::from(spec.address.as_str()), spec.source.clone())))
            .collect();
        let rules = Rules {
            quarantine: settings.restart_quarantine,
            allow_eviction: settings.allow_eviction,
            max_clock_offset: settings.max_clock_offset,
        };
        let registry = Registry::for_client(
            specs.iter().map(|s| s.address.as_str().into()).collect(),
            settings.drift_factor,
        );
        let clustered = specs
            .iter()
            .any(|spec| matches!(spec.source, Source::Cluster(_)));
        let pools = Pools {
            connect_timeout: settings.connect_timeout,
        };
        let answers = Answers::new();
        let Openings {
            probes,
            waited,
            opening,
        } = Self::open_nodes(specs, settings, rules, &registry, &pools, &answers);
        let opening = Self::open_clusters(opening, &pools, rules, &registry)?;
        let unknown = answers.wait(&waited, settings.connect_timeout);
        let opened = Self::opened_links(opening);
        // Its first answers are in: from now on a duplicate found is the
        // later one to reach its server.
        registry.started();
        Self::refuse_problems(&opened, unknown)?;
        if let Some(limits) = registry.clocks().limits() {
            log::warn!("redlock: {limits}");
        }
        let links = opened.into_iter().map(|node| (node.shared, node.link));
        let mut transport = Self::with_links(links, settings.queue_capacity)?;
        transport.probes = probes;
        transport.clustered = clustered;
        transport.clocks = registry.clocks().clone();
        if settings.notifications {
            transport.hub = Hub::new(subscribers, &transport.client_id, settings.connect_timeout);
        }
        Ok(transport)
    }

    /// Opens every node's pool at once (a cluster node is left to
    /// [`open_clusters`](Self::open_clusters)), each telling `answers` its
    /// first answer.
    fn open_nodes(
        specs: Vec<NodeSpec>,
        settings: &Config,
        rules: Rules,
        registry: &Arc<Registry>,
        pools: &Pools,
        answers: &Answers,
    ) -> Openings {
        let mut probes = Vec::with_capacity(specs.len());
        let mut waited = Vec::with_capacity(specs.len());
        let mut opening = Vec::with_capacity(specs.len());
        for (index, spec) in specs.into_iter().enumerate() {
            let admission = Admission::new(index, rules, registry.clone());
            let shared = Arc::new(NodeShared::admitted_by(&spec.address, admission));
            let manager =
                |source| NodeManager::new(source, settings.connect_timeout, shared.clone());
            match spec.source {
                // A cluster's masters are examined by its link, each on its
                // own connections.
                Source::Cluster(cluster) => {
                    probes.push(None);
                    let first = answers.first(index);
                    waited.push((shared.clone(), first.clone()));
                    opening.push((shared, Err((cluster, first))));
                }
                source => {
                    probes.push(Some(manager(source.clone())));
                    let first = answers.first(index);
                    let follow = source.is_sentinel().then(|| source.clone());
                    let manager = manager(source).telling(first.clone());
                    let link = pools.link(shared.clone(), manager, follow);
                    waited.push((shared.clone(), first));
                    opening.push((shared, Ok(link)));
                }
            }
        }
        Openings {
            probes,
            waited,
            opening,
        }
    }

    /// Opens every cluster node on a thread of its own, which hands the
    /// link over when done: not waited for beyond the others.
    fn open_clusters(
        opening: Vec<Opening>,
        pools: &Pools,
        rules: Rules,
        registry: &Arc<Registry>,
    ) -> Result<Vec<Opened>, Error> {
        let mut clusters = Vec::new();
        let opening: Vec<_> = opening
            .into_iter()
            .enumerate()
            .map(|(index, (shared, link))| match link {
                Ok(link) => Ok((shared, link)),
                Err((cluster, first)) => {
                    let (pools, registry) = (pools.clone(), registry.clone());
                    let (hand_over, handed) = crossbeam_channel::bounded(1);
                    let opener = shared.clone();
                    clusters.push(
                        std::thread::Builder::new()
                            .name(format!("redlock-open-{index}"))
                            .spawn(move || {
                                let link = ClusterLink::open(
                                    opener.clone(),
                                    cluster,
                                    pools,
                                    rules,
                                    registry,
                                );
                                let opened = link.opened();
                                let _ = hand_over.send(link);
                                // The start gave up on it and marked it down
                                // meanwhile: it is reachable after all.
                                if !first.tell(|| None) && opened {
                                    opener.mark_up();
                                }
                            }),
                    );
                    Err((shared, handed))
                }
            })
            .collect();
        if let Some(Err(e)) = clusters.into_iter().find(Result::is_err) {
            return Err(Error::System {
                reason: format!("could not start a thread to open a cluster node: {e}"),
            });
        }
        Ok(opening)
    }

    /// Every node's link once the first answers were awaited, with what
    /// keeps it out for good; a cluster node still opening answers as
    /// connecting until its link is handed over.
    fn opened_links(opening: Vec<Opened>) -> Vec<OpenedLink> {
        opening
            .into_iter()
            .map(|node| match node {
                Ok((shared, link)) => {
                    let problem = shared.admission.permanent_problem();
                    OpenedLink {
                        shared,
                        link: Box::new(link),
                        problems: Vec::from_iter(problem),
                    }
                }
                Err((shared, handed)) => match handed.try_recv() {
                    Ok(link) => {
                        let problems = link.problems();
                        OpenedLink {
                            shared,
                            link: Box::new(link),
                            problems,
                        }
                    }
                    Err(_) => {
                        let address = shared.address.clone();
                        let link = ClusterOpening::new(address, handed);
                        OpenedLink {
                            shared,
                            link: Box::new(link),
                            problems: Vec::new(),
                        }
                    }
                },
            })
            .collect()
    }

    /// Refuses the start when a node answered with a mistake in the
    /// deployment or the node list (or a Sentinel service is unknown):
    /// said now, not at the first lock.
    fn refuse_problems(opened: &[OpenedLink], unknown: Vec<String>) -> Result<(), Error> {
        let problems: Vec<String> = opened
            .iter()
            .flat_map(|node| node.problems.iter().cloned())
            .chain(unknown)
            .collect();
        if !problems.is_empty() {
            return Err(Error::config(format!(
                "{}; Redlock::verify lists every node's admission",
                problems.join("; ")
            )));
        }
        Ok(())
    }

    /// Starts one worker per link. The seam: tests pass fake nodes here.
    pub(crate) fn with_links(
        links: impl IntoIterator<Item = (Arc<NodeShared>, Box<dyn Link>)>,
        queue_capacity: usize,
    ) -> Result<Self, Error> {
        let mut nodes = Vec::new();
        let (running, stopped) = crossbeam_channel::bounded::<()>(0);
        let (stop, stopping) = crossbeam_channel::bounded::<()>(0);
        let closing = Arc::new(AtomicU8::new(OPEN));
        for (index, (shared, link)) in links.into_iter().enumerate() {
            let (queue, jobs) = crossbeam_channel::unbounded();
            let served = Served::new(shared.clone(), link);
            let worker = Worker::new(served.clone(), jobs, stopping.clone());
            let running = running.clone();
            std::thread::Builder::new()
                .name(format!("redlock-node-{index}"))
                .spawn(move || {
                    worker.run();
                    drop(running);
                })
                .map_err(|e| Error::System {
                    reason: format!("could not start a worker thread: {e}"),
                })?;
            nodes.push(NodeHandle {
                shared,
                queue,
                capacity: queue_capacity,
                served,
                closing: closing.clone(),
            });
        }
        let addresses: Arc<[Arc<str>]> = nodes.iter().map(|n| n.shared.address.clone()).collect();
        let gate_of = GateOf::new(&addresses);
        let client_id: Arc<str> = Arc::from(format!("{:016x}", rand::random::<u64>()).as_str());
        let hub = Hub::new(vec![None; nodes.len()], &client_id, Duration::from_secs(1));
        let clocks = Arc::new(Clocks::new(nodes.len(), 0.01));
        Ok(Transport {
            nodes,
            addresses,
            closing,
            stop: parking_lot::Mutex::new(Some(stop)),
            round_trips: parking_lot::Mutex::new(None),
            stopped,
            hub,
            gate_of,
            client_id,
            probes: Vec::new(),
            clustered: false,
            clocks,
        })
    }

    /// The nodes' measured round trips (see `rtt.rs`), as a majority
    /// sees them: among the nodes whose round trips count (see
    /// `NodeShared::times_rounds`), the quorum-th smallest need (for the
    /// per-node timeout) and the quorum-th smallest least round trip (no
    /// round is decided sooner) — or, when fewer were measured, the
    /// largest. A stalled or distant minority does not count. `None` before
    /// any node was measured.
    pub(crate) fn round_trips(&self) -> Option<RoundTrips> {
        let now = Instant::now();
        if let Some((at, trips)) = *self.round_trips.lock()
            && now.saturating_duration_since(at) < ROUND_TRIPS_FRESH
        {
            return trips;
        }
        // Measured with no lock held: asking whether a node's round trips
        // count may log news of it. Two callers may both measure.
        let trips = self.measure_round_trips();
        *self.round_trips.lock() = Some((now, trips));
        trips
    }

    /// [`round_trips`](Self::round_trips), read from every node now.
    fn measure_round_trips(&self) -> Option<RoundTrips> {
        let measured: Vec<_> = self
            .nodes
            .iter()
            .filter(|node| node.shared.times_rounds())
            .map(|node| node.shared.round_trip())
            .collect();
        let quorum = crate::algorithm::quorum(self.nodes.len());
        let nth = |mut values: Vec<Duration>| {
            values.sort_unstable();
            values
                .get(quorum.min(values.len()).checked_sub(1)?)
                .copied()
        };
        Some(RoundTrips {
            need: nth(measured.iter().filter_map(|m| m.need()).collect())?,
            least: nth(measured.iter().filter_map(|m| m.least()).collect())?,
        })
    }

    /// From now on only clean-ups (releases, leaves, resignations) are
    /// queued: the calls under way at a shutdown can still clean up.
    pub(crate) fn refuse_all_but_clean_ups(&self) {
        let _ =
            self.closing
                .compare_exchange(OPEN, CLEAN_UPS_ONLY, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Refuses every request from now on, stops the subscribers and the
    /// Sentinel lookups, and tells the workers to send what is queued and
    /// stop; waits until they have, or `until`: whether they have. The
    /// connections close as each worker stops. Stopping twice only waits
    /// again.
    pub(crate) fn stop(&self, until: Instant) -> bool {
        self.closing.store(STOPPED, Ordering::SeqCst);
        drop(self.stop.lock().take());
        self.hub.stop();
        for probe in self.probes.iter().flatten() {
            probe.close();
        }
        matches!(
            self.stopped.recv_deadline(until),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        )
    }

    /// Contacts every node now, in parallel (each within the connect
    /// timeout), on a fresh connection that asks it what it is, and returns
    /// every node's health with its admission as of that answer. A cluster
    /// node's masters are shown as their connections last examined them
    /// (on connecting, and every few seconds while requests go to them).
    pub(crate) fn verify(&self) -> Vec<NodeHealth> {
        let probed: Vec<Option<NodeFailure>> = std::thread::scope(|scope| {
            let probing: Vec<_> = self
                .probes
                .iter()
                .map(|probe| scope.spawn(move || probe.as_ref().and_then(NodeManager::probe)))
                .collect();
            probing
                .into_iter()
                .map(|h| h.join().ok().flatten())
                .collect()
        });
        let mut health = self.health();
        for (node, failure) in health.iter_mut().zip(probed) {
            if let Some(failure) = failure {
                *node = node.clone().with_refusal(Some(failure));
            }
        }
        health
    }

    /// Where wake-ups go (set once, by the core).
    pub(crate) fn set_sink(&self, sink: std::sync::Weak<dyn Sink>) {
        self.hub.set_sink(sink);
    }

    /// The nodes' clocks: what leases lost to jumps, and news of them.
    pub(crate) fn clocks(&self) -> &Arc<Clocks> {
        &self.clocks
    }

    /// This client's name in the gate nodes' queues of waiters.
    pub(crate) fn client_id(&self) -> &Arc<str> {
        &self.client_id
    }

    /// Listens for wake-ups on every node while the [`Watch`] lives. No
    /// connection or thread exists before the first watch.
    pub(crate) fn watch(&self) -> Watch {
        self.hub.watch()
    }

    /// Why what `kind` asks for cannot be used on these nodes: one of its
    /// names (a resource's, a semaphore's, a reader-writer lock's or an
    /// election's) that a cluster node cannot keep in one hash slot.
    pub(crate) fn key_problem(&self, kind: &Kind) -> Option<String> {
        if !self.clustered {
            return None;
        }
        kind.names().find_map(protocol::keys::Layout::problem)
    }

    /// The index of `kind`'s gate node.
    pub(crate) fn gate_index(&self, kind: &Kind) -> usize {
        self.gate_of.gate(kind)
    }

    /// The index of the gate node of the gate name `name` (a lock's first
    /// key, `redlock-sem:s`, `redlock-rw:l`, an election's lock key).
    #[cfg(test)]
    pub(crate) fn gate_of_name(&self, name: &str) -> usize {
        self.gate_of.gate_named(name)
    }

    /// The notification hub, for tests that play a node's part.
    #[cfg(test)]
    pub(crate) fn hub(&self) -> &Hub {
        &self.hub
    }

    /// How many requests wait in node `index`'s queue now.
    #[cfg(test)]
    pub(crate) fn queued(&self, index: usize) -> usize {
        self.nodes[index].queue.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Every node's health, in the order the nodes were given.
    pub(crate) fn health(&self) -> Vec<NodeHealth> {
        self.nodes.iter().map(|n| n.shared.health()).collect()
    }

    /// Sends `req` to every node; collect the answers with
    /// [`PendingRound::collect`], at once: with a single node, an idle
    /// node's round runs on the caller's thread before this returns (see
    /// `worker.rs`).
    ///
    /// A request that takes part in a queue of waiters goes so to the
    /// first key's gate node only (and the round keeps that node's vote,
    /// see [`PendingRound::collect_with_gate`]); the others get the plain
    /// command.
    pub(crate) fn start_round(&self, req: Request) -> PendingRound {
        self.start_with(req, true)
    }

    /// Like [`start_round`](Self::start_round), but never runs on the
    /// caller's thread: for a caller that starts many rounds before it
    /// collects any (the keeper's renewals), which a single node then
    /// pipelines instead of serving one by one.
    pub(crate) fn start_queued_round(&self, req: Request) -> PendingRound {
        self.start_with(req, false)
    }

    /// A lease's release ([`start_round`](Self::start_round), or with
    /// `queued` [`start_queued_round`](Self::start_queued_round)), sent to
    /// every node but those in `unsent`, which its acquisition never left
    /// the client for: they hold nothing of it, and each counts as a node
    /// that could not confirm.
    pub(crate) fn start_release(
        &self,
        req: Request,
        queued: bool,
        unsent: &[usize],
    ) -> PendingRound {
        let unsent = self.skippable(&req, unsent);
        let pending = self.start_skipping(req, !queued, &unsent);
        for &index in &unsent {
            pending.round.record(
                index,
                Err(NodeFailure::new(
                    self.nodes[index].shared.address.clone(),
                    FailureKind::Overloaded,
                    "not sent: the acquisition never reached this node (its queue was full), so \
                     nothing of the lock is there",
                )),
            );
        }
        pending
    }

    fn start_with(&self, req: Request, inline: bool) -> PendingRound {
        self.start_skipping(req, inline, &[])
    }

    /// Of `unsent`, the nodes `req` (a release) may skip: all but the gate
    /// node when it wakes a queue of waiters there (the key is free there:
    /// the head of the queue must hear it).
    fn skippable(&self, req: &Request, unsent: &[usize]) -> Vec<usize> {
        // Nearly always: every node took the acquisition. No gate lookup on
        // the release path then.
        if unsent.is_empty() {
            return Vec::new();
        }
        let gate = req.queue.as_ref().map(|_| self.gate_of.gate(&req.kind));
        unsent
            .iter()
            .copied()
            .filter(|&i| Some(i) != gate)
            .collect()
    }

    fn start_skipping(&self, req: Request, inline: bool, skip: &[usize]) -> PendingRound {
        let round = RoundShared::new(self.nodes.len(), req.op.decides());
        let timeout = req.timeout;
        let (gate, plain) = self.split(req);
        // Before the fan-out, which may run a single node's round.
        let started = Instant::now();
        if let Some((index, at_gate)) = &gate {
            round.gate_on(*index);
            self.fan_out(at_gate, &round, inline, |i| {
                i == *index && !skip.contains(&i)
            });
        }
        let gate = gate.as_ref().map(|(index, _)| *index);
        self.fan_out(&plain, &round, inline, |i| {
            Some(i) != gate && !skip.contains(&i)
        });
        PendingRound {
            round,
            started,
            timeout,
            nodes: self.addresses.clone(),
            gate_until: started,
        }
    }

    /// Like [`start_gated_round`](Self::start_gated_round), but sends to
    /// every node at once, for a waiter its gate node just called (its turn
    /// came: the resource is free there and it heads the queue). It saves
    /// the round trip to the gate node alone on every hand-off. The gate
    /// node's vote is still awaited ([`GateAnswer::settled`]) until `by`,
    /// as in a gated round, so a refusal there (someone queued first after
    /// all) still outweighs the other nodes.
    pub(crate) fn start_called_round(&self, req: Request, by: Instant) -> PendingRound {
        let gate = self.gate_of.gate(&req.kind);
        let counts = self.nodes[gate].shared.gate_wait().is_some();
        let mut pending = self.start_round(req);
        if counts {
            pending.gate_until = by;
        }
        pending
    }

    /// Like [`start_round`](Self::start_round), but asks one node first —
    /// the same node for a resource in every client that lists the nodes by
    /// the same addresses (see [`GateOf`]) — and the others once it granted,
    /// failed, or did not answer within a few of its usual round trips (and
    /// never later than a quarter of the round's time to `by`). `None` when
    /// that node refused because others queued first, or refused a caller
    /// that does not wait in the queue; nothing was set anywhere. The first
    /// waiter in line, refused only because the key is held there, goes on
    /// to the others: that node's no is one among N, and a key left behind
    /// on it alone (a release that timed out there) must not stop the
    /// queue.
    ///
    /// Its vote counts whenever it comes before `by`, also after the
    /// others were asked ([`GateAnswer::settled`] waits for it): a gate
    /// node slower than its usual round trips but within `by` costs the
    /// caller time, not its place; a slower one is not counted. (Its vote counted
    /// only within the wait, so a waiter behind the head whose gate node
    /// was slow took the resource from the others ahead of the head.)
    ///
    /// For clients woken together by one release: instead of splitting the
    /// nodes among themselves so that none wins a majority, all but one
    /// stop at the first node. A node that is down or failing is never a
    /// gate (the round goes to every node at once).
    pub(crate) fn start_gated_round(&self, req: Request, by: Instant) -> Option<PendingRound> {
        let gate = self.gate_of.gate(&req.kind);
        let Some(wait) = self.nodes[gate].shared.gate_wait() else {
            return Some(self.start_round(req));
        };
        let round = RoundShared::new(self.nodes.len(), req.op.decides());
        round.gate_on(gate);
        let timeout = req.timeout;
        let (at_gate, plain) = self.split(req);
        let at_gate = at_gate.map_or_else(|| plain.clone(), |(_, req)| req);
        let queued = at_gate
            .queue
            .as_ref()
            .is_some_and(|member| !member.is_empty());
        let started = Instant::now();
        self.fan_out(&at_gate, &round, true, |index| index == gate);
        let quarter = by.saturating_duration_since(started) / 4;
        match round.gate_vote(started + wait.min(quarter)) {
            // A stale fencing token goes on to the others like the first in
            // line: their answers tell the caller which token to propose.
            Some(vote) if !vote.yes && vote.fence.is_none() && (vote.queued || !queued) => {
                return None;
            }
            _ => {}
        }
        self.fan_out(&plain, &round, true, |index| index != gate);
        Some(PendingRound {
            round,
            started,
            timeout,
            nodes: self.addresses.clone(),
            gate_until: by,
        })
    }

    /// Queues `req` on every node `which` selects, answers going to `round`.
    /// With `inline`, a single node's round runs on the caller's thread
    /// while the node is idle (see `worker.rs`).
    fn fan_out(
        &self,
        req: &Arc<Request>,
        round: &Arc<RoundShared>,
        inline: bool,
        which: impl Fn(usize) -> bool,
    ) {
        let single = inline && self.nodes.len() == 1 && self.closing.load(Ordering::SeqCst) == OPEN;
        for (index, node) in self.nodes.iter().enumerate().filter(|(i, _)| which(*i)) {
            let job = Job {
                req: req.clone(),
                index,
                reply: Some(round.clone()),
            };
            let job = if single {
                match Served::try_inline(&node.served, || node.queue.is_empty(), job) {
                    Some(job) => job,
                    None => continue,
                }
            } else {
                job
            };
            if let Err(failure) = send(node, job) {
                node.shared.note_failure(&failure);
                round.unsent(index, failure);
            }
        }
    }

    /// The gate node's copy of `req` (if it takes part in a queue), and the
    /// plain one for the other nodes.
    fn split(&self, req: Request) -> (Option<(usize, Arc<Request>)>, Arc<Request>) {
        match &req.queue {
            Some(_) => {
                let gate = self.gate_of.gate(&req.kind);
                let mut plain = req.clone();
                plain.queue = None;
                (Some((gate, Arc::new(req))), Arc::new(plain))
            }
            None => (None, Arc::new(req)),
        }
    }

    /// Sends `req` to every node but those in `skip` (never the gate node
    /// of a release that wakes a queue there; a [`Op::Leave`] to the gate
    /// node only) without waiting for any answer.
    pub(crate) fn broadcast(&self, req: Request, skip: &[usize]) {
        let mut req = req;
        req.awaited = false;
        let skip = self.skippable(&req, skip);
        let leave = req.op == Op::Leave;
        let (gate, plain) = self.split(req);
        for (index, node) in self.nodes.iter().enumerate() {
            if skip.contains(&index) {
                continue;
            }
            let req = match &gate {
                Some((g, at_gate)) if *g == index => at_gate,
                _ if leave => continue,
                _ => &plain,
            };
            if let Err(failure) = enqueue(node, req, index, None) {
                log::warn!(
                    "redlock: could not queue {:?} {:?}: {failure}",
                    req.op,
                    req.keys()
                );
            }
        }
    }
}

fn enqueue(
    node: &NodeHandle,
    req: &Arc<Request>,
    index: usize,
    reply: Option<Arc<RoundShared>>,
) -> Result<(), NodeFailure> {
    send(
        node,
        Job {
            req: req.clone(),
            index,
            reply,
        },
    )
}

/// Queues `job` on `node`: refused as `Overloaded` when the queue holds
/// its capacity already — unless it cleans up (a release, a leave, a
/// resignation), which is always queued: a full queue must not leave a
/// key or a queue entry behind until it expires. Beyond the capacity,
/// clean-ups come only for acquisitions queued below it (a failed round,
/// and a lease's release, skip the nodes whose queue refused the
/// acquisition), so a node slower than the rounds holds at most its
/// capacity plus about two requests per caller racing at its edge (the
/// check and the send are not atomic); and at the latest each is dropped
/// at its `expires` (its keys gone by their TTL). Leaves are not bounded
/// so: one per waiter that gives up, at most.
fn send(node: &NodeHandle, job: Job) -> Result<(), NodeFailure> {
    let address = || node.shared.address.clone();
    let closing = node.closing.load(Ordering::SeqCst);
    if closing == STOPPED || (closing == CLEAN_UPS_ONLY && !job.req.op.cleans_up()) {
        return Err(NodeFailure::new(
            address(),
            FailureKind::Connection,
            "the client was shut down (Redlock::shutdown)",
        ));
    }
    if !job.req.op.cleans_up() && node.queue.len() >= node.capacity {
        return Err(NodeFailure::new(
            address(),
            FailureKind::Overloaded,
            "request queue full; the node is slower than the load (raise \
             RedlockBuilder::queue_capacity only if bursts are expected)",
        ));
    }
    node.queue
        .send(job)
        .map_err(|_| NodeFailure::new(address(), FailureKind::Connection, "worker stopped"))
}
