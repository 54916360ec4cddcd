//! The clients and log capture the tests share.

use std::sync::Mutex;
use std::time::Duration;

use redlock_sync::Redlock;

/// `Redlock::builder(urls)` with the roomy per-node timeout (see
/// [`ROOMY_NODE_TIMEOUT`](super::ROOMY_NODE_TIMEOUT)) for tests that are
/// not about it; a later `.node_timeout(…)` overrides it.
pub fn builder<I>(urls: I) -> redlock_sync::RedlockBuilder
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    Redlock::builder(urls).node_timeout(super::ROOMY_NODE_TIMEOUT)
}

/// `Redlock::new(urls)` with the roomy per-node timeout.
pub fn client<I>(urls: I) -> Redlock
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    builder(urls).build().expect("test client")
}

/// A client for tests: `retries` quick retries (10–20 ms apart), a short
/// connect timeout for nodes that may be down, and the per-node timeout
/// given, or [`ROOMY_NODE_TIMEOUT`](super::ROOMY_NODE_TIMEOUT) for `None`
/// (the one derived from a 10 s TTL, 50 ms, was missed under load: a
/// release or a reader's round in a test about something else failed on a
/// `Timeout`). Tests of the derived timeout build their client themselves.
pub fn test_client<I>(urls: I, retries: u32, node_timeout: Option<Duration>) -> Redlock
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    Redlock::builder(urls)
        .retry_count(retries)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(10))
        .connect_timeout(Duration::from_millis(200))
        .node_timeout(node_timeout.unwrap_or(super::ROOMY_NODE_TIMEOUT))
        .build()
        .expect("test client")
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
        captured().push(line);
    }
    fn flush(&self) {}
}

/// The captured lines, locked: held only here, for a push or a copy, so
/// that no caller can hold it while something it calls logs (a thread of
/// the crate, or the caller itself: the lock is not reentrant).
fn captured() -> std::sync::MutexGuard<'static, Vec<String>> {
    // Never panic here: a poisoned log would take every thread with it.
    LOGS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A copy of the lines captured so far.
pub fn logs() -> Vec<String> {
    captured().clone()
}

/// Where the captured log stands now. The log is the whole test binary's:
/// a test that counts or looks for lines reads those logged since its own
/// mark ([`logs_since`]) and filters them by what is its own (a node's
/// address, a resource): a test running beside it, or a client an earlier
/// test dropped, may log meanwhile.
pub fn log_mark() -> usize {
    captured().len()
}

/// The lines captured since `mark` (from [`log_mark`]).
pub fn logs_since(mark: usize) -> Vec<String> {
    captured().get(mark..).unwrap_or_default().to_vec()
}

/// Installs the capturing logger (once per test binary).
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
}
