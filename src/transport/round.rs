//! One round: a request queued on every node, and the answers the workers
//! fill in. The caller sleeps until the verdict is decided, so it wakes once
//! per round, not once per answer.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::algorithm::{Answer, Decides, Outcome, Tally, Verdict, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::human::Human;
use crate::settings::NodeTimeout;

/// The answers of one round, shared between the caller and the workers.
pub(crate) struct RoundShared {
    state: Mutex<RoundState>,
    decided: Condvar,
}

struct RoundState {
    tally: Tally,
    answered: Vec<bool>,
    /// The resource's gate node (see `codec.rs`), and its vote once it came
    /// (`None` inside: it failed).
    gate: Option<(usize, Option<Option<Vote>>)>,
    /// Set once the caller has taken the outcome: later answers are ignored.
    closed: bool,
    /// Nodes the request never left the client for ([`Outcome::unsent`]).
    unsent: Vec<usize>,
    /// Nodes that confirmed before the caller took the outcome
    /// ([`Outcome::voters`]).
    voters: Vec<usize>,
    /// When the answers decided the verdict: a caller that collects after
    /// its deadline (a single node's round runs on its thread, the keeper
    /// collects its renewals one by one) does not count a confirmation
    /// decided after it.
    decided_at: Option<Instant>,
}

impl RoundShared {
    pub(crate) fn new(nodes: usize, decides: Decides) -> Arc<Self> {
        Arc::new(RoundShared {
            state: Mutex::new(RoundState {
                tally: Tally::deciding(nodes, decides),
                answered: vec![false; nodes],
                gate: None,
                closed: false,
                unsent: Vec::new(),
                voters: Vec::new(),
                decided_at: None,
            }),
            decided: Condvar::new(),
        })
    }

    /// Records that the request could not be queued for node `index`, and
    /// why: it never left the client.
    pub(crate) fn unsent(&self, index: usize, failure: NodeFailure) {
        self.state.lock().unsent.push(index);
        self.record(index, Err(failure));
    }

    /// Records node `index`'s answer (only its first; once the caller took
    /// the outcome, only the gate node's vote).
    pub(crate) fn record(&self, index: usize, answer: Answer) {
        let mut state = self.state.lock();
        if std::mem::replace(&mut state.answered[index], true) {
            return;
        }
        let gate_answered = match &mut state.gate {
            Some((gate, vote)) if *gate == index => {
                *vote = Some(answer.as_ref().ok().cloned());
                true
            }
            _ => false,
        };
        if !state.closed {
            if answer.as_ref().is_ok_and(|vote| vote.yes) {
                state.voters.push(index);
            }
            state.tally.record(answer);
        }
        let decided = !state.closed && state.tally.verdict().is_some();
        if decided && state.decided_at.is_none() {
            state.decided_at = Some(Instant::now());
        }
        if gate_answered || decided {
            self.decided.notify_one();
        }
    }
}

/// A round whose requests are queued; its answers are still to be collected.
pub(crate) struct PendingRound {
    pub(crate) round: Arc<RoundShared>,
    pub(crate) started: Instant,
    pub(crate) timeout: NodeTimeout,
    pub(crate) nodes: Arc<[Arc<str>]>,
    /// How long [`GateAnswer::settled`] waits for the gate node's vote
    /// (`started`: not at all).
    pub(crate) gate_until: Instant,
}

/// The gate node's vote in a round, now or once it comes: a caller never
/// waits for the gate node beyond the round's verdict unless it asks to.
pub(crate) struct GateAnswer {
    round: Arc<RoundShared>,
    /// Until when [`settled`](Self::settled) waits for it.
    until: Instant,
}

impl GateAnswer {
    /// The vote, waiting for it as long as its round asked: until the
    /// round's deadline in a round that takes part in the queue (see
    /// `Transport::start_gated_round` and `start_called_round`), not at all
    /// in a plain one or where the gate node was failing when it started.
    pub(crate) fn settled(&self) -> Option<Vote> {
        self.round.gate_vote(self.until)
    }

    /// The vote if it came (`None`: not yet, it failed, or no gate).
    pub(crate) fn now(&self) -> Option<Vote> {
        self.round.gate_vote(Instant::now())
    }

    /// The vote, waiting for it until `until` at most.
    pub(crate) fn by(&self, until: Instant) -> Option<Vote> {
        self.round.gate_vote(until)
    }
}

impl RoundShared {
    /// Marks node `index` as the resource's gate node: its vote is kept.
    pub(crate) fn gate_on(&self, index: usize) {
        self.state.lock().gate = Some((index, None));
    }

    /// The gate node's vote, waiting for it until `until` at most (`None`:
    /// no gate, it failed, or no answer by then).
    pub(crate) fn gate_vote(&self, until: Instant) -> Option<Vote> {
        let mut state = self.state.lock();
        loop {
            match &state.gate {
                Some((_, Some(vote))) => return vote.clone(),
                None => return None,
                Some((_, None)) => {}
            }
            if self.decided.wait_until(&mut state, until).timed_out() {
                return None;
            }
        }
    }
}

impl PendingRound {
    /// Like [`collect`](Self::collect), and the gate node's vote, which may
    /// come later (see [`GateAnswer`]).
    pub(crate) fn collect_with_gate(self, wait_until: Instant) -> (Outcome, GateAnswer) {
        let gate = GateAnswer {
            round: self.round.clone(),
            until: self.gate_until,
        };
        (self.collect(wait_until), gate)
    }

    /// Waits until the outcome is decided or `wait_until` passes; nodes that
    /// have not answered by then count as timed out.
    pub(crate) fn collect(self, wait_until: Instant) -> Outcome {
        let mut state = self.round.state.lock();
        while state.tally.verdict().is_none() {
            if self
                .round
                .decided
                .wait_until(&mut state, wait_until)
                .timed_out()
            {
                break;
            }
        }
        state.closed = true;
        let waited = self.started.elapsed();
        let confirmed = state.tally.verdict() == Some(Verdict::Confirmed);
        if confirmed && state.decided_at.is_some_and(|at| at > wait_until) {
            // Confirmed too late: as if no node had answered by then. (A
            // refusal or failures that came late still say what happened.)
            let mut late = Tally::new(state.answered.len());
            for index in 0..state.answered.len() {
                late.record(Err(
                    self.missing(index, wait_until.saturating_duration_since(self.started))
                ));
            }
            let mut outcome = late.outcome();
            outcome.unsent = std::mem::take(&mut state.unsent);
            return outcome;
        }
        let decided_early = state.tally.verdict().is_some();
        let RoundState {
            tally,
            answered,
            unsent,
            voters,
            ..
        } = &mut *state;
        if !decided_early {
            for (index, done) in answered.iter_mut().enumerate() {
                if !std::mem::replace(done, true) {
                    tally.record(Err(self.missing(index, waited)));
                }
            }
        }
        let mut outcome = tally.outcome();
        outcome.unsent = std::mem::take(unsent);
        outcome.voters = std::mem::take(voters);
        if outcome.verdict != Verdict::Confirmed {
            // Name the nodes the verdict did not wait for.
            for (index, _) in answered.iter().enumerate().filter(|(_, done)| !**done) {
                outcome.failures.push(NodeFailure::new(
                    self.nodes[index].clone(),
                    FailureKind::Unanswered,
                    "the other nodes had already made a majority impossible",
                ));
            }
        }
        outcome
    }

    /// The failure of a node that had not answered when the caller stopped
    /// waiting.
    fn missing(&self, index: usize, waited: std::time::Duration) -> NodeFailure {
        let node = self.nodes[index].clone();
        if waited + std::time::Duration::from_millis(1) >= self.timeout.value {
            let detail = format!("no answer within {}", self.timeout);
            return NodeFailure::timed_out(node, self.timeout.value, detail);
        }
        let detail = format!(
            "no answer within {}, when the caller's time ran out (the lock's validity, or the \
             time given to a shutdown)",
            Human(waited)
        );
        NodeFailure::new(node, FailureKind::Timeout, detail)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn round(nodes: usize) -> PendingRound {
        PendingRound {
            round: RoundShared::new(nodes, Decides::Verdict),
            started: Instant::now(),
            timeout: NodeTimeout::fixed(Duration::from_millis(100)),
            nodes: (0..nodes)
                .map(|i| Arc::from(format!("n{i}").as_str()))
                .collect(),
            gate_until: Instant::now(),
        }
    }

    /// A single node's round runs on the caller's thread, so its answer
    /// is in before the caller collects, however late it came: a
    /// confirmation decided after the deadline counts as no answer (an
    /// extension answered after the validity ran out never revives it).
    #[test]
    fn a_confirmation_decided_after_the_deadline_is_not_counted() {
        let pending = round(1);
        let deadline = pending.started;
        std::thread::sleep(Duration::from_millis(2));
        pending.round.record(0, Ok(Vote::YES));
        let outcome = pending.collect(deadline);
        assert_eq!(outcome.verdict, Verdict::Unreachable);
        assert_eq!(outcome.failures.len(), 1);
        assert_eq!(outcome.failures[0].kind(), FailureKind::Timeout);
    }

    /// Failures that decided late still say which node confirmed (the
    /// `LockLost` of a lease whose renewal timed out names them).
    #[test]
    fn a_late_failure_keeps_what_each_node_said() {
        let pending = round(3);
        let deadline = pending.started;
        std::thread::sleep(Duration::from_millis(2));
        pending.round.record(0, Ok(Vote::YES));
        for index in 1..3 {
            let failure = NodeFailure::new(Arc::from("n"), FailureKind::Timeout, "late");
            pending.round.record(index, Err(failure));
        }
        let outcome = pending.collect(deadline);
        assert_eq!(outcome.verdict, Verdict::Unreachable);
        assert_eq!(outcome.confirmed, 1);
    }

    #[test]
    fn a_verdict_decided_in_time_counts_however_late_it_is_collected() {
        let pending = round(3);
        pending.round.record(0, Ok(Vote::YES));
        pending.round.record(2, Ok(Vote::YES));
        // The deadline passed after the majority answered, before the
        // caller collected (the keeper collects its renewals one by one).
        let deadline = Instant::now();
        let outcome = pending.collect(deadline);
        assert_eq!(outcome.verdict, Verdict::Confirmed);
    }
}
