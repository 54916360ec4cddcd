//! Nodes whose script cache is flushed mid-run (`SCRIPT FLUSH`, as after a
//! restart or by an operator): a script the node answers `NOSCRIPT` goes out
//! again with its source before anything else on its connection, so no
//! request ever fails with `NOSCRIPT`. Exclusion holds, every release and
//! extension succeeds, and no key is left behind.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, Contention, Node, NodeOptions, contend_while, eventually};
use redlock_sync::Redlock;

const RESOURCE: &str = "flush:res";
const TTL: Duration = Duration::from_secs(5);

/// What the run must have seen before it stops: contended acquisitions,
/// checked extend/release pairs and flushes of every node, all at once.
/// The run stops when every one is reached (not after a fixed time: how
/// much gets done in a second is the machine's speed, not the crate's).
const ACQUISITIONS: usize = 50;
const CHECKED: u64 = 10;
const FLUSHES: u64 = 50;

/// How many times the nodes answered `NOSCRIPT`, in all.
fn noscript_answers(cluster: &Cluster) -> u64 {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let errors: String = redis::cmd("INFO")
                .arg("errorstats")
                .query(&mut node.conn())
                .unwrap();
            errors
                .lines()
                .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn script_cache_flushes_mid_run_never_break_exclusion_or_leave_keys() {
    let _turn = crate::harness::heavy();
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
    let checked = AtomicU64::new(0);
    let acquired = AtomicUsize::new(0);
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
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut guard = clients[0].lock("flush:other", TTL).expect("lock");
                guard.extend(TTL).expect("extend never fails with NOSCRIPT");
                guard.release().expect("release never fails with NOSCRIPT");
                let mut guard = alone.lock("flush:alone", TTL).expect("one-node lock");
                guard.extend(TTL).expect("one-node extend never fails");
                guard.release().expect("one-node release never fails");
                checked.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let (client, url) = (&clients[i % 2], witness.url());
                let (stop, acquired) = (&stop, &acquired);
                let going = move || !stop.load(Ordering::Relaxed);
                s.spawn(move || contend_while(client, &url, RESOURCE, TTL, going, acquired))
            })
            .collect();
        // A deadline only against a hang: every target is an event.
        let deadline = Instant::now() + Duration::from_secs(120);
        while acquired.load(Ordering::Relaxed) < ACQUISITIONS
            || checked.load(Ordering::Relaxed) < CHECKED
            || flushes.load(Ordering::Relaxed) < FLUSHES
            || noscript_answers(&cluster) == 0
        {
            if Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                panic!(
                    "stalled: {} acquisitions, {} checked pairs, {} flushes, {} NOSCRIPT",
                    acquired.load(Ordering::Relaxed),
                    checked.load(Ordering::Relaxed),
                    flushes.load(Ordering::Relaxed),
                    noscript_answers(&cluster)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        let mut total = Contention::default();
        for worker in workers {
            total += worker.join().unwrap();
        }
        total
    });
    let flushes = flushes.load(Ordering::Relaxed);
    println!(
        "script flush: {} acquisitions, {flushes} flushes of all 5 nodes",
        seen.acquisitions
    );
    seen.assert_exclusive(&witness, RESOURCE);
    // The flushes were met: scripts went out by hash, nodes answered
    // NOSCRIPT (awaited above), and every call above still succeeded (the
    // source went out again).
    for node in &cluster.nodes {
        assert!(node.calls("evalsha") > 0, "scripts go out by hash");
    }
    eventually("no key left", Duration::from_secs(2), || {
        cluster.count_key_now(RESOURCE) == 0
            && cluster.count_key_now("flush:other") == 0
            && cluster.count_key_now("flush:alone") == 0
    });
}
