//! Nodes on a slower network. The per-node timeout is
//! derived from the TTL but never below what the nodes' measured round
//! trips need (nor above what the TTL allows); answers say when timeouts
//! decided, with the timeout; a TTL the round trip leaves no validity of
//! fails at once.

use std::time::Duration;

use crate::harness::Cluster;
use crate::harness::{Fault, Proxy};
use redlock_sync::{Error, Redlock};

/// Every node of `cluster` behind a proxy that delays each reply by
/// `delay` (the round trip of a network `delay / 2` away each way).
fn behind_proxies(cluster: &Cluster, delay: Duration) -> Vec<Proxy> {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let proxy = Proxy::start(node.port);
            proxy.set(Fault::Latency(delay));
            proxy
        })
        .collect()
}

fn urls(proxies: &[Proxy]) -> Vec<String> {
    proxies.iter().map(Proxy::url).collect()
}

/// 15 ms each way, a 5 s TTL, default settings: the derived timeout would
/// be 25 ms, below the 30 ms round trip, and no lock could succeed. The
/// client measures the round trip and waits for it. (Each lock may wait
/// 10 s: on a loaded machine a proxy's reply now and then comes later than
/// the measured need.)
#[test]
fn every_lock_succeeds_with_nodes_15_ms_away_each_way() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::from_millis(30));
    let redlock = Redlock::new(urls(&proxies)).unwrap();
    let ttl = Duration::from_secs(5);
    for i in 0..10 {
        let guard = redlock
            .lock_for(&format!("far:{i}"), ttl, Duration::from_secs(10))
            .unwrap_or_else(|err| panic!("lock {i} of 10: {err}"));
        assert!(guard.is_valid());
        guard.release().unwrap();
    }
}

/// Every command the nodes ran that takes or releases a lock.
fn lock_commands(cluster: &Cluster) -> u64 {
    cluster
        .nodes
        .iter()
        .map(|n| n.calls("set") + n.scripts_run())
        .sum()
}

/// A TTL too short for the measured round trip fails with `TooSlow` after
/// one round, without the retries (11 rounds with the defaults).
#[test]
fn a_ttl_too_short_for_the_round_trip_fails_after_one_round_with_too_slow() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::from_millis(30));
    let redlock = Redlock::new(urls(&proxies)).unwrap();
    let before = lock_commands(&cluster);
    let err = redlock
        .lock("far:short", Duration::from_millis(20))
        .unwrap_err();
    assert!(matches!(err, Error::TooSlow { .. }), "{err}");
    assert!(err.to_string().contains("measured round trip"), "{err}");
    // One round: an acquisition and a clean-up per node, at most.
    let sent = lock_commands(&cluster) - before;
    assert!(sent <= 6, "{sent} commands: more than one round");
}

/// When timeouts decide a `NoQuorum`, its headline says the nodes were
/// slower than the per-node timeout, and what it was.
#[test]
fn a_no_quorum_decided_by_timeouts_names_the_timeout() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::ZERO);
    let redlock = crate::harness::test_client(urls(&proxies), 0, Some(Duration::from_millis(100)));
    // Every node connected first, and idle: a node still connecting when
    // the stall begins, or still releasing (a release returns once a
    // majority answered), fails for want of a connection, not by a timeout.
    let mut warm = 0;
    crate::harness::eventually("a lock on all three nodes", Duration::from_secs(10), || {
        warm += 1;
        let key = format!("far:warm:{warm}");
        let Ok(guard) = redlock.lock(&key, Duration::from_secs(5)) else {
            return false;
        };
        let landed = cluster.count_key_now(&key);
        drop(guard);
        cluster.await_gone(&key);
        landed == 3
    });
    for proxy in &proxies[..2] {
        proxy.set(Fault::Stall);
    }
    let err = redlock
        .lock("far:stalled", Duration::from_secs(5))
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::NoQuorum { .. }), "{message}");
    assert!(
        message.contains("answered more slowly than the 100 ms per-node timeout"),
        "{message}"
    );
    for proxy in &proxies {
        proxy.set(Fault::Pass);
    }
}

/// A node that fails fast (out of memory) does not stand in for the
/// distant node the majority needs: the timeout follows the nodes whose
/// votes can count.
#[test]
fn a_node_failing_fast_does_not_hide_a_distant_one() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(3);
    let far = Proxy::start(cluster.nodes[2].port);
    far.set(Fault::Latency(Duration::from_millis(40)));
    let urls = vec![cluster.nodes[0].url(), cluster.nodes[1].url(), far.url()];
    let redlock = Redlock::new(urls).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    for i in 0..5 {
        let guard = redlock
            .lock(&format!("far:oom:{i}"), Duration::from_secs(5))
            .unwrap_or_else(|err| panic!("lock {i} of 5: {err}\n{:#?}", redlock.node_health()));
        guard.release().unwrap();
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
}
