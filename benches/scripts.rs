//! What each Lua script costs the node, sent as `EVAL` (with its source)
//! and as `EVALSHA` (by its hash), on one idle node: `cargo bench --bench
//! scripts` (`BENCH_QUICK=1` for a short run).
//!
//! Each script runs on the first case of its table (`tests/script_tables`,
//! the state the script meets most: a free key, an empty queue), set up
//! afresh before every call (`FLUSHDB` and the case's commands, the same
//! for both forms). Calls go in pipelines of 50, the two forms alternating
//! in 6 slices. Two figures per form:
//!
//! * the script command's own time, from `INFO commandstats` (`usec` of
//!   `eval` or `evalsha` over its calls): what runs inside the command,
//!   hashing the source included;
//! * the node's whole CPU per call (`INFO cpu`, user + system, over the
//!   slices), set-up included: the same set-up in both forms, so the
//!   difference is what the form costs, reading and parsing the request
//!   included.
//!
//! Absolute times on a shared 2-core machine are noise: compare the two
//! forms, measured side by side in one run.

#[path = "../tests/harness/mod.rs"]
mod harness;
#[path = "../tests/script_tables/mod.rs"]
mod script_tables;
#[path = "../src/transport/protocol/scripts/mod.rs"]
#[allow(dead_code, unused_imports)]
mod scripts;

use harness::{Node, NodeOptions};
use script_tables::{Case, TABLES, node_now, timed};
use scripts::Script;

const SLICES: usize = 6;
const PIPELINE: usize = 50;

#[derive(Clone, Copy, PartialEq)]
enum Form {
    Eval,
    EvalSha,
}

fn info_number(conn: &mut redis::Connection, section: &str, field: &str) -> f64 {
    let info: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `usec` of a command from `INFO commandstats`.
fn command_usec(conn: &mut redis::Connection, command: &str) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("usec="))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

fn cpu_seconds(conn: &mut redis::Connection) -> f64 {
    info_number(conn, "cpu", "used_cpu_user:") + info_number(conn, "cpu", "used_cpu_sys:")
}

/// `calls` calls of `script` on `case`'s state, in `form`.
fn slice(conn: &mut redis::Connection, script: &Script, case: &Case, form: Form, calls: usize) {
    let now = node_now(conn);
    let mut done = 0;
    while done < calls {
        let mut pipe = redis::pipe();
        for _ in 0..PIPELINE.min(calls - done) {
            pipe.cmd("FLUSHDB").ignore();
            for line in case.given {
                let mut words = line.split_whitespace();
                let cmd = pipe.cmd(words.next().expect("a command"));
                for word in words {
                    cmd.arg(timed(word, now).replace('|', " "));
                }
                pipe.ignore();
            }
            let call = match form {
                Form::Eval => pipe.cmd("EVAL").arg(script.body()),
                Form::EvalSha => pipe.cmd("EVALSHA").arg(script.hash()),
            };
            call.arg(case.keys.len()).arg(case.keys);
            for arg in case.argv {
                call.arg(timed(arg, now));
            }
        }
        let replies: Vec<redis::Value> = pipe.query(conn).expect("pipeline");
        // An error reply (a table's error case) is a reply like any; only
        // NOSCRIPT would mean the measurement is not what it says.
        for reply in replies {
            if let redis::Value::ServerError(err) = reply {
                assert_ne!(err.code(), "NOSCRIPT", "the script is cached");
            }
        }
        done += PIPELINE;
    }
}

fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let calls = if quick { 200 } else { 2000 };
    let node = Node::start(&NodeOptions::default());
    let mut conn = node.conn();
    println!(
        "One idle redis-server, {} calls per script and form in {SLICES} alternating slices.\n",
        calls * SLICES
    );
    println!(
        "| script | bytes sent with EVAL | EVAL command µs | EVALSHA command µs | EVAL node CPU µs/call | EVALSHA node CPU µs/call | EVALSHA saves |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut saved_total = 0.0;
    for (script, table) in TABLES.iter() {
        let case = &table[0];
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.body())
            .query(&mut conn)
            .expect("SCRIPT LOAD");
        slice(&mut conn, script, case, Form::Eval, PIPELINE);
        let mut command = [0.0f64; 2];
        let mut cpu = [0.0f64; 2];
        for i in 0..SLICES * 2 {
            let form = if i % 2 == 0 {
                Form::Eval
            } else {
                Form::EvalSha
            };
            let k = usize::from(form == Form::EvalSha);
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut conn)
                .unwrap();
            let cpu0 = cpu_seconds(&mut conn);
            slice(&mut conn, script, case, form, calls);
            cpu[k] += cpu_seconds(&mut conn) - cpu0;
            command[k] += command_usec(&mut conn, if k == 0 { "eval" } else { "evalsha" });
        }
        let n = (calls * SLICES) as f64;
        let per = |total: f64| total / n;
        let cpu_us = [cpu[0] * 1e6 / n, cpu[1] * 1e6 / n];
        saved_total += cpu_us[0] - cpu_us[1];
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} % |",
            script.name(),
            script.body().len(),
            per(command[0]),
            per(command[1]),
            cpu_us[0],
            cpu_us[1],
            100.0 * (cpu_us[0] - cpu_us[1]) / cpu_us[0].max(f64::MIN_POSITIVE)
        );
    }
    println!(
        "\nMean node CPU saved per call by EVALSHA, over the scripts: {:.2} µs",
        saved_total / TABLES.len() as f64
    );
}
