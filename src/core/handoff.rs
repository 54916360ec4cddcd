//! Waiting between rounds: this client's queued waiters, woken one at a time
//! by the resources' gate nodes.
//!
//! A caller that may retry holds a [`Ticket`] from before its first round
//! until it returns. The ticket names it in the gate node's queue of waiters
//! (member `"{client id}:{ticket id}"`, see `transport/protocol/scripts/`): a busy
//! round queues it there, and when its turn comes the gate node publishes
//! its ticket id on this client's wake channel; the subscriber thread hands
//! it to [`Waiters::woken`], which wakes exactly that ticket. A release thus
//! wakes one waiter, whatever the number of waiters, in any client.
//!
//! A wake-up counts until a wait consumes it: one that comes at any moment
//! after the last wait ended — during a round, a pause, or rounds that
//! moved on to other slots of a semaphore — ends the next wait at once
//! instead of being missed, including one that comes while a semaphore's
//! pass moved on to a slot other than the one that came free. A wake-up
//! whose news a round
//! already saw still ends the next wait: for a lock, one more round, sent
//! to every node at once, plus the quick retries a call allows; for a
//! semaphore, a pass over the untried slots at the gate node.
//!
//! # Fairness
//!
//! One rule: to a round that asks it first, the gate node grants a free
//! resource only in the caller's turn (it is the head of the queue, or
//! nobody waits). Queued waiters always ask it first, and so does a client
//! whose release woke a waiter ([`Waiters::released`]): its next
//! acquisition of that resource queues behind the waiters instead of
//! taking the other nodes from the woken one. A caller's first round is a
//! plain `SET NX` everywhere; a newcomer that takes a resource free at that
//! instant delays the woken waiter by one hold, and the waiter keeps its
//! place.
//!
//! # Shared state and who touches it
//!
//! `tickets` (a map from ticket id to its slot): callers (enter, drop), the
//! subscriber threads (wake-ups, re-subscriptions), cancelling threads
//! (through [`Wake`]). `yielded`: releasing callers (and `Drop`) and
//! acquiring callers. Every lock here is held only for a lookup, never
//! across I/O or a wait on another lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cancel::{CancelToken, Wake};
use crate::transport::{GateAnswer, Sink};

/// How long a client that woke a waiter with its release lets the waiters
/// go first: its next acquisition within this time asks the gate node
/// first.
const YIELD_FOR: Duration = Duration::from_secs(1);

pub(crate) struct Waiters {
    /// This client's name in the gate nodes' queues.
    client: Arc<str>,
    next: AtomicU64,
    tickets: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Resources this client released while others may have waited: the
    /// gate node's answer (whether it woke a waiter; it may come after the
    /// release returned), and until when it counts.
    yielded: Mutex<Yielded>,
    /// `yielded`'s size: lets acquisitions skip the map.
    yielding: AtomicUsize,
}

/// At most this many released resources are remembered: a forgotten one
/// costs one round that may take the resource ahead of a waiter.
const YIELDED_CAP: usize = 1024;

/// The resources this client yields, and the order they expire in (the
/// order of their releases: each counts for [`YIELD_FOR`]), so that a
/// release drops what expired, or the oldest past [`YIELDED_CAP`], in
/// constant time on average, never by scanning the whole map.
#[derive(Default)]
struct Yielded {
    by_key: HashMap<Arc<str>, (Yield, Instant)>,
    /// Keys as released, with until when that release counts; an entry
    /// whose key was released again or taken by `yields` is skipped.
    order: std::collections::VecDeque<(Arc<str>, Instant)>,
}

impl Yielded {
    fn insert(&mut self, key: Arc<str>, state: Yield, now: Instant) {
        while let Some((old, until)) = self.order.pop_front() {
            if until > now && self.order.len() < YIELDED_CAP {
                self.order.push_front((old, until));
                break;
            }
            if self.by_key.get(&old).is_some_and(|(_, u)| *u == until) {
                self.by_key.remove(&old);
            }
        }
        let until = now + YIELD_FOR;
        self.by_key.insert(key.clone(), (state, until));
        self.order.push_back((key, until));
    }
}

/// What a release's gate node said, or will say.
enum Yield {
    /// It woke a waiter.
    Woke,
    /// Its answer was not in when the release returned: read it (waiting
    /// until the instant given, at most) when it matters.
    Pending(GateAnswer, Instant),
}

struct Slot {
    /// The node whose wake-ups this ticket waits for.
    gate: usize,
    /// Bumped by every wake-up.
    wakes: Mutex<Wakes>,
    wake: Condvar,
    /// Its caller sleeps in [`Ticket::wait`] (tests wait for that).
    #[cfg(test)]
    asleep: std::sync::atomic::AtomicBool,
}

/// A slot's wake-up counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Wakes {
    /// Every wake-up.
    all: u64,
    /// Those where the gate node named this ticket (its turn came).
    called: u64,
}

impl Wake for Slot {
    /// A cancel: the sleeper re-checks its token (taking the lock first, so
    /// a sleeper about to wait cannot miss it).
    fn wake(&self) {
        let _wakes = self.wakes.lock();
        self.wake.notify_all();
    }
}

impl Slot {
    /// A wake-up; `called`: the gate node named this ticket.
    fn bump(&self, called: bool) {
        let mut wakes = self.wakes.lock();
        wakes.all += 1;
        wakes.called += u64::from(called);
        self.wake.notify_all();
    }
}

/// Why a [`Ticket::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The gate node said it is this waiter's turn.
    Turn,
    /// The gate node may have said so while its subscription was down: it
    /// came back.
    Resubscribed,
    /// The deadline passed.
    TimedOut,
    /// The cancel token was cancelled.
    Cancelled,
}

/// One waiting caller's place.
pub(crate) struct Ticket<'a> {
    waiters: &'a Waiters,
    id: u64,
    slot: Arc<Slot>,
    /// Its name in the gate node's queue.
    member: Arc<str>,
    /// The wake counts the last wait consumed.
    seen: Wakes,
    /// The token this ticket was registered with, to forget it at the end.
    registered: Option<CancelToken>,
}

impl Waiters {
    /// This client's waiters, named `client` in the gate nodes' queues.
    pub(crate) fn new(client: Arc<str>) -> Self {
        Waiters {
            client,
            next: AtomicU64::new(1),
            tickets: Mutex::new(HashMap::new()),
            yielded: Mutex::new(Yielded::default()),
            yielding: AtomicUsize::new(0),
        }
    }

    /// A new waiter, woken by node `gate`: a wake-up from now on ends the
    /// next [`Ticket::wait`] at once.
    pub(crate) fn enter(&self, gate: usize) -> Ticket<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            gate,
            wakes: Mutex::new(Wakes::default()),
            wake: Condvar::new(),
            #[cfg(test)]
            asleep: std::sync::atomic::AtomicBool::new(false),
        });
        self.tickets.lock().insert(id, slot.clone());
        Ticket {
            waiters: self,
            id,
            slot,
            member: Arc::from(format!("{}:{id}", self.client).as_str()),
            seen: Wakes::default(),
            registered: None,
        }
    }

    /// This client released `key`; `gate` is the gate node's answer (by
    /// `by` at the latest). If it woke a waiter, this client's next
    /// acquisition of `key` (within [`YIELD_FOR`]) lets the waiters go
    /// first.
    pub(crate) fn released(&self, key: &str, gate: GateAnswer, by: Instant) {
        let state = match gate.now() {
            Some(vote) if vote.queued => Yield::Woke,
            Some(_) => return,
            None => Yield::Pending(gate, by),
        };
        let mut yielded = self.yielded.lock();
        yielded.insert(Arc::from(key), state, Instant::now());
        self.yielding.store(yielded.by_key.len(), Ordering::Release);
    }

    /// Whether this client lets the waiters for `key` go first (once).
    /// One lookup: entries past their time are dropped by the releases
    /// (see [`Yielded::insert`]), not at every acquisition.
    pub(crate) fn yields(&self, key: &str) -> bool {
        if self.yielding.load(Ordering::Acquire) == 0 {
            return false;
        }
        let now = Instant::now();
        let entry = {
            let mut yielded = self.yielded.lock();
            let entry = yielded.by_key.remove(key);
            self.yielding.store(yielded.by_key.len(), Ordering::Release);
            entry
        };
        match entry {
            Some((_, until)) if until <= now => false,
            Some((Yield::Woke, _)) => true,
            Some((Yield::Pending(gate, by), _)) => gate.by(by).is_some_and(|vote| vote.queued),
            None => false,
        }
    }

    /// Ends every ticket's wait (and its next one) at once: the client is
    /// shutting down, and its waiters look and leave.
    pub(crate) fn wake_all(&self) {
        let slots: Vec<_> = self.tickets.lock().values().cloned().collect();
        for slot in slots {
            slot.bump(false);
        }
    }

    /// How many tickets exist.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.tickets.lock().len()
    }

    /// How many tickets' callers sleep between rounds.
    #[cfg(test)]
    pub(crate) fn asleep(&self) -> usize {
        let tickets = self.tickets.lock();
        tickets
            .values()
            .filter(|slot| slot.asleep.load(Ordering::SeqCst))
            .count()
    }
}

impl Sink for Waiters {
    fn woken(&self, ticket: u64) {
        let slot = self.tickets.lock().get(&ticket).cloned();
        if let Some(slot) = slot {
            slot.bump(true);
        }
    }

    /// Wake-ups from node `index` may have been lost: its waiters try one
    /// more round each.
    fn subscribed(&self, index: usize) {
        let slots: Vec<_> = self
            .tickets
            .lock()
            .values()
            .filter(|slot| slot.gate == index)
            .cloned()
            .collect();
        for slot in slots {
            slot.bump(false);
        }
    }
}

impl Ticket<'_> {
    /// Its name in the gate node's queue.
    pub(crate) fn member(&self) -> &Arc<str> {
        &self.member
    }

    /// Its id (what the gate node publishes to wake it).
    #[cfg(test)]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Sleeps until a wake-up that no earlier wait consumed, `until`, or a
    /// cancel of `cancel`, whichever comes first.
    pub(crate) fn wait(&mut self, until: Instant, cancel: Option<&CancelToken>) -> Woken {
        if let Some(token) = cancel
            && self.registered.is_none()
        {
            let slot: Arc<dyn Wake> = self.slot.clone();
            token.register(&slot);
            self.registered = Some(token.clone());
        }
        let cancelled = || cancel.is_some_and(CancelToken::is_cancelled);
        let mut wakes = self.slot.wakes.lock();
        loop {
            if cancelled() {
                return Woken::Cancelled;
            }
            if wakes.all != self.seen.all {
                let called = wakes.called != self.seen.called;
                self.seen = *wakes;
                return if called {
                    Woken::Turn
                } else {
                    Woken::Resubscribed
                };
            }
            #[cfg(test)]
            self.slot.asleep.store(true, Ordering::SeqCst);
            let timed_out = self.slot.wake.wait_until(&mut wakes, until).timed_out();
            #[cfg(test)]
            self.slot.asleep.store(false, Ordering::SeqCst);
            if timed_out {
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
        self.waiters.tickets.lock().remove(&self.id);
        if let Some(token) = self.registered.take() {
            let slot: Arc<dyn Wake> = self.slot.clone();
            token.unregister(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters() -> Waiters {
        Waiters::new(Arc::from("c"))
    }

    /// Releases that woke waiters, more than the cap within a second, keep
    /// the memory bounded, and each release drops what expired or the
    /// oldest.
    #[test]
    fn remembered_releases_stay_bounded_and_expire_in_order() {
        let mut yielded = Yielded::default();
        let start = Instant::now();
        for i in 0..5 * YIELDED_CAP {
            yielded.insert(Arc::from(format!("k{i}").as_str()), Yield::Woke, start);
            assert!(yielded.order.len() <= YIELDED_CAP + 1);
            assert!(yielded.by_key.len() <= yielded.order.len());
        }
        // The newest are kept, the oldest forgotten.
        let last = format!("k{}", 5 * YIELDED_CAP - 1);
        assert!(yielded.by_key.contains_key(last.as_str()));
        assert!(!yielded.by_key.contains_key("k0"));
        // Released again: counts from its last release.
        yielded.insert(Arc::from(last.as_str()), Yield::Woke, start);
        // Past their time, one release drops every expired entry.
        let later = start + YIELD_FOR + Duration::from_millis(1);
        yielded.insert(Arc::from("fresh"), Yield::Woke, later);
        assert_eq!(yielded.by_key.len(), 1);
        assert_eq!(yielded.order.len(), 1);
    }

    #[test]
    fn a_wake_up_ends_only_its_own_tickets_wait() {
        let waiters = Arc::new(waiters());
        let (entered_tx, entered) = crossbeam_channel::bounded(2);
        let (tx, rx) = crossbeam_channel::bounded(2);
        let sleepers: Vec<_> = (0..2)
            .map(|_| {
                let (waiters, entered_tx, tx) = (waiters.clone(), entered_tx.clone(), tx.clone());
                std::thread::spawn(move || {
                    let mut ticket = waiters.enter(0);
                    entered_tx.send(ticket.id()).unwrap();
                    let far = Instant::now() + Duration::from_secs(30);
                    let woken = ticket.wait(far, None);
                    tx.send((ticket.id(), woken)).unwrap();
                })
            })
            .collect();
        let first = entered.recv().unwrap();
        let second = entered.recv().unwrap();
        waiters.woken(first);
        let (id, woken) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((id, woken), (first, Woken::Turn));
        assert!(
            rx.recv_timeout(Duration::from_millis(20)).is_err(),
            "one wake-up woke one waiter"
        );
        waiters.woken(second);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            (second, Woken::Turn)
        );
        for sleeper in sleepers {
            sleeper.join().unwrap();
        }
        assert_eq!(waiters.count(), 0, "tickets forgotten when they go");
    }

    #[test]
    fn a_wake_up_counts_until_a_wait_consumes_it() {
        let waiters = waiters();
        let mut ticket = waiters.enter(0);
        let far = Instant::now() + Duration::from_secs(60);
        waiters.woken(ticket.id());
        assert_eq!(ticket.wait(far, None), Woken::Turn);
        // Two before the next wait: it ends at once, and consumes both.
        waiters.woken(ticket.id());
        waiters.woken(ticket.id());
        assert_eq!(ticket.wait(far, None), Woken::Turn);
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(ticket.wait(soon, None), Woken::TimedOut);
    }

    #[test]
    fn a_resubscribed_node_wakes_the_tickets_it_gates() {
        let waiters = waiters();
        let mut on_0 = waiters.enter(0);
        let mut on_1 = waiters.enter(1);
        waiters.subscribed(1);
        let soon = || Instant::now() + Duration::from_millis(5);
        assert_eq!(on_1.wait(soon(), None), Woken::Resubscribed);
        assert_eq!(on_0.wait(soon(), None), Woken::TimedOut);
        // Named by its gate node since its last wait, whatever else came:
        // its turn.
        waiters.subscribed(1);
        waiters.woken(on_1.id());
        waiters.subscribed(1);
        assert_eq!(on_1.wait(soon(), None), Woken::Turn);
        assert_eq!(on_1.wait(soon(), None), Woken::TimedOut);
    }

    #[test]
    fn a_cancel_wakes_a_sleeper_and_a_token_forgets_the_ticket() {
        let waiters = Arc::new(waiters());
        let token = CancelToken::new();
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let sleeper = {
            let (waiters, token) = (waiters.clone(), token.clone());
            std::thread::spawn(move || {
                let mut ticket = waiters.enter(0);
                let soon = Instant::now() + Duration::from_millis(1);
                assert_eq!(ticket.wait(soon, Some(&token)), Woken::TimedOut);
                entered_tx.send(()).unwrap();
                ticket.wait(Instant::now() + Duration::from_secs(60), Some(&token))
            })
        };
        entered.recv().unwrap();
        token.cancel();
        assert_eq!(sleeper.join().unwrap(), Woken::Cancelled);
        assert_eq!(token.sleepers(), 0, "forgotten when the ticket goes");
    }

    /// A shutdown's `wake_all` ends every ticket's wait at once — one
    /// asleep now, and the next wait of one that is not.
    #[test]
    fn wake_all_ends_every_wait() {
        let waiters = Arc::new(waiters());
        let mut awake = waiters.enter(1);
        let sleeper = {
            let waiters = waiters.clone();
            std::thread::spawn(move || {
                let mut ticket = waiters.enter(0);
                ticket.wait(Instant::now() + Duration::from_secs(60), None)
            })
        };
        while waiters.asleep() == 0 {
            std::thread::yield_now();
        }
        waiters.wake_all();
        assert_eq!(sleeper.join().unwrap(), Woken::Resubscribed);
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(awake.wait(far, None), Woken::Resubscribed);
    }
}
