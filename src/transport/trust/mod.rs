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

/// The keys the client keeps on a node about the node itself (its
/// admission marker, a clock jump's marker, the TTLs in use). No resource
/// may be named after them, nor with them as a prefix.
pub(crate) const OWN_KEYS: [&str; 3] = [facts::MARKER, facts::CLOCK_MARKER, in_use::TTLS];
