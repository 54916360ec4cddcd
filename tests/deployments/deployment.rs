//! The deployment checks (admission): what the algorithm assumes of the
//! nodes — distinct servers, keys that vanish only by expiry, no data lost
//! since a node was admitted — checked by the client against real
//! `redis-server` processes.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Fault, Node, NodeOptions, Proxy};
use redlock_sync::{Error, FailureKind, NodeHealth, Redlock};

const TTL: Duration = Duration::from_secs(30);

fn kind(health: &NodeHealth) -> Option<FailureKind> {
    health.refusal().map(|f| f.kind())
}

fn cmd(node: &Node, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query(&mut node.conn()).expect("command on the node");
}

fn quarantined(urls: &[String], period: Duration) -> Redlock {
    crate::harness::builder(urls)
        .restart_quarantine(period)
        .retry_count(0)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("client")
}

#[test]
fn one_server_under_two_names_is_refused_at_build_naming_both() {
    let cluster = Cluster::start(2);
    let port = cluster.nodes[0].port;
    let urls = [
        cluster.nodes[0].url(),
        format!("redis://localhost:{port}"),
        cluster.nodes[1].url(),
    ];
    let err = crate::harness::builder(&urls).build().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Config { .. }), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains(&format!("localhost:{port}")),
        "{text}"
    );
    // The first listed counts: the second is the one named as the mistake.
    assert!(
        text.contains(&format!(
            "node 127.0.0.1:{port} and node localhost:{port} are the same Redis server"
        )),
        "{text}"
    );
}

/// The review's scenario: one server listed under two names, found only
/// after build (it was paused then). Every extension script used to say
/// yes twice: A locks, the other real server loses the key (a restart),
/// and A's `extend` returned `Ok` on one server's word while B, listing the
/// nodes correctly, took the lock. The name found second never counts, so
/// the extension fails.
#[test]
fn a_duplicate_found_later_never_counts_twice() {
    let mut cluster = Cluster::start(3);
    let port = cluster.nodes[0].port;
    let urls = [
        cluster.nodes[0].url(),
        format!("redis://localhost:{port}"),
        cluster.nodes[1].url(),
    ];
    cluster.nodes[0].pause();
    let a = crate::harness::builder(&urls)
        .retry_count(0)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("the server under both names was paused at build");
    cluster.nodes[0].resume();
    let mut health = Vec::new();
    crate::harness::settles("both names reached the server", || {
        health = a.verify();
        health[..2].iter().all(|h| {
            h.refusal()
                .is_none_or(|f| f.kind() == FailureKind::Duplicate)
        }) && health[..2].iter().filter(|h| h.is_admitted()).count() == 1
    });
    let duplicate = health
        .iter()
        .find(|h| kind(h) == Some(FailureKind::Duplicate))
        .expect("one name is the duplicate");
    let first = &health[..2]
        .iter()
        .find(|h| h.is_admitted())
        .unwrap()
        .address()
        .to_owned();
    let detail = duplicate.refusal().unwrap().to_string();
    assert!(detail.contains(first.as_str()), "{detail}");
    // The same in node_health, with no I/O.
    assert_eq!(
        a.node_health()
            .iter()
            .filter(|h| kind(h) == Some(FailureKind::Duplicate))
            .count(),
        1
    );
    let mut guard = a.lock("dup", TTL).expect("the server and the other node");
    assert!(cluster.nodes[1].pttl_now("dup") > 0, "on the other server");
    cmd(&cluster.nodes[1], &["DEL", "dup"]); // it lost the key (a restart)
    match guard.extend(TTL) {
        // One server's word, with the duplicate refused: which of the two
        // answers a one-yes, one-no, one-refused round gets is the
        // truthful-answers rule; either way the extension fails.
        Err(Error::LockLost { confirmed, .. } | Error::NoQuorum { confirmed, .. }) => {
            assert_eq!(confirmed, 1);
        }
        other => panic!("extended on one server's word: {other:?}"),
    }
    // B, listing the nodes correctly, may now take it: A knows it lost it.
    let b = crate::harness::client([
        cluster.nodes[0].url(),
        cluster.nodes[1].url(),
        cluster.nodes[2].url(),
    ]);
    assert!(b.try_lock("dup", TTL).unwrap().is_some());
}

fn evicting(limit: &str, policy: &str) -> NodeOptions {
    NodeOptions {
        extra_args: ["--maxmemory", limit, "--maxmemory-policy", policy]
            .map(String::from)
            .to_vec(),
        ..NodeOptions::default()
    }
}

#[test]
fn a_node_that_may_evict_keys_is_refused_unless_the_user_accepts_it() {
    let cluster = Cluster::start_with(3, &evicting("64mb", "volatile-lru"));
    let err = crate::harness::builder(cluster.urls()).build().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Config { .. }), "{text}");
    assert!(
        text.contains("noeviction") && text.contains("volatile-lru"),
        "{text}"
    );
    for node in &cluster.nodes {
        assert!(text.contains(&node.address()), "{text}");
    }
    let allowed = crate::harness::builder(cluster.urls())
        .allow_eviction(true)
        .build()
        .expect("eviction accepted");
    assert!(allowed.config().allow_eviction());
    allowed.lock("evict", TTL).unwrap().release().unwrap();
    assert!(allowed.verify().iter().all(NodeHealth::is_admitted));
    // No memory limit: nothing is evicted, whatever the policy.
    let unlimited = Cluster::start_with(3, &evicting("0", "allkeys-lru"));
    let client = crate::harness::builder(unlimited.urls())
        .retry_count(0)
        .build()
        .expect("maxmemory 0 evicts nothing");
    client.lock("evict", TTL).unwrap().release().unwrap();
    // A limit set at run time is noticed at the next request after the
    // 5 s re-check (documented).
    for node in &unlimited.nodes {
        cmd(node, &["CONFIG", "SET", "maxmemory", "64mb"]);
    }
    let switched = Instant::now();
    crate::harness::eventually(
        "the client notices the eviction policy",
        Duration::from_secs(30),
        || match client.try_lock("evict", TTL) {
            Err(Error::NoQuorum { failures, .. }) => failures
                .iter()
                .any(|f| f.kind() == FailureKind::Eviction && f.detail().contains("noeviction")),
            Ok(guard) => {
                drop(guard);
                std::thread::sleep(Duration::from_millis(20));
                false
            }
            Err(other) => panic!("{other}"),
        },
    );
    println!(
        "eviction policy noticed {:?} after it was set",
        switched.elapsed()
    );
    for node in &unlimited.nodes {
        cmd(node, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    }
    crate::harness::eventually("the nodes count again", Duration::from_secs(30), || {
        matches!(client.try_lock("evict", TTL), Ok(Some(_)))
    });
}

/// A node restarted under a 4 s quarantine while a client locks every
/// 20 ms for 6 s: a handful of log lines about it, not one per request,
/// and the one saying it does not count names the cause.
#[test]
fn a_node_in_doubt_is_news_once_per_change() {
    crate::harness::capture_logs();
    let mark = crate::harness::log_mark();
    let mut cluster = Cluster::start(3);
    for node in &cluster.nodes {
        node.admit();
    }
    let client = quarantined(&cluster.urls(), Duration::from_secs(4));
    client.lock("news", TTL).unwrap().release().unwrap();
    cluster.nodes[0].restart();
    let address = cluster.nodes[0].address();
    let started = Instant::now();
    let mut refused = 0;
    while started.elapsed() < Duration::from_secs(6) {
        match client.lock("news", Duration::from_secs(1)) {
            Ok(guard) => guard.release().unwrap(),
            Err(err) => panic!("two nodes of three still count: {err}"),
        }
        if kind(&client.node_health()[0]) == Some(FailureKind::Quarantined) {
            refused += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(refused > 0, "the restarted node was never seen quarantined");
    // The quarantine ends about 5 s after the restart (its period and a
    // margin): on a loaded machine, past the loop above. Locks go on until
    // the node counts again.
    crate::harness::eventually("the node counts again", Duration::from_secs(20), || {
        if let Ok(guard) = client.lock("news", Duration::from_secs(1)) {
            guard.release().unwrap();
        }
        crate::harness::logs_since(mark)
            .iter()
            .any(|l| l.contains(&address) && l.contains("counts toward quorums again"))
    });
    let lines: Vec<String> = crate::harness::logs_since(mark)
        .iter()
        .filter(|l| l.contains(&address) && !l.starts_with("DEBUG") && !l.starts_with("TRACE"))
        .cloned()
        .collect();
    println!(
        "{} line(s) about {address}:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(lines.len() <= 6, "{lines:#?}");
    let out: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("does not count"))
        .collect();
    assert_eq!(out.len(), 1, "{lines:#?}");
    assert!(
        out[0].contains("restart quarantine") && out[0].contains("restarted"),
        "{lines:#?}"
    );
    // Counting again is news, not a warning.
    let back: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("counts toward quorums again"))
        .collect();
    assert_eq!(back.len(), 1, "{lines:#?}");
    assert!(back[0].starts_with("INFO"), "{lines:#?}");
}

/// Whether `node`'s slow log (every command, once `slowlog-log-slower-than`
/// is 0) holds a command with the argument `arg`.
fn logged_a_command_with(node: &Node, arg: &str) -> bool {
    use redis::Value;
    let entries: Vec<Value> = node.query(redis::cmd("SLOWLOG").arg("GET").arg(1000));
    let key = Value::BulkString(arg.as_bytes().to_vec());
    entries.iter().any(|entry| match entry {
        Value::Array(fields) => {
            matches!(fields.get(3), Some(Value::Array(args)) if args.contains(&key))
        }
        _ => false,
    })
}

/// The node's uptime in seconds.
fn uptime(node: &Node) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("uptime_in_seconds")
}

/// A replica promoted behind one address (a managed service's endpoint,
/// here a proxy switched to it) lacks the holder's key. A client started
/// after the switch, with the quarantine, used to trust it by its uptime.
/// Client A admitted the old master by its uptime and wrote the marker,
/// which replicated; it names the old master's incarnation, so the fresh
/// client waits the period. One without the quarantine takes the lock
/// while A's guard is valid (the hazard, shown).
#[test]
fn a_client_started_after_a_replica_took_over_an_address_waits_the_period() {
    let cluster = Cluster::start(3);
    let master = &cluster.nodes[0];
    let replica = Node::start(&NodeOptions {
        extra_args: vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port.to_string(),
        ],
        ..NodeOptions::default()
    });
    // The TTL is within the period, as the quarantine needs; every node has
    // been up for longer, so clients admit them by their uptime — and so
    // would a fresh client admit the promoted replica, without the marker.
    let period = Duration::from_secs(8);
    let ttl = period;
    crate::harness::eventually(
        "the nodes up for the period",
        Duration::from_secs(30),
        || {
            cluster
                .nodes
                .iter()
                .chain([&replica])
                .all(|n| uptime(n) > 9)
        },
    );
    let endpoint = Proxy::start(master.port);
    let urls = vec![
        endpoint.url(),
        cluster.nodes[1].url(),
        cluster.nodes[2].url(),
    ];
    let a = quarantined(&urls, period);
    a.lock("warm", ttl).unwrap().release().unwrap();
    // A's lock and release returned at a majority: its marker write to the
    // master may still be on its way.
    let mut marker = None;
    crate::harness::settles("A wrote the marker", || {
        marker = master.get_now("redlock:admitted");
        marker.is_some()
    });
    let marker = marker.unwrap();
    assert!(marker.ends_with(" client 8000"), "{marker}");
    crate::harness::settles("the replica has A's marker", || {
        replica.get_now("redlock:admitted") == Some(marker.clone())
    });
    // Node 1 holds the key for someone else for now: A's lock lands on
    // the endpoint's master and node 2.
    cmd(
        &cluster.nodes[1],
        &["SET", "took-over", "someone", "PX", "60000"],
    );
    // Node 1 logs every command from now, so the test can await A's request:
    // `lock` returns at its majority, and a `DEL` that overtook A's request
    // would let A's key land on node 1 too (then no one else can get in).
    cmd(
        &cluster.nodes[1],
        &["CONFIG", "SET", "slowlog-log-slower-than", "0"],
    );
    let guard = a.lock("took-over", ttl).expect("A locks");
    // Node 2's yes was needed: its value is the winning round's token,
    // which that round's request to node 1 carries too.
    let token = cluster.nodes[2]
        .get_now("took-over")
        .expect("A's key on node 2");
    crate::harness::settles("A's winning request reached node 1", || {
        logged_a_command_with(&cluster.nodes[1], &token)
    });
    crate::harness::settles("A's key replicated", || {
        replica.get_now("took-over").is_some()
    });
    cmd(&cluster.nodes[1], &["DEL", "took-over"]);
    // The replica takes over the address, without the key (what
    // asynchronous replication loses).
    cmd(&replica, &["REPLICAOF", "NO", "ONE"]);
    cmd(&replica, &["DEL", "took-over"]);
    endpoint.retarget(replica.port);
    // Without the quarantine: a second holder while A's guard is valid. (A
    // round may miss a node on a loaded machine: asked until it gets in.)
    let plain = crate::harness::client(&urls);
    let mut second = None;
    let (mut tries, mut last) = (0, None);
    crate::harness::settles("the client without the quarantine takes the lock", || {
        tries += 1;
        match plain.try_lock("took-over", ttl) {
            Ok(got) => second = got,
            Err(err) => last = Some(err),
        }
        second.is_some()
    });
    // (This failed twice, every try `Busy`, before the test awaited A's
    // request on node 1: A's key had landed there after the `DEL`.)
    assert!(
        guard.is_valid(),
        "the hazard: a fresh client without the quarantine trusts the promoted replica \
         (A's guard ran out first: {tries} tries, last error {last:?}, ended {:?} ago)",
        guard.valid_until().elapsed()
    );
    drop(second);
    // With it: refused for as long as A's guard is valid.
    let b = quarantined(&urls, period);
    let (mut tries, mut quarantined_seen) = (0, 0);
    while guard.remaining() > Duration::from_millis(300) {
        // The endpoint does not count: node 1 grants, node 2 is A's, so a
        // majority answered and a holder kept it from B (`None`), or a
        // node timed out on a loaded machine (`NoQuorum`). Never B's.
        match b.try_lock("took-over", ttl) {
            Ok(Some(_)) if guard.is_valid() => panic!("B got in while A's guard is valid"),
            Ok(_) | Err(Error::NoQuorum { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
        if kind(&b.node_health()[0]) == Some(FailureKind::Quarantined) {
            quarantined_seen += 1;
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        tries > 0 && quarantined_seen > 0,
        "{tries} {quarantined_seen}"
    );
    let why = b.node_health()[0].refusal().expect("refused").to_string();
    assert!(why.contains("promoted replica"), "{why}");
}

/// `verify` on a deployment with one node of each kind of fault reports
/// each cause. (A Redis older than 7.0 is not available here: its check
/// is a unit test in `facts.rs`; an unknown Sentinel service fails `build`,
/// `tests/deployments/sentinel.rs`.)
#[test]
fn verify_reports_each_nodes_cause() {
    let mut cluster = Cluster::start(4);
    let nodes = &mut cluster.nodes;
    let guarded = Node::start(&NodeOptions {
        password: Some("r1ght-s3cret".into()),
        ..NodeOptions::default()
    });
    let acl = Node::start(&NodeOptions::default());
    cmd(
        &acl,
        &[
            "ACL",
            "SETUSER",
            "locks",
            "on",
            ">acl-s3cret",
            "~*",
            "&*",
            "+@all",
        ],
    );
    for node in nodes.iter().chain([&guarded, &acl]) {
        node.admit();
    }
    let twin = Proxy::start(nodes[0].port);
    twin.set(Fault::Stall);
    let urls = vec![
        nodes[0].url(),
        nodes[1].url(),
        nodes[2].url(),
        nodes[3].url(),
        twin.url(),
        format!("redis://:wr0ng-s3cret@127.0.0.1:{}", guarded.port),
        format!("redis://locks:acl-s3cret@127.0.0.1:{}", acl.port),
    ];
    let client = quarantined(&urls, Duration::from_secs(60));
    nodes[1].kill();
    cmd(&nodes[2], &["CONFIG", "SET", "maxmemory", "64mb"]);
    cmd(
        &nodes[2],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    nodes[3].restart();
    twin.set(Fault::Pass);
    cmd(&acl, &["ACL", "SETUSER", "locks", "-info"]);
    // The twin's first probe may still time out on a loaded machine (it
    // was stalled until just now): asked again until it answers.
    let mut health = client.verify();
    crate::harness::settles("the twin answers a probe", || {
        if kind(&health[4]) == Some(FailureKind::Duplicate) {
            return true;
        }
        health = client.verify();
        false
    });
    let report: Vec<String> = health
        .iter()
        .map(|h| format!("{} {:?}", h.address(), h.refusal().map(ToString::to_string)))
        .collect();
    println!("{}", report.join("\n"));
    assert!(health[0].is_admitted(), "{report:#?}");
    assert_eq!(
        kind(&health[1]),
        Some(FailureKind::Connection),
        "{report:#?}"
    );
    assert_eq!(kind(&health[2]), Some(FailureKind::Eviction), "{report:#?}");
    assert_eq!(
        kind(&health[3]),
        Some(FailureKind::Quarantined),
        "{report:#?}"
    );
    assert!(report[3].contains("counts again in"), "{report:#?}");
    assert_eq!(
        kind(&health[4]),
        Some(FailureKind::Duplicate),
        "{report:#?}"
    );
    assert!(report[4].contains(&nodes[0].address()), "{report:#?}");
    assert_eq!(kind(&health[5]), Some(FailureKind::Auth), "{report:#?}");
    assert_eq!(
        kind(&health[6]),
        Some(FailureKind::Unsupported),
        "{report:#?}"
    );
    assert!(report[6].contains("+info"), "{report:#?}");
    let all = format!("{report:?} {health:?} {client:?}");
    for secret in ["wr0ng-s3cret", "r1ght-s3cret", "acl-s3cret"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
    // node_health reports the same, without I/O.
    let again: Vec<Option<FailureKind>> = client.node_health().iter().map(kind).collect();
    assert_eq!(
        &again[2..5],
        &[
            Some(FailureKind::Eviction),
            Some(FailureKind::Quarantined),
            Some(FailureKind::Duplicate)
        ]
    );
}
