//! The `metrics` feature: every documented series is recorded, with its
//! labels, through a recorder installed as any program's would be.
#![cfg(feature = "metrics")]

use crate::recorder;

use std::time::Duration;

use crate::harness::{Cluster, NodeOptions, settles, test_client};
use recorder::Recorder;
use redlock_sync::{CancelToken, Error};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn every_documented_series_is_recorded_with_its_labels() {
    let _turn = crate::turn();
    let recorder = Recorder::default();
    metrics::set_global_recorder(recorder.clone()).expect("the only recorder of this test binary");

    let mut cluster = Cluster::start_with(
        3,
        &NodeOptions {
            shift_clock: true,
            ..NodeOptions::default()
        },
    );
    let holder = test_client(cluster.urls(), 0, Some(Duration::from_millis(50)));
    let other = test_client(cluster.urls(), 0, Some(Duration::from_millis(50)));

    let guard = holder.lock("m:res", TTL).unwrap();
    assert!(other.try_lock("m:res", TTL).unwrap().is_none());
    let token = CancelToken::new();
    token.cancel();
    let err = other
        .acquire("m:other", TTL)
        .cancel_on(&token)
        .lock()
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }));
    guard.release().unwrap();

    // A kept-alive lock renewed, then lost when a majority stops answering.
    let mut kept = holder.lock("m:kept", Duration::from_millis(300)).unwrap();
    kept.keep_alive();
    let first = kept.valid_until();
    settles("renewed", || kept.valid_until() > first);
    let paused: Vec<String> = cluster.nodes[..2].iter().map(|n| n.address()).collect();
    cluster.nodes[0].pause();
    cluster.nodes[1].pause();
    settles("lost", || !kept.is_valid());
    let err = other.try_lock("m:nq", TTL).unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    cluster.nodes[0].resume();
    cluster.nodes[1].resume();
    drop(kept);
    // Both clients reach every node again (a snapshot drains the recorder,
    // so the gauge is read once, below).
    settles("every node up and counting in both clients", || {
        [&holder, &other].iter().all(|client| {
            drop(client.try_lock("m:gauge", TTL));
            client
                .node_health()
                .iter()
                .all(|n| n.is_up() && n.is_admitted())
        })
    });

    let seen = recorder.snapshot();
    let at_least_one = |name: &str| {
        assert!(
            seen.get(name).copied().unwrap_or(0) >= 1,
            "{name} missing in {:#?}",
            seen.keys().collect::<Vec<_>>()
        );
    };
    for outcome in ["acquired", "busy", "cancelled", "no_quorum"] {
        at_least_one(&format!("redlock_acquire_total{{outcome={outcome}}}"));
        at_least_one(&format!("redlock_acquire_seconds{{outcome={outcome}}}"));
        at_least_one(&format!("redlock_acquire_rounds{{outcome={outcome}}}"));
    }
    for op in ["acquire", "extend", "release"] {
        at_least_one(&format!("redlock_round_seconds{{op={op}}}"));
    }
    at_least_one("redlock_renewals_total{result=ok}");
    at_least_one("redlock_renewals_total{result=failed}");
    at_least_one("redlock_leases_lost_total{}");
    for node in &paused {
        at_least_one(&format!(
            "redlock_node_failures_total{{kind=timeout,node={node}}}"
        ));
    }
    // Every series is ours.
    for name in seen.keys() {
        assert!(name.starts_with("redlock_"), "{name}");
    }
    // Every node counts in both clients: the gauge sums them.
    assert_eq!(seen.get("redlock_nodes_admitted{}"), Some(&6), "{seen:#?}");

    // A node whose clock jumps ahead: counted once per client that sees it.
    let jumped = cluster.nodes[2].address();
    cluster.nodes[2].set_clock_offset(5_000);
    settles("the jump seen", || {
        drop(holder.try_lock("m:clock", TTL));
        holder.node_health()[2].refusal().is_some()
    });
    let seen = recorder.snapshot();
    let jumps = format!("redlock_clock_jumps_total{{node={jumped}}}");
    assert!(seen.get(&jumps).copied().unwrap_or(0) >= 1, "{seen:#?}");
}
