//! The core driven through the fake-node seam: rounds, deadlines,
//! extension/keeper interleavings and the hand-off, in milliseconds and
//! without Redis. (The same behaviours are tested against real servers in
//! `tests/`.)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::core::{Core, Lease, Patience};
use crate::error::{Error, FailureKind};
use crate::settings::Config;
use crate::transport::Op;
use crate::transport::fake::{self, Behaviour, FakeNode};

use super::*;

fn extends(ops: &[Op], ttl_ms: u64) -> usize {
    ops.iter()
        .filter(|op| **op == Op::Extend { ttl_ms })
        .count()
}

#[test]
fn a_round_is_decided_by_the_majority_without_waiting_for_held_nodes() {
    let (nodes, core) = core_with(5, settings());
    nodes[3].set(Behaviour::Hold);
    nodes[4].set(Behaviour::Hold);
    let started = Instant::now();
    let lease = lock(&core, "r", Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "decided before the held nodes' timeout"
    );
    assert_eq!(nodes.iter().filter(|n| n.holder("r").is_some()).count(), 3);
    nodes[3].set(Behaviour::Normal);
    nodes[4].set(Behaviour::Normal);
    lease.release(core.nodes()).unwrap();
}

#[test]
fn a_majority_made_impossible_early_says_how_many_had_not_answered() {
    let (nodes, core) = core_with(3, settings());
    nodes[0].set(Behaviour::Fail(FailureKind::Connection));
    nodes[1].set(Behaviour::Fail(FailureKind::Connection));
    nodes[2].set(Behaviour::Hold);
    let err = core
        .acquire(&["r"], Duration::from_secs(10), Patience::attempts(0))
        .unwrap_err();
    match &err {
        Error::NoQuorum {
            confirmed: 0,
            quorum: 2,
            failures,
            ..
        } => {
            let mut kinds: Vec<_> = failures.iter().map(|f| (f.node(), f.kind())).collect();
            kinds.sort_by_key(|(node, _)| node.to_string());
            assert_eq!(
                kinds,
                [
                    ("fake:0", FailureKind::Connection),
                    ("fake:1", FailureKind::Connection),
                    ("fake:2", FailureKind::Unanswered)
                ]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("node fake:2: had not answered yet"),
        "{err}"
    );
    nodes[2].set(Behaviour::Normal);
}

#[test]
fn nodes_missing_at_the_deadline_are_timeouts_that_name_the_per_node_timeout() {
    let settings = Config {
        node_timeout: None,
        ..settings()
    };
    let (nodes, core) = core_with(3, settings);
    for node in &nodes[1..] {
        node.set(Behaviour::Hold);
    }
    let err = core
        .acquire(&["r"], Duration::from_secs(10), Patience::attempts(0))
        .unwrap_err();
    let Error::NoQuorum { failures, .. } = &err else {
        panic!("unexpected {err:?}");
    };
    assert_eq!(failures.len(), 2);
    for failure in failures {
        assert_eq!(failure.kind(), FailureKind::Timeout);
        assert!(
            failure.detail().starts_with(
                "no answer within the 50 ms per-node timeout (derived from the 10 s ttl"
            ),
            "{failure}"
        );
    }
    for node in &nodes {
        node.set(Behaviour::Normal);
    }
    // The failed round's clean-up reaches every node, the held ones too.
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.iter().any(|op| matches!(op, Op::Release { .. }))
        }));
        assert_eq!(node.holder("r"), None);
    }
}

#[test]
fn a_quorum_reached_after_the_validity_is_too_slow_and_cleaned_up() {
    let (nodes, core) = core_with(3, settings());
    for node in &nodes {
        node.set_delay(Duration::from_millis(60));
    }
    // 50 ms ttl: validity ends 47.5 ms after the start, before any answer.
    let err = core
        .acquire(&["r"], Duration::from_millis(50), Patience::attempts(0))
        .unwrap_err();
    assert!(
        matches!(err, Error::TooSlow { ttl, .. } if ttl == Duration::from_millis(50)),
        "{err:?}"
    );
    // The clean-up reaches every node (the 50 ms key has expired by then
    // anyway; what matters is that the delete was sent).
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.iter().any(|op| matches!(op, Op::Release { .. }))
        }));
    }
}

#[test]
fn a_busy_resource_is_busy_with_the_attempt_count() {
    let (nodes, core) = core_with(
        3,
        Config {
            retry_count: 2,
            ..settings()
        },
    );
    for node in &nodes {
        node.put("r", "someone-else", Duration::from_secs(60));
    }
    let err = core
        .acquire(&["r"], Duration::from_secs(10), Patience::attempts(2))
        .unwrap_err();
    assert!(matches!(err, Error::Busy { attempts: 3, .. }), "{err:?}");
    assert!(
        nodes
            .iter()
            .all(|n| n.holder("r").as_deref() == Some("someone-else"))
    );
}

/// After `extend` shortens a kept lease's TTL, the keeper renews on the new
/// TTL's schedule, not the old, longer one's (which would wake it after the
/// new validity ended, and lose the lock).
#[test]
fn a_kept_alive_lease_shortened_by_extend_is_renewed_on_the_new_schedule() {
    let (nodes, core) = core_with(3, settings());
    let lease = lock(&core, "r", Duration::from_secs(30));
    core.keep(&lease).unwrap();
    core.extend(&lease, Duration::from_millis(600)).unwrap();
    // Renewed with the new TTL when a third of it is left (every ~400 ms), not
    // when a third of 30 s would have been left.
    assert!(
        nodes[0].wait_for(LONG_WAIT, |ops| extends(ops, 600) >= 3),
        "the keeper renewed on the new schedule: {:?}",
        nodes[0].received()
    );
    assert!(!lease.is_lost());
    assert!(!lease.remaining().is_zero());
    lease.release(core.nodes()).unwrap();
}

/// A caller's `extend` waits for another extension in flight, so the
/// results apply in the order the extensions were asked for: an older,
/// longer result never overwrites a newer, shorter one (which would claim
/// validity the guard no longer asked for).
#[test]
fn a_second_extension_waits_for_the_first_so_the_shorter_newer_ttl_wins() {
    let (nodes, core) = core_with(3, settings());
    let lease = lock(&core, "r", Duration::from_secs(10));
    // The first extension (to 20 s) is answered by the nodes, then paused
    // just before its result is applied.
    let (entered_tx, entered) = crossbeam_channel::bounded(1);
    let (resume_tx, resume) = crossbeam_channel::bounded::<()>(1);
    let mut first = true;
    *core.nodes().hooks().before_extension_applies.lock() = Some(Box::new(move || {
        if std::mem::take(&mut first) {
            entered_tx.send(()).unwrap();
            resume.recv_timeout(LONG_WAIT).expect("resumed");
        }
    }));
    std::thread::scope(|s| {
        let long = s.spawn(|| core.extend(&lease, Duration::from_secs(20)));
        entered
            .recv_timeout(LONG_WAIT)
            .expect("first extension answered");
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let (core, lease) = (&core, &lease);
        let short = s.spawn(move || {
            let result = core.extend(lease, Duration::from_secs(1));
            done_tx.send(()).unwrap();
            result
        });
        // Either the short extension ran to the end while the long one was
        // in flight (the defect), or it is queued behind it.
        eventually("the second extension finished or queued", || {
            !done.is_empty() || lease.queued_extensions.load(Ordering::SeqCst) == 1
        });
        resume_tx.send(()).unwrap();
        long.join().unwrap().unwrap();
        short.join().unwrap().unwrap();
        // Its round started before it returned: the validity it gave ends
        // within a second of its return (how long
        // it queued is the machine's business; the long extension's 20 s
        // would end far past it).
        let bound = Instant::now() + Duration::from_secs(1);
        assert!(
            lease.valid_until() <= bound,
            "validity claims {:?} past what the last extension gave",
            lease.valid_until() - bound
        );
        // A majority confirmed; the last node may apply it just after. The
        // shorter TTL shortens the guard's claim only, never a key.
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| extends(ops, 1_000) == 1));
            assert!(node.pttl("r").is_some_and(|t| t > Duration::from_secs(10)));
        }
    });
    // The nodes saw the long extension before the short one, never both at once.
    for node in &nodes {
        let ops = node.received();
        let long = ops
            .iter()
            .position(|op| *op == Op::Extend { ttl_ms: 20_000 });
        let short = ops
            .iter()
            .position(|op| *op == Op::Extend { ttl_ms: 1_000 });
        assert!(long < short, "{ops:?}");
    }
}

/// A kept-alive 900 ms lease whose keeper renewal has reached the nodes,
/// which hold it unanswered (the keeper renews when 300 ms are left, ample
/// on a loaded box).
fn renewal_in_flight() -> (Vec<FakeNode>, Arc<Core>, Arc<Lease>) {
    let (nodes, core) = core_with(3, settings());
    let lease = lock(&core, "r", Duration::from_millis(900));
    // A quorum answered; let the last node apply the SET before holding it.
    eventually("held on every node", || {
        nodes.iter().all(|n| n.holder("r").is_some())
    });
    for node in &nodes {
        node.set(Behaviour::Hold);
    }
    core.keep(&lease).unwrap();
    // Received by every node: a release queued after this follows it on
    // each (the keeper queues on one node after another).
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| extends(ops, 900) == 1));
    }
    (nodes, core, lease)
}

#[test]
fn a_callers_extend_waits_for_a_renewal_in_flight() {
    let (nodes, core, lease) = renewal_in_flight();
    std::thread::scope(|s| {
        let caller = s.spawn(|| core.extend(&lease, Duration::from_secs(5)));
        eventually("the caller's extension queued", || {
            lease.queued_extensions.load(Ordering::SeqCst) == 1
        });
        assert_eq!(
            extends(&nodes[0].received(), 5_000),
            0,
            "not sent meanwhile"
        );
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        caller.join().unwrap().unwrap();
    });
    assert!(lease.remaining() > Duration::from_secs(4));
    lease.release(core.nodes()).unwrap();
}

#[test]
fn a_renewal_that_cannot_reach_a_majority_loses_the_lease_at_the_end_of_its_validity() {
    // Retries come every max(ttl / 10, node timeout) = 20 ms.
    let (nodes, core) = core_with(
        3,
        Config {
            node_timeout: Some(Duration::from_millis(20)),
            ..settings()
        },
    );
    let lease = lock(&core, "r", Duration::from_millis(200));
    for node in &nodes[1..] {
        node.set(Behaviour::Fail(FailureKind::Connection));
    }
    core.keep(&lease).unwrap();
    eventually("the lease is lost", || lease.is_lost());
    // Retried while validity remained: more than one renewal was attempted.
    assert!(
        extends(&nodes[0].received(), 200) >= 2,
        "{:?}",
        nodes[0].received()
    );
    assert!(lease.remaining().is_zero());
    assert!(matches!(
        lease.release(core.nodes()),
        Err(Error::LockLost { .. })
    ));
}

#[test]
fn nodes_saying_the_token_is_gone_lose_the_lease_at_once() {
    let (nodes, core) = core_with(3, settings());
    let lease = lock(&core, "r", Duration::from_secs(10));
    for node in &nodes {
        node.put("r", "someone-else", Duration::from_secs(60));
    }
    let err = core.extend(&lease, Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(err, Error::LockLost { confirmed: 0, .. }),
        "{err:?}"
    );
    assert!(lease.is_lost());
    assert!(lease.remaining().is_zero());
}

#[test]
fn a_release_during_a_renewal_leaves_no_key_and_is_never_undone() {
    let (nodes, core, lease) = renewal_in_flight();
    std::thread::scope(|s| {
        let release = s.spawn(|| lease.release(core.nodes()));
        // Marked released (so no longer scheduled) before its delete is queued.
        eventually("release started", || lease.schedule().is_none());
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        release.join().unwrap().unwrap();
    });
    // Confirmed by a majority; the last node may apply its delete just after.
    eventually("deleted on every node", || {
        nodes.iter().all(|n| n.holder("r").is_none())
    });
    for node in &nodes {
        let ops = node.received();
        let renewal = ops.iter().position(|op| *op == Op::Extend { ttl_ms: 900 });
        let delete = ops.iter().position(|op| matches!(op, Op::Release { .. }));
        assert!(
            renewal.expect("renewal sent") < delete.expect("delete sent"),
            "{ops:?}"
        );
    }
    assert!(!lease.is_lost(), "a released lease is not reported lost");
}

#[test]
fn a_release_by_another_thread_wakes_a_waiting_thread_long_before_its_retry_delay() {
    let (nodes, core) = core_with(3, sleeps_30_s());
    let held = lock_landed(&core, &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        eventually("the second thread waits", || {
            core.nodes().waiters().count() == 1
        });
        // Its rounds so far were refused (a plain one, then one at the
        // gate node): it sleeps.
        eventually("refused", || {
            nodes.iter().map(acquisitions).sum::<usize>() > 3 + 3
        });
        held.release(core.nodes()).unwrap();
        acquired_and_released(&rx, core, "woken by the release, not after its 30 s pause");
    });
}

/// A release that lands while the waiter's *first* round is in flight ends
/// its pause at once.
#[test]
fn a_release_during_the_first_round_is_not_missed() {
    let (nodes, core) = core_with(3, sleeps_30_s());
    let held = lock(&core, "r", Duration::from_secs(10));
    eventually("held on every node", || {
        nodes.iter().all(|n| n.holder("r").is_some())
    });
    // Answers now take 200 ms: the release below lands during the round.
    for node in &nodes {
        node.set_delay(Duration::from_millis(200));
    }
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        // The waiter's first SET has reached the nodes (and was refused).
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| {
                ops.iter()
                    .filter(|op| matches!(op, Op::Acquire { .. }))
                    .count()
                    == 2
            }));
        }
        held.release(core.nodes()).unwrap();
        let lease = rx
            .recv_timeout(LONG_WAIT)
            .expect("woken by the release, not after its 30 s pause")
            .expect("acquired");
        for node in &nodes {
            node.set_delay(Duration::ZERO);
        }
        lease.release(core.nodes()).unwrap();
    });
}

#[test]
fn several_resources_are_taken_all_or_nothing_and_a_failed_round_leaves_none() {
    let (nodes, core) = core_with(3, settings());
    // "b" is held by someone else on a majority: nothing may be taken.
    for node in &nodes[..2] {
        node.put("b", "someone-else", Duration::from_secs(60));
    }
    let err = core
        .acquire(
            &["a", "b", "c"],
            Duration::from_secs(10),
            Patience::attempts(0),
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::Busy { resource, .. } if resource == "a, b, c"),
        "{err:?}"
    );
    // Node 2 granted all three; the failed round's clean-up removes them.
    assert!(nodes[2].wait_for(LONG_WAIT, |ops| {
        ops.iter().any(|op| matches!(op, Op::Release { .. }))
    }));
    eventually("clean-up applied", || {
        nodes
            .iter()
            .all(|n| n.holder("a").is_none() && n.holder("c").is_none())
    });
    assert!(
        nodes[..2]
            .iter()
            .all(|n| n.holder("b").as_deref() == Some("someone-else"))
    );
    assert_eq!(nodes[2].holder("b"), None);
}

#[test]
fn a_multi_lease_extends_and_releases_every_key_and_is_lost_if_any_key_is() {
    let (nodes, core) = core_with(3, settings());
    let lease = Arc::new(
        core.acquire(&["a", "b"], Duration::from_secs(10), Patience::attempts(0))
            .unwrap(),
    );
    assert_eq!(lease.resources().collect::<Vec<_>>(), ["a", "b"]);
    core.extend(&lease, Duration::from_secs(20)).unwrap();
    eventually("both keys extended on every node", || {
        nodes.iter().all(|n| {
            ["a", "b"]
                .iter()
                .all(|k| n.pttl(k).is_some_and(|t| t > Duration::from_secs(15)))
        })
    });
    lease.release(core.nodes()).unwrap();
    eventually("both keys released", || {
        nodes
            .iter()
            .all(|n| n.holder("a").is_none() && n.holder("b").is_none())
    });

    // One key taken over on a majority (it expired and someone else took
    // it): extending must fail and leave the other key alone.
    let lease = Arc::new(
        core.acquire(&["a", "b"], Duration::from_secs(10), Patience::attempts(0))
            .unwrap(),
    );
    eventually("both keys on every node", || {
        nodes
            .iter()
            .all(|n| n.holder("a").is_some() && n.holder("b").is_some())
    });
    for node in &nodes[..2] {
        node.put("b", "someone-else", Duration::from_secs(60));
    }
    let err = core.extend(&lease, Duration::from_secs(30)).unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert!(nodes[0].pttl("a").unwrap() <= Duration::from_secs(10));
    assert!(lease.is_lost());
}

fn cancellable(token: &crate::cancel::CancelToken) -> Patience {
    Patience {
        cancel: Some(token.clone()),
        ..Patience::until(Some(Instant::now() + Duration::from_secs(60)))
    }
}

#[test]
fn a_token_cancelled_before_the_call_touches_no_node() {
    let (nodes, core) = core_with(3, settings());
    let token = crate::cancel::CancelToken::new();
    token.cancel();
    let err = core
        .acquire(&["r"], Duration::from_secs(10), cancellable(&token))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Cancelled { resource } if resource == "r"),
        "{err:?}"
    );
    assert!(nodes.iter().all(|n| n.received().is_empty()));
}

#[test]
fn a_cancel_ends_the_pause_at_once_and_one_token_cancels_many_waits() {
    let (nodes, core) = core_with(
        3,
        Config {
            retry_delay: Duration::from_secs(30),
            ..settings()
        },
    );
    for node in &nodes {
        for key in ["a", "b", "c"] {
            node.put(key, "someone-else", Duration::from_secs(60));
        }
    }
    let token = crate::cancel::CancelToken::new();
    std::thread::scope(|s| {
        let waits: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|key| {
                let (core, token) = (&core, &token);
                s.spawn(move || core.acquire(&[key], Duration::from_secs(10), cancellable(token)))
            })
            .collect();
        // Every wait has made its first round and is pausing for 30 s.
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| ops.len() >= 3));
        }
        eventually("all three registered as waiters", || {
            core.nodes().waiters().count() == 3
        });
        let cancelled_at = Instant::now();
        token.cancel();
        for wait in waits {
            let err = wait.join().unwrap().unwrap_err();
            assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
        }
        assert!(
            cancelled_at.elapsed() < LONG_WAIT,
            "woken, not at the end of the pause"
        );
    });
    // The other holder's keys are untouched.
    for node in &nodes {
        assert_eq!(node.holder("a").as_deref(), Some("someone-else"));
    }
}

#[test]
fn a_round_that_succeeds_after_its_cancel_is_released_again() {
    let (nodes, core) = core_with(3, settings());
    for node in &nodes {
        node.set(Behaviour::Hold);
    }
    let token = crate::cancel::CancelToken::new();
    std::thread::scope(|s| {
        let (core, t) = (&core, &token);
        let wait = s.spawn(move || core.acquire(&["r"], Duration::from_secs(10), cancellable(t)));
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| !ops.is_empty()));
        }
        token.cancel();
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        let err = wait.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    });
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.iter().any(|op| matches!(op, Op::Release { .. }))
        }));
    }
    eventually("nothing left", || {
        nodes.iter().all(|n| n.holder("r").is_none())
    });
}

fn fencing() -> Config {
    Config {
        fencing: true,
        ..settings()
    }
}

#[test]
fn fencing_tokens_grow_across_clients_and_survive_extend() {
    let (nodes, transport) = fake::cluster(5);
    let core = Core::new(transport, fencing());
    let first = lock(&core, "r", Duration::from_secs(10));
    let a = first.fence().expect("a token on a fencing client");
    core.extend(&first, Duration::from_secs(20)).unwrap();
    assert_eq!(first.fence(), Some(a), "extend keeps the token");
    first.release(core.nodes()).unwrap();
    let second = lock(&core, "r", Duration::from_secs(10));
    let b = second.fence().unwrap();
    assert!(b > a, "{b} > {a}");
    // Every node that granted holds the token as its fence value.
    eventually("the token written back", || {
        nodes.iter().filter(|n| n.fence("r") == Some(b)).count() >= 3
    });
    second.release(core.nodes()).unwrap();
    // A non-fencing client sends no fence round and gets no token.
    let (_, transport) = fake::cluster(3);
    let plain = Core::new(transport, settings());
    assert_eq!(lock(&plain, "r", Duration::from_secs(10)).fence(), None);
}

/// The weak spot of the majority argument: the token reached a bare
/// majority, one node of it restarted empty, and the next majority meets
/// the earlier one only in that node. The wall-clock floor still orders the
/// tokens.
#[test]
fn a_token_written_to_a_bare_majority_survives_one_of_it_restarting_empty() {
    let (nodes, transport) = fake::cluster(5);
    let core = Core::new(transport, fencing());
    for node in &nodes[3..] {
        node.set(Behaviour::Fail(FailureKind::Connection));
    }
    let first = lock(&core, "r", Duration::from_secs(10));
    let a = first.fence().unwrap();
    first.release(core.nodes()).unwrap();
    assert_eq!(nodes.iter().filter(|n| n.fence("r") == Some(a)).count(), 3);
    // Node 2 restarts empty; nodes 0 and 1 go down; 2, 3, 4 form a majority
    // in which nobody remembers `a`.
    nodes[2].flush();
    for node in &nodes[3..] {
        node.set(Behaviour::Normal);
    }
    for node in &nodes[..2] {
        node.set(Behaviour::Fail(FailureKind::Connection));
    }
    let second = lock(&core, "r", Duration::from_secs(10));
    assert!(second.fence().unwrap() > a);
}

#[test]
fn grants_whose_answers_are_lost_fail_the_round_and_are_released() {
    let (nodes, transport) = fake::cluster(3);
    let core = Core::new(transport, fencing());
    // Every node grants the lock (and stores the token); the answers of
    // nodes 1 and 2 are lost.
    for node in &nodes[1..] {
        node.lose_fenced_grants(true);
    }
    let err = core
        .acquire(&["r"], Duration::from_secs(10), Patience::attempts(0))
        .unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    eventually("released everywhere", || {
        nodes.iter().all(|n| n.holder("r").is_none())
    });
}

/// A stale token on one node while the others fail: proposed again a few
/// times at once, then the caller hears what kept it out — too few nodes
/// (`NoQuorum`), not `Busy`, which would say that someone holds it. With
/// the others' credentials rejected, no larger token could help: one round.
#[test]
fn a_stale_token_among_failed_nodes_is_no_quorum() {
    let (nodes, transport) = fake::cluster(3);
    let core = Core::new(
        transport,
        Config {
            fencing_floor: false,
            ..fencing()
        },
    );
    for kind in [FailureKind::Connection, FailureKind::Auth] {
        nodes[0].put(
            &crate::transport::fence_key("r"),
            "100",
            Duration::from_secs(60),
        );
        for node in &nodes[1..] {
            node.set(Behaviour::Fail(kind));
            // Node 0's stale answer comes first: the round is decided on
            // all three answers, not before node 0's is in.
            node.set_delay(Duration::from_millis(50));
        }
        let asked = acquisitions(&nodes[0]);
        let err = core
            .acquire(&["r"], Duration::from_secs(10), Patience::attempts(0))
            .unwrap_err();
        assert!(matches!(err, Error::NoQuorum { .. }), "{kind:?}: {err:?}");
        let rounds = acquisitions(&nodes[0]) - asked;
        if kind == FailureKind::Auth {
            assert_eq!(rounds, 1, "no token proposed again");
        } else {
            assert!(rounds > 1, "proposed again: {rounds}");
        }
        for node in &nodes {
            node.set(Behaviour::Normal);
            node.set_delay(Duration::ZERO);
        }
    }
}

/// The majority argument on its own (no wall-clock floor): two clients
/// alternate acquisitions while a random minority of nodes fails each time;
/// every token is larger than the one before, because each acquisition's
/// majority meets the previous grant's majority.
#[test]
fn without_the_floor_the_majority_protocol_alone_orders_tokens() {
    use rand::{RngExt, SeedableRng};
    let (nodes, transport_a) = fake::cluster(5);
    let links: Vec<_> = nodes.to_vec();
    let no_floor = Config {
        fencing_floor: false,
        ..fencing()
    };
    let a = Core::new(transport_a, no_floor.clone());
    let b = Core::new(fake::transport_for(&links), no_floor);
    let seed: u64 = rand::random();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut last = 0;
    for round in 0..300 {
        // A random minority (0 to 2 nodes) fails this round.
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        for _ in 0..rng.random_range(0..3) {
            nodes[rng.random_range(0..5)].set(Behaviour::Fail(FailureKind::Connection));
        }
        let core = if round % 2 == 0 { &a } else { &b };
        let lease = lock(core, "r", Duration::from_secs(10));
        let token = lease.fence().unwrap();
        assert!(
            token > last,
            "seed {seed}, round {round}: {token} after {last}"
        );
        assert!(token < 1_000, "the floor was not used: {token}");
        last = token;
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        lease.release(core.nodes()).unwrap();
        eventually("released everywhere", || {
            nodes.iter().all(|n| n.holder("r").is_none())
        });
    }
}

/// A release reaches a node whose queue is full: releases are queued even
/// then, so nothing the node runs of the holds before it (their `SET`s
/// already on their way) stays until the TTL — for every lock whose
/// acquisition reached the node (one its queue refused left nothing there,
/// and its release skips it).
#[test]
fn releases_reach_a_node_whose_queue_is_full() {
    let (nodes, transport) = fake::cluster_with_capacity(3, 2);
    let core = Core::new(transport, settings());
    // The first lock's `SET` reaches node 0, which stalls before it runs:
    // the next two wait in its queue, the rest are refused as overloaded.
    nodes[0].hold_next_acquisition();
    let keys: Vec<String> = (0..6).map(|i| format!("full:{i}")).collect();
    let leases: Vec<_> = keys
        .iter()
        .map(|key| lock(&core, key, Duration::from_secs(60)))
        .collect();
    for lease in leases {
        lease
            .release(core.nodes())
            .expect("released on the other two");
    }
    nodes[0].set(Behaviour::Normal);
    let releases = || {
        nodes[0]
            .received()
            .iter()
            .filter(|op| matches!(op, Op::Release { .. }))
            .count()
    };
    // The stalled lock's and the two queued behind it (those may have
    // expired unrun in the queue); of the three its full queue refused,
    // only those whose gate node it is (their release wakes the queue of
    // waiters there).
    let gated = keys[3..]
        .iter()
        .filter(|key| core.nodes().transport().gate_of_name(key) == 0)
        .count();
    eventually("node 0 ran the releases of the locks queued for it", || {
        core.nodes().transport().queued(0) == 0 && releases() == 3 + gated
    });
    for key in &keys {
        assert_eq!(nodes[0].holder(key), None, "{key} left on node 0");
    }
}
