//! Local hand-off between threads of one client that wait for the same
//! resource.
//!
//! Between two rounds, a waiting thread sleeps on a condition variable rather
//! than blindly: when another thread of the same client releases that
//! resource, the longest waiter is woken (at once, or once the release is
//! done if other clients wait too, see below) and tries again, instead of
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
//! Releases by other clients reach the same slots as notices from the
//! nodes' release channels ([`Sink`]): one release arrives once from every
//! node that deleted the key, with the same notice. Its first copy wakes one
//! waiter at once (the release reached every node at about the same time,
//! so the others have usually deleted the key by the time the waiter's
//! round arrives); the copy that completes a majority, and the copy from
//! the resource's gate node, wake one again, so that a waiter whose round
//! came too early — the key still held on nodes that had not deleted it
//! yet, the gate among them — does not sleep through the remaining copies. A slot counts the copies of its last few notices; a local release
//! records its own notice as counted, so its echo from the nodes wakes
//! nobody again.
//!
//! A client that released a resource while other clients listened for it
//! *owes* it to them for a moment ([`Waiters::owe`]): its next acquisition
//! of that resource waits for the next release or the end of that moment
//! before its first round, so that a program that locks in a loop hands the
//! resource on instead of taking it straight back. For the same reason, once
//! other clients listened for one of its releases
//! ([`Waiters::others_listened`]), its next release wakes its own waiting
//! thread only when it is done rather than at once: that thread then meets
//! the other clients' waiters, woken by the nodes, on equal terms instead of
//! reaching the nodes ahead of them.
//!
//! This only shortens waits: every acquisition still goes through the Redis
//! nodes. With nobody waiting, a release costs a few atomic loads and two
//! atomic writes here (plus one small map update while this client
//! remembers releases other clients listened for), and an acquisition one
//! atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cancel::{CancelToken, Wake};
use crate::transport::Sink;

#[derive(Default)]
pub(crate) struct Waiters {
    /// How many nodes must announce a release before it wakes a waiter.
    quorum: usize,
    /// How many tickets exist for any resource: lets releases skip the map.
    total: AtomicUsize,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
    /// How many resources are owed to other clients: lets acquisitions
    /// skip the map.
    owing: AtomicUsize,
    /// Resources this client released while others listened, and until when
    /// it lets them go first.
    owed: Mutex<HashMap<Arc<str>, Instant>>,
    /// Resources whose latest release by this client other clients heard,
    /// and when (see [`Waiters::others_listened`]).
    heard: Mutex<HashMap<Arc<str>, Instant>>,
    /// `heard`'s size: lets releases skip the map.
    hearing: AtomicUsize,
    /// This client's latest release notices, whether or not anyone waited
    /// then: their copies from the nodes must not wake a waiter of this
    /// client that started afterwards (the releasing thread coming back).
    own: [AtomicU64; OWN_NOTICES],
    own_next: AtomicUsize,
}

/// How long this client remembers that other clients listened for one of
/// its releases (a hold longer than this loses the deferred wake-up).
const HEARD_KEPT: Duration = Duration::from_secs(60);

/// How many of its own release notices a client remembers.
const OWN_NOTICES: usize = 32;

/// How many recent notices a slot remembers to tell copies of one release
/// (one per node) from a new release.
const NOTICES: usize = 8;

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
    /// Bumped by every release of the resource heard of (and by a
    /// subscription reaching a majority).
    releases: u64,
    /// The last notices heard, and from how many nodes (newest at
    /// `next - 1`; [`LOCAL`] for a release by this client).
    notices: [(u64, usize); NOTICES],
    next: usize,
    /// How many clients listened when the last release that woke a waiter
    /// was announced (0: unknown, or not a release announced by a node).
    listeners: u32,
}

/// A local release's notice count: its copies from the nodes never count.
const LOCAL: usize = usize::MAX;

/// What was heard of a release.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Heard {
    /// This client released it (its deletes queue ahead of a local
    /// waiter's `SET` on every node).
    Local(Option<u64>),
    /// One node announced the release with this notice; `gate`: the
    /// resource's gate node (a woken round passes it only once it deleted);
    /// `listeners`: clients listening there then (0: unknown).
    Node {
        notice: u64,
        gate: bool,
        listeners: u32,
    },
    /// Not a release: a subscription reached a majority (one more round).
    Subscribed,
}

impl SlotState {
    /// Counts what was heard; whether it wakes a waiter now.
    fn count(&mut self, heard: Heard, quorum: usize) -> bool {
        match heard {
            Heard::Local(Some(notice)) => self.remember(notice, LOCAL),
            Heard::Node {
                notice,
                gate,
                listeners,
            } => {
                match self.notices.iter_mut().find(|(n, _)| *n == notice) {
                    Some((_, LOCAL)) => return false,
                    Some((_, count)) => {
                        *count += 1;
                        if *count != quorum && !gate {
                            return false;
                        }
                    }
                    None => self.remember(notice, 1),
                }
                self.listeners = listeners;
                self.releases += 1;
                return true;
            }
            Heard::Local(None) | Heard::Subscribed => {}
        }
        self.listeners = 0;
        self.releases += 1;
        true
    }

    fn remember(&mut self, notice: u64, count: usize) {
        self.notices[self.next % NOTICES] = (notice, count);
        self.next = self.next.wrapping_add(1);
    }
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
    /// Waiters for a client over `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Self {
        Waiters {
            quorum: crate::algorithm::quorum(nodes),
            ..Waiters::default()
        }
    }

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

    /// Remembers `notice` as this client's own release: its copies from
    /// the nodes never wake a waiter of this client. Before the release is
    /// sent, so that no copy can arrive first.
    pub(crate) fn releasing(&self, notice: Option<u64>) {
        // Called once per release, and every release has a fresh random
        // notice: nothing to look up first.
        if let Some(notice) = notice {
            let slot = self.own_next.fetch_add(1, Ordering::Relaxed) % OWN_NOTICES;
            self.own[slot].store(notice, Ordering::Release);
        }
    }

    /// Whether other clients listened when this client last released `key`
    /// (and threads of this client wait for it now): then a release wakes
    /// this client's own waiter only once it is done (see
    /// `Lease::release`), so that the other clients, woken by the nodes,
    /// are not overtaken by a thread of the releasing client.
    pub(crate) fn others_listened(&self, key: &str) -> bool {
        self.hearing.load(Ordering::Acquire) > 0
            && self.total.load(Ordering::Acquire) > 0
            && self
                .heard
                .lock()
                .get(key)
                .is_some_and(|at| at.elapsed() < HEARD_KEPT)
    }

    /// Records whether other clients listened for this client's release of
    /// `key`.
    pub(crate) fn note_listeners(&self, key: &Arc<str>, others: bool) {
        if !others && self.hearing.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut heard = self.heard.lock();
        if others {
            if heard.len() >= 1024 {
                // An entry forgotten early only gives one later local
                // hand-off its head start back; never grow forever.
                heard.retain(|_, at| at.elapsed() < HEARD_KEPT);
                if heard.len() >= 1024 {
                    heard.clear();
                }
            }
            heard.insert(key.clone(), Instant::now());
        } else {
            heard.remove(key);
            // Old entries go too, so that the map (and this lock) is skipped
            // again once contention is over.
            heard.retain(|_, at| at.elapsed() < HEARD_KEPT);
        }
        self.hearing.store(heard.len(), Ordering::Release);
    }

    /// Wakes the longest waiter for `key`, if any, when what was heard
    /// completes a release (see [`Heard`]). A local release's notice was
    /// recorded by [`Waiters::releasing`] before it was sent.
    pub(crate) fn released(&self, key: &str, heard: Heard) {
        if let Heard::Node { notice, .. } = heard
            && self.is_own(notice)
        {
            return;
        }
        if self.total.load(Ordering::Acquire) == 0 {
            return;
        }
        let slot = self.slots.lock().get(key).cloned();
        if let Some(slot) = slot
            && slot.state.lock().count(heard, self.quorum)
        {
            slot.wake.notify_one();
        }
    }

    /// How many releases (and majorities of subscriptions) woke a waiter of
    /// `key` so far.
    #[cfg(test)]
    pub(crate) fn wakes(&self, key: &str) -> u64 {
        self.slots
            .lock()
            .get(key)
            .map_or(0, |slot| slot.state.lock().releases)
    }

    /// Whether this client remembers that other clients listened at its
    /// latest release of `key`.
    #[cfg(test)]
    pub(crate) fn remembers_others(&self, key: &str) -> bool {
        self.heard.lock().contains_key(key)
    }

    /// Whether `notice` is one of this client's latest releases.
    fn is_own(&self, notice: u64) -> bool {
        self.own.iter().any(|n| n.load(Ordering::Acquire) == notice)
    }

    /// Lets other clients go first: until `until`, an acquisition of `key`
    /// by this client first waits for its next release.
    pub(crate) fn owe(&self, key: &Arc<str>, until: Instant) {
        let mut owed = self.owed.lock();
        if owed.len() >= 1024 {
            // Forgotten entries only cost a short wait; never grow forever.
            let now = Instant::now();
            owed.retain(|_, until| *until > now);
        }
        owed.insert(key.clone(), until);
        self.owing.store(owed.len(), Ordering::Release);
    }

    /// Until when `key` is owed to other clients, if it is (and forgets it:
    /// it is owed once).
    pub(crate) fn owed(&self, key: &str) -> Option<Instant> {
        if self.owing.load(Ordering::Acquire) == 0 {
            return None;
        }
        let now = Instant::now();
        let mut owed = self.owed.lock();
        let until = owed.remove(key);
        // Entries nobody came back for (a `try_lock` never looks) expire
        // here, so that the map empties and the check above stays lock-free.
        owed.retain(|_, until| *until > now);
        self.owing.store(owed.len(), Ordering::Release);
        until.filter(|until| *until > now)
    }
}

impl Sink for Waiters {
    fn released(&self, key: &str, notice: u64, gate: bool, listeners: u32) {
        Waiters::released(
            self,
            key,
            Heard::Node {
                notice,
                gate,
                listeners,
            },
        );
    }

    /// The waiter tries one more round: a release between its busy round
    /// and the subscription would not be announced to it.
    fn listening(&self, key: &str) {
        Waiters::released(self, key, Heard::Subscribed);
    }
}

impl Ticket<'_> {
    /// How many clients listened when the release that last woke a waiter
    /// of this resource was announced (0: unknown or not announced).
    pub(crate) fn listeners(&self) -> u32 {
        self.slot.state.lock().listeners
    }

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

    /// One node's copy of release `notice` (from the gate node or not).
    fn copy(notice: u64, gate: bool) -> Heard {
        Heard::Node {
            notice,
            gate,
            listeners: 0,
        }
    }
    use std::time::Duration;

    #[test]
    fn a_release_wakes_a_waiter_before_its_deadline() {
        let waiters = Arc::new(Waiters::new(5));
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
        waiters.released("other-key", Heard::Local(None));
        assert!(rx.try_recv().is_err(), "woken by another key's release");
        waiters.released("k", Heard::Local(None));
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
        let waiters = Waiters::new(5);
        let key: Arc<str> = Arc::from("k");
        let mut ticket = waiters.enter(&key);
        waiters.released("k", Heard::Local(None)); // before the ticket sleeps
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            ticket.wait(far, None),
            Woken::Released,
            "the earlier release ends the wait"
        );
        // Re-armed before the next round: a release during the round counts.
        ticket.arm();
        waiters.released("k", Heard::Local(None));
        assert_eq!(ticket.wait(far, None), Woken::Released);
        // Releases before arm() do not.
        waiters.released("k", Heard::Local(None));
        ticket.arm();
        assert_eq!(
            ticket.wait(Instant::now() + Duration::from_millis(5), None),
            Woken::TimedOut
        );
    }

    #[test]
    fn a_cancel_wakes_a_sleeper_at_once_and_a_cancelled_token_never_sleeps() {
        let waiters = Arc::new(Waiters::new(5));
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
        let waiters = Waiters::new(5);
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
    fn a_release_wakes_at_its_first_copy_at_a_majority_and_at_the_gate_node() {
        let waiters = Waiters::new(5);
        let key: Arc<str> = Arc::from("k");
        let mut ticket = waiters.enter(&key);
        let soon = || Instant::now() + Duration::from_millis(1);
        waiters.released("k", copy(1, false));
        assert_eq!(ticket.wait(soon(), None), Woken::Released, "the first copy");
        ticket.arm();
        waiters.released("k", copy(1, false));
        assert_eq!(ticket.wait(soon(), None), Woken::TimedOut, "2 of 5");
        waiters.released("k", copy(1, false));
        assert_eq!(ticket.wait(soon(), None), Woken::Released, "3 of 5");
        ticket.arm();
        waiters.released("k", copy(1, false));
        assert_eq!(ticket.wait(soon(), None), Woken::TimedOut, "4 of 5");
        waiters.released("k", copy(1, true));
        assert_eq!(
            ticket.wait(soon(), None),
            Woken::Released,
            "the gate node's copy, even the last"
        );
        // This client's own release wakes at once; its copies never again.
        waiters.releasing(Some(2));
        waiters.released("k", Heard::Local(Some(2)));
        assert_eq!(ticket.wait(soon(), None), Woken::Released);
        for _ in 0..5 {
            waiters.released("k", copy(2, false));
        }
        assert_eq!(ticket.wait(soon(), None), Woken::TimedOut);
        // A subscription reaching a majority: one more round.
        waiters.released("k", Heard::Subscribed);
        assert_eq!(ticket.wait(soon(), None), Woken::Released);
    }

    /// The releasing thread comes back for the resource after its release:
    /// the copies of its own release from the nodes must not wake it (it
    /// would take the resource straight back from the clients it owes).
    #[test]
    fn copies_of_this_clients_own_release_never_wake_its_later_waiters() {
        let waiters = Waiters::new(3);
        waiters.releasing(Some(42)); // nobody waiting yet
        let key: Arc<str> = Arc::from("k");
        let mut ticket = waiters.enter(&key);
        for _ in 0..3 {
            waiters.released("k", copy(42, false));
        }
        let soon = Instant::now() + Duration::from_millis(2);
        assert_eq!(ticket.wait(soon, None), Woken::TimedOut);
        waiters.released("k", copy(43, false)); // someone else's release
        let soon = Instant::now() + Duration::from_millis(2);
        assert_eq!(ticket.wait(soon, None), Woken::Released);
    }

    #[test]
    fn a_wait_without_release_ends_at_its_deadline() {
        let waiters = Waiters::new(5);
        let key: Arc<str> = Arc::from("k");
        let until = Instant::now() + Duration::from_millis(20);
        assert_eq!(waiters.enter(&key).wait(until, None), Woken::TimedOut);
        assert!(Instant::now() >= until);
        assert_eq!(waiters.total.load(Ordering::Relaxed), 0);
    }
}
