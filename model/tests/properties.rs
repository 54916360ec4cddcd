//! Every property on the model, explored breadth-first over every order of
//! every message within the bounds; and, for each property, the deliberate
//! defect it must catch, with the counterexample it finds printed.
//!
//! Each check is bounded by its depth: every sequence of that many steps
//! (a start, a delivery, a loss, 1 ms passing, a restart, a jump, ...) is
//! explored. `REDLOCK_MODEL_DEEP=1` adds three steps to each. Each check
//! prints the states it explored and its time.

use std::collections::BTreeSet;
use std::time::Instant;

use redlock_model::{Config, Kind, Mutation, Redlock};
use stateright::{Checker, HasDiscoveries, Model};

const ONE_HOLDER: &str = "a lock has at most one valid holder";
const K_HOLDERS: &str = "a semaphore of K has at most K valid holders";
const FENCES_GROW: &str = "fencing tokens only grow";

fn deep() -> bool {
    std::env::var_os("REDLOCK_MODEL_DEEP").is_some()
}

/// Explores every sequence of `depth` steps of `config` (three more with
/// `REDLOCK_MODEL_DEEP`) and prints what it took.
fn explore(name: &str, config: Config, depth: usize) -> impl Checker<Redlock> {
    let depth = if deep() { depth + 3 } else { depth };
    let started = Instant::now();
    let checker = Redlock { config }
        .checker()
        .symmetry()
        .target_max_depth(depth)
        .spawn_bfs()
        .join();
    eprintln!(
        "{name}: {} states ({} unique), {depth} steps deep, in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    checker
}

/// Explores a mutated `config` until `property` fails; returns the
/// counterexample, printed.
fn breaks(name: &str, config: Config, property: &'static str) {
    let started = Instant::now();
    let checker = Redlock { config }
        .checker()
        .symmetry()
        .target_max_depth(14)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!(
            "{name}: the checker did not catch the defect ({} states explored)",
            checker.unique_state_count()
        )
    });
    eprintln!(
        "{name}: caught after {} states in {:.1?}: {path}",
        checker.unique_state_count(),
        started.elapsed()
    );
}

fn faulty(kind: Kind) -> Config {
    let mut config = Config::new(kind);
    config.losses = 1;
    config.restarts = 1;
    config.jumps = 1;
    config
}

#[test]
fn a_lock_has_at_most_one_valid_holder() {
    // Without faults deep enough for keys to expire and be taken again.
    let checker = explore("lock", Config::new(Kind::Lock), 10);
    checker.assert_no_discovery(ONE_HOLDER);
    assert!(
        checker.discovery("a client holds").is_some(),
        "the model never lets a client hold: the property holds vacuously"
    );
    let checker = explore("lock, faults", faulty(Kind::Lock), 9);
    checker.assert_no_discovery(ONE_HOLDER);
}

#[test]
fn fencing_tokens_only_grow() {
    let checker = explore("fenced lock, faults", faulty(Kind::FencedLock), 9);
    checker.assert_no_discovery(FENCES_GROW);
    checker.assert_no_discovery(ONE_HOLDER);
    assert!(checker.discovery("a client holds").is_some());
}

#[test]
fn a_semaphore_of_two_has_at_most_two_valid_holders() {
    let mut config = Config::new(Kind::Semaphore(2));
    config.clients = 3;
    config.attempts = 1;
    let checker = explore("semaphore", config, 9);
    checker.assert_no_discovery(K_HOLDERS);
    assert!(checker.discovery("a client holds").is_some());
}

#[test]
fn a_quorum_of_half_the_nodes_lets_two_holders_in() {
    let mut config = Config::new(Kind::Lock);
    config.mutation = Some(Mutation::HalfQuorum);
    breaks("quorum N/2", config, ONE_HOLDER);
}

#[test]
fn a_release_without_the_token_check_lets_two_holders_in() {
    let mut config = Config::new(Kind::Lock);
    config.mutation = Some(Mutation::ReleaseWithoutTokenCheck);
    breaks("release without the token check", config, ONE_HOLDER);
}

#[test]
fn a_vote_counted_during_its_quarantine_lets_two_holders_in() {
    for (restarts, jumps) in [(1, 0), (0, 1)] {
        let mut config = Config::new(Kind::Lock);
        config.restarts = restarts;
        config.jumps = jumps;
        config.mutation = Some(Mutation::CountQuarantined);
        breaks("a quarantined vote counted", config, ONE_HOLDER);
    }
}

#[test]
fn a_semaphore_counted_per_node_lets_three_holders_in() {
    let mut config = Config::new(Kind::Semaphore(2));
    config.clients = 3;
    config.attempts = 1;
    config.mutation = Some(Mutation::PerNodeSemaphore);
    breaks("permits counted per node", config, K_HOLDERS);
}

#[test]
fn a_stale_proposal_accepted_lets_a_token_repeat() {
    let mut config = Config::new(Kind::FencedLock);
    config.mutation = Some(Mutation::NoStaleCheck);
    breaks("no stale check", config, FENCES_GROW);
}
