//! Each primitive against real `redis-server` nodes: locks (plain, fenced, on
//! several names, kept alive), semaphores, reader-writer locks, elections,
//! what an operator sees, wake-ups, expiry and shutdown.

#[path = "../harness/mod.rs"]
mod harness;
#[cfg(feature = "metrics")]
#[path = "../harness/recorder.rs"]
mod recorder;

mod acquire;
mod election;
mod expiry;
mod fencing;
mod inspect;
mod keep_alive;
mod lock;
mod lost_token;
mod multi;
mod one_node;
mod rw_lock;
mod semaphore;
mod shutdown;
mod wakeups;
