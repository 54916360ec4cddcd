//! An operator's questions: what holds a resource on a majority of the
//! nodes, and a lock's release whoever holds it (`Core::inspect`,
//! `Core::force_release`). One round each, to every node, waiting only
//! until the answers decide (see `algorithm::on_majority`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::Target;
use super::verdict::{answer_by, no_quorum};
use crate::algorithm::{self, Read, Verdict};
use crate::error::Error;
use crate::holding::Holding;
use crate::settings::NodeTimeout;
use crate::transport::{Kind, Op, Request, Transport};

/// What a read asks of the nodes: how long to wait for each, and how the
/// client counts drift.
pub(super) struct Ask<'a> {
    pub(super) transport: &'a Transport,
    pub(super) timeout: NodeTimeout,
    pub(super) drift_factor: f64,
}

/// What holds `target` on a majority of the nodes, each with its place: a
/// semaphore's slot, a reader-writer lock's writer (`0`) or a reader
/// (`1`), else `0`. With [`Op::ForceRelease`] (a lock only), the lock's
/// key is deleted on every node as it is read, and on the resource's gate
/// node the next waiter is woken. `NoQuorum` when the nodes that did not
/// answer could change the answer.
pub(super) fn holders(ask: &Ask<'_>, target: Target, op: Op) -> Result<Vec<(u32, Holding)>, Error> {
    target.check()?;
    let kind = match target {
        Target::Resources(resources) => Kind::Lock(resources),
        // Every slot is read: the slot named here is none of them.
        Target::Semaphore { name, permits } => Kind::Permit {
            semaphore: name,
            slot: 0,
            permits,
        },
        Target::Rw { name, .. } => Kind::Read { lock: name },
        Target::Election { name } => Kind::Leadership { election: name },
    };
    if let Some(problem) = ask.transport.key_problem(&kind) {
        return Err(Error::argument(problem));
    }
    let start = Instant::now();
    let by = answer_by(start, ask.timeout, None);
    let name = kind.names().collect::<Vec<_>>().join(", ");
    let mut request = Request::new(op.clone(), kind, Arc::from(""), ask.timeout, by);
    if op == Op::ForceRelease {
        // The gate node's copy wakes the next waiter.
        request.queue = Some(Arc::from(""));
    }
    let outcome = ask.transport.start_round(request).collect(by);
    let reads = outcome.reads.iter().filter_map(Read::holds);
    let unknown = ask.transport.len() - reads.clone().count();
    let found = algorithm::on_majority(reads, unknown, outcome.quorum);
    let (Verdict::Confirmed, Some(found)) = (outcome.verdict, found) else {
        return Err(no_quorum(&name, outcome));
    };
    let took = start.elapsed();
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

    /// The operator's release deletes whatever holds the key on every
    /// node, and the gate node wakes the head of its queue.
    #[test]
    fn an_operators_release_deletes_anyones_key_and_wakes_the_head() {
        let (nodes, core) = core_with(3, settings());
        for node in &nodes {
            node.put("r", "someone", Duration::from_secs(60));
        }
        let gate = core
            .transport
            .gate_index(&Kind::Lock(Arc::from([Arc::from("r")])));
        nodes[gate].enqueue("r", "other-client:7");
        let woken = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = woken.clone();
        nodes[gate].on_wake(move |member, _| seen.lock().push(member.to_owned()));
        assert!(core.force_release("r").unwrap(), "someone held it");
        super::super::tests::eventually("deleted everywhere", || {
            nodes.iter().all(|n| n.holder("r").is_none())
        });
        assert_eq!(*woken.lock(), ["other-client:7"]);
        assert!(!core.force_release("r").unwrap(), "nobody holds it now");
    }
}
