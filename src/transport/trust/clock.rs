//! The nodes' wall clocks, as the client sees them. Redis expires keys by
//! its wall clock, so a node whose clock steps ahead drops every key early
//! by the step: a lease counted there ends early. Every acquisition and
//! extension reads the node's `TIME` in the same pipelined exchange as its
//! vote (and every examination of a node does, `facts.rs`); each reading
//! lands here and is judged two ways:
//!
//! - **against the other nodes**: its *skew* (node time minus the client's
//!   monotonic time at the exchange's midpoint) minus the median skew of
//!   the listed nodes read within [`FRESH`] (one value per listed node, so
//!   that a cluster's masters do not outvote the others; itself included,
//!   so that one clock off among three cannot drag the median): the
//!   *disagreement*. Two healthy clocks tick alike, so the skews of
//!   healthy nodes stay equal however far apart in time they were read. A
//!   client started after a jump sees it only this way.
//! - **against its own history**: its skew moved forward since its last
//!   reading by more than the drift allowance of the shortest TTL this
//!   client used, plus what the round trips leave uncertain, and not with
//!   the client's own wall clock (a suspended client host moves every skew
//!   at once, and its own): it *jumped*. What the other nodes did does not
//!   matter: when several clocks step together (one bad time source, VMs
//!   resumed at once), the median steps with them, but every key on each
//!   of them lost the step — several jumps, not one.
//!
//! A reading is only known within half its round trip (the node read its
//! clock somewhere between the write and the reply) plus a millisecond of
//! `PX` rounding: that is its uncertainty, added to every allowance.
//!
//! **No allowance for slewing.** Between two readings, a clock a time
//! daemon slews moved as far as a stepped one, and a lease counted there
//! lost as much: chrony slews at up to 83 ms a second by default
//! (`maxslewrate` 83,333 ppm), so a 20 ms correction lands within a
//! quarter second; ntpd slews at up to 500 ppm. So a move counts in full
//! however long ago the last reading was: under a 1 s TTL (a 12 ms drift
//! allowance), a chrony correction of 20 ms forward is a jump, and the
//! node is out for the longest TTL. What this gives up is only on the safe
//! side: a clock left without time synchronisation drifts from the
//! client's by up to about 100 ppm (a quartz's tolerance), and after a
//! long silence (17 min at 100 ppm for a 10 s TTL) reads as a jump: the
//! node sits out a quarantine it did not need. Two synchronised clocks do
//! not drift apart at all, however long the silence.
//!
//! What to do about it (count or not, quarantine, the marker) is
//! `admission.rs`'s; what leases lose is recorded here ([`Clocks::cut`])
//! and announced on [`Clocks::jumps`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::algorithm;

/// Readings older than this take no part in another node's median.
pub(crate) const FRESH: Duration = Duration::from_secs(60);

/// `PX` and `TIME` are read in whole milliseconds on the node's side.
const GRANULE_US: i64 = 1_000;

/// One `TIME` answer and when the exchange that carried it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The node's wall clock, in microseconds since the Unix epoch.
    pub(crate) node_us: i64,
    /// When the request was written.
    pub(crate) sent: Instant,
    /// When the reply was read.
    pub(crate) got: Instant,
}

impl Reading {
    /// From a `TIME` reply (`[seconds, microseconds]`, as text).
    pub(crate) fn parse(value: &redis::Value, sent: Instant, got: Instant) -> Option<Reading> {
        let redis::Value::Array(parts) = value else {
            return None;
        };
        let number = |v: &redis::Value| -> Option<i64> {
            match v {
                redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                redis::Value::Int(n) => Some(*n),
                _ => None,
            }
        };
        // Seconds of a sane date (before the year 3000), microseconds
        // below a second: anything else is no reading.
        let secs = number(parts.first()?).filter(|s| (0..32_503_680_000).contains(s))?;
        let micros = number(parts.get(1)?).filter(|m| (0..1_000_000).contains(m))?;
        (parts.len() == 2).then_some(Reading {
            node_us: secs * 1_000_000 + micros,
            sent,
            got: got.max(sent),
        })
    }
}

/// A node's clock as one reading found it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Node time minus the client's monotonic time, in microseconds.
    skew: i64,
    /// How far off `skew` may be.
    uncertainty: i64,
    at: Instant,
    /// The client's own wall-minus-monotonic clock when it was taken.
    client: Own,
}

/// The client's own wall clock minus its monotonic clock, in microseconds,
/// and how far off that figure may be (the two clocks are read one after
/// the other).
#[derive(Debug, Clone, Copy)]
struct Own {
    skew: i64,
    uncertainty: i64,
    at: Instant,
}

/// What one reading says of its node's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Judged {
    /// Ahead (positive) or behind the median of the nodes' clocks, in
    /// microseconds, with how far off that figure may be; `None` while
    /// fewer than three nodes were read lately.
    pub(crate) disagreement: Option<(i64, i64)>,
    /// It stepped forward by this much since the last reading.
    pub(crate) jumped: Option<Duration>,
}

impl Judged {
    /// Whether the disagreement, either way, is beyond `allowance` even at
    /// its most favourable (its uncertainty taken off).
    pub(crate) fn beyond(&self, allowance: Duration) -> Option<i64> {
        let (d, uncertainty) = self.disagreement?;
        (d.saturating_abs().saturating_sub(uncertainty) > micros(allowance)).then_some(d)
    }

    /// Whether the clock is ahead of the median by more than `allowance`
    /// even at its most favourable: its keys may have expired early (one
    /// behind expires them late, which is safe).
    pub(crate) fn ahead(&self, allowance: Duration) -> Option<i64> {
        let (d, uncertainty) = self.disagreement?;
        (d.saturating_sub(uncertainty) > micros(allowance)).then_some(d)
    }
}

/// A forward jump at a listed node: every lease counted there before
/// `at` may lose `size` of its keys' life there.
#[derive(Debug, Clone, Copy)]
struct Cut {
    node: usize,
    at: Instant,
    size: Duration,
}

/// The clocks of one client's nodes (and its clusters' masters).
#[derive(Debug)]
pub(crate) struct Clocks {
    anchor: Instant,
    drift_factor: f64,
    table: Mutex<Table>,
    /// The shortest and longest TTLs this client asked for, in ms (0:
    /// none yet).
    shortest_ms: AtomicU64,
    longest_ms: AtomicU64,
    jumped: Sender<()>,
    jumps: Receiver<()>,
    /// A cut was ever recorded (leases skip the table's lock until then).
    any_cuts: AtomicBool,
}

#[derive(Debug)]
struct Table {
    /// Per registry entry: the listed node it belongs to.
    owners: Vec<usize>,
    /// How many listed nodes there are.
    listed: usize,
    /// The client's own clocks, as last read (see [`Clocks::observe`]).
    own: Option<Own>,
    samples: Vec<Option<Sample>>,
    cuts: Vec<Cut>,
}

impl Clocks {
    /// For `listed` nodes, with the client's drift factor.
    pub(crate) fn new(listed: usize, drift_factor: f64) -> Clocks {
        let (jumped, jumps) = crossbeam_channel::bounded(1);
        Clocks {
            anchor: Instant::now(),
            drift_factor,
            table: Mutex::new(Table {
                owners: (0..listed).collect(),
                listed,
                own: None,
                samples: vec![None; listed],
                cuts: Vec::new(),
            }),
            shortest_ms: AtomicU64::new(0),
            longest_ms: AtomicU64::new(0),
            jumped,
            jumps,
            any_cuts: AtomicBool::new(false),
        }
    }

    /// A cluster's master, of listed node `owner`, as registry entry `index`.
    pub(crate) fn add(&self, index: usize, owner: usize) {
        let mut table = self.table.lock();
        if table.owners.len() <= index {
            table.owners.resize(index + 1, owner);
            table.samples.resize(index + 1, None);
        }
        table.owners[index] = owner;
    }

    /// A round asked for `ttl_ms`.
    pub(crate) fn used(&self, ttl_ms: u64) {
        self.longest_ms.fetch_max(ttl_ms, Ordering::Relaxed);
        let _ = self
            .shortest_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                (s == 0 || ttl_ms < s).then_some(ttl_ms)
            });
    }

    /// The longest TTL this client asked for (zero: none yet).
    pub(crate) fn longest_ttl(&self) -> Duration {
        Duration::from_millis(self.longest_ms.load(Ordering::Relaxed))
    }

    /// The drift allowance of a round with `ttl`.
    pub(crate) fn allowance(&self, ttl: Duration) -> Duration {
        algorithm::drift(ttl, self.drift_factor)
    }

    /// What a step must exceed to count as a jump: the drift allowance of
    /// the shortest TTL this client asked for (a smaller step cuts no
    /// lease's keys short of its validity), 10 s's before any.
    fn jump_allowance(&self) -> Duration {
        match self.shortest_ms.load(Ordering::Relaxed) {
            0 => self.allowance(Duration::from_secs(10)),
            ms => self.allowance(Duration::from_millis(ms)),
        }
    }

    /// Judges entry `index`'s clock by `reading`, and keeps the reading.
    /// A jump is recorded as a cut for the listed node it belongs to and
    /// announced on [`jumps`](Self::jumps). A reading older than the one
    /// kept (an examination's, judged after a batch's) is judged against
    /// the others only.
    pub(crate) fn observe(&self, index: usize, reading: Reading) -> Judged {
        let half = reading.got.saturating_duration_since(reading.sent) / 2;
        let mid = reading.sent + half;
        let sample = Sample {
            skew: reading.node_us.saturating_sub(self.mono(mid)),
            uncertainty: micros(half).saturating_add(GRANULE_US),
            at: reading.got,
            client: self.client_skew(),
        };
        let allowance = micros(self.jump_allowance());
        let mut table = self.table.lock();
        if table.samples.len() <= index {
            table.samples.resize(index + 1, None);
            table.owners.resize(index + 1, index);
        }
        self.own_step(&mut table, sample.client, allowance);
        let previous = table.samples[index];
        let median = median(&table, index, &sample);
        let disagreement = median.map(|(m, unc)| {
            (
                sample.skew.saturating_sub(m),
                sample.uncertainty.saturating_add(unc),
            )
        });
        if previous.is_some_and(|prev| prev.at > sample.at) {
            return Judged {
                disagreement,
                jumped: None,
            };
        }
        let jumped = previous.and_then(|prev| jump(&prev, &sample, allowance));
        table.samples[index] = Some(sample);
        if let Some(size) = jumped {
            let node = table.owners[index];
            self.record(&mut table, node, size);
            drop(table);
            let _ = self.jumped.try_send(());
        }
        Judged {
            disagreement,
            jumped,
        }
    }

    /// A jump of `size` at listed-node entry `index` learnt from a marker
    /// another client left: recorded as if seen.
    pub(crate) fn learnt(&self, index: usize, size: Duration) {
        let mut table = self.table.lock();
        let Some(&node) = table.owners.get(index) else {
            return;
        };
        self.record(&mut table, node, size);
        drop(table);
        let _ = self.jumped.try_send(());
    }

    /// Records a cut of `size` at listed node `node`, learnt now.
    fn record(&self, table: &mut Table, node: usize, size: Duration) {
        let now = Instant::now();
        let keep = self.longest_ttl().max(FRESH) * 2;
        table
            .cuts
            .retain(|cut| now.saturating_duration_since(cut.at) < keep);
        table.cuts.push(Cut {
            node,
            at: now,
            size,
        });
        self.any_cuts.store(true, Ordering::Release);
    }

    /// `at` on the client's monotonic clock, in microseconds.
    fn mono(&self, at: Instant) -> i64 {
        micros(at.saturating_duration_since(self.anchor))
    }

    /// The client's own wall clock minus its monotonic clock, now: it moves
    /// when the client's host was suspended (its monotonic clock stopped)
    /// or its wall clock was stepped.
    fn client_skew(&self) -> Own {
        let before = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, micros);
        let after = Instant::now();
        let half = after.saturating_duration_since(before) / 2;
        Own {
            skew: wall.saturating_sub(self.mono(before + half)),
            uncertainty: micros(half).saturating_add(GRANULE_US),
            at: after,
        }
    }

    /// The client's own clocks moved apart since they were last read: its
    /// monotonic clock stopped while the nodes' kept running (its host was
    /// suspended), so every lease it holds ends that much sooner than its
    /// `Instant`s say — a cut of every listed node (none is quarantined:
    /// their clocks did nothing wrong). A step of its wall clock reads the
    /// same, and cuts too (the safe reading).
    fn own_step(&self, table: &mut Table, now: Own, allowance: i64) {
        if let Some(before) = table.own.filter(|b| b.at <= now.at) {
            let slack = allowance
                .saturating_add(before.uncertainty)
                .saturating_add(now.uncertainty);
            let step = now.skew.saturating_sub(before.skew);
            if step > slack {
                let size = Duration::from_micros(step.unsigned_abs());
                for node in 0..table.listed {
                    self.record(table, node, size);
                }
                let _ = self.jumped.try_send(());
            }
        }
        if table.own.is_none_or(|b| b.at <= now.at) {
            table.own = Some(now);
        }
    }

    /// How much of its keys' life listed node `node` lost to jumps the
    /// client learnt of at or after `since`.
    #[cfg(test)]
    pub(crate) fn cut(&self, node: usize, since: Instant) -> Duration {
        cut(&self.table.lock(), node, since)
    }

    /// Until when a lease valid until `until`, whose keys the listed nodes
    /// `voters` set in a round started at `since`, still stands on
    /// `quorum` of them: each voter's keys end early by the jumps learnt
    /// of since (its cut), and the lease ends with the quorum-th latest.
    pub(crate) fn holds_until(
        &self,
        voters: &[usize],
        since: Instant,
        until: Instant,
        quorum: usize,
    ) -> Instant {
        if voters.is_empty() || !self.any_cuts.load(Ordering::Acquire) {
            return until;
        }
        let table = self.table.lock();
        let mut ends: Vec<Instant> = voters
            .iter()
            .map(|&node| {
                until
                    .checked_sub(cut(&table, node, since))
                    .unwrap_or(self.anchor)
            })
            .collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let at = quorum.clamp(1, ends.len()) - 1;
        ends[at]
    }

    /// Told (with `()`) each time a jump is recorded: the keeper re-judges
    /// the leases it watches.
    pub(crate) fn jumps(&self) -> Receiver<()> {
        self.jumps.clone()
    }
}

fn cut(table: &Table, node: usize, since: Instant) -> Duration {
    table
        .cuts
        .iter()
        .filter(|cut| cut.node == node && cut.at >= since)
        .fold(Duration::ZERO, |sum, cut| sum.saturating_add(cut.size))
}

/// The median of the nodes' skews: `sample` for its own listed node, and
/// for each other listed node its latest fresh sample (a cluster's masters
/// are one node: they do not outvote the others), with the uncertainty of
/// the one picked; `None` below three nodes.
fn median(table: &Table, index: usize, sample: &Sample) -> Option<(i64, i64)> {
    let now = sample.at;
    let own = table.owners.get(index).copied().unwrap_or(index);
    let mut latest: Vec<Option<Sample>> = Vec::new();
    for (j, s) in table.samples.iter().enumerate() {
        let owner = table.owners.get(j).copied().unwrap_or(j);
        let Some(s) = s.filter(|s| owner != own && now.saturating_duration_since(s.at) <= FRESH)
        else {
            continue;
        };
        if latest.len() <= owner {
            latest.resize(owner + 1, None);
        }
        if latest[owner].is_none_or(|l| l.at < s.at) {
            latest[owner] = Some(s);
        }
    }
    let mut skews: Vec<(i64, i64)> = latest
        .into_iter()
        .flatten()
        .map(|s| (s.skew, s.uncertainty))
        .collect();
    skews.push((sample.skew, sample.uncertainty));
    if skews.len() < 3 {
        return None;
    }
    skews.sort_unstable();
    Some(skews[(skews.len() - 1) / 2])
}

/// Whether the node stepped forward between `prev` and `sample` beyond
/// `allowance` plus what the readings leave uncertain, by its skew and
/// against the client's own wall clock (a suspended client host moves
/// every skew, and its own, at once). Its size.
fn jump(prev: &Sample, sample: &Sample, allowance: i64) -> Option<Duration> {
    let slack = allowance
        .saturating_add(sample.uncertainty)
        .saturating_add(prev.uncertainty);
    let step = sample.skew.saturating_sub(prev.skew);
    let own = step.saturating_sub(sample.client.skew.saturating_sub(prev.client.skew));
    (step > slack && own > slack).then(|| Duration::from_micros(step.unsigned_abs()))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading of a node whose clock is `ahead_ms` ahead of the client's
    /// monotonic clock, at `at`, over a 1 ms round trip.
    fn reading(clocks: &Clocks, at: Instant, ahead_ms: i64) -> Reading {
        let mono = at.duration_since(clocks.anchor).as_micros() as i64;
        Reading {
            node_us: mono + ahead_ms * 1000 + 500,
            sent: at,
            got: at + Duration::from_millis(1),
        }
    }

    fn three() -> (Clocks, Instant) {
        let clocks = Clocks::new(3, 0.01);
        clocks.used(10_000);
        (clocks, Instant::now() + Duration::from_millis(10))
    }

    #[test]
    fn a_clock_far_from_the_median_disagrees_and_one_near_it_does_not() {
        let (clocks, t) = three();
        assert_eq!(clocks.observe(0, reading(&clocks, t, 0)).disagreement, None);
        assert_eq!(clocks.observe(1, reading(&clocks, t, 3)).disagreement, None);
        let judged = clocks.observe(2, reading(&clocks, t, 9_000));
        let (d, _) = judged.disagreement.unwrap();
        assert!((8_996_000..=9_000_000).contains(&d), "{d}");
        assert!(judged.beyond(Duration::from_millis(102)).is_some());
        // Node 0 against the others: the median is node 1's, 3 ms off.
        let zero = clocks.observe(0, reading(&clocks, t + Duration::from_millis(5), 0));
        assert!(
            zero.beyond(Duration::from_millis(102)).is_none(),
            "{zero:?}"
        );
        assert_eq!(zero.jumped, None);
    }

    #[test]
    fn a_forward_step_beyond_the_allowance_is_a_jump_and_cuts_its_node() {
        let (clocks, t) = three();
        for i in 0..3 {
            clocks.observe(i, reading(&clocks, t, 0));
        }
        let before = Instant::now();
        let later = t + Duration::from_secs(1);
        // 50 ms: below a 10 s TTL's 102 ms allowance.
        assert_eq!(clocks.observe(2, reading(&clocks, later, 50)).jumped, None);
        let jumped = clocks.observe(2, reading(&clocks, later, 9_050)).jumped;
        assert_eq!(jumped, Some(Duration::from_secs(9)));
        assert_eq!(clocks.cut(2, before), Duration::from_secs(9));
        assert_eq!(clocks.cut(1, before), Duration::ZERO);
        assert!(clocks.jumps().try_recv().is_ok(), "announced");
        // Stepped back: no jump (its keys live longer, not shorter).
        assert_eq!(clocks.observe(2, reading(&clocks, later, 0)).jumped, None);
        // A cut learnt before a lease was granted is not its own.
        assert_eq!(clocks.cut(2, Instant::now()), Duration::ZERO);
        // A lease on nodes 0-2 of 3 (quorum 2) stands on nodes 0 and 1;
        // on nodes 1 and 2 alone it ends 9 s early.
        let until = Instant::now() + Duration::from_secs(10);
        assert_eq!(clocks.holds_until(&[0, 1, 2], before, until, 2), until);
        assert_eq!(
            clocks.holds_until(&[1, 2], before, until, 2),
            until - Duration::from_secs(9)
        );
        assert_eq!(
            clocks.holds_until(&[1, 2], Instant::now(), until, 2),
            until,
            "granted after the jump was learnt"
        );
    }

    /// Every node's clock steps at once (the client's own clocks did not
    /// move): every key on each of them lost the step, so each is a jump,
    /// whatever order the readings land in, though the median moved with
    /// them.
    #[test]
    fn every_clock_stepping_at_once_is_a_jump_at_each() {
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
            let (clocks, t) = three();
            for i in [0, 1, 2, 0, 1] {
                clocks.observe(i, reading(&clocks, t, 0));
            }
            let later = t + Duration::from_secs(2);
            for i in order {
                let judged = clocks.observe(i, reading(&clocks, later, 5_000));
                assert_eq!(
                    judged.jumped,
                    Some(Duration::from_secs(5)),
                    "node {i} of {order:?}"
                );
            }
        }
    }

    /// No slack grows with the time between two readings: a 20 ms step (a
    /// chrony correction) a minute after the last reading is a jump under
    /// a 1 s TTL (a 12 ms allowance) as it is a second after.
    #[test]
    fn a_step_counts_in_full_however_long_since_the_last_reading() {
        for gap in [Duration::from_secs(1), Duration::from_secs(59)] {
            let clocks = Clocks::new(3, 0.01);
            clocks.used(1_000);
            let t = Instant::now() + Duration::from_millis(10);
            clocks.observe(0, reading(&clocks, t, 0));
            let judged = clocks.observe(0, reading(&clocks, t + gap, 20));
            assert_eq!(judged.jumped, Some(Duration::from_millis(20)), "{gap:?}");
        }
    }

    /// The client's host was suspended: its monotonic clock stopped while
    /// its wall clock (and the nodes') ran on. Every lease it holds ends
    /// that much sooner: every listed node is cut.
    #[test]
    fn a_suspended_client_host_cuts_every_lease() {
        let (clocks, t) = three();
        let before = Instant::now();
        let own = |skew_ms: i64| Own {
            skew: skew_ms * 1000,
            uncertainty: 1000,
            at: Instant::now(),
        };
        let mut table = clocks.table.lock();
        clocks.own_step(&mut table, own(0), 102_000);
        clocks.own_step(&mut table, own(50), 102_000);
        assert!(table.cuts.is_empty(), "50 ms is within the allowance");
        clocks.own_step(&mut table, own(5_050), 102_000);
        drop(table);
        for node in 0..3 {
            assert_eq!(clocks.cut(node, before), Duration::from_secs(5), "{node}");
        }
        assert!(clocks.jumps().try_recv().is_ok(), "announced");
        let _ = t;
    }

    #[test]
    fn the_shortest_ttl_sets_the_jump_allowance() {
        let (clocks, t) = three();
        clocks.used(60_000);
        for i in 0..3 {
            clocks.observe(i, reading(&clocks, t, 0));
        }
        // 150 ms: within a 60 s TTL's 602 ms, beyond a 10 s TTL's 102 ms.
        let later = t + Duration::from_secs(1);
        assert!(
            clocks
                .observe(0, reading(&clocks, later, 150))
                .jumped
                .is_some()
        );
    }

    #[test]
    fn a_time_reply_is_parsed_and_garbage_is_not() {
        let now = Instant::now();
        let ok = redis::Value::Array(vec![
            redis::Value::BulkString(b"1700000000".to_vec()),
            redis::Value::BulkString(b"250".to_vec()),
        ]);
        let r = Reading::parse(&ok, now, now).unwrap();
        assert_eq!(r.node_us, 1_700_000_000_000_250);
        for bad in [
            redis::Value::Array(vec![redis::Value::Int(-1), redis::Value::Int(0)]),
            redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Int(1_000_000)]),
            redis::Value::Array(vec![redis::Value::Int(1); 3]),
            redis::Value::Nil,
            redis::Value::Array(vec![]),
            redis::Value::Array(vec![redis::Value::BulkString(b"x".to_vec()); 2]),
            redis::Value::Array(vec![redis::Value::Int(i64::MAX), redis::Value::Int(1)]),
        ] {
            assert!(Reading::parse(&bad, now, now).is_none(), "{bad:?}");
        }
    }
}
