//! A held lock's state and the two network operations on it, extend and
//! release, shared by [`LockGuard`](crate::LockGuard) and the keeper thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::algorithm::{self, Verdict};
use crate::client::Inner;
use crate::error::{Error, NodeFailure};
use crate::transport::{Op, PendingRound, Request};

pub(crate) struct Lease {
    pub(crate) resource: Arc<str>,
    pub(crate) token: Arc<str>,
    pub(crate) state: Mutex<LeaseState>,
}

#[derive(Debug, Clone)]
pub(crate) struct LeaseState {
    /// The TTL last set on the nodes.
    pub(crate) ttl: Duration,
    /// Until when a majority is known to hold our token (drift deducted).
    pub(crate) valid_until: Instant,
    /// No key of ours can outlive this instant on any node.
    pub(crate) keys_gone_by: Instant,
    /// Validity ran out while kept alive, or a renewal found the token gone.
    /// Sticky: a lost lease is never renewed again.
    pub(crate) lost: bool,
    /// Released (or being released): never renew again.
    pub(crate) released: bool,
    /// Registered with the keeper thread.
    pub(crate) kept: bool,
    /// Why the last extension failed, for the `LockLost` error.
    pub(crate) failures: Vec<NodeFailure>,
}

impl Lease {
    pub(crate) fn new(
        inner: &Inner,
        resource: Arc<str>,
        token: Arc<str>,
        ttl: Duration,
        start: Instant,
        valid_until: Instant,
    ) -> Self {
        Lease {
            resource,
            token,
            state: Mutex::new(LeaseState {
                ttl,
                valid_until,
                keys_gone_by: keys_gone_by(inner, start, ttl),
                lost: false,
                released: false,
                kept: false,
                failures: Vec::new(),
            }),
        }
    }

    /// Validity left: zero once it ran out or the lease was lost.
    pub(crate) fn remaining(&self) -> Duration {
        let state = self.state.lock();
        if state.lost {
            return Duration::ZERO;
        }
        state.valid_until.saturating_duration_since(Instant::now())
    }

    /// Valid: not lost, and validity left.
    pub(crate) fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    pub(crate) fn lost_error(&self, inner: &Inner, confirmed: usize) -> Error {
        Error::LockLost {
            resource: self.resource.to_string(),
            confirmed,
            quorum: inner.transport.quorum(),
            failures: self.state.lock().failures.clone(),
        }
    }

    /// Marks the lease lost (once) and says so in the log.
    pub(crate) fn mark_lost(&self) {
        let mut state = self.state.lock();
        if !state.lost && !state.released {
            state.lost = true;
            log::warn!(
                "redlock: lost the lock on {:?}: its validity ran out before a majority \
                 confirmed a renewal",
                self.resource
            );
        }
    }

    /// Sends compare-and-pexpire to every node; [`PendingExtend::finish`]
    /// collects the answers. Fails at once if the validity already ran out.
    pub(crate) fn begin_extend<'a>(
        &'a self,
        inner: &'a Inner,
        ttl: Duration,
    ) -> Result<PendingExtend<'a>, Error> {
        let ttl_ms = inner.ttl_millis(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::now();
        let left = self.remaining();
        if left.is_zero() {
            return Err(self.lost_error(inner, 0));
        }
        let current = start + left;
        let node_timeout = inner.node_timeout(ttl);
        let answer_by = start
            .checked_add(node_timeout)
            .map_or(current, |t| t.min(current));
        let round = inner.transport.start_round(self.request(
            Op::Extend { ttl_ms },
            node_timeout,
            answer_by,
        ));
        Ok(PendingExtend {
            lease: self,
            inner,
            round,
            start,
            ttl,
            answer_by,
        })
    }

    /// Compare-and-delete on every node; `Ok` once a majority confirmed.
    pub(crate) fn release(&self, inner: &Inner) -> Result<(), Error> {
        let (ttl, keys_gone_by, was_lost) = {
            let mut state = self.state.lock();
            state.released = true;
            (state.ttl, state.keys_gone_by, state.lost)
        };
        let node_timeout = inner.node_timeout(ttl);
        let start = Instant::now();
        let answer_by = start.checked_add(node_timeout).unwrap_or(start);
        let request = self.request(Op::Release, node_timeout, keys_gone_by.max(answer_by));
        let pending = inner.transport.start_round(request);
        // Wake a local waiter now: its SET queues behind our delete on every
        // node (one worker per node keeps each node's requests in order), so
        // it cannot land before the delete, and the hand-off saves a round trip.
        inner.waiters.released(&self.resource);
        let tally = pending.collect(&inner.transport, answer_by);
        match tally.verdict() {
            _ if was_lost => Err(self.lost_error(inner, tally.confirmed())),
            Some(Verdict::Confirmed) => {
                log::debug!(
                    "redlock: released {:?} in {:?}",
                    self.resource,
                    start.elapsed()
                );
                Ok(())
            }
            Some(Verdict::Refused) => {
                let confirmed = tally.confirmed();
                self.state.lock().failures = tally.into_failures();
                Err(self.lost_error(inner, confirmed))
            }
            _ => Err(inner.round_error(&self.resource, tally)),
        }
    }

    fn request(&self, op: Op, io_timeout: Duration, expires: Instant) -> Request {
        Request {
            op,
            key: self.resource.clone(),
            token: self.token.clone(),
            io_timeout,
            expires,
        }
    }
}

/// An extension whose requests are out; its answers are still to be collected.
pub(crate) struct PendingExtend<'a> {
    lease: &'a Lease,
    inner: &'a Inner,
    round: PendingRound,
    start: Instant,
    ttl: Duration,
    answer_by: Instant,
}

impl PendingExtend<'_> {
    /// Counts the answers (never past the old validity). On success the
    /// validity moves to `start + ttl - drift`.
    pub(crate) fn finish(self) -> Result<(), Error> {
        let PendingExtend {
            lease,
            inner,
            round,
            start,
            ttl,
            answer_by,
        } = self;
        let tally = round.collect(&inner.transport, answer_by);
        let new_until = algorithm::valid_until(start, ttl, inner.settings.drift_factor);
        let verdict = tally.verdict();
        let mut state = lease.state.lock();
        // Nodes that applied the new TTL may keep our key longer than before.
        state.keys_gone_by = state.keys_gone_by.max(keys_gone_by(inner, start, ttl));
        if verdict == Some(Verdict::Confirmed) && !state.lost && !state.released {
            state.ttl = ttl;
            state.valid_until = new_until;
            state.failures.clear();
            return Ok(());
        }
        // Nodes that applied a shorter TTL shortened our keys, whatever the outcome.
        state.valid_until = state.valid_until.min(new_until);
        let confirmed = tally.confirmed();
        match verdict {
            Some(Verdict::Unreachable) | None => {
                drop(state);
                Err(inner.round_error(&lease.resource, tally))
            }
            // Refused, or confirmed for a lease already lost or released.
            Some(_) => {
                state.failures = tally.into_failures();
                drop(state);
                Err(lease.lost_error(inner, confirmed))
            }
        }
    }
}

/// The latest instant a key set at `start` with `ttl` can still exist: a node
/// may apply the command up to one per-node timeout late.
pub(crate) fn keys_gone_by(inner: &Inner, start: Instant, ttl: Duration) -> Instant {
    let slack = ttl.saturating_add(inner.node_timeout(ttl));
    start.checked_add(slack).unwrap_or(start)
}
