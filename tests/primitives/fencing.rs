//! Fencing tokens against real nodes: Kleppmann's paused holder end to end
//! (a child process SIGSTOPped past its validity), a fenced grant that
//! reached a bare majority of which one node restarts empty, idle expiry of the
//! fence state, strictly increasing tokens from two processes under
//! minority faults, and a stale token that must not jump the queue.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, FencedStore, Node, NodeOptions, child_env, settles};
use rand::{RngExt, SeedableRng};
use redlock_sync::Redlock;

fn fenced_client(urls: &[String], fencing: bool) -> Redlock {
    Redlock::builder(urls)
        .fencing(fencing)
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(10))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// Holder A, run as a child process: locks, prints its token, waits for a
/// line on stdin, then writes to the store with that token and prints
/// whether the store accepted it. Run on its own (without the parent's
/// variables), it fails.
#[test]
#[ignore = "run as a child process by a_paused_holder_is_refused_by_a_fenced_store"]
fn paused_holder() {
    let parent = "a_paused_holder_is_refused_by_a_fenced_store";
    let nodes = child_env("REDLOCK_TEST_NODES", parent);
    let store = child_env("REDLOCK_TEST_STORE", parent);
    let fencing = child_env("REDLOCK_TEST_FENCING", parent);
    let urls: Vec<String> = nodes.split(',').map(str::to_owned).collect();
    let fencing = fencing == "1";
    let client = fenced_client(&urls, fencing);
    let guard = client
        .lock("kleppmann", Duration::from_millis(500))
        .unwrap();
    let token = guard.fencing_token().unwrap_or(0);
    println!("token {token}");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    // Resumed long after its validity: a holder that did not check.
    let store = FencedStore::new(&store, "kleppmann:data");
    let accepted = if fencing {
        store.write(token, "written by A")
    } else {
        store.write_unfenced("written by A");
        true
    };
    println!("{}", if accepted { "accepted" } else { "rejected" });
    std::mem::forget(guard); // its lock is long gone; do not touch the nodes
}

/// Runs the scenario; returns what the store holds at the end and whether
/// A's late write was accepted.
fn kleppmann(
    cluster: &Cluster,
    store_node: &Node,
    fencing: bool,
) -> (Option<String>, bool, u64, u64) {
    let mut child = crate::harness::child_test(module_path!(), "paused_holder")
        .args(["--nocapture", "--quiet"])
        .env("REDLOCK_TEST_NODES", cluster.urls().join(","))
        .env("REDLOCK_TEST_STORE", store_node.url())
        .env("REDLOCK_TEST_FENCING", if fencing { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let token_a = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
        if let Some(t) = line.trim().strip_prefix("token ") {
            break t.parse::<u64>().unwrap();
        }
    };
    // A is paused (a GC pause, swap, SIGSTOP) until its lock has expired.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    settles("A's lock expired on every node", || {
        cluster.count_key_now("kleppmann") == 0
    });
    // B takes the lock and writes.
    let b = fenced_client(&cluster.urls(), fencing);
    let guard = b.lock("kleppmann", Duration::from_secs(10)).unwrap();
    let token_b = guard.fencing_token().unwrap_or(0);
    let store = FencedStore::new(&store_node.url(), "kleppmann:data");
    if fencing {
        assert!(store.write(token_b, "written by B"));
    } else {
        store.write_unfenced("written by B");
    }
    // A resumes and writes with what it believes is still its lock.
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    child.stdin.as_mut().unwrap().write_all(b"write\n").unwrap();
    let accepted = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
        match line.trim() {
            "accepted" => break true,
            "rejected" => break false,
            _ => {}
        }
    };
    assert!(child.wait().unwrap().success());
    guard.release().unwrap();
    (store.read(), accepted, token_a, token_b)
}

#[test]
fn a_paused_holder_is_refused_by_a_fenced_store() {
    let cluster = Cluster::start(3);
    let store_node = Node::start(&NodeOptions::default());
    let (value, accepted, a, b) = kleppmann(&cluster, &store_node, true);
    println!("fencing on: A's token {a}, B's token {b}, A's late write accepted: {accepted}");
    assert!(b > a, "B's token {b} is larger than A's {a}");
    assert!(!accepted, "the store refused A's stale token");
    assert_eq!(value.as_deref(), Some("written by B"));

    // The same without fencing: the stale write goes through.
    let store_node = Node::start(&NodeOptions::default());
    let (value, accepted, _, _) = kleppmann(&cluster, &store_node, false);
    println!("fencing off: A's late write accepted: {accepted}");
    assert!(accepted);
    assert_eq!(value.as_deref(), Some("written by A"), "B's write was lost");
}

/// Sets `redlock-fence:{resource}` on `nodes` (tokens far above the clock
/// make `read + 1`, not the wall-clock floor, decide the order).
fn seed_fence(nodes: &[Node], resource: &str, value: u64) {
    for node in nodes {
        let _: () = redis::cmd("SET")
            .arg(format!("redlock-fence:{resource}"))
            .arg(value)
            .query(&mut node.conn())
            .unwrap();
    }
}

/// Far above any wall clock in microseconds (the year 2112), below 2^53.
const SEED: u64 = 1 << 52;

/// A's fenced grant reaches only a bare majority; one node of it restarts
/// empty; B's majority meets A's in that node only. The wall-clock floor
/// keeps the order; with tokens above the clock (seeded) it cannot, which
/// shows that the majority protocol alone does not cover this case.
#[test]
fn a_token_on_a_bare_majority_survives_one_of_it_restarting_empty() {
    for seeded in [false, true] {
        let mut cluster = Cluster::start(5);
        let resource = "bare";
        if seeded {
            seed_fence(&cluster.nodes[..3], resource, SEED);
        }
        // Nodes 3 and 4 are down while A locks: its token is stored on 0-2.
        cluster.nodes[3].kill();
        cluster.nodes[4].kill();
        let a_client = fenced_client(&cluster.urls(), true);
        let first = a_client.lock(resource, Duration::from_secs(5)).unwrap();
        let a = first.fencing_token().unwrap();
        first.release().unwrap();
        // They come back empty, node 2 restarts empty, 0 and 1 go quiet.
        cluster.nodes[3].restart();
        cluster.nodes[4].restart();
        cluster.nodes[2].restart();
        let fences: Vec<Option<String>> = cluster
            .nodes
            .iter()
            .map(|n| n.get_now(&format!("redlock-fence:{resource}")))
            .collect();
        let a_text = Some(a.to_string());
        assert_eq!(fences, [a_text.clone(), a_text, None, None, None]);
        cluster.nodes[0].pause();
        cluster.nodes[1].pause();
        let b_client = fenced_client(&cluster.urls(), true);
        let second = b_client.lock(resource, Duration::from_secs(5)).unwrap();
        let b = second.fencing_token().unwrap();
        if seeded {
            assert!(a > SEED && b < a, "without the floor's help: {b} < {a}");
        } else {
            assert!(b > a, "the floor keeps the order: {b} > {a}");
        }
        drop(second);
        cluster.nodes[0].resume();
        cluster.nodes[1].resume();
    }
}

/// A fencing and a plain client take turns on one resource over the same
/// nodes: each keeps the other out, and every fenced token is larger than
/// the one before, whatever the plain holders did in between.
#[test]
fn fenced_and_plain_pairs_interleave_on_the_same_nodes() {
    let cluster = Cluster::start(3);
    let fenced = fenced_client(&cluster.urls(), true);
    let plain = fenced_client(&cluster.urls(), false);
    let ttl = Duration::from_secs(5);
    let mut last = 0;
    for turn in 0..40 {
        if turn % 2 == 0 {
            let guard = fenced.lock("mixed", ttl).unwrap();
            let token = guard.fencing_token().unwrap();
            assert!(token > last, "{token} after {last}");
            last = token;
            assert!(plain.try_lock("mixed", ttl).unwrap().is_none());
        } else {
            let guard = plain.lock("mixed", ttl).unwrap();
            assert_eq!(guard.fencing_token(), None);
            assert!(fenced.try_lock("mixed", ttl).unwrap().is_none());
        }
    }
}

#[test]
fn fence_keys_are_reserved_and_garbage_in_one_is_a_node_error() {
    let cluster = Cluster::start(3);
    let client = fenced_client(&cluster.urls(), true);
    let err = client
        .try_lock("redlock-fence:x", Duration::from_secs(5))
        .unwrap_err();
    assert!(matches!(err, redlock_sync::Error::Config { .. }), "{err}");
    // A fence key that holds no number on a majority: a clear node error,
    // and the lock key is not set there.
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("SET")
            .arg("redlock-fence:g")
            .arg("not a number")
            .query(&mut node.conn())
            .unwrap();
    }
    let err = client.try_lock("g", Duration::from_secs(5)).unwrap_err();
    assert!(err.to_string().contains("holds no fence value"), "{err}");
    assert!(cluster.nodes[..2].iter().all(|n| n.get_now("g").is_none()));
    settles("the third node's lock released", || {
        cluster.count_key_now("g") == 0
    });
}

/// Where the fence value stands before the first acquisition in
/// [`tokens_keep_growing_after_the_fence_state_expired`].
#[derive(Clone, Copy, Debug)]
enum Fence {
    /// None: tokens come from the clock.
    Clock,
    /// Seeded this far above the clock (a client whose clock runs ahead).
    Ahead(Duration),
    /// Seeded at [`SEED`], decades above the clock.
    Far,
}

/// Tokens keep growing after the fence state expired, provided client
/// clocks are off by less than `fencing_idle` (its docs; crate docs,
/// "Fencing tokens", assumption 2): the first token after `fencing_idle`
/// without acquisitions comes from the clock (the floor), which has passed
/// every earlier token by then. Three cases:
/// * tokens from the clock: the next is not below the clock at its call,
///   and larger than every earlier one;
/// * a fence value 1.5 s above the clock, `fencing_idle` 3 s: the stored
///   value, not the clock, orders the tokens while it lives (each
///   acquisition is refused as stale and proposes one more than the value
///   reported), and after its expiry the clock-based token is still larger;
/// * a fence value decades above the clock (a lead beyond `fencing_idle`):
///   carried the same while it lives, but once it expired the next token is
///   the clock again, *below* the earlier ones. That lead is outside the
///   guarantee; this case shows where the guarantee ends.
#[test]
fn tokens_keep_growing_after_the_fence_state_expired() {
    let cases = [
        (Fence::Clock, Duration::from_secs(1)),
        // A lead of half the idle period: the five acquisitions happen
        // well within 1.5 s of seeding even on a loaded machine (so the
        // clock is still below the value), and the expiry comes at least 3 s
        // after the last of them (so the clock has passed it by then).
        (
            Fence::Ahead(Duration::from_millis(1_500)),
            Duration::from_secs(3),
        ),
        (Fence::Far, Duration::from_secs(1)),
    ];
    for (fence, idle) in cases {
        let cluster = Cluster::start(3);
        let seeded = match fence {
            Fence::Clock => None,
            Fence::Ahead(lead) => {
                Some(wall_clock_micros() + u64::try_from(lead.as_micros()).unwrap())
            }
            Fence::Far => Some(SEED),
        };
        if let Some(value) = seeded {
            seed_fence(&cluster.nodes, "idle", value);
        }
        let client = Redlock::builder(cluster.urls())
            .fencing(true)
            .fencing_idle(idle)
            .build()
            .unwrap();
        let tokens: Vec<u64> = (0..5)
            .map(|_| {
                let guard = client.lock("idle", Duration::from_secs(5)).unwrap();
                guard.fencing_token().unwrap()
            })
            .collect();
        let last = *tokens.last().unwrap();
        match seeded {
            Some(value) => {
                let carried: Vec<u64> = (1..=5).map(|i| value + i).collect();
                assert_eq!(
                    tokens, carried,
                    "{fence:?}: the stored value, not the clock, orders them"
                );
            }
            None => {
                assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
                assert!(last < SEED, "from the clock: {tokens:?}");
            }
        }
        // The last round returned at a majority: node 0's write may still
        // be on its way.
        let idle_ms = i64::try_from(idle.as_millis()).unwrap();
        let mut pttl = 0;
        settles("the fence state on node 0", || {
            pttl = cluster.nodes[0].pttl_now("redlock-fence:idle");
            pttl > 0
        });
        assert!(
            pttl <= idle_ms,
            "{fence:?}: kept for the idle period: {pttl}"
        );
        settles("the fence state expired on every node", || {
            cluster.count_key_now("redlock-fence:idle") == 0
        });
        let clock = wall_clock_micros();
        let after = client.lock("idle", Duration::from_secs(5)).unwrap();
        let next = after.fencing_token().unwrap();
        assert!(
            next >= clock,
            "{fence:?}: the floor: {next} is below the clock at the call, {clock}"
        );
        match fence {
            Fence::Clock | Fence::Ahead(_) => {
                assert!(next > last, "{fence:?}: {next} after {tokens:?}");
            }
            Fence::Far => assert!(
                next < tokens[0],
                "the expired lead beyond fencing_idle is not kept: {next} after {tokens:?}"
            ),
        }
    }
}

/// Microseconds since the Unix epoch: the clock tokens are never below.
fn wall_clock_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// The child's part of the contention run: like the parent's workers. Run
/// on its own (without the parent's variables), it fails.
#[test]
#[ignore = "run as a child process by tokens_strictly_increase_under_minority_faults"]
fn fenced_contender() {
    let parent = "tokens_strictly_increase_under_minority_faults";
    let nodes = child_env("REDLOCK_TEST_NODES", parent);
    let witness = child_env("REDLOCK_TEST_WITNESS", parent);
    let result = child_env("REDLOCK_TEST_RESULT", parent);
    let secs = child_env("REDLOCK_TEST_SECS", parent);
    let urls: Vec<String> = nodes.split(',').map(str::to_owned).collect();
    let until = Instant::now() + Duration::from_secs(secs.parse().unwrap());
    let (acquired, violations) = contend_fenced(&urls, &witness, until);
    std::fs::write(result, format!("{acquired} {violations}")).unwrap();
}

/// In the critical section, the witness checks (atomically) that the token
/// is larger than the last one it saw and that nobody else is inside.
const CHECK: &str = r#"local inside = redis.call("incr", KEYS[2])
local last = tonumber(redis.call("get", KEYS[1]) or "0")
local bad = 0
if tonumber(ARGV[1]) <= last or inside ~= 1 then bad = 1 end
redis.call("set", KEYS[1], ARGV[1])
redis.call("decr", KEYS[2])
return bad"#;

fn contend_fenced(urls: &[String], witness: &str, until: Instant) -> (u64, u64) {
    let client = fenced_client(urls, true);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let client = &client;
                s.spawn(move || {
                    let mut conn = redis::Client::open(witness)
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    let (mut acquired, mut violations) = (0u64, 0u64);
                    while Instant::now() < until {
                        let Ok(guard) = client.lock("fenced:shared", Duration::from_secs(2)) else {
                            continue;
                        };
                        let token = guard.fencing_token().unwrap();
                        let bad: i64 = redis::cmd("EVAL")
                            .arg(CHECK)
                            .arg(2)
                            .arg("witness:last-token")
                            .arg("witness:inside")
                            .arg(token)
                            .query(&mut conn)
                            .unwrap();
                        // A holder past its validity may be overtaken: only
                        // a valid holder's order counts.
                        if bad == 1 && guard.is_valid() {
                            violations += 1;
                        }
                        acquired += 1;
                        drop(guard);
                    }
                    (acquired, violations)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, v), (a2, v2)| (a + a2, v + v2))
    })
}

fn soak_secs() -> u64 {
    std::env::var("REDLOCK_FENCE_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

/// Thousands of acquisitions from two processes (2 threads each) while a
/// seeded schedule pauses, kills and (after a TTL) restarts empty random
/// minorities: every token a valid holder sees is larger than the last one
/// the witness saw.
#[test]
fn tokens_strictly_increase_under_minority_faults() {
    let mut cluster = Cluster::start(5);
    let witness = Node::start(&NodeOptions::default());
    let secs = soak_secs();
    let seed: u64 = std::env::var("REDLOCK_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!("fencing soak: {secs} s, seed {seed}");
    let result = std::env::temp_dir().join(format!("redlock-fenced-{}", std::process::id()));
    // Tokens above the clock: the nodes' refusals of stale tokens, not the
    // wall-clock floor, must order them.
    seed_fence(&cluster.nodes, "fenced:shared", SEED);
    let mut child = crate::harness::child_test(module_path!(), "fenced_contender")
        .arg("--quiet")
        .env("REDLOCK_TEST_NODES", cluster.urls().join(","))
        .env("REDLOCK_TEST_WITNESS", witness.url())
        .env("REDLOCK_TEST_RESULT", &result)
        .env("REDLOCK_TEST_SECS", secs.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let urls = cluster.urls();
    let (ours, faults) = std::thread::scope(|s| {
        let here = s.spawn(|| contend_fenced(&urls, &witness.url(), until));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut faults = 0;
        while Instant::now() + Duration::from_millis(600) < until {
            let victim = rng.random_range(0..5);
            match rng.random_range(0..3) {
                0 => {
                    cluster.nodes[victim].pause();
                    std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
                    cluster.nodes[victim].resume();
                }
                1 => cluster.nodes[victim].restart_after(Duration::from_millis(2_100)),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
            faults += 1;
        }
        (here.join().unwrap(), faults)
    });
    assert!(child.wait().unwrap().success());
    let theirs = std::fs::read_to_string(&result).unwrap();
    let _ = std::fs::remove_file(&result);
    let mut parts = theirs.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    let (acq, bad) = (parts.next().unwrap(), parts.next().unwrap());
    println!(
        "fencing soak: {faults} faults; parent {} acquisitions, child {acq}; violations {} + {bad}",
        ours.0, ours.1
    );
    assert!(ours.0 > 20 && acq > 20, "both processes made progress");
    assert_eq!(
        ours.1 + bad,
        0,
        "a token not larger than the previous holder's"
    );
    let last: u64 = witness
        .get_now("witness:last-token")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        last > SEED,
        "tokens came from the majority protocol: {last}"
    );
}

/// A fenced waiter queued behind another finds the resource free while its
/// proposed token is stale on the gate node alone. The gate node answers
/// "others queued first", not "stale": otherwise the round would go on to
/// the other nodes, which grant the token, and the waiter would take the
/// resource ahead of the head of the queue.
#[test]
fn a_stale_token_does_not_let_a_waiter_past_the_head_of_the_queue() {
    let cluster = Cluster::start(3);
    let resource = "jump";
    let holder = fenced_client(&cluster.urls(), false);
    // (A round whose gate node answers slower than a few usual round trips
    // goes on to the others; the gate node's "others queued first" still
    // counts when it comes within the round's time, so on a loaded machine
    // this waiter does not go first either.)
    let waiter = Redlock::builder(cluster.urls())
        .fencing(true)
        .retry_delay(Duration::from_millis(250))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let guard = holder.lock(resource, Duration::from_secs(10)).unwrap();
    // Another waiter, queued first everywhere (only the gate node's queue
    // counts), alive far longer than the test.
    for node in &cluster.nodes {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(format!("redlock-queue:{resource}"))
            .arg(0)
            .arg("elsewhere:1")
            .cmd("ZADD")
            .arg(format!("redlock-alive:{resource}"))
            .arg(SEED)
            .arg("elsewhere:1")
            .query(&mut node.conn())
            .unwrap();
    }
    std::thread::scope(|s| {
        let waits =
            s.spawn(|| waiter.lock_for(resource, Duration::from_secs(60), Duration::from_secs(1)));
        let queue_len = |n: &Node| -> usize {
            n.query(redis::cmd("ZCARD").arg(format!("redlock-queue:{resource}")))
        };
        // The gate node as the reading that saw both queued.
        let mut gate = None;
        settles("the waiter queued behind", || {
            gate = cluster.nodes.iter().find(|n| queue_len(n) == 2);
            gate.is_some()
        });
        let gate = gate.unwrap();
        seed_fence(std::slice::from_ref(gate), resource, SEED);
        guard.release().unwrap();
        let result = waits.join().unwrap();
        assert!(
            matches!(result, Err(redlock_sync::Error::Busy { .. })),
            "the head of the queue goes first: {result:?}"
        );
    });
    // The waiter's failed rounds are cleaned up after it answered `Busy`
    // (read once, "left 2, right 0" failed a BUSY=2 run): awaited. Its
    // 60 s TTL outlives the wait, so a key left behind still fails it.
    cluster.await_count(resource, 0);
}
