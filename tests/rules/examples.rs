//! The examples as real programs: started as child processes against nodes
//! this test starts, and checked from the outside.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Cluster, Node, NodeOptions};

/// An example binary, as built by `cargo test` / `cargo build --examples`.
fn example(name: &str) -> Command {
    let deps = std::env::current_exe().unwrap();
    let path: PathBuf = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --examples` (cargo test builds them too)",
        path.display()
    );
    let mut cmd = Command::new(path);
    cmd.env_remove("REDLOCK_NODES");
    cmd
}

#[test]
fn batch_jobs_in_two_copies_processes_every_job_exactly_once() {
    let cluster = Cluster::start(5);
    let state = Node::start(&NodeOptions::default());
    let nodes = cluster.urls().join(",");
    let copies: Vec<_> = (0..2)
        .map(|_| {
            example("batch_jobs")
                .args(["--nodes", &nodes, "--state", &state.url()])
                .args(["--jobs", "200", "--workers", "4", "--work-ms", "10"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut processed = Vec::new();
    for copy in copies {
        let out = copy.wait_with_output().unwrap();
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary = stdout
            .lines()
            .find_map(|l| l.strip_prefix("batch_jobs: processed "))
            .unwrap_or_else(|| panic!("no summary in {stdout}"));
        processed.push(summary.split(' ').next().unwrap().parse::<usize>().unwrap());
        assert!(
            stdout.contains("heavy jobs at once, at most 2 (limit 2)"),
            "two copies × 4 workers met the fleet-wide limit of 2 heavy jobs: {stdout}"
        );
    }
    assert_eq!(processed.iter().sum::<usize>(), 200, "{processed:?}");
    assert!(
        processed.iter().all(|&n| n > 0),
        "both copies did work: {processed:?}"
    );
    let mut conn = state.conn();
    let done: usize = redis::cmd("SCARD")
        .arg("batch:done")
        .query(&mut conn)
        .unwrap();
    assert_eq!(done, 200);
    for id in 0..200 {
        let runs: i64 = redis::cmd("GET")
            .arg(format!("batch:runs:{id}"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(runs, 1, "job {id} ran {runs} times");
    }
}

fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the web_server example on a free port; returns it and the port.
fn web_server(cluster: &Cluster, state: &Node) -> (KillOnDrop, u16) {
    let mut server = KillOnDrop(
        example("web_server")
            .args([
                "--nodes",
                &cluster.urls().join(","),
                "--state",
                &state.url(),
                "--port",
                "0",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    let mut stdout = BufReader::new(server.0.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    // Keep reading the server's request log so its stdout never fills up.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let port: u16 = first
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    (server, port)
}

#[test]
fn web_server_books_a_contended_seat_exactly_once() {
    let mut cluster = Cluster::start(5);
    let state = Node::start(&NodeOptions::default());
    let (_server, port) = web_server(&cluster, &state);

    let barrier = std::sync::Barrier::new(20);
    let results: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    http(port, "POST", &format!("/seats/7/book?user=user{i}"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let booked: Vec<_> = results.iter().filter(|r| r.0 == 200).collect();
    assert_eq!(booked.len(), 1, "{results:?}");
    assert!(
        results.iter().all(|r| r.0 == 200 || r.0 == 409),
        "{results:?}"
    );
    let winner = booked[0].1.trim().rsplit(' ').next().unwrap().to_owned();
    let (status, body) = http(port, "GET", "/seats/7");
    assert_eq!(status, 200);
    assert!(body.contains(&winner), "{body} vs {winner}");
    let (status, body) = http(port, "POST", "/seats/7/book?user=late");
    assert_eq!(status, 409);
    assert!(body.contains("already booked"), "{body}");

    // /healthz: every node up; then 503 once a majority is gone.
    let (status, body) = http(port, "GET", "/healthz");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("5 of 5 lock nodes up, 3 needed"), "{body}");
    assert_eq!(body.matches(" up latency ").count(), 5, "{body}");
    for node in &mut cluster.nodes[..3] {
        node.kill();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = http(port, "POST", "/seats/8/book?user=x"); // lets the client see it
        let (status, body) = http(port, "GET", "/healthz");
        if status == 503 {
            assert!(body.contains("DOWN"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never reported unhealthy: {body}"
        );
    }
}

/// Readers of the config and reloads at once: a reader never sees the
/// version of one reload with the body of another, and readers share.
#[test]
fn web_server_readers_never_see_a_half_reloaded_config() {
    let cluster = Cluster::start(5);
    let state = Node::start(&NodeOptions::default());
    let (_server, port) = web_server(&cluster, &state);
    let (status, body) = http(port, "POST", "/config?version=0");
    assert_eq!(status, 200, "{body}");
    let reads: Vec<String> = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for version in 1..=10 {
                let (status, body) = http(port, "POST", &format!("/config?version={version}"));
                assert_eq!(status, 200, "{body}");
            }
        });
        let readers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..25)
                        .map(|_| {
                            let (status, body) = http(port, "GET", "/config");
                            assert_eq!(status, 200, "{body}");
                            body
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writer.join().unwrap();
        readers
            .into_iter()
            .flat_map(|r| r.join().unwrap())
            .collect()
    });
    assert_eq!(reads.len(), 100);
    for body in &reads {
        let (version, rest) = body
            .trim()
            .strip_prefix("version ")
            .and_then(|b| b.split_once(": "))
            .unwrap_or_else(|| panic!("{body}"));
        assert_eq!(
            rest,
            format!("body for version {version}"),
            "torn read: {body}"
        );
    }
    let (_, body) = http(port, "GET", "/config");
    assert_eq!(body.trim(), "version 10: body for version 10");
}

/// Concurrent swaps of overlapping seat pairs, in both orders, under
/// `lock_all`: every swap is all-or-nothing, so the bookings stay a
/// permutation of the original ones (a race would duplicate or lose one).
#[test]
fn web_server_swaps_seats_without_losing_or_duplicating_a_booking() {
    let cluster = Cluster::start(5);
    let state = Node::start(&NodeOptions::default());
    let (_server, port) = web_server(&cluster, &state);
    // The starting bookings, written straight to the state node.
    for (seat, user) in [(1, "ada"), (2, "bob"), (3, "cy")] {
        let _: () = redis::cmd("SET")
            .arg(format!("seat:{seat}:booking"))
            .arg(user)
            .query(&mut state.conn())
            .unwrap();
    }
    let pairs = [(1, 2), (2, 1), (2, 3), (3, 2), (3, 1), (1, 3)];
    let results: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..24)
            .map(|i| {
                let (a, b) = pairs[i % pairs.len()];
                s.spawn(move || http(port, "POST", &format!("/seats/{a}/swap/{b}")).0)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        results.iter().all(|s| *s == 200 || *s == 409),
        "{results:?}"
    );
    let swapped = results.iter().filter(|s| **s == 200).count();
    assert!(
        swapped >= 6,
        "only {swapped} swaps went through: {results:?}"
    );
    let mut holders: Vec<String> = (1..=3)
        .map(|seat| {
            let body = http(port, "GET", &format!("/seats/{seat}")).1;
            body.trim().rsplit(' ').next().unwrap().to_owned()
        })
        .collect();
    holders.sort();
    assert_eq!(holders, ["ada", "bob", "cy"], "after {swapped} swaps");
}

#[test]
fn fenced_store_refuses_the_paused_holder_only_with_fencing() {
    let cluster = Cluster::start(3);
    let store = Node::start(&NodeOptions::default());
    let out = example("fenced_store")
        .args([
            "--nodes",
            &cluster.urls().join(","),
            "--store",
            &store.url(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("A wakes up and writes with token Some("),
        "{text}"
    );
    assert!(text.contains("accepted = false"), "{text}");
    assert!(text.contains("fencing refused the stale write"), "{text}");
    assert_eq!(
        store.get_now("fenced-store:value").as_deref(),
        Some("written by A")
    );
}

fn flock(cluster: &Cluster, extra: &[&str], command: &[&str]) -> Command {
    let mut cmd = example("flock");
    cmd.args(["--nodes", &cluster.urls().join(",")])
        .args(extra)
        .arg("--")
        .args(command);
    cmd.stderr(Stdio::null());
    cmd
}

#[test]
fn flock_serializes_concurrent_invocations() {
    let cluster = Cluster::start(5);
    let log = std::env::temp_dir().join(format!("redlock-flock-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let script = format!(
        "echo start >> {0}; sleep 0.3; echo end >> {0}",
        log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|_| {
            flock(&cluster, &["--wait", "20s", "job"], &["sh", "-c", &script])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(lines, "start\nend\n".repeat(3), "interleaved: {lines:?}");
}

#[test]
fn flock_exit_codes() {
    let mut cluster = Cluster::start(5);
    // The command's own status.
    let status = flock(&cluster, &["codes"], &["sh", "-c", "exit 3"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    // Usage errors.
    let status = example("flock")
        .arg("--bogus")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(64));
    let status = flock(&cluster, &["--ttl", "0s", "codes"], &["true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(64));

    // Not acquired within --wait while another invocation holds the lock.
    let mut holder = KillOnDrop(flock(&cluster, &["held"], &["sleep", "5"]).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.count_key_now("held") < 3 {
        assert!(Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let status = flock(&cluster, &["--wait", "300ms", "held"], &["true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(75));
    assert!(started.elapsed() >= Duration::from_millis(300));
    let _ = holder.0.kill();

    // Lost while the command runs: 3 of 5 nodes stop answering.
    let mut victim = flock(&cluster, &["--ttl", "300ms", "lost"], &["sleep", "30"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.count_key_now("lost") < 3 {
        assert!(Instant::now() < deadline, "never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    for node in &mut cluster.nodes[..3] {
        node.pause();
    }
    let started = Instant::now();
    let status = victim.wait().unwrap();
    assert_eq!(status.code(), Some(76));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the 30 s command was terminated"
    );
    for node in &mut cluster.nodes[..3] {
        node.resume();
    }
}

#[test]
fn flock_waiting_for_a_held_lock_stops_at_once_on_ctrl_c() {
    let cluster = Cluster::start(5);
    let holder = redlock_sync::Redlock::new(cluster.urls()).unwrap();
    let held = holder.lock("busy-flock", Duration::from_secs(60)).unwrap();
    let mut run = KillOnDrop(
        flock(&cluster, &["--wait", "60s", "busy-flock"], &["true"])
            .spawn()
            .unwrap(),
    );
    // Wait until it is waiting: it queued on the lock's gate node, so its
    // Ctrl-C handler (set before it connects) is in place. (A count of the
    // nodes' SETs could not tell: the holder's own lock and start-up
    // markers reach any such count before flock has started.)
    let deadline = Instant::now() + Duration::from_secs(20);
    let queued = || {
        let exists = |n: &crate::harness::Node| -> bool {
            n.query(redis::cmd("EXISTS").arg("redlock-queue:busy-flock"))
        };
        cluster.nodes.iter().any(exists)
    };
    while !queued() {
        assert!(Instant::now() < deadline, "flock never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let interrupted = Instant::now();
    assert_eq!(interrupt(&mut run.0).code(), Some(130));
    assert!(
        interrupted.elapsed() < Duration::from_secs(5),
        "stopped waiting at once, not after --wait 60s"
    );
    // The holder still holds it; flock left nothing of its own.
    // The holder's lock returned at a majority: await its key everywhere.
    let mut token = None;
    crate::harness::settles("the holder's token on node 0", || {
        token = cluster.nodes[0].get_now("busy-flock");
        token.is_some()
    });
    cluster.await_holders("busy-flock", &token.unwrap(), 5);
    held.release().unwrap();
}

/// Ctrl-C for a child process; waits for it and returns its status.
fn interrupt(child: &mut std::process::Child) -> std::process::ExitStatus {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait().unwrap()
}

#[test]
fn flock_releases_the_lock_on_ctrl_c() {
    let cluster = Cluster::start(5);
    let mut run = KillOnDrop(
        flock(&cluster, &["--ttl", "30s", "interrupted"], &["sleep", "30"])
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.count_key_now("interrupted") < 3 {
        assert!(Instant::now() < deadline, "never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(interrupt(&mut run.0).code(), Some(130));
    // Released, not left to its 30 s TTL.
    assert!(cluster.count_key_now("interrupted") < 3);
    let deadline = Instant::now() + Duration::from_secs(2);
    while cluster.count_key_now("interrupted") > 0 {
        assert!(Instant::now() < deadline, "lock left behind after Ctrl-C");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The keys matching `pattern` on every node of `cluster`.
fn keys_left(cluster: &Cluster, pattern: &str) -> usize {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query(&mut node.conn())
                .unwrap();
            keys.len()
        })
        .sum()
}

/// Waits (at most 200 ms after the process ended) until no key matching
/// `pattern` is left: released, not left to expire — the callers make sure
/// the lock's TTL is far longer.
fn released(cluster: &Cluster, pattern: &str) -> bool {
    let deadline = Instant::now() + Duration::from_millis(200);
    while keys_left(cluster, pattern) > 0 {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Runs `cmd` until its stdout has a line containing `what` (at most
/// 10 s), then sends it Ctrl-C; returns its exit status.
fn interrupted_after(mut cmd: Command, what: &str) -> std::process::ExitStatus {
    let mut run = KillOnDrop(cmd.stdout(Stdio::piped()).spawn().unwrap());
    let mut stdout = BufReader::new(run.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let what = what.to_owned();
    std::thread::spawn(move || {
        let mut line = String::new();
        while stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains(&what) {
                let _ = tx.send(());
            }
            line.clear();
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the example never got that far");
    interrupt(&mut run.0)
}

/// Ctrl-C releases what the examples hold: no lock outlives the program
/// by its TTL.
#[test]
fn quickstart_releases_its_lock_on_ctrl_c() {
    let cluster = Cluster::start(5);
    let mut quickstart = example("quickstart");
    quickstart.args(cluster.urls());
    let status = interrupted_after(quickstart, "alice: got the lock");
    assert_eq!(status.code(), Some(130));
    // It exits from the handler, through `Redlock::shutdown`:
    // neither alice's lock nor bob's place in the queue is left.
    assert!(
        released(&cluster, "*quickstart:*"),
        "lock or queue left behind"
    );
}

#[test]
fn batch_jobs_releases_its_job_locks_on_ctrl_c() {
    let cluster = Cluster::start(5);
    let state = Node::start(&NodeOptions::default());
    let mut run = KillOnDrop(
        example("batch_jobs")
            .args([
                "--nodes",
                &cluster.urls().join(","),
                "--state",
                &state.url(),
            ])
            .args(["--jobs", "1000", "--workers", "4", "--work-ms", "2000"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while keys_left(&cluster, "batch:job:*") < 4 * 3 {
        assert!(Instant::now() < deadline, "the workers never locked a job");
        std::thread::sleep(Duration::from_millis(10));
    }
    let interrupted = Instant::now();
    assert_eq!(interrupt(&mut run.0).code(), Some(130));
    assert!(
        interrupted.elapsed() < Duration::from_secs(5),
        "the 2 s jobs were cut short"
    );
    assert!(released(&cluster, "batch:job:*"), "job locks left behind");
}

#[test]
fn web_server_stops_on_ctrl_c() {
    let cluster = Cluster::start(3);
    let state = Node::start(&NodeOptions::default());
    let (mut server, port) = web_server(&cluster, &state);
    let (status, _) = http(port, "POST", "/seats/7/book?user=ann");
    assert_eq!(status, 200);
    // A seat lock lives for one request: what counts here is that the
    // server stops taking requests and exits 130 at once.
    let interrupted = Instant::now();
    assert_eq!(interrupt(&mut server.0).code(), Some(130));
    assert!(interrupted.elapsed() < Duration::from_secs(5));
    assert!(released(&cluster, "seat:*"), "seat locks left behind");
}

/// The README's long-job recipe, runnable: it keeps its 1 s lock through
/// 3 steps of 0.6 s and releases it at the end; on Ctrl-C mid-way it
/// releases at once.
#[test]
fn long_job_runs_its_steps_under_a_kept_lock_and_releases_on_ctrl_c() {
    let cluster = Cluster::start(5);
    let nodes = cluster.urls().join(",");
    let out = example("long_job")
        .args(["--nodes", &nodes, "--steps", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("step 3 of 3 committed"), "{stdout}");
    assert!(
        !stdout.contains("Duration"),
        "durations printed as {{:?}}: {stdout}"
    );
    assert_eq!(keys_left(&cluster, "jobs:*"), 0);

    let mut long_job = example("long_job");
    long_job.args(["--nodes", &nodes, "--steps", "100", "--ttl", "30s"]);
    let status = interrupted_after(long_job, "step 1 of 100 committed");
    assert_eq!(status.code(), Some(130));
    assert!(released(&cluster, "jobs:*"), "lock left behind");
}

#[test]
fn fenced_store_stops_on_ctrl_c() {
    let cluster = Cluster::start(3);
    let mut fenced_store = example("fenced_store");
    fenced_store.args(["--nodes", &cluster.urls().join(",")]);
    // Its lock lives 0.5 s (the scenario needs it to expire): what counts
    // here is that the scenario stops and the program exits 130.
    let status = interrupted_after(fenced_store, "A holds the lock");
    assert_eq!(status.code(), Some(130));
}

/// Two scheduler copies and a follower. One copy leads while the
/// other waits; it takes over with a larger term when the first resigns;
/// the follower sees both leaders in that order.
#[test]
fn scheduler_copies_lead_one_at_a_time_and_a_follower_sees_each_leader() {
    let cluster = Cluster::start(3);
    let nodes = cluster.urls().join(",");
    let follower = example("scheduler")
        .args(["--nodes", &nodes, "--follow", "--secs", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let candidates: Vec<_> = ["host-a", "host-b"]
        .into_iter()
        .map(|name| {
            example("scheduler")
                .args(["--nodes", &nodes, "--name", name, "--ticks", "10"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut terms = Vec::new();
    for candidate in candidates {
        let out = candidate.wait_with_output().unwrap();
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ticks: Vec<(String, u64)> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("TICK "))
            .map(|t| {
                let mut parts = t.split(' ');
                let name = parts.next().unwrap().to_owned();
                (name, parts.next().unwrap().parse().unwrap())
            })
            .collect();
        assert_eq!(ticks.len(), 10, "{stdout}");
        terms.push(ticks[0].clone());
    }
    terms.sort_by_key(|(_, term)| *term);
    assert_ne!(terms[0].1, terms[1].1, "two leaders in one term");
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let leaders: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("LEADER "))
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = terms.iter().map(|(n, t)| format!("{n} {t}")).collect();
    assert_eq!(leaders, expected, "{stdout}");
}

/// `ctl`'s output and exit status for `args` against `nodes`.
fn ctl(nodes: &str, args: &[&str]) -> (i32, String) {
    let out = example("ctl")
        .args(["--nodes", nodes])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().expect("exited"), text)
}

#[test]
fn ctl_shows_frees_and_checks_with_its_exit_codes() {
    let mut cluster = Cluster::start(3);
    let nodes = cluster.urls().join(",");
    let (code, help) = ctl(&nodes, &["--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("usage: ctl"), "{help}");
    assert_eq!(ctl(&nodes, &["frobnicate"]).0, 64);
    assert_eq!(ctl(&nodes, &["inspect", ""]).0, 64, "an empty name");

    let (code, out) = ctl(&nodes, &["health"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches(", counts").count(), 3, "{out}");

    let (code, out) = ctl(&nodes, &["inspect", "ctl:job"]);
    assert_eq!((code, out.contains("ctl:job: free")), (1, true), "{out}");
    let holder = crate::harness::builder(cluster.urls())
        .fencing(true)
        .build()
        .unwrap();
    let mut guard = holder.lock("ctl:job", Duration::from_secs(60)).unwrap();
    let token = guard.fencing_token().unwrap();
    let (code, out) = ctl(&nodes, &["inspect", "ctl:job"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("fencing token {token}")), "{out}");

    let (code, out) = ctl(&nodes, &["release", "ctl:job"]);
    assert_eq!((code, out.contains("released")), (0, true), "{out}");
    assert_eq!(ctl(&nodes, &["inspect", "ctl:job"]).0, 1);
    assert_eq!(ctl(&nodes, &["release", "ctl:job"]).0, 1, "nobody held it");
    assert!(
        guard.extend(Duration::from_secs(60)).is_err(),
        "its holder learns it at its next extension"
    );

    let pool = holder.semaphore("ctl:pool", 4);
    let _permit = pool.lock(Duration::from_secs(60)).unwrap();
    let (code, out) = ctl(&nodes, &["inspect", "--permits", "4", "ctl:pool"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 of 4 permits in use"), "{out}");

    // Two of three nodes down: nobody can tell.
    cluster.nodes[1].pause();
    cluster.nodes[2].pause();
    let (code, out) = ctl(&nodes, &["inspect", "ctl:job"]);
    assert_eq!(code, 69, "{out}");
    assert!(out.contains("no quorum"), "{out}");
    let (code, out) = ctl(&nodes, &["health"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("DOWN").count(), 2, "{out}");
    for node in &mut cluster.nodes[1..] {
        node.resume();
    }
}
