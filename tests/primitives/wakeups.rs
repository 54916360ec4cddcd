//! Waiters in other clients and other processes are woken by a release
//! (the gate node wakes the first queued waiter), fall back to their retry
//! delay when the wake-up is lost, and a silent subscriber connection is
//! replaced.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::harness::pubsub::{self, publishes, subscriber_connections};
use crate::harness::{Cluster, Proxy, settles};
use redlock_sync::Redlock;

const TTL: Duration = Duration::from_secs(10);
/// Far longer than a notified wake-up takes.
const RETRY_DELAY: Duration = Duration::from_millis(400);

/// A client that, without notifications, would find a released resource
/// only after sleeping out `RETRY_DELAY`.
fn slow_poller(cluster_urls: &[String]) -> Redlock {
    crate::harness::builder(cluster_urls)
        .retry_delay(RETRY_DELAY)
        .retry_jitter(Duration::ZERO)
        .connect_timeout(Duration::from_millis(200))
        .build()
        .expect("client")
}

#[test]
fn a_waiter_in_another_client_acquires_right_after_the_release() {
    let cluster = Cluster::start(5);
    let holder = crate::harness::client(cluster.urls());
    let waiter = slow_poller(&cluster.urls());
    let mut waits = Vec::new();
    for round in 0..5 {
        let resource = format!("wake:{round}");
        let guard = holder.lock(&resource, TTL).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let guard = waiter
                    .lock_for(&resource, TTL, Duration::from_secs(30))
                    .expect("acquired after the release");
                tx.send(Instant::now()).unwrap();
                drop(guard);
            });
            settles("the waiter is queued and listens", || {
                pubsub::waiting(&cluster, &resource, 1)
            });
            let released = Instant::now();
            drop(guard);
            let acquired = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the waiter acquired");
            waits.push(acquired.saturating_duration_since(released));
        });
    }
    waits.sort();
    println!("release → acquisition in another client: {waits:?}");
    // One PUBLISH per release at most, on one node: never a herd. (None when
    // the waiter's own round got in first: a round in flight as the release
    // lands is granted at the gate node without a wake-up — on a loaded CI
    // machine, two of five were.)
    let published = publishes(&cluster);
    assert!(
        (1..=5).contains(&published),
        "each release woke its one waiter, on one node: {published} PUBLISHes"
    );
    // Polling alone would take up to the 400 ms retry delay, and would land
    // under 100 ms in only a quarter of the cases.
    for wait in &waits {
        assert!(
            *wait < Duration::from_millis(100),
            "woken by the release, not the retry delay: {waits:?}"
        );
    }
}

/// The child half of [`a_waiter_in_another_process_acquires_right_after_the_release`].
/// Run on its own (without the parent's variables), it fails.
#[test]
#[ignore = "run as a child process by a_waiter_in_another_process_acquires_right_after_the_release"]
fn child_waiter() {
    let urls = std::env::var("WAKEUPS_CHILD_URLS").expect("run as a child process");
    let resource = std::env::var("WAKEUPS_CHILD_RESOURCE").expect("run as a child process");
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let redlock = slow_poller(&urls);
    let guard = redlock
        .lock_for(&resource, TTL, Duration::from_secs(30))
        .expect("acquired after the release");
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros();
    println!("acquired at {micros}");
    drop(guard);
}

#[test]
fn a_waiter_in_another_process_acquires_right_after_the_release() {
    let cluster = Cluster::start(5);
    let holder = crate::harness::client(cluster.urls());
    let resource = "wake:process";
    let guard = holder.lock(resource, TTL).unwrap();
    let mut child = crate::harness::child_test(module_path!(), "child_waiter")
        .args(["--nocapture", "--test-threads=1"])
        .env("WAKEUPS_CHILD_URLS", cluster.urls().join(","))
        .env("WAKEUPS_CHILD_RESOURCE", resource)
        .stdout(Stdio::piped())
        .spawn()
        .expect("child test process");
    settles("the child is queued and listens", || {
        pubsub::waiting(&cluster, resource, 1)
    });
    let released = SystemTime::now();
    drop(guard);
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // Read to the end: the child still writes after the line we want.
    let output: Vec<String> = stdout.lines().map_while(Result::ok).collect();
    let acquired = output
        .iter()
        // libtest prints `test child_waiter ... ` before it on the same line.
        .find_map(|line| {
            line.split("acquired at ")
                .nth(1)?
                .trim()
                .parse::<u128>()
                .ok()
        })
        .expect("the child reports its acquisition");
    assert!(child.wait().unwrap().success());
    let released = released.duration_since(UNIX_EPOCH).unwrap().as_micros();
    let wait = Duration::from_micros(u64::try_from(acquired.saturating_sub(released)).unwrap());
    println!("release → acquisition in another process: {wait:?}");
    assert!(
        wait < Duration::from_millis(100),
        "woken by the release, not the 400 ms retry delay: {wait:?}"
    );
}

#[test]
fn a_lost_notification_falls_back_to_the_retry_delay() {
    let cluster = Cluster::start(5);
    let holder = crate::harness::client(cluster.urls());
    let waiter = slow_poller(&cluster.urls());
    let resource = "wake:lost";
    let guard = holder.lock(resource, TTL).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let guard = waiter.lock_for(resource, TTL, Duration::from_secs(30));
            (guard.map(drop), Instant::now())
        });
        settles("the waiter is queued and listens", || {
            pubsub::waiting(&cluster, resource, 1)
        });
        // The round its subscription triggers has been made (the gate node
        // ran the holder's, the waiter's first and that round's scripts),
        // so the release below cannot be caught by it.
        settles("the waiter's round once subscribed", || {
            cluster.nodes.iter().any(|n| n.scripts_run() >= 3)
        });
        // Cut every subscriber connection, then release at once: nobody
        // hears it, and the waiter's subscriber reconnects only later.
        for node in &cluster.nodes {
            let _: redis::Value = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query(&mut node.conn())
                .unwrap();
        }
        assert!(!pubsub::waiting(&cluster, resource, 1));
        let released = Instant::now();
        drop(guard);
        // Nobody listened when the release published its wake-up (a
        // subscriber reconnects only after its 500 ms back-off), so the
        // notice was lost. (How soon the waiter then acquires is no proof
        // either way: its retry timer started up to the retry delay before
        // the release, and was seen to end 8 ms after it.)
        assert!(
            !pubsub::waiting(&cluster, resource, 1),
            "a listener came back"
        );
        let (acquired, at) = waiting.join().unwrap();
        acquired.expect("acquired by polling after the lost notification");
        let waited = at.saturating_duration_since(released);
        println!("acquired {waited:?} after the unheard release");
    });
    // The subscription comes back for the next wait.
    let guard = holder.lock(resource, TTL).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            waiter
                .lock_for(resource, TTL, Duration::from_secs(30))
                .map(drop)
        });
        settles("the waiter listens again", || {
            pubsub::waiting(&cluster, resource, 1)
        });
        drop(guard);
        waiting.join().unwrap().expect("acquired");
    });
}

#[test]
fn with_notifications_off_nothing_is_published_or_subscribed() {
    let cluster = Cluster::start(3);
    let quiet = |urls: &[String]| {
        crate::harness::builder(urls)
            .release_notifications(false)
            .retry_delay(Duration::from_millis(20))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (quiet(&cluster.urls()), quiet(&cluster.urls()));
    let guard = holder.lock("quiet", TTL).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock_for("quiet", TTL, Duration::from_secs(30))
                .map(drop)
        });
        // The waiter is past its first busy round.
        settles("the waiter tried", || {
            cluster.nodes.iter().all(|n| n.calls("set") >= 2)
        });
        drop(guard);
        waiting.join().unwrap().expect("acquired by retrying");
    });
    for node in &cluster.nodes {
        assert_eq!(node.calls("publish"), 0);
        assert_eq!(node.calls("subscribe"), 0);
    }
}

/// Under RESP3 a subscription is acknowledged by a push: wake-ups work the
/// same.
#[test]
fn a_resp3_waiter_is_woken_like_a_resp2_one() {
    let cluster = Cluster::start(3);
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| format!("{u}?protocol=resp3"))
        .collect();
    let holder = crate::harness::client(&urls);
    let waiter = slow_poller(&urls);
    let guard = holder.lock("wake:resp3", TTL).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let guard = waiter.lock_for("wake:resp3", TTL, Duration::from_secs(30));
            (guard.map(drop), Instant::now())
        });
        settles("the waiter is queued and listens", || {
            pubsub::waiting(&cluster, "wake:resp3", 1)
        });
        let released = Instant::now();
        drop(guard);
        let (acquired, at) = waiting.join().unwrap();
        acquired.expect("acquired");
        let wait = at.saturating_duration_since(released);
        assert!(
            wait < Duration::from_millis(100),
            "woken by the release, not the 400 ms retry delay: {wait:?}"
        );
    });
}

/// With notifications on but nobody waiting, a release publishes nothing.
/// What the release's gate node holds of the resource, or of its readers.
#[derive(Debug, Clone, Copy)]
enum GateView {
    /// Nothing: it missed the holder's `SET` (say it timed out there).
    Missed,
    /// Another token, on node `n` (the gate node or not): a release that
    /// timed out there, or a late `SET`, left it behind.
    Stray(usize),
}

/// A lease's release wakes the head of the queue whatever the gate node
/// holds: a gate node that missed the holder's `SET`, or keeps another
/// token, must not leave the waiters to their timer or to that key's
/// expiry. The stray key goes on each node in turn, so that one run puts
/// it on the gate node.
#[test]
fn a_release_wakes_the_waiter_whatever_the_gate_node_holds() {
    use crate::harness::partition::Net;
    let cluster = Cluster::start(3);
    // Each client through its own links (the same gate node for both).
    let net = Net::new(&cluster, 2);
    let holder = crate::harness::client(net.urls(0));
    let waiter = crate::harness::builder(net.urls(1))
        .retry_delay(Duration::from_secs(30))
        .build()
        .unwrap();
    let views = [
        GateView::Missed,
        GateView::Stray(0),
        GateView::Stray(1),
        GateView::Stray(2),
    ];
    for (i, view) in views.into_iter().enumerate() {
        let resource = format!("wake:view:{i}");
        let guard = holder.lock(&resource, TTL).unwrap();
        settles("held on every node", || {
            cluster.count_key_now(&resource) == 3
        });
        std::thread::scope(|s| {
            let waits = s.spawn(|| waiter.lock_for(&resource, TTL, Duration::from_secs(20)));
            settles("the waiter is queued and listens", || {
                pubsub::waiting(&cluster, &resource, 1)
            });
            let g = cluster
                .nodes
                .iter()
                .position(|n| pubsub::queued(n, &resource) == 1)
                .expect("the gate node");
            // The waiter's rounds stop reaching the gate node: one arriving
            // after the key is gone there would take it (the waiter heads
            // the queue) and leave the release nothing to wake it for.
            net.cut(1, g);
            let (node, value) = match view {
                GateView::Missed => (g, None),
                GateView::Stray(n) => (n, Some("a stray token")),
            };
            let mut conn = cluster.nodes[node].conn();
            let _: () = match value {
                None => redis::cmd("DEL").arg(&resource).query(&mut conn),
                Some(v) => redis::cmd("SET")
                    .arg(&resource)
                    .arg(v)
                    .arg("PX")
                    .arg(60_000)
                    .query(&mut conn),
            }
            .unwrap();
            let gate = &cluster.nodes[g];
            let before = gate.calls("publish");
            guard.release().unwrap();
            settles("the release on the gate node published a wake-up", || {
                gate.calls("publish") > before
            });
            net.heal(1, g);
            let acquired = waits.join().unwrap();
            acquired
                .unwrap_or_else(|err| panic!("{view:?}: {err}"))
                .release()
                .unwrap();
        });
    }
}

/// The same for a writer behind a reader the gate node never saw (its
/// `ZADD` timed out there, say): the reader's release woke the waiting
/// writer only where the gate node held that reader, and the writer
/// waited for its timer.
#[test]
fn a_readers_release_wakes_the_writer_although_the_gate_node_never_saw_it() {
    use crate::harness::partition::Net;
    let cluster = Cluster::start(3);
    let net = Net::new(&cluster, 2);
    let reader = crate::harness::client(net.urls(0));
    let writer = crate::harness::builder(net.urls(1))
        .retry_delay(Duration::from_secs(30))
        .build()
        .unwrap();
    let guard = reader.rw_lock("unseen").read(TTL).unwrap();
    let readers = |n: &crate::harness::Node| -> usize {
        redis::cmd("ZCARD")
            .arg("redlock-rw:unseen#r")
            .query(&mut n.conn())
            .unwrap()
    };
    settles("read on every node", || {
        cluster.nodes.iter().all(|n| readers(n) == 1)
    });
    std::thread::scope(|s| {
        let waits = s.spawn(|| {
            writer
                .rw_lock("unseen")
                .acquire_write(TTL)
                .wait(Duration::from_secs(20))
                .lock()
        });
        let queued = |n: &crate::harness::Node| pubsub::queued(n, "redlock-rw:unseen");
        // The gate node as the reading that saw the writer queued.
        let mut gate = None;
        settles("the writer is queued", || {
            gate = cluster.nodes.iter().position(|n| queued(n) == 1);
            gate.is_some()
        });
        let g = gate.unwrap();
        net.cut(1, g);
        let gate = &cluster.nodes[g];
        let _: () = redis::cmd("DEL")
            .arg("redlock-rw:unseen#r")
            .query(&mut gate.conn())
            .unwrap();
        let before = gate.calls("publish");
        guard.release().unwrap();
        settles(
            "the reader's release on the gate node woke the writer",
            || gate.calls("publish") > before,
        );
        net.heal(1, g);
        waits.join().unwrap().expect("written").release().unwrap();
    });
}

#[test]
fn a_release_nobody_waits_for_publishes_nothing() {
    let cluster = Cluster::start(3);
    let client = crate::harness::client(cluster.urls());
    for i in 0..20 {
        client
            .lock(&format!("quiet:{i}"), TTL)
            .unwrap()
            .release()
            .unwrap();
    }
    // `release` returns at a majority: the slowest node runs its deletes a
    // little later.
    settles("every release ran", || {
        cluster.nodes.iter().map(|n| n.calls("del")).sum::<u64>() >= 60
    });
    assert_eq!(publishes(&cluster), 0);
}

/// Pub/sub is server-wide, but clients of two databases locking the same
/// names neither wake each other nor make each other publish: wake-ups go
/// to a client's own channel, named by a random id, from queues kept in
/// each database.
#[test]
fn clients_of_another_database_neither_wake_nor_publish() {
    let cluster = Cluster::start(3);
    let in_db =
        |db: u32| -> Vec<String> { cluster.urls().iter().map(|u| format!("{u}/{db}")).collect() };
    let holder = crate::harness::client(in_db(1));
    let waiter = slow_poller(&in_db(1));
    let other = crate::harness::client(in_db(2));
    let guard = holder.lock("shared", TTL).unwrap();
    std::thread::scope(|s| {
        let waiting_in_1 = s.spawn(|| waiter.lock_for("shared", TTL, Duration::from_secs(30)));
        settles("the waiter in database 1 is queued", || {
            cluster.nodes.iter().any(|n| {
                let queued: usize = redis::cmd("ZCARD")
                    .arg("redlock-queue:shared")
                    .query(&mut n.conn_db(1))
                    .unwrap();
                queued == 1
            })
        });
        for _ in 0..20 {
            other.lock("shared", TTL).unwrap().release().unwrap();
        }
        assert_eq!(publishes(&cluster), 0, "database 2 woke nobody");
        drop(guard);
        waiting_in_1
            .join()
            .unwrap()
            .expect("acquired")
            .release()
            .unwrap();
    });
    assert_eq!(publishes(&cluster), 1, "one wake-up, in database 1");
}

/// A subscriber connection that goes silent (a NAT or firewall that
/// dropped it: no FIN, no RST) is noticed and replaced within seconds:
/// subscribers ping their node when they heard nothing for a second, and
/// replace a connection that does not answer, so that node's wake-ups are
/// not lost for as long as anyone waits.
#[test]
fn a_silent_subscriber_connection_is_replaced_within_seconds() {
    let cluster = Cluster::start(5);
    let proxies: Vec<Proxy> = cluster.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let holder = crate::harness::client(&urls);
    let waiter = crate::harness::builder(&urls)
        .retry_delay(Duration::from_secs(8))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = holder.lock("wake:silent", Duration::from_secs(60)).unwrap();
    std::thread::scope(|s| {
        let waits = s.spawn(|| waiter.lock_for("wake:silent", TTL, Duration::from_secs(30)));
        settles("the waiter is queued and listens", || {
            pubsub::waiting(&cluster, "wake:silent", 1)
        });
        // One subscriber per node (the others connect alongside the gate
        // node's, not necessarily before the waiter queued).
        settles("a subscriber connection on every node", || {
            subscriber_connections(&cluster) == 5
        });
        // Every connection open now goes silent; the nodes still see them.
        for proxy in &proxies {
            proxy.silence_existing();
        }
        let silenced = Instant::now();
        settles("a new subscriber connection on every node", || {
            subscriber_connections(&cluster) == 10
        });
        let replaced = silenced.elapsed();
        println!("silent subscribers replaced after {replaced:?}");
        assert!(replaced < Duration::from_secs(5), "{replaced:?}");
        // The holder's connections are silent too: free the resource by
        // hand, and wake the queue's head as a release would.
        // Queued still, or again: its renewals went silent too, until its
        // command connections were replaced.
        let mut gate = None;
        settles("the waiter queued on the gate node", || {
            gate = cluster
                .nodes
                .iter()
                .find(|n| crate::harness::pubsub::queued(n, "wake:silent") == 1);
            gate.is_some()
        });
        let gate = gate.unwrap();
        // The head is read before the key goes: once it is free, the
        // waiter's own next round (it renews its place every 500 ms) may
        // be granted and leave the queue first (an empty queue failed the
        // read after the DEL once in a BUSY=2 run).
        let head: Vec<String> = redis::cmd("ZRANGE")
            .arg("redlock-queue:wake:silent")
            .arg(0)
            .arg(0)
            .query(&mut gate.conn())
            .unwrap();
        let (client, ticket) = head[0].rsplit_once(':').unwrap();
        for node in &cluster.nodes {
            let _: i64 = redis::cmd("DEL")
                .arg("wake:silent")
                .query(&mut node.conn())
                .unwrap();
        }
        let _: i64 = redis::cmd("PUBLISH")
            .arg(format!("redlock-wake:{client}"))
            .arg(ticket)
            .query(&mut gate.conn())
            .unwrap();
        waits.join().unwrap().expect("acquired").release().ok();
        drop(guard);
    });
}
