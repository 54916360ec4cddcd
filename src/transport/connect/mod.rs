//! Connections: how a node is reached (a fixed address, a Sentinel service,
//! a Redis Cluster), its pooled connections and its wake-up subscriber, and
//! the [`link::Link`] seam a worker talks to a node through.
//!
//! Owns each node's pool and connection health; knows nothing of rounds.

pub(crate) mod cluster;
pub(crate) mod cluster_link;
pub(crate) mod cluster_opening;
pub(crate) mod conn;
pub(crate) mod dial;
pub(crate) mod link;
pub(crate) mod notify;
pub(crate) mod opening;
pub(crate) mod redis_link;
pub(crate) mod source;
