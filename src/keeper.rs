//! The keeper: one thread per client that renews every kept-alive lease.
//!
//! Leases wait in a min-heap ordered by when they are due. The thread sleeps in
//! `select!` on its registration channel and on `at(next due)`, so an idle
//! keeper costs nothing and a new lease is noticed at once. All leases due at
//! the same moment are renewed in parallel (every round is sent before any is
//! collected), so thousands of leases share a few round trips.
//!
//! Schedule: a lease is renewed when a third of its TTL is left
//! (`valid_until - ttl / 3`). A renewal that fails for want of nodes is retried
//! every `max(ttl / 10, per-node timeout)` while validity remains; when it runs
//! out, or as soon as nodes answer that our token is gone, the lease is lost.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};

use crate::client::Inner;
use crate::error::Error;
use crate::lease::Lease;

/// Starts the keeper thread for a client; it stops when the client is gone
/// (its registration sender is dropped).
pub(crate) fn start(inner: Weak<Inner>) -> std::io::Result<Sender<Weak<Lease>>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("redlock-keeper".into())
        .spawn(move || run(&inner, &rx))?;
    Ok(tx)
}

struct Due {
    at: Instant,
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

fn run(inner: &Weak<Inner>, registrations: &Receiver<Weak<Lease>>) {
    let mut heap = BinaryHeap::new();
    loop {
        let timer = match heap.peek() {
            Some(Due { at, .. }) => crossbeam_channel::at(*at),
            None => crossbeam_channel::never(),
        };
        select! {
            recv(registrations) -> lease => match lease {
                Ok(lease) => {
                    if let Some(at) = lease.upgrade().map(|l| next_renewal(&l)) {
                        heap.push(Due { at, lease });
                    }
                }
                Err(_) => return,
            },
            recv(timer) -> _ => {}
        }
        let now = Instant::now();
        let mut due = Vec::new();
        while heap.peek().is_some_and(|d| d.at <= now) {
            if let Some(lease) = heap.pop().and_then(|d| d.lease.upgrade()) {
                due.push(lease);
            }
        }
        if due.is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        for (lease, at) in renew(&inner, &due) {
            heap.push(Due { at, lease });
        }
    }
}

/// When to renew a healthy lease: once a third of its TTL is left.
fn next_renewal(lease: &Lease) -> Instant {
    let state = lease.state.lock();
    state
        .valid_until
        .checked_sub(state.ttl / 3)
        .unwrap_or(state.valid_until)
}

/// Renews every due lease in parallel; returns those still to be kept, with
/// when they are next due.
fn renew(inner: &Inner, due: &[Arc<Lease>]) -> Vec<(Weak<Lease>, Instant)> {
    let mut pending = Vec::with_capacity(due.len());
    for lease in due {
        let (ttl, finished) = {
            let s = lease.state.lock();
            (s.ttl, s.released || s.lost)
        };
        if finished {
            continue;
        }
        // Fails (and the lease is lost) once its validity has run out.
        match lease.begin_extend(inner, ttl) {
            Ok(extension) => pending.push((lease, ttl, extension)),
            Err(_) => lease.mark_lost(),
        }
    }
    let mut keep = Vec::with_capacity(pending.len());
    for (lease, ttl, extension) in pending {
        match extension.finish() {
            Ok(()) => keep.push((Arc::downgrade(lease), next_renewal(lease))),
            // Nodes answered that our token is gone: lost now, not later.
            Err(Error::LockLost { .. }) => lease.mark_lost(),
            Err(err) => {
                let valid_until = lease.state.lock().valid_until;
                let retry = (ttl / 10).max(inner.node_timeout(ttl));
                let at = Instant::now()
                    .checked_add(retry)
                    .map_or(valid_until, |t| t.min(valid_until));
                log::debug!(
                    "redlock: renewing {:?} failed, retrying while validity remains: {err}",
                    lease.resource
                );
                keep.push((Arc::downgrade(lease), at));
            }
        }
    }
    keep
}
