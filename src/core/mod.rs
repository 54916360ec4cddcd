//! The core: the session every clone of a client and every guard share
//! ([`Core`], `session.rs`) and the operations built on it: acquisition
//! rounds with their retry policy, extension and release of leases, and
//! keep-alive.
//!
//! Data flows down: the API (`Redlock`, `LockGuard`) calls the core; the core
//! builds `Request`s and hands them to the transport; nothing here knows
//! the API types. Inside, the operations (`acquire`, `elect`, `inspect`)
//! use the session; the session owns the keeper, the life and the leases;
//! all of them use [`Nodes`](nodes::Nodes) — the transport, the settings,
//! the waiters and the TTL rules — which knows none of them.
//!
//! # Shared state and who touches it
//!
//! * [`Lease`] state: the caller holding the guard (`extend`, `release`,
//!   validity reads), the keeper thread (renewals, loss) and `Drop`. One
//!   mutex; at most one extension in flight per lease (a second waits for
//!   the first, the keeper skips), and every change of TTL or validity bumps
//!   the lease's epoch, and the keeper follows the last: the session tells
//!   it after a caller's extend or release, the keeper applies its own
//!   renewals, and a loss needs no telling (the keeper drops the lease when
//!   it next comes up).
//! * The keeper's registration (`keeper::Keeper`): callers keeping or
//!   watching a lease, or changing one the keeper schedules, and the
//!   shutdown, which stops it after closing the client.
//! * [`Waiters`](handoff::Waiters): callers between rounds, releasing
//!   callers (including `Drop`), and the transport's subscriber threads
//!   (wake-ups from the gate nodes, through `transport::Sink`).
//! * Rounds: the caller and one worker per node (with a single node, the
//!   caller itself serves an idle node); see `transport`.
//! * [`CancelToken`](crate::CancelToken): the cancelling thread wakes the
//!   sleepers registered with it by taking each sleeper's slot lock before
//!   notifying, and a sleeper registers before it checks the flag under that
//!   lock, so a cancel is never missed; the acquire loop checks the flag
//!   again after every round and releases a round that succeeded too late.
//! * Node health (`transport::connect::conn::NodeShared`): written by whoever serves
//!   the node (its worker, or a caller of a single idle node) and the
//!   reconnect helpers, read by `node_health`; atomics and small
//!   mutexes, never held across I/O.

mod acquire;
mod acquisition;
mod elect;
mod handoff;
mod inspect;
mod keeper;
mod lease;
mod life;
mod nodes;
mod session;
mod slots;
#[cfg(test)]
mod tests;
mod verdict;

/// Which side of a reader-writer lock an acquisition takes.
pub(crate) use crate::transport::Role;
pub(crate) use acquire::Target;
pub(crate) use acquisition::Patience;
pub(crate) use elect::Seen;
pub(crate) use lease::Lease;
pub(crate) use session::Core;
