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
    NodeFailure::new(node.clone(), kind, said.trim_end())
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
    fn a_script_refused_by_the_acl_is_auth_and_a_reply_reads_as_the_node_said() {
        let node: Arc<str> = "n:1".into();
        let refused = server_failure(
            &node,
            &reply("ERR The user executing the script can't run this command or subcommand"),
        );
        assert_eq!(refused.kind(), FailureKind::Auth);
        let moved = server_failure(&node, &reply("MOVED 866 127.0.0.1:30002"));
        assert_eq!(moved.kind(), FailureKind::Server);
        assert!(
            moved.detail().ends_with("MOVED 866 127.0.0.1:30002"),
            "{moved}"
        );
    }
}
