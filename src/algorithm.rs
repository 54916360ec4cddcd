//! The Redlock arithmetic, free of I/O: quorum, drift, validity, vote tallying
//! and retry delays. Everything here is unit-tested without Redis.

use std::time::{Duration, Instant};

#[cfg(test)]
use crate::error::FailureKind;
use crate::error::NodeFailure;
use crate::human::Human;

/// Redis' expiry precision (1 ms) plus a minimum clock drift (1 ms).
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The largest TTL accepted: `u32::MAX` milliseconds (about 49.7 days).
pub(crate) const MAX_TTL: Duration = Duration::from_millis(u32::MAX as u64);

/// Majority of `n` nodes.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance for a TTL: `ttl * factor + 2 ms`.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    // `factor` is validated to lie in [0, 1), so this cannot overflow or panic.
    ttl.mul_f64(factor).saturating_add(DRIFT_FLOOR)
}

/// Checks a TTL and returns it in whole milliseconds, the unit Redis takes.
pub(crate) fn ttl_millis(ttl: Duration, drift_factor: f64) -> Result<u64, String> {
    if ttl > MAX_TTL {
        return Err(format!(
            "ttl {} is too large; the maximum is {}",
            Human(ttl),
            Human(MAX_TTL)
        ));
    }
    let millis = ttl.as_millis() as u64;
    if ttl.is_zero() {
        return Err(
            "the ttl is 0 ms; pass how long the lock may live before it expires by itself, \
             such as Duration::from_secs(10)"
                .to_owned(),
        );
    }
    if millis == 0 {
        return Err(format!(
            "ttl {} is below one millisecond; Redis expires keys in whole milliseconds",
            Human(ttl)
        ));
    }
    let whole = Duration::from_millis(millis);
    let allowance = drift(whole, drift_factor);
    if whole <= allowance {
        return Err(format!(
            "ttl {} is not above the clock-drift allowance of {}; use a longer ttl",
            Human(whole),
            Human(allowance)
        ));
    }
    Ok(millis)
}

/// When a lock acquired (or extended) at `start` with `ttl` stops being safe to
/// rely on: `start + ttl - drift`. Validity measured from the end of the round,
/// `ttl - elapsed - drift`, ends at this same instant.
pub(crate) fn valid_until(start: Instant, ttl: Duration, drift_factor: f64) -> Instant {
    let usable = ttl.saturating_sub(drift(ttl, drift_factor));
    start.checked_add(usable).unwrap_or(start)
}

/// The per-node timeout derived from a TTL: `ttl * factor`, kept within
/// [`MIN_NODE_TIMEOUT`, `MAX_NODE_TIMEOUT`] and never above a third of the TTL.
pub(crate) fn derived_node_timeout(ttl: Duration, factor: f64) -> Duration {
    let scaled = ttl
        .mul_f64(factor)
        .clamp(MIN_NODE_TIMEOUT, MAX_NODE_TIMEOUT);
    scaled.min(ttl / 3).max(Duration::from_millis(1))
}

/// Lower bound of the derived per-node timeout.
pub(crate) const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);
/// Upper bound of the derived per-node timeout.
pub(crate) const MAX_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// How one node answered one operation.
pub(crate) type Answer = Result<Vote, NodeFailure>;

/// What a node holds for an election's leader (see
/// `Op::ReadLeader`): the leader's term, the number of its proclamation,
/// and the value proclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proclaimed {
    pub(crate) term: u64,
    pub(crate) seq: u64,
    pub(crate) value: std::sync::Arc<str>,
}

/// What one node holds at one place of a resource (see `Op::Inspect`): a
/// lock's key, a semaphore's slot `place`, a reader-writer lock's writer
/// (`0`) or one of its readers (`1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) place: u32,
    /// The holder, as a hash of its token (never the token).
    pub(crate) holder: u64,
    /// What is left of it there, in the node's milliseconds (`u64::MAX`:
    /// a key without expiry).
    pub(crate) remaining_ms: u64,
    /// The fencing token the holder's token carries (see
    /// `protocol::token`).
    pub(crate) fence: Option<u64>,
}

/// What a node read with its yes: an election's leader, or what holds a
/// resource there. A round counts reads by what they agree on (see
/// `Tally::agreed` and [`on_majority`]), not as plain yes votes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    Leader(std::sync::Arc<Proclaimed>),
    Holds(std::sync::Arc<[Held]>),
}

impl Read {
    /// The leader read, if this is one.
    pub(crate) fn leader(&self) -> Option<&std::sync::Arc<Proclaimed>> {
        match self {
            Read::Leader(p) => Some(p),
            Read::Holds(_) => None,
        }
    }

    /// What holds a resource there, if this is such a read.
    pub(crate) fn holds(&self) -> Option<&[Held]> {
        match self {
            Read::Holds(h) => Some(h),
            Read::Leader(_) => None,
        }
    }
}

/// What holds a resource on a majority, from the reads of the nodes that
/// answered (the other `unknown` nodes did not, or not yet): each holder
/// found at the same place on at least `quorum` nodes, with what is left
/// of it on that majority (the `quorum`-th largest of its remaining
/// times, a lower bound however the others answer). `Err` while the nodes
/// not read could change the answer — they are a majority themselves, or a
/// holder read on fewer than `quorum` nodes would reach it with them —
/// with how many nodes agree on the larger side of such a holder's
/// question (whether it holds), always fewer than `quorum`.
pub(crate) fn on_majority<'a>(
    reads: impl Iterator<Item = &'a [Held]>,
    unknown: usize,
    quorum: usize,
) -> Result<Vec<Held>, usize> {
    let mut read = 0;
    let mut by_holder: std::collections::BTreeMap<(u32, u64), Vec<&Held>> = Default::default();
    for held in reads {
        read += 1;
        for h in held {
            by_holder.entry((h.place, h.holder)).or_default().push(h);
        }
    }
    if unknown >= quorum {
        return Err(read);
    }
    let mut found = Vec::new();
    for there in by_holder.values_mut() {
        if there.len() >= quorum {
            there.sort_by_key(|h| std::cmp::Reverse(h.remaining_ms));
            found.push(*there[quorum - 1]);
        } else if there.len() + unknown >= quorum {
            return Err(there.len().max(read - there.len()));
        }
    }
    found.sort_by_key(|h| (h.place, std::cmp::Reverse(h.remaining_ms)));
    Ok(found)
}

/// A node's vote: yes or no, and what the node said with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vote {
    pub(crate) yes: bool,
    /// With a fenced acquisition's no: the proposed token was stale; the
    /// node holds this fence value, at least as large.
    pub(crate) fence: Option<u64>,
    /// From the resource's gate node (see `transport/protocol/scripts/`): others
    /// wait for the resource. With an acquisition's no: the key is free but
    /// others queued first. With a release's yes: it woke the next waiter.
    pub(crate) queued: bool,
    /// With an acquisition's no: who holds the key there, as a hash of the
    /// holder's token (never the token), when the node said.
    pub(crate) holder: Option<u64>,
    /// A semaphore's slot acquisition: the slots the node holds (bit `i`:
    /// slot `i` exists there), counting one this round just took.
    pub(crate) slots: Option<u64>,
    /// With a read's yes: what the node read (see [`Read`]).
    pub(crate) read: Option<Read>,
}

impl Vote {
    pub(crate) const YES: Vote = Vote {
        yes: true,
        fence: None,
        queued: false,
        holder: None,
        slots: None,
        read: None,
    };
    pub(crate) const NO: Vote = Vote {
        yes: false,
        fence: None,
        queued: false,
        holder: None,
        slots: None,
        read: None,
    };

    /// A fenced acquisition's no for a stale token: the node holds `fence`.
    pub(crate) fn stale(fence: u64) -> Vote {
        Vote {
            fence: Some(fence),
            ..Vote::NO
        }
    }

    /// An acquisition's no: the key holds `token` there.
    pub(crate) fn held_by(token: &[u8]) -> Vote {
        // FNV-1a: equal tokens, equal hashes; the token is not kept.
        let hash = token.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        Vote {
            holder: Some(hash),
            ..Vote::NO
        }
    }

    /// The gate node's word that others wait: a release's yes that woke
    /// the next waiter (`yes`), or an acquisition's no while others queued
    /// first.
    pub(crate) fn queued(yes: bool) -> Vote {
        Vote {
            yes,
            fence: None,
            queued: true,
            holder: None,
            slots: None,
            read: None,
        }
    }

    /// An election read's yes: the node holds this leader's proclamation.
    pub(crate) fn proclaimed(read: Proclaimed) -> Vote {
        Vote {
            read: Some(Read::Leader(std::sync::Arc::new(read))),
            ..Vote::YES
        }
    }

    /// An inspection's yes: what holds the resource there (nothing, or
    /// these).
    pub(crate) fn holds(held: Vec<Held>) -> Vote {
        Vote {
            read: Some(Read::Holds(held.into())),
            ..Vote::YES
        }
    }
}

impl From<bool> for Vote {
    fn from(yes: bool) -> Vote {
        if yes { Vote::YES } else { Vote::NO }
    }
}

/// The decision of a round once enough answers are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A majority confirmed.
    Confirmed,
    /// The refusals ("held by someone else" / "not our token") alone rule
    /// out a majority: even if every failed node had said yes, it would not
    /// be reached.
    Refused,
    /// A majority is impossible, but only because nodes failed: had they
    /// answered yes, it would have been reached.
    Unreachable,
}

/// The end of a round: a verdict (always one) and the counts behind it.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) verdict: Verdict,
    /// Nodes that confirmed.
    pub(crate) confirmed: usize,
    /// Confirmations needed.
    pub(crate) quorum: usize,
    /// Nodes that failed, with their causes; the round appends one
    /// `Unanswered` entry per node still pending at the decision.
    pub(crate) failures: Vec<NodeFailure>,
    /// Failures that will not heal by themselves (rejected credentials)
    /// alone rule out a majority, so retrying is pointless.
    pub(crate) permanent: bool,
    /// Fenced acquisitions refused for a stale token (see [`Vote::fence`]).
    pub(crate) stale: usize,
    /// The largest fence value those refusals reported.
    pub(crate) fence: Option<u64>,
    /// See [`held`](Self::held).
    held: bool,
    /// Held, and no other client can hold the key on a majority: not even
    /// if every node that failed or had not answered, and every refusal that
    /// did not say who holds it, were the most common holder's. Contenders
    /// split the votes and nobody won.
    pub(crate) split: bool,
    /// A semaphore's slot acquisition: the slots each answering node
    /// reported held (see [`Vote::slots`]), one entry per node.
    pub(crate) slots: Vec<u64>,
    /// The reads of the nodes that said yes (see [`Read`]).
    pub(crate) reads: Vec<Read>,
    /// Nodes the request never left the client for (refused at their queue:
    /// full, or the client shutting down): nothing of it can be there, so
    /// nothing needs cleaning up there.
    pub(crate) unsent: Vec<usize>,
    /// The nodes that confirmed, by index, as the round recorded them (a
    /// lease counts on their keys: see `Clocks::holds_until`).
    pub(crate) voters: Vec<usize>,
}

impl Outcome {
    /// For an acquisition: whether others hold it — the refusals alone rule
    /// out a majority, or a majority of the nodes answered and too few of
    /// them granted it (the nodes that failed would not change that the
    /// resource is held where it was asked). Otherwise an acquisition that
    /// failed failed for want of nodes: fewer than a majority answered.
    pub(crate) fn held(&self) -> bool {
        self.held
    }
}

/// What a round's caller makes of its outcome, and so what its round waits
/// for: the round ends as soon as no answer the pending nodes could give
/// changes that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decides {
    /// The verdict: an extension or a release tells a lost lease
    /// (`Refused`) from nodes that failed (`Unreachable`), and so does an
    /// election.
    Verdict,
    /// An acquisition: granted, or else whether it is
    /// [`held`](Outcome::held) and, when `fenced`, whether a larger token
    /// may win (refusals for a stale token).
    Acquisition { fenced: bool },
    /// An inspection: what holds the resource on a majority
    /// ([`on_majority`]); `Confirmed` once the reads decide it,
    /// `Unreachable` when they cannot.
    Holdings,
}

/// A round's answers as its caller reads them: grants, refusals (by a
/// holder or anonymous), refusals for a stale token, failures (the nodes
/// still pending among them), and the refusals of the most common holder
/// plus the anonymous ones (what a split is judged by).
#[derive(Debug, Clone, Copy)]
struct Counts {
    yes: usize,
    refused: usize,
    stale: usize,
    failed: usize,
    split_room: usize,
}

impl Counts {
    /// These counts after the pending nodes answered so: `grant` grants,
    /// `refuse` refusals for the most common holder (or anonymous),
    /// `other` refusals for another holder, `stale` stale refusals and
    /// `fail` failures.
    fn then(self, grant: usize, refuse: usize, other: usize, stale: usize, fail: usize) -> Self {
        Counts {
            yes: self.yes + grant,
            refused: self.refused + refuse + other,
            stale: self.stale + stale,
            failed: self.failed + fail,
            split_room: self.split_room + refuse,
        }
    }
}

/// Counts the answers of one round and decides as soon as the outcome is known.
#[derive(Debug)]
pub(crate) struct Tally {
    nodes: usize,
    quorum: usize,
    decides: Decides,
    yes: usize,
    no: usize,
    failures: Vec<NodeFailure>,
    /// Refusals for a stale token, and the largest fence value they reported.
    stale: usize,
    fence: Option<u64>,
    /// Refusals by holder (hash of its token), and refusals that did not
    /// say who holds the key.
    holders: Vec<(u64, usize)>,
    anonymous: usize,
    /// The slot reports, as [`Outcome::slots`].
    slots: Vec<u64>,
    /// The reads, as [`Outcome::reads`].
    reads: Vec<Read>,
}

impl Tally {
    /// A tally whose caller needs the verdict ([`Decides::Verdict`]).
    pub(crate) fn new(nodes: usize) -> Self {
        Self::deciding(nodes, Decides::Verdict)
    }

    pub(crate) fn deciding(nodes: usize, decides: Decides) -> Self {
        Tally {
            nodes,
            quorum: quorum(nodes),
            decides,
            yes: 0,
            no: 0,
            failures: Vec::new(),
            stale: 0,
            fence: None,
            holders: Vec::new(),
            anonymous: 0,
            slots: Vec::new(),
            reads: Vec::new(),
        }
    }

    pub(crate) fn record(&mut self, answer: Answer) {
        if let Ok(Vote {
            slots: Some(held), ..
        }) = answer
        {
            self.slots.push(held);
        }
        if let Ok(Vote {
            read: Some(read), ..
        }) = &answer
        {
            // Counted by what it agrees on (see `agreed`), not as a plain yes.
            self.reads.push(read.clone());
            return;
        }
        match answer {
            Ok(Vote { yes: true, .. }) => self.yes += 1,
            Ok(Vote {
                yes: false,
                fence: Some(fence),
                ..
            }) => {
                // Nobody holds it there: the token was stale.
                self.no += 1;
                self.stale += 1;
                self.fence = self.fence.max(Some(fence));
            }
            Ok(Vote {
                yes: false, holder, ..
            }) => {
                self.no += 1;
                match holder {
                    Some(h) => match self.holders.iter_mut().find(|(k, _)| *k == h) {
                        Some((_, count)) => *count += 1,
                        None => self.holders.push((h, 1)),
                    },
                    None => self.anonymous += 1,
                }
            }
            Err(failure) => self.failures.push(failure),
        }
    }

    /// Nodes that have not answered yet.
    pub(crate) fn pending(&self) -> usize {
        self.nodes - self.yes - self.no - self.failures.len() - self.reads.len()
    }

    /// The yes votes, and the no votes: an election read's yes counts only
    /// for the term most nodes read (a majority must agree on one leader);
    /// the reads of other terms count as no. Every inspection read counts
    /// as a yes (what it says is judged by [`on_majority`]).
    fn agreed(&self) -> (usize, usize) {
        let leaders = || self.reads.iter().filter_map(Read::leader);
        let most = leaders()
            .map(|r| leaders().filter(|o| o.term == r.term).count())
            .max()
            .unwrap_or(0);
        let other = self.reads.len() - leaders().count();
        (self.yes + most + other, self.no + leaders().count() - most)
    }

    /// An inspection's verdict: `Confirmed` once its reads decide what
    /// holds the resource on a majority; every other node (pending,
    /// failed, or an answer that is no read) counts as unknown.
    fn holdings(&self) -> Option<Verdict> {
        let reads = self.reads.iter().filter_map(Read::holds);
        let unknown = self.nodes - reads.clone().count();
        on_majority(reads, unknown, self.quorum)
            .ok()
            .map(|_| Verdict::Confirmed)
    }

    /// Ends the round: the verdict as if every node still pending had
    /// failed. Equal to [`verdict`](Self::verdict) once that is decided.
    pub(crate) fn outcome(&self) -> Outcome {
        let failed = self.failures.len() + self.pending();
        let (yes, no) = self.agreed();
        let verdict = if self.decides == Decides::Holdings {
            self.holdings().unwrap_or(Verdict::Unreachable)
        } else if yes >= self.quorum {
            Verdict::Confirmed
        } else if yes + failed < self.quorum {
            Verdict::Refused
        } else {
            Verdict::Unreachable
        };
        // As `Outcome::held`.
        let held = match verdict {
            Verdict::Confirmed => false,
            Verdict::Refused => true,
            // Refusals for a stale token say nobody holds it.
            Verdict::Unreachable => yes + no >= self.quorum && no > self.stale,
        };
        Outcome {
            verdict,
            held,
            confirmed: yes,
            quorum: self.quorum,
            failures: self.failures.clone(),
            permanent: self.permanently_failed(),
            stale: self.stale,
            fence: self.fence,
            // Nodes that failed or had not answered may all be the most
            // common holder's: a split only when even then it has no majority.
            split: held && {
                let most = self.holders.iter().map(|(_, c)| *c).max().unwrap_or(0);
                most + self.anonymous + failed < self.quorum
            },
            slots: self.slots.clone(),
            reads: self.reads.clone(),
            unsent: Vec::new(),
            voters: Vec::new(),
        }
    }

    /// `Some` once no answer of the nodes still pending can change what the
    /// caller makes of the outcome (see [`Decides`]): a majority confirmed,
    /// or none can, and every way the pending nodes may answer (grant,
    /// refuse, refuse for a stale token, fail) leads to the same decision.
    /// Then the verdict is [`outcome`](Self::outcome)'s, the pending nodes
    /// counted as failed. (A busy resource with one node down is `Busy`,
    /// not `NoQuorum`: the round waits while the pending nodes could make
    /// a majority of answers.)
    pub(crate) fn verdict(&self) -> Option<Verdict> {
        let ((yes, no), failed, pending) = (self.agreed(), self.failures.len(), self.pending());
        if self.decides == Decides::Holdings {
            return self
                .holdings()
                .or((pending == 0).then_some(Verdict::Unreachable));
        }
        if yes >= self.quorum {
            return Some(Verdict::Confirmed);
        }
        if yes + pending >= self.quorum {
            return None;
        }
        let most = self.holders.iter().map(|(_, c)| *c).max().unwrap_or(0);
        let answered = Counts {
            yes,
            refused: no.saturating_sub(self.stale),
            stale: self.stale,
            failed,
            split_room: most + self.anonymous,
        };
        let now = self.decision(answered.then(0, 0, 0, 0, pending));
        let stale_answers = matches!(self.decides, Decides::Acquisition { fenced: true });
        // Every way the pending nodes may answer: grant, refuse (for the
        // most common holder, or anonymously; or for another), refuse for
        // a stale token, fail.
        for grant in 0..=pending {
            for refuse in 0..=pending - grant {
                for other in 0..=pending - grant - refuse {
                    let rest = pending - grant - refuse - other;
                    for stale in 0..=if stale_answers { rest } else { 0 } {
                        let then = answered.then(grant, refuse, other, stale, rest - stale);
                        if self.decision(then) != now {
                            return None;
                        }
                    }
                }
            }
        }
        Some(if yes + failed + pending < self.quorum {
            Verdict::Refused
        } else {
            Verdict::Unreachable
        })
    }

    /// What the caller makes of a round that did not confirm (as
    /// [`outcome`](Self::outcome) and the acquisition read it): for
    /// [`Decides::Verdict`], whether the refusals alone rule out a
    /// majority; for an acquisition, whether it is held, whether a larger
    /// token may win, and whether the contenders split the votes.
    fn decision(&self, c: Counts) -> (bool, bool, bool) {
        let quorum = self.quorum;
        let refusals_rule_out = c.yes + c.failed < quorum;
        match self.decides {
            // (An inspection decides in `holdings`.)
            Decides::Verdict | Decides::Holdings => (refusals_rule_out, false, false),
            Decides::Acquisition { .. } => {
                let held =
                    refusals_rule_out || (c.yes + c.refused + c.stale >= quorum && c.refused > 0);
                (
                    held,
                    c.stale > 0 && c.yes + c.stale + c.failed >= quorum,
                    held && c.split_room + c.failed < quorum,
                )
            }
        }
    }

    /// Whether failures that will not heal by themselves (rejected credentials)
    /// alone make a majority impossible, so retrying is pointless.
    fn permanently_failed(&self) -> bool {
        let permanent = self
            .failures
            .iter()
            .filter(|f| f.kind().is_permanent())
            .count();
        self.nodes - permanent < self.quorum
    }
}

/// The pause before the next attempt: `base` plus a uniformly random share of
/// `jitter`, so that competing clients fall out of step.
pub(crate) fn retry_delay(base: Duration, jitter: Duration) -> Duration {
    let jitter_nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    let extra = if jitter_nanos == 0 {
        0
    } else {
        rand::random_range(0..=jitter_nanos)
    };
    base.saturating_add(Duration::from_nanos(extra))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn fail(kind: FailureKind) -> Answer {
        Err(NodeFailure::new(Arc::from("n:1"), kind, ""))
    }

    /// A refusal is a split only when no holder can have a majority, with
    /// the unanswered nodes counted for it: with 4 nodes a refusal is
    /// decided at 2 no's, and a single holder is still a holder.
    #[test]
    fn a_split_is_told_from_a_holder() {
        let tally = |n: usize, answers: &[Answer]| {
            let mut tally = Tally::new(n);
            for answer in answers {
                tally.record(answer.clone());
            }
            assert_eq!(tally.verdict(), Some(Verdict::Refused));
            tally.outcome().split
        };
        let (x, y) = (Ok(Vote::held_by(b"x")), Ok(Vote::held_by(b"y")));
        // One holder everywhere, decided before every node answered.
        assert!(!tally(4, &[x.clone(), x.clone()]));
        assert!(!tally(5, &[x.clone(), x.clone(), x.clone()]));
        assert!(!tally(2, std::slice::from_ref(&x)));
        // Three contenders, 2 + 2 + 1 of 5: the one with a single node sees
        // x, x, y and one node pending — which could be x's: held.
        assert!(!tally(5, &[Ok(Vote::YES), x.clone(), x.clone(), y.clone()]));
        // The ones with two see the others' 2 + 1: nobody can have three.
        assert!(tally(
            5,
            &[
                Ok(Vote::YES),
                Ok(Vote::YES),
                x.clone(),
                x.clone(),
                y.clone()
            ]
        ));
        // A refusal that does not say who counts for the most common holder.
        assert!(!tally(
            5,
            &[
                Ok(Vote::YES),
                Ok(Vote::YES),
                x.clone(),
                x.clone(),
                Ok(Vote::NO)
            ]
        ));
        // A failed node could be the holder's.
        assert!(!tally(
            5,
            &[Ok(Vote::YES), x.clone(), x, fail(FailureKind::Timeout), y]
        ));
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(quorum), [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn drift_follows_the_reference_formula() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(drift(Duration::from_millis(100), 0.0), DRIFT_FLOOR);
    }

    #[test]
    fn valid_until_subtracts_drift_and_never_panics() {
        let start = Instant::now();
        let until = valid_until(start, Duration::from_secs(10), 0.01);
        assert_eq!(until - start, Duration::from_millis(9_898));
        // A TTL below the drift floor saturates to zero rather than underflowing.
        assert_eq!(valid_until(start, Duration::from_millis(1), 0.01), start);
    }

    #[test]
    fn ttl_bounds_are_checked() {
        assert!(ttl_millis(Duration::ZERO, 0.01).is_err());
        assert!(ttl_millis(Duration::from_micros(900), 0.01).is_err());
        assert!(
            ttl_millis(Duration::from_millis(2), 0.01).is_err(),
            "not above drift"
        );
        assert!(ttl_millis(Duration::MAX, 0.01).is_err());
        assert!(ttl_millis(MAX_TTL + Duration::from_millis(1), 0.01).is_err());
        assert_eq!(ttl_millis(Duration::from_millis(3), 0.01), Ok(3));
        assert_eq!(ttl_millis(Duration::from_micros(10_999), 0.01), Ok(10));
        assert_eq!(ttl_millis(MAX_TTL, 0.01), Ok(u32::MAX as u64));
    }

    #[test]
    fn derived_timeout_matches_the_reference_range() {
        let t = |ms| derived_node_timeout(Duration::from_millis(ms), 0.005);
        assert_eq!(t(10_000), Duration::from_millis(50), "10 s ttl -> 5..50 ms");
        assert_eq!(t(300), MIN_NODE_TIMEOUT);
        assert_eq!(t(3_600_000), MAX_NODE_TIMEOUT);
        assert_eq!(
            t(9),
            Duration::from_millis(3),
            "never above a third of the ttl"
        );
        assert!(t(3) > Duration::ZERO, "never zero");
    }

    #[test]
    fn tally_decides_at_quorum_without_waiting_for_stragglers() {
        let mut t = Tally::new(5);
        t.record(Ok(Vote::YES));
        t.record(Ok(Vote::YES));
        assert_eq!(t.verdict(), None);
        t.record(Ok(Vote::YES));
        assert_eq!(t.verdict(), Some(Verdict::Confirmed));
        assert_eq!(t.pending(), 2);
    }

    #[test]
    fn tally_gives_up_as_soon_as_a_majority_is_impossible() {
        let mut t = Tally::new(5);
        t.record(Ok(Vote::NO));
        t.record(Ok(Vote::NO));
        assert_eq!(t.verdict(), None);
        t.record(Ok(Vote::NO));
        assert_eq!(t.verdict(), Some(Verdict::Refused));
    }

    #[test]
    fn refusals_win_over_failures_only_when_failures_alone_leave_room() {
        // Two refusals and a timeout: the two nodes still pending decide.
        let mut busy = Tally::new(5);
        busy.record(Ok(Vote::NO));
        busy.record(Ok(Vote::NO));
        busy.record(fail(FailureKind::Timeout));
        assert_eq!(busy.verdict(), None, "waits for the nodes still pending");
        busy.record(Ok(Vote::NO));
        assert_eq!(busy.verdict(), Some(Verdict::Refused));
        assert_eq!(busy.outcome().verdict, Verdict::Refused);

        let mut down = Tally::new(5);
        down.record(Ok(Vote::NO));
        for _ in 0..3 {
            down.record(fail(FailureKind::Connection));
        }
        assert_eq!(down.verdict(), Some(Verdict::Unreachable));
        assert!(!down.permanently_failed());
    }

    /// What the caller of a `decides` round makes of `outcome` (with
    /// `pending` nodes it did not wait for, which count as failed).
    fn decision_of(
        decides: Decides,
        outcome: &Outcome,
        pending: usize,
    ) -> (Verdict, bool, bool, bool) {
        let lost = outcome.verdict != Verdict::Confirmed;
        match decides {
            Decides::Verdict | Decides::Holdings => (outcome.verdict, false, false, false),
            Decides::Acquisition { .. } => (
                if lost {
                    Verdict::Unreachable
                } else {
                    Verdict::Confirmed
                },
                lost && outcome.held(),
                lost && outcome.stale > 0
                    && outcome.confirmed + outcome.stale + outcome.failures.len() + pending
                        >= outcome.quorum,
                lost && outcome.split,
            ),
        }
    }

    #[test]
    fn a_decided_round_ends_with_what_every_answer_would_have_said() {
        // Every sequence of answers on 5 nodes (grant, anonymous refusal,
        // stale token, refusals by two holders, failure), checked after
        // each answer: decided early, the
        // verdict agrees with the outcome, and the caller's decision is
        // what it would be with every answer in (never NoQuorum where the
        // last answer makes it Busy, never Busy where a late grant makes it
        // a split vote); once every node answered, it is decided.
        let answer = |a: usize| match a {
            0 => Ok(Vote::YES),
            1 => Ok(Vote::NO),
            2 => Ok(Vote::stale(9)),
            3 => Ok(Vote::held_by(b"x")),
            4 => Ok(Vote::held_by(b"y")),
            _ => fail(FailureKind::Timeout),
        };
        let mut sequences: Vec<Vec<usize>> = vec![vec![]];
        for _ in 0..5 {
            sequences = sequences
                .into_iter()
                .flat_map(|seq| {
                    (0..6).map(move |a| {
                        let mut next = seq.clone();
                        next.push(a);
                        next
                    })
                })
                .collect();
        }
        let modes = [
            Decides::Verdict,
            Decides::Acquisition { fenced: false },
            Decides::Acquisition { fenced: true },
        ];
        for decides in modes {
            for seq in &sequences {
                let stale_possible = matches!(decides, Decides::Acquisition { fenced: true });
                if !stale_possible && seq.contains(&2) {
                    continue;
                }
                let mut full = Tally::deciding(5, decides);
                seq.iter().for_each(|&a| full.record(answer(a)));
                let last = decision_of(decides, &full.outcome(), 0);
                let mut tally = Tally::deciding(5, decides);
                for (i, &a) in seq.iter().enumerate() {
                    tally.record(answer(a));
                    if let Some(verdict) = tally.verdict() {
                        let outcome = tally.outcome();
                        assert_eq!(verdict, outcome.verdict, "{decides:?} {tally:?}");
                        let early = decision_of(decides, &outcome, tally.pending());
                        assert_eq!(early, last, "{decides:?} {seq:?} at {i}");
                    }
                }
                assert!(tally.verdict().is_some(), "all answered: decided");
            }
        }
    }

    /// Two refusals, a node down, a grant and a stalled node: no
    /// answer of the stalled node makes a majority, and an acquisition is
    /// held whatever it says: the round does not wait for it.
    #[test]
    fn a_round_no_pending_answer_can_change_does_not_wait_for_it() {
        let mut t = Tally::deciding(5, Decides::Acquisition { fenced: false });
        t.record(Ok(Vote::held_by(b"a")));
        t.record(Ok(Vote::held_by(b"a")));
        t.record(fail(FailureKind::Connection));
        t.record(Ok(Vote::YES));
        assert!(t.verdict().is_some(), "decided with one node pending");
        assert!(t.outcome().held());
        // An extension in the same spot: the straggler decides between a
        // lost lease and nodes that failed.
        let mut t = Tally::new(5);
        t.record(Ok(Vote::NO));
        t.record(Ok(Vote::NO));
        t.record(fail(FailureKind::Connection));
        t.record(Ok(Vote::YES));
        assert_eq!(t.verdict(), None);
        // With two failures it cannot be lost: decided at once.
        let mut t = Tally::new(5);
        t.record(Ok(Vote::NO));
        t.record(fail(FailureKind::Connection));
        t.record(fail(FailureKind::Connection));
        t.record(Ok(Vote::YES));
        assert_eq!(t.verdict(), Some(Verdict::Unreachable));
    }

    #[test]
    fn failures_that_could_have_been_yes_are_not_a_refusal() {
        // 2 still hold our token, 1 no longer does (its key expired after
        // missing earlier renewals), 2 timed out and may still hold it: the
        // lock is not shown to be lost, only unconfirmed.
        let mut t = Tally::new(5);
        t.record(Ok(Vote::YES));
        t.record(Ok(Vote::YES));
        t.record(Ok(Vote::NO));
        t.record(fail(FailureKind::Timeout));
        t.record(fail(FailureKind::Timeout));
        assert_eq!(t.verdict(), Some(Verdict::Unreachable));
    }

    #[test]
    fn the_outcome_counts_unanswered_nodes_as_failed_and_agrees_with_the_verdict() {
        let mut t = Tally::new(5);
        t.record(fail(FailureKind::Connection));
        t.record(fail(FailureKind::Connection));
        t.record(fail(FailureKind::Connection));
        assert_eq!(t.verdict(), Some(Verdict::Unreachable));
        let out = t.outcome();
        assert_eq!(out.verdict, Verdict::Unreachable);
        assert_eq!((out.confirmed, out.quorum, t.pending()), (0, 3, 2));
        assert_eq!(out.failures.len(), 3);

        // Undecided (2 yes, 3 pending): closing it counts the 3 as failed.
        let mut open = Tally::new(5);
        open.record(Ok(Vote::YES));
        open.record(Ok(Vote::YES));
        assert_eq!(open.verdict(), None);
        assert_eq!(open.outcome().verdict, Verdict::Unreachable);
        // Nobody answered at all: unreachable, never "refused".
        assert_eq!(Tally::new(3).outcome().verdict, Verdict::Unreachable);
        let mut refused = Tally::new(3);
        refused.record(Ok(Vote::NO));
        refused.record(Ok(Vote::NO));
        assert_eq!(refused.outcome().verdict, Verdict::Refused);
    }

    /// An acquisition that a majority answered and holders
    /// refused is held, whatever failed; with fewer than a majority
    /// answering it failed for want of nodes.
    #[test]
    fn an_acquisition_is_held_once_a_majority_answered() {
        let outcome = |answers: &[Answer]| {
            let mut t = Tally::new(answers.len());
            for a in answers {
                t.record(a.clone());
            }
            t.outcome()
        };
        let (held, free) = (Ok(Vote::held_by(b"a")), Ok(Vote::YES));
        let down = fail(FailureKind::Timeout);
        assert!(outcome(&[held.clone(), free.clone(), down.clone()]).held());
        assert!(outcome(&[held.clone(), held.clone(), down.clone()]).held());
        assert!(!outcome(&[held.clone(), down.clone(), down.clone()]).held());
        assert!(!outcome(&[free.clone(), down.clone(), down.clone()]).held());
        assert!(
            !outcome(&[free.clone(), free.clone(), down.clone()]).held(),
            "confirmed"
        );
        // A stale token's refusal says nobody holds it.
        assert!(!outcome(&[free, Ok(Vote::stale(7)), down]).held());
        // Four nodes, two refusals, two down: the refusals alone rule out
        // a majority.
        let four = outcome(&[
            held.clone(),
            held,
            fail(FailureKind::Connection),
            fail(FailureKind::Connection),
        ]);
        assert_eq!(four.verdict, Verdict::Refused);
        assert!(four.held());
    }

    #[test]
    fn auth_failures_of_a_majority_are_permanent() {
        let mut t = Tally::new(3);
        t.record(fail(FailureKind::Auth));
        assert!(!t.permanently_failed());
        t.record(fail(FailureKind::Auth));
        assert!(t.permanently_failed());
        assert_eq!(t.verdict(), Some(Verdict::Unreachable));
    }

    #[test]
    fn retry_delay_stays_within_base_plus_jitter() {
        let base = Duration::from_millis(10);
        let jitter = Duration::from_millis(5);
        let delays: Vec<_> = (0..200).map(|_| retry_delay(base, jitter)).collect();
        assert!(delays.iter().all(|d| *d >= base && *d <= base + jitter));
        assert!(delays.iter().any(|d| *d != delays[0]), "jitter must vary");
        assert_eq!(retry_delay(base, Duration::ZERO), base);
        assert_eq!(retry_delay(Duration::MAX, Duration::MAX), Duration::MAX);
    }

    fn at(place: u32, holder: u64, remaining_ms: u64) -> Held {
        Held {
            place,
            holder,
            remaining_ms,
            fence: None,
        }
    }

    #[test]
    fn a_holder_on_a_majority_is_found_with_what_is_left_on_that_majority() {
        let x = |ms| vec![at(0, 7, ms)];
        let reads = [x(900), x(500), x(700), vec![], vec![at(0, 8, 100)]];
        let found = on_majority(reads.iter().map(Vec::as_slice), 0, 3).unwrap();
        // Sorted 900, 700, 500: the third node to lose it loses the majority.
        assert_eq!(found, vec![at(0, 7, 500)]);
    }

    #[test]
    fn a_holder_on_fewer_than_a_majority_is_no_holder_once_the_rest_is_known() {
        let reads = [
            vec![at(0, 7, 900)],
            vec![at(0, 7, 900)],
            vec![],
            vec![],
            vec![],
        ];
        let found = on_majority(reads.iter().map(Vec::as_slice), 0, 3).unwrap();
        assert!(found.is_empty());
        // Two nodes not read could make its majority: undecided.
        let some = &reads[..3];
        // Two agree it holds, one that it does not: two at most agree.
        assert_eq!(on_majority(some.iter().map(Vec::as_slice), 2, 3), Err(2));
        // Three free and two unknown: nobody can reach three.
        let free = [vec![], vec![], vec![]];
        let found = on_majority(free.iter().map(Vec::as_slice), 2, 3).unwrap();
        assert!(found.is_empty());
        // A majority unknown: whatever was read, never a guess.
        assert_eq!(
            on_majority(free[..2].iter().map(Vec::as_slice), 3, 3),
            Err(2)
        );
    }

    #[test]
    fn places_are_judged_each_on_their_own() {
        // A semaphore's slots 0 and 2 held on a majority, slot 1 on one node.
        let node = |extra: bool| {
            let mut held = vec![at(0, 1, 50), at(2, 3, 60)];
            if extra {
                held.push(at(1, 2, 70));
            }
            held
        };
        let reads = [node(true), node(false), node(false)];
        let found = on_majority(reads.iter().map(Vec::as_slice), 0, 2).unwrap();
        assert_eq!(found, vec![at(0, 1, 50), at(2, 3, 60)]);
    }

    #[test]
    fn an_inspection_round_ends_once_its_reads_decide() {
        let mut t = Tally::deciding(5, Decides::Holdings);
        let x = || Ok(Vote::holds(vec![at(0, 7, 10)]));
        t.record(x());
        t.record(x());
        assert_eq!(t.verdict(), None);
        t.record(x());
        assert_eq!(t.verdict(), Some(Verdict::Confirmed));
        assert_eq!(t.outcome().confirmed, 3);
        // Three nodes failing: never decided, unreachable once all are in.
        let mut t = Tally::deciding(5, Decides::Holdings);
        t.record(Ok(Vote::holds(Vec::new())));
        t.record(Ok(Vote::holds(Vec::new())));
        for _ in 0..2 {
            t.record(fail(FailureKind::Timeout));
            assert_eq!(t.verdict(), None);
        }
        t.record(fail(FailureKind::Timeout));
        assert_eq!(t.verdict(), Some(Verdict::Unreachable));
        assert_eq!(t.outcome().verdict, Verdict::Unreachable);
    }

    /// Every sequence of answers on 5 nodes (holder A, holder B, nothing,
    /// a failure): an inspection that decides early finds exactly the
    /// holders the full answers show, and one that cannot decide is
    /// `Unreachable` only once every node answered.
    #[test]
    fn an_inspection_decided_early_is_what_every_answer_says() {
        let answer = |code: usize| -> Answer {
            match code {
                0 => Ok(Vote::holds(vec![at(0, 1, 10)])),
                1 => Ok(Vote::holds(vec![at(0, 2, 10)])),
                2 => Ok(Vote::holds(Vec::new())),
                _ => fail(FailureKind::Timeout),
            }
        };
        let holders = |found: &[Held]| found.iter().map(|h| h.holder).collect::<Vec<_>>();
        for mut n in 0..4usize.pow(5) {
            let codes: Vec<usize> = (0..5)
                .map(|_| {
                    let c = n % 4;
                    n /= 4;
                    c
                })
                .collect();
            let mut full = Tally::deciding(5, Decides::Holdings);
            for &c in &codes {
                full.record(answer(c));
            }
            let last = full.outcome();
            let reads = last.reads.iter().filter_map(Read::holds);
            let fin = on_majority(reads.clone(), 5 - reads.count(), 3);
            let mut t = Tally::deciding(5, Decides::Holdings);
            for (i, &c) in codes.iter().enumerate() {
                t.record(answer(c));
                match t.verdict() {
                    Some(Verdict::Confirmed) => {
                        let reads = t.reads.iter().filter_map(Read::holds);
                        let now = on_majority(reads.clone(), 5 - reads.count(), 3).unwrap();
                        let fin = fin.as_ref().expect("decided early, decided at the end");
                        assert_eq!(holders(&now), holders(fin), "{codes:?} at {i}");
                        break;
                    }
                    Some(verdict) => {
                        assert_eq!((verdict, i), (Verdict::Unreachable, 4), "{codes:?}");
                        assert!(fin.is_err(), "{codes:?}");
                    }
                    None => assert!(i < 4, "{codes:?}: undecided with every answer in"),
                }
            }
        }
    }
}
