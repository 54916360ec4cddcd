//! A client over a single node (a valid Redlock of N = 1, and how most users
//! start). Its rounds run on the caller's thread while the node is idle;
//! it locks, excludes and releases like any client; a paused node costs a
//! call about its node timeout, never a hang, and the client works again
//! once the node is back.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, eventually};
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn a_single_node_locks_excludes_and_releases() {
    let cluster = Cluster::start(1);
    let a = crate::harness::client(cluster.urls());
    let b = crate::harness::client(cluster.urls());
    let guard = a.lock("one:k", TTL).unwrap();
    assert_eq!(cluster.count_key_now("one:k"), 1);
    assert!(
        b.try_lock("one:k", TTL).unwrap().is_none(),
        "held by the other client"
    );
    // Four threads of one client take turns on it.
    let held = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    let guard = b.lock("one:shared", TTL).unwrap();
                    assert!(!held.swap(true, std::sync::atomic::Ordering::SeqCst));
                    held.store(false, std::sync::atomic::Ordering::SeqCst);
                    guard.release().unwrap();
                }
            });
        }
    });
    guard.release().unwrap();
    assert_eq!(cluster.count_key_now("one:k"), 0, "released on the node");
    b.lock("one:k", TTL).unwrap().release().unwrap();
}

#[test]
fn a_paused_single_node_costs_a_call_about_its_node_timeout() {
    let mut cluster = Cluster::start(1);
    let client = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    client.lock("one:p", TTL).unwrap().release().unwrap();
    cluster.nodes[0].pause();
    for _ in 0..3 {
        let started = Instant::now();
        let result = client.try_lock("one:p", TTL);
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::NoQuorum { .. })),
            "a paused node grants nothing: {result:?}"
        );
        // 100 ms node timeout: generous for a loaded machine, far below
        // the connect timeout or a hang.
        assert!(took < Duration::from_millis(900), "took {took:?}");
    }
    cluster.nodes[0].resume();
    eventually("the node counts again", Duration::from_secs(10), || {
        client
            .try_lock("one:p", TTL)
            .is_ok_and(|guard| guard.is_some_and(|g| g.release().is_ok()))
    });
}
