//! Dead nodes cost nothing: a client that starts while nodes are
//! black-holed (the TCP connection opens, nothing ever answers) builds
//! without waiting for them and takes a free lock at once, with every
//! primitive.

use std::time::{Duration, Instant};

use crate::harness::{BlackHole, Cluster};
use redlock_sync::{FailureKind, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Far longer than a healthy loopback node takes to answer on a loaded
/// machine: a start that waited for the black holes takes at least this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Three live nodes and two black holes, listed among them.
struct Partitioned {
    cluster: Cluster,
    _holes: [BlackHole; 2],
    urls: Vec<String>,
}

fn partitioned() -> Partitioned {
    let cluster = Cluster::start(3);
    let holes = [BlackHole::new(), BlackHole::new()];
    let urls = vec![
        cluster.nodes[0].url(),
        holes[0].url(),
        cluster.nodes[1].url(),
        holes[1].url(),
        cluster.nodes[2].url(),
    ];
    Partitioned {
        cluster,
        _holes: holes,
        urls,
    }
}

/// A fresh client over the partitioned nodes, and how long `build()` took.
fn fresh(urls: &[String]) -> (Redlock, Duration) {
    let started = Instant::now();
    let client = Redlock::builder(urls)
        .connect_timeout(CONNECT_TIMEOUT)
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .retry_count(0)
        .build()
        .expect("builds while two nodes are black-holed");
    (client, started.elapsed())
}

#[test]
fn a_client_started_while_two_of_five_nodes_are_black_holed_builds_and_locks_at_once() {
    let _turn = crate::harness::alone();
    let setup = partitioned();
    let (client, built_in) = fresh(&setup.urls);
    assert!(
        built_in < CONNECT_TIMEOUT,
        "build() waited {built_in:?} for the black holes"
    );
    // The black holes are reported, the live nodes are not.
    let health = client.node_health();
    for (i, node) in health.iter().enumerate() {
        let hole = i == 1 || i == 3;
        assert_eq!(!node.is_up(), hole, "node {i}: {node:?}");
        if hole {
            let failure = node.refusal().expect("why it does not count");
            assert_eq!(failure.kind(), FailureKind::Connection, "{failure}");
            assert!(
                failure.detail().contains("connecting in the background"),
                "{failure}"
            );
        }
    }
    let guard = client
        .try_lock("avail:lock", TTL)
        .expect("the three live nodes answer")
        .expect("free");
    setup.cluster.await_count("avail:lock", 3);
    guard.release().unwrap();
}

/// A Redis Cluster node whose seed is black-holed is not waited for
/// either: its map is read on a thread of its own, and until then it
/// answers as connecting. (`build()` once waited the connect timeout for
/// its map, then for its masters.)
#[test]
fn a_black_holed_cluster_node_does_not_hold_up_the_start() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(3);
    let hole = BlackHole::new();
    let seed = hole.url().replace("redis://", "redis+cluster://");
    let urls = vec![
        cluster.nodes[0].url(),
        seed,
        cluster.nodes[1].url(),
        cluster.nodes[2].url(),
    ];
    let (client, built_in) = fresh(&urls);
    println!("built in {built_in:?}");
    assert!(
        built_in < CONNECT_TIMEOUT,
        "build() waited {built_in:?} for the black-holed cluster node"
    );
    let health = client.node_health();
    assert!(!health[1].is_up(), "{:?}", health[1]);
    let guard = client
        .try_lock("avail:cluster-hole", TTL)
        .expect("the three live nodes answer")
        .expect("free");
    cluster.await_count("avail:cluster-hole", 3);
    guard.release().unwrap();
}

#[test]
fn every_primitive_of_a_client_started_during_a_partition_answers_at_once() {
    let _turn = crate::harness::alone();
    let setup = partitioned();
    let (client, _) = fresh(&setup.urls);
    let all = client
        .try_lock_all(&["avail:a", "avail:b"], TTL)
        .expect("lock_all answers")
        .expect("both free");
    all.release().unwrap();
    let (client, _) = fresh(&setup.urls);
    let permit = client
        .semaphore("avail:sem", 2)
        .try_lock(TTL)
        .expect("the semaphore answers")
        .expect("a permit");
    permit.release().unwrap();
    let (client, _) = fresh(&setup.urls);
    let write = client
        .rw_lock("avail:rw")
        .try_write(TTL)
        .expect("the rw-lock answers")
        .expect("the write lock");
    write.release().unwrap();
    let (client, _) = fresh(&setup.urls);
    let read = client
        .rw_lock("avail:rw")
        .try_read(TTL)
        .expect("the rw-lock answers")
        .expect("a read lock");
    read.release().unwrap();
    let (client, _) = fresh(&setup.urls);
    let leadership = client
        .election("avail:chief")
        .campaign("a", TTL)
        .try_win()
        .expect("the election answers")
        .expect("leader");
    leadership.resign().unwrap();
}

/// Longer than any answer a live loopback node gives on a loaded machine:
/// a round that waited for the paused node took at least this.
const STALL_TIMEOUT: Duration = Duration::from_millis(1500);

/// A client over five nodes with every connection open, then node 2
/// killed and node 4 paused (it never answers while the test runs).
fn warm_then_broken(cluster: &mut Cluster) -> Redlock {
    let client = Redlock::builder(cluster.urls())
        .node_timeout(STALL_TIMEOUT)
        .retry_count(0)
        .build()
        .unwrap();
    client.lock("avail:warm", TTL).unwrap().release().unwrap();
    cluster.await_count("avail:warm", 0);
    cluster.nodes[2].kill();
    cluster.nodes[4].pause();
    client
}

/// Two nodes hold the name, one is down, one is free, one is stalled:
/// whatever the stalled node answers, no majority can grant it and it is
/// held, so `try_lock` answers without waiting for it.
#[test]
fn an_acquisition_no_pending_answer_can_change_ends_at_once() {
    let _turn = crate::harness::alone();
    let mut cluster = Cluster::start(5);
    let client = warm_then_broken(&mut cluster);
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("SET")
            .arg("avail:held")
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.conn())
            .unwrap();
    }
    let started = Instant::now();
    let got = client.try_lock("avail:held", TTL);
    let took = started.elapsed();
    assert!(matches!(got, Ok(None)), "held: {got:?}");
    assert!(took < STALL_TIMEOUT, "waited {took:?} for the stalled node");
    cluster.nodes[4].resume();
}

/// A holder's extension: one node refuses (its key was replaced), two are
/// down, one confirms, one is stalled. Whatever the stalled node answers,
/// no majority confirms and the refusals cannot show the lease lost: the
/// extension answers `NoQuorum` without waiting for it.
#[test]
fn an_extension_no_pending_answer_can_change_ends_at_once() {
    let _turn = crate::harness::alone();
    let mut cluster = Cluster::start(5);
    let client = Redlock::builder(cluster.urls())
        .node_timeout(STALL_TIMEOUT)
        .retry_count(0)
        .build()
        .unwrap();
    let mut guard = client.lock("avail:kept", TTL).unwrap();
    cluster.await_count("avail:kept", 5);
    let _: () = redis::cmd("SET")
        .arg("avail:kept")
        .arg("someone-else")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    cluster.nodes[1].kill();
    cluster.nodes[2].kill();
    cluster.nodes[4].pause();
    let started = Instant::now();
    let extended = guard.extend(TTL);
    let took = started.elapsed();
    assert!(
        matches!(extended, Err(redlock_sync::Error::NoQuorum { .. })),
        "{extended:?}"
    );
    assert!(took < STALL_TIMEOUT, "waited {took:?} for the stalled node");
    cluster.nodes[4].resume();
}

/// A node that stalls is no slower network: the exchange that timed out
/// leaves its measured round trip as it was, so a short stall does not make
/// a 300 ms TTL `TooSlow`.
#[test]
fn a_stall_does_not_raise_the_measured_round_trip() {
    let _turn = crate::harness::alone();
    let mut cluster = Cluster::start(3);
    let timeout = Duration::from_millis(500);
    let client = Redlock::builder(cluster.urls())
        .node_timeout(timeout)
        .retry_count(0)
        .build()
        .unwrap();
    client.lock("avail:rtt", TTL).unwrap().release().unwrap();
    cluster.await_count("avail:rtt", 0);
    cluster.nodes[0].pause();
    // Nodes 1 and 2 answer: the lock returns while node 0's worker still
    // waits out its timeout.
    let guard = client.lock("avail:rtt", TTL).unwrap();
    crate::harness::settles("node 0's exchange timed out", || {
        client.node_health()[0]
            .last_failure()
            .is_some_and(|f| f.kind() == FailureKind::Timeout)
    });
    cluster.nodes[0].resume();
    let latency = client.node_health()[0].latency().expect("measured");
    assert!(
        latency < timeout / 4,
        "a {timeout:?} timeout raised the round trip to {latency:?}"
    );
    guard.release().unwrap();
}

/// Two of three nodes stop for 150 ms while a call that may wait 3 s takes
/// a 300 ms lock, six times: each call gets the lock once they answer,
/// never `TooSlow` (a TTL their measured answers can meet).
#[test]
fn a_short_stall_is_waited_out_not_read_as_too_slow() {
    let _turn = crate::harness::alone();
    let mut cluster = Cluster::start(3);
    let client = Redlock::new(cluster.urls()).unwrap();
    let ttl = Duration::from_millis(300);
    client.lock("avail:stall", ttl).unwrap().release().unwrap();
    for i in 0..6 {
        cluster.nodes[0].pause();
        cluster.nodes[1].pause();
        let got = std::thread::scope(|s| {
            let call = s.spawn(|| client.lock_for("avail:stall", ttl, Duration::from_secs(3)));
            std::thread::sleep(Duration::from_millis(150));
            cluster.nodes[0].resume();
            cluster.nodes[1].resume();
            call.join().unwrap()
        });
        match got {
            Ok(guard) => drop(guard),
            Err(err) => panic!("call {i}: {err}"),
        }
    }
}

/// Nodes paused while a client starts (each accepts the connection and
/// answers nothing) are connected in the background with the default
/// connect timeout, and count as soon as they answer again: node 1 is
/// resumed at once (its first attempt may still be waiting), node 3 only
/// after its first attempt timed out (its helper tries again). A lock
/// then lands on all five. (The test cannot tell which way node 1's
/// first attempt ended; node 3's is the path it pins.)
#[test]
fn nodes_paused_while_a_client_starts_count_once_they_answer() {
    let _turn = crate::harness::alone();
    let mut cluster = Cluster::start(5);
    cluster.nodes[1].pause();
    cluster.nodes[3].pause();
    let client = Redlock::builder(cluster.urls())
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .retry_count(0)
        .build()
        .expect("builds while two nodes are paused");
    let refusal = |i: usize| {
        client.node_health()[i]
            .refusal()
            .map(|f| f.to_string())
            .unwrap_or_default()
    };
    // Reported as not answering: still connecting in the background, or
    // (a start slowed by a loaded machine waited its whole second) already
    // with its first attempt's timeout.
    for i in [1, 3] {
        let node = &client.node_health()[i];
        assert!(!node.is_up(), "node {i}: {node:?}");
        let failure = node.refusal().expect("why it does not count");
        assert!(
            matches!(
                failure.kind(),
                FailureKind::Connection | FailureKind::Timeout
            ),
            "node {i}: {failure}"
        );
    }
    cluster.nodes[1].resume();
    crate::harness::settles("node 3's first attempt timed out", || {
        let said = refusal(3);
        !said.is_empty() && !said.contains("connecting in the background")
    });
    cluster.nodes[3].resume();
    crate::harness::settles("the resumed nodes count", || {
        client.node_health().iter().all(|n| n.is_up())
    });
    let guard = client
        .lock("avail:resumed", TTL)
        .expect("five nodes answer");
    cluster.await_count("avail:resumed", 5);
    guard.release().unwrap();
}
