//! The clients and log capture the tests share.

use std::sync::Mutex;
use std::time::Duration;

use redlock_sync::Redlock;

/// A client for tests: `retries` quick retries (10–20 ms apart), a short
/// connect timeout for nodes that may be down, and a fixed per-node timeout
/// when given. A fixed, generous node timeout keeps a straggling `SET` from
/// expiring in a busy queue when several clusters share two cores; leave it
/// `None` to test the derived one.
pub fn test_client<I>(urls: I, retries: u32, node_timeout: Option<Duration>) -> Redlock
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut builder = Redlock::builder(urls)
        .retry_count(retries)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(10))
        .connect_timeout(Duration::from_millis(200));
    if let Some(timeout) = node_timeout {
        builder = builder.node_timeout(timeout);
    }
    builder.build().expect("test client")
}

/// Captures every log record of the test binary that calls
/// [`capture_logs`], at every level.
struct Capture;
static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {}", record.level(), record.args());
        // Never panic here: a poisoned log would take every thread with it.
        logs().push(line);
    }
    fn flush(&self) {}
}

/// The captured lines so far.
pub fn logs() -> std::sync::MutexGuard<'static, Vec<String>> {
    LOGS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Installs the capturing logger (once per test binary).
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
}
