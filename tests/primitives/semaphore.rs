//! Semaphores on real nodes: never more holders than permits, even for
//! clients that each reach a different majority (where per-node counting
//! admits one more), under contention, after a crash, and waiters woken by
//! a release.

#[cfg(feature = "metrics")]
use crate::recorder;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::pubsub::{self, publishes};
use crate::harness::{BlackHole, Cluster, Node, NodeOptions, settles, test_client};
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(10);
/// A crashed holder's TTL; still held [`HELD_MARGIN`] before it ends, free
/// within [`FREED_WITHIN`] after it.
const FORGOTTEN: Duration = Duration::from_secs(3);
const HELD_MARGIN: Duration = Duration::from_secs(1);
const FREED_WITHIN: Duration = Duration::from_secs(3);

/// A client that reaches only the nodes in `reach`; the others are black
/// holes (they take the connection and never answer).
fn partitioned(cluster: &Cluster, reach: &[usize], holes: &mut Vec<BlackHole>) -> Redlock {
    let urls = (0..cluster.nodes.len()).map(|i| {
        if reach.contains(&i) {
            cluster.nodes[i].url()
        } else {
            holes.push(BlackHole::new());
            holes.last().map(BlackHole::url).unwrap_or_default()
        }
    });
    test_client(urls, 0, Some(Duration::from_millis(100)))
}

fn flush(cluster: &Cluster) {
    for node in &cluster.nodes {
        let _: () = redis::cmd("FLUSHALL").query(&mut node.conn()).unwrap();
    }
}

/// The semaphore as peers build it: each node counts holders and admits
/// while below the limit; a majority of admissions wins.
fn per_node_counting(cluster: &Cluster, reach: &[usize], limit: usize, holder: &str) -> bool {
    let script = r#"if redis.call("zcard", KEYS[1]) < tonumber(ARGV[1]) then
        redis.call("zadd", KEYS[1], 0, ARGV[2]) return 1 end return 0"#;
    let admitted = reach
        .iter()
        .filter(|&&i| {
            let yes: i64 = redis::cmd("EVAL")
                .arg(script)
                .arg(1)
                .arg("counting")
                .arg(limit)
                .arg(holder)
                .query(&mut cluster.nodes[i].conn())
                .unwrap();
            yes == 1
        })
        .count();
    admitted > cluster.nodes.len() / 2
}

/// Every order of `items`.
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, *first);
            all.push(tail);
        }
    }
    all
}

#[test]
fn clients_each_reaching_a_different_majority_admit_exactly_the_limit() {
    let cluster = Cluster::start(3);
    let mut holes = Vec::new();
    // Client i cannot reach node i.
    let majorities: Vec<Vec<usize>> = (0..3)
        .map(|cut| (0..3).filter(|&n| n != cut).collect())
        .collect();
    let clients: Vec<Redlock> = majorities
        .iter()
        .map(|reach| partitioned(&cluster, reach, &mut holes))
        .collect();
    for order in permutations(&[0, 1, 2]) {
        flush(&cluster);
        let mut held = Vec::new();
        for &i in &order {
            match clients[i].semaphore("partitioned", 2).try_lock(TTL) {
                Ok(Some(permit)) => held.push(permit),
                Ok(None) | Err(Error::NoQuorum { .. }) => {}
                Err(other) => panic!("client {i}: {other}"),
            }
        }
        assert_eq!(held.len(), 2, "order {order:?}: limit 2");
        drop(held);
        // The same case against per-node counting: one holder too many.
        flush(&cluster);
        let counted = order
            .iter()
            .filter(|&&i| per_node_counting(&cluster, &majorities[i], 2, &format!("c{i}")))
            .count();
        assert_eq!(counted, 3, "order {order:?}: per-node counting admits K+1");
    }
}

#[test]
fn every_majority_of_five_nodes_stays_within_the_limit() {
    let cluster = Cluster::start(5);
    let mut holes = Vec::new();
    let mut majorities = Vec::new();
    for a in 0..5 {
        for b in a + 1..5 {
            for c in b + 1..5 {
                majorities.push(vec![a, b, c]);
            }
        }
    }
    assert_eq!(majorities.len(), 10);
    let clients: Vec<Redlock> = majorities
        .iter()
        .map(|reach| partitioned(&cluster, reach, &mut holes))
        .collect();
    // Majorities where no node is in more than `K` of the first `K + 1`:
    // per-node counting admits all of them.
    let spread = [[0, 1, 2], [2, 3, 4], [0, 1, 3], [0, 2, 4]];
    for limit in 1..=3u32 {
        let k = limit as usize;
        let first: Vec<usize> = spread[..=k]
            .iter()
            .map(|m| majorities.iter().position(|x| x == m).unwrap())
            .collect();
        let adversarial: Vec<usize> = first
            .iter()
            .copied()
            .chain((0..10).filter(|i| !first.contains(i)))
            .collect();
        let orders = [
            (0..10).collect::<Vec<_>>(),
            (0..10).rev().collect(),
            adversarial.clone(),
        ];
        for order in &orders {
            flush(&cluster);
            let mut held = Vec::new();
            for &i in order {
                match clients[i].semaphore("five", limit).try_lock(TTL) {
                    Ok(Some(permit)) => held.push(permit),
                    Ok(None) | Err(Error::NoQuorum { .. }) => {}
                    Err(other) => panic!("client {i}: {other}"),
                }
            }
            assert!(
                (1..=k).contains(&held.len()),
                "limit {limit}, order {order:?}: {} holders",
                held.len()
            );
        }
        // Per-node counting in the adversarial order: one more than the
        // limit, for a limit of 2 or more (a limit of 1 conflicts pairwise,
        // which a majority does check).
        flush(&cluster);
        let counted = adversarial
            .iter()
            .filter(|&&i| per_node_counting(&cluster, &majorities[i], k, &i.to_string()))
            .count();
        println!("limit {limit}: per-node counting admitted {counted}");
        if limit >= 2 {
            assert_eq!(counted, k + 1, "limit {limit}: per-node counting");
        }
    }
}

#[test]
fn contending_threads_never_exceed_the_limit_and_all_progress() {
    let cluster = Cluster::start(3);
    let witness = Node::start(&NodeOptions::default());
    let clients = [
        test_client(cluster.urls(), 0, None),
        test_client(cluster.urls(), 0, None),
    ];
    let until = Instant::now() + Duration::from_secs(4);
    let most_inside = AtomicUsize::new(0);
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let client = &clients[t % 2];
                let most_inside = &most_inside;
                let witness = witness.url();
                s.spawn(move || {
                    let mut conn = redis::Client::open(witness)
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    let jobs = client.semaphore("jobs", 2);
                    let mut entered = 0u64;
                    while Instant::now() < until {
                        let permit = match jobs.acquire(TTL).wait(Duration::from_secs(2)).lock() {
                            Ok(permit) => permit,
                            Err(Error::Busy { .. }) => continue,
                            Err(other) => panic!("thread {t}: {other}"),
                        };
                        let inside: usize =
                            redis::cmd("INCR").arg("inside").query(&mut conn).unwrap();
                        assert!(permit.is_valid());
                        most_inside.fetch_max(inside, Ordering::SeqCst);
                        assert!(inside <= 2, "{inside} holders of 2 permits");
                        // Work long enough for two holders to meet.
                        std::thread::sleep(Duration::from_millis(5));
                        let _: i64 = redis::cmd("DECR").arg("inside").query(&mut conn).unwrap();
                        permit.release().unwrap();
                        entered += 1;
                    }
                    entered
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("acquisitions per thread: {counts:?}");
    assert_eq!(
        most_inside.load(Ordering::SeqCst),
        2,
        "both permits were used at once"
    );
    assert!(
        counts.iter().all(|&c| c > 0),
        "every thread progressed: {counts:?}"
    );
}

/// A permit whose holder crashed (it is never released) still keeps the
/// other client out a second before its TTL runs out, and is free soon
/// after it; a kept-alive permit is still held after several TTLs, and
/// free once released.
#[test]
fn a_forgotten_permit_frees_after_its_ttl_and_a_kept_one_does_not() {
    let cluster = Cluster::start(3);
    let client = test_client(cluster.urls(), 0, None);
    let other = test_client(cluster.urls(), 0, None);
    let one = client.semaphore("crash", 1);
    let theirs = other.semaphore("crash", 1);
    // The nodes set the slot's key after `taken`: it lives until at least
    // `taken + FORGOTTEN`.
    let taken = Instant::now();
    // A holder that crashed: the permit is never released.
    std::mem::forget(one.try_lock(FORGOTTEN).unwrap().expect("free"));
    // Still held a whole second before its TTL: on a loaded 2-core machine
    // the check's round reaches the nodes within milliseconds, far within
    // that margin (a permit that frees early, or never took the TTL it was
    // given, is free here).
    std::thread::sleep((taken + FORGOTTEN - HELD_MARGIN).saturating_duration_since(Instant::now()));
    assert!(
        theirs.try_lock(TTL).unwrap().is_none(),
        "held by the crashed holder a second before its TTL"
    );
    // Free soon after it: a waiter (retrying every 10-20 ms) gets it within
    // a few seconds past the TTL, a bound that allows for a loaded machine
    // and still fails a permit that outlives its TTL by more.
    let freed = theirs
        .acquire(TTL)
        .deadline(taken + FORGOTTEN + FREED_WITHIN)
        .lock()
        .expect("free soon after its TTL");
    drop(freed);
    // Kept alive: still held after several TTLs.
    let ttl = Duration::from_millis(400);
    let kept = one.acquire(ttl).keep_alive().lock().unwrap();
    let started = Instant::now();
    while started.elapsed() < ttl * 4 {
        assert!(theirs.try_lock(TTL).unwrap().is_none(), "kept alive");
        kept.ensure_valid().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    kept.release().unwrap();
    assert!(
        theirs.try_lock(TTL).unwrap().is_some(),
        "free once released"
    );
}

#[test]
fn a_waiter_in_another_client_is_woken_by_the_release_of_any_permit() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls());
    let waiter = crate::harness::builder(cluster.urls())
        .retry_delay(Duration::from_millis(400))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let ours = holder.semaphore("woken", 2);
    let theirs = waiter.semaphore("woken", 2);
    let before = publishes(&cluster);
    let mut waits = Vec::new();
    for round in 0..4 {
        let permits = [ours.lock(TTL).unwrap(), ours.lock(TTL).unwrap()];
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let permit = theirs
                    .acquire(TTL)
                    .wait(Duration::from_secs(30))
                    .lock()
                    .expect("a permit after the release");
                tx.send(Instant::now()).unwrap();
                drop(permit);
            });
            settles("the waiter is queued and listens", || {
                pubsub::waiting(&cluster, "redlock-sem:woken", 1)
            });
            // Either slot's release wakes it: slot 0 in even rounds.
            let [first, second] = permits;
            let (low, high) = if first.resource() < second.resource() {
                (first, second)
            } else {
                (second, first)
            };
            let released = Instant::now();
            if round % 2 == 0 {
                drop(low);
            } else {
                drop(high);
            }
            let acquired = rx.recv_timeout(Duration::from_secs(30)).expect("acquired");
            waits.push(acquired.saturating_duration_since(released));
        });
    }
    println!("release → permit in another client: {waits:?}");
    assert!(
        publishes(&cluster) - before >= 3,
        "the releases woke the waiter"
    );
    // The retry pause alone would be 400 ms.
    let fast = waits
        .iter()
        .filter(|w| **w < Duration::from_millis(150))
        .count();
    assert!(
        fast >= 3,
        "woken by the release, not the retry delay: {waits:?}"
    );
}

/// Both permits come free while two waiters in other clients wait, but
/// only one release is heard: the other permit's key was deleted on the
/// gate node behind its holder's back (it is still held on the other two,
/// so no waiter's refresh round can take it). The first waiter's grant,
/// which leaves a permit free on the gate node, wakes the second — the
/// only thing that wakes it before that permit's holder releases it.
/// (Deleted on every node, the first waiter's refresh round could take
/// that permit before the release; the release then woke the second, and
/// no grant left a permit free: the test failed 1 run in 20.)
#[test]
fn a_grant_that_leaves_a_permit_free_wakes_the_next_waiter() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls());
    let slow = || {
        crate::harness::builder(cluster.urls())
            .retry_delay(Duration::from_secs(30))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap()
    };
    let waiters = [slow(), slow()];
    let ours = holder.semaphore("pass", 2);
    let [kept, released] = [ours.lock(TTL).unwrap(), ours.lock(TTL).unwrap()];
    std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::unbounded();
        for (i, waiter) in waiters.iter().enumerate() {
            let tx = tx.clone();
            s.spawn(move || {
                let permit = waiter
                    .semaphore("pass", 2)
                    .acquire(TTL)
                    .wait(Duration::from_secs(60))
                    .lock();
                tx.send(permit).unwrap();
            });
            settles("the waiter is queued and listens", || {
                pubsub::waiting(&cluster, "redlock-sem:pass", i + 1)
            });
        }
        let mut found = None;
        settles("both waiters in the gate node's queue", || {
            found = cluster.nodes.iter().find_map(|n| {
                let queue: Vec<String> = redis::cmd("ZRANGE")
                    .arg("redlock-queue:redlock-sem:pass")
                    .arg(0)
                    .arg(-1)
                    .query(&mut n.conn())
                    .unwrap();
                (queue.len() == 2).then(|| (n, queue[1].clone()))
            });
            found.is_some()
        });
        let (gate, second) = found.expect("the gate node");
        let wakes = pubsub::WakeRecorder::start(gate);
        let _: () = redis::cmd("DEL")
            .arg(kept.resource())
            .query(&mut gate.conn())
            .unwrap();
        drop(released);
        let first = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("acquired")
            .expect("a permit");
        settles("the first waiter's grant woke the second", || {
            wakes.woken().contains(&second)
        });
        // The second gets in once the other permit is released.
        drop(kept);
        let last = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("acquired")
            .expect("a permit");
        let mut slots = [first.resource(), last.resource()];
        slots.sort_unstable();
        assert_eq!(slots, ["redlock-sem:pass#0", "redlock-sem:pass#1"]);
    });
}

/// With `K - 1` permits held, the nodes' reports lead a round to the free
/// one: about 2 rounds (`1/K` of the time 1) per acquisition, however
/// large `K` is. Counted by the client itself (`redlock_acquire_rounds`,
/// recorded on the calling thread).
#[cfg(feature = "metrics")]
#[test]
fn the_last_free_permit_is_found_in_two_rounds_on_average() {
    let cluster = Cluster::start(3);
    let client = test_client(cluster.urls(), 0, None);
    let jobs = client.semaphore("last", 8);
    let held: Vec<_> = (0..7)
        .map(|_| jobs.try_lock(TTL).unwrap().expect("free"))
        .collect();
    let recorder = recorder::Recorder::default();
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..40 {
            let last = jobs.try_lock(TTL).unwrap().expect("one permit left");
            last.release().unwrap();
        }
    });
    let rounds = recorder.samples("redlock_acquire_rounds");
    assert_eq!(rounds.len(), 40);
    let mean = rounds.iter().sum::<f64>() / rounds.len() as f64;
    println!("rounds to the last free of 8 permits: mean {mean}, {rounds:?}");
    assert!(rounds.iter().all(|r| *r <= 2.0), "{rounds:?}");
    assert!(mean <= 2.0, "mean {mean}");
    drop(held);
}

#[test]
fn bad_arguments_are_config_errors_and_names_never_collide_with_locks() {
    let cluster = Cluster::start(3);
    let client = test_client(cluster.urls(), 0, None);
    for (name, permits, says) in [
        ("", 2, "empty"),
        ("jobs", 0, "0 permits"),
        ("jobs", 65, "at most 64"),
    ] {
        let err = client.semaphore(name, permits).try_lock(TTL).unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("Semaphore::try_lock") && text.contains(says),
            "{text}"
        );
    }
    assert!(matches!(
        client.lock("redlock-sem:jobs#0", TTL),
        Err(Error::Config { .. })
    ));
    // A lock and a semaphore of the same name are different things.
    let lock = client.lock("shared-name", TTL).unwrap();
    let permit = client.semaphore("shared-name", 1).try_lock(TTL).unwrap();
    assert!(permit.is_some(), "the lock does not hold the semaphore");
    drop(lock);
    let s = client.semaphore("shared-name", 1);
    assert_eq!(s.permits(), 1);
    assert!(format!("{s:?}").contains("shared-name"));
}
