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
    let evals = || -> u64 { cluster.nodes.iter().map(|node| node.calls("eval")).sum() };
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
