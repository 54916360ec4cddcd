//! Contending workers checked by a witness Redis outside the lock nodes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::Node;

/// What contending workers saw, recorded against a witness Redis that is not
/// one of the lock nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contention {
    /// Critical sections entered.
    pub acquisitions: u64,
    /// Times a worker entered while another was inside, both holding a valid guard.
    pub overlaps: u64,
    /// Critical sections whose guard had run out of validity by the exit.
    pub overran: u64,
}

impl std::ops::AddAssign for Contention {
    fn add_assign(&mut self, other: Contention) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.overran += other.overran;
    }
}

/// One worker: until `until`, take `resource`, then on the witness `INCR` an
/// "inside" counter (anything but 1 is an overlap), do an unprotected
/// read-modify-write of a shared counter with up to 1 ms between the read
/// and the write (a lost update shows an overlap the counter missed),
/// `DECR`, and release.
pub fn contend(
    client: &redlock_sync::Redlock,
    witness_url: &str,
    resource: &str,
    ttl: Duration,
    until: Instant,
) -> Contention {
    contend_counting(
        client,
        witness_url,
        resource,
        ttl,
        until,
        &AtomicUsize::new(0),
    )
}

/// [`contend`], also counting acquisitions in `progress` as they happen.
pub fn contend_counting(
    client: &redlock_sync::Redlock,
    witness_url: &str,
    resource: &str,
    ttl: Duration,
    until: Instant,
    progress: &AtomicUsize,
) -> Contention {
    let mut witness = redis::Client::open(witness_url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("witness connection");
    let inside_key = format!("witness:{resource}:inside");
    let counter_key = format!("witness:{resource}:counter");
    let mut seen = Contention::default();
    while Instant::now() < until {
        let Ok(guard) = client.lock_for(resource, ttl, Duration::from_millis(500)) else {
            continue;
        };
        let inside: i64 = redis::cmd("INCR")
            .arg(&inside_key)
            .query(&mut witness)
            .unwrap();
        if inside != 1 && guard.is_valid() {
            seen.overlaps += 1;
        }
        let value: Option<i64> = redis::cmd("GET")
            .arg(&counter_key)
            .query(&mut witness)
            .unwrap();
        // Inside for up to a millisecond more: a second holder granted at
        // the same time shows as an overlap or a lost update only while
        // both are inside.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::thread::sleep(Duration::from_micros(u64::from(nanos % 1000)));
        let _: () = redis::cmd("SET")
            .arg(&counter_key)
            .arg(value.unwrap_or(0) + 1)
            .query(&mut witness)
            .unwrap();
        let _: i64 = redis::cmd("DECR")
            .arg(&inside_key)
            .query(&mut witness)
            .unwrap();
        if !guard.is_valid() {
            seen.overran += 1;
        }
        seen.acquisitions += 1;
        progress.fetch_add(1, Ordering::Relaxed);
        drop(guard);
    }
    seen
}

impl Contention {
    /// The exclusion invariant: nobody entered while another valid holder
    /// was inside, no critical section outlived its guard's validity, and the
    /// witness's unprotected counter lost no update.
    pub fn assert_exclusive(&self, witness: &Node, resource: &str) {
        assert_eq!(self.overlaps, 0, "two valid holders inside at once");
        assert_eq!(self.overran, 0, "a critical section outlived its validity");
        assert_eq!(
            witness_counter(witness, resource),
            self.acquisitions,
            "lost update in the unprotected read-modify-write"
        );
    }
}

/// The witness's shared counter for `resource` (compare with acquisitions).
pub fn witness_counter(witness: &Node, resource: &str) -> u64 {
    witness
        .get(&format!("witness:{resource}:counter"))
        .map_or(0, |v| v.parse().expect("counter"))
}
