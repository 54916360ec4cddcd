//! Which tests of one binary run beside which. A test binary runs its tests
//! on two threads; a test that needs a say in what runs beside it holds a
//! turn for its whole run:
//!
//! - [`alone`]: no other test holding a turn runs meanwhile. For tests that
//!   count what the whole process has (its threads, a global recorder:
//!   every test of `process`, through its `turn`), tests whose bounds are
//!   timed (`faults.rs`, `latency.rs`, `availability.rs`, partitions'
//!   targeted scenarios) and soaks that load both cores on their own
//!   (chaos, exclusion).
//! - [`heavy`]: tests that load both cores (partitions' rotating scenarios,
//!   `script_flush.rs`) run beside each other, never beside one that runs
//!   alone.
//!
//! Tests that hold no turn run beside anything.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static TURN: RwLock<()> = RwLock::new(());

/// Runs the caller alone among the tests that hold a turn, until dropped.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    TURN.write().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the caller beside other heavy tests only, until dropped.
pub fn heavy() -> RwLockReadGuard<'static, ()> {
    TURN.read().unwrap_or_else(PoisonError::into_inner)
}
