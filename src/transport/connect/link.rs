//! The seam between a node's worker and the node itself.
//!
//! Everything a worker does that touches the network is behind [`Link`]: the
//! real one speaks RESP over a pooled connection ([`RedisLink`](super::redis_link::RedisLink));
//! tests plug in a fake node (`fake/`) to drive answers, delays,
//! failures and interleavings deterministically, as r2d2 tests its pool with
//! fake managers.

use crate::algorithm::Answer;
use crate::transport::protocol::request::Request;

/// One node as a worker sees it.
pub(crate) trait Link: Send + 'static {
    /// Runs `batch` on the node **in order** and returns one answer per
    /// request, in the same order. Must return by the latest `expires` of the
    /// batch plus one per-node timeout; requests it could not finish are
    /// answered with a failure.
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer>;
}
