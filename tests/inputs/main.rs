//! What a caller gives and is told: bad input never panics, hangs or leaks
//! a key; configuration errors are clear; no secret is ever shown; answers
//! name the right cause; what a newcomer meets first.

#[path = "../harness/mod.rs"]
mod harness;

mod bad_input;
mod config;
mod messages;
mod newcomer;
mod secrets;
