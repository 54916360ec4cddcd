//! Contention between *separate clients*: S3x (4 clients in this process,
//! one thread each) and S3p (3 processes × 2 threads sharing one client per
//! process). Compared with `redlock` 2.0 and `rslock` 0.7 (async, each
//! client on its own current-thread tokio runtime).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlock_sync::{Error, Redlock};

use super::harness::Cluster;

const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(1);
const KEY: &str = "bench:s3x";

/// Which library a client of S3x is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// This crate; `false`: with `release_notifications(false)`.
    Ours(bool),
    Redlock2,
    Rslock,
}

/// The contenders of the many-clients table (redlock 2.0 is left out: its
/// waits grow to seconds there).
pub(crate) const MANY_KINDS: [Kind; 3] = [Kind::Ours(true), Kind::Ours(false), Kind::Rslock];

/// The client counts of the many-clients table.
pub(crate) const MANY_COUNTS: [usize; 4] = [4, 8, 16, 32];

/// Every S3x contender, in table order.
pub(crate) const KINDS: [Kind; 4] = [
    Kind::Ours(true),
    Kind::Ours(false),
    Kind::Redlock2,
    Kind::Rslock,
];

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ours(true) => "redlock-sync (defaults)",
            Kind::Ours(false) => "redlock-sync (release_notifications off)",
            Kind::Redlock2 => "redlock 2.0 (crates.io)",
            Kind::Rslock => "rslock 0.7 (crates.io, tokio current-thread)",
        }
    }
}

/// One independent client: acquires `KEY` (looping until it has it) and
/// releases it.
enum Client {
    Ours(Redlock),
    Redlock2(redlock::RedLock),
    Rslock(tokio::runtime::Runtime, rslock::LockManager),
}

enum Held<'a> {
    Ours(redlock_sync::LockGuard),
    Redlock2(redlock::Lock<'a>),
    Rslock(rslock::Lock),
}

impl Client {
    fn new(kind: Kind, urls: &[String]) -> Client {
        match kind {
            Kind::Ours(notify) => Client::Ours(
                Redlock::builder(urls)
                    .release_notifications(notify)
                    .build()
                    .expect("client"),
            ),
            Kind::Redlock2 => Client::Redlock2(redlock::RedLock::new(urls.to_vec())),
            Kind::Rslock => Client::Rslock(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime"),
                rslock::LockManager::new(urls.to_vec()),
            ),
        }
    }

    fn acquire(&self, stop: &AtomicBool) -> Option<Held<'_>> {
        while !stop.load(Ordering::Relaxed) {
            match self {
                Client::Ours(client) => match client.lock(KEY, TTL) {
                    Ok(guard) => return Some(Held::Ours(guard)),
                    Err(Error::Busy { .. }) => {}
                    Err(err) => panic!("lock: {err}"),
                },
                Client::Redlock2(client) => {
                    if let Ok(Some(lock)) = client.lock(KEY.as_bytes(), TTL.as_millis() as usize) {
                        return Some(Held::Redlock2(lock));
                    }
                }
                Client::Rslock(rt, client) => {
                    if let Ok(lock) = rt.block_on(client.lock(KEY.as_bytes(), TTL)) {
                        return Some(Held::Rslock(lock));
                    }
                }
            }
        }
        None
    }

    fn release(&self, held: Held<'_>) {
        match (self, held) {
            (Client::Ours(_), Held::Ours(guard)) => guard.release().expect("release"),
            (Client::Redlock2(client), Held::Redlock2(lock)) => client.unlock(&lock),
            (Client::Rslock(rt, client), Held::Rslock(lock)) => rt.block_on(client.unlock(&lock)),
            _ => unreachable!("a lock is released by the client that took it"),
        }
    }
}

/// What one contention scenario measured.
pub(crate) struct Contention {
    pub(crate) acquisitions: usize,
    pub(crate) per_sec: f64,
    pub p50_wait: Duration,
    pub p99_wait: Duration,
    /// Acquisitions by a different client than the previous one.
    pub(crate) owner_changes: usize,
    /// `SET NX` rounds (SET calls on all nodes / nodes) per acquisition.
    pub(crate) rounds_per_acquisition: f64,
    /// Acquisitions per client (or per process).
    pub(crate) shares: Vec<usize>,
    /// The longest single wait (a starved client's shows here, not in p99).
    pub(crate) max_wait: Duration,
    /// CPU time per acquisition: this process (the clients and their
    /// threads) and the nodes (`INFO cpu`). `None` where not measured.
    pub(crate) cpu_per_acquisition: Option<(Duration, Duration)>,
    /// The most acquisitions in a row by one client (S3x) or one process
    /// (S3p).
    pub(crate) longest_run: usize,
}

/// The most equal owners in a row.
fn longest_run<T: PartialEq>(owners: &[T]) -> usize {
    owners
        .chunk_by(|a, b| a == b)
        .map(<[T]>::len)
        .max()
        .unwrap_or(0)
}

/// CPU time used so far by this process (Linux `/proc/self/stat`: utime +
/// stime, in clock ticks of 10 ms) and by the nodes (`INFO cpu`, µs
/// resolution).
pub(crate) fn cpu_used(cluster: &Cluster) -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat (Linux)");
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th of the whole line.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let process = (ticks(11) + ticks(12)) / 100.0;
    let nodes = cluster
        .nodes
        .iter()
        .map(|node| {
            let info: String = redis::cmd("INFO")
                .arg("cpu")
                .query(&mut node.conn())
                .expect("INFO cpu");
            info.lines()
                .filter_map(|l| {
                    l.strip_prefix("used_cpu_sys:")
                        .or_else(|| l.strip_prefix("used_cpu_user:"))
                })
                .filter_map(|v| v.trim().parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum();
    (process, nodes)
}

fn set_calls(cluster: &Cluster) -> u64 {
    cluster.nodes.iter().map(|n| n.calls("set")).sum()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// S3x: 4 separate clients of `kind`, one thread each, one key, hold 1 ms.
pub(crate) fn s3x(kind: Kind, cluster: &Cluster, time: Duration) -> Contention {
    s3x_with(kind, cluster, time, 4)
}

/// S3x with `count` separate clients.
pub(crate) fn s3x_with(kind: Kind, cluster: &Cluster, time: Duration, count: usize) -> Contention {
    let urls = cluster.urls();
    let clients: Vec<Client> = (0..count).map(|_| Client::new(kind, &urls)).collect();
    // Connect every client before the clock starts.
    let warm = AtomicBool::new(false);
    for client in &clients {
        let held = client.acquire(&warm).expect("free key");
        client.release(held);
    }
    let stop = AtomicBool::new(false);
    let owner = AtomicUsize::new(usize::MAX);
    let changes = AtomicUsize::new(0);
    let waits = parking_lot::Mutex::new(Vec::new());
    let owners = parking_lot::Mutex::new(Vec::new());
    let mut shares = vec![0; clients.len()];
    let sets_before = set_calls(cluster);
    let cpu_before = cpu_used(cluster);
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(index, client)| {
                let (stop, owner, changes, waits, owners) =
                    (&stop, &owner, &changes, &waits, &owners);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let t0 = Instant::now();
                        let Some(held) = client.acquire(stop) else {
                            // A wait still open at the end counts too: an
                            // unfair lock's starved clients wait longest.
                            mine.push(t0.elapsed());
                            break;
                        };
                        mine.push(t0.elapsed());
                        if owner.swap(index, Ordering::Relaxed) != index {
                            changes.fetch_add(1, Ordering::Relaxed);
                        }
                        owners.lock().push(index);
                        std::thread::sleep(HOLD);
                        client.release(held);
                    }
                    let count = mine.len() - 1;
                    waits.lock().extend(mine);
                    count
                })
            })
            .collect();
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
        for (share, handle) in shares.iter_mut().zip(handles) {
            *share = handle.join().expect("contender thread");
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let cpu_after = cpu_used(cluster);
    let sets = set_calls(cluster) - sets_before;
    let mut waits = waits.into_inner();
    waits.sort();
    let acquisitions: usize = shares.iter().sum();
    let per_acquisition =
        |secs: f64| Duration::from_secs_f64(secs.max(0.0) / acquisitions.max(1) as f64);
    Contention {
        longest_run: longest_run(&owners.into_inner()),
        max_wait: waits.last().copied().unwrap_or_default(),
        cpu_per_acquisition: Some((
            per_acquisition(cpu_after.0 - cpu_before.0),
            per_acquisition(cpu_after.1 - cpu_before.1),
        )),
        acquisitions,
        per_sec: acquisitions as f64 / secs,
        p50_wait: percentile(&waits, 0.5),
        p99_wait: percentile(&waits, 0.99),
        owner_changes: changes.load(Ordering::Relaxed),
        rounds_per_acquisition: sets as f64
            / cluster.nodes.len() as f64
            / acquisitions.max(1) as f64,
        shares,
    }
}

/// Environment of an S3p child process.
const CHILD_URLS: &str = "BENCH_S3P_URLS";
const CHILD_START: &str = "BENCH_S3P_START_US";
const CHILD_MILLIS: &str = "BENCH_S3P_MILLIS";

fn wall_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros()
}

/// When the bench binary runs as an S3p child: runs it and exits.
pub(crate) fn child_main_if_asked() {
    let (Ok(urls), Ok(start), Ok(millis)) = (
        std::env::var(CHILD_URLS),
        std::env::var(CHILD_START),
        std::env::var(CHILD_MILLIS),
    ) else {
        return;
    };
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let start: u128 = start.parse().expect("start time");
    let time = Duration::from_millis(millis.parse().expect("duration"));
    let client = Redlock::new(&urls).expect("client");
    // Connected before the common start.
    drop(client.lock("bench:s3p:warm", TTL).expect("warm-up"));
    let now = wall_micros();
    if start > now {
        std::thread::sleep(Duration::from_micros((start - now) as u64));
    }
    let stop = AtomicBool::new(false);
    let done = AtomicUsize::new(0);
    let waits = parking_lot::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (client, stop, done, waits) = (&client, &stop, &done, &waits);
            s.spawn(move || {
                let mut mine = Vec::new();
                // A wait lasts until the lock is acquired, across `Busy`
                // (retries used up), as in S3x.
                let mut t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    match client.lock("bench:s3p", TTL) {
                        Ok(guard) => {
                            mine.push((t0.elapsed().as_micros(), Some(wall_micros())));
                            std::thread::sleep(HOLD);
                            guard.release().expect("release");
                            done.fetch_add(1, Ordering::Relaxed);
                            t0 = Instant::now();
                        }
                        Err(Error::Busy { .. }) => {}
                        Err(err) => panic!("lock: {err}"),
                    }
                }
                // The wait still open at the end counts too.
                mine.push((t0.elapsed().as_micros(), None));
                waits.lock().extend(mine);
            });
        }
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
    });
    let waits = waits.into_inner();
    let list = |numbers: &mut dyn Iterator<Item = u128>| {
        numbers.map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    };
    // The waits, then when each acquisition happened (for runs by one
    // process).
    println!(
        "s3p {} {} {}",
        done.load(Ordering::Relaxed),
        list(&mut waits.iter().map(|w| w.0)),
        list(&mut waits.iter().filter_map(|w| w.1))
    );
    std::process::exit(0);
}

/// S3p: 3 processes × 2 threads (one client per process), one key.
pub(crate) fn s3p(cluster: &Cluster, time: Duration) -> Contention {
    let start = wall_micros() + 1_500_000;
    let sets_before = set_calls(cluster);
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().expect("bench binary"))
                .env(CHILD_URLS, cluster.urls().join(","))
                .env(CHILD_START, start.to_string())
                .env(CHILD_MILLIS, time.as_millis().to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("S3p child")
        })
        .collect();
    let mut shares = Vec::new();
    let mut waits = Vec::new();
    let mut acquired_at = Vec::new();
    for (process, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("S3p child output");
        assert!(out.status.success(), "S3p child failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("s3p "))
            .expect("S3p child report");
        let mut fields = line.split(' ');
        let numbers = |field: Option<&str>| -> Vec<u64> {
            field
                .unwrap_or("")
                .split(',')
                .filter(|w| !w.is_empty())
                .map(|w| w.parse().expect("S3p child number"))
                .collect()
        };
        shares.push(fields.next().unwrap_or("").parse().expect("count"));
        waits.extend(
            numbers(fields.next())
                .into_iter()
                .map(Duration::from_micros),
        );
        acquired_at.extend(numbers(fields.next()).into_iter().map(|at| (at, process)));
    }
    let sets = set_calls(cluster) - sets_before;
    waits.sort();
    let acquisitions: usize = shares.iter().sum();
    acquired_at.sort_unstable();
    let owners: Vec<usize> = acquired_at.iter().map(|&(_, process)| process).collect();
    Contention {
        longest_run: longest_run(&owners),
        max_wait: waits.last().copied().unwrap_or_default(),
        // The children's CPU is not visible from here.
        cpu_per_acquisition: None,
        acquisitions,
        per_sec: acquisitions as f64 / time.as_secs_f64(),
        p50_wait: percentile(&waits, 0.5),
        p99_wait: percentile(&waits, 0.99),
        owner_changes: 0,
        // Includes each child's one warm-up acquisition.
        rounds_per_acquisition: sets as f64
            / cluster.nodes.len() as f64
            / acquisitions.max(1) as f64,
        shares,
    }
}
