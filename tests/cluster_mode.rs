//! A member of a Redis Cluster listed as a plain `redis://` node: the calls
//! fail, and the failure says what the node is and to list the cluster as
//! one `redis+cluster://` node instead — not a bare `MOVED`.
//!
//! Two real `redis-server`s in cluster mode, each serving half of the
//! slots, joined with `CLUSTER MEET`.

mod harness;

use std::time::Duration;

use harness::{Node, NodeOptions, eventually};
use redlock_sync::{Error, Redlock};

fn cluster_member() -> NodeOptions {
    NodeOptions {
        extra_args: vec!["--cluster-enabled".into(), "yes".into()],
        ..NodeOptions::default()
    }
}

fn query<T: redis::FromRedisValue>(node: &Node, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut node.conn())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn a_cluster_member_listed_as_a_node_is_named_with_what_to_do() {
    let a = Node::start(&cluster_member());
    let b = Node::start(&cluster_member());
    let _: () = query(&a, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    let _: () = query(&b, &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"]);
    let _: () = query(&a, &["CLUSTER", "MEET", "127.0.0.1", &b.port.to_string()]);
    eventually(
        "both members see the cluster up",
        Duration::from_secs(20),
        || {
            [&a, &b]
                .iter()
                .all(|n| query::<String>(n, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        },
    );
    // A name whose slot the other member serves.
    let name = (0..)
        .map(|i| format!("cluster:res:{i}"))
        .find(|name| query::<i64>(&a, &["CLUSTER", "KEYSLOT", name]) >= 8192)
        .expect("some name hashes to the other half");
    let client = Redlock::builder([a.url()])
        .retry_count(0)
        .node_timeout(harness::ROOMY_NODE_TIMEOUT)
        .build()
        .unwrap();
    let err = client
        .try_lock(&name, Duration::from_secs(5))
        .expect_err("the key's slot is served elsewhere");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    let text = err.to_string();
    println!("{text}");
    assert!(text.contains("Redis Cluster mode"), "{text}");
    assert!(text.contains("redis+cluster://"), "{text}");
    assert_eq!(
        query::<i64>(&b, &["DBSIZE"]),
        0,
        "nothing written elsewhere"
    );
}
