//! The `acquire` call shape against real nodes: limits, keep-alive, a wait
//! cancelled from another thread, and node health.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, settles, test_client};
use redlock_sync::{CancelToken, Error, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn slow_retrying(cluster: &Cluster) -> Redlock {
    // Long pauses between rounds: anything that returns quickly while the
    // resource stays held was woken, not timed out.
    Redlock::builder(cluster.urls())
        .retry_delay(Duration::from_secs(20))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
fn limits_retries_and_keep_alive_behave_as_configured() {
    let cluster = Cluster::start(3);
    let holder = test_client(cluster.urls(), 0, Some(Duration::from_secs(1)));
    let other = test_client(cluster.urls(), 0, Some(Duration::from_secs(1)));
    let held = holder.lock("acq:limits", TTL).unwrap();
    // It returned at a majority: the last node (perhaps the gate node, which
    // would let a waiter through that the others refuse, re-tried at once
    // and uncounted) gets the key too before the counts below.
    settles("held on every node", || {
        cluster.count_key_now("acq:limits") == 3
    });
    // try_lock: one round.
    assert!(
        other
            .acquire("acq:limits", TTL)
            .try_lock()
            .unwrap()
            .is_none()
    );
    // retries(2): three rounds after pauses, plus the round made once the
    // release channel is subscribed, all reported in the error. On a loaded
    // machine the holder's SET may have failed on the gate node (a majority
    // suffices): the gate node then lets this waiter through and a majority
    // refuses, which is re-tried at once, up to 5 times, uncounted.
    let err = other
        .acquire("acq:limits", TTL)
        .retries(2)
        .lock()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                attempts: 3..=9,
                ..
            }
        ),
        "{err:?}"
    );
    // wait: keeps trying until the time is up (retry pauses are 10-20 ms).
    let started = Instant::now();
    let err = other
        .acquire("acq:limits", TTL)
        .wait(Duration::from_millis(300))
        .lock()
        .unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(
        matches!(err, Error::Busy { attempts, .. } if attempts > 3),
        "{err:?}"
    );
    // deadline + retries: whichever comes first (here the retries).
    let err = other
        .acquire("acq:limits", TTL)
        .deadline(Instant::now() + Duration::from_secs(30))
        .retries(1)
        .lock()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                attempts: 2 | 3,
                ..
            }
        ),
        "{err:?}"
    );
    drop(held);
    // keep_alive: a 300 ms lock outlives its TTL.
    let guard = other
        .acquire("acq:limits", Duration::from_millis(300))
        .keep_alive()
        .lock()
        .unwrap();
    let first = guard.valid_until();
    settles("renewed by the keeper", || guard.valid_until() > first);
    guard.ensure_valid().unwrap();
    drop(guard);
    // acquire_all, all or nothing.
    let both = other.acquire_all(&["acq:a", "acq:b"], TTL).lock().unwrap();
    assert_eq!(both.resources().collect::<Vec<_>>(), ["acq:a", "acq:b"]);
}

#[test]
fn a_wait_cancelled_from_another_thread_returns_at_once_and_leaves_nothing() {
    let cluster = Cluster::start(3);
    let holder = test_client(cluster.urls(), 0, Some(Duration::from_secs(1)));
    let waiter = slow_retrying(&cluster);
    let held = holder.lock("acq:cancel", TTL).unwrap();
    let token = CancelToken::new();
    std::thread::scope(|s| {
        let (waiter, token) = (&waiter, &token);
        let wait = s.spawn(move || {
            waiter
                .acquire("acq:cancel", TTL)
                .wait(Duration::from_secs(120))
                .cancel_on(token)
                .lock()
        });
        // Its first round reached the nodes (the holder's was the only
        // other one); from then on it is in its round or its pause.
        settles("the waiter made its first round", || {
            cluster
                .nodes
                .iter()
                .all(|n| n.calls("set") + n.scripts_run() >= 2)
        });
        let cancelled_at = Instant::now();
        token.cancel();
        let err = wait.join().unwrap().unwrap_err();
        assert!(
            cancelled_at.elapsed() < Duration::from_secs(5),
            "woken by the cancel, not at the end of its 20 s pause"
        );
        assert!(
            matches!(&err, Error::Cancelled { resource } if resource == "acq:cancel"),
            "{err}"
        );
        assert!(err.to_string().contains("cancelled"), "{err}");
    });
    // A token cancelled before the call: at once, without touching the nodes.
    // (Counting the nodes' SETs cannot show it: on a loaded machine a round
    // of the cancelled wait above, decided at a quorum, may still have a SET
    // on its way. A round on the free resource would set its key.)
    let started = Instant::now();
    // A TTL beyond `await_count`'s bound: a key left behind fails the
    // check below rather than expiring first.
    let err = waiter
        .acquire("acq:other", TTL * 6)
        .cancel_on(&token)
        .lock()
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }));
    assert!(started.elapsed() < Duration::from_millis(500));
    // A round under way when the token fired is cleaned up after the call
    // returned: the waiter's next call, awaited on every node, comes after
    // all of it on each node (one client's requests run in order).
    let _probe = waiter.lock("acq:probe", TTL).unwrap();
    cluster.await_count("acq:probe", 3);
    assert_eq!(cluster.count_key_now("acq:other"), 0, "nothing left");
    // Cancelling after acquisition does not affect the guard.
    drop(held);
    let fresh = CancelToken::new();
    let guard = waiter
        .acquire("acq:cancel", TTL)
        .cancel_on(&fresh)
        .lock()
        .unwrap();
    fresh.cancel();
    guard.ensure_valid().unwrap();
    guard.release().unwrap();
    cluster.await_gone("acq:cancel");
}

#[test]
fn node_health_reports_a_dead_node_and_latency_of_the_live_ones() {
    let mut cluster = Cluster::start(3);
    let redlock = test_client(cluster.urls(), 0, Some(Duration::from_millis(200)));
    drop(redlock.lock("acq:health", TTL).unwrap());
    // Every node has answered (the lock returned at a majority; the last
    // answer may land just after).
    settles("every node up with a latency", || {
        redlock
            .node_health()
            .iter()
            .all(|n| n.is_up() && n.latency().is_some())
    });
    let health = redlock.node_health();
    assert_eq!(health.len(), 3);
    for (node, seen) in cluster.nodes.iter().zip(&health) {
        assert_eq!(seen.address(), node.address());
        assert!(seen.last_failure().is_none(), "{seen:?}");
    }
    cluster.nodes[1].kill();
    settles("node 1 reported down with its failure", || {
        drop(redlock.lock("acq:health", TTL));
        let health = redlock.node_health();
        !health[1].is_up() && health[1].last_failure().is_some() && health[0].is_up()
    });
    let health = redlock.node_health();
    assert!(health[1].last_failure_age().is_some());
    assert_eq!(
        health[1].last_failure().unwrap().node(),
        cluster.nodes[1].address()
    );
}
