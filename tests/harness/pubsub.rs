//! Queues of waiters and wake-up subscriptions as the nodes see them, and
//! the client's subscriber threads as this process sees them.

use super::{Cluster, Node};

/// How many waiters are queued for `resource` on `node` (only its gate
/// node keeps a queue).
pub fn queued(node: &Node, resource: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("redlock-queue:{resource}"))
        .query(&mut node.conn())
        .expect("ZCARD")
}

/// How many clients listen for wake-ups on `node`.
pub fn wake_listeners(node: &Node) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("redlock-wake:*")
        .query(&mut node.conn())
        .expect("PUBSUB CHANNELS");
    channels.len()
}

/// Whether `count` waiters are queued for `resource` on its gate node, and
/// that node delivers wake-ups (a release now wakes the first of them).
pub fn waiting(cluster: &Cluster, resource: &str, count: usize) -> bool {
    cluster
        .nodes
        .iter()
        .any(|n| queued(n, resource) == count && wake_listeners(n) > 0)
}

/// How many `PUBLISH`es every node ran together (scripts' included).
pub fn publishes(cluster: &Cluster) -> u64 {
    cluster.nodes.iter().map(|n| n.calls("publish")).sum()
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
