//! The logger is the user's code, and may ask the client what it knows: a
//! logger that formats the client and reads its nodes' health on every
//! record. The crate never calls the logger under a lock those take, so
//! nothing deadlocks — not a node's standing changing (logged under the
//! admission's lock before), not a connection saying its node is down
//! (under the node's health lock before). A child process installs the
//! logger (one per process); the parent waits for it with a deadline.

use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, child_env};
use redlock_sync::Redlock;

static CLIENT: OnceLock<Redlock> = OnceLock::new();
/// The lines logged while the client could be asked.
static ASKED_ON: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// On every record, formats the client and reads its nodes' health.
struct Asking;

impl log::Log for Asking {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Some(client) = CLIENT.get() {
            let shown = format!("{client:?} {:?}", client.node_health());
            std::hint::black_box(shown);
            let line = record.args().to_string();
            ASKED_ON
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
        }
    }
    fn flush(&self) {}
}

/// Whether a line logged while the client could be asked has all of `words`.
fn asked_on(words: &[&str]) -> bool {
    let lines = ASKED_ON.lock().unwrap_or_else(|e| e.into_inner()).clone();
    lines
        .iter()
        .any(|line| words.iter().all(|w| line.contains(w)))
}

#[test]
#[ignore = "run as a child process by a_logger_that_asks_the_client_never_deadlocks_it"]
fn child_logs_through_a_logger_that_asks_the_client() {
    let parent = "a_logger_that_asks_the_client_never_deadlocks_it";
    assert_eq!(child_env("REDLOCK_TEST_CHILD", parent), "1");
    log::set_logger(&Asking).expect("the child's only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let mut cluster = Cluster::start(3);
    // New nodes with the quarantine on do not count until they have been
    // up for it: when it ends, the node's news is logged by whoever asks
    // next, with the client set.
    let client = CLIENT.get_or_init(|| {
        Redlock::builder(cluster.urls())
            .restart_quarantine(Duration::from_secs(3))
            .connect_timeout(Duration::from_millis(500))
            .build()
            .expect("client")
    });
    crate::harness::settles("every node counts after its quarantine", || {
        client.lock("logged", Duration::from_secs(5)).is_ok()
    });
    assert!(
        asked_on(&["counts toward quorums again"]),
        "a node's news was logged with the client set"
    );
    // A node killed: the connection that finds it gone says so.
    let gone = cluster.nodes[2].url();
    let gone = gone.trim_start_matches("redis://");
    cluster.nodes[2].kill();
    crate::harness::settles("node 2 is said to be down", || {
        let _ = client.try_lock("probe", Duration::from_secs(5));
        asked_on(&[gone, "is down"])
    });
    assert!(client.lock("still", Duration::from_secs(5)).is_ok());
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
    // (about 5 s) tells it from a slow machine.
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
