//! The client while nodes fail one way or another: paused, slow, killed,
//! restarted empty, black-holed, their clocks stepped, their script caches
//! flushed, or cut off from some clients.

#[path = "../harness/mod.rs"]
mod harness;

mod availability;
mod clocks;
mod faults;
mod latency;
mod nodes_failing;
mod restart_hazard;
mod script_flush;
mod truthful;
