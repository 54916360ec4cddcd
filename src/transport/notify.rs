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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::codec::{CHANNEL_PREFIX, channel};

/// Where notices go.
pub(crate) trait Sink: Send + Sync {
    /// A node announced a release of `key`; `notice` is the same on every
    /// node for one release.
    fn released(&self, key: &str, notice: u64);
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

/// The client's subscriptions. Dropping it stops the subscriber threads.
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Per node: where to subscribe (`None`: a fake node in unit tests).
    nodes: Vec<Option<(Arc<str>, redis::Client)>>,
    connect_timeout: Duration,
    quorum: usize,
    sink: OnceLock<Weak<dyn Sink>>,
    state: Mutex<State>,
    /// Bumped whenever a key is added or removed (under the state lock).
    generation: AtomicU64,
    /// Wakes threads pausing between connection attempts.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    keys: HashMap<Arc<str>, Entry>,
    /// Per node: whether its subscriber thread runs.
    running: Vec<bool>,
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
        self.inner.changed.notify_all();
    }
}

impl Hub {
    /// A hub over these nodes (`None` for a node it cannot subscribe to).
    pub(crate) fn new(
        nodes: Vec<Option<(Arc<str>, redis::Client)>>,
        connect_timeout: Duration,
    ) -> Self {
        let count = nodes.len();
        Hub {
            inner: Arc::new(Inner {
                quorum: crate::algorithm::quorum(count),
                nodes,
                connect_timeout,
                sink: OnceLock::new(),
                state: Mutex::new(State {
                    running: vec![false; count],
                    ..State::default()
                }),
                generation: AtomicU64::new(0),
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

    /// As if a node delivered a release notice for `key`.
    #[cfg(test)]
    pub(crate) fn fake_notice(&self, key: &str, notice: u64) {
        if let Some(sink) = self.inner.sink() {
            sink.released(key, notice);
        }
    }
}

/// What a subscriber thread should do next.
enum Plan {
    Stop,
    Change {
        subscribe: Vec<Arc<str>>,
        unsubscribe: Vec<Arc<str>>,
    },
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
            let count = entry.acked.iter().filter(|&&a| a).count();
            let newly = count >= self.quorum && !entry.heard;
            entry.heard |= newly;
            newly
        };
        if newly_heard && let Some(sink) = self.sink() {
            sink.listening(key);
        }
    }

    /// Node `index`'s subscriber connection is gone, or it left `key`.
    fn forget(&self, index: usize, key: Option<&str>) {
        let mut state = self.state.lock();
        for (k, entry) in state.keys.iter_mut() {
            if key.is_none_or(|key| key == &**k) {
                if let Some(acked) = entry.acked.get_mut(index) {
                    *acked = false;
                }
                if entry.acked.iter().filter(|&&a| a).count() < self.quorum {
                    entry.heard = false;
                }
            }
        }
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
            state.running[index] = false;
            return Plan::Stop;
        }
        let before = state.keys.len();
        state.keys.retain(|_, entry| {
            entry.watchers > 0 || entry.idle_since.is_none_or(|t| now - t < LINGER)
        });
        if state.keys.len() != before {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        if state.keys.is_empty() && subscribed.is_empty() {
            let since = *empty_since.get_or_insert(now);
            if now - since >= IDLE {
                state.running[index] = false;
                return Plan::Stop;
            }
        } else {
            *empty_since = None;
        }
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
        }
    }

    /// Pauses a thread whose node is down: [`BACKOFF`], or less if the
    /// hub is dropped. Whether the thread should stop.
    fn backoff(&self, index: usize) -> bool {
        let mut state = self.state.lock();
        if !state.stopping {
            let _ = self.changed.wait_for(&mut state, BACKOFF);
        }
        if state.stopping || state.keys.is_empty() {
            state.running[index] = false;
            return true;
        }
        false
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
        let result = client
            .get_connection_with_timeout(inner.connect_timeout)
            .and_then(|mut conn| listen(inner, index, &mut conn));
        inner.forget(index, None);
        match result {
            Ok(()) => return,
            Err(err) => {
                // Never the URL: the address carries no password.
                log::debug!("redlock: release notifications from {address}: {err}");
                if inner.backoff(index) {
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
        let generation = inner.generation.load(Ordering::Acquire);
        if generation != seen || last_plan.elapsed() >= LINGER / 2 {
            seen = generation;
            last_plan = Instant::now();
            match inner.plan(index, &subscribed, &mut empty_since) {
                Plan::Stop => return Ok(()),
                Plan::Change {
                    subscribe,
                    unsubscribe,
                } => {
                    if !subscribe.is_empty() || !unsubscribe.is_empty() {
                        // Acknowledgements may take as long as a connection.
                        pubsub.set_read_timeout(Some(inner.connect_timeout))?;
                        polling = false;
                    }
                    for key in unsubscribe {
                        subscribed.remove(&key);
                        inner.forget(index, Some(&key));
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
            Ok(msg) => deliver(inner, &msg),
            Err(err) if err.is_timeout() => {}
            Err(err) => return Err(err),
        }
    }
}

/// Hands one message to the sink; ignores anything that is not a notice.
fn deliver(inner: &Inner, msg: &redis::Msg) {
    let Ok(channel) = msg.get_channel::<String>() else {
        return;
    };
    let Some(key) = channel.strip_prefix(CHANNEL_PREFIX) else {
        return;
    };
    let Ok(notice) = msg.get_payload::<u64>() else {
        return;
    };
    if let Some(sink) = inner.sink() {
        sink.released(key, notice);
    }
}
