//! Every Lua script, on its own, against a real `redis-server`: for each
//! script a table of the states it can meet, the reply it must give and the
//! keys (those the case names) and wake-ups it must leave. This is where a
//! script change is proven first; the rest of the suite drives the scripts
//! through the client. The tables, and how a case reads, are in
//! `script_tables/mod.rs`.
//!
//! Every case also runs on the crate's second implementation of the
//! scripts (`src/transport/fake/node/`, which the unit tests' fake node and
//! the model checker's nodes are made of), and must give the same reply,
//! the same answers after and the same wake-ups as the real Lua.

#[path = "../../src/transport/protocol/scripts/mod.rs"]
#[allow(dead_code)]
mod scripts;

#[path = "../../src/transport/fake/node/mod.rs"]
#[allow(dead_code)]
mod twin;

#[path = "../harness/mod.rs"]
mod harness;
#[path = "../script_tables/mod.rs"]
mod script_tables;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Node, NodeOptions};
use redis::Value;
use script_tables::*;
use scripts::Script;

/// Runs every case of `script`'s table on a fresh database; every
/// mismatch is collected, so that one run shows them all.
fn check(script: &Script, table: &[Case]) {
    let node = Node::start(&NodeOptions::default());
    let mut conn = node.conn();
    let mut listener = node.conn();
    listener
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub.psubscribe("redlock-wake:*").expect("psubscribe");
    let mut wrong = Vec::new();
    for case in table {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let now = node_now(&mut conn);
        for line in case.given {
            run(&mut conn, line, now);
        }
        let mut call = redis::cmd("EVAL");
        call.arg(script.body()).arg(case.keys.len());
        for key in case.keys {
            call.arg(*key);
        }
        for arg in case.argv {
            call.arg(timed(arg, now));
        }
        let reply = match call.query::<Value>(&mut conn) {
            Ok(value) => show(&value),
            Err(err) => format!("err:{err}"),
        };
        if !matches(&reply, case.reply, now) {
            wrong.push(format!(
                "{}: replied {reply}, not {}",
                case.what, case.reply
            ));
        }
        for (line, want) in case.then {
            let got = show(&run(&mut conn, line, now));
            if !matches(&got, want, now) {
                wrong.push(format!("{}: `{line}` gave {got}, not {want}", case.what));
            }
        }
        // The end marker comes after every wake-up the script published:
        // one server, one thread, messages in the order they were sent.
        let _: () = redis::cmd("PUBLISH")
            .arg("redlock-wake:end")
            .arg("0")
            .query(&mut conn)
            .unwrap();
        let mut woken = Vec::new();
        loop {
            let msg = pubsub.get_message().expect("the end marker");
            let channel = msg.get_channel_name().to_owned();
            let ticket: String = msg.get_payload().unwrap();
            let client = channel.trim_start_matches("redlock-wake:").to_owned();
            if client == "end" {
                break;
            }
            woken.push(format!("{client}:{ticket}"));
        }
        if woken != case.woken {
            wrong.push(format!(
                "{}: woke {woken:?}, not {:?}",
                case.what, case.woken
            ));
        }
    }
    wrong.extend(on_the_twin(script, table));
    assert!(
        wrong.is_empty(),
        "{}.lua:\n  {}",
        script.name(),
        wrong.join("\n  ")
    );
}

/// The node's time while a case runs on the twin, in ms.
const TWIN_NOW: i64 = 1_750_000_000_000;

/// Every case of `script`'s table on the second implementation: what
/// disagrees with the table.
fn on_the_twin(script: &Script, table: &[Case]) -> Vec<String> {
    let now = TWIN_NOW;
    let at = u64::try_from(now).expect("positive");
    let words = |line: &str| -> Vec<String> {
        line.split_whitespace()
            .map(|word| timed(word, now).replace('|', " "))
            .collect()
    };
    let mut wrong = Vec::new();
    for case in table {
        let mut node = twin::Node::default();
        for line in case.given {
            let answer = node.command(at, &words(line));
            assert!(
                !matches!(answer, Value::ServerError(_)),
                "the twin refuses `{line}`: {}",
                show(&answer)
            );
        }
        let keys: Vec<String> = case.keys.iter().map(|k| (*k).to_owned()).collect();
        let argv: Vec<String> = case.argv.iter().map(|a| timed(a, now)).collect();
        let reply = show(&node.eval(at, script.name(), &keys, &argv));
        if !matches(&reply, case.reply, now) {
            wrong.push(format!(
                "the twin: {}: replied {reply}, not {}",
                case.what, case.reply
            ));
        }
        for (line, want) in case.then {
            let got = show(&node.command(at, &words(line)));
            if !matches(&got, want, now) {
                wrong.push(format!(
                    "the twin: {}: `{line}` gave {got}, not {want}",
                    case.what
                ));
            }
        }
        let woken = node.take_wakes();
        if woken != case.woken {
            wrong.push(format!(
                "the twin: {}: woke {woken:?}, not {:?}",
                case.what, case.woken
            ));
        }
    }
    wrong
}

#[test]
fn the_twin_keeps_a_place_as_long_as_the_scripts() {
    assert_eq!(
        scripts::queue_alive_ms(),
        u64::try_from(twin::ALIVE).ok(),
        "lib_queue.lua's ALIVE and the twin's"
    );
}

#[test]
fn every_script_has_a_table() {
    let tabled: BTreeSet<&str> = TABLES.iter().map(|(s, _)| s.name()).collect();
    let all: BTreeSet<&str> = scripts::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(tabled, all);
    for script in scripts::ALL {
        let header = script.source().lines().next().unwrap_or_default();
        let own = script
            .source()
            .split(&format!("-- {}.lua:", script.name()))
            .nth(1)
            .unwrap_or_default();
        assert!(
            header.starts_with("-- ") && own.contains("-- KEYS") && own.contains("-- ARGV"),
            "{}.lua states its KEYS and ARGV in its header",
            script.name()
        );
        assert!(
            own.contains("-- Reply") && own.contains("-- Keeps"),
            "{}.lua states its reply and what it keeps",
            script.name()
        );
    }
}

macro_rules! script_test {
    ($($test:ident: $script:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check(&scripts::$script, $script);
            }
        )*
    };
}

script_test! {
    release: RELEASE,
    extend: EXTEND,
    acquire_all: ACQUIRE_ALL,
    release_all: RELEASE_ALL,
    extend_all: EXTEND_ALL,
    acquire_fenced: ACQUIRE_FENCED,
    slot_acquire: SLOT_ACQUIRE,
    slot_acquire_fenced: SLOT_ACQUIRE_FENCED,
    gate_acquire: GATE_ACQUIRE,
    gate_acquire_fenced: GATE_ACQUIRE_FENCED,
    gate_release: GATE_RELEASE,
    leave: LEAVE,
    read_acquire: READ_ACQUIRE,
    read_release: READ_RELEASE,
    read_extend: READ_EXTEND,
    write_acquire: WRITE_ACQUIRE,
    gate_rw_acquire: GATE_RW_ACQUIRE,
    gate_read_release: GATE_READ_RELEASE,
    proclaim: PROCLAIM,
    elect_extend: ELECT_EXTEND,
    leader: LEADER,
    resign: RESIGN,
    no: NO,
    inspect: INSPECT,
    force_release: FORCE_RELEASE,
}
