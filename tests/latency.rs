//! Issue 37, item 3: nodes on a slower network. The per-node timeout is
//! derived from the TTL but never below what the nodes' measured round
//! trips need (nor above what the TTL allows); answers say when timeouts
//! decided, with the timeout; a TTL the round trip leaves no validity of
//! fails at once.

mod harness;

use std::time::{Duration, Instant};

use harness::Cluster;
use harness::{Fault, Proxy};
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
/// be 25 ms, below the 30 ms round trip, so every lock used to fail after
/// ~1.4 s of retries. The client measures the round trip and waits for it.
#[test]
fn every_lock_succeeds_with_nodes_15_ms_away_each_way() {
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::from_millis(30));
    let redlock = Redlock::new(urls(&proxies)).unwrap();
    let ttl = Duration::from_secs(5);
    for i in 0..10 {
        let guard = redlock
            .lock(&format!("far:{i}"), ttl)
            .unwrap_or_else(|err| panic!("lock {i} of 10: {err}"));
        assert!(guard.is_valid());
        guard.release().unwrap();
    }
}

/// A TTL whose validity the measured round trip would use up fails at
/// once with `TooSlow`, without a round (not after 11 rounds).
#[test]
fn a_ttl_too_short_for_the_round_trip_fails_at_once_with_too_slow() {
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::from_millis(30));
    let redlock = Redlock::new(urls(&proxies)).unwrap();
    let asked = Instant::now();
    let err = redlock
        .lock("far:short", Duration::from_millis(20))
        .unwrap_err();
    let took = asked.elapsed();
    assert!(matches!(err, Error::TooSlow { .. }), "{err}");
    assert!(err.to_string().contains("measured round trip"), "{err}");
    assert!(
        took < Duration::from_millis(30),
        "no round was tried: {took:?}"
    );
    assert_eq!(cluster.count_key("far:short"), 0, "nothing was sent");
}

/// When timeouts decide a `NoQuorum`, its headline says the nodes were
/// slower than the per-node timeout, and what it was.
#[test]
fn a_no_quorum_decided_by_timeouts_names_the_timeout() {
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::ZERO);
    let redlock = harness::test_client(urls(&proxies), 0, Some(Duration::from_millis(100)));
    drop(redlock.lock("far:warm", Duration::from_secs(5)).unwrap());
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

/// The detail of a timeout for a TTL so short that a third of it is below
/// the derived timeout's floor says so, instead of "kept within
/// 10 ms–250 ms".
#[test]
fn a_very_short_ttl_says_its_timeout_is_a_third_of_it() {
    let cluster = Cluster::start(3);
    let proxies = behind_proxies(&cluster, Duration::ZERO);
    let redlock = Redlock::new(urls(&proxies)).unwrap();
    for proxy in &proxies {
        proxy.set(Fault::Stall);
    }
    let err = redlock
        .try_lock("far:brief", Duration::from_millis(9))
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("a third of the 9 ms ttl"), "{message}");
    assert!(!message.contains("kept within"), "{message}");
    for proxy in &proxies {
        proxy.set(Fault::Pass);
    }
}
