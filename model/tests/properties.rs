//! Every property on the model, explored breadth-first over every sequence
//! of a bounded number of actions (a start, a delivery, a loss, 1 ms
//! passing, a restart, a jump, ...); and, for each property, the deliberate
//! defect it must catch **at the same bound**, with the counterexample
//! printed. `REDLOCK_MODEL_DEEP=1` adds two actions to each bound. Each
//! check prints the states it explored and its time.

use std::collections::BTreeSet;
use std::time::Instant;

use redlock_model::{
    Client, Config, FENCES_GROW, K_HOLDERS, Kind, Mutation, NO_WRITER_BESIDE_READERS, ONE_HOLDER,
    Phase, QUEUE_MOVES, Redlock, SOMEONE_HOLDS,
};
use stateright::{Checker, HasDiscoveries, Model};

/// The properties that must hold in every state of every check.
const ALWAYS: [&str; 5] = [
    ONE_HOLDER,
    K_HOLDERS,
    NO_WRITER_BESIDE_READERS,
    FENCES_GROW,
    QUEUE_MOVES,
];

fn deep() -> bool {
    std::env::var_os("REDLOCK_MODEL_DEEP").is_some()
}

/// Explores every sequence of `actions` actions of `config` (two more with
/// `REDLOCK_MODEL_DEEP`), or until `until` fails, and prints what it took.
fn explore(
    name: &str,
    config: Config,
    actions: usize,
    until: Option<&'static str>,
) -> impl Checker<Redlock> + use<> {
    let actions = if deep() { actions + 2 } else { actions };
    let started = Instant::now();
    // stateright counts the initial state as depth 1 and checks the
    // properties of states shallower than its target.
    let mut builder = Redlock { config }.checker().target_max_depth(actions + 2);
    if let Some(property) = until {
        builder = builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{name}: {} states ({} unique), up to {actions} actions, in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    checker
}

/// `property` holds on `config` within `actions` actions, a client can
/// hold there, and each of `defects` makes the checker fail `property`
/// within the same bound.
fn holds_and_catches(
    name: &str,
    config: Config,
    actions: usize,
    property: &'static str,
    defects: &[Mutation],
) {
    let checker = explore(name, config.clone(), actions, None);
    // Every property holds there, not only the one the defects are for.
    for property in ALWAYS {
        checker.assert_no_discovery(property);
    }
    assert!(
        checker.discovery(SOMEONE_HOLDS).is_some(),
        "{name}: no client ever holds: the property holds vacuously"
    );
    for defect in defects {
        let mut broken = config.clone();
        broken.mutation = Some(*defect);
        let checker = explore(
            &format!("{name}, {defect:?}"),
            broken,
            actions,
            Some(property),
        );
        let path = checker.discovery(property).unwrap_or_else(|| {
            panic!("{name}: {defect:?} was not caught within {actions} actions")
        });
        eprintln!("{name}, {defect:?}: caught: {path}");
    }
}

#[test]
fn a_lock_has_at_most_one_valid_holder() {
    holds_and_catches(
        "lock",
        Config::new(Kind::Lock),
        9,
        ONE_HOLDER,
        &[Mutation::HalfQuorum, Mutation::ReleaseWithoutTokenCheck],
    );
}

#[test]
fn a_node_that_restarted_or_jumped_does_not_count_in_its_quarantine() {
    for (restarts, jumps) in [(1, 0), (0, 1)] {
        let mut config = Config::new(Kind::Lock);
        config.restarts = restarts;
        config.jumps = jumps;
        holds_and_catches(
            "lock, a restart or a jump",
            config,
            7,
            ONE_HOLDER,
            &[Mutation::CountQuarantined],
        );
    }
}

#[test]
fn a_lock_stays_one_holder_when_the_network_loses_a_message() {
    let mut config = Config::new(Kind::Lock);
    config.losses = 1;
    let checker = explore("lock, a loss", config, 8, None);
    checker.assert_no_discovery(ONE_HOLDER);
}

#[test]
fn fencing_tokens_only_grow() {
    holds_and_catches(
        "fenced lock",
        Config::new(Kind::FencedLock),
        8,
        FENCES_GROW,
        &[Mutation::NoStaleCheck],
    );
}

#[test]
fn a_semaphore_of_two_has_at_most_two_valid_holders() {
    let mut config = Config::new(Kind::Semaphore(2));
    config.clients = 3;
    config.attempts = 1;
    // No time passes: three clients' rounds are what the bound is spent on
    // (permits counted per node need all nine of their actions).
    config.max_time = 0;
    holds_and_catches(
        "semaphore",
        config,
        9,
        K_HOLDERS,
        &[Mutation::PerNodeSemaphore],
    );
}

#[test]
fn no_writer_beside_a_valid_reader() {
    holds_and_catches(
        "rw lock",
        Config::new(Kind::RwLock),
        7,
        NO_WRITER_BESIDE_READERS,
        &[Mutation::WriterIgnoresReaders],
    );
}

/// The queue of waiters cannot wedge: from every state reached (messages
/// lost, a client crashed, possibly the queue's head; one initial state
/// starts with a crashed waiter at the head), a fault-free continuation
/// gets some live client the lock (and one at most holds). Each defect is
/// caught for its own reason: where its continuation ends, a crashed head
/// blocks the queue, or every live waiter waits unwoken with nothing on
/// its way.
#[test]
fn the_queue_of_waiters_cannot_wedge() {
    let mut config = Config::new(Kind::QueuedLock);
    config.losses = 1;
    config.crashes = 1;
    config.attempts = 3;
    let defects = [Mutation::QueueWithoutAliveTimes, Mutation::WaitWithoutTimer];
    holds_and_catches("queued lock", config.clone(), 8, QUEUE_MOVES, &defects);
    for defect in defects {
        let mut broken = config.clone();
        broken.mutation = Some(defect);
        let model = Redlock {
            config: broken.clone(),
        };
        let checker = explore("queued lock, again", broken, 8, Some(QUEUE_MOVES));
        let path = checker.discovery(QUEUE_MOVES).expect("caught above");
        let end = model.stuck(path.last_state()).expect("it wedges");
        let live = |c: &&Client| c.phase != Phase::Crashed;
        let why = match defect {
            Mutation::QueueWithoutAliveTimes => {
                let head = end.nodes[0].head(end.now).map(usize::from);
                head.is_some_and(|h| end.clients.get(h).is_none_or(|c| c.phase == Phase::Crashed))
            }
            _ => {
                end.net.is_empty()
                    && end
                        .clients
                        .iter()
                        .filter(live)
                        .all(|c| matches!(c.phase, Phase::Waiting { woken: false, .. }))
            }
        };
        assert!(why, "{defect:?} wedged for another reason: {end:#?}");
    }
}
