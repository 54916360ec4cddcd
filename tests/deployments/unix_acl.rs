//! Nodes reached over unix sockets, and through an ACL user allowed only the
//! commands the crate needs (the `ACL SETUSER` line in docs/operations.md), against real
//! servers; a user lacking one of them gets an error that names it.

use std::time::Duration;

use crate::harness::pubsub::{self, subscriber_connections};
use crate::harness::{Cluster, NodeOptions, capture_logs, logs, settles};
use redlock_sync::{Error, FailureKind, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Everything the client can do, on `client`'s nodes.
fn exercise(client: &Redlock) {
    let mut guard = client.lock("acl:one", TTL).unwrap();
    guard.extend(TTL).unwrap();
    guard.keep_alive();
    guard.release().unwrap();
    let both = client.lock_all(&["acl:a", "acl:b"], TTL).unwrap();
    assert!(both.fencing_token().is_some());
    both.release().unwrap();
    assert!(client.try_lock("acl:one", TTL).unwrap().is_some());
    // The semaphore's, the reader-writer lock's and the election's
    // scripts, waiting included.
    let permit = client.semaphore("acl:sem", 1).lock(TTL).unwrap();
    assert!(
        client
            .semaphore("acl:sem", 1)
            .try_lock(TTL)
            .unwrap()
            .is_none()
    );
    permit.release().unwrap();
    let read = client.rw_lock("acl:rw").read(TTL).unwrap();
    assert!(client.rw_lock("acl:rw").try_write(TTL).unwrap().is_none());
    read.release().unwrap();
    client
        .rw_lock("acl:rw")
        .write(TTL)
        .unwrap()
        .release()
        .unwrap();
    let election = client.election("acl:e");
    let mut observer = election.observe();
    assert_eq!(observer.next_timeout(TTL), Some(None));
    let mut leadership = election.campaign("a", TTL).win().unwrap();
    leadership.proclaim("b").unwrap();
    assert_eq!(
        election.leader().unwrap().map(|l| l.value().to_owned()),
        Some("b".into())
    );
    assert_eq!(
        observer
            .next_timeout(TTL)
            .flatten()
            .map(|l| l.value().to_owned()),
        Some("b".into())
    );
    leadership.resign().unwrap();
}

#[test]
fn unix_socket_nodes_work_like_tcp_nodes() {
    let cluster = Cluster::start_with(
        3,
        &NodeOptions {
            unix_socket: true,
            ..NodeOptions::default()
        },
    );
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.unix_url()).collect();
    let client = crate::harness::builder(&urls)
        .fencing(true)
        .build()
        .unwrap();
    exercise(&client);
    // Named by their socket path.
    let health = client.node_health();
    assert_eq!(
        health[0].address(),
        cluster.nodes[0].socket_path().to_str().unwrap()
    );
    settles("every key released", || {
        cluster.count_key_now("acl:one") == 0
    });
}

/// The line in docs/operations.md, with the password and key pattern filled in.
const ACL: &str = "on >s3cret ~* resetchannels &redlock-wake:* -@all +set +get +del +pexpire +pttl +exists +eval +evalsha +time +zadd +zcard +zscore +zrange +zrangebyscore +zrem +zremrangebyscore +info +select +publish +subscribe +unsubscribe +punsubscribe +ping";

fn acl_user(cluster: &Cluster, user: &str, rules: &str) -> Vec<String> {
    for node in &cluster.nodes {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(user);
        for rule in rules.split_whitespace() {
            cmd.arg(rule);
        }
        let _: () = cmd.query(&mut node.conn()).unwrap();
    }
    cluster
        .nodes
        .iter()
        .map(|n| format!("redis://{user}:s3cret@127.0.0.1:{}", n.port))
        .collect()
}

#[test]
fn a_user_with_only_the_documented_commands_can_do_everything() {
    let cluster = Cluster::start(3);
    let client = fencing_client_as(&cluster, ACL);
    exercise(&client);
    // The TTLs in use, which other clients judge clock jumps by, were
    // announced on every node.
    for node in &cluster.nodes {
        let ttls: Vec<String> = node.query(redis::cmd("ZRANGE").arg("redlock:ttls").arg(0).arg(-1));
        assert!(!ttls.is_empty(), "no TTLs announced on node {}", node.port);
    }
}

/// A fencing client with a restart quarantine, as a user with `rules`, over
/// `cluster`'s nodes (admitted).
fn fencing_client_as(cluster: &Cluster, rules: &str) -> Redlock {
    for node in &cluster.nodes {
        node.admit();
    }
    let urls = acl_user(cluster, "redlock", rules);
    crate::harness::builder(&urls)
        .fencing(true)
        .restart_quarantine(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The ACL documented before scripts went out by hash: every script goes
/// out with its source instead, and everything works.
#[test]
fn a_user_without_evalsha_can_do_everything_too() {
    let cluster = Cluster::start(3);
    let client = fencing_client_as(&cluster, &ACL.replace(" +evalsha", ""));
    exercise(&client);
    // Every connection of the client has by now sent a script by hash and
    // been refused: the first batch that did so, every call of it (a
    // batch of a keep-alive and a release is refused twice).
    let before: Vec<Stats> = cluster.nodes.iter().map(Stats::of).collect();
    for stats in &before {
        assert!(stats.get("evalsha", "rejected_calls") >= 1, "{}", stats.0);
    }
    // Calls of one script side by side, many to a batch. (That a refused
    // batch goes again with every request's source, also two calls of
    // one script, is `scripts::tests`' unit test.)
    const THREADS: u64 = 6;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let client = &client;
            s.spawn(move || {
                for i in 0..20 {
                    let guard = client.lock(&format!("acl:many:{t}:{i}"), TTL).unwrap();
                    guard.release().expect("every release succeeds");
                }
            });
        }
    });
    // A connection refused once is never asked by hash again: no refusal
    // more, unless a connection that timed out on a loaded machine was
    // replaced (each authenticates as the ACL user; the test's own do
    // not), and then at most one batch of calls for it.
    for (node, before) in cluster.nodes.iter().zip(&before) {
        let after = Stats::of(node);
        let delta =
            |command: &str, field: &str| after.get(command, field) - before.get(command, field);
        let refused = delta("evalsha", "rejected_calls");
        let connections = delta("auth", "calls") + delta("hello", "calls");
        assert!(refused <= connections * (THREADS + 1), "{}", after.0);
        assert!(delta("eval", "calls") >= THREADS * 20, "{}", after.0);
    }
}

/// A node's `INFO commandstats`.
struct Stats(String);

impl Stats {
    fn of(node: &crate::harness::Node) -> Stats {
        Stats(
            redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut node.conn())
                .unwrap(),
        )
    }

    /// One `field` of one `command`'s line (0 if the command never ran).
    fn get(&self, command: &str, field: &str) -> u64 {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|l| {
                l.split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

#[test]
fn a_user_lacking_a_command_gets_an_error_that_names_it() {
    let cluster = Cluster::start(3);
    let rules = ACL.replace(" +eval ", " ").replace(" +evalsha", "");
    let urls = acl_user(&cluster, "noeval", &rules);
    let client = crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    // SET NX is allowed; the release script is not.
    let guard = client.lock("acl:noeval", TTL).unwrap();
    let err = guard.release().unwrap_err();
    let Error::NoQuorum { failures, .. } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert!(
        failures.iter().any(|f| f.kind() == FailureKind::Auth),
        "{err}"
    );
    assert!(err.to_string().contains("'eval'"), "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
}

/// A command refused inside a script (the node says `ERR … can't run this
/// command`) is an `Auth` failure too, not a server error.
#[test]
fn a_command_a_script_may_not_run_is_an_auth_failure() {
    let cluster = Cluster::start(3);
    let urls = acl_user(&cluster, "nozrem", &ACL.replace(" +zremrangebyscore", ""));
    let client = crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    let err = client.rw_lock("acl:nozrem").try_write(TTL).unwrap_err();
    let Error::NoQuorum { failures, .. } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert!(
        failures.iter().all(|f| f.kind() != FailureKind::Server),
        "{err}"
    );
    assert!(
        failures.iter().any(|f| f.kind() == FailureKind::Auth),
        "{err}"
    );
}

/// As the docs' ACL user, a release wakes a waiter in another client at
/// once; a user without the pub/sub rules still releases, and its waiters
/// fall back to their retry delay.
#[test]
fn release_notifications_work_as_the_acl_user_and_are_optional() {
    let cluster = Cluster::start(3);
    let urls = acl_user(&cluster, "redlock", ACL);
    let holder = crate::harness::client(&urls);
    let waiter = crate::harness::builder(&urls)
        .retry_delay(Duration::from_secs(20))
        .build()
        .unwrap();
    let guard = holder.lock("acl:wake", TTL).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock_for("acl:wake", TTL, Duration::from_secs(60))
                .map(drop)
        });
        settles("the waiter is queued and listens", || {
            pubsub::waiting(&cluster, "acl:wake", 1)
        });
        let released = std::time::Instant::now();
        drop(guard);
        waiting.join().unwrap().expect("acquired");
        assert!(
            released.elapsed() < Duration::from_secs(10),
            "woken by the release, not after its retry delay"
        );
    });

    // Everything the client sent as this user was allowed, including what
    // its subscriber connections send when they close.
    drop((holder, waiter));
    settles("subscriber connections closed", || {
        subscriber_connections(&cluster) == 0
    });
    for node in &cluster.nodes {
        let denials: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut node.conn())
            .unwrap();
        assert!(denials.is_empty(), "ACL LOG: {denials:?}");
    }

    let without = ACL
        .replace(" &redlock-wake:*", "")
        .replace(" +publish +subscribe +unsubscribe +punsubscribe", "");
    let urls = acl_user(&cluster, "nopubsub", &without);
    capture_logs();
    let mark = crate::harness::log_mark();
    let quick = || {
        crate::harness::builder(&urls)
            .retry_delay(Duration::from_millis(20))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (quick(), quick());
    let guard = holder.lock("acl:quiet", TTL).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock_for("acl:quiet", TTL, Duration::from_secs(30))
                .map(drop)
        });
        settles("the refused subscription is reported", || {
            crate::harness::logs_since(mark).iter().any(|l| {
                l.starts_with("WARN") && l.contains("refuses to subscribe") && l.contains("NOPERM")
            })
        });
        guard
            .release()
            .expect("released although PUBLISH is denied");
        waiting.join().unwrap().expect("acquired by retrying");
    });
    assert!(!logs().iter().any(|l| l.contains("s3cret")));
    settles("every key released", || {
        cluster.count_key_now("acl:quiet") == 0
    });
}

/// A key pattern written before the clock-jump marker (it names
/// `redlock:admitted` alone) still works: only the marker is lost.
#[test]
fn a_key_pattern_without_the_clock_marker_still_works() {
    let cluster = Cluster::start(3);
    let narrow = ACL.replace(
        " ~* ",
        " ~acl:* ~redlock-fence:* ~redlock-queue:* ~redlock-alive:* ~redlock:admitted ",
    );
    let urls = acl_user(&cluster, "narrow", &narrow);
    let client = crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    client.lock("acl:narrow", TTL).unwrap().release().unwrap();
    assert!(client.verify().iter().all(|n| n.refusal().is_none()));
}

/// A user that may not read the clock (`TIME`) cannot be trusted with
/// votes: `build()` says what to allow.
#[test]
fn a_user_without_time_is_told_to_allow_it() {
    let cluster = Cluster::start(3);
    let urls = acl_user(&cluster, "notime", &ACL.replace(" +time", ""));
    let err = crate::harness::builder(&urls).build().unwrap_err();
    assert!(err.to_string().contains("+time"), "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
}
