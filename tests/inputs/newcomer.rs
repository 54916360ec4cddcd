//! What a new user hits first, against real `redis-server` nodes:
//! simultaneous `try_lock`s that split the votes, the retry count, and the
//! errors for wrong credentials and for a port that is not Redis.

use std::sync::Barrier;
use std::time::Duration;

use crate::harness::Cluster;
use redlock_sync::{Error, FailureKind, LostCause, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Three separate clients call `try_lock` on the same fresh key at the same
/// moment, 300 times: `Ok(None)` must mean that another client holds it, so
/// (almost) every round has exactly one winner: a round whose votes split
/// is tried again.
#[test]
fn simultaneous_try_locks_from_separate_clients_have_a_winner() {
    const ROUNDS: usize = 300;
    let cluster = Cluster::start(5);
    // Not about the per-node timeout (10 s TTL: 50 ms, missed now and then
    // on a loaded machine).
    let clients: Vec<Redlock> = (0..3)
        .map(|_| {
            Redlock::builder(cluster.urls())
                .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
                .build()
                .expect("client")
        })
        .collect();
    let start = Barrier::new(clients.len());
    let done = Barrier::new(clients.len());
    let winners: Vec<Vec<bool>> = std::thread::scope(|s| {
        let runs: Vec<_> = clients
            .iter()
            .map(|client| {
                let (start, done) = (&start, &done);
                s.spawn(move || {
                    (0..ROUNDS)
                        .map(|round| {
                            start.wait();
                            let key = format!("newcomer:split:{round}");
                            let tried = client.try_lock(&key, TTL);
                            // Everyone has tried before anyone releases
                            // (and a thread that failed reaches the barrier
                            // too: panicking here left the others waiting
                            // at it forever).
                            done.wait();
                            match tried {
                                Ok(guard) => Ok(guard.is_some_and(|g| g.release().is_ok())),
                                Err(err) => Err(format!("round {round}: {err}")),
                            }
                        })
                        // Every round, whatever failed: the others wait
                        // for this thread at both barriers.
                        .collect::<Vec<Result<bool, String>>>()
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| {
                run.join()
                    .unwrap()
                    .into_iter()
                    .collect::<Result<Vec<bool>, String>>()
                    .expect("no node failed")
            })
            .collect()
    });
    let mut nobody = 0;
    for round in 0..ROUNDS {
        let won = winners.iter().filter(|w| w[round]).count();
        assert!(won <= 1, "round {round}: {won} holders at once");
        nobody += usize::from(won == 0);
    }
    eprintln!("rounds without a winner: {nobody} of {ROUNDS}");
    assert!(
        nobody * 100 <= ROUNDS,
        "{nobody} of {ROUNDS} rounds had no winner: try_lock said `held` when nobody held it"
    );
}

/// A node URL that points at something else than Redis (here: a web
/// server's answer) is reported as such at once, not retried as a server
/// error with the raw parse error.
#[test]
fn a_port_that_is_not_redis_says_so_without_retrying() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().take(500).flatten() {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let redlock = Redlock::builder([format!("redis://127.0.0.1:{port}")])
        .retry_count(1000)
        .retry_delay(Duration::from_millis(50))
        .build()
        .expect("build does not fail on a node that is not up");
    let started = std::time::Instant::now();
    let err = redlock.lock("newcomer:not-redis", TTL).unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "retried: {:?}",
        started.elapsed()
    );
    assert!(text.contains("not a Redis server"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    match &err {
        Error::NoQuorum { failures, .. } => {
            assert_eq!(failures[0].kind(), FailureKind::NotRedis, "{err}");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

/// A kept-alive lock whose renewals time out on a majority (two of three
/// nodes paused) is lost when its validity runs out; `ensure_valid` then
/// names the causes of the last failed renewal and says that renewals
/// failed, not "0 node(s) still held it" with no cause.
#[test]
fn a_lock_lost_to_timeouts_keeps_its_causes() {
    let mut cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let guard = redlock
        .acquire("newcomer:lost", Duration::from_millis(600))
        .keep_alive()
        .lock()
        .unwrap();
    cluster.nodes[1].pause();
    cluster.nodes[2].pause();
    crate::harness::settles("the lock lost when its validity ran out", || {
        guard.ensure_valid().is_err()
    });
    cluster.nodes[1].resume();
    cluster.nodes[2].resume();
    let err = guard.ensure_valid().unwrap_err();
    let text = err.to_string();
    match &err {
        Error::LockLost {
            confirmed,
            failures,
            ..
        } => {
            assert_eq!(*confirmed, 1, "{text}");
            // The two paused nodes, as the last renewal saw them.
            assert_eq!(failures.len(), 2, "{text}");
            assert!(
                failures
                    .iter()
                    .all(|f| matches!(f.kind(), FailureKind::Timeout | FailureKind::Connection)),
                "{text}"
            );
        }
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(text.contains("while renewals failed"), "{text}");
    assert!(
        matches!(
            err,
            Error::LockLost {
                cause: LostCause::Expired,
                ..
            }
        ),
        "{err:?}"
    );
    // Its release after the resume says what was known when the lock was
    // lost, whatever the removal of its keys finds (not "2 node(s) still
    // held it, 2 needed").
    let err = guard.release().unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::LockLost {
                cause: LostCause::Expired,
                confirmed: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(text.contains("validity ran out"), "{text}");
    assert!(!text.contains("still held it"), "{text}");
}

/// A lock without keep-alive whose validity simply ran out: no node is
/// asked, and the message says so — not "0 node(s) still held it", which
/// nothing checked. A release afterwards asks the nodes, and says what
/// they answered.
#[test]
fn a_lock_whose_validity_ran_out_says_so_and_nothing_it_did_not_check() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap();
    let mut guard = redlock
        .lock("newcomer:expired", Duration::from_millis(300))
        .unwrap();
    crate::harness::settles("the validity ran out", || !guard.is_valid());
    for err in [
        guard.ensure_valid().unwrap_err(),
        guard.extend(TTL).unwrap_err(),
    ] {
        let text = err.to_string();
        println!("{text}");
        match &err {
            Error::LockLost {
                cause: LostCause::Expired,
                confirmed: 0,
                failures,
                ..
            } => assert!(failures.is_empty(), "{text}"),
            other => panic!("expected LockLost (Expired), got {other:?}"),
        }
        assert!(
            text.contains("its validity ran out before a renewal"),
            "{text}"
        );
        assert!(!text.contains("node(s)"), "no node was asked: {text}");
    }
    cluster.await_gone("newcomer:expired");
    let err = guard.release().unwrap_err();
    let text = err.to_string();
    println!("{text}");
    assert!(
        matches!(
            err,
            Error::LockLost {
                cause: LostCause::NotHeld,
                confirmed: 0,
                quorum: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        text.contains("the other nodes that answered no longer hold its token"),
        "{text}"
    );
}

/// `retry_count(10)` makes 11 attempts (the first and 10 retries, each
/// after its delay), and the error says so. The round that joins the gate
/// node's queue (and one that checks for a wake-up lost while the
/// subscription came up) keep the waiter's place: they are made, but are
/// no retry (they once were, and `(1, 500 ms)` gave up in 2 ms).
#[test]
fn retry_count_is_the_rounds_after_the_first() {
    let cluster = Cluster::start(5);
    let holder = Redlock::new(cluster.urls()).unwrap();
    let _held = holder.lock("newcomer:retries", TTL).unwrap();
    let waiter = Redlock::builder(cluster.urls())
        .retry_count(10)
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let sets = || -> Vec<u64> { cluster.nodes.iter().map(|n| n.calls("set")).collect() };
    let before = sets();
    let err = waiter.lock("newcomer:retries", TTL).unwrap_err();
    assert!(matches!(err, Error::Busy { attempts: 11, .. }), "{err:?}");
    assert!(err.to_string().contains("after 11 attempt(s)"), "{err}");
    // Every round's SET reached the nodes other than the gate node: the
    // 11 attempts and the rounds that kept the place.
    let rounds: Vec<u64> = sets().iter().zip(&before).map(|(a, b)| a - b).collect();
    let most = rounds.iter().max().copied().unwrap_or(0);
    assert!((12..=13).contains(&most), "{rounds:?}");
}

/// A resource name whose key holds another type (a list) is held, for a
/// single lock as for several (`SET … NX GET` answers WRONGTYPE there,
/// which is a no, not a node failure).
#[test]
fn a_key_of_another_type_is_held() {
    let cluster = Cluster::start(3);
    for node in &cluster.nodes {
        let _: i64 = redis::cmd("RPUSH")
            .arg("newcomer:list")
            .arg("x")
            .query(&mut node.conn())
            .unwrap();
    }
    let redlock = Redlock::new(cluster.urls()).unwrap();
    assert!(redlock.try_lock("newcomer:list", TTL).unwrap().is_none());
    assert!(
        redlock
            .try_lock_all(&["newcomer:free", "newcomer:list"], TTL)
            .unwrap()
            .is_none()
    );
}

/// The one-liners a newcomer writes compile — an
/// acquisition or a campaign made from a handle that lives for one
/// expression, kept in a variable (they once borrowed the handle: E0716) —
/// and work.
#[test]
fn acquisitions_from_temporary_handles_can_be_kept_in_variables() {
    let cluster = Cluster::start(3);
    let redlock = crate::harness::client(cluster.urls());
    let ttl = Duration::from_secs(10);
    let permit = redlock.semaphore("nc:jobs", 2).acquire(ttl);
    let read = redlock.rw_lock("nc:config").acquire_read(ttl);
    let write = redlock.rw_lock("nc:other").acquire_write(ttl);
    let lock = redlock.acquire("nc:lock", ttl);
    let campaign = redlock.election("nc:leader").campaign("me", ttl);
    let guards = [
        permit.lock().unwrap(),
        read.lock().unwrap(),
        write.lock().unwrap(),
        lock.try_lock().unwrap().expect("free"),
    ];
    assert!(guards.iter().all(redlock_sync::LockGuard::is_valid));
    let leadership = campaign.try_win().unwrap().expect("nobody leads");
    assert!(leadership.is_leader());
}

/// The retry settings mean the same with wake-ups on (the
/// default) as off: a retry comes after its delay, or earlier only because
/// a release woke it. A lock held elsewhere for the whole call: each call
/// gives up after `retries` delays, never sooner. (With wake-ups on, the
/// round that joins the gate node's queue and the rounds that renew the
/// place counted as retries: `(1, 500 ms)` gave up in 2 ms.)
#[test]
fn the_retry_settings_hold_with_and_without_wake_ups() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls());
    let _held = holder.lock("newcomer:retries", TTL).unwrap();
    for wake_ups in [true, false] {
        for (retries, delay) in [(1, 500), (3, 100)] {
            let delay = Duration::from_millis(delay);
            let client = Redlock::builder(cluster.urls())
                .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
                .release_notifications(wake_ups)
                .retry_count(retries)
                .retry_delay(delay)
                .retry_jitter(Duration::ZERO)
                .build()
                .unwrap();
            let started = std::time::Instant::now();
            let err = client.lock("newcomer:retries", TTL).unwrap_err();
            let took = started.elapsed();
            assert!(matches!(err, Error::Busy { .. }), "{err}");
            assert!(
                took >= delay * retries,
                "wake-ups {wake_ups}, ({retries}, {delay:?}): gave up after {took:?}: {err}"
            );
            assert!(
                err.to_string()
                    .contains(&format!("after {} attempt(s)", retries + 1)),
                "the first round and {retries} retries: {err}"
            );
        }
    }
}

/// A two-node list builds (both up, it works), and says once, at build,
/// that it tolerates no failure: a quorum of 2 of 2.
#[test]
fn a_two_node_list_is_warned_about_once_at_build() {
    crate::harness::capture_logs();
    let mark = crate::harness::log_mark();
    let cluster = Cluster::start(3);
    let pair = &cluster.urls()[..2];
    let client = Redlock::builder(pair)
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap();
    assert_eq!(client.quorum(), 2);
    let address = format!("127.0.0.1:{}", cluster.nodes[1].port);
    let warned = |logs: &[String]| {
        logs.iter()
            .filter(|l| l.starts_with("WARN") && l.contains(&address) && l.contains("2 of 2"))
            .count()
    };
    // A copy: the log's lock must not be held while a failure formats it.
    let logs = crate::harness::logs_since(mark);
    assert_eq!(warned(&logs), 1, "{logs:#?}");
    client
        .try_lock("newcomer:pair", TTL)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
    // Three nodes: no such warning.
    let third = format!("127.0.0.1:{}", cluster.nodes[2].port);
    let _three = Redlock::builder(cluster.urls())
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap();
    let logs = crate::harness::logs_since(mark);
    assert_eq!(warned(&logs), 1, "{logs:#?}");
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("2 of 2") && l.contains(&third)),
        "{logs:#?}"
    );
}

/// After `shutdown()`, `verify()` and `node_health()` ask nothing and say
/// so: every node down and not counting, "the client was shut down", not
/// the health last seen ("up, admitted").
#[test]
fn verify_after_shutdown_reports_the_shutdown_not_stale_health() {
    let cluster = Cluster::start(3);
    let client = Redlock::builder(cluster.urls())
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap();
    assert!(client.verify().iter().all(|h| h.is_up() && h.is_admitted()));
    client.shutdown(Duration::from_secs(5)).unwrap();
    for health in [client.verify(), client.node_health()] {
        assert_eq!(health.len(), 3);
        for node in &health {
            assert!(!node.is_up() && !node.is_admitted(), "{node:?}");
            let why = node.refusal().unwrap().to_string();
            assert!(why.contains("the client was shut down"), "{why}");
        }
    }
}
