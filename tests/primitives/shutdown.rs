//! `Redlock::shutdown` lets go of everything any clone of
//! a client holds, wakes its waiting callers, stops its threads, and leaves
//! every guard invalid and every later call failing with `Error::Shutdown`.

use std::time::{Duration, Instant};

use crate::harness::Cluster;
use redlock_sync::Error;

/// Every key on `node` that is not the client's bookkeeping (fence
/// counters, which only grow, and the restart marker).
fn held_keys(node: &crate::harness::Node) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut node.conn()).unwrap();
    keys.into_iter()
        .filter(|k| !k.starts_with("redlock-fence:") && !k.starts_with("redlock:"))
        .collect()
}

/// On how many nodes `key` exists (of any type).
fn nodes_with(cluster: &Cluster, key: &str) -> usize {
    let exists = |node: &crate::harness::Node| -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query(&mut node.conn())
            .unwrap()
    };
    cluster.nodes.iter().filter(|n| exists(n)).count()
}

fn every_held_key(cluster: &Cluster) -> Vec<String> {
    cluster.nodes.iter().flat_map(held_keys).collect()
}

/// A lock, a permit (its `Semaphore` handle alive), a read hold and a
/// kept-alive lock, held through two clones: one `shutdown` on a third
/// clone deletes them all from every node, leaves every guard invalid,
/// makes every later call fail with `Shutdown` and every drop silent, and
/// closes the client's connections.
#[test]
fn shutdown_releases_what_every_clone_holds_and_ends_every_call() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    let other = client.clone();
    let ttl = Duration::from_secs(60);
    let lock = client.lock("sd:lock", ttl).unwrap();
    let jobs = other.semaphore("sd:jobs", 2);
    let permit = jobs.lock(ttl).unwrap();
    let config = client.rw_lock("sd:config");
    let read = config.read(ttl).unwrap();
    let mut kept = other.lock("sd:kept", Duration::from_secs(3)).unwrap();
    kept.keep_alive();
    let lost = kept.lost_token();
    // One guard lives on another thread, as in a threaded program.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let client = client.clone();
        std::thread::spawn(move || {
            let guard = client.lock("sd:thread", ttl).unwrap();
            held_tx.send(()).unwrap();
            stop_rx.recv().unwrap();
            (guard.is_valid(), guard.release())
        })
    };
    held_rx.recv().unwrap();
    // A lock returns once a majority set it; the last node follows.
    crate::harness::eventually("5 holds on every node", Duration::from_secs(5), || {
        every_held_key(&cluster).len() == 15
    });
    assert!(cluster.client_connections().iter().all(|&n| n > 0));

    client.clone().shutdown(Duration::from_secs(5)).unwrap();

    assert_eq!(
        every_held_key(&cluster),
        Vec::<String>::new(),
        "nothing left"
    );
    for guard in [&lock, &permit, &read, &kept] {
        assert!(!guard.is_valid(), "{guard:?}");
        assert_eq!(guard.ensure_valid(), Err(Error::Shutdown));
    }
    assert!(lost.is_cancelled(), "the kept lock's lost token fired");
    stop_tx.send(()).unwrap();
    let (valid, released) = holder.join().unwrap();
    assert!(!valid);
    assert_eq!(released, Err(Error::Shutdown));

    // Every later call, on every clone and handle, fails with Shutdown.
    assert_eq!(other.lock("sd:new", ttl).unwrap_err(), Error::Shutdown);
    assert_eq!(client.try_lock("sd:new", ttl).unwrap_err(), Error::Shutdown);
    assert_eq!(jobs.try_lock(ttl).unwrap_err(), Error::Shutdown);
    assert_eq!(config.write(ttl).unwrap_err(), Error::Shutdown);
    assert_eq!(
        other.election("sd:e").leader().unwrap_err(),
        Error::Shutdown
    );
    assert_eq!(kept.extend(ttl).unwrap_err(), Error::Shutdown);
    assert!(Error::Shutdown.to_string().contains("build a new client"));
    assert_eq!(client.shutdown(Duration::from_secs(1)), Ok(()), "twice: Ok");

    // The workers dropped their connections (the server notices the close
    // a moment later).
    crate::harness::eventually(
        "the client's connections closed",
        Duration::from_secs(5),
        || cluster.client_connections().iter().all(|&n| n == 0),
    );
    // Dropping the guards now is silent (that it sends nothing is checked
    // on fake nodes, in `core::tests::shutdown`).
    drop((lock, permit, read, kept));
    assert_eq!(cluster.client_connections(), vec![0, 0, 0]);
}

/// A caller waiting for a held lock wakes at the shutdown and fails with
/// `Shutdown` at once, not after its wait, and leaves the queue.
#[test]
fn a_waiting_caller_wakes_and_fails_with_shutdown() {
    let cluster = Cluster::start(3);
    let holder = crate::harness::client(cluster.urls());
    let _held = holder.lock("sd:wait", Duration::from_secs(60)).unwrap();
    // (That the shutdown wakes it, rather than its next round, is proven
    // on fake nodes: `core::tests::shutdown`.)
    let waiter = crate::harness::client(cluster.urls());
    let waiting = {
        let waiter = waiter.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result =
                waiter.lock_for("sd:wait", Duration::from_secs(10), Duration::from_secs(60));
            (result.map(|_| ()), started.elapsed())
        })
    };
    // Queued at the gate node: it sleeps between rounds now.
    crate::harness::eventually("the waiter queued", Duration::from_secs(10), || {
        nodes_with(&cluster, "redlock-queue:sd:wait") > 0
    });
    let asked = Instant::now();
    waiter.shutdown(Duration::from_secs(5)).unwrap();
    let (result, _) = waiting.join().unwrap();
    assert_eq!(result, Err(Error::Shutdown));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "ended by the shutdown, not by its 60 s wait"
    );
    // It left the queue on its way out (sent before the workers stopped).
    assert_eq!(nodes_with(&cluster, "redlock-queue:sd:wait"), 0);
}

/// A release the nodes cannot confirm within the time given is reported,
/// and the client is shut down all the same.
#[test]
fn a_release_no_majority_confirms_is_reported_and_the_client_still_stops() {
    let mut cluster = Cluster::start(3);
    let client = crate::harness::test_client(cluster.urls(), 0, Some(Duration::from_millis(200)));
    let guard = client.lock("sd:stalled", Duration::from_secs(60)).unwrap();
    cluster.nodes[0].pause();
    cluster.nodes[1].pause();
    let started = Instant::now();
    let err = client.shutdown(Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(&err, Error::NoQuorum { resource, .. } if resource == "sd:stalled"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by `within`"
    );
    assert!(!guard.is_valid());
    assert_eq!(
        client.lock("sd:other", Duration::from_secs(5)).unwrap_err(),
        Error::Shutdown
    );
    cluster.nodes[0].resume();
    cluster.nodes[1].resume();
}
