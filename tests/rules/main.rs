//! The crate's own rules, read from the outside: the shape of its modules
//! and dependencies, and the examples run as the programs they are.

#[path = "../harness/mod.rs"]
mod harness;

mod examples;
mod structure;
