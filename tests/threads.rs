//! The client's thread count is fixed at build time: no thread per call.
//! (One test in this binary, so no other test's threads are counted.)

mod harness;

use std::time::Duration;

use harness::{Cluster, client_threads, eventually, threads_per_client};
use redlock_sync::Redlock;

#[test]
fn locking_spawns_no_threads_and_dropping_the_client_stops_its_workers() {
    let cluster = Cluster::start(5);
    let before = client_threads();
    let redlock = Redlock::new(cluster.urls()).unwrap();
    // One worker per node and two connection helpers shared by all nodes
    // (threads name themselves as they start, so wait for all of them).
    eventually("client threads started", Duration::from_secs(5), || {
        client_threads() == before + threads_per_client(5)
    });
    let started = client_threads();
    for i in 0..200 {
        let mut guard = redlock
            .lock(&format!("res:{i}"), Duration::from_secs(5))
            .unwrap();
        guard.extend(Duration::from_secs(5)).unwrap();
        drop(guard);
        assert!(
            redlock
                .try_lock("res:0", Duration::from_secs(5))
                .unwrap()
                .is_some()
        );
    }
    assert_eq!(client_threads(), started);
    drop(redlock);
    eventually(
        "worker threads stop with the client",
        Duration::from_secs(5),
        || client_threads() == before,
    );
}
