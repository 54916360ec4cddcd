//! A distributed `flock(1)`: runs a command while holding a Redlock lock, so
//! the same command on several hosts never runs twice at once.
//!
//! ```text
//! cargo run --example flock -- [--nodes URL,...] [--ttl 10s] [--wait 30s] RESOURCE -- COMMAND [ARGS...]
//! cargo run --example flock -- --nodes redis://h1,redis://h2,redis://h3 nightly -- ./backup.sh
//! ```
//!
//! Run `--help` for the options and exit codes.

mod common;

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use redlock_sync::{Error, Redlock};

const HELP: &str = "\
flock: run a command while holding a distributed (Redlock) lock.

usage: flock [--nodes URL,...] [--ttl DURATION] [--wait DURATION] RESOURCE -- COMMAND [ARGS...]

options:
  --nodes URL,...   Redis masters (3 or 5), comma-separated; default $REDLOCK_NODES,
                    else 5 local redis-server nodes started for this run
  --ttl DURATION    lock TTL, renewed while the command runs (default 10s)
  --wait DURATION   how long to wait for the lock (default 30s; 0 = try once)
  -h, --help        this help

DURATION: 500ms, 10s, 2m, 1h, or a number of seconds.

exit status:
  the command's own status (128+N if it was killed by signal N)
  64   bad usage
  69   the lock service is unavailable (no quorum, bad node URL)
  75   the lock was not acquired within --wait
  76   the lock was lost while the command ran; the command was terminated
  130  interrupted (Ctrl-C); the lock was released
";

const EXIT_USAGE: i32 = 64;
const EXIT_UNAVAILABLE: i32 = 69;
const EXIT_NOT_ACQUIRED: i32 = 75;
const EXIT_LOST: i32 = 76;
const EXIT_INTERRUPTED: i32 = 130;

struct Args {
    nodes: Option<String>,
    ttl: Duration,
    wait: Duration,
    resource: String,
    command: Vec<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut nodes = None;
    let mut ttl = Duration::from_secs(10);
    let mut wait = Duration::from_secs(30);
    let mut resource = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--nodes" => nodes = Some(args.next().ok_or("--nodes needs a value")?),
            "--ttl" => ttl = common::parse_duration(&args.next().ok_or("--ttl needs a value")?)?,
            "--wait" => wait = common::parse_duration(&args.next().ok_or("--wait needs a value")?)?,
            "--" => break,
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            name if resource.is_none() => resource = Some(name.to_owned()),
            other => return Err(format!("unexpected {other:?}: put the command after --")),
        }
    }
    let resource = resource.ok_or("no RESOURCE given")?;
    let command: Vec<String> = args.collect();
    if command.is_empty() {
        return Err("no COMMAND given after --".into());
    }
    Ok(Args {
        nodes,
        ttl,
        wait,
        resource,
        command,
    })
}

fn main() {
    let args = parse_args(std::env::args().skip(1)).unwrap_or_else(|err| {
        eprintln!("flock: {err}\n\n{HELP}");
        std::process::exit(EXIT_USAGE);
    });
    let nodes = common::Nodes::from_args_or_local(args.nodes.as_deref(), 5);
    common::on_ctrl_c();
    let code = run(&args, &nodes.urls);
    drop(nodes);
    std::process::exit(code);
}

fn run(args: &Args, urls: &[String]) -> i32 {
    let redlock = match Redlock::new(urls) {
        Ok(redlock) => redlock,
        Err(err) => {
            eprintln!("flock: {err}");
            return EXIT_UNAVAILABLE;
        }
    };
    // Ctrl-C while waiting cancels the wait at once (nothing is left held).
    let acquired = redlock
        .acquire(&args.resource, args.ttl)
        .wait(args.wait)
        .cancel_on(common::shutdown())
        .keep_alive()
        .lock();
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::Cancelled { .. }) => {
            eprintln!("flock: interrupted while waiting for {:?}", args.resource);
            return EXIT_INTERRUPTED;
        }
        Err(Error::Busy { .. }) => {
            eprintln!(
                "flock: {:?} is held elsewhere; gave up after {}",
                args.resource,
                common::human(args.wait)
            );
            return EXIT_NOT_ACQUIRED;
        }
        Err(err @ Error::Config { .. }) => {
            eprintln!("flock: {err}");
            return EXIT_USAGE;
        }
        Err(err) => {
            eprintln!("flock: {err}");
            return EXIT_UNAVAILABLE;
        }
    };
    eprintln!(
        "flock: holding {:?}; running {:?}",
        args.resource, args.command
    );
    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("flock: cannot run {:?}: {err}", args.command[0]);
            return 127;
        }
    };
    // Watch the command, the lock and Ctrl-C.
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let lost = guard.ensure_valid().is_err();
                drop(guard);
                return if lost { EXIT_LOST } else { exit_code(status) };
            }
            Ok(None) => {}
            Err(err) => {
                eprintln!("flock: waiting for the command failed: {err}");
                stop(&mut child);
                return EXIT_UNAVAILABLE;
            }
        }
        if guard.ensure_valid().is_err() {
            eprintln!(
                "flock: lost the lock on {:?}; terminating the command",
                args.resource
            );
            stop(&mut child);
            return EXIT_LOST;
        }
        if common::interrupted() {
            eprintln!("flock: interrupted; releasing the lock");
            stop(&mut child);
            drop(guard);
            return EXIT_INTERRUPTED;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Terminates the command: SIGTERM, then SIGKILL after 2 s.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn exit_code(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}
