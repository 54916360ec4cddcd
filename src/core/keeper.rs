//! The keeper: one thread per client that renews every kept-alive lease.
//!
//! Leases wait in a min-heap ordered by when they are due, each entry tagged
//! with the lease's epoch at scheduling time. Every change of a lease's TTL,
//! validity or retry time (a caller's `extend`, a renewal, a failure) bumps
//! its epoch and sends it here again, and entries of older epochs are
//! dropped when they come up: the schedule always follows the last change,
//! whoever made it.
//!
//! The thread sleeps in `select!` on its registration channel and on
//! `at(next due)`, so an idle keeper costs nothing and a change is noticed at
//! once. All leases due at the same moment are renewed in parallel (every
//! round is sent before any is collected).
//!
//! Schedule: a lease is renewed when a third of its TTL is left
//! (`valid_until - ttl / 3`), with the TTL last set. A renewal that fails for
//! want of nodes is retried every `max(ttl / 10, per-node timeout)` while
//! validity remains; when it runs out, or as soon as nodes answer that our
//! token is gone, the lease is lost.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};

use super::Core;
use super::lease::{Lease, Who};
use crate::error::Error;
use crate::metrics;

impl Core {
    /// Registers a lease with the keeper thread, starting it if needed.
    pub(crate) fn keep(self: &Arc<Self>, lease: &Arc<Lease>) -> Result<(), Error> {
        if !lease.set_kept(true) {
            return Ok(());
        }
        let mut keeper = self.keeper.lock();
        if keeper.is_none() {
            match start(Arc::downgrade(self)) {
                Ok(started) => *keeper = Some(started),
                Err(e) => {
                    lease.set_kept(false);
                    return Err(Error::System {
                        reason: format!("could not start the keeper thread: {e}"),
                    });
                }
            }
        }
        drop(keeper);
        self.reschedule(lease);
        Ok(())
    }

    /// Tells the keeper (if running) that `lease` changed.
    pub(crate) fn reschedule(&self, lease: &Arc<Lease>) {
        let mut keeper = self.keeper.lock();
        let sent = keeper.as_ref().map(|tx| tx.send(Arc::downgrade(lease)));
        if let Some(Err(_)) = sent {
            // The keeper thread is gone (it never returns while the client
            // lives, so it panicked). Say so; the next keep_alive restarts it.
            *keeper = None;
            log::error!(
                "redlock: the keeper thread has stopped; {:?} is no longer kept alive",
                lease.name()
            );
        }
    }
}

/// Starts the keeper thread for a client; it stops when the client is gone
/// (its registration sender is dropped).
fn start(core: Weak<Core>) -> std::io::Result<Sender<Weak<Lease>>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("redlock-keeper".into())
        .spawn(move || run(&core, &rx))?;
    Ok(tx)
}

struct Due {
    at: Instant,
    epoch: u64,
    lease: Weak<Lease>,
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

fn run(core: &Weak<Core>, changes: &Receiver<Weak<Lease>>) {
    let mut heap = BinaryHeap::new();
    loop {
        let timer = match heap.peek() {
            Some(Due { at, .. }) => crossbeam_channel::at(*at),
            None => crossbeam_channel::never(),
        };
        select! {
            recv(changes) -> lease => match lease {
                Ok(lease) => schedule(&mut heap, lease),
                Err(_) => return,
            },
            recv(timer) -> _ => {}
        }
        // Take every change already queued before deciding what is due.
        while let Ok(lease) = changes.try_recv() {
            schedule(&mut heap, lease);
        }
        let now = Instant::now();
        let mut due = Vec::new();
        while heap.peek().is_some_and(|d| d.at <= now) {
            let Some(entry) = heap.pop() else { break };
            let Some(lease) = entry.lease.upgrade() else {
                continue;
            };
            // Stale (a later change rescheduled it) or finished.
            if lease
                .schedule()
                .is_some_and(|(epoch, _)| epoch == entry.epoch)
            {
                due.push((lease, entry.epoch));
            }
        }
        if due.is_empty() {
            continue;
        }
        let Some(core) = core.upgrade() else {
            return;
        };
        renew(&core, &due);
    }
}

fn schedule(heap: &mut BinaryHeap<Due>, lease: Weak<Lease>) {
    if let Some((epoch, at)) = lease.upgrade().and_then(|l| l.schedule()) {
        heap.push(Due { at, epoch, lease });
    }
}

/// Renews every due lease in parallel, each as it was at the epoch it was
/// scheduled for. Each finished extension reschedules its lease through the
/// keeper's channel; a lease whose validity ran out, or whose token the
/// nodes no longer hold, is lost.
fn renew(core: &Core, due: &[(Arc<Lease>, u64)]) {
    let mut pending = Vec::with_capacity(due.len());
    for (lease, epoch) in due {
        match lease.begin_extend(core, Who::Keeper { epoch: *epoch }) {
            Ok(Some(extension)) => pending.push((lease, extension)),
            // A caller's extension is in flight, or changed the lease since it
            // was scheduled; it rescheduled (or will) when done.
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
    }
}
