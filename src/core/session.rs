//! [`Core`]: the session every clone of a client and every guard share —
//! the client's [`Nodes`], its keeper and its life (open, shutting down,
//! shut down) — and the one place that keeps them in step: a lease a guard
//! holds is known to the life (so that a shutdown releases it) and to the
//! keeper (when kept or watched), and a shutdown closes, releases and stops
//! in that order.
//!
//! The operations (`acquire.rs`, `elect.rs`, `inspect.rs`) are written on
//! the methods here, never on the fields.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::keeper::Keeper;
use super::lease::{Lease, Who};
use super::life::{Busy, Life};
use super::nodes::Nodes;
use crate::cancel::CancelToken;
use crate::error::Error;
use crate::health::NodeHealth;
use crate::settings::Config;
use crate::transport::{NodeSpec, Transport};

/// What every clone of a client and every guard share.
pub(crate) struct Core {
    /// Shared with the keeper thread, which holds it weakly.
    nodes: Arc<Nodes>,
    keeper: Keeper,
    /// Open or shut down; the leases guards hold; the calls under way.
    life: Life,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("nodes", self.nodes.transport())
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Starts the transport over `nodes` and the core around it.
    pub(crate) fn start(nodes: Vec<NodeSpec>, settings: Config) -> Result<Arc<Core>, Error> {
        let transport = Transport::start(nodes, &settings)?;
        Ok(Core::new(transport, settings))
    }

    /// The core around a started transport.
    pub(crate) fn new(transport: Transport, settings: Config) -> Arc<Core> {
        Arc::new(Core {
            nodes: Arc::new(Nodes::new(transport, settings)),
            keeper: Keeper::default(),
            life: Life::default(),
        })
    }

    /// The nodes the operations' rounds go to, with their rules.
    pub(super) fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The settings the client was built with.
    pub(crate) fn settings(&self) -> &Config {
        self.nodes.settings()
    }

    /// How many nodes this client uses.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.count()
    }

    /// How many must agree: `N/2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.quorum()
    }

    /// The client's default number of retries.
    pub(crate) fn retry_count(&self) -> u32 {
        self.nodes.settings().retry_count
    }

    /// A call starts: `Err(Shutdown)` once the client is shutting down; it
    /// ends when the [`Busy`] is dropped (see `life.rs`).
    pub(crate) fn enter(&self) -> Result<Busy<'_>, Error> {
        self.life.enter(self.nodes.transport())
    }

    /// Whether the client is shutting down or shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.life.is_closed()
    }

    /// A new guard's lease, for a shutdown to release: false once the
    /// client is shutting down (the caller then abandons it).
    pub(crate) fn adopt(&self, lease: &Arc<Lease>) -> bool {
        self.life.adopt(lease)
    }

    /// Whether a guard of this client holds a lease that `matches`.
    pub(crate) fn holds(&self, matches: impl Fn(&Lease) -> bool) -> bool {
        self.life.holds(matches)
    }

    /// A caller's extension of `lease` to `ttl` (waits for one in flight).
    pub(crate) fn extend(&self, lease: &Arc<Lease>, ttl: Duration) -> Result<(), Error> {
        let _busy = self.enter()?;
        let extended = match lease.begin_extend(&self.nodes, Who::Caller(ttl))? {
            Some(extension) => extension.finish(),
            // Only the keeper is ever turned away.
            None => Err(lease.lost_error(self.quorum())),
        };
        // The keeper skipped it while the extension was in flight.
        self.keeper.changed(lease);
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
            Ok(_busy) => lease.release(&self.nodes),
            Err(err) => Err(err),
        };
        self.life.forget(lease);
        // The keeper forgets it now rather than when it would be due.
        self.keeper.changed(lease);
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

    /// Has the keeper renew `lease` until it is released or lost.
    pub(crate) fn keep(&self, lease: &Arc<Lease>) -> Result<(), Error> {
        self.keeper
            .keep(&self.nodes, lease, || self.life.is_closed())
    }

    /// `lease`'s lost token (see `Keeper::lost_token`).
    pub(crate) fn lost_token(&self, lease: &Arc<Lease>) -> CancelToken {
        self.keeper
            .lost_token(&self.nodes, lease, || self.life.is_closed())
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
        let transport = self.nodes.transport();
        transport.refuse_all_but_clean_ups();
        self.nodes.waiters().wake_all();
        let releasing: Vec<_> = leases
            .iter()
            .filter_map(|lease| lease.begin_release(&self.nodes, true))
            .collect();
        let mut result = Ok(());
        for pending in releasing {
            match pending.finish(&self.nodes, Some(deadline)) {
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
        self.keeper.stop();
        if self.life.wait_idle(deadline) {
            transport.stop(deadline);
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
    pub(crate) fn node_health(&self) -> Vec<NodeHealth> {
        let health = self.nodes.transport().health();
        if self.life.is_closed() {
            health.into_iter().map(NodeHealth::shut_down).collect()
        } else {
            health
        }
    }

    /// Every node's health, after asking each node now.
    pub(crate) fn verify(&self) -> Vec<NodeHealth> {
        match self.enter() {
            Ok(_busy) => self.nodes.transport().verify(),
            // Shut down: nothing is asked any more.
            Err(_) => self.node_health(),
        }
    }
}
