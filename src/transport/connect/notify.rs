//! Wake-ups: one subscriber connection per node, on this client's own wake
//! channel, opened when a caller first waits.
//!
//! A queued waiter is woken by the resource's gate node when its turn comes
//! (see `scripts/lib_queue.lua`): the node publishes the waiter's ticket on
//! `redlock-wake:{client id}`. The channel is this client's alone and never
//! changes, so a subscriber subscribes once per connection, whatever the
//! resources waited for, and a release wakes one client — never a herd.
//! Wake-ups only shorten waits: every acquisition still needs `SET NX` on a
//! majority.
//!
//! # Threads and shared state
//!
//! [`Inner::state`] is one mutex, never held across I/O or while calling the
//! sink. It is touched by
//! * callers: [`Hub::watch`] (counts a waiter, starts missing subscriber
//!   threads) and dropping a [`Watch`];
//! * one subscriber thread per node: it marks its node live once the
//!   subscription is acknowledged and not live when the connection fails,
//!   and stops, under the same lock that [`Hub::watch`] reads the running
//!   flag under, once nobody waited for [`IDLE`];
//! * dropping the hub: sets `stopping` (threads end within a [`TICK`]).
//!
//! A wake-up published while a node's subscriber was not subscribed is
//! lost. So whenever a subscription is (re)established the sink is told
//! ([`Sink::subscribed`]), and the waiters whose gate is that node try one
//! more round. A subscriber `PING`s its node when it heard nothing for
//! [`PING_EVERY`]: a connection that went silent (a half-open TCP
//! connection behind a NAT or firewall) is replaced within
//! `PING_EVERY + connect timeout`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::source::{Source, address_of};
use crate::transport::protocol::keys::wake_channel;

/// Where wake-ups go.
pub(crate) trait Sink: Send + Sync {
    /// A gate node woke this client's waiter `ticket`.
    fn woken(&self, ticket: u64);
    /// Node `index` delivers wake-ups again (or for the first time): those
    /// published before were lost.
    fn subscribed(&self, index: usize);
}

/// How often a subscriber looks whether it should stop.
const TICK: Duration = Duration::from_millis(100);
/// How long a subscriber may hear nothing before it pings its node.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);
/// How long a subscriber connection stays open with nobody waiting.
const IDLE: Duration = Duration::from_secs(2);
/// Pause between connection attempts to a node that is down.
const BACKOFF: Duration = Duration::from_millis(500);
/// Pause before asking again a node whose ACL refused the subscription.
const DENIED_BACKOFF: Duration = Duration::from_secs(30);

/// The client's subscriptions. Dropping it stops the subscriber threads.
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Per node: where to subscribe (`None`: a fake node in unit tests).
    nodes: Vec<Option<(Arc<str>, Source)>>,
    /// This client's wake channel.
    channel: String,
    connect_timeout: Duration,
    sink: OnceLock<Weak<dyn Sink>>,
    state: Mutex<State>,
    /// Set when the hub is dropped: threads stop within a tick.
    stopped: AtomicBool,
    /// Wakes threads pausing between connection attempts.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Callers waiting now.
    watchers: usize,
    /// When the last watcher left.
    idle_since: Option<Instant>,
    /// Per node: whether its subscriber thread runs.
    running: Vec<bool>,
    /// Per node: whether its subscription is acknowledged on a live
    /// connection.
    live: Vec<bool>,
    /// Per node: whether a refused subscription was warned about.
    warned: Vec<bool>,
    stopping: bool,
}

/// A caller's interest in wake-ups while it waits.
pub(crate) struct Watch {
    inner: Arc<Inner>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock();
        state.watchers = state.watchers.saturating_sub(1);
        if state.watchers == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("Hub")
            .field("watchers", &state.watchers)
            .field("running", &state.running)
            .finish()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Hub {
    /// A hub over these nodes (`None` for a node it cannot subscribe to),
    /// listening on `client`'s wake channel.
    pub(crate) fn new(
        nodes: Vec<Option<(Arc<str>, Source)>>,
        client: &str,
        connect_timeout: Duration,
    ) -> Self {
        let count = nodes.len();
        Hub {
            inner: Arc::new(Inner {
                nodes,
                channel: wake_channel(client),
                connect_timeout,
                sink: OnceLock::new(),
                state: Mutex::new(State {
                    running: vec![false; count],
                    live: vec![false; count],
                    warned: vec![false; count],
                    ..State::default()
                }),
                stopped: AtomicBool::new(false),
                changed: Condvar::new(),
            }),
        }
    }

    /// Stops the subscriber threads (within a [`TICK`]) and starts none
    /// again.
    pub(crate) fn stop(&self) {
        self.inner.state.lock().stopping = true;
        self.inner.stopped.store(true, Ordering::Release);
        self.inner.changed.notify_all();
    }

    /// Sets where wake-ups go (once; later calls are ignored).
    pub(crate) fn set_sink(&self, sink: Weak<dyn Sink>) {
        let _ = self.inner.sink.set(sink);
    }

    /// Listens for wake-ups on every node (in the background) for as long
    /// as the returned [`Watch`] lives.
    pub(crate) fn watch(&self) -> Watch {
        let mut start = Vec::new();
        {
            let mut state = self.inner.state.lock();
            state.watchers += 1;
            state.idle_since = None;
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
        }
    }

    /// Whether a caller waits now.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> bool {
        self.inner.state.lock().watchers > 0
    }

    /// As if node `index` acknowledged the subscription.
    #[cfg(test)]
    pub(crate) fn fake_subscribed(&self, index: usize) {
        self.inner.set_live(index, true);
    }

    /// As if a gate node woke `ticket`.
    #[cfg(test)]
    pub(crate) fn fake_wake(&self, ticket: u64) {
        if let Some(sink) = self.inner.sink() {
            sink.woken(ticket);
        }
    }
}

impl Inner {
    fn sink(&self) -> Option<Arc<dyn Sink>> {
        self.sink.get().and_then(Weak::upgrade)
    }

    /// Records whether node `index` delivers; tells the sink when it starts.
    fn set_live(&self, index: usize, live: bool) {
        let was = std::mem::replace(&mut self.state.lock().live[index], live);
        if live
            && !was
            && let Some(sink) = self.sink()
        {
            sink.subscribed(index);
        }
    }

    /// Whether node `index`'s thread should stop now (and if so, marks it
    /// stopped, under the lock [`Hub::watch`] reads the flag under).
    fn should_stop(&self, index: usize) -> bool {
        let mut state = self.state.lock();
        let idle = state.watchers == 0 && state.idle_since.is_none_or(|t| t.elapsed() >= IDLE);
        if state.stopping || idle {
            state.running[index] = false;
            state.live[index] = false;
            return true;
        }
        false
    }

    /// Pauses a thread whose node is down (or refused it): `pause`, or
    /// less if the hub is dropped. Whether the thread should stop.
    fn backoff(&self, index: usize, pause: Duration) -> bool {
        {
            let mut state = self.state.lock();
            if !state.stopping {
                let _ = self.changed.wait_for(&mut state, pause);
            }
        }
        self.should_stop(index)
    }

    /// Warns once per node that its ACL refuses the wake channel.
    fn refused(&self, index: usize, address: &str, err: &redis::RedisError) {
        let first = !std::mem::replace(&mut self.state.lock().warned[index], true);
        if first {
            log::warn!(
                "redlock: node {address} refuses to subscribe to wake-ups ({}); waiters retry \
                 after their retry delay. Grant the ACL user `+subscribe &redlock-wake:*`, or \
                 set RedlockBuilder::release_notifications(false)",
                err.code().unwrap_or("error")
            );
        }
    }
}

/// Node `index`'s subscriber thread: connects, subscribes, hands wake-ups
/// to the sink, reconnects after a failure.
fn subscriber(inner: &Inner, index: usize) {
    let Some((address, source)) = inner.nodes[index].clone() else {
        inner.state.lock().running[index] = false;
        return;
    };
    loop {
        let mut pause = BACKOFF;
        let result = source
            .client(inner.connect_timeout)
            .and_then(|client| {
                Ok((
                    super::dial::connect(&client, inner.connect_timeout)?,
                    client,
                ))
            })
            .and_then(|(mut conn, client)| {
                conn.set_read_timeout(Some(inner.connect_timeout))?;
                // RESP2: a refused subscription shows only in the reply,
                // which the pub/sub API does not read; RESP3 does not wait
                // for it, and the ping below reads a refusal first.
                let resp3 = client
                    .get_connection_info()
                    .redis_settings()
                    .protocol()
                    .supports_resp3();
                let subscribed = if resp3 {
                    Ok(())
                } else {
                    redis::cmd("SUBSCRIBE").arg(&inner.channel).exec(&mut conn)
                };
                let mut pubsub = conn.as_pubsub();
                let subscribed = subscribed.and_then(|()| {
                    if resp3 {
                        pubsub.subscribe(&inner.channel)?;
                    }
                    pubsub.ping::<redis::Value>().map(drop)
                });
                if let Err(err) = subscribed {
                    if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) {
                        inner.refused(index, &address, &err);
                        pause = DENIED_BACKOFF;
                    }
                    return Err(err);
                }
                inner.set_live(index, true);
                let at = address_of(&client);
                listen(inner, index, &mut pubsub, || source.moved_from(&at))
            });
        inner.set_live(index, false);
        match result {
            Ok(()) => return,
            Err(err) => {
                // Never the URL: the address carries no password.
                log::debug!("redlock: wake-ups from {address}: {err}");
                if inner.backoff(index, pause) {
                    return;
                }
            }
        }
    }
}

/// Serves one subscriber connection until told to stop (`Ok`) or it fails
/// (or stops answering pings).
///
/// `moved`: whether the node moved away from this connection (a Sentinel
/// names another master now); checked at each ping, and the connection is
/// then replaced.
fn listen(
    inner: &Inner,
    index: usize,
    pubsub: &mut redis::PubSub<'_>,
    moved: impl Fn() -> bool,
) -> redis::RedisResult<()> {
    pubsub.set_read_timeout(Some(TICK))?;
    let mut heard = Instant::now();
    loop {
        if inner.stopped.load(Ordering::Acquire) || inner.should_stop(index) {
            return Ok(());
        }
        match pubsub.get_message() {
            Ok(msg) => {
                heard = Instant::now();
                let ticket = msg
                    .get_payload::<String>()
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok());
                if msg.get_channel_name() == inner.channel
                    && let (Some(ticket), Some(sink)) = (ticket, inner.sink())
                {
                    sink.woken(ticket);
                }
            }
            Err(err) if err.is_timeout() => {
                if heard.elapsed() >= PING_EVERY {
                    if moved() {
                        return Err(redis::RedisError::from(std::io::Error::other(
                            "the Sentinels name another master",
                        )));
                    }
                    pubsub.set_read_timeout(Some(inner.connect_timeout))?;
                    let _: redis::Value = pubsub.ping()?;
                    pubsub.set_read_timeout(Some(TICK))?;
                    heard = Instant::now();
                }
            }
            Err(err) => return Err(err),
        }
    }
}
