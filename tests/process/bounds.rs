//! Resource bounds: one client shared by 64 threads, and 10 000 guards held at
//! once. No deadlock, one connection per node (plus, while callers wait, one
//! subscriber connection per node), a bounded thread count, and every guard
//! releases.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, client_threads};
use crate::harness::{eventually, threads_per_client};

fn keys_on_nodes(cluster: &Cluster) -> usize {
    cluster
        .nodes
        .iter()
        .map(|n| crate::harness::data_keys(&mut n.conn()))
        .sum()
}

#[test]
fn sixty_four_threads_and_ten_thousand_guards_stay_within_bounds() {
    let _turn = crate::turn();
    let cluster = Cluster::start(5);
    let redlock = crate::harness::client(cluster.urls());
    // Threads name themselves as they start: wait until all are there.
    eventually("client threads started", Duration::from_secs(5), || {
        client_threads() == threads_per_client(5)
    });
    let threads = client_threads();
    assert_eq!(cluster.client_connections(), vec![1; 5]);

    // 64 threads, 8 contended keys, 20 rounds each.
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..64 {
            let redlock = &redlock;
            s.spawn(move || {
                for i in 0..20 {
                    let key = format!("bounds:shared:{}", (t + i) % 8);
                    let guard = redlock
                        .lock_for(&key, Duration::from_secs(10), Duration::from_secs(60))
                        .expect("lock within a minute");
                    guard.release().unwrap();
                }
            });
        }
    });
    println!("64 threads x 20 contended pairs in {:?}", started.elapsed());
    // The waits started one subscriber thread and connection per node,
    // however many threads and keys waited; they close when idle.
    assert!(
        client_threads() <= threads + 5,
        "no thread per call: {} threads",
        client_threads()
    );
    assert!(
        cluster.client_connections().iter().all(|&c| c <= 2),
        "one connection per node, and one subscriber: {:?}",
        cluster.client_connections()
    );
    eventually("idle subscribers closed", Duration::from_secs(10), || {
        client_threads() == threads && cluster.client_connections() == vec![1; 5]
    });

    // 10 000 guards held at once, from 8 threads.
    let started = Instant::now();
    let guards: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let redlock = &redlock;
                s.spawn(move || {
                    (0..1250)
                        .map(|i| {
                            redlock
                                .lock(&format!("bounds:held:{t}:{i}"), Duration::from_secs(60))
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    println!("10 000 guards acquired in {:?}", started.elapsed());
    assert_eq!(guards.len(), 10_000);
    assert!(guards.iter().all(|g| g.is_valid()));
    assert_eq!(client_threads(), threads);
    assert_eq!(cluster.client_connections(), vec![1; 5]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while keys_on_nodes(&cluster) < 50_000 {
        assert!(
            Instant::now() < deadline,
            "not every SET landed on every node"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(guards);
    let deadline = Instant::now() + Duration::from_secs(5);
    while keys_on_nodes(&cluster) > 0 {
        assert!(
            Instant::now() < deadline,
            "{} keys left after release",
            keys_on_nodes(&cluster)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
