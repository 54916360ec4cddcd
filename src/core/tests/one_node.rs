//! A single node: a caller whose node is idle runs its round on its own
//! thread; a round for a busy node goes through the node's worker (see
//! `transport/worker.rs`).
//!
//! Shared state: the node's link (under its `Served` lock) and its queue,
//! used by callers, the keeper and the node's worker. The orders tested:
//! the node idle (the caller runs the round); the link busy with another
//! caller's round (queued, and the worker serves it once the link is free);
//! the keeper's renewals, started together (never on its thread); several
//! nodes (never on the caller's thread).

use std::time::Duration;

use super::{LONG_WAIT, core_with, lock, settings};
use crate::transport::Op;

const TTL: Duration = Duration::from_secs(10);

fn this_thread() -> String {
    std::thread::current().name().unwrap_or("").to_owned()
}

#[test]
fn an_idle_single_nodes_rounds_run_on_the_callers_thread() {
    let (nodes, core) = core_with(1, settings());
    let lease = lock(&core, "k", TTL);
    lease.release(core.nodes()).unwrap();
    let me = this_thread();
    assert_ne!(me, "redlock-node-0");
    assert_eq!(nodes[0].served_on(), [me.clone(), me], "lock and release");
}

#[test]
fn a_round_for_a_busy_single_node_is_served_by_its_worker_after_the_first() {
    let (nodes, core) = core_with(1, settings());
    // Each batch holds the link for 300 ms (the node timeout is 2 s).
    nodes[0].set_delay(Duration::from_millis(300));
    let first_thread = std::thread::scope(|s| {
        let first = s.spawn(|| {
            lock(&core, "a", TTL);
            this_thread()
        });
        assert!(
            nodes[0].wait_for(Duration::from_secs(5), |ops| ops.len() == 1),
            "the first round reached the node"
        );
        // The link is busy with the first round: this one is queued.
        lock(&core, "b", TTL);
        first.join().unwrap()
    });
    assert_eq!(
        nodes[0].served_on(),
        [first_thread, "redlock-node-0".to_owned()],
        "the first on its caller's thread, the second by the worker, after it"
    );
    assert!(nodes[0].holder("a").is_some() && nodes[0].holder("b").is_some());
}

#[test]
fn rounds_on_several_nodes_never_run_on_the_callers_thread() {
    let (nodes, core) = core_with(3, settings());
    lock(&core, "k", TTL).release(core.nodes()).unwrap();
    for (i, node) in nodes.iter().enumerate() {
        // The lock and the release each return at a majority: a node may
        // not have had its share yet (once, under load).
        assert!(
            node.wait_for(Duration::from_secs(5), |ops| ops.len() == 2),
            "node {i} got the acquisition and the release"
        );
        let served = node.served_on();
        assert!(!served.is_empty(), "node {i} served nothing");
        assert!(
            served.iter().all(|t| *t == format!("redlock-node-{i}")),
            "node {i}: {served:?}"
        );
    }
}

/// The keeper starts every due renewal before it collects any, so on a
/// single node its rounds go to the worker, one pipelined batch, never run
/// one by one on the keeper's thread (a round trip each).
#[test]
fn the_keepers_renewals_on_a_single_node_are_left_to_its_worker() {
    let (nodes, core) = core_with(1, settings());
    let leases: Vec<_> = (0..4)
        .map(|i| lock(&core, &format!("k{i}"), Duration::from_millis(600)))
        .collect();
    for lease in &leases {
        core.keep(lease).unwrap();
    }
    let renewed = |ops: &[Op]| {
        let extends = ops.iter().filter(|op| **op == Op::Extend { ttl_ms: 600 });
        extends.count() >= 8
    };
    assert!(
        nodes[0].wait_for(LONG_WAIT, renewed),
        "two renewals of each lease"
    );
    let served = nodes[0].served_on();
    let me = this_thread();
    assert_eq!(
        served[..4],
        [me.clone(), me.clone(), me.clone(), me],
        "the locks"
    );
    assert!(
        served[4..].iter().all(|t| t == "redlock-node-0"),
        "renewals by the worker: {served:?}"
    );
    for lease in &leases {
        assert!(!lease.is_lost());
    }
}
