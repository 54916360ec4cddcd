//! A held lock's state, and the two network operations on it: extend and
//! release, over the client's [`Nodes`]. Used by the guard (through the
//! session, `Core`) and by the keeper. A lease knows neither: whoever
//! changes a kept or watched lease tells the keeper (the session after a
//! caller's extension or release; the keeper itself after a renewal). A
//! loss needs no telling: the keeper drops the lease when it comes up.
//!
//! # Orderings
//!
//! * **One extension in flight per lease.** A caller's `extend` waits for an
//!   extension already in flight (the keeper's) to finish; the keeper skips a
//!   lease whose extension is in flight and is told when it ends.
//! * **Keys are never shortened.** An extension moves a key's expiry only
//!   later (see `transport/protocol/scripts/`), so one that reaches a node late —
//!   after a later one, through a replacement connection — changes nothing,
//!   and a failed or abandoned extension leaves the validity as it was. An
//!   extension to a shorter TTL shortens only the validity the guard claims
//!   (the keys outlive it, which is safe).
//! * **Every change reschedules.** Each change of TTL, validity or retry time
//!   bumps `epoch`, and the keeper is told of every change but a loss (see
//!   above); it drops entries of older epochs: renewal always follows the
//!   last change, whoever made it.
//! * **Release beats renewal.** `released` is set before the delete is
//!   queued; an extension decided afterwards reports the lease lost, and a
//!   compare-and-pexpire cannot recreate a deleted key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};

use super::nodes::Nodes;
use super::verdict::{answer_by, lock_lost, millis, no_quorum};
use crate::algorithm::{Outcome, Verdict};
use crate::cancel::CancelToken;
use crate::error::{Error, LostCause, NodeFailure};
use crate::metrics;
use crate::transport::{Clocks, Keys, Kind, Op, PendingRound, Request};

pub(crate) struct Lease {
    /// What it holds.
    kind: Kind,
    /// The keys it holds by (see `Kind::lock_keys`).
    resources: Keys,
    /// How errors and logs name it (the resources, joined by `, `).
    name: Arc<str>,
    token: Arc<str>,
    state: Mutex<LeaseState>,
    /// Signalled when an extension ends, for a caller's extension waiting on it.
    extension_ended: Condvar,
    /// The fencing token, on a fencing client. Never changes.
    fence: Option<u64>,
    /// The nodes its acquisition never left the client for (their queues
    /// refused it): nothing of it is there, so its release skips them.
    unsent: Vec<usize>,
    /// Cancelled once the lease stops being valid (see [`Lease::lost_token`]);
    /// made on first ask.
    lost_token: OnceLock<CancelToken>,
    /// The nodes' clocks, and the quorum: a node whose clock jumped ahead
    /// after it voted holds its key that much less (see [`Lease::until`]).
    clocks: Option<(Arc<Clocks>, usize)>,
    /// Callers' extensions waiting for one in flight (observed by tests).
    #[cfg(test)]
    pub(crate) queued_extensions: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Clone)]
struct LeaseState {
    /// The TTL last set on a majority of the nodes.
    ttl: Duration,
    /// Until when a majority is known to hold our token (drift deducted),
    /// unless a clock jumped since (see [`Lease::until`]).
    valid_until: Instant,
    /// The nodes that confirmed the round that set `valid_until`, and when
    /// it started.
    voters: Vec<usize>,
    granted: Instant,
    /// No key of ours can outlive this instant on any node.
    keys_gone_by: Instant,
    /// Validity ran out while kept alive, or nodes answered that our token
    /// is gone. Sticky: a lost lease is never renewed again.
    lost: bool,
    /// Released (or being released): never renew again.
    released: bool,
    /// Registered with the keeper thread.
    kept: bool,
    /// Someone holds its lost token: the keeper cancels it when the
    /// validity runs out (if it does not renew the lease).
    watched: bool,
    /// An extension is in flight.
    extending: bool,
    /// After a renewal failed for want of nodes: when the keeper retries.
    retry_at: Option<Instant>,
    /// Bumped by every change of `ttl`, `valid_until` or `retry_at`.
    epoch: u64,
    /// Why the last extension failed (refused, or nodes unreachable), and
    /// how many nodes confirmed it, for the `LockLost` error.
    failures: Vec<NodeFailure>,
    confirmed: usize,
    /// How it was lost, for the `LockLost` error: `NotHeld` once an
    /// extension found the token gone, else its validity ran out.
    cause: LostCause,
}

/// Who asks for an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    /// The guard's holder, with the TTL it wants: waits for an extension in
    /// flight.
    Caller(Duration),
    /// The keeper, for the lease as it was at `epoch`: skips a lease whose
    /// extension is in flight or that changed since, and renews with the TTL
    /// last set, read under the same lock that starts the extension.
    Keeper { epoch: u64 },
}

/// How long past the validity a caller's `extend` waits for an extension in
/// flight to end (it ends by then: its answers are awaited only until the
/// validity, and one that comes later does not count — see
/// `PendingRound::collect`).
const EXTENSION_SLACK: Duration = Duration::from_secs(1);

impl Lease {
    pub(crate) fn new(
        kind: Kind,
        name: Arc<str>,
        token: Arc<str>,
        ttl: Duration,
        valid_until: Instant,
        keys_gone_by: Instant,
    ) -> Self {
        Lease {
            name,
            resources: kind.lock_keys(),
            kind,
            token,
            state: Mutex::new(LeaseState {
                ttl,
                valid_until,
                voters: Vec::new(),
                granted: Instant::now(),
                keys_gone_by,
                lost: false,
                released: false,
                kept: false,
                watched: false,
                extending: false,
                retry_at: None,
                epoch: 0,
                failures: Vec::new(),
                confirmed: 0,
                cause: LostCause::Expired,
            }),
            extension_ended: Condvar::new(),
            fence: None,
            unsent: Vec::new(),
            lost_token: OnceLock::new(),
            clocks: None,
            #[cfg(test)]
            queued_extensions: Default::default(),
        }
    }

    /// With its fencing token.
    pub(crate) fn with_fence(mut self, fence: Option<u64>) -> Self {
        self.fence = fence;
        self
    }

    /// With the nodes that confirmed its acquisition (round started at
    /// `granted`), judged by `clocks` with `quorum`.
    pub(crate) fn with_voters(
        mut self,
        clocks: Arc<Clocks>,
        quorum: usize,
        voters: Vec<usize>,
        granted: Instant,
    ) -> Self {
        self.clocks = Some((clocks, quorum));
        let state = self.state.get_mut();
        state.voters = voters;
        state.granted = granted;
        self
    }

    /// Until when it is valid: `valid_until`, or sooner if the clock of a
    /// node it needs for its quorum jumped ahead since it voted (its key
    /// there expires early by the jump).
    fn until(&self, state: &LeaseState) -> Instant {
        match &self.clocks {
            Some((clocks, quorum)) => {
                clocks.holds_until(&state.voters, state.granted, state.valid_until, *quorum)
            }
            None => state.valid_until,
        }
    }

    /// Validity left: zero once it ran out or the lease was lost or
    /// released.
    fn left(&self, state: &LeaseState) -> Duration {
        if state.lost || state.released {
            return Duration::ZERO;
        }
        self.until(state).saturating_duration_since(Instant::now())
    }

    /// With the nodes its acquisition never left the client for.
    pub(crate) fn with_unsent(mut self, unsent: Vec<usize>) -> Self {
        self.unsent = unsent;
        self
    }

    /// The fencing token, on a fencing client.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The token the nodes hold for this lease (never shown anywhere).
    pub(super) fn token(&self) -> &Arc<str> {
        &self.token
    }

    /// What it holds.
    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The first resource.
    pub(crate) fn resource(&self) -> &str {
        self.resources.first().map_or("", |r| r)
    }

    /// How errors and logs name the lock.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Every resource, in the order given.
    pub(crate) fn resources(&self) -> impl ExactSizeIterator<Item = &str> {
        self.resources.iter().map(|r| &**r)
    }

    /// The TTL last set on a majority of the nodes.
    pub(crate) fn ttl(&self) -> Duration {
        self.state.lock().ttl
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.until(&self.state.lock())
    }

    /// Validity left: zero once it ran out or the lease was lost or released.
    pub(crate) fn remaining(&self) -> Duration {
        self.left(&self.state.lock())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.state.lock().lost
    }

    /// `LockLost` with the failures of the last failed extension.
    pub(crate) fn lost_error(&self, quorum: usize) -> Error {
        lost_error(&self.name, &self.state.lock(), quorum)
    }

    /// Marks the lease lost because a round's refusals showed its token
    /// gone (`outcome`), and returns that `LockLost`: what every later
    /// call on it reports too.
    pub(crate) fn lose_not_held(&self, name: &str, outcome: Outcome) -> Error {
        let lost_now = self.not_held(&mut self.state.lock(), &outcome);
        if lost_now {
            self.say_lost();
        }
        self.signal();
        lock_lost(name, outcome)
    }

    /// [`lose_not_held`](Self::lose_not_held), under the lease's lock;
    /// whether it was lost just now (see [`lose`](Self::lose)).
    fn not_held(&self, state: &mut LeaseState, outcome: &Outcome) -> bool {
        state.failures = outcome.failures.clone();
        state.confirmed = outcome.confirmed;
        state.cause = LostCause::NotHeld;
        self.lose(state)
    }

    /// Marks the lease lost (once) and says so in the log.
    pub(crate) fn mark_lost(&self) {
        let lost_now = self.lose(&mut self.state.lock());
        if lost_now {
            self.say_lost();
        }
        self.signal();
    }

    /// A token cancelled once this lease stops being valid: lost, released
    /// (or dropped), or its validity ran out. Cancelled at once if it
    /// already is. The first ask has the keeper watch the validity; `true`
    /// then, for the caller to tell the keeper.
    pub(crate) fn lost_token(&self) -> (CancelToken, bool) {
        let token = self.lost_token.get_or_init(CancelToken::new).clone();
        let first = !std::mem::replace(&mut self.state.lock().watched, true);
        self.signal();
        (token, first)
    }

    /// Cancels the lost token (if anyone asked for it) once the lease is
    /// no longer valid. Called after every change that can end it, with no
    /// lock held (cancelling wakes the token's sleepers). Not while an
    /// extension is in flight: one that got its majority just before the
    /// validity ran out moves it on when it is applied, and it signals then.
    pub(crate) fn signal(&self) {
        if let Some(token) = self.lost_token.get() {
            let over = {
                let state = self.state.lock();
                state.lost || state.released || (!state.extending && self.left(&state).is_zero())
            };
            if over {
                token.cancel();
            }
        }
    }

    /// Marks the lease lost, under its lock; true if it was not lost (nor
    /// released) before: the caller then says so with
    /// [`say_lost`](Self::say_lost) once the lock is released.
    fn lose(&self, state: &mut LeaseState) -> bool {
        let now = !state.lost && !state.released;
        if now {
            state.lost = true;
            state.epoch += 1;
        }
        now
    }

    /// Counts and logs a loss, with no lock held: the logger and the
    /// metrics recorder are the user's code.
    fn say_lost(&self) {
        metrics::lease_lost();
        log::warn!(
            "redlock: lost the lock on {:?}: its validity ran out or the nodes no longer hold it",
            self.name
        );
    }

    /// As if a change had moved the lease's schedule (a new epoch).
    #[cfg(test)]
    pub(crate) fn bump_epoch_for_test(&self) {
        self.state.lock().epoch += 1;
    }

    /// Whether the keeper renews it.
    pub(crate) fn is_kept(&self) -> bool {
        self.state.lock().kept
    }

    /// Whether the keeper has it in its schedule: kept alive, or its lost
    /// token watched.
    pub(crate) fn is_scheduled(&self) -> bool {
        let state = self.state.lock();
        state.kept || state.watched
    }

    /// Marks the lease kept alive; false if it already was.
    pub(crate) fn set_kept(&self, kept: bool) -> bool {
        std::mem::replace(&mut self.state.lock().kept, kept) != kept
    }

    /// For the keeper: the epoch and when to renew (kept alive) or to
    /// cancel the lost token (watched, not kept: when the validity runs
    /// out), or `None` once there is nothing left to do (released, lost, or
    /// neither kept nor watched).
    pub(crate) fn schedule(&self) -> Option<(u64, Instant)> {
        let state = self.state.lock();
        if state.released || state.lost {
            return None;
        }
        let until = self.until(&state);
        if !state.kept {
            return state.watched.then_some((state.epoch, until));
        }
        let due = match state.retry_at {
            Some(at) => at,
            None => until.checked_sub(state.ttl / 3).unwrap_or(until),
        };
        Some((state.epoch, due.min(until)))
    }

    /// Sends compare-and-pexpire to every node; [`PendingExtend::finish`]
    /// collects the answers. `Ok(None)`: the keeper asked while another
    /// extension was in flight.
    pub(crate) fn begin_extend<'a>(
        self: &'a Arc<Self>,
        nodes: &'a Nodes,
        who: Who,
    ) -> Result<Option<PendingExtend<'a>>, Error> {
        let asked = match who {
            Who::Caller(ttl) => Some(nodes.whole_ttl(ttl)?),
            Who::Keeper { .. } => None,
        };
        let mut state = self.state.lock();
        while state.extending {
            if let Who::Keeper { .. } = who {
                return Ok(None);
            }
            // The extension in flight is collected before the validity it
            // started with runs out; wait a little past that for its result.
            let until = self.until(&state);
            let until = until.checked_add(EXTENSION_SLACK).unwrap_or(until);
            #[cfg(test)]
            self.queued_extensions
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let timed_out = self
                .extension_ended
                .wait_until(&mut state, until)
                .timed_out();
            #[cfg(test)]
            self.queued_extensions
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            if timed_out && state.extending {
                return Err(lost_error(&self.name, &state, nodes.quorum()));
            }
        }
        if let Who::Keeper { epoch } = who
            && (epoch != state.epoch || state.released || state.lost)
        {
            return Ok(None);
        }
        if state.lost || state.released || self.left(&state).is_zero() {
            return Err(lost_error(&self.name, &state, nodes.quorum()));
        }
        let ttl = asked.unwrap_or(state.ttl);
        let start = Instant::now();
        // Counted before the requests go out: a release queued meanwhile must
        // outlive a key this extension may lengthen.
        state.keys_gone_by = state.keys_gone_by.max(nodes.keys_gone_by(start, ttl));
        state.extending = true;
        let cap = self.until(&state);
        drop(state);
        let timeout = nodes.node_timeout(ttl);
        let by = answer_by(start, timeout, Some(cap));
        let extend = Op::Extend {
            ttl_ms: millis(ttl),
        };
        let request = Request::new(extend, self.kind.clone(), self.token.clone(), timeout, by);
        // The keeper starts every due renewal before it collects any.
        let round = match who {
            Who::Caller(_) => nodes.transport().start_round(request),
            Who::Keeper { .. } => nodes.transport().start_queued_round(request),
        };
        Ok(Some(PendingExtend {
            lease: self,
            nodes,
            round: Some(round),
            start,
            ttl,
            answer_by: by,
            who,
        }))
    }

    /// Releases on every node without waiting for any answer: for a lease
    /// acquired by a round whose caller no longer wants it (cancelled).
    pub(crate) fn abandon(&self, nodes: &Nodes) {
        let (ttl, keys_gone_by) = {
            let mut state = self.state.lock();
            state.released = true;
            (state.ttl, state.keys_gone_by)
        };
        self.signal();
        nodes.release_unawaited(&self.kind, &self.token, ttl, keys_gone_by, &self.unsent);
    }

    /// Compare-and-delete on every node; `Ok` once a majority confirmed.
    /// Stops any keep-alive. If the gate node woke the next waiter, this
    /// client lets the waiters go first (see `handoff.rs`). `Shutdown` if
    /// it was released already (by a shutdown).
    pub(crate) fn release(&self, nodes: &Nodes) -> Result<(), Error> {
        match self.begin_release(nodes, false) {
            Some(pending) => pending.finish(nodes, None),
            None => Err(Error::Shutdown),
        }
    }

    /// Sends the compare-and-delete to every node; [`PendingRelease::finish`]
    /// collects the answers. `None` if it was released already. `queued`:
    /// never on the caller's thread, for a caller that sends many before it
    /// collects any (a shutdown; a single node then pipelines them).
    pub(crate) fn begin_release(&self, nodes: &Nodes, queued: bool) -> Option<PendingRelease<'_>> {
        let (ttl, keys_gone_by, was_lost) = {
            let mut state = self.state.lock();
            // A kept-alive lease whose validity ran out is lost, whether or
            // not the keeper woke to mark it yet.
            let lost = state.lost || (state.kept && self.left(&state).is_zero());
            if std::mem::replace(&mut state.released, true) {
                return None;
            }
            (state.ttl, state.keys_gone_by, lost)
        };
        self.signal();
        let start = Instant::now();
        let timeout = nodes.node_timeout(ttl);
        let by = answer_by(start, timeout, None);
        let request = nodes.release_request(&self.kind, &self.token, timeout, keys_gone_by.max(by));
        let round = nodes
            .transport()
            .start_release(request, queued, &self.unsent);
        Some(PendingRelease {
            lease: self,
            round,
            start,
            by,
            was_lost,
        })
    }
}

/// A release whose requests are out.
pub(crate) struct PendingRelease<'a> {
    lease: &'a Lease,
    round: PendingRound,
    start: Instant,
    /// One per-node timeout after the start.
    by: Instant,
    was_lost: bool,
}

impl PendingRelease<'_> {
    /// Counts the answers, until one per-node timeout after the start (or
    /// `cap`, if sooner).
    pub(crate) fn finish(self, nodes: &Nodes, cap: Option<Instant>) -> Result<(), Error> {
        let lease = self.lease;
        let by = cap.map_or(self.by, |cap| cap.min(self.by));
        let (outcome, gate) = self.round.collect_with_gate(by);
        metrics::round(metrics::RoundOp::Release, self.start);
        nodes.waiters().released(&lease.kind.gate_name(), gate, by);
        if self.was_lost {
            // What was known when it was lost, not what its keys' removal
            // found.
            return Err(lease.lost_error(nodes.quorum()));
        }
        match outcome.verdict {
            Verdict::Confirmed => {
                log::debug!(
                    "redlock: released {:?} in {:?}",
                    lease.name,
                    self.start.elapsed()
                );
                Ok(())
            }
            // Our token is gone from too many nodes: it expired.
            Verdict::Refused => {
                metrics::lease_lost();
                Err(lock_lost(&lease.name, outcome))
            }
            Verdict::Unreachable => Err(no_quorum(&lease.name, outcome)),
        }
    }
}

fn lost_error(resource: &str, state: &LeaseState, quorum: usize) -> Error {
    Error::lock_lost(
        resource,
        state.cause,
        (state.confirmed, quorum),
        state.failures.clone(),
    )
}

/// An extension whose requests are out; its answers are still to be collected.
/// Dropping it unfinished still ends the extension, so none can be stuck
/// "in flight". Whoever began it tells the keeper of the change.
pub(crate) struct PendingExtend<'a> {
    lease: &'a Arc<Lease>,
    nodes: &'a Nodes,
    round: Option<PendingRound>,
    start: Instant,
    ttl: Duration,
    answer_by: Instant,
    who: Who,
}

impl PendingExtend<'_> {
    /// Counts the answers (never past the old validity). On success the
    /// validity moves to `start + ttl - drift`.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        let Some(round) = self.round.take() else {
            return Err(self.lease.lost_error(self.nodes.quorum()));
        };
        let outcome = round.collect(self.answer_by);
        metrics::round(metrics::RoundOp::Extend, self.start);
        #[cfg(test)]
        self.nodes.hooks().before_extension_applies();
        let (lease, nodes) = (self.lease, self.nodes);
        let new_until = nodes.valid_until(self.start, self.ttl);
        let mut state = lease.state.lock();
        // A clock jump learnt during the round cut the validity it started
        // with short of the round's deadline, and it ran out: a majority may
        // have lacked our keys meanwhile, so the renewal does not revive it.
        let old_until = lease.until(&state);
        let cut_out = old_until < self.answer_by && old_until <= Instant::now();
        let mut lost_now = false;
        let result = match outcome.verdict {
            Verdict::Confirmed if cut_out && !state.lost && !state.released => {
                lost_now = lease.lose(&mut state);
                Err(lost_error(&lease.name, &state, nodes.quorum()))
            }
            Verdict::Confirmed if !state.lost && !state.released => {
                state.ttl = self.ttl;
                state.valid_until = new_until;
                state.voters = outcome.voters.clone();
                state.granted = self.start;
                state.retry_at = None;
                state.failures.clear();
                state.confirmed = 0;
                Ok(())
            }
            Verdict::Confirmed => Err(lost_error(&lease.name, &state, nodes.quorum())),
            Verdict::Refused => {
                lost_now = lease.not_held(&mut state, &outcome);
                Err(lock_lost(&lease.name, outcome))
            }
            Verdict::Unreachable => {
                // Kept for the `LockLost` if the validity runs out before
                // a renewal gets through.
                state.failures = outcome.failures.clone();
                state.confirmed = outcome.confirmed;
                if let Who::Keeper { .. } = self.who {
                    let retry = (self.ttl / 10).max(nodes.node_timeout(self.ttl).value);
                    state.retry_at = Instant::now().checked_add(retry);
                }
                Err(no_quorum(&lease.name, outcome))
            }
        };
        state.epoch += 1;
        state.extending = false;
        drop(state);
        if lost_now {
            lease.say_lost();
        }
        lease.extension_ended.notify_all();
        lease.signal();
        result
    }
}

impl Drop for PendingExtend<'_> {
    /// Ends an extension that was never finished (its round is still here).
    fn drop(&mut self) {
        if self.round.is_some() {
            {
                let mut state = self.lease.state.lock();
                state.extending = false;
                // Whatever it applied, no key was shortened: the validity
                // stands.
                state.epoch += 1;
            }
            self.lease.extension_ended.notify_all();
            self.lease.signal();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("resources", &self.resources)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}
