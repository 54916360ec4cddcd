//! The long-job recipe from the README, runnable: wait for the lock (a
//! Ctrl-C ends the wait), keep it alive through work that outlasts its TTL,
//! check it before each step that must not happen twice, and release it on
//! the way out — also on Ctrl-C.
//!
//! ```text
//! cargo run --example long_job                        # starts 5 local redis-server nodes itself
//! cargo run --example long_job -- --nodes redis://h1,redis://h2,redis://h3 [--steps 5] [--ttl 1s]
//! ```

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use redlock_sync::{Error, Redlock};

fn main() -> Result<ExitCode, Error> {
    let mut nodes_arg = None;
    let mut steps = 5u32;
    let mut ttl = Duration::from_secs(1);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--nodes", Some(v)) => nodes_arg = Some(v),
            ("--steps", Some(v)) => steps = v.parse().unwrap_or(5),
            ("--ttl", Some(v)) => ttl = common::parse_duration(&v).unwrap_or(ttl),
            _ => {
                eprintln!("usage: long_job [--nodes URL,...] [--steps N] [--ttl 1s]");
                return Ok(ExitCode::from(64));
            }
        }
    }
    let nodes = common::Nodes::from_args_or_local(nodes_arg.as_deref(), 5);
    // Ctrl-C cancels `shutdown`: the wait for the lock and the work's own
    // pauses end at once, and `main` returns, releasing the lock.
    common::on_ctrl_c();
    let shutdown = common::shutdown();
    let redlock = Redlock::new(&nodes.urls)?;
    common::check_nodes(&redlock);

    // The TTL (1 s) is how long others wait for the lock if this process
    // dies; the work below takes longer, so the lock is kept alive.
    let started = Instant::now();
    let guard = match redlock
        .acquire("jobs:nightly-export", ttl)
        .wait(Duration::from_secs(60))
        .cancel_on(shutdown)
        .keep_alive()
        .lock()
    {
        Ok(guard) => guard,
        Err(Error::Busy { .. }) => {
            println!("long_job: another worker still holds it after 60 s; skipping");
            return Ok(ExitCode::SUCCESS);
        }
        Err(Error::Cancelled { .. }) => return Ok(common::exit_code()),
        Err(err) => return Err(err),
    };
    println!(
        "long_job: holding the lock (waited {}, valid for {})",
        common::human(started.elapsed()),
        common::human(guard.remaining())
    );
    // Cancelled once the lock is no longer ours, for any reason (a renewal
    // found it gone, its validity ran out): hand it to whatever does the
    // work.
    let lost = guard.lost_token();
    for step in 1..=steps {
        // One step of work, longer than half the TTL: the keeper renews the
        // lock meanwhile. Ctrl-C ends the pause.
        if shutdown.sleep(Duration::from_millis(600)) {
            println!("long_job: interrupted before step {step}; releasing");
            break;
        }
        // Before each step that must not happen twice: is the lock still
        // ours? Exact, where the token may come a moment after the validity
        // ran out.
        if lost.is_cancelled() {
            println!("long_job: the lock was lost before step {step}");
        }
        guard.ensure_valid()?;
        println!(
            "long_job: step {step} of {steps} committed ({} valid)",
            common::human(guard.remaining())
        );
    }
    guard.release()?;
    println!(
        "long_job: released after {}",
        common::human(started.elapsed())
    );
    common::let_go(&redlock);
    drop(nodes); // stops local nodes, if any
    Ok(common::exit_code())
}
