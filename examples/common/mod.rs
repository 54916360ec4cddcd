//! Shared by the examples: node URLs from the command line or the
//! `REDLOCK_NODES` environment variable, or else local `redis-server` nodes
//! started on free ports (and stopped when the returned value is dropped).
#![allow(dead_code, unreachable_pub)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[path = "../../tests/harness/mod.rs"]
pub mod harness;

/// Local nodes, where a Ctrl-C handler can stop them too.
static LOCAL: Mutex<Option<harness::Cluster>> = Mutex::new(None);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SHUTDOWN: std::sync::OnceLock<redlock_sync::CancelToken> = std::sync::OnceLock::new();

/// Cancelled by Ctrl-C (after `on_ctrl_c`): pass it to waits for locks.
pub fn shutdown() -> &'static redlock_sync::CancelToken {
    SHUTDOWN.get_or_init(redlock_sync::CancelToken::new)
}

/// The nodes an example uses. Keep it alive while the example runs: local
/// nodes stop when it is dropped (or on Ctrl-C, see [`on_ctrl_c`]).
pub struct Nodes {
    pub urls: Vec<String>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        stop_local_nodes();
    }
}

/// Stops the local nodes, if any were started.
pub fn stop_local_nodes() {
    let cluster = LOCAL.lock().map(|mut l| l.take()).unwrap_or(None);
    drop(cluster);
}

/// Installs the Ctrl-C handler: it cancels [`shutdown`], which ends the
/// program's waits for locks and its pauses ([`CancelToken::sleep`]); the
/// program then stops its work and returns from `main` normally, so that
/// every guard is dropped (releasing its lock) and local nodes are stopped.
/// (Exiting the process from the handler would leave the locks held until
/// their TTL runs out.)
///
/// [`CancelToken::sleep`]: redlock_sync::CancelToken::sleep
pub fn on_ctrl_c() {
    let installed = ctrlc::set_handler(move || {
        if !INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("interrupted: releasing what is held and stopping");
        }
        shutdown().cancel();
    });
    if let Err(err) = installed {
        eprintln!("cannot handle Ctrl-C: {err}");
    }
}

/// On the way out: lets go of everything `redlock` (any clone of it) still
/// holds, and stops its threads (`Redlock::shutdown`). Here nothing should
/// be left, but a program that exits while other threads or handles still
/// hold locks would otherwise leave them until their TTL.
pub fn let_go(redlock: &redlock_sync::Redlock) {
    if let Err(err) = redlock.shutdown(std::time::Duration::from_secs(2)) {
        eprintln!("shutting the client down: {err}");
    }
}

/// Whether Ctrl-C was pressed (after [`on_ctrl_c`]).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The exit status: 130 after Ctrl-C (as a shell reports SIGINT), else 0.
pub fn exit_code() -> std::process::ExitCode {
    if interrupted() {
        std::process::ExitCode::from(130)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// A duration as a person writes it: `250 ms`, `9.9 s`.
pub fn human(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

impl Nodes {
    /// `given` (comma-separated URLs), else `$REDLOCK_NODES`, else `count`
    /// local nodes started now.
    pub fn from_args_or_local(given: Option<&str>, count: usize) -> Nodes {
        let from_env = std::env::var("REDLOCK_NODES").ok();
        match given.map(str::to_owned).or(from_env) {
            Some(list) => Nodes {
                urls: list.split(',').map(|s| s.trim().to_owned()).collect(),
            },
            None => {
                eprintln!("no nodes given: starting {count} local redis-server nodes");
                let cluster = harness::Cluster::start(count);
                let urls = cluster.urls();
                if let Ok(mut local) = LOCAL.lock() {
                    *local = Some(cluster);
                }
                Nodes { urls }
            }
        }
    }
}

/// Parses `10s`, `500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?} (use e.g. 10s, 500ms, 2m)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit in {text:?} (use ms, s, m or h)")),
    };
    std::time::Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// Checks the deployment before trusting it (`Redlock::verify`): says on
/// stderr which nodes do not count toward quorums and why, and whether a
/// majority still does.
pub fn check_nodes(redlock: &redlock_sync::Redlock) {
    let nodes = redlock.verify();
    for node in &nodes {
        if let Some(why) = node.refusal() {
            eprintln!("node {} does not count: {why}", node.address());
        }
    }
    let counting = nodes.iter().filter(|n| n.is_admitted()).count();
    if counting < redlock.quorum() {
        eprintln!(
            "only {counting} of {} nodes count, {} needed: locking fails until more do",
            nodes.len(),
            redlock.quorum()
        );
    }
}
