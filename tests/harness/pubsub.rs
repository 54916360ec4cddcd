//! Release-channel subscriptions as the nodes see them, and the client's
//! subscriber threads as this process sees them.

use super::{Cluster, Node};

/// How many clients listen for `resource`'s releases on `node`.
pub fn listeners(node: &Node, resource: &str) -> usize {
    let reply: (String, usize) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("redlock-release:{resource}"))
        .query(&mut node.conn())
        .expect("PUBSUB NUMSUB");
    reply.1
}

/// Whether a majority of the nodes has a listener for `resource`.
pub fn heard_by_majority(cluster: &Cluster, resource: &str) -> bool {
    cluster
        .nodes
        .iter()
        .filter(|n| listeners(n, resource) > 0)
        .count()
        > cluster.nodes.len() / 2
}

/// Whether every node has a listener for `resource` (the gate node's copy
/// of a release then reaches the waiter, whichever node is the gate).
pub fn heard_by_all(cluster: &Cluster, resource: &str) -> bool {
    cluster.nodes.iter().all(|n| listeners(n, resource) > 0)
}

/// Subscriber connections open on any node.
pub fn subscriber_connections(cluster: &Cluster) -> usize {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .arg("TYPE")
                .arg("pubsub")
                .query(&mut n.conn())
                .expect("CLIENT LIST");
            list.lines().count()
        })
        .sum()
}

/// Subscriber threads of this process (named `redlock-notify-N`).
pub fn subscriber_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|n| n.starts_with("redlock-notif"))
        })
        .count()
}
