//! Every command the client sends, pinned: each kind × operation × queue
//! membership × layout, encoded and compared with `testdata/encodings.txt`
//! (each script's hash followed by its name, so the file says which script
//! goes out, and a changed script changes its line).
//! A change on the wire fails here; if it is meant, regenerate the file
//! with `REDLOCK_BLESS=1 cargo test --lib protocol::tests` and say why in
//! the commit.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codec::encode;
use super::keys::Layout;
use super::request::{Kind, Op, Request, Value};
use super::scripts::{ALL, Sent};
use crate::settings::NodeTimeout;

const PINNED: &str = include_str!("testdata/encodings.txt");

fn kinds() -> Vec<(&'static str, Kind)> {
    let a = |s: &str| -> Arc<str> { Arc::from(s) };
    vec![
        ("lock", Kind::Lock(Arc::from([a("res")]))),
        ("lock-all", Kind::Lock(Arc::from([a("a"), a("{t}b")]))),
        (
            "permit",
            Kind::Permit {
                semaphore: a("s"),
                slot: 1,
                permits: 3,
            },
        ),
        ("read", Kind::Read { lock: a("l") }),
        (
            "write",
            Kind::Write {
                lock: a("l"),
                waits: true,
            },
        ),
        (
            "try-write",
            Kind::Write {
                lock: a("l"),
                waits: false,
            },
        ),
        ("leadership", Kind::Leadership { election: a("e") }),
    ]
}

fn ops() -> Vec<(&'static str, Op)> {
    vec![
        ("acquire", Op::Acquire { ttl_ms: 100 }),
        (
            "fenced",
            Op::AcquireFenced {
                ttl_ms: 100,
                proposed: 7,
                idle_ms: 500,
            },
        ),
        ("extend", Op::Extend { ttl_ms: 100 }),
        ("release", Op::Release { held: true }),
        ("clean-up", Op::Release { held: false }),
        ("leave", Op::Leave),
        (
            "proclaim",
            Op::Proclaim {
                term: 3,
                seq: 4,
                value: Value(Arc::from("v")),
            },
        ),
        ("read-leader", Op::ReadLeader),
        ("resign", Op::Resign),
        ("inspect", Op::Inspect),
        ("force-release", Op::ForceRelease { holder: 0xab }),
    ]
}

/// One line per command: what was asked, then its RESP (scripts by hash).
fn table() -> String {
    let mut out = String::new();
    for (kind_name, kind) in kinds() {
        for (op_name, op) in ops() {
            if op.elects() && !matches!(kind, Kind::Leadership { .. }) {
                continue;
            }
            // Not queued; queued without a place (a lease's release, a
            // caller that does not wait); a waiter's place.
            for member in [None, Some(""), Some("c:7")] {
                let timeout = NodeTimeout::fixed(Duration::from_millis(5));
                let token = Arc::from("tok");
                let mut req =
                    Request::new(op.clone(), kind.clone(), token, timeout, Instant::now());
                req.queue = member.map(Arc::from);
                for layout in [Layout::Plain, Layout::Cluster] {
                    let mut resp = Vec::new();
                    encode(&req, layout, &mut Sent::all(), &mut resp);
                    let resp = named(&String::from_utf8_lossy(&resp).replace("\r\n", " "));
                    let queued = match member {
                        None => "-",
                        Some("") => "unplaced",
                        Some(_) => "queued",
                    };
                    let _ = writeln!(out, "{kind_name} {op_name} {queued} {layout:?}: {resp}");
                }
            }
        }
    }
    out
}

/// `resp` with each script's hash followed by its name in brackets.
fn named(resp: &str) -> String {
    ALL.iter().fold(resp.to_owned(), |resp, script| {
        resp.replace(
            script.hash(),
            &format!("{} [{}]", script.hash(), script.name()),
        )
    })
}

#[test]
fn every_command_is_the_pinned_one() {
    let now = table();
    if std::env::var_os("REDLOCK_BLESS").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/transport/protocol/testdata/encodings.txt"
        );
        std::fs::write(path, &now).expect("write the pinned encodings");
        return;
    }
    let mut differ = 0;
    for (line, (now, pinned)) in now.lines().zip(PINNED.lines()).enumerate() {
        if now != pinned {
            differ += 1;
            eprintln!("line {}:\n  now    {now}\n  pinned {pinned}", line + 1);
        }
    }
    assert_eq!(differ, 0, "commands differ from testdata/encodings.txt");
    assert_eq!(
        now.lines().count(),
        PINNED.lines().count(),
        "as many commands"
    );
    assert!(PINNED.lines().count() > 150, "the table covers every kind");
}
