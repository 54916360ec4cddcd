//! The queue of waiters on a resource's gate node, driven through the
//! fake-node seam: who is woken by a release, a failed round and a waiter
//! that gives up, and who the gate node lets in.

use std::time::{Duration, Instant};

use super::{
    LONG_WAIT, acquisitions, eventually, lock, lock_landed, sleeps_30_s, waiting_acquire, wire,
};
use crate::core::{Core, Patience};
use crate::error::Error;
use crate::settings::Config;
use crate::transport::Op;
use crate::transport::fake::{self, FakeNode};

use super::*;

/// No herd: one release wakes one waiter, the first queued, however many
/// wait.
#[test]
fn a_release_wakes_only_the_head_of_the_queue() {
    const WAITERS: usize = 6;
    let (nodes, cores) = clients(3, WAITERS + 1, &sleeps_30_s());
    let woken = record_wakes(&nodes, &cores);
    let holder = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let mut waits = Vec::new();
        for (index, core) in cores[1..].iter().enumerate() {
            waits.push((waiting_acquire(s, core), core));
            // Queued one after the other: a known order.
            queued(&nodes, &cores[0], index + 1);
        }
        let order = queued(&nodes, &cores[0], WAITERS);
        asleep(&cores, WAITERS);
        holder.release(cores[0].nodes()).unwrap();
        eventually("the release woke a waiter", || !woken.lock().is_empty());
        assert_eq!(members(&woken)[0], order[0], "the head");
        let (head, core) = &waits[0];
        let lease = head
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .expect("the head acquired");
        assert_eq!(woken.lock().len(), 1, "one wake-up: {:?}", woken.lock());
        lease.release(core.nodes()).unwrap();
        // Every waiter gets its turn, each release waking one (a round that
        // found a node still holding the key hands on once more).
        let mut releases = 2;
        let mut pending: Vec<_> = waits[1..].iter().collect();
        while !pending.is_empty() {
            let mut select = crossbeam_channel::Select::new();
            for (rx, _) in &pending {
                select.recv(rx);
            }
            let ready = select
                .select_timeout(LONG_WAIT)
                .expect("every waiter in turn");
            let index = ready.index();
            let (rx, core) = pending.remove(index);
            let lease = ready.recv(rx).unwrap().expect("acquired");
            lease.release(core.nodes()).unwrap();
            releases += 1;
        }
        let wakes = woken.lock().len();
        assert!(
            wakes <= 2 * releases,
            "{wakes} wake-ups for {releases} releases: a herd"
        );
    });
}

/// Finding 6: a waiter refused at the gate slept its whole retry delay when
/// the winner's round then failed (the clean-up announced nothing). Now
/// the clean-up deletes the winner's key on the gate node, which wakes the
/// next waiter.
#[test]
fn a_winner_whose_round_fails_hands_the_resource_on() {
    let (nodes, transport) = fake::cluster(3);
    // A fences (its grants' answers will be lost); B does not. A's failed round
    // leaves its turn to B and A rejoins the queue at its next round, which
    // it makes after its refresh pause.
    let a = Core::new(
        transport,
        Config {
            fencing: true,
            queue_refresh: Duration::from_millis(100),
            ..sleeps_30_s()
        },
    );
    let b = Core::new(fake::transport_for(&nodes), sleeps_30_s());
    let holder = Core::new(fake::transport_for(&nodes), sleeps_30_s());
    let cores = [a.clone(), b.clone(), holder.clone()];
    wire(&nodes, &cores.iter().collect::<Vec<_>>());
    let woken = record_wakes(&nodes, &cores);
    let held = lock_landed(&holder, &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        // A keeps trying (it does not leave the queue, which would also
        // wake B): only its failed round's clean-up can wake B.
        let a_wait = waiting_acquire(s, &a);
        queued(&nodes, &a, 1);
        let b_wait = waiting_acquire(s, &b);
        let order = queued(&nodes, &a, 2);
        asleep(&cores, 2);
        // The answers to A's grants will be lost on two of three nodes.
        for node in &nodes[..2] {
            node.lose_fenced_grants(true);
        }
        held.release(holder.nodes()).unwrap();
        let lease = b_wait
            .recv_timeout(LONG_WAIT)
            .expect("B acquired")
            .expect("B acquired");
        let woken: Vec<_> = woken.lock().iter().take(2).cloned().collect();
        assert_eq!(
            woken,
            [
                (order[0].clone(), Op::Release { held: true }),
                (order[1].clone(), Op::Release { held: false })
            ],
            "A woken by the lease's release, then B by A's failed round's clean-up"
        );
        for node in &nodes[..2] {
            node.lose_fenced_grants(false);
        }
        lease.release(b.nodes()).unwrap();
        let lease = a_wait
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .expect("A in the end");
        lease.release(a.nodes()).unwrap();
    });
}

/// A waiter that gives up leaves the queue: the next release wakes the
/// waiter behind it instead of a member nobody answers for.
#[test]
fn a_waiter_that_gives_up_leaves_the_queue() {
    let (nodes, cores) = clients(3, 3, &sleeps_30_s());
    let woken = record_wakes(&nodes, &cores);
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    let token = crate::cancel::CancelToken::new();
    std::thread::scope(|s| {
        let gives_up = s.spawn(|| {
            let patience = Patience {
                cancel: Some(token.clone()),
                ..Patience::until(None)
            };
            cores[1].acquire(&["r"], Duration::from_secs(10), patience)
        });
        queued(&nodes, &cores[0], 1);
        let stays = waiting_acquire(s, &cores[2]);
        let order = queued(&nodes, &cores[0], 2);
        asleep(&cores, 2);
        token.cancel();
        assert!(matches!(
            gives_up.join().unwrap(),
            Err(Error::Cancelled { .. })
        ));
        assert_eq!(queued(&nodes, &cores[0], 1), order[1..]);
        held.release(cores[0].nodes()).unwrap();
        let lease = stays.recv_timeout(LONG_WAIT).unwrap().unwrap();
        assert_eq!(members(&woken), order[1..], "the one still waiting");
        lease.release(cores[2].nodes()).unwrap();
    });
}

/// A first round is a plain `SET NX`: a newcomer can take a resource that
/// is free at that moment ahead of the queue, but the waiter whose turn it
/// was keeps its place and is woken by the newcomer's release.
#[test]
fn a_waiter_whose_turn_a_newcomer_took_keeps_its_place() {
    let (nodes, cores) = clients(3, 3, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        let order = queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        // Its wake-up is on its way when the newcomer comes.
        nodes[gate].on_wake(|_, _| {});
        held.release(cores[0].nodes()).unwrap();
        eventually("released everywhere", || {
            nodes.iter().all(|n| n.holder("r").is_none())
        });
        let newcomer = lock_landed(&cores[2], &nodes, "r", Duration::from_secs(10));
        // The waiter's next round (here: woken by hand, as by its refresh
        // pause) is refused at the gate node, and it keeps its place.
        let asked = acquisitions(&nodes[gate]);
        cores[1]
            .nodes()
            .transport()
            .hub()
            .fake_wake(ticket(&order[0]));
        eventually("the waiter's next round", || {
            acquisitions(&nodes[gate]) > asked
        });
        // And its end: the head that the gate node told "held" asks the
        // other nodes too, and a release landing there first would let
        // it win without a wake-up.
        asleep(&cores, 1);
        assert_eq!(nodes[gate].queue("r"), order, "still first");
        let woken = record_wakes(&nodes, &cores);
        newcomer.release(cores[2].nodes()).unwrap();
        let lease = waits.recv_timeout(LONG_WAIT).unwrap().expect("its turn");
        assert_eq!(members(&woken), order, "woken by the newcomer's release");
        lease.release(cores[1].nodes()).unwrap();
    });
}

/// `core` holds `r` and releases it while another client's waiter is
/// queued at the gate node, so the release wakes that waiter (its wake-up
/// goes elsewhere). Returns what counts the acquisitions each node but the
/// gate saw, once each saw the first round's.
fn released_waking_another<'a>(core: &Core, nodes: &'a [FakeNode]) -> impl Fn() -> Vec<usize> + 'a {
    let gate = core.nodes().transport().gate_of_name("r");
    let held = lock_landed(core, nodes, "r", Duration::from_secs(10));
    nodes[gate].enqueue("r", "elsewhere:1");
    nodes[gate].on_wake(|_, _| {});
    held.release(core.nodes()).unwrap();
    let others: Vec<usize> = (0..nodes.len()).filter(|&i| i != gate).collect();
    let asked = move || -> Vec<usize> { others.iter().map(|&i| acquisitions(&nodes[i])).collect() };
    // The first lock's round was decided at two answers: its last request
    // may still be on its way.
    eventually("every node saw the first round", || {
        asked().iter().all(|&n| n == 1)
    });
    asked
}

/// A client whose release woke a waiter asks the gate node first on its
/// next acquisition: refused there, it sends nothing to the other nodes,
/// where its `SET`s would get in the woken waiter's way.
#[test]
fn a_client_whose_release_woke_a_waiter_queues_behind_it() {
    let (nodes, cores) = clients(3, 1, &sleeps_30_s());
    let core = &cores[0];
    let asked = released_waking_another(core, &nodes);
    let before = asked();
    let again = core.acquire(&["r"], Duration::from_secs(10), Patience::attempts(0));
    assert!(matches!(again, Err(Error::Busy { .. })), "{again:?}");
    assert_eq!(before, asked(), "nothing sent past the gate node");
    // Once: the next acquisition is an ordinary round again.
    let _ = core.acquire(&["r"], Duration::from_secs(10), Patience::attempts(0));
    assert_ne!(before, asked());
}

/// A call cancelled before it starts leaves the turn to queue behind for
/// the next acquisition: it returns before asking whether to take it.
#[test]
fn a_call_cancelled_before_it_starts_keeps_the_turn_to_queue_behind() {
    let (nodes, cores) = clients(3, 1, &sleeps_30_s());
    let core = &cores[0];
    let asked = released_waking_another(core, &nodes);
    let token = crate::cancel::CancelToken::new();
    token.cancel();
    let patience = Patience {
        cancel: Some(token),
        ..Patience::attempts(0)
    };
    let cancelled = core.acquire(&["r"], Duration::from_secs(10), patience);
    assert!(
        matches!(cancelled, Err(Error::Cancelled { .. })),
        "{cancelled:?}"
    );
    let before = asked();
    let again = core.acquire(&["r"], Duration::from_secs(10), Patience::attempts(0));
    assert!(matches!(again, Err(Error::Busy { .. })), "{again:?}");
    assert_eq!(
        before,
        asked(),
        "still queued behind: nothing past the gate node"
    );
}

/// A caller whose very first round went to the gate node (it let the
/// waiters go first) and was queued there listens for its turn like any
/// other waiter, rather than sleeping its retry delay every time.
#[test]
fn a_caller_queued_by_its_first_round_listens_for_its_turn() {
    let (nodes, cores) = clients(3, 1, &sleeps_30_s());
    let core = &cores[0];
    let gate = core.nodes().transport().gate_of_name("r");
    let held = lock_landed(core, &nodes, "r", Duration::from_secs(10));
    nodes[gate].enqueue("r", "elsewhere:1");
    nodes[gate].on_wake(|_, _| {});
    held.release(core.nodes()).unwrap();
    std::thread::scope(|s| {
        let waits = s.spawn(|| {
            let patience = Patience::until(Some(Instant::now() + Duration::from_secs(2)));
            core.acquire(&["r"], Duration::from_secs(10), patience)
        });
        eventually("queued behind the other waiter", || {
            nodes[gate].queue("r").len() == 2
        });
        eventually("listening", || core.nodes().transport().hub().watched());
        assert!(matches!(waits.join().unwrap(), Err(Error::Busy { .. })));
    });
}

/// Finding 7 by construction: no listener counts and no echoes of a
/// client's own releases. Releases nobody waits for wake nobody, however
/// many, and a client's own waiter on another resource sleeps through them.
#[test]
fn releases_nobody_waits_for_wake_nobody() {
    let (nodes, cores) = clients(3, 1, &sleeps_30_s());
    let woken = record_wakes(&nodes, &cores);
    for node in &nodes {
        node.put("other", "someone else", Duration::from_secs(60));
    }
    std::thread::scope(|s| {
        let core = &cores[0];
        let (tx, rx) = crossbeam_channel::bounded(1);
        s.spawn(move || {
            let patience = Patience::until(Some(Instant::now() + Duration::from_millis(300)));
            let _ = tx.send(core.acquire(&["other"], Duration::from_secs(10), patience));
        });
        let gate = &nodes[core.nodes().transport().gate_of_name("other")];
        eventually("the other waiter queued", || gate.queue("other").len() == 1);
        // The waiter's rounds, counted by their key (the 100 locks below
        // return at a majority: the gate node may not have had each yet,
        // and counting them made this underflow once).
        let waiters_rounds = || {
            gate.acquired_keys()
                .iter()
                .filter(|key| *key == "other")
                .count()
        };
        let before = waiters_rounds();
        for _ in 0..100 {
            lock(core, "r", Duration::from_secs(10))
                .release(core.nodes())
                .unwrap();
        }
        assert!(woken.lock().is_empty(), "{:?}", woken.lock());
        // The waiter slept through them to its deadline: one last round.
        let result = rx.recv_timeout(LONG_WAIT).unwrap();
        assert!(matches!(result, Err(Error::Busy { .. })), "{result:?}");
        let rounds = waiters_rounds() - before;
        assert!(rounds <= 1, "the waiter made {rounds} rounds");
    });
}

/// A wake-up published while this client's subscriber on the gate node was
/// not subscribed (first wait, reconnect) is lost; when the subscription
/// comes (back), the waiters that node gates try one more round.
#[test]
fn a_wake_up_lost_before_the_subscription_is_caught_when_it_comes() {
    let (nodes, cores) = clients(3, 2, &sleeps_30_s());
    let gate = cores[0].nodes().transport().gate_of_name("r");
    nodes[gate].on_wake(|_, _| {}); // lost
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        held.release(cores[0].nodes()).unwrap();
        assert!(waits.recv_timeout(Duration::from_millis(50)).is_err());
        cores[1].nodes().transport().hub().fake_subscribed(gate);
        let lease = waits
            .recv_timeout(LONG_WAIT)
            .expect("one more round when the subscription came")
            .expect("acquired");
        lease.release(cores[1].nodes()).unwrap();
    });
}

/// A gate node that keeps a key the other nodes do not (a release that
/// timed out there, a late `SET`) does not stop a lease's release from
/// waking the head: the waiter must not sleep to its timer (30 s here)
/// while a majority is free. The head, told "held" there as the first in
/// line, takes the other two.
#[test]
fn a_release_wakes_the_head_although_the_gate_node_keeps_a_stray_key() {
    let (nodes, cores) = clients(3, 2, &sleeps_30_s());
    let woken = record_wakes(&nodes, &cores);
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    let gate = &nodes[cores[0].nodes().transport().gate_of_name("r")];
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        let order = queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        gate.put("r", "a stray key", Duration::from_secs(60));
        held.release(cores[0].nodes()).unwrap();
        let lease = waits
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .expect("woken by the release, not the 30 s timer");
        assert_eq!(members(&woken), order);
        lease.release(cores[1].nodes()).unwrap();
    });
}

/// The other side of the rule: a failed round's clean-up wakes the head
/// only where the key is free on the gate node. A caller that never held
/// the resource, refused at every try, must not wake the waiter each time.
#[test]
fn a_failed_rounds_clean_up_wakes_nobody_while_the_key_is_held() {
    let (nodes, cores) = clients(3, 3, &sleeps_30_s());
    let woken = record_wakes(&nodes, &cores);
    let held = lock_landed(&cores[0], &nodes, "r", Duration::from_secs(10));
    let gate = &nodes[cores[0].nodes().transport().gate_of_name("r")];
    std::thread::scope(|s| {
        let waits = waiting_acquire(s, &cores[1]);
        queued(&nodes, &cores[0], 1);
        asleep(&cores, 1);
        let releases = || {
            gate.received()
                .iter()
                .filter(|op| matches!(op, Op::Release { .. }))
                .count()
        };
        let before = releases();
        for _ in 0..5 {
            let tried = cores[2].acquire(&["r"], Duration::from_secs(10), Patience::attempts(0));
            assert!(matches!(tried, Err(Error::Busy { .. })), "{tried:?}");
        }
        eventually("the clean-ups reached the gate node", || {
            releases() >= before + 5
        });
        assert!(woken.lock().is_empty(), "{:?}", woken.lock());
        held.release(cores[0].nodes()).unwrap();
        waits
            .recv_timeout(LONG_WAIT)
            .unwrap()
            .unwrap()
            .release(cores[1].nodes())
            .unwrap();
    });
}
