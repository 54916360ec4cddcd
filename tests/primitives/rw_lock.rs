//! Reader-writer locks on real nodes: readers share, a writer excludes
//! everyone — also for clients that each reach a different majority —,
//! a waiting writer is not starved by overlapping readers, and a crashed
//! reader frees the lock after its TTL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{BlackHole, Cluster, Node, NodeOptions, test_client};
use redlock_sync::{Error, LockGuard, Redlock, RwLock};

const TTL: Duration = Duration::from_secs(10);
/// A crashed reader's TTL; still held [`HELD_MARGIN`] before it ends, free
/// within [`FREED_WITHIN`] after it.
const CRASHED: Duration = Duration::from_secs(3);
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Read,
    Write,
}

fn take(lock: &RwLock, role: Role) -> Option<LockGuard> {
    let taken = match role {
        Role::Read => lock.try_read(TTL),
        Role::Write => lock.try_write(TTL),
    };
    match taken {
        Ok(guard) => guard,
        Err(Error::NoQuorum { .. }) => None,
        Err(other) => panic!("{role:?}: {other}"),
    }
}

#[test]
fn readers_share_and_a_writer_excludes_everyone() {
    let cluster = Cluster::start(3);
    let a = test_client(cluster.urls(), 0, None).rw_lock("doc");
    let b = test_client(cluster.urls(), 0, None).rw_lock("doc");
    let r1 = a.try_read(TTL).unwrap().expect("free");
    let r2 = b.try_read(TTL).unwrap().expect("readers share");
    assert!(b.try_write(TTL).unwrap().is_none(), "readers hold");
    // A try_write waits for nothing, so it turns no reader away (a
    // waiting writer's mark does: see the tests of waiting writers).
    let r3 = a.try_read(TTL).unwrap().expect("no writer waits");
    r3.release().unwrap();
    r1.release().unwrap();
    drop(r2);
    let mut w = b.try_write(TTL).unwrap().expect("the readers left");
    assert!(a.try_read(TTL).unwrap().is_none(), "a writer holds");
    assert!(a.try_write(TTL).unwrap().is_none(), "a writer holds");
    w.extend(Duration::from_secs(20)).unwrap();
    assert!(w.ttl() >= Duration::from_secs(20));
    w.release().unwrap();
    let mut r = a.try_read(TTL).unwrap().expect("free again");
    r.extend(Duration::from_secs(20)).unwrap();
    r.ensure_valid().unwrap();
    r.release().unwrap();
    // Released reads leave nothing that keeps the writer out.
    b.try_write(TTL).unwrap().expect("free").release().unwrap();
}

#[test]
fn clients_each_reaching_a_different_majority_never_conflict() {
    let cluster = Cluster::start(3);
    let mut holes = Vec::new();
    let clients: Vec<RwLock> = (0..3)
        .map(|cut| {
            let reach: Vec<usize> = (0..3).filter(|&n| n != cut).collect();
            partitioned(&cluster, &reach, &mut holes).rw_lock("split")
        })
        .collect();
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let roles = [
        [Role::Write, Role::Read, Role::Read],
        [Role::Read, Role::Write, Role::Read],
        [Role::Read, Role::Read, Role::Write],
        [Role::Write, Role::Write, Role::Read],
        [Role::Read, Role::Read, Role::Read],
    ];
    for order in orders {
        for roles in roles {
            flush(&cluster);
            let mut held = Vec::new();
            for (&client, &role) in order.iter().zip(&roles) {
                if let Some(guard) = take(&clients[client], role) {
                    held.push((role, guard));
                }
            }
            let writers = held.iter().filter(|(r, _)| *r == Role::Write).count();
            let readers = held.len() - writers;
            assert!(
                writers == 0 || (writers == 1 && readers == 0),
                "order {order:?}, roles {roles:?}: {writers} writers, {readers} readers"
            );
            assert!(
                !held.is_empty(),
                "order {order:?}, roles {roles:?}: the first got in"
            );
            if roles == [Role::Read; 3] {
                assert_eq!(readers, 3, "readers share across partitions");
            }
        }
    }
}

#[test]
fn every_majority_of_five_nodes_never_conflicts() {
    let cluster = Cluster::start(5);
    let mut holes = Vec::new();
    let mut clients = Vec::new();
    for a in 0..5 {
        for b in a + 1..5 {
            for c in b + 1..5 {
                clients.push(partitioned(&cluster, &[a, b, c], &mut holes).rw_lock("five"));
            }
        }
    }
    type RoleOf = fn(usize) -> Role;
    let patterns: [(&str, RoleOf); 4] = [
        ("a writer first", |i| {
            if i == 0 { Role::Write } else { Role::Read }
        }),
        ("a writer last", |i| {
            if i == 9 { Role::Write } else { Role::Read }
        }),
        ("alternating", |i| {
            if i % 2 == 0 { Role::Write } else { Role::Read }
        }),
        ("writers only", |_| Role::Write),
    ];
    for (what, role_of) in patterns {
        for reversed in [false, true] {
            flush(&cluster);
            let order: Vec<usize> = if reversed {
                (0..10).rev().collect()
            } else {
                (0..10).collect()
            };
            let mut held = Vec::new();
            for (turn, &i) in order.iter().enumerate() {
                let role = role_of(turn);
                if let Some(guard) = take(&clients[i], role) {
                    held.push((role, guard));
                }
            }
            let writers = held.iter().filter(|(r, _)| *r == Role::Write).count();
            let readers = held.len() - writers;
            assert!(
                writers == 0 || (writers == 1 && readers == 0),
                "{what}, reversed {reversed}: {writers} writers, {readers} readers"
            );
            assert!(!held.is_empty(), "{what}: the first got in");
            if what == "a writer last" {
                assert!(readers >= 2, "{what}: readers share ({readers})");
            }
        }
    }
}

#[test]
fn contending_readers_and_writers_with_a_witness() {
    let cluster = Cluster::start(3);
    let witness = Node::start(&NodeOptions::default());
    let clients = [
        test_client(cluster.urls(), 0, None),
        test_client(cluster.urls(), 0, None),
    ];
    let until = Instant::now() + Duration::from_secs(4);
    let most_readers = AtomicUsize::new(0);
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let lock = clients[t % 2].rw_lock("mix");
                let most_readers = &most_readers;
                let witness = witness.url();
                // Threads 0 and 1 write, the others read.
                let writes = t < 2;
                s.spawn(move || {
                    let mut conn = redis::Client::open(witness)
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    let mut entered = 0u64;
                    while Instant::now() < until {
                        let wait = Duration::from_secs(3);
                        let taken = if writes {
                            lock.acquire_write(TTL).wait(wait).lock()
                        } else {
                            lock.acquire_read(TTL).wait(wait).lock()
                        };
                        let guard = match taken {
                            Ok(guard) => guard,
                            Err(Error::Busy { .. }) => continue,
                            Err(other) => panic!("thread {t}: {other}"),
                        };
                        let (mine, theirs) = if writes {
                            ("writers", "readers")
                        } else {
                            ("readers", "writers")
                        };
                        let inside: usize = redis::cmd("INCR").arg(mine).query(&mut conn).unwrap();
                        let others: Option<usize> =
                            redis::cmd("GET").arg(theirs).query(&mut conn).unwrap();
                        assert!(guard.is_valid());
                        if writes {
                            assert_eq!(inside, 1, "two writers");
                        } else {
                            most_readers.fetch_max(inside, Ordering::SeqCst);
                        }
                        assert_eq!(others.unwrap_or(0), 0, "a writer with a reader");
                        std::thread::sleep(Duration::from_millis(5));
                        let _: i64 = redis::cmd("DECR").arg(mine).query(&mut conn).unwrap();
                        guard.release().unwrap();
                        entered += 1;
                    }
                    entered
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("holds per thread (2 writers, 4 readers): {counts:?}");
    assert!(most_readers.load(Ordering::SeqCst) >= 2, "readers shared");
    assert!(
        counts.iter().all(|&c| c > 0),
        "every thread progressed: {counts:?}"
    );
}

#[test]
fn a_writer_behind_overlapping_readers_gets_in_within_a_second() {
    let cluster = Cluster::start(3);
    let readers = test_client(cluster.urls(), 0, None);
    let writer = test_client(cluster.urls(), 0, None);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let waited = std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let lock = readers.rw_lock("starve");
                while !stop.load(Ordering::SeqCst) {
                    // Overlapping reads: always at least one reader holds
                    // while a new one comes.
                    if let Some(read) = lock.try_read(TTL).expect("no error") {
                        reads.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        drop(read);
                    }
                }
            });
        }
        crate::harness::settles("readers hold", || reads.load(Ordering::SeqCst) >= 6);
        let started = Instant::now();
        let write = writer
            .rw_lock("starve")
            .acquire_write(TTL)
            .wait(Duration::from_secs(10))
            .lock()
            .expect("the writer got in");
        let waited = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        drop(write);
        waited
    });
    println!("writer behind 3 overlapping readers waited {waited:?}");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
}

/// A reader that crashed (it never releases) still keeps a writer of
/// another client out a second before its TTL runs out, and the writer gets
/// in soon after it; a kept-alive reader keeps the writer out for several
/// TTLs, and lets it in once released.
#[test]
fn a_crashed_reader_frees_after_its_ttl_and_a_kept_one_does_not() {
    let cluster = Cluster::start(3);
    let client = test_client(cluster.urls(), 0, None);
    let other = test_client(cluster.urls(), 0, None);
    let ours = client.rw_lock("crash");
    let theirs = other.rw_lock("crash");
    // The nodes add the reader after `read`: it counts until at least
    // `read + CRASHED`.
    let read = Instant::now();
    std::mem::forget(ours.try_read(CRASHED).unwrap().expect("free"));
    // Still held a whole second before its TTL: on a loaded 2-core machine
    // the check's round reaches the nodes within milliseconds, far within
    // that margin (a reader that leaves early, or never took the TTL it was
    // given, lets the writer in here).
    std::thread::sleep((read + CRASHED - HELD_MARGIN).saturating_duration_since(Instant::now()));
    assert!(
        theirs.try_write(TTL).unwrap().is_none(),
        "the crashed reader holds a second before its TTL"
    );
    // Free soon after it: a waiting writer (retrying every 10-20 ms) gets in
    // within a few seconds past the TTL, a bound that allows for a loaded
    // machine and still fails a reader that outlives its TTL by more.
    theirs
        .acquire_write(TTL)
        .deadline(read + CRASHED + FREED_WITHIN)
        .lock()
        .expect("free soon after its TTL")
        .release()
        .unwrap();
    let ttl = Duration::from_millis(400);
    let kept = ours.acquire_read(ttl).keep_alive().lock().unwrap();
    let started = Instant::now();
    while started.elapsed() < ttl * 4 {
        assert!(theirs.try_write(TTL).unwrap().is_none(), "kept alive");
        kept.ensure_valid().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    kept.release().unwrap();
    // The refused writer's mark turned readers away; the writer itself is
    // not: it gets in once the reader is gone.
    let last = theirs.try_write(TTL).unwrap();
    assert!(last.is_some(), "free once released");
}

#[test]
fn waiters_in_another_client_are_woken_by_the_release() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls()).rw_lock("woken");
    // Without a wake-up, its waiters would find the lock free only after
    // their 400 ms retry pause.
    let waiter = crate::harness::builder(cluster.urls())
        .retry_delay(Duration::from_millis(400))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
        .rw_lock("woken");
    let mut waits = Vec::new();
    // A reader waits for a writer, then a writer for a reader.
    for (held, wanted) in [(Role::Write, Role::Read), (Role::Read, Role::Write)].repeat(2) {
        let guard = match held {
            Role::Write => holder.write(TTL).unwrap(),
            Role::Read => holder.read(TTL).unwrap(),
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let wait = Duration::from_secs(30);
                let got = match wanted {
                    Role::Read => waiter.acquire_read(TTL).wait(wait).lock(),
                    Role::Write => waiter.acquire_write(TTL).wait(wait).lock(),
                };
                tx.send(Instant::now()).unwrap();
                drop(got.expect("after the release"));
            });
            crate::harness::settles("the waiter is queued and listens", || {
                crate::harness::pubsub::waiting(&cluster, "redlock-rw:woken", 1)
            });
            let released = Instant::now();
            drop(guard);
            let acquired = rx.recv_timeout(Duration::from_secs(30)).expect("acquired");
            waits.push(acquired.saturating_duration_since(released));
        });
    }
    println!("release → hold in another client: {waits:?}");
    for wait in &waits {
        assert!(
            *wait < Duration::from_millis(150),
            "woken, not polling: {waits:?}"
        );
    }
}

#[test]
fn writers_get_growing_fencing_tokens_and_readers_none() {
    let cluster = Cluster::start(3);
    let client = crate::harness::builder(cluster.urls())
        .fencing(true)
        .build()
        .unwrap();
    let lock = client.rw_lock("fenced");
    let first = lock.write(TTL).unwrap();
    let t1 = first.fencing_token().expect("a writer's token");
    first.release().unwrap();
    let read = lock.read(TTL).unwrap();
    assert_eq!(read.fencing_token(), None);
    read.release().unwrap();
    let second = lock.write(TTL).unwrap();
    assert!(second.fencing_token().expect("a token") > t1);
}

#[test]
fn bad_names_are_config_errors_and_names_never_collide() {
    let cluster = Cluster::start(3);
    let client = test_client(cluster.urls(), 0, None);
    let err = client.rw_lock("").try_read(TTL).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    assert!(err.to_string().contains("RwLock::try_read"), "{err}");
    assert!(matches!(
        client.lock("redlock-rw:x#w", TTL),
        Err(Error::Config { .. })
    ));
    let plain = client.lock("same", TTL).unwrap();
    let permit = client
        .semaphore("same", 1)
        .try_lock(TTL)
        .unwrap()
        .expect("free");
    let write = client.rw_lock("same").try_write(TTL).unwrap();
    assert!(
        write.is_some(),
        "a lock and a semaphore of the name do not hold it"
    );
    drop((plain, permit, write));
    let lock = client.rw_lock("same");
    assert_eq!(lock.name(), "same");
    assert!(format!("{lock:?}").contains("same"));
}

/// A reader queued ahead of a waiting writer, refused only by a mark (left
/// by a writer that gave up), and the writer's own mark once it queued: when
/// the last reader leaves, the marking writer goes first, as its mark
/// promised. Before, the reader at the head was refused by the mark, the
/// writer waited its turn behind that reader, and both sat out the mark
/// (up to 2 s): the reader got in first.
#[test]
fn the_marking_writer_goes_before_a_reader_queued_ahead_of_it() {
    let cluster = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| test_client(cluster.urls(), 0, None))
        .collect();
    let first = clients[0].rw_lock("order").read(TTL).unwrap();
    for node in &cluster.nodes {
        let _: () = redis::cmd("SET")
            .arg("redlock-rw:order#wait")
            .arg("gave-up:1")
            .arg("PX")
            .arg(3000)
            .query(&mut node.conn())
            .unwrap();
    }
    let queued = |count: usize| {
        crate::harness::settles("queued on the gate node", || {
            cluster.nodes.iter().any(|n| {
                let len: usize = redis::cmd("ZCARD")
                    .arg("redlock-queue:redlock-rw:order")
                    .query(&mut n.conn())
                    .unwrap();
                len == count
            })
        });
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        let reader = clients[1].rw_lock("order");
        let writer = clients[2].rw_lock("order");
        let wait = Duration::from_secs(10);
        let to_reader = tx.clone();
        s.spawn(move || {
            let guard = reader.acquire_read(TTL).wait(wait).lock().unwrap();
            to_reader.send("reader").unwrap();
            drop(guard);
        });
        queued(1);
        s.spawn(move || {
            let guard = writer.acquire_write(TTL).wait(wait).lock().unwrap();
            tx.send("writer").unwrap();
            // Long enough for the reader's next round to meet it.
            std::thread::sleep(Duration::from_millis(50));
            drop(guard);
        });
        queued(2);
        // The marking writer's rounds keep its mark alive on every node,
        // not only up to the gate node behind the reader queued ahead of
        // it: were the mark to lapse on the others, the reader at the head
        // of the queue, told "held" by the gate node, would take them and
        // go first. Shortened here to 500 ms, it must be renewed (to 2 s).
        let pttl = |n: &Node| -> i64 {
            redis::cmd("PTTL")
                .arg("redlock-rw:order#wait")
                .query(&mut n.conn())
                .unwrap()
        };
        for node in &cluster.nodes {
            let _: i64 = redis::cmd("PEXPIRE")
                .arg("redlock-rw:order#wait")
                .arg(500)
                .query(&mut node.conn())
                .unwrap();
        }
        crate::harness::settles("the writer's mark renewed on every node", || {
            assert!(rx.is_empty(), "nobody gets in while the first reader holds");
            cluster.nodes.iter().all(|n| pttl(n) > 1000)
        });
        drop(first);
        let order: Vec<&str> = (0..2)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(15))
                    .expect("both get in")
            })
            .collect();
        assert_eq!(order, ["writer", "reader"]);
    });
}

/// Waiting writers go in the order they marked: a mark whose writer still
/// waits is not taken over by a writer that renews later, so one that
/// queued later never goes first when the readers leave.
#[test]
fn waiting_writers_go_in_the_order_they_queued() {
    let cluster = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| test_client(cluster.urls(), 0, None))
        .collect();
    let read = clients[0].rw_lock("fifo").read(TTL).unwrap();
    let queued = |count: usize| {
        crate::harness::settles("queued on the gate node", || {
            cluster
                .nodes
                .iter()
                .any(|n| crate::harness::pubsub::queued(n, "redlock-rw:fifo") == count)
        });
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        for (i, client) in clients[1..].iter().enumerate() {
            let tx = tx.clone();
            let writer = client.rw_lock("fifo");
            s.spawn(move || {
                let guard = writer
                    .acquire_write(TTL)
                    .wait(Duration::from_secs(20))
                    .lock()
                    .unwrap();
                tx.send(i).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                drop(guard);
            });
            queued(i + 1);
        }
        // Both writers renew their rounds (and the second would take the
        // mark over) for a while before the reader leaves.
        std::thread::sleep(Duration::from_millis(1200));
        drop(read);
        let order: Vec<usize> = (0..2)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(15))
                    .expect("both write")
            })
            .collect();
        assert_eq!(order, [0, 1], "the writer that queued first writes first");
    });
}

/// The gate node granted the first waiting writer, whose round is still on
/// its way to the other nodes (held back here). The writer that queued
/// second is the head of the queue now, and finds the key held on the gate
/// node. A key the gate node just granted is the queue's for the granted
/// round's per-node timeout, not one no among three: the second writer
/// waits, and does not get in first through the other nodes.
#[test]
fn a_granted_writer_keeps_its_turn_while_its_round_reaches_the_others() {
    use crate::harness::partition::Net;
    let cluster = Cluster::start(3);
    let net = Net::new(&cluster, 3);
    // Its rounds before the release, as the head of the queue, go on to the
    // other nodes too and hang on the cut links for a node timeout: shorter
    // than the 2 s a queued waiter keeps its place without a round (with
    // 2 s, it lost its place once, and rightly).
    let first = test_client(net.urls(1), 0, Some(Duration::from_secs(1)));
    let second = test_client(net.urls(2), 0, None);
    let read = test_client(net.urls(0), 0, None)
        .rw_lock("turn")
        .read(TTL)
        .unwrap();
    let gate = || {
        cluster
            .nodes
            .iter()
            .position(|n| crate::harness::pubsub::queued(n, "redlock-rw:turn") > 0)
    };
    let queued = |count: usize| {
        crate::harness::settles("queued on the gate node", || {
            gate().is_some_and(|g| {
                crate::harness::pubsub::queued(&cluster.nodes[g], "redlock-rw:turn") == count
            })
        });
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        for (i, client) in [&first, &second].into_iter().enumerate() {
            let tx = tx.clone();
            let writer = client.rw_lock("turn");
            s.spawn(move || {
                let guard = writer
                    .acquire_write(TTL)
                    .wait(Duration::from_secs(20))
                    .lock()
                    .unwrap();
                tx.send(i).unwrap();
                drop(guard);
            });
            queued(i + 1);
        }
        let g = gate().expect("a gate node");
        let others: Vec<usize> = (0..3).filter(|&i| i != g).collect();
        for &i in &others {
            net.cut(1, i);
        }
        drop(read);
        // The gate node granted the first writer; the second now asks it
        // (every 10–20 ms) while that grant's round is held back.
        let gate_node = &cluster.nodes[g];
        crate::harness::settles("the first writer granted on the gate node", || {
            gate_node.get_now("redlock-rw:turn#w").is_some()
        });
        let asked = gate_node.scripts_run();
        crate::harness::settles("the second writer asked the gate node again", || {
            gate_node.scripts_run() > asked || !rx.is_empty()
        });
        for &i in &others {
            net.heal(1, i);
        }
        let order: Vec<usize> = (0..2)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(15))
                    .expect("both write")
            })
            .collect();
        assert_eq!(
            order,
            [0, 1],
            "the writer the gate node granted writes first"
        );
    });
}

/// Readers across processes never stall a writer: a waiting writer's first
/// round is plain (in no queue), so the mark it leaves holds its token, not
/// its place in the gate node's queue; its next round, at once, marks with
/// its place — unless the readers left in between. Then the gate node keeps
/// the token's mark, and a reader queued meanwhile and the writer must not
/// both sit out the mark (2 s). That race's outcome is planted here: the
/// gate node's mark holds a token, a reader is queued ahead of the writer,
/// the last reader leaves. The waiting writer takes over a mark nobody in
/// the queue owns and writes first.
#[test]
fn a_writer_takes_over_a_mark_nobody_queued_owns() {
    let cluster = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| test_client(cluster.urls(), 0, None))
        .collect();
    let first = clients[0].rw_lock("stall").read(TTL).unwrap();
    let queued = |n: &Node| crate::harness::pubsub::queued(n, "redlock-rw:stall");
    let gate = |count: usize| {
        crate::harness::settles("queued on the gate node", || {
            cluster.nodes.iter().any(|n| queued(n) == count)
        });
        cluster
            .nodes
            .iter()
            .position(|n| queued(n) == count)
            .unwrap()
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        let wait = Duration::from_secs(10);
        let to_writer = tx.clone();
        let writer = clients[1].rw_lock("stall");
        s.spawn(move || {
            let guard = writer.acquire_write(TTL).wait(wait).lock().unwrap();
            to_writer.send("writer").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(guard);
        });
        let g = gate(1);
        let reader = clients[2].rw_lock("stall");
        s.spawn(move || {
            let guard = reader.acquire_read(TTL).wait(wait).lock().unwrap();
            tx.send("reader").unwrap();
            drop(guard);
        });
        gate(2);
        let mut conn = cluster.nodes[g].conn();
        let mark: String = redis::cmd("GET")
            .arg("redlock-rw:stall#wait")
            .query(&mut conn)
            .unwrap();
        let queue: Vec<String> = redis::cmd("ZRANGE")
            .arg("redlock-queue:redlock-rw:stall")
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        let queued_reader = queue.iter().find(|m| **m != mark).expect("the reader");
        let _: () = redis::pipe()
            .cmd("SET")
            .arg("redlock-rw:stall#wait")
            .arg("0123456789abcdef0123456789abcdef01234567")
            .arg("PX")
            .arg(3000)
            .ignore()
            .cmd("ZADD")
            .arg("redlock-queue:redlock-rw:stall")
            .arg(0)
            .arg(queued_reader)
            .ignore()
            .query(&mut conn)
            .unwrap();
        drop(first);
        let order: Vec<&str> = (0..2)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(15))
                    .expect("both get in")
            })
            .collect();
        assert_eq!(order, ["writer", "reader"]);
    });
}

/// A mark whose writer left the queue turns no reader away: a writer that
/// won on the other nodes without the gate node (the gate node still saw a
/// reader) leaves its mark there, naming its place in a queue it has left.
/// A queued round at the gate node drops a mark naming a member that no
/// longer waits, so the queued readers are let in there and wake the next,
/// rather than each getting in through the other nodes only while the
/// readers behind wait for their timers.
#[test]
fn a_mark_whose_writer_left_the_queue_turns_no_reader_away() {
    let cluster = Cluster::start(3);
    let writer = test_client(cluster.urls(), 0, None);
    let readers: Vec<Redlock> = (0..3)
        .map(|_| test_client(cluster.urls(), 0, None))
        .collect();
    let holding = writer.rw_lock("orphan").write(TTL).unwrap();
    let queued = |n: &Node| crate::harness::pubsub::queued(n, "redlock-rw:orphan");
    let in_set = |n: &Node| -> usize {
        redis::cmd("ZCARD")
            .arg("redlock-rw:orphan#r")
            .query(&mut n.conn())
            .unwrap()
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
    std::thread::scope(|s| {
        for client in &readers {
            let tx = tx.clone();
            let done = done.clone();
            s.spawn(move || {
                let guard = client
                    .rw_lock("orphan")
                    .acquire_read(TTL)
                    .wait(Duration::from_secs(10))
                    .lock()
                    .unwrap();
                tx.send(()).unwrap();
                // Held until every reader is in and counted.
                let _ = done.recv();
                drop(guard);
            });
        }
        // The gate node as the reading that saw the three queued (read
        // again, the count may differ for a moment: that failed an
        // `unwrap` once in a BUSY=2 run).
        let mut gate = None;
        crate::harness::settles("the readers queued on the gate node", || {
            gate = cluster.nodes.iter().position(|n| queued(n) == 3);
            gate.is_some()
        });
        let g = gate.unwrap();
        let _: () = redis::cmd("SET")
            .arg("redlock-rw:orphan#wait")
            .arg("a-writer-gone:7")
            .arg("PX")
            .arg(5000)
            .query(&mut cluster.nodes[g].conn())
            .unwrap();
        drop(holding);
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("every reader gets in");
        }
        // The gate node dropped the mark at the first queued round, and let
        // readers in (each woke the next). Not necessarily all three: a
        // round whose gate node is slower than its wait (a loaded machine)
        // goes on to the others and may win there. Before, it let none in,
        // and the mark stayed its 5 s.
        let gate = &cluster.nodes[g];
        let let_in = in_set(gate);
        let mark = gate.get_now("redlock-rw:orphan#wait");
        drop(done_tx);
        assert!(let_in >= 1, "the gate node let readers in");
        assert_eq!(mark, None, "the mark nobody waits for was dropped");
    });
}
