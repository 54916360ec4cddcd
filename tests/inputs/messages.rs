//! A `Busy` answer blames the right party and names the
//! call that waits longer for what was asked.

use std::time::Duration;

use crate::harness::Cluster;
use redlock_sync::{Error, Wanted};

const TTL: Duration = Duration::from_secs(30);

/// The `Busy` of `result`: what was asked for, whether this client holds
/// it, and the message.
#[track_caller]
fn busy<T: std::fmt::Debug>(result: Result<T, Error>) -> (Wanted, bool, String) {
    match result {
        Err(err @ Error::Busy { .. }) => {
            let Error::Busy {
                wanted, held_here, ..
            } = &err
            else {
                unreachable!()
            };
            (*wanted, *held_here, err.to_string())
        }
        other => panic!("expected Busy, got {other:?}"),
    }
}

/// A lock a guard of this very client holds is reported as held by this
/// client, with the warning that asking again in the holding thread waits
/// until the TTL; held by another client, the message says so and names
/// `lock_for`.
#[test]
fn a_lock_held_by_this_client_says_so_and_warns_of_re_entry() {
    let cluster = Cluster::start(3);
    let client = crate::harness::test_client(cluster.urls(), 0, None);
    let other = crate::harness::test_client(cluster.urls(), 0, None);
    let guard = client.lock("msg:lock", TTL).unwrap();

    let (wanted, here, message) = busy(client.lock("msg:lock", TTL));
    assert_eq!((wanted, here), (Wanted::Lock, true));
    assert!(message.contains("held by this client"), "{message}");
    assert!(message.contains("not re-entrant"), "{message}");
    assert!(message.contains("waits in vain"), "{message}");
    assert!(!message.contains("another client"), "{message}");
    // A lock on several resources, one of them ours.
    let (_, here, _) = busy(client.lock_all(&["msg:free", "msg:lock"], TTL));
    assert!(here);

    let (wanted, here, message) = busy(other.lock("msg:lock", TTL));
    assert_eq!((wanted, here), (Wanted::Lock, false));
    assert!(message.contains("held by another client"), "{message}");
    assert!(message.contains("Redlock::lock_for"), "{message}");

    // Released: no longer "this client".
    guard.release().unwrap();
    let _theirs = other.lock("msg:lock", TTL).unwrap();
    let (_, here, _) = busy(client.lock("msg:lock", TTL));
    assert!(!here, "the guard of this client is gone");
}

/// A semaphore's and a reader-writer lock's `Busy` name their own waiting
/// calls, never `lock_for`.
#[test]
fn semaphores_and_rw_locks_name_their_own_waiting_calls() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::test_client(cluster.urls(), 0, None);
    let asker = crate::harness::test_client(cluster.urls(), 0, None);

    let _permit = holder.semaphore("msg:sem", 1).lock(TTL).unwrap();
    let (wanted, here, message) = busy(asker.semaphore("msg:sem", 1).lock(TTL));
    assert_eq!((wanted, here), (Wanted::Permit, false));
    assert!(
        message.contains("Semaphore::acquire(ttl).wait"),
        "{message}"
    );
    assert!(!message.contains("lock_for"), "{message}");
    let (_, here, message) = busy(holder.semaphore("msg:sem", 1).lock(TTL));
    assert!(here, "{message}");
    assert!(message.contains("some by this client"), "{message}");
    // Of two permits, one here and one elsewhere: the other may still
    // come free, so no word of re-entry.
    let _mine = holder.semaphore("msg:two", 2).lock(TTL).unwrap();
    let _theirs = asker.semaphore("msg:two", 2).lock(TTL).unwrap();
    let (_, here, message) = busy(holder.semaphore("msg:two", 2).lock(TTL));
    assert!(here, "{message}");
    assert!(
        message.contains("release one of this process's permits"),
        "{message}"
    );
    assert!(!message.contains("re-entrant"), "{message}");

    let config = holder.rw_lock("msg:rw");
    let write = config.write(TTL).unwrap();
    let (wanted, here, message) = busy(asker.rw_lock("msg:rw").read(TTL));
    assert_eq!((wanted, here), (Wanted::Read, false));
    assert!(
        message.contains("RwLock::acquire_read(ttl).wait"),
        "{message}"
    );
    assert!(!message.contains("lock_for"), "{message}");
    let (_, here, message) = busy(config.read(TTL));
    assert!(here, "{message}");
    assert!(
        message.contains("held for writing by this client"),
        "{message}"
    );
    drop(write);

    let _read = config.read(TTL).unwrap();
    assert!(asker.rw_lock("msg:rw").try_write(TTL).unwrap().is_none());
    let (wanted, here, message) = busy(asker.rw_lock("msg:rw").write(TTL));
    assert_eq!((wanted, here), (Wanted::Write, false));
    assert!(
        message.contains("RwLock::acquire_write(ttl).wait"),
        "{message}"
    );

    let _leads = holder
        .election("msg:e")
        .campaign("a", TTL)
        .try_win()
        .unwrap()
        .expect("nobody led");
    let (wanted, here, message) = busy(
        asker
            .election("msg:e")
            .campaign("b", TTL)
            .wait(Duration::from_millis(50))
            .win(),
    );
    assert_eq!((wanted, here), (Wanted::Leadership, false));
    assert!(message.contains("Campaign::wait"), "{message}");
}

/// A read refused because another client's writer waits (its mark turns
/// new readers away) is not blamed on this client's own read.
#[test]
fn a_read_refused_for_another_clients_waiting_writer_blames_that_writer() {
    let cluster = Cluster::start(3);
    let reader = crate::harness::test_client(cluster.urls(), 0, None);
    let writer = crate::harness::test_client(cluster.urls(), 0, None);
    let lock = reader.rw_lock("msg:marked");
    let _read = lock.read(TTL).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            writer
                .rw_lock("msg:marked")
                .acquire_write(TTL)
                .wait(Duration::from_secs(3))
                .lock()
                .map(drop)
        });
        crate::harness::eventually("the writer marked", Duration::from_secs(5), || {
            cluster.count_key_now("redlock-rw:msg:marked#wait") >= 2
        });
        let (wanted, here, message) = busy(lock.read(TTL));
        assert_eq!(wanted, Wanted::Read);
        assert!(!here, "this client holds a read, not the write: {message}");
        assert!(message.contains("another client"), "{message}");
        drop(_read);
        waiting.join().unwrap().unwrap();
    });
}
