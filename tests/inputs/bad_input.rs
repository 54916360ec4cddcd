//! Bad input never panics, hangs or leaks a key: property tests over resource
//! names, TTLs, settings and node lists, against real nodes.
//!
//! One `#[test]` owns the nodes and runs every property, so no server outlives
//! the test binary.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, NodeOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redlock_sync::{Error, Redlock};

/// An operation that returns must do so well within this (no hangs).
const BOUND: Duration = Duration::from_secs(5);

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Waits (bounded) until no running node has `key`.
fn no_key_left(cluster: &Cluster, key: &str) -> Result<(), TestCaseError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while cluster.count_key_now(key) > 0 {
        prop_assert!(Instant::now() < deadline, "key {key:?} leaked");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn resource_names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "\\PC{1,40}",
        any::<String>().prop_filter("non-empty", |s| !s.is_empty()),
        prop::collection::vec(any::<u8>(), 1..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "[a-z]{10000,20000}",
    ]
}

fn ttls() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_micros(999)),
        Just(Duration::from_millis(2)),
        Just(Duration::from_millis(3)),
        Just(Duration::MAX),
        Just(Duration::from_millis(u64::from(u32::MAX))),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..100_000u64).prop_map(Duration::from_millis),
    ]
}

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0..2_000u64).prop_map(Duration::from_millis),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn factors() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(0.0),
        Just(1.0),
        0.0..1.0f64,
        any::<f64>(),
    ]
}

#[test]
fn bad_input_is_a_clear_error_never_a_panic_hang_or_leak() {
    let cluster = Cluster::start(3);
    // The roomy per-node timeout: a 14 kB name's round missed the derived
    // 25 ms on two nodes in a BUSY=2 run (a NoQuorum that says nothing
    // about the input).
    let client = crate::harness::client(cluster.urls());

    // Resource names: any string locks and releases, or is a Config error.
    runner()
        .run(&resource_names(), |name| {
            match client.try_lock(&name, Duration::from_secs(5)) {
                Err(Error::Config { .. }) => prop_assert!(name.is_empty()),
                Ok(Some(guard)) => {
                    prop_assert_eq!(guard.resource(), name.as_str());
                    guard.release().unwrap();
                    no_key_left(&cluster, &name)?;
                }
                other => prop_assert!(false, "{name:?}: {other:?}"),
            }
            Ok(())
        })
        .unwrap();

    // TTLs: a lock, a Config error, or — for a TTL of a few milliseconds,
    // whose per-node timeout is a third of it — TooSlow or NoQuorum.
    runner()
        .run(&ttls(), |ttl| {
            let key = format!("prop:ttl:{ttl:?}");
            let started = Instant::now();
            match client.try_lock(&key, ttl) {
                Ok(Some(guard)) => drop(guard),
                Err(Error::Config { .. }) => {}
                Err(Error::TooSlow { .. } | Error::NoQuorum { .. })
                    if ttl < Duration::from_millis(100) => {}
                other => prop_assert!(false, "{ttl:?}: {other:?}"),
            }
            prop_assert!(started.elapsed() < BOUND);
            no_key_left(&cluster, &key)
        })
        .unwrap();

    // Settings: build is Ok or a Config error; a built client works.
    let settings = (
        any::<u32>(),
        durations(),
        durations(),
        factors(),
        durations(),
        factors(),
        durations(),
        any::<usize>(),
    );
    runner()
        .run(
            &settings,
            |(retries, delay, jitter, drift, timeout, factor, connect, queue)| {
                let built = Redlock::builder(cluster.urls())
                    .retry_count(retries)
                    .retry_delay(delay)
                    .retry_jitter(jitter)
                    .drift_factor(drift)
                    .node_timeout(timeout)
                    .node_timeout_factor(factor)
                    .connect_timeout(connect)
                    .queue_capacity(queue % 3 * (queue / 3 % (1 << 21)))
                    .build();
                match built {
                    Err(Error::Config { .. }) => {}
                    Ok(redlock) => {
                        let started = Instant::now();
                        match redlock.try_lock("prop:settings", Duration::from_secs(5)) {
                            Ok(Some(guard)) => drop(guard),
                            Err(Error::Config { .. } | Error::NoQuorum { .. }) => {}
                            other => prop_assert!(false, "{other:?}"),
                        }
                        prop_assert!(started.elapsed() < timeout.max(BOUND) * 2);
                        no_key_left(&cluster, "prop:settings")?;
                    }
                    Err(other) => prop_assert!(false, "{other:?}"),
                }
                Ok(())
            },
        )
        .unwrap();

    // Node lists: empty, duplicate, malformed, unreachable, wrong password, a
    // replica answering READONLY.
    let replica = Node::start(&NodeOptions::default());
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(cluster.nodes[0].port)
        .query(&mut replica.conn())
        .unwrap();
    let mut choices: Vec<String> = cluster.urls();
    choices.extend([
        cluster.urls()[0].clone(),
        "redis://127.0.0.1:1".into(),
        format!("redis://:wrong@127.0.0.1:{}", cluster.nodes[1].port),
        replica.url(),
        "redis://".into(),
        "not a url".into(),
        "redis://127.0.0.1:99999".into(),
        "unix:///nonexistent/redis.sock".into(),
    ]);
    let lists = prop::collection::vec(
        prop_oneof![prop::sample::select(choices), "\\PC{0,30}"],
        0..7,
    );
    runner()
        .run(&lists, |urls| {
            let started = Instant::now();
            let built = Redlock::builder(&urls)
                .connect_timeout(Duration::from_millis(300))
                .build();
            match built {
                Err(Error::Config { reason }) => prop_assert!(!reason.contains("wrong")),
                Ok(redlock) => {
                    match redlock.try_lock("prop:nodes", Duration::from_secs(5)) {
                        Ok(Some(guard)) => drop(guard),
                        Ok(None) | Err(Error::NoQuorum { .. }) => {}
                        other => prop_assert!(false, "{other:?}"),
                    }
                    no_key_left(&cluster, "prop:nodes")?;
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
            prop_assert!(
                started.elapsed() < BOUND,
                "{urls:?} took {:?}",
                started.elapsed()
            );
            Ok(())
        })
        .unwrap();
}
