//! The client's threads: a fixed set started at build, none per call, and a
//! few more started when first needed, each bounded and each ending when no
//! longer needed or with the client. A client over `n` nodes runs at most
//! * a worker per node and `min(n, 2)` connection helpers
//!   ([`threads_per_client`]), from build until it is dropped;
//! * one lookup thread per Sentinel-named node, from that node's first
//!   lookup (while the client is built) until it is dropped;
//! * one keeper thread, from the first keep-alive until it is dropped,
//!   however many leases it keeps;
//! * one subscriber thread per node while a caller waits (and for about 2 s
//!   after the last wait ended), however many callers wait on however many
//!   resources.
//!
//! Every test of this binary holds the process's turn ([`crate::turn`]),
//! so each counts only its own client's threads.

use std::time::Duration;

use crate::harness::pubsub::{self, subscriber_threads};
use crate::harness::sentinel::{Secrets, Sentinels};
use crate::harness::{
    Cluster, Node, NodeOptions, client_threads, eventually, settles, threads_per_client,
};

/// Threads of this process whose name starts with `prefix` (Linux keeps 15
/// bytes of a name: `redlock-sentinel` shows as `redlock-sentine`).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|n| n.starts_with(prefix))
        })
        .count()
}

/// Locking, extending and releasing start no thread: the count stays at the
/// workers and helpers started at build; dropping the client stops them.
#[test]
fn locking_spawns_no_threads_and_dropping_the_client_stops_its_workers() {
    let _turn = crate::turn();
    let cluster = Cluster::start(5);
    let before = client_threads();
    let redlock = crate::harness::client(cluster.urls());
    // One worker per node and two connection helpers shared by all nodes
    // (threads name themselves as they start, so wait for all of them).
    eventually("client threads started", Duration::from_secs(5), || {
        client_threads() == before + threads_per_client(5)
    });
    let started = client_threads();
    for i in 0..200 {
        let mut guard = redlock
            .lock(&format!("res:{i}"), Duration::from_secs(5))
            .unwrap();
        guard.extend(Duration::from_secs(5)).unwrap();
        drop(guard);
        assert!(
            redlock
                .try_lock("res:0", Duration::from_secs(5))
                .unwrap()
                .is_some()
        );
    }
    assert_eq!(client_threads(), started);
    drop(redlock);
    eventually(
        "worker threads stop with the client",
        Duration::from_secs(5),
        || client_threads() == before,
    );
}

/// Keep-alive starts one keeper thread for any number of kept leases, and
/// renewing them starts none; waiting starts one subscriber thread per node
/// for any number of waiters, which stop once nobody waits; the keeper
/// stays until the client is dropped, and then every thread stops. At
/// most: workers and helpers + one keeper + one subscriber per node.
#[test]
fn keep_alive_adds_one_keeper_and_waiting_one_subscriber_per_node_until_they_end() {
    let _turn = crate::turn();
    const NODES: usize = 5;
    const KEPT: usize = 3;
    let cluster = Cluster::start(NODES);
    let before = client_threads();
    let redlock = crate::harness::builder(cluster.urls())
        .retry_delay(Duration::from_millis(400))
        .build()
        .unwrap();
    settles("client threads started", || {
        client_threads() == before + threads_per_client(NODES)
    });
    let started = client_threads();
    assert_eq!(threads_named("redlock-keeper"), 0, "nothing kept yet");
    let ttl = Duration::from_millis(600);
    let kept: Vec<_> = (0..KEPT)
        .map(|i| {
            redlock
                .acquire(&format!("kept:{i}"), ttl)
                .keep_alive()
                .lock()
                .unwrap()
        })
        .collect();
    settles("the keeper thread started", || {
        client_threads() == started + 1
    });
    assert_eq!(threads_named("redlock-keeper"), 1, "one keeper for all");
    let first: Vec<_> = kept.iter().map(|g| g.valid_until()).collect();
    settles("every kept lease renewed", || {
        kept.iter().zip(&first).all(|(g, &v)| g.valid_until() > v)
    });
    assert_eq!(client_threads(), started + 1, "renewals start no thread");
    std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..KEPT)
            .map(|i| {
                let redlock = &redlock;
                scope.spawn(move || {
                    redlock
                        .lock_for(&format!("kept:{i}"), ttl, Duration::from_secs(30))
                        .map(drop)
                })
            })
            .collect();
        settles("every waiter queued", || {
            (0..KEPT).all(|i| pubsub::waiting(&cluster, &format!("kept:{i}"), 1))
        });
        assert_eq!(subscriber_threads(), NODES, "one subscriber per node");
        assert_eq!(
            client_threads(),
            started + 1 + NODES,
            "workers and helpers, the keeper and the subscribers"
        );
        for guard in kept {
            guard.release().unwrap();
        }
        for handle in waiting {
            handle.join().unwrap().expect("acquired once released");
        }
    });
    settles("the subscribers stopped once nobody waits", || {
        subscriber_threads() == 0
    });
    assert_eq!(
        client_threads(),
        started + 1,
        "the keeper stays while the client lives"
    );
    drop(redlock);
    settles("every thread stops with the client", || {
        client_threads() == before
    });
}

/// A Sentinel-named node adds one lookup thread (not one per Sentinel, nor
/// per lookup) from the client's build; a direct node none. Waiting adds
/// the subscribers, which look up through that thread, and dropping the
/// client stops every thread. At most: workers and helpers + one lookup
/// thread per Sentinel-named node + one subscriber per node.
#[test]
fn a_sentinel_named_node_adds_one_lookup_thread_until_the_client_is_dropped() {
    let _turn = crate::turn();
    // Two Sentinel-named nodes (each a master and a replica, watched by
    // three Sentinels) and a direct one.
    let groups = Sentinels::start(2, &Secrets::default());
    let direct = Node::start(&NodeOptions::default());
    let mut urls = groups.urls();
    urls.push(direct.url());
    let before = client_threads();
    let redlock = crate::harness::builder(&urls)
        .retry_delay(Duration::from_millis(400))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    settles("client threads started", || {
        client_threads() == before + threads_per_client(3) + 2
    });
    assert_eq!(threads_named("redlock-sentine"), 2, "one per Sentinel node");
    let started = client_threads();
    let ttl = Duration::from_secs(10);
    let guard = redlock.lock("sent:threads", ttl).unwrap();
    std::thread::scope(|scope| {
        let waits = scope.spawn(|| {
            redlock
                .lock_for("sent:threads", ttl, Duration::from_secs(30))
                .map(drop)
        });
        settles("the waiter queued", || {
            let masters = (0..2).map(|g| groups.master(g));
            masters
                .chain([&direct])
                .any(|n| pubsub::queued(n, "sent:threads") == 1 && pubsub::wake_listeners(n) > 0)
        });
        assert_eq!(subscriber_threads(), 3, "one subscriber per node");
        assert_eq!(
            client_threads(),
            started + 3,
            "no lookup thread for the subscribers"
        );
        guard.release().unwrap();
        waits.join().unwrap().expect("acquired once released");
    });
    settles("the subscribers stopped once nobody waits", || {
        subscriber_threads() == 0
    });
    assert_eq!(client_threads(), started);
    // Shut down while a clone lives: the lookup threads stop too.
    let clone = redlock.clone();
    redlock.shutdown(Duration::from_secs(5)).unwrap();
    settles("every thread stops with the shutdown", || {
        client_threads() == before
    });
    assert_eq!(threads_named("redlock-sentine"), 0);
    drop((redlock, clone));
}

/// `Redlock::shutdown` stops every thread of the client — the
/// workers, the connection helpers, the keeper and the subscribers — while
/// clones, handles and guards of it are still alive.
#[test]
fn shutdown_stops_every_thread_while_clones_and_guards_live() {
    let _turn = crate::turn();
    const NODES: usize = 3;
    let cluster = Cluster::start(NODES);
    let before = client_threads();
    let redlock = crate::harness::client(cluster.urls());
    let clone = redlock.clone();
    let semaphore = redlock.semaphore("threads:sem", 1);
    let mut kept = redlock
        .lock("threads:kept", Duration::from_secs(3))
        .unwrap();
    kept.keep_alive();
    let permit = semaphore.lock(Duration::from_secs(30)).unwrap();
    // A waiter, so that the subscribers run.
    let waiting = {
        let clone = clone.clone();
        std::thread::spawn(move || {
            clone
                .lock_for(
                    "threads:kept",
                    Duration::from_secs(5),
                    Duration::from_secs(60),
                )
                .map(drop)
        })
    };
    settles("workers, helpers, keeper and subscribers started", || {
        client_threads() == before + threads_per_client(NODES) + 1 + NODES
    });
    redlock.shutdown(Duration::from_secs(5)).unwrap();
    assert_eq!(waiting.join().unwrap(), Err(redlock_sync::Error::Shutdown));
    // The subscribers notice within their 100 ms tick; the helpers end
    // with the connection pools.
    eventually(
        "every thread of the client stopped",
        Duration::from_secs(5),
        || client_threads() == before,
    );
    assert!(!kept.is_valid() && !permit.is_valid());
    drop((clone, semaphore, kept, permit));
}
