//! Counts of what the whole process holds: threads, connections, a global
//! metrics recorder, ten thousand guards. Every test here holds the
//! process's turn ([`turn`]), so each counts only its own.

#[path = "../harness/mod.rs"]
mod harness;
#[cfg(feature = "metrics")]
#[path = "../harness/recorder.rs"]
mod recorder;

/// A turn over the whole process: no other test of this binary runs
/// meanwhile, and every thread of the clients earlier tests dropped has
/// ended. A dropped client's connection threads end on their own time, and
/// with them the last reference to its bookkeeping (which lowers gauges):
/// a thread count or a recorder must not see them.
pub(crate) fn turn() -> std::sync::RwLockWriteGuard<'static, ()> {
    let turn = harness::alone();
    harness::settles("no client thread left by an earlier test", || {
        harness::client_threads() == 0
    });
    turn
}

mod bounds;
mod keep_alive_many;
mod logger;
mod metrics;
mod threads;
mod wakeup_threads;
