//! A synchronous [Redlock] client: a distributed lock over N independent Redis
//! masters, for programs that do not use async.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_sync::Redlock;
//!
//! let redlock = Redlock::new([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//! ])?;
//! let guard = redlock.lock("billing:close-month", Duration::from_secs(30))?;
//! // ... do the work that must not run twice at once; check guard.is_valid() ...
//! drop(guard); // or guard.release()? to see the outcome
//! # Ok::<(), redlock_sync::Error>(())
//! ```
//!
//! # How it works
//!
//! Every operation sends its command to all nodes **in parallel** through the
//! client's own worker threads (one per node, started once, pipelining
//! concurrent requests) and returns as soon as the outcome is known:
//!
//! * acquire: `SET resource token NX GET PX ttl` (Redis 7.0 or later; a
//!   node that refuses names the holder, so a round nobody won is told
//!   from a held resource); success needs a majority (`N/2 + 1`) of grants
//!   while validity remains. Validity is
//!   `ttl - elapsed - (ttl * drift_factor + 2 ms)`. A failed round releases on
//!   every node (including those that timed out) without making you wait.
//! * several resources ([`Redlock::lock_all`]): one Lua script per node that
//!   sets every key or none; the same quorum and validity rules.
//! * release / extend: atomic compare-and-delete / compare-and-pexpire Lua
//!   scripts (each connection sends a script's source with its first call,
//!   its hash after that; a node whose script cache was flushed gets the
//!   source again at once), sent to every node; success needs a majority.
//!   The scripts are in `src/transport/protocol/scripts/`, one file each, their
//!   contract in a header.
//!
//! * waiting: a caller that finds the resource held is queued on the
//!   resource's *gate node* (one of the nodes, the same in every client that
//!   lists the nodes by the same addresses), and a release there wakes the
//!   first waiter only — in any client, any process — so a waiter tries
//!   again as soon as the resource is free instead of after its retry delay,
//!   queued waiters get the resource in the order they queued (a newcomer's
//!   first round may still take a resource that is free at that instant),
//!   and a release costs
//!   the same however many wait. One connection and thread per node for the
//!   whole client hears the wake-ups (opened on the first wait, closed when
//!   nobody waits). A wake-up only ends a wait early: every acquisition
//!   still needs `SET NX` on a majority. See
//!   [`RedlockBuilder::release_notifications`].
//!
//! Each node request has a short socket timeout derived from the TTL (a 10 s
//! TTL gives 50 ms; see [`RedlockBuilder::node_timeout_factor`]), raised
//! when the nodes a majority needs are farther away than that, so a dead or
//! stalled node costs at most that, and usually nothing, since the round is
//! decided by the healthy majority.
//!
//! # What is guaranteed
//!
//! While [`LockGuard::is_valid`] is true, no other client following the
//! algorithm holds the lock, provided a majority of the nodes keep their data
//! (see below) and clocks advance at roughly the same rate (within the drift
//! factor). A process paused past its validity (GC, swap, SIGSTOP) can still
//! believe it holds the lock: check [`LockGuard::is_valid`] or
//! [`LockGuard::remaining`] before each protected step.
//!
//! # Long-running work: choosing a TTL, keep-alive and `ensure_valid`
//!
//! The TTL is how long the lock survives **you** crashing: after a crash, others
//! wait up to one TTL. It is also the longest stretch you may go without
//! checking the lock. Choose it:
//!
//! * well above one network round trip plus the drift allowance (the
//!   allowance is `ttl * 0.01 + 2 ms`; TTLs under ~100 ms leave little room);
//! * above the longest pause your process can suffer between two checks (GC,
//!   swap, a blocking syscall), since a paused holder cannot notice the loss;
//! * short enough that others do not wait too long after a crash.
//!
//! When the work may outlast the TTL, call [`LockGuard::keep_alive`] (or use
//! [`Redlock::with_lock`], which does it for you): one keeper thread per client
//! renews every kept-alive lock when a third of its TTL is left. If a renewal
//! cannot reach a majority before validity runs out, the lock is *lost* and
//! [`LockGuard::ensure_valid`] returns [`Error::LockLost`] from then on.
//!
//! Call `ensure_valid()` (no I/O, a clock read and a mutex) **before every
//! step whose effect must not happen twice**: writing a file, charging a card,
//! committing a batch. On error, stop. The check cannot close the window
//! between checking and acting; for that, use fencing tokens (below).
//!
//! The whole recipe — wait for the lock, stop waiting on Ctrl-C, keep it
//! alive, check it before each step, release it on the way out (Ctrl-C
//! included, through [`CancelToken::sleep`] for the work's own pauses);
//! `examples/long_job.rs` runs it:
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_sync::{CancelToken, Error, Redlock};
//!
//! let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
//! let shutdown = CancelToken::new(); // cancel() it from your Ctrl-C handler
//! let guard = match redlock
//!     .acquire("import:customers", Duration::from_secs(10))
//!     .wait(Duration::from_secs(60))
//!     .cancel_on(&shutdown)
//!     .keep_alive()
//!     .lock()
//! {
//!     Ok(guard) => guard,
//!     Err(Error::Busy { .. } | Error::Cancelled { .. }) => return Ok(()),
//!     Err(err) => return Err(err),
//! };
//! for chunk in 0..1_000 {
//!     if shutdown.sleep(Duration::from_millis(5)) {
//!         break; // Ctrl-C: stop; the lock is released below
//!     }
//!     guard.ensure_valid()?; // lost? stop before writing anything more
//!     let _ = chunk; // ... write one chunk ...
//! }
//! guard.release()?;
//! # Ok::<(), redlock_sync::Error>(())
//! ```
//!
//! The defaults, in time: [`Redlock::lock`] waits about 1.1 s for a
//! resource that stays held, [`Redlock::try_lock`] not at all; each node
//! gets a socket timeout of TTL × 0.005 kept within 10–250 ms (a 1 s TTL
//! gets 10 ms), raised to what the nodes' measured round trips need (at most
//! a third of the TTL); keep-alive renews when a third of the TTL is left.
//!
//! # Fencing tokens
//!
//! A holder paused past its validity (GC, swap, SIGSTOP) can still act when
//! it resumes, and no check on its side can prevent it. On a client built
//! with [`fencing(true)`](RedlockBuilder::fencing), every guard carries a
//! [`fencing_token`](LockGuard::fencing_token); pass it with every write,
//! and have the storage keep the largest token it accepted and refuse
//! smaller ones (atomically with the write). `examples/fenced_store.rs` shows
//! such a storage refusing the paused holder.
//!
//! **Guarantee.** If acquisition B of a resource started after acquisition A
//! returned, B's token is larger than A's.
//!
//! **Why, and what it assumes.** The token is proposed with the
//! acquisition, in its one round, and each node grants it only above the
//! fence value it stores, storing it with the grant; so B's majority meets
//! A's in a node that grants only a larger token. It rests on those fence
//! values surviving (persistence, `maxmemory-policy noeviction`) or, where
//! one was lost, on no fencing client's clock running ahead by more than
//! the time between two acquisitions (NTP). `docs/fencing.md` gives the
//! argument, every assumption and the cost: no extra round trip, one key
//! per resource per node (`redlock-fence:{resource}`).
//!
//! # Every option in one call shape
//!
//! [`Redlock::acquire`] (and [`Redlock::acquire_all`]) return an [`Acquire`]
//! to configure — [`wait`](Acquire::wait), [`deadline`](Acquire::deadline),
//! [`retries`](Acquire::retries), [`cancel_on`](Acquire::cancel_on) a
//! [`CancelToken`], [`keep_alive`](Acquire::keep_alive) — and run with
//! [`lock`](Acquire::lock) or [`try_lock`](Acquire::try_lock). A token
//! cancelled from another thread (the thread that handles SIGTERM) ends the
//! wait with [`Error::Cancelled`], at once from a pause between rounds. [`Redlock::node_health`] reports each node for
//! a `/healthz` endpoint; the `metrics` feature records counters and
//! histograms (listed in `docs/metrics.md`).
//!
//! # Operating the nodes
//!
//! Use independent masters (3 or 5), not replicas of each other. A node that
//! restarts without its data forgets the locks it held, which can let a second
//! client reach a majority. Either run nodes with `appendonly yes` and
//! `appendfsync always` (and never restore an older backup), or keep a
//! restarted node out of service for at least the longest TTL in use
//! (delayed restart), or let the client enforce that delay with
//! [`RedlockBuilder::restart_quarantine`], which holds back every restarted
//! node, whatever its persistence, and promoted replicas — also in clients
//! started after the failover.
//!
//! The client checks the rest of what the algorithm assumes: a node counts
//! toward a quorum only while it is a server no other listed address
//! reaches, it cannot evict keys (see
//! [`RedlockBuilder::allow_eviction`]), and it runs Redis 7.0 or later.
//! [`RedlockBuilder::build`] refuses a node list that breaks these;
//! [`Redlock::verify`] checks every node now and says why a node does not
//! count ([`NodeHealth::refusal`]). `docs/operations.md` has the argument.
//!
//! # Logging
//!
//! Through the [`log`] crate: `debug!` per-node outcomes, `warn!` nodes that go
//! down, stop or start counting toward quorums (once per change, with the
//! cause) and releases that fail, `trace!` timings. Nodes are named by address;
//! tokens and passwords are never logged.
//!
//! [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/

// Layers, top to bottom (data flows down; no module reaches up):
// API: client, guard, config → core → transport → Redis.
// Leaves used by all: algorithm (pure arithmetic), error, settings, human.
mod acquire;
mod algorithm;
mod cancel;
mod client;
mod config;
mod core;
mod election;
mod error;
mod guard;
mod health;
mod holding;
mod human;
mod metrics;
mod node_url;
mod rw_lock;
mod semaphore;
mod sentinel_url;
mod settings;
mod transport;

pub use acquire::Acquire;
pub use cancel::CancelToken;
pub use client::Redlock;
pub use config::RedlockBuilder;
pub use election::{Campaign, Election, Leader, Leadership, Observer};
pub use error::{Error, FailureKind, LostCause, NodeFailure, Wanted};
pub use guard::LockGuard;
pub use health::NodeHealth;
pub use holding::{Holding, RwHolders};
pub use rw_lock::RwLock;
pub use semaphore::Semaphore;
pub use settings::Config;

/// Compiles the README's examples as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Compiles the election guide's examples as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/election.md")]
pub struct ElectionDoctests;

/// Compiles the Sentinel guide's examples as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/sentinel.md")]
pub struct SentinelDoctests;
