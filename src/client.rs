//! The client: acquisition rounds and the retry policy.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::algorithm::{self, Tally, Verdict};
use crate::config::{NodeSpec, RedlockBuilder, Settings};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::handoff::Waiters;
use crate::keeper;
use crate::lease::{self, Lease};
use crate::transport::{Op, Request, Transport};

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone: clones share the same connection pools and worker
/// threads, so build one client per process and hand clones to every thread.
/// The workers stop when the last clone and the last [`LockGuard`] are gone.
///
/// Each operation sends its command to every node in parallel through the
/// client's per-node worker threads and returns as soon as the outcome is
/// known: once a majority (`N/2 + 1`) has answered alike, or once a majority
/// has become impossible. A node that is down or stalled costs at most the
/// per-node timeout, and usually nothing.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let guard = redlock.lock("reports:nightly", Duration::from_secs(30))?;
/// // ... work that must not run twice at once, finished well before
/// // guard.valid_until() ...
/// guard.release()?;
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Transport,
    pub(crate) settings: Settings,
    /// Registrations for the keeper thread, started on first `keep_alive`.
    keeper: Mutex<Option<Sender<Weak<Lease>>>>,
    /// This client's threads waiting between rounds, woken by local releases.
    pub(crate) waiters: Waiters,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.transport)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

/// When to stop retrying.
#[derive(Clone, Copy)]
enum Patience {
    Attempts(u32),
    Until(Option<Instant>),
}

impl Inner {
    /// The per-node timeout for operations on a lock with this TTL.
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        self.settings.node_timeout.unwrap_or_else(|| {
            algorithm::derived_node_timeout(ttl, self.settings.node_timeout_factor)
        })
    }

    pub(crate) fn ttl_millis(&self, ttl: Duration) -> Result<u64, Error> {
        algorithm::ttl_millis(ttl, self.settings.drift_factor).map_err(Error::config)
    }

    /// Classifies a failed round as the error the caller sees.
    pub(crate) fn round_error(&self, resource: &str, tally: Tally) -> Error {
        match tally.verdict() {
            Some(Verdict::Refused) => Error::Busy {
                resource: resource.to_owned(),
                attempts: 1,
            },
            _ => Error::NoQuorum {
                resource: resource.to_owned(),
                confirmed: tally.confirmed(),
                quorum: tally.quorum(),
                failures: tally.into_failures(),
            },
        }
    }
}

impl Redlock {
    /// A client with default settings over the given node URLs.
    ///
    /// Each URL is `redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` (with a TLS feature enabled) or `unix:///path/to/socket`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the list is empty or a URL is malformed,
    /// unsupported or listed twice. Nodes that are down are not an error.
    pub fn new<I>(nodes: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder(nodes).build()
    }

    /// A builder to configure retries, timeouts and drift before building.
    pub fn builder<I>(nodes: I) -> RedlockBuilder
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        RedlockBuilder::new(nodes)
    }

    pub(crate) fn start(nodes: Vec<NodeSpec>, settings: Settings) -> Result<Redlock, Error> {
        let transport = Transport::start(nodes, &settings)?;
        Ok(Redlock {
            inner: Arc::new(Inner {
                transport,
                settings,
                keeper: Mutex::new(None),
                waiters: Waiters::default(),
            }),
        })
    }

    /// How many nodes this client uses.
    pub fn node_count(&self) -> usize {
        self.inner.transport.len()
    }

    /// How many nodes must agree for any operation to succeed (`N/2 + 1`).
    pub fn quorum(&self) -> usize {
        algorithm::quorum(self.node_count())
    }

    /// Acquires `resource` for `ttl`, retrying per the client's retry policy
    /// (`retry_count` more rounds, each after a jittered delay).
    ///
    /// The Redis key is `resource` itself, so other Redlock clients using the
    /// same keys interoperate.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] if another client still held it after the last round,
    /// [`Error::NoQuorum`] if too many nodes failed, [`Error::TooSlow`] if the
    /// nodes answered too late for the TTL, [`Error::Config`] for an empty
    /// resource or an unusable TTL.
    pub fn lock(&self, resource: &str, ttl: Duration) -> Result<LockGuard, Error> {
        self.acquire(
            resource,
            ttl,
            Patience::Attempts(self.inner.settings.retry_count),
        )
    }

    /// Makes a single acquisition round. `Ok(None)` means another client holds
    /// the resource.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that `Busy` is reported as `Ok(None)`.
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<LockGuard>, Error> {
        match self.acquire(resource, ttl, Patience::Attempts(0)) {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Busy { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Retries until the lock is acquired or `wait` has passed. Returns within
    /// about one per-node timeout after `wait`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); the error is that of the last round.
    pub fn lock_for(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        let deadline = Instant::now().checked_add(wait);
        self.acquire(resource, ttl, Patience::Until(deadline))
    }

    /// Retries until the lock is acquired or `deadline` has passed. Returns
    /// within about one per-node timeout after `deadline`; a deadline already
    /// past still gets one round.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); the error is that of the last round.
    pub fn lock_until(
        &self,
        resource: &str,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<LockGuard, Error> {
        self.acquire(resource, ttl, Patience::Until(Some(deadline)))
    }

    /// Runs `work` while holding `resource`: acquires it (retrying per the
    /// policy), keeps it alive while `work` runs, and releases it afterwards —
    /// also when `work` panics (the panic then continues).
    ///
    /// Inside `work`, call [`LockGuard::ensure_valid`] before each step that
    /// must not run without the lock.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let total = redlock.with_lock("ledger", Duration::from_secs(5), |guard| {
    ///     let mut total = 0;
    ///     for batch in 0..100 {
    ///         guard.ensure_valid()?; // stop at once if the lock was lost
    ///         total += batch;
    ///     }
    ///     Ok::<_, redlock_sync::Error>(total)
    /// })??;
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) when the lock cannot be had; [`Error::LockLost`]
    /// if it was lost while `work` ran (the result of `work` is then dropped,
    /// because it was not protected throughout). A release that cannot be
    /// confirmed after a valid run is only logged: the work was protected.
    pub fn with_lock<T, F>(&self, resource: &str, ttl: Duration, work: F) -> Result<T, Error>
    where
        F: FnOnce(&LockGuard) -> T,
    {
        let mut guard = self.lock(resource, ttl)?;
        guard.keep_alive();
        let value = work(&guard);
        let valid = guard.ensure_valid();
        let released = guard.release();
        valid?;
        match released {
            Ok(()) => Ok(value),
            Err(err @ Error::LockLost { .. }) => Err(err),
            Err(err) => {
                log::warn!("redlock: releasing {resource:?} after with_lock failed: {err}");
                Ok(value)
            }
        }
    }

    /// Registers a lease with the keeper thread, starting it if needed.
    pub(crate) fn keep(&self, lease: &Arc<Lease>) -> Result<(), Error> {
        let mut keeper = self.inner.keeper.lock();
        if keeper.is_none() {
            let started =
                keeper::start(Arc::downgrade(&self.inner)).map_err(|e| Error::System {
                    reason: format!("could not start the keeper thread: {e}"),
                })?;
            *keeper = Some(started);
        }
        let sent = keeper.as_ref().map(|tx| tx.send(Arc::downgrade(lease)));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(Error::System {
                reason: "the keeper thread has stopped".into(),
            }),
        }
    }

    fn acquire(
        &self,
        resource: &str,
        ttl: Duration,
        patience: Patience,
    ) -> Result<LockGuard, Error> {
        if resource.is_empty() {
            return Err(Error::config(
                "the resource name is empty; name what you lock",
            ));
        }
        let ttl_ms = self.inner.ttl_millis(ttl)?;
        let key: Arc<str> = Arc::from(resource);
        let settings = &self.inner.settings;
        // Queue behind this client's threads already waiting for the resource
        // (bounded by one retry pause), so that ownership rotates.
        if !matches!(patience, Patience::Attempts(0)) && self.inner.waiters.has_waiters(&key) {
            let pause = algorithm::retry_delay(settings.retry_delay, settings.retry_jitter);
            self.inner.waiters.wait(&key, pause_until(pause, patience));
        }
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let (err, give_up) = match self.attempt(&key, ttl_ms) {
                Ok(guard) => return Ok(guard),
                Err(failed) => failed,
            };
            let out_of_patience = match patience {
                Patience::Attempts(retries) => attempts > retries,
                Patience::Until(None) => false,
                Patience::Until(Some(deadline)) => Instant::now() >= deadline,
            };
            if give_up || out_of_patience {
                return Err(with_attempts(err, attempts));
            }
            // Sleep until the pause is over, or until another thread of this
            // client releases the resource.
            let pause = algorithm::retry_delay(settings.retry_delay, settings.retry_jitter);
            self.inner.waiters.wait(&key, pause_until(pause, patience));
        }
    }

    /// One acquisition round. On failure, returns the error and whether
    /// retrying is pointless; the partial lock has been released everywhere.
    fn attempt(&self, key: &Arc<str>, ttl_ms: u64) -> Result<LockGuard, (Error, bool)> {
        let ttl = Duration::from_millis(ttl_ms);
        let node_timeout = self.inner.node_timeout(ttl);
        let token = new_token();
        let start = Instant::now();
        let answer_by = start.checked_add(node_timeout).unwrap_or(start);
        let tally = self.inner.transport.round(
            Request {
                op: Op::Acquire { ttl_ms },
                key: key.clone(),
                token: token.clone(),
                io_timeout: node_timeout,
                expires: answer_by,
            },
            answer_by,
        );
        let valid_until = algorithm::valid_until(start, ttl, self.inner.settings.drift_factor);
        let failed = match tally.verdict() {
            Some(Verdict::Confirmed) if Instant::now() < valid_until => {
                log::debug!("redlock: acquired {key:?} in {:?}", start.elapsed());
                let lease = Lease::new(&self.inner, key.clone(), token, ttl, start, valid_until);
                return Ok(LockGuard::new(self.clone(), lease));
            }
            Some(Verdict::Confirmed) => (
                Error::TooSlow {
                    resource: key.to_string(),
                    elapsed: start.elapsed(),
                    ttl,
                },
                false,
            ),
            _ => {
                let permanent = tally.permanently_failed();
                (self.inner.round_error(key, tally), permanent)
            }
        };
        // Release everywhere, including nodes that failed or did not answer:
        // their SET may still have landed. The caller does not wait for it.
        self.inner.transport.broadcast(Request {
            op: Op::Release,
            key: key.clone(),
            token,
            io_timeout: node_timeout,
            expires: lease::keys_gone_by(&self.inner, start, ttl),
        });
        log::debug!("redlock: round for {key:?} failed: {}", failed.0);
        Err(failed)
    }
}

/// The end of a retry pause, never past the caller's deadline.
fn pause_until(pause: Duration, patience: Patience) -> Instant {
    let now = Instant::now();
    let end = now.checked_add(pause).unwrap_or(now);
    match patience {
        Patience::Until(Some(deadline)) => end.min(deadline),
        _ => end,
    }
}

fn with_attempts(err: Error, attempts: u32) -> Error {
    match err {
        Error::Busy { resource, .. } => Error::Busy { resource, attempts },
        other => other,
    }
}

/// 20 bytes from the thread-local CSPRNG, hex-encoded (40 characters).
fn new_token() -> Arc<str> {
    let mut bytes = [0u8; 20];
    rand::fill(&mut bytes);
    let mut token = String::with_capacity(40);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Arc::from(token)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_hex_and_unique() {
        let tokens: std::collections::HashSet<_> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        for token in &tokens {
            assert_eq!(token.len(), 40);
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
