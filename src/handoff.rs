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
//! This only shortens waits: every acquisition still goes through the Redis
//! nodes, and waiters in other processes still retry on their own schedule.
//! With nobody waiting, a release costs one atomic load here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
pub(crate) struct Waiters {
    /// How many threads wait on any resource: lets releases skip the map.
    total: AtomicUsize,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    wake: Condvar,
}

#[derive(Default)]
struct SlotState {
    waiting: usize,
    /// Bumped by every local release of the resource.
    releases: u64,
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

    /// Sleeps until a local release of `key` or `until`, whichever is first.
    pub(crate) fn wait(&self, key: &Arc<str>, until: Instant) {
        // Count ourselves in while holding the map, so the slot cannot be
        // removed between finding it and waiting on it.
        let slot = {
            let mut slots = self.slots.lock();
            let slot = slots.entry(key.clone()).or_default().clone();
            slot.state.lock().waiting += 1;
            slot
        };
        self.total.fetch_add(1, Ordering::AcqRel);
        {
            let mut state = slot.state.lock();
            let seen = state.releases;
            while state.releases == seen {
                if slot.wake.wait_until(&mut state, until).timed_out() {
                    break;
                }
            }
            state.waiting -= 1;
            self.total.fetch_sub(1, Ordering::AcqRel);
        }
        let mut slots = self.slots.lock();
        if slot.state.lock().waiting == 0 {
            slots.remove(key);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_release_wakes_a_waiter_before_its_deadline() {
        let waiters = Arc::new(Waiters::default());
        let key: Arc<str> = Arc::from("k");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let waiter = {
            let (waiters, key) = (waiters.clone(), key.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                waiters.wait(&key, started + Duration::from_secs(30));
                tx.send(started.elapsed()).unwrap();
            })
        };
        while !waiters.has_waiters("k") {
            std::thread::yield_now();
        }
        waiters.released("other-key");
        assert!(rx.try_recv().is_err(), "woken by another key's release");
        waiters.released("k");
        let waited = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("woken by the release");
        assert!(waited < Duration::from_secs(30));
        waiter.join().unwrap();
        assert!(!waiters.has_waiters("k"));
        assert!(
            waiters.slots.lock().is_empty(),
            "slot removed once nobody waits"
        );
    }

    #[test]
    fn a_wait_without_release_ends_at_its_deadline() {
        let waiters = Waiters::default();
        let key: Arc<str> = Arc::from("k");
        let until = Instant::now() + Duration::from_millis(20);
        waiters.wait(&key, until);
        assert!(Instant::now() >= until);
        assert_eq!(waiters.total.load(Ordering::Relaxed), 0);
    }
}
