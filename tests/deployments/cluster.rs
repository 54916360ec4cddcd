//! A Redis Cluster as one node (`redis+cluster://`), against real
//! clusters the tests create (`redis-server --cluster-enabled yes`,
//! `redis-cli --cluster create`): locks on every master, `lock_all` over
//! many hash slots, a slot migrated while its lock is held, the other
//! primitives and a wake-up through the cluster, and a failover inside it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlock_sync::FailureKind;

use crate::harness::pubsub::{WakeRecorder, wake_listeners};
use crate::harness::redis_cluster::{RedisCluster, query};
use crate::harness::{Cluster, builder, eventually};
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(30);

/// A client over the cluster only: its vote is the whole answer.
fn over(cluster: &RedisCluster) -> Redlock {
    builder([cluster.url(3)])
        .retry_count(0)
        .build()
        .expect("client")
}

/// `count` names whose hash slots differ, from `prefix`.
fn names_in_distinct_slots(cluster: &RedisCluster, prefix: &str, count: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|name| seen.insert(cluster.slot(name)))
        .take(count)
        .collect()
}

/// Two standalone nodes, and the node URLs of a deployment of them beside
/// `cluster` (named by `seeds` seeds).
fn beside(cluster: &RedisCluster, seeds: usize) -> (Cluster, Vec<String>) {
    let standalone = Cluster::start(2);
    let mut urls = vec![cluster.url(seeds)];
    urls.extend(standalone.urls());
    (standalone, urls)
}

#[test]
fn locks_on_every_master_need_and_get_the_clusters_vote() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let (mut standalone, urls) = beside(&cluster, 1);
    let client = builder(&urls).retry_count(0).build().expect("client");
    let other = builder(&urls).retry_count(0).build().expect("client");
    // One standalone node paused: no majority without the cluster's vote.
    standalone.nodes[0].pause();
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    let mut guards = Vec::new();
    for i in 0..200 {
        let name = format!("cluster-lock:{i}");
        let guard = client
            .try_lock(&name, TTL)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: refused"));
        assert!(cluster.get_now(&name).is_some(), "{name} is on its master");
        *per_master.entry(cluster.master_of(&name).port).or_default() += 1;
        guards.push(guard);
    }
    assert_eq!(per_master.len(), 3, "names on every master: {per_master:?}");
    for guard in guards.iter().step_by(20) {
        let taken = other.try_lock(guard.resource(), TTL).expect("an answer");
        assert!(taken.is_none(), "{} is held", guard.resource());
    }
    let health = &client.node_health()[0];
    assert_eq!(health.masters().len(), 3, "{health:?}");
    assert!(
        health
            .masters()
            .iter()
            .all(|m| m.is_admitted() && m.is_up())
    );
    for guard in guards {
        guard.release().expect("released");
    }
    eventually("every key is gone", Duration::from_secs(10), || {
        cluster.keys() == 0
    });
    standalone.nodes[0].resume();
}

#[test]
fn lock_all_over_ten_slots_is_all_or_nothing() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let client = over(&cluster);
    let other = over(&cluster);
    let names = names_in_distinct_slots(&cluster, "all", 10);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let guard = client
        .try_lock_all(&refs, TTL)
        .expect("an answer")
        .expect("all ten granted");
    for name in &names {
        assert!(cluster.get_now(name).is_some(), "{name} held");
        assert!(other.try_lock(name, TTL).expect("an answer").is_none());
    }
    guard.release().expect("released");
    assert_eq!(cluster.keys(), 0, "all released");
    // One taken by another: none of the ten is granted, nothing is left.
    let taken = other.try_lock(&names[6], TTL).unwrap().expect("free");
    let refused = client.try_lock_all(&refs, TTL).expect("an answer");
    assert!(refused.is_none(), "one of them is held");
    // What the other slots granted, the failed round's clean-up releases
    // (queued, not awaited).
    eventually(
        "only the other's key is left",
        Duration::from_secs(10),
        || cluster.keys() == 1,
    );
    taken.release().unwrap();
    let fenced = builder([cluster.url(2)])
        .retry_count(0)
        .fencing(true)
        .build()
        .unwrap();
    let guard = fenced
        .try_lock_all(&refs, TTL)
        .unwrap()
        .expect("granted, fenced");
    assert!(guard.fencing_token().is_some());
    guard.release().unwrap();
}

#[test]
fn a_slot_migrated_while_its_lock_is_held_keeps_extend_and_release_working() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let client = over(&cluster);
    let other = over(&cluster);
    let name = "migrating:1";
    let mut guard = client.try_lock(name, TTL).unwrap().expect("granted");
    let slot = cluster.slot(name).to_string();
    let from = cluster.master_of(name);
    let to = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != from.port)
        .expect("another master");
    let (from_id, to_id) = (RedisCluster::id(from), RedisCluster::id(to));
    let _: () = query(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    let _: () = query(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    // Migrating, the key still on its old master.
    assert!(other.try_lock(name, TTL).unwrap().is_none(), "held");
    guard.extend(TTL).expect("extended on the old master");
    // The key moved, the slot not yet: ASK.
    let keys: Vec<String> = query(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    assert!(!keys.is_empty());
    let mut migrate = vec!["MIGRATE", "127.0.0.1"];
    let port = to.port.to_string();
    migrate.extend([port.as_str(), "", "0", "5000", "KEYS"]);
    migrate.extend(keys.iter().map(String::as_str));
    let _: String = query(from, &migrate);
    assert!(RedisCluster::exists_asking(to, name), "moved");
    assert!(other.try_lock(name, TTL).unwrap().is_none(), "held, asked");
    guard
        .extend(TTL)
        .expect("extended on the new master, asked");
    // The slot moved: MOVED.
    for node in &cluster.nodes {
        let _: () = query(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
    cluster.settled();
    assert!(other.try_lock(name, TTL).unwrap().is_none(), "held, moved");
    guard.extend(TTL).expect("extended after the move");
    guard.release().expect("released on the new master");
    assert_eq!(to.get_now(name), None);
    let again = other.try_lock(name, TTL).unwrap().expect("free again");
    again.release().unwrap();
}

#[test]
fn semaphores_rw_locks_elections_and_wake_ups_go_through_a_cluster() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let client = over(&cluster);
    let other = over(&cluster);
    // Semaphore.
    let sem = client.semaphore("jobs", 2);
    let a = sem.try_lock(TTL).unwrap().expect("permit 1");
    let b = other
        .semaphore("jobs", 2)
        .try_lock(TTL)
        .unwrap()
        .expect("permit 2");
    assert!(sem.try_lock(TTL).unwrap().is_none(), "no permit left");
    b.release().unwrap();
    let c = sem.try_lock(TTL).unwrap().expect("a permit again");
    drop((a, c));
    // Reader-writer lock.
    let rw = client.rw_lock("table");
    let r1 = rw.try_read(TTL).unwrap().expect("reader 1");
    let r2 = other
        .rw_lock("table")
        .try_read(TTL)
        .unwrap()
        .expect("reader 2");
    assert!(rw.try_write(TTL).unwrap().is_none(), "readers hold it");
    r1.release().unwrap();
    r2.release().unwrap();
    let w = rw.try_write(TTL).unwrap().expect("writer");
    assert!(other.rw_lock("table").try_read(TTL).unwrap().is_none());
    w.release().unwrap();
    // Election, seen by another client.
    let leadership = client
        .election("chief")
        .campaign("node-a", TTL)
        .try_win()
        .unwrap()
        .expect("leader");
    let leader = other.election("chief").leader().unwrap().expect("a leader");
    assert_eq!(leader.value(), "node-a");
    assert_eq!(leader.term(), leadership.term());
    leadership.resign().unwrap();
    // Keep-alive: a lock with a short TTL outlives it many times over.
    let short = Duration::from_secs(1);
    let mut kept = client.try_lock("kept", short).unwrap().expect("free");
    kept.keep_alive();
    let master = cluster.master_of("kept");
    let started = Instant::now();
    while started.elapsed() < short * 3 {
        assert!(kept.is_valid(), "kept valid");
        assert!(
            master.pttl_now("kept") > 0,
            "the key is still on its master"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    kept.release().unwrap();
    assert_eq!(master.get_now("kept"), None);
    // A waiter in another client is woken by the release.
    let held = client.try_lock("woken", TTL).unwrap().expect("free");
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let guard = other.lock_for("woken", TTL, Duration::from_secs(20));
        (guard.map(|g| g.resource().to_owned()), started.elapsed())
    });
    // A member that does not serve the name hears its wake-ups too: the
    // cluster's pub/sub reaches every member.
    let gate = cluster.master_of("woken").port;
    let elsewhere = cluster.nodes.iter().find(|n| n.port != gate).unwrap();
    let recorder = WakeRecorder::start(elsewhere);
    eventually(
        "the waiter queued and listens",
        Duration::from_secs(10),
        || {
            query::<i64>(
                cluster.master_of("woken"),
                &["EXISTS", "redlock-queue:{woken}"],
            ) == 1
                && cluster.nodes.iter().map(wake_listeners).sum::<usize>() == 1
        },
    );
    held.release().unwrap();
    let (got, _) = waiter.join().unwrap();
    assert_eq!(got.expect("woken and granted"), "woken");
    eventually(
        "the wake-up reached another member",
        Duration::from_secs(10),
        || !recorder.woken().is_empty(),
    );
}

#[test]
fn a_name_a_cluster_cannot_keep_in_one_slot_is_refused() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let client = over(&cluster);
    let err = client.try_lock("a}b", TTL).expect_err("refused");
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
    let err = client.election("x}y").leader().expect_err("refused");
    assert!(err.to_string().contains("hash tag"), "{err}");
    let err = client
        .semaphore("x}y", 2)
        .try_lock(TTL)
        .expect_err("refused");
    assert!(err.to_string().contains("hash tag"), "{err}");
    let tagged = client
        .try_lock("{user7}:a}b", TTL)
        .unwrap()
        .expect("a tag keeps it");
    assert_eq!(cluster.slot("{user7}:a}b"), cluster.slot("user7"));
    tagged.release().unwrap();
}

/// The cluster's vote decides: with one standalone node paused, the lock
/// is extended (and a contender refused) through the replica promoted
/// after its master is killed. `WAIT` makes sure the key reached the
/// replica first (without it, a failover may lose the key: Redis
/// replicates asynchronously).
#[test]
fn a_master_failed_over_keeps_the_clusters_vote() {
    let cluster = RedisCluster::start(3, 1, 1000);
    let (mut standalone, urls) = beside(&cluster, 3);
    let client = builder(&urls).retry_count(0).build().expect("client");
    let other = builder(&urls).retry_count(0).build().expect("client");
    let name = "failover:1";
    let mut guard = client.try_lock(name, TTL).unwrap().expect("granted");
    let slot = cluster.slot(name);
    let port = cluster.master_of_slot(slot).port;
    // The lock returned at a majority, perhaps the two standalone nodes':
    // await the key on its master, then a write of our own behind it in
    // the replication stream, and `WAIT` for that write (a `WAIT` on a
    // connection that wrote nothing returns at once).
    eventually("the key on its master", Duration::from_secs(10), || {
        cluster.get_now(name).is_some()
    });
    let ((), replicated): ((), i64) = redis::pipe()
        .cmd("SET")
        .arg(format!("{{{name}}}:behind"))
        .arg(1)
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut cluster.master_of_slot(slot).conn())
        .expect("SET and WAIT");
    assert_eq!(replicated, 1, "the key reached the replica");
    let mut cluster = cluster;
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == port)
        .expect("its master")
        .kill();
    eventually("a replica took over", Duration::from_secs(30), || {
        cluster.serving(slot).is_some_and(|m| m.port != port)
    });
    cluster.settled();
    assert!(
        cluster.get_now(name).is_some(),
        "the promoted replica has the key"
    );
    standalone.nodes[1].pause();
    // Node 0 and the cluster are the majority now: the cluster decides.
    assert!(
        other.try_lock(name, TTL).unwrap().is_none(),
        "the promoted replica holds the key: refused"
    );
    guard
        .extend(TTL)
        .expect("extended through the promoted replica");
    let new_master = cluster.master_of_slot(slot).port;
    assert!(
        client.node_health()[0]
            .masters()
            .iter()
            .any(|m| m.address().ends_with(&format!(":{new_master}"))),
        "the new master is in the map"
    );
    standalone.nodes[1].resume();
    guard.release().unwrap();
}

/// `count` names that `master` serves.
fn names_on(cluster: &RedisCluster, master: u16, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|name| cluster.master_of(name).port == master)
        .take(count)
        .collect()
}

/// Locks on `names` through `client` for `run` (each released): how many
/// failed, and whether the last ten succeeded.
fn keep_locking(client: &Redlock, names: &[String], run: Duration) -> (usize, bool) {
    let started = Instant::now();
    let mut outcomes = Vec::new();
    while started.elapsed() < run {
        for name in names {
            let ok = match client.try_lock(name, TTL) {
                Ok(Some(guard)) => guard.release().is_ok(),
                Ok(None) => false,
                Err(err) => {
                    println!("{name}: {err}");
                    false
                }
            };
            outcomes.push(ok);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let failed = outcomes.iter().filter(|ok| !**ok).count();
    let last_ok = outcomes.iter().rev().take(10).all(|ok| *ok);
    (failed, last_ok)
}

/// A reshard that moves a master's first slot away (where its marker is
/// kept) and a manual failover leave every master counting: the marker
/// follows the map, and the next examination (every 5 s) finds it.
#[test]
fn a_reshard_and_a_manual_failover_keep_every_master_counting() {
    let cluster = RedisCluster::start(3, 1, 1000);
    let client = over(&cluster);
    let first = cluster.master_of_slot(0);
    let (port, first_id) = (first.port, RedisCluster::id(first));
    let to = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != port)
        .expect("another master");
    let to_id = RedisCluster::id(to);
    let names = names_on(&cluster, port, "reshard", 5);
    assert_eq!(keep_locking(&client, &names, Duration::ZERO).0, 0);
    // Slot 0 (empty: nothing locked there) moves to another master.
    let _: () = query(to, &["CLUSTER", "SETSLOT", "0", "IMPORTING", &first_id]);
    let _: () = query(first, &["CLUSTER", "SETSLOT", "0", "MIGRATING", &to_id]);
    for node in cluster.masters() {
        let _: () = query(node, &["CLUSTER", "SETSLOT", "0", "NODE", &to_id]);
    }
    cluster.settled();
    let (failed, last_ok) = keep_locking(&client, &names, Duration::from_secs(7));
    assert!(failed <= 2 && last_ok, "after the reshard: {failed} failed");
    assert!(
        client.node_health()[0]
            .masters()
            .iter()
            .all(|m| m.is_admitted())
    );
    // A manual failover of the same master.
    let replica = cluster
        .nodes
        .iter()
        .find(|n| {
            query::<String>(n, &["INFO", "replication"]).contains(&format!("master_port:{port}"))
        })
        .expect("its replica");
    let _: () = query(replica, &["CLUSTER", "FAILOVER"]);
    let replica_port = replica.port;
    eventually("the replica took over", Duration::from_secs(30), || {
        cluster.master_of(&names[0]).port == replica_port
    });
    cluster.settled();
    let (failed, last_ok) = keep_locking(&client, &names, Duration::from_secs(7));
    assert!(
        failed <= 1 && last_ok,
        "after the failover: {failed} failed"
    );
    assert!(
        client.node_health()[0]
            .masters()
            .iter()
            .all(|m| m.is_admitted())
    );
}

/// A master that stops answering (SIGSTOP) while its slots are busy keeps
/// the other masters' slots working through the same cluster node.
#[test]
fn a_silent_master_does_not_hold_up_the_others() {
    let mut cluster = RedisCluster::start(3, 0, 60_000);
    let client = over(&cluster);
    let silent = cluster.master_of_slot(0).port;
    let others: Vec<u16> = cluster
        .masters()
        .iter()
        .map(|m| m.port)
        .filter(|p| *p != silent)
        .collect();
    let stuck = names_on(&cluster, silent, "stuck", 3);
    let healthy: Vec<String> = others
        .iter()
        .flat_map(|&p| names_on(&cluster, p, "healthy", 3))
        .collect();
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == silent)
        .expect("the master of slot 0")
        .pause();
    let until = Instant::now() + Duration::from_secs(4);
    let (failed, total, left_alone) = std::thread::scope(|s| {
        // Requests for the silent master's slots all along.
        let stuck = s.spawn(|| {
            let mut left_alone = false;
            while Instant::now() < until {
                for name in &stuck {
                    if let Err(err) = client.try_lock(name, TTL) {
                        left_alone |= err.to_string().contains("did not answer in time");
                    }
                }
            }
            left_alone
        });
        let mut failed = 0;
        let mut total = 0;
        while Instant::now() < until {
            for name in &healthy {
                total += 1;
                let ok = match client.try_lock(name, TTL) {
                    Ok(Some(guard)) => guard.release().is_ok(),
                    _ => false,
                };
                failed += usize::from(!ok);
            }
        }
        (failed, total, stuck.join().unwrap())
    });
    println!("healthy masters' locks beside a silent one: {failed} of {total} failed");
    assert!(
        left_alone,
        "the silent master's requests failed at once while left alone"
    );
    assert!(
        failed * 20 < total,
        "locks on the healthy masters succeed: {failed} of {total} failed"
    );
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == silent)
        .unwrap()
        .resume();
}

/// Two clients (four workers) contend for one resource on a mixed
/// deployment — a cluster with a replica per master beside two standalone
/// nodes — while the master serving the resource is killed and its
/// replica promoted, then a standalone node is paused: one node's fault at
/// a time, as Redlock assumes. A witness outside the lock nodes counts
/// overlaps and lost updates.
#[test]
fn a_failover_under_contention_lets_no_two_holders_in() {
    const RESOURCE: &str = "cluster-chaos:shared";
    let ttl = Duration::from_secs(1);
    let mut cluster = RedisCluster::start(3, 1, 1000);
    let (mut standalone, urls) = beside(&cluster, 3);
    let clients: Vec<Redlock> = (0..2)
        .map(|_| {
            builder(&urls)
                .connect_timeout(Duration::from_millis(200))
                .build()
                .expect("client")
        })
        .collect();
    let witness = crate::harness::Node::start(&crate::harness::NodeOptions::default());
    let progress = std::sync::atomic::AtomicUsize::new(0);
    // The workers run until every fault has come and gone.
    let going = std::sync::atomic::AtomicBool::new(true);
    let total = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let (client, witness, progress) = (&clients[i % 2], witness.url(), &progress);
                let going = || going.load(std::sync::atomic::Ordering::Relaxed);
                s.spawn(move || {
                    crate::harness::contend_while(client, &witness, RESOURCE, ttl, going, progress)
                })
            })
            .collect();
        let acquired = |n: usize| {
            let progress = &progress;
            eventually("acquisitions go on", Duration::from_secs(10), move || {
                progress.load(std::sync::atomic::Ordering::Relaxed) >= n
            });
        };
        acquired(20);
        let slot = cluster.slot(RESOURCE);
        let port = cluster.master_of_slot(slot).port;
        cluster
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("its master")
            .kill();
        eventually("a replica took over", Duration::from_secs(30), || {
            cluster.serving(slot).is_some_and(|m| m.port != port)
        });
        let after_failover = progress.load(std::sync::atomic::Ordering::Relaxed);
        acquired(after_failover + 20);
        standalone.nodes[0].pause();
        let paused = progress.load(std::sync::atomic::Ordering::Relaxed);
        acquired(paused + 20);
        standalone.nodes[0].resume();
        going.store(false, std::sync::atomic::Ordering::Relaxed);
        let mut total = crate::harness::Contention::default();
        for w in workers {
            total += w.join().unwrap();
        }
        total
    });
    println!(
        "cluster chaos: {} acquisitions, overlaps {}, overran {}",
        total.acquisitions, total.overlaps, total.overran
    );
    total.assert_exclusive(&witness, RESOURCE);
}

/// With the restart quarantine on (5 s), a replica promoted in a failover
/// does not count until the period has passed (it may have missed
/// writes), while the other masters count.
#[test]
fn a_promoted_replica_waits_the_restart_quarantine() {
    let quarantine = Duration::from_secs(5);
    let mut cluster = RedisCluster::start(3, 1, 1000);
    let client = builder([cluster.url(3)])
        .retry_count(0)
        .restart_quarantine(quarantine)
        .build()
        .expect("client");
    // New processes: admitted once up for the period.
    let failed_over = "quarantine:a";
    let slot = cluster.slot(failed_over);
    let port = cluster.master_of_slot(slot).port;
    let elsewhere = (0..)
        .map(|i| format!("quarantine:b{i}"))
        .find(|name| cluster.master_of(name).port != port)
        .unwrap();
    eventually("every master counts", Duration::from_secs(20), || {
        client
            .try_lock(failed_over, TTL)
            .ok()
            .flatten()
            .is_some_and(|g| g.release().is_ok())
    });
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == port)
        .unwrap()
        .kill();
    eventually("a replica took over", Duration::from_secs(30), || {
        cluster.serving(slot).is_some_and(|m| m.port != port)
    });
    let promoted = cluster.master_of_slot(slot).port;
    eventually(
        "the promoted replica is refused as quarantined",
        Duration::from_secs(10),
        || {
            let refused = match client.try_lock(failed_over, TTL) {
                Err(err) => {
                    err.to_string().contains("quarantine")
                        || err.to_string().contains("another process")
                }
                Ok(_) => false,
            };
            refused
                && client.node_health()[0].masters().iter().any(|m| {
                    m.address().ends_with(&format!(":{promoted}"))
                        && m.refusal()
                            .is_some_and(|r| r.kind() == FailureKind::Quarantined)
                })
        },
    );
    // The other masters count meanwhile (once every member says the
    // cluster is up again: until then they answer CLUSTERDOWN).
    cluster.settled();
    eventually(
        "another master's slot is granted",
        Duration::from_secs(10),
        || {
            client
                .try_lock(&elsewhere, TTL)
                .ok()
                .flatten()
                .is_some_and(|g| g.release().is_ok())
        },
    );
    assert!(
        client.node_health()[0].masters().iter().any(|m| {
            m.address().ends_with(&format!(":{promoted}"))
                && m.refusal()
                    .is_some_and(|r| r.kind() == FailureKind::Quarantined)
        }),
        "the promoted replica is still quarantined meanwhile"
    );
    eventually(
        "it counts after the period",
        Duration::from_secs(20),
        || {
            client
                .try_lock(failed_over, TTL)
                .ok()
                .flatten()
                .is_some_and(|g| g.release().is_ok())
        },
    );
}

/// An operator's view through a cluster: the semaphore's slots, the lock
/// and its release reach the masters that serve their keys, and the
/// cluster's answer counts as one node's.
#[test]
fn an_operator_sees_and_frees_what_a_cluster_holds() {
    let cluster = RedisCluster::start(3, 0, 5000);
    let client = builder([cluster.url(3)])
        .fencing(true)
        .build()
        .expect("client");
    let operator = over(&cluster);
    let guard = client.lock("cluster-op:lock", TTL).unwrap();
    let holding = operator.inspect("cluster-op:lock").unwrap().expect("held");
    assert_eq!(holding.fencing_token(), guard.fencing_token());
    let pool = client.semaphore("cluster-op:pool", 4);
    let _permits = [pool.lock(TTL).unwrap(), pool.lock(TTL).unwrap()];
    assert_eq!(
        operator
            .semaphore("cluster-op:pool", 4)
            .inspect()
            .unwrap()
            .len(),
        2
    );
    assert!(operator.force_release("cluster-op:lock").unwrap());
    assert_eq!(operator.inspect("cluster-op:lock").unwrap(), None);
    let key: Option<String> = query(
        cluster.master_of_slot(cluster.slot("cluster-op:lock")),
        &["GET", "cluster-op:lock"],
    );
    assert_eq!(key, None, "gone from the master that serves it");
}
