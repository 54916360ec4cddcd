//! A node whose wall clock steps ahead drops its keys early by the step:
//! the client must never count it while that matters. Real nodes, their
//! clocks moved by the harness's preload library (`harness::clock`).
//!
//! The scene of the two-holder cases: five nodes; A holds on nodes 0–2
//! (3 and 4 do not answer A); node 2's clock steps 61 s ahead, so A's key
//! there expires while A's 60 s validity still runs (long enough that no
//! stall of a loaded test process, 10 s and more seen here, ends it before
//! the test has looked); B asks for the lock and may reach nodes 2–4.

use std::time::{Duration, Instant};

use crate::harness::{Cluster, Fault, NodeOptions, Proxy, eventually, settles};
use redlock_sync::{Error, FailureKind, LockGuard, Redlock};

const TTL: Duration = Duration::from_secs(10);
const KEY: &str = "clock:r";
/// A's lease in the two-holder scene, and the step that takes its keys.
const SCENE: Duration = Duration::from_secs(60);
const STEP_MS: i64 = 61_000;

fn shifted(n: usize) -> Cluster {
    Cluster::start_with(
        n,
        &NodeOptions {
            shift_clock: true,
            ..NodeOptions::default()
        },
    )
}

/// A client with no retries that reaches every node directly.
fn direct(cluster: &Cluster) -> Redlock {
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .expect("client")
}

/// `client` takes `key` for `ttl` where the test needs it to: a loaded
/// test process may stall past a client's first connections (its start
/// waits about a second), a node's answer (250 ms for A), or the other
/// readings a node's clock is judged against (a vote whose clock could not
/// be judged in the round does not count, for that round), so a round that
/// failed only for such want of answers is tried again, for 20 s of the
/// test running at most: a gap between two tries counts 500 ms at most,
/// since a stall of the whole process (seen here: 10 s and more) gives the
/// client's threads no time either. Any other refusal (a clock ahead or
/// jumped, a quarantine) fails the test at once, with its cause: it is
/// what the tests assert.
fn takes(client: &Redlock, key: &str, ttl: Duration) -> LockGuard {
    const BUDGET: Duration = Duration::from_secs(20);
    const GAP_COUNTED: Duration = Duration::from_millis(500);
    let unanswered = |f: &redlock_sync::NodeFailure| match f.kind() {
        FailureKind::Timeout | FailureKind::Connection | FailureKind::Unanswered => true,
        FailureKind::Clock => f.detail().contains("could not be judged"),
        _ => false,
    };
    let (mut spent, mut longest) = (Duration::ZERO, Duration::ZERO);
    let mut last = Instant::now();
    loop {
        let got = client.lock(key, ttl);
        let gap = last.elapsed();
        last = Instant::now();
        spent += gap.min(GAP_COUNTED);
        longest = longest.max(gap);
        match got {
            Ok(guard) => return guard,
            Err(Error::NoQuorum { failures, .. })
                if spent < BUDGET && failures.iter().all(unanswered) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("{key}: {err} (tried for {spent:?}; longest gap {longest:?})"),
        }
    }
}

/// Client A: nodes 3 and 4 behind proxies that stall (they never answer
/// A), so that A's lock stands on nodes 0–2 alone.
struct ClientA {
    client: Redlock,
    _proxies: Vec<Proxy>,
}

fn client_a(cluster: &Cluster) -> ClientA {
    client_a_with(cluster, false)
}

fn client_a_with(cluster: &Cluster, fencing: bool) -> ClientA {
    let proxies: Vec<Proxy> = cluster.nodes[3..]
        .iter()
        .map(|n| {
            let p = Proxy::start(n.port);
            p.set(Fault::Stall);
            p
        })
        .collect();
    let mut urls: Vec<String> = cluster.nodes[..3].iter().map(|n| n.url()).collect();
    urls.extend(proxies.iter().map(Proxy::url));
    let client = crate::harness::builder(&urls)
        .fencing(fencing)
        .retry_count(0)
        .node_timeout(Duration::from_millis(250))
        .build()
        .expect("client A");
    ClientA {
        client,
        _proxies: proxies,
    }
}

/// A holds `KEY` for [`SCENE`] on nodes 0–2 only.
fn a_holds(a: &ClientA, cluster: &Cluster) -> LockGuard {
    a_holds_for(a, cluster, SCENE)
}

/// A holds `KEY` for `ttl` on nodes 0–2 only.
///
/// A stands on nodes 0–2 alone: each must hold its key while A's lease is
/// valid, and a key missing then fails the test, said in full. A lease that
/// ran out before its keys were read (the test process stalled for the
/// whole TTL: seen twice on a loaded machine, 10 s) sets no scene: it is
/// taken again, three times at most.
fn a_holds_for(a: &ClientA, cluster: &Cluster, ttl: Duration) -> LockGuard {
    for _ in 0..3 {
        let asked = Instant::now();
        let guard = takes(&a.client, KEY, ttl);
        let granted = asked.elapsed();
        let keys: Vec<(Option<String>, i64)> = cluster.nodes[..3]
            .iter()
            .map(|n| (n.get_now(KEY), n.pttl_now(KEY)))
            .collect();
        if keys.iter().all(|(value, _)| value.is_some()) {
            return guard;
        }
        assert!(
            !guard.is_valid(),
            "A's key (value, PTTL) on nodes 0-2: {keys:?}; A's lease has {:?} left; \
             granted in {granted:?}, read by {:?}; A's nodes: {:#?}",
            guard.remaining(),
            asked.elapsed(),
            a.client.node_health()
        );
        eprintln!(
            "A's lease ran out before its keys were read (granted in {granted:?}, \
             read by {:?}): again",
            asked.elapsed()
        );
    }
    panic!("A's lease ran out before its keys were read, three times");
}

/// Node 2's clock steps `ms` ahead, and A's key there is gone while A's
/// lease is still valid.
fn node_2_jumps(cluster: &Cluster, guard: &LockGuard, ms: i64) {
    let before = cluster.nodes[2].time_ms();
    cluster.nodes[2].set_clock_offset(ms);
    let after = cluster.nodes[2].time_ms();
    assert!(
        after - before >= ms - 50,
        "TIME moved by {} ms",
        after - before
    );
    settles("A's key on node 2 expired early", || {
        cluster.nodes[2].get_now(KEY).is_none()
    });
    assert!(guard.is_valid(), "A's lease still runs: the scene is set");
}

/// `client`'s verdict on `node` once it refuses it: a call returns at its
/// majority, so a node's answer (and its clock's judgement) may land after;
/// and under load the node's answer may miss its timeout and bring no
/// reading at all, so until then the client talks to the nodes again.
fn refused_by(client: &Redlock, node: usize) -> redlock_sync::NodeFailure {
    let mut refusal = None;
    settles("the node refused", || {
        refusal = client.node_health()[node].refusal().cloned();
        if refusal.is_none() {
            let _ = client.try_lock("clock:probe-refusal", TTL);
        }
        refusal.is_some()
    });
    refusal.expect("refused")
}

/// B must not get the lock while A's lease is valid.
fn b_is_refused(b: &Redlock, a: &LockGuard) {
    let got = b.try_lock(KEY, TTL);
    let valid = a.is_valid();
    assert!(
        !(valid && matches!(got, Ok(Some(_)))),
        "two holders: A's lease is valid and B got the lock"
    );
    assert!(valid, "the check ran while A's lease was valid");
}

#[test]
fn the_preload_library_moves_a_nodes_wall_clock_and_its_expiry() {
    let cluster = shifted(1);
    let node = &cluster.nodes[0];
    let _: () = node.query(redis::cmd("SET").arg("k").arg("v").arg("PX").arg(20_000));
    let t0 = node.time_ms();
    node.set_clock_offset(9_000);
    let t1 = node.time_ms();
    assert!(
        (8_950..9_500).contains(&(t1 - t0)),
        "TIME moved {} ms",
        t1 - t0
    );
    let left: i64 = node.query(redis::cmd("PTTL").arg("k"));
    assert!(left <= 11_000, "PTTL {left}: the key expires 9 s earlier");
}

/// Case 1: B starts after the jump. It never knew node 2's clock, but node
/// 2 disagrees with the other four by 61 s.
#[test]
fn a_client_started_after_the_jump_does_not_count_the_node() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let guard = a_holds(&a, &cluster);
    node_2_jumps(&cluster, &guard, STEP_MS);
    let b = direct(&cluster);
    b_is_refused(&b, &guard);
    let refusal = refused_by(&b, 2);
    assert_eq!(refusal.kind(), FailureKind::Clock);
    assert!(refusal.detail().contains("ahead"), "{refusal}");
    assert!(refusal.detail().contains("NTP"), "{refusal}");
    let health = b.node_health();
    for node in [0, 1, 3, 4] {
        assert!(health[node].refusal().is_none(), "node {node} counts");
    }
    // verify() asks every node now, on fresh connections: the same verdict.
    let verified = b.verify();
    let refusal = verified[2].refusal().expect("verify refuses node 2");
    assert_eq!(refusal.kind(), FailureKind::Clock, "{refusal}");
}

/// B reads every node (a lock of its own), then A holds on nodes 0–2 and
/// node 2's clock jumps 61 s.
fn b_knew_node_2_then_it_jumped(cluster: &Cluster) -> (ClientA, Redlock, LockGuard) {
    let a = client_a(cluster);
    let b = direct(cluster);
    takes(&b, "clock:b", TTL).release().unwrap();
    let guard = a_holds(&a, cluster);
    node_2_jumps(cluster, &guard, STEP_MS);
    (a, b, guard)
}

/// Case 2: B knew node 2 (a lock of its own went through it) before the
/// jump.
#[test]
fn a_client_that_knew_the_node_sees_the_jump() {
    let cluster = shifted(5);
    let (_a, b, guard) = b_knew_node_2_then_it_jumped(&cluster);
    b_is_refused(&b, &guard);
    let refusal = refused_by(&b, 2);
    assert_eq!(refusal.kind(), FailureKind::Clock);
    assert!(refusal.detail().contains("jumped"), "{refusal}");
}

/// Case 2b: three of the five clocks step 61 s ahead at once (one bad time
/// source behind them, or VMs resumed together). A's keys expire on all
/// three; the median of B's readings steps with them, but each of the
/// three stepped against B's own clock: three jumps, none counted.
#[test]
fn three_clocks_stepping_together_are_three_jumps() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let b = direct(&cluster);
    takes(&b, "clock:b", TTL).release().unwrap();
    let guard = a_holds(&a, &cluster);
    for node in &cluster.nodes[..3] {
        node.set_clock_offset(STEP_MS);
    }
    settles("A's keys expired early on nodes 0-2", || {
        cluster.nodes[..3].iter().all(|n| n.get_now(KEY).is_none())
    });
    assert!(guard.is_valid(), "A's lease still runs: the scene is set");
    b_is_refused(&b, &guard);
    for node in 0..3 {
        let refusal = refused_by(&b, node);
        assert_eq!(refusal.kind(), FailureKind::Clock, "node {node}: {refusal}");
        assert!(
            refusal.detail().contains("jumped"),
            "node {node}: {refusal}"
        );
    }
    b_is_refused(&b, &guard);
}

/// Case 1b: B starts after a jump of node 2, and node 2's reading always
/// lands first (B reaches the others through 100 ms of latency), so B's
/// start-up judges it against nothing; B then idles past the freshness
/// window (60 s), so that at its next round every other reading is stale.
/// Node 2's vote waits for the round's other readings and is judged
/// against them: refused. (A holds with a 300 s TTL, so that its lease
/// outlives the idle minute; node 2 steps 400 s, past A's key there.)
#[test]
fn a_client_started_after_a_jump_that_idles_never_counts_the_node() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let guard = a_holds_for(&a, &cluster, Duration::from_secs(300));
    node_2_jumps(&cluster, &guard, 400_000);
    let slow: Vec<Proxy> = [0, 1, 3, 4]
        .iter()
        .map(|&i| {
            let p = Proxy::start(cluster.nodes[i].port);
            p.set(Fault::Latency(Duration::from_millis(100)));
            p
        })
        .collect();
    let mut urls: Vec<String> = slow.iter().map(Proxy::url).collect();
    urls.insert(2, cluster.nodes[2].url());
    let b = crate::harness::builder(&urls)
        .retry_count(0)
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("client B");
    // Time itself is what the test waits for: every reading B took at
    // start-up goes stale.
    std::thread::sleep(Duration::from_secs(61));
    b_is_refused(&b, &guard);
    let refusal = refused_by(&b, 2);
    assert_eq!(refusal.kind(), FailureKind::Clock, "{refusal}");
    // Judged against the others (not left unjudged): it is ahead of them.
    assert!(refusal.detail().contains("ahead"), "{refusal}");
    b_is_refused(&b, &guard);
}

/// A deployment whose clocks can never be judged against each other is
/// said once at build: one listed node.
#[test]
fn one_listed_node_is_said_at_build() {
    crate::harness::capture_logs();
    let mark = crate::harness::log_mark();
    let cluster = shifted(1);
    let client = direct(&cluster);
    takes(&client, "clock:one", TTL).release().unwrap();
    let said = crate::harness::logs_since(mark)
        .iter()
        .filter(|l| l.starts_with("WARN") && l.contains("never judged against another"))
        .count();
    assert!(said >= 1, "{:#?}", crate::harness::logs_since(mark));
}

/// Another client's longer lease: A holds for 60 s on nodes 0-2; X, whose
/// own leases are 10 s, knew node 2 and sees it jump 70 s (past A's key
/// there). X keeps node 2 out as long as A's lease may stand — A announced
/// its 60 s on the node — not only for its own 10 s and a second.
#[test]
fn a_jumped_node_stays_out_while_another_clients_longer_lease_may_stand() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let x = direct(&cluster);
    takes(&x, "clock:x", TTL).release().unwrap();
    let guard = a_holds_for(&a, &cluster, Duration::from_secs(60));
    node_2_jumps(&cluster, &guard, 70_000);
    let _ = x.try_lock("clock:x", TTL);
    assert!(
        refused_by(&x, 2).detail().contains("jumped"),
        "X saw the jump"
    );
    settles("the marker lasts A's TTL", || {
        cluster.nodes[2].pttl_now("redlock:clock-jumped") > 50_000
    });
    // NTP steps it back: the clocks agree again, and only the jump keeps
    // node 2 out. Past X's own period (its 10 s TTL and a second): time
    // itself is what the test waits for.
    cluster.nodes[2].set_clock_offset(0);
    std::thread::sleep(Duration::from_secs(12));
    b_is_refused(&x, &guard);
    let refusal = refused_by(&x, 2);
    assert!(refusal.detail().contains("jumped"), "{refusal}");
}

/// Another client's shorter leases: Y uses 1 s leases (a 12 ms drift
/// allowance); X's are 60 s (602 ms). Node 2's clock steps 300 ms: that
/// cuts Y's leases there beyond their allowance, so X, which knew node 2,
/// takes it for a jump too — Y announced its 1 s on the node.
#[test]
fn a_step_that_cuts_another_clients_shorter_leases_is_a_jump() {
    let cluster = shifted(5);
    let minute = Duration::from_secs(60);
    let x = direct(&cluster);
    takes(&x, "clock:x", minute).release().unwrap();
    let y = direct(&cluster);
    takes(&y, "clock:y", Duration::from_secs(1))
        .release()
        .unwrap();
    cluster.nodes[2].set_clock_offset(300);
    let _ = x.try_lock("clock:x", minute);
    let refusal = refused_by(&x, 2);
    assert_eq!(refusal.kind(), FailureKind::Clock, "{refusal}");
    assert!(refusal.detail().contains("jumped"), "{refusal}");
}

/// Case 3: B saw the jump, then NTP stepped node 2's clock back: the clocks
/// agree again, but the keys node 2 dropped are still gone. B keeps it out;
/// so does C, started after the step back, from the marker B left.
#[test]
fn a_jump_undone_by_ntp_keeps_its_quarantine_for_every_client() {
    crate::harness::capture_logs();
    let mark = crate::harness::log_mark();
    let cluster = shifted(5);
    let (_a, b, guard) = b_knew_node_2_then_it_jumped(&cluster);
    // B sees the jump (a round of its own reaches node 2).
    let _ = b.try_lock("clock:b", TTL);
    assert_eq!(
        refused_by(&b, 2).kind(),
        FailureKind::Clock,
        "B saw the jump"
    );
    settles("B's marker on node 2", || {
        cluster.nodes[2].get_now("redlock:clock-jumped").is_some()
    });
    cluster.nodes[2].set_clock_offset(0);
    b_is_refused(&b, &guard);
    let c = direct(&cluster);
    b_is_refused(&c, &guard);
    let refusal = refused_by(&c, 2);
    assert!(
        refusal.detail().contains("redlock:clock-jumped"),
        "{refusal}"
    );
    // C reads the marker again at every examination: news once.
    c.verify();
    c.verify();
    let node = cluster.nodes[2].address();
    let said = crate::harness::logs_since(mark)
        .iter()
        .filter(|l| l.starts_with("WARN") && l.contains(&node))
        .filter(|l| l.contains("redlock:clock-jumped"))
        .count();
    assert_eq!(said, 1, "{:#?}", crate::harness::logs_since(mark));
}

/// The holder learns it: a jump that leaves its lease without a majority
/// fires its lost token, and its validity shows it.
///
/// The lease is of 60 s and node 2's clock steps 61 s: the jump ends the
/// lease at once, and its end moves by the jump. (A 10 s lease could run
/// out by itself in a stall of the loaded test process, which a jump learnt
/// of cannot be told from by what is left: seen with 1.7 s left once A
/// held.)
#[test]
fn the_holders_lost_token_fires_when_it_learns_of_the_jump() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let guard = a_holds_for(&a, &cluster, Duration::from_secs(60));
    let lost = guard.lost_token();
    let runs_until = guard.valid_until();
    node_2_jumps(&cluster, &guard, 61_000);
    assert!(!lost.is_cancelled(), "A cannot know yet");
    // A's client talks to node 2 (another lock) until it reads the jump:
    // under load one exchange may miss the 250 ms node timeout and bring
    // no reading.
    let deadline = Instant::now() + Duration::from_secs(10);
    while guard.is_valid() {
        let _ = a.client.try_lock("clock:other", TTL);
        if !guard.is_valid() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the validity never lost the jump: {:?} left; A's nodes: {:#?}",
            guard.remaining(),
            a.client.node_health()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its end moved by the jump (61 s, less what the readings leave
    // uncertain), not by time running out; and node 2's clock did it.
    let cut = runs_until.saturating_duration_since(guard.valid_until());
    assert!(
        cut > Duration::from_secs(30),
        "the lease was cut by {cut:?}"
    );
    let refusal = a.client.node_health()[2].refusal().cloned();
    assert_eq!(refusal.map(|r| r.kind()), Some(FailureKind::Clock));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !lost.is_cancelled() {
        assert!(Instant::now() < deadline, "the lost token never fired");
        lost.sleep(Duration::from_millis(100));
    }
}

/// A step smaller than the drift allowance (102 ms for a 10 s TTL) cuts no
/// lease short of its validity: nothing changes.
#[test]
fn a_jump_below_the_drift_allowance_changes_nothing() {
    let cluster = shifted(5);
    let a = client_a(&cluster);
    let guard = a_holds_for(&a, &cluster, TTL);
    // Its end, not what is left (which a stall of the test shortens).
    let ends = guard.valid_until();
    cluster.nodes[2].set_clock_offset(40);
    // A needs node 2 for a majority: it still counts.
    takes(&a.client, "clock:small", TTL).release().unwrap();
    assert!(a.client.node_health()[2].refusal().is_none());
    // A cut of the 40 ms step (or any) would move its end.
    assert_eq!(guard.valid_until(), ends, "A's lease was cut short");
    let b = direct(&cluster);
    assert!(b.node_health()[2].refusal().is_none());
}

/// A clock steadily off: below `max_clock_offset` (and the round's drift
/// allowance) it counts; above, it is refused with the reason.
#[test]
fn a_steady_offset_counts_below_the_bound_and_is_refused_above() {
    let mut cluster = shifted(3);
    cluster.nodes[2].set_clock_offset(300);
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    let client = crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    // A 60 s TTL allows 602 ms in a round; the bound is 500 ms.
    let ttl = Duration::from_secs(60);
    takes(&client, "clock:steady", ttl).release().unwrap();
    // With node 1 paused, nodes 0 and 2 make the majority.
    cluster.nodes[1].pause();
    let guard = takes(&client, "clock:steady", ttl);
    guard.release().unwrap();
    cluster.nodes[1].resume();
    let strict = crate::harness::builder(&urls)
        .retry_count(0)
        .max_clock_offset(Duration::from_millis(100))
        .build()
        .unwrap();
    // Its first round judges every node against the others' readings.
    let guard = takes(&strict, "clock:steady", Duration::from_secs(60));
    guard.release().unwrap();
    let refusal = refused_by(&strict, 2);
    assert_eq!(refusal.kind(), FailureKind::Clock);
    assert!(refusal.detail().contains("max_clock_offset"), "{refusal}");
    assert!(refusal.detail().contains("NTP"), "{refusal}");
}

/// After the quarantine, with the clock agreeing again, the node counts
/// again (no restart quarantine: the period is the longest TTL used).
#[test]
fn after_its_quarantine_the_node_counts_again() {
    let mut cluster = shifted(3);
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    let client = crate::harness::builder(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    let ttl = Duration::from_secs(2);
    takes(&client, "clock:q", ttl).release().unwrap();
    cluster.nodes[2].set_clock_offset(5_000);
    let _ = client.try_lock("clock:q", ttl);
    assert_eq!(refused_by(&client, 2).kind(), FailureKind::Clock);
    cluster.nodes[2].set_clock_offset(0);
    // The quarantine is 3 s (the 2 s TTL and a second); the marker, set by
    // the node's clock 5 s ahead, outlives it by the 5 s the clock stepped
    // back, and is read at the next examination (5 s apart at most).
    // Its marker gone too: a client that reads it again at an examination
    // puts the node out again.
    eventually("node 2 counts again", Duration::from_secs(30), || {
        let _ = client.try_lock("clock:probe", ttl);
        let markers: Vec<String> = redis::cmd("KEYS")
            .arg("redlock:clock-jumped*")
            .query(&mut cluster.nodes[2].conn())
            .unwrap_or_default();
        markers.is_empty() && client.node_health()[2].refusal().is_none()
    });
    // Nodes 0 and 2 make a majority without node 1.
    cluster.nodes[1].pause();
    let guard = takes(&client, "clock:q", ttl);
    guard.release().unwrap();
    cluster.nodes[1].resume();
}

/// Every primitive stands on the same rule: A (a fencing client) holds a
/// fenced lock, a `lock_all`, a semaphore's permit, a writer's and a
/// reader's rw-lock and an election's leadership on nodes 0–2; node 2's
/// clock jumps; a fresh B gets none of them.
#[test]
fn no_primitive_lets_a_second_holder_in_through_a_jumped_node() {
    let cluster = shifted(5);
    let a = client_a_with(&cluster, true);
    let ttl = SCENE;
    let held = [
        a.client.lock("p:lock", ttl).unwrap(),
        a.client.lock_all(&["p:a", "p:b"], ttl).unwrap(),
        a.client.semaphore("p:sem", 1).lock(ttl).unwrap(),
        a.client.rw_lock("p:rw").write(ttl).unwrap(),
        a.client.rw_lock("p:rwr").read(ttl).unwrap(),
    ];
    let leader = a.client.election("p:e").campaign("a", ttl).win().unwrap();
    cluster.nodes[2].set_clock_offset(STEP_MS);
    settles("A's keys on node 2 expired early", || {
        cluster.nodes[2].get_now("p:lock").is_none()
    });
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    let b = crate::harness::builder(&urls)
        .fencing(true)
        .retry_count(0)
        .build()
        .unwrap();
    let got = [
        ("lock", b.try_lock("p:lock", ttl).ok().flatten().is_some()),
        (
            "lock_all",
            b.try_lock_all(&["p:a", "p:b"], ttl)
                .ok()
                .flatten()
                .is_some(),
        ),
        (
            "semaphore",
            b.semaphore("p:sem", 1)
                .try_lock(ttl)
                .ok()
                .flatten()
                .is_some(),
        ),
        (
            "rw write",
            b.rw_lock("p:rw").try_write(ttl).ok().flatten().is_some(),
        ),
        (
            "rw write past a reader",
            b.rw_lock("p:rwr").try_write(ttl).ok().flatten().is_some(),
        ),
        (
            "election",
            b.election("p:e")
                .campaign("b", ttl)
                .try_win()
                .ok()
                .flatten()
                .is_some(),
        ),
    ];
    assert!(held.iter().all(LockGuard::is_valid) && leader.is_leader());
    for (what, second) in got {
        assert!(!second, "two holders of the {what}");
    }
}

/// Clients over one node of another kind (a Redis Cluster, or a Sentinel
/// service) and two standalone nodes, s0 and s1; A's s1 stalls, so A holds
/// on the first node and s0.
fn mixed_clients(first: &str, s: &Cluster) -> (ClientA, Redlock) {
    let stalled = Proxy::start(s.nodes[1].port);
    stalled.set(Fault::Stall);
    let build = |urls: [String; 3]| {
        crate::harness::builder(urls)
            .retry_count(0)
            .node_timeout(Duration::from_millis(250))
            .build()
            .expect("client")
    };
    let a = build([first.to_owned(), s.nodes[0].url(), stalled.url()]);
    let b_urls = [first.to_owned(), s.nodes[0].url(), s.nodes[1].url()];
    let a = ClientA {
        client: a,
        _proxies: vec![stalled],
    };
    // B knows every node before the jump: its history sees it too.
    let b = build(b_urls);
    (a, b)
}

/// A Redis Cluster's master whose clock jumps: the cluster's vote for the
/// keys it serves does not count.
#[test]
fn a_cluster_master_whose_clock_jumps_does_not_count() {
    let cluster = crate::harness::redis_cluster::RedisCluster::start_shifted(3);
    let s = Cluster::start(2);
    let (a, b) = mixed_clients(&cluster.url(3), &s);
    let guard = takes(&a.client, KEY, SCENE);
    let master = cluster.master_of(KEY);
    master.set_clock_offset(STEP_MS);
    settles("A's key on its master expired early", || {
        cluster.get_now(KEY).is_none()
    });
    b_is_refused(&b, &guard);
    let health = b.node_health();
    let refused = health[0]
        .masters()
        .iter()
        .find(|m| m.address().ends_with(&format!(":{}", master.port)))
        .and_then(|m| m.refusal().cloned())
        .expect("the master is refused");
    assert_eq!(refused.kind(), FailureKind::Clock, "{refused}");
}

/// A Sentinel-managed master whose clock jumps does not count.
#[test]
fn a_sentinel_master_whose_clock_jumps_does_not_count() {
    let sentinels = crate::harness::sentinel::Sentinels::start_with(
        1,
        &crate::harness::sentinel::Secrets::default(),
        true,
    );
    let s = Cluster::start(2);
    let (a, b) = mixed_clients(&sentinels.urls()[0], &s);
    let guard = takes(&a.client, KEY, SCENE);
    sentinels.master(0).set_clock_offset(STEP_MS);
    settles("A's key on g0 expired early", || {
        sentinels.master(0).get_now(KEY).is_none()
    });
    b_is_refused(&b, &guard);
    let refusal = b.node_health()[0].refusal().cloned().expect("refused");
    assert_eq!(refusal.kind(), FailureKind::Clock, "{refusal}");
}

/// The jump marker is never lowered: a later, smaller jump seen at the same
/// node keeps the larger size another reading left.
#[test]
fn a_smaller_jump_never_lowers_the_marker() {
    let cluster = shifted(3);
    let b = direct(&cluster);
    takes(&b, "clock:m", TTL).release().unwrap();
    cluster.nodes[2].set_clock_offset(9_000);
    let _ = b.try_lock("clock:m", TTL);
    // The size as measured: 9 s within the readings' uncertainty.
    let marker = || -> Option<i64> {
        cluster.nodes[2]
            .get_now("redlock:clock-jumped")?
            .parse()
            .ok()
    };
    settles("the first jump's size", || {
        marker().is_some_and(|ms| (8_950..9_100).contains(&ms))
    });
    let first = marker();
    // Another 3 s: seen by the next examination (verify() examines now).
    cluster.nodes[2].set_clock_offset(12_000);
    let refusal = b.verify()[2].refusal().cloned().expect("still out");
    assert!(refusal.detail().contains("jumped 3"), "{refusal}");
    assert_eq!(marker(), first, "the larger size stays");
}
