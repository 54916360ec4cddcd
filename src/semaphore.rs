//! [`Semaphore`]: at most `K` holders at once, on N independent masters.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Acquire;
use crate::core::{Core, Target};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::holding::Holding;

/// A counting semaphore across processes and machines: at most
/// [`permits`](Self::permits) holders at once. From
/// [`Redlock::semaphore`](crate::Redlock::semaphore); cheap to clone, and
/// usable from many threads.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// // At most 4 imports at once, fleet-wide.
/// let imports = redlock.semaphore("imports", 4);
/// let permit = imports
///     .acquire(Duration::from_secs(30))
///     .wait(Duration::from_secs(120))
///     .keep_alive()
///     .lock()?;
/// // ... import ...
/// permit.release()?;
/// # Ok::<(), redlock_sync::Error>(())
/// ```
///
/// A permit is a [`LockGuard`]: `is_valid`, `ensure_valid`, `extend`,
/// `keep_alive`, `release` and drop work as for a lock.
///
/// # Why at most `K`, even when nodes disagree
///
/// Counting holders on each node and admitting on a majority, as other
/// multi-master semaphores do, admits `K + 1`: no node has to see every
/// holder. With a limit of 2 on three nodes, holders on nodes {1,2}, {2,3}
/// and {1,3} each leave only 2 on any one node. "At most `K`" constrains
/// `K + 1` holders together, and no majority intersection can check that.
///
/// So a semaphore here is `K` ordinary Redlock locks, its *slots*
/// (`redlock-sem:{name}#0` … `#K-1`), and a permit is one slot held on a
/// majority. Two holders of one slot would need two majorities with
/// no node in common; there are `K` slots, so there are at most `K`
/// holders. Every guarantee and caveat of a plain lock (validity, clock
/// drift, TTL, restarts: see the crate docs) applies per slot.
///
/// # What it costs
///
/// A round tries one slot on every node; the nodes answer with the slots
/// they hold, so a busy round goes on at once with the slot free on the
/// most nodes, not with the next in line. [`try_lock`](Self::try_lock) may
/// take several rounds (one pass: each slot tried at most once), never
/// waits for a release, and answers `None` when the pass found every slot
/// taken — refused when tried, or reported held on too many nodes to be
/// free on a majority. The reports are what the nodes held when they
/// answered: a permit released during the pass may be missed. A
/// waiter queues on the semaphore's gate node like a lock's waiter and is
/// woken by the release of any slot.
///
/// Every client must use the same number of permits for a name: a client
/// with fewer uses only the first slots (a stricter limit for itself), one
/// with more admits more holders. A semaphore has at most 64 permits.
///
/// With [`fencing`](crate::RedlockBuilder::fencing), a permit's fencing
/// token orders the holders *of its slot*: it grows from one holder of
/// that slot to the next, but says nothing about holders of other slots,
/// which may hold at the same time.
///
/// The handle keeps its client alive: the client's threads run, and what
/// it holds stays held, until the last handle, clone and guard is gone —
/// or until [`Redlock::shutdown`](crate::Redlock::shutdown), after which
/// its calls fail with [`Error::Shutdown`](crate::Error::Shutdown).
#[derive(Clone)]
pub struct Semaphore {
    core: Arc<Core>,
    name: Arc<str>,
    permits: u32,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(core: Arc<Core>, name: &str, permits: u32) -> Self {
        Semaphore {
            core,
            name: Arc::from(name),
            permits,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit for `ttl`, retrying per the client's retry policy,
    /// as [`Redlock::lock`](crate::Redlock::lock).
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock): [`Error::Busy`] when
    /// every permit was still taken after the last round, and
    /// [`Error::Config`] for an empty name, 0 permits or more than 64.
    pub fn lock(&self, ttl: Duration) -> Result<LockGuard, Error> {
        self.acquire(ttl).lock_as("Semaphore::lock")
    }

    /// Takes a permit if one is free now: `Ok(None)` when one pass over
    /// the slots found every permit held (see [What it
    /// costs](Self#what-it-costs): a permit released during the pass may be
    /// missed). May take several rounds (one per slot at most), but never
    /// waits for a release.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that `Busy` is reported as `Ok(None)`.
    pub fn try_lock(&self, ttl: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire(ttl).try_lock_as("Semaphore::try_lock")
    }

    /// An acquisition of a permit to configure (how long to wait, what
    /// cancels it, keep-alive), then run with
    /// [`lock`](Acquire::lock) or [`try_lock`](Acquire::try_lock).
    pub fn acquire(&self, ttl: Duration) -> Acquire {
        Acquire::permit(&self.core, &self.name, self.permits, ttl)
    }

    /// The permits in use now, as a majority of the nodes says: one
    /// [`Holding`] per permit that one holder has on at least `N/2 + 1`
    /// nodes, in slot order, as [`Redlock::inspect`](crate::Redlock::inspect)
    /// reads a lock. Writes nothing.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let pool = redlock.semaphore("db-connections", 8);
    /// println!("{} of {} permits in use", pool.inspect()?.len(), pool.permits());
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`](crate::Redlock::inspect): [`Error::NoQuorum`]
    /// when too few nodes answered to tell, [`Error::Config`] for an empty
    /// name, 0 permits or more than 64.
    pub fn inspect(&self) -> Result<Vec<Holding>, Error> {
        let target = Target::Semaphore {
            name: self.name.clone(),
            permits: self.permits,
        };
        let found = self.core.inspect(target)?;
        Ok(found.into_iter().map(|(_, holding)| holding).collect())
    }
}
