//! The Redis side of each operation: the commands we send (which script,
//! which keys, which arguments) and how a reply reads as a vote. The
//! scripts themselves are in `scripts/`, one file each.
//!
//! A script goes out as `EVAL` with its source on a connection's first call
//! of it, as `EVALSHA` with its hash after that ([`Sent`]). A node whose
//! script cache was flushed answers `NOSCRIPT`, and the request goes out
//! again with its source (`redis_link.rs`). Measured on one idle node
//! (`cargo bench --bench scripts`): a gate script is 2–4.4 kB with its
//! libraries (comments stripped), and sending it by hash saves the node
//! 20–40 % of its CPU for the call, the reading and hashing of that source
//! (7–39 % over all the scripts).

use std::sync::Arc;

use super::keys::Layout;
use super::kind;
use super::request::{Kind, Op, Request};
use super::scripts::Sent;
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::transport::trust::failure::server_failure;

/// Appends the RESP encoding of `req` to `out`, its keys as `l` lays
/// them out: an election's own commands, the gate node's copy of a
/// request that takes part in a queue, or the plain command.
pub(crate) fn encode(req: &Request, l: Layout, sent: &mut Sent, out: &mut Vec<u8>) {
    let mut cmd = redis::Cmd::new();
    let elects = req.op.elects() || matches!(req.op, Op::Extend { .. });
    match (&req.kind, gate_member(req)) {
        _ if req.op.inspects() => super::inspect::encode(req, l, sent, &mut cmd),
        (Kind::Leadership { election }, _) if elects => {
            kind::leadership::encode(req, l, election, sent, &mut cmd);
        }
        (_, Some(member)) => kind::encode_gate(req, l, member, sent, &mut cmd),
        (_, None) => kind::encode_plain(req, l, sent, &mut cmd),
    }
    cmd.write_packed_command(out);
}

/// The waiter a request is the gate node's copy for (`""`: not waiting):
/// an acquisition or release that carries a member, and every leave (sent
/// to the gate node only). Nothing else waits in a queue.
fn gate_member(req: &Request) -> Option<&str> {
    match req.op {
        Op::Leave => Some(req.queue.as_deref().unwrap_or("")),
        Op::Acquire { .. } | Op::AcquireFenced { .. } | Op::Release { .. } => req.queue.as_deref(),
        Op::Extend { .. }
        | Op::Proclaim { .. }
        | Op::ReadLeader
        | Op::Resign
        | Op::Inspect
        | Op::ForceRelease { .. } => None,
    }
}

/// Reads a node's reply to one request as a vote.
pub(crate) fn interpret(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    if req.op.elects() {
        return kind::leadership::vote(req, value, node);
    }
    if req.op.inspects() {
        return super::inspect::vote(req, value, node);
    }
    let (reports, scripted) = kind::reply_shape(req);
    if !reports {
        return vote(req, value, node, scripted);
    }
    // The slot scripts: `{answer, held}`.
    match value {
        redis::Value::Array(parts) if parts.len() == 2 => {
            let mut parts = parts.into_iter();
            let (answer, held) = (parts.next(), parts.next());
            let held = match held {
                Some(redis::Value::BulkString(held)) => kind::slots_held(&held),
                _ => None,
            };
            match (answer, held) {
                (Some(answer), Some(held)) => vote(req, answer, node, true).map(|vote| Vote {
                    slots: Some(held),
                    ..vote
                }),
                _ => Err(unexpected(node)),
            }
        }
        other => vote(req, other, node, true),
    }
}

/// A reply that is none of the expected ones. Never echoes the reply
/// itself: it could carry a token.
fn unexpected(node: &Arc<str>) -> NodeFailure {
    NodeFailure::new(node.clone(), FailureKind::Server, "unexpected reply type")
}

/// Reads one reply as a vote; `scripted`: it came from one of the scripts,
/// not from `SET NX GET`.
fn vote(req: &Request, value: redis::Value, node: &Arc<str>, scripted: bool) -> Answer {
    use redis::Value;
    match (&req.op, value) {
        // `SET … NX GET`: nil when it set the key, else the holder's token.
        (Op::Acquire { .. }, Value::Nil) if !scripted => Ok(Vote::YES),
        (Op::Acquire { .. }, Value::BulkString(holder)) if !scripted => Ok(Vote::held_by(&holder)),
        // The scripts: 1 set, 0 held, 2 (gate node) others queued first.
        (Op::Acquire { .. }, Value::Int(n @ 0..=2)) if scripted => Ok(match n {
            1 => Vote::YES,
            2 => Vote::queued(false),
            _ => Vote::NO,
        }),
        (Op::Extend { .. } | Op::Leave, Value::Int(n)) => Ok((n == 1).into()),
        // 1 deleted, 2 (gate node) deleted and woke the next waiter.
        (Op::Release { .. }, Value::Int(2)) if req.queue.is_some() => Ok(Vote::queued(true)),
        (Op::Release { .. }, Value::Int(n)) => Ok((n == 1).into()),
        // 1 set (the proposed token stored), -1 when a key was held, -2
        // (gate node) free but others queued first, `{v}` a stale token.
        (Op::AcquireFenced { .. }, Value::Int(1)) => Ok(Vote::YES),
        (Op::AcquireFenced { .. }, Value::Int(-1)) => Ok(Vote::NO),
        (Op::AcquireFenced { .. }, Value::Array(stored)) => match stored.as_slice() {
            [Value::Int(v)] if *v >= 0 => Ok(Vote::stale(v.unsigned_abs())),
            _ => Err(unexpected(node)),
        },
        // The scripts' no that names the holder (the first held key's).
        (Op::Acquire { .. } | Op::AcquireFenced { .. }, Value::BulkString(holder)) => {
            Ok(Vote::held_by(&holder))
        }
        (Op::AcquireFenced { .. }, Value::Int(-2)) if req.queue.is_some() => {
            Ok(Vote::queued(false))
        }
        // The key holds another type (a list, a hash): it exists, so it is
        // held, as plain `SET NX` and the scripts answer.
        (Op::Acquire { .. }, Value::ServerError(err)) if !scripted && err.code() == "WRONGTYPE" => {
            Ok(Vote::NO)
        }
        // Redis before 7.0 refuses `NX` with `GET`.
        (Op::Acquire { .. }, Value::ServerError(err))
            if !scripted && err.details().is_some_and(|d| d.contains("syntax error")) =>
        {
            Err(NodeFailure::new(
                node.clone(),
                FailureKind::Unsupported,
                "the node refuses SET … NX GET: it runs Redis older than 7.0, which \
                 redlock-sync needs",
            ))
        }
        (_, Value::ServerError(err)) => Err(server_failure(node, &err)),
        (_, _) => Err(unexpected(node)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;
    use crate::transport::protocol::keys::{QUEUE_ALIVE, WAKE_PREFIX, wake_channel};
    use crate::transport::protocol::scripts;
    use std::time::{Duration, Instant};

    fn req(op: Op) -> Request {
        on(op, lock(&["res"]))
    }

    fn on(op: Op, kind: Kind) -> Request {
        let timeout = NodeTimeout::fixed(Duration::from_millis(5));
        Request::new(op, kind, Arc::from("tok"), timeout, Instant::now())
    }

    fn lock(keys: &[&str]) -> Kind {
        Kind::Lock(keys.iter().map(|k| Arc::from(*k)).collect())
    }

    fn encoded(op: Op) -> String {
        encoded_req(&req(op))
    }

    fn encoded_req(r: &Request) -> String {
        let mut out = Vec::new();
        encode(r, Layout::Plain, &mut Sent::none(), &mut out);
        String::from_utf8(out).unwrap()
    }

    fn resp(args: &[&str]) -> String {
        let mut s = format!("*{}\r\n", args.len());
        for a in args {
            s.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s
    }

    #[test]
    fn scripts_go_out_by_hash_or_with_their_source() {
        let mut out = Vec::new();
        encode(
            &req(Op::Release { held: true }),
            Layout::Plain,
            &mut Sent::all(),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVALSHA", scripts::RELEASE.hash(), "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Release { held: true }),
            resp(&["EVAL", scripts::RELEASE.body(), "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Extend { ttl_ms: 30 }),
            resp(&["EVAL", scripts::EXTEND.body(), "1", "res", "tok", "30"])
        );
    }

    /// What the gate node's scripts and the client must agree on beyond
    /// the encodings (pinned in `protocol/tests.rs`): the wake-up channel,
    /// and how long a place in a queue stays alive.
    #[test]
    fn the_scripts_share_the_clients_queue_constants() {
        assert_eq!(wake_channel("c"), "redlock-wake:c");
        // The alive period in the scripts is four refresh periods.
        let alive = QUEUE_ALIVE.as_millis();
        assert_eq!(alive, crate::settings::QUEUE_REFRESH.as_millis() * 4);
        assert_eq!(scripts::queue_alive_ms(), u64::try_from(alive).ok());
        for script in [
            &scripts::GATE_ACQUIRE,
            &scripts::GATE_ACQUIRE_FENCED,
            &scripts::GATE_RELEASE,
            &scripts::LEAVE,
            &scripts::GATE_RW_ACQUIRE,
            &scripts::GATE_READ_RELEASE,
        ] {
            assert!(script.body().contains("local ALIVE="), "{}", script.name());
        }
        assert!(
            scripts::LEAVE
                .body()
                .contains(&format!("\"{WAKE_PREFIX}\".."))
        );
    }

    #[test]
    fn replies_read_as_votes_or_failures() {
        use redis::Value;
        let node: Arc<str> = Arc::from("n:1");
        let read = |op: &Op, keys: usize, value: Value| {
            let keys = (0..keys).map(|i| Arc::from(format!("k{i}").as_str()));
            interpret(&on(op.clone(), Kind::Lock(keys.collect())), value, &node)
        };
        let acquire = Op::Acquire { ttl_ms: 1 };
        // `SET … NX GET`: nil when set, else the holder's token.
        assert_eq!(read(&acquire, 1, Value::Nil), Ok(Vote::YES));
        let held = read(&acquire, 1, Value::BulkString(b"theirs".to_vec())).unwrap();
        assert!(!held.yes);
        assert_eq!(held, Vote::held_by(b"theirs"));
        assert_ne!(held, Vote::held_by(b"others"));
        // The scripts name the first held key's holder too.
        assert_eq!(
            read(&acquire, 2, Value::BulkString(b"theirs".to_vec())),
            Ok(held)
        );
        assert_eq!(read(&acquire, 2, Value::Int(0)), Ok(Vote::NO));
        let release = Op::Release { held: true };
        assert_eq!(read(&release, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(&release, 1, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(read(&release, 1, Value::Int(2)), Ok(Vote::NO));
        // The gate node's copies.
        let gate = |op: &Op, value: Value| {
            let mut r = req(op.clone());
            r.queue = Some(Arc::from(""));
            interpret(&r, value, &node)
        };
        assert_eq!(gate(&release, Value::Int(2)), Ok(Vote::queued(true)));
        assert_eq!(gate(&release, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(&acquire, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(&acquire, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(gate(&acquire, Value::Int(2)), Ok(Vote::queued(false)));
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(gate(&fenced, Value::Int(-2)), Ok(Vote::queued(false)));
        assert_eq!(gate(&fenced, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(
            gate(&fenced, Value::Array(vec![Value::Int(8)])),
            Ok(Vote::stale(8))
        );
        assert_eq!(
            read(&Op::Extend { ttl_ms: 1 }, 1, Value::Int(1)),
            Ok(Vote::YES)
        );
        // Several keys: the script's 1 or 0.
        assert_eq!(read(&acquire, 2, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(&acquire, 2, Value::Int(0)), Ok(Vote::NO));
        // Fenced: 1 granted, -1 refused, `{v}` stale (never a yes),
        // anything else odd.
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(read(&fenced, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(&fenced, 1, Value::Int(-1)), Ok(Vote::NO));
        let stale = read(&fenced, 1, Value::Array(vec![Value::Int(7)]));
        assert_eq!(stale, Ok(Vote::stale(7)));
        assert!(!stale.unwrap().yes);
        assert!(read(&fenced, 1, Value::Int(-2)).is_err());
        assert!(read(&fenced, 1, Value::Int(7)).is_err());
        assert!(read(&fenced, 1, Value::Array(vec![Value::Int(-3)])).is_err());
        // A reply of the wrong shape is a failure that never echoes it.
        for (keys, odd) in [
            (1, Value::Int(1)),
            (2, Value::Okay),
            (1, Value::SimpleString("tok".into())),
        ] {
            let failure = read(&acquire, keys, odd).unwrap_err();
            assert_eq!(failure.kind(), FailureKind::Server);
            assert!(!failure.to_string().contains("tok"));
        }
    }

    #[test]
    fn a_redis_older_than_7_is_named() {
        let node: Arc<str> = Arc::from("n:1");
        let syntax = redis::parse_redis_value(b"-ERR syntax error\r\n").unwrap();
        let failure =
            interpret(&req(Op::Acquire { ttl_ms: 1 }), syntax.clone(), &node).unwrap_err();
        assert_eq!(failure.kind(), FailureKind::Unsupported);
        assert!(failure.kind().is_permanent());
        assert!(
            failure.to_string().contains("Redis older than 7.0"),
            "{failure}"
        );
        // A key of another type is held, as for the scripts.
        let wrong = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .unwrap();
        assert_eq!(
            interpret(&req(Op::Acquire { ttl_ms: 1 }), wrong, &node),
            Ok(Vote::NO)
        );
        // Another command's syntax error is the server's.
        let other = interpret(&req(Op::Release { held: true }), syntax, &node).unwrap_err();
        assert_eq!(other.kind(), FailureKind::Server);
    }
}
