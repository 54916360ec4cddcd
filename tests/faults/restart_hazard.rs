//! The crash-recovery hazard of Redlock without persistence: a node that
//! restarts empty at once can hand a held lock to a second client; a node
//! kept out for at least the TTL cannot.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, test_client};
use redlock_sync::Redlock;

const TTL: Duration = Duration::from_millis(1500);

fn client(cluster: &Cluster) -> Redlock {
    test_client(cluster.urls(), 0, None)
}

/// A holds the lock on nodes 0 and 1 only (node 2 was down when A locked,
/// and has come back empty). Returns A's guard.
fn hold_on_two_of_three(cluster: &mut Cluster) -> redlock_sync::LockGuard {
    cluster.nodes[2].kill();
    let a = client(cluster);
    let guard = a.lock("hazard", TTL).expect("A locks on 2 of 3");
    cluster.nodes[2].restart();
    assert_eq!(cluster.count_key_now("hazard"), 2);
    guard
}

#[test]
fn an_immediate_empty_restart_lets_a_second_client_in() {
    let mut cluster = Cluster::start(3);
    let a = hold_on_two_of_three(&mut cluster);
    // Node 1 crashes and restarts at once, without its data.
    cluster.nodes[1].restart();
    let b = client(&cluster)
        .try_lock("hazard", TTL)
        .unwrap()
        .expect("B reaches a majority on the two empty nodes");
    // The hazard: both guards are valid at the same moment.
    assert!(a.is_valid() && b.is_valid(), "two valid holders");
}

#[test]
fn a_restart_delayed_past_the_ttl_keeps_the_lock_exclusive() {
    let mut cluster = Cluster::start(3);
    let a = hold_on_two_of_three(&mut cluster);
    let b_client = client(&cluster);
    let crashed = &mut cluster.nodes[1];
    // Whether A's guard was still valid when B got in, read at that moment:
    // the restart may still be under way, and B's short lease may run out
    // before it ends.
    let a_valid_when_b_got_in = std::thread::scope(|s| {
        // Node 1 crashes and stays out for the TTL before rejoining empty.
        s.spawn(|| crashed.restart_after(TTL + Duration::from_millis(100)));
        let deadline = Instant::now() + TTL * 4;
        loop {
            assert!(Instant::now() < deadline, "B never got the lock");
            if let Ok(Some(_guard)) = b_client.try_lock("hazard", TTL) {
                break a.is_valid();
            }
            std::thread::sleep(Duration::from_millis(20)); // B's retry pace
        }
    });
    assert!(
        !a_valid_when_b_got_in,
        "B got in while A's guard was still valid"
    );
}

fn quarantined_client(cluster: &Cluster, period: Duration) -> Redlock {
    Redlock::builder(cluster.urls())
        .restart_quarantine(period)
        .retry_count(0)
        .connect_timeout(Duration::from_millis(300))
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap()
}

/// The hazard above, with the restart quarantine on: the two nodes that
/// restarted empty do not count, so B never gets in while A's guard is
/// valid, and gets in once they have been up for the period.
#[test]
fn with_the_restart_quarantine_an_empty_restart_never_lets_a_second_client_in() {
    let mut cluster = Cluster::start(3);
    for node in &cluster.nodes {
        node.admit(); // a new cluster, started at once (documented)
    }
    let period = TTL * 2;
    cluster.nodes[2].kill();
    let a_client = quarantined_client(&cluster, period);
    let a = a_client.lock("hazard", TTL).expect("A locks on 2 of 3");
    cluster.nodes[2].restart();
    cluster.nodes[1].restart();
    let b_client = quarantined_client(&cluster, period);
    let mut refused = 0;
    while a.is_valid() {
        match b_client.try_lock("hazard", TTL) {
            Ok(Some(_)) => panic!("B got in while A's guard was valid"),
            Ok(None) => {}
            Err(redlock_sync::Error::NoQuorum { failures, .. }) => {
                let quarantined = failures
                    .iter()
                    .filter(|f| f.kind() == redlock_sync::FailureKind::Quarantined)
                    .count();
                assert!(quarantined >= 1, "{failures:?}");
                assert!(
                    failures
                        .iter()
                        .any(|f| f.to_string().contains("counts again in"))
                );
                refused += 1;
            }
            Err(other) => panic!("unexpected {other}"),
        }
        std::thread::sleep(Duration::from_millis(50)); // B's retry pace
    }
    assert!(refused > 0);
    // A failure shows B's last answer and what it knew of each node.
    crate::harness::settles_at(
        "B gets in once the quarantine is over",
        String::from("in"),
        || match b_client.try_lock("hazard", TTL) {
            Ok(Some(_)) => String::from("in"),
            Ok(None) => format!("busy; {:?}", b_client.node_health()),
            Err(err) => format!("{err}; {:?}", b_client.node_health()),
        },
    );
}

/// A node that came back with an old marker and
/// `appendfsync always` was admitted at once as "restarted with its data",
/// but nothing in a node's data shows that it is not older than what it
/// acknowledged: here an AOF backup restored lacks the lock taken since,
/// and with two other nodes that lost it (as after an earlier empty
/// restart) a second holder got in. Now every restarted node waits out the
/// period, whatever its persistence.
#[test]
fn a_node_restored_from_an_older_backup_waits_out_the_quarantine() {
    let options = crate::harness::NodeOptions {
        extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..crate::harness::NodeOptions::default()
    };
    let mut cluster = Cluster::start_with(5, &options);
    for node in &cluster.nodes {
        node.admit();
    }
    let a = quarantined_client(&cluster, Duration::from_secs(60));
    drop(a.lock("warm", TTL).expect("admitted nodes count"));
    let backup = cluster.nodes[2].backup();
    let held = a.lock("restored", TTL).expect("A locks");
    // A's lock returns at a majority: its SETs to the other nodes may still
    // be on their way, and one landing after the DEL below would make B's
    // round Busy rather than short of nodes (seen once in CI).
    crate::harness::settles("A's key on every node", || {
        cluster
            .nodes
            .iter()
            .all(|n| n.get_now("restored").is_some())
    });
    for node in &cluster.nodes[3..] {
        let _: i64 = redis::cmd("DEL")
            .arg("restored")
            .query(&mut node.conn())
            .unwrap();
    }
    cluster.nodes[2].restore(&backup);
    assert_eq!(
        cluster.nodes[2].get_now("restored"),
        None,
        "the backup is older"
    );
    let b = quarantined_client(&cluster, Duration::from_secs(60));
    // Two yes (the nodes that lost the lock), two held, and the restored
    // node's vote does not count: a majority answered and A holds it.
    match b.try_lock("restored", TTL) {
        Ok(None) => {}
        other => panic!("B must see it held: {other:?}"),
    }
    let restored = b.node_health().remove(2);
    assert_eq!(
        restored.refusal().map(|f| f.kind()),
        Some(redlock_sync::FailureKind::Quarantined),
        "{restored:?}"
    );
    assert!(held.is_valid());
}

#[test]
fn a_new_cluster_starts_quarantined_until_its_nodes_have_been_up_for_the_period() {
    let cluster = Cluster::start(3);
    let client = quarantined_client(&cluster, Duration::from_secs(2));
    let err = client.try_lock("new", TTL).unwrap_err();
    assert!(err.to_string().contains("in restart quarantine"), "{err}");
    crate::harness::settles("admitted after 2 s of uptime", || {
        matches!(client.try_lock("new", TTL), Ok(Some(_)))
    });
    let longer = quarantined_client(&cluster, Duration::from_secs(3600));
    assert!(
        longer.try_lock("new3", TTL).is_err(),
        "up for 2 s does not admit a node for an hour"
    );
    let next = quarantined_client(&cluster, Duration::from_secs(2));
    assert!(next.try_lock("new2", TTL).unwrap().is_some());
}

/// A `redlock:admitted` marker that is not UTF-8 is no marker: the node is
/// quarantined like any other new process, and its connection does not
/// fail as "not a Redis server".
#[test]
fn a_marker_that_is_not_text_is_no_marker() {
    let cluster = Cluster::start(3);
    for node in &cluster.nodes {
        let _: () = redis::cmd("SET")
            .arg("redlock:admitted")
            .arg(&b"\xff\xfe operator"[..])
            .query(&mut node.conn())
            .unwrap();
    }
    // Over RESP2, and over RESP3 (where INFO is a verbatim string).
    let resp3: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| format!("{u}?protocol=resp3"))
        .collect();
    let clients = [
        quarantined_client(&cluster, Duration::from_secs(3600)),
        Redlock::builder(resp3)
            .restart_quarantine(Duration::from_secs(3600))
            .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
            .retry_count(0)
            .connect_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    ];
    for client in &clients {
        // A round's verdict comes at the second refusal: the third node may
        // not have answered yet ("unanswered"; on a loaded machine, nearly
        // always). Every node is seen quarantined over a few rounds, and
        // none ever counts.
        let mut quarantined = std::collections::BTreeSet::new();
        crate::harness::settles("every node checked and quarantined", || {
            match client.try_lock("hazard:marker", Duration::from_secs(5)) {
                Err(redlock_sync::Error::NoQuorum { failures, .. }) => {
                    quarantined.extend(
                        failures
                            .iter()
                            .filter(|f| f.kind() == redlock_sync::FailureKind::Quarantined)
                            .map(|f| f.node().to_owned()),
                    );
                }
                other => panic!("no node counts: {other:?}"),
            }
            quarantined.len() == 3
        });
    }
}
