//! A shutdown and the calls under way, ordered through the fake-node seam.

use std::time::Duration;

use super::Patience;
use super::tests::{LONG_WAIT, core_with, eventually, lock, settings};
use crate::error::Error;
use crate::transport::Op;
use crate::transport::fake::Behaviour;

/// An acquisition whose round is in flight when the shutdown begins wins
/// it afterwards: its lease is not handed out but released at once, and
/// the shutdown waits for that release to reach every node before the
/// workers stop.
#[test]
fn a_lease_won_as_the_client_shuts_down_is_released_before_the_workers_stop() {
    let (nodes, core) = core_with(3, settings());
    for node in &nodes {
        node.hold_next_acquisition();
    }
    let acquiring = {
        let core = core.clone();
        std::thread::spawn(move || {
            core.acquire(&["race"], Duration::from_secs(30), Patience::attempts(0))
                .map(|_| ())
        })
    };
    for node in &nodes {
        assert!(node.wait_for(LONG_WAIT, |ops| {
            ops.contains(&Op::Acquire { ttl_ms: 30_000 })
        }));
    }
    let shutting = {
        let core = core.clone();
        std::thread::spawn(move || core.shutdown(LONG_WAIT))
    };
    eventually("the shutdown began", || core.life.is_closed());
    assert!(!shutting.is_finished(), "it waits for the acquisition");
    for node in &nodes {
        node.set(Behaviour::Normal);
    }
    assert_eq!(acquiring.join().unwrap(), Err(Error::Shutdown));
    assert_eq!(shutting.join().unwrap(), Ok(()));
    for node in &nodes {
        assert!(
            node.received().contains(&Op::Release),
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
    gone.release(&core).unwrap();
    core.shutdown(LONG_WAIT).unwrap();
    for node in &nodes {
        let releases = node
            .received()
            .iter()
            .filter(|op| **op == Op::Release)
            .count();
        assert_eq!(releases, 2, "one for each lease");
        assert_eq!(node.holder("kept"), None);
    }
    assert_eq!(kept.release(&core), Err(Error::Shutdown));
    assert!(kept.remaining().is_zero());
}
