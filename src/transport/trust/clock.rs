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
//!   so that one clock off among three cannot drag the median; of two, the
//!   lower: the one ahead is the one whose keys may expire early): the
//!   *disagreement*. Two healthy clocks tick alike, so the skews of
//!   healthy nodes stay equal however far apart in time they were read. A
//!   client started after a jump sees it only this way, so a reading is
//!   judged against fresh ones only: where another listed node has no
//!   reading within [`FRESH`] (the client was idle, or just started) and
//!   did not fail lately (nor did a wait for it give up within the last
//!   [`GAVE_UP_FOR`]), the reading waits, up to its round's deadline,
//!   for the round's other readings to land ([`Clocks::observe`]) — the
//!   median of all of them, not of whichever landed first. A reading
//!   that still has no other to be judged against has no disagreement,
//!   and its vote does not count (`admission.rs`). With one listed node
//!   (or one Redis Cluster) there is never another: [`Clocks::limits`].
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
use parking_lot::{Condvar, Mutex};

use crate::algorithm;

/// Readings older than this take no part in another node's median.
pub(crate) const FRESH: Duration = Duration::from_secs(60);

/// How long a node that a round's wait for its reading gave up on is not
/// waited for again: a silent node holds a round's clock judgement once a
/// second at most (a stuck worker, re-examining a node that just stalled,
/// held every round for seconds), and an honest node that was only slow is
/// waited for again soon after.
const GAVE_UP_FOR: Duration = Duration::from_secs(1);

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

/// A forward step of a node's clock too small to be a jump by this
/// client's TTLs, but beyond the smallest drift allowance any TTL has: a
/// jump if another client's shorter TTL is in use there (`in_use.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// How far the clock moved.
    pub(crate) size: Duration,
    /// What the two readings leave uncertain.
    slack: Duration,
}

impl Step {
    /// Whether it is beyond `allowance` even at its most favourable.
    pub(crate) fn beyond(&self, allowance: Duration) -> bool {
        self.size > allowance.saturating_add(self.slack)
    }
}

/// What one reading says of its node's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Judged {
    /// Ahead (positive) or behind the median of the nodes' clocks, in
    /// microseconds, with how far off that figure may be; `None` when no
    /// other listed node's reading was fresh, even after waiting.
    pub(crate) disagreement: Option<(i64, i64)>,
    /// It stepped forward by this much since the last reading.
    pub(crate) jumped: Option<Duration>,
    /// It stepped forward, not beyond this client's allowance, but beyond
    /// the smallest any client's may be.
    pub(crate) stepped: Option<Step>,
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
    /// How many listed nodes there are.
    listed: usize,
    drift_factor: f64,
    table: Mutex<Table>,
    /// Told when a reading or a miss lands (readings waiting for the
    /// others' wake up).
    landed: Condvar,
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
    /// The client's own clocks, as last read (see [`Clocks::observe`]).
    own: Option<Own>,
    samples: Vec<Option<Sample>>,
    /// Per registry entry: when an exchange that should have read its
    /// clock last ended without a reading (a reading waits for no node
    /// that failed lately).
    missed: Vec<Option<Instant>>,
    /// Per registry entry: when a round's wait for its reading last gave
    /// up (see [`GAVE_UP_FOR`]).
    gave_up: Vec<Option<Instant>>,
    cuts: Vec<Cut>,
}

impl Clocks {
    /// For `listed` nodes, with the client's drift factor.
    pub(crate) fn new(listed: usize, drift_factor: f64) -> Clocks {
        let (jumped, jumps) = crossbeam_channel::bounded(1);
        Clocks {
            anchor: Instant::now(),
            listed,
            drift_factor,
            table: Mutex::new(Table {
                owners: (0..listed).collect(),
                own: None,
                samples: vec![None; listed],
                missed: vec![None; listed],
                gave_up: vec![None; listed],
                cuts: Vec::new(),
            }),
            landed: Condvar::new(),
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
        table.grow(index, owner);
        table.owners[index] = owner;
    }

    /// What judging clocks against each other cannot do with this many
    /// listed nodes, for the client to say once at build: `None` from
    /// three on.
    pub(crate) fn limits(&self) -> Option<&'static str> {
        match self.listed {
            0 | 1 => Some(
                "one node is listed (a Redis Cluster counts as one): its clock is never judged \
                 against another's, only against its own readings, so a jump this client sees \
                 happen keeps the node out, but a clock already wrong when the client first \
                 reads it is not seen; list three or more independent nodes",
            ),
            2 => Some(
                "two nodes are listed: each clock is judged against the other's only, so one \
                 ahead of the other does not count, but two that stepped together before this \
                 client first read them are not seen; list three or more independent nodes",
            ),
            _ => None,
        }
    }

    /// Whether another listed node's clock can ever judge a node's: two or
    /// more listed nodes.
    pub(crate) fn comparable(&self) -> bool {
        self.listed >= 2
    }

    /// Entry `index`'s exchange, which should have read its clock, ended
    /// without a reading: readings landing meanwhile do not wait for it.
    pub(crate) fn missed(&self, index: usize) {
        let mut table = self.table.lock();
        table.grow(index, index);
        table.missed[index] = Some(Instant::now());
        drop(table);
        self.landed.notify_all();
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

    /// The shortest TTL this client asked for (zero: none yet).
    pub(crate) fn shortest_ttl(&self) -> Duration {
        Duration::from_millis(self.shortest_ms.load(Ordering::Relaxed))
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
    /// the others only. Where another listed node read before was neither
    /// read within [`FRESH`] nor failed lately, waits until it is, or until
    /// `until`, for the others' readings of the same round to land; a node
    /// still unheard when such a wait gives up is not waited for again for
    /// [`GAVE_UP_FOR`].
    pub(crate) fn observe(&self, index: usize, reading: Reading, until: Instant) -> Judged {
        let half = reading.got.saturating_duration_since(reading.sent) / 2;
        let mid = reading.sent + half;
        let sample = Sample {
            skew: reading.node_us.saturating_sub(self.mono(mid)),
            uncertainty: micros(half).saturating_add(GRANULE_US),
            at: reading.got,
            client: self.client_skew(),
        };
        let allowance = self.jump_allowance();
        let mut table = self.table.lock();
        table.grow(index, index);
        self.own_step(&mut table, sample.client, micros(allowance));
        let previous = table.samples[index];
        if previous.is_some_and(|prev| prev.at > sample.at) {
            return Judged {
                disagreement: disagreement(&table, index, &sample, self.listed),
                ..Judged::default()
            };
        }
        let step = previous.and_then(|prev| step(&prev, &sample));
        let jumped = step.filter(|s| s.beyond(allowance)).map(|s| s.size);
        let stepped = step.filter(|s| jumped.is_none() && s.beyond(algorithm::DRIFT_FLOOR));
        table.samples[index] = Some(sample);
        if let Some(size) = jumped {
            let node = table.owners[index];
            self.record(&mut table, node, size);
            let _ = self.jumped.try_send(());
        }
        self.landed.notify_all();
        let waits = until > Instant::now();
        while !table.heard_from_all(index, self.listed, Instant::now()) {
            if self.landed.wait_until(&mut table, until).timed_out() {
                // The rounds after this one do not wait for the nodes it
                // gave up on, for a while ([`GAVE_UP_FOR`]); nor do those
                // waiting now. Their next readings count whenever they land.
                if waits {
                    table.give_up_on_unheard(index, self.listed, Instant::now());
                    self.landed.notify_all();
                }
                break;
            }
        }
        Judged {
            disagreement: disagreement(&table, index, &sample, self.listed),
            jumped,
            stepped,
        }
    }

    /// `step`, seen at entry `index`, is a jump after all (by another
    /// client's shorter TTL): recorded as if seen so. Its size.
    pub(crate) fn confirm(&self, index: usize, step: &Step) -> Duration {
        let mut table = self.table.lock();
        let node = table.owners.get(index).copied().unwrap_or(index);
        self.record(&mut table, node, step.size);
        drop(table);
        let _ = self.jumped.try_send(());
        step.size
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
                for node in 0..self.listed {
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

impl Table {
    /// Makes room for registry entry `index` (of listed node `owner`).
    fn grow(&mut self, index: usize, owner: usize) {
        if self.owners.len() <= index {
            self.owners.resize(index + 1, owner);
            self.samples.resize(index + 1, None);
            self.missed.resize(index + 1, None);
            self.gave_up.resize(index + 1, None);
        }
    }

    /// Whether every listed node but `index`'s that was ever read was
    /// read again within [`FRESH`] of `now`, or failed to be (or a wait
    /// for it gave up within [`GAVE_UP_FOR`]): a reading of `index` judged
    /// now is judged against all the others that answer.
    /// (One never read — black-holed since the client started, say — is
    /// not waited for: nothing says it will answer.)
    fn heard_from_all(&self, index: usize, listed: usize, now: Instant) -> bool {
        let own = self.owners.get(index).copied().unwrap_or(index);
        (0..listed).all(|owner| owner == own || self.heard(owner, now))
    }

    /// Listed node `owner`'s registry entries.
    fn entries(&self, owner: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.owners.len()).filter(move |&j| self.owners[j] == owner)
    }

    /// Whether listed node `owner` was never read, or was read or failed
    /// to be within [`FRESH`] of `now`, or a wait for its reading gave up
    /// within [`GAVE_UP_FOR`] (see [`heard_from_all`](Self::heard_from_all)).
    fn heard(&self, owner: usize, now: Instant) -> bool {
        let within = |at: Instant, d: Duration| now.saturating_duration_since(at) <= d;
        self.entries(owner).all(|j| self.samples[j].is_none())
            || self.entries(owner).any(|j| {
                self.samples[j].is_some_and(|s| within(s.at, FRESH))
                    || self.missed[j].is_some_and(|at| within(at, FRESH))
                    || self.gave_up[j].is_some_and(|at| within(at, GAVE_UP_FOR))
            })
    }

    /// Records, at `now`, that a wait gave up on every listed node but
    /// `index`'s that [`heard_from_all`](Self::heard_from_all) still waits
    /// for.
    fn give_up_on_unheard(&mut self, index: usize, listed: usize, now: Instant) {
        let own = self.owners.get(index).copied().unwrap_or(index);
        let unheard: Vec<usize> = (0..listed)
            .filter(|&owner| owner != own && !self.heard(owner, now))
            .flat_map(|owner| self.entries(owner))
            .collect();
        for j in unheard {
            self.gave_up[j] = Some(now);
        }
    }
}

/// `sample`'s skew against the median of its own and the other listed
/// nodes' fresh readings, with how far off that may be.
fn disagreement(table: &Table, index: usize, sample: &Sample, listed: usize) -> Option<(i64, i64)> {
    median(table, index, sample, listed).map(|(m, unc)| {
        (
            sample.skew.saturating_sub(m),
            sample.uncertainty.saturating_add(unc),
        )
    })
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
/// the one picked; of an even count, the lower middle (of two, the lower:
/// the clock ahead is judged ahead); `None` unless a majority of the
/// `listed` nodes (two at least) is in it: a median of fewer could be
/// made of the clocks it should judge.
fn median(table: &Table, index: usize, sample: &Sample, listed: usize) -> Option<(i64, i64)> {
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
    if skews.len() < (listed / 2 + 1).max(2) {
        return None;
    }
    skews.sort_unstable();
    Some(skews[(skews.len() - 1) / 2])
}

/// How far the node stepped forward between `prev` and `sample`, by its
/// skew, with what the readings leave uncertain — and, where the client's
/// own wall clock moved forward with it (a suspended client host moves
/// every skew, and its own, at once), as much again: only a move against
/// both is the node's.
fn step(prev: &Sample, sample: &Sample) -> Option<Step> {
    let step = sample.skew.saturating_sub(prev.skew);
    let own = step.saturating_sub(sample.client.skew.saturating_sub(prev.client.skew));
    let slack = sample
        .uncertainty
        .saturating_add(prev.uncertainty)
        .saturating_add(step.saturating_sub(own).max(0));
    (step > 0 && own > 0).then(|| Step {
        size: Duration::from_micros(step.unsigned_abs()),
        slack: Duration::from_micros(slack.unsigned_abs()),
    })
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    /// [`three`], each node read once at `t`, in step with the client.
    fn three_read() -> (Clocks, Instant) {
        let (clocks, t) = three();
        for i in 0..3 {
            clocks.observe(i, reading(&clocks, t, 0), Instant::now());
        }
        (clocks, t)
    }

    #[test]
    fn a_clock_far_from_the_median_disagrees_and_one_near_it_does_not() {
        let (clocks, t) = three();
        let now = Instant::now;
        assert_eq!(
            clocks
                .observe(0, reading(&clocks, t, 0), now())
                .disagreement,
            None
        );
        // Of two, the lower: node 1 is 3 ms ahead of node 0.
        let (d, _) = clocks
            .observe(1, reading(&clocks, t, 3), now())
            .disagreement
            .unwrap();
        assert!((2_996..=3_000).contains(&d), "{d}");
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), Instant::now());
        let (d, _) = judged.disagreement.unwrap();
        assert!((8_996_000..=9_000_000).contains(&d), "{d}");
        assert!(judged.beyond(Duration::from_millis(102)).is_some());
        // Node 0 against the others: the median is node 1's, 3 ms off.
        let zero = clocks.observe(
            0,
            reading(&clocks, t + Duration::from_millis(5), 0),
            Instant::now(),
        );
        assert!(
            zero.beyond(Duration::from_millis(102)).is_none(),
            "{zero:?}"
        );
        assert_eq!(zero.jumped, None);
    }

    #[test]
    fn a_forward_step_beyond_the_allowance_is_a_jump_and_cuts_its_node() {
        let (clocks, t) = three_read();
        let before = Instant::now();
        let later = t + Duration::from_secs(1);
        // 50 ms: below a 10 s TTL's 102 ms allowance.
        assert_eq!(
            clocks
                .observe(2, reading(&clocks, later, 50), Instant::now())
                .jumped,
            None
        );
        let jumped = clocks
            .observe(2, reading(&clocks, later, 9_050), Instant::now())
            .jumped;
        assert_eq!(jumped, Some(Duration::from_secs(9)));
        assert_eq!(clocks.cut(2, before), Duration::from_secs(9));
        assert_eq!(clocks.cut(1, before), Duration::ZERO);
        assert!(clocks.jumps().try_recv().is_ok(), "announced");
        // Stepped back: no jump (its keys live longer, not shorter).
        assert_eq!(
            clocks
                .observe(2, reading(&clocks, later, 0), Instant::now())
                .jumped,
            None
        );
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
                clocks.observe(i, reading(&clocks, t, 0), Instant::now());
            }
            let later = t + Duration::from_secs(2);
            for i in order {
                let judged = clocks.observe(i, reading(&clocks, later, 5_000), Instant::now());
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
            clocks.observe(0, reading(&clocks, t, 0), Instant::now());
            let judged = clocks.observe(0, reading(&clocks, t + gap, 20), Instant::now());
            assert_eq!(judged.jumped, Some(Duration::from_millis(20)), "{gap:?}");
        }
    }

    /// Three listed nodes whose readings are all older than [`FRESH`] (the
    /// client was idle), and node 2's clock 9 s ahead.
    fn idle_three() -> Option<(Arc<Clocks>, Instant)> {
        let (clocks, _) = three();
        let long_ago = Instant::now().checked_sub(FRESH + Duration::from_secs(1))?;
        for i in 0..3 {
            clocks.table.lock().samples[i] = Some(Sample {
                skew: 500,
                uncertainty: 1_500,
                at: long_ago,
                client: clocks.client_skew(),
            });
        }
        Some((Arc::new(clocks), Instant::now()))
    }

    /// The first reading of a round after a silence lands before the
    /// others: it waits for them and is judged against them, not counted
    /// unjudged.
    #[test]
    fn a_reading_with_only_stale_others_waits_for_the_rounds_others() {
        let Some((clocks, t)) = idle_three() else {
            return;
        };
        let first = {
            let clocks = clocks.clone();
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(60);
                clocks.observe(2, reading(&clocks, t, 9_000), until)
            })
        };
        // Its sample is kept before it waits, under the lock the wait
        // releases: once it shows, the reading is waiting.
        while clocks.table.lock().samples[2].is_none_or(|s| s.at < t) {
            std::thread::yield_now();
        }
        for i in 0..2 {
            clocks.observe(i, reading(&clocks, t, 0), Instant::now());
        }
        let judged = first.join().unwrap();
        let (d, _) = judged.disagreement.expect("judged against the others");
        assert!(d > 8_990_000, "{d}");
    }

    /// A reading whose round cannot give it another reading in time is not
    /// judged (its vote will not count); one does not wait for a node that
    /// failed lately.
    #[test]
    fn a_reading_waits_for_no_node_that_failed_and_is_unjudged_alone() {
        let Some((clocks, t)) = idle_three() else {
            return;
        };
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), Instant::now());
        assert_eq!(judged.disagreement, None, "nothing fresh to judge by");
        clocks.missed(0);
        clocks.observe(1, reading(&clocks, t, 0), Instant::now());
        let until = Instant::now() + Duration::from_secs(60);
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), until);
        assert!(Instant::now() < until, "waited for node 0, which failed");
        assert!(
            judged.ahead(Duration::from_millis(102)).is_some(),
            "{judged:?}"
        );
    }

    /// A node a wait gave up on is not waited for by the next rounds: its
    /// worker may be stuck in a long exchange (re-examining a node that
    /// just stalled), and each round waited for it again, half its timeout
    /// a lock for seconds. Its next reading still counts when it lands.
    #[test]
    fn a_node_a_wait_gave_up_on_is_not_waited_for_again() {
        let Some((clocks, t)) = idle_three() else {
            return;
        };
        // Node 0's round: node 2 never answers; the wait gives up.
        let soon = Instant::now() + Duration::from_millis(300);
        clocks.observe(0, reading(&clocks, t, 0), soon);
        assert!(
            clocks.table.lock().gave_up[2].is_some(),
            "gave up on node 2"
        );
        // The next round does not wait for node 2 again (it would, 10 s).
        let until = Instant::now() + Duration::from_secs(10);
        clocks.observe(1, reading(&clocks, t, 0), until);
        assert!(
            Instant::now() + Duration::from_secs(5) < until,
            "waited for node 2 again"
        );
        // Node 2 answers again: its reading is judged against the others.
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), Instant::now());
        let (d, _) = judged.disagreement.expect("judged against the others");
        assert!(d > 8_990_000, "{d}");
    }

    /// A reading that does not wait (its batch has no yes vote, or it is
    /// an examination's) gives up on no one; a give-up lasts
    /// [`GAVE_UP_FOR`].
    #[test]
    fn only_a_wait_gives_up_and_only_for_a_while() {
        let Some((clocks, t)) = idle_three() else {
            return;
        };
        clocks.observe(0, reading(&clocks, t, 0), Instant::now());
        assert_eq!(clocks.table.lock().gave_up, vec![None; 3]);
        let now = Instant::now();
        let mut table = clocks.table.lock();
        table.gave_up[2] = now.checked_sub(GAVE_UP_FOR / 2);
        assert!(table.heard(2, now), "given up on lately");
        table.gave_up[2] = now.checked_sub(GAVE_UP_FOR * 2);
        assert!(!table.heard(2, now), "waited for again");
    }

    /// Of five listed nodes, a reading judged with only one other fresh
    /// (the rest failed lately) is not judged: two clocks that stepped
    /// together would vouch for each other.
    #[test]
    fn a_median_needs_a_majority_of_the_listed_nodes() {
        let clocks = Clocks::new(5, 0.01);
        clocks.used(10_000);
        let t = Instant::now() + Duration::from_millis(10);
        for i in [0, 1, 4] {
            clocks.missed(i);
        }
        clocks.observe(3, reading(&clocks, t, 9_000), Instant::now());
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), Instant::now());
        assert_eq!(judged.disagreement, None, "two of five is no majority");
        let judged = clocks.observe(4, reading(&clocks, t, 0), Instant::now());
        let (d, _) = judged.disagreement.expect("three of five");
        assert!(d < 0, "node 4 is behind the two that stepped: {d}");
    }

    /// A node never read (black-holed since the client started) is not
    /// waited for: a round of the others is judged without it.
    #[test]
    fn a_reading_waits_for_no_node_never_read() {
        let (clocks, t) = three();
        clocks.observe(1, reading(&clocks, t, 0), Instant::now());
        let until = Instant::now() + Duration::from_secs(60);
        let judged = clocks.observe(2, reading(&clocks, t, 9_000), until);
        assert!(Instant::now() < until, "waited for node 0, never read");
        assert!(judged.disagreement.is_some(), "{judged:?}");
    }

    #[test]
    fn fewer_than_three_listed_nodes_are_said() {
        assert!(
            Clocks::new(1, 0.01)
                .limits()
                .unwrap()
                .contains("never judged")
        );
        assert!(!Clocks::new(1, 0.01).comparable());
        assert!(
            Clocks::new(2, 0.01)
                .limits()
                .unwrap()
                .contains("other's only")
        );
        assert!(Clocks::new(2, 0.01).comparable());
        assert!(Clocks::new(3, 0.01).limits().is_none());
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

    /// A step within this client's allowance but beyond the smallest any
    /// TTL has (2 ms, and the readings' uncertainty) is left for another
    /// client's TTLs to judge; confirmed, it cuts like a jump.
    #[test]
    fn a_step_within_this_clients_allowance_is_left_to_every_clients() {
        let (clocks, t) = three_read();
        let before = Instant::now();
        let later = t + Duration::from_secs(1);
        let small = clocks.observe(2, reading(&clocks, later, 1), Instant::now());
        assert_eq!((small.jumped, small.stepped), (None, None), "within 2 ms");
        let judged = clocks.observe(2, reading(&clocks, later, 51), Instant::now());
        assert_eq!(judged.jumped, None, "50 ms: within a 10 s TTL's 102 ms");
        let step = judged.stepped.expect("beyond any TTL's smallest allowance");
        assert_eq!(step.size, Duration::from_millis(50));
        assert!(
            step.beyond(clocks.allowance(Duration::from_secs(1))),
            "1 s TTL: 12 ms"
        );
        assert!(!step.beyond(clocks.allowance(Duration::from_secs(10))));
        assert_eq!(clocks.cut(2, before), Duration::ZERO, "not yet a jump");
        assert_eq!(clocks.confirm(2, &step), Duration::from_millis(50));
        assert_eq!(clocks.cut(2, before), Duration::from_millis(50));
        assert!(clocks.jumps().try_recv().is_ok(), "announced");
    }

    #[test]
    fn the_shortest_ttl_sets_the_jump_allowance() {
        let (clocks, t) = three();
        clocks.used(60_000);
        for i in 0..3 {
            clocks.observe(i, reading(&clocks, t, 0), Instant::now());
        }
        // 150 ms: within a 60 s TTL's 602 ms, beyond a 10 s TTL's 102 ms.
        let later = t + Duration::from_secs(1);
        assert!(
            clocks
                .observe(0, reading(&clocks, later, 150), Instant::now())
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
