//! Acquisition: one round (`SET NX PX` on every node — for several resources
//! one all-or-nothing script per node —, a quorum within the validity) and
//! the retry policy around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Core;
use super::handoff::{Ticket, Woken};
use super::lease::Lease;
use super::slots::Slots;
use super::verdict::{answer_by, millis, no_quorum};
use crate::algorithm::{self, Outcome, Verdict};
use crate::cancel::CancelToken;
use crate::error::{Error, Wanted};
use crate::metrics;
use crate::transport::{
    Keys, MAX_PERMITS, Op, QUEUE_ALIVE, RESERVED, Role, elect_keys, gate_name, is_elect_lock,
    rw_key, rw_parts, slot_key,
};

/// The most resources one lock may hold at once.
pub(crate) const MAX_RESOURCES: usize = 128;

/// At most this many rounds that nobody won for a moment (a split vote, a
/// release still on its way) are re-tried at once, within a tenth of the
/// TTL and at most [`MAX_SPLIT_WAIT`].
const MAX_SPLITS: u32 = 5;
const MAX_SPLIT_WAIT: Duration = Duration::from_millis(100);
/// The pause before re-trying such a round: 1 ms plus up to 3 ms more at
/// random, so that the contenders fall out of step.
const SPLIT_PAUSE: Duration = Duration::from_millis(1);

/// What an acquisition takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// Every one of these resources (all or none).
    Resources(&'a [&'a str]),
    /// One permit of the semaphore `name`.
    Semaphore { name: &'a str, permits: u32 },
    /// The reader-writer lock `name`, as a reader or as its writer.
    Rw { name: &'a str, role: Role },
    /// The leadership of the election `name`: its lock key, always fenced.
    Election { name: &'a str },
}

/// Where a round goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
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

    fn exhausted(&self, attempts: u32) -> bool {
        self.retries.is_some_and(|retries| attempts > retries)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }
}

/// Why one acquisition round failed; the partial lock has been released.
enum Failed {
    /// Enough nodes hold the key for someone else, or the gate node says
    /// others queued first. `granted`: the gate node had granted it (the
    /// caller was first in its queue). `split`: nobody holds it on a
    /// majority — contenders split the votes.
    /// `reports`: a semaphore slot's round, the slots each node that
    /// answered holds. `behind`: the gate node said others queued first.
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
    /// proposed token: the nodes reported larger fence values, and the
    /// next round proposes above them. `seen`: the largest they reported;
    /// `then`: the failure it is once no more rounds are proposed.
    Stale { seen: u64, then: Box<Failed> },
}

impl Failed {
    fn kind(&self) -> metrics::Acquired {
        match self {
            Failed::Stale { then, .. } => then.kind(),
            Failed::Busy { .. } => metrics::Acquired::Busy,
            Failed::NoQuorum { .. } => metrics::Acquired::NoQuorum,
            Failed::TooSlow { .. } => metrics::Acquired::TooSlow,
        }
    }

    /// Whether the resource was held (also behind a stale fencing token).
    fn is_busy(&self) -> bool {
        match self {
            Failed::Busy { .. } => true,
            Failed::Stale { then, .. } => then.is_busy(),
            _ => false,
        }
    }

    /// The caller's error; for `Busy`, `wanted` and `held_here` say what
    /// was asked for and whether a guard of this client holds it.
    fn into_error(self, resource: &str, attempts: u32, busy: (Wanted, bool)) -> Error {
        match self {
            Failed::Stale { then, .. } => then.into_error(resource, attempts, busy),
            Failed::Busy { .. } => Error::Busy {
                resource: resource.to_owned(),
                attempts,
                wanted: busy.0,
                held_here: busy.1,
            },
            Failed::NoQuorum { outcome, .. } => no_quorum(resource, *outcome),
            Failed::TooSlow { elapsed, ttl } => Error::TooSlow {
                resource: resource.to_owned(),
                elapsed,
                ttl,
            },
        }
    }
}

impl Core {
    /// Acquires every one of `resources` for `ttl` (all or none), retrying
    /// as `patience` allows.
    ///
    /// The first round is a plain `SET NX` on every node. A caller that may
    /// retry and finds the resource held then queues on the first
    /// resource's gate node (see `transport/codec.rs`) with a round there,
    /// and the node wakes it when its turn comes. Once queued it asks the
    /// gate node first, and between rounds it sleeps until woken, its retry
    /// is due, the queue refresh (which keeps its place alive) or its
    /// deadline. Only a round made because its retry was due or a release
    /// woke it counts against the retries; the round that joins the queue
    /// and those that only keep the place do not.
    ///
    /// A semaphore's round tries one of its slots; a busy one goes on at
    /// once with the slot the nodes report free on the most nodes, until
    /// none is left (see `slots.rs`), and only then waits or gives up.
    pub(crate) fn acquire(
        &self,
        resources: &[&str],
        ttl: Duration,
        patience: Patience,
    ) -> Result<Arc<Lease>, Error> {
        self.acquire_target(Target::Resources(resources), ttl, patience)
    }

    /// As [`acquire`](Self::acquire), for any [`Target`]. The lease is
    /// registered for a shutdown to release; one won as the client shuts
    /// down is released at once (`Shutdown`).
    pub(crate) fn acquire_target(
        &self,
        target: Target<'_>,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Arc<Lease>, Error> {
        let _busy = self.enter()?;
        let lease = Arc::new(self.rounds(target, ttl, patience)?);
        if self.life.adopt(&lease) {
            Ok(lease)
        } else {
            lease.abandon(self);
            Err(Error::Shutdown)
        }
    }

    /// The rounds of an acquisition, until one wins or the patience ends.
    fn rounds(
        &self,
        target: Target<'_>,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Lease, Error> {
        let (mut keys, name, mut slots) = match target {
            Target::Resources(resources) => {
                let keys = checked_keys(resources)?;
                let name = display_name(&keys);
                (keys, name, None)
            }
            Target::Semaphore { name, permits } => {
                checked_semaphore(name, permits)?;
                let slots = Slots::new(permits, self.node_count(), self.quorum());
                let keys = slot_keys(name, slots.current());
                (keys, name.to_owned(), Some((name, permits, slots)))
            }
            Target::Rw { name, role } => {
                if name.is_empty() {
                    return Err(Error::argument(
                        "the lock name is empty; name what you lock",
                    ));
                }
                let key: Keys = Arc::from([Arc::from(rw_key(name, role))]);
                (key, name.to_owned(), None)
            }
            Target::Election { name } => {
                checked_election(name)?;
                let [lock, ..] = elect_keys(name);
                let key: Keys = Arc::from([Arc::from(lock)]);
                (key, name.to_owned(), None)
            }
        };
        if let Some(problem) = keys.iter().find_map(|k| self.transport.key_problem(k)) {
            return Err(Error::argument(problem));
        }
        let rw = matches!(target, Target::Rw { .. });
        let wanted = match target {
            Target::Resources(_) => Wanted::Lock,
            Target::Semaphore { .. } => Wanted::Permit,
            Target::Rw {
                role: Role::Read, ..
            } => Wanted::Read,
            Target::Rw { .. } => Wanted::Write,
            Target::Election { .. } => Wanted::Leadership,
        };
        let report = slots.as_ref().map(|(_, permits, _)| *permits);
        let ttl = self.whole_ttl(ttl)?;
        let name: Arc<str> = Arc::from(name);
        let started = metrics::Started::now();
        let cancelled = |attempts| {
            metrics::acquired(metrics::Acquired::Cancelled, attempts, &started);
            Err(Error::Cancelled {
                resource: name.to_string(),
            })
        };
        if patience.cancelled() {
            return cancelled(0);
        }
        // Only a single resource's waiters queue: a queue orders the
        // waiters of one key, and a lock on several keys waits for all of
        // them (it retries; a release of its first key still wakes the
        // waiters queued for that key).
        let queues = self.settings.notifications && keys.len() == 1;
        // A caller that may retry sleeps on a ticket between rounds; with
        // queues on, the ticket is also its place in the gate node's queue.
        let mut ticket = (patience.retries != Some(0))
            .then(|| self.waiters.enter(self.transport.gate_index(&keys[0])));
        let mut watch = None;
        // After this client's release woke a waiter, it queues behind.
        let mut gated = queues && self.waiters.yields(gate_name(&keys[0]));
        let mut attempts = 0u32;
        // Rounds nobody won for a moment, re-tried at once (see below).
        let mut splits = 0u32;
        // Those since the last call by the gate node (at most MAX_SPLITS).
        let mut burst = 0u32;
        // A semaphore's rounds on the next free slot, and fenced rounds
        // proposed again above a stale token: not counted either.
        let mut walked = 0u32;
        let mut restarts = 0u32;
        // Rounds that keep a waiter's place (joining the gate node's queue,
        // renewing it before the retry delay is up): not retries either.
        let mut keeps = 0u32;
        // When the next retry is due (its delay drawn once, kept across the
        // rounds that only keep the waiter's place).
        let mut retry_at: Option<Instant> = None;
        // The last wait ended with a wake-up: the gate node said a permit
        // (or the lock) came free, or may have said so.
        let mut woken_turn = false;
        // It said so to this waiter: the next rounds go to every node at
        // once (a lock's or an election's; a semaphore's slots and a
        // rw-lock's roles keep asking the gate node first).
        let mut called = false;
        let may_be_called = slots.is_none() && !rw;
        // The largest fence value the nodes reported to this acquisition:
        // its next fenced round proposes above it.
        let mut fence_seen = 0u64;
        let split_wait = (ttl / 10).min(MAX_SPLIT_WAIT);
        let mut splits_until = Instant::now() + split_wait;
        loop {
            if self.life.is_closed() {
                // Woken by the shutdown (or shut between rounds).
                self.leave(&keys, ticket.as_ref(), report);
                metrics::acquired(metrics::Acquired::Cancelled, attempts, &started);
                return Err(Error::Shutdown);
            }
            attempts = attempts.saturating_add(1);
            // Only a round that asks the gate node first takes part in its
            // queue: a first round is a plain `SET NX` everywhere.
            let member = (queues && gated).then(|| {
                ticket
                    .as_ref()
                    .map_or_else(|| Arc::from(""), |t| t.member().clone())
            });
            let route = match (gated, called && may_be_called) {
                (false, _) => Route::Plain,
                (true, false) => Route::Gated,
                (true, true) => Route::Called,
            };
            // A caller that will not try again leaves nothing that makes
            // others wait (a writer's mark).
            let waits = patience.retries != Some(0);
            let round = self.attempt(
                &keys,
                &name,
                ttl,
                (route, member),
                (report, fence_seen, waits),
            );
            if patience.cancelled() {
                // What a round took as it was cancelled is released like
                // the partial lock of any failed round.
                if let Ok(lease) = round {
                    lease.abandon(self);
                }
                self.leave(&keys, ticket.as_ref(), report);
                return cancelled(attempts);
            }
            let failed = match round {
                Ok(lease) => {
                    metrics::acquired(metrics::Acquired::Ok, attempts, &started);
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            // A stale fencing token: again at once, above what the nodes
            // reported (not counted against the retries, a few times).
            let failed = match failed {
                Failed::Stale { seen, then } => {
                    fence_seen = fence_seen.max(seen);
                    if restarts < MAX_SPLITS && patience.deadline.is_none_or(|d| Instant::now() < d)
                    {
                        restarts += 1;
                        continue;
                    }
                    *then
                }
                failed => failed,
            };
            // Nobody won yet, for a moment: the contenders split the votes
            // (a caller that does not queue; a queued waiter's next round
            // goes to the gate node, which lets one through), or the gate
            // node let this waiter through — or called a lock's waiter, its
            // turn come, and did not say others queued first — but a
            // majority refused (the holder's release is usually still on
            // its way to them; a called waiter is told "held" where the
            // gate node keeps a stray key, and gets no grant there). Again
            // after a short random pause, a few times, not counted against
            // the retries: `Busy` must mean that someone holds the resource.
            let queued = queues && ticket.is_some();
            let transient = matches!(failed, Failed::Busy { split: true, .. } if !queued)
                || matches!(failed, Failed::Busy { granted: true, .. })
                || (called
                    && may_be_called
                    && matches!(failed, Failed::Busy { behind: false, .. }));
            if transient
                && burst < MAX_SPLITS
                && Instant::now() < splits_until
                && patience.deadline.is_none_or(|d| Instant::now() < d)
            {
                splits += 1;
                burst += 1;
                let pause = algorithm::retry_delay(SPLIT_PAUSE, SPLIT_PAUSE * 3);
                let until = pause_until(pause, &patience);
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                continue;
            }
            // A semaphore's slot taken elsewhere: on to the slot the nodes
            // report free on the most of them. (A round that failed for want
            // of nodes — fewer than a majority answered — would fail the
            // same way on every other slot.)
            let reports = match &failed {
                Failed::Busy { reports, .. } => Some(reports),
                _ => None,
            };
            if let (Some((semaphore, _, slots)), Some(reports)) = (&mut slots, reports) {
                // A round the gate node stopped reports nothing. Woken, the
                // waiter knows a permit came free: it tries the other slots
                // at the gate node (one request each) rather than wait for
                // the next wake-up; otherwise the pass ends.
                let next = if reports.is_empty() && woken_turn {
                    slots.next_untried()
                } else {
                    slots.next(reports)
                };
                keys = slot_keys(semaphore, slots.current());
                if next.is_some() && patience.deadline.is_none_or(|d| Instant::now() < d) {
                    walked += 1;
                    if queues && ticket.is_some() {
                        watch.get_or_insert_with(|| self.transport.watch());
                        gated = true;
                    }
                    continue;
                }
            }
            let permanent = matches!(
                failed,
                Failed::NoQuorum {
                    permanent: true,
                    ..
                }
            );
            // Too short for these nodes: no retry can do better (this
            // round's answers, if any, are in the estimate already).
            if matches!(failed, Failed::TooSlow { .. } | Failed::NoQuorum { .. })
                && let Some(round_trip) = self.hopeless(ttl)
            {
                self.leave(&keys, ticket.as_ref(), report);
                metrics::acquired(metrics::Acquired::TooSlow, attempts, &started);
                return Err(Error::TooSlow {
                    resource: name.to_string(),
                    elapsed: round_trip,
                    ttl,
                });
            }
            // The first round and each retry; the rounds re-tried at once
            // or that only keep the waiter's place do not count.
            let tries = attempts - splits - walked - restarts - keeps;
            if permanent || patience.exhausted(tries) {
                self.leave(&keys, ticket.as_ref(), report);
                metrics::acquired(failed.kind(), attempts, &started);
                let held_here =
                    failed.is_busy() && self.life.holds(|lease| same_lock(lease, &keys, wanted));
                return Err(failed.into_error(&name, tries, (wanted, held_here)));
            }
            if queues && matches!(failed, Failed::Busy { .. }) {
                // Held (or queued): hear the gate node when the turn comes.
                watch.get_or_insert_with(|| self.transport.watch());
                if !gated {
                    // Queue at once: a round at the gate node, which grants
                    // it instead if it is free by then and nobody queued
                    // first. From now on, ask the gate node first. It
                    // takes a place, not a retry: retries still come after
                    // their delay (or a wake-up).
                    gated = true;
                    keeps += 1;
                    continue;
                }
            }
            let due = *retry_at.get_or_insert_with(|| {
                let pause =
                    algorithm::retry_delay(self.settings.retry_delay, self.settings.retry_jitter);
                pause_until(pause, &patience)
            });
            // A queued waiter (and a waiting writer's mark) is renewed at
            // least this often, however long the retry delay.
            let until = if queues || rw {
                due.min(pause_until(self.settings.queue_refresh, &patience))
            } else {
                due
            };
            let woken = match &mut ticket {
                Some(ticket) => ticket.wait(until, patience.cancel.as_ref()),
                // Only a caller that may not retry has none.
                None => Woken::TimedOut,
            };
            // Neither its turn (a release woke it) nor due: the next round
            // only keeps the place (a renewal, or a check after the
            // subscription came back).
            if woken != Woken::Turn && Instant::now() < due {
                keeps += 1;
            } else {
                retry_at = None;
            }
            woken_turn = matches!(woken, Woken::Turn | Woken::Resubscribed);
            called = woken == Woken::Turn;
            if called {
                // Its turn: a round that finds the release still on its way
                // to some nodes is re-tried at once, however long it waited.
                burst = 0;
                splits_until = Instant::now() + split_wait;
            }
            if woken == Woken::Cancelled {
                self.leave(&keys, ticket.as_ref(), report);
                return cancelled(attempts);
            }
        }
    }

    /// Takes `ticket`'s waiter out of its gate node's queue (without
    /// waiting); the node wakes the next waiter if the resource is free.
    /// `report`: a semaphore's, its number of slots (see [`attempt`]).
    ///
    /// [`attempt`]: Self::attempt
    fn leave(&self, keys: &Keys, ticket: Option<&Ticket<'_>>, report: Option<u32>) {
        if let Some(ticket) = ticket
            && self.settings.notifications
        {
            self.leave_as(keys, ticket.member().clone(), report);
        }
    }

    /// Takes `member` out of the gate node's queue for `keys` (unawaited).
    fn leave_as(&self, keys: &Keys, member: Arc<str>, report: Option<u32>) {
        let ttl = Duration::from_secs(1);
        // Sent however long the gate node's connection is busy: until the
        // member would have dropped out of the queue by itself.
        let expires = Instant::now() + QUEUE_ALIVE;
        let timeout = self.node_timeout(ttl);
        let mut request = self.request(Op::Leave, keys, &Arc::from(""), timeout, expires);
        request.queue = Some(member);
        request.report = report;
        self.transport.broadcast(request, &[]);
    }

    /// One acquisition round, sent as `route` says, in the gate node's
    /// queue as `member` (`None`: this client keeps no queues; `""`: not
    /// waiting). On failure the partial lock is released everywhere
    /// (without waiting).
    ///
    /// `report`: a semaphore slot's round, with its number of slots.
    /// `seen`: the largest fence value the nodes reported so far (0: none).
    fn attempt(
        &self,
        keys: &Keys,
        name: &Arc<str>,
        ttl: Duration,
        (route, member): (Route, Option<Arc<str>>),
        (report, seen, waits): (Option<u32>, u64, bool),
    ) -> Result<Lease, Failed> {
        let token = new_token();
        let start = Instant::now();
        let timeout = self.node_timeout(ttl);
        let by = answer_by(start, timeout, None);
        let ttl_ms = millis(ttl);
        // Readers exclude nobody but writers: nothing to fence.
        let reader = matches!(rw_parts(&keys[0]), Some((Role::Read, _)));
        // An election's lock is always fenced: its token is the term.
        let fenced = self.settings.fencing || is_elect_lock(&keys[0]);
        let proposed = (fenced && !reader).then(|| self.propose_fence(seen));
        let op = match proposed {
            Some(proposed) => Op::AcquireFenced {
                ttl_ms,
                proposed,
                idle_ms: millis(self.settings.fencing_idle),
            },
            None => Op::Acquire { ttl_ms },
        };
        let mut request = self.request(op, keys, &token, timeout, by);
        request.queue = member.clone();
        request.report = report;
        request.waits = waits;
        let pending = match route {
            // Refused by the gate node: held, or others queued first;
            // nothing was set anywhere, and a waiter keeps its place.
            Route::Gated => self
                .transport
                .start_gated_round(request, by)
                .ok_or(Failed::Busy {
                    granted: false,
                    split: false,
                    behind: true,
                    reports: Vec::new(),
                })?,
            Route::Called => self.transport.start_called_round(request, by),
            Route::Plain => self.transport.start_round(request),
        };
        let (outcome, gate) = pending.collect_with_gate(by);
        // In a round that takes part in the gate node's queue, its vote is
        // awaited until the deadline: a late "others queued first" still
        // outweighs the others. Not awaited in a plain round, or where the
        // gate node was failing when the round started (no gate then).
        let gate = gate.settled();
        metrics::round(metrics::RoundOp::Acquire, start);
        let valid_until = algorithm::valid_until(start, ttl, self.settings.drift_factor);
        // Less what a voter's clock jump learnt during the round took.
        let cut_until =
            self.transport
                .clocks()
                .holds_until(&outcome.voters, start, valid_until, self.quorum());
        // The gate node's word that others queued first outweighs a
        // majority of the other nodes: the resource is theirs next.
        let behind = gate.as_ref().is_some_and(|vote| vote.queued && !vote.yes);
        // Some nodes refused the proposed token as stale: unless the
        // others' refusals (or failures that will not heal) alone rule out
        // a majority, a round with a larger token may well be granted.
        // (Never when the gate node said others queued first: proposing
        // again would take the others ahead of them.)
        let stale = (!behind
            && matches!(outcome.verdict, Verdict::Refused | Verdict::Unreachable)
            && outcome.stale > 0
            && !outcome.permanent
            && outcome.confirmed + outcome.stale + outcome.failures.len() >= outcome.quorum)
            .then(|| outcome.fence.unwrap_or(0));
        let unsent = outcome.unsent.clone();
        let failed = match outcome.verdict {
            Verdict::Confirmed if behind => Failed::Busy {
                granted: false,
                split: false,
                behind: true,
                reports: Vec::new(),
            },
            Verdict::Confirmed if Instant::now() < cut_until => {
                log::debug!("redlock: acquired {keys:?} in {:?}", start.elapsed());
                if let Some(member) = member.clone().filter(|m| !m.is_empty())
                    && !gate.as_ref().is_some_and(|vote| vote.yes)
                {
                    // Won without the gate node: still queued there.
                    self.leave_as(keys, member, report);
                }
                let gone_by = self.keys_gone_by(start, ttl);
                let lease =
                    Lease::new(keys.clone(), name.clone(), token, ttl, valid_until, gone_by);
                let quorum = self.quorum();
                let clocks = self.transport.clocks().clone();
                return Ok(lease.with_fence(proposed).with_unsent(unsent).with_voters(
                    clocks,
                    quorum,
                    outcome.voters,
                    start,
                ));
            }
            Verdict::Confirmed => Failed::TooSlow {
                elapsed: start.elapsed(),
                ttl,
            },
            // Held: a majority answered (or the refusals alone rule it out).
            _ if outcome.held() => Failed::Busy {
                granted: gate.is_some_and(|vote| vote.yes),
                split: outcome.split,
                behind,
                reports: outcome.slots,
            },
            Verdict::Refused | Verdict::Unreachable => Failed::NoQuorum {
                permanent: outcome.permanent,
                outcome: Box::new(outcome),
            },
        };
        let failed = match stale {
            Some(seen) => Failed::Stale {
                seen,
                then: Box::new(failed),
            },
            _ => failed,
        };
        // Where the gate node granted it, this release also wakes the next
        // waiter: a round others deferred to hands the resource on — unless
        // a majority refused it. Then the resource is held elsewhere, and a
        // queued waiter keeps its turn (see `clean_up`).
        let keep = member.filter(|_| matches!(failed, Failed::Busy { .. } | Failed::Stale { .. }));
        self.clean_up(keys, &token, (start, ttl), keep, &unsent);
        log::debug!("redlock: round for {keys:?} failed");
        Err(failed)
    }

    /// The fencing token an acquisition proposes next: one more than the
    /// largest fence value the nodes reported to it (`seen`, from a round
    /// they refused as stale), never below the wall clock in
    /// microseconds (with the floor on), so that tokens keep growing after
    /// a resource's fence values expired or a node lost them. A node grants
    /// a fenced acquisition only above every fence value it stores, and
    /// stores the token with the grant: an acquisition that returned had it
    /// stored on a majority, and any later one's majority meets that
    /// majority in a node that grants only a larger token.
    fn propose_fence(&self, seen: u64) -> u64 {
        let floor = if self.settings.fencing_floor {
            wall_clock_micros()
        } else {
            0
        };
        floor.max(seen.saturating_add(1))
    }
}

/// Microseconds since the Unix epoch (0 for a clock before it): the floor
/// under every fencing token, so that tokens keep growing after a
/// resource's fence values expired or a node lost them.
fn wall_clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The resources as keys, or a `Config` error: none, an empty name, a
/// duplicate, or more than [`MAX_RESOURCES`].
fn checked_keys(resources: &[&str]) -> Result<Keys, Error> {
    match resources {
        [] => Err(Error::argument(
            "no resources given; name at least one resource to lock",
        )),
        [""] => Err(Error::argument(
            "the resource name is empty; name what you lock",
        )),
        _ if resources.iter().any(|r| reserved(r)) => Err(Error::argument(format!(
            "resource names starting with {} or `redlock:admitted`, are reserved for the \
             client's own keys; choose another name",
            RESERVED.map(|prefix| format!("`{prefix}`")).join(", ")
        ))),
        [one] => Ok(Arc::from([Arc::from(*one)])),
        _ if resources.len() > MAX_RESOURCES => Err(Error::argument(format!(
            "{} resources given; one lock holds at most {MAX_RESOURCES}",
            resources.len()
        ))),
        _ => {
            let mut seen = std::collections::HashSet::with_capacity(resources.len());
            for (index, resource) in resources.iter().enumerate() {
                if resource.is_empty() {
                    return Err(Error::argument(format!(
                        "resource #{index} has an empty name; name what you lock"
                    )));
                }
                if !seen.insert(*resource) {
                    return Err(Error::argument(format!(
                        "resource {resource:?} is listed twice; list each resource once"
                    )));
                }
            }
            Ok(resources.iter().map(|r| Arc::from(*r)).collect())
        }
    }
}

/// Whether `lease` is what keeps `keys` (asked for as `wanted`) from
/// this client: it holds one of them, or another key of the same lock — a
/// slot of the same semaphore, or the writer's side of the same
/// reader-writer lock (a read waits for a writer only; a write for both).
fn same_lock(lease: &Lease, keys: &Keys, wanted: Wanted) -> bool {
    lease.resources().any(|held| {
        let blocks = wanted != Wanted::Read || matches!(rw_parts(held), Some((Role::Write, _)));
        blocks && keys.iter().any(|key| gate_name(held) == gate_name(key))
    })
}

/// The client's own keys, which no resource may be named after.
fn reserved(resource: &str) -> bool {
    RESERVED.iter().any(|prefix| resource.starts_with(prefix))
        || resource.starts_with("redlock:admitted")
}

/// An election's name, or a `Config` error.
pub(crate) fn checked_election(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::argument(
            "the election name is empty; name what is led",
        ));
    }
    Ok(())
}

/// A semaphore's name and number of permits, or a `Config` error.
fn checked_semaphore(name: &str, permits: u32) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::argument(
            "the semaphore name is empty; name what the permits limit",
        ));
    }
    if permits == 0 {
        return Err(Error::argument(
            "a semaphore of 0 permits admits nobody; give it at least 1",
        ));
    }
    if permits > MAX_PERMITS {
        return Err(Error::argument(format!(
            "{permits} permits asked; a semaphore has at most {MAX_PERMITS}"
        )));
    }
    Ok(())
}

/// The one key of a round on a semaphore's slot.
fn slot_keys(name: &str, slot: u32) -> Keys {
    Arc::from([Arc::from(slot_key(name, slot))])
}

/// How errors name a lock: its resource, or its resources joined by `, `.
pub(crate) fn display_name(keys: &Keys) -> String {
    match &**keys {
        [one] => one.to_string(),
        many => many.iter().map(|k| &**k).collect::<Vec<_>>().join(", "),
    }
}

/// The end of a retry pause, never past the caller's deadline.
fn pause_until(pause: Duration, patience: &Patience) -> Instant {
    let now = Instant::now();
    let end = now.checked_add(pause).unwrap_or(now);
    patience.deadline.map_or(end, |deadline| end.min(deadline))
}

/// 20 bytes from the thread-local CSPRNG, hex-encoded (40 characters).
fn new_token() -> Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 20];
    rand::fill(&mut bytes);
    let mut token = String::with_capacity(40);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Arc::from(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_own_key_names_are_refused_as_resources() {
        for name in [
            "redlock-fence:a",
            "redlock-queue:a",
            "redlock-alive:a",
            "redlock-sem:a#0",
            "redlock-rw:a#w",
            "redlock:admitted",
        ] {
            let err = checked_keys(&[name]).unwrap_err().to_string();
            let prefix = name.split_inclusive(':').next().unwrap();
            assert!(err.contains(prefix), "{err} names {prefix}");
            assert!(checked_keys(&["ok", name]).is_err(), "{name}");
        }
        assert!(checked_keys(&["redlock-queue"]).is_ok());
    }

    #[test]
    fn tokens_are_long_hex_and_unique() {
        let tokens: std::collections::HashSet<_> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        for token in &tokens {
            assert_eq!(token.len(), 40);
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
