//! An operator's questions: what holds a resource on a majority of the
//! nodes, and the release of a lock's holder, whoever it is
//! (`Core::inspect`, `Core::force_release`). A read is one round to every
//! node that waits only until the answers decide (see
//! `algorithm::on_majority`); a release adds one compare-and-delete round
//! and a wake-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::Target;
use super::nodes::Nodes;
use super::session::Core;
use super::verdict::{READ_TTL, answer_by, no_quorum};
use crate::algorithm::{self, Held, Read, Verdict};
use crate::error::Error;
use crate::holding::Holding;
use crate::settings::NodeTimeout;
use crate::transport::{Kind, OTHER_TYPE, Op, QUEUE_ALIVE, Request, Transport};

impl Core {
    /// What holds `target` on a majority of the nodes (see [`holders`]).
    pub(crate) fn inspect(&self, target: Target) -> Result<Vec<(u32, Holding)>, Error> {
        let _busy = self.enter()?;
        holders(&Ask::of(self.nodes()), target)
    }

    /// Releases the holder of `resource` that a majority agrees on,
    /// whoever it is; whether there was one (see [`release`]).
    pub(crate) fn force_release(&self, resource: &str) -> Result<bool, Error> {
        let _busy = self.enter()?;
        release(&Ask::of(self.nodes()), resource)
    }
}

/// What a read asks of the nodes: how long to wait for each, and how the
/// client counts drift.
struct Ask<'a> {
    transport: &'a Transport,
    timeout: NodeTimeout,
    drift_factor: f64,
}

impl Ask<'_> {
    /// An operator's read of `nodes`.
    fn of(nodes: &Nodes) -> Ask<'_> {
        Ask {
            transport: nodes.transport(),
            timeout: nodes.node_timeout(READ_TTL),
            drift_factor: nodes.settings().drift_factor,
        }
    }
}

/// What holds `target` on a majority of the nodes, each with its place: a
/// semaphore's slot, a reader-writer lock's writer (`0`) or a reader
/// (`1`), else `0`.
fn holders(ask: &Ask<'_>, target: Target) -> Result<Vec<(u32, Holding)>, Error> {
    let (found, took) = read(ask, kind_of(ask, target)?)?;
    Ok(found
        .into_iter()
        .map(|held| {
            let remaining = match held.remaining_ms {
                u64::MAX => Duration::MAX,
                ms => {
                    let left = Duration::from_millis(ms);
                    left.saturating_sub(took + algorithm::drift(left, ask.drift_factor))
                }
            };
            (held.place, Holding::new(remaining, held.fence))
        })
        .collect())
}

/// Releases the holder of `resource` that a majority of the nodes agrees
/// on, whoever it is; `false` when none does, and nothing is deleted (keys
/// on a minority may be a round under way, which deleting could cut below
/// the majority it counts on; they expire by their TTL). A second round
/// deletes the key only where it still holds that holder's token — a
/// holder that came after holds another and is never touched — and returns
/// once the holder is gone from a majority; then the gate node wakes the
/// next waiter, if the key is free there.
fn release(ask: &Ask<'_>, resource: &str) -> Result<bool, Error> {
    let kind = kind_of(ask, Target::Resources(Arc::from([Arc::from(resource)])))?;
    let Some(holder) = read(ask, kind.clone())?.0.first().map(|h| h.holder) else {
        return Ok(false);
    };
    if holder == OTHER_TYPE {
        return Err(Error::argument(format!(
            "{resource:?} is no lock: its key holds another type (a list, a hash…) on a \
             majority of the nodes; delete it by hand if it is not data"
        )));
    }
    let by = answer_by(Instant::now(), ask.timeout, None);
    let op = Op::ForceRelease { holder };
    let request = Request::new(op, kind.clone(), Arc::from(""), ask.timeout, by);
    let outcome = ask.transport.start_round(request).collect(by);
    if outcome.verdict != Verdict::Confirmed {
        return Err(no_quorum(resource, outcome));
    }
    // The gate node wakes the head of its queue where the key is free (a
    // leave of nobody: `leave.lua`).
    let expires = Instant::now() + QUEUE_ALIVE;
    let mut wake = Request::new(Op::Leave, kind, Arc::from(""), ask.timeout, expires);
    wake.queue = Some(Arc::from(""));
    ask.transport.broadcast(wake, &[]);
    Ok(true)
}

/// The kind `target` names, checked.
fn kind_of(ask: &Ask<'_>, target: Target) -> Result<Kind, Error> {
    target.check()?;
    // Every slot is read, and both sides of a reader-writer lock: the slot
    // named here (0) is none in particular, and either side reads the same.
    let kind = target.kind(0, false);
    match ask.transport.key_problem(&kind) {
        Some(problem) => Err(Error::argument(problem)),
        None => Ok(kind),
    }
}

/// One round that reads what holds `kind` on every node: the holders a
/// majority agrees on, and how long the round took; `NoQuorum` when the
/// nodes that did not answer could change the answer.
fn read(ask: &Ask<'_>, kind: Kind) -> Result<(Vec<Held>, Duration), Error> {
    let start = Instant::now();
    let by = answer_by(start, ask.timeout, None);
    let name = kind.names().collect::<Vec<_>>().join(", ");
    let request = Request::new(Op::Inspect, kind, Arc::from(""), ask.timeout, by);
    let mut outcome = ask.transport.start_round(request).collect(by);
    let reads = outcome.reads.iter().filter_map(Read::holds);
    let unknown = ask.transport.len() - reads.clone().count();
    match (
        outcome.verdict,
        algorithm::on_majority(reads, unknown, outcome.quorum),
    ) {
        (Verdict::Confirmed, Ok(found)) => Ok((found, start.elapsed())),
        (_, agreed) => {
            // What the nodes that answered agree on, not how many answered.
            outcome.confirmed = agreed.err().unwrap_or(0);
            Err(no_quorum(&name, outcome))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests::{LONG_WAIT, core_with, settings};
    use super::*;
    use crate::error::FailureKind;
    use crate::transport::fake::Behaviour;

    fn lock(resource: &str) -> Target {
        Target::Resources(Arc::from([Arc::from(resource)]))
    }

    /// A held node does not hold up what the others decide: two of three
    /// agree, and the answer comes while the third still holds its
    /// request (it would answer only when set back, or after 10 s).
    #[test]
    fn a_stalled_node_does_not_hold_up_an_answer_the_others_decide() {
        let mut slow = settings();
        slow.node_timeout = Some(Duration::from_secs(30));
        let (nodes, core) = core_with(3, slow);
        for node in &nodes[..2] {
            node.put("r", "tok", Duration::from_secs(10));
        }
        nodes[2].set(Behaviour::Hold);
        let started = Instant::now();
        let found = core.inspect(lock("r")).unwrap();
        assert!(started.elapsed() < LONG_WAIT, "waited for the held node");
        nodes[2].set(Behaviour::Normal);
        assert_eq!(found.len(), 1);
        assert!(found[0].1.remaining() <= Duration::from_secs(10));
        // Free on two of three: decided the same way.
        nodes[2].set(Behaviour::Hold);
        assert!(core.inspect(lock("free")).unwrap().is_empty());
        nodes[2].set(Behaviour::Normal);
    }

    #[test]
    fn too_few_answers_are_no_quorum_whatever_they_say() {
        let (nodes, core) = core_with(3, settings());
        nodes[0].put("r", "tok", Duration::from_secs(10));
        for node in &nodes[1..] {
            node.set(Behaviour::Fail(FailureKind::Connection));
        }
        for resource in ["r", "free"] {
            match core.inspect(lock(resource)) {
                Err(Error::NoQuorum { confirmed: 1, .. }) => {}
                other => panic!("{resource}: expected NoQuorum, got {other:?}"),
            }
        }
    }

    /// The operator's release deletes the holder a majority agrees on,
    /// and only it: a node where another holds the key (one that came
    /// after, there first) keeps it. The gate node wakes the head of its
    /// queue once the key is free there.
    #[test]
    fn an_operators_release_deletes_the_majoritys_holder_only_and_wakes_the_head() {
        let (nodes, core) = core_with(3, settings());
        let kind = Kind::Lock(Arc::from([Arc::from("r")]));
        let gate = core.nodes().transport().gate_index(&kind);
        for (i, node) in nodes.iter().enumerate() {
            let token = if i == (gate + 1) % 3 { "later" } else { "gone" };
            node.put("r", token, Duration::from_secs(60));
        }
        nodes[gate].enqueue("r", "other-client:7");
        let woken = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = woken.clone();
        nodes[gate].on_wake(move |member, _| seen.lock().push(member.to_owned()));
        assert!(core.force_release("r").unwrap(), "\"gone\" held a majority");
        super::super::tests::eventually("deleted where it held", || {
            nodes.iter().filter(|n| n.holder("r").is_none()).count() == 2
        });
        assert_eq!(nodes[(gate + 1) % 3].holder("r").as_deref(), Some("later"));
        // Woken once the release returned (sent, not awaited).
        super::super::tests::eventually("the head woken", || !woken.lock().is_empty());
        assert_eq!(*woken.lock(), ["other-client:7"]);
        // "later" holds one node: no majority holder, nothing deleted.
        assert!(!core.force_release("r").unwrap());
        assert_eq!(nodes[(gate + 1) % 3].holder("r").as_deref(), Some("later"));
    }
}
