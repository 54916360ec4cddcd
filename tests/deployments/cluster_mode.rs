//! A node list that says something else than the servers are: `build()`
//! refuses it, with the URL form to use.
//!
//! - a member of a Redis Cluster listed as a plain `redis://` node;
//! - a standalone server listed as `redis+cluster://`;
//! - one cluster listed twice, through two of its members.
//!
//! Two real `redis-server`s in cluster mode, each serving half of the
//! slots, joined with `CLUSTER MEET`, and a plain one.

use std::time::Duration;

use crate::harness::{Node, NodeOptions, eventually};
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

/// Two members serving half of the slots each, up.
fn two_member_cluster() -> (Node, Node) {
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
    (a, b)
}

/// What `build()` says about `nodes`; fails the test if it builds.
fn refusal(nodes: &[String]) -> String {
    match Redlock::builder(nodes)
        .retry_count(0)
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .build()
    {
        Ok(_) => panic!("{nodes:?} built"),
        Err(err @ Error::Config { .. }) => {
            let text = err.to_string();
            println!("{text}");
            text
        }
        Err(other) => panic!("not a Config error: {other:?}"),
    }
}

#[test]
fn the_wrong_url_form_for_a_cluster_is_refused_at_build_with_the_form_to_use() {
    let (a, b) = two_member_cluster();
    let plain = Node::start(&NodeOptions::default());
    let cluster_url = |nodes: &[&Node]| -> String {
        let seeds: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    };

    // A cluster's members as plain servers: each serves half of the slots.
    let text = refusal(&[a.url(), b.url(), plain.url()]);
    for member in [&a, &b] {
        assert!(
            text.contains(&format!(
                "node 127.0.0.1:{}: a member of a Redis Cluster",
                member.port
            )),
            "{text}"
        );
    }
    assert!(text.contains("redis+cluster://host:port"), "{text}");
    assert!(
        !text.contains(&format!("127.0.0.1:{}:", plain.port)),
        "{text}"
    );

    // A standalone server as a cluster.
    let text = refusal(&[cluster_url(&[&plain]), cluster_url(&[&a])]);
    assert!(
        text.contains(&format!(
            "seed 127.0.0.1:{} is not in cluster mode",
            plain.port
        )),
        "{text}"
    );
    assert!(text.contains("as redis://host:port"), "{text}");

    // One cluster listed twice, through each member: named once, as clusters.
    let text = refusal(&[cluster_url(&[&a]), cluster_url(&[&b]), plain.url()]);
    assert_eq!(
        text.matches("reach the same Redis Cluster").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "cluster nodes cluster:127.0.0.1:{} and cluster:127.0.0.1:{} reach the same Redis \
             Cluster",
            a.port, b.port
        )),
        "{text}"
    );
    assert!(text.contains("list each cluster once"), "{text}");

    // Listed right, it builds and locks whatever the name's slot.
    let client = Redlock::builder([cluster_url(&[&a, &b])])
        .node_timeout(crate::harness::ROOMY_NODE_TIMEOUT)
        .build()
        .expect("a cluster listed as one redis+cluster:// node builds");
    for i in 0..8 {
        let guard = client
            .try_lock(&format!("cluster:res:{i}"), Duration::from_secs(5))
            .expect("locks in either half")
            .expect("free");
        guard.release().expect("released");
    }
    assert_eq!(
        query::<i64>(&plain, &["DBSIZE"]),
        0,
        "nothing written there"
    );
}
