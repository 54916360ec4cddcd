//! Counts of what the whole process holds: threads, connections, a global
//! metrics recorder, ten thousand guards. Every test here runs alone
//! ([`harness::alone`]), so each counts only its own.

#[path = "../harness/mod.rs"]
mod harness;
#[cfg(feature = "metrics")]
#[path = "../harness/recorder.rs"]
mod recorder;

mod bounds;
mod keep_alive_many;
mod metrics;
mod threads;
mod wakeup_threads;
