//! What the client asks of every node: one operation on one key.

use std::sync::Arc;
use std::time::Instant;

use crate::settings::NodeTimeout;

/// What to do on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`.
    Acquire { ttl_ms: u64 },
    /// Compare-and-pexpire.
    Extend { ttl_ms: u64 },
    /// Compare-and-delete.
    Release,
}

/// One operation, shared by the jobs sent to every node.
pub(crate) struct Request {
    pub(crate) op: Op,
    pub(crate) key: Arc<str>,
    pub(crate) token: Arc<str>,
    /// The per-node socket timeout for this operation, and its origin.
    pub(crate) timeout: NodeTimeout,
    /// After this instant the job is pointless and a worker skips it.
    pub(crate) expires: Instant,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("key", &self.key)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}
