//! Bad input is a clear `Error::Config`, never a panic; nothing secret leaks
//! into errors or `Debug` output.

mod harness;

use std::time::Duration;

use harness::Cluster;
use redlock_sync::{Error, Redlock};

fn config_error<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Config { reason }) => reason,
        other => panic!("expected Error::Config, got {other:?}"),
    }
}

#[test]
fn bad_node_lists_are_rejected_at_build() {
    let none: [&str; 0] = [];
    assert!(config_error(Redlock::new(none)).contains("no nodes"));
    assert!(
        config_error(Redlock::new([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:1/3"
        ]))
        .contains("twice")
    );
    assert!(config_error(Redlock::new(["127.0.0.1:6379"])).contains("not a Redis URL"));
    assert!(config_error(Redlock::new(["http://127.0.0.1:6379"])).contains("not a Redis URL"));
    assert!(config_error(Redlock::new(["redis://:pw@127.0.0.1:notaport"])).contains("node #0"));
    let reason = config_error(Redlock::new([
        "redis://127.0.0.1:1",
        "redis://user:hunter2@:2/x",
    ]));
    assert!(reason.contains("node #1"), "{reason}");
    assert!(!reason.contains("hunter2"), "password leaked: {reason}");
}

#[test]
fn bad_settings_are_rejected_at_build() {
    let b = || Redlock::builder(["redis://127.0.0.1:1"]);
    assert!(config_error(b().drift_factor(f64::NAN).build()).contains("drift_factor"));
    assert!(config_error(b().drift_factor(-0.5).build()).contains("drift_factor"));
    assert!(config_error(b().node_timeout_factor(2.0).build()).contains("node_timeout_factor"));
    assert!(config_error(b().node_timeout(Duration::ZERO).build()).contains("node_timeout"));
    assert!(config_error(b().connect_timeout(Duration::ZERO).build()).contains("connect_timeout"));
    assert!(config_error(b().retry_delay(Duration::MAX).build()).contains("retry_delay"));
    assert!(config_error(b().queue_capacity(0).build()).contains("queue_capacity"));
}

#[test]
fn a_built_client_reports_its_settings() {
    let redlock = Redlock::builder(["redis://127.0.0.1:1"])
        .connect_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let config = redlock.config();
    assert_eq!(config.retry_count(), 10);
    assert_eq!(config.retry_delay(), Duration::from_millis(50));
    assert_eq!(config.retry_jitter(), Duration::from_millis(150));
    assert_eq!(config.drift_factor(), 0.01);
    assert_eq!(config.node_timeout(), None);
    assert_eq!(config.node_timeout_factor(), 0.005);
    assert_eq!(config.connect_timeout(), Duration::from_millis(100));
    assert_eq!(config.queue_capacity(), 4096);
    assert!(!config.fencing());
    assert_eq!(config.restart_quarantine(), None);
    assert!(config.release_notifications());
    let shown = format!("{config:?}");
    assert!(shown.contains("retry_count: 10"), "{shown}");
    assert!(!shown.contains("floor"), "settings, not internals: {shown}");
    let redlock = Redlock::builder(["redis://127.0.0.1:1"])
        .connect_timeout(Duration::from_millis(100))
        .retry_count(3)
        .node_timeout(Duration::from_millis(7))
        .fencing(true)
        .build()
        .unwrap();
    assert_eq!(redlock.config().retry_count(), 3);
    assert_eq!(
        redlock.config().node_timeout(),
        Some(Duration::from_millis(7))
    );
    assert!(redlock.config().fencing());
}

/// The builder's getters are deprecated (read them from the built client)
/// but still work.
#[test]
#[allow(deprecated)]
fn builder_getters_report_defaults_and_settings() {
    let b = Redlock::builder(["redis://127.0.0.1:1"]);
    assert_eq!(b.get_retry_count(), 10);
    assert_eq!(b.get_retry_delay(), Duration::from_millis(50));
    assert_eq!(b.get_retry_jitter(), Duration::from_millis(150));
    assert_eq!(b.get_drift_factor(), 0.01);
    assert_eq!(b.get_node_timeout(), None);
    assert_eq!(b.get_node_timeout_factor(), 0.005);
    assert_eq!(b.get_connect_timeout(), Duration::from_secs(1));
    let b = b.retry_count(3).node_timeout(Duration::from_millis(7));
    assert_eq!(b.get_retry_count(), 3);
    assert_eq!(b.get_node_timeout(), Some(Duration::from_millis(7)));
}

#[test]
fn bad_calls_are_rejected_before_touching_redis() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::new(cluster.urls()).unwrap();
    let ttl = Duration::from_secs(1);
    assert!(config_error(redlock.lock("", ttl)).contains("empty"));
    assert!(config_error(redlock.try_lock("r", Duration::ZERO)).contains("ttl"));
    assert!(config_error(redlock.try_lock("r", Duration::from_micros(500))).contains("ttl"));
    assert!(config_error(redlock.try_lock("r", Duration::from_millis(2))).contains("drift"));
    assert!(config_error(redlock.try_lock("r", Duration::MAX)).contains("too large"));
    assert!(config_error(redlock.lock_for("r", Duration::ZERO, ttl)).contains("ttl"));
    assert_eq!(cluster.count_key("r"), 0);
    // lock_for with an unrepresentable wait still returns (it acquires).
    let guard = redlock.lock_for("r", ttl, Duration::MAX).unwrap();
    drop(guard);
}

#[test]
fn debug_output_hides_tokens_and_passwords() {
    let cluster = Cluster::start(3);
    let urls: Vec<String> = cluster.urls();
    let builder = Redlock::builder(
        urls.iter()
            .map(|u| u.replace("redis://", "redis://:s3cret@")),
    );
    assert!(!format!("{builder:?}").contains("s3cret"));
    let redlock = Redlock::new(&urls).unwrap();
    let guard = redlock.lock("res:debug", Duration::from_secs(5)).unwrap();
    let token = cluster
        .nodes
        .iter()
        .find_map(|n| n.get("res:debug"))
        .expect("stored token");
    let shown = format!("{guard:?} {redlock:?}");
    assert!(!shown.contains(&token), "token leaked: {shown}");
    assert!(shown.contains("res:debug"));
}

#[test]
fn public_types_are_send_sync_static() {
    fn assert_traits<T: Send + Sync + 'static>() {}
    fn assert_clone<T: Clone>() {}
    assert_traits::<Redlock>();
    assert_clone::<Redlock>();
    assert_traits::<redlock_sync::LockGuard>();
    assert_traits::<redlock_sync::RedlockBuilder>();
    assert_traits::<Error>();
    assert_traits::<redlock_sync::NodeFailure>();
}
