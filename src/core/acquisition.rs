//! One acquisition call's state between its rounds, as a state machine:
//! given each failed round, it answers what comes next (another round now,
//! a short pause, a wait for a wake-up or the retry, or the end). It does
//! no I/O, so its decisions are unit-tested without nodes.

use std::time::{Duration, Instant};

use super::handoff::Woken;
use super::slots::Slots;
use crate::algorithm::{self, Outcome};
use crate::cancel::CancelToken;
use crate::metrics;
use crate::transport::Kind;

/// At most this many rounds that nobody won for a moment (a split vote, a
/// release still on its way) are re-tried at once, within a tenth of the
/// TTL and at most [`MAX_SPLIT_WAIT`]; as many stale-token restarts.
const MAX_SPLITS: u32 = 5;
const MAX_SPLIT_WAIT: Duration = Duration::from_millis(100);
/// The pause before re-trying such a round: 1 ms plus up to 3 ms more at
/// random, so that the contenders fall out of step.
const SPLIT_PAUSE: Duration = Duration::from_millis(1);

/// When to stop retrying, and what may cancel the wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct Patience {
    /// At most this many retries after the first round (`None`: no limit);
    /// rounds that only keep a waiter's place are not retries.
    pub(crate) retries: Option<u32>,
    /// No new round after this instant (`None`: no limit).
    pub(crate) deadline: Option<Instant>,
    /// Ends the wait at once, with `Error::Cancelled`.
    pub(crate) cancel: Option<CancelToken>,
}

impl Patience {
    /// At most `retries` more rounds.
    pub(crate) fn attempts(retries: u32) -> Self {
        Patience {
            retries: Some(retries),
            ..Patience::default()
        }
    }

    /// Rounds until `deadline` (`None`: forever).
    pub(crate) fn until(deadline: Option<Instant>) -> Self {
        Patience {
            deadline,
            ..Patience::default()
        }
    }

    /// Whether the caller may retry (one that may not waits on no ticket,
    /// and leaves no writer's mark).
    pub(super) fn waits(&self) -> bool {
        self.retries != Some(0)
    }

    pub(super) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    fn exhausted(&self, tries: u32) -> bool {
        self.retries.is_some_and(|retries| tries > retries) || self.past_deadline()
    }

    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The end of a pause, never past the caller's deadline.
    pub(super) fn pause_until(&self, pause: Duration) -> Instant {
        let now = Instant::now();
        let end = now.checked_add(pause).unwrap_or(now);
        self.deadline.map_or(end, |deadline| end.min(deadline))
    }
}

/// Where a round goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Every node at once, as a plain `SET NX` (a first round).
    Plain,
    /// The resource's gate node first, in its queue; the others once it
    /// granted (see `Transport::start_gated_round`).
    Gated,
    /// Every node at once, in the gate node's queue, whose vote is still
    /// awaited: for a waiter the gate node just called (its turn came), one
    /// round trip less per hand-off than [`Route::Gated`].
    Called,
}

/// Why one acquisition round failed; the partial lock has been released.
#[derive(Debug)]
pub(super) enum Failed {
    /// Enough nodes hold the key for someone else, or the gate node says
    /// others queued first. `granted`: the gate node had granted it.
    /// `split`: nobody holds it on a majority (contenders split the votes).
    /// `behind`: the gate node said others queued first. `reports`: a
    /// semaphore slot's round, the slots each node that answered holds.
    Busy {
        granted: bool,
        split: bool,
        behind: bool,
        reports: Vec<u64>,
    },
    /// Too many nodes failed. `permanent`: failures that will not heal by
    /// themselves (rejected credentials) alone rule out a majority.
    NoQuorum {
        outcome: Box<Outcome>,
        permanent: bool,
    },
    /// A majority granted it, too late for any validity to be left.
    TooSlow { elapsed: Duration, ttl: Duration },
    /// A fenced round that a majority would have granted but for a stale
    /// proposed token. `seen`: the largest fence value the nodes reported;
    /// `then`: the failure it is once no more rounds are proposed.
    Stale { seen: u64, then: Box<Failed> },
}

impl Failed {
    /// The gate node refused: others queued first (nothing was set).
    pub(super) fn behind() -> Failed {
        Failed::Busy {
            granted: false,
            split: false,
            behind: true,
            reports: Vec::new(),
        }
    }

    pub(super) fn kind(&self) -> metrics::Acquired {
        match self {
            Failed::Stale { then, .. } => then.kind(),
            Failed::Busy { .. } => metrics::Acquired::Busy,
            Failed::NoQuorum { .. } => metrics::Acquired::NoQuorum,
            Failed::TooSlow { .. } => metrics::Acquired::TooSlow,
        }
    }

    /// Whether the resource was held (also behind a stale fencing token).
    pub(super) fn is_busy(&self) -> bool {
        match self {
            Failed::Busy { .. } => true,
            Failed::Stale { then, .. } => then.is_busy(),
            _ => false,
        }
    }
}

/// What the call does after a failed round.
#[derive(Debug)]
pub(super) enum Next {
    /// Another round at once.
    Round,
    /// Another round after sleeping until then (a split vote's pause).
    Pause(Instant),
    /// Wait on the ticket until then (a wake-up, the retry, the queue's
    /// refresh), tell [`Acquisition::woken`], then another round.
    Wait(Instant),
    /// No round can do better: these nodes are too slow for the TTL.
    Hopeless(Duration),
    /// The end: the last round's failure, after this many tries.
    GiveUp(Failed, u32),
}

/// How many rounds of each kind a call made; only `tries` are retries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    /// Every round.
    pub(super) attempts: u32,
    /// Split votes re-tried at once.
    splits: u32,
    /// Those since the gate node last called this waiter.
    burst: u32,
    /// A semaphore's rounds on its next free slot.
    walked: u32,
    /// Fenced rounds proposed again above a stale token.
    restarts: u32,
    /// Rounds that only keep a waiter's place in the queue.
    keeps: u32,
}

impl Counts {
    /// The first round and each retry.
    pub(super) fn tries(&self) -> u32 {
        self.attempts - self.splits - self.walked - self.restarts - self.keeps
    }
}

/// The client's settings a call's decisions use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pacing {
    /// The retry delay and its jitter.
    pub(super) retry: (Duration, Duration),
    /// How often a queued waiter renews its place.
    pub(super) queue_refresh: Duration,
    /// This client keeps wake-up queues.
    pub(super) notifications: bool,
}

/// One acquisition call between its rounds.
#[derive(Debug)]
pub(super) struct Acquisition {
    /// What the next round asks for.
    kind: Kind,
    /// A semaphore's walk over its slots.
    slots: Option<Slots>,
    patience: Patience,
    pacing: Pacing,
    /// One key's waiters queue on its gate node.
    queues: bool,
    /// Comes back every queue refresh, queued or not (see `Kind::renews`).
    rw: bool,
    /// The gate node may call this waiter (a lock's, an election's).
    may_be_called: bool,
    /// Rounds ask the gate node first, in its queue.
    gated: bool,
    /// The gate node said it is this waiter's turn.
    called: bool,
    /// The last wait ended with a wake-up (or may have missed one).
    woken_turn: bool,
    /// The largest fence value the nodes reported: proposed above.
    fence_seen: u64,
    count: Counts,
    /// When the next retry is due, kept across rounds that keep a place.
    retry_at: Option<Instant>,
    split_wait: Duration,
    splits_until: Instant,
    /// The call now listens for wake-ups.
    watching: bool,
}

impl Acquisition {
    /// A call for `kind` (a semaphore's walks `slots`), with `ttl` checked.
    pub(super) fn new(
        kind: Kind,
        slots: Option<Slots>,
        (patience, pacing): (Patience, Pacing),
        ttl: Duration,
    ) -> Self {
        let (rw, may_be_called) = (kind.renews(), kind.may_be_called());
        let queues = pacing.notifications && kind.queues();
        let split_wait = (ttl / 10).min(MAX_SPLIT_WAIT);
        Acquisition {
            may_be_called,
            kind,
            slots,
            patience,
            pacing,
            queues,
            rw,
            gated: false,
            called: false,
            woken_turn: false,
            fence_seen: 0,
            count: Counts::default(),
            retry_at: None,
            split_wait,
            splits_until: Instant::now() + split_wait,
            watching: false,
        }
    }

    /// Queues behind at once when `behind` says this client's release just
    /// woke a waiter for these keys (asked only where the call queues: it
    /// takes that turn once, and may wait for the release's gate answer).
    pub(super) fn queue_behind(&mut self, behind: impl FnOnce() -> bool) {
        self.gated = self.queues && behind();
    }

    /// What the next round asks for.
    pub(super) fn kind(&self) -> &Kind {
        &self.kind
    }

    pub(super) fn patience(&self) -> &Patience {
        &self.patience
    }

    pub(super) fn count(&self) -> Counts {
        self.count
    }

    /// The largest fence value the nodes reported so far (0: none).
    pub(super) fn fence_seen(&self) -> u64 {
        self.fence_seen
    }

    /// Whether the call should listen for the gate node's wake-ups now.
    pub(super) fn watching(&self) -> bool {
        self.watching
    }

    /// Counts a new round; where it goes, and whether it takes part in the
    /// gate node's queue (a first round is a plain `SET NX` everywhere).
    pub(super) fn begin_round(&mut self) -> (Route, bool) {
        self.count.attempts = self.count.attempts.saturating_add(1);
        let route = match (self.gated, self.called && self.may_be_called) {
            (false, _) => Route::Plain,
            (true, false) => Route::Gated,
            (true, true) => Route::Called,
        };
        (route, self.queues && self.gated)
    }

    /// What comes after a failed round. `hopeless`: the quickest round trip
    /// when it leaves this TTL no chance.
    pub(super) fn after(
        &mut self,
        failed: Failed,
        hopeless: impl FnOnce() -> Option<Duration>,
    ) -> Next {
        let failed = match failed {
            Failed::Stale { seen, then } => {
                self.fence_seen = self.fence_seen.max(seen);
                if self.count.restarts < MAX_SPLITS && !self.patience.past_deadline() {
                    self.count.restarts += 1;
                    return Next::Round;
                }
                *then
            }
            failed => failed,
        };
        if let Some(next) = self.split(&failed).or_else(|| self.walk(&failed)) {
            return next;
        }
        if matches!(failed, Failed::TooSlow { .. } | Failed::NoQuorum { .. })
            && let Some(round_trip) = hopeless()
        {
            return Next::Hopeless(round_trip);
        }
        let permanent = matches!(
            failed,
            Failed::NoQuorum {
                permanent: true,
                ..
            }
        );
        if permanent || self.patience.exhausted(self.count.tries()) {
            return Next::GiveUp(failed, self.count.tries());
        }
        if self.queues && matches!(failed, Failed::Busy { .. }) {
            // Held (or queued): hear the gate node when the turn comes, and
            // join its queue at once — a place, not a retry.
            self.watching = true;
            if !self.gated {
                self.gated = true;
                self.count.keeps += 1;
                return Next::Round;
            }
        }
        Next::Wait(self.wait_until())
    }

    /// Nobody won yet, for a moment: a split vote (for a caller that does
    /// not queue), or the gate node let it through — or called a lock's
    /// waiter and did not say others queued first — but a majority refused
    /// (the holder's release is still on its way). Again after a short
    /// random pause, a few times: `Busy` must mean someone holds it.
    fn split(&mut self, failed: &Failed) -> Option<Next> {
        let queued = self.queues && self.patience.waits();
        let transient = matches!(failed, Failed::Busy { split: true, .. } if !queued)
            || matches!(failed, Failed::Busy { granted: true, .. })
            || (self.called
                && self.may_be_called
                && matches!(failed, Failed::Busy { behind: false, .. }));
        let now = Instant::now();
        if !transient
            || self.count.burst >= MAX_SPLITS
            || now >= self.splits_until
            || self.patience.past_deadline()
        {
            return None;
        }
        self.count.splits += 1;
        self.count.burst += 1;
        let pause = algorithm::retry_delay(SPLIT_PAUSE, SPLIT_PAUSE * 3);
        Some(Next::Pause(self.patience.pause_until(pause)))
    }

    /// A semaphore's slot taken elsewhere: on to the slot free on the most
    /// nodes (woken, with no reports: the untried ones), until the pass
    /// ends. The permit's slot moves on even when the pass ended.
    fn walk(&mut self, failed: &Failed) -> Option<Next> {
        let (Some(slots), Failed::Busy { reports, .. }) = (&mut self.slots, failed) else {
            return None;
        };
        let next = if reports.is_empty() && self.woken_turn {
            slots.next_untried()
        } else {
            slots.next(reports)
        };
        if let Kind::Permit { slot, .. } = &mut self.kind {
            *slot = slots.current();
        }
        if next.is_none() || self.patience.past_deadline() {
            return None;
        }
        self.count.walked += 1;
        if self.queues && self.patience.waits() {
            self.watching = true;
            self.gated = true;
        }
        Some(Next::Round)
    }

    /// Until the retry is due (its delay drawn once), or sooner to renew a
    /// queued waiter's place (or a waiting writer's mark).
    fn wait_until(&mut self) -> Instant {
        let (delay, jitter) = self.pacing.retry;
        let patience = &self.patience;
        let due = *self
            .retry_at
            .get_or_insert_with(|| patience.pause_until(algorithm::retry_delay(delay, jitter)));
        if self.queues || self.rw {
            due.min(self.patience.pause_until(self.pacing.queue_refresh))
        } else {
            due
        }
    }

    /// How the wait ended. Neither its turn nor the retry due: the next
    /// round only keeps the place. Called: a round that finds the release
    /// still on its way is re-tried at once, however long it waited.
    pub(super) fn woken(&mut self, woken: Woken) {
        let due = self.retry_at.unwrap_or_else(Instant::now);
        if woken != Woken::Turn && Instant::now() < due {
            self.count.keeps += 1;
        } else {
            self.retry_at = None;
        }
        self.woken_turn = matches!(woken, Woken::Turn | Woken::Resubscribed);
        self.called = woken == Woken::Turn;
        if self.called {
            self.count.burst = 0;
            self.splits_until = Instant::now() + self.split_wait;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Tally;

    const TTL: Duration = Duration::from_secs(10);

    /// A call whose retries are due 200 ms after a round.
    fn call(notifications: bool, patience: Patience) -> Acquisition {
        call_retrying(notifications, patience, Duration::from_millis(200))
    }

    fn call_retrying(notifications: bool, patience: Patience, delay: Duration) -> Acquisition {
        let kind = Kind::Lock(std::sync::Arc::from([std::sync::Arc::from("r")]));
        let pacing = Pacing {
            retry: (delay, Duration::ZERO),
            queue_refresh: Duration::from_secs(60),
            notifications,
        };
        Acquisition::new(kind, None, (patience, pacing), TTL)
    }

    fn busy(split: bool, granted: bool) -> Failed {
        Failed::Busy {
            granted,
            split,
            behind: false,
            reports: Vec::new(),
        }
    }

    fn never() -> Option<Duration> {
        None
    }

    #[test]
    fn a_stale_token_is_proposed_again_a_few_times_then_is_its_failure() {
        let mut call = call(false, Patience::attempts(0));
        for round in 1..=MAX_SPLITS {
            call.begin_round();
            let stale = Failed::Stale {
                seen: u64::from(round) * 10,
                then: Box::new(busy(false, false)),
            };
            assert!(matches!(call.after(stale, never), Next::Round));
            assert_eq!(call.fence_seen(), u64::from(round) * 10);
        }
        call.begin_round();
        let stale = Failed::Stale {
            seen: 1,
            then: Box::new(busy(false, false)),
        };
        match call.after(stale, never) {
            // Restarts are not tries: the first round is the one try.
            Next::GiveUp(Failed::Busy { .. }, 1) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            call.fence_seen(),
            u64::from(MAX_SPLITS) * 10,
            "kept the largest"
        );
    }

    #[test]
    fn a_split_vote_pauses_a_few_times_uncounted_then_waits_for_the_retry() {
        let mut call = call(false, Patience::attempts(3));
        for _ in 0..MAX_SPLITS {
            call.begin_round();
            assert!(matches!(
                call.after(busy(true, false), never),
                Next::Pause(_)
            ));
        }
        call.begin_round();
        assert!(matches!(
            call.after(busy(true, false), never),
            Next::Wait(_)
        ));
        assert_eq!(call.count().tries(), 1, "{:?}", call.count());
    }

    #[test]
    fn a_queued_caller_does_not_pause_on_a_split_vote() {
        let mut call = call(true, Patience::attempts(3));
        call.begin_round();
        // Held: it joins the queue at once, a place and not a try.
        assert!(matches!(call.after(busy(true, false), never), Next::Round));
        assert!(call.watching());
        assert_eq!(call.begin_round(), (Route::Gated, true));
        assert!(matches!(
            call.after(busy(true, false), never),
            Next::Wait(_)
        ));
        assert_eq!(call.count().tries(), 1, "{:?}", call.count());
    }

    #[test]
    fn a_call_ends_when_its_retries_are_spent_and_counts_only_tries() {
        // Due at once: the wait's end is the retry.
        let mut call = call_retrying(false, Patience::attempts(1), Duration::ZERO);
        call.begin_round();
        assert!(matches!(
            call.after(busy(false, false), never),
            Next::Wait(_)
        ));
        call.woken(Woken::TimedOut);
        call.begin_round();
        match call.after(busy(false, false), never) {
            Next::GiveUp(_, 2) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_round_short_of_nodes_or_time_asks_whether_it_is_hopeless() {
        let mut call = call(false, Patience::attempts(5));
        call.begin_round();
        let asked = std::cell::Cell::new(false);
        let hopeless = || {
            asked.set(true);
            Some(Duration::from_secs(1))
        };
        assert!(matches!(
            call.after(busy(false, false), hopeless),
            Next::Wait(_)
        ));
        assert!(
            !asked.get(),
            "a busy round says nothing of the nodes' speed"
        );
        call.begin_round();
        let short = Failed::NoQuorum {
            outcome: Box::new(Tally::new(3).outcome()),
            permanent: false,
        };
        assert!(matches!(call.after(short, hopeless), Next::Hopeless(_)));
    }

    #[test]
    fn a_permanent_failure_ends_the_call_at_once() {
        let mut call = call(false, Patience::until(None));
        call.begin_round();
        let refused = Failed::NoQuorum {
            outcome: Box::new(Tally::new(3).outcome()),
            permanent: true,
        };
        assert!(matches!(call.after(refused, never), Next::GiveUp(_, 1)));
    }

    #[test]
    fn a_wait_ended_early_only_keeps_the_place_and_a_turn_calls_the_waiter() {
        let mut call = call(true, Patience::attempts(1));
        call.begin_round();
        assert!(matches!(call.after(busy(false, false), never), Next::Round));
        call.begin_round();
        assert!(matches!(
            call.after(busy(false, false), never),
            Next::Wait(_)
        ));
        // Resubscribed before the retry is due: the next round is a
        // renewal, not a try.
        call.woken(Woken::Resubscribed);
        assert_eq!(call.begin_round(), (Route::Gated, true));
        assert_eq!(call.count().tries(), 1, "{:?}", call.count());
        assert!(matches!(
            call.after(busy(false, false), never),
            Next::Wait(_)
        ));
        // Its turn: the next round goes to every node at once, and counts.
        call.woken(Woken::Turn);
        assert_eq!(call.begin_round(), (Route::Called, true));
        assert_eq!(call.count().tries(), 2, "{:?}", call.count());
        // Called but refused by a majority (a release on its way): again
        // after a pause, and that round was no try.
        assert!(matches!(
            call.after(busy(false, false), never),
            Next::Pause(_)
        ));
        assert_eq!(call.count().tries(), 1, "{:?}", call.count());
    }

    #[test]
    fn only_a_call_that_queues_asks_whether_to_queue_behind() {
        let mut plain = call(false, Patience::attempts(3));
        plain.queue_behind(|| panic!("asked without queues"));
        assert_eq!(plain.begin_round(), (Route::Plain, false));
        let mut queued = call(true, Patience::attempts(3));
        queued.queue_behind(|| true);
        assert_eq!(queued.begin_round(), (Route::Gated, true));
    }
}
