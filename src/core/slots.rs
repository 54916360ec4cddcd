//! Which slot of a semaphore a round tries.
//!
//! A semaphore of `K` permits is `K` ordinary locks, its slots (see
//! `transport/protocol/kind/permit.rs`): a permit is a slot held on a majority, so at most
//! `K` holders follows from each slot's own mutual exclusion. Every node but
//! the gate answers a slot acquisition with the slots it holds, so after a
//! busy round the next one tries the slot free on the most nodes instead of
//! walking the slots one by one.
//!
//! A *pass* tries each slot at most once, skipping those the reports show
//! held on so many nodes that no majority can be free. It ends when no
//! candidate is left: then, and only then, every slot is taken as far as
//! this client can tell, and the caller waits (or `try_lock` answers
//! `None`).

/// A pass over one semaphore's slots.
#[derive(Debug)]
pub(crate) struct Slots {
    permits: u32,
    nodes: usize,
    quorum: usize,
    /// The slot the current round tries.
    current: u32,
    /// Slots tried, or known held, in this pass (bit `i`: slot `i`).
    done: u64,
}

impl Slots {
    /// A pass over `permits` slots (at most 64) on `nodes` nodes, starting
    /// at a random slot: contenders that start together spread out.
    pub(crate) fn new(permits: u32, nodes: usize, quorum: usize) -> Self {
        let permits = permits.clamp(1, 64);
        Slots {
            permits,
            nodes,
            quorum,
            current: rand::random_range(0..permits),
            done: 0,
        }
    }

    /// The slot to try now.
    pub(crate) fn current(&self) -> u32 {
        self.current
    }

    /// After a busy round with these reports (one set of held slots per
    /// node that reported): the next slot to try at once, or `None` when
    /// the pass is over (the next pass starts afresh at a random slot).
    pub(crate) fn next(&mut self, reports: &[u64]) -> Option<u32> {
        self.done |= 1 << self.current;
        if !reports.is_empty() {
            // Held on this many nodes: a majority can no longer be free.
            let enough = self.nodes.saturating_sub(self.quorum) + 1;
            let mut best: Option<(usize, u32)> = None;
            let mut ties = 0u32;
            for slot in 0..self.permits {
                if self.done & (1 << slot) != 0 {
                    continue;
                }
                let held = reports.iter().filter(|set| *set & (1 << slot) != 0).count();
                if held >= enough {
                    self.done |= 1 << slot;
                    continue;
                }
                match best {
                    Some((fewest, _)) if held > fewest => {}
                    Some((fewest, _)) if held == fewest => {
                        // Reservoir sampling: each tie equally likely.
                        ties += 1;
                        if rand::random_range(0..=ties) == 0 {
                            best = Some((held, slot));
                        }
                    }
                    _ => {
                        best = Some((held, slot));
                        ties = 0;
                    }
                }
            }
            if let Some((_, slot)) = best {
                self.current = slot;
                return Some(slot);
            }
        }
        self.done = 0;
        self.current = rand::random_range(0..self.permits);
        None
    }
}

impl Slots {
    /// After a round that reported nothing (the gate node stopped it): a
    /// slot not yet tried in this pass, at random, or `None` when the pass
    /// is over.
    pub(crate) fn next_untried(&mut self) -> Option<u32> {
        self.done |= 1 << self.current;
        let untried = (0..self.permits).filter(|slot| self.done & (1 << slot) == 0);
        let count = untried.clone().count();
        if count == 0 {
            self.done = 0;
            self.current = rand::random_range(0..self.permits);
            return None;
        }
        let pick = rand::random_range(0..count);
        self.current = untried.clone().nth(pick).unwrap_or(self.current);
        Some(self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(slots: &[u32]) -> u64 {
        slots.iter().fold(0, |s, i| s | 1 << i)
    }

    #[test]
    fn after_a_busy_round_the_slot_free_on_most_nodes_is_next() {
        for _ in 0..100 {
            let mut slots = Slots::new(4, 5, 3);
            slots.current = 0;
            // Slots 0, 1 and 3 held everywhere; 2 free on every node.
            let held = set(&[0, 1, 3]);
            assert_eq!(slots.next(&[held, held, held]), Some(2));
        }
    }

    #[test]
    fn a_pass_ends_when_every_slot_is_held_on_too_many_nodes() {
        let mut slots = Slots::new(3, 5, 3);
        slots.current = 1;
        // Each slot held on 3 of the 3 reporting nodes: none can be free on
        // a majority of 5.
        let all = set(&[0, 1, 2]);
        assert_eq!(slots.next(&[all, all, all]), None);
        // A slot held on only 2 of 5 may still be free on a majority.
        let mut slots = Slots::new(3, 5, 3);
        slots.current = 1;
        let next = slots.next(&[all, all, set(&[1, 2])]);
        assert_eq!(next, Some(0));
    }

    #[test]
    fn a_pass_tries_each_slot_once_then_starts_over() {
        let mut slots = Slots::new(4, 3, 2);
        let mut tried = vec![slots.current()];
        // Reports that never rule a slot out.
        while let Some(next) = slots.next(&[0]) {
            tried.push(next);
            assert!(tried.len() <= 4, "{tried:?}");
        }
        tried.sort_unstable();
        assert_eq!(tried, vec![0, 1, 2, 3]);
        // A new pass.
        assert!(slots.next(&[0]).is_some());
    }

    #[test]
    fn untried_slots_are_walked_once_each() {
        let mut slots = Slots::new(4, 3, 2);
        let mut tried = vec![slots.current()];
        while let Some(next) = slots.next_untried() {
            tried.push(next);
            assert!(tried.len() <= 4, "{tried:?}");
        }
        tried.sort_unstable();
        assert_eq!(tried, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_round_without_reports_ends_the_pass() {
        let mut slots = Slots::new(8, 3, 2);
        assert_eq!(slots.next(&[]), None);
    }

    #[test]
    fn ties_spread_over_the_free_slots() {
        let mut seen = 0u64;
        for _ in 0..200 {
            let mut slots = Slots::new(4, 3, 2);
            slots.current = 0;
            seen |= 1 << slots.next(&[set(&[0])]).unwrap_or(0);
        }
        assert_eq!(seen, set(&[1, 2, 3]));
    }
}
