//! The crash-recovery hazard of Redlock without persistence: a node that
//! restarts empty at once can hand a held lock to a second client; a node
//! kept out for at least the TTL cannot.

mod harness;

use std::time::{Duration, Instant};

use harness::{Cluster, test_client};
use redlock_sync::Redlock;

const TTL: Duration = Duration::from_millis(1500);

fn client(cluster: &Cluster) -> Redlock {
    test_client(cluster.urls(), 0, None)
}

/// A holds the lock on nodes 0 and 1 only (node 2 was down when A locked,
/// and has come back empty). Returns A's guard.
fn hold_on_two_of_three(cluster: &mut Cluster) -> redlock_sync::LockGuard {
    cluster.nodes[2].kill();
    let a = client(cluster);
    let guard = a.lock("hazard", TTL).expect("A locks on 2 of 3");
    cluster.nodes[2].restart();
    assert_eq!(cluster.count_key("hazard"), 2);
    guard
}

#[test]
fn an_immediate_empty_restart_lets_a_second_client_in() {
    let mut cluster = Cluster::start(3);
    let a = hold_on_two_of_three(&mut cluster);
    // Node 1 crashes and restarts at once, without its data.
    cluster.nodes[1].restart();
    let b = client(&cluster)
        .try_lock("hazard", TTL)
        .unwrap()
        .expect("B reaches a majority on the two empty nodes");
    // The hazard: both guards are valid at the same moment.
    assert!(a.is_valid() && b.is_valid(), "two valid holders");
}

#[test]
fn a_restart_delayed_past_the_ttl_keeps_the_lock_exclusive() {
    let mut cluster = Cluster::start(3);
    let a = hold_on_two_of_three(&mut cluster);
    let b_client = client(&cluster);
    let crashed = &mut cluster.nodes[1];
    let b = std::thread::scope(|s| {
        // Node 1 crashes and stays out for the TTL before rejoining empty.
        s.spawn(|| crashed.restart_after(TTL + Duration::from_millis(100)));
        let deadline = Instant::now() + TTL * 4;
        loop {
            assert!(Instant::now() < deadline, "B never got the lock");
            if let Ok(Some(guard)) = b_client.try_lock("hazard", TTL) {
                break guard;
            }
            std::thread::sleep(Duration::from_millis(20)); // B's retry pace
        }
    });
    assert!(b.is_valid());
    assert!(!a.is_valid(), "B got in while A's guard was still valid");
}
