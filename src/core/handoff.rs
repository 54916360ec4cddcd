//! Local hand-off between threads of one client that wait for the same
//! resource.
//!
//! Between two rounds, a waiting thread sleeps on a condition variable rather
//! than blindly: when another thread of the same client releases that
//! resource, the longest waiter is woken at once and tries again, instead of
//! sleeping out its jittered retry delay. A thread that wants a resource its
//! own client's threads are already waiting for queues behind them, so
//! ownership rotates instead of staying with the thread that just released.
//!
//! A caller that may retry holds a [`Ticket`] from before its first round
//! until it returns: registering and reading the release counter happen in
//! one critical section, and the ticket is re-armed before each round, so a
//! release at any moment after that — during a round, or between a round and
//! the sleep — ends the next sleep at once instead of being missed.
//!
//! A multi-resource lock waits on its first resource only (documented on
//! `Redlock::lock_all`).
//!
//! This only shortens waits: every acquisition still goes through the Redis
//! nodes, and waiters in other processes still retry on their own schedule.
//! With nobody waiting, a release costs one atomic load here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::cancel::{CancelToken, Wake};

#[derive(Default)]
pub(crate) struct Waiters {
    /// How many tickets exist for any resource: lets releases skip the map.
    total: AtomicUsize,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    wake: Condvar,
}

impl Wake for Slot {
    /// A cancel: every sleeper of the slot re-checks its token (taking the
    /// lock first, so a sleeper about to wait cannot miss it).
    fn wake(&self) {
        let _state = self.state.lock();
        self.wake.notify_all();
    }
}

/// Why a [`Ticket::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A local release of the resource.
    Released,
    /// The deadline passed.
    TimedOut,
    /// The cancel token was cancelled.
    Cancelled,
}

#[derive(Default)]
struct SlotState {
    /// Tickets for this resource.
    waiting: usize,
    /// Bumped by every local release of the resource.
    releases: u64,
}

/// One thread's registration as a waiter for one resource.
pub(crate) struct Ticket<'a> {
    waiters: &'a Waiters,
    key: Arc<str>,
    slot: Arc<Slot>,
    /// The release count when last armed.
    seen: u64,
    /// The token this ticket's slot was registered with, to forget it when
    /// the slot's last ticket goes.
    registered: Option<CancelToken>,
}

impl Waiters {
    /// Whether threads of this client are waiting for `key`.
    pub(crate) fn has_waiters(&self, key: &str) -> bool {
        self.total.load(Ordering::Acquire) > 0
            && self
                .slots
                .lock()
                .get(key)
                .is_some_and(|slot| slot.state.lock().waiting > 0)
    }

    /// Registers as a waiter for `key`, armed: any release from now on ends
    /// the next [`Ticket::wait`] at once.
    pub(crate) fn enter(&self, key: &Arc<str>) -> Ticket<'_> {
        let mut slots = self.slots.lock();
        let slot = slots.entry(key.clone()).or_default().clone();
        let seen = {
            let mut state = slot.state.lock();
            state.waiting += 1;
            state.releases
        };
        self.total.fetch_add(1, Ordering::AcqRel);
        drop(slots);
        Ticket {
            waiters: self,
            key: key.clone(),
            slot,
            seen,
            registered: None,
        }
    }

    /// Wakes the longest waiter for `key`, if any.
    pub(crate) fn released(&self, key: &str) {
        if self.total.load(Ordering::Acquire) == 0 {
            return;
        }
        let slot = self.slots.lock().get(key).cloned();
        if let Some(slot) = slot {
            slot.state.lock().releases += 1;
            slot.wake.notify_one();
        }
    }
}

impl Ticket<'_> {
    /// Forgets releases seen so far: only later ones end the next wait.
    pub(crate) fn arm(&mut self) {
        self.seen = self.slot.state.lock().releases;
    }

    /// Sleeps until a release since the ticket was last armed, `until`, or
    /// a cancel of `cancel`, whichever comes first.
    pub(crate) fn wait(&mut self, until: Instant, cancel: Option<&CancelToken>) -> Woken {
        if let Some(token) = cancel
            && self.registered.is_none()
        {
            let slot: Arc<dyn Wake> = self.slot.clone();
            token.register(&slot);
            self.registered = Some(token.clone());
        }
        let cancelled = || cancel.is_some_and(CancelToken::is_cancelled);
        let mut state = self.slot.state.lock();
        loop {
            if cancelled() {
                return Woken::Cancelled;
            }
            if state.releases != self.seen {
                self.seen = state.releases;
                return Woken::Released;
            }
            if self.slot.wake.wait_until(&mut state, until).timed_out() {
                return if cancelled() {
                    Woken::Cancelled
                } else {
                    Woken::TimedOut
                };
            }
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut slots = self.waiters.slots.lock();
        let mut state = self.slot.state.lock();
        state.waiting -= 1;
        self.waiters.total.fetch_sub(1, Ordering::AcqRel);
        let last = state.waiting == 0;
        if last {
            slots.remove(&self.key);
        }
        drop(state);
        drop(slots);
        // Other tickets of the slot may still sleep with the same token:
        // only the last one forgets the slot (a dead entry is pruned anyway).
        if let Some(token) = self.registered.take()
            && last
        {
            let slot: Arc<dyn Wake> = self.slot.clone();
            token.unregister(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_release_wakes_a_waiter_before_its_deadline() {
        let waiters = Arc::new(Waiters::default());
        let key: Arc<str> = Arc::from("k");
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let waiter = {
            let (waiters, key) = (waiters.clone(), key.clone());
            std::thread::spawn(move || {
                let mut ticket = waiters.enter(&key);
                entered_tx.send(()).unwrap();
                let woken =
                    ticket.wait(Instant::now() + Duration::from_secs(30), None) == Woken::Released;
                tx.send(woken).unwrap();
            })
        };
        entered.recv().unwrap();
        assert!(waiters.has_waiters("k"));
        waiters.released("other-key");
        assert!(rx.try_recv().is_err(), "woken by another key's release");
        waiters.released("k");
        let woken = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("woken by the release");
        assert!(woken, "a release ended the wait, not its deadline");
        waiter.join().unwrap();
        assert!(!waiters.has_waiters("k"));
        assert!(
            waiters.slots.lock().is_empty(),
            "slot removed once nobody waits"
        );
    }

    /// Defect 5 of the hardening review: the release counter was read after
    /// registering, so a release in between was missed and the waiter slept
    /// out its whole pause. A release at any moment after `enter` (or `arm`)
    /// must end the next wait at once.
    #[test]
    fn a_release_between_registering_and_sleeping_is_not_missed() {
        let waiters = Waiters::default();
        let key: Arc<str> = Arc::from("k");
        let mut ticket = waiters.enter(&key);
        waiters.released("k"); // before the ticket sleeps
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            ticket.wait(far, None),
            Woken::Released,
            "the earlier release ends the wait"
        );
        // Re-armed before the next round: a release during the round counts.
        ticket.arm();
        waiters.released("k");
        assert_eq!(ticket.wait(far, None), Woken::Released);
        // Releases before arm() do not.
        waiters.released("k");
        ticket.arm();
        assert_eq!(
            ticket.wait(Instant::now() + Duration::from_millis(5), None),
            Woken::TimedOut
        );
    }

    #[test]
    fn a_cancel_wakes_a_sleeper_at_once_and_a_cancelled_token_never_sleeps() {
        let waiters = Arc::new(Waiters::default());
        let key: Arc<str> = Arc::from("k");
        let token = CancelToken::new();
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let sleeper = {
            let (waiters, key, token) = (waiters.clone(), key.clone(), token.clone());
            std::thread::spawn(move || {
                let mut ticket = waiters.enter(&key);
                entered_tx.send(()).unwrap();
                ticket.wait(Instant::now() + Duration::from_secs(60), Some(&token))
            })
        };
        entered.recv().unwrap();
        token.cancel();
        assert_eq!(sleeper.join().unwrap(), Woken::Cancelled);
        // Already cancelled: returns without sleeping.
        let mut ticket = waiters.enter(&key);
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(ticket.wait(far, Some(&token)), Woken::Cancelled);
    }

    #[test]
    fn a_token_holds_one_entry_per_sleeping_ticket_and_none_after() {
        let waiters = Waiters::default();
        let token = CancelToken::new();
        let soon = || Instant::now() + Duration::from_millis(1);
        {
            let key: Arc<str> = Arc::from("k");
            let mut ticket = waiters.enter(&key);
            for _ in 0..100 {
                assert_eq!(ticket.wait(soon(), Some(&token)), Woken::TimedOut);
            }
            assert_eq!(token.sleepers(), 1, "one entry however often it sleeps");
        }
        assert_eq!(token.sleepers(), 0, "forgotten when the ticket goes");
    }

    #[test]
    fn a_wait_without_release_ends_at_its_deadline() {
        let waiters = Waiters::default();
        let key: Arc<str> = Arc::from("k");
        let until = Instant::now() + Duration::from_millis(20);
        assert_eq!(waiters.enter(&key).wait(until, None), Woken::TimedOut);
        assert!(Instant::now() >= until);
        assert_eq!(waiters.total.load(Ordering::Relaxed), 0);
    }
}
