//! The guard: proof of holding a lock until its validity runs out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::algorithm::{self, Verdict};
use crate::client::Redlock;
use crate::error::Error;
use crate::transport::{Op, Request};

/// A held lock. Releases it when dropped, like a `MutexGuard`.
///
/// A distributed lock is a lease: it protects your work only until
/// [`valid_until`](Self::valid_until). Check [`is_valid`](Self::is_valid) or
/// [`remaining`](Self::remaining) before each step of protected work, and
/// [`extend`](Self::extend) the lease if the work takes longer.
///
/// # Drop does network I/O
///
/// Dropping the guard releases the lock on every node and waits (at most one
/// per-node timeout) until a majority has confirmed, so that another client can
/// take the lock as soon as `drop` returns. A failed release is logged as a
/// warning; the lock then expires after its TTL. Call
/// [`release`](Self::release) instead to see the outcome.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])?;
/// {
///     let guard = redlock.lock("invoices", Duration::from_secs(10))?;
///     assert!(guard.is_valid());
///     // ... protected work ...
/// } // released here
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    client: Redlock,
    lease: Arc<Lease>,
    /// False once released, so `Drop` does not release twice.
    armed: bool,
}

/// What the guard knows about its lock.
pub(crate) struct Lease {
    pub(crate) resource: Arc<str>,
    pub(crate) token: Arc<str>,
    pub(crate) state: Mutex<LeaseState>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseState {
    /// The TTL last set on the nodes.
    pub(crate) ttl: Duration,
    /// Until when a majority is known to hold our token (drift deducted).
    pub(crate) valid_until: Instant,
    /// No key of ours can outlive this instant on any node.
    pub(crate) keys_gone_by: Instant,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.lease.resource)
            .field("token", &"<redacted>")
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        client: Redlock,
        resource: Arc<str>,
        token: Arc<str>,
        ttl: Duration,
        start: Instant,
        valid_until: Instant,
    ) -> Self {
        let keys_gone_by = keys_gone_by(&client, start, ttl);
        LockGuard {
            client,
            lease: Arc::new(Lease {
                resource,
                token,
                state: Mutex::new(LeaseState {
                    ttl,
                    valid_until,
                    keys_gone_by,
                }),
            }),
            armed: true,
        }
    }

    /// The resource (Redis key) this guard holds.
    pub fn resource(&self) -> &str {
        &self.lease.resource
    }

    /// The TTL last set on the nodes (by the acquisition or the last
    /// successful [`extend`](Self::extend)).
    pub fn ttl(&self) -> Duration {
        self.lease.state.lock().ttl
    }

    /// Until when the lock is guaranteed to be ours: the start of the round
    /// that set it, plus its TTL, minus the clock-drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.lease.state.lock().valid_until
    }

    /// How much validity is left (zero once it has run out).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lock is still guaranteed to be ours. Cheap: no I/O.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until()
    }

    /// Extends the lock to `ttl` from now, on every node, with an atomic
    /// compare-and-pexpire. Succeeds only if a majority confirms before the
    /// current validity runs out; [`valid_until`](Self::valid_until) then
    /// moves to the start of this call plus `ttl` minus drift.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the validity had already run out or too few
    /// nodes still held our token; [`Error::NoQuorum`] if too many nodes
    /// failed to answer (the old validity still stands, unless `ttl` is
    /// shorter than what is left); [`Error::Config`] for an unusable `ttl`.
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let inner = &self.client.inner;
        let ttl_ms = inner.ttl_millis(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::now();
        let old = *self.lease.state.lock();
        if start >= old.valid_until {
            return Err(self.lost(Vec::new(), 0));
        }
        let node_timeout = inner.node_timeout(ttl);
        let answer_by = start
            .checked_add(node_timeout)
            .map_or(old.valid_until, |t| t.min(old.valid_until));
        let new_until = algorithm::valid_until(start, ttl, inner.settings.drift_factor);
        let request = self.request(Op::Extend { ttl_ms }, node_timeout, answer_by);
        let tally = inner.transport.round(request, answer_by);
        let verdict = tally.verdict();
        let mut state = self.lease.state.lock();
        // Nodes that applied the new TTL may keep our key longer than before.
        state.keys_gone_by = state
            .keys_gone_by
            .max(keys_gone_by(&self.client, start, ttl));
        if verdict == Some(Verdict::Confirmed) {
            state.ttl = ttl;
            state.valid_until = new_until;
            return Ok(());
        }
        // Nodes that applied a shorter TTL shortened our keys, whatever the outcome.
        state.valid_until = state.valid_until.min(new_until);
        drop(state);
        let confirmed = tally.confirmed();
        Err(match verdict {
            Some(Verdict::Refused) => self.lost(tally.into_failures(), confirmed),
            _ => inner.round_error(&self.lease.resource, tally),
        })
    }

    /// Releases the lock on every node with an atomic compare-and-delete, and
    /// reports whether a majority confirmed.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if too few nodes still held our token (it expired;
    /// another holder's key is never deleted); [`Error::NoQuorum`] if too many
    /// nodes failed to answer (the lock then expires after its TTL).
    pub fn release(mut self) -> Result<(), Error> {
        self.armed = false;
        self.release_now()
    }

    fn release_now(&self) -> Result<(), Error> {
        let inner = &self.client.inner;
        let state = *self.lease.state.lock();
        let node_timeout = inner.node_timeout(state.ttl);
        let start = Instant::now();
        let answer_by = start.checked_add(node_timeout).unwrap_or(start);
        let request = self.request(Op::Release, node_timeout, state.keys_gone_by.max(answer_by));
        let tally = inner.transport.round(request, answer_by);
        match tally.verdict() {
            Some(Verdict::Confirmed) => {
                log::debug!(
                    "redlock: released {:?} in {:?}",
                    self.lease.resource,
                    start.elapsed()
                );
                Ok(())
            }
            Some(Verdict::Refused) => {
                let confirmed = tally.confirmed();
                Err(self.lost(tally.into_failures(), confirmed))
            }
            _ => Err(inner.round_error(&self.lease.resource, tally)),
        }
    }

    fn request(&self, op: Op, io_timeout: Duration, expires: Instant) -> Request {
        Request {
            op,
            key: self.lease.resource.clone(),
            token: self.lease.token.clone(),
            io_timeout,
            expires,
        }
    }

    fn lost(&self, failures: Vec<crate::NodeFailure>, confirmed: usize) -> Error {
        Error::LockLost {
            resource: self.lease.resource.to_string(),
            confirmed,
            quorum: self.client.quorum(),
            failures,
        }
    }
}

/// The latest instant a key set at `start` with `ttl` can still exist: a node
/// may apply the command up to one per-node timeout late.
fn keys_gone_by(client: &Redlock, start: Instant, ttl: Duration) -> Instant {
    let slack = ttl.saturating_add(client.inner.node_timeout(ttl));
    start.checked_add(slack).unwrap_or(start)
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(err) = self.release_now() {
            log::warn!(
                "redlock: releasing {:?} on drop failed (it expires by itself after its ttl): {err}",
                self.lease.resource
            );
        }
    }
}
