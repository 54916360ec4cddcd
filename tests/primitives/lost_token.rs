//! `LockGuard::lost_token` and `Leadership::lost_token`
//! are cancelled once the guard stops being valid, for any reason, and not
//! before.

use std::time::{Duration, Instant};

use crate::harness::Cluster;

/// A kept-alive lock whose keys vanish from every node: the next renewal is
/// refused, and the token fires then — within a renewal period, well before
/// the validity the guard claimed when the keys vanished.
#[test]
fn a_kept_alive_lock_whose_keys_vanish_fires_at_the_next_renewal() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    // Renewed when 2 s are left: the refusal comes 2 s before the end.
    let ttl = Duration::from_secs(6);
    let mut guard = client.lock("lost:kept", ttl).unwrap();
    guard.keep_alive();
    let lost = guard.lost_token();
    assert!(!lost.is_cancelled(), "valid: not cancelled");
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg("lost:kept")
            .query(&mut node.conn())
            .unwrap();
    }
    let claimed = guard.valid_until();
    assert!(
        lost.sleep(ttl * 2),
        "cancelled once a renewal found it gone"
    );
    assert!(
        Instant::now() < claimed,
        "fired by the refused renewal, not at the end of the validity"
    );
    assert!(!guard.is_valid());
    assert!(guard.lost_token().is_cancelled(), "the same token");
}

/// A plain lock: the token fires when its validity runs out, not before;
/// an extension moves that moment.
#[test]
fn a_plain_lock_fires_at_the_end_of_its_validity_and_follows_extensions() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    let mut guard = client
        .lock("lost:plain", Duration::from_millis(600))
        .unwrap();
    let lost = guard.lost_token();
    guard.extend(Duration::from_millis(1200)).unwrap();
    let until = guard.valid_until();
    assert!(lost.sleep(Duration::from_secs(10)), "cancelled in time");
    let now = Instant::now();
    assert!(now >= until, "not before the validity ran out");
    assert!(!guard.is_valid());
    // Late by at most the keeper's wake-up (generous for a loaded machine).
    assert!(
        now - until < Duration::from_secs(1),
        "{:?} late",
        now - until
    );
}

/// Released or dropped: at once. Asked after the end: already cancelled.
#[test]
fn a_released_or_dropped_guard_fires_at_once() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    let guard = client
        .lock("lost:released", Duration::from_secs(10))
        .unwrap();
    let lost = guard.lost_token();
    guard.release().unwrap();
    assert!(lost.is_cancelled());

    let guard = client
        .lock("lost:dropped", Duration::from_secs(10))
        .unwrap();
    let lost = guard.lost_token();
    drop(guard);
    assert!(lost.is_cancelled());

    let guard = client
        .lock("lost:short", Duration::from_millis(200))
        .unwrap();
    while guard.is_valid() {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(guard.lost_token().is_cancelled(), "asked after the end");
}

/// A leadership's token fires when it is resigned.
#[test]
fn a_leaderships_token_fires_when_it_resigns() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    let leadership = client
        .election("lost:elect")
        .campaign("me", Duration::from_secs(10))
        .win()
        .unwrap();
    let lost = leadership.lost_token();
    assert!(!lost.is_cancelled());
    leadership.resign().unwrap();
    assert!(lost.is_cancelled());
}
