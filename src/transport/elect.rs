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

use super::keys::QUEUE_ALIVE;
use super::request::{Op, Request};
use crate::algorithm::{Answer, Proclaimed, Vote};
use crate::error::{FailureKind, NodeFailure};

/// Wakes every live observer in `KEYS[3]` (members `{client}:{ticket}`,
/// scored by until when they count) on its client's wake channel, as the
/// gate scripts wake a waiter. Only the gate node has observers.
macro_rules! notify_fn {
    () => {
        r#"local function notify()
local t=redis.call("time")
redis.call("zremrangebyscore",KEYS[3],"-inf",t[1]*1000+math.floor(t[2]/1000))
for _,m in ipairs(redis.call("zrange",KEYS[3],0,-1)) do
local c,n=string.match(m,"^(.*):(%d+)$")
if c then redis.pcall("publish","redlock-wake:"..c,n) end
end
end
"#
    };
}

/// `KEYS` = the lock key, the value key, the observers; `ARGV` = token,
/// term, seq, value. `1` once the value key holds this proclamation or a
/// later one of the same leader (waking the observers when it changed);
/// `0` while the lock key does not hold the token. A gate node that holds
/// no lock key at all (it missed the leader's `SET`) wakes the observers
/// too: the change may have landed on a majority, and a wake-up only makes
/// them read.
const PROCLAIM_SCRIPT: &str = concat!(
    notify_fn!(),
    r#"local h=redis.call("get",KEYS[1])
if h~=ARGV[1] then
if not h then notify() end
return 0
end
local cur=redis.call("get",KEYS[2])
if cur then
local tok,_,seq=string.match(cur,"^(%S+) (%d+) (%d+) ")
if tok==ARGV[1] and tonumber(seq)>=tonumber(ARGV[3]) then return 1 end
end
redis.call("set",KEYS[2],ARGV[1].." "..ARGV[2].." "..ARGV[3].." "..ARGV[4])
local ttl=redis.call("pttl",KEYS[1])
if ttl<1 then ttl=1 end
redis.call("pexpire",KEYS[2],ttl)
notify()
return 1"#
);

/// An election lock's extension: `KEYS` = the lock key, the value key;
/// `ARGV` = token, ttl ms. Extends the lock key as any extension does (`1`
/// if it holds the token, else `0`), and the value key with it while it
/// holds this leader's proclamation: a proclamation lives as long as the
/// lock that backs it, so a leader that vanishes leaves nothing forever.
const EXTEND_SCRIPT: &str = r#"if redis.call("get",KEYS[1])~=ARGV[1] then return 0 end
if redis.call("pttl",KEYS[1])<tonumber(ARGV[2]) then redis.call("pexpire",KEYS[1],ARGV[2]) end
local v=redis.pcall("get",KEYS[2])
if type(v)=="string" and string.sub(v,1,#ARGV[1]+1)==ARGV[1].." " then
local t=redis.call("pttl",KEYS[1])
if redis.call("pttl",KEYS[2])<t then redis.call("pexpire",KEYS[2],t) end
end
return 1"#;

/// Appends an election lock's extension (see [`EXTEND_SCRIPT`]) to `out`:
/// `None` if `req` is not one.
pub(crate) fn encode_extend(req: &Request, out: &mut Vec<u8>) -> Option<()> {
    let Op::Extend { ttl_ms } = req.op else {
        return None;
    };
    let [lock] = &*req.keys else { return None };
    let value = super::keys::elect_value_key(lock)?;
    redis::cmd("EVAL")
        .arg(EXTEND_SCRIPT)
        .arg(2)
        .arg(&**lock)
        .arg(value)
        .arg(req.token.as_bytes())
        .arg(ttl_ms)
        .write_packed_command(out);
    Some(())
}

/// `KEYS` = the lock key, the value key, the observers; `ARGV` = the
/// observer's member and how long it counts, in ms (on the gate node of a
/// client that is woken: [`QUEUE_ALIVE`], as a queued waiter, since it
/// reads at least every queue refresh; else nothing). Registers the observer; then
/// `term seq value` proclaimed by the lock key's holder, `0` when nobody
/// holds the lock key, `1` when its holder has proclaimed nothing yet
/// (the value key is another's). Never the token. Observers whose time ran
/// out are dropped first: under a leader that proclaims nothing, every
/// read of every observer adds one member.
const READ_SCRIPT: &str = r#"if ARGV[1] then
local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
redis.call("zremrangebyscore",KEYS[3],"-inf",now)
redis.call("zadd",KEYS[3],now+tonumber(ARGV[2]),ARGV[1])
redis.call("pexpire",KEYS[3],ARGV[2])
end
local t=redis.call("get",KEYS[1])
if not t then return 0 end
local cur=redis.call("get",KEYS[2])
if not cur then return 1 end
local tok,rest=string.match(cur,"^(%S+) (.*)$")
if tok~=t then return 1 end
return rest"#;

/// `KEYS` = the lock key, the value key, the observers; `ARGV` = token.
/// Deletes the value key if this leader proclaimed it and still holds the
/// lock key, waking the observers: `1`, else `0` (waking them too where no
/// lock key is held, as a proclamation does).
const RESIGN_SCRIPT: &str = concat!(
    notify_fn!(),
    r#"local h=redis.call("get",KEYS[1])
if h~=ARGV[1] then
if not h then notify() end
return 0
end
local cur=redis.call("get",KEYS[2])
if cur and string.match(cur,"^(%S+) ")==ARGV[1] then
redis.call("del",KEYS[2])
notify()
end
return 1"#
);

/// Whether `op` is one of an election's own commands.
pub(crate) fn is_elect_op(op: Op) -> bool {
    matches!(op, Op::Proclaim { .. } | Op::ReadLeader | Op::Resign)
}

/// Appends the RESP encoding of an election command to `out`.
pub(crate) fn encode(req: &Request, out: &mut Vec<u8>) {
    let mut cmd = redis::cmd("EVAL");
    let keys: Vec<&str> = req.keys.iter().map(|k| &**k).collect();
    let script = match req.op {
        Op::Proclaim { .. } => PROCLAIM_SCRIPT,
        Op::Resign => RESIGN_SCRIPT,
        _ => READ_SCRIPT,
    };
    cmd.arg(script).arg(keys.len()).arg(&keys);
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
        (_, Value::ServerError(err)) => Err(super::failure::server_failure(node, &err)),
        _ => Err(unexpected(node)),
    }
}

/// `term seq value` as a proclamation.
pub(super) fn parse(read: &[u8]) -> Option<Proclaimed> {
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
