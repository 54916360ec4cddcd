//! The hand-off: 200 callers queued on one key, each holding it 2 ms; how
//! long from a holder's release to the next holder's lock returning,
//! against an uncontended pair (lock + release of a free key) measured in
//! the same run. `BENCH_ONLY=handoff`.
//!
//! The wire needs about one pair for it: the release, the wake-up message,
//! the next acquisition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlock_sync::Redlock;

const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(2);
const KEY: &str = "bench:handoff";

/// The open files one client may hold here: its connections to 5 nodes,
/// its wake-up subscriptions, and what its start opens and closes.
pub(crate) const FILES_PER_CLIENT: libc::rlim_t = 20;

/// One run's figures.
pub(crate) struct Handoff {
    /// Hand-offs measured (after the warm-up).
    pub(crate) count: usize,
    pub(crate) p50: Duration,
    pub(crate) p90: Duration,
    /// An uncontended pair's p50, measured beside it (before and after).
    pub(crate) pair_p50: Duration,
}

/// `clients` clients of `threads` callers each, all on one key, for `time`
/// after a warm-up of one second.
pub(crate) fn run(urls: &[String], clients: usize, threads: usize, time: Duration) -> Handoff {
    let clients: Vec<Redlock> = (0..clients)
        .map(|_| Redlock::new(urls).expect("client"))
        .collect();
    let mut pairs = uncontended(&clients[0], 200);
    let released: Mutex<Option<Instant>> = Mutex::new(None);
    let gaps = Mutex::new(Vec::new());
    let (measuring, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        for client in &clients {
            for _ in 0..threads {
                let (released, gaps, measuring, stop) = (&released, &gaps, &measuring, &stop);
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let guard = client
                            .acquire(KEY, TTL)
                            .wait(Duration::from_secs(60))
                            .lock()
                            .expect("a queued caller gets the lock within 60 s");
                        let got = Instant::now();
                        if let Some(at) = released.lock().take()
                            && measuring.load(Ordering::Relaxed)
                        {
                            gaps.lock().push(got - at);
                        }
                        std::thread::sleep(HOLD);
                        *released.lock() = Some(Instant::now());
                        drop(guard);
                    }
                });
            }
        }
        std::thread::sleep(Duration::from_secs(1));
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
    });
    pairs.extend(uncontended(&clients[0], 200));
    let mut gaps = gaps.into_inner();
    gaps.sort();
    pairs.sort();
    Handoff {
        count: gaps.len(),
        p50: gaps.get(gaps.len() / 2).copied().unwrap_or_default(),
        p90: gaps.get(gaps.len() * 9 / 10).copied().unwrap_or_default(),
        pair_p50: pairs[pairs.len() / 2],
    }
}

/// `n` lock + release pairs of fresh keys on `client`, each timed.
fn uncontended(client: &Redlock, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let key = format!("bench:handoff:free:{i}:{:?}", Instant::now());
            let started = Instant::now();
            drop(client.lock(&key, TTL).expect("a free key"));
            started.elapsed()
        })
        .collect()
}

/// Raises the soft limit of open files to the hard one (200 clients hold
/// more sockets than a soft limit of 1,024 allows, as a fresh machine may
/// have); the soft limit then.
pub(crate) fn open_files_up_to_the_hard_limit() -> libc::rlim_t {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit and setrlimit to
    // read and write.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            }
        }
    }
    limit.rlim_cur
}
