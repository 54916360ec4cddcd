//! Leader election: run several copies of a scheduler; one leads and runs
//! the periodic jobs, each stamped with its term (a job store would refuse
//! a smaller term than it has seen, so a deposed leader that still thinks
//! it leads cannot write), while the others wait to take over. A follower
//! prints who leads as it changes.
//!
//! ```text
//! cargo run --example scheduler                      # local nodes: 2 candidates and a follower
//! cargo run --example scheduler -- --nodes redis://h1,redis://h2,redis://h3 \
//!     [--name host-a] [--ticks 20] [--tick-ms 100]   # one candidate
//! cargo run --example scheduler -- --nodes ... --follow [--secs 10]
//! ```
//!
//! A candidate leads for `--ticks` ticks, then resigns and exits; stop it
//! earlier (Ctrl-C: it resigns; `kill -9`: its leadership expires after
//! its TTL) and another candidate takes over with a larger term. Every
//! tick prints `TICK name term n`; a follower prints `LEADER name term` or
//! `NO LEADER` at each change.

mod common;

use std::time::{Duration, Instant};

use redlock_sync::{Error, Redlock};

/// How long a leadership lasts without renewal: a killed leader is
/// followed after this long at most.
const TTL: Duration = Duration::from_secs(3);
const ELECTION: &str = "scheduler";
/// How many campaigns a candidate makes through failing nodes.
const CAMPAIGNS: u32 = 5;

struct Args {
    nodes: Option<String>,
    name: String,
    ticks: u32,
    tick: Duration,
    follow: bool,
    secs: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        nodes: None,
        name: format!("host-{}", std::process::id()),
        ticks: 20,
        tick: Duration::from_millis(100),
        follow: false,
        secs: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => args.nodes = Some(value()?),
            "--name" => args.name = value()?,
            "--ticks" => args.ticks = value()?.parse().map_err(|e| format!("--ticks: {e}"))?,
            "--tick-ms" => {
                args.tick =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--tick-ms: {e}"))?)
            }
            "--follow" => args.follow = true,
            "--secs" => args.secs = common::parse_duration(&value()?)?,
            "--help" | "-h" => {
                println!(
                    "usage: scheduler [--nodes URL,...] [--name NAME] [--ticks N] [--tick-ms MS] \
                     | [--nodes URL,...] --follow [--secs DURATION]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if args.name.is_empty() || args.name.contains(char::is_whitespace) {
        return Err("--name must be one word".into());
    }
    Ok(args)
}

/// Campaigns, leads for `ticks` ticks (while it still leads), resigns.
fn candidate(redlock: &Redlock, name: &str, ticks: u32, tick: Duration) -> Result<(), Error> {
    let election = redlock.election(ELECTION);
    println!("{name}: campaigning");
    // Slow or failing nodes can undo a win: a proclamation too few nodes
    // confirmed gives the leadership back (NoQuorum), a lease that ran out
    // before it was proclaimed is lost (LockLost). A scheduler campaigns
    // again (this one a few times; a real one for as long as it runs), but
    // not through a fault that lasts (bad credentials, say).
    let mut tries = 1;
    let leadership = loop {
        let won = election
            .campaign(name, TTL)
            .cancel_on(common::shutdown())
            .win();
        let passing = match &won {
            Err(Error::NoQuorum { failures, .. }) => {
                !failures.iter().any(|f| f.kind().is_permanent())
            }
            Err(Error::LockLost { .. }) => true,
            _ => false,
        };
        match won {
            Err(err) if passing && tries < CAMPAIGNS => {
                eprintln!("{name}: the win did not hold ({err}); campaigning again");
                tries += 1;
                common::shutdown().sleep(Duration::from_millis(100));
            }
            won => break won?,
        }
    };
    let term = leadership.term();
    println!("{name}: leading, term {term}");
    for n in 1..=ticks {
        if common::shutdown().is_cancelled() {
            break;
        }
        // Before each step: stop at once if the leadership was lost.
        leadership.ensure_leader()?;
        // Here a real scheduler runs its jobs, passing `term` to the store.
        println!("TICK {name} {term} {n}");
        common::shutdown().sleep(tick);
    }
    // Resigning hands on at once; if the nodes cannot confirm it (too few
    // answered), the leadership still ends by its TTL: a warning, not a
    // failed run.
    match leadership.resign() {
        Ok(()) => println!("{name}: resigned"),
        Err(err @ Error::NoQuorum { .. }) => {
            eprintln!("{name}: resignation unconfirmed ({err}); it ends within {TTL:?}");
        }
        Err(err) => return Err(err),
    }
    Ok(())
}

/// Prints who leads at each change, for `secs`.
fn follower(redlock: &Redlock, secs: Duration) {
    let mut observer = redlock.election(ELECTION).observe();
    let until = Instant::now() + secs;
    while !common::shutdown().is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match observer.next_timeout(left.min(Duration::from_millis(500))) {
            Some(Some(leader)) => println!("LEADER {} {}", leader.value(), leader.term()),
            Some(None) => println!("NO LEADER"),
            None => {}
        }
    }
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("scheduler: {err}");
            std::process::exit(64);
        }
    };
    let local = args.nodes.is_none() && std::env::var_os("REDLOCK_NODES").is_none();
    let nodes = common::Nodes::from_args_or_local(args.nodes.as_deref(), 3);
    common::on_ctrl_c();
    let redlock = Redlock::new(&nodes.urls).unwrap_or_else(|err| {
        eprintln!("scheduler: {err}");
        std::process::exit(69);
    });
    common::check_nodes(&redlock);
    let result = if args.follow {
        follower(&redlock, args.secs);
        Ok(())
    } else if local {
        // A demonstration in one process: two candidates (each its own
        // client, as two machines would be) and a follower.
        std::thread::scope(|s| {
            s.spawn(|| {
                follower(
                    &redlock,
                    args.tick * args.ticks * 2 + Duration::from_secs(1),
                )
            });
            let runs: Vec<_> = ["host-a", "host-b"]
                .into_iter()
                .map(|name| {
                    let own = Redlock::new(&nodes.urls).expect("client");
                    let (ticks, tick) = (args.ticks, args.tick);
                    s.spawn(move || candidate(&own, name, ticks, tick))
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().unwrap_or(Ok(())))
                .collect::<Result<Vec<_>, _>>()
                .map(|_| ())
        })
    } else {
        candidate(&redlock, &args.name, args.ticks, args.tick)
    };
    common::let_go(&redlock);
    match result {
        Ok(()) | Err(Error::Cancelled { .. }) => common::exit_code(),
        Err(err) => {
            eprintln!("scheduler: {err}");
            std::process::ExitCode::from(1)
        }
    }
}
