//! The guard: proof of holding a lock until its validity runs out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::core::{Core, Lease};
use crate::error::Error;

/// A held lock. Releases it when dropped, like a `MutexGuard`.
///
/// A distributed lock is a lease: it protects your work only until
/// [`valid_until`](Self::valid_until). Check [`is_valid`](Self::is_valid) or
/// [`ensure_valid`](Self::ensure_valid) before each step of protected work
/// (above all before a step that cannot be undone), and either
/// [`extend`](Self::extend) the lease yourself or let the client renew it with
/// [`keep_alive`](Self::keep_alive).
///
/// # Drop does network I/O
///
/// Dropping the guard releases the lock on every node and waits (at most one
/// per-node timeout) until a majority has confirmed, so that another client can
/// take the lock as soon as `drop` returns. If it is the last handle on the
/// client, it also waits (at most 1 s, while a node is stalled) for the
/// deletes still queued for the other nodes; see [`Redlock`](crate::Redlock). A failed release is logged as a
/// warning; the lock then expires after its TTL. Call
/// [`release`](Self::release) instead to see the outcome. After
/// [`Redlock::shutdown`](crate::Redlock::shutdown) (which released it),
/// dropping it does nothing.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])?;
/// {
///     let guard = redlock.lock("invoices", Duration::from_secs(10))?;
///     guard.ensure_valid()?;
///     // ... protected work ...
/// } // released here
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    core: Arc<Core>,
    lease: Arc<Lease>,
    /// False once released, so `Drop` does not release twice.
    armed: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("resources", &self.lease.resources().collect::<Vec<_>>())
            .field("token", &"<redacted>")
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(core: Arc<Core>, lease: Arc<Lease>) -> Self {
        LockGuard {
            core,
            lease,
            armed: true,
        }
    }

    /// The client's core and the lease, for the API types built on a
    /// guard (an election's leadership).
    pub(crate) fn parts(&self) -> (&Arc<Core>, &Arc<Lease>) {
        (&self.core, &self.lease)
    }

    /// The resource (Redis key) this guard holds; for a guard from
    /// [`Redlock::lock_all`](crate::Redlock::lock_all), the first of them.
    pub fn resource(&self) -> &str {
        self.lease.resource()
    }

    /// Every resource (Redis key) this guard holds, in the order they were
    /// asked for: one for [`Redlock::lock`](crate::Redlock::lock), all of them
    /// for [`Redlock::lock_all`](crate::Redlock::lock_all).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let redlock = redlock_sync::Redlock::new(["redis://10.0.0.1"])?;
    /// let guard = redlock.lock_all(&["seat:12A", "seat:12B"], Duration::from_secs(5))?;
    /// assert_eq!(guard.resources().collect::<Vec<_>>(), ["seat:12A", "seat:12B"]);
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> {
        self.lease.resources()
    }

    /// The fencing token of this acquisition, on a client built with
    /// [`fencing(true)`](crate::RedlockBuilder::fencing); `None` otherwise.
    /// It is larger than the token of every acquisition of the same
    /// resource that returned before this one started, and it does not
    /// change on [`extend`](Self::extend) or keep-alive renewals. Pass it
    /// with every write to the protected storage, and have the storage
    /// refuse a token smaller than the largest it has seen.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .fencing(true)
    ///     .build()?;
    /// let guard = redlock.lock("ledger", Duration::from_secs(10))?;
    /// let token = guard.fencing_token().expect("a fencing client");
    /// // storage.write_if_newer(token, data)?;
    /// # let _ = token;
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease.fence()
    }

    /// The TTL last set on the nodes (by the acquisition or the last
    /// successful extension).
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// Until when the lock is guaranteed to be ours: the start of the round
    /// that last set it, plus its TTL, minus the clock-drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// How much validity is left (zero once it has run out or the lock was lost).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Whether the lock is still guaranteed to be ours: validity is left, it
    /// was not lost, and the client was not shut down
    /// ([`Redlock::shutdown`](crate::Redlock::shutdown) released it). Cheap:
    /// no I/O.
    pub fn is_valid(&self) -> bool {
        !self.lease.remaining().is_zero()
    }

    /// `Ok` while the lock is valid; [`Error::LockLost`] once its validity ran
    /// out or a renewal found it gone. Cheap: no I/O. Call it before each step
    /// of protected work, and stop the work on error.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`], with the node failures of the last failed
    /// renewal; [`Error::Shutdown`] once the client was shut down.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        if self.is_valid() {
            Ok(())
        } else {
            Err(self.core.lost_error(&self.lease))
        }
    }

    /// A token cancelled once this guard stops being valid, for any reason:
    /// a renewal or extension found the lock gone (a kept-alive lock's next
    /// renewal comes at most two thirds of its TTL later), it was released
    /// or dropped, or its validity ran out — then the client's keeper
    /// thread cancels it when it wakes, at or shortly after
    /// [`valid_until`](Self::valid_until), never before. Cancelled at once
    /// if the guard is no longer valid. Every call returns a clone of the
    /// same token: whoever holds one can also cancel it for the others.
    ///
    /// It plugs into everything that takes a [`CancelToken`]: end a long
    /// job's pauses with [`CancelToken::sleep`] and its waits with
    /// [`Acquire::cancel_on`](crate::Acquire::cancel_on) as soon as the lock
    /// is gone. Before a step that must not happen twice, still call
    /// [`ensure_valid`](Self::ensure_valid): it is exact, where the token
    /// may come a moment after the validity ran out.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let mut guard = redlock.lock("reindex", Duration::from_secs(30))?;
    /// guard.keep_alive();
    /// let lost = guard.lost_token();
    /// for batch in 0..1000 {
    ///     // A pause that ends as soon as the lock is gone.
    ///     lost.sleep(Duration::from_millis(100));
    ///     guard.ensure_valid()?; // exact: stops before the next batch
    ///     // ... one batch of protected work ...
    ///     # let _ = batch;
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn lost_token(&self) -> CancelToken {
        self.core.lost_token(&self.lease)
    }

    /// From now on the client renews this lock before it expires, until it is
    /// released or dropped. One keeper thread per client renews all kept-alive
    /// locks, each when a third of its TTL is left, with the same TTL.
    ///
    /// A renewal that cannot reach a majority is retried while validity
    /// remains. When validity runs out (or nodes answer that the lock is gone)
    /// the lock is **lost**: [`is_valid`](Self::is_valid) turns false,
    /// [`ensure_valid`](Self::ensure_valid) and [`release`](Self::release)
    /// report [`Error::LockLost`], and a warning naming the resource is
    /// logged. A lost lock is never renewed again. Calling this twice is
    /// harmless.
    pub fn keep_alive(&mut self) {
        if let Err(err) = self.core.keep(&self.lease)
            && err != Error::Shutdown
        {
            log::error!(
                "redlock: cannot keep {:?} alive, it will expire after its ttl: {err}",
                self.lease.name()
            );
        }
    }

    /// Extends the lock to `ttl` from now, on every node, with an atomic
    /// compare-and-pexpire. Succeeds only if a majority confirms before the
    /// current validity runs out; [`valid_until`](Self::valid_until) then
    /// moves to the start of this call plus `ttl` minus drift, and a
    /// keep-alive continues with `ttl` from then on.
    ///
    /// A `ttl` shorter than what is left shortens only the validity this
    /// guard claims: the nodes never shorten a key (so that a late
    /// extension cannot cut a newer one short), and the keys outlive the
    /// guard's claim until they expire or are released.
    ///
    /// If a keep-alive renewal is in flight, this waits for it to end first
    /// (it is decided before the current validity runs out), so that the two
    /// never race.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the validity had already run out or too few
    /// nodes still held our token; [`Error::NoQuorum`] if too many nodes
    /// failed to answer (the old validity still stands); [`Error::Config`]
    /// for an unusable `ttl`.
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.core
            .extend(&self.lease, ttl)
            .map_err(|err| err.in_call("LockGuard::extend"))
    }

    /// Releases the lock on every node with an atomic compare-and-delete, and
    /// reports whether a majority confirmed. Stops any keep-alive.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock was lost or too few nodes still held our
    /// token (it expired; another holder's key is never deleted);
    /// [`Error::NoQuorum`] if too many nodes failed to answer (the lock then
    /// expires after its TTL); [`Error::Shutdown`] if the client was shut
    /// down (the shutdown released it, or tried to: see what it returned).
    pub fn release(mut self) -> Result<(), Error> {
        self.armed = false;
        self.core.release(&self.lease)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.core.release(&self.lease) {
            // Released by the shutdown already: nothing to do.
            Ok(()) | Err(Error::Shutdown) => {}
            // Already warned about when it was lost.
            Err(Error::LockLost { .. }) if self.lease.is_lost() => {}
            Err(err) => log::warn!(
                "redlock: releasing {:?} on drop failed (it expires by itself after its ttl): {err}",
                self.lease.name()
            ),
        }
    }
}
