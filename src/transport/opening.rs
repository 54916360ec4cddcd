//! A node's first connection, opened while the client is built (every
//! node in parallel, each within the connect timeout), so that a mistake
//! in the deployment is said then, not at the first lock.

use std::sync::Arc;

use super::admission::{Registry, Rules};
use super::cluster::ClusterSource;
use super::cluster_link::ClusterLink;
use super::conn::{NodeManager, NodeShared};
use super::redis_link::Pools;
use super::source::Source;

/// A node about to be opened.
pub(super) enum Opening {
    /// A server (fixed, or a Sentinel service's master; `Some` source to
    /// follow for the latter).
    Node(Box<NodeManager>, Option<Source>),
    /// A Redis Cluster.
    Cluster(Arc<ClusterSource>),
}

/// A node opened (or found down: it is reconnected in the background).
pub(super) enum Opened {
    Node(Box<NodeManager>, Option<Source>),
    Cluster(Box<ClusterLink>),
}

impl Opening {
    /// Opens the node `shared`: the opened node, and what to say at once
    /// when a Sentinel service is unknown to its Sentinels.
    pub(super) fn open(
        self,
        shared: Arc<NodeShared>,
        pools: &Pools,
        rules: Rules,
        registry: Arc<Registry>,
    ) -> ((Arc<NodeShared>, Opened), Option<String>) {
        match self {
            Opening::Cluster(source) => {
                let link =
                    ClusterLink::open(shared.clone(), source, pools.clone(), rules, registry);
                ((shared, Opened::Cluster(Box::new(link))), None)
            }
            Opening::Node(manager, follow) => {
                let unknown = match manager.open() {
                    Ok(conn) => {
                        manager.keep_for_pool(conn);
                        None
                    }
                    Err(err) => {
                        shared.mark_down(&err);
                        (err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel).then(|| {
                            format!("node {}: {}", shared.address, shared.failure(&err).detail())
                        })
                    }
                };
                ((shared, Opened::Node(manager, follow)), unknown)
            }
        }
    }
}
