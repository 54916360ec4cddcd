//! Who keeps their turn in the queue of waiters when the nodes disagree: a
//! key left behind on the gate node alone, a head
//! refused by a majority, a lock on several keys, a leave sent while the
//! gate node is slow. Driven through the fake-node seam.

use std::time::{Duration, Instant};

use super::{LONG_WAIT, acquisitions, eventually, lock_landed, sleeps_30_s, waiting_acquire};
use super::{asleep, clients, members, queued, record_wakes};
use crate::cancel::CancelToken;
use crate::core::Patience;
use crate::error::Error;
use crate::settings::Config;
use crate::transport::fake::Behaviour;
use crate::transport::{Op, Sink};

/// Sleeps 30 s between rounds unless woken, but a queued waiter confirms
/// its place every 50 ms.
fn refreshing() -> Config {
    Config {
        queue_refresh: Duration::from_millis(50),
        ..sleeps_30_s()
    }
}

/// The holder's release reached every node but the gate node (it timed
/// out there). That node's "held" is one no among three: the queued waiter
/// gets the resource from the others instead of waiting out the key.
#[test]
fn a_key_left_behind_on_the_gate_node_alone_does_not_stop_the_queue() {
    let (nodes, cores) = clients(3, 2, &refreshing());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let _held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(60));
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        for (index, node) in nodes.iter().enumerate() {
            if index != gate {
                node.put("r", "gone", Duration::ZERO);
            }
        }
        let lease = waits
            .recv_timeout(LONG_WAIT)
            .expect("not held up by the key left on the gate node")
            .expect("acquired");
        assert!(nodes[gate].holder("r").is_some(), "the key left behind");
        lease.release(cores[1].nodes()).unwrap();
    });
}

/// The gate node missed the holder's `SET` (it timed out there): the
/// holder's release finds no key on it. It still wakes the head of the
/// queue, which gets in at once instead of after its refresh (30 s here).
#[test]
fn a_release_on_a_gate_node_that_missed_the_set_still_wakes_the_head() {
    let (nodes, cores) = clients(3, 2, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(60));
    nodes[gate].put("r", "missed", Duration::ZERO);
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        // The gate node let the waiter through (the key is free there) and
        // the others refused: its last round's clean-up, sent without
        // waiting, frees the gate node again before the release comes.
        eventually("the waiter's clean-up ran on the gate node", || {
            nodes[gate].holder("r").is_none()
        });
        held.release(cores[0].nodes()).unwrap();
        let lease = waits
            .recv_timeout(LONG_WAIT)
            .expect("woken by the release, not after 30 s")
            .expect("acquired");
        lease.release(cores[1].nodes()).unwrap();
    });
}

/// The head of the queue is granted by the gate node but refused by a
/// majority (another client holds the resource there). It keeps its turn:
/// it goes back to the head of the queue, and its failed round's clean-up
/// wakes nobody (once, every waiter behind it was woken in turn and the
/// queue emptied).
#[test]
fn a_head_refused_by_a_majority_keeps_its_turn() {
    let (nodes, cores) = clients(3, 1, &refreshing());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let woken = record_wakes(&nodes, &cores);
    for node in &nodes {
        node.put("r", "another client", Duration::from_secs(60));
    }
    std::thread::scope(|s| {
        let core = &cores[0];
        let waits = s.spawn(|| {
            let patience = Patience::until(Some(Instant::now() + Duration::from_secs(1)));
            core.acquire(&["r"], Duration::from_secs(10), patience)
        });
        let order = queued(&nodes, core, 1);
        nodes[gate].enqueue("r", "elsewhere:1");
        // The other client held a majority without the gate node.
        nodes[gate].put("r", "another client", Duration::ZERO);
        let asked = acquisitions(&nodes[gate]);
        eventually("granted there, refused elsewhere, twice", || {
            acquisitions(&nodes[gate]) >= asked + 2
        });
        let expected = [order[0].clone(), "elsewhere:1".to_owned()];
        eventually("the head is back in front", || {
            nodes[gate].queue("r") == expected
        });
        assert!(
            !members(&woken).contains(&"elsewhere:1".to_owned()),
            "nobody behind was woken: {:?}",
            woken.lock()
        );
        assert!(matches!(waits.join().unwrap(), Err(Error::Busy { .. })));
    });
}

/// A lock on several keys waits by retrying and never queues: a queue
/// orders the waiters of one key, and such a waiter at its head blocked
/// every waiter for its first key while another of its keys was held.
#[test]
fn a_lock_on_several_keys_does_not_queue_ahead_of_single_waiters() {
    let (nodes, cores) = clients(3, 2, &refreshing());
    let gate = cores[0].nodes().transport().gate_of_name("a");
    for node in &nodes {
        node.put("a", "x", Duration::from_secs(60));
        node.put("b", "x", Duration::from_secs(60));
    }
    let cancel = CancelToken::new();
    std::thread::scope(|s| {
        let both = s.spawn(|| {
            let patience = Patience {
                cancel: Some(cancel.clone()),
                ..Patience::until(None)
            };
            cores[0].acquire(&["a", "b"], Duration::from_secs(10), patience)
        });
        eventually("its first round", || acquisitions(&nodes[gate]) >= 1);
        let one = s.spawn(|| {
            let patience = Patience::until(Some(Instant::now() + Duration::from_secs(60)));
            cores[1].acquire(&["a"], Duration::from_secs(10), patience)
        });
        let single = format!("{}:", cores[1].nodes().transport().client_id());
        eventually("only the single waiter queued", || {
            let queue = nodes[gate].queue("a");
            queue.len() == 1 && queue[0].starts_with(&single)
        });
        for node in &nodes {
            node.put("a", "x", Duration::ZERO);
        }
        let lease = one.join().unwrap().expect("\"a\" for the single waiter");
        lease.release(cores[1].nodes()).unwrap();
        cancel.cancel();
        assert!(matches!(both.join().unwrap(), Err(Error::Cancelled { .. })));
    });
}

/// A waiter that won without the gate node (its connection was busy)
/// leaves the queue there once the connection is free again: the leave
/// once expired after 10 ms behind the busy connection and was dropped, and
/// the winner stayed at the head, holding up the queue for 2 s.
#[test]
fn a_leave_waits_for_a_busy_gate_node() {
    let (nodes, cores) = clients(3, 1, &refreshing());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    for node in &nodes {
        node.put("r", "x", Duration::from_secs(60));
    }
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[0]);
        queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        // The gate node takes requests but answers none for now.
        nodes[gate].set(Behaviour::Hold);
        for node in &nodes {
            node.put("r", "x", Duration::ZERO);
        }
        let lease = waits.recv_timeout(LONG_WAIT).unwrap().expect("acquired");
        // The connection stays busy for a while (the scenario, not a
        // synchronisation): longer than the leave's old 10 ms.
        std::thread::sleep(Duration::from_millis(50));
        nodes[gate].set(Behaviour::Normal);
        assert!(
            nodes[gate].wait_for(LONG_WAIT, |ops| ops.contains(&Op::Leave)),
            "the leave reached the gate node"
        );
        lease.release(cores[0].nodes()).unwrap();
    });
}

/// A queued waiter that others queued before finds the resource free, and
/// its proposed fencing token is stale on the gate node alone (the gate
/// node saw a grant the others did not). The gate node says "others queued
/// first", not "stale": were it to answer only "stale", the round would go
/// on to the other nodes, which grant the token, and the waiter would take
/// the resource ahead of the head of the queue.
#[test]
fn a_stale_token_does_not_let_a_waiter_past_the_head_of_the_queue() {
    let settings = Config {
        fencing: true,
        fencing_floor: false,
        ..refreshing()
    };
    let (nodes, cores) = clients(3, 1, &settings);
    let gate = cores[0].nodes().transport().gate_of_name("r");
    for node in &nodes {
        node.put("r", "another client", Duration::from_secs(60));
    }
    nodes[gate].enqueue("r", "elsewhere:1");
    let core = &cores[0];
    std::thread::scope(|s| {
        let waits = s.spawn(|| {
            let patience = Patience::until(Some(Instant::now() + Duration::from_millis(600)));
            core.acquire(&["r"], Duration::from_secs(10), patience)
        });
        queued(&nodes, core, 2);
        nodes[gate].put(
            &crate::transport::fence_key("r"),
            "100",
            Duration::from_secs(60),
        );
        for node in &nodes {
            node.put("r", "gone", Duration::ZERO);
        }
        let err = waits
            .join()
            .unwrap()
            .expect_err("the head of the queue goes first");
        assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    });
    assert!(nodes.iter().all(|n| n.holder("r").is_none()), "nothing set");
}

/// A queued waiter behind the head asks the gate node first, and the gate
/// node is slower than its usual round trips: the round goes on to the
/// others, which find the resource free and grant it. The gate node's
/// "others queued first", when it comes within the round's time, still
/// outweighs them: the waiter does not take the resource ahead of the head.
/// (Seen in a loaded run: a rw-lock writer that queued second wrote first,
/// its round's gate node answering after the gate wait.)
#[test]
fn a_gate_nodes_late_others_first_still_outweighs_the_others() {
    let (nodes, cores) = clients(3, 1, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    for node in &nodes {
        node.put("r", "another client", Duration::from_secs(60));
    }
    nodes[gate].enqueue("r", "elsewhere:1");
    let core = &cores[0];
    std::thread::scope(|s| {
        let waits = s.spawn(|| {
            let patience = Patience::until(Some(Instant::now() + Duration::from_millis(1500)));
            core.acquire(&["r"], Duration::from_secs(10), patience)
        });
        queued(&nodes, core, 2);
        asleep(&cores, 1);
        // Slower than the gate wait (at most a quarter of the 2 s node
        // timeout), well within the round's time. The delay holds up every
        // batch the gate node gets, the failed round's clean-up too: the
        // waiter makes one round now and one at its deadline (it sleeps
        // 30 s between rounds), and each answer comes at least 1 s before
        // its round's deadline.
        nodes[gate].set_delay(Duration::from_millis(800));
        for node in &nodes {
            node.put("r", "gone", Duration::ZERO);
        }
        // Its subscription to the gate node came back: one more round.
        core.nodes().waiters().subscribed(gate);
        let err = waits
            .join()
            .unwrap()
            .expect_err("the head of the queue goes first");
        assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    });
    nodes[gate].set_delay(Duration::ZERO);
    assert_eq!(nodes[gate].queue("r")[0], "elsewhere:1", "still the head");
}
