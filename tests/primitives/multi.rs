//! Several resources locked at once, all or nothing, against real nodes:
//! keys on every node, interop with single locks and with another Redlock
//! client, deadlock freedom under opposite orders, bad input.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, NodeOptions, settles, test_client};
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn client(cluster: &Cluster) -> Redlock {
    test_client(cluster.urls(), 2, Some(Duration::from_secs(1)))
}

/// Another Redlock client, as the algorithm describes one (and as the
/// other crates implement it): `SET key token NX PX ttl` on every node,
/// held with a majority; released with a compare-and-delete.
struct Peer<'a> {
    cluster: &'a Cluster,
    token: &'static str,
}

impl Peer<'_> {
    /// Whether a majority of the nodes set `key` for it (the rest undone).
    fn lock(&self, key: &str) -> bool {
        let set = self
            .cluster
            .nodes
            .iter()
            .filter(|node| {
                let reply: Option<String> = node.query(
                    redis::cmd("SET")
                        .arg(key)
                        .arg(self.token)
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000),
                );
                reply.is_some()
            })
            .count();
        let held = set > self.cluster.nodes.len() / 2;
        if !held {
            self.unlock(key);
        }
        held
    }

    fn unlock(&self, key: &str) {
        for node in &self.cluster.nodes {
            let _: i64 = node.query(
                redis::cmd("EVAL")
                    .arg(
                        "if redis.call('get', KEYS[1]) == ARGV[1] then \
                         return redis.call('del', KEYS[1]) else return 0 end",
                    )
                    .arg(1)
                    .arg(key)
                    .arg(self.token),
            );
        }
    }
}

#[test]
fn lock_all_sets_every_key_with_one_token_and_release_removes_them_all() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let keys = ["multi:a", "multi:b", "multi:c"];
    let mut guard = redlock.lock_all(&keys, TTL).unwrap();
    assert_eq!(guard.resources().len(), 3);
    assert_eq!(guard.resources().collect::<Vec<_>>(), keys);
    assert_eq!(guard.resource(), "multi:a");
    // lock_all returned at a majority: read the token wherever it landed.
    let mut token = String::new();
    settles("the token on some node", || {
        token = cluster
            .values_now("multi:a")
            .into_iter()
            .flatten()
            .next()
            .unwrap_or_default();
        !token.is_empty()
    });
    settles("every key on every node with one token", || {
        keys.iter().all(|k| cluster.holders_now(k, &token) == 5)
    });
    guard.extend(Duration::from_secs(30)).unwrap();
    settles("every key extended on every node", || {
        cluster
            .nodes
            .iter()
            .all(|n| keys.iter().all(|k| n.pttl_now(k) > 20_000))
    });
    guard.keep_alive();
    guard.ensure_valid().unwrap();
    guard.release().unwrap();
    settles("every key gone", || {
        keys.iter().all(|k| cluster.count_key_now(k) == 0)
    });
}

#[test]
fn a_multi_lock_and_single_locks_exclude_each_other() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    // Multi first: a single lock on any of its keys is refused.
    let both = redlock.lock_all(&["ex:a", "ex:b"], TTL).unwrap();
    assert!(redlock.try_lock("ex:b", TTL).unwrap().is_none());
    assert!(redlock.try_lock("ex:a", TTL).unwrap().is_none());
    // Another Redlock client sees the keys as held too.
    let peer = Peer {
        cluster: &cluster,
        token: "peer-token",
    };
    assert!(!peer.lock("ex:a"));
    drop(both);
    // Single first (ours, then the other client's): the multi-lock is
    // refused and takes none of its other keys.
    let single = redlock.lock("ex:b", TTL).unwrap();
    assert!(
        redlock
            .try_lock_all(&["ex:a", "ex:b"], TTL)
            .unwrap()
            .is_none()
    );
    settles("no key of the failed multi-lock left", || {
        cluster.count_key_now("ex:a") == 0
    });
    drop(single);
    assert!(peer.lock("ex:b"), "peer locks");
    assert!(
        redlock
            .try_lock_all(&["ex:a", "ex:b"], TTL)
            .unwrap()
            .is_none()
    );
    peer.unlock("ex:b");
    settles("peer released", || cluster.count_key_now("ex:b") == 0);
    assert!(
        redlock
            .try_lock_all(&["ex:a", "ex:b"], TTL)
            .unwrap()
            .is_some()
    );
}

/// Two clients lock `[a, b]` and `[b, a]` in loops: both make progress and
/// nobody is ever inside with another (a witness counts who is).
#[test]
fn opposite_orders_never_deadlock_and_never_overlap() {
    let cluster = Cluster::start(3);
    let witness = Node::start(&NodeOptions::default());
    let clients = [client(&cluster), client(&cluster)];
    let run = Duration::from_secs(2);
    let until = Instant::now() + run;
    let overlap = AtomicBool::new(false);
    let counts: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let (redlock, overlap) = (&clients[i % 2], &overlap);
                let order = if i % 2 == 0 {
                    ["dl:a", "dl:b"]
                } else {
                    ["dl:b", "dl:a"]
                };
                let mut conn = witness.conn();
                s.spawn(move || {
                    let mut acquired = 0u64;
                    while Instant::now() < until {
                        // Busy after the client's retries: try again.
                        let Ok(guard) = redlock.lock_all(&order, TTL) else {
                            continue;
                        };
                        for key in order {
                            let inside: i64 = redis::cmd("INCR").arg(key).query(&mut conn).unwrap();
                            if inside != 1 && guard.is_valid() {
                                overlap.store(true, Ordering::Relaxed);
                            }
                        }
                        for key in order {
                            let _: i64 = redis::cmd("DECR").arg(key).query(&mut conn).unwrap();
                        }
                        acquired += 1;
                        drop(guard);
                    }
                    acquired
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    println!("multi: acquisitions per worker {counts:?} in {run:?}");
    assert!(
        !overlap.load(Ordering::Relaxed),
        "two holders inside at once"
    );
    assert!(
        counts.iter().all(|c| *c > 0),
        "a worker starved: {counts:?}"
    );
    settles("nothing left", || {
        cluster.count_key_now("dl:a") == 0 && cluster.count_key_now("dl:b") == 0
    });
}

#[test]
fn bad_resource_lists_are_config_errors_before_touching_the_nodes() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let many: Vec<String> = (0..129).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases: [(&[&str], &str); 5] = [
        (&[], "no resources given"),
        (&[""], "empty"),
        (&["a", ""], "resource #1 has an empty name"),
        (&["a", "b", "a"], "\"a\" is listed twice"),
        (&many, "at most 128"),
    ];
    let sent = |cluster: &Cluster| -> Vec<u64> {
        cluster
            .nodes
            .iter()
            .map(|n| n.calls("set") + n.scripts_run())
            .collect()
    };
    let before = sent(&cluster);
    for (list, says) in cases {
        match redlock.try_lock_all(list, TTL) {
            Err(Error::Config { reason }) => assert!(reason.contains(says), "{reason}"),
            other => panic!("{list:?}: expected Config, got {other:?}"),
        }
    }
    assert_eq!(sent(&cluster), before, "nothing sent to the nodes");
    let most: Vec<&str> = many[..128].to_vec();
    let guard = redlock.lock_all(&most, TTL).unwrap();
    assert_eq!(guard.resources().len(), 128);
}

/// The scripts themselves, on real nodes: a key taken over on a majority
/// makes extend and release report the lock lost without touching the other
/// holder's key or lengthening ours; the acquire script sets nothing on a
/// node where any key is held.
#[test]
fn the_scripts_act_on_every_key_or_on_none_on_real_nodes() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let mut guard = redlock.lock_all(&["s:a", "s:b"], TTL).unwrap();
    settles("both keys on every node", || {
        cluster.count_key_now("s:a") == 5 && cluster.count_key_now("s:b") == 5
    });
    // "b" expired and someone else took it on 3 of 5 nodes.
    for node in &cluster.nodes[..3] {
        let _: () = redis::cmd("SET")
            .arg("s:b")
            .arg("other")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.conn())
            .unwrap();
    }
    let err = guard.extend(Duration::from_secs(50)).unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    for node in &cluster.nodes[..3] {
        assert!(node.pttl_now("s:a") <= 10_000, "our key was lengthened");
        assert_eq!(node.get_now("s:b").as_deref(), Some("other"));
        assert!(node.pttl_now("s:b") <= 60_000);
    }
    let err = guard.release().unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    // The release returned once a majority refused: await the deletes.
    // Within 5 s, less than the key's 10 s TTL: deleted, not expired.
    crate::harness::eventually("our own key deleted", Duration::from_secs(5), || {
        cluster.nodes[..3]
            .iter()
            .all(|n| n.get_now("s:a").is_none())
    });
    for node in &cluster.nodes[..3] {
        assert_eq!(
            node.get_now("s:b").as_deref(),
            Some("other"),
            "released another's key"
        );
    }
    // Acquire: with "b" held on 3 nodes the round fails, and neither those
    // nodes (all or nothing) nor the others (clean-up) keep "a".
    // (Counted as SET calls: the clean-up would hide a key set and deleted.)
    let sets: Vec<u64> = cluster.nodes[..3].iter().map(|n| n.calls("set")).collect();
    assert!(
        redlock
            .try_lock_all(&["s:a", "s:b"], TTL)
            .unwrap()
            .is_none()
    );
    let after: Vec<u64> = cluster.nodes[..3].iter().map(|n| n.calls("set")).collect();
    assert_eq!(sets, after, "set a key although another was held");
    cluster.await_gone("s:a");
}
