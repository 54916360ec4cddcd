//! [`RwLock`]: many readers or one writer, on N independent masters.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Acquire;
use crate::core::Core;
use crate::core::{Role, Target};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::holding::RwHolders;

/// A reader-writer lock across processes and machines: any number of
/// readers at once, or one writer and no reader. From
/// [`Redlock::rw_lock`](crate::Redlock::rw_lock); cheap to clone, and usable
/// from many threads.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let config = redlock.rw_lock("config");
/// {
///     let read = config.read(Duration::from_secs(5))?;
///     // ... read the config; other readers may read too ...
///     read.ensure_valid()?;
/// }
/// let write = config
///     .acquire_write(Duration::from_secs(10))
///     .wait(Duration::from_secs(30))
///     .lock()?;
/// // ... reload it: no reader and no other writer meanwhile ...
/// write.release()?;
/// # Ok::<(), redlock_sync::Error>(())
/// ```
///
/// A read or write hold is a [`LockGuard`]: `is_valid`, `ensure_valid`,
/// `extend`, `keep_alive`, `release` and drop work as for a lock, each for
/// its own hold.
///
/// # Why this one is sound on N masters
///
/// A reader-writer lock forbids only *pairs*: writer with writer, writer
/// with reader. Any two majorities share a node, and every node runs one
/// atomic script per request that refuses the second of such a pair — so
/// two conflicting holders would need two majorities with no node in
/// common. (A counting limit, "at most K", is different: see
/// [`Semaphore`](crate::Semaphore).)
///
/// On each node, per lock: the writer's key (an ordinary lock key,
/// `redlock-rw:{name}#w`), the readers (`redlock-rw:{name}#r`, each reader
/// with its own expiry: a crashed reader keeps writers out for at most its
/// TTL), and a waiting writer's mark (`redlock-rw:{name}#wait`). A reader
/// gets in where no writer holds or waits; a writer where no writer and no
/// live reader holds. A writer refused because readers hold leaves its mark
/// for 2 s and renews it with every round (it retries at least every
/// 500 ms), so overlapping readers cannot starve it: new readers wait
/// until it has written, and when the last reader leaves it goes ahead of
/// readers that queued before it. A waiting writer that gives up leaves its
/// mark to expire; [`try_write`](RwLock::try_write), which never waits,
/// marks nothing.
///
/// # What it costs
///
/// A read or write is one round, like a lock. Waiters queue on the lock's
/// gate node in arrival order, readers and writers alike: a release wakes
/// the first in line (a waiting writer that marked, once per reader that
/// held), and a reader let in wakes the next, so readers queued together
/// come in together. With [`fencing`](crate::RedlockBuilder::fencing), a
/// writer's guard carries a fencing token that grows from one writer to the
/// next; a reader's has none (`None`), since readers exclude nobody but
/// writers.
///
/// Its keys never collide with a lock or a semaphore of the same name.
///
/// The handle keeps its client alive: the client's threads run, and what
/// it holds stays held, until the last handle, clone and guard is gone —
/// or until [`Redlock::shutdown`](crate::Redlock::shutdown), after which
/// its calls fail with [`Error::Shutdown`](crate::Error::Shutdown).
#[derive(Clone)]
pub struct RwLock {
    core: Arc<Core>,
    name: Arc<str>,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}

impl RwLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        RwLock {
            core,
            name: Arc::from(name),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes a read hold for `ttl`, retrying per the client's retry policy.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock): [`Error::Busy`] while a
    /// writer held or waited after the last round, [`Error::Config`] for an
    /// empty name.
    pub fn read(&self, ttl: Duration) -> Result<LockGuard, Error> {
        self.acquire_read(ttl).lock_as("RwLock::read")
    }

    /// Takes the write hold for `ttl`, retrying per the client's retry
    /// policy.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read); `Busy` while a writer or readers held.
    pub fn write(&self, ttl: Duration) -> Result<LockGuard, Error> {
        self.acquire_write(ttl).lock_as("RwLock::write")
    }

    /// One round for a read hold: `Ok(None)` while a writer holds or waits.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), except that `Busy` is reported as `Ok(None)`.
    pub fn try_read(&self, ttl: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire_read(ttl).try_lock_as("RwLock::try_read")
    }

    /// One round for the write hold: `Ok(None)` while a writer or readers
    /// hold. It does not wait, so it leaves nothing that makes others wait:
    /// unlike a waiting writer's rounds, it marks nothing when readers
    /// refuse it.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), except that `Busy` is reported as
    /// `Ok(None)`.
    pub fn try_write(&self, ttl: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire_write(ttl).try_lock_as("RwLock::try_write")
    }

    /// A read hold to configure (how long to wait, what cancels it,
    /// keep-alive), then take with [`lock`](Acquire::lock) or
    /// [`try_lock`](Acquire::try_lock).
    pub fn acquire_read(&self, ttl: Duration) -> Acquire {
        Acquire::rw(&self.core, &self.name, Role::Read, ttl)
    }

    /// The write hold to configure, as [`acquire_read`](Self::acquire_read).
    pub fn acquire_write(&self, ttl: Duration) -> Acquire {
        Acquire::rw(&self.core, &self.name, Role::Write, ttl)
    }

    /// Who holds the lock now, as a majority of the nodes says: its writer
    /// or its readers, each a [`Holding`](crate::Holding) that one holder has on at least
    /// `N/2 + 1` nodes, as [`Redlock::inspect`](crate::Redlock::inspect)
    /// reads a lock. Writes nothing.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let holders = redlock.rw_lock("config").inspect()?;
    /// println!("writer: {:?}, readers: {}", holders.writer(), holders.readers().len());
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`](crate::Redlock::inspect): [`Error::NoQuorum`]
    /// when too few nodes answered to tell, [`Error::Config`] for an empty
    /// name.
    pub fn inspect(&self) -> Result<RwHolders, Error> {
        let target = Target::Rw {
            name: self.name.clone(),
            role: Role::Read,
        };
        let mut holders = RwHolders::default();
        for (place, holding) in self.core.inspect(target)? {
            match place {
                0 => holders.writer = Some(holding),
                _ => holders.readers.push(holding),
            }
        }
        Ok(holders)
    }
}
