//! No key the crate writes lives forever. After a workload of
//! every primitive — including holders that vanish without releasing (a
//! forgotten lock, a forgotten permit, a crashed reader, a leader that
//! never resigns) — every key on every node has an expiry.

use std::time::Duration;

use crate::harness::Cluster;

const TTL: Duration = Duration::from_secs(30);

#[test]
fn after_every_primitive_no_key_is_without_an_expiry() {
    let cluster = Cluster::start(3);
    let plain = crate::harness::client(cluster.urls());
    let fenced = crate::harness::builder(cluster.urls())
        .fencing(true)
        .build()
        .unwrap();
    for (i, client) in [&plain, &fenced].into_iter().enumerate() {
        client.lock("e:lock", TTL).unwrap().release().unwrap();
        std::mem::forget(client.lock(&format!("e:forgotten{i}"), TTL).unwrap());
        client
            .lock_all(&["e:a", "e:b"], TTL)
            .unwrap()
            .release()
            .unwrap();
    }
    // A waiter queued behind a holder, in another client.
    let held = plain.lock("e:queued", Duration::from_millis(300)).unwrap();
    let waited = fenced
        .lock_for("e:queued", TTL, Duration::from_secs(10))
        .unwrap();
    drop(held);
    waited.release().unwrap();
    let sem = plain.semaphore("e:sem", 2);
    sem.lock(TTL).unwrap().release().unwrap();
    std::mem::forget(sem.lock(TTL).unwrap());
    let rw = plain.rw_lock("e:rw");
    std::mem::forget(rw.read(TTL).unwrap()); // a reader that crashed
    assert!(fenced.rw_lock("e:rw").try_write(TTL).unwrap().is_none());
    let election = plain.election("e:elect");
    let mut leader = election.campaign("first", TTL).win().unwrap();
    leader.proclaim("second").unwrap();
    assert_eq!(
        fenced
            .election("e:elect")
            .leader()
            .unwrap()
            .map(|l| l.value().to_owned()),
        Some("second".to_owned())
    );
    std::mem::forget(leader); // never resigns
    let mut forever = Vec::new();
    for node in &cluster.nodes {
        let mut conn = node.conn();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert!(!keys.is_empty(), "the workload wrote keys");
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
            if pttl == -1 {
                forever.push(format!("{} {key}", node.address()));
            }
        }
    }
    assert!(forever.is_empty(), "keys without an expiry: {forever:#?}");
}

/// The proclamation lives as long as the lock that backs it: renewed with
/// the leader's lock, it outlives the TTL it was proclaimed under.
#[test]
fn a_kept_leaders_proclamation_outlives_its_ttl() {
    let cluster = Cluster::start(3);
    let leader_client = crate::harness::client(cluster.urls());
    let observer = crate::harness::client(cluster.urls());
    let ttl = Duration::from_secs(1);
    let leader = leader_client
        .election("e:kept")
        .campaign("v1", ttl)
        .win()
        .unwrap();
    // `win` returns at a majority: the last node's proclamation may still
    // be on its way.
    crate::harness::settles("the proclamation on every node", || {
        cluster
            .nodes
            .iter()
            .all(|n| n.pttl_now("redlock-elect:e:kept#v") > 0)
    });
    for node in &cluster.nodes {
        let pttl = node.pttl_now("redlock-elect:e:kept#v");
        assert!(pttl > 0 && pttl <= 1000, "expires with the lock: {pttl}");
    }
    let renewed = |node: &crate::harness::Node| node.pttl_now("redlock-elect:e:kept#l") > 0;
    let first = leader.valid_until();
    crate::harness::settles("the lock renewed past its first TTL", || {
        std::time::Instant::now() > first + ttl && cluster.nodes.iter().all(renewed)
    });
    let seen = observer.election("e:kept").leader().unwrap();
    assert_eq!(seen.map(|l| l.value().to_owned()), Some("v1".to_owned()));
}
