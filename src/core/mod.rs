//! The core: one owner for everything a client's threads share — the
//! transport, the settings, the local waiters and the keeper — and the
//! operations built on it: acquisition rounds with their retry policy,
//! extension and release of leases, and keep-alive.
//!
//! Data flows down: the API (`Redlock`, `LockGuard`) calls the core; the core
//! builds [`Request`]s and hands them to the transport; nothing here knows
//! the API types.
//!
//! # Shared state and who touches it
//!
//! * [`Lease`] state: the caller holding the guard (`extend`, `release`,
//!   validity reads), the keeper thread (renewals, loss) and `Drop`. One
//!   mutex; at most one extension in flight per lease (a second waits for
//!   the first, the keeper skips), and every change of TTL or validity bumps
//!   the lease's epoch and reschedules it with the keeper.
//! * [`Waiters`](handoff::Waiters): callers between rounds, releasing
//!   callers (including `Drop`), and the transport's subscriber threads
//!   (wake-ups from the gate nodes, through [`Sink`]).
//! * Rounds: the caller and one worker per node (with a single node, the
//!   caller itself serves an idle node); see `transport`.
//! * [`CancelToken`](crate::CancelToken): the cancelling thread wakes the
//!   sleepers registered with it by taking each sleeper's slot lock before
//!   notifying, and a sleeper registers before it checks the flag under that
//!   lock, so a cancel is never missed; the acquire loop checks the flag
//!   again after every round and releases a round that succeeded too late.
//! * Node health (`transport::connect::conn::NodeShared`): written by whoever serves
//!   the node (its worker, or a caller of a single idle node) and the
//!   reconnect helpers, read by `node_health`; atomics and small
//!   mutexes, never held across I/O.

mod acquire;
mod acquisition;
mod elect;
mod handoff;
mod inspect;
mod keeper;
mod lease;
mod life;
mod slots;
#[cfg(test)]
mod tests;
mod verdict;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::algorithm;
use crate::error::Error;
use crate::health::NodeHealth;
use crate::holding::Holding;
use crate::settings::{Config, NodeTimeout};
/// Which side of a reader-writer lock an acquisition takes.
pub(crate) use crate::transport::Role;
use crate::transport::{Kind, NodeSpec, Op, Request, Sink, Transport};
pub(crate) use acquire::Target;
pub(crate) use acquisition::Patience;
pub(crate) use elect::Seen;
use handoff::Waiters;
pub(crate) use lease::Lease;
use life::{Busy, Life};

/// What every clone of a client and every guard share.
pub(crate) struct Core {
    transport: Transport,
    settings: Config,
    /// This client's threads waiting between rounds, woken by the gate
    /// nodes through the transport's subscribers.
    waiters: Arc<Waiters>,
    /// Registrations for the keeper thread, started on first `keep_alive`.
    keeper: Mutex<Option<Sender<Weak<Lease>>>>,
    /// Open or shut down; the leases guards hold; the calls under way.
    life: Life,
    #[cfg(test)]
    hooks: tests::Hooks,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("nodes", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Starts the transport over `nodes` and the core around it.
    pub(crate) fn start(nodes: Vec<NodeSpec>, settings: Config) -> Result<Arc<Core>, Error> {
        let transport = Transport::start(nodes, &settings)?;
        Ok(Core::new(transport, settings))
    }

    pub(crate) fn new(transport: Transport, settings: Config) -> Arc<Core> {
        let waiters = Arc::new(Waiters::new(transport.client_id().clone()));
        let sink: Arc<dyn Sink> = waiters.clone();
        transport.set_sink(Arc::downgrade(&sink));
        Arc::new(Core {
            transport,
            settings,
            waiters,
            keeper: Mutex::new(None),
            life: Life::default(),
            #[cfg(test)]
            hooks: tests::Hooks::default(),
        })
    }

    /// The settings the client was built with.
    pub(crate) fn settings(&self) -> &Config {
        &self.settings
    }

    /// How many nodes this client uses.
    pub(crate) fn node_count(&self) -> usize {
        self.transport.len()
    }

    /// How many must agree: `N/2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        algorithm::quorum(self.transport.len())
    }

    /// A caller's extension of `lease` to `ttl` (waits for one in flight).
    pub(crate) fn extend(&self, lease: &Arc<Lease>, ttl: Duration) -> Result<(), Error> {
        let _busy = self.enter()?;
        let extended = match lease.begin_extend(self, lease::Who::Caller(ttl))? {
            Some(extension) => extension.finish(),
            // Only the keeper is ever turned away.
            None => Err(lease.lost_error(self.quorum())),
        };
        match extended {
            // Released by a shutdown while it was under way.
            Err(Error::LockLost { .. }) => Err(self.lost_error(lease)),
            other => other,
        }
    }

    /// A guard's release of `lease` (also on drop). `Err(Shutdown)` once
    /// the client was shut down: the shutdown released it.
    pub(crate) fn release(&self, lease: &Arc<Lease>) -> Result<(), Error> {
        let released = match self.enter() {
            Ok(_busy) => lease.release(self),
            Err(err) => Err(err),
        };
        self.life.forget(lease);
        self.forget(lease);
        released
    }

    /// Why a guard of `lease` is not valid: `Shutdown` once the client
    /// was shut down, else `LockLost`.
    pub(crate) fn lost_error(&self, lease: &Lease) -> Error {
        if self.life.is_closed() {
            Error::Shutdown
        } else {
            lease.lost_error(self.quorum())
        }
    }

    /// A call starts: `Err(Shutdown)` once the client is shutting down; it
    /// ends when the [`Busy`] is dropped (see `life.rs`).
    pub(crate) fn enter(&self) -> Result<Busy<'_>, Error> {
        self.life.enter(&self.transport)
    }

    /// Shuts the client down (every clone): ends `Open` (every later call
    /// fails with `Shutdown`; calls under way that send anything but a
    /// clean-up are refused), wakes the callers waiting between rounds,
    /// releases every lease a guard holds — all sent before any answer is
    /// awaited, even with a single node — and waits for a majority of each
    /// until `within` has passed. Then it waits (until then too) for the
    /// calls under way to end, and stops the keeper, the subscribers, the
    /// Sentinel lookups and the node workers once these sent what was
    /// queued. A call still under way at the deadline stops them itself
    /// when it ends, so that its clean-up still goes out.
    ///
    /// A second shutdown waits for the first (up to its own `within`) and
    /// returns the same result.
    pub(crate) fn shutdown(&self, within: Duration) -> Result<(), Error> {
        let start = Instant::now();
        let deadline = start
            .checked_add(within)
            .unwrap_or(start + Duration::from_secs(3600));
        let Some(leases) = self.life.close() else {
            return self.life.wait_finished(deadline);
        };
        self.transport.refuse_all_but_clean_ups();
        self.waiters.wake_all();
        let releasing: Vec<_> = leases
            .iter()
            .filter_map(|lease| lease.begin_release(self, true))
            .collect();
        let mut result = Ok(());
        for pending in releasing {
            match pending.finish(self, Some(deadline)) {
                // Expired already: no key of it is left.
                Ok(()) | Err(Error::LockLost { .. }) => {}
                Err(err) => {
                    log::warn!("redlock: shutdown: {err}");
                    if result.is_ok() {
                        result = Err(err);
                    }
                }
            }
        }
        drop(self.keeper.lock().take());
        if self.life.wait_idle(deadline) {
            self.transport.stop(deadline);
        } else {
            log::debug!("redlock: shutdown: calls still under way stop the client when they end");
        }
        log::debug!(
            "redlock: shut down in {:?}, {} hold(s) released",
            start.elapsed(),
            leases.len()
        );
        self.life.finished(&result);
        result
    }

    /// Every node's health.
    pub(crate) fn node_health(&self) -> Vec<crate::health::NodeHealth> {
        let health = self.transport.health();
        if self.life.is_closed() {
            health.into_iter().map(NodeHealth::shut_down).collect()
        } else {
            health
        }
    }

    /// Every node's health, after asking each node now.
    pub(crate) fn verify(&self) -> Vec<crate::health::NodeHealth> {
        match self.enter() {
            Ok(_busy) => self.transport.verify(),
            // Shut down: nothing is asked any more.
            Err(_) => self.node_health(),
        }
    }

    /// The client's default number of retries.
    pub(crate) fn retry_count(&self) -> u32 {
        self.settings.retry_count
    }

    /// What holds `target` on a majority of the nodes (see
    /// `inspect::holders`).
    pub(crate) fn inspect(&self, target: Target) -> Result<Vec<(u32, Holding)>, Error> {
        let _busy = self.enter()?;
        inspect::holders(&self.ask(), target)
    }

    /// Releases the holder of `resource` that a majority agrees on,
    /// whoever it is; whether there was one (see `inspect::release`).
    pub(crate) fn force_release(&self, resource: &str) -> Result<bool, Error> {
        let _busy = self.enter()?;
        inspect::release(&self.ask(), resource)
    }

    /// What an operator's read asks of the nodes.
    fn ask(&self) -> inspect::Ask<'_> {
        inspect::Ask {
            transport: &self.transport,
            timeout: self.node_timeout(verdict::READ_TTL),
            drift_factor: self.settings.drift_factor,
        }
    }

    /// The per-node timeout for a lock with this TTL: the one set, or the
    /// one derived from the TTL, raised to what the nodes' measured round
    /// trips need (at most a third of the TTL).
    fn node_timeout(&self, ttl: Duration) -> NodeTimeout {
        let need = self.transport.round_trips().map(|trips| trips.need);
        self.settings.node_timeout_for(ttl).at_least(need)
    }

    /// The nodes' quickest round trip (measured, of a majority) when it
    /// leaves a lock with this TTL no chance: it takes all the validity,
    /// or — with the timeout derived from the TTL — more than the third of
    /// the TTL the timeout may be. Only answers count, never a stall: the
    /// quickest answer does not grow when a node pauses. `None` while it
    /// may work (or nothing was measured).
    fn hopeless(&self, ttl: Duration) -> Option<Duration> {
        let trips = self.transport.round_trips()?;
        let usable = ttl.saturating_sub(algorithm::drift(ttl, self.settings.drift_factor));
        let derived = self.settings.node_timeout.is_none();
        let reach = if derived { usable.min(ttl / 3) } else { usable };
        (trips.least >= reach).then_some(trips.least)
    }

    /// Checks a TTL and rounds it to the whole milliseconds Redis takes.
    fn whole_ttl(&self, ttl: Duration) -> Result<Duration, Error> {
        algorithm::ttl_millis(ttl, self.settings.drift_factor)
            .map(Duration::from_millis)
            .map_err(Error::argument)
    }

    /// The latest instant a key set at `start` with `ttl` can still exist: a
    /// node may apply the command up to one per-node timeout late.
    fn keys_gone_by(&self, start: Instant, ttl: Duration) -> Instant {
        let slack = ttl.saturating_add(self.node_timeout(ttl).value);
        start.checked_add(slack).unwrap_or(start)
    }

    /// After a failed round: releases `token` on every node the round's
    /// request left the client for (all but `unsent`), including those that
    /// failed or did not answer (their `SET` may still have landed),
    /// without making the caller wait. A node whose queue refused the
    /// request gets no clean-up: nothing of the round is there, and a slow
    /// node's queue would otherwise grow by one clean-up per failed round,
    /// past its capacity. A queued waiter's `member` (`None`: not queued)
    /// keeps its turn: where the gate node had granted the round, it goes
    /// back to the head of the queue there, unwoken.
    fn clean_up(
        &self,
        kind: &Kind,
        token: &Arc<str>,
        (start, ttl): (Instant, Duration),
        member: Option<Arc<str>>,
        unsent: &[usize],
    ) {
        let timeout = self.node_timeout(ttl);
        let gone_by = self.keys_gone_by(start, ttl);
        let mut request = self.release_request(kind, token, timeout, gone_by);
        // Not a lease's: it wakes the next waiter only where the key is free.
        request.op = Op::Release { held: false };
        if request.queue.is_some()
            && let Some(member) = member
        {
            request.queue = Some(member);
        }
        self.transport.broadcast(request, unsent);
    }

    /// Queues a release of `token` (a lease's: it held the resource) on
    /// every node and waits for no answer. The gate node wakes the next
    /// waiter.
    fn release_unawaited(
        &self,
        kind: &Kind,
        token: &Arc<str>,
        ttl: Duration,
        expires: Instant,
        unsent: &[usize],
    ) {
        let request = self.release_request(kind, token, self.node_timeout(ttl), expires);
        self.transport.broadcast(request, unsent);
    }

    /// A lease's release: on the gate node it also wakes the next waiter
    /// (when this client keeps queues); `clean_up` marks its own.
    fn release_request(
        &self,
        kind: &Kind,
        token: &Arc<str>,
        timeout: NodeTimeout,
        expires: Instant,
    ) -> Request {
        let release = Op::Release { held: true };
        let mut request = Request::new(release, kind.clone(), token.clone(), timeout, expires);
        if self.settings.notifications {
            request.queue = Some(Arc::from(""));
        }
        request
    }
}
