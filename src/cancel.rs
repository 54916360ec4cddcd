//! [`CancelToken`]: a flag another thread sets to abandon waits for locks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Cancels waits for locks from another thread: set it with
/// [`cancel`](Self::cancel), and every acquisition waiting on it (through
/// [`Acquire::cancel_on`](crate::Acquire::cancel_on)) returns
/// [`Error::Cancelled`](crate::Error::Cancelled) — at once from its pause
/// between rounds (not at the end of it), or when a round already in flight
/// ends (within one per-node timeout) — and leaves nothing behind.
///
/// Cheap to clone; clones share the flag, so one token can cancel many waits
/// (a whole program's, on SIGTERM). A token stays cancelled. Cancelling does
/// not affect locks already held.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::{CancelToken, Error, Redlock};
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let shutdown = CancelToken::new();
/// let on_signal = shutdown.clone(); // e.g. moved into a signal handler
/// # let _ = on_signal;
/// match redlock
///     .acquire("reports:nightly", Duration::from_secs(30))
///     .wait(Duration::from_secs(600))
///     .cancel_on(&shutdown)
///     .lock()
/// {
///     Ok(guard) => drop(guard),
///     Err(Error::Cancelled { .. }) => println!("shutting down"),
///     Err(err) => return Err(err),
/// }
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    cancelled: AtomicBool,
    /// What to wake on cancel: the sleepers waiting with this token.
    sleepers: Mutex<Vec<Weak<dyn Wake>>>,
}

/// What [`CancelToken::sleep`] sleeps on.
#[derive(Default)]
struct Sleeper {
    woken: Mutex<()>,
    wake: Condvar,
}

impl Wake for Sleeper {
    fn wake(&self) {
        let _woken = self.woken.lock();
        self.wake.notify_all();
    }
}

/// Something a waiting thread sleeps on, that `cancel` can wake without a
/// lost wake-up (it takes the sleeper's own lock before notifying).
pub(crate) trait Wake: Send + Sync {
    fn wake(&self);
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait using this token (or a clone of it), now and
    /// later. Idempotent; it takes short internal locks, never waits for a
    /// lock holder to finish I/O — but call it from an ordinary thread (the
    /// `ctrlc` crate's handler thread, `signal-hook`'s iterator), not from
    /// inside a raw signal handler.
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::SeqCst);
        let sleepers = std::mem::take(&mut *self.shared.sleepers.lock());
        for sleeper in sleepers.iter().filter_map(Weak::upgrade) {
            sleeper.wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// Registers `sleeper` to be woken by [`cancel`](Self::cancel), once
    /// however often it sleeps. Register before checking
    /// [`is_cancelled`](Self::is_cancelled) under the sleeper's lock, so that
    /// a cancel in between is never missed.
    pub(crate) fn register(&self, sleeper: &Arc<dyn Wake>) {
        let mut sleepers = self.shared.sleepers.lock();
        sleepers.retain(|s| s.strong_count() > 0);
        let weak = Arc::downgrade(sleeper);
        if !sleepers.iter().any(|s| Weak::ptr_eq(s, &weak)) {
            sleepers.push(weak);
        }
    }

    /// Forgets `sleeper` (its last waiter is gone).
    pub(crate) fn unregister(&self, sleeper: &Arc<dyn Wake>) {
        let weak = Arc::downgrade(sleeper);
        self.shared
            .sleepers
            .lock()
            .retain(|s| s.strong_count() > 0 && !Weak::ptr_eq(s, &weak));
    }

    /// Sleeps for `duration`, or until the token is cancelled, whichever
    /// comes first: a worker's own pauses end on Ctrl-C too. Returns `true`
    /// if the token is cancelled (at once if it already was), `false` after
    /// the full `duration`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlock_sync::CancelToken;
    ///
    /// let shutdown = CancelToken::new();
    /// for step in 0..3 {
    ///     // ... one step of work ...
    ///     if shutdown.sleep(Duration::from_millis(10)) {
    ///         break; // cancelled: stop between steps
    ///     }
    /// #   let _ = step;
    /// }
    /// shutdown.cancel();
    /// assert!(shutdown.sleep(Duration::from_secs(3600)), "returns at once");
    /// ```
    pub fn sleep(&self, duration: Duration) -> bool {
        let sleeper = Arc::new(Sleeper::default());
        let wake: Arc<dyn Wake> = sleeper.clone();
        self.register(&wake);
        let deadline = Instant::now().checked_add(duration);
        let mut woken = sleeper.woken.lock();
        while !self.is_cancelled() {
            let timed_out = match deadline {
                Some(deadline) => sleeper.wake.wait_until(&mut woken, deadline).timed_out(),
                None => {
                    sleeper.wake.wait(&mut woken);
                    false
                }
            };
            if timed_out {
                break;
            }
        }
        drop(woken);
        self.unregister(&wake);
        self.is_cancelled()
    }

    #[cfg(test)]
    pub(crate) fn sleepers(&self) -> usize {
        self.shared.sleepers.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_shared_by_its_clones_and_stays_cancelled() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(!token.is_cancelled());
        clone.cancel();
        assert!(token.is_cancelled());
        token.cancel();
        assert!(clone.is_cancelled());
        assert!(!CancelToken::default().is_cancelled());
        assert_eq!(format!("{token:?}"), "CancelToken { cancelled: true }");
    }

    #[test]
    fn a_sleep_ends_when_the_token_is_cancelled() {
        let token = CancelToken::new();
        assert!(!token.sleep(Duration::from_millis(1)), "the full time");
        std::thread::scope(|s| {
            let sleeping = s.spawn(|| token.sleep(Duration::from_secs(60)));
            // Cancel once it sleeps (registered), then it must end at once.
            while token.sleepers() == 0 {
                std::thread::yield_now();
            }
            token.cancel();
            assert!(sleeping.join().unwrap(), "woken by the cancel");
        });
        assert_eq!(token.sleepers(), 0, "nothing left registered");
        assert!(token.sleep(Duration::MAX), "cancelled: returns at once");
    }

    fn assert_traits<T: Clone + Send + Sync + Default + 'static>() {}

    #[test]
    fn cancel_token_is_clone_send_sync_default() {
        assert_traits::<CancelToken>();
    }
}
