//! Fencing tokens against a paused holder (Kleppmann's scenario).
//!
//! ```text
//! cargo run --example fenced_store                  # starts local nodes itself
//! cargo run --example fenced_store -- --nodes redis://h1,redis://h2,redis://h3 --store redis://h4
//! ```
//!
//! Holder A takes the lock, then stalls (a GC pause, swap, SIGSTOP) until
//! its lock has expired; B takes the lock and writes; A wakes up and writes
//! too, believing it still holds the lock. The storage decides who wins:
//!
//! * with fencing, the storage keeps the largest token it has accepted and
//!   refuses a write with a smaller one — A's stale write is refused;
//! * without fencing, it cannot tell — A's stale write overwrites B's.
//!
//! The storage here is one Redis value updated by a compare-on-token Lua
//! script ([`WRITE`]): what any storage must do is keep the last token and
//! refuse smaller ones, atomically with the write. Exit status: 0 if both
//! runs behaved as described, 1 otherwise.

mod common;

use std::time::Duration;

use redlock_sync::Redlock;

/// The storage's write: accepted only with a token at least as large as
/// the last accepted one (KEYS[1] = value, KEYS[2] = last token).
const WRITE: &str = r#"local last = tonumber(redis.call("get", KEYS[2]) or "0") or 0
if tonumber(ARGV[1]) < last then return 0 end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[1], ARGV[2])
return 1"#;

/// A write to the storage; `token: None` is a storage without fencing.
fn write(store: &mut redis::Connection, token: Option<u64>, data: &str) -> bool {
    match token {
        Some(token) => {
            let accepted: i64 = redis::cmd("EVAL")
                .arg(WRITE)
                .arg(2)
                .arg("fenced-store:value")
                .arg("fenced-store:token")
                .arg(token)
                .arg(data)
                .query(store)
                .expect("store write");
            accepted == 1
        }
        None => {
            let _: () = redis::cmd("SET")
                .arg("fenced-store:value")
                .arg(data)
                .query(store)
                .expect("store write");
            true
        }
    }
}

/// The scenario; returns (A's stale write accepted, the final value).
fn scenario(nodes: &[String], store: &mut redis::Connection, fencing: bool) -> (bool, String) {
    let _: () = redis::cmd("DEL")
        .arg("fenced-store:value")
        .arg("fenced-store:token")
        .query(store)
        .expect("store reset");
    let client = |fencing| {
        Redlock::builder(nodes)
            .fencing(fencing)
            .build()
            .expect("client")
    };
    let (a, b) = (client(fencing), client(fencing));
    let ttl = Duration::from_millis(500);

    let a_guard = a.lock("fenced-store", ttl).expect("A locks");
    let a_token = a_guard.fencing_token();
    println!("  A holds the lock (token {a_token:?}) ... and stalls");
    // The pause. Ctrl-C ends it, and the scenario: A's guard is dropped,
    // which releases the lock.
    if common::shutdown().sleep(ttl + Duration::from_millis(200)) {
        drop(a_guard);
        return (false, String::new());
    }
    let b_guard = b
        .lock("fenced-store", ttl)
        .expect("B locks after A's lock expired");
    let b_token = b_guard.fencing_token();
    let accepted = write(store, b_token, "written by B");
    println!("  B holds the lock (token {b_token:?}) and writes: accepted = {accepted}");
    let stale = write(store, a_token, "written by A");
    println!("  A wakes up and writes with token {a_token:?}: accepted = {stale}");
    drop(b_guard);
    std::mem::forget(a_guard); // long expired; nothing to release
    let value: String = redis::cmd("GET")
        .arg("fenced-store:value")
        .query(store)
        .expect("store read");
    println!("  the storage now holds: {value:?}");
    (stale, value)
}

fn main() {
    let mut nodes_arg = None;
    let mut store_arg = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--nodes", Some(v)) => nodes_arg = Some(v),
            ("--store", Some(v)) => store_arg = Some(v),
            _ => {
                eprintln!("usage: fenced_store [--nodes URL,...] [--store URL]");
                std::process::exit(64);
            }
        }
    }
    let nodes = common::Nodes::from_args_or_local(nodes_arg.as_deref(), 3);
    common::on_ctrl_c();
    let store_url = store_arg.unwrap_or_else(|| nodes.urls[0].clone());
    let mut store = redis::Client::open(store_url.as_str())
        .and_then(|c| c.get_connection())
        .expect("store connection");

    println!("with fencing:");
    let (stale_fenced, value_fenced) = scenario(&nodes.urls, &mut store, true);
    if common::interrupted() {
        drop(nodes);
        std::process::exit(130);
    }
    println!("without fencing:");
    let (stale_plain, value_plain) = scenario(&nodes.urls, &mut store, false);
    if common::interrupted() {
        drop(nodes);
        std::process::exit(130);
    }

    let ok = !stale_fenced
        && value_fenced == "written by B"
        && stale_plain
        && value_plain == "written by A";
    println!(
        "{}",
        if ok {
            "result: fencing refused the stale write; without it, B's write was lost"
        } else {
            "result: UNEXPECTED"
        }
    );
    drop(nodes);
    std::process::exit(if ok { 0 } else { 1 });
}
