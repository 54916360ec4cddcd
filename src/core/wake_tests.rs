//! Wake-ups by other clients' releases, driven through the fake-node seam:
//! the orders in which a waiter's rounds, its subscription's
//! acknowledgements and the nodes' notices can arrive.

use std::time::{Duration, Instant};

use super::tests::{
    LONG_WAIT, acquired_and_released, core_with, eventually, lock, settings, waiting_acquire,
};
use super::{Core, Patience};
use crate::settings::Settings;
use crate::transport::Op;
use crate::transport::fake::{Behaviour, FakeNode};

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

/// Waits until the waiter on `core` subscribed, then acknowledges the
/// subscription on every node (the waiter then tries one more round).
fn subscribed_everywhere(core: &Core) {
    eventually("the waiter subscribes after its busy round", || {
        core.transport.hub().watched("r")
    });
    for index in 0..5 {
        core.transport.hub().fake_ack("r", index);
    }
}

fn held_by_another_client(nodes: &[FakeNode]) {
    for node in nodes {
        node.put("r", "another client", Duration::from_secs(60));
    }
}

#[test]
fn a_release_announced_by_the_nodes_wakes_a_waiter() {
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
        for index in 0..3 {
            core.transport.hub().fake_notice("r", 77, index);
        }
        acquired_and_released(&rx, core, "woken by the notices, not after its 30 s pause");
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
        acquired_and_released(
            &rx,
            core,
            "one more round once a majority listens, not a 30 s pause",
        );
    });
}

/// The nodes delete at different times, the gate node last: the first copy
/// wakes the waiter too early (refused at the gate), so does the copy that
/// completes a majority, and the gate node's own copy must wake it again.
#[test]
fn copies_from_slower_nodes_wake_a_waiter_again_until_the_gate_is_free() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    let gate = core.transport.gate_for("r");
    let others: Vec<usize> = (0..5).filter(|&i| i != gate).collect();
    let at_gate = |count: usize| {
        assert!(nodes[gate].wait_for(LONG_WAIT, |ops| {
            ops.iter()
                .filter(|op| matches!(op, Op::Acquire { .. }))
                .count()
                >= count
        }));
    };
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        subscribed_everywhere(core);
        at_gate(2); // the first round, then one more once subscribed
        let hub = core.transport.hub();
        // One node deleted: the first copy wakes the waiter; the gate is
        // still held and refuses.
        nodes[others[0]].remove("r");
        hub.fake_notice("r", 5, others[0]);
        at_gate(3);
        // A majority deleted, the gate still not: woken again, refused again.
        for &index in &others[1..3] {
            nodes[index].remove("r");
            hub.fake_notice("r", 5, index);
        }
        at_gate(4);
        // The gate deletes last (the fifth node never answers).
        nodes[gate].remove("r");
        hub.fake_notice("r", 5, gate);
        acquired_and_released(
            &rx,
            core,
            "woken by the gate node's copy, not after its 30 s pause",
        );
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
        let gate = first.transport.gate_for("r");
        for core in cores {
            core.transport.hub().fake_notice("r", 9, gate);
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
        // announced here: tell the loser's client as the gate node would,
        // once it deleted the key (the release returned at a majority).
        eventually("the gate node deleted the key", || {
            nodes[gate].holder("r").is_none()
        });
        cores[loser].transport.hub().fake_notice("r", 10, gate);
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

/// A holder missing from one node (it restarted empty) makes a woken round
/// "split": the waiter wins that node. It retries quickly at most twice per
/// wake-up, instead of polling the nodes every few milliseconds all along.
#[test]
fn a_holder_missing_from_one_node_is_not_polled_in_a_loop() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    let gate = core.transport.gate_for("r");
    nodes[gate].remove("r"); // the gate passes; the others refuse
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        subscribed_everywhere(core);
        let other = (gate + 1) % 5;
        let asked = || acquisitions(&nodes[other]);
        // The first round, the round once subscribed, and up to two quick
        // retries (a retry counts as split only if the gate node's yes came
        // in before the refusals decided the round).
        eventually("the round once subscribed", || asked() >= 2);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            asked() <= 4,
            "no more rounds until a release or 30 s: {}",
            asked()
        );
        assert!(rx.try_recv().is_err());
        for node in &nodes {
            node.remove("r");
        }
        core.transport.hub().fake_notice("r", 3, gate);
        let lease = rx.recv_timeout(LONG_WAIT).unwrap().expect("acquired");
        lease.release(core).unwrap();
    });
}

/// Losing the gate to another woken client is not a try of the caller's
/// own: a `lock` with few retries keeps waiting through many lost releases.
#[test]
fn lost_gates_do_not_use_up_the_retries() {
    let (nodes, core) = core_with(5, patient());
    held_by_another_client(&nodes);
    let gate = core.transport.gate_for("r");
    std::thread::scope(|s| {
        let core = &core;
        let (tx, rx) = crossbeam_channel::bounded(1);
        s.spawn(move || {
            let acquired = core.acquire(&["r"], Duration::from_secs(10), Patience::attempts(2));
            tx.send(acquired).unwrap();
        });
        subscribed_everywhere(core);
        // Eight releases, each won at once by another client: the gate
        // refuses every woken round.
        for notice in 10..18 {
            let before = acquisitions(&nodes[gate]);
            core.transport.hub().fake_notice("r", notice, gate);
            assert!(nodes[gate].wait_for(LONG_WAIT, |ops| {
                ops.iter()
                    .filter(|op| matches!(op, Op::Acquire { .. }))
                    .count()
                    > before
            }));
        }
        assert!(rx.try_recv().is_err(), "still waiting after 8 lost gates");
        for node in &nodes {
            node.remove("r");
        }
        core.transport.hub().fake_notice("r", 99, gate);
        let lease = rx.recv_timeout(LONG_WAIT).unwrap().expect("acquired");
        lease.release(core).unwrap();
    });
}

/// This client's thread releases "r" while another of its threads waits, the
/// nodes holding every answer; `others` clients listen there. Checks whether
/// the waiter is woken before the release is done (`early`), and that it is
/// woken once it is.
fn local_waiter_during_release(others: u32, early: bool) {
    let (nodes, core) = core_with(3, patient());
    for node in &nodes {
        node.set_listeners(others);
    }
    // An earlier release tells this client whether others listen.
    lock(&core, "r", Duration::from_secs(10))
        .release(&core)
        .unwrap();
    let held = lock(&core, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let core = &core;
        let rx = waiting_acquire(s, core);
        requests_reached(&nodes, 3 * 3);
        eventually("the waiter sleeps after its busy round", || {
            core.transport.hub().watched("r")
        });
        // Its busy round's clean-up (no notice) has reached every node: a
        // held node would otherwise sit on it, ahead of the release.
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| {
                ops.iter()
                    .any(|op| matches!(op, Op::Release { notice: None }))
            }));
        }
        let before = core.waiters.wakes("r");
        for node in &nodes {
            node.set(Behaviour::Hold);
        }
        let releasing = s.spawn(move || held.release(core));
        // The second release with a notice (a clean-up has none).
        let notice = |node: &FakeNode| {
            node.received().iter().rev().find_map(|op| match op {
                Op::Release { notice: Some(n) } => Some(*n),
                _ => None,
            })
        };
        let mut notices = Vec::new();
        for node in &nodes {
            assert!(node.wait_for(LONG_WAIT, |ops| {
                ops.iter()
                    .filter(|op| matches!(op, Op::Release { notice: Some(_) }))
                    .count()
                    == 2
            }));
            notices.push(notice(node).expect("a notice"));
        }
        if early {
            eventually("the own waiter woken while the release is held", || {
                core.waiters.wakes("r") != before
            });
        } else {
            // The nodes announce the release while it is still held: this
            // client's own notice wakes nobody here either.
            for (index, notice) in notices.into_iter().enumerate() {
                core.transport.hub().fake_notice("r", notice, index);
            }
            // A local wake comes straight after the release is queued; give
            // it far longer than it takes.
            let deadline = Instant::now() + Duration::from_millis(200);
            while core.waiters.wakes("r") == before && Instant::now() < deadline {
                std::thread::yield_now();
            }
            assert_eq!(
                core.waiters.wakes("r"),
                before,
                "others listen: the own waiter gets no head start"
            );
        }
        for node in &nodes {
            node.set(Behaviour::Normal);
        }
        releasing.join().unwrap().unwrap();
        acquired_and_released(&rx, core, "woken by the release, not after its 30 s pause");
    });
}

/// Review of S3p (3 processes × 2 threads): a thread of the releasing
/// client, woken at once, reached the nodes ahead of the other clients'
/// waiters, so one process kept the lock among its own threads for runs of
/// up to a dozen holds.
#[test]
fn a_releasing_client_wakes_its_own_waiter_after_the_release_when_others_listen() {
    local_waiter_during_release(1, false);
}

/// Nobody else listens: the local hand-off saves a round trip.
#[test]
fn a_releasing_client_wakes_its_own_waiter_at_once_when_nobody_else_listens() {
    local_waiter_during_release(0, true);
}

/// Whether others listened is the announced count minus this client's own
/// subscription — to any of a multi-resource release's channels.
#[test]
fn this_clients_own_subscription_is_not_another_listener() {
    let (nodes, core) = core_with(3, settings());
    let release = |keys: &[&str]| {
        core.acquire(keys, Duration::from_secs(10), Patience::attempts(0))
            .expect("acquired")
            .release(&core)
            .unwrap();
    };
    let key: std::sync::Arc<str> = "r".into();
    let _watch = core.transport.watch(&key);
    for index in 0..3 {
        core.transport.hub().fake_ack("r", index);
    }
    for node in &nodes {
        node.set_listeners(1);
    }
    release(&["r"]);
    assert!(!core.waiters.remembers_others("r"), "only itself listened");
    release(&["a", "r"]);
    assert!(
        !core.waiters.remembers_others("a"),
        "its subscription to the second resource is its own too"
    );
    for node in &nodes {
        node.set_listeners(2);
    }
    release(&["r"]);
    assert!(
        core.waiters.remembers_others("r"),
        "another client listened"
    );
    for node in &nodes {
        node.set_listeners(1);
    }
    release(&["r"]);
    assert!(
        !core.waiters.remembers_others("r"),
        "forgotten when alone again"
    );
}
