//! Nodes whose script cache is flushed mid-run (`SCRIPT FLUSH`, as after a
//! restart or by an operator): a script the node answers `NOSCRIPT` goes out
//! again with its source before anything else on its connection, so no
//! request ever fails with `NOSCRIPT`. Exclusion holds, every release and
//! extension succeeds, and no key is left behind.

mod harness;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harness::{Cluster, Contention, Node, NodeOptions, contend, eventually};
use redlock_sync::Redlock;

const RESOURCE: &str = "flush:res";
const TTL: Duration = Duration::from_secs(5);

fn run_time() -> Duration {
    Duration::from_secs(if std::env::var_os("CI").is_some() {
        3
    } else {
        2
    })
}

#[test]
fn script_cache_flushes_mid_run_never_break_exclusion_or_leave_keys() {
    let cluster = Cluster::start(5);
    let witness = Node::start(&NodeOptions::default());
    let clients: Vec<Redlock> = (0..2)
        .map(|_| {
            Redlock::builder(cluster.urls())
                .node_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        })
        .collect();
    // One node alone: a call that met NOSCRIPT there and was not sent
    // again would fail outright (with five, the other four outvote it).
    // Fenced, so that its acquisition is a script too.
    let alone = Redlock::builder([cluster.nodes[0].url()])
        .fencing(true)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let flushes = AtomicU64::new(0);
    let until = Instant::now() + run_time();
    let seen = std::thread::scope(|s| {
        s.spawn(|| {
            let mut conns: Vec<_> = cluster.nodes.iter().map(Node::conn).collect();
            while !stop.load(Ordering::Relaxed) {
                for conn in &mut conns {
                    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(conn).unwrap();
                }
                flushes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // Extensions and explicit releases, under the same flushes.
        let checked = s.spawn(|| {
            let mut done = 0;
            while Instant::now() < until {
                let mut guard = clients[0].lock("flush:other", TTL).expect("lock");
                guard.extend(TTL).expect("extend never fails with NOSCRIPT");
                guard.release().expect("release never fails with NOSCRIPT");
                let mut guard = alone.lock("flush:alone", TTL).expect("one-node lock");
                guard.extend(TTL).expect("one-node extend never fails");
                guard.release().expect("one-node release never fails");
                done += 1;
            }
            done
        });
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let (client, url) = (&clients[i % 2], witness.url());
                s.spawn(move || contend(client, &url, RESOURCE, TTL, until))
            })
            .collect();
        let mut total = Contention::default();
        for worker in workers {
            total += worker.join().unwrap();
        }
        let checked = checked.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(checked > 10, "only {checked} extend/release pairs");
        total
    });
    let flushes = flushes.load(Ordering::Relaxed);
    println!(
        "script flush: {} acquisitions, {flushes} flushes of all 5 nodes",
        seen.acquisitions
    );
    assert!(flushes > 50, "only {flushes} flushes");
    assert!(
        seen.acquisitions > 50,
        "only {} acquisitions",
        seen.acquisitions
    );
    seen.assert_exclusive(&witness, RESOURCE);
    // The flushes were met: scripts went out by hash, nodes answered
    // NOSCRIPT, and every call above still succeeded (the source went out
    // again).
    let mut refused = 0;
    for node in &cluster.nodes {
        let mut conn = node.conn();
        let errors: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut conn)
            .unwrap();
        refused += errors
            .lines()
            .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        assert!(node.calls("evalsha") > 0, "scripts go out by hash");
    }
    assert!(
        refused > 0,
        "no node ever answered NOSCRIPT: the test did not test"
    );
    eventually("no key left", Duration::from_secs(2), || {
        cluster.count_key_now(RESOURCE) == 0
            && cluster.count_key_now("flush:other") == 0
            && cluster.count_key_now("flush:alone") == 0
    });
}
