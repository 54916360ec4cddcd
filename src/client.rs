//! The client handle, [`Redlock`]: its constructors and its calls (locks,
//! semaphores, rw-locks, elections, health, shutdown), handed to the core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::Acquire;
use crate::config::RedlockBuilder;
use crate::core::{Core, Target};
use crate::election::Election;
use crate::error::Error;
use crate::guard::LockGuard;
use crate::health::NodeHealth;
use crate::holding::Holding;
use crate::rw_lock::RwLock;
use crate::semaphore::Semaphore;

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone: clones share the same connection pools and worker
/// threads, so build one client per process and hand clones to every thread.
/// The workers stop when the last clone and the last [`LockGuard`] are gone;
/// that last drop waits until requests already queued — the deletes of a
/// release, which returns as soon as a majority confirmed — have reached the
/// other nodes too (microseconds with healthy nodes, at most 1 s while one is
/// stalled), so a program that drops its client before exiting leaves no key
/// behind. (A client in a `static`, or a `process::exit` before the drop, gets
/// no such wait: call [`shutdown`](Self::shutdown) on the way out.)
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
    core: Arc<Core>,
}

impl std::fmt::Debug for Redlock {
    /// The nodes (by address, never by URL) and the settings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .core
            .node_health()
            .iter()
            .map(|node| node.address().to_owned())
            .collect();
        f.debug_struct("Redlock")
            .field("nodes", &nodes)
            .field("config", &self.config())
            .finish()
    }
}

impl Redlock {
    /// A client with default settings over the given node URLs, one node
    /// (and one vote) each:
    ///
    /// | URL | node |
    /// | --- | --- |
    /// | `redis://[user:password@]host[:port][/db]` | one Redis server (port 6379 by default) |
    /// | `rediss://…` | the same over TLS (a TLS feature: `tls-rustls` or `tls-native-tls`) |
    /// | `unix:///path/to/socket[?db=N&pass=…]` (or `redis+unix://`) | one server on a Unix socket |
    /// | `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]` | whichever server the Sentinels name as the service's master (the password is the master's; see [`RedlockBuilder::sentinel_password`]) |
    /// | `redis+cluster://[user:password@]host:port[,host:port…]` | a whole Redis Cluster, reached through some of its masters (`rediss+cluster://` over TLS) |
    ///
    /// Percent-encode `@`, `/`, `?` and `#` in a password (`%40`…), and in
    /// a `redis+cluster://` URL `,` too (`%2C`). List
    /// independent servers, each once; a cluster member is listed through
    /// its cluster's `redis+cluster://` URL, never as `redis://`.
    ///
    /// ```no_run
    /// let redlock = redlock_sync::Redlock::new([
    ///     "redis://10.0.0.1",
    ///     "redis://:secret@10.0.0.2:6380",
    ///     "redis+cluster://10.0.1.1:7000,10.0.1.2:7000",
    /// ])?;
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the list is empty, a URL is malformed,
    /// unsupported or listed twice, or a node that answered while the
    /// client started can never count (see [`RedlockBuilder::build`]).
    /// Nodes that are down are not an error.
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

    /// How many nodes this client uses.
    pub fn node_count(&self) -> usize {
        self.core.node_count()
    }

    /// How many nodes must agree for any operation to succeed (`N/2 + 1`).
    pub fn quorum(&self) -> usize {
        self.core.quorum()
    }

    /// Acquires `resource` for `ttl`, retrying per the client's retry policy
    /// (`retry_count` more rounds, each after a jittered delay: with the
    /// defaults it waits about 1.1 s for a resource that stays held; use
    /// [`lock_for`](Self::lock_for) to wait for a set time).
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
        self.acquire(resource, ttl).lock_as("lock")
    }

    /// Tries once, without waiting for a holder. `Ok(None)` means another
    /// client holds the resource.
    ///
    /// When several clients try at the same moment, their votes can split
    /// so that none of them wins a majority; such a round (the nodes that
    /// refused name no single holder with a majority) is re-tried after
    /// 1–4 ms, up to 5 times within a tenth of the TTL (at most 100 ms), so
    /// that one of them usually gets it. Nodes must run Redis 7.0 or later
    /// (`SET … NX GET` tells who refused).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that `Busy` is reported as `Ok(None)`.
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire(resource, ttl).try_lock_as("try_lock")
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
        self.acquire(resource, ttl).wait(wait).lock_as("lock_for")
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
        self.acquire(resource, ttl)
            .deadline(deadline)
            .lock_as("lock_until")
    }

    /// Acquires **every one** of `resources` for `ttl`, or none of them,
    /// retrying per the client's retry policy like [`lock`](Self::lock).
    ///
    /// On each node one Lua script sets every key (`SET NX PX`, one token) or,
    /// if any of them is held, none; the lock is had when a majority of
    /// nodes set them all. So there is no order to get wrong and no deadlock:
    /// two programs locking `["a", "b"]` and `["b", "a"]` never hold one each
    /// while waiting for the other, and a failed round releases everywhere as
    /// for a single lock. One round trip per node, whatever the number of keys.
    ///
    /// The keys and values are those of single locks, so a multi-lock on
    /// `["a", "b"]` excludes `lock("a")` and the reverse, in this crate and in
    /// other Redlock clients. The guard's `extend`, `keep_alive`,
    /// `ensure_valid`, `release` and `Drop` act on every key: an extension or
    /// release confirms only where every key still held our token.
    ///
    /// A lock on several resources waits by retrying: it takes no place in
    /// the queues of waiters (see
    /// [`release_notifications`](crate::RedlockBuilder::release_notifications)),
    /// which order the waiters of one resource each.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let guard = redlock.lock_all(&["account:17", "account:42"], Duration::from_secs(10))?;
    /// // ... move money between the two accounts ...
    /// guard.release()?;
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) (errors name the resources joined by `, `);
    /// [`Error::Config`] for an empty list, an empty name, a name listed
    /// twice, or more than 128 resources.
    pub fn lock_all(&self, resources: &[&str], ttl: Duration) -> Result<LockGuard, Error> {
        self.acquire_all(resources, ttl).lock_as("lock_all")
    }

    /// One round of [`lock_all`](Self::lock_all). `Ok(None)` means another
    /// client holds at least one of the resources.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), except that `Busy` is reported as
    /// `Ok(None)`.
    pub fn try_lock_all(
        &self,
        resources: &[&str],
        ttl: Duration,
    ) -> Result<Option<LockGuard>, Error> {
        self.acquire_all(resources, ttl).try_lock_as("try_lock_all")
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
        let mut guard = self.acquire(resource, ttl).lock_as("with_lock")?;
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

    /// An acquisition of `resource` for `ttl` to configure — how long to
    /// wait, how many retries, a [`CancelToken`](crate::CancelToken), keep-alive —
    /// and run with [`Acquire::lock`] or [`Acquire::try_lock`]. Every other
    /// locking method is a shorthand for one of its shapes.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let guard = redlock
    ///     .acquire("exports", Duration::from_secs(10))
    ///     .wait(Duration::from_secs(30))
    ///     .keep_alive()
    ///     .lock()?;
    /// # drop(guard);
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn acquire(&self, resource: &str, ttl: Duration) -> Acquire {
        Acquire::new(&self.core, &[resource], ttl)
    }

    /// As [`acquire`](Self::acquire), for several resources at once, all or
    /// nothing, as [`lock_all`](Self::lock_all).
    pub fn acquire_all(&self, resources: &[&str], ttl: Duration) -> Acquire {
        Acquire::new(&self.core, resources, ttl)
    }

    /// A semaphore named `name` that admits at most `permits` holders at
    /// once, across every client that uses the same nodes (see
    /// [`Semaphore`] for how, and why it holds where per-node counting
    /// does not). An empty name, 0 permits or more than 64 are reported
    /// as [`Error::Config`] by its calls. Its keys never collide with a
    /// lock of the same name.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let imports = redlock.semaphore("imports", 4);
    /// if let Some(permit) = imports.try_lock(Duration::from_secs(30))? {
    ///     // ... one of at most 4 imports ...
    ///     permit.release()?;
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.core.clone(), name, permits)
    }

    /// A reader-writer lock named `name`: many readers at once, or one
    /// writer (see [`RwLock`]). An empty name is reported as
    /// [`Error::Config`] by its calls. Its keys never collide with a lock
    /// or a semaphore of the same name.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let config = redlock.rw_lock("config");
    /// let read = config.read(Duration::from_secs(5))?;
    /// # drop(read);
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn rw_lock(&self, name: &str) -> RwLock {
        RwLock::new(self.core.clone(), name)
    }

    /// An election named `name`: candidates campaign, one leads at a time
    /// with a term that only grows, and anyone can read or watch who leads
    /// (see [`Election`]). An empty name is reported as [`Error::Config`]
    /// by its calls. Its keys never collide with a lock, a semaphore or a
    /// reader-writer lock of the same name.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// if let Some(leader) = redlock.election("scheduler").leader()? {
    ///     println!("{} leads (term {})", leader.value(), leader.term());
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election::new(self.core.clone(), name)
    }

    /// Who holds `resource` now, as a majority of the nodes says: `Some`
    /// only when one holder (the same token) holds it on at least
    /// [`quorum`](Self::quorum) nodes, with what is left of it and its
    /// fencing token ([`Holding`]); `None` when no holder has a majority.
    /// One round to every node, writing nothing; it returns once the
    /// answers decide, or after the per-node timeout at most.
    ///
    /// A quarantined node (restarted empty, or its clock jumped) counts as
    /// one that did not answer, as it does for a lock.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// if let Some(holding) = redlock.inspect("reports:nightly")? {
    ///     println!(
    ///         "held for at least {:?} more, fencing token {:?}",
    ///         holding.remaining(),
    ///         holding.fencing_token()
    ///     );
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered to tell (the nodes
    /// that did not could hold it for someone) — never a guess;
    /// [`Error::Config`] for an empty or reserved name;
    /// [`Error::Shutdown`] after [`shutdown`](Self::shutdown).
    pub fn inspect(&self, resource: &str) -> Result<Option<Holding>, Error> {
        let target = Target::Resources(Arc::from([Arc::from(resource)]));
        let found = self.core.inspect(target)?;
        Ok(found.into_iter().map(|(_, holding)| holding).next())
    }

    /// An operator's release: frees `resource` from its holder, whoever it
    /// is, and says whether there was one. For a lock whose holder is gone
    /// while its TTL runs on (a crashed batch step with an hour's TTL).
    ///
    /// It reads who holds the lock on a majority, as
    /// [`inspect`](Self::inspect) does, then deletes that holder's key
    /// wherever it still holds it, and returns once the holder is gone
    /// from a majority (the other nodes get the delete as they answer);
    /// the next waiter queued for it is woken then. A key that holds
    /// another token is never touched: a holder that came after is safe
    /// (unless it writes the very same value every time, which no Redlock
    /// client does). When no holder has a majority, nothing is deleted
    /// and it answers `false`: keys on a minority may be an acquisition
    /// under way, and expire by their TTL. Fence values stay, so fencing
    /// tokens still only grow.
    ///
    /// **The holder may still be working.** It learns of the release only
    /// at its next extension or keep-alive renewal, which fails
    /// ([`LockGuard::lost_token`] fires with a kept-alive guard); until
    /// then it believes it holds the lock while the next holder may
    /// already have it. Release only a holder you know is gone, or protect
    /// the storage with fencing tokens
    /// ([`fencing`](crate::RedlockBuilder::fencing)), which refuse the old
    /// holder's late writes.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let was_held = redlock.force_release("reports:nightly")?;
    /// println!("released; it was {}held", if was_held { "" } else { "not " });
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered to tell who holds
    /// it, or to delete it from a majority: call it again once they are
    /// back;
    /// [`Error::Config`] for an empty or reserved name, or a key that holds
    /// another type than a lock's (a list, a hash) on a majority;
    /// [`Error::Shutdown`] after [`shutdown`](Self::shutdown).
    pub fn force_release(&self, resource: &str) -> Result<bool, Error> {
        self.core.force_release(resource)
    }

    /// How every node is doing, as far as this client can tell: whether it
    /// is up, whether it counts toward quorums (and why not), its last
    /// failure and its recent latency — for a `/healthz` endpoint. No I/O:
    /// it reports what the client's workers saw.
    pub fn node_health(&self) -> Vec<NodeHealth> {
        self.core.node_health()
    }

    /// Checks the deployment now: contacts every node in parallel, on a
    /// fresh connection (each within the connect timeout), asks it what it
    /// is, and returns every node's health with whether it counts toward
    /// quorums and, if not, why ([`NodeHealth::refusal`]): down, refused
    /// credentials, an unknown Sentinel service, the same server as another
    /// node, an eviction policy, too old, or in restart quarantine (and for
    /// how long yet). Run it at start-up, before trusting the deployment;
    /// [`build`](RedlockBuilder::build) already refuses what can never
    /// count. The nodes are asked in parallel; each step for one node (a
    /// Sentinel lookup, the connection, its answer) is bounded by the
    /// connect timeout. A Sentinel-managed node that no majority of its
    /// Sentinels confirms yet is reported by [`node_health`](Self::node_health)
    /// after its next request, not here.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let nodes = redlock.verify();
    /// for node in &nodes {
    ///     match node.refusal() {
    ///         None => println!("{}: counts", node.address()),
    ///         Some(why) => eprintln!("{}: does not count: {why}", node.address()),
    ///     }
    /// }
    /// let counting = nodes.iter().filter(|n| n.is_admitted()).count();
    /// if counting < redlock.quorum() {
    ///     eprintln!("only {counting} node(s) count: no lock can be taken yet");
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn verify(&self) -> Vec<NodeHealth> {
        self.core.verify()
    }

    /// Lets go of everything this client holds and stops it, for a program
    /// on its way out: releases every lock, semaphore permit, read or
    /// write hold and leadership that any clone of this client holds — every
    /// release sent before any answer is awaited — and waits up to `within`
    /// for a majority of the nodes to confirm each. Callers waiting for a
    /// lock wake and fail; calls under way may still send their clean-ups
    /// (nothing else). The keep-alive, wake-up, Sentinel lookup and node
    /// threads stop once the calls under way ended and what was queued
    /// reached the nodes: within `within`, or, for a call still under way
    /// then, as soon as it ends (so that its clean-up still goes out). (A
    /// Redis Cluster node still reading its map when the client started
    /// ends that thread once the reading does, within twice the connect
    /// timeout, and closes what it opened.)
    ///
    /// Afterwards every guard of this client is invalid
    /// ([`LockGuard::is_valid`] is false) and dropping it does nothing, and
    /// every call on every clone, and on its [`Semaphore`], [`RwLock`] and
    /// [`Election`] handles, fails with [`Error::Shutdown`] — except
    /// [`node_health`](Self::node_health) and [`verify`](Self::verify),
    /// which ask no node and report each down and not counting, "the
    /// client was shut down", and an
    /// [`Observer`](crate::Observer), which reports nothing more. A call
    /// while another shutdown is under way waits for it (up to `within`)
    /// and returns its result.
    ///
    /// # When you need it
    ///
    /// Dropping a guard releases its lock, and dropping the last clone of
    /// the client (and the last guard) lets the releases reach every node.
    /// But handles keep the client alive: an `Acquire` or `Campaign` not
    /// yet run, a `Semaphore`, `RwLock` or
    /// `Election` holds a clone, as does every guard and every thread that
    /// got one. A program that exits through `std::process::exit`, returns
    /// from `main` while other threads still hold guards, or keeps its
    /// client in a `static`, skips those drops: what it held stays on the
    /// nodes until its TTL runs out, and other processes wait for it. Call
    /// `shutdown` on the way out (a Ctrl-C handler, the end of `main`).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let imports = redlock.semaphore("imports", 4);
    /// let permit = imports.lock(Duration::from_secs(60))?;
    /// // ... the program decides to exit, with the permit still held ...
    /// redlock.shutdown(Duration::from_secs(2))?;
    /// assert!(!permit.is_valid());
    /// std::process::exit(0);
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] for the first hold whose release a majority did
    /// not confirm within `within` (or its per-node timeout, if sooner): it
    /// expires after its TTL. The client is shut down all the same. A hold
    /// already lost or expired is not an error: nothing of it is left.
    /// [`Error::Shutdown`] when another shutdown was under way and had not
    /// finished within `within`.
    pub fn shutdown(&self, within: Duration) -> Result<(), Error> {
        self.core
            .shutdown(within)
            .map_err(|err| err.in_call("Redlock::shutdown"))
    }

    /// The settings this client was built with.
    pub fn config(&self) -> crate::settings::Config {
        self.core.settings().clone()
    }
}

impl RedlockBuilder {
    /// Validates the settings and node URLs and starts the client: per
    /// node, one connection pool, one worker thread and one thread that
    /// (re)connects it in the background, so no node's connection waits on
    /// another's. Connects to every node at once and waits for their first
    /// answers only while they come: once a majority has answered, as long
    /// again (at least 250 ms), never past the connect timeout (a Redis
    /// Cluster node answers once it read its map and opened its masters).
    /// A node that
    /// has not answered by then (a black hole, a paused process) is not
    /// waited for: it is logged, [`Redlock::node_health`] shows it down
    /// ("connecting in the background"), and it counts as soon as it
    /// answers. Succeeds even while nodes are down; operations report
    /// [`Error::NoQuorum`] while fewer than a majority answer.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty node list, a malformed, unsupported or
    /// duplicate node URL, a setting out of range, or a node that answered
    /// at the start and can never count: the same server (or Redis Cluster)
    /// as another node (one `run_id` under two addresses), a replica, a
    /// Redis Cluster member listed as `redis://` or a standalone server
    /// listed as `redis+cluster://`, an eviction policy (see
    /// [`allow_eviction`](RedlockBuilder::allow_eviction)), a Redis older
    /// than 7.0, `INFO` refused, or a Sentinel service no Sentinel knows;
    /// [`Error::System`] if a thread cannot be started.
    pub fn build(self) -> Result<Redlock, Error> {
        let (nodes, settings) = self.validated()?;
        Ok(Redlock {
            core: Core::start(nodes, settings)?,
        })
    }
}
