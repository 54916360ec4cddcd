//! Clean-ups for a slow node: a node that answers
//! within its timeout, but slower than failed rounds arrive, must not
//! grow its queue without bound.

use std::time::{Duration, Instant};

use super::settings;
use crate::core::Core;
use crate::core::Patience;
use crate::error::Error;
use crate::settings::Config;
use crate::transport::Op;
use crate::transport::fake::{self, FakeNode};

/// Node 0 answers every batch in 0.9× the per-node timeout; one caller
/// runs `ROUNDS` of `round` (which must fail or succeed without waiting
/// for node 0). Returns the most requests node 0's queue held, and checks
/// that its queue filled (so that it refused requests: the stream outran
/// it; with a 1.8 s answer, node 0 takes at most 128 a batch, 71 a second,
/// whatever the load on the machine).
fn most_queued(nodes: &[FakeNode], core: &Core, round: impl Fn()) -> usize {
    nodes[0].set_delay(TIMEOUT * 9 / 10);
    let mut most = 0;
    let start = Instant::now();
    for _ in 0..ROUNDS {
        round();
        most = most.max(core.nodes().transport().queued(0));
    }
    let reached = nodes[0]
        .received()
        .iter()
        .filter(|op| matches!(op, Op::Acquire { .. }))
        .count();
    println!(
        "{ROUNDS} rounds in {:?}: node 0's queue held at most {most} (capacity {CAPACITY}); \
         {reached} acquisitions reached it so far",
        start.elapsed()
    );
    assert!(
        most >= CAPACITY,
        "node 0's queue never filled ({most}): the stream did not outrun it"
    );
    // Whatever reached node 0 was cleaned up there.
    nodes[0].set_delay(Duration::ZERO);
    super::eventually("node 0's queue drained", || {
        core.nodes().transport().queued(0) == 0
    });
    most
}

const CAPACITY: usize = 16;
const ROUNDS: usize = 1_000;
const TIMEOUT: Duration = Duration::from_secs(2);

fn slow_node_core() -> (Vec<FakeNode>, std::sync::Arc<Core>) {
    let (nodes, transport) = fake::cluster_with_capacity(3, CAPACITY);
    let core = Core::new(
        transport,
        Config {
            node_timeout: Some(TIMEOUT),
            notifications: false,
            ..settings()
        },
    );
    (nodes, core)
}

/// Node 0 answers every batch in 0.9× the per-node timeout; the resource
/// is held elsewhere on nodes 1 and 2, so every `try_lock` fails at once
/// (Busy, decided by the two refusals) and sends its clean-up. With an
/// hour's TTL, no clean-up is dropped by expiry while the test runs.
///
/// Acquisitions beyond the queue's capacity are refused, but clean-ups
/// never are: were every failed round to queue its clean-up on node 0
/// whatever became of its acquisition there, node 0's queue would grow for
/// as long as the stream lasts. A round cleans up only where its request
/// was queued: one clean-up per acquisition accepted, and acquisitions are
/// accepted only below the capacity, so with one caller the queue never
/// holds more than `capacity + 1`.
#[test]
fn a_slow_nodes_queue_stays_bounded_under_a_stream_of_failed_rounds() {
    let (nodes, core) = slow_node_core();
    let ttl = Duration::from_secs(3600);
    for node in &nodes[1..] {
        node.put("busy", "someone-else", ttl);
    }
    let most = most_queued(&nodes, &core, || {
        match core.acquire(&["busy"], ttl, Patience::attempts(0)) {
            Err(Error::Busy { .. }) => {}
            other => panic!("expected Busy, got {other:?}"),
        }
    });
    assert!(
        most <= CAPACITY + 1,
        "node 0's queue held {most} requests, capacity {CAPACITY}"
    );
    super::eventually("nothing of ours left on node 0", || {
        nodes[0].holder("busy").is_none()
    });
}

/// The same for locks taken (on nodes 1 and 2) and released: a lease's
/// release skips the nodes its acquisition never reached (it went to every
/// node, and grew node 0's queue to 191 after 2,000 cycles with a 50 ms
/// timeout).
#[test]
fn a_slow_nodes_queue_stays_bounded_under_a_stream_of_released_locks() {
    let (nodes, core) = slow_node_core();
    let ttl = Duration::from_secs(3600);
    let most = most_queued(&nodes, &core, || {
        let lease = core
            .acquire(&["free"], ttl, Patience::attempts(0))
            .expect("granted by nodes 1 and 2");
        lease
            .release(core.nodes())
            .expect("released on nodes 1 and 2");
    });
    assert!(
        most <= CAPACITY + 1,
        "node 0's queue held {most} requests, capacity {CAPACITY}"
    );
    super::eventually("nothing of ours left on node 0", || {
        nodes[0].holder("free").is_none()
    });
}
