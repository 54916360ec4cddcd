//! The core's unit tests, driven through the fake-node seam
//! (`transport::fake`): rounds, deadlines, keeper interleavings, the queue
//! of waiters and the hand-off, in milliseconds and without Redis. This
//! file is the kit the test files share: a core over fake nodes, wired for
//! wake-ups, and waits for what a test depends on.

mod called;
mod clean_up;
mod elect;
mod one_node;
mod rounds;
mod shutdown;
mod slot;
mod turn;
mod wake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Core, Lease, Patience};
use crate::error::Error;
use crate::settings::Config;
use crate::transport::Op;
use crate::transport::fake::{self, FakeNode};

/// Test-only interception points inside the core.
#[derive(Default)]
pub(crate) struct Hooks {
    before_extension_applies: Mutex<Option<Box<dyn FnMut() + Send>>>,
}

impl Hooks {
    /// Runs between collecting an extension's answers and applying them.
    pub(crate) fn before_extension_applies(&self) {
        let mut hook = self.before_extension_applies.lock().take();
        if let Some(f) = hook.as_mut() {
            f();
        }
        let mut slot = self.before_extension_applies.lock();
        if slot.is_none() {
            *slot = hook;
        }
    }
}

pub(super) const LONG_WAIT: Duration = Duration::from_secs(5);

pub(super) fn settings() -> Config {
    Config {
        // Generous: the fakes answer at once unless told otherwise, and the
        // tests must not depend on how busy the machine is.
        node_timeout: Some(Duration::from_secs(2)),
        retry_count: 0,
        retry_delay: Duration::from_millis(1),
        retry_jitter: Duration::ZERO,
        ..Config::defaults()
    }
}

pub(super) fn core_with(n: usize, settings: Config) -> (Vec<FakeNode>, Arc<Core>) {
    let (nodes, transport) = fake::cluster(n);
    let core = Core::new(transport, settings);
    wire(&nodes, &[&core]);
    (nodes, core)
}

/// Delivers the wake-ups the fake nodes publish to the client each member
/// belongs to (as its subscriber threads would).
pub(super) fn wire(nodes: &[FakeNode], cores: &[&Arc<Core>]) {
    let cores: Vec<_> = cores.iter().map(|core| Arc::downgrade(core)).collect();
    for node in nodes {
        let cores = cores.clone();
        node.on_wake(move |member, _| {
            let Some((client, ticket)) = member.rsplit_once(':') else {
                return;
            };
            for core in cores.iter().filter_map(std::sync::Weak::upgrade) {
                if **core.nodes().transport().client_id() == *client
                    && let Ok(ticket) = ticket.parse()
                {
                    core.nodes().transport().hub().fake_wake(ticket);
                }
            }
        });
    }
}

pub(super) fn lock(core: &Core, key: &str, ttl: Duration) -> Arc<Lease> {
    core.acquire(&[key], ttl, Patience::attempts(0))
        .expect("acquired")
}

/// [`lock`], returning once every node applied the `SET` (the round
/// returns at a quorum): a gate node that had not yet would let a waiter
/// through that the others refuse, which is not what wake-up tests test.
pub(super) fn lock_landed(core: &Core, nodes: &[FakeNode], key: &str, ttl: Duration) -> Arc<Lease> {
    let lease = lock(core, key, ttl);
    eventually("held on every node", || {
        nodes.iter().all(|n| n.holder(key).is_some())
    });
    lease
}

/// Polls a condition that has no event of its own; fails loudly.
pub(super) fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + LONG_WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::yield_now();
    }
}

/// A waiter that sleeps 30 s between rounds unless woken (also while
/// queued): within the tests' waits, only a wake-up brings its next round.
pub(super) fn sleeps_30_s() -> Config {
    Config {
        retry_delay: Duration::from_secs(30),
        queue_refresh: Duration::from_secs(30),
        ..settings()
    }
}

/// Acquisitions `node` received.
pub(super) fn acquisitions(node: &FakeNode) -> usize {
    node.received()
        .iter()
        .filter(|op| matches!(op, Op::Acquire { .. } | Op::AcquireFenced { .. }))
        .count()
}

/// On another thread: acquires "r", waiting up to 60 s; the result arrives
/// on the returned channel.
pub(super) fn waiting_acquire<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    core: &'s Core,
) -> crossbeam_channel::Receiver<Result<Arc<Lease>, Error>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    s.spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let acquired = core.acquire(
            &["r"],
            Duration::from_secs(10),
            Patience::until(Some(deadline)),
        );
        tx.send(acquired).unwrap();
    });
    rx
}

/// The lease [`waiting_acquire`] got, within [`LONG_WAIT`] (`why` says what
/// should have woken it); released at once.
#[track_caller]
pub(super) fn acquired_and_released(
    rx: &crossbeam_channel::Receiver<Result<Arc<Lease>, Error>>,
    core: &Core,
    why: &str,
) {
    let lease = rx.recv_timeout(LONG_WAIT).expect(why).expect("acquired");
    lease.release(core.nodes()).unwrap();
}

/// `count` clients over the same `n` fake nodes, wired for wake-ups.
pub(super) fn clients(
    n: usize,
    count: usize,
    settings: &Config,
) -> (Vec<FakeNode>, Vec<Arc<Core>>) {
    let (nodes, transport) = fake::cluster(n);
    let mut cores = vec![Core::new(transport, settings.clone())];
    for _ in 1..count {
        cores.push(Core::new(fake::transport_for(&nodes), settings.clone()));
    }
    wire(&nodes, &cores.iter().collect::<Vec<_>>());
    (nodes, cores)
}

/// The ticket id in a queue member (`"{client}:{ticket}"`).
pub(super) fn ticket(member: &str) -> u64 {
    member
        .rsplit_once(':')
        .and_then(|(_, id)| id.parse().ok())
        .expect("client:ticket")
}

/// Every member the gate node of "r" woke, and by what.
pub(super) type Wakes = Arc<Mutex<Vec<(String, Op)>>>;

/// The members in `wakes`.
pub(super) fn members(wakes: &Wakes) -> Vec<String> {
    wakes.lock().iter().map(|(m, _)| m.clone()).collect()
}

/// Records every member the gate node of "r" wakes (and still delivers the
/// wake-ups to `cores`).
pub(super) fn record_wakes(nodes: &[FakeNode], cores: &[Arc<Core>]) -> Wakes {
    let woken = Arc::new(Mutex::new(Vec::new()));
    let gate = &nodes[cores[0].nodes().transport().gate_of_name("r")];
    let weak: Vec<_> = cores.iter().map(Arc::downgrade).collect();
    let log = woken.clone();
    gate.on_wake(move |member, op| {
        log.lock().push((member.to_owned(), op));
        let (client, _) = member.rsplit_once(':').expect("client:ticket");
        for core in weak.iter().filter_map(std::sync::Weak::upgrade) {
            if **core.nodes().transport().client_id() == *client {
                core.nodes().transport().hub().fake_wake(ticket(member));
            }
        }
    });
    woken
}

/// Waits until `count` members are queued for "r" on its gate node.
pub(super) fn queued(nodes: &[FakeNode], core: &Core, count: usize) -> Vec<String> {
    let gate = &nodes[core.nodes().transport().gate_of_name("r")];
    eventually("waiters queued on the gate node", || {
        gate.queue("r").len() == count
    });
    gate.queue("r")
}

/// Waits until `count` callers of `cores` sleep between rounds: none has a
/// round in flight when the test goes on.
pub(super) fn asleep(cores: &[Arc<Core>], count: usize) {
    eventually("the waiters asleep", || {
        cores
            .iter()
            .map(|core| core.nodes().waiters().asleep())
            .sum::<usize>()
            == count
    });
}
