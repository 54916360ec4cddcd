//! An election's rounds beyond campaigning (which is an ordinary fenced
//! acquisition of the election's lock key): a leader proclaims its value
//! or clears it when it resigns, and anyone reads who leads.
//!
//! A read answers from a majority: the leader is whoever holds the lock
//! key, with a value it proclaimed, on a majority of the nodes. Each node
//! answers only with the value its lock key's holder proclaimed (see
//! `transport/protocol/kind/leadership.rs`), so a read never reports a value no leader
//! proclaimed, and never one of a leader whose lock a majority no longer
//! holds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handoff::Woken;
use super::lease::Lease;
use super::session::Core;
use super::verdict::{READ_TTL, answer_by, no_quorum};
use crate::algorithm::{self, Outcome, Proclaimed, Read, Verdict};
use crate::error::Error;
use crate::transport::{Kind, Op, Request, Value};

/// After a wake-up, how long reads follow closely ([`CHANGE_POLL`] apart)
/// until the change shows on a majority.
const CHANGE_LANDS: Duration = Duration::from_millis(200);

/// The pause between those reads.
const CHANGE_POLL: Duration = Duration::from_millis(5);

/// The leader a read found: its term and the latest value it proclaimed.
pub(crate) type Reading = Option<(u64, Arc<str>)>;

/// The same with the number of that proclamation, which an observer needs
/// to never step back to an earlier one.
pub(crate) type Seen = Option<Arc<Proclaimed>>;

impl Core {
    /// Sets `value` as the proclamation `seq` of the leader holding `lease`
    /// (the election `name`'s lock) in `term`, on a majority.
    ///
    /// `LockLost` (and the lease marked lost) when a majority no longer
    /// holds the lease's token; `NoQuorum` when too few nodes answered.
    pub(crate) fn proclaim(
        &self,
        lease: &Lease,
        name: &str,
        (term, seq): (u64, &mut u64),
        value: &str,
    ) -> Result<(), Error> {
        let _busy = self.enter()?;
        let value = Value(Arc::from(value));
        // Rounds that fail for want of nodes are tried again per the
        // client's retry policy, as an acquisition's, while the lease
        // lasts: a node slower than the per-node timeout for a moment (a
        // loaded host) must not cost a leader its proclamation.
        let mut retries = 0;
        let mut failed = None;
        loop {
            if lease.remaining().is_zero() {
                // Run out while trying: what the tries met says why.
                return Err(match failed {
                    Some(outcome) => no_quorum(name, outcome),
                    None => lease.lost_error(self.quorum()),
                });
            }
            // A number of its own for every attempt: one that failed may
            // still land on some nodes, and a node keeps the proclamation
            // with the larger number (the same number again is ignored).
            *seq += 1;
            let op = Op::Proclaim {
                term,
                seq: *seq,
                value: value.clone(),
            };
            let outcome = self.elect_round(lease, name, op);
            match outcome.verdict {
                Verdict::Confirmed => return Ok(()),
                Verdict::Refused => return Err(lease.lose_not_held(name, outcome)),
                Verdict::Unreachable
                    if outcome.permanent || retries == self.settings().retry_count =>
                {
                    return Err(no_quorum(name, outcome));
                }
                Verdict::Unreachable => {
                    retries += 1;
                    failed = Some(outcome);
                }
            }
            let pause =
                algorithm::retry_delay(self.settings().retry_delay, self.settings().retry_jitter);
            std::thread::sleep(pause.min(lease.remaining()));
        }
    }

    /// Clears the value the leader holding `lease` proclaimed, where it
    /// still leads (before its lock is released). Best effort: a value
    /// left behind is never read as anyone's, and the next leader
    /// overwrites it.
    pub(crate) fn clear_proclamation(&self, lease: &Lease, name: &str) {
        // Once shut down, the shutdown released the lock: nothing to clear.
        if let Ok(_busy) = self.enter() {
            let _ = self.elect_round(lease, name, Op::Resign);
        }
    }

    /// One round of an election command for the leader holding `lease`.
    fn elect_round(&self, lease: &Lease, name: &str, op: Op) -> Outcome {
        let ttl = lease.ttl();
        let start = Instant::now();
        let timeout = self.nodes().node_timeout(ttl);
        let by = answer_by(start, timeout, Some(lease.valid_until()));
        let token = lease.token().clone();
        let request = Request::new(op, leadership(name), token, timeout, by);
        self.nodes().transport().start_round(request).collect(by)
    }

    /// Who leads the election `name`, as a majority of the nodes says.
    ///
    /// `NoQuorum` when too few nodes answered to tell.
    pub(crate) fn read_leader(&self, name: &str) -> Result<Reading, Error> {
        let _busy = self.enter()?;
        self.read_leader_as(name, None)
            .map(|(seen, _)| term_and_value(&seen))
    }

    /// [`read_leader`](Self::read_leader), registering `observer` (a
    /// ticket's member) on the election's gate node, to be woken when the
    /// leader's value changes; and whether the gate node's own answer
    /// (when it came in time) differs from the majority's: a change under
    /// way, applied there first.
    fn read_leader_as(
        &self,
        name: &str,
        observer: Option<&Arc<str>>,
    ) -> Result<(Seen, bool), Error> {
        super::acquire::checked_election(name)?;
        let kind = leadership(name);
        if let Some(problem) = self.nodes().transport().key_problem(&kind) {
            return Err(Error::argument(problem));
        }
        let start = Instant::now();
        let timeout = self.nodes().node_timeout(READ_TTL);
        let by = answer_by(start, timeout, None);
        let token: Arc<str> = Arc::from("");
        let mut request = Request::new(Op::ReadLeader, kind, token, timeout, by);
        request.queue = observer.cloned();
        let (read, gate) = self
            .nodes()
            .transport()
            .start_round(request)
            .collect_with_gate(by);
        let reading = leader_of(&read).ok_or_else(|| no_quorum(name, read))?;
        let at_gate = gate.now().map(|vote| {
            vote.read
                .as_ref()
                .and_then(Read::leader)
                .filter(|_| vote.yes)
                .cloned()
        });
        let differs = at_gate.is_some_and(|g| !same_leader(g.as_ref(), reading.as_ref()));
        Ok((reading, differs))
    }

    /// Reads who leads the election `name` until it differs from `last`
    /// (`None`: no read yet, so the first read is returned) or `deadline`
    /// passes (then `None`).
    ///
    /// Between reads it sleeps until the election's gate node wakes it
    /// (a proclamation or a resignation there, see `transport/protocol/kind/leadership.rs`),
    /// a re-established subscription to that node (a wake-up may have been
    /// lost), the queue refresh (500 ms: a leader whose keys expired
    /// changes nothing the nodes could announce; each read also renews the
    /// observer's registration), or the deadline. A read that fails is
    /// logged and tried again at the next of these. A wake-up comes when
    /// the gate node applied the change; the other nodes may not have yet,
    /// so for [`CHANGE_LANDS`] after one, reads come [`CHANGE_POLL`] apart.
    #[cfg(test)]
    pub(crate) fn next_leader(
        &self,
        name: &str,
        last: Option<&Seen>,
        deadline: Option<Instant>,
    ) -> Result<Option<Seen>, Error> {
        self.next_leader_after(name, last, deadline, &mut false)
    }

    /// [`next_leader`](Self::next_leader), for an observer that asks again
    /// and again: `followed` says whether a read already found the gate
    /// node ahead of the majority since `last` was reported (a gate node
    /// that missed the leader's lock key stays ahead for as long as the
    /// leadership lasts: it is followed closely once per change reported,
    /// not once per call).
    pub(crate) fn next_leader_after(
        &self,
        name: &str,
        last: Option<&Seen>,
        deadline: Option<Instant>,
        followed: &mut bool,
    ) -> Result<Option<Seen>, Error> {
        super::acquire::checked_election(name)?;
        let _busy = self.enter()?;
        let kind = leadership(name);
        if let Some(problem) = self.nodes().transport().key_problem(&kind) {
            return Err(Error::argument(problem));
        }
        let notified = self.settings().notifications;
        // The subscribers run while someone observes.
        let _watch = notified.then(|| self.nodes().transport().watch());
        let mut ticket = self
            .nodes()
            .waiters()
            .enter(self.nodes().transport().gate_index(&kind));
        // A shutdown that woke the tickets before this one existed.
        if self.is_closed() {
            return Err(Error::Shutdown);
        }
        // When a wake-up came: the gate node applied a change that the other
        // nodes may not have yet (a majority read can still show the old
        // state), so reads follow closely for a while.
        let mut woken: Option<Instant> = None;
        loop {
            let observer = notified.then(|| ticket.member().clone());
            match self.read_leader_as(name, observer.as_ref()) {
                Ok((now, _)) if is_news(last, &now) => {
                    *followed = false;
                    return Ok(Some(now));
                }
                // The gate node has it already: a wake-up we may have
                // registered too late for.
                Ok((_, true)) if !*followed => {
                    *followed = true;
                    woken = Some(Instant::now());
                }
                Ok(_) => {}
                Err(err) => log::debug!("redlock: reading the leader of {name:?}: {err}"),
            }
            let now = Instant::now();
            let next = match woken {
                Some(at) if now < at + CHANGE_LANDS => now + CHANGE_POLL,
                _ => now + self.settings().queue_refresh,
            };
            let until = deadline.map_or(next, |d| d.min(next));
            match ticket.wait(until, None) {
                // Woken by the shutdown.
                _ if self.is_closed() => return Err(Error::Shutdown),
                Woken::Turn | Woken::Resubscribed => woken = Some(Instant::now()),
                _ if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
                _ => {}
            }
        }
    }
}

/// The leadership of the election `name`, which its commands are about.
fn leadership(name: &str) -> Kind {
    Kind::Leadership {
        election: Arc::from(name),
    }
}

/// A reading without the proclamation's number.
pub(crate) fn term_and_value(seen: &Seen) -> Reading {
    seen.as_ref().map(|p| (p.term, p.value.clone()))
}

/// Whether two readings name the same leader and value (whatever the
/// numbers of their proclamations).
fn same_leader(a: Option<&Arc<Proclaimed>>, b: Option<&Arc<Proclaimed>>) -> bool {
    a.map(|p| (p.term, &p.value)) == b.map(|p| (p.term, &p.value))
}

/// Whether an observer whose last item was `last` reports `now`: another
/// leader or value — but never a proclamation of the same leader older
/// than the one it reported (a proclamation that failed may have landed on
/// a few nodes, and a later read's majority may miss them).
fn is_news(last: Option<&Seen>, now: &Seen) -> bool {
    let Some(last) = last else {
        return true;
    };
    match (last, now) {
        (Some(l), Some(n)) if l.term == n.term => n.seq > l.seq && n.value != l.value,
        _ => !same_leader(last.as_ref(), now.as_ref()),
    }
}

/// What a read round says: `Some(Some(..))` a leader on a majority (the
/// round's yes votes are the nodes that agree on its term: see
/// `Tally`), `Some(None)` no leader with a value on a majority, `None`
/// too few answers to tell.
fn leader_of(read: &Outcome) -> Option<Seen> {
    match read.verdict {
        Verdict::Confirmed => {
            let reads = || read.reads.iter().filter_map(Read::leader);
            let term = reads()
                .map(|r| r.term)
                .max_by_key(|t| reads().filter(|r| r.term == *t).count())?;
            // The leader's latest proclamation among the nodes that hold it.
            let latest = reads().filter(|r| r.term == term).max_by_key(|r| r.seq)?;
            Some(Some(latest.clone()))
        }
        // No term on a majority: nobody leads (or the next leader has not
        // proclaimed yet, and its campaign has not returned).
        Verdict::Refused => Some(None),
        Verdict::Unreachable => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Proclaimed, Tally, Vote};
    use crate::error::{FailureKind, NodeFailure};

    fn read(term: u64, seq: u64, value: &str) -> Vote {
        Vote::proclaimed(Proclaimed {
            term,
            seq,
            value: Arc::from(value),
        })
    }

    fn outcome(votes: Vec<Result<Vote, NodeFailure>>) -> Outcome {
        let mut tally = Tally::new(5);
        for vote in votes {
            tally.record(vote);
        }
        tally.outcome()
    }

    fn failed() -> Result<Vote, NodeFailure> {
        Err(NodeFailure::new(Arc::from("n"), FailureKind::Timeout, "t"))
    }

    #[test]
    fn a_term_on_a_majority_leads_with_its_latest_value() {
        let found = leader_of(&outcome(vec![
            Ok(read(7, 1, "a")),
            Ok(read(7, 2, "b")),
            Ok(read(7, 1, "a")),
            Ok(read(6, 9, "old")),
            failed(),
        ]));
        assert_eq!(
            found.map(|s| term_and_value(&s)),
            Some(Some((7, Arc::from("b"))))
        );
    }

    fn seen(term: u64, seq: u64, value: &str) -> Seen {
        Some(Arc::new(Proclaimed {
            term,
            seq,
            value: Arc::from(value),
        }))
    }

    #[test]
    fn an_observer_never_steps_back_to_an_older_proclamation_of_its_leader() {
        // "b" was proclaimed as number 2 and failed, landing on a few
        // nodes; a read whose majority missed them shows "a" (number 1).
        let last = seen(7, 2, "b");
        assert!(!is_news(Some(&last), &seen(7, 1, "a")));
        assert!(is_news(Some(&last), &seen(7, 3, "c")), "a later one");
        assert!(
            !is_news(Some(&last), &seen(7, 3, "b")),
            "the same value again"
        );
        assert!(is_news(Some(&last), &seen(8, 1, "a")), "another leader");
        assert!(is_news(Some(&last), &None), "no leader");
        assert!(is_news(Some(&None), &seen(7, 1, "a")));
        assert!(!is_news(Some(&None), &None));
        assert!(is_news(None, &None), "the first item");
    }

    #[test]
    fn a_majority_without_a_proclaimed_leader_is_no_leader() {
        let found = leader_of(&outcome(vec![
            Ok(read(7, 1, "a")),
            Ok(read(7, 1, "a")),
            Ok(Vote::NO),
            Ok(Vote::NO),
            Ok(Vote::NO),
        ]));
        assert_eq!(found, Some(None));
    }

    #[test]
    fn split_terms_are_no_leader_and_too_few_answers_decide_nothing() {
        // Two terms, neither on a majority (a hand-off under way): no
        // leader holds a majority.
        let split = outcome(vec![
            Ok(read(7, 1, "a")),
            Ok(read(7, 1, "a")),
            Ok(read(8, 1, "b")),
            Ok(read(8, 1, "b")),
            Ok(Vote::NO),
        ]);
        assert_eq!(leader_of(&split), Some(None));
        // Two say a leader, one none, two failed: nothing to tell.
        let short = outcome(vec![
            Ok(read(7, 1, "a")),
            Ok(read(7, 1, "a")),
            Ok(Vote::NO),
            failed(),
            failed(),
        ]);
        assert_eq!(leader_of(&short), None);
        assert_eq!(short.verdict, Verdict::Unreachable);
    }

    #[test]
    fn a_read_round_waits_for_the_nodes_that_decide_the_term() {
        let mut tally = Tally::new(5);
        for vote in [read(5, 1, "a"), read(5, 1, "a"), read(6, 1, "b")] {
            tally.record(Ok(vote));
            assert_eq!(tally.verdict(), None, "three yes votes, but split");
        }
        tally.record(Ok(read(6, 1, "b")));
        assert_eq!(tally.verdict(), None);
        tally.record(Ok(read(6, 2, "c")));
        assert_eq!(tally.verdict(), Some(Verdict::Confirmed));
        let found = leader_of(&tally.outcome()).map(|s| term_and_value(&s));
        assert_eq!(found, Some(Some((6, Arc::from("c")))));
    }
}
