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

use super::keys::{Layout, QUEUE_ALIVE, Role, fence_key, queue_keys, rw_parts, slot_siblings};
use super::request::{Op, Request};
use super::scripts::{self, Sent, eval};
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::transport::trust::failure::server_failure;

/// How long a waiting writer's mark turns new readers away without a new
/// round from that writer: four of its longest pauses between rounds
/// (a writer waits at most [`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)
/// between rounds).
pub(crate) const WRITER_MARK: std::time::Duration = QUEUE_ALIVE;

/// Appends the RESP encoding of `req` to `out`, its keys as `l` lays
/// them out.
pub(crate) fn encode(req: &Request, l: Layout, sent: &mut Sent, out: &mut Vec<u8>) {
    if super::elect::is_elect_op(req.op) {
        return super::elect::encode(req, l, sent, out);
    }
    if super::elect::encode_extend(req, l, sent, out).is_some() {
        return;
    }
    let first = req.keys.first().map_or("", |k| &**k);
    if req.queue.is_some() || req.op == Op::Leave {
        let member = req.queue.as_deref().unwrap_or("");
        return encode_gate(req, l, first, member, sent, out);
    }
    if let Some((role, keys)) = rw_parts(first)
        && encode_rw(req, l, role, &keys, sent, out)
    {
        return;
    }
    if let (Some(permits), Op::Acquire { .. } | Op::AcquireFenced { .. }) = (req.report, req.op) {
        return encode_slot(req, l, first, permits, sent, out);
    }
    if let Op::AcquireFenced { .. } = req.op {
        return encode_fenced(req, l, None, sent, out);
    }
    if req.keys.len() > 1 {
        return encode_all(req, l, sent, out);
    }
    let key = l.key(first);
    let key = key.as_bytes();
    let token = req.token.as_bytes();
    let mut cmd = redis::Cmd::new();
    match req.op {
        Op::Acquire { ttl_ms } => {
            // `GET`: a refusal names the holder (its token, which a vote
            // keeps only as a hash), so a round can tell a split from a
            // holder. Redis 7.0 or later.
            cmd = redis::cmd("SET");
            cmd.arg(key)
                .arg(token)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(ttl_ms);
        }
        Op::Release => {
            eval(&mut cmd, &scripts::RELEASE, sent)
                .arg(1)
                .arg(key)
                .arg(token);
        }
        Op::Extend { ttl_ms } => {
            eval(&mut cmd, &scripts::EXTEND, sent)
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(ttl_ms);
        }
        Op::AcquireFenced { .. } => return encode_fenced(req, l, None, sent, out),
        // Only ever sent to the gate node (see `encode_gate`); an
        // election's commands never come here (see `encode`).
        Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => {
            eval(&mut cmd, &scripts::NO, sent).arg(0);
        }
    }
    cmd.write_packed_command(out);
}

/// The gate node's copy of a request that takes part in the queue of
/// `first` (the first key), for the waiter `member` (`""`: not waiting).
fn encode_gate(
    req: &Request,
    l: Layout,
    first: &str,
    member: &str,
    sent: &mut Sent,
    out: &mut Vec<u8>,
) {
    let [queue, alive] = queue_keys(first).map(|k| l.key(&k).into_owned());
    let mut cmd = redis::Cmd::new();
    let token = req.token.as_bytes();
    let rw = rw_parts(first);
    match (req.op, rw) {
        (
            Op::Acquire { ttl_ms } | Op::AcquireFenced { ttl_ms, .. },
            Some((role, [writer, readers, mark])),
        ) => {
            let reader = role == Role::Read;
            let (proposed, idle_ms) = match req.op {
                Op::AcquireFenced {
                    proposed, idle_ms, ..
                } if !reader => (proposed, idle_ms),
                _ => (0, 0),
            };
            let fenced = proposed > 0;
            eval(&mut cmd, &scripts::GATE_RW_ACQUIRE, sent)
                .arg(if fenced { 6 } else { 5 })
                .arg(&*l.key(&writer))
                .arg(&*l.key(&readers))
                .arg(&*l.key(&mark));
            if fenced {
                cmd.arg(&*l.key(&fence_key(&writer)));
            }
            cmd.arg(queue).arg(alive).arg(token).arg(ttl_ms);
            cmd.arg(mark_for(req)).arg(proposed).arg(idle_ms);
            cmd.arg(if reader { "r" } else { "w" });
            cmd.arg(grace_ms(req)).arg(member);
        }
        (Op::Release, Some((Role::Read, [writer, readers, mark]))) => {
            eval(&mut cmd, &scripts::GATE_READ_RELEASE, sent)
                .arg(5)
                .arg(&*l.key(&readers))
                .arg(&*l.key(&writer))
                .arg(&*l.key(&mark))
                .arg(queue)
                .arg(alive)
                .arg(token)
                .arg(member)
                .arg(u8::from(req.held));
        }
        _ => return encode_gate_lock(req, l, first, (queue, alive), member, sent, out),
    }
    cmd.write_packed_command(out);
}

/// How long the gate node counts a grant's key as the queue's (see
/// `grant` in `scripts/lib_queue.lua`): the granted round's per-node timeout, in whole ms (at
/// least 1).
fn grace_ms(req: &Request) -> u64 {
    u64::try_from(req.timeout.value.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// [`encode_gate`] for a lock's keys (and a writer's release, extension and
/// leave, which are a lock's).
fn encode_gate_lock(
    req: &Request,
    l: Layout,
    first: &str,
    (queue, alive): (String, String),
    member: &str,
    sent: &mut Sent,
    out: &mut Vec<u8>,
) {
    let mut cmd = redis::Cmd::new();
    let token = req.token.as_bytes();
    let keys = req.keys.len() + 2;
    let slots = siblings(req, l, first);
    match req.op {
        Op::Acquire { ttl_ms } => {
            eval(&mut cmd, &scripts::GATE_ACQUIRE, sent).arg(keys + slots.len());
            all_keys(&mut cmd, req, l).arg(&slots).arg(queue).arg(alive);
            cmd.arg(token).arg(ttl_ms).arg(slots.len());
            cmd.arg(grace_ms(req)).arg(member);
        }
        Op::AcquireFenced { .. } => {
            return encode_fenced(req, l, Some((queue, alive, member)), sent, out);
        }
        Op::Release => {
            eval(&mut cmd, &scripts::GATE_RELEASE, sent).arg(keys);
            all_keys(&mut cmd, req, l)
                .arg(queue)
                .arg(alive)
                .arg(token)
                .arg(member)
                .arg(u8::from(req.held));
        }
        Op::Leave => {
            // What lets the next waiter in once free: a semaphore's slots,
            // a reader-writer lock's writer key, a lock's (first) key.
            let watched = match rw_parts(first) {
                _ if !slots.is_empty() => slots,
                Some((_, [writer, _, _])) => vec![l.key(&writer).into_owned()],
                None => vec![l.key(first).into_owned()],
            };
            eval(&mut cmd, &scripts::LEAVE, sent)
                .arg(watched.len() + 2)
                .arg(&watched)
                .arg(queue)
                .arg(alive)
                .arg(member);
        }
        // Nothing to queue for: the plain command.
        Op::Extend { .. } | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => {
            let plain = Request {
                queue: None,
                ..req.clone()
            };
            return encode(&plain, l, sent, out);
        }
    }
    cmd.write_packed_command(out);
}

/// A semaphore slot's request (one with `report`): every slot key of the
/// semaphore; else none.
fn siblings(req: &Request, l: Layout, first: &str) -> Vec<String> {
    req.report
        .map(|permits| {
            slot_siblings(first, permits)
                .map(|k| l.key(&k).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Adds every lock key to `cmd`.
fn all_keys<'c>(cmd: &'c mut redis::Cmd, req: &Request, l: Layout) -> &'c mut redis::Cmd {
    for key in req.keys.iter() {
        cmd.arg(l.key(key).as_bytes());
    }
    cmd
}

/// The fenced acquisition: lock keys, then fence keys (then, on the gate
/// node, the queue keys and the member).
fn encode_fenced(
    req: &Request,
    l: Layout,
    gate: Option<(String, String, &str)>,
    sent: &mut Sent,
    out: &mut Vec<u8>,
) {
    let Op::AcquireFenced {
        ttl_ms,
        proposed,
        idle_ms,
    } = req.op
    else {
        return;
    };
    let mut cmd = redis::Cmd::new();
    let script = match &gate {
        Some(_) => &scripts::GATE_ACQUIRE_FENCED,
        None => &scripts::ACQUIRE_FENCED,
    };
    let slots = match gate {
        Some(_) => siblings(req, l, req.keys.first().map_or("", |k| &**k)),
        None => Vec::new(),
    };
    let queue_keys = if gate.is_some() { 2 } else { 0 };
    eval(&mut cmd, script, sent).arg(req.keys.len() * 2 + slots.len() + queue_keys);
    all_keys(&mut cmd, req, l);
    for key in req.keys.iter() {
        cmd.arg(&*l.key(&fence_key(key)));
    }
    if let Some((queue, alive, _)) = &gate {
        cmd.arg(&slots).arg(queue).arg(alive);
    }
    cmd.arg(req.token.as_bytes())
        .arg(ttl_ms)
        .arg(req.keys.len())
        .arg(proposed)
        .arg(idle_ms);
    if let Some((_, _, member)) = gate {
        cmd.arg(slots.len()).arg(grace_ms(req)).arg(member);
    }
    cmd.write_packed_command(out);
}

/// A semaphore slot's acquisition that also reports the slots held.
fn encode_slot(
    req: &Request,
    l: Layout,
    slot: &str,
    permits: u32,
    sent: &mut Sent,
    out: &mut Vec<u8>,
) {
    let mut cmd = redis::Cmd::new();
    let (script, ttl_ms, fence) = match req.op {
        Op::AcquireFenced {
            ttl_ms,
            proposed,
            idle_ms,
        } => (
            &scripts::SLOT_ACQUIRE_FENCED,
            ttl_ms,
            Some((proposed, idle_ms)),
        ),
        Op::Acquire { ttl_ms } => (&scripts::SLOT_ACQUIRE, ttl_ms, None),
        _ => {
            return encode(
                &Request {
                    report: None,
                    ..req.clone()
                },
                l,
                sent,
                out,
            );
        }
    };
    let lock_keys = if fence.is_some() { 2 } else { 1 };
    eval(&mut cmd, script, sent)
        .arg(lock_keys + usize::try_from(permits).unwrap_or(0))
        .arg(&*l.key(slot));
    if fence.is_some() {
        cmd.arg(&*l.key(&fence_key(slot)));
    }
    for sibling in slot_siblings(slot, permits) {
        cmd.arg(&*l.key(&sibling));
    }
    cmd.arg(req.token.as_bytes()).arg(ttl_ms);
    if let Some((proposed, idle_ms)) = fence {
        cmd.arg(1).arg(proposed).arg(idle_ms);
    }
    cmd.arg(permits);
    cmd.write_packed_command(out);
}

/// How long a writer refused by readers marks that it waits: `0` (no
/// mark) for one that will not try again.
fn mark_for(req: &Request) -> u64 {
    if req.waits { mark_ms() } else { 0 }
}

/// [`WRITER_MARK`] in milliseconds.
fn mark_ms() -> u64 {
    u64::try_from(WRITER_MARK.as_millis()).unwrap_or(u64::MAX)
}

/// A reader-writer lock's request, if it needs its own script (`false`:
/// the writer's release and extension, which are those
/// of an ordinary lock on the writer's key). `keys` as [`rw_parts`].
fn encode_rw(
    req: &Request,
    l: Layout,
    role: Role,
    keys: &[String; 3],
    sent: &mut Sent,
    out: &mut Vec<u8>,
) -> bool {
    let fence = l.key(&fence_key(&keys[0])).into_owned();
    let [writer, readers, mark] = keys.each_ref().map(|k| l.key(k).into_owned());
    let token = req.token.as_bytes();
    let mut cmd = redis::Cmd::new();
    match (role, req.op) {
        (Role::Read, Op::Acquire { ttl_ms } | Op::AcquireFenced { ttl_ms, .. }) => {
            eval(&mut cmd, &scripts::READ_ACQUIRE, sent)
                .arg(3)
                .arg(writer)
                .arg(readers)
                .arg(mark)
                .arg(token)
                .arg(ttl_ms);
        }
        (Role::Read, Op::Release) => {
            eval(&mut cmd, &scripts::READ_RELEASE, sent)
                .arg(1)
                .arg(readers)
                .arg(token);
        }
        // Never sent: a reader's leave goes to the gate node. A no.
        (Role::Read, Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign) => {
            eval(&mut cmd, &scripts::NO, sent).arg(0);
        }
        (Role::Read, Op::Extend { ttl_ms }) => {
            eval(&mut cmd, &scripts::READ_EXTEND, sent)
                .arg(1)
                .arg(readers)
                .arg(token)
                .arg(ttl_ms);
        }
        (Role::Write, Op::Acquire { ttl_ms }) => {
            eval(&mut cmd, &scripts::WRITE_ACQUIRE, sent)
                .arg(3)
                .arg(writer)
                .arg(readers)
                .arg(mark);
            cmd.arg(token).arg(ttl_ms).arg(mark_for(req));
        }
        (
            Role::Write,
            Op::AcquireFenced {
                ttl_ms,
                proposed,
                idle_ms,
            },
        ) => {
            eval(&mut cmd, &scripts::WRITE_ACQUIRE, sent)
                .arg(4)
                .arg(writer)
                .arg(readers)
                .arg(mark)
                .arg(fence);
            cmd.arg(token).arg(ttl_ms).arg(mark_for(req));
            cmd.arg(proposed).arg(idle_ms);
        }
        (Role::Write, _) => return false,
    }
    cmd.write_packed_command(out);
    true
}

/// Several keys: one script that acts on all of them or on none.
fn encode_all(req: &Request, l: Layout, sent: &mut Sent, out: &mut Vec<u8>) {
    let (script, ttl_ms) = match req.op {
        Op::Acquire { ttl_ms } => (&scripts::ACQUIRE_ALL, Some(ttl_ms)),
        Op::Extend { ttl_ms } => (&scripts::EXTEND_ALL, Some(ttl_ms)),
        Op::Release => (&scripts::RELEASE_ALL, None),
        Op::AcquireFenced { .. } => return encode_fenced(req, l, None, sent, out),
        Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => (&scripts::NO, None),
    };
    let mut cmd = redis::Cmd::new();
    eval(&mut cmd, script, sent).arg(req.keys.len());
    all_keys(&mut cmd, req, l).arg(req.token.as_bytes());
    if let Some(ttl_ms) = ttl_ms {
        cmd.arg(ttl_ms);
    }
    cmd.write_packed_command(out);
}

/// Reads a node's reply to one request as a vote.
pub(crate) fn interpret(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    if super::elect::is_elect_op(req.op) {
        return super::elect::vote(req, value, node);
    }
    let reports = req.report.is_some()
        && req.queue.is_none()
        && matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
    if !reports {
        let scripted = req.keys.len() > 1
            || req.queue.is_some()
            || req.keys.first().is_some_and(|key| rw_parts(key).is_some());
        return vote(req, value, node, scripted);
    }
    // The slot scripts: `{answer, held}`.
    match value {
        redis::Value::Array(parts) if parts.len() == 2 => {
            let mut parts = parts.into_iter();
            let (answer, held) = (parts.next(), parts.next());
            let held = match held {
                Some(redis::Value::BulkString(held)) => slots_held(&held),
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

/// A slot report (`0`/`1` per slot) as a set of slots.
fn slots_held(held: &[u8]) -> Option<u64> {
    if held.len() > 64 {
        return None;
    }
    held.iter()
        .enumerate()
        .try_fold(0u64, |set, (i, c)| match c {
            b'0' => Some(set),
            b'1' => Some(set | 1 << i),
            _ => None,
        })
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
    match (req.op, value) {
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
        (Op::Release, Value::Int(2)) if req.queue.is_some() => Ok(Vote::queued(true)),
        (Op::Release, Value::Int(n)) => Ok((n == 1).into()),
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
    use crate::transport::protocol::keys::{WAKE_PREFIX, wake_channel};
    use std::time::{Duration, Instant};

    fn req(op: Op) -> Request {
        Request {
            op,
            keys: Arc::from([Arc::from("res")]),
            token: Arc::from("tok"),
            timeout: NodeTimeout::fixed(Duration::from_millis(5)),
            expires: Instant::now(),
            queue: None,
            report: None,
            value: None,
            waits: true,
            held: true,
            awaited: true,
        }
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
    fn acquire_is_set_nx_px() {
        assert_eq!(
            encoded(Op::Acquire { ttl_ms: 1500 }),
            resp(&["SET", "res", "tok", "NX", "GET", "PX", "1500"])
        );
    }

    #[test]
    fn scripts_go_out_by_hash_or_with_their_source() {
        let mut out = Vec::new();
        encode(&req(Op::Release), Layout::Plain, &mut Sent::all(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVALSHA", scripts::RELEASE.hash(), "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Release),
            resp(&["EVAL", scripts::RELEASE.body(), "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Extend { ttl_ms: 30 }),
            resp(&["EVAL", scripts::EXTEND.body(), "1", "res", "tok", "30"])
        );
    }

    /// Issue 36: a lease's release tells the gate node it held the
    /// resource (`1`: wake the next waiter whatever is there); a failed
    /// round's clean-up that it did not (`0`), for locks and readers alike.
    #[test]
    fn a_release_says_whether_it_held() {
        let (q, a) = ("redlock-queue:res", "redlock-alive:res");
        for held in [true, false] {
            let mut release = req(Op::Release);
            release.queue = Some(Arc::from(""));
            release.held = held;
            let flag = if held { "1" } else { "0" };
            assert_eq!(
                encoded_req(&release),
                resp(&[
                    "EVAL",
                    scripts::GATE_RELEASE.body(),
                    "3",
                    "res",
                    q,
                    a,
                    "tok",
                    "",
                    flag
                ])
            );
            release.keys = Arc::from([Arc::from("redlock-rw:l#r")]);
            let (q, a) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
            assert_eq!(
                encoded_req(&release),
                resp(&[
                    "EVAL",
                    scripts::GATE_READ_RELEASE.body(),
                    "5",
                    "redlock-rw:l#r",
                    "redlock-rw:l#w",
                    "redlock-rw:l#wait",
                    q,
                    a,
                    "tok",
                    "",
                    flag
                ])
            );
        }
    }

    #[test]
    fn several_keys_go_out_as_one_all_or_nothing_script() {
        let mut all = req(Op::Acquire { ttl_ms: 70 });
        all.keys = Arc::from([Arc::from("a"), Arc::from("b")]);
        let mut out = Vec::new();
        encode(&all, Layout::Plain, &mut Sent::none(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&[
                "EVAL",
                scripts::ACQUIRE_ALL.body(),
                "2",
                "a",
                "b",
                "tok",
                "70"
            ])
        );
        all.op = Op::Release;
        let mut out = Vec::new();
        encode(&all, Layout::Plain, &mut Sent::none(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", scripts::RELEASE_ALL.body(), "2", "a", "b", "tok"])
        );
        all.op = Op::Extend { ttl_ms: 9 };
        let mut out = Vec::new();
        encode(&all, Layout::Plain, &mut Sent::none(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&[
                "EVAL",
                scripts::EXTEND_ALL.body(),
                "2",
                "a",
                "b",
                "tok",
                "9"
            ])
        );
    }

    #[test]
    fn the_gate_nodes_copy_carries_the_queue_keys_and_the_member() {
        let gate = |op: Op, keys: &[&str]| {
            let mut r = req(op);
            r.keys = keys.iter().map(|k| Arc::from(*k)).collect();
            r.queue = Some(Arc::from("c:7"));
            let mut out = Vec::new();
            encode(&r, Layout::Plain, &mut Sent::none(), &mut out);
            String::from_utf8(out).unwrap()
        };
        let (q, a) = ("redlock-queue:res", "redlock-alive:res");
        assert_eq!(
            gate(Op::Acquire { ttl_ms: 9 }, &["res"]),
            resp(&[
                "EVAL",
                scripts::GATE_ACQUIRE.body(),
                "3",
                "res",
                q,
                a,
                "tok",
                "9",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(Op::Acquire { ttl_ms: 9 }, &["res", "b"]),
            resp(&[
                "EVAL",
                scripts::GATE_ACQUIRE.body(),
                "4",
                "res",
                "b",
                q,
                a,
                "tok",
                "9",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(
                Op::AcquireFenced {
                    ttl_ms: 9,
                    proposed: 41,
                    idle_ms: 5000
                },
                &["res"]
            ),
            resp(&[
                "EVAL",
                scripts::GATE_ACQUIRE_FENCED.body(),
                "4",
                "res",
                "redlock-fence:res",
                q,
                a,
                "tok",
                "9",
                "1",
                "41",
                "5000",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(Op::Release, &["res"]),
            resp(&[
                "EVAL",
                scripts::GATE_RELEASE.body(),
                "3",
                "res",
                q,
                a,
                "tok",
                "c:7",
                "1"
            ])
        );
        assert_eq!(
            gate(Op::Leave, &["res", "b"]),
            resp(&["EVAL", scripts::LEAVE.body(), "3", "res", q, a, "c:7"])
        );
        // A semaphore's slot: every slot; a reader: the writer's key.
        let mut slot = req(Op::Leave);
        slot.keys = Arc::from([Arc::from("redlock-sem:s#1")]);
        slot.queue = Some(Arc::from("c:7"));
        slot.report = Some(2);
        let mut out = Vec::new();
        encode(&slot, Layout::Plain, &mut Sent::none(), &mut out);
        let (sq, sa) = ("redlock-queue:redlock-sem:s", "redlock-alive:redlock-sem:s");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&[
                "EVAL",
                scripts::LEAVE.body(),
                "4",
                "redlock-sem:s#0",
                "redlock-sem:s#1",
                sq,
                sa,
                "c:7"
            ])
        );
        let (rq, ra) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
        assert_eq!(
            gate(Op::Leave, &["redlock-rw:l#r"]),
            resp(&[
                "EVAL",
                scripts::LEAVE.body(),
                "3",
                "redlock-rw:l#w",
                rq,
                ra,
                "c:7"
            ])
        );
        // A writer's and a reader's acquisition on a reader-writer lock's
        // gate node: role, then the grace (the round's per-node timeout),
        // then the member, last.
        let (rq, ra) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
        for (key, role) in [("redlock-rw:l#w", "w"), ("redlock-rw:l#r", "r")] {
            assert_eq!(
                gate(Op::Acquire { ttl_ms: 9 }, &[key]),
                resp(&[
                    "EVAL",
                    scripts::GATE_RW_ACQUIRE.body(),
                    "5",
                    "redlock-rw:l#w",
                    "redlock-rw:l#r",
                    "redlock-rw:l#wait",
                    rq,
                    ra,
                    "tok",
                    "9",
                    &mark_ms().to_string(),
                    "0",
                    "0",
                    role,
                    "5",
                    "c:7"
                ])
            );
        }
        // Nothing to queue for: the plain command.
        assert_eq!(
            gate(Op::Extend { ttl_ms: 30 }, &["res"]),
            resp(&["EVAL", scripts::EXTEND.body(), "1", "res", "tok", "30"])
        );
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
        let read = |op: Op, keys: usize, value: Value| {
            let mut r = req(op);
            r.keys = (0..keys)
                .map(|i| Arc::from(format!("k{i}").as_str()))
                .collect();
            interpret(&r, value, &node)
        };
        let acquire = Op::Acquire { ttl_ms: 1 };
        // `SET … NX GET`: nil when set, else the holder's token.
        assert_eq!(read(acquire, 1, Value::Nil), Ok(Vote::YES));
        let held = read(acquire, 1, Value::BulkString(b"theirs".to_vec())).unwrap();
        assert!(!held.yes);
        assert_eq!(held, Vote::held_by(b"theirs"));
        assert_ne!(held, Vote::held_by(b"others"));
        // The scripts name the first held key's holder too.
        assert_eq!(
            read(acquire, 2, Value::BulkString(b"theirs".to_vec())),
            Ok(held)
        );
        assert_eq!(read(acquire, 2, Value::Int(0)), Ok(Vote::NO));
        let release = Op::Release;
        assert_eq!(read(release, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(release, 1, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(read(release, 1, Value::Int(2)), Ok(Vote::NO));
        // The gate node's copies.
        let gate = |op: Op, value: Value| {
            let mut r = req(op);
            r.queue = Some(Arc::from(""));
            interpret(&r, value, &node)
        };
        assert_eq!(gate(release, Value::Int(2)), Ok(Vote::queued(true)));
        assert_eq!(gate(release, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(acquire, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(acquire, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(gate(acquire, Value::Int(2)), Ok(Vote::queued(false)));
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(gate(fenced, Value::Int(-2)), Ok(Vote::queued(false)));
        assert_eq!(gate(fenced, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(
            gate(fenced, Value::Array(vec![Value::Int(8)])),
            Ok(Vote::stale(8))
        );
        assert_eq!(
            read(Op::Extend { ttl_ms: 1 }, 1, Value::Int(1)),
            Ok(Vote::YES)
        );
        // Several keys: the script's 1 or 0.
        assert_eq!(read(acquire, 2, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(acquire, 2, Value::Int(0)), Ok(Vote::NO));
        // Fenced: 1 granted, -1 refused, `{v}` stale (never a yes),
        // anything else odd.
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(read(fenced, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(fenced, 1, Value::Int(-1)), Ok(Vote::NO));
        let stale = read(fenced, 1, Value::Array(vec![Value::Int(7)]));
        assert_eq!(stale, Ok(Vote::stale(7)));
        assert!(!stale.unwrap().yes);
        assert!(read(fenced, 1, Value::Int(-2)).is_err());
        assert!(read(fenced, 1, Value::Int(7)).is_err());
        assert!(read(fenced, 1, Value::Array(vec![Value::Int(-3)])).is_err());
        // A reply of the wrong shape is a failure that never echoes it.
        for (keys, odd) in [
            (1, Value::Int(1)),
            (2, Value::Okay),
            (1, Value::SimpleString("tok".into())),
        ] {
            let failure = read(acquire, keys, odd).unwrap_err();
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
        let other = interpret(&req(Op::Release), syntax, &node).unwrap_err();
        assert_eq!(other.kind(), FailureKind::Server);
    }
}
