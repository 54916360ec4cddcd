//! [`Acquire`]: one call shape for every acquisition option.

use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use std::sync::Arc;

use crate::core::Role;
use crate::core::{Core, Patience, Target};
use crate::error::Error;
use crate::guard::LockGuard;

/// An acquisition to configure and then run, from [`Redlock::acquire`](crate::Redlock::acquire),
/// [`Redlock::acquire_all`](crate::Redlock::acquire_all),
/// [`Semaphore::acquire`](crate::Semaphore::acquire),
/// [`RwLock::acquire_read`](crate::RwLock::acquire_read) or
/// [`RwLock::acquire_write`](crate::RwLock::acquire_write): how long to keep trying, what may cancel the
/// wait, whether the guard starts kept alive. Every option has a default, so
/// `redlock.acquire(r, ttl).lock()` is [`Redlock::lock`](crate::Redlock::lock).
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::{CancelToken, Redlock};
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let shutdown = CancelToken::new();
/// let guard = redlock
///     .acquire("imports:daily", Duration::from_secs(10))
///     .wait(Duration::from_secs(60)) // retry for up to a minute
///     .cancel_on(&shutdown)          // or until shutdown.cancel()
///     .keep_alive()                  // renewed until released
///     .lock()?;
/// # drop(guard);
/// # Ok::<(), redlock_sync::Error>(())
/// ```
///
/// # Limits
///
/// With neither [`wait`](Self::wait)/[`deadline`](Self::deadline) nor
/// [`retries`](Self::retries), the client's retry policy applies. With
/// `wait` or `deadline` only, rounds go on until the time is up. With both,
/// whichever limit comes first ends the attempts.
///
/// # Ownership
///
/// An `Acquire` owns what it needs (a handle on the client): it does not
/// borrow the `Redlock`, `Semaphore`, `RwLock` or `Election` it came from,
/// so it can be kept in a variable, or made from a handle that lives only
/// for one expression.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let permit = redlock.semaphore("imports", 4).acquire(Duration::from_secs(30));
/// let write = redlock.rw_lock("config").acquire_write(Duration::from_secs(5));
/// let guard = permit.wait(Duration::from_secs(10)).lock()?;
/// # drop((guard, write));
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[must_use = "an acquisition does nothing until lock() or try_lock() is called"]
pub struct Acquire {
    core: Arc<Core>,
    target: Target,
    ttl: Duration,
    wait: Option<Duration>,
    deadline: Option<Instant>,
    retries: Option<u32>,
    cancel: Option<CancelToken>,
    keep_alive: bool,
}

impl std::fmt::Debug for Acquire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("target", &self.target)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("deadline", &self.deadline)
            .field("retries", &self.retries)
            .field("cancel", &self.cancel)
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

impl Acquire {
    /// A lock on every one of `resources`.
    pub(crate) fn new(core: &Arc<Core>, resources: &[&str], ttl: Duration) -> Self {
        let keys = resources.iter().map(|r| Arc::from(*r)).collect();
        Self::of(core, Target::Resources(keys), ttl)
    }

    /// One permit of the semaphore `name` of `permits`.
    pub(crate) fn permit(core: &Arc<Core>, name: &str, permits: u32, ttl: Duration) -> Self {
        let name = Arc::from(name);
        Self::of(core, Target::Semaphore { name, permits }, ttl)
    }

    /// The reader-writer lock `name`, as a reader or as its writer.
    pub(crate) fn rw(core: &Arc<Core>, name: &str, role: Role, ttl: Duration) -> Self {
        let name = Arc::from(name);
        Self::of(core, Target::Rw { name, role }, ttl)
    }

    /// The leadership of the election `name`.
    pub(crate) fn election(core: &Arc<Core>, name: &str, ttl: Duration) -> Self {
        let name = Arc::from(name);
        Self::of(core, Target::Election { name }, ttl)
    }

    fn of(core: &Arc<Core>, target: Target, ttl: Duration) -> Self {
        Acquire {
            core: core.clone(),
            target,
            ttl,
            wait: None,
            deadline: None,
            retries: None,
            cancel: None,
            keep_alive: false,
        }
    }
}

impl Acquire {
    /// Keeps trying until this long has passed (counted from
    /// [`lock`](Self::lock)). Replaces an earlier [`deadline`](Self::deadline).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self.deadline = None;
        self
    }

    /// Keeps trying until `deadline`. Replaces an earlier
    /// [`wait`](Self::wait). A deadline already past still gets one round.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self.wait = None;
        self
    }

    /// At most this many rounds after the first. Defaults to the client's
    /// [`retry_count`](crate::RedlockBuilder::retry_count) unless a
    /// [`wait`](Self::wait) or [`deadline`](Self::deadline) is set. Every
    /// round counts, including those a wake-up brings early; only a round
    /// re-tried at once comes on top — one that split the votes with other
    /// contenders (see [`Redlock::try_lock`](crate::Redlock::try_lock)), or
    /// a queued waiter's round, in its turn, that the other nodes refused
    /// because the release had not reached them yet — a few times each.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = Some(retries);
        self
    }

    /// Ends the wait with [`Error::Cancelled`] when `token` is cancelled:
    /// before the call, without touching the nodes; during a pause between
    /// rounds, at once; during a round, when it ends (within one per-node
    /// timeout), releasing what it took. Cancelling after the lock was
    /// acquired does not affect the guard.
    pub fn cancel_on(mut self, token: &CancelToken) -> Self {
        self.cancel = Some(token.clone());
        self
    }

    /// The guard starts kept alive, as after [`LockGuard::keep_alive`].
    pub fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }

    /// Acquires, retrying as configured.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock) / [`Redlock::lock_all`](crate::Redlock::lock_all), and
    /// [`Error::Cancelled`] if the token was cancelled.
    pub fn lock(self) -> Result<LockGuard, Error> {
        self.lock_as("Acquire::lock")
    }

    /// [`lock`](Self::lock), with errors naming `call`.
    pub(crate) fn lock_as(self, call: &str) -> Result<LockGuard, Error> {
        let now = Instant::now();
        let deadline = match (self.wait, self.deadline) {
            (Some(wait), _) => Some(now.checked_add(wait)),
            (None, Some(deadline)) => Some(Some(deadline)),
            (None, None) => None,
        };
        let patience = match (deadline, self.retries) {
            // The client's policy.
            (None, None) => Patience::attempts(self.core.retry_count()),
            (None, Some(retries)) => Patience::attempts(retries),
            // An overflowing wait never ends: no deadline.
            (Some(deadline), retries) => Patience {
                retries,
                ..Patience::until(deadline)
            },
        };
        self.run(call, patience)
    }

    /// One round, as [`Redlock::try_lock`](crate::Redlock::try_lock): `Ok(None)` when someone else
    /// holds (one of) the resources.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that `Busy` is reported as `Ok(None)`.
    pub fn try_lock(self) -> Result<Option<LockGuard>, Error> {
        self.try_lock_as("Acquire::try_lock")
    }

    /// [`try_lock`](Self::try_lock), with errors naming `call`.
    pub(crate) fn try_lock_as(self, call: &str) -> Result<Option<LockGuard>, Error> {
        match self.run(call, Patience::attempts(0)) {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Busy { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn run(self, call: &str, patience: Patience) -> Result<LockGuard, Error> {
        let patience = Patience {
            cancel: self.cancel,
            ..patience
        };
        let lease = self
            .core
            .acquire_target(self.target, self.ttl, patience)
            .map_err(|err| err.in_call(call))?;
        let mut guard = LockGuard::new(self.core.clone(), lease);
        if self.keep_alive {
            guard.keep_alive();
        }
        Ok(guard)
    }
}
