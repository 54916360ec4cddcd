//! Wake-ups by other clients' releases, driven through the fake-node seam:
//! the orders in which a waiter's rounds, its subscription's
//! acknowledgements and the nodes' notices can arrive.

use std::time::{Duration, Instant};

use super::tests::{LONG_WAIT, core_with, eventually, lock, settings, waiting_acquire};
use super::{Core, Patience};
use crate::settings::Settings;
use crate::transport::Op;
use crate::transport::fake::FakeNode;

/// A waiter that would sleep 30 s between rounds without a wake-up.
fn patient() -> Settings {
    Settings {
        retry_delay: Duration::from_secs(30),
        ..settings()
    }
}

/// Waits until the nodes together have received `count` acquisition
/// requests (a round after a wake-up asks one gate node first).
fn requests_reached(nodes: &[FakeNode], count: usize) {
    let deadline = Instant::now() + LONG_WAIT;
    let sent = || -> usize {
        nodes
            .iter()
            .map(|n| {
                n.received()
                    .iter()
                    .filter(|op| matches!(op, Op::Acquire { .. }))
                    .count()
            })
            .sum()
    };
    while sent() < count {
        assert!(Instant::now() < deadline, "{count} requests never sent");
        std::thread::yield_now();
    }
}

fn held_by_another_client(nodes: &[FakeNode]) {
    for node in nodes {
        node.put("r", "another client", Duration::from_secs(60));
    }
}

#[test]
fn a_release_announced_by_a_majority_of_nodes_wakes_a_waiter() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        eventually("the waiter subscribes after its busy round", || {
            core.transport.hub().watched("r")
        });
        // The subscription reaches a majority: one more round, still busy.
        for index in 0..3 {
            core.transport.hub().fake_ack("r", index);
        }
        requests_reached(&nodes, 6);
        // The other client releases; the nodes announce it.
        for node in &nodes {
            node.remove("r");
        }
        for _ in 0..3 {
            core.transport.hub().fake_notice("r", 77);
        }
        let lease = rx
            .recv_timeout(LONG_WAIT)
            .expect("woken by the notices, not after its 30 s pause")
            .expect("acquired");
        lease.release(core).unwrap();
    });
}

/// The release lands after the waiter's busy round but before its
/// subscription exists: nobody announces it to the waiter. The
/// acknowledgement by a majority must trigger one more round.
#[test]
fn a_release_before_the_subscription_is_caught_by_one_more_round() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        eventually("the waiter subscribes after its busy round", || {
            core.transport.hub().watched("r")
        });
        for node in &nodes {
            node.remove("r"); // unheard: not subscribed yet
        }
        for index in [4, 0] {
            core.transport.hub().fake_ack("r", index);
        }
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "two acknowledgements of five are not a majority"
        );
        core.transport.hub().fake_ack("r", 2);
        let lease = rx
            .recv_timeout(LONG_WAIT)
            .expect("one more round once a majority listens, not a 30 s pause")
            .expect("acquired");
        lease.release(core).unwrap();
    });
}

/// A notice for a release the waiter's round already saw through (one node
/// announced early) must not be lost: copies from the other nodes complete
/// the majority later and wake it then.
#[test]
fn copies_of_a_release_from_slow_nodes_still_wake_a_waiter_that_tried_too_early() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        eventually("subscribed", || core.transport.hub().watched("r"));
        for index in 0..5 {
            core.transport.hub().fake_ack("r", index);
        }
        requests_reached(&nodes, 6);
        // Node 0 has deleted and announced; the others still hold the key.
        nodes[0].remove("r");
        core.transport.hub().fake_notice("r", 5);
        // The others follow.
        for node in &nodes[1..] {
            node.remove("r");
        }
        core.transport.hub().fake_notice("r", 5);
        core.transport.hub().fake_notice("r", 5);
        let lease = rx
            .recv_timeout(LONG_WAIT)
            .expect("woken once a majority announced")
            .expect("acquired");
        lease.release(core).unwrap();
    });
}

fn acquire_timed(core: &Core) -> Duration {
    let started = Instant::now();
    let lease = core
        .acquire(
            &["r"],
            Duration::from_secs(10),
            Patience::until(Some(started + LONG_WAIT)),
        )
        .expect("acquired");
    let took = started.elapsed();
    lease.release(core).unwrap();
    took
}

#[test]
fn a_client_that_released_while_others_listened_lets_them_go_first() {
    let (nodes, core) = core_with(3, settings());
    for node in &nodes {
        node.set_listeners(1);
    }
    lock(&core, "r", Duration::from_secs(10))
        .release(&core)
        .unwrap();
    for node in &nodes {
        node.set_listeners(0);
    }
    // Nobody took it: the next acquisition waited out the hand-on moment
    // (a lower bound: it cannot pass by being slow).
    assert!(acquire_timed(&core) >= super::lease::HAND_ON);
    assert!(
        core.waiters.owed("r").is_none(),
        "owed once, and not after a release nobody else heard"
    );
}

#[test]
fn a_client_that_only_heard_itself_does_not_hold_back() {
    let (nodes, core) = core_with(3, settings());
    for node in &nodes {
        node.set_listeners(1);
    }
    let key = std::sync::Arc::from("r");
    let _watch = core.transport.watch(&key);
    core.transport.hub().fake_ack("r", 1);
    lock(&core, "r", Duration::from_secs(10))
        .release(&core)
        .unwrap();
    assert!(
        core.waiters.owed("r").is_none(),
        "its own subscription only"
    );
    // A second listener: someone else waits.
    for node in &nodes {
        node.set_listeners(2);
    }
    lock(&core, "r", Duration::from_secs(10))
        .release(&core)
        .unwrap();
    assert!(core.waiters.owed("r").is_some());
}

/// Two clients woken by one release: only one gets past the gate node, so
/// the nodes are never split between them; the other asked one node only
/// and waits for the next release.
#[test]
fn clients_woken_together_pass_the_gate_one_at_a_time() {
    let (nodes, first) = core_with(5, patient());
    let second = Core::new(crate::transport::fake::transport_for(&nodes), patient());
    held_by_another_client(&nodes);
    let cores = [&first, &second];
    std::thread::scope(|s| {
        let waiting: Vec<_> = cores
            .iter()
            .map(|core| {
                let core: &Core = core;
                eventually_waiting(s, core)
            })
            .collect();
        for core in cores {
            for index in 0..5 {
                core.transport.hub().fake_ack("r", index);
            }
        }
        // Both clients' extra rounds (refused at the gate) are done.
        requests_reached(&nodes, 5 + 5 + 1 + 1);
        let before: Vec<usize> = nodes.iter().map(acquisitions).collect();
        for node in &nodes {
            node.remove("r");
        }
        for core in cores {
            core.transport.hub().fake_notice("r", 9);
        }
        let (winner, loser) = loop {
            if let Ok(lease) = waiting[0].try_recv() {
                break (lease.expect("acquired"), 1);
            }
            if let Ok(lease) = waiting[1].try_recv() {
                break (lease.expect("acquired"), 0);
            }
            std::thread::yield_now();
        };
        // The loser's round stopped at the gate: every node but one got
        // exactly one more request (the winner's).
        requests_reached(&nodes, before.iter().sum::<usize>() + 5 + 1);
        let after: Vec<usize> = nodes.iter().map(acquisitions).collect();
        let extra: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let mut sorted = extra.clone();
        sorted.sort_unstable();
        assert!(
            sorted == [1, 1, 1, 1, 2],
            "requests per node after the wake: {extra:?}"
        );
        winner.release(cores[1 - loser]).unwrap();
        // The winner's release is local to its client and was not
        // announced here: tell the loser's client as the nodes would.
        cores[loser].transport.hub().fake_notice("r", 10);
        let lease = waiting[loser]
            .recv_timeout(LONG_WAIT)
            .expect("the loser is woken by the winner's release")
            .expect("acquired");
        lease.release(cores[loser]).unwrap();
    });
}

fn acquisitions(node: &FakeNode) -> usize {
    node.received()
        .iter()
        .filter(|op| matches!(op, Op::Acquire { .. }))
        .count()
}

/// `waiting_acquire` for `core`, returned once it has subscribed.
fn eventually_waiting<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    core: &'s Core,
) -> crossbeam_channel::Receiver<Result<super::Lease, crate::error::Error>> {
    let rx = waiting_acquire(s, core);
    eventually("the waiter subscribes", || {
        core.transport.hub().watched("r")
    });
    rx
}
