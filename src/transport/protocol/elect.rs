//! An election's own commands: a leader proclaims its value, anyone reads
//! who leads, a resigning leader clears its value. (Campaigning is an
//! ordinary fenced lock acquisition on the election's lock key; see
//! `keys.rs`.)
//!
//! The value key holds `token term seq value`: the leader's lock token
//! (so a read can tell whether the lock key's holder proclaimed it), its
//! term (the fencing token it won with), the proclamation's number and the
//! value. Every command is harmless late: a proclamation lands only while
//! the lock key holds its token and never replaces a later one of the same
//! leader; a read writes nothing; a resignation deletes only its own value.

use std::sync::Arc;

use super::keys::{Layout, QUEUE_ALIVE};
use super::request::{Op, Request};
use super::scripts::{self, Sent, eval};
use crate::algorithm::{Answer, Proclaimed, Vote};
use crate::error::{FailureKind, NodeFailure};

/// Appends an election lock's extension (`elect_extend.lua`) to `out`:
/// `None` if `req` is not one.
pub(crate) fn encode_extend(
    req: &Request,
    l: Layout,
    sent: &mut Sent,
    out: &mut Vec<u8>,
) -> Option<()> {
    let Op::Extend { ttl_ms } = req.op else {
        return None;
    };
    let [lock] = &*req.keys else { return None };
    let value = super::keys::elect_value_key(lock)?;
    eval(&mut redis::Cmd::new(), &scripts::ELECT_EXTEND, sent)
        .arg(2)
        .arg(&*l.key(lock))
        .arg(&*l.key(&value))
        .arg(req.token.as_bytes())
        .arg(ttl_ms)
        .write_packed_command(out);
    Some(())
}

/// Whether `op` is one of an election's own commands.
pub(crate) fn is_elect_op(op: Op) -> bool {
    matches!(op, Op::Proclaim { .. } | Op::ReadLeader | Op::Resign)
}

/// Appends the RESP encoding of an election command to `out`.
pub(crate) fn encode(req: &Request, l: Layout, sent: &mut Sent, out: &mut Vec<u8>) {
    let mut cmd = redis::Cmd::new();
    let keys: Vec<_> = req.keys.iter().map(|k| l.key(k)).collect();
    let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
    let script = match req.op {
        Op::Proclaim { .. } => &scripts::PROCLAIM,
        Op::Resign => &scripts::RESIGN,
        _ => &scripts::LEADER,
    };
    eval(&mut cmd, script, sent).arg(keys.len()).arg(&keys);
    match req.op {
        Op::Proclaim { term, seq } => {
            let value = req.value.as_deref().unwrap_or("");
            cmd.arg(req.token.as_bytes()).arg(term).arg(seq).arg(value);
        }
        Op::Resign => {
            cmd.arg(req.token.as_bytes());
        }
        _ => {
            // The gate node's copy of an observer's read (see
            // `Transport::start_round`).
            if let Some(member) = req.queue.as_deref().filter(|m| !m.is_empty()) {
                cmd.arg(member)
                    .arg(u64::try_from(QUEUE_ALIVE.as_millis()).unwrap_or(u64::MAX));
            }
        }
    }
    cmd.write_packed_command(out);
}

/// Reads a node's reply to an election command as a vote. A read's yes
/// carries the proclamation; its no is "no leader here, or one that has
/// proclaimed nothing yet".
pub(crate) fn vote(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    use redis::Value;
    match (req.op, value) {
        (Op::ReadLeader, Value::BulkString(read)) => parse(&read)
            .map(Vote::proclaimed)
            .ok_or_else(|| unexpected(node)),
        (_, Value::Int(n @ 0..=1)) => Ok((n == 1 && req.op != Op::ReadLeader).into()),
        (_, Value::ServerError(err)) => {
            Err(crate::transport::trust::failure::server_failure(node, &err))
        }
        _ => Err(unexpected(node)),
    }
}

/// `term seq value` as a proclamation.
pub(crate) fn parse(read: &[u8]) -> Option<Proclaimed> {
    let read = std::str::from_utf8(read).ok()?;
    let mut parts = read.splitn(3, ' ');
    let term = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    let value = parts.next()?;
    Some(Proclaimed {
        term,
        seq,
        value: Arc::from(value),
    })
}

/// A reply that is none of the expected ones (never echoed).
fn unexpected(node: &Arc<str>) -> NodeFailure {
    NodeFailure::new(node.clone(), FailureKind::Server, "unexpected reply type")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_parses_term_seq_and_a_value_with_spaces() {
        let read = parse(b"7 2 host-a 10.0.0.1:80").unwrap();
        assert_eq!((read.term, read.seq), (7, 2));
        assert_eq!(&*read.value, "host-a 10.0.0.1:80");
        assert_eq!(&*parse(b"7 2 ").unwrap().value, "");
        assert!(parse(b"7 x v").is_none());
        assert!(parse(b"7").is_none());
        assert!(parse(&[0xff, b' ', b'1']).is_none());
    }
}
