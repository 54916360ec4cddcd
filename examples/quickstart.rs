//! Quick start: two threads contend for one lock.
//!
//! ```text
//! cargo run --example quickstart                      # starts 5 local redis-server nodes itself
//! cargo run --example quickstart -- redis://h1 redis://h2 redis://h3   # or use yours
//! ```
//!
//! With no node URLs given, it starts five `redis-server` processes on free
//! loopback ports (install with `sudo apt-get install -y redis-server` or
//! `sh scripts/ensure-redis.sh`) and stops them when it ends.
//!
//! Ctrl-C exits at once, through `Redlock::shutdown`: the lock is released
//! on the way out, not left on the nodes until its TTL runs out.

mod common;

use std::sync::Arc;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redlock_sync::{Error, Redlock};

/// Set by the Ctrl-C handler, which exits the process once the client let
/// go of everything.
static EXITING: AtomicBool = AtomicBool::new(false);

fn main() -> Result<std::process::ExitCode, Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let given = (!args.is_empty()).then(|| args.join(","));
    let nodes = common::Nodes::from_args_or_local(given.as_deref(), 5);
    let urls = nodes.urls.clone();
    println!("nodes: {}", urls.join(", "));

    // One client per process; clones share its connections and worker threads.
    let redlock = Redlock::new(&urls)?;
    common::check_nodes(&redlock);
    // Ctrl-C: let go of everything this client holds (any clone, any
    // thread), then exit at once.
    let client = redlock.clone();
    let handled = ctrlc::set_handler(move || {
        EXITING.store(true, Ordering::SeqCst);
        eprintln!("interrupted: releasing what is held and exiting");
        if let Err(err) = client.shutdown(Duration::from_secs(2)) {
            eprintln!("quickstart: {err}");
        }
        common::stop_local_nodes();
        std::process::exit(130);
    });
    if let Err(err) = handled {
        eprintln!("cannot handle Ctrl-C: {err}");
    }
    let started = Instant::now();
    let say = move |who: &str, what: String| {
        println!(
            "[{:>6.1} ms] {who}: {what}",
            started.elapsed().as_secs_f64() * 1e3
        );
    };
    let ttl = Duration::from_secs(10);
    let ready = Arc::new(Barrier::new(2));

    let alice = {
        let (redlock, ready) = (redlock.clone(), ready.clone());
        std::thread::spawn(move || -> Result<(), Error> {
            let guard = redlock.lock("quickstart:report", ttl)?;
            say(
                "alice",
                format!(
                    "got the lock, valid for {}",
                    common::human(guard.remaining())
                ),
            );
            ready.wait();
            // The protected work.
            std::thread::sleep(Duration::from_secs(1));
            guard.ensure_valid()?;
            say("alice", "done, releasing".into());
            guard.release()?;
            Ok(())
        })
    };
    let bob = std::thread::spawn(move || -> Result<(), Error> {
        ready.wait();
        match redlock.try_lock("quickstart:report", ttl)? {
            Some(_) => say("bob", "got the lock at once (unexpected)".into()),
            None => say("bob", "try_lock: busy, someone else holds it".into()),
        }
        say("bob", "waiting up to 5 s ...".into());
        let guard = redlock.lock_for("quickstart:report", ttl, Duration::from_secs(5))?;
        say(
            "bob",
            format!(
                "got the lock, valid for {}",
                common::human(guard.remaining())
            ),
        );
        drop(guard); // releases
        say("bob", "released by drop".into());
        Ok(())
    });
    let (alice, bob) = (alice.join(), bob.join());
    if EXITING.load(Ordering::SeqCst) {
        // Their calls failed with `Error::Shutdown`: the handler exits the
        // process (130) once the shutdown is done.
        loop {
            std::thread::park();
        }
    }
    alice.expect("alice panicked")?;
    bob.expect("bob panicked")?;
    println!("done");
    drop(nodes); // stops local nodes, if any
    Ok(std::process::ExitCode::SUCCESS)
}
