//! What an operator sees and does: `Redlock::inspect` (and the semaphore's
//! and the reader-writer lock's) answers only what a majority of the nodes
//! holds, or `NoQuorum`; `force_release` frees a lock whoever holds it, and
//! its holder learns it.

use std::time::Duration;

use crate::harness::Cluster;
use crate::harness::pubsub::{WakeRecorder, waiting};
use redlock_sync::{Error, Redlock};

fn fencing_client(urls: Vec<String>) -> Redlock {
    crate::harness::builder(urls).fencing(true).build().unwrap()
}

/// Sets `key` to `value` (without expiry) on the nodes `on`.
fn set_on(cluster: &Cluster, on: &[usize], key: &str, value: &str) {
    for &i in on {
        let _: () = cluster.nodes[i].query(redis::cmd("SET").arg(key).arg(value));
    }
}

#[test]
fn a_held_lock_is_seen_until_it_is_released() {
    let cluster = Cluster::start(5);
    let client = crate::harness::client(cluster.urls());
    let operator = crate::harness::client(cluster.urls());
    assert_eq!(operator.inspect("insp:held").unwrap(), None, "free");
    let ttl = Duration::from_secs(10);
    let guard = client.lock("insp:held", ttl).unwrap();
    let holding = operator.inspect("insp:held").unwrap().expect("held");
    assert!(holding.remaining() <= ttl, "{holding:?}");
    assert!(
        holding.remaining() > ttl / 2,
        "less the inspection's time and the drift only: {holding:?}"
    );
    assert_eq!(holding.fencing_token(), None, "the holder does not fence");
    guard.release().unwrap();
    assert_eq!(operator.inspect("insp:held").unwrap(), None, "released");
}

#[test]
fn a_fenced_holders_token_is_shown() {
    let cluster = Cluster::start(3);
    let client = fencing_client(cluster.urls());
    let guard = client.lock("insp:fenced", Duration::from_secs(10)).unwrap();
    let token = guard.fencing_token().expect("a fencing client");
    let operator = crate::harness::client(cluster.urls());
    let holding = operator.inspect("insp:fenced").unwrap().expect("held");
    assert_eq!(holding.fencing_token(), Some(token));
    // The next holder's, larger.
    drop(guard);
    let next = client.lock("insp:fenced", Duration::from_secs(10)).unwrap();
    let shown = operator.inspect("insp:fenced").unwrap().expect("held");
    assert_eq!(shown.fencing_token(), next.fencing_token());
    assert!(shown.fencing_token() > Some(token));
}

#[test]
fn a_key_on_two_of_five_nodes_is_no_holder_and_on_three_is_one() {
    let cluster = Cluster::start(5);
    let operator = crate::harness::client(cluster.urls());
    set_on(&cluster, &[0, 1], "insp:two", "someone");
    assert_eq!(operator.inspect("insp:two").unwrap(), None);
    // Two holders on two nodes each: nobody's majority.
    set_on(&cluster, &[2, 3], "insp:two", "someone-else");
    assert_eq!(operator.inspect("insp:two").unwrap(), None);
    // Another library's key on three: a holder, without expiry or fence.
    set_on(&cluster, &[0, 1, 2], "insp:three", "other-library");
    let holding = operator.inspect("insp:three").unwrap().expect("held");
    assert_eq!(holding.remaining(), Duration::MAX);
    assert_eq!(holding.fencing_token(), None);
}

#[test]
fn three_of_five_paused_is_no_quorum_and_two_still_decide() {
    let mut cluster = Cluster::start(5);
    let client = crate::harness::client(cluster.urls());
    let operator = crate::harness::test_client(cluster.urls(), 0, Some(Duration::from_millis(300)));
    let _guard = client.lock("insp:paused", Duration::from_secs(30)).unwrap();
    // Nodes 3 and 4 down: the three that answer hold it.
    cluster.nodes[3].pause();
    cluster.nodes[4].pause();
    assert!(operator.inspect("insp:paused").unwrap().is_some());
    // Node 2 too: the two that answer cannot tell.
    cluster.nodes[2].pause();
    match operator.inspect("insp:paused") {
        Err(Error::NoQuorum {
            confirmed, quorum, ..
        }) => assert_eq!((confirmed, quorum), (2, 3)),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // A free name is no answer either: the paused three could hold it.
    assert!(matches!(
        operator.inspect("insp:never"),
        Err(Error::NoQuorum { .. })
    ));
    for node in &mut cluster.nodes[2..] {
        node.resume();
    }
}

#[test]
fn an_operators_release_frees_the_lock_and_its_kept_alive_holder_learns_it() {
    let cluster = Cluster::start(5);
    let holder = fencing_client(cluster.urls());
    let ttl = Duration::from_secs(6);
    let mut guard = holder.lock("insp:stuck", ttl).unwrap();
    guard.keep_alive();
    let lost = guard.lost_token();
    let token = guard.fencing_token().unwrap();
    let operator = crate::harness::client(cluster.urls());
    assert!(operator.force_release("insp:stuck").unwrap(), "it was held");
    cluster.await_count("insp:stuck", 0);
    assert!(
        cluster.count_key_now("redlock-fence:insp:stuck") >= 3,
        "the fence values stay"
    );
    // Free for the next holder at once, whose token is still larger.
    let next = holder.try_lock("insp:stuck", ttl).unwrap().expect("free");
    assert!(next.fencing_token().unwrap() > token);
    assert!(lost.sleep(ttl * 2), "the old holder's renewal failed");
    assert!(!guard.is_valid());
    drop(next);
    assert!(
        !operator.force_release("insp:stuck").unwrap(),
        "nobody held it"
    );
}

/// Only the holder a majority agrees on is released: a key another
/// holds on the other nodes (one that came after there) stays, and keys
/// on a minority are left alone (they may be a round under way).
#[test]
fn an_operators_release_touches_no_other_holder() {
    let cluster = Cluster::start(5);
    let operator = crate::harness::client(cluster.urls());
    set_on(&cluster, &[0, 1, 2], "insp:mixed", "gone");
    set_on(&cluster, &[3, 4], "insp:mixed", "later");
    assert!(operator.force_release("insp:mixed").unwrap());
    cluster.await_count("insp:mixed", 2);
    assert_eq!(cluster.holders_now("insp:mixed", "later"), 2);
    assert!(
        !operator.force_release("insp:mixed").unwrap(),
        "no majority holder"
    );
    assert_eq!(cluster.holders_now("insp:mixed", "later"), 2, "left alone");
}

#[test]
fn an_operators_release_wakes_the_next_waiter() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls());
    let _held = holder.lock("insp:queue", Duration::from_secs(60)).unwrap();
    let waiter = crate::harness::client(cluster.urls());
    let waiting_thread = std::thread::spawn(move || {
        waiter
            .acquire("insp:queue", Duration::from_secs(10))
            .wait(Duration::from_secs(60))
            .lock()
            .map(|guard| guard.release())
    });
    crate::harness::eventually("the waiter queued", Duration::from_secs(10), || {
        waiting(&cluster, "insp:queue", 1)
    });
    let gate = cluster
        .nodes
        .iter()
        .find(|n| crate::harness::pubsub::queued(n, "insp:queue") == 1)
        .unwrap();
    let recorder = WakeRecorder::start(gate);
    crate::harness::client(cluster.urls())
        .force_release("insp:queue")
        .unwrap();
    crate::harness::eventually("the gate node woke it", Duration::from_secs(10), || {
        !recorder.woken().is_empty()
    });
    waiting_thread.join().unwrap().unwrap().unwrap();
    assert_eq!(
        recorder.woken().len(),
        1,
        "one wake-up: {:?}",
        recorder.woken()
    );
}

#[test]
fn a_semaphores_permits_and_a_rw_locks_holders_are_seen() {
    let cluster = Cluster::start(3);
    let client = fencing_client(cluster.urls());
    let operator = crate::harness::client(cluster.urls());
    let ttl = Duration::from_secs(10);
    let pool = client.semaphore("insp:pool", 3);
    assert!(
        operator
            .semaphore("insp:pool", 3)
            .inspect()
            .unwrap()
            .is_empty()
    );
    let (a, b) = (pool.lock(ttl).unwrap(), pool.lock(ttl).unwrap());
    let in_use = operator.semaphore("insp:pool", 3).inspect().unwrap();
    assert_eq!(in_use.len(), 2);
    let mut tokens: Vec<_> = in_use.iter().map(|h| h.fencing_token()).collect();
    let mut held = vec![a.fencing_token(), b.fencing_token()];
    tokens.sort();
    held.sort();
    assert_eq!(tokens, held);
    drop(a);
    assert_eq!(
        operator.semaphore("insp:pool", 3).inspect().unwrap().len(),
        1
    );

    let rw = client.rw_lock("insp:rw");
    assert!(operator.rw_lock("insp:rw").inspect().unwrap().is_free());
    let readers = [rw.read(ttl).unwrap(), rw.read(ttl).unwrap()];
    let seen = operator.rw_lock("insp:rw").inspect().unwrap();
    assert_eq!((seen.writer(), seen.readers().len()), (None, 2));
    drop(readers);
    let writer = rw.write(ttl).unwrap();
    let seen = operator.rw_lock("insp:rw").inspect().unwrap();
    assert!(seen.readers().is_empty());
    assert_eq!(
        seen.writer().and_then(|w| w.fencing_token()),
        writer.fencing_token()
    );
}

#[test]
fn bad_names_are_refused_with_what_to_do() {
    let cluster = Cluster::start(1);
    let operator = crate::harness::client(cluster.urls());
    for name in ["", "redlock-fence:x"] {
        for err in [
            operator.inspect(name).unwrap_err(),
            operator.force_release(name).unwrap_err(),
        ] {
            assert!(matches!(err, Error::Config { .. }), "{name:?}: {err}");
        }
    }
    assert!(matches!(
        operator.semaphore("s", 0).inspect(),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        operator.rw_lock("").inspect(),
        Err(Error::Config { .. })
    ));
}

/// A resource whose key holds another type (a list) on a majority is
/// shown held, but no operator's release deletes it: it is nobody's lock.
#[test]
fn a_key_of_another_type_is_shown_but_never_released() {
    let cluster = Cluster::start(3);
    let operator = crate::harness::client(cluster.urls());
    for node in &cluster.nodes {
        let _: () = node.query(redis::cmd("RPUSH").arg("insp:list").arg("data"));
    }
    assert!(operator.inspect("insp:list").unwrap().is_some());
    let err = operator.force_release("insp:list").unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    assert!(err.to_string().contains("another type"), "{err}");
    for node in &cluster.nodes {
        let len: usize = node.query(redis::cmd("LLEN").arg("insp:list"));
        assert_eq!(len, 1, "the data stays");
    }
}
