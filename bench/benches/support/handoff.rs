//! The hand-off: 200 callers queued on one key, each holding it 2 ms; how
//! long from a holder's release to the next holder's lock returning,
//! against an uncontended pair (lock + release of a free key) measured in
//! the same run. `BENCH_ONLY=handoff`.
//!
//! The wire needs about one pair for it: the release, the wake-up message,
//! the next acquisition.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Hand-offs measured (after the warm-up, before the stop).
    pub(crate) count: usize,
    /// Times the releasing caller took the lock straight back (not
    /// counted as hand-offs).
    pub(crate) retakes: usize,
    pub(crate) p50: Duration,
    pub(crate) p90: Duration,
    /// An uncontended pair's p50 on the first client, measured before and
    /// after.
    pub(crate) pair_p50: Duration,
}

/// Sets `stop` when dropped: the callers stop even if the thread that
/// started them panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `clients` clients of `threads` callers each, all on one key, for `time`
/// after a warm-up of one second; `Err` says why it could not run.
pub(crate) fn run(
    urls: &[String],
    clients: usize,
    threads: usize,
    time: Duration,
) -> Result<Handoff, String> {
    let clients = (0..clients)
        .map(|_| Redlock::new(urls))
        .collect::<Result<Vec<Redlock>, _>>()
        .map_err(|err| format!("a client did not start: {err}"))?;
    let mut pairs = uncontended(&clients[0], 200);
    // When the last holder released, and which caller it was.
    let released: Mutex<Option<(Instant, usize)>> = Mutex::new(None);
    let gaps = Mutex::new(Vec::new());
    let retakes = AtomicUsize::new(0);
    let (measuring, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let started = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let callers = clients.iter().flat_map(|c| std::iter::repeat_n(c, threads));
        for (me, client) in callers.enumerate() {
            let (released, gaps, retakes) = (&released, &gaps, &retakes);
            let (measuring, stop) = (&measuring, &stop);
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                while !stop.load(Ordering::Relaxed) {
                    let guard = client
                        .acquire(KEY, TTL)
                        .wait(Duration::from_secs(60))
                        .lock()
                        .expect("a queued caller gets the lock within 60 s");
                    let got = Instant::now();
                    if let Some((at, by)) = released.lock().take()
                        && measuring.load(Ordering::Relaxed)
                    {
                        if by == me {
                            retakes.fetch_add(1, Ordering::Relaxed);
                        } else {
                            gaps.lock().push(got - at);
                        }
                    }
                    std::thread::sleep(HOLD);
                    *released.lock() = Some((Instant::now(), me));
                    drop(guard);
                }
            });
            if let Err(err) = spawned {
                return Err(format!("caller {me} did not start: {err}"));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(time);
        // The queue drains as the callers stop: not measured.
        measuring.store(false, Ordering::Relaxed);
        Ok(())
    });
    started?;
    pairs.extend(uncontended(&clients[0], 200));
    let mut gaps = gaps.into_inner();
    gaps.sort();
    pairs.sort();
    Ok(Handoff {
        count: gaps.len(),
        retakes: retakes.into_inner(),
        p50: gaps.get(gaps.len() / 2).copied().unwrap_or_default(),
        p90: gaps.get(gaps.len() * 9 / 10).copied().unwrap_or_default(),
        pair_p50: pairs[pairs.len() / 2],
    })
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

/// Raises the soft limit of open files towards what 200 clients need
/// (more than a soft limit of 1,024 allows, as a fresh machine may have),
/// never past the hard limit; the soft limit then.
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
        let wanted = limit.rlim_max.min(200 * FILES_PER_CLIENT + 256);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            }
        }
    }
    limit.rlim_cur
}
