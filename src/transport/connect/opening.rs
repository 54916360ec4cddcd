//! A client's start: every node is opened at once, and `build()` waits for
//! their first answers only while they come. A node that does not answer
//! (a black hole, a paused process) is reported and connected in the
//! background, never waited for; no node's opening waits on another's.
//! (A cluster node is opened whole on a thread of its own: its map, then
//! its masters, each step within the connect timeout; one not opened when
//! the wait ends hands its link over later, see `cluster_opening.rs`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::conn::{Answered, FirstAnswer, NodeShared};

/// The shortest wait for the nodes that have not answered once a majority
/// has: a node that is up but was scheduled late (a loaded machine) still
/// answers within it, and its deployment mistakes are said by `build()`.
const STRAGGLER_FLOOR: Duration = Duration::from_millis(250);

/// The start-up's side: every node's first answer.
pub(crate) struct Answers {
    sender: Sender<Answered>,
    answers: Receiver<Answered>,
}

impl Answers {
    pub(crate) fn new() -> Self {
        let (sender, answers) = crossbeam_channel::unbounded();
        Answers { sender, answers }
    }

    /// Where node `index` tells its first answer.
    pub(crate) fn first(&self, index: usize) -> FirstAnswer {
        FirstAnswer::new(index, self.sender.clone())
    }

    /// Waits for the first answers of `nodes` (each with its
    /// [`FirstAnswer`]): until every node answered, or until a majority did and
    /// as long again has passed (at least [`STRAGGLER_FLOOR`]), and never
    /// past `timeout`. A node that has not answered then is marked down
    /// ("connecting in the background") and said once in the log; it
    /// counts as soon as it answers. Returns what to say at once: the
    /// Sentinel services no Sentinel knows.
    pub(crate) fn wait(
        self,
        nodes: &[(Arc<NodeShared>, FirstAnswer)],
        timeout: Duration,
    ) -> Vec<String> {
        let Answers { sender, answers } = self;
        drop(sender);
        let started = Instant::now();
        let hard = started + timeout;
        let quorum = crate::algorithm::quorum(nodes.len());
        let mut answered = vec![false; nodes.len()];
        let mut count = 0;
        let mut soft: Option<Instant> = None;
        let mut unknown = Vec::new();
        while count < nodes.len() {
            let until = soft.map_or(hard, |soft| soft.min(hard));
            let Ok((index, said)) = answers.recv_deadline(until) else {
                break;
            };
            unknown.extend(said);
            if let Some(seen) = answered.get_mut(index)
                && !*seen
            {
                *seen = true;
                count += 1;
            }
            if count >= quorum && soft.is_none() {
                soft = Some(Instant::now() + started.elapsed().max(STRAGGLER_FLOOR));
            }
        }
        let waited = started.elapsed();
        for ((shared, first), seen) in nodes.iter().zip(answered) {
            if !seen {
                first.give_up(|| shared.mark_unanswered(waited));
            }
        }
        unknown
    }
}
