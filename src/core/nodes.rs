//! [`Nodes`]: what every round of the core needs — the transport, the
//! settings, this client's waiters between rounds — and the rules that turn
//! a TTL into a round's numbers (its per-node timeout, how long its keys
//! may outlive it, the releases that clean up after it).
//!
//! Below the leases, the keeper and the session: it knows none of them.
//! Nothing in it changes after it is built (the waiters guard their own
//! state), so every thread that holds it reads it freely.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handoff::Waiters;
use crate::algorithm;
use crate::error::Error;
use crate::settings::{Config, NodeTimeout};
use crate::transport::{Kind, Op, Request, Sink, Transport};

/// The client's nodes as the core's rounds see them.
pub(crate) struct Nodes {
    transport: Transport,
    settings: Config,
    /// This client's threads waiting between rounds, woken by the gate
    /// nodes through the transport's subscribers.
    waiters: Arc<Waiters>,
    #[cfg(test)]
    hooks: super::tests::Hooks,
}

impl Nodes {
    /// Wires the transport's wake-ups to a new set of waiters.
    pub(crate) fn new(transport: Transport, settings: Config) -> Nodes {
        let waiters = Arc::new(Waiters::new(transport.client_id().clone()));
        let sink: Arc<dyn Sink> = waiters.clone();
        transport.set_sink(Arc::downgrade(&sink));
        Nodes {
            transport,
            settings,
            waiters,
            #[cfg(test)]
            hooks: super::tests::Hooks::default(),
        }
    }

    /// The transport the rounds go through.
    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The settings the client was built with.
    pub(crate) fn settings(&self) -> &Config {
        &self.settings
    }

    /// This client's threads waiting between rounds.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// The test-only interception points.
    #[cfg(test)]
    pub(crate) fn hooks(&self) -> &super::tests::Hooks {
        &self.hooks
    }

    /// How many nodes this client uses.
    pub(crate) fn count(&self) -> usize {
        self.transport.len()
    }

    /// How many must agree: `N/2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        algorithm::quorum(self.transport.len())
    }

    /// The per-node timeout for a lock with this TTL: the one set, or the
    /// one derived from the TTL, raised to what the nodes' measured round
    /// trips need (at most a third of the TTL).
    pub(crate) fn node_timeout(&self, ttl: Duration) -> NodeTimeout {
        let need = self.transport.round_trips().map(|trips| trips.need);
        self.settings.node_timeout_for(ttl).at_least(need)
    }

    /// The nodes' quickest round trip (measured, of a majority) when it
    /// leaves a lock with this TTL no chance: it takes all the validity,
    /// or — with the timeout derived from the TTL — more than the third of
    /// the TTL the timeout may be. Only answers count, never a stall: the
    /// quickest answer does not grow when a node pauses. `None` while it
    /// may work (or nothing was measured).
    pub(crate) fn hopeless(&self, ttl: Duration) -> Option<Duration> {
        let trips = self.transport.round_trips()?;
        let usable = ttl.saturating_sub(algorithm::drift(ttl, self.settings.drift_factor));
        let derived = self.settings.node_timeout.is_none();
        let reach = if derived { usable.min(ttl / 3) } else { usable };
        (trips.least >= reach).then_some(trips.least)
    }

    /// Checks a TTL and rounds it to the whole milliseconds Redis takes.
    pub(crate) fn whole_ttl(&self, ttl: Duration) -> Result<Duration, Error> {
        algorithm::ttl_millis(ttl, self.settings.drift_factor)
            .map(Duration::from_millis)
            .map_err(Error::argument)
    }

    /// When a lease granted at `start` for `ttl` stops being valid.
    pub(crate) fn valid_until(&self, start: Instant, ttl: Duration) -> Instant {
        algorithm::valid_until(start, ttl, self.settings.drift_factor)
    }

    /// The latest instant a key set at `start` with `ttl` can still exist: a
    /// node may apply the command up to one per-node timeout late.
    pub(crate) fn keys_gone_by(&self, start: Instant, ttl: Duration) -> Instant {
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
    pub(crate) fn clean_up(
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
    pub(crate) fn release_unawaited(
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
    pub(crate) fn release_request(
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
