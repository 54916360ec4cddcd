//! `cargo bench -p redlock-bench --bench lock`: this crate against the physical floor and the
//! `redlock` crate, side by side in one run, on 5 local `redis-server` nodes.
//! Prints a table and rewrites BENCHMARKS.md.
//!
//! Set `BENCH_QUICK=1` for a short smoke run (used by CI to keep it building
//! and running); the numbers of a quick run are not meaningful.
//!
//! `BENCH_ONLY=…` runs one part and prints it, leaving BENCHMARKS.md as it
//! is: `s1`, `s12` (S1 and S2), `s2x` (S2 of a shared client, a client per
//! thread and floor-pipe5; `BENCH_PICK=text` keeps the contenders whose
//! name contains it), `hops`, `shapes` (the thread shapes' own cost),
//! `handoff`, `cross` (S3x and S3p; `BENCH_KIND=ours|rslock` keeps one),
//! `many` (S3n), `threads`, `s4`, `s6`, `s7`, `cluster`.
//! `BENCH_S1_PAIRS=n` and `BENCH_S2_SECS=n` change S1's pairs and S2's
//! seconds (for a profile long enough to attach to).

#[path = "support/cross_client.rs"]
mod cross_client;
#[path = "support/handoff.rs"]
mod handoff;
#[path = "../../tests/harness/mod.rs"]
mod harness;
#[path = "support/hops.rs"]
mod hops;
#[path = "support/plots.rs"]
mod plots;
#[path = "support/primitives.rs"]
mod primitives;
#[path = "support/shapes.rs"]
mod shapes;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Cluster, client_threads};
use redlock_sync::{Error, Redlock};

const TTL: Duration = Duration::from_secs(10);
const TTL_MS: u64 = 10_000;
const RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;
const HUNG: Duration = Duration::from_secs(8);

struct Plan {
    warmup: usize,
    s1_pairs: usize,
    s2_time: Duration,
    s3_time: Duration,
    s4_pairs: usize,
    s5_iterations: usize,
    guards: usize,
}

/// One contender: how it takes and releases a lock.
trait Contender: Send + Sync {
    fn name(&self) -> String;
    /// Acquires `key`; `None` when it is held by someone else.
    fn acquire(&self, key: &str) -> Option<Held<'_>>;
}

/// A held lock of any contender; `release` consumes it.
enum Held<'a> {
    Ours(redlock_sync::LockGuard),
    Peer(&'a redlock::RedLock, redlock::Lock<'a>),
    Floor(Box<dyn FnOnce() + 'a>),
}

impl Held<'_> {
    fn release(self) {
        match self {
            Held::Ours(guard) => guard.release().expect("release"),
            Held::Peer(manager, lock) => manager.unlock(&lock),
            Held::Floor(release) => release(),
        }
    }
}

struct Ours {
    label: &'static str,
    client: Redlock,
}

impl Contender for Ours {
    fn name(&self) -> String {
        self.label.to_owned()
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        match self.client.lock(key, TTL) {
            Ok(guard) => Some(Held::Ours(guard)),
            Err(Error::Busy { .. }) => None,
            Err(err) => panic!("lock: {err}"),
        }
    }
}

/// Ours with a client of its own per thread, as separate processes would
/// have (the anchors harness's shape; the floor shares nothing either):
/// the `n` clients are handed out in turn to the threads as each first
/// asks, so the 4 threads of an S2 slice get 4 different clients.
struct OursPerThread {
    label: &'static str,
    clients: Vec<Redlock>,
    handed: AtomicUsize,
}

thread_local! {
    static CLIENT_SLOT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

impl OursPerThread {
    fn mine(&self) -> &Redlock {
        let slot = CLIENT_SLOT.with(|slot| {
            *slot.get().get_or_insert_with(|| {
                let n = self.handed.fetch_add(1, Ordering::Relaxed) % self.clients.len();
                slot.set(Some(n));
                n
            })
        });
        &self.clients[slot]
    }
}

impl Contender for OursPerThread {
    fn name(&self) -> String {
        self.label.to_owned()
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        match self.mine().lock(key, TTL) {
            Ok(guard) => Some(Held::Ours(guard)),
            Err(Error::Busy { .. }) => None,
            Err(err) => panic!("lock: {err}"),
        }
    }
}

/// Ours, locking `count` resources at once (`lock_all`) per key: names
/// `key:0`… that hash to different cluster slots.
struct OursAll {
    label: &'static str,
    client: Redlock,
    count: usize,
}

impl Contender for OursAll {
    fn name(&self) -> String {
        self.label.to_owned()
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        let names: Vec<String> = (0..self.count).map(|i| format!("{key}:{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        match self.client.lock_all(&names, TTL) {
            Ok(guard) => Some(Held::Ours(guard)),
            Err(Error::Busy { .. }) => None,
            Err(err) => panic!("lock_all: {err}"),
        }
    }
}

struct Peer(redlock::RedLock);

impl Contender for Peer {
    fn name(&self) -> String {
        "redlock 2.0 (crates.io)".into()
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        match self.0.lock(key.as_bytes(), TTL_MS as usize) {
            Ok(Some(lock)) => Some(Held::Peer(&self.0, lock)),
            Ok(None) => None,
            Err(err) => panic!("redlock: {err}"),
        }
    }
}

/// The raw floor: persistent connections, `SET NX PX`, then `EVALSHA`.
/// Each thread gets its own connections (a floor shares nothing).
struct Floor {
    urls: Vec<String>,
    sha: String,
}

thread_local! {
    static CONNS: std::cell::RefCell<Vec<(String, redis::Connection)>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Floor {
    fn with_conns<T>(&self, f: impl FnOnce(&mut [redis::Connection]) -> T) -> T {
        CONNS.with(|cell| {
            let mut conns = cell.borrow_mut();
            if conns.first().is_none_or(|(u, _)| *u != self.urls[0])
                || conns.len() != self.urls.len()
            {
                *conns = self
                    .urls
                    .iter()
                    .map(|u| {
                        let info = redis::IntoConnectionInfo::into_connection_info(u.as_str())
                            .unwrap()
                            .set_tcp_settings(
                                redis::io::tcp::TcpSettings::default().set_nodelay(true),
                            );
                        let c = redis::Client::open(info).unwrap().get_connection().unwrap();
                        (u.clone(), c)
                    })
                    .collect();
            }
            let mut raw: Vec<redis::Connection> = conns.drain(..).map(|(_, c)| c).collect();
            let out = f(&mut raw);
            *conns = self.urls.iter().cloned().zip(raw).collect();
            out
        })
    }

    /// Writes `cmd` to every connection, then reads every reply.
    fn all(conns: &mut [redis::Connection], cmd: &redis::Cmd) -> Vec<redis::Value> {
        let packed = cmd.get_packed_command();
        for c in conns.iter_mut() {
            c.send_packed_command(&packed).unwrap();
        }
        conns
            .iter_mut()
            .map(|c| c.recv_response().unwrap())
            .collect()
    }
}

impl Contender for Floor {
    fn name(&self) -> String {
        if self.urls.len() == 1 {
            "floor-1node".into()
        } else {
            "floor-pipe5".into()
        }
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        let token = format!("{:040x}", rand_u128());
        let set = {
            let mut c = redis::cmd("SET");
            c.arg(key).arg(&token).arg("NX").arg("PX").arg(TTL_MS);
            c
        };
        let oks = self
            .with_conns(|conns| Floor::all(conns, &set))
            .into_iter()
            .filter(|v| matches!(v, redis::Value::Okay))
            .count();
        let key = key.to_owned();
        let release = move || {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.sha).arg(1).arg(&key).arg(&token);
            self.with_conns(|conns| Floor::all(conns, &c));
        };
        if oks > self.urls.len() / 2 {
            Some(Held::Floor(Box::new(release)))
        } else {
            release();
            None
        }
    }
}

/// A thread shape's floor (see `support/shapes.rs`): a client of its own
/// per thread, handed out as [`OursPerThread`] hands out its clients.
struct ShapeFloor {
    label: &'static str,
    clients: Vec<parking_lot::Mutex<Box<dyn shapes::Shape>>>,
    handed: AtomicUsize,
    sha: String,
}

impl ShapeFloor {
    fn new(label: &'static str, sha: &str, connect: impl Fn() -> Box<dyn shapes::Shape>) -> Self {
        ShapeFloor {
            label,
            clients: (0..4).map(|_| parking_lot::Mutex::new(connect())).collect(),
            handed: AtomicUsize::new(0),
            sha: sha.to_owned(),
        }
    }

    fn mine(&self) -> parking_lot::MutexGuard<'_, Box<dyn shapes::Shape>> {
        let slot = CLIENT_SLOT.with(|slot| {
            *slot.get().get_or_insert_with(|| {
                let n = self.handed.fetch_add(1, Ordering::Relaxed) % self.clients.len();
                slot.set(Some(n));
                n
            })
        });
        self.clients[slot].lock()
    }
}

impl Contender for ShapeFloor {
    fn name(&self) -> String {
        self.label.to_owned()
    }
    fn acquire(&self, key: &str) -> Option<Held<'_>> {
        let token = format!("{:040x}", rand_u128());
        let mut set = redis::cmd("SET");
        set.arg(key).arg(&token).arg("NX").arg("PX").arg(TTL_MS);
        let yes = self.mine().round(set.get_packed_command().into());
        let key = key.to_owned();
        let release = move || {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.sha).arg(1).arg(&key).arg(&token);
            self.mine().round(c.get_packed_command().into());
        };
        if yes {
            Some(Held::Floor(Box::new(release)))
        } else {
            release();
            None
        }
    }
}

fn rand_u128() -> u128 {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) as u128;
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) ^ std::process::id() as u128
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i]
}

const S3X_HEADER: &str = "\n| S3x: 4 separate clients, one key, hold 1 ms | acquisitions/s | p50 wait µs | p99 wait µs | longest wait µs | owner changes | longest run by one client | rounds per acquisition | CPU µs per acquisition: clients / nodes | per client |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |";

/// One contender's S3x table row.
fn s3x_row(kind: cross_client::Kind, r: &cross_client::Contention) -> String {
    let (client_cpu, node_cpu) = r.cpu_per_acquisition.unwrap_or_default();
    format!(
        "| {} | {:.0} | {} | {} | {} | {:.0} % | {} | {:.2} | {} / {} | {:?} |",
        kind.name(),
        r.per_sec,
        us(r.p50_wait),
        us(r.p99_wait),
        us(r.max_wait),
        100.0 * r.owner_changes as f64 / r.acquisitions.max(1) as f64,
        r.longest_run,
        r.rounds_per_acquisition,
        us(client_cpu),
        us(node_cpu),
        r.shares
    )
}

const S3N_HEADER: &str = "\n| S3n: N separate clients, one key, hold 1 ms | clients | acquisitions/s | p50 wait µs | p99 wait µs | longest wait µs | owner changes | spread (max − min) / mean | rounds per acquisition | CPU µs per acquisition: clients / nodes |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// S3 with 4, 8, 16 and 32 separate clients, each contender side by side
/// at each count: the table rows, and each contender's acquisitions/s
/// against the number of clients (for the plot).
fn s3n(cluster: &Cluster, time: Duration) -> (Vec<String>, Vec<plots::Series>) {
    let mut rows = Vec::new();
    let mut curves: Vec<plots::Series> = cross_client::MANY_KINDS
        .iter()
        .map(|kind| (kind.name().to_owned(), Vec::new()))
        .collect();
    for count in cross_client::MANY_COUNTS {
        for (k, kind) in cross_client::MANY_KINDS.into_iter().enumerate() {
            let r = cross_client::s3x_with(kind, cluster, time, count);
            curves[k].1.push((count as f64, r.per_sec));
            let (client_cpu, node_cpu) = r.cpu_per_acquisition.unwrap_or_default();
            let mean = r.acquisitions as f64 / r.shares.len().max(1) as f64;
            let spread = r.shares.iter().max().copied().unwrap_or(0)
                - r.shares.iter().min().copied().unwrap_or(0);
            rows.push(format!(
                "| {} | {count} | {:.0} | {} | {} | {} | {:.0} % | {:.0} % | {:.2} | {} / {} |",
                kind.name(),
                r.per_sec,
                us(r.p50_wait),
                us(r.p99_wait),
                us(r.max_wait),
                100.0 * r.owner_changes as f64 / r.acquisitions.max(1) as f64,
                100.0 * spread as f64 / mean.max(1.0),
                r.rounds_per_acquisition,
                us(client_cpu),
                us(node_cpu),
            ));
        }
    }
    (rows, curves)
}

/// What a thread per node costs in itself (`support/shapes.rs`): the
/// thinnest clients of the two shapes beside floor-pipe5 and ours, a
/// client per thread each; S1 p50 and S2 with their ratios to
/// floor-pipe5, and S2's hops.
fn shapes_rows(
    contenders: &[Arc<dyn Contender>],
    urls: &[String],
    sha: &str,
    plan: &Plan,
    cluster: &Cluster,
) -> Vec<String> {
    let mut picked: Vec<Arc<dyn Contender>> = contenders
        .iter()
        .filter(|c| c.name().starts_with("a client per thread") || c.name() == "floor-pipe5")
        .cloned()
        .collect();
    picked.push(Arc::new(ShapeFloor::new("shape: workers", sha, || {
        Box::new(shapes::Workers::connect(urls, false))
    })));
    picked.push(Arc::new(ShapeFloor::new(
        "shape: workers, TIME after each batch",
        sha,
        || Box::new(shapes::Workers::connect(urls, true)),
    )));
    picked.push(Arc::new(ShapeFloor::new("shape: readers", sha, || {
        Box::new(shapes::Readers::connect(urls, false))
    })));
    picked.push(Arc::new(ShapeFloor::new(
        "shape: readers, TIME after each request",
        sha,
        || Box::new(shapes::Readers::connect(urls, true)),
    )));
    let s1 = s1(&picked, plan);
    let s2 = s2(&picked, plan, cluster);
    let Some(floor) = picked.iter().position(|c| c.name() == "floor-pipe5") else {
        return Vec::new();
    };
    let (p50f, tf, cf) = (
        s1[floor].0[0].as_secs_f64().max(1e-9),
        s2[floor].per_sec.max(1e-9),
        s2[floor].cpu_per_pair.0.as_secs_f64().max(1e-9),
    );
    let mut rows = vec![
        "\n| the thread shape's own cost (a client per thread; shapes: raw `redis`, no bookkeeping, a majority decides) | S1 pair p50 µs | × floor-pipe5 | S2 pairs/s | × floor-pipe5 | S2 client CPU µs per pair | × floor-pipe5 | S2 switches per pair | S2 syscalls per pair |".to_owned(),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |".to_owned(),
    ];
    for ((c, (l, _)), r) in picked.iter().zip(&s1).zip(&s2) {
        let counting = hops::Counting::start();
        let done = s2_threads(c.as_ref(), plan.s2_time / 5, 4);
        let hops = counting.stop().per(done);
        rows.push(format!(
            "| {} | {} | {:.2} | {:.0} | {:.2} | {} | {:.2} | {hops} |",
            c.name(),
            us(l[0]),
            l[0].as_secs_f64() / p50f,
            r.per_sec,
            r.per_sec / tf,
            us(r.cpu_per_pair.0),
            r.cpu_per_pair.0.as_secs_f64() / cf,
        ));
    }
    rows
}

/// The hand-off table: 200 callers queued on one key, hold 2 ms, as one
/// client of 200 threads, 20 of 10 and 200 of 1 (`support/handoff.rs`);
/// and the largest hand-off p50 in uncontended pairs, when every one ran.
fn handoff_rows(cluster: &Cluster, plan: &Plan) -> (Vec<String>, Option<f64>) {
    let mut rows = vec![
        "\n| hand-off: 200 callers queued on one key, hold 2 ms | hand-offs | re-takes by the releaser | p50 µs (release to next lock returning) | p90 µs | uncontended pair p50 µs (first client, before and after) | p50 in uncontended pairs |".to_owned(),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |".to_owned(),
    ];
    let mut worst: Option<f64> = Some(0.0);
    let files = handoff::open_files_up_to_the_hard_limit();
    for (clients, threads) in [(1, 200), (20, 10), (200, 1)] {
        let label = format!("redlock-sync: {clients} client(s) × {threads} thread(s)");
        let ran = if (clients as libc::rlim_t) * handoff::FILES_PER_CLIENT + 256 > files {
            Err(format!("{files} open files allowed"))
        } else {
            handoff::run(&cluster.urls(), clients, threads, plan.s3_time)
        };
        match ran {
            Ok(r) if r.count > 0 => {
                let pairs = r.p50.as_secs_f64() / r.pair_p50.as_secs_f64().max(1e-9);
                worst = worst.map(|w| w.max(pairs));
                rows.push(format!(
                    "| {label} | {} | {} | {} | {} | {} | {pairs:.2} |",
                    r.count,
                    r.retakes,
                    us(r.p50),
                    us(r.p90),
                    us(r.pair_p50),
                ));
            }
            Ok(_) => {
                worst = None;
                rows.push(format!("| {label} | 0 | | | | | |"));
            }
            Err(why) => {
                worst = None;
                rows.push(format!("| {label} | not run: {why} | | | | | |"));
            }
        }
    }
    (rows, worst)
}

/// S3n's curves: acquisitions/s against the number of contending clients.
fn plot_s3n(curves: &[plots::Series]) {
    plot(
        "s3n.svg",
        "S3n: one key, hold 1 ms, N separate clients",
        ("contending clients", "acquisitions/s"),
        curves,
        false,
    );
}

/// S1's latency distributions: the share of pairs done within each latency
/// (redlock 2.0, an order of magnitude slower, is left out for the scale).
fn plot_s1(contenders: &[Arc<dyn Contender>], runs: &[([Duration; 4], Vec<Duration>)]) {
    let curves: Vec<plots::Series> = contenders
        .iter()
        .zip(runs)
        .filter(|(c, _)| !c.name().starts_with("redlock 2.0"))
        .map(|(c, (_, sorted))| {
            let n = sorted.len().max(1) as f64;
            let step = (sorted.len() / 200).max(1);
            let points = sorted
                .iter()
                .enumerate()
                .step_by(step)
                .map(|(i, d)| (d.as_secs_f64() * 1e6, (i + 1) as f64 / n))
                .collect();
            (c.name().to_owned(), points)
        })
        .collect();
    plot(
        "s1.svg",
        "S1: lock + release pair latency, one thread, 5 nodes",
        ("pair latency µs (log)", "share of pairs done"),
        &curves,
        true,
    );
}

/// Draws `series` into `docs/bench/{file}` beside the BENCHMARKS.md of a
/// full run (a quick or partial run, which writes no BENCHMARKS.md, into
/// `target/bench-partial/` instead), or says why it could not.
fn plot(file: &str, caption: &str, axes: (&str, &str), series: &[plots::Series], log_x: bool) {
    let partial =
        std::env::var_os("BENCH_QUICK").is_some() || std::env::var_os("BENCH_ONLY").is_some();
    let dir = if partial {
        "target/bench-partial"
    } else {
        "docs/bench"
    };
    // The repository's root, where BENCHMARKS.md and docs/ are.
    let dir = format!("{}/../{dir}", env!("CARGO_MANIFEST_DIR"));
    let path = format!("{dir}/{file}");
    if let Err(err) = std::fs::create_dir_all(&dir)
        .map_err(Into::into)
        .and_then(|()| plots::lines(&path, caption, axes, series, log_x))
    {
        eprintln!("bench: could not draw {file}: {err}");
    }
}

/// How long S7 runs.
const S7_RUN: Duration = Duration::from_secs(6);

const S7_HEADER: &str = "\n| S7: nodes 1–3; 8 reader threads in each of 2 clients (hold 1 ms), a writer thread in the first reloading every 300 ms (hold 5 ms), 6 s, defaults | reads | failed reads | read wait p50 / p99 / max µs | reloads (failed) | reload wait p50 / p99 / max µs |\n| --- | ---: | ---: | ---: | ---: | ---: |";

/// The S7 table row (and the first failure's message, if any).
fn s7_row(r: &primitives::Reload) -> String {
    let spread = |w: &[Duration]| {
        let at = |p: f64| {
            let i = ((w.len() as f64 * p) as usize).min(w.len().saturating_sub(1));
            w.get(i).copied().unwrap_or_default()
        };
        let max = w.last().copied().unwrap_or_default();
        format!("{} / {} / {}", us(at(0.5)), us(at(0.99)), us(max))
    };
    let mut row = format!(
        "| redlock-sync | {} | {} | {} | {} ({}) | {} |",
        r.reads,
        r.read_failures,
        spread(&r.read_waits),
        r.write_waits.len(),
        r.write_failures,
        spread(&r.write_waits)
    );
    if let Some(first) = &r.first_failure {
        row.push_str(&format!("\n\nFirst failure: {first}"));
    }
    row
}

const S3P_HEADER: &str = "\n| S3p: 3 processes × 2 threads, one key, hold 1 ms | acquisitions/s | p50 wait µs | p99 wait µs | longest wait µs | longest run by one process | rounds per acquisition | per process |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |";

/// The S3p table row.
fn s3p_row(r: &cross_client::Contention) -> String {
    format!(
        "| redlock-sync (defaults) | {:.0} | {} | {} | {} | {} | {:.2} | {:?} |",
        r.per_sec,
        us(r.p50_wait),
        us(r.p99_wait),
        us(r.max_wait),
        r.longest_run,
        r.rounds_per_acquisition,
        r.shares
    )
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn keys(prefix: &str) -> impl FnMut() -> String + use<'_> {
    let mut i = 0u64;
    move || {
        i += 1;
        format!("bench:{prefix}:{i}")
    }
}

/// S1: one thread, fresh keys: pair and acquire latency (p50, p99 of each),
/// and each contender's pair latencies, sorted. Contenders take turns in 10
/// slices each, so that the machine's drifting load hits all alike.
fn s1(contenders: &[Arc<dyn Contender>], plan: &Plan) -> Vec<([Duration; 4], Vec<Duration>)> {
    let mut next = keys("s1");
    for c in contenders {
        for _ in 0..plan.warmup {
            c.acquire(&next()).expect("free key").release();
        }
    }
    let mut pairs = vec![Vec::with_capacity(plan.s1_pairs); contenders.len()];
    let mut acquires = pairs.clone();
    for _slice in 0..10 {
        for (i, c) in contenders.iter().enumerate() {
            for _ in 0..plan.s1_pairs / 10 {
                let key = next();
                let t0 = Instant::now();
                let held = c.acquire(&key).expect("free key");
                acquires[i].push(t0.elapsed());
                held.release();
                pairs[i].push(t0.elapsed());
            }
        }
    }
    pairs
        .iter_mut()
        .zip(acquires.iter_mut())
        .map(|(p, a)| {
            p.sort();
            a.sort();
            let percentiles = [
                percentile(p, 0.5),
                percentile(p, 0.99),
                percentile(a, 0.5),
                percentile(a, 0.99),
            ];
            (percentiles, std::mem::take(p))
        })
        .collect()
}

/// S2: 4 threads, distinct keys, for every contender in 5 alternating
/// slices: pairs per second, and the CPU per pair (this process's and the
/// nodes', over the contender's slices).
fn s2(contenders: &[Arc<dyn Contender>], plan: &Plan, cluster: &Cluster) -> Vec<S2> {
    let mut done = vec![0.0; contenders.len()];
    let mut secs = vec![0.0; contenders.len()];
    let mut cpu = vec![(0.0, 0.0); contenders.len()];
    for _slice in 0..5 {
        for (i, c) in contenders.iter().enumerate() {
            let before = cross_client::cpu_used(cluster);
            let started = Instant::now();
            done[i] += s2_slice(c.as_ref(), plan.s2_time / 5) as f64;
            secs[i] += started.elapsed().as_secs_f64();
            let after = cross_client::cpu_used(cluster);
            cpu[i].0 += after.0 - before.0;
            cpu[i].1 += after.1 - before.1;
        }
    }
    (0..contenders.len())
        .map(|i| {
            let per_pair = |seconds: f64| Duration::from_secs_f64(seconds / done[i].max(1.0));
            S2 {
                per_sec: done[i] / secs[i],
                cpu_per_pair: (per_pair(cpu[i].0), per_pair(cpu[i].1)),
            }
        })
        .collect()
}

/// One contender's S2.
struct S2 {
    per_sec: f64,
    /// CPU per pair: this process (10 ms ticks), the nodes.
    cpu_per_pair: (Duration, Duration),
}

fn s2_slice(c: &dyn Contender, time: Duration) -> usize {
    s2_threads(c, time, 4)
}

/// Pairs on distinct keys by `threads` threads sharing `c`, for `time`.
fn s2_threads(c: &dyn Contender, time: Duration, threads: usize) -> usize {
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (done, stop) = (&done, &stop);
            s.spawn(move || {
                let prefix = format!("s2:{t}");
                let mut next = keys(&prefix);
                while !stop.load(Ordering::Relaxed) {
                    c.acquire(&next()).expect("free key").release();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed)
}

struct Contention {
    acquisitions: usize,
    per_sec: f64,
    mean_wait: Duration,
    p99_wait: Duration,
    changes_per_sec: f64,
}

/// S3: 4 threads, one key, hold 1 ms.
fn s3(c: &dyn Contender, plan: &Plan) -> Contention {
    let stop = AtomicBool::new(false);
    let owner = AtomicUsize::new(usize::MAX);
    let changes = AtomicUsize::new(0);
    let waits = parking_lot::Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (stop, owner, changes, waits) = (&stop, &owner, &changes, &waits);
            s.spawn(move || {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let held = loop {
                        if let Some(h) = c.acquire("bench:s3") {
                            break Some(h);
                        }
                        if stop.load(Ordering::Relaxed) {
                            break None;
                        }
                    };
                    let Some(held) = held else { break };
                    mine.push(t0.elapsed());
                    if owner.swap(t, Ordering::Relaxed) != t {
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    held.release();
                }
                waits.lock().extend(mine);
            });
        }
        std::thread::sleep(plan.s3_time);
        stop.store(true, Ordering::Relaxed);
    });
    let secs = started.elapsed().as_secs_f64();
    let mut waits = waits.into_inner();
    waits.sort();
    let mean = waits.iter().sum::<Duration>() / (waits.len().max(1) as u32);
    Contention {
        acquisitions: waits.len(),
        per_sec: waits.len() as f64 / secs,
        mean_wait: mean,
        p99_wait: percentile(&waits, 0.99),
        changes_per_sec: changes.load(Ordering::Relaxed) as f64 / secs,
    }
}

const HOPS_HEADER: &str = "\n| hops: this process, all threads (context switches: voluntary + involuntary) | S1 switches per pair | S1 syscalls per pair | S2 switches per pair (4 threads) | S2 syscalls per pair | S3 switches per acquisition (4 threads, one key, hold 1 ms) | S3 syscalls per acquisition |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |";

/// Hops per operation: this process's context switches and syscalls per
/// pair in S1 (one thread, fresh keys) and S2 (4 threads, distinct keys),
/// and per acquisition in S3 (4 threads, one key, hold 1 ms), each
/// contender over its own phase (`support/hops.rs`; the idle threads of
/// the other contenders' clients count too, and S3's figures include the
/// bench's own 1 ms hold: a sleep, so one switch and one syscall at
/// least). Syscalls are counted by a `perf` tracepoint, which slows the
/// phase: its throughput is not S2's.
fn hops_rows(contenders: &[Arc<dyn Contender>], plan: &Plan) -> Vec<String> {
    let mut rows = Vec::new();
    for c in contenders {
        let mut next = keys("hops");
        let counting = hops::Counting::start();
        for _ in 0..plan.s1_pairs {
            c.acquire(&next()).expect("free key").release();
        }
        let s1 = counting.stop().per(plan.s1_pairs);
        let counting = hops::Counting::start();
        let done = s2_threads(c.as_ref(), plan.s2_time, 4);
        let s2 = counting.stop().per(done);
        let s3 = if c.name().starts_with("floor") {
            "— | —".to_owned()
        } else {
            let counting = hops::Counting::start();
            let r = s3(c.as_ref(), plan);
            counting.stop().per(r.acquisitions)
        };
        rows.push(format!("| {} | {s1} | {s2} | {s3} |", c.name()));
    }
    rows
}

/// S4: one node paused. Pairs run on a helper thread; the main thread checks
/// its progress every 100 ms (not per pair, so as not to compete for the CPU),
/// and calls it hung when no pair finished for 8 s.
fn s4(c: Arc<dyn Contender>, plan: &Plan) -> (usize, usize, Option<(Duration, Duration)>, bool) {
    let pairs = plan.s4_pairs;
    let progress = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = crossbeam_channel::bounded(1);
    {
        let progress = progress.clone();
        std::thread::spawn(move || {
            let mut next = keys("s4");
            let mut results = Vec::with_capacity(pairs);
            for _ in 0..pairs {
                let key = next();
                let t0 = Instant::now();
                let ok = c.acquire(&key).map(Held::release).is_some();
                results.push((ok, t0.elapsed()));
                progress.fetch_add(1, Ordering::Relaxed);
            }
            let _ = tx.send(results);
        });
    }
    let mut seen = 0;
    let mut last_progress = Instant::now();
    let results = loop {
        if let Ok(results) = rx.recv_timeout(Duration::from_millis(100)) {
            break Some(results);
        }
        let now_seen = progress.load(Ordering::Relaxed);
        if now_seen != seen {
            seen = now_seen;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > HUNG {
            break None;
        }
    };
    let Some(results) = results else {
        return (seen, pairs, None, true);
    };
    let ok = results.iter().filter(|r| r.0).count();
    let mut times: Vec<Duration> = results.iter().map(|r| r.1).collect();
    times.sort();
    (
        ok,
        pairs,
        Some((percentile(&times, 0.5), percentile(&times, 0.99))),
        false,
    )
}

/// S4 against a healthy baseline, side by side: slices of pairs with node 3
/// paused alternate with slices while it is healthy (after it had time to
/// reconnect), so the machine's drifting load hits both alike. Returns the
/// p50 of each.
fn s4_side_by_side(c: &dyn Contender, cluster: &mut Cluster, plan: &Plan) -> (Duration, Duration) {
    let mut next = keys("s4ab");
    let (mut paused, mut healthy) = (Vec::new(), Vec::new());
    for _slice in 0..10 {
        for (pause, times) in [(true, &mut paused), (false, &mut healthy)] {
            if pause {
                cluster.nodes[2].pause();
            } else {
                cluster.nodes[2].resume();
                std::thread::sleep(Duration::from_millis(1200)); // reconnected by then
            }
            for _ in 0..plan.s4_pairs / 10 {
                let t0 = Instant::now();
                c.acquire(&next()).expect("free key").release();
                times.push(t0.elapsed());
            }
        }
    }
    paused.sort();
    healthy.sort();
    (percentile(&paused, 0.5), percentile(&healthy, 0.5))
}

/// S5: 10 resources at once — one `lock_all` + release, against 10 single
/// locks taken one after another and released, in alternating slices.
/// Returns the two medians.
fn s5(client: &Redlock, iterations: usize) -> (Duration, Duration) {
    let (mut all, mut singles) = (Vec::new(), Vec::new());
    let names: Vec<String> = (0..10).map(|i| format!("bench:s5:{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for _ in 0..iterations / 10 {
        for _ in 0..10 {
            let t = Instant::now();
            client
                .lock_all(&names, TTL)
                .expect("lock_all")
                .release()
                .expect("release");
            all.push(t.elapsed());
        }
        for _ in 0..10 {
            let t = Instant::now();
            let guards: Vec<_> = names
                .iter()
                .map(|n| client.lock(n, TTL).expect("lock"))
                .collect();
            for guard in guards {
                guard.release().expect("release");
            }
            singles.push(t.elapsed());
        }
    }
    all.sort();
    singles.sort();
    (percentile(&all, 0.5), percentile(&singles, 0.5))
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    cross_client::child_main_if_asked();
    const PARTS: [&str; 13] = [
        "s1", "s12", "s2x", "hops", "shapes", "handoff", "cross", "many", "threads", "s4", "s6",
        "s7", "cluster",
    ];
    if let Ok(part) = std::env::var("BENCH_ONLY") {
        assert!(
            PARTS.contains(&part.as_str()),
            "BENCH_ONLY={part:?} is no part of the bench; the parts: {PARTS:?}"
        );
    }
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let s1_pairs: Option<usize> = std::env::var("BENCH_S1_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok());
    let plan = if quick {
        Plan {
            warmup: 5,
            s1_pairs: 50,
            s2_time: Duration::from_millis(200),
            s3_time: Duration::from_millis(300),
            s4_pairs: 10,
            s5_iterations: 20,
            guards: 200,
        }
    } else {
        Plan {
            warmup: 50,
            s1_pairs: s1_pairs.unwrap_or(2000),
            s2_time: Duration::from_secs(
                std::env::var("BENCH_S2_SECS")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(5),
            ),
            s3_time: Duration::from_secs(5),
            s4_pairs: 200,
            s5_iterations: 400,
            // A part run alone does not report what holding guards costs.
            guards: if std::env::var_os("BENCH_ONLY").is_some() {
                0
            } else {
                10_000
            },
        }
    };
    let bench_started = Instant::now();
    let mut cluster = Cluster::start(5);
    let urls = cluster.urls();
    let version = redis_version(&cluster);
    let sha = redis::Script::new(RELEASE).get_hash().to_owned();
    for n in &cluster.nodes {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query(&mut n.conn())
            .unwrap();
    }

    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "many") {
        println!("{S3N_HEADER}");
        let (rows, curves) = s3n(&cluster, plan.s3_time);
        for row in rows {
            println!("{row}");
        }
        plot_s3n(&curves);
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "handoff") {
        for row in handoff_rows(&cluster, &plan).0 {
            println!("{row}");
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "cross") {
        // Only the cross-client scenarios (for tuning them).
        println!("{S3X_HEADER}");
        // BENCH_KIND=ours|rslock: only that contender (for profiling).
        let only = std::env::var("BENCH_KIND").ok();
        for kind in cross_client::KINDS {
            if only.as_deref().is_some_and(|k| !kind.name().starts_with(k)) {
                continue;
            }
            let r = cross_client::s3x(kind, &cluster, plan.s3_time);
            println!("{}", s3x_row(kind, &r));
        }
        if only.is_none() {
            println!("{S3P_HEADER}");
            println!("{}", s3p_row(&cross_client::s3p(&cluster, plan.s3_time)));
        }
        return;
    }

    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "cluster") {
        // S1 and S2 with node 5 a 3-master Redis Cluster, beside five
        // standalone nodes (the same 5 for both, alternated); and
        // `lock_all` of 10 names (most in different slots: one script
        // per slot on the cluster, one on a standalone node).
        let redis_cluster = harness::redis_cluster::RedisCluster::start(3, 0, 5000);
        let mut mixed = urls[..4].to_vec();
        mixed.push(redis_cluster.url(3));
        let contenders: Vec<Arc<dyn Contender>> = vec![
            Arc::new(Ours {
                label: "5 standalone nodes",
                client: Redlock::new(&urls).unwrap(),
            }),
            Arc::new(Ours {
                label: "4 standalone + a 3-master cluster",
                client: Redlock::new(&mixed).unwrap(),
            }),
            Arc::new(Ours {
                label: "the cluster alone",
                client: Redlock::new([redis_cluster.url(3)]).unwrap(),
            }),
            Arc::new(Ours {
                label: "one standalone node alone",
                client: Redlock::new(&urls[..1]).unwrap(),
            }),
            Arc::new(OursAll {
                label: "lock_all of 10 names, the cluster alone",
                client: Redlock::new([redis_cluster.url(3)]).unwrap(),
                count: 10,
            }),
            Arc::new(OursAll {
                label: "lock_all of 10 names, one standalone node alone",
                client: Redlock::new(&urls[..1]).unwrap(),
                count: 10,
            }),
        ];
        let runs = s1(&contenders, &plan);
        let s2 = s2(&contenders, &plan, &cluster);
        println!("| nodes | S1 pair p50 µs | S1 pair p99 µs | S2 pairs/s (4 threads) |");
        println!("| --- | ---: | ---: | ---: |");
        for ((c, (l, _)), s2) in contenders.iter().zip(&runs).zip(&s2) {
            println!(
                "| {} | {} | {} | {:.0} |",
                c.name(),
                us(l[0]),
                us(l[1]),
                s2.per_sec
            );
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "s7") {
        println!("{S7_HEADER}");
        println!("{}", s7_row(&primitives::s7_reload(&urls[..3], S7_RUN)));
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "s6") {
        // Only the semaphore and reader-writer lock figures.
        let s6 = primitives::s6(&cluster, plan.s5_iterations);
        println!(
            "S6 pair p50 µs: lock {}, free permit of 4 {}, read {}, write {}, last free permit of 8 {} ({:.2} rounds)",
            us(s6.plain),
            us(s6.permit),
            us(s6.read),
            us(s6.write),
            us(s6.last_permit),
            s6.last_rounds
        );
        return;
    }

    let mut report = String::new();
    let mut table = |line: String| {
        println!("{line}");
        report.push_str(&line);
        report.push('\n');
    };

    // Cost: threads, connections, and RSS for many guards held.
    let base_threads = client_threads();
    let base_clients = cluster.client_connections().iter().sum::<usize>();
    let ours = Redlock::new(&urls).unwrap();
    std::thread::sleep(Duration::from_millis(200)); // threads name themselves as they start
    let our_threads = client_threads() - base_threads;
    let our_conns = cluster.client_connections().iter().sum::<usize>() - base_clients;
    let rss0 = rss_kib();
    let guards: Vec<_> = (0..plan.guards)
        .map(|i| ours.lock(&format!("bench:g:{i}"), TTL).unwrap())
        .collect();
    let our_rss = rss_kib().saturating_sub(rss0);
    drop(guards);
    let peer = redlock::RedLock::new(urls.clone());
    let rss0 = rss_kib();
    let locks: Vec<_> = (0..plan.guards.min(2000))
        .map(|i| {
            peer.lock(format!("bench:pg:{i}").as_bytes(), TTL_MS as usize)
                .unwrap()
                .unwrap()
        })
        .collect();
    let peer_rss = rss_kib().saturating_sub(rss0);
    for l in &locks {
        peer.unlock(l);
    }
    drop(locks);

    let contenders: Vec<Arc<dyn Contender>> = vec![
        Arc::new(Ours {
            label: "redlock-sync (defaults)",
            client: ours.clone(),
        }),
        Arc::new(OursPerThread {
            label: "a client per thread: redlock-sync (defaults)",
            clients: (0..4).map(|_| Redlock::new(&urls).unwrap()).collect(),
            handed: AtomicUsize::new(0),
        }),
        Arc::new(Floor {
            urls: urls[..1].to_vec(),
            sha: sha.clone(),
        }),
        Arc::new(Floor {
            urls: urls.clone(),
            sha: sha.clone(),
        }),
        Arc::new(Peer(peer)),
        Arc::new(Ours {
            label: "notifications off: redlock-sync (release_notifications(false))",
            client: Redlock::builder(&urls)
                .release_notifications(false)
                .build()
                .unwrap(),
        }),
        Arc::new(Ours {
            label: "fenced: redlock-sync (fencing on)",
            client: Redlock::builder(&urls).fencing(true).build().unwrap(),
        }),
        Arc::new(Ours {
            label: "one node: redlock-sync over node 1 alone",
            client: Redlock::new(&urls[..1]).unwrap(),
        }),
    ];

    table(format!(
        "\n{} cores, redis-server {version}, 5 nodes on loopback, TTL 10 s{}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick {
            " — QUICK RUN, numbers not meaningful"
        } else {
            ""
        }
    ));
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "hops") {
        println!("{HOPS_HEADER}");
        for row in hops_rows(&contenders, &plan) {
            println!("{row}");
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "threads") {
        // One client shared by 4 and by 32 threads, distinct keys: what the
        // client's shared state costs under many callers (alternating
        // 1 s slices, 5 each).
        for threads in [4, 32] {
            let (mut done, mut secs) = (0usize, 0.0);
            for _ in 0..5 {
                let started = Instant::now();
                done += s2_threads(contenders[0].as_ref(), Duration::from_secs(1), threads);
                secs += started.elapsed().as_secs_f64();
            }
            println!("threads {threads}: {:.0} pairs/s", done as f64 / secs);
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "shapes") {
        for row in shapes_rows(&contenders, &urls, &sha, &plan, &cluster) {
            println!("{row}");
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "s2x") {
        // Only S2 (5 alternating slices each), for a client per thread, one
        // shared client and floor-pipe5: pairs/s and client CPU per pair,
        // with the ratios to the floor (issue 58's first target).
        // `BENCH_PICK=text` keeps only those whose name contains it (for a
        // profile of one contender; no ratios without the floor).
        let pick = std::env::var("BENCH_PICK").unwrap_or_default();
        let picked: Vec<Arc<dyn Contender>> = contenders
            .iter()
            .filter(|c| {
                ["a client per thread", "redlock-sync", "floor-pipe5"]
                    .iter()
                    .any(|p| c.name().starts_with(p))
                    && c.name().contains(&pick)
            })
            .cloned()
            .collect();
        let results = s2(&picked, &plan, &cluster);
        let floor = picked
            .iter()
            .zip(&results)
            .find(|(c, _)| c.name() == "floor-pipe5")
            .map(|(_, r)| (r.per_sec, r.cpu_per_pair.0.as_secs_f64()));
        for (c, r) in picked.iter().zip(&results) {
            let ratio = |ours: f64, floor: Option<f64>| {
                floor.map_or(String::new(), |f| {
                    format!(" ({:.2}× floor)", ours / f.max(1e-9))
                })
            };
            println!(
                "{:<48} {:>6.0} pairs/s{}  client CPU {:>4} µs/pair{}, nodes {:>4} µs",
                c.name(),
                r.per_sec,
                ratio(r.per_sec, floor.map(|f| f.0)),
                us(r.cpu_per_pair.0),
                ratio(r.cpu_per_pair.0.as_secs_f64(), floor.map(|f| f.1)),
                us(r.cpu_per_pair.1)
            );
        }
        return;
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "s4") {
        // Only S4 for this crate: node 3 paused against healthy, side by
        // side, and the paused run's success and tail.
        let (paused, healthy) = s4_side_by_side(contenders[0].as_ref(), &mut cluster, &plan);
        cluster.nodes[2].pause();
        let (ok, total, lat, hung) = s4(contenders[0].clone(), &plan);
        cluster.nodes[2].resume();
        let (p50, p99) = lat.map_or(("—".into(), "—".into()), |(a, b)| (us(a), us(b)));
        println!(
            "S4 ours: {ok}/{total}{}, pair p50 {p50} µs p99 {p99} µs; side by side p50 paused {} µs / healthy {} µs = {:.2}×",
            if hung { " (hung)" } else { "" },
            us(paused),
            us(healthy),
            paused.as_secs_f64() / healthy.as_secs_f64()
        );
        return;
    }
    table("| contender | S1 pair p50 µs | S1 pair p99 µs | S1 acquire p50 µs | S1 acquire p99 µs | S2 pairs/s (4 threads) | S2 CPU µs per pair: clients / nodes |".into());
    table("| --- | ---: | ---: | ---: | ---: | ---: | ---: |".into());
    let mut s1_results = Vec::new();
    let mut our_s1_p99 = Duration::ZERO;
    let s1_runs = s1(&contenders, &plan);
    plot_s1(&contenders, &s1_runs);
    let latencies: Vec<[Duration; 4]> = s1_runs.into_iter().map(|(l, _)| l).collect();
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "s1" || v == "s12") {
        // `s12` (scripts/ab-bench.sh, old code against new): S2 too.
        let s2s = std::env::var("BENCH_ONLY")
            .is_ok_and(|v| v == "s12")
            .then(|| s2(&contenders, &plan, &cluster));
        for (i, (c, l)) in contenders.iter().zip(&latencies).enumerate() {
            let s2 = s2s
                .as_ref()
                .map(|s| format!("  S2 {:>6.0} pairs/s", s[i].per_sec))
                .unwrap_or_default();
            println!(
                "{:<28} pair p50 {:>5} µs  p99 {:>5} µs{s2}",
                c.name(),
                us(l[0]),
                us(l[1])
            );
        }
        return;
    }
    let throughputs = s2(&contenders, &plan, &cluster);
    for ((c, [p50, p99, a50, a99]), s2) in contenders.iter().zip(latencies).zip(throughputs) {
        let tput = s2.per_sec;
        if c.name().starts_with("redlock-sync") {
            our_s1_p99 = p99;
        }
        s1_results.push((c.name(), p50, tput, s2.cpu_per_pair.0));
        table(format!(
            "| {} | {} | {} | {} | {} | {:.0} | {} / {} |",
            c.name(),
            us(p50),
            us(p99),
            us(a50),
            us(a99),
            tput,
            us(s2.cpu_per_pair.0),
            us(s2.cpu_per_pair.1)
        ));
    }

    table(HOPS_HEADER.into());
    for row in hops_rows(&contenders, &plan) {
        table(row);
    }
    for row in shapes_rows(&contenders, &urls, &sha, &plan, &cluster) {
        table(row);
    }

    // Before S3/S4, whose stalled peer calls linger in the background.
    let (s5_all, s5_singles) = s5(&ours, plan.s5_iterations);
    let s6 = primitives::s6(&cluster, plan.s5_iterations);

    table("\n| contender | S3 acquisitions/s | S3 mean wait µs | S3 p99 wait µs | S3 owner changes/s |".into());
    table("| --- | ---: | ---: | ---: | ---: |".into());
    let mut s3_results = Vec::new();
    // A client per thread contends as S3x's separate clients do, below.
    for c in contenders.iter().filter(|c| {
        !["floor", "fenced", "one node", "a client per thread"]
            .iter()
            .any(|p| c.name().starts_with(p))
    }) {
        let r = s3(c.as_ref(), &plan);
        table(format!(
            "| {} | {:.0} | {} | {} | {:.0} |",
            c.name(),
            r.per_sec,
            us(r.mean_wait),
            us(r.p99_wait),
            r.changes_per_sec
        ));
        s3_results.push((c.name(), r));
    }

    table(S3X_HEADER.into());
    let mut s3x_results = Vec::new();
    for kind in cross_client::KINDS {
        let r = cross_client::s3x(kind, &cluster, plan.s3_time);
        table(s3x_row(kind, &r));
        s3x_results.push((kind, r));
    }
    let s3p = cross_client::s3p(&cluster, plan.s3_time);
    table(S3P_HEADER.into());
    table(s3p_row(&s3p));
    table(S3N_HEADER.into());
    let (rows, curves) = s3n(&cluster, plan.s3_time);
    for row in rows {
        table(row);
    }
    plot_s3n(&curves);
    let (rows, handoff_worst) = handoff_rows(&cluster, &plan);
    for row in rows {
        table(row);
    }

    cluster.nodes[2].pause();
    table(
        "\n| contender (node 3 of 5 paused) | S4 success | S4 pair p50 µs | S4 pair p99 µs |"
            .into(),
    );
    table("| --- | ---: | ---: | ---: |".into());
    let mut s4_ours = None;
    for c in contenders.iter().filter(|c| {
        ![
            "floor",
            "fenced",
            "notifications",
            "one node",
            "a client per thread",
        ]
        .iter()
        .any(|p| c.name().starts_with(p))
    }) {
        let name = c.name();
        let (ok, total, lat, hung) = s4(c.clone(), &plan);
        let (p50, p99) = lat.map_or(("—".into(), "—".into()), |(a, b)| (us(a), us(b)));
        let note = if hung {
            " (hung: a call took over 8 s)"
        } else {
            ""
        };
        table(format!("| {name} | {ok}/{total}{note} | {p50} | {p99} |"));
        if name.starts_with("redlock-sync") {
            s4_ours = lat.map(|(p50, _)| (ok, total, p50));
        }
    }
    cluster.nodes[2].resume();
    std::thread::sleep(Duration::from_millis(1200));
    let (s4_paused, s4_healthy) = s4_side_by_side(contenders[0].as_ref(), &mut cluster, &plan);
    table(format!(
        "| redlock-sync, side by side: {} paused / {} healthy pairs in alternating slices | p50 {} vs {} µs | | |",
        plan.s4_pairs,
        plan.s4_pairs,
        us(s4_paused),
        us(s4_healthy)
    ));

    table("\n| cost | redlock-sync | redlock 2.0 |".into());
    table("| --- | ---: | ---: |".into());
    table(format!(
        "| threads held by the client | {our_threads} | 0 |"
    ));
    table(format!(
        "| connections held to the 5 nodes | {our_conns} | 0 (a new one per node per call) |"
    ));
    table(format!(
        "| RSS growth holding {} guards (KiB) | {our_rss} | {peer_rss} (for {}) |",
        plan.guards,
        plan.guards.min(2000)
    ));

    table(format!(
        "\n| S5: 10 resources | lock_all + release p50 µs | 10 × (lock) + 10 × (release) p50 µs |\n| --- | ---: | ---: |\n| redlock-sync | {} | {} |",
        us(s5_all),
        us(s5_singles)
    ));

    table(format!(
        "\n| S6: one thread, pair p50 µs | lock | free permit of 4 | read | write | last free permit of 8 (7 held) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n| redlock-sync | {} | {} | {} | {} | {} ({:.2} rounds) |",
        us(s6.plain),
        us(s6.permit),
        us(s6.read),
        us(s6.write),
        us(s6.last_permit),
        s6.last_rounds
    ));

    // Targets, as ratios measured in this run.
    let find = |n: &str| s1_results.iter().find(|r| r.0.starts_with(n)).unwrap();
    let (ours1, pipe) = (find("redlock-sync"), find("floor-pipe5"));
    let fenced = find("fenced");
    let (one, floor1) = (find("one node"), find("floor-1node"));
    table("\n| target | measured | met |".into());
    table("| --- | --- | --- |".into());
    let r1 = one.1.as_secs_f64() / floor1.1.as_secs_f64();
    table(format!(
        "| S1 one node pair p50 ≤ 2× floor-1node (issue 21) | {r1:.2}× ({} vs {} µs; 5 nodes {} µs) | {} |",
        us(one.1),
        us(floor1.1),
        us(ours1.1),
        yes(r1 <= 2.0)
    ));
    let ratio = ours1.1.as_secs_f64() / pipe.1.as_secs_f64();
    table(format!(
        "| S1 pair p50 ≤ 1.0× floor-pipe5 | {ratio:.2}× | {} |",
        yes(ratio <= 1.0)
    ));
    let tail = our_s1_p99.as_secs_f64() / ours1.1.as_secs_f64();
    table(format!(
        "| S1 pair p99 ≤ 3× own p50 | {tail:.2}× | {} |",
        yes(tail <= 3.0)
    ));
    let fr = fenced.1.as_secs_f64() / ours1.1.as_secs_f64();
    table(format!(
        "| S1 fenced pair p50 ≤ 1.15× unfenced (fencing on vs off, issue 21) | {fr:.2}× | {} |",
        yes(fr <= 1.15)
    ));
    let tr = ours1.2 / pipe.2;
    table(format!(
        "| S2 ≥ 0.9× floor-pipe5 | {tr:.2}× | {} |",
        yes(tr >= 0.9)
    ));
    let apart = find("a client per thread");
    let tx = apart.2 / pipe.2;
    let cx = apart.3.as_secs_f64() / pipe.3.as_secs_f64().max(1e-9);
    table(format!(
        "| S2, a client per thread: ≥ 0.9× floor-pipe5's pairs/s, client CPU per pair ≤ 1.3× the floor's (issue 58) | {tx:.2}×, CPU {cx:.2}× ({} vs {} µs) | {} |",
        us(apart.3),
        us(pipe.3),
        yes(tx >= 0.9 && cx <= 1.3)
    ));
    let ratio_to_lock = |d: Duration| d.as_secs_f64() / s6.plain.as_secs_f64();
    let rp = ratio_to_lock(s6.permit);
    table(format!(
        "| S6 free permit pair ≤ 1.2× lock pair (issue 19) | {rp:.2}× | {} |",
        yes(rp <= 1.2)
    ));
    let rr = ratio_to_lock(s6.read);
    table(format!(
        "| S6 read pair ≤ 1.2× lock pair (issue 19) | {rr:.2}× | {} |",
        yes(rr <= 1.2)
    ));
    table(format!(
        "| S6 last free permit of 8 in ≤ 2 rounds on average (issue 19) | {:.2} | {} |",
        s6.last_rounds,
        yes(s6.last_rounds <= 2.0)
    ));
    let r5 = s5_all.as_secs_f64() / s5_singles.as_secs_f64();
    table(format!(
        "| S5 10-key lock_all pair ≤ 0.3× 10 single-lock pairs | {r5:.2}× | {} |",
        yes(r5 <= 0.3)
    ));
    if let Some((ok, total, in_a_row)) = s4_ours {
        // Against the healthy slices measured side by side, not against S1
        // measured a minute earlier: the load on this VM drifts that much.
        // Both the paused slices (which alternate with healthy ones, so the
        // client heard from the paused node a moment before) and S4's 200
        // pairs in a row right after the pause (when the client may not
        // have heard from it for minutes) are held to it.
        let healthy = s4_healthy.as_secs_f64().max(1e-9);
        let (r, r_row) = (
            s4_paused.as_secs_f64() / healthy,
            in_a_row.as_secs_f64() / healthy,
        );
        table(format!(
            "| S4 100 % success, p50 ≤ 1.3× own healthy p50 (side by side): paused slices, and 200 pairs in a row right after the pause | {ok}/{total}, {r:.2}×, {r_row:.2}× | {} |",
            yes(ok == total && r <= 1.3 && r_row <= 1.3)
        ));
    }
    if let [(_, a), (_, b)] = &s3_results[..] {
        // One holder at a time, each holding for a `sleep(1 ms)`: the
        // acquisitions per second no lock can exceed on this machine.
        let hold = measured_hold();
        let ceiling = 1.0 / hold.as_secs_f64();
        table(format!(
            "| (S3 ceiling: 1 / measured hold of {} µs) | {ceiling:.0}/s; redlock-sync at {:.0} %, 2× redlock 2.0 would need {:.0} % | — |",
            us(hold),
            100.0 * a.per_sec / ceiling,
            200.0 * b.per_sec / ceiling
        ));
        let r = a.per_sec / b.per_sec.max(1e-9);
        table(format!(
            "| S3 ≥ 2× redlock 2.0 acquisitions/s, lower mean wait | {r:.1}×, {} vs {} µs | {} |",
            us(a.mean_wait),
            us(b.mean_wait),
            yes(r >= 2.0 && a.mean_wait < b.mean_wait)
        ));
    }
    {
        let hold = measured_hold();
        let ceiling = 1.0 / hold.as_secs_f64();
        let get =
            |k: cross_client::Kind| &s3x_results.iter().find(|(kind, _)| *kind == k).unwrap().1;
        let (ours, rs) = (
            get(cross_client::Kind::Ours(true)),
            get(cross_client::Kind::Rslock),
        );
        let vs_rs = ours.per_sec / rs.per_sec.max(1e-9);
        let of_ceiling = ours.per_sec / ceiling;
        table(format!(
            "| S3x ≥ 1.1× rslock acquisitions/s and ≥ 80 % of the ceiling (1 / measured hold of {} µs = {ceiling:.0}/s) | {vs_rs:.2}×, {:.0} % | {} |",
            us(hold),
            100.0 * of_ceiling,
            yes(vs_rs >= 1.1 && of_ceiling >= 0.8)
        ));
        let p99 = ours.p99_wait.as_secs_f64() / rs.p99_wait.as_secs_f64().max(1e-9);
        let changes = ours.owner_changes as f64 / ours.acquisitions.max(1) as f64;
        table(format!(
            "| S3x p99 wait ≤ 0.15× rslock's; owner changes ≥ 50 % of acquisitions | {p99:.3}×, {:.0} % | {} |",
            100.0 * changes,
            yes(p99 <= 0.15 && changes >= 0.5)
        ));
        let total = s3p.acquisitions.max(1) as f64;
        let least = s3p.shares.iter().copied().min().unwrap_or(0) as f64 / total;
        table(format!(
            "| S3p every process ≥ 25 % of acquisitions | least {:.0} % | {} |",
            100.0 * least,
            yes(least >= 0.25)
        ));
    }
    table(match handoff_worst {
        Some(worst) => format!(
            "| a hand-off to the next of 200 queued callers ≤ 1.5 uncontended pairs (issue 58; the largest of the hand-off table's p50s) | {worst:.2} | {} |",
            yes(worst <= 1.5)
        ),
        None => "| a hand-off to the next of 200 queued callers ≤ 1.5 uncontended pairs (issue 58) | not measured: see the hand-off table | **no** |".to_owned(),
    });
    println!(
        "\nbench finished in {:.0} s",
        bench_started.elapsed().as_secs_f64()
    );
    if !quick {
        write_markdown(&report, &version);
    }
}

/// What a `sleep(1 ms)` hold really takes here (the mean of 200): the
/// ceiling of one-key scenarios is one acquisition per hold.
fn measured_hold() -> Duration {
    (0..200)
        .map(|_| {
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(1));
            t.elapsed()
        })
        .sum::<Duration>()
        / 200
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "**no**" }
}

fn redis_version(cluster: &Cluster) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

fn write_markdown(report: &str, version: &str) {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Produced by `cargo bench -p redlock-bench --bench lock` (rewrites this file). Machine: {} cores; redis-server {version}; 5 nodes on loopback started by the bench; TTL 10 s; 50 unmeasured warm-up pairs.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        md,
        "Contenders: **redlock-sync** with default settings; **floor-1node**: raw `redis`, one node, `SET NX PX` then `EVALSHA` on one persistent connection; **floor-pipe5**: raw `redis`, 5 nodes, each command written to all 5 connections before the 5 replies are read; **redlock 2.0**: the `redlock` crate from crates.io.\n"
    );
    let _ = writeln!(
        md,
        "Scenarios: S1 one thread, 2000 acquire+release pairs on fresh keys; S2 4 threads, distinct keys, 5 s; S3 4 threads, one key, hold 1 ms, 5 s (floors not applicable); S4 node 3 of 5 paused with SIGSTOP, one thread, 200 pairs, a call over 8 s counts as hung; its latency target is checked against healthy pairs measured side by side (alternating slices of 20 paused / 20 healthy pairs); the fenced contender is this crate with `fencing(true)` (S1 and S2 only); the one-node contender is this crate over node 1 alone (S1 and S2 only), against floor-1node; S2's CPU per pair is this process's CPU time (10 ms ticks) and the five nodes' (`INFO cpu`) over that contender's slices / its pairs; S5 one thread, 10 resources: `lock_all` + release against 10 single locks taken one by one and released, 400 of each in alternating slices of 10; S6 one thread, fresh names, 400 pairs of each kind in 10 alternating slices: lock, a free permit of a 4-permit semaphore, a read hold, a write hold, and the last free permit of an 8-permit semaphore whose other 7 another client holds (`try_lock`; its rounds per acquisition from the nodes' `EVAL` counts over a separate run: `r` rounds cost `10r` scripts with the clean-ups and the release); S3x 4 separate clients (one `Redlock`, `redlock::RedLock` or `rslock::LockManager` each, one thread each), one key, hold 1 ms, 5 s — waits include the wait each client still had open at the end (percentiles count acquisitions, so a client that starves adds one long wait: it shows in the longest wait, not in p99), owner changes count acquisitions by another client than the previous one, rounds per acquisition are the nodes' `SET` calls / 5 / acquisitions, CPU per acquisition is this process's CPU time (all four clients and their threads; 10 ms ticks) and the five nodes' (`INFO cpu`) over the run / acquisitions; S3p 3 processes × 2 threads sharing one client per process, one key, hold 1 ms, 5 s; the longest run is the most acquisitions in a row by one client (S3x) or one process (S3p); the hand-off: 200 callers queued on one key (one client of 200 threads, 20 clients of 10, 200 of 1), each holding it 2 ms, 5 s after a 1 s warm-up, timed from a holder's release call to the next holder's lock returning, against an uncontended pair of the first client measured before and after (200 pairs each), a holder that takes the lock straight back counted apart; the thread shape's own cost: the thinnest clients of the two shapes a client with a thread per node can take (raw `redis`, no bookkeeping; workers: a channel and a thread per node that writes and reads; readers: the caller writes every node's socket, a thread per node reads), with and without `TIME` after each request, a client per bench thread, deciding at a majority as this crate does (floor-pipe5 reads all five replies, which favours the shapes' S1 p50), S1 and S2 as above, hops over one S2 slice. Hops: this process's context switches (`getrusage`, every thread, ended ones too) and syscalls (`perf stat -e raw_syscalls:sys_enter` attached for the phase; `—` without perf) per pair in S1 and S2 and per acquisition in S3 (which includes the bench's own 1 ms hold), each contender over a phase of its own (`BENCH_ONLY=hops` prints only this table). Absolute times on a shared 2-core machine are noise: compare ratios within one run.\n"
    );
    md.push_str(
        "![S3n: acquisitions/s against contending clients](docs/bench/s3n.svg)\n\n\
         ![S1: pair latency distribution](docs/bench/s1.svg)\n",
    );
    md.push_str(report);
    if let Err(err) = std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/../BENCHMARKS.md"), md) {
        eprintln!("could not write BENCHMARKS.md: {err}");
    }
}
