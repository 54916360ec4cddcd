//! A cluster node whose opening (its map, then its masters) had not ended
//! when the client's start stopped waiting: `build()` does not wait for it.
//! Its opening goes on on a thread of its own and hands the link over when
//! done; until then each batch waits for it only until the batch's own
//! deadline, and is answered as from a node that is connecting.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::cluster_link::ClusterLink;
use super::link::Link;
use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};
use crate::transport::protocol::request::Request;

/// A cluster node still opening, as its worker's link.
pub(crate) struct ClusterOpening {
    address: Arc<str>,
    opening: Receiver<ClusterLink>,
    opened: Option<ClusterLink>,
}

impl ClusterOpening {
    /// The node `address`, whose link comes on `opening` once opened.
    pub(crate) fn new(address: Arc<str>, opening: Receiver<ClusterLink>) -> Self {
        ClusterOpening {
            address,
            opening,
            opened: None,
        }
    }
}

impl Link for ClusterOpening {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        if self.opened.is_none() {
            // Waits for the opening no longer than the batch's caller
            // waits for an answer.
            let until = batch
                .iter()
                .map(|req| req.expires.min(Instant::now() + req.timeout.value))
                .max()
                .unwrap_or_else(Instant::now);
            self.opened = self.opening.recv_deadline(until).ok();
        }
        match &mut self.opened {
            Some(link) => link.run(batch),
            None => batch
                .iter()
                .map(|_| {
                    Err(NodeFailure::new(
                        self.address.clone(),
                        FailureKind::Connection,
                        "the cluster's map is still being read (connecting in the background)",
                    ))
                })
                .collect(),
        }
    }
}
