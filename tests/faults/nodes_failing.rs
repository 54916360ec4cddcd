//! The client while nodes are down, paused, restarted or misconfigured.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, NodeOptions};
use crate::harness::{settles, test_client};
use redlock_sync::{Error, FailureKind, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn client(urls: Vec<String>) -> Redlock {
    test_client(urls, 3, None)
}

#[test]
fn a_minority_down_does_not_stop_locking() {
    let mut cluster = Cluster::start(5);
    cluster.nodes[0].kill();
    cluster.nodes[1].kill();
    let redlock = client(cluster.urls());
    for i in 0..10 {
        let key = format!("res:minority:{i}");
        let guard = redlock.lock(&key, TTL).unwrap();
        assert!(cluster.count_key_now(&key) >= 3);
        guard
            .release()
            .expect("release confirmed by the live majority");
        settles("released", || cluster.count_key_now(&key) == 0);
    }
}

#[test]
fn a_majority_down_is_no_quorum_naming_each_node_and_leaves_nothing() {
    let mut cluster = Cluster::start(5);
    let redlock = client(cluster.urls());
    let dead: Vec<String> = cluster.nodes[..3].iter().map(|n| n.address()).collect();
    for node in &mut cluster.nodes[..3] {
        node.kill();
    }
    match redlock.lock("res:noquorum", TTL) {
        Err(Error::NoQuorum {
            resource,
            confirmed,
            quorum,
            failures,
        }) => {
            assert_eq!(resource, "res:noquorum");
            assert!(confirmed <= 2);
            assert_eq!(quorum, 3);
            // Live nodes that had not answered when 3 dead ones made a
            // majority impossible are listed as such, never as failed.
            let (unanswered, failed): (Vec<_>, Vec<_>) = failures
                .iter()
                .partition(|f| f.kind() == FailureKind::Unanswered);
            assert!(
                unanswered
                    .iter()
                    .all(|f| !dead.contains(&f.node().to_owned()))
            );
            let mut named: Vec<String> = failed.iter().map(|f| f.node().to_owned()).collect();
            named.sort();
            let mut expected = dead.clone();
            expected.sort();
            assert_eq!(named, expected);
            assert!(
                failed
                    .iter()
                    .all(|f| matches!(f.kind(), FailureKind::Connection | FailureKind::Timeout))
            );
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    cluster.await_gone("res:noquorum");
}

#[test]
fn the_client_reconnects_after_every_node_restarts() {
    let mut cluster = Cluster::start(5);
    let redlock = client(cluster.urls());
    drop(redlock.lock("res:restart", TTL).unwrap());
    for node in &mut cluster.nodes {
        node.restart();
    }
    let guard = redlock
        .lock_for("res:restart", TTL, Duration::from_secs(10))
        .expect("reconnected by itself");
    guard.release().unwrap();
}

#[test]
fn build_succeeds_with_every_node_down_and_locks_once_they_come_up() {
    let mut cluster = Cluster::start(3);
    for node in &mut cluster.nodes {
        node.kill();
    }
    let redlock = client(cluster.urls());
    assert!(matches!(
        redlock.try_lock("res:late", TTL),
        Err(Error::NoQuorum { .. })
    ));
    for node in &mut cluster.nodes {
        node.restart();
    }
    let guard = redlock
        .lock_for("res:late", TTL, Duration::from_secs(10))
        .expect("connected in the background");
    guard.release().unwrap();
}

#[test]
fn a_node_killed_while_held_still_releases_on_the_majority() {
    let mut cluster = Cluster::start(5);
    let redlock = client(cluster.urls());
    let guard = redlock.lock("res:killed", TTL).unwrap();
    cluster.nodes[4].kill();
    guard.release().expect("the remaining 4 nodes confirm");
    settles("released", || cluster.count_key_now("res:killed") == 0);

    let guard = redlock.lock("res:killed2", TTL).unwrap();
    cluster.nodes[3].kill();
    drop(guard); // must not panic; releases on the remaining majority
    settles("released on drop", || {
        cluster.count_key_now("res:killed2") == 0
    });
}

/// A wrong password, and a missing one (its `NOAUTH` comes inside the
/// connection's first pipeline, not as a server error to retry), are
/// `Auth` failures, not retried.
#[test]
fn a_wrong_or_missing_password_is_an_auth_failure_without_retrying() {
    let options = NodeOptions {
        password: Some("right-secret".into()),
        ..NodeOptions::default()
    };
    let cluster = Cluster::start_with(3, &options);
    let good = client(cluster.urls());
    good.lock("res:auth", TTL).unwrap().release().unwrap();
    for credentials in [":wrong-secret@", ""] {
        let wrong: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("redis://{credentials}127.0.0.1:{}", n.port))
            .collect();
        refused_for_credentials(wrong);
    }
}

fn refused_for_credentials(urls: Vec<String>) {
    let redlock = Redlock::builder(urls)
        .retry_count(1000)
        .retry_delay(Duration::from_millis(50))
        .build()
        .expect("build does not fail on unreachable or refusing nodes");
    let started = Instant::now();
    let err = redlock.lock("res:auth", TTL).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "1000 retries would take 50 s: auth failures must not be retried"
    );
    match &err {
        Error::NoQuorum { failures, .. } => {
            // Decided as soon as 2 of 3 refused us: a majority was impossible
            // (the third, if it had not answered yet, is listed as such).
            let auth = failures.iter().filter(|f| f.kind() == FailureKind::Auth);
            assert!(auth.count() >= 2, "{err}");
            assert!(
                failures
                    .iter()
                    .all(|f| matches!(f.kind(), FailureKind::Auth | FailureKind::Unanswered)),
                "{err}"
            );
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(
        err.to_string().contains("rejected the credentials"),
        "says what to fix: {err}"
    );
    let text = format!("{err} {err:?} {redlock:?}");
    assert!(!text.contains("wrong-secret"), "{text}");
    assert!(!text.contains("right-secret"), "{text}");
}

#[test]
fn read_only_replicas_are_failed_votes_not_grants() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    // Nodes 0 and 1 become replicas of node 2: they answer writes with READONLY.
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(cluster.nodes[2].port)
            .query(&mut node.conn())
            .unwrap();
    }
    match redlock.try_lock("res:replica", TTL) {
        Err(Error::NoQuorum { failures, .. }) => {
            let failed: Vec<_> = failures
                .iter()
                .filter(|f| f.kind() != FailureKind::Unanswered)
                .collect();
            assert_eq!(failed.len(), 2, "{failures:?}");
            for failure in failed {
                assert_eq!(failure.kind(), FailureKind::NotWritable, "{failure}");
                assert!(failure.detail().contains("READONLY"), "{failure}");
            }
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

/// A replacement connection cut off the one it
/// replaced with `CLIENT KILL ID <old id>`, but a restarted Redis numbers
/// connections from 1 again, so the old id could belong to anyone's
/// connection. Nothing is killed now: a late extension is harmless because
/// extensions never shorten a key.
#[test]
fn a_restarted_node_keeps_every_other_connection() {
    let mut cluster = Cluster::start(3);
    let redlock = test_client(cluster.urls(), 0, Some(Duration::from_millis(100)));
    for i in 0..3 {
        redlock
            .lock(&format!("res:ids:{i}"), TTL)
            .unwrap()
            .release()
            .unwrap();
    }
    cluster.nodes[0].restart();
    let mut strangers: Vec<redis::Connection> = (0..40).map(|_| cluster.nodes[0].conn()).collect();
    for i in 0..10 {
        // Node 0 may still be reconnecting: a majority is enough.
        redlock
            .lock(&format!("res:ids:after:{i}"), TTL)
            .unwrap()
            .release()
            .unwrap();
    }
    settles("the client is back on node 0", || {
        drop(redlock.lock("res:ids:last", TTL));
        cluster.nodes[0].calls("set") + cluster.nodes[0].scripts_run() >= 1
    });
    for (index, conn) in strangers.iter_mut().enumerate() {
        let pong: redis::RedisResult<String> = redis::cmd("PING").query(conn);
        assert_eq!(pong.as_deref(), Ok("PONG"), "connection {index} was closed");
    }
    assert_eq!(cluster.nodes[0].calls("client|kill"), 0);
}

/// An extension never shortens a key: `extend` to a shorter TTL shortens
/// the guard's claim only (so an extension that reaches a node late, after
/// a longer one, changes nothing there).
#[test]
fn extensions_never_shorten_a_key() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let mut guard = redlock.lock("res:short", Duration::from_secs(30)).unwrap();
    guard.extend(Duration::from_secs(1)).unwrap();
    assert!(guard.remaining() <= Duration::from_secs(1));
    settles("every node ran the extension", || {
        cluster.nodes.iter().all(|n| n.scripts_run() >= 1)
    });
    for node in &cluster.nodes {
        assert!(
            node.pttl_now("res:short") > 20_000,
            "shortened on {}",
            node.address()
        );
    }
    guard.release().unwrap();
}
