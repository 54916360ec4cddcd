//! An operator's requests: what holds a resource ([`Op::Inspect`]) and a
//! lock holder's release, whoever it is ([`Op::ForceRelease`]). An
//! inspection answers, per node, the holders found there, each named by
//! its token's SHA-1 (see `scripts/inspect.lua`): no token leaves the
//! node. A round reads them with `algorithm::on_majority`; the release
//! then deletes the holder a majority agreed on, and nothing else.

use std::sync::Arc;

use super::keys::Layout;
use super::kind;
use super::request::{Op, Request};
use super::scripts::{self, Sent, eval};
use crate::algorithm::{Answer, Held, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::transport::trust::failure::server_failure;

/// Adds `req`'s command to `cmd`: the read, or a lock holder's release.
pub(super) fn encode(req: &Request, l: Layout, sent: &mut Sent, cmd: &mut redis::Cmd) {
    if let Op::ForceRelease { holder } = req.op {
        let lock = l.lock_keys(&req.kind);
        eval(cmd, &scripts::FORCE_RELEASE, sent).arg(1);
        cmd.arg(lock.first().map(|k| &**k))
            .arg(format!("{holder:016x}"));
        return;
    }
    let (held, readers) = kind::inspected(&req.kind, l);
    eval(cmd, &scripts::INSPECT, sent).arg(held.len() + usize::from(readers.is_some()));
    cmd.arg(&held).arg(readers).arg(held.len());
}

/// Reads a node's reply: an inspection's holders, by place (the key's
/// index among the keys held one each, the readers after them); a
/// release's yes when the holder is not on that node any more, deleted
/// now or gone before (what a release needs a majority of).
pub(crate) fn vote(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    use redis::Value;
    let places = match (&req.op, &req.kind) {
        (Op::ForceRelease { .. }, _) => {
            return match value {
                Value::Int(0..=1) => Ok(Vote::YES),
                Value::ServerError(err) => Err(server_failure(node, &err)),
                _ => Err(unexpected(node)),
            };
        }
        (_, kind) if kind.reader_writer() => 1,
        _ => u32::MAX,
    };
    let parts = match value {
        Value::Array(parts) if parts.len() % 3 == 0 => parts,
        Value::ServerError(err) => return Err(server_failure(node, &err)),
        _ => return Err(unexpected(node)),
    };
    let mut held = Vec::new();
    for (index, triple) in parts.chunks_exact(3).enumerate() {
        let remaining_ms = match triple[1] {
            Value::Int(-1) => u64::MAX,
            Value::Int(ms) => u64::try_from(ms).unwrap_or(0),
            _ => return Err(unexpected(node)),
        };
        let holder = match &triple[0] {
            Value::Nil => continue,
            Value::BulkString(other) if other == b"other" => OTHER_TYPE,
            Value::BulkString(sha1) => holder_id(sha1).ok_or_else(|| unexpected(node))?,
            _ => return Err(unexpected(node)),
        };
        let fence = match &triple[2] {
            Value::Nil => None,
            Value::BulkString(digits) => std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok()),
            _ => return Err(unexpected(node)),
        };
        held.push(Held {
            place: u32::try_from(index).unwrap_or(u32::MAX).min(places),
            holder,
            remaining_ms,
            fence,
        });
    }
    Ok(Vote::holds(held))
}

/// The holder of a key of another type (a list, a hash: no lock's).
pub(crate) const OTHER_TYPE: u64 = u64::MAX;

/// A holder as the scripts name it: the first 16 hex digits of its
/// token's SHA-1.
fn holder_id(sha1: &[u8]) -> Option<u64> {
    let hex = std::str::from_utf8(sha1.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

/// A reply that is none of the expected ones (never echoed).
fn unexpected(node: &Arc<str>) -> NodeFailure {
    NodeFailure::new(node.clone(), FailureKind::Server, "unexpected reply type")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;
    use crate::transport::protocol::request::Kind;
    use proptest::prelude::*;
    use redis::Value;
    use std::time::{Duration, Instant};

    fn inspect(kind: Kind) -> Request {
        let timeout = NodeTimeout::fixed(Duration::from_millis(5));
        Request::new(Op::Inspect, kind, Arc::from(""), timeout, Instant::now())
    }

    fn rw() -> Kind {
        Kind::Read {
            lock: Arc::from("l"),
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_reads_as_holders_by_place() {
        let node = Arc::from("n");
        let sha1 = |c: char| c.to_string().repeat(40);
        let reply = Value::Array(vec![
            bulk(&sha1('a')),
            Value::Int(900),
            bulk("42"),
            bulk(&sha1('b')),
            Value::Int(50),
            Value::Nil,
            bulk(&sha1('c')),
            Value::Int(-1),
            Value::Nil,
        ]);
        let read = vote(&inspect(rw()), reply, &node).unwrap();
        let held = read
            .read
            .as_ref()
            .and_then(crate::algorithm::Read::holds)
            .unwrap();
        let by_place: Vec<_> = held
            .iter()
            .map(|h| (h.place, h.remaining_ms, h.fence))
            .collect();
        assert_eq!(
            by_place,
            [(0, 900, Some(42)), (1, 50, None), (1, u64::MAX, None)]
        );
        assert!(
            read.yes,
            "a read is judged like a yes (a quarantined node's does not count)"
        );
        // A free key is no holder; a lock's places are its keys'.
        let lock = Kind::Lock(Arc::from([Arc::from("a"), Arc::from("b")]));
        let reply = Value::Array(vec![
            Value::Nil,
            Value::Int(-2),
            Value::Nil,
            bulk(&sha1('d')),
            Value::Int(5),
            Value::Nil,
        ]);
        let read = vote(&inspect(lock), reply, &node).unwrap();
        let held = read
            .read
            .as_ref()
            .and_then(crate::algorithm::Read::holds)
            .unwrap();
        assert_eq!(held.iter().map(|h| h.place).collect::<Vec<_>>(), [1]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever a node answers, well-formed or not, its tokens never
        /// show in the vote, its `Debug`, or the failure it makes.
        #[test]
        fn no_token_in_a_reply_is_ever_shown(
            secret in "[g-z]{16,24}",
            fence in proptest::option::of(any::<u64>()),
            shape in prop::collection::vec(0..5usize, 0..10),
            nested in any::<bool>(),
        ) {
            let token = match fence {
                Some(f) => format!("{secret}.{f}"),
                None => secret.clone(),
            };
            let parts: Vec<Value> = shape
                .iter()
                .map(|i| match i {
                    0 => Value::BulkString(token.clone().into_bytes()),
                    1 => Value::SimpleString(token.clone()),
                    2 => Value::Int(i64::try_from(*i).unwrap_or(0)),
                    3 => redis::parse_redis_value(b"-ERR no such key\r\n").unwrap(),
                    _ => Value::Nil,
                })
                .collect();
            let reply = if nested {
                Value::Array(vec![Value::Array(parts)])
            } else {
                Value::Array(parts)
            };
            let node = Arc::from("n");
            for kind in [rw(), Kind::Lock(Arc::from([Arc::from("k")]))] {
                let shown = match vote(&inspect(kind), reply.clone(), &node) {
                    Ok(read) => format!("{read:?}"),
                    Err(failure) => format!("{failure:?} {failure}"),
                };
                prop_assert!(!shown.contains(&secret), "{shown}");
            }
        }
    }
}
