//! Mutual exclusion under contention: threads in this process and two child
//! processes (this test binary re-run) contend for one resource, witnessed by
//! a Redis node outside the lock set.

use std::process::Stdio;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::harness::{Cluster, Contention, Inside, Node, NodeOptions, child_env, contend_while};
use redlock_sync::Redlock;

const RESOURCE: &str = "exclusion:shared";
const TTL: Duration = Duration::from_secs(5);
/// Each process contends at least this long...
const RUN: Duration = Duration::from_secs(5);
/// ... and until it got in this many times, so that the witness has
/// sections to compare however slow the machine is (seen: thousands in
/// `RUN`).
const AT_LEAST: usize = 20;
/// A process that has not got in `AT_LEAST` times by then fails.
const CAP: Duration = Duration::from_secs(60);

/// The child process's part: contends like the parent's threads and writes
/// what it saw to a file. Run on its own (without the parent's variables),
/// it fails.
#[test]
#[ignore = "run as a child process by mutual_exclusion_across_threads_and_processes"]
fn child_contender() {
    let parent = "mutual_exclusion_across_threads_and_processes";
    let nodes = child_env("REDLOCK_TEST_NODES", parent);
    let witness = child_env("REDLOCK_TEST_WITNESS", parent);
    let result = child_env("REDLOCK_TEST_RESULT", parent);
    let client = crate::harness::client(nodes.split(','));
    let seen = run_threads(&client, &witness, 3);
    let line = format!("{} {} {}", seen.acquisitions, seen.overlaps, seen.overran);
    std::fs::write(result, line).expect("write the child's result");
}

fn run_threads(client: &Redlock, witness: &str, threads: usize) -> Contention {
    let start = Instant::now();
    let got_in = AtomicUsize::new(0);
    let going = || {
        start.elapsed() < RUN
            || (got_in.load(Ordering::Relaxed) < AT_LEAST && start.elapsed() < CAP)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| contend_while(client, witness, RESOURCE, TTL, going, &got_in)))
            .collect();
        let mut total = Contention::default();
        for h in handles {
            total += h.join().unwrap();
        }
        total
    })
}

#[test]
fn mutual_exclusion_across_threads_and_processes() {
    let _turn = crate::harness::alone();
    let cluster = Cluster::start(5);
    let witness = Node::start(&NodeOptions::default());
    let nodes = cluster.urls().join(",");
    let results: Vec<_> = (0..2)
        .map(|i| std::env::temp_dir().join(format!("redlock-exclusion-{}-{i}", std::process::id())))
        .collect();
    let children: Vec<_> = results
        .iter()
        .map(|result| {
            crate::harness::child_test(module_path!(), "child_contender")
                .arg("--nocapture")
                .args(["--test-threads", "1"])
                .env("REDLOCK_TEST_NODES", &nodes)
                .env("REDLOCK_TEST_WITNESS", witness.url())
                .env("REDLOCK_TEST_RESULT", result)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("re-run the test binary as a child")
        })
        .collect();
    let client = crate::harness::client(cluster.urls());
    let mut total = run_threads(&client, &witness.url(), 4);
    let parent = total;
    let mut per_child = Vec::new();
    for (mut child, result) in children.into_iter().zip(&results) {
        assert!(child.wait().unwrap().success(), "child failed");
        let line = std::fs::read_to_string(result).expect("the child wrote no result");
        let _ = std::fs::remove_file(result);
        let n: Vec<u64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
        let seen = Contention {
            acquisitions: n[0],
            overlaps: n[1],
            overran: n[2],
        };
        per_child.push(seen.acquisitions);
        total += seen;
    }
    println!(
        "exclusion: {} acquisitions in at least {:?}: parent {}, children {:?}; overlaps {}, overran {}",
        total.acquisitions, RUN, parent.acquisitions, per_child, total.overlaps, total.overran
    );
    total.assert_exclusive(&witness, RESOURCE);
    // Each of the three processes got in enough times to compare (how
    // often in 5 s is the machine's speed, printed above, not asserted).
    let enough = AT_LEAST as u64;
    assert!(
        parent.acquisitions >= enough,
        "the parent got in {} times",
        parent.acquisitions
    );
    assert!(
        per_child.iter().all(|&n| n >= enough),
        "a child got in fewer than {AT_LEAST} times in {CAP:?}: {per_child:?}"
    );
}

/// The witness counts an overlap when the entering holder and one already
/// inside are both valid at that moment, and only then: not when the one
/// inside, nor when the one entering, had run out of validity (either may
/// be overtaken; its section shows as overrun instead). Holders and their
/// validity are made up here; no lock is taken.
#[test]
fn the_witness_counts_two_valid_holders_inside_and_no_holder_past_its_validity() {
    let witness = Node::start(&NodeOptions::default());
    let mut conn = witness.conn();
    let holder = |who: &str| Inside::new("witness-check", who);
    let valid = || Instant::now() + Duration::from_secs(60);
    let ran_out = || Instant::now() - Duration::from_secs(1);
    let (a, b, c, d) = (holder("a"), holder("b"), holder("c"), holder("d"));
    assert!(!a.enter(&mut conn, valid()), "alone inside");
    assert!(b.enter(&mut conn, valid()), "two valid holders inside");
    b.exit(&mut conn);
    assert!(!c.enter(&mut conn, ran_out()), "the entering one ran out");
    c.exit(&mut conn);
    a.exit(&mut conn);
    assert!(!c.enter(&mut conn, ran_out()), "alone inside, ran out");
    assert!(!d.enter(&mut conn, valid()), "the one inside ran out");
    d.exit(&mut conn);
    assert!(
        !b.enter(&mut conn, valid()),
        "the one inside ran out, the other left"
    );
    assert!(d.enter(&mut conn, valid()), "again two valid holders");
}
