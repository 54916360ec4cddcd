//! The keeper: one thread per client that renews every kept-alive lease.
//!
//! The keeper knows each kept lease once ([`Schedule`]: the lease's epoch
//! and due time, by lease), and a min-heap of due times points into it.
//! Every change of a lease's TTL, validity or retry time (a caller's
//! `extend`, a renewal, a failure) bumps its epoch and replaces its entry:
//! a caller's change comes here through [`Keeper::changed`], a renewal's is
//! applied by the keeper itself; a release or a loss removes it. Heap entries of
//! older epochs are skipped when they come up, and the heap is rebuilt from
//! the entries once it holds more than twice as many: memory follows the
//! live kept leases, not the number of changes (a heap entry per change,
//! kept until its due time, would hold ~240 k entries for `with_lock` at
//! 100/s with a 1 h TTL).
//!
//! The thread sleeps in `select!` on its registration channel and on
//! `at(next due)`, so an idle keeper costs nothing and a change is noticed at
//! once. All leases due at the same moment are renewed in parallel (every
//! round is sent before any is collected; with a single node they queue for
//! its worker, which pipelines them, instead of running one by one on this
//! thread).
//!
//! Schedule: a lease is renewed when a third of its TTL is left
//! (`valid_until - ttl / 3`), with the TTL last set. A renewal that fails for
//! want of nodes is retried every `max(ttl / 10, per-node timeout)` while
//! validity remains; when it runs out, or as soon as nodes answer that our
//! token is gone, the lease is lost.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};
use parking_lot::Mutex;

use super::lease::{Lease, Who};
use super::nodes::Nodes;
use crate::cancel::CancelToken;
use crate::error::Error;
use crate::metrics;

/// A client's keeper: the registration channel of its thread, started on
/// the first lease it is asked to keep or watch.
///
/// Touched by callers (`keep_alive`, `lost_token`, an extension or a
/// release that changed a scheduled lease) and the shutdown ([`stop`]);
/// the mutex is held for a send, never across I/O.
///
/// [`stop`]: Keeper::stop
#[derive(Default)]
pub(crate) struct Keeper {
    sender: Mutex<Option<Sender<Weak<Lease>>>>,
}

impl Keeper {
    /// Keeps `lease` alive, starting the thread if needed — unless
    /// `closed()` says the client is shutting down (read under the same
    /// lock as [`stop`](Self::stop) takes, so no thread starts after it).
    pub(crate) fn keep(
        &self,
        nodes: &Arc<Nodes>,
        lease: &Arc<Lease>,
        closed: impl Fn() -> bool,
    ) -> Result<(), Error> {
        if !lease.set_kept(true) {
            return Ok(());
        }
        if let Err(err) = self.start(nodes, closed) {
            lease.set_kept(false);
            return Err(err);
        }
        self.reschedule(lease);
        Ok(())
    }

    /// `lease`'s lost token: the keeper cancels it when the validity runs
    /// out (a kept lease's, when it is lost); a release or a refused
    /// renewal cancels it at once.
    pub(crate) fn lost_token(
        &self,
        nodes: &Arc<Nodes>,
        lease: &Arc<Lease>,
        closed: impl Fn() -> bool,
    ) -> CancelToken {
        let (token, first) = lease.lost_token();
        if first && !token.is_cancelled() {
            match self.start(nodes, closed) {
                Ok(()) => self.reschedule(lease),
                Err(err) => log::error!(
                    "redlock: the lost token of {:?} will not fire when its validity runs out: {err}",
                    lease.name()
                ),
            }
        }
        token
    }

    /// Starts the keeper thread if it is not running.
    fn start(&self, nodes: &Arc<Nodes>, closed: impl Fn() -> bool) -> Result<(), Error> {
        let mut sender = self.sender.lock();
        if sender.is_none() {
            if closed() {
                return Err(Error::Shutdown);
            }
            let jumps = nodes.transport().clocks().jumps();
            let started = start(Arc::downgrade(nodes), jumps).map_err(|e| Error::System {
                reason: format!("could not start the keeper thread: {e}"),
            })?;
            *sender = Some(started);
        }
        Ok(())
    }

    /// Tells the keeper that `lease` changed (a caller's extension, a
    /// release), if it has it in its schedule.
    pub(crate) fn changed(&self, lease: &Arc<Lease>) {
        if lease.is_scheduled() {
            self.reschedule(lease);
        }
    }

    /// Tells the keeper (if running) that `lease` changed.
    fn reschedule(&self, lease: &Arc<Lease>) {
        let gone = {
            let mut sender = self.sender.lock();
            let sent = sender.as_ref().map(|tx| tx.send(Arc::downgrade(lease)));
            // The keeper thread is gone (it never returns while the client
            // lives, so it panicked); the next keep_alive restarts it.
            let gone = matches!(sent, Some(Err(_)));
            if gone {
                *sender = None;
            }
            gone
        };
        if gone {
            log::error!(
                "redlock: the keeper thread has stopped; {:?} is no longer kept alive",
                lease.name()
            );
        }
    }

    /// Stops the thread (it ends once it sees its channel closed) and
    /// starts no other: for a shutdown, after it closed the client.
    pub(crate) fn stop(&self) {
        drop(self.sender.lock().take());
    }
}

/// Starts the keeper thread for a client; it stops when the client is gone
/// (its registration sender is dropped).
fn start(nodes: Weak<Nodes>, jumps: Receiver<()>) -> std::io::Result<Sender<Weak<Lease>>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("redlock-keeper".into())
        .spawn(move || run(&nodes, &rx, &jumps))?;
    Ok(tx)
}

/// One kept lease's place in the schedule.
struct Entry {
    lease: Weak<Lease>,
    epoch: u64,
}

/// A due time in the heap: the lease's key and the epoch it was due for.
struct Due {
    at: Instant,
    key: usize,
    epoch: u64,
    /// Keeps the lease's allocation (not the lease) while this entry may
    /// come up: another lease at the same address, with the same epoch,
    /// would otherwise be taken for it (and lose its own entry).
    _pin: Weak<Lease>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

/// The keeper's schedule: an entry per kept lease (keyed by its address,
/// which is unique while it lives) and the due times.
#[derive(Default)]
pub(super) struct Schedule {
    entries: HashMap<usize, Entry>,
    heap: BinaryHeap<Due>,
}

impl Schedule {
    /// Follows `lease`'s latest change: a new due time, or none (released,
    /// lost, no longer kept, gone).
    fn update(&mut self, lease: Weak<Lease>) {
        let key = lease.as_ptr() as usize;
        match lease.upgrade().and_then(|l| l.schedule()) {
            Some((epoch, at)) => {
                let pin = lease.clone();
                self.entries.insert(key, Entry { lease, epoch });
                self.heap.push(Due {
                    at,
                    key,
                    epoch,
                    _pin: pin,
                });
                if self.heap.len() > 2 * self.entries.len() + 16 {
                    self.compact();
                }
            }
            None => {
                self.entries.remove(&key);
            }
        }
    }

    /// Follows every lease again: a node's clock jumped, and the leases
    /// that counted on it end sooner (see `Lease::until`).
    fn refresh(&mut self) {
        let leases: Vec<Weak<Lease>> = self.entries.values().map(|e| e.lease.clone()).collect();
        for lease in leases {
            self.update(lease);
        }
    }

    /// Drops the heap's stale entries.
    fn compact(&mut self) {
        let entries = &self.entries;
        self.heap
            .retain(|due| entries.get(&due.key).is_some_and(|e| e.epoch == due.epoch));
    }

    /// When the next lease is due.
    fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|due| due.at)
    }

    /// Takes the leases due by `now`, each with the epoch it is due for.
    fn take_due(&mut self, now: Instant) -> Vec<(Arc<Lease>, u64)> {
        let mut due = Vec::new();
        while self.heap.peek().is_some_and(|d| d.at <= now) {
            let Some(next) = self.heap.pop() else { break };
            let Some(entry) = self.entries.get(&next.key) else {
                continue;
            };
            if entry.epoch != next.epoch {
                continue; // A later change rescheduled it.
            }
            let lease = entry.lease.upgrade();
            self.entries.remove(&next.key);
            // Renewing it sends it back with its next due time.
            if let Some(lease) = lease
                && lease
                    .schedule()
                    .is_some_and(|(epoch, _)| epoch == next.epoch)
            {
                due.push((lease, next.epoch));
            }
        }
        due
    }

    /// Entries and heap entries held (for tests).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.entries.len(), self.heap.len())
    }
}

fn run(nodes: &Weak<Nodes>, changes: &Receiver<Weak<Lease>>, jumps: &Receiver<()>) {
    let mut schedule = Schedule::default();
    loop {
        let timer = match schedule.next() {
            Some(at) => crossbeam_channel::at(at),
            None => crossbeam_channel::never(),
        };
        select! {
            recv(changes) -> lease => match lease {
                Ok(lease) => schedule.update(lease),
                Err(_) => return,
            },
            recv(timer) -> _ => {}
            recv(jumps) -> _ => {
                while jumps.try_recv().is_ok() {}
                schedule.refresh();
            }
        }
        // Take every change already queued before deciding what is due.
        while let Ok(lease) = changes.try_recv() {
            schedule.update(lease);
        }
        let due = schedule.take_due(Instant::now());
        if due.is_empty() {
            continue;
        }
        let Some(nodes) = nodes.upgrade() else {
            return;
        };
        renew(&nodes, &due, &mut schedule);
    }
}

/// Renews every due lease in parallel, each as it was at the epoch it was
/// scheduled for, and puts each back in `schedule` as its extension left
/// it; a lease whose validity ran out, or whose token the nodes no longer
/// hold, is lost.
fn renew(nodes: &Nodes, due: &[(Arc<Lease>, u64)], schedule: &mut Schedule) {
    let mut pending = Vec::with_capacity(due.len());
    for (lease, epoch) in due {
        if !lease.is_kept() {
            // Watched only: its validity ran out.
            lease.signal();
            continue;
        }
        match lease.begin_extend(nodes, Who::Keeper { epoch: *epoch }) {
            Ok(Some(extension)) => pending.push((lease, extension)),
            // A caller's extension is in flight, or changed the lease since it
            // was scheduled; the caller reschedules it when done.
            Ok(None) => {}
            // Validity ran out before the renewal could start.
            Err(_) => lease.mark_lost(),
        }
    }
    for (lease, extension) in pending {
        let result = extension.finish();
        metrics::renewal(result.is_ok());
        match result {
            Ok(()) => {}
            Err(Error::LockLost { .. }) => lease.mark_lost(),
            Err(err) => log::debug!(
                "redlock: renewing {:?} failed, retrying while validity remains: {err}",
                lease.name()
            ),
        }
        schedule.update(Arc::downgrade(lease));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The schedule holds one entry per kept lease, and the heap at most
    /// about twice as many, however often they change.
    #[test]
    fn the_schedule_follows_the_live_leases_not_the_changes() {
        let (_nodes, core) = super::super::tests::core_with(3, super::super::tests::settings());
        let mut schedule = Schedule::default();
        let mut leases = Vec::new();
        for i in 0..10 {
            let lease =
                super::super::tests::lock(&core, &format!("k{i}"), Duration::from_secs(3600));
            lease.set_kept(true);
            leases.push(lease);
        }
        for round in 0..1000 {
            let lease = &leases[round % leases.len()];
            // A change: a caller's extend bumps the epoch.
            lease.bump_epoch_for_test();
            schedule.update(Arc::downgrade(lease));
        }
        let (entries, heap) = schedule.sizes();
        assert_eq!(entries, 10);
        assert!(heap <= 2 * 10 + 16, "{heap} heap entries for 10 leases");
        // Released or dropped: gone from the schedule.
        for lease in &leases[..5] {
            lease.release(core.nodes()).unwrap();
            schedule.update(Arc::downgrade(lease));
        }
        leases.truncate(5);
        assert_eq!(schedule.sizes().0, 5);
    }
}
