//! Every primitive answers truthfully under partitions. A caller
//! decides from the answer: `Ok(None)` (`Busy`) — someone holds it, try
//! later; `NoQuorum` — the nodes are not there. The rule, for every
//! acquisition: `NoQuorum` only when fewer than a majority of the nodes
//! answered; `None` when a majority answered and holders kept it from us.
//!
//! Each client reaches the nodes through its own loopback links
//! (`harness::partition::Net`), cut by links that accept and never answer.

use std::time::Duration;

use crate::harness::Cluster;
use crate::harness::partition::Net;
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(30);

fn client(net: &Net, which: usize) -> Redlock {
    crate::harness::builder(net.urls(which))
        .retry_count(0)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("client")
}

fn assert_no_quorum<T: std::fmt::Debug>(answer: Result<Option<T>, Error>, what: &str) {
    match answer {
        Err(Error::NoQuorum { .. }) => {}
        other => panic!("{what}: too few nodes answered, expected NoQuorum, got {other:?}"),
    }
}

fn assert_held<T: std::fmt::Debug>(answer: Result<Option<T>, Error>, what: &str) {
    match answer {
        Ok(None) => {}
        other => {
            panic!("{what}: a majority answered and one holds it, expected None, got {other:?}")
        }
    }
}

/// Three nodes: A reaches {0, 1} and holds; B reaches {1, 2}: node 1 says
/// "held", node 2 "free", node 0 does not answer. Every primitive's `try_*`
/// answers `None`, not "nodes down". With B cut to {1} alone: `NoQuorum`.
#[test]
fn held_on_a_reachable_node_is_none_and_too_few_nodes_is_no_quorum() {
    let cluster = Cluster::start(3);
    let net = Net::new(&cluster, 2);
    let (a, b) = (client(&net, 0), client(&net, 1));
    net.view(0, &[2]);
    net.view(1, &[0]);
    let _lock = a.lock("t:x", TTL).expect("A on {0, 1}");
    assert_held(b.try_lock("t:x", TTL), "try_lock");
    assert_held(b.try_lock_all(&["t:x", "t:y"], TTL), "try_lock_all");
    let _permit = a.semaphore("t:sem", 1).lock(TTL).expect("A's permit");
    assert_held(b.semaphore("t:sem", 1).try_lock(TTL), "semaphore try_lock");
    let _read = a.rw_lock("t:rw").read(TTL).expect("A reads");
    assert_held(b.rw_lock("t:rw").try_write(TTL), "try_write");
    let _leads = a
        .election("t:elect")
        .campaign("a", TTL)
        .try_win()
        .unwrap()
        .expect("A leads");
    assert_held(
        b.election("t:elect").campaign("b", TTL).try_win(),
        "campaign try_win",
    );
    // B reaches node 1 alone: whatever it says, too few nodes answered.
    net.view(1, &[0, 2]);
    assert_no_quorum(b.try_lock("t:x", TTL), "try_lock");
    assert_no_quorum(b.try_lock("t:free", TTL), "try_lock of a free name");
    assert_no_quorum(b.semaphore("t:sem", 1).try_lock(TTL), "semaphore");
}

/// Five nodes: A reaches {0, 1, 2} and holds; B reaches {2, 3, 4}.
#[test]
fn five_nodes_held_on_the_shared_node_is_none() {
    let cluster = Cluster::start(5);
    let net = Net::new(&cluster, 2);
    let (a, b) = (client(&net, 0), client(&net, 1));
    net.view(0, &[3, 4]);
    net.view(1, &[0, 1]);
    let _lock = a.lock("t5:x", TTL).expect("A on {0, 1, 2}");
    // Again and again: once B's links to nodes 0 and 1 are known down they
    // fail at once, and the round must still wait for the answers that
    // make a majority.
    for _ in 0..5 {
        assert_held(b.try_lock("t5:x", TTL), "try_lock");
    }
    let free = b.try_lock("t5:free", TTL).unwrap();
    assert!(free.is_some(), "B's majority grants a free name");
}

/// A semaphore of 2 permits, three clients each reaching another majority
/// of three nodes: a pass goes on past a slot held on a node it reaches to
/// the slot free on its majority, and answers `None` only when none is.
#[test]
fn a_semaphore_pass_finds_the_permit_free_on_its_majority() {
    let cluster = Cluster::start(3);
    let net = Net::new(&cluster, 3);
    let clients: Vec<Redlock> = (0..3).map(|c| client(&net, c)).collect();
    for (c, cut) in [(0, 2), (1, 0), (2, 1)] {
        net.view(c, &[cut]);
    }
    let sem = |c: usize| clients[c].semaphore("t:sem2", 2);
    let _a = sem(0).try_lock(TTL).unwrap().expect("A: the first permit");
    let _c = sem(2)
        .try_lock(TTL)
        .unwrap()
        .expect("C: the permit free on its majority");
    assert_held(sem(1).try_lock(TTL), "B: both permits held");
}

/// A `try_write` that finds a reader and gives up leaves nothing that
/// makes others wait: a reader in a third client gets in right after the
/// reader released, not ~2 s later (a waiting writer's mark would turn
/// readers away that long).
#[test]
fn a_failed_try_write_leaves_no_mark() {
    let cluster = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| crate::harness::client(cluster.urls()))
        .collect();
    let rw = |c: usize| clients[c].rw_lock("t:rw-mark");
    let read = rw(0).read(TTL).expect("A reads");
    assert!(rw(1).try_write(TTL).unwrap().is_none(), "a reader holds");
    read.release().unwrap();
    for node in &cluster.nodes {
        assert_eq!(
            node.get_now("redlock-rw:t:rw-mark#wait"),
            None,
            "a mark left behind"
        );
    }
    assert!(
        rw(2).try_read(TTL).unwrap().is_some(),
        "a reader in a third client gets in at once"
    );
}
