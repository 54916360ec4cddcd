//! The logger is the user's code, and may ask the client what it knows: a
//! logger that formats the client and reads its nodes' health on every
//! record. The crate never calls the logger under a lock of its own, so
//! nothing deadlocks — not a node's examination saying it does not count
//! (the admission's lock), not a connection saying its node is down (the
//! node's health lock), not a kept lease lost. A child process installs
//! the logger (one per process); the parent waits for it with a deadline.

use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, child_env};
use redlock_sync::Redlock;

static CLIENT: OnceLock<Redlock> = OnceLock::new();
static ASKED: AtomicUsize = AtomicUsize::new(0);

/// On every record, formats the client and reads its nodes' health.
struct Asking;

impl log::Log for Asking {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        if let Some(client) = CLIENT.get() {
            let shown = format!("{client:?} {:?}", client.node_health());
            std::hint::black_box(shown);
            ASKED.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn flush(&self) {}
}

#[test]
#[ignore = "run as a child process by a_logger_that_asks_the_client_never_deadlocks_it"]
fn child_logs_through_a_logger_that_asks_the_client() {
    let parent = "a_logger_that_asks_the_client_never_deadlocks_it";
    assert_eq!(child_env("REDLOCK_TEST_CHILD", parent), "1");
    log::set_logger(&Asking).expect("the child's only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let mut cluster = Cluster::start(3);
    // New nodes with the quarantine on: each examination says, from a
    // connection thread, that the node does not count yet.
    let client = CLIENT.get_or_init(|| {
        Redlock::builder(cluster.urls())
            .restart_quarantine(Duration::from_secs(1))
            .connect_timeout(Duration::from_millis(500))
            .build()
            .expect("client")
    });
    crate::harness::settles("every node counts after its quarantine", || {
        client.lock("logged", Duration::from_secs(5)).is_ok()
    });
    // A kept lease whose keys vanish is lost at its next renewal.
    let mut guard = client
        .lock("kept", Duration::from_millis(600))
        .expect("locks");
    guard.keep_alive();
    for node in &cluster.nodes {
        let _: i64 = redis::cmd("DEL")
            .arg("kept")
            .query(&mut node.conn())
            .expect("DEL");
    }
    crate::harness::settles("the kept lease is lost", || !guard.is_valid());
    // A node killed: its connection says it is down.
    cluster.nodes[2].kill();
    crate::harness::settles("node 2 is refused as down", || {
        client.verify().iter().any(|health| {
            health
                .refusal()
                .is_some_and(|f| f.kind() == redlock_sync::FailureKind::Connection)
        })
    });
    assert!(client.lock("still", Duration::from_secs(5)).is_ok());
    assert!(ASKED.load(Ordering::Relaxed) > 0, "the logger was called");
}

#[test]
fn a_logger_that_asks_the_client_never_deadlocks_it() {
    let _turn = crate::turn();
    // Its output goes to a file: a pipe read only after it ends could fill
    // and stop it.
    let out_path = std::env::temp_dir().join(format!("redlock-logger-{}", std::process::id()));
    let out_file = std::fs::File::create(&out_path).expect("the child's output file");
    let mut child = crate::harness::child_test(
        module_path!(),
        "child_logs_through_a_logger_that_asks_the_client",
    )
    .env("REDLOCK_TEST_CHILD", "1")
    .stdout(Stdio::from(out_file))
    .stderr(Stdio::inherit())
    .spawn()
    .expect("re-run the test binary as a child");
    // A deadlock never ends: a deadline far past what the child needs
    // (about 3 s) tells it from a slow machine.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child did not finish in 120 s: a lock held across a call to the logger");
        }
        std::thread::sleep(Duration::from_millis(50)); // polling a child process: no event to await
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    assert!(status.success(), "the child failed: {out}");
    assert!(out.contains("1 passed"), "the child ran its test: {out}");
}
