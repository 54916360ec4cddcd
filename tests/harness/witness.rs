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
    /// Times a worker entered while another was inside, both still valid
    /// at that moment.
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

/// Who is inside a resource's critical section, as the witness sees it:
/// each holder is recorded with the end of its validity (wall-clock µs), so
/// that an overlap counts only when the entering holder and one already
/// inside were both still valid at that moment — a holder whose validity
/// ran out may be overtaken (its section then shows as overrun).
#[derive(Debug)]
pub struct Inside {
    key: String,
    me: String,
}

/// Records `ARGV[1]` inside (`KEYS[1]`) until `ARGV[2]` (µs since the
/// epoch); answers how many *others* inside are valid now (by the
/// witness's clock, one for every process) and whether the entering holder
/// is (`1`/`0`). Times as strings: exact, where a Lua number would print
/// rounded.
const ENTER: &str = r#"local t=redis.call("time")
local now=t[1]..string.format("%06d",tonumber(t[2]))
local mine=tonumber(ARGV[2])>tonumber(now)
redis.call("zadd",KEYS[1],ARGV[2],ARGV[1])
local valid=redis.call("zcount",KEYS[1],"("..now,"+inf")
if mine then valid=valid-1 end
return {valid,mine and 1 or 0}"#;

impl Inside {
    /// The record of `resource`'s critical section, for one holder
    /// (`who`: unique among the holders that may be inside at once).
    pub fn new(resource: &str, who: &str) -> Inside {
        Inside {
            key: format!("witness:{resource}:inside"),
            me: who.to_owned(),
        }
    }

    /// Enters, valid until `valid_until` (a moment of this process);
    /// whether that is an overlap: another holder inside, and both still
    /// valid now.
    pub fn enter(&self, witness: &mut redis::Connection, valid_until: Instant) -> bool {
        let (valid_others, mine): (u64, u64) = redis::cmd("EVAL")
            .arg(ENTER)
            .arg(1)
            .arg(&self.key)
            .arg(&self.me)
            .arg(wall_micros(valid_until))
            .query(witness)
            .expect("witness enter");
        valid_others > 0 && mine == 1
    }

    /// Leaves.
    pub fn exit(&self, witness: &mut redis::Connection) {
        let _: i64 = redis::cmd("ZREM")
            .arg(&self.key)
            .arg(&self.me)
            .query(witness)
            .expect("witness exit");
    }
}

/// `at` (a moment of this process) in µs since the Unix epoch; a moment
/// already past is now.
fn wall_micros(at: Instant) -> u64 {
    let left = at.saturating_duration_since(Instant::now());
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        + left;
    u64::try_from(wall.as_micros()).expect("µs fit in u64")
}

/// One worker: until `until`, take `resource`, then enter on the witness
/// (an overlap when another holder is inside and both are valid, see
/// [`Inside`]), do an unprotected read-modify-write of a shared counter
/// with up to 1 ms between the read and the write (a lost update shows an
/// overlap the record missed), leave, and release.
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
    contend_while(
        client,
        witness_url,
        resource,
        ttl,
        || Instant::now() < until,
        progress,
    )
}

/// [`contend_counting`] for as long as `going` says.
pub fn contend_while(
    client: &redlock_sync::Redlock,
    witness_url: &str,
    resource: &str,
    ttl: Duration,
    going: impl Fn() -> bool,
    progress: &AtomicUsize,
) -> Contention {
    let mut witness = redis::Client::open(witness_url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("witness connection");
    // Unique among the holders of every process.
    let who = format!("{}:{:?}", std::process::id(), std::thread::current().id());
    let inside = Inside::new(resource, &who);
    let counter_key = format!("witness:{resource}:counter");
    let mut seen = Contention::default();
    while going() {
        let Ok(guard) = client.lock_for(resource, ttl, Duration::from_millis(500)) else {
            continue;
        };
        if inside.enter(&mut witness, guard.valid_until()) {
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
        inside.exit(&mut witness);
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
        .get_now(&format!("witness:{resource}:counter"))
        .map_or(0, |v| v.parse().expect("counter"))
}
