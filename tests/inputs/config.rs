//! Bad input is a clear `Error::Config`, never a panic; nothing secret leaks
//! into errors or `Debug` output.

use std::time::Duration;

use crate::harness::Cluster;
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
    assert!(
        config_error(Redlock::new(["127.0.0.1:6379"]))
            .contains("no scheme; write it as redis://127.0.0.1:6379")
    );
    assert!(config_error(Redlock::new(["http://127.0.0.1:6379"])).contains("not a Redis URL"));
    assert!(config_error(Redlock::new(["redis://:pw@127.0.0.1:notaport"])).contains("node #0"));
    let reason = config_error(Redlock::new([
        "redis://127.0.0.1:1",
        "redis://user:hunter2@:2/x",
    ]));
    assert!(reason.contains("node #1"), "{reason}");
    assert!(!reason.contains("hunter2"), "password leaked: {reason}");
}

/// Each malformed URL a newcomer wrote gets a message in their
/// own terms, saying how to write it (and never showing the password).
#[test]
fn malformed_urls_say_what_is_wrong_and_how_to_write_it() {
    let says = |url: &str, expected: &str| {
        let reason = config_error(Redlock::new([url]));
        assert!(reason.contains(expected), "{url:?}: {reason}");
        assert!(!reason.contains("hunter"), "{url:?} leaked: {reason}");
        assert!(!reason.contains("InvalidClientConfig"), "{url:?}: {reason}");
    };
    says(
        " redis://127.0.0.1:6379",
        "space or line break before or after it; remove it",
    );
    says("redis://127.0.0.1:6379\n", "space or line break");
    says(
        "localhost:6379",
        "no scheme; write it as redis://localhost:6379",
    );
    says(
        "hunter2",
        "no scheme; write it as redis://[user:password@]host",
    );
    // Not plainly a host: it could be a user and a password, never shown.
    for (input, secret) in [("admin:123456", "123456"), ("john.doe:48291", "48291")] {
        let reason = config_error(Redlock::new([input]));
        assert!(!reason.contains(secret), "{reason}");
        assert!(reason.contains("no scheme"), "{reason}");
    }
    says(
        "redis://127.0.0.1:99999",
        "port 99999 is not a port number; use one from 1 to 65535",
    );
    says("redis://127.0.0.1:abc", "the port is not a number");
    says("redis://:hunter/2@127.0.0.1:6379", "percent-encode");
    says("redis://127.0.0.1:6379/x", "database number, such as /0");
    says("redis://", "no host");
    says("http://127.0.0.1:6379", "not a Redis URL; use redis://");
}

/// A call's bad argument is not configuration: the error names the call,
/// and zero reads "0 ms".
#[test]
fn a_bad_argument_names_the_call() {
    let redlock = Redlock::builder(["redis://127.0.0.1:1"])
        .connect_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let reason = config_error(redlock.lock("r", Duration::ZERO));
    assert!(
        reason.starts_with("invalid argument to lock: the ttl is 0 ms"),
        "{reason}"
    );
    let reason = config_error(redlock.try_lock("", Duration::from_secs(1)));
    assert!(
        reason.starts_with("invalid argument to try_lock:"),
        "{reason}"
    );
    let reason = config_error(redlock.acquire("r", Duration::ZERO).lock());
    assert!(
        reason.starts_with("invalid argument to Acquire::lock:"),
        "{reason}"
    );
    // The builder's errors are configuration.
    let reason = config_error(
        Redlock::builder(["redis://127.0.0.1:1"])
            .drift_factor(2.0)
            .build(),
    );
    assert!(
        reason.starts_with("invalid configuration: drift_factor"),
        "{reason}"
    );
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
    assert_eq!(cluster.count_key_now("r"), 0);
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
        .find_map(|n| n.get_now("res:debug"))
        .expect("stored token");
    let shown = format!("{guard:?} {redlock:?}");
    assert!(!shown.contains(&token), "token leaked: {shown}");
    assert!(shown.contains("res:debug"));
    // The client shows its nodes and settings, not internals.
    let client = format!("{redlock:?}");
    assert!(client.contains("retry_count: 10"), "{client}");
    assert!(client.contains(&cluster.nodes[0].address()), "{client}");
    for internal in ["fencing_floor", "queue_refresh", "transport", "waiters"] {
        assert!(!client.contains(internal), "{client}");
    }
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
