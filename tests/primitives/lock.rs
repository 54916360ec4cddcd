//! The core client against real `redis-server` nodes: acquire, busy, release,
//! drop, expiry, extend, clean-up of partial locks.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Fault, Proxy};
use crate::harness::{settles, test_client};
use redlock_sync::{Error, LostCause, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn client(cluster: &Cluster) -> Redlock {
    // These tests check what lands on every node: a generous node timeout.
    test_client(cluster.urls(), 2, Some(Duration::from_secs(1)))
}

/// The token stored on a majority of nodes (read from Redis itself).
fn stored_token(cluster: &Cluster, key: &str) -> String {
    let values = cluster.values_now(key);
    let token = values
        .iter()
        .flatten()
        .next()
        .cloned()
        .expect("key on some node");
    let holders = values
        .iter()
        .filter(|v| v.as_deref() == Some(&token))
        .count();
    assert!(holders >= 3, "token on only {holders} nodes");
    token
}

#[test]
fn lock_sets_the_key_on_every_node_and_release_removes_it() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let guard = redlock.lock("res:basic", TTL).unwrap();
    assert_eq!(guard.resource(), "res:basic");
    assert!(guard.is_valid());
    assert!(guard.remaining() > Duration::from_secs(9));
    assert!(guard.remaining() <= TTL - Duration::from_millis(102));

    let token = stored_token(&cluster, "res:basic");
    assert_eq!(token.len(), 40, "20 random bytes, hex");
    settles("key on all 5 nodes", || {
        cluster.holders_now("res:basic", &token) == 5
    });
    for node in &cluster.nodes {
        let pttl = node.pttl_now("res:basic");
        assert!(pttl > 9_000 && pttl <= 10_000, "pttl {pttl}");
    }

    guard.release().unwrap();
    cluster.await_gone("res:basic");
}

#[test]
fn a_held_resource_is_busy_for_others() {
    let cluster = Cluster::start(5);
    let a = client(&cluster);
    let b = client(&cluster);
    let held = a.lock("res:busy", TTL).unwrap();
    let token = stored_token(&cluster, "res:busy");
    // `lock` returns at a majority; more of A's SETs may land later.
    let holding = |cluster: &Cluster| -> Vec<usize> {
        (0..5)
            .filter(|&i| cluster.nodes[i].get_now("res:busy").as_deref() == Some(token.as_str()))
            .collect()
    };
    let before = holding(&cluster);

    assert!(b.try_lock("res:busy", TTL).unwrap().is_none());
    match b.lock("res:busy", TTL) {
        Err(Error::Busy {
            resource,
            attempts,
            wanted,
            held_here,
            ..
        }) => {
            assert_eq!(resource, "res:busy");
            assert_eq!(wanted, redlock_sync::Wanted::Lock);
            assert!(!held_here, "another client holds it");
            // First round plus retry_count(2), and the round made once the
            // release channel is subscribed (when that came in time).
            assert!(
                (3..=4).contains(&attempts),
                "first round plus retry_count(2): {attempts}"
            );
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    let waited = Instant::now();
    assert!(matches!(
        b.lock_for("res:busy", TTL, Duration::from_millis(100)),
        Err(Error::Busy { .. })
    ));
    assert!(waited.elapsed() >= Duration::from_millis(100));

    // The holder's key is untouched by the failed attempts, and they leave
    // nothing of their own behind.
    // Within 5 s, less than B's 10 s TTL: removed, not expired.
    crate::harness::eventually("B's keys removed", Duration::from_secs(5), || {
        cluster
            .values_now("res:busy")
            .iter()
            .flatten()
            .all(|v| *v == token)
    });
    let after = holding(&cluster);
    assert!(
        before.iter().all(|i| after.contains(i)),
        "{before:?} -> {after:?}"
    );
    drop(held);
}

#[test]
fn dropping_the_guard_releases_before_drop_returns() {
    let cluster = Cluster::start(5);
    let a = client(&cluster);
    let b = client(&cluster);
    for _ in 0..20 {
        let guard = a.lock("res:drop", TTL).unwrap();
        drop(guard);
        // No waiting: a majority already confirmed the release inside drop.
        let other = b
            .try_lock("res:drop", TTL)
            .unwrap()
            .expect("free after drop");
        drop(other);
    }
}

#[test]
fn lock_for_waits_for_the_holder_to_release() {
    let cluster = Cluster::start(5);
    let a = client(&cluster);
    let b = client(&cluster);
    let guard = a.lock("res:wait", TTL).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        tx.send(()).unwrap();
        b.lock_for("res:wait", TTL, Duration::from_secs(10))
            .map(|g| g.release())
    });
    rx.recv().unwrap();
    drop(guard);
    waiter
        .join()
        .unwrap()
        .expect("acquired after release")
        .expect("released");
}

#[test]
fn an_expired_lock_cannot_release_or_extend_the_next_holder() {
    let cluster = Cluster::start(5);
    let a = client(&cluster);
    let b = client(&cluster);
    let mut first = a.lock("res:expire", Duration::from_millis(100)).unwrap();
    settles("first lock expired on every node", || {
        !first.is_valid() && cluster.count_key_now("res:expire") == 0
    });
    let second = b.lock("res:expire", TTL).unwrap();
    let token = stored_token(&cluster, "res:expire");

    // Its validity ran out: nothing asked; then the release asks, and the
    // nodes say the token is gone.
    assert!(matches!(
        first.extend(TTL),
        Err(Error::LockLost {
            cause: LostCause::Expired,
            ..
        })
    ));
    match first.release() {
        Err(Error::LockLost {
            confirmed,
            quorum,
            cause,
            ..
        }) => {
            assert_eq!(confirmed, 0);
            assert_eq!(quorum, 3);
            assert_eq!(cause, LostCause::NotHeld);
        }
        other => panic!("expected LockLost, got {other:?}"),
    }
    settles("second holder's key on all nodes", || {
        cluster.holders_now("res:expire", &token) == 5
    });
    assert!(second.is_valid());
    second.release().unwrap();
}

#[test]
fn extend_moves_validity_forward_on_a_majority() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let mut guard = redlock
        .lock("res:extend", Duration::from_millis(500))
        .unwrap();
    let before = guard.valid_until();
    guard.extend(Duration::from_secs(20)).unwrap();
    assert!(guard.valid_until() > before + Duration::from_secs(15));
    assert_eq!(guard.ttl(), Duration::from_secs(20));
    let extended = cluster
        .nodes
        .iter()
        .filter(|n| n.pttl_now("res:extend") > 15_000)
        .count();
    assert!(extended >= 3, "pexpire applied on {extended} nodes");
    assert!(matches!(
        guard.extend(Duration::ZERO),
        Err(Error::Config { .. })
    ));
    guard.release().unwrap();
}

#[test]
fn a_partial_acquisition_is_cleaned_up_and_others_keys_survive() {
    let cluster = Cluster::start(5);
    // Another client holds the key on 3 of 5 nodes.
    for node in &cluster.nodes[..3] {
        let _: () = redis::cmd("SET")
            .arg("res:partial")
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.conn())
            .unwrap();
    }
    let redlock = client(&cluster);
    assert!(redlock.try_lock("res:partial", TTL).unwrap().is_none());
    // Our SET landed on the 2 free nodes; the failed round must remove it.
    settles("our partial keys removed", || {
        cluster.nodes[3..]
            .iter()
            .all(|n| n.get_now("res:partial").is_none())
    });
    assert_eq!(cluster.holders_now("res:partial", "someone-else"), 3);
}

#[test]
fn a_quorum_that_arrives_after_the_validity_is_too_slow() {
    // Every reply is delayed by 80 ms; a 60 ms TTL leaves 57.4 ms of
    // validity, so every round is confirmed too late: always TooSlow, never a
    // guard whose validity has already ended.
    let cluster = Cluster::start(3);
    let proxies: Vec<Proxy> = cluster.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    let redlock = test_client(
        proxies.iter().map(Proxy::url),
        0,
        Some(Duration::from_secs(1)),
    );
    for proxy in &proxies {
        proxy.set(Fault::Latency(Duration::from_millis(80)));
    }
    let ttl = Duration::from_millis(60);
    for _ in 0..3 {
        match redlock.try_lock("res:slow", ttl) {
            Err(Error::TooSlow {
                ttl: asked,
                elapsed,
                ..
            }) => {
                assert_eq!(asked, ttl);
                assert!(elapsed >= Duration::from_millis(57), "{elapsed:?}");
            }
            other => panic!("expected TooSlow, got {other:?}"),
        }
    }
    let err = redlock.try_lock("res:slow", ttl).unwrap_err();
    assert!(
        err.to_string()
            .contains("too long for the 60 ms ttl, which it leaves no validity of"),
        "{err}"
    );
}
