//! Replies as a node sends them.

use redis::Value;

/// Sorted set members as a reply, each followed by its score when
/// `option` is `WITHSCORES`.
pub(super) fn members(found: impl IntoIterator<Item = (String, i64)>, option: &str) -> Value {
    let scores = option.eq_ignore_ascii_case("WITHSCORES");
    let mut out = Vec::new();
    for (member, s) in found {
        out.push(bulk(&member));
        if scores {
            out.push(bulk(&s.to_string()));
        }
    }
    Value::Array(out)
}

/// A bulk string reply.
pub(super) fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A string or nil.
pub(super) fn string(s: Option<String>) -> Value {
    s.map_or(Value::Nil, |s| Value::BulkString(s.into_bytes()))
}

/// An error reply, as the node sends it.
pub(super) fn error(message: &str) -> Value {
    let line = format!("-{}\r\n", message.replace(['\r', '\n'], " "));
    redis::parse_redis_value(line.as_bytes()).unwrap_or(Value::Nil)
}
