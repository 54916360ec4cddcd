//! A threaded batch program: a pool of worker threads processes a list of jobs,
//! each under its own lock kept alive while it runs; a job already done
//! (recorded in Redis) is skipped. Run two copies at once against the same
//! nodes and every job is processed exactly once.
//!
//! ```text
//! cargo run --example batch_jobs                 # starts local nodes itself
//! cargo run --example batch_jobs -- --nodes redis://h1,redis://h2,redis://h3 \
//!     --state redis://h4 [--jobs 200] [--workers 8] [--work-ms 20]
//! ```
//!
//! `--state` names the Redis that records finished jobs (default: the first
//! node). Both copies must be given the same `--nodes` and `--state`.
//!
//! Every fourth job is *heavy*: besides its own lock it needs one of
//! `--heavy` (default 2) permits of the semaphore `batch:heavy`, a limit
//! across every copy — however many copies and workers run, at most that
//! many heavy jobs run at once. The summary says the most that ever ran
//! together (counted in the state Redis).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlock_sync::Redlock;

struct Args {
    nodes: Option<String>,
    state: Option<String>,
    jobs: usize,
    workers: usize,
    work: Duration,
    heavy: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        nodes: None,
        state: None,
        jobs: 200,
        workers: 8,
        work: Duration::from_millis(20),
        heavy: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => args.nodes = Some(value()?),
            "--state" => args.state = Some(value()?),
            "--jobs" => args.jobs = value()?.parse().map_err(|e| format!("--jobs: {e}"))?,
            "--workers" => {
                args.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?
            }
            "--work-ms" => {
                args.work =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--work-ms: {e}"))?)
            }
            "--heavy" => args.heavy = value()?.parse().map_err(|e| format!("--heavy: {e}"))?,
            "--help" | "-h" => {
                println!(
                    "usage: batch_jobs [--nodes URL,...] [--state URL] [--jobs N] [--workers N] \
                     [--work-ms MS] [--heavy PERMITS]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("batch_jobs: {err}");
            std::process::exit(64);
        }
    };
    let nodes = common::Nodes::from_args_or_local(args.nodes.as_deref(), 5);
    common::on_ctrl_c();
    let state_url = args.state.clone().unwrap_or_else(|| nodes.urls[0].clone());
    let redlock = Redlock::new(&nodes.urls).unwrap_or_else(|err| {
        eprintln!("batch_jobs: {err}");
        std::process::exit(69);
    });
    common::check_nodes(&redlock);
    let ttl = Duration::from_secs(5);
    // Fleet-wide: at most `--heavy` heavy jobs at once, in every copy.
    let heavy = redlock.semaphore("batch:heavy", args.heavy);
    let (queue, jobs) = crossbeam_channel::unbounded();
    for id in 0..args.jobs {
        queue.send(id).unwrap();
    }
    drop(queue);
    let processed = AtomicUsize::new(0);
    let skipped = AtomicUsize::new(0);
    let started = Instant::now();
    println!(
        "batch_jobs: {} jobs, {} workers, pid {}",
        args.jobs,
        args.workers,
        std::process::id()
    );

    std::thread::scope(|s| {
        for _ in 0..args.workers {
            let (redlock, jobs, state_url) = (redlock.clone(), jobs.clone(), &state_url);
            let heavy = &heavy;
            let (processed, skipped) = (&processed, &skipped);
            s.spawn(move || {
                let mut state = redis::Client::open(state_url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("state redis");
                let mut run = |id: usize, patient: bool| -> bool {
                    let done = |state: &mut redis::Connection| -> bool {
                        redis::cmd("SISMEMBER")
                            .arg("batch:done")
                            .arg(id)
                            .query(state)
                            .unwrap()
                    };
                    if done(&mut state) {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    // Someone else (another worker or copy) may be on it —
                    // or nobody got it: two copies can split the nodes'
                    // votes. Come back to it after the first pass, then
                    // wait for its lock, so that no job is left undone.
                    let key = format!("batch:job:{id}");
                    let locked = if patient {
                        redlock
                            .acquire(&key, ttl)
                            .wait(Duration::from_secs(30))
                            .cancel_on(common::shutdown())
                            .lock()
                            .ok()
                    } else {
                        redlock.try_lock(&key, ttl).ok().flatten()
                    };
                    let Some(mut guard) = locked else {
                        if patient && !common::interrupted() {
                            eprintln!(
                                "batch_jobs: could not lock job {id} within 30 s; left undone"
                            );
                        }
                        return patient;
                    };
                    guard.keep_alive();
                    // Checked again under the lock: it may have finished meanwhile.
                    if done(&mut state) {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    // A heavy job also waits for one of the fleet's permits.
                    let permit = if id.is_multiple_of(4) {
                        let permit = heavy
                            .acquire(ttl)
                            .wait(Duration::from_secs(30))
                            .cancel_on(common::shutdown())
                            .keep_alive()
                            .lock();
                        match permit {
                            Ok(permit) => Some(permit),
                            Err(err) => {
                                if !common::interrupted() {
                                    eprintln!("batch_jobs: no heavy permit for job {id}: {err}");
                                }
                                return true;
                            }
                        }
                    } else {
                        None
                    };
                    if permit.is_some() {
                        // How many heavy jobs run now, and the most ever.
                        let _: i64 = redis::Script::new(
                            r#"local n=redis.call("incr",KEYS[1])
                            if n>tonumber(redis.call("get",KEYS[2]) or "0") then redis.call("set",KEYS[2],n) end
                            return n"#,
                        )
                        .key("batch:heavy:now")
                        .key("batch:heavy:most")
                        .invoke(&mut state)
                        .unwrap();
                    }
                    // The job itself: some work (Ctrl-C ends it: the guard
                    // is dropped, which releases the lock), and a count of
                    // how often it ran.
                    let interrupted = common::shutdown().sleep(args.work);
                    if let Some(permit) = permit {
                        let _: i64 = redis::cmd("DECR")
                            .arg("batch:heavy:now")
                            .query(&mut state)
                            .unwrap();
                        drop(permit);
                    }
                    if interrupted {
                        return true;
                    }
                    let _: i64 = redis::cmd("INCR")
                        .arg(format!("batch:runs:{id}"))
                        .query(&mut state)
                        .unwrap();
                    if guard.ensure_valid().is_err() {
                        eprintln!("batch_jobs: lost the lock on job {id}; not recording it");
                        return true;
                    }
                    let _: i64 = redis::cmd("SADD")
                        .arg("batch:done")
                        .arg(id)
                        .query(&mut state)
                        .unwrap();
                    drop(guard);
                    let n = processed.fetch_add(1, Ordering::Relaxed) + 1;
                    if n % 25 == 0 {
                        println!(
                            "progress: {n} processed here, {} skipped, {:.1} s",
                            skipped.load(Ordering::Relaxed),
                            started.elapsed().as_secs_f64()
                        );
                    }
                    true
                };
                let mut deferred = Vec::new();
                for id in jobs.iter() {
                    if common::interrupted() {
                        return;
                    }
                    if !run(id, false) {
                        deferred.push(id);
                    }
                }
                for id in deferred {
                    if common::interrupted() {
                        return;
                    }
                    run(id, true);
                }
            });
        }
    });
    println!(
        "batch_jobs: processed {} skipped {} in {:.1} s",
        processed.load(Ordering::Relaxed),
        skipped.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    let most: Option<u32> = redis::Client::open(state_url.as_str())
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("GET").arg("batch:heavy:most").query(&mut c))
        .unwrap_or(None);
    println!(
        "batch_jobs: heavy jobs at once, at most {} (limit {})",
        most.unwrap_or(0),
        args.heavy
    );
    common::let_go(&redlock);
    drop(nodes);
    common::exit_code()
}
