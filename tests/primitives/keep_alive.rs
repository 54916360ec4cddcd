//! Keep-alive, `ensure_valid` and `with_lock` against real nodes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, capture_logs, eventually, test_client};
use redlock_sync::{Error, Redlock};

const SHORT: Duration = Duration::from_millis(300);

fn client(cluster: &Cluster) -> Redlock {
    // A fixed 50 ms node timeout: the 10 ms derived for a 300 ms TTL is tight
    // for six clusters sharing two cores, and these tests are about renewal.
    test_client(cluster.urls(), 2, Some(Duration::from_millis(50)))
}

#[test]
fn a_kept_alive_lock_outlives_its_ttl_and_stays_exclusive() {
    let cluster = Cluster::start(5);
    let holder = client(&cluster);
    let other = client(&cluster);
    let mut guard = holder.lock("ka:exclusive", SHORT).unwrap();
    guard.keep_alive();
    guard.keep_alive(); // idempotent
    let first_until = guard.valid_until();
    let mut conns: Vec<_> = cluster.nodes.iter().map(|n| n.conn()).collect();
    // Our token: the value a majority holds (a competitor's failed attempt
    // may sit on a minority for a moment).
    let token = {
        let values = cluster.values_now("ka:exclusive");
        let mut counts = std::collections::HashMap::new();
        for value in values.into_iter().flatten() {
            *counts.entry(value).or_insert(0) += 1;
        }
        counts
            .into_iter()
            .find(|(_, n)| *n >= 3)
            .map(|(v, _)| v)
            .expect("our token on a majority")
    };
    let mut moves = 0;
    let mut last_until = first_until;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert!(guard.is_valid(), "lost after {:?}", started.elapsed());
        guard.ensure_valid().unwrap();
        // Never granted to another client (a NoQuorum under load is fine).
        assert!(!matches!(
            other.try_lock("ka:exclusive", SHORT),
            Ok(Some(_))
        ));
        if guard.valid_until() > last_until {
            moves += 1;
            last_until = guard.valid_until();
        }
        // The nodes, not only our clock: a majority holds our token at least
        // until the guard's validity ends (claim read first, so a renewal in
        // between only lengthens what the nodes hold). Each expiry is the
        // node's PTTL counted from when its reply arrived (+1 ms for PTTL's
        // rounding down).
        let claimed = guard.valid_until();
        let holding = conns
            .iter_mut()
            .map(|conn| {
                let (value, pttl): (Option<String>, i64) = redis::pipe()
                    .cmd("GET")
                    .arg("ka:exclusive")
                    .cmd("PTTL")
                    .arg("ka:exclusive")
                    .query(conn)
                    .unwrap();
                let expires = Instant::now() + Duration::from_millis(pttl.max(0) as u64 + 1);
                value.as_deref() == Some(token.as_str()) && expires >= claimed
            })
            .filter(|holds| *holds)
            .count();
        assert!(
            holding >= 3,
            "only {holding} nodes hold our token until the claimed validity"
        );
        std::thread::sleep(Duration::from_millis(25)); // let time pass: that is the test
    }
    // 3 s of a 300 ms TTL renewed at a third left: about 15 renewals.
    assert!(moves >= 10, "valid_until moved only {moves} times");
    assert!(last_until > first_until + Duration::from_millis(2500));
    guard.release().unwrap();
    assert!(
        other
            .lock_for("ka:exclusive", SHORT, Duration::from_millis(200))
            .is_ok()
    );
}

#[test]
fn losing_a_majority_loses_the_lock_and_resuming_does_not_resurrect_it() {
    capture_logs();
    let mark = crate::harness::log_mark();
    let mut cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let mut guard = redlock.lock("ka:lost", SHORT).unwrap();
    // `lock` returns at a majority: read the token from a node that has it.
    let token = cluster
        .nodes
        .iter()
        .find_map(|n| n.get_now("ka:lost"))
        .expect("token");
    guard.keep_alive();
    for node in &mut cluster.nodes[..3] {
        node.pause();
    }
    let paused_at = Instant::now();
    let deadline = guard.valid_until();
    eventually("the guard is reported lost", Duration::from_secs(2), || {
        guard.ensure_valid().is_err()
    });
    // Lost no later than the validity the guard had when the nodes stopped
    // answering (a renewal in flight may have moved it once), plus a margin.
    let bound = deadline.max(paused_at) + SHORT + Duration::from_millis(100);
    assert!(Instant::now() < bound, "lost too late");
    assert!(!guard.is_valid());
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(matches!(guard.ensure_valid(), Err(Error::LockLost { .. })));
    // Validity runs out by the clock; the keeper notices and warns just after.
    let warned = |l: &String| l.starts_with("WARN") && l.contains("lost the lock on \"ka:lost\"");
    eventually(
        "a warning naming the resource",
        Duration::from_secs(2),
        || crate::harness::logs_since(mark).iter().any(warned),
    );
    let snapshot = crate::harness::logs_since(mark);
    assert!(
        snapshot.iter().all(|l| !l.contains(&token)),
        "a token was logged"
    );
    // The warning that a paused node fails says why.
    let paused = cluster.nodes[0].address();
    let failing = format!("requests to node {paused} are failing: timed out: no answer");
    assert!(
        snapshot
            .iter()
            .any(|l| l.starts_with("WARN") && l.contains(&failing)),
        "no warning with its reason, {failing:?}, in {snapshot:#?}"
    );

    for node in &mut cluster.nodes[..3] {
        node.resume();
    }
    // Several renewal periods later, it is still lost: never renewed again.
    let frozen_until = guard.valid_until();
    std::thread::sleep(SHORT * 2);
    assert!(!guard.is_valid());
    assert_eq!(guard.valid_until(), frozen_until);
    // Its keys expire on their own, and someone else can take the lock.
    let other = client(&cluster);
    let next = other
        .lock_for("ka:lost", SHORT, Duration::from_secs(2))
        .expect("free once the lost lock's keys expired");
    assert!(matches!(guard.release(), Err(Error::LockLost { .. })));
    assert!(
        next.is_valid(),
        "releasing the lost guard must not touch the new holder"
    );
    next.release().unwrap();
}

#[test]
fn release_racing_a_renewal_never_leaves_the_key_behind() {
    let cluster = Cluster::start(5);
    // 24 locks at once beside the other tests of this file: the roomy
    // per-node timeout (50 ms was missed under load: the first round timed
    // out, and its late SET made the retries find the key held).
    let redlock = test_client(cluster.urls(), 2, None);
    let ttl = Duration::from_secs(3);
    // Each guard is released around the moment its renewal is due, so that
    // releases and renewals interleave on the nodes in every order.
    std::thread::scope(|s| {
        for i in 0..24u64 {
            let redlock = redlock.clone();
            s.spawn(move || {
                let mut guard = redlock.lock(&format!("ka:race:{i}"), ttl).unwrap();
                guard.keep_alive();
                let due = guard.valid_until() - ttl / 3;
                let offset = Duration::from_millis(i * 2);
                let at = due - Duration::from_millis(24) + offset;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                guard.release().unwrap();
            });
        }
    });
    // A resurrected key would live for the whole 3 s TTL.
    eventually("every key gone", Duration::from_millis(500), || {
        (0..24).all(|i| cluster.count_key_now(&format!("ka:race:{i}")) == 0)
    });
}

#[test]
fn with_lock_runs_the_work_and_releases() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let other = client(&cluster);
    let value = redlock
        .with_lock("ka:with", SHORT, |guard| {
            assert!(guard.is_valid());
            assert!(!matches!(other.try_lock("ka:with", SHORT), Ok(Some(_))));
            // Outlive the TTL: the keep-alive must carry the lock.
            std::thread::sleep(SHORT * 2);
            guard.ensure_valid().map(|()| 42)
        })
        .unwrap()
        .unwrap();
    assert_eq!(value, 42);
    assert!(
        other
            .lock_for("ka:with", SHORT, Duration::from_millis(200))
            .is_ok()
    );
}

#[test]
fn with_lock_releases_when_the_work_panics() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        redlock.with_lock("ka:panic", Duration::from_secs(10), |_guard| -> () {
            panic!("work failed");
        })
    }));
    let payload = outcome.expect_err("the panic continues");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"work failed"));
    assert!(
        redlock
            .try_lock("ka:panic", Duration::from_secs(10))
            .unwrap()
            .is_some()
    );
}

#[test]
fn with_lock_reports_a_lock_lost_during_the_work() {
    let mut cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let result = redlock.with_lock("ka:with-lost", SHORT, |guard| {
        for node in &mut cluster.nodes[..3] {
            node.pause();
        }
        eventually("lost", Duration::from_secs(2), || {
            guard.ensure_valid().is_err()
        });
        for node in &mut cluster.nodes[..3] {
            node.resume();
        }
        "work result"
    });
    assert!(matches!(result, Err(Error::LockLost { .. })), "{result:?}");
}
