//! Long contention under faults, judged from outside the lock nodes: a
//! seeded chaos schedule, rotating partitions with a history checker, and
//! processes contending for one resource. The soaks load both cores, so each
//! holds a turn ([`harness::alone`], [`harness::heavy`]).

#[path = "../harness/mod.rs"]
mod harness;

mod chaos;
mod exclusion;
mod partitions;
