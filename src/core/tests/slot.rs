//! Semaphore rounds through the fake-node seam: which slot a round tries
//! after a busy one, when a pass ends, and that a release of any slot
//! wakes the semaphore's first waiter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LONG_WAIT, acquisitions, settings, sleeps_30_s};
use super::{asleep, clients};
use crate::core::acquire::Target;
use crate::core::{Core, Lease, Patience};
use crate::error::{Error, FailureKind};
use crate::transport::fake::{Behaviour, FakeNode};
use crate::transport::{Op, slot_key};

const TTL: Duration = Duration::from_secs(10);

fn permit(core: &Core, permits: u32, patience: Patience) -> Result<Arc<Lease>, Error> {
    let name = Arc::from("s");
    let target = Target::Semaphore { name, permits };
    core.acquire_target(target, TTL, patience)
}

/// Waits until every node holds every one of `leases`' keys: an
/// acquisition returns at a quorum, and a gate node that has not applied
/// the holder's `SET` yet grants a waiter a slot the others refuse, and
/// hears no release for it.
fn landed(nodes: &[FakeNode], leases: &[&Lease]) {
    super::eventually("the permits held on every node", || {
        nodes
            .iter()
            .all(|n| leases.iter().all(|l| n.holder(l.resource()).is_some()))
    });
}

/// The rounds every node received once all have landed (a round returns
/// at a quorum, with requests to the other nodes possibly still on their
/// way): call it after the acquisition returned, when no round follows.
fn rounds(nodes: &[FakeNode]) -> usize {
    let landed = || {
        let counts: Vec<usize> = nodes.iter().map(acquisitions).collect();
        counts.iter().all(|&c| c == counts[0] && c > 0)
    };
    super::eventually("every round's requests landed", landed);
    acquisitions(&nodes[0])
}

/// Another client holds `slots` of "s" on `nodes`.
fn hold(nodes: &[FakeNode], slots: &[u32]) {
    for node in nodes {
        for slot in slots {
            node.put(&slot_key("s", *slot), &format!("other-{slot}"), TTL);
        }
    }
}

#[test]
fn a_busy_round_goes_on_to_the_slot_the_nodes_report_free() {
    for _ in 0..20 {
        let (nodes, cores) = clients(3, 1, &settings());
        hold(&nodes, &[0, 1, 3, 4, 5, 6, 7]);
        let lease = permit(&cores[0], 8, Patience::attempts(0)).expect("slot 2 is free");
        assert_eq!(lease.resource(), slot_key("s", 2));
        // The first round's slot, at random; if busy, slot 2 at once.
        let rounds = rounds(&nodes);
        assert!((1..=2).contains(&rounds), "{rounds} rounds");
    }
}

#[test]
fn a_pass_ends_when_no_slot_can_be_free_on_a_majority() {
    let (nodes, cores) = clients(3, 1, &settings());
    // Every slot held on two of three nodes: none can have a majority.
    hold(&nodes[..2], &[0, 1, 2, 3]);
    let err = permit(&cores[0], 4, Patience::attempts(0)).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    // One round: its reports rule out every slot.
    assert_eq!(rounds(&nodes), 1);
}

/// Too few nodes answer, and those that do grant the slot: every other
/// slot would fail alike, so the pass ends after one round instead of a
/// round (a node timeout, when nodes are stalled) per slot.
#[test]
fn a_round_short_of_nodes_alone_does_not_walk_the_slots() {
    let (nodes, cores) = clients(3, 1, &settings());
    for node in &nodes[1..] {
        node.set(Behaviour::Fail(FailureKind::Connection));
    }
    let err = permit(&cores[0], 8, Patience::attempts(0)).unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    assert_eq!(rounds(&nodes), 1, "one round");
}

/// A node refused the slot while another failed: the slot is held there,
/// and the next slot may be free on enough nodes.
#[test]
fn a_round_short_of_nodes_where_one_refused_walks_on() {
    let (nodes, cores) = clients(3, 1, &settings());
    nodes[2].set(Behaviour::Fail(FailureKind::Connection));
    hold(&nodes[1..2], &[0, 1, 2, 4, 5, 6, 7]);
    let lease = permit(&cores[0], 8, Patience::attempts(0)).expect("slot 3 is free on two");
    assert_eq!(lease.resource(), slot_key("s", 3));
}

#[test]
fn a_slot_held_on_a_minority_is_still_taken() {
    let (nodes, cores) = clients(3, 1, &settings());
    // Left behind on one node (a release that timed out there).
    hold(&nodes[..1], &[0, 1]);
    let lease = permit(&cores[0], 2, Patience::attempts(0)).expect("free on a majority");
    assert!(lease.resource().starts_with("redlock-sem:s#"));
}

/// Two holders of both permits in one client, a waiter in another: the
/// release of either slot wakes the waiter (its retry pause is 30 s).
#[test]
fn the_release_of_any_slot_wakes_the_first_waiter() {
    for released in 0..2 {
        let (nodes, cores) = clients(3, 2, &sleeps_30_s());
        let mut held = [
            permit(&cores[0], 2, Patience::attempts(0)).unwrap(),
            permit(&cores[0], 2, Patience::attempts(0)).unwrap(),
        ];
        // Slot 0 first: each run releases another slot.
        held.sort_by_key(|lease| lease.resource().to_owned());
        landed(&nodes, &[&held[0], &held[1]]);
        assert_eq!(held[0].resource(), slot_key("s", 0));
        let gate = &nodes[cores[0].nodes().transport().gate_of_name("redlock-sem:s")];
        std::thread::scope(|s| {
            let waiter = &cores[1];
            let (tx, rx) = crossbeam_channel::bounded(1);
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                tx.send(permit(waiter, 2, Patience::until(Some(deadline))))
                    .unwrap();
            });
            super::eventually("the waiter is queued", || {
                gate.queue("redlock-sem:s").len() == 1
            });
            asleep(&cores[1..], 1);
            let [first, second] = &held;
            let (release, keep) = if released == 0 {
                (first, second)
            } else {
                (second, first)
            };
            release.release(cores[0].nodes()).unwrap();
            let lease = rx
                .recv_timeout(LONG_WAIT)
                .expect("woken by the release, not its 30 s pause")
                .expect("a permit");
            assert_eq!(lease.resource(), release.resource(), "the freed slot");
            assert_ne!(lease.resource(), keep.resource());
            assert!(gate.queue("redlock-sem:s").is_empty(), "left the queue");
        });
    }
}

/// Both permits come free while two waiters in other clients sleep (their
/// retry pause is 30 s), but only one release is heard: the other holder's
/// slot expired. The first waiter's grant, which leaves a slot free, wakes
/// the second.
#[test]
fn a_grant_that_leaves_a_permit_free_wakes_the_next_waiter() {
    let (nodes, cores) = clients(3, 3, &sleeps_30_s());
    let held = [
        permit(&cores[0], 2, Patience::attempts(0)).unwrap(),
        permit(&cores[0], 2, Patience::attempts(0)).unwrap(),
    ];
    landed(&nodes, &[&held[0], &held[1]]);
    let gate = &nodes[cores[0].nodes().transport().gate_of_name("redlock-sem:s")];
    std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::unbounded();
        for waiter in &cores[1..] {
            let tx = tx.clone();
            // Counted before the waiter starts: counted after, a waiter
            // that queued first made the test wait for one more, forever
            // (seen under load).
            let queued = gate.queue("redlock-sem:s").len() + 1;
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                tx.send(permit(waiter, 2, Patience::until(Some(deadline))))
                    .unwrap();
            });
            super::eventually("the waiter is queued", || {
                gate.queue("redlock-sem:s").len() == queued
            });
        }
        asleep(&cores[1..], 2);
        let [kept, released] = held;
        for node in &nodes {
            node.put(kept.resource(), "expired", Duration::ZERO);
        }
        released.release(cores[0].nodes()).unwrap();
        let mut slots: Vec<String> = (0..2)
            .map(|_| {
                rx.recv_timeout(LONG_WAIT)
                    .expect("woken, not after the 30 s pause")
                    .expect("a permit")
                    .resource()
                    .to_owned()
            })
            .collect();
        slots.sort();
        assert_eq!(slots, [slot_key("s", 0), slot_key("s", 1)]);
    });
}

/// A woken waiter walks the slots, one round each, while the gate node
/// says "held" and one other node answers (the third is stalled: a
/// verdict needs two). A slot it already tried comes free during the
/// round on the second slot, and the gate node's wake-up arrives then; the
/// round on the third slot fails and the pass ends. The wake-up must still
/// end the waiter's next sleep at once (its retry pause is 30 s): the
/// rounds after it looked at other slots, not at the one that came free.
#[test]
fn a_wake_up_during_a_pass_over_the_slots_is_kept_for_the_next_wait() {
    let (nodes, cores) = clients(3, 2, &sleeps_30_s());
    hold(&nodes, &[0, 1, 2]);
    let gate_index = cores[0].nodes().transport().gate_of_name("redlock-sem:s");
    let gate = &nodes[gate_index];
    let stalled = &nodes[(gate_index + 1) % 3];
    let waiter = &cores[1];
    let rounds_at_gate = || gate.acquired_keys().len();
    std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::bounded(1);
        s.spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            tx.send(permit(waiter, 3, Patience::until(Some(deadline))))
                .unwrap();
        });
        super::eventually("the waiter is queued", || {
            gate.queue("redlock-sem:s").len() == 1
        });
        asleep(&cores[1..], 1);
        let id = super::ticket(&gate.queue("redlock-sem:s")[0]);
        // Each busy round is followed by its clean-up: let them land, or
        // one held at the gate node would hold the rounds behind it.
        super::eventually("the clean-ups landed", || {
            let ops = gate.received();
            let releases = ops
                .iter()
                .filter(|op| matches!(op, Op::Release { .. }))
                .count();
            releases == rounds_at_gate()
        });
        stalled.set(Behaviour::Hold);
        // Woken while every slot is held: its round on a first slot waits
        // at the gate node, then one on a second.
        gate.set(Behaviour::Hold);
        let before = rounds_at_gate();
        waiter.nodes().transport().hub().fake_wake(id);
        super::eventually("the first round", || rounds_at_gate() == before + 1);
        let first = gate.acquired_keys()[before].clone();
        gate.hold_next_acquisition();
        gate.set(Behaviour::Normal);
        super::eventually("the second round", || rounds_at_gate() == before + 2);
        let second = gate.acquired_keys()[before + 1].clone();
        assert_ne!(first, second, "the pass tries each slot once");
        // The first slot comes free everywhere, and the gate node says so.
        for node in &nodes {
            node.put(&first, "expired", Duration::ZERO);
        }
        waiter.nodes().transport().hub().fake_wake(id);
        gate.set(Behaviour::Normal);
        let lease = rx.recv_timeout(LONG_WAIT);
        stalled.set(Behaviour::Normal);
        let lease = lease
            .expect("woken, not after the 30 s pause")
            .expect("a permit");
        assert_eq!(lease.resource(), first, "the slot that came free");
        let walked = &gate.acquired_keys()[before..];
        assert!(walked.len() >= 4, "a third slot tried: {walked:?}");
    });
}
