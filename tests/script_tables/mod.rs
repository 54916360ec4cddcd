//! The table of cases for every Lua script (see `tests/scripts/main.rs`, which
//! runs them on a real node and on the scripts written again in Rust, and
//! `benches/scripts.rs`, which times each script on them).
//! Included by both as `script_tables`, beside `scripts` (the crate's
//! `src/transport/protocol/scripts/mod.rs`) at the crate's root.
//!
//! A case reads:
//!
//! * `given`: commands run first (`$now` is the node's time in ms, and
//!   `$now+N` / `$now-N` offsets from it; `|` in a word is a space);
//! * `keys`, `argv`: the script's call;
//! * `reply`: what it answers, written as [`show`] writes a reply (`1`,
//!   `'tok'`, `[1,'01']`, `nil`, `err:…` for an error containing `…`);
//! * `then`: commands run after, each with the answer it must get (also
//!   `>N` / `<N` for a number, also `>$now+N`, `~text` for a string
//!   containing `text`);
//! * `woken`: the wake-ups published, as `client:ticket`, in order.
#![allow(dead_code, unreachable_pub)]

use redis::Value;

use crate::scripts::{self, Script};

pub struct Case {
    pub what: &'static str,
    pub given: &'static [&'static str],
    pub keys: &'static [&'static str],
    pub argv: &'static [&'static str],
    pub reply: &'static str,
    pub then: &'static [(&'static str, &'static str)],
    pub woken: &'static [&'static str],
}

pub const CASE: Case = Case {
    what: "",
    given: &[],
    keys: &[],
    argv: &[],
    reply: "",
    then: &[],
    woken: &[],
};

/// A reply as the tables write it.
pub fn show(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(b) => format!("'{}'", String::from_utf8_lossy(b)),
        Value::SimpleString(s) => format!("'{s}'"),
        Value::Okay => "'OK'".into(),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(show).collect::<Vec<_>>().join(","))
        }
        Value::ServerError(err) => {
            format!("err:{} {}", err.code(), err.details().unwrap_or_default())
        }
        other => format!("{other:?}"),
    }
}

/// Whether `got` (as [`show`] writes it) is what `want` asks for.
pub fn matches(got: &str, want: &str, now: i64) -> bool {
    if let Some(text) = want.strip_prefix('~') {
        return got.contains(text);
    }
    if let Some(text) = want.strip_prefix("err:") {
        return got.starts_with("err:") && got.contains(text);
    }
    let number = |s: &str| timed(s.trim_matches('\''), now).parse::<i64>().ok();
    match (want.strip_prefix('>'), want.strip_prefix('<'), number(got)) {
        (Some(bound), _, Some(n)) => number(bound).is_some_and(|b| n > b),
        (_, Some(bound), Some(n)) => number(bound).is_some_and(|b| n < b),
        _ => got == want,
    }
}

/// `$now`, `$now+N`, `$now-N` replaced with the node's time in ms.
pub fn timed(word: &str, now: i64) -> String {
    match word.strip_prefix("$now") {
        Some("") => now.to_string(),
        Some(rest) => match (rest.strip_prefix('+'), rest.strip_prefix('-')) {
            (Some(n), _) => (now + n.parse::<i64>().expect("offset")).to_string(),
            (_, Some(n)) => (now - n.parse::<i64>().expect("offset")).to_string(),
            _ => word.to_owned(),
        },
        None => word.to_owned(),
    }
}

pub fn node_now(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1000 + micros / 1000
}

pub fn run(conn: &mut redis::Connection, line: &str, now: i64) -> Value {
    let mut words = line.split_whitespace();
    let mut cmd = redis::cmd(words.next().expect("a command"));
    for word in words {
        cmd.arg(timed(word, now).replace('|', " "));
    }
    cmd.query(conn).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// Runs every case of `script`'s table on a fresh database; every
/// mismatch is collected, so that one run shows them all.
/// Every table, by script.
pub static TABLES: [(&Script, &[Case]); 25] = [
    (&scripts::RELEASE, RELEASE),
    (&scripts::EXTEND, EXTEND),
    (&scripts::ACQUIRE_ALL, ACQUIRE_ALL),
    (&scripts::RELEASE_ALL, RELEASE_ALL),
    (&scripts::EXTEND_ALL, EXTEND_ALL),
    (&scripts::ACQUIRE_FENCED, ACQUIRE_FENCED),
    (&scripts::SLOT_ACQUIRE, SLOT_ACQUIRE),
    (&scripts::SLOT_ACQUIRE_FENCED, SLOT_ACQUIRE_FENCED),
    (&scripts::GATE_ACQUIRE, GATE_ACQUIRE),
    (&scripts::GATE_ACQUIRE_FENCED, GATE_ACQUIRE_FENCED),
    (&scripts::GATE_RELEASE, GATE_RELEASE),
    (&scripts::LEAVE, LEAVE),
    (&scripts::READ_ACQUIRE, READ_ACQUIRE),
    (&scripts::READ_RELEASE, READ_RELEASE),
    (&scripts::READ_EXTEND, READ_EXTEND),
    (&scripts::WRITE_ACQUIRE, WRITE_ACQUIRE),
    (&scripts::GATE_RW_ACQUIRE, GATE_RW_ACQUIRE),
    (&scripts::GATE_READ_RELEASE, GATE_READ_RELEASE),
    (&scripts::PROCLAIM, PROCLAIM),
    (&scripts::ELECT_EXTEND, ELECT_EXTEND),
    (&scripts::LEADER, LEADER),
    (&scripts::RESIGN, RESIGN),
    (&scripts::NO, NO),
    (&scripts::INSPECT, INSPECT),
    (&scripts::FORCE_RELEASE, FORCE_RELEASE),
];

// ---------------------------------------------------------------------
// The plain lock.

pub const RELEASE: &[Case] = &[
    Case {
        what: "our key is deleted",
        given: &["SET l tok"],
        keys: &["l"],
        argv: &["tok"],
        reply: "1",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
    Case {
        what: "another's key is kept",
        given: &["SET l other PX 9000"],
        keys: &["l"],
        argv: &["tok"],
        reply: "0",
        then: &[("GET l", "'other'"), ("PTTL l", ">8000")],
        ..CASE
    },
    Case {
        what: "a missing key",
        keys: &["l"],
        argv: &["tok"],
        reply: "0",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
    Case {
        what: "a key of another type is an error, and kept",
        given: &["RPUSH l x"],
        keys: &["l"],
        argv: &["tok"],
        reply: "err:WRONGTYPE",
        then: &[("TYPE l", "'list'")],
        ..CASE
    },
];

pub const EXTEND: &[Case] = &[
    Case {
        what: "our key lives ttl longer",
        given: &["SET l tok PX 1000"],
        keys: &["l"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("PTTL l", ">8000")],
        ..CASE
    },
    Case {
        what: "never shortened",
        given: &["SET l tok PX 60000"],
        keys: &["l"],
        argv: &["tok", "1000"],
        reply: "1",
        then: &[("PTTL l", ">50000")],
        ..CASE
    },
    Case {
        what: "another's key is left as it is",
        given: &["SET l other PX 1000"],
        keys: &["l"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("PTTL l", "<1001")],
        ..CASE
    },
    Case {
        what: "a missing key is not created",
        keys: &["l"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
];

pub const ACQUIRE_ALL: &[Case] = &[
    Case {
        what: "every key free: all set",
        keys: &["a", "b"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("GET a", "'tok'"), ("GET b", "'tok'"), ("PTTL b", ">8000")],
        ..CASE
    },
    Case {
        what: "a time to live not above 0 is an error, nothing set",
        keys: &["a"],
        argv: &["tok", "-1"],
        reply: "err:invalid expire time",
        then: &[("EXISTS a", "0")],
        ..CASE
    },
    Case {
        what: "a time to live that is no integer is an error, nothing set",
        keys: &["a"],
        argv: &["tok", "1.5"],
        reply: "err:not an integer",
        then: &[("EXISTS a", "0")],
        ..CASE
    },
    Case {
        what: "one held: its holder, and nothing set",
        given: &["SET b other"],
        keys: &["a", "b"],
        argv: &["tok", "9000"],
        reply: "'other'",
        then: &[("EXISTS a", "0"), ("GET b", "'other'")],
        ..CASE
    },
    Case {
        what: "a key of another type: 0, nothing set",
        given: &["RPUSH b x"],
        keys: &["a", "b"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("EXISTS a", "0"), ("TYPE b", "'list'")],
        ..CASE
    },
];

pub const RELEASE_ALL: &[Case] = &[
    Case {
        what: "all ours: all deleted",
        given: &["SET a tok", "SET b tok"],
        keys: &["a", "b"],
        argv: &["tok"],
        reply: "1",
        then: &[("EXISTS a b", "0")],
        ..CASE
    },
    Case {
        what: "one another's: ours deleted, theirs kept, 0",
        given: &["SET a tok", "SET b other"],
        keys: &["a", "b"],
        argv: &["tok"],
        reply: "0",
        then: &[("EXISTS a", "0"), ("GET b", "'other'")],
        ..CASE
    },
];

pub const EXTEND_ALL: &[Case] = &[
    Case {
        what: "all ours: all extended, none shortened",
        given: &["SET a tok PX 1000", "SET b tok PX 60000"],
        keys: &["a", "b"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("PTTL a", ">8000"), ("PTTL b", ">50000")],
        ..CASE
    },
    Case {
        what: "one not ours: none extended",
        given: &["SET a tok PX 1000", "SET b other PX 1000"],
        keys: &["a", "b"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("PTTL a", "<1001"), ("PTTL b", "<1001")],
        ..CASE
    },
];

// ---------------------------------------------------------------------
// Fencing. ARGV: token, ttl ms, n, proposed, idle ms.

pub const ACQUIRE_FENCED: &[Case] = &[
    Case {
        what: "free, no fence value yet: set, the proposed token stored",
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "1",
        then: &[("GET l", "'tok'"), ("GET f", "'7'"), ("PTTL f", ">50000")],
        ..CASE
    },
    Case {
        what: "a fence value written in hexadecimal is read as Lua reads it",
        given: &["SET f 0x10"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "[16]",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
    Case {
        what: "a proposal that is no number, no fence value to compare: set as given",
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "abc", "60000"],
        reply: "1",
        then: &[("GET l", "'tok'"), ("GET f", "'abc'")],
        ..CASE
    },
    Case {
        what: "a proposal that is no number against a fence value: an error, nothing set",
        given: &["SET f 3"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "abc", "60000"],
        reply: "err:attempt to compare",
        then: &[("EXISTS l", "0"), ("GET f", "'3'")],
        ..CASE
    },
    Case {
        what: "more lock keys than KEYS: an error, nothing set",
        keys: &["l", "f"],
        argv: &["tok", "9000", "3", "7", "60000"],
        reply: "err:must be strings or integers",
        then: &[("EXISTS l f", "0")],
        ..CASE
    },
    Case {
        what: "a lower fence value is raised",
        given: &["SET f 6"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "1",
        then: &[("GET f", "'7'")],
        ..CASE
    },
    Case {
        what: "held: the holder, the fence untouched",
        given: &["SET l other", "SET f 3"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "'other'",
        then: &[("GET l", "'other'"), ("GET f", "'3'")],
        ..CASE
    },
    Case {
        what: "held by a key of another type: -1",
        given: &["RPUSH l x"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "-1",
        then: &[("EXISTS f", "0")],
        ..CASE
    },
    Case {
        what: "an equal fence value: stale, nothing set",
        given: &["SET f 7"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "[7]",
        then: &[("EXISTS l", "0"), ("GET f", "'7'")],
        ..CASE
    },
    Case {
        what: "two keys, the larger fence value answered, nothing set",
        given: &["SET fa 9", "SET fb 12"],
        keys: &["a", "b", "fa", "fb"],
        argv: &["tok", "9000", "2", "7", "60000"],
        reply: "[12]",
        then: &[("EXISTS a b", "0")],
        ..CASE
    },
    Case {
        what: "two keys, the second held: its holder, the first not left set",
        given: &["SET b other", "SET fa 3"],
        keys: &["a", "b", "fa", "fb"],
        argv: &["tok", "9000", "2", "7", "60000"],
        reply: "'other'",
        then: &[
            ("EXISTS a", "0"),
            ("GET b", "'other'"),
            ("GET fa", "'3'"),
            ("EXISTS fb", "0"),
        ],
        ..CASE
    },
    Case {
        what: "a fence key holding no integer is an error, nothing set",
        given: &["SET f 1.5"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "err:holds no fence value",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
    Case {
        what: "a fence value of 2^53 is no fence value",
        given: &["SET f 9007199254740992"],
        keys: &["l", "f"],
        argv: &["tok", "9000", "1", "7", "60000"],
        reply: "err:holds no fence value",
        ..CASE
    },
];

// ---------------------------------------------------------------------
// Semaphore slots away from the gate. KEYS: the slot, then all k slots.

pub const SLOT_ACQUIRE: &[Case] = &[
    Case {
        what: "free: set, and the slots held reported",
        keys: &["s#0", "s#0", "s#1"],
        argv: &["tok", "9000", "2"],
        reply: "[1,'10']",
        then: &[("GET s#0", "'tok'")],
        ..CASE
    },
    Case {
        what: "more slots than keys: an error after the set, which stays",
        keys: &["s#0"],
        argv: &["tok", "9000", "3"],
        reply: "err:must be strings or integers",
        then: &[("GET s#0", "'tok'")],
        ..CASE
    },
    Case {
        what: "held: the holder, and both slots held",
        given: &["SET s#0 other", "SET s#1 third"],
        keys: &["s#0", "s#0", "s#1"],
        argv: &["tok", "9000", "2"],
        reply: "['other','11']",
        then: &[("GET s#0", "'other'")],
        ..CASE
    },
    Case {
        what: "a key of another type: 0",
        given: &["RPUSH s#0 x"],
        keys: &["s#0", "s#0", "s#1"],
        argv: &["tok", "9000", "2"],
        reply: "[0,'10']",
        ..CASE
    },
];

pub const SLOT_ACQUIRE_FENCED: &[Case] = &[
    Case {
        what: "free: set, fenced, the slots held reported",
        given: &["SET s#1 other"],
        keys: &["s#0", "f", "s#0", "s#1"],
        argv: &["tok", "9000", "1", "7", "60000", "2"],
        reply: "[1,'11']",
        then: &[("GET s#0", "'tok'"), ("GET f", "'7'")],
        ..CASE
    },
    Case {
        what: "stale: {v}, nothing set",
        given: &["SET f 8"],
        keys: &["s#0", "f", "s#0", "s#1"],
        argv: &["tok", "9000", "1", "7", "60000", "2"],
        reply: "[[8],'00']",
        then: &[("EXISTS s#0", "0")],
        ..CASE
    },
    Case {
        what: "held: the holder",
        given: &["SET s#0 other"],
        keys: &["s#0", "f", "s#0", "s#1"],
        argv: &["tok", "9000", "1", "7", "60000", "2"],
        reply: "['other','10']",
        ..CASE
    },
    Case {
        what: "a fence key holding no integer: the error itself",
        given: &["SET f x"],
        keys: &["s#0", "f", "s#0", "s#1"],
        argv: &["tok", "9000", "1", "7", "60000", "2"],
        reply: "err:holds no fence value",
        ..CASE
    },
];

// ---------------------------------------------------------------------
// The gate node's queue. Members `c1:1`, `c2:2`, … (client c1 listens on
// redlock-wake:c1 and is woken with its ticket). Queue keys q (arrival),
// a (alive until).
//
// GATE_ACQUIRE ARGV: token, ttl ms, k, grace ms, member.

pub const GATE_ACQUIRE: &[Case] = &[
    Case {
        what: "free, nobody queued, not waiting: set, the grant noted",
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", ""],
        reply: "1",
        then: &[
            ("GET l", "'tok'"),
            ("ZSCORE a granted", ">$now+49"),
            ("ZSCORE a granted", "<$now+1000"),
            ("ZCARD q", "0"),
        ],
        ..CASE
    },
    Case {
        what: "held, not waiting: 0, not queued",
        given: &["SET l other"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", ""],
        reply: "0",
        then: &[("ZCARD q", "0")],
        ..CASE
    },
    Case {
        what: "held, waiting, nobody before: 0, queued and alive",
        given: &["SET l other"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "0",
        then: &[
            ("ZRANGE q 0 -1", "['c1:1']"),
            ("ZSCORE a c1:1", ">0"),
            ("PTTL q", ">1000"),
        ],
        ..CASE
    },
    Case {
        what: "held, another waits before: 2, queued behind it",
        given: &["SET l other", "ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "2",
        then: &[("ZRANGE q 0 -1", "['c2:2','c1:1']")],
        ..CASE
    },
    Case {
        // The last arrival's score is not before the node's time (it
        // arrived in the same ms; here, later, so that the case does not
        // depend on the node's clock moving on): a newcomer goes behind it,
        // whatever the names, which order members of equal scores.
        what: "held, the last arrival not before now: a newcomer queued behind it",
        given: &[
            "SET l other",
            "ZADD q $now+50 c2:2",
            "ZADD a $now+2000 c2:2",
        ],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "2",
        then: &[
            ("ZRANGE q 0 -1", "['c2:2','c1:1']"),
            ("ZSCORE q c1:1", ">$now+50"),
            ("ZSCORE q c1:1", "<$now+52"),
        ],
        ..CASE
    },
    Case {
        what: "a waiter that asks again keeps its arrival",
        given: &[
            "SET l other",
            "ZADD q 1 c1:1 $now c2:2",
            "ZADD a $now+2000 c1:1 $now+2000 c2:2",
        ],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "0",
        then: &[
            ("ZSCORE q c1:1", "'1'"),
            ("ZRANGE q 0 -1", "['c1:1','c2:2']"),
        ],
        ..CASE
    },
    Case {
        what: "held while a grant is the queue's: 2 (others first)",
        given: &["SET l other", "ZADD a $now+5000 granted"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "2",
        ..CASE
    },
    Case {
        what: "free, but another is the head: 2, the head woken again",
        given: &["ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "2",
        then: &[("EXISTS l", "0"), ("ZRANGE q 0 -1", "['c2:2','c1:1']")],
        woken: &["c2:2"],
    },
    Case {
        what: "free, the caller is the head: set, it leaves the queue",
        given: &[
            "ZADD q 1 c1:1 2 c2:2",
            "ZADD a $now+2000 c1:1 $now+2000 c2:2",
        ],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "1",
        then: &[("GET l", "'tok'"), ("ZRANGE q 0 -1", "['c2:2']")],
        ..CASE
    },
    Case {
        what: "a dead head (past its alive time) drops out",
        given: &["ZADD q 1 c2:2", "ZADD a $now-1 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "9000", "0", "50", "c1:1"],
        reply: "1",
        then: &[("ZCARD q", "0"), ("ZSCORE a c2:2", "nil")],
        ..CASE
    },
    Case {
        what: "a slot free but another is the head: 2, the head woken again",
        given: &[
            "ZADD q 1 c1:1 2 c3:3",
            "ZADD a $now+2000 c1:1 $now+2000 c3:3",
        ],
        keys: &["s#0", "s#0", "s#1", "q", "a"],
        argv: &["tok", "9000", "2", "50", ""],
        reply: "2",
        then: &[("EXISTS s#0", "0")],
        woken: &["c1:1"],
    },
    Case {
        what: "the head's semaphore grant, a slot left: the next woken",
        given: &[
            "ZADD q 1 c1:1 2 c3:3",
            "ZADD a $now+2000 c1:1 $now+2000 c3:3",
        ],
        keys: &["s#0", "s#0", "s#1", "q", "a"],
        argv: &["tok", "9000", "2", "50", "c1:1"],
        reply: "1",
        then: &[("GET s#0", "'tok'"), ("ZRANGE q 0 -1", "['c3:3']")],
        woken: &["c3:3"],
    },
    Case {
        what: "several lock keys, one held: 0, none set",
        given: &["SET k2 other"],
        keys: &["k1", "k2", "q", "a"],
        argv: &["tok", "9000", "0", "50", ""],
        reply: "0",
        then: &[("EXISTS k1", "0")],
        ..CASE
    },
    Case {
        what: "several lock keys, all free: all set",
        keys: &["k1", "k2", "q", "a"],
        argv: &["tok", "9000", "0", "50", ""],
        reply: "1",
        then: &[("GET k1", "'tok'"), ("GET k2", "'tok'")],
        ..CASE
    },
    Case {
        what: "the head's semaphore grant, no slot left: nobody woken",
        given: &[
            "SET s#1 other",
            "ZADD q 1 c1:1 2 c3:3",
            "ZADD a $now+2000 c1:1 $now+2000 c3:3",
        ],
        keys: &["s#0", "s#0", "s#1", "q", "a"],
        argv: &["tok", "9000", "2", "50", "c1:1"],
        reply: "1",
        ..CASE
    },
];

// GATE_ACQUIRE_FENCED ARGV: token, ttl ms, n, proposed, idle ms, k, grace
// ms, member.

pub const GATE_ACQUIRE_FENCED: &[Case] = &[
    Case {
        what: "free, nobody queued: set and fenced",
        keys: &["l", "f", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "0", "50", "c1:1"],
        reply: "1",
        then: &[("GET l", "'tok'"), ("GET f", "'7'"), ("ZCARD q", "0")],
        ..CASE
    },
    Case {
        what: "the head with a stale token: {v}, keeps its place",
        given: &["SET f 9", "ZADD q 1 c1:1", "ZADD a $now+2000 c1:1"],
        keys: &["l", "f", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "0", "50", "c1:1"],
        reply: "[9]",
        then: &[("EXISTS l", "0"), ("ZRANGE q 0 -1", "['c1:1']")],
        ..CASE
    },
    Case {
        what: "others queued first: -2 even with a stale token",
        given: &["SET f 9", "ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "f", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "0", "50", "c1:1"],
        reply: "-2",
        then: &[("ZRANGE q 0 -1", "['c2:2','c1:1']")],
        woken: &["c2:2"],
    },
    Case {
        what: "held: -1, queued",
        given: &["SET l other"],
        keys: &["l", "f", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "0", "50", "c1:1"],
        reply: "-1",
        then: &[("ZRANGE q 0 -1", "['c1:1']"), ("EXISTS f", "0")],
        ..CASE
    },
    Case {
        what: "a fence key holding no integer: the error",
        given: &["SET f x"],
        keys: &["l", "f", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "0", "50", "c1:1"],
        reply: "err:holds no fence value",
        ..CASE
    },
    Case {
        what: "a semaphore slot left free after the grant wakes the next",
        given: &[
            "ZADD q 1 c1:1 2 c3:3",
            "ZADD a $now+2000 c1:1 $now+2000 c3:3",
        ],
        keys: &["s#0", "f", "s#0", "s#1", "q", "a"],
        argv: &["tok", "9000", "1", "7", "60000", "2", "50", "c1:1"],
        reply: "1",
        then: &[("GET s#0", "'tok'"), ("GET f", "'7'")],
        woken: &["c3:3"],
    },
];

// GATE_RELEASE ARGV: token, member, held ("1" a lease's release).

pub const GATE_RELEASE: &[Case] = &[
    Case {
        what: "ours, a waiter: deleted, the waiter woken, 2",
        given: &["SET l tok", "ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "2",
        then: &[("EXISTS l", "0")],
        woken: &["c2:2"],
    },
    Case {
        what: "ours, nobody waits: 1",
        given: &["SET l tok"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "1",
        then: &[("EXISTS l", "0")],
        ..CASE
    },
    Case {
        what: "a lease's release wakes the head whatever this node holds",
        given: &["SET l other", "ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "0",
        then: &[("GET l", "'other'")],
        woken: &["c2:2"],
    },
    Case {
        what: "a failed round's clean-up wakes nobody while the key is held",
        given: &["SET l other", "ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "0"],
        reply: "0",
        ..CASE
    },
    Case {
        what: "a failed round's clean-up of a free key wakes the head",
        given: &["ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "0"],
        reply: "0",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "a granted head whose round failed goes back first, unwoken",
        given: &["SET l tok", "ZADD q 5 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "c1:1", "0"],
        reply: "1",
        then: &[
            ("EXISTS l", "0"),
            ("ZRANGE q 0 -1", "['c1:1','c2:2']"),
            ("ZSCORE q c1:1", "'0'"),
        ],
        ..CASE
    },
    Case {
        what: "a granted head that was the only waiter goes back, though no queue is left",
        given: &["SET l tok"],
        keys: &["l", "q", "a"],
        argv: &["tok", "c1:1", "0"],
        reply: "1",
        then: &[
            ("ZRANGE q 0 -1", "['c1:1']"),
            ("ZSCORE a c1:1", ">$now+1000"),
        ],
        ..CASE
    },
    Case {
        what: "ours, no queue but a grant's note: 1, nobody woken, the note kept",
        given: &["SET l tok", "ZADD a $now+5000 granted"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "1",
        then: &[("EXISTS l", "0"), ("ZSCORE a granted", ">$now+1000")],
        ..CASE
    },
    Case {
        what: "ours, nobody waits, dead members only: 1, and they are dropped",
        given: &["SET l tok", "ZADD q 1 c2:2", "ZADD a $now-5 c2:2"],
        keys: &["l", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "1",
        then: &[("EXISTS q", "0"), ("EXISTS a", "0")],
        ..CASE
    },
    Case {
        what: "several keys: 0 unless every one was ours",
        given: &["SET k1 tok", "SET k2 other"],
        keys: &["k1", "k2", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "0",
        then: &[("EXISTS k1", "0"), ("GET k2", "'other'")],
        ..CASE
    },
];

// LEAVE ARGV: member.

pub const LEAVE: &[Case] = &[
    Case {
        what: "the member leaves; a free key: the next head woken",
        given: &[
            "ZADD q 1 c1:1 2 c2:2",
            "ZADD a $now+2000 c1:1 $now+2000 c2:2",
        ],
        keys: &["l", "q", "a"],
        argv: &["c1:1"],
        reply: "1",
        then: &[("ZRANGE q 0 -1", "['c2:2']"), ("ZSCORE a c1:1", "nil")],
        woken: &["c2:2"],
    },
    Case {
        what: "a held key: nobody woken",
        given: &[
            "SET l other",
            "ZADD q 1 c1:1 2 c2:2",
            "ZADD a $now+2000 c1:1 $now+2000 c2:2",
        ],
        keys: &["l", "q", "a"],
        argv: &["c1:1"],
        reply: "1",
        then: &[("ZRANGE q 0 -1", "['c2:2']")],
        ..CASE
    },
    Case {
        what: "a semaphore with one slot free: the next head woken",
        given: &["SET s#0 other", "ZADD q 2 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["s#0", "s#1", "q", "a"],
        argv: &["c1:1"],
        reply: "1",
        woken: &["c2:2"],
        ..CASE
    },
];

// ---------------------------------------------------------------------
// Reader-writer locks. KEYS: writer key w, readers' set r, mark m.

pub const READ_ACQUIRE: &[Case] = &[
    Case {
        what: "free: the reader joins until now + ttl",
        keys: &["w", "r", "m"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("ZSCORE r tok", ">0"), ("PTTL r", ">8000")],
        ..CASE
    },
    Case {
        what: "a writer holds: its token",
        given: &["SET w wtok"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000"],
        reply: "'wtok'",
        then: &[("EXISTS r", "0")],
        ..CASE
    },
    Case {
        what: "a writer waits (the mark): 0",
        given: &["SET m c9:9"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("EXISTS r", "0")],
        ..CASE
    },
];

pub const READ_RELEASE: &[Case] = &[
    Case {
        what: "in the set, in time: 1, gone",
        given: &["ZADD r $now+5000 tok"],
        keys: &["r"],
        argv: &["tok"],
        reply: "1",
        then: &[("ZSCORE r tok", "nil")],
        ..CASE
    },
    Case {
        what: "past its time: 0, and readers past theirs leave too",
        given: &["ZADD r $now-5 tok $now-5 old $now+5000 live"],
        keys: &["r"],
        argv: &["tok"],
        reply: "0",
        then: &[("ZRANGE r 0 -1", "['live']")],
        ..CASE
    },
    Case {
        what: "not in the set: 0",
        keys: &["r"],
        argv: &["tok"],
        reply: "0",
        ..CASE
    },
];

pub const READ_EXTEND: &[Case] = &[
    Case {
        what: "in time: moved to now + ttl, the set living as long",
        given: &["ZADD r $now+1000 tok", "PEXPIRE r 1000"],
        keys: &["r"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("ZSCORE r tok", ">$now+8000"), ("PTTL r", ">8000")],
        ..CASE
    },
    Case {
        what: "never shortened",
        given: &["ZADD r $now+60000 tok"],
        keys: &["r"],
        argv: &["tok", "1000"],
        reply: "1",
        then: &[("ZSCORE r tok", ">$now+50000")],
        ..CASE
    },
    Case {
        what: "lapsed: 0, it stays out",
        given: &["ZADD r $now-1 tok"],
        keys: &["r"],
        argv: &["tok", "9000"],
        reply: "0",
        ..CASE
    },
];

// WRITE_ACQUIRE ARGV: token, ttl ms, mark ms (then proposed, idle ms).

pub const WRITE_ACQUIRE: &[Case] = &[
    Case {
        what: "free: set, any mark removed",
        given: &["SET m old"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "2000"],
        reply: "1",
        then: &[("GET w", "'tok'"), ("EXISTS m", "0")],
        ..CASE
    },
    Case {
        what: "readers hold, a mark time not above 0: an error, no mark",
        given: &["ZADD r $now+5000 rd"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "-1"],
        reply: "err:invalid expire time",
        then: &[("EXISTS m w", "0")],
        ..CASE
    },
    Case {
        what: "a writer holds: its token",
        given: &["SET w other"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "2000"],
        reply: "'other'",
        ..CASE
    },
    Case {
        what: "readers hold: 0, the writer marks that it waits",
        given: &["ZADD r $now+5000 rd"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "2000"],
        reply: "0",
        then: &[("GET m", "'tok'"), ("PTTL m", ">1000"), ("EXISTS w", "0")],
        ..CASE
    },
    Case {
        what: "a mark already there keeps the first writer's value",
        given: &["ZADD r $now+5000 rd", "SET m first PX 500"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "2000"],
        reply: "0",
        then: &[("GET m", "'first'"), ("PTTL m", ">1000")],
        ..CASE
    },
    Case {
        what: "readers hold, mark 0: no mark",
        given: &["ZADD r $now+5000 rd"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "0"],
        reply: "0",
        then: &[("EXISTS m", "0")],
        ..CASE
    },
    Case {
        what: "readers past their time do not hold",
        given: &["ZADD r $now-1 rd"],
        keys: &["w", "r", "m"],
        argv: &["tok", "9000", "2000"],
        reply: "1",
        then: &[("EXISTS r", "0")],
        ..CASE
    },
    Case {
        what: "fenced, free: set, the proposed token stored",
        keys: &["w", "r", "m", "f"],
        argv: &["tok", "9000", "2000", "7", "60000"],
        reply: "1",
        then: &[("GET w", "'tok'"), ("GET f", "'7'")],
        ..CASE
    },
    Case {
        what: "fenced, readers hold: -1",
        given: &["ZADD r $now+5000 rd"],
        keys: &["w", "r", "m", "f"],
        argv: &["tok", "9000", "2000", "7", "60000"],
        reply: "-1",
        then: &[("EXISTS f", "0")],
        ..CASE
    },
    Case {
        what: "fenced, a writer key of another type: -1",
        given: &["RPUSH w x"],
        keys: &["w", "r", "m", "f"],
        argv: &["tok", "9000", "2000", "7", "60000"],
        reply: "-1",
        ..CASE
    },
    Case {
        what: "fenced, stale: {v}, nothing set",
        given: &["SET f 7"],
        keys: &["w", "r", "m", "f"],
        argv: &["tok", "9000", "2000", "7", "60000"],
        reply: "[7]",
        then: &[("EXISTS w", "0")],
        ..CASE
    },
];

// GATE_RW_ACQUIRE KEYS: w, r, m, (f,) q, a. ARGV: token, ttl ms, mark ms,
// proposed, idle ms, r|w, grace ms, member.

pub const GATE_RW_ACQUIRE: &[Case] = &[
    Case {
        what: "a reader, free, at the head: in, and out of the queue",
        given: &["ZADD q 2 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c2:2"],
        reply: "1",
        then: &[("ZSCORE r tok", ">0"), ("ZCARD q", "0")],
        ..CASE
    },
    Case {
        what: "a reader let in wakes the reader behind it",
        given: &[
            "ZADD q 1 c1:1 2 c2:2",
            "ZADD a $now+2000 c1:1 $now+2000 c2:2",
        ],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "1",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "a reader while a writer holds: the writer's token, queued",
        given: &["SET w wtok"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "'wtok'",
        then: &[("ZRANGE q 0 -1", "['c1:1']")],
        ..CASE
    },
    Case {
        what: "a reader refused only by a waiting writer's mark wakes it",
        given: &["SET m c9:9", "ZADD q 1 c9:9", "ZADD a $now+2000 c9:9"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "2",
        then: &[("ZRANGE q 0 -1", "['c9:9','c1:1']")],
        woken: &["c9:9"],
    },
    Case {
        what: "a writer, readers hold: marks with its member, told held (0)",
        given: &[
            "ZADD r $now+5000 rd",
            "ZADD q 1 c2:2",
            "ZADD a $now+2000 c2:2",
        ],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "w", "50", "c1:1"],
        reply: "0",
        then: &[("GET m", "'c1:1'"), ("ZRANGE q 0 -1", "['c2:2','c1:1']")],
        ..CASE
    },
    Case {
        what: "the marking writer goes ahead of the queue once readers left",
        given: &[
            "SET m c1:1",
            "ZADD q 1 c2:2 2 c1:1",
            "ZADD a $now+2000 c2:2 $now+2000 c1:1",
        ],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "w", "50", "c1:1"],
        reply: "1",
        then: &[
            ("GET w", "'tok'"),
            ("EXISTS m", "0"),
            ("ZRANGE q 0 -1", "['c2:2']"),
        ],
        ..CASE
    },
    Case {
        what: "a mark of a writer that still waits is not taken over",
        given: &[
            "ZADD r $now+5000 rd",
            "SET m c9:9",
            "ZADD q 1 c9:9",
            "ZADD a $now+2000 c9:9",
        ],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "w", "50", "c1:1"],
        reply: "2",
        then: &[("GET m", "'c9:9'")],
        ..CASE
    },
    Case {
        what: "a mark naming a member no longer queued is dropped",
        given: &["SET m c8:8"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "1",
        then: &[("EXISTS m", "0"), ("ZSCORE r tok", ">0")],
        ..CASE
    },
    Case {
        what: "a token mark (a plain round's) is taken over by the waiting writer",
        given: &["SET m sometoken"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "w", "50", "c1:1"],
        reply: "1",
        then: &[("GET w", "'tok'"), ("EXISTS m", "0")],
        ..CASE
    },
    Case {
        what: "a writer key of another type counts as held: 0, queued",
        given: &["RPUSH w x"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "0",
        then: &[("ZRANGE q 0 -1", "['c1:1']")],
        ..CASE
    },
    Case {
        what: "held while a grant is the queue's: 2, not the writer's token",
        given: &["SET w other", "ZADD a $now+5000 granted"],
        keys: &["w", "r", "m", "q", "a"],
        argv: &["tok", "9000", "2000", "0", "0", "r", "50", "c1:1"],
        reply: "2",
        ..CASE
    },
    Case {
        what: "a fenced writer held up by readers: -1, marks, fence untouched",
        given: &["ZADD r $now+5000 rd"],
        keys: &["w", "r", "m", "f", "q", "a"],
        argv: &["tok", "9000", "2000", "7", "60000", "w", "50", "c1:1"],
        reply: "-1",
        then: &[("GET m", "'c1:1'"), ("EXISTS f", "0")],
        ..CASE
    },
    Case {
        what: "a fenced writer, free: set and fenced",
        keys: &["w", "r", "m", "f", "q", "a"],
        argv: &["tok", "9000", "2000", "7", "60000", "w", "50", "c1:1"],
        reply: "1",
        then: &[("GET w", "'tok'"), ("GET f", "'7'")],
        ..CASE
    },
    Case {
        what: "a fenced writer with a stale token: {v}, nothing set",
        given: &["SET f 9"],
        keys: &["w", "r", "m", "f", "q", "a"],
        argv: &["tok", "9000", "2000", "7", "60000", "w", "50", "c1:1"],
        reply: "[9]",
        then: &[("EXISTS w", "0")],
        ..CASE
    },
    Case {
        what: "a fenced writer behind others: -2",
        given: &["ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["w", "r", "m", "f", "q", "a"],
        argv: &["tok", "9000", "2000", "7", "60000", "w", "50", "c1:1"],
        reply: "-2",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "a fenced writer while a writer holds: its token",
        given: &["SET w other"],
        keys: &["w", "r", "m", "f", "q", "a"],
        argv: &["tok", "9000", "2000", "7", "60000", "w", "50", "c1:1"],
        reply: "'other'",
        ..CASE
    },
];

// GATE_READ_RELEASE KEYS: r, w, m, q, a. ARGV: token, member, held.

pub const GATE_READ_RELEASE: &[Case] = &[
    Case {
        what: "in time, the marking writer waits: it is woken, 2",
        given: &[
            "ZADD r $now+5000 tok",
            "SET m c9:9",
            "ZADD q 1 c2:2 2 c9:9",
            "ZADD a $now+2000 c2:2 $now+2000 c9:9",
        ],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "2",
        then: &[("ZSCORE r tok", "nil")],
        woken: &["c9:9"],
    },
    Case {
        what: "no mark: the head woken",
        given: &[
            "ZADD r $now+5000 tok",
            "ZADD q 1 c2:2",
            "ZADD a $now+2000 c2:2",
        ],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "2",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "nobody waits: 1",
        given: &["ZADD r $now+5000 tok"],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "1",
        ..CASE
    },
    Case {
        what: "a failed round's clean-up while other readers hold: nobody woken",
        given: &[
            "ZADD r $now+5000 tok $now+5000 other",
            "ZADD q 1 c2:2",
            "ZADD a $now+2000 c2:2",
        ],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "0"],
        reply: "1",
        then: &[("ZRANGE r 0 -1", "['other']")],
        ..CASE
    },
    Case {
        what: "a failed round's clean-up of the last reader wakes the head",
        given: &[
            "ZADD r $now+5000 tok",
            "ZADD q 1 c2:2",
            "ZADD a $now+2000 c2:2",
        ],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "0"],
        reply: "2",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "a reader not in the set: 0, a lease's release still wakes",
        given: &["ZADD q 1 c2:2", "ZADD a $now+2000 c2:2"],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "", "1"],
        reply: "0",
        woken: &["c2:2"],
        ..CASE
    },
    Case {
        what: "a granted member goes back first, unwoken",
        given: &["ZADD r $now+5000 tok"],
        keys: &["r", "w", "m", "q", "a"],
        argv: &["tok", "c1:1", "0"],
        reply: "1",
        then: &[("ZSCORE q c1:1", "'0'")],
        ..CASE
    },
];

// ---------------------------------------------------------------------
// Elections. KEYS: lock key l, value key v, observers o.

pub const PROCLAIM: &[Case] = &[
    Case {
        what: "the holder's first value: stored for the lock's life, observers woken",
        given: &["SET l tok PX 9000", "ZADD o $now+2000 c5:5"],
        keys: &["l", "v", "o"],
        argv: &["tok", "3", "1", "hello"],
        reply: "1",
        then: &[("GET v", "'tok 3 1 hello'"), ("PTTL v", ">8000")],
        woken: &["c5:5"],
    },
    Case {
        what: "an older proclamation of the same leader changes nothing",
        given: &["SET l tok", "SET v tok|3|5|new"],
        keys: &["l", "v", "o"],
        argv: &["tok", "3", "4", "old"],
        reply: "1",
        then: &[("GET v", "'tok 3 5 new'")],
        ..CASE
    },
    Case {
        what: "a later one of the same leader lands",
        // The lock key with a TTL: without one the value lives 1 ms, and
        // the `GET` below came too late on a loaded machine.
        given: &[
            "SET l tok PX 9000",
            "SET v tok|3|1|one",
            "ZADD o $now+2000 c5:5",
        ],
        keys: &["l", "v", "o"],
        argv: &["tok", "3", "2", "two"],
        reply: "1",
        then: &[("GET v", "'tok 3 2 two'")],
        woken: &["c5:5"],
    },
    Case {
        what: "not the holder: 0, nothing woken",
        given: &["SET l other", "ZADD o $now+2000 c5:5"],
        keys: &["l", "v", "o"],
        argv: &["tok", "3", "1", "hello"],
        reply: "0",
        then: &[("EXISTS v", "0")],
        ..CASE
    },
    Case {
        what: "no lock key here: 0, observers woken all the same",
        given: &["ZADD o $now+2000 c5:5 $now-1 c6:6"],
        keys: &["l", "v", "o"],
        argv: &["tok", "3", "1", "hello"],
        reply: "0",
        then: &[("ZRANGE o 0 -1", "['c5:5']")],
        woken: &["c5:5"],
    },
];

pub const ELECT_EXTEND: &[Case] = &[
    Case {
        what: "the leader's lock and its proclamation live on together",
        given: &["SET l tok PX 1000", "SET v tok|1|1|x PX 1000"],
        keys: &["l", "v"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("PTTL l", ">8000"), ("PTTL v", ">8000")],
        ..CASE
    },
    Case {
        what: "another's value is not extended",
        given: &["SET l tok PX 1000", "SET v other|1|1|x PX 1000"],
        keys: &["l", "v"],
        argv: &["tok", "9000"],
        reply: "1",
        then: &[("PTTL v", "<1001")],
        ..CASE
    },
    Case {
        what: "not the holder: 0",
        given: &["SET l other PX 1000"],
        keys: &["l", "v"],
        argv: &["tok", "9000"],
        reply: "0",
        then: &[("PTTL l", "<1001")],
        ..CASE
    },
];

pub const LEADER: &[Case] = &[
    Case {
        what: "nobody holds: 0",
        keys: &["l", "v", "o"],
        reply: "0",
        ..CASE
    },
    Case {
        what: "the holder's proclamation: term seq value, never the token",
        given: &["SET l tok", "SET v tok|3|1|hello|world"],
        keys: &["l", "v", "o"],
        reply: "'3 1 hello world'",
        ..CASE
    },
    Case {
        what: "a value of another leader: 1",
        given: &["SET l tok", "SET v other"],
        keys: &["l", "v", "o"],
        reply: "1",
        ..CASE
    },
    Case {
        what: "an observer registers, and those past their time drop out",
        given: &["SET l tok", "ZADD o $now-1 old"],
        keys: &["l", "v", "o"],
        argv: &["c5:5", "2000"],
        reply: "1",
        then: &[("ZRANGE o 0 -1", "['c5:5']"), ("PTTL o", ">1000")],
        ..CASE
    },
];

pub const RESIGN: &[Case] = &[
    Case {
        what: "the leader's own value: deleted, observers woken",
        given: &["SET l tok", "SET v tok|3|1|hi", "ZADD o $now+2000 c5:5"],
        keys: &["l", "v", "o"],
        argv: &["tok"],
        reply: "1",
        then: &[("EXISTS v", "0")],
        woken: &["c5:5"],
    },
    Case {
        what: "another's value is kept",
        given: &["SET l tok", "SET v other", "ZADD o $now+2000 c5:5"],
        keys: &["l", "v", "o"],
        argv: &["tok"],
        reply: "1",
        then: &[("GET v", "'other'")],
        ..CASE
    },
    Case {
        what: "not the holder: 0",
        given: &["SET l other", "SET v other|3|1|hi"],
        keys: &["l", "v", "o"],
        argv: &["tok"],
        reply: "0",
        then: &[("EXISTS v", "1")],
        ..CASE
    },
    Case {
        what: "no lock key here: 0, observers woken",
        given: &["ZADD o $now+2000 c5:5"],
        keys: &["l", "v", "o"],
        argv: &["tok"],
        reply: "0",
        woken: &["c5:5"],
        ..CASE
    },
];

pub const NO: &[Case] = &[Case {
    what: "always no",
    reply: "0",
    ..CASE
}];

// ---------------------------------------------------------------------
// An operator's requests.

pub const INSPECT: &[Case] = &[
    Case {
        what: "a held key and a free one, by place, as SHA-1s: no token leaves, nothing written",
        given: &["SET l0 tok"],
        keys: &["l0", "l1"],
        argv: &["2"],
        reply: "['79bead8e6d65862a00cffaa12ccde1189ec34d29',-1,nil,nil,-2,nil]",
        then: &[("GET l0", "'tok'"), ("EXISTS l1", "0")],
        ..CASE
    },
    Case {
        what: "what is left of a key with a TTL",
        given: &["SET l tok PX 9000"],
        keys: &["l"],
        argv: &["1"],
        reply: "~'79bead8e6d65862a00cffaa12ccde1189ec34d29',",
        then: &[("PTTL l", ">8000")],
        ..CASE
    },
    Case {
        what: "a fenced token's fencing token is read from its value",
        given: &["SET l 0123456789abcdef0123456789abcdef01234567.42"],
        keys: &["l"],
        argv: &["1"],
        reply: "['00604e053fd45f9e33293010ac80092266f2e3d7',-1,'42']",
        ..CASE
    },
    Case {
        what: "another client's value that ends in digits carries no fence",
        given: &["SET l 550e8400-e29b-41d4-a716-446655440000.7"],
        keys: &["l"],
        argv: &["1"],
        reply: "~,-1,nil]",
        ..CASE
    },
    Case {
        what: "a key of another type is held, by \"other\" (no lock's)",
        given: &["RPUSH l x"],
        keys: &["l"],
        argv: &["1"],
        reply: "['other',-1,nil]",
        then: &[("TYPE l", "'list'")],
        ..CASE
    },
    Case {
        what: "a writer, and the readers whose time runs",
        given: &["SET w wtok", "ZADD r $now+60000 r1 $now-5 gone"],
        keys: &["w", "r"],
        argv: &["1"],
        reply: "~['719f2d990deacf895ad23d6ed1592b8c3ea1b043',-1,nil,'5573e39b6600496d40f493d00ec7658479a19607',",
        then: &[("ZCARD r", "2")],
        ..CASE
    },
    Case {
        what: "readers past their time are not shown",
        given: &["ZADD r $now-5 gone"],
        keys: &["w", "r"],
        argv: &["1"],
        reply: "[nil,-2,nil]",
        ..CASE
    },
];

pub const FORCE_RELEASE: &[Case] = &[
    Case {
        what: "the holder named is deleted, its fence value kept",
        given: &["SET l tok", "SET redlock-fence:l 7"],
        keys: &["l"],
        argv: &["79bead8e6d65862a"],
        reply: "1",
        then: &[("EXISTS l", "0"), ("GET redlock-fence:l", "'7'")],
        ..CASE
    },
    Case {
        what: "another holder (one that came after) is never touched",
        given: &["SET l later PX 9000"],
        keys: &["l"],
        argv: &["79bead8e6d65862a"],
        reply: "0",
        then: &[("GET l", "'later'"), ("PTTL l", ">8000")],
        ..CASE
    },
    Case {
        what: "a free key: 0",
        keys: &["l"],
        argv: &["79bead8e6d65862a"],
        reply: "0",
        ..CASE
    },
    Case {
        what: "a key of another type is no lock: kept",
        given: &["RPUSH l x"],
        keys: &["l"],
        argv: &["da39a3ee5e6b4b0d"],
        reply: "0",
        then: &[("TYPE l", "'list'")],
        ..CASE
    },
];
