//! A Redis Cluster at its edges, on small clusters of
//! real `redis-server`s set up slot by slot here
//! (`cluster-require-full-coverage no`, so a cluster with unserved slots is
//! up):
//!
//! - slots added after the client was built are served from the next
//!   request (the partial map it started with was kept for ever);
//! - a release whose slot migrates meets `TRYAGAIN`, at the old master and,
//!   after `ASK`, at the new one, and goes through once the migration ends
//!   within its time (it was sent three more times in 3 ms, the last
//!   without `ASKING`, and failed);
//! - after a map flap (a master's slots unserved for a while, then given to
//!   a new master), the new master waits the restart quarantine (it was
//!   admitted by its uptime: the lost locks' keys were not there).

use std::time::{Duration, Instant};

use crate::harness::{Node, NodeOptions, eventually};
use redlock_sync::{Error, FailureKind, Redlock};

const TTL: Duration = Duration::from_secs(30);

fn query<T: redis::FromRedisValue>(node: &Node, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut node.conn())
        .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", node.port))
}

/// `n` cluster members that know each other and serve no slot yet.
fn members(n: usize) -> Vec<Node> {
    let options = NodeOptions {
        extra_args: vec![
            "--cluster-enabled".into(),
            "yes".into(),
            "--cluster-require-full-coverage".into(),
            "no".into(),
            "--cluster-node-timeout".into(),
            "5000".into(),
        ],
        ..NodeOptions::default()
    };
    let nodes: Vec<Node> = (0..n).map(|_| Node::start(&options)).collect();
    for node in &nodes[1..] {
        let _: () = query(
            &nodes[0],
            &["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()],
        );
    }
    eventually(
        "every member knows the others",
        Duration::from_secs(20),
        || {
            nodes.iter().all(|node| {
                query::<String>(node, &["CLUSTER", "NODES"])
                    .lines()
                    .filter(|l| !l.contains("handshake") && !l.contains("noaddr"))
                    .count()
                    == n
            })
        },
    );
    nodes
}

fn id(node: &Node) -> String {
    query(node, &["CLUSTER", "MYID"])
}

/// Who serves which slots, as `node` says (`CLUSTER SLOTS`, sorted).
fn map_seen_by(node: &Node) -> Vec<(i64, i64, i64)> {
    let ranges: Vec<redis::Value> = query(node, &["CLUSTER", "SLOTS"]);
    let mut map: Vec<(i64, i64, i64)> = ranges
        .into_iter()
        .map(|range| {
            let redis::Value::Array(fields) = range else {
                panic!("not a CLUSTER SLOTS range: {range:?}");
            };
            let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).expect("int");
            let redis::Value::Array(master) = &fields[2] else {
                panic!("no master in {fields:?}");
            };
            (int(&fields[0]), int(&fields[1]), int(&master[1]))
        })
        .collect();
    map.sort_unstable();
    map
}

/// Waits until every member says `expected` (first slot, last slot, port)
/// and that the cluster is up.
fn agreed(nodes: &[Node], expected: &[(i64, i64, u16)]) {
    let expected: Vec<(i64, i64, i64)> = expected
        .iter()
        .map(|&(a, b, port)| (a, b, i64::from(port)))
        .collect();
    eventually(
        "every member agrees on the map",
        Duration::from_secs(20),
        || {
            nodes.iter().all(|n| {
                map_seen_by(n) == expected
                    && query::<String>(n, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            })
        },
    );
}

fn slot_of(node: &Node, key: &str) -> i64 {
    query(node, &["CLUSTER", "KEYSLOT", key])
}

/// A name whose slot is in `range`.
fn name_in(node: &Node, prefix: &str, range: std::ops::RangeInclusive<i64>) -> String {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|name| range.contains(&slot_of(node, name)))
        .expect("some name hashes there")
}

fn client(seed: &Node) -> Redlock {
    Redlock::builder([format!("redis+cluster://{}", seed.address())])
        .node_timeout(Duration::from_secs(2))
        .retry_count(0)
        .build()
        .expect("client")
}

#[test]
fn slots_added_after_the_client_started_are_served() {
    let nodes = members(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let _: () = query(a, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    agreed(&nodes, &[(0, 8191, a.port)]);
    let client = client(a);
    let later = name_in(a, "edges:later", 8192..=16383);
    let err = client.try_lock(&later, TTL).unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    assert!(err.to_string().contains("no master"), "{err}");

    let _: () = query(b, &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"]);
    agreed(&nodes, &[(0, 8191, a.port), (8192, 16383, b.port)]);
    // The next request reads the map again (it may be the one after, if
    // the last reading was less than 100 ms ago).
    let guard = client
        .lock_for(&later, TTL, Duration::from_secs(5))
        .expect("served by the master that got the slot");
    assert!(b.get_now(&later).is_some(), "the key is on the new master");
    guard.release().expect("released");
}

/// Marks `slot` migrating from `from` to `to`.
fn migrating(slot: i64, from: &Node, to: &Node) {
    let slot = slot.to_string();
    let _: () = query(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)]);
    let _: () = query(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)]);
}

/// Moves `keys` from `from` to `to` (their TTLs with them).
fn migrate(from: &Node, to: &Node, keys: &[&str]) {
    let port = to.port.to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    args.extend(keys);
    let _: String = query(from, &args);
}

/// Ends the migration of `slot`: `to` serves it, as every member says
/// (told first, so that a request the old master sends there is served).
fn migrated(slot: i64, nodes: &[Node], to: &Node) {
    let slot = slot.to_string();
    let to_id = id(to);
    let others = nodes.iter().filter(|n| n.port != to.port);
    for node in std::iter::once(to).chain(others) {
        let _: () = query(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
}

#[test]
fn a_release_meeting_tryagain_mid_migration_goes_through_once_the_migration_ends() {
    let nodes = members(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let _: () = query(a, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    agreed(&nodes, &[(0, 16383, a.port)]);
    let client = client(a);
    // Two names in two slots; with wake-ups on (the default) a release
    // runs a script on the lock key and its queue key, which does not
    // exist.
    let at_source = "edges:tryagain:source";
    let at_target = name_in(a, "edges:tryagain:target", 0..=16383);
    let at_target = if slot_of(a, &at_target) == slot_of(a, at_source) {
        name_in(a, "edges:tryagain:other", 0..=16383)
    } else {
        at_target
    };
    for (name, ask) in [(at_source, false), (at_target.as_str(), true)] {
        let slot = slot_of(a, name);
        let guard = client.try_lock(name, TTL).unwrap().expect("free");
        migrating(slot, a, b);
        if ask {
            // The lock key moved: the old master answers ASK (none of the
            // keys is there), the new one, asked, TRYAGAIN (one is missing).
            migrate(a, b, &[name]);
        }
        // The old master answers TRYAGAIN (one key there, one missing)
        // until the migration ends, 300 ms from now.
        let finish = std::thread::scope(|scope| {
            let ender = scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                if !ask {
                    migrate(a, b, &[name]);
                }
                // Before the slot moves: the release cannot end before it.
                let moving = Instant::now();
                migrated(slot, &nodes, b);
                moving
            });
            let released = guard.release();
            let at = Instant::now();
            let ended = ender.join().expect("migration ended");
            released.unwrap_or_else(|e| panic!("release of {name} (ask: {ask}): {e}"));
            (at, ended)
        });
        assert!(finish.0 >= finish.1, "released only once the slot moved");
        assert_eq!(b.get_now(name), None, "{name} released on the new master");
    }
}

#[test]
fn a_master_given_a_lost_masters_slots_after_a_map_flap_waits_the_quarantine() {
    map_flap(false);
}

/// The same when the master that lost the slots still serves others (the
/// rule once asked for the old master to be gone from the map).
#[test]
fn a_master_given_slots_its_old_master_lost_after_a_map_flap_waits_the_quarantine() {
    map_flap(true);
}

/// a serves 0-8191, b 8192-16383; a lock is held in 12000-16383. Those
/// slots go unserved everywhere (b lost them: its keys with them, and with
/// `b_keeps_some`, b keeps serving 8192-11999), the client reads that map,
/// then c, up for longer than the quarantine, gets them: c must wait the
/// quarantine while the first holder's lock is valid.
fn map_flap(b_keeps_some: bool) {
    const PERIOD: Duration = Duration::from_secs(2);
    let nodes = members(3);
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let _: () = query(a, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    let _: () = query(b, &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"]);
    agreed(&nodes, &[(0, 8191, a.port), (8192, 16383, b.port)]);
    // Every master admitted by its uptime (the period plus a second).
    std::thread::sleep(PERIOD + Duration::from_millis(1100));
    let holder = Redlock::builder([format!("redis+cluster://{}", a.address())])
        .node_timeout(Duration::from_secs(2))
        .retry_count(0)
        .restart_quarantine(PERIOD)
        .build()
        .expect("client");
    let name = name_in(a, "edges:flap", 12000..=16383);
    let guard = holder.try_lock(&name, TTL).unwrap().expect("free");

    let lost_from = if b_keeps_some { "12000" } else { "8192" };
    for node in &nodes {
        let _: () = query(node, &["CLUSTER", "DELSLOTSRANGE", lost_from, "16383"]);
    }
    if b_keeps_some {
        agreed(&nodes, &[(0, 8191, a.port), (8192, 11999, b.port)]);
    } else {
        agreed(&nodes, &[(0, 8191, a.port)]);
    }
    let _: () = query(b, &["FLUSHALL"]);
    crate::harness::settles("the client read the map without those slots", || {
        let err = holder.try_lock(&name, TTL).unwrap_err();
        assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
        err.to_string().contains("no master")
    });
    let _: () = query(c, &["CLUSTER", "ADDSLOTSRANGE", lost_from, "16383"]);
    let mut map = vec![(0, 8191, a.port)];
    if b_keeps_some {
        map.extend([(8192, 11999, b.port), (12000, 16383, c.port)]);
    } else {
        map.push((8192, 16383, c.port));
    }
    agreed(&nodes, &map);
    let mut refused = String::new();
    crate::harness::settles("the client reads the new map", || {
        match holder.try_lock(&name, TTL) {
            Err(Error::NoQuorum { failures, .. })
                if failures
                    .iter()
                    .any(|f| f.kind() == FailureKind::Quarantined) =>
            {
                refused = failures[0].to_string();
                true
            }
            Err(Error::NoQuorum { .. }) => false,
            Ok(Some(_)) => panic!("a second holder: c was admitted by its uptime"),
            other => panic!("unexpected {other:?}"),
        }
    });
    println!("{refused}");
    assert!(guard.is_valid(), "the first holder's lock is still valid");
    drop(guard);
}
