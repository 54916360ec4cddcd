//! redlock-sync's protocol as a model for the [stateright] model checker:
//! nodes that run each script whole when a request arrives (the crate's
//! scripts written again in Rust, which the unit tests' fake node runs too),
//! clients that send each round to every node and decide it with the
//! crate's own tally and validity arithmetic (`src/algorithm.rs`, included
//! here, not copied), a network that delivers in any order, late or never,
//! time that passes in steps, and nodes that restart empty or whose clock
//! jumps. `tests/` checks each property on the model, and that each
//! property catches its deliberate defect.
//!
//! What it covers and what it leaves out: `docs/design.md`, "The model".

// The crate's own arithmetic, and what it names.
#[path = "../../src/human.rs"]
#[allow(dead_code)]
mod human;

#[path = "../../src/error.rs"]
#[allow(dead_code)]
mod error;

#[path = "../../src/algorithm.rs"]
#[allow(dead_code)]
mod algorithm;

mod client;
mod node;
mod system;

pub use client::{Answer, Client, Phase};
pub use node::{Broken, Node, Reply, Request, Setting, Token};
pub use system::{
    Action, Config, FENCES_GROW, K_HOLDERS, Kind, Message, Mutation, NO_WRITER_BESIDE_READERS,
    ONE_HOLDER, QUEUE_MOVES, READ, Redlock, SOMEONE_HOLDS, State,
};
