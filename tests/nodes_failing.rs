//! The client while nodes are down, paused, restarted or misconfigured.

mod harness;

use std::time::{Duration, Instant};

use harness::{Cluster, NodeOptions};
use harness::{capture_logs, logs, settles, test_client};
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
        assert!(cluster.count_key(&key) >= 3);
        guard
            .release()
            .expect("release confirmed by the live majority");
        settles("released", || cluster.count_key(&key) == 0);
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
    settles("no key left on the live nodes", || {
        cluster.count_key("res:noquorum") == 0
    });
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
    settles("released", || cluster.count_key("res:killed") == 0);

    let guard = redlock.lock("res:killed2", TTL).unwrap();
    cluster.nodes[3].kill();
    drop(guard); // must not panic; releases on the remaining majority
    settles("released on drop", || cluster.count_key("res:killed2") == 0);
}

#[test]
fn a_wrong_password_is_an_auth_failure_without_retrying() {
    let options = NodeOptions {
        password: Some("right-secret".into()),
        ..NodeOptions::default()
    };
    let cluster = Cluster::start_with(3, &options);
    let good = client(cluster.urls());
    good.lock("res:auth", TTL).unwrap().release().unwrap();

    let wrong: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://:wrong-secret@127.0.0.1:{}", n.port))
        .collect();
    let redlock = Redlock::builder(wrong)
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

/// After a timeout the connection is dropped; its replacement's first batch
/// cuts the old one off (`CLIENT KILL ID`), so a command still in flight on
/// the old connection can never run after the new connection's commands.
#[test]
fn a_replacement_connection_first_cuts_off_the_one_that_timed_out() {
    let mut cluster = Cluster::start(3);
    let redlock = test_client(cluster.urls(), 0, Some(Duration::from_millis(50)));
    drop(redlock.lock("res:barrier", TTL).unwrap());
    let old_id = client_ids(&cluster.nodes[0]);
    capture_logs();
    cluster.nodes[0].pause();
    // Times out on node 0 (a majority still answers): that connection is dropped.
    drop(redlock.lock("res:barrier:2", TTL).unwrap());
    let failing = format!(
        "requests to node {} are failing",
        cluster.nodes[0].address()
    );
    settles("node 0's request timed out", || {
        logs().iter().any(|line| line.contains(&failing))
    });
    cluster.nodes[0].resume();
    settles("node 0 ran CLIENT KILL for the old connection", || {
        drop(redlock.lock("res:barrier:3", TTL));
        cluster.nodes[0].calls("client|kill") >= 1
    });
    assert!(
        old_id
            .iter()
            .all(|id| !client_ids(&cluster.nodes[0]).contains(id)),
        "the old connection is gone"
    );
}

/// The ids of the clients connected to a node (our own query's excluded).
fn client_ids(node: &harness::Node) -> Vec<String> {
    let mut conn = node.conn();
    let me: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter(|id| *id != me.to_string())
        .map(str::to_owned)
        .collect()
}
