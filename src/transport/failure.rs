//! A node's errors as failures: which [`FailureKind`] a Redis error is, for
//! every module that talks to a node (connections, Sentinel lookups, reply
//! readers). A leaf: it imports nothing from the transport.

use std::sync::Arc;

use crate::error::{FailureKind, NodeFailure};

/// Maps a Redis error to the kind a caller can act on.
pub(crate) fn classify(err: &redis::RedisError) -> FailureKind {
    if err.is_timeout() {
        return FailureKind::Timeout;
    }
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return FailureKind::Auth;
    }
    if err.kind() == redis::ErrorKind::Parse {
        return FailureKind::NotRedis;
    }
    if err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        return FailureKind::Connection;
    }
    match server_error(err) {
        Some(reply) => classify_code(reply.code()),
        None if err.is_io_error() || err.is_connection_dropped() => FailureKind::Connection,
        None => FailureKind::Server,
    }
}

/// The node's error reply behind `err`: its own, or the first of a
/// pipeline's (a connection's first commands go as one: `NOAUTH` from a
/// server that wants a password came as "Pipeline failures: […]", read as
/// a server error and retried).
pub(crate) fn server_error(err: &redis::RedisError) -> Option<redis::ServerError> {
    err.clone()
        .into_server_errors()
        .and_then(|errors| errors.first().map(|(_, reply)| reply.clone()))
}

/// A node's error reply as a failure: its kind from the code, except that
/// a command a script runs and the ACL refuses comes as `ERR … can't run
/// this command`: `Auth`, like a refused command outside a script.
pub(crate) fn server_failure(node: &Arc<str>, err: &redis::ServerError) -> NodeFailure {
    let details = err.details().unwrap_or("");
    let kind = if err.code() == "ERR" && details.contains("can't run this command") {
        FailureKind::Auth
    } else {
        classify_code(err.code())
    };
    let said = format!("{} {details}", err.code());
    NodeFailure::new(node.clone(), kind, with_advice(said.trim_end(), err.code()))
}

/// What to do about a node that answers as a member of a Redis Cluster:
/// `MOVED` / `ASK` (the key's slot is served elsewhere), `CROSSSLOT` (a
/// script's keys lie in several slots).
const CLUSTER_ADVICE: &str = "the node runs in Redis Cluster mode: list the whole cluster as one \
     node, redis+cluster://host:port[,host:port…] (some of its masters)";

/// `said` (a node's error), with what to do about it where the code calls
/// for it.
pub(crate) fn with_advice(said: &str, code: &str) -> String {
    match code {
        "MOVED" | "ASK" | "CROSSSLOT" => format!("{said}; {CLUSTER_ADVICE}"),
        _ => said.to_owned(),
    }
}

/// Maps a Redis error code (`WRONGPASS`, `READONLY`, ...) to a failure kind.
pub(crate) fn classify_code(code: &str) -> FailureKind {
    match code {
        "WRONGPASS" | "NOAUTH" | "NOPERM" => FailureKind::Auth,
        "READONLY" | "LOADING" | "MASTERDOWN" => FailureKind::NotWritable,
        _ => FailureKind::Server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes_map_to_actionable_kinds() {
        assert_eq!(classify_code("WRONGPASS"), FailureKind::Auth);
        assert_eq!(classify_code("NOAUTH"), FailureKind::Auth);
        assert_eq!(classify_code("NOPERM"), FailureKind::Auth);
        assert_eq!(classify_code("READONLY"), FailureKind::NotWritable);
        assert_eq!(classify_code("LOADING"), FailureKind::NotWritable);
        assert_eq!(classify_code("ERR"), FailureKind::Server);
    }

    /// A node's error reply, as the `redis` crate reads it.
    fn reply(line: &str) -> redis::ServerError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn a_cluster_members_redirection_says_what_to_do() {
        let node: Arc<str> = "n:1".into();
        for line in [
            "MOVED 866 127.0.0.1:30002",
            "ASK 866 127.0.0.1:30002",
            "CROSSSLOT Keys in request don't hash to the same slot",
        ] {
            let failure = server_failure(&node, &reply(line));
            let text = failure.to_string();
            assert!(text.contains(line), "{text}");
            assert!(text.contains("Redis Cluster mode"), "{text}");
            assert_eq!(failure.kind(), FailureKind::Server);
        }
        let plain = server_failure(&node, &reply("ERR boom"));
        assert!(!plain.to_string().contains("Cluster"), "{plain}");
    }
}
