//! A client: one round at a time, sent to every node, decided by the
//! crate's own tally ([`Tally`], `src/algorithm.rs`) as answers arrive,
//! and held for the crate's own validity ([`algorithm::valid_until`]).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::algorithm::{self, Decides, Tally, Verdict, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::node::{Reply, Token};

/// One node's answer to the round in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Not yet.
    Pending,
    /// The node's reply.
    Replied(Reply),
    /// A yes from a node in its quarantine.
    Quarantined,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Not holding and not trying.
    Idle,
    /// A round in flight.
    Acquiring {
        /// The slot tried.
        slot: u8,
        /// The time the round started (its validity counts from here).
        start: u64,
        /// The proposed fencing token, for a fenced lock.
        fence: Option<u64>,
        /// Each node's answer so far.
        answers: Vec<Answer>,
    },
    /// Holding, as the client believes, until `valid_until_us`.
    Holding {
        /// The slot held.
        slot: u8,
        /// The end of its validity, in µs of model time.
        valid_until_us: u64,
        /// Its fencing token.
        fence: Option<u64>,
    },
    /// Queued on the gate node, waiting for its turn: it asks again when
    /// woken, or when its timer is due (its retry, or the refresh that
    /// keeps its place alive).
    Waiting {
        /// When it last asked.
        since: u64,
        /// The gate node's wake-up reached it.
        woken: bool,
    },
    /// The client's process is gone: it does nothing more, and what it
    /// left on the nodes stays until it expires.
    Crashed,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    /// Rounds started so far (the next round's token is this).
    pub attempts: u8,
    /// The largest fence value a stale refusal reported.
    pub seen: u64,
    /// A wake-up that came while it was not waiting: its next wait ends
    /// at once (the crate keeps a wake-up for the next wait, too).
    pub woken_early: bool,
    /// Where it is.
    pub phase: Phase,
}

/// The instant model time 0 stands for: validity is computed with the
/// crate's `Instant` arithmetic, from here.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The end of a lease that started at `start` ms with `ttl` ms, in µs of
/// model time: the crate's [`algorithm::valid_until`].
pub fn valid_until_us(start: u64, ttl: u64, drift_factor: f64) -> u64 {
    let at = epoch() + Duration::from_millis(start);
    let until = algorithm::valid_until(at, Duration::from_millis(ttl), drift_factor);
    u64::try_from(until.duration_since(epoch()).as_micros()).unwrap_or(u64::MAX)
}

/// The answers as the crate's tally reads them.
fn tally(answers: &[Answer], fenced: bool) -> Tally {
    let mut tally = Tally::deciding(answers.len(), Decides::Acquisition { fenced });
    let failure = |kind| NodeFailure::new(Arc::from("node"), kind, "modelled");
    for answer in answers {
        match *answer {
            Answer::Pending => {}
            Answer::Replied(Reply::Granted) => tally.record(Ok(Vote::YES)),
            Answer::Replied(Reply::Held(token)) => {
                tally.record(Ok(Vote::held_by(&[token.client, token.attempt])));
            }
            Answer::Replied(Reply::Stale(fence)) => tally.record(Ok(Vote::stale(fence))),
            Answer::Replied(Reply::Released(_) | Reply::Refused | Reply::Behind) => {
                tally.record(Ok(Vote::NO));
            }
            Answer::Quarantined => tally.record(Err(failure(FailureKind::Quarantined))),
        }
    }
    tally
}

/// The round's decision so far (`None`: not decided yet), or when `give_up`, with every node
/// still pending counted as failed. `quorum` replaces the crate's quorum
/// in the mutation that halves it.
pub fn decide(
    answers: &[Answer],
    fenced: bool,
    quorum: Option<usize>,
    give_up: bool,
) -> Option<Verdict> {
    let tally = tally(answers, fenced);
    if let Some(quorum) = quorum {
        let yes = answers
            .iter()
            .filter(|a| **a == Answer::Replied(Reply::Granted))
            .count();
        if yes >= quorum {
            return Some(Verdict::Confirmed);
        }
    }
    if give_up {
        return Some(tally.outcome().verdict);
    }
    tally.verdict()
}

/// The largest fence value the round's stale refusals reported.
pub fn stale_fence(answers: &[Answer]) -> Option<u64> {
    tally(answers, true).outcome().fence
}

impl Client {
    /// A client that has not started.
    pub fn new() -> Client {
        Client {
            attempts: 0,
            seen: 0,
            woken_early: false,
            phase: Phase::Idle,
        }
    }

    /// The token of the round in flight (or the last one).
    pub fn token(&self, index: u8) -> Token {
        Token {
            client: index,
            attempt: self.attempts,
        }
    }

    /// It waits for its turn from `now` (at once woken, if a wake-up came
    /// early).
    pub fn wait(&mut self, now: u64) {
        self.phase = Phase::Waiting {
            since: now,
            woken: std::mem::take(&mut self.woken_early),
        };
    }

    /// Whether it holds, as it believes, at `now` ms.
    pub fn holds_validly(&self, now: u64) -> Option<(u8, Option<u64>)> {
        match self.phase {
            Phase::Holding {
                slot,
                valid_until_us,
                fence,
            } if now * 1000 < valid_until_us => Some((slot, fence)),
            _ => None,
        }
    }
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}
