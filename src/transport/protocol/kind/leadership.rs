//! An election's room: the leader's lock key `redlock-elect:e#l` (an
//! ordinary lock key, always fenced: the token is the term), its
//! proclaimed value `redlock-elect:e#v` (with its lock token, term and
//! sequence number; it expires and is extended with the leader's lock, the
//! next leader overwrites it, a resigning leader deletes it) and, on its
//! gate node, the observers to wake when the value changes
//! `redlock-elect:e#o` (a sorted set, member → until when). Campaigning is
//! an ordinary fenced lock acquisition on the lock key; the election's own
//! commands are here: a leader proclaims its value, anyone reads who
//! leads, a resigning leader clears its value.
//!
//! The value key holds `token term seq value`: the leader's lock token
//! (so a read can tell whether the lock key's holder proclaimed it), its
//! term (the fencing token it won with), the proclamation's number and the
//! value. Every command is harmless late: a proclamation lands only while
//! the lock key holds its token and never replaces a later one of the same
//! leader; a read writes nothing; a resignation deletes only its own value.

use std::sync::Arc;

use super::super::keys::{Layout, QUEUE_ALIVE};
use super::super::request::{Keys, Op, Request, Value};
use super::super::scripts::{self, Sent, eval};
use super::lock;
use crate::algorithm::{Answer, Proclaimed, Vote};
use crate::error::{FailureKind, NodeFailure};

/// What every key of an election starts with.
pub(super) const PREFIX: &str = "redlock-elect:";

impl Layout {
    /// The election `election`'s keys: its lock key, its value key and its
    /// observers. (The suffixes differ, so no name's key is another's.)
    pub(crate) fn election(self, election: &str) -> [String; 3] {
        ["#l", "#v", "#o"].map(|suffix| self.named(PREFIX, election, suffix))
    }
}

/// The election `name`'s keys, as a standalone node lays them out: the
/// leader's lock key, its value key and its observers.
#[cfg(test)]
pub(crate) fn elect_keys(name: &str) -> [String; 3] {
    Layout::Plain.election(name)
}

/// The leader's lock key, which its waiters also queue under.
pub(super) fn lock_key(l: Layout, election: &str) -> String {
    let [lock, ..] = l.election(election);
    lock
}

/// Adds an election's command to `cmd`: its leader's proclamation,
/// resignation or lock extension (`elect_extend.lua`, which extends the
/// value with the lock), or a read of who leads.
pub(crate) fn encode(
    req: &Request,
    l: Layout,
    election: &str,
    sent: &mut Sent,
    cmd: &mut redis::Cmd,
) {
    let [lock, value, observers] = l.election(election);
    let token = req.token.as_bytes();
    match &req.op {
        Op::Extend { ttl_ms } => {
            eval(cmd, &scripts::ELECT_EXTEND, sent)
                .arg(2)
                .arg(lock)
                .arg(value)
                .arg(token)
                .arg(ttl_ms);
        }
        Op::Proclaim {
            term,
            seq,
            value: Value(proclaimed),
        } => {
            eval(cmd, &scripts::PROCLAIM, sent).arg(3);
            cmd.arg(&[lock, value, observers][..]).arg(token);
            cmd.arg(term).arg(seq).arg(&**proclaimed);
        }
        Op::Resign => {
            eval(cmd, &scripts::RESIGN, sent).arg(3);
            cmd.arg(&[lock, value, observers][..]).arg(token);
        }
        Op::ReadLeader => {
            eval(cmd, &scripts::LEADER, sent).arg(3);
            cmd.arg(&[lock, value, observers][..]);
            // The gate node's copy of an observer's read (see
            // `Transport::start_round`).
            if let Some(member) = req.queue.as_deref().filter(|m| !m.is_empty()) {
                cmd.arg(member)
                    .arg(u64::try_from(QUEUE_ALIVE.as_millis()).unwrap_or(u64::MAX));
            }
        }
        // Never sent here (see `codec::encode`): the lock key's own.
        Op::Acquire { .. }
        | Op::AcquireFenced { .. }
        | Op::Release { .. }
        | Op::Leave
        | Op::Inspect
        | Op::ForceRelease { .. } => {
            let keys: Keys = Arc::from([Arc::from(lock_key(l, election))]);
            lock::encode(req, &keys, l, sent, cmd);
        }
    }
}

/// Reads a node's reply to an election command as a vote. A read's yes
/// carries the proclamation; its no is "no leader here, or one that has
/// proclaimed nothing yet".
pub(crate) fn vote(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    use redis::Value;
    match (&req.op, value) {
        (Op::ReadLeader, Value::BulkString(read)) => parse(&read)
            .map(Vote::proclaimed)
            .ok_or_else(|| unexpected(node)),
        (op, Value::Int(n @ 0..=1)) => Ok((n == 1 && *op != Op::ReadLeader).into()),
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
