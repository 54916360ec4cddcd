//! Trust in a node: whether its votes count. What it says about itself
//! (facts), its clock, its round trips, its errors as failures, and the
//! admission rules that judge them.
//!
//! Owns the registry of every node's standing, shared by the workers, the
//! pools and the callers that read `node_health()`.

pub(crate) mod admission;
pub(crate) mod clock;
pub(crate) mod facts;
pub(crate) mod failure;
pub(crate) mod in_use;
pub(crate) mod rtt;
