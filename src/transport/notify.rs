//! Release notifications: at most one subscriber connection per node,
//! opened when a caller first waits and shared by every resource waited on.
//!
//! A release publishes a notice on `redlock-release:{resource}` on every node
//! where it deleted the key (see `codec.rs`). While a caller waits for a
//! resource it holds a [`Watch`]; each node's subscriber thread keeps that
//! resource's channel subscribed and hands every notice it reads to the
//! [`Sink`] (the core's waiters), so that a waiter in this client is woken by
//! a release in any other client. Notifications only shorten waits: every
//! acquisition still needs `SET NX` on a majority.
//!
//! # Threads and shared state
//!
//! [`Inner::state`] is one mutex, never held across I/O or while calling the
//! sink. It is touched by
//! * callers: [`Hub::watch`] (adds a watcher, starts missing subscriber
//!   threads) and dropping a [`Watch`] (the channel lingers for [`LINGER`]
//!   so that a waiter that comes back soon finds it subscribed);
//! * one subscriber thread per node: every [`POLL`] it reconciles its
//!   subscriptions with the watched set, records acknowledgements, and
//!   stops, under the same lock that [`Hub::watch`] reads the running flag
//!   under, once nothing was watched for [`IDLE`];
//! * dropping the transport: sets `stopping` (threads end within a poll).
//!
//! A channel counts as heard once a majority of nodes acknowledged the
//! subscription: the sink is told ([`Sink::listening`]) so that the waiter
//! tries one more round, which catches a release that happened between its
//! busy round and the subscription. A node whose subscriber connection
//! drops loses its acknowledgements; crossing the majority again tells the
//! sink again. A dead or paused node only delays its own thread.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::codec::{CHANNEL_PREFIX, channel};

/// Where notices go.
pub(crate) trait Sink: Send + Sync {
    /// A node announced a release of `key`; `notice` is the same on every
    /// node for one release. `gate`: that node is the resource's gate node
    /// (see `Transport::start_gated_round`), so a woken round can pass it.
    /// `listeners`: how many clients listened on that node when it
    /// announced the release (0: unknown).
    fn released(&self, key: &str, notice: u64, gate: bool, listeners: u32);
    /// A majority of nodes now delivers `key`'s releases.
    fn listening(&self, key: &str);
}

/// How often a subscriber thread looks for channels to (un)subscribe.
const POLL: Duration = Duration::from_millis(10);
/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_millis(50);
/// How long a subscriber connection stays open with no channel.
const IDLE: Duration = Duration::from_secs(2);
/// Pause between connection attempts to a node that is down.
const BACKOFF: Duration = Duration::from_millis(500);
/// Pause before asking again a node whose ACL refused the subscription.
const DENIED_BACKOFF: Duration = Duration::from_secs(30);
/// Subscribed first on every subscriber connection: the server's answer
/// tells whether the ACL allows the release channels at all (redis-rs does
/// not report a refused `SUBSCRIBE`). It is the channel of the empty
/// resource name, which no lock has, so nothing is ever published there.
const PROBE: &str = CHANNEL_PREFIX;

/// The client's subscriptions. Dropping it stops the subscriber threads.
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Per node: where to subscribe (`None`: a fake node in unit tests).
    nodes: Vec<Option<(Arc<str>, redis::Client)>>,
    /// Which node is a key's gate.
    gate_of: super::GateOf,
    connect_timeout: Duration,
    quorum: usize,
    sink: OnceLock<Weak<dyn Sink>>,
    state: Mutex<State>,
    /// Bumped whenever a key is added or removed (under the state lock).
    generation: AtomicU64,
    /// Set when the hub is dropped: threads stop within a poll.
    stopped: AtomicBool,
    /// Wakes threads pausing between connection attempts.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    keys: HashMap<Arc<str>, Entry>,
    /// Per node: whether its subscriber thread runs.
    running: Vec<bool>,
    /// Per node: whether a refused subscription was warned about.
    warned: Vec<bool>,
    stopping: bool,
}

struct Entry {
    /// Callers waiting for the key now.
    watchers: usize,
    /// When the last watcher left.
    idle_since: Option<Instant>,
    /// Per node: subscription acknowledged on the current connection.
    acked: Vec<bool>,
    /// The sink was told that a majority listens (reset below a majority).
    heard: bool,
}

/// A caller's interest in one key's releases; dropping it lets the channel
/// go after [`LINGER`].
pub(crate) struct Watch {
    inner: Arc<Inner>,
    key: Arc<str>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock();
        if let Some(entry) = state.keys.get_mut(&self.key) {
            entry.watchers = entry.watchers.saturating_sub(1);
            if entry.watchers == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("Hub")
            .field("keys", &state.keys.len())
            .field("running", &state.running)
            .finish()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.inner.state.lock().stopping = true;
        self.inner.stopped.store(true, Ordering::Release);
        self.inner.changed.notify_all();
    }
}

impl Hub {
    /// A hub over these nodes (`None` for a node it cannot subscribe to).
    pub(crate) fn new(
        nodes: Vec<Option<(Arc<str>, redis::Client)>>,
        gate_of: super::GateOf,
        connect_timeout: Duration,
    ) -> Self {
        let count = nodes.len();
        Hub {
            inner: Arc::new(Inner {
                quorum: crate::algorithm::quorum(count),
                nodes,
                gate_of,
                connect_timeout,
                sink: OnceLock::new(),
                state: Mutex::new(State {
                    running: vec![false; count],
                    warned: vec![false; count],
                    ..State::default()
                }),
                generation: AtomicU64::new(0),
                stopped: AtomicBool::new(false),
                changed: Condvar::new(),
            }),
        }
    }

    /// Sets where notices go (once; later calls are ignored).
    pub(crate) fn set_sink(&self, sink: Weak<dyn Sink>) {
        let _ = self.inner.sink.set(sink);
    }

    /// Subscribes to `key`'s releases on every node (in the background)
    /// for as long as the returned [`Watch`] lives.
    pub(crate) fn watch(&self, key: &Arc<str>) -> Watch {
        let mut start = Vec::new();
        {
            let mut state = self.inner.state.lock();
            let nodes = self.inner.nodes.len();
            let state = &mut *state;
            let entry = state.keys.entry(key.clone()).or_insert_with(|| Entry {
                watchers: 0,
                idle_since: None,
                acked: vec![false; nodes],
                heard: false,
            });
            if entry.watchers == 0 && entry.idle_since.is_none() {
                self.inner.generation.fetch_add(1, Ordering::AcqRel);
            }
            entry.watchers += 1;
            entry.idle_since = None;
            for (index, node) in self.inner.nodes.iter().enumerate() {
                if node.is_some() && !state.running[index] && !state.stopping {
                    state.running[index] = true;
                    start.push(index);
                }
            }
        }
        for index in start {
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("redlock-notify-{index}"))
                .spawn(move || subscriber(&inner, index));
            if let Err(err) = spawned {
                log::warn!("redlock: could not start a subscriber thread: {err}");
                self.inner.state.lock().running[index] = false;
            }
        }
        Watch {
            inner: self.inner.clone(),
            key: key.clone(),
        }
    }

    /// Whether this client's subscription to `key` is acknowledged on any
    /// node (its own subscriber then counts among a release's listeners).
    pub(crate) fn subscribed(&self, key: &str) -> bool {
        self.inner
            .state
            .lock()
            .keys
            .get(key)
            .is_some_and(|entry| entry.acked.iter().any(|&a| a))
    }

    /// Whether `key` has a watcher now.
    #[cfg(test)]
    pub(crate) fn watched(&self, key: &str) -> bool {
        self.inner
            .state
            .lock()
            .keys
            .get(key)
            .is_some_and(|entry| entry.watchers > 0)
    }

    /// As if node `index` acknowledged `key`'s subscription.
    #[cfg(test)]
    pub(crate) fn fake_ack(&self, key: &str, index: usize) {
        self.inner.acked(key, index);
    }

    /// As if node `index` delivered a release notice for `key`.
    #[cfg(test)]
    pub(crate) fn fake_notice(&self, key: &str, notice: u64, index: usize) {
        if let Some(sink) = self.inner.sink() {
            sink.released(key, notice, self.inner.gate_of.gate(key) == index, 0);
        }
    }
}

/// What a subscriber thread should do next.
enum Plan {
    Stop,
    Change {
        subscribe: Vec<Arc<str>>,
        unsubscribe: Vec<Arc<str>>,
        /// Subscribed here, but the hub's entry was made anew since (the
        /// key lingered out and came back): acknowledge it again.
        reacknowledge: Vec<Arc<str>>,
    },
}

/// Drops the keys nobody has watched for [`LINGER`] (a new generation if
/// any went).
fn prune(state: &mut State, generation: &AtomicU64, now: Instant) {
    let before = state.keys.len();
    state
        .keys
        .retain(|_, entry| entry.watchers > 0 || entry.idle_since.is_none_or(|t| now - t < LINGER));
    if state.keys.len() != before {
        generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whether a majority of the nodes acknowledged `entry`'s subscription.
fn majority_acked(entry: &Entry, quorum: usize) -> bool {
    entry.acked.iter().filter(|&&a| a).count() >= quorum
}

/// Node `index` no longer delivers anything: clears its acknowledgements.
fn forget_node(state: &mut State, index: usize, quorum: usize) {
    for entry in state.keys.values_mut() {
        if let Some(acked) = entry.acked.get_mut(index) {
            *acked = false;
        }
        if !majority_acked(entry, quorum) {
            entry.heard = false;
        }
    }
}

impl Inner {
    fn sink(&self) -> Option<Arc<dyn Sink>> {
        self.sink.get().and_then(Weak::upgrade)
    }

    /// Node `index` acknowledged `key`: tells the sink when that makes a
    /// majority.
    fn acked(&self, key: &str, index: usize) {
        let newly_heard = {
            let mut state = self.state.lock();
            let Some(entry) = state.keys.get_mut(key) else {
                return;
            };
            if let Some(acked) = entry.acked.get_mut(index) {
                *acked = true;
            }
            let newly = majority_acked(entry, self.quorum) && !entry.heard;
            entry.heard |= newly;
            newly
        };
        if newly_heard && let Some(sink) = self.sink() {
            sink.listening(key);
        }
    }

    /// Node `index`'s subscriber connection is gone.
    fn forget(&self, index: usize) {
        forget_node(&mut self.state.lock(), index, self.quorum);
    }

    /// Marks node `index`'s thread stopped (forgetting what it delivered,
    /// under the same lock, so a successor's acknowledgements are safe).
    fn stop(&self, state: &mut State, index: usize) -> Plan {
        forget_node(state, index, self.quorum);
        state.running[index] = false;
        Plan::Stop
    }

    /// Compares what node `index` is subscribed to with what is watched;
    /// drops keys that lingered long enough. `Stop` (and marks the thread
    /// stopped) when the hub is dropped, or nothing was watched for
    /// [`IDLE`] since `empty_since`.
    fn plan(
        &self,
        index: usize,
        subscribed: &HashSet<Arc<str>>,
        empty_since: &mut Option<Instant>,
    ) -> Plan {
        let now = Instant::now();
        let mut state = self.state.lock();
        if state.stopping {
            return self.stop(&mut state, index);
        }
        prune(&mut state, &self.generation, now);
        if state.keys.is_empty() && subscribed.is_empty() {
            let since = *empty_since.get_or_insert(now);
            if now - since >= IDLE {
                return self.stop(&mut state, index);
            }
        } else {
            *empty_since = None;
        }
        let reacknowledge = subscribed
            .iter()
            .filter(|key| {
                state
                    .keys
                    .get(*key)
                    .is_some_and(|entry| !entry.acked.get(index).copied().unwrap_or(true))
            })
            .cloned()
            .collect();
        let subscribe = state
            .keys
            .keys()
            .filter(|key| !subscribed.contains(*key))
            .cloned()
            .collect();
        let unsubscribe = subscribed
            .iter()
            .filter(|key| !state.keys.contains_key(*key))
            .cloned()
            .collect();
        Plan::Change {
            subscribe,
            unsubscribe,
            reacknowledge,
        }
    }

    /// Pauses a thread whose node is down (or refused it): `pause`, or
    /// less if the hub is dropped; keys stop lingering meanwhile. Whether
    /// the thread should stop: the hub is dropped, or nothing is watched.
    fn backoff(&self, index: usize, pause: Duration) -> bool {
        let mut state = self.state.lock();
        if !state.stopping {
            let _ = self.changed.wait_for(&mut state, pause);
        }
        prune(&mut state, &self.generation, Instant::now());
        if state.stopping || state.keys.is_empty() {
            self.stop(&mut state, index);
            return true;
        }
        false
    }

    /// Warns once per node that its ACL refuses the release channels.
    fn refused(&self, index: usize, address: &str, err: &redis::RedisError) {
        let first = !std::mem::replace(&mut self.state.lock().warned[index], true);
        if first {
            log::warn!(
                "redlock: node {address} refuses to subscribe to release notifications \
                 ({}); waiters retry after their retry delay. Grant the ACL user \
                 `+subscribe +unsubscribe +punsubscribe &redlock-release:*`, or set \
                 RedlockBuilder::release_notifications(false)",
                err.code().unwrap_or("error")
            );
        }
    }
}

/// Node `index`'s subscriber thread: connects, keeps the watched channels
/// subscribed, hands notices to the sink, reconnects after a failure.
fn subscriber(inner: &Inner, index: usize) {
    let Some((address, client)) = inner.nodes[index].clone() else {
        inner.state.lock().running[index] = false;
        return;
    };
    loop {
        let mut pause = BACKOFF;
        let result = client
            .get_connection_with_timeout(inner.connect_timeout)
            .and_then(|mut conn| {
                conn.set_read_timeout(Some(inner.connect_timeout))?;
                // Under RESP3 the acknowledgement is a push, which a plain
                // command never reads: no probe (and no refusal detected).
                let resp3 = client
                    .get_connection_info()
                    .redis_settings()
                    .protocol()
                    .supports_resp3();
                let probe = if resp3 {
                    Ok(())
                } else {
                    redis::cmd("SUBSCRIBE").arg(PROBE).exec(&mut conn)
                };
                match probe {
                    Err(err)
                        if err.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) =>
                    {
                        inner.refused(index, &address, &err);
                        pause = DENIED_BACKOFF;
                        return Err(err);
                    }
                    other => other?,
                }
                listen(inner, index, &mut conn)
            });
        match result {
            // Stopped (acknowledgements already forgotten).
            Ok(()) => return,
            Err(err) => {
                inner.forget(index);
                // Never the URL: the address carries no password.
                log::debug!("redlock: release notifications from {address}: {err}");
                if inner.backoff(index, pause) {
                    return;
                }
            }
        }
    }
}

/// Serves one subscriber connection until told to stop (`Ok`) or it fails.
fn listen(inner: &Inner, index: usize, conn: &mut redis::Connection) -> redis::RedisResult<()> {
    let mut pubsub = conn.as_pubsub();
    let mut subscribed: HashSet<Arc<str>> = HashSet::new();
    let mut empty_since = None;
    let mut seen = u64::MAX;
    let mut last_plan = Instant::now();
    let mut polling = false;
    loop {
        if inner.stopped.load(Ordering::Acquire) {
            inner.stop(&mut inner.state.lock(), index);
            return Ok(());
        }
        let generation = inner.generation.load(Ordering::Acquire);
        if generation != seen || last_plan.elapsed() >= LINGER / 2 {
            seen = generation;
            last_plan = Instant::now();
            match inner.plan(index, &subscribed, &mut empty_since) {
                Plan::Stop => return Ok(()),
                Plan::Change {
                    subscribe,
                    unsubscribe,
                    reacknowledge,
                } => {
                    for key in reacknowledge {
                        inner.acked(&key, index);
                    }
                    if !subscribe.is_empty() || !unsubscribe.is_empty() {
                        // Acknowledgements may take as long as a connection.
                        pubsub.set_read_timeout(Some(inner.connect_timeout))?;
                        polling = false;
                    }
                    for key in unsubscribe {
                        // Its entry is gone from the hub: nothing to forget.
                        subscribed.remove(&key);
                        pubsub.unsubscribe(channel(&key))?;
                    }
                    for key in subscribe {
                        pubsub.subscribe(channel(&key))?;
                        subscribed.insert(key.clone());
                        inner.acked(&key, index);
                    }
                }
            }
        }
        if !polling {
            pubsub.set_read_timeout(Some(POLL))?;
            polling = true;
        }
        match pubsub.get_message() {
            Ok(msg) => deliver(inner, index, &msg),
            Err(err) if err.is_timeout() => {}
            Err(err) => return Err(err),
        }
    }
}

/// Hands one message to the sink; ignores anything that is not a notice.
fn deliver(inner: &Inner, index: usize, msg: &redis::Msg) {
    let (Ok(channel), Ok(payload)) = (msg.get_channel::<String>(), msg.get_payload::<String>())
    else {
        return;
    };
    let Some((key, notice, listeners)) = parse_notice(&channel, &payload) else {
        return;
    };
    if let Some(sink) = inner.sink() {
        sink.released(key, notice, inner.gate_of.gate(key) == index, listeners);
    }
}

/// A release channel's message: the resource, the notice, and how many
/// clients listened (`"{notice} {listeners}"`; 0 when the count is missing).
fn parse_notice<'a>(channel: &'a str, payload: &str) -> Option<(&'a str, u64, u32)> {
    let key = channel.strip_prefix(CHANNEL_PREFIX)?;
    let (notice, listeners) = payload.split_once(' ').unwrap_or((payload, ""));
    let notice = notice.parse::<u64>().ok()?;
    Some((key, notice, listeners.parse::<u32>().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::parse_notice;

    #[test]
    fn notices_are_read_with_or_without_the_listener_count() {
        assert_eq!(
            parse_notice("redlock-release:jobs:1", "42 3"),
            Some(("jobs:1", 42, 3))
        );
        assert_eq!(
            parse_notice("redlock-release:a b", "7"),
            Some(("a b", 7, 0))
        );
        assert_eq!(parse_notice("redlock-release:k", "7 x"), Some(("k", 7, 0)));
        assert_eq!(parse_notice("other:k", "7 1"), None);
        assert_eq!(parse_notice("redlock-release:k", "tok"), None);
        assert_eq!(parse_notice("redlock-release:k", ""), None);
    }
}
