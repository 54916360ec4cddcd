//! Network partitions, the threat model Redlock is built for: clients that
//! each see a different part of the cluster, requests held back and
//! delivered late when a partition heals, connections that go silent.
//!
//! Every (client, node) link is its own loopback proxy (`harness::partition`);
//! a history checker, not a counter, judges exclusion: every holder reports
//! the interval it believed it held the resource, on one clock, and no two
//! intervals of one resource may overlap.
//!
//! `REDLOCK_PARTITION_SECS` sets the rotating scenario's length (default
//! 60 s under `CI`, else 15 s); `REDLOCK_PARTITION_SEED` replays a schedule
//! (the seed is printed).

mod harness;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::partition::{Interval, Net, now_us, overlaps, random_cut, random_hold, wall_us};
use harness::{Cluster, settles};
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_sync::{Error, LockGuard, Redlock};

const TTL: Duration = Duration::from_secs(1);
const SHARED: &str = "part:shared";

fn scenario_time() -> Duration {
    let default = if std::env::var_os("CI").is_some() {
        60
    } else {
        15
    };
    let secs = std::env::var("REDLOCK_PARTITION_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

fn client(urls: &[String], fencing: bool) -> Redlock {
    Redlock::builder(urls)
        .fencing(fencing)
        .connect_timeout(Duration::from_millis(200))
        .build()
        .expect("client")
}

/// What each child of the rotating scenario does: `lock`, `fenced` (a
/// fencing client's lock), `all` (a fencing client's `lock_all` of the
/// shared resource and one of its own), `plain-all` (the same, unfenced).
const MODES: [&str; 4] = ["lock", "fenced", "all", "plain-all"];

/// The interval `guard` is believed held, from `start` until now or the
/// end of its validity, whichever is first.
fn interval(holder: &str, resource: &str, start: u64, guard: &LockGuard) -> Interval {
    Interval {
        holder: holder.to_owned(),
        resource: resource.to_owned(),
        start,
        end: now_us().min(wall_us(guard.valid_until())),
    }
}

/// A child of [`rotating_asymmetric_partitions_never_let_two_holders_in`]:
/// takes the shared resource again and again until its time is up, and
/// prints each interval (with the fencing token) and its count.
#[test]
#[ignore = "run as a child process by rotating_asymmetric_partitions_never_let_two_holders_in"]
fn partition_child() {
    let env = |name: &str| std::env::var(name).expect(name);
    let urls: Vec<String> = env("PARTITION_URLS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let mode = env("PARTITION_MODE");
    let name = env("PARTITION_NAME");
    let until = Instant::now() + Duration::from_millis(env("PARTITION_MILLIS").parse().unwrap());
    let fencing = matches!(mode.as_str(), "fenced" | "all");
    let redlock = client(&urls, fencing);
    let own = format!("part:own:{name}");
    let mut taken = 0u64;
    while Instant::now() < until {
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(2));
        let result = match mode.as_str() {
            "lock" | "fenced" => redlock.lock_for(SHARED, TTL, wait),
            _ => redlock.acquire_all(&[SHARED, &own], TTL).wait(wait).lock(),
        };
        let guard = match result {
            Ok(guard) => guard,
            // What a partitioned client may hear; anything else is a bug.
            Err(Error::Busy { .. } | Error::NoQuorum { .. } | Error::TooSlow { .. }) => continue,
            Err(other) => panic!("{name}: {other}"),
        };
        let start = now_us();
        std::thread::sleep(Duration::from_millis(5));
        for resource in guard.resources() {
            let mut line = interval(&name, resource, start, &guard).to_line();
            if let Some(token) = guard.fencing_token() {
                line.push_str(&format!(" token {token}"));
            }
            println!("{line}");
        }
        // A release cut off from its majority fails; the keys expire.
        let _ = guard.release();
        taken += 1;
    }
    println!("TAKEN {name} {taken}");
}

#[test]
fn rotating_asymmetric_partitions_never_let_two_holders_in() {
    let seed: u64 = std::env::var("REDLOCK_PARTITION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    let run = scenario_time();
    println!("partitions: seed {seed} (replay with REDLOCK_PARTITION_SEED={seed}), {run:?}");
    let cluster = Cluster::start(5);
    let net = Net::new(&cluster, MODES.len());
    let children: Vec<_> = MODES
        .iter()
        .enumerate()
        .map(|(i, mode)| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "partition_child", "--ignored", "--nocapture"])
                .env("PARTITION_URLS", net.urls(i).join(","))
                .env("PARTITION_MODE", mode)
                .env("PARTITION_NAME", format!("{mode}-{i}"))
                .env("PARTITION_MILLIS", run.as_millis().to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("child test process")
        })
        .collect();
    // Each client's view changes every 100–300 ms: 0–2 nodes cut, sometimes 3.
    let mut rng = StdRng::seed_from_u64(seed);
    let until = Instant::now() + run;
    let mut views = 0u64;
    while Instant::now() < until {
        for client in 0..MODES.len() {
            net.view(client, &random_cut(&mut rng, 5));
        }
        views += 1;
        std::thread::sleep(random_hold(&mut rng));
    }
    net.heal_all();
    let mut intervals = Vec::new();
    let mut taken = Vec::new();
    for mut child in children {
        let stdout = BufReader::new(child.stdout.take().unwrap());
        for line in stdout.lines().map_while(Result::ok) {
            if let Some(interval) = Interval::parse(&line) {
                let token = line
                    .split(" token ")
                    .nth(1)
                    .and_then(|t| t.trim().parse::<u64>().ok());
                intervals.push((interval, token));
            } else if let Some(rest) = line.split("TAKEN ").nth(1) {
                taken.push(rest.trim().to_owned());
            }
        }
        assert!(child.wait().unwrap().success(), "a child failed");
    }
    let history: Vec<Interval> = intervals.iter().map(|(i, _)| i.clone()).collect();
    let shared = history.iter().filter(|i| i.resource == SHARED).count();
    println!(
        "partitions: {views} views per client, {shared} holds of the shared resource, \
         per child: {taken:?}"
    );
    let bad = overlaps(&history);
    assert!(bad.is_empty(), "seed {seed}: overlapping holds: {bad:?}");
    assert_eq!(taken.len(), MODES.len(), "every child reported");
    for line in &taken {
        let count: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(count > 0, "seed {seed}: a client never got in: {taken:?}");
    }
    // Fencing tokens grow from one fenced holder of the shared resource to
    // the next.
    let mut fenced: Vec<&(Interval, Option<u64>)> = intervals
        .iter()
        .filter(|(i, t)| i.resource == SHARED && t.is_some())
        .collect();
    fenced.sort_by_key(|(i, _)| i.start);
    for pair in fenced.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "seed {seed}: token {:?} after {:?}",
            pair[1].1,
            pair[0].1
        );
    }
    // Healed: a fresh client gets the lock within one TTL, and once it
    // released, no lock key is left.
    let fresh = client(&cluster.urls(), false);
    let asked = Instant::now();
    let guard = fresh
        .lock_for(SHARED, TTL, TTL * 2)
        .expect("the healed lock");
    let waited = asked.elapsed();
    assert!(waited <= TTL + Duration::from_millis(200), "{waited:?}");
    guard.release().unwrap();
    settles("no lock key left", || {
        cluster.count_key(SHARED) == 0
            && (0..MODES.len())
                .all(|i| cluster.count_key(&format!("part:own:{}-{i}", MODES[i])) == 0)
    });
}

/// The checker itself: touching intervals are fine, an overlap of one
/// resource is found, intervals of different resources never clash.
#[test]
fn the_history_checker_finds_overlaps_per_resource() {
    let iv = |resource: &str, start: u64, end: u64| Interval {
        holder: "h".into(),
        resource: resource.into(),
        start,
        end,
    };
    assert!(overlaps(&[iv("a", 0, 10), iv("a", 10, 20), iv("b", 5, 15)]).is_empty());
    assert_eq!(overlaps(&[iv("a", 9, 20), iv("a", 0, 10)]).len(), 1);
    let nested = [iv("a", 0, 100), iv("a", 10, 20), iv("a", 30, 40)];
    assert_eq!(overlaps(&nested).len(), 2);
    let line = iv("a", 1, 2).to_line();
    assert_eq!(
        Interval::parse(&format!("test x ... {line}")),
        Some(iv("a", 1, 2))
    );
}
