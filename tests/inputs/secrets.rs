//! No password or token ever appears in an error, a `Debug` output or a log
//! line, for any input: property tests over node URLs with secrets in the
//! user-information position, through the public API, with every log record
//! captured.

use std::cell::Cell;
use std::time::Duration;

use crate::harness::{Cluster, NodeOptions, capture_logs};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redlock_sync::Redlock;

/// The log lines recorded since `seen`, which moves past them. The log is
/// the whole binary's and other tests read it too: nothing is taken out.
fn logs_since(seen: &Cell<usize>) -> String {
    let new = crate::harness::logs_since(seen.get());
    seen.set(seen.get() + new.len());
    new.join("\n")
}

/// A password made of marker words joined by URL punctuation.
fn password() -> impl Strategy<Value = (String, Vec<String>)> {
    prop::collection::vec(("[A-Za-z]{6,9}", "[/?#@:%=&]{0,2}"), 1..4).prop_map(|parts| {
        let words = parts.iter().map(|(w, _)| w.clone()).collect();
        let text = parts.iter().map(|(w, sep)| format!("{w}{sep}")).collect();
        (text, words)
    })
}

#[test]
fn secrets_never_reach_errors_debug_output_or_logs() {
    capture_logs();
    let seen = Cell::new(0);
    // A port with nothing behind it: connections are refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let urls = (
        prop_oneof![Just("redis"), Just("unix"), Just("rediss"), Just("http")],
        "[a-z]{0,6}",
        password(),
        prop_oneof![Just(String::new()), "[/?#][ -~]{0,12}"],
        any::<bool>(),
    );
    runner
        .run(&urls, |(scheme, user, (pw, words), tail, in_query)| {
            // The secret as a password, or in the query (as unix URLs carry it).
            let url = if in_query {
                format!("{scheme}://127.0.0.1:{closed}/0?user={user}&pass={pw}")
            } else {
                format!("{scheme}://{user}:{pw}@127.0.0.1:{closed}{tail}")
            };
            let builder = Redlock::builder([url.as_str()])
                .connect_timeout(Duration::from_millis(100))
                .node_timeout(Duration::from_millis(50))
                .retry_count(0);
            let mut shown = format!("{builder:?}");
            match builder.build() {
                Err(err) => shown.push_str(&format!("{err} {err:?}")),
                Ok(client) => {
                    shown.push_str(&format!("{client:?}"));
                    let err = client.lock("res", Duration::from_secs(1)).unwrap_err();
                    shown.push_str(&format!("{err} {err:?}"));
                }
            }
            shown.push_str(&logs_since(&seen));
            for word in words.iter().filter(|w| !tail.contains(w.as_str())) {
                prop_assert!(
                    !shown.contains(word.as_str()),
                    "{url:?} showed {word:?}: {shown}"
                );
            }
            Ok(())
        })
        .unwrap();

    // Real nodes with a password: a wrong one, and the right one with tokens.
    let cluster = Cluster::start_with(
        3,
        &NodeOptions {
            password: Some("Right0Secret".into()),
            ..NodeOptions::default()
        },
    );
    let wrong: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://u:Wrong0Secret@127.0.0.1:{}", n.port))
        .collect();
    let refused = Redlock::builder(&wrong).retry_count(0).build().unwrap();
    let err = refused.lock("res", Duration::from_secs(5)).unwrap_err();
    let client = Redlock::new(cluster.urls()).unwrap();
    let mut guard = client.lock("res", Duration::from_secs(5)).unwrap();
    // From a node that has it: the lock returned at a majority, and the
    // third node's `SET` may still be on its way (node 0 alone failed this
    // once, under BUSY=2).
    let token = cluster
        .nodes
        .iter()
        .find_map(|n| n.get_now("res"))
        .expect("the token on a majority");
    guard.extend(Duration::from_secs(5)).unwrap();
    let guard_debug = format!("{guard:?} {client:?}");
    guard.release().unwrap();
    let busy = {
        let _held = client.lock("res", Duration::from_secs(5)).unwrap();
        client
            .try_lock("res", Duration::from_secs(5))
            .map(|g| g.is_some())
    };
    let shown = format!(
        "{err} {err:?} {refused:?} {guard_debug} {busy:?} {}",
        logs_since(&seen)
    );
    for secret in ["Wrong0Secret", "Right0Secret", token.as_str()] {
        assert!(!shown.contains(secret), "{secret:?} shown: {shown}");
    }
}
