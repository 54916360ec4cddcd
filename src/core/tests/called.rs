//! A waiter its gate node called (its turn came) sends its round to every
//! node at once instead of to the gate node first (one round trip less
//! per hand-off). What must still hold, driven through the
//! fake-node seam: the gate node's refusal (someone queued first after
//! all) outweighs the other nodes' grants, which are handed back; and a
//! gate node that does not answer holds the called waiter no longer than
//! a gated round would.

use std::time::Duration;

use super::{LONG_WAIT, acquisitions, eventually, lock_landed, sleeps_30_s, waiting_acquire};
use super::{asleep, clients, queued, ticket};
use crate::transport::fake::Behaviour;

/// A call that reached the second in line (here: a wake-up for a waiter
/// that is not the head) takes nothing: its round reaches every node at
/// once, the gate node refuses it (the head queued first), and what the
/// others granted is released; it keeps its place.
#[test]
fn a_called_waiter_behind_the_head_hands_back_what_the_others_granted() {
    let (nodes, cores) = clients(5, 3, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let head = waiting_acquire(s, &cores[1]);
        queued(&nodes, &cores[0], 1);
        let second = waiting_acquire(s, &cores[2]);
        let order = queued(&nodes, &cores[0], 2);
        asleep(&cores, 2);
        // The holder's key is gone everywhere but on the gate node.
        let others: Vec<_> = (0..nodes.len()).filter(|i| *i != gate).collect();
        for &i in &others {
            nodes[i].flush();
        }
        // Every earlier round landed (a round returns at its verdict): the
        // holder's, both waiters' first (plain) rounds, and the head's
        // round past the gate node (held there: "held" is one vote).
        eventually("the earlier rounds landed", || {
            others.iter().all(|&i| acquisitions(&nodes[i]) == 4)
        });
        let before = vec![4; others.len()];
        // The gate node answers last (it applies at once): its refusal
        // must be awaited to count.
        nodes[gate].set_delay(Duration::from_millis(100));
        cores[2]
            .nodes()
            .transport()
            .hub()
            .fake_wake(ticket(&order[1]));
        eventually("the called round reached every other node", || {
            others
                .iter()
                .zip(&before)
                .all(|(&i, &n)| acquisitions(&nodes[i]) == n + 1)
        });
        eventually("what they granted handed back", || {
            others.iter().all(|&i| nodes[i].holder("r").is_none())
        });
        assert_eq!(nodes[gate].holder("r").as_deref(), Some(&**held.token()));
        assert_eq!(nodes[gate].queue("r"), order, "both keep their places");
        nodes[gate].set_delay(Duration::ZERO);
        assert!(
            second.try_recv().is_err(),
            "the second in line took nothing"
        );
        // The hand-off goes on in order (the holder's key is on the gate
        // node alone: its release reports the lock lost, and wakes the
        // head there).
        assert!(held.release(cores[0].nodes()).is_err());
        let lease = head.recv_timeout(LONG_WAIT).unwrap().expect("the head");
        lease.release(cores[1].nodes()).unwrap();
        let lease = second
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .expect("then the second");
        lease.release(cores[2].nodes()).unwrap();
    });
}

/// A called waiter whose gate node holds every answer still gets the
/// resource from the others, once the wait for the gate node's vote (the
/// round's per-node timeout, 2 s here) is over: a silent gate node does not
/// stop the hand-off.
#[test]
fn a_called_waiter_does_not_wait_for_a_silent_gate_node() {
    let (nodes, cores) = clients(5, 2, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        let order = queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        nodes[gate].set(Behaviour::Hold);
        // Released on the others; the gate node holds it (and so cannot
        // call the waiter): the call is played here.
        held.release(cores[0].nodes()).unwrap();
        cores[1]
            .nodes()
            .transport()
            .hub()
            .fake_wake(ticket(&order[0]));
        let lease = waits
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .expect("acquired from the others");
        assert!(
            nodes[gate].holder("r").is_some(),
            "the gate node applied nothing yet"
        );
        nodes[gate].set(Behaviour::Normal);
        lease.release(cores[1].nodes()).unwrap();
    });
}
