//! Thousands of kept-alive guards on one client: one keeper thread renews them
//! all. It holds the process's turn (`crate::turn`), so the thread counts
//! are its own.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, client_threads, eventually, settles, threads_per_client};
use redlock_sync::Redlock;

#[test]
fn a_thousand_kept_alive_guards_stay_alive_with_one_keeper_thread() {
    let _turn = crate::turn();
    let cluster = Cluster::start(5);
    // The 800 ms TTL would derive a 10 ms node timeout, which a loaded
    // machine can miss while a renewal burst is queued ahead of a release
    // (seen once); this test is about the keeper, not that timeout.
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    eventually("client threads started", Duration::from_secs(5), || {
        client_threads() == threads_per_client(5)
    });
    let before = client_threads();
    let ttl = Duration::from_millis(800);
    let mut guards = Vec::with_capacity(1000);
    for i in 0..1000 {
        let mut guard = redlock.lock(&format!("many:{i}"), ttl).unwrap();
        guard.keep_alive();
        guards.push(guard);
    }
    assert_eq!(client_threads(), before + 1, "exactly one keeper thread");
    let started = Instant::now();
    let first_until: Vec<Instant> = guards.iter().map(|g| g.valid_until()).collect();
    while started.elapsed() < ttl * 3 {
        for (i, guard) in guards.iter().enumerate() {
            assert!(
                guard.is_valid(),
                "guard {i} lost after {:?}",
                started.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(50)); // time passing is the test
    }
    for (guard, first) in guards.iter().zip(first_until) {
        assert!(guard.valid_until() > first + ttl, "renewed more than once");
    }
    assert_eq!(client_threads(), before + 1);
    for guard in guards {
        guard.release().unwrap();
    }
    // A release returns at a majority; the last node deletes a moment later.
    settles("released everywhere", || {
        cluster.count_key_now("many:0") + cluster.count_key_now("many:999") == 0
    });
}
