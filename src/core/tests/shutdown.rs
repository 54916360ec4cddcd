//! A shutdown and the calls under way, ordered through the fake-node seam.

use std::time::Duration;

use super::{LONG_WAIT, core_with, eventually, lock, settings};
use crate::core::Patience;
use crate::error::Error;
use crate::transport::Op;
use crate::transport::fake::Behaviour;

/// An acquisition of `key` (30 s TTL, one round) whose requests every
/// node holds, unanswered, until the test sets it back to normal.
fn held_acquisition(
    nodes: &[crate::transport::fake::FakeNode],
    core: &std::sync::Arc<crate::core::Core>,
    key: &'static str,
) -> std::thread::JoinHandle<Result<(), Error>> {
    for node in nodes {
        node.hold_next_acquisition();
    }
    let acquiring = {
        let core = core.clone();
        std::thread::spawn(move || {
            core.acquire(&[key], Duration::from_secs(30), Patience::attempts(0))
                .map(|_| ())
        })
    };
    for node in nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.contains(&Op::Acquire { ttl_ms: 30_000 })
        }));
    }
    acquiring
}

/// An acquisition whose round is in flight when the shutdown begins wins
/// it afterwards: its lease is not handed out but released at once, and
/// the shutdown waits for that release to reach every node before the
/// workers stop.
#[test]
fn a_lease_won_as_the_client_shuts_down_is_released_before_the_workers_stop() {
    let (nodes, core) = core_with(3, patient());
    let acquiring = held_acquisition(&nodes, &core, "race");
    let shutting = {
        let core = core.clone();
        std::thread::spawn(move || core.shutdown(LONG_WAIT))
    };
    eventually("the shutdown began", || core.is_closed());
    assert!(!shutting.is_finished(), "it waits for the acquisition");
    for node in &nodes {
        node.set(Behaviour::Normal);
    }
    assert_eq!(acquiring.join().unwrap(), Err(Error::Shutdown));
    assert_eq!(shutting.join().unwrap(), Ok(()));
    for node in &nodes {
        assert!(
            node.received()
                .iter()
                .any(|op| matches!(op, Op::Release { .. })),
            "released everywhere"
        );
        assert_eq!(node.holder("race"), None);
    }
}

/// A guard's release and the shutdown's never both send: whichever marks
/// the lease released first sends the one release; the other does nothing.
#[test]
fn a_lease_released_before_the_shutdown_is_not_released_again() {
    let (nodes, core) = core_with(3, settings());
    let kept = lock(&core, "kept", Duration::from_secs(30));
    let gone = lock(&core, "gone", Duration::from_secs(30));
    gone.release(core.nodes()).unwrap();
    core.shutdown(LONG_WAIT).unwrap();
    for node in &nodes {
        let releases = node
            .received()
            .iter()
            .filter(|op| matches!(op, Op::Release { .. }))
            .count();
        assert_eq!(releases, 2, "one for each lease");
        assert_eq!(node.holder("kept"), None);
    }
    let sent = |node: &crate::transport::fake::FakeNode| {
        node.received()
            .iter()
            .filter(|op| matches!(op, Op::Release { .. }))
            .count()
    };
    let before: Vec<usize> = nodes.iter().map(sent).collect();
    // A guard's release (or drop) after the shutdown sends nothing.
    assert_eq!(core.release(&kept), Err(Error::Shutdown));
    assert!(kept.remaining().is_zero());
    assert_eq!(nodes.iter().map(sent).collect::<Vec<_>>(), before);
}

/// Config whose rounds wait long enough that only the test decides when
/// a held node answers.
fn patient() -> crate::settings::Config {
    crate::settings::Config {
        node_timeout: Some(Duration::from_secs(30)),
        ..settings()
    }
}

/// With a single node, every release is sent before any is awaited: a
/// stalled node costs the shutdown its `within`, not a per-node timeout per
/// hold (inline, one by one, four holds took 4.3 s of a 100 ms `within`).
#[test]
fn a_single_stalled_node_costs_the_shutdown_its_within_not_a_timeout_per_hold() {
    let (nodes, core) = core_with(1, settings());
    let leases: Vec<_> = (0..4)
        .map(|i| lock(&core, &format!("one:{i}"), Duration::from_secs(30)))
        .collect();
    nodes[0].set(Behaviour::Hold);
    let shutting = {
        let core = core.clone();
        // 4 × the 2 s per-node timeout would be 8 s.
        std::thread::spawn(move || core.shutdown(Duration::from_millis(100)))
    };
    let deadline = std::time::Instant::now() + LONG_WAIT;
    while !shutting.is_finished() {
        assert!(std::time::Instant::now() < deadline, "one by one");
        std::thread::yield_now();
    }
    assert!(matches!(
        shutting.join().unwrap(),
        Err(Error::NoQuorum { .. })
    ));
    nodes[0].set(Behaviour::Normal);
    drop(leases);
}

/// A second shutdown, while the first still releases, waits for it and
/// returns its result: it does not return while the holds are still on
/// the nodes.
#[test]
fn a_second_shutdown_waits_for_the_first() {
    let (nodes, core) = core_with(3, patient());
    let _lease = lock(&core, "twice", Duration::from_secs(30));
    for node in &nodes {
        node.set(Behaviour::Hold);
    }
    let first = {
        let core = core.clone();
        std::thread::spawn(move || core.shutdown(LONG_WAIT))
    };
    eventually("the first shutdown began", || core.is_closed());
    let second = {
        let (core, nodes) = (core.clone(), nodes.clone());
        std::thread::spawn(move || {
            let result = core.shutdown(LONG_WAIT);
            let left = nodes.iter().filter(|n| n.holder("twice").is_some()).count();
            (result, left)
        })
    };
    for node in &nodes {
        node.set(Behaviour::Normal);
    }
    assert_eq!(first.join().unwrap(), Ok(()));
    let (result, left) = second.join().unwrap();
    assert_eq!(result, Ok(()));
    assert!(left < 2, "returned before a majority released it");
}

/// A call still under way when the shutdown's time is up still sends its
/// clean-up: the transport stops when that call ends, not before.
#[test]
fn a_call_under_way_past_the_deadline_still_cleans_up() {
    let (nodes, core) = core_with(3, patient());
    let acquiring = held_acquisition(&nodes, &core, "late");
    // Returns at its deadline, with the acquisition still under way.
    assert_eq!(core.shutdown(Duration::from_millis(20)), Ok(()));
    for node in &nodes {
        node.set(Behaviour::Normal);
    }
    assert_eq!(acquiring.join().unwrap(), Err(Error::Shutdown));
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.iter().any(|op| matches!(op, Op::Release { .. }))
        }));
        assert_eq!(node.holder("late"), None);
    }
}

/// A caller sleeping between rounds (for a minute) is woken by the shutdown
/// and fails with `Shutdown` at once.
#[test]
fn a_caller_asleep_between_rounds_wakes_at_the_shutdown() {
    let (_nodes, core) = core_with(
        3,
        crate::settings::Config {
            retry_delay: Duration::from_secs(60),
            queue_refresh: Duration::from_secs(60),
            ..settings()
        },
    );
    let _held = lock(&core, "asleep", Duration::from_secs(30));
    let waiting = {
        let core = core.clone();
        std::thread::spawn(move || {
            let patience = Patience::until(Some(std::time::Instant::now() + LONG_WAIT * 12));
            core.acquire(&["asleep"], Duration::from_secs(30), patience)
                .map(|_| ())
        })
    };
    eventually("the caller sleeps between rounds", || {
        core.nodes().waiters().asleep() == 1
    });
    core.shutdown(LONG_WAIT).unwrap();
    let deadline = std::time::Instant::now() + LONG_WAIT;
    while !waiting.is_finished() {
        assert!(std::time::Instant::now() < deadline, "slept on");
        std::thread::yield_now();
    }
    assert_eq!(waiting.join().unwrap(), Err(Error::Shutdown));
}
