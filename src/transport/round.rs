//! One round: a request queued on every node, and the answers the workers
//! fill in. The caller sleeps until the verdict is decided, so it wakes once
//! per round, not once per answer.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::algorithm::{Answer, Outcome, Tally, Verdict, Vote};
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
}

impl RoundShared {
    pub(crate) fn new(nodes: usize) -> Arc<Self> {
        Arc::new(RoundShared {
            state: Mutex::new(RoundState {
                tally: Tally::new(nodes),
                answered: vec![false; nodes],
                gate: None,
                closed: false,
            }),
            decided: Condvar::new(),
        })
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
            state.tally.record(answer);
        }
        if gate_answered || (!state.closed && state.tally.verdict().is_some()) {
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
    /// The vote, waiting for it as long as its round asked (see
    /// `Transport::start_called_round`; other rounds do not wait).
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
        let decided_early = state.tally.verdict().is_some();
        let waited = self.started.elapsed();
        let RoundState {
            tally, answered, ..
        } = &mut *state;
        if !decided_early {
            for (index, done) in answered.iter_mut().enumerate() {
                if !std::mem::replace(done, true) {
                    tally.record(Err(self.missing(index, waited)));
                }
            }
        }
        let mut outcome = tally.outcome();
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
        let detail = if waited + std::time::Duration::from_millis(1) >= self.timeout.value {
            format!("no answer within {}", self.timeout)
        } else {
            format!(
                "no answer within {}, when the lock's validity ran out",
                Human(waited)
            )
        };
        NodeFailure::new(self.nodes[index].clone(), FailureKind::Timeout, detail)
    }
}
