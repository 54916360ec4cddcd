//! S6: semaphores and reader-writer locks against a plain lock, side by
//! side: one thread, fresh names, pairs in alternating slices.

use std::time::{Duration, Instant};

use redlock_sync::Redlock;

use crate::harness::Cluster;

const TTL: Duration = Duration::from_secs(10);

/// The medians of one S6 run, and the rounds the last free permit took.
pub(crate) struct S6 {
    /// Lock + release.
    pub(crate) plain: Duration,
    /// A free permit of 4 + release.
    pub(crate) permit: Duration,
    /// A read hold + release.
    pub(crate) read: Duration,
    /// A write hold + release.
    pub(crate) write: Duration,
    /// The last free permit of 8 (7 held by another client) + release.
    pub(crate) last_permit: Duration,
    /// Rounds per acquisition of that last permit.
    pub(crate) last_rounds: f64,
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn time(samples: &mut Vec<Duration>, pair: impl FnOnce()) {
    let started = Instant::now();
    pair();
    samples.push(started.elapsed());
}

/// `pairs` of each kind, in 10 alternating slices.
pub(crate) fn s6(cluster: &Cluster, pairs: usize) -> S6 {
    let client = Redlock::new(cluster.urls()).expect("client");
    let holder = Redlock::new(cluster.urls()).expect("client");
    let mut samples: [Vec<Duration>; 5] = Default::default();
    let busy = client.semaphore("bench:s6:busy", 8);
    let held: Vec<_> = (0..7)
        .map(|_| {
            holder
                .semaphore("bench:s6:busy", 8)
                .lock(TTL)
                .expect("free")
        })
        .collect();
    let mut n = 0u64;
    for _slice in 0..10 {
        for _ in 0..pairs / 10 {
            n += 1;
            let name = format!("bench:s6:{n}");
            time(&mut samples[0], || {
                client
                    .lock(&name, TTL)
                    .expect("free")
                    .release()
                    .expect("release")
            });
            let semaphore = client.semaphore(&name, 4);
            time(&mut samples[1], || {
                semaphore
                    .lock(TTL)
                    .expect("free")
                    .release()
                    .expect("release")
            });
            let rw = client.rw_lock(&name);
            time(&mut samples[2], || {
                rw.read(TTL).expect("free").release().expect("release")
            });
            time(&mut samples[3], || {
                rw.write(TTL).expect("free").release().expect("release")
            });
            time(&mut samples[4], || {
                let permit = busy.try_lock(TTL).expect("try_lock").expect("one free");
                permit.release().expect("release");
            });
        }
    }
    let last_rounds = last_permit_rounds(cluster, &busy, pairs.max(20));
    drop(held);
    let [plain, permit, read, write, last_permit] = samples.map(median);
    S6 {
        plain,
        permit,
        read,
        write,
        last_permit,
        last_rounds,
    }
}

/// Rounds per acquisition of the last free permit, from the nodes'
/// `EVAL` counts: `r` rounds cost `5r` slot scripts, `5(r - 1)` clean-ups
/// of the failed rounds, and 5 for the release: `10r` in all.
fn last_permit_rounds(cluster: &Cluster, busy: &redlock_sync::Semaphore, n: usize) -> f64 {
    let evals = || -> u64 { cluster.nodes.iter().map(|node| node.scripts_run()).sum() };
    // Settle what earlier slices left queued.
    std::thread::sleep(Duration::from_millis(200));
    let before = evals();
    for _ in 0..n {
        let permit = busy.try_lock(TTL).expect("try_lock").expect("one free");
        permit.release().expect("release");
    }
    std::thread::sleep(Duration::from_millis(200));
    (evals() - before) as f64 / (10.0 * n as f64)
}

/// What S7 measured: readers in two clients beside a writer that reloads.
pub(crate) struct Reload {
    /// Read acquisitions, and those that failed (any error).
    pub(crate) reads: usize,
    pub(crate) read_failures: usize,
    /// The first failure's message, if any.
    pub(crate) first_failure: Option<String>,
    /// Each read acquisition's wait, sorted.
    pub(crate) read_waits: Vec<Duration>,
    /// Each reload's wait for the write lock, sorted.
    pub(crate) write_waits: Vec<Duration>,
    /// Reloads that failed (any error).
    pub(crate) write_failures: usize,
}

/// S7: 8 reader threads in each of two clients (default settings, over
/// `urls`) read in a loop (hold 1 ms); a writer thread in the first client
/// reloads (hold 5 ms) every 300 ms, for `run`.
pub(crate) fn s7_reload(urls: &[String], run: Duration) -> Reload {
    use std::sync::atomic::{AtomicBool, Ordering};
    let name = "bench:s7";
    let readers = [
        Redlock::new(urls).expect("client"),
        Redlock::new(urls).expect("client"),
    ];
    let writer = readers[0].clone();
    let stop = AtomicBool::new(false);
    let mut report = Reload {
        reads: 0,
        read_failures: 0,
        first_failure: None,
        read_waits: Vec::new(),
        write_waits: Vec::new(),
        write_failures: 0,
    };
    std::thread::scope(|s| {
        let threads: Vec<_> = readers
            .iter()
            .flat_map(|client| (0..8).map(move |_| client))
            .map(|client| {
                let stop = &stop;
                s.spawn(move || {
                    let rw = client.rw_lock(name);
                    let (mut waits, mut failures, mut first) = (Vec::new(), 0, None);
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        match rw.read(TTL) {
                            Ok(guard) => {
                                waits.push(started.elapsed());
                                std::thread::sleep(Duration::from_millis(1));
                                let _ = guard.release();
                            }
                            Err(err) => {
                                failures += 1;
                                first.get_or_insert_with(|| err.to_string());
                            }
                        }
                    }
                    (waits, failures, first)
                })
            })
            .collect();
        let rw = writer.rw_lock(name);
        let end = Instant::now() + run;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            match rw.write(TTL) {
                Ok(guard) => {
                    report.write_waits.push(started.elapsed());
                    std::thread::sleep(Duration::from_millis(5));
                    let _ = guard.release();
                }
                Err(err) => {
                    report.write_waits.push(started.elapsed());
                    report.write_failures += 1;
                    report
                        .first_failure
                        .get_or_insert_with(|| format!("writer: {err}"));
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            let (waits, failures, first) = thread.join().expect("reader");
            report.reads += waits.len();
            report.read_waits.extend(waits);
            report.read_failures += failures;
            if report.first_failure.is_none() {
                report.first_failure = first;
            }
        }
    });
    report.read_waits.sort();
    report.write_waits.sort();
    report
}
