//! Elections through the fake-node seam: the orderings of proclamations,
//! reads and hand-offs that matter, deterministically.
//!
//! Shared state: the value key on every node, written by the leader's
//! proclamations (the caller) and its resignation (the caller or `Drop`),
//! read by any client's reads; the lock key under it, written by
//! campaigns, the keeper's renewals and releases. The orders tested: a
//! proclamation that lands after the leadership passed on; two of one
//! leader's proclamations landing out of order; a read while a hand-off is
//! half done; a read after a resignation.

use std::sync::Arc;
use std::time::Duration;

use super::clients;
use super::{core_with, eventually, settings, sleeps_30_s};
use crate::core::elect::term_and_value;
use crate::core::{Lease, Patience, Target};
use crate::error::{Error, LostCause};
use crate::transport::elect_keys;
use crate::transport::fake::FakeNode;

const TTL: Duration = Duration::from_secs(10);

fn win(core: &crate::core::Core, name: &str, ttl: Duration) -> Arc<Lease> {
    let name = Arc::from(name);
    core.acquire_target(Target::Election { name }, ttl, Patience::attempts(0))
        .expect("won")
}

/// Sets node `index`'s election keys as if `token` led in `term` and had
/// proclaimed `value` (or nothing, with `None`).
fn seed(node: &FakeNode, name: &str, token: &str, term: u64, value: Option<&str>) {
    let [lock, value_key, _] = elect_keys(name);
    node.put(&lock, token, TTL);
    if let Some(value) = value {
        node.put(&value_key, &format!("{token} {term} 1 {value}"), TTL);
    }
}

#[test]
fn a_leader_is_read_with_its_term_and_latest_value() {
    let (_nodes, core) = core_with(5, settings());
    let lease = win(&core, "e", TTL);
    let term = lease.fence().expect("an election is always fenced");
    assert_eq!(
        core.read_leader("e").unwrap(),
        None,
        "nothing proclaimed yet"
    );
    core.proclaim(&lease, "e", (term, &mut 0), "a").unwrap();
    assert_eq!(core.read_leader("e").unwrap(), Some((term, Arc::from("a"))));
    core.proclaim(&lease, "e", (term, &mut 1), "b c").unwrap();
    assert_eq!(
        core.read_leader("e").unwrap(),
        Some((term, Arc::from("b c")))
    );
}

#[test]
fn a_proclamation_delivered_out_of_order_never_replaces_a_later_one() {
    let (_nodes, core) = core_with(5, settings());
    let lease = win(&core, "e", TTL);
    let term = lease.fence().unwrap();
    core.proclaim(&lease, "e", (term, &mut 1), "new").unwrap();
    // The first proclamation, late.
    core.proclaim(&lease, "e", (term, &mut 0), "old").unwrap();
    assert_eq!(
        core.read_leader("e").unwrap(),
        Some((term, Arc::from("new")))
    );
}

#[test]
fn a_proclamation_after_the_leadership_passed_on_is_refused_and_loses_it() {
    let (nodes, core) = core_with(5, settings());
    let old = win(&core, "e", Duration::from_millis(50));
    let old_term = old.fence().unwrap();
    core.proclaim(&old, "e", (old_term, &mut 0), "old").unwrap();
    let [lock, ..] = elect_keys("e");
    super::eventually("the old leadership's keys expired", || {
        nodes.iter().all(|n| n.holder(&lock).is_none())
    });
    let new = win(&core, "e", TTL);
    let new_term = new.fence().unwrap();
    assert!(new_term > old_term, "{new_term} after {old_term}");
    core.proclaim(&new, "e", (new_term, &mut 0), "new").unwrap();
    let late = core.proclaim(&old, "e", (old_term, &mut 1), "late");
    assert!(matches!(late, Err(Error::LockLost { .. })), "{late:?}");
    assert_eq!(
        core.read_leader("e").unwrap(),
        Some((new_term, Arc::from("new")))
    );
}

#[test]
fn a_hand_off_half_done_reads_as_no_leader_then_the_next_one() {
    let (nodes, core) = core_with(5, settings());
    // The old leader's keys linger on two nodes; the next one holds the
    // lock on three and has not proclaimed yet.
    for node in &nodes[..2] {
        seed(node, "e", "old", 5, Some("a"));
    }
    for node in &nodes[2..] {
        seed(node, "e", "new", 6, None);
    }
    assert_eq!(core.read_leader("e").unwrap(), None);
    for node in &nodes[2..] {
        seed(node, "e", "new", 6, Some("b"));
    }
    assert_eq!(core.read_leader("e").unwrap(), Some((6, Arc::from("b"))));
}

#[test]
fn a_resigned_leaders_value_is_gone_and_never_read_as_the_next_ones() {
    let (nodes, core) = core_with(5, settings());
    let lease = win(&core, "e", TTL);
    let term = lease.fence().unwrap();
    core.proclaim(&lease, "e", (term, &mut 0), "a").unwrap();
    core.clear_proclamation(&lease, "e");
    let [_, value_key, _] = elect_keys("e");
    // The round returned at a majority; the others follow.
    super::eventually("the value cleared everywhere", || {
        nodes.iter().all(|n| n.holder(&value_key).is_none())
    });
    assert_eq!(
        core.read_leader("e").unwrap(),
        None,
        "held, nothing proclaimed"
    );
    lease.release(core.nodes()).unwrap();
    // A vanished leader's value stays; the next leader's lock does not
    // make it the next leader's.
    for node in &nodes {
        seed(node, "e", "gone", 9, Some("stale"));
    }
    let [lock, ..] = elect_keys("e");
    for node in &nodes {
        node.put(&lock, "next", TTL);
    }
    assert_eq!(core.read_leader("e").unwrap(), None);
}

#[test]
fn a_proclamation_the_nodes_refuse_marks_the_leadership_lost() {
    let (nodes, core) = core_with(5, settings());
    let old = win(&core, "e", TTL);
    let term = old.fence().unwrap();
    core.proclaim(&old, "e", (term, &mut 0), "old").unwrap();
    // Still valid as far as this client knows, but the nodes moved on (a
    // paused process whose keys expired and were taken).
    for node in &nodes {
        seed(node, "e", "next", term + 1, Some("next"));
    }
    assert!(!old.remaining().is_zero());
    let late = core.proclaim(&old, "e", (term, &mut 1), "late");
    let not_held = |result: &Result<(), Error>| {
        matches!(
            result,
            Err(Error::LockLost {
                cause: LostCause::NotHeld,
                ..
            })
        )
    };
    assert!(not_held(&late), "{late:?}");
    assert!(old.is_lost() && old.remaining().is_zero());
    // Every later call says what the nodes said, not "its validity ran out".
    let later = Err(old.lost_error(core.quorum()));
    assert!(not_held(&later), "{later:?}");
    assert_eq!(
        core.read_leader("e").unwrap(),
        Some((term + 1, Arc::from("next")))
    );
}

/// The observer's reads, counted on every node (a read goes to all).
fn reads(node: &FakeNode) -> usize {
    node.received()
        .iter()
        .filter(|op| **op == crate::transport::Op::ReadLeader)
        .count()
}

/// An observer with a 30 s fallback is woken by each proclamation and by
/// the resignation — only a wake-up can end its wait within the test —
/// and registers only on the election's gate node.
#[test]
fn an_observer_is_woken_by_proclamations_and_the_resignation() {
    let (nodes, cores) = clients(5, 2, &sleeps_30_s());
    let (leader, watcher) = (&cores[0], &cores[1]);
    let [lock, _, observers] = elect_keys("e");
    let gate = leader.nodes().transport().gate_of_name(&lock);
    let deadline = || Some(std::time::Instant::now() + Duration::from_secs(20));
    std::thread::scope(|s| {
        let first = watcher.next_leader("e", None, deadline()).unwrap();
        assert_eq!(first, Some(None), "the first read: nobody leads");
        let observing = s.spawn(|| watcher.next_leader("e", Some(&None), deadline()));
        // The first call's ticket, and this one's.
        eventually("the observer registered on the gate node", || {
            nodes[gate].members(&observers).len() == 2
        });
        for (i, node) in nodes.iter().enumerate().filter(|(i, _)| *i != gate) {
            assert!(
                node.members(&observers).is_empty(),
                "registered on node {i}"
            );
        }
        let lease = win(leader, "e", TTL);
        let term = lease.fence().unwrap();
        leader.proclaim(&lease, "e", (term, &mut 0), "a").unwrap();
        let now = observing.join().unwrap().unwrap().expect("a change");
        assert_eq!(term_and_value(&now), Some((term, Arc::from("a"))));
        let observing = s.spawn(move || watcher.next_leader("e", Some(&now), deadline()));
        // Registered under its new ticket (the first calls' linger).
        eventually("the observer registered again", || {
            nodes[gate].members(&observers).len() == 3
        });
        leader.clear_proclamation(&lease, "e");
        let seen = observing.join().unwrap().unwrap().expect("a change");
        assert_eq!(term_and_value(&seen), None, "resigned: nothing proclaimed");
    });
}

/// A leader that won without the gate node (it missed the lock's `SET`)
/// proclaims on a majority, then resigns; the gate node refuses both but
/// still wakes its observers each time, who read the change at once (with a 30 s
/// fallback, only a wake-up ends the wait within the test). Before, they
/// waited for their next timed read.
#[test]
fn an_observer_is_woken_by_a_proclamation_its_gate_node_missed() {
    let (nodes, cores) = clients(5, 2, &sleeps_30_s());
    let (leader, watcher) = (&cores[0], &cores[1]);
    let [lock, _, observers] = elect_keys("e");
    let gate = leader.nodes().transport().gate_of_name(&lock);
    std::thread::scope(|s| {
        let deadline = Some(std::time::Instant::now() + Duration::from_secs(10));
        let observing = s.spawn(move || watcher.next_leader("e", Some(&None), deadline));
        eventually("the observer registered on the gate node", || {
            nodes[gate].members(&observers).len() == 1
        });
        let lease = win(leader, "e", TTL);
        let term = lease.fence().unwrap();
        // The gate node lost the lock key (as if its SET never landed).
        nodes[gate].put(&lock, "gone", Duration::ZERO);
        leader.proclaim(&lease, "e", (term, &mut 0), "a").unwrap();
        let seen = observing
            .join()
            .unwrap()
            .unwrap()
            .expect("woken by the proclamation");
        assert_eq!(term_and_value(&seen), Some((term, Arc::from("a"))));
        // And by the resignation, which the gate node refuses as well.
        let deadline = Some(std::time::Instant::now() + Duration::from_secs(10));
        let observing = s.spawn(move || watcher.next_leader("e", Some(&seen), deadline));
        eventually("the observer registered again", || {
            nodes[gate].members(&observers).len() == 2
        });
        leader.clear_proclamation(&lease, "e");
        let seen = observing
            .join()
            .unwrap()
            .unwrap()
            .expect("woken by the resignation");
        assert_eq!(term_and_value(&seen), None, "resigned: nothing proclaimed");
    });
}

/// A wake-up published while the subscription was down is lost; when the
/// subscription to the gate node comes back, the observer reads again.
#[test]
fn an_observer_reads_again_when_its_gate_nodes_subscription_comes_back() {
    let (nodes, cores) = clients(5, 1, &sleeps_30_s());
    let watcher = &cores[0];
    let [lock, _, observers] = elect_keys("e");
    let gate = watcher.nodes().transport().gate_of_name(&lock);
    std::thread::scope(|s| {
        let deadline = Some(std::time::Instant::now() + Duration::from_secs(20));
        let observing = s.spawn(move || watcher.next_leader("e", Some(&None), deadline));
        eventually("the observer registered", || {
            nodes[gate].members(&observers).len() == 1
        });
        // A leader appears without any wake-up reaching this client.
        for node in &nodes {
            seed(node, "e", "other", 3, Some("x"));
        }
        crate::transport::Sink::subscribed(&**watcher.nodes().waiters(), gate);
        let seen = observing.join().unwrap().unwrap().expect("a change");
        assert_eq!(term_and_value(&seen), Some((3, Arc::from("x"))));
    });
}

/// A gate node that missed the leader's lock key disagrees with the
/// majority for as long as the leadership lasts: an observer follows that
/// closely once (a change it may have registered too late for), not for as
/// long as it waits, nor again at each call while nothing changes.
#[test]
fn an_observer_whose_gate_node_lags_follows_it_once_not_all_along() {
    let (nodes, cores) = clients(5, 1, &sleeps_30_s());
    let watcher = &cores[0];
    let [lock, ..] = elect_keys("e");
    let gate = watcher.nodes().transport().gate_of_name(&lock);
    for node in nodes.iter().enumerate().filter(|(i, _)| *i != gate) {
        seed(node.1, "e", "other", 3, Some("x"));
    }
    let other = (gate + 1) % nodes.len();
    let now = watcher
        .next_leader("e", None, None)
        .unwrap()
        .expect("the state now");
    assert_eq!(term_and_value(&now), Some((3, Arc::from("x"))));
    // The others answer 10 ms late: the gate node's answer is in before
    // each read's verdict, however busy the machine.
    for node in nodes.iter().enumerate().filter(|(i, _)| *i != gate) {
        node.1.set_delay(Duration::from_millis(10));
    }
    let before = reads(&nodes[other]);
    let mut followed = false;
    for _ in 0..6 {
        let deadline = Some(std::time::Instant::now() + Duration::from_millis(300));
        let next = watcher.next_leader_after("e", Some(&now), deadline, &mut followed);
        assert!(next.unwrap().is_none(), "nothing changed");
    }
    // Reads 5 ms apart (each taking 10 ms) for 200 ms after the first,
    // then none until the 30 s refresh; one read per later call: about 20,
    // fewer under load (following once per call: about 80; all along:
    // about 120).
    let polled = reads(&nodes[other]) - before;
    assert!((6..=30).contains(&polled), "{polled} reads");
}

/// Without release notifications an observer only reads on its timer, and
/// registers nowhere.
#[test]
fn an_observer_without_notifications_registers_nowhere() {
    let quiet = crate::settings::Config {
        notifications: false,
        queue_refresh: Duration::from_millis(20),
        ..settings()
    };
    let (nodes, core) = core_with(5, quiet);
    let [_, _, observers] = elect_keys("e");
    std::thread::scope(|s| {
        let observing = s.spawn(|| core.next_leader("e", Some(&None), None));
        eventually("a few reads", || reads(&nodes[0]) >= 3);
        for node in &nodes {
            seed(node, "e", "other", 3, Some("x"));
        }
        let seen = observing.join().unwrap().unwrap().expect("a change");
        assert_eq!(term_and_value(&seen), Some((3, Arc::from("x"))));
    });
    assert!(nodes.iter().all(|n| n.members(&observers).is_empty()));
}

/// A proclamation whose first round fails for want of nodes (two of three
/// failing for a moment, as on a loaded host) is tried again per the
/// client's retry policy, with a number of its own: the leader keeps its
/// value instead of losing its win.
#[test]
fn a_proclamation_is_tried_again_when_too_few_nodes_answered() {
    let mut retrying = settings();
    retrying.retry_count = 1000;
    let (nodes, core) = core_with(3, retrying);
    let lease = win(&core, "e", TTL);
    let term = lease.fence().expect("fenced");
    for node in &nodes[1..] {
        node.set(crate::transport::fake::Behaviour::Fail(
            crate::error::FailureKind::Timeout,
        ));
    }
    let healer = {
        let nodes = nodes.clone();
        std::thread::spawn(move || {
            for node in &nodes[1..] {
                let proclaimed = |ops: &[crate::transport::Op]| {
                    ops.iter()
                        .any(|op| matches!(op, crate::transport::Op::Proclaim { .. }))
                };
                assert!(node.wait_for(Duration::from_secs(10), proclaimed));
                node.set(crate::transport::fake::Behaviour::Normal);
            }
        })
    };
    let mut seq = 0;
    core.proclaim(&lease, "e", (term, &mut seq), "a").unwrap();
    healer.join().unwrap();
    assert!(
        seq >= 2,
        "tried again, each time with a number of its own: {seq}"
    );
    assert_eq!(core.read_leader("e").unwrap(), Some((term, Arc::from("a"))));
}
