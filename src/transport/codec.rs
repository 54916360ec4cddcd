//! The Redis side of each operation: the commands we send and how a reply
//! reads as a vote.
//!
//! Scripts go out as `EVAL` with their source every time, never `EVALSHA`:
//! a node whose script cache was flushed (restart, `SCRIPT FLUSH`) then never
//! answers `NOSCRIPT`, so no request has to be re-sent after the rest of its
//! batch, and a node runs the requests of one connection in exactly the order
//! they were queued (across a reconnect, see `redis_link.rs`). Redis caches
//! the compiled script by its hash, so `EVAL` costs the node a SHA-1 of ~120
//! bytes more than `EVALSHA`: nothing measurable.

use std::sync::Arc;

use super::request::{Op, Request};
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};

/// Compare-and-delete: deletes the key only while it still holds our token.
pub(crate) const RELEASE_SCRIPT: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#;

/// The Lua function both announcing release scripts start with:
/// `announce(key)` publishes `"{notice} {subscribers}"` (`ARGV[2]`, then how
/// many clients listen, which tells woken waiters how many contend) on the
/// key's release channel (see [`channel`]) and answers how many it reached —
/// nothing and `0` when nobody subscribes. `redis.pcall`: a user not allowed
/// to publish (or to count subscribers) still releases. Compact, as it goes
/// out with every release.
macro_rules! announce_fn {
    () => {
        r#"local function announce(key)
local c="redlock-release:"..key
local s=redis.pcall("pubsub","numsub",c)
local w=type(s)=="table" and s[2] or -1
if w==0 then return 0 end
local n=redis.pcall("publish",c,ARGV[2].." "..math.max(w,0))
return type(n)=="number" and n or 0
end
"#
    };
}

/// [`RELEASE_SCRIPT`] that, once it deleted the key, announces the release
/// (see `announce_fn`). Answers `1 + subscribers reached` if it deleted,
/// else `0`.
pub(crate) const RELEASE_NOTIFY_SCRIPT: &str = concat!(
    announce_fn!(),
    r#"if redis.call("get",KEYS[1])~=ARGV[1] then return 0 end
redis.call("del",KEYS[1])
if not ARGV[2] then return 1 end
return 1+announce(KEYS[1])"#
);

/// Compare-and-pexpire: extends the key only while it still holds our token.
pub(crate) const EXTEND_SCRIPT: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end"#;

/// Sets every key or none: `0` if any of them exists.
pub(crate) const ACQUIRE_ALL_SCRIPT: &str = r#"for _, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then return 0 end
end
for _, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return 1"#;

/// Deletes every key that holds our token, publishing the notice (if any)
/// on each deleted key's release channel; `1 + the most subscribers one
/// channel reached` only if all of them were ours, else `0`.
pub(crate) const RELEASE_ALL_SCRIPT: &str = concat!(
    announce_fn!(),
    r#"local ours, heard = 0, 0
for _, key in ipairs(KEYS) do
    if redis.call("get", key) == ARGV[1] then
        redis.call("del", key)
        ours = ours + 1
        if ARGV[2] then
            local n = announce(key)
            if n > heard then heard = n end
        end
    end
end
if ours == #KEYS then return 1 + heard else return 0 end"#
);

/// Extends every key, only if every key holds our token.
pub(crate) const EXTEND_ALL_SCRIPT: &str = r#"for _, key in ipairs(KEYS) do
    if redis.call("get", key) ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
    redis.call("pexpire", key, ARGV[2])
end
return 1"#;

/// Fenced acquisition: `KEYS` = the lock keys, then their fence keys;
/// `ARGV` = token, ttl ms, number of lock keys. Sets every lock key or none;
/// answers `-1` if any was held, else the largest fence value stored.
/// A fence key holding anything but an integer in `[0, 2^53)` (exact in a
/// Lua number) is an error, and nothing is set.
pub(crate) const ACQUIRE_FENCED_SCRIPT: &str = r#"local n = tonumber(ARGV[3])
for i = 1, n do
    if redis.call("exists", KEYS[i]) == 1 then return -1 end
end
local fence = 0
for i = 1, n do
    local raw = redis.call("get", KEYS[n + i])
    if raw then
        local stored = tonumber(raw)
        if not stored or stored ~= math.floor(stored) or stored < 0 or stored >= 9007199254740992 then
            return redis.error_reply("ERR redlock: " .. KEYS[n + i] .. " holds no fence value")
        end
        if stored > fence then fence = stored end
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return fence"#;

/// Fence write-back: `KEYS` as above; `ARGV` = token, new fence value,
/// idle ms, number of lock keys. Only while every lock key holds our token:
/// raises each fence key to the new value (never lowers it) and keeps it for
/// the idle period; answers `1`, else `0`.
pub(crate) const FENCE_SCRIPT: &str = r#"local n = tonumber(ARGV[4])
for i = 1, n do
    if redis.call("get", KEYS[i]) ~= ARGV[1] then return 0 end
end
local new = tonumber(ARGV[2])
for i = 1, n do
    local raw = redis.call("get", KEYS[n + i])
    local stored = 0
    if raw then
        stored = tonumber(raw)
        if not stored or stored ~= math.floor(stored) or stored < 0 or stored >= 9007199254740992 then
            return redis.error_reply("ERR redlock: " .. KEYS[n + i] .. " holds no fence value")
        end
    end
    if new > stored then
        redis.call("set", KEYS[n + i], ARGV[2], "PX", ARGV[3])
    else
        redis.call("pexpire", KEYS[n + i], ARGV[3])
    end
end
return 1"#;

/// The channel a release of `key` is announced on: `redlock-release:{key}`.
pub(crate) fn channel(key: &str) -> String {
    format!("{CHANNEL_PREFIX}{key}")
}

/// What every release channel's name starts with.
pub(crate) const CHANNEL_PREFIX: &str = "redlock-release:";

/// The key that keeps `key`'s fence value: `redlock-fence:{key}`.
pub(crate) fn fence_key(key: &str) -> String {
    format!("redlock-fence:{key}")
}

/// Appends the RESP encoding of `req` to `out`.
pub(crate) fn encode(req: &Request, out: &mut Vec<u8>) {
    if let Op::AcquireFenced { .. } | Op::Fence { .. } = req.op {
        return encode_fenced(req, out);
    }
    if req.keys.len() > 1 {
        return encode_all(req, out);
    }
    let key = req.keys.first().map_or(&b""[..], |k| k.as_bytes());
    let token = req.token.as_bytes();
    let cmd = match req.op {
        Op::Acquire { ttl_ms } => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            cmd
        }
        Op::Release { notice } => {
            let mut cmd = redis::cmd("EVAL");
            match notice {
                Some(notice) => cmd
                    .arg(RELEASE_NOTIFY_SCRIPT)
                    .arg(1)
                    .arg(key)
                    .arg(token)
                    .arg(notice),
                None => cmd.arg(RELEASE_SCRIPT).arg(1).arg(key).arg(token),
            };
            cmd
        }
        Op::Extend { ttl_ms } => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(EXTEND_SCRIPT)
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(ttl_ms);
            cmd
        }
        Op::AcquireFenced { .. } | Op::Fence { .. } => return encode_fenced(req, out),
    };
    cmd.write_packed_command(out);
}

/// The fenced scripts: lock keys, then fence keys.
fn encode_fenced(req: &Request, out: &mut Vec<u8>) {
    let mut cmd = redis::cmd("EVAL");
    let script = match req.op {
        Op::Fence { .. } => FENCE_SCRIPT,
        _ => ACQUIRE_FENCED_SCRIPT,
    };
    cmd.arg(script).arg(req.keys.len() * 2);
    for key in req.keys.iter() {
        cmd.arg(key.as_bytes());
    }
    for key in req.keys.iter() {
        cmd.arg(fence_key(key));
    }
    cmd.arg(req.token.as_bytes());
    match req.op {
        Op::Fence { value, idle_ms } => cmd.arg(value).arg(idle_ms),
        Op::AcquireFenced { ttl_ms } => cmd.arg(ttl_ms),
        _ => &mut cmd,
    };
    cmd.arg(req.keys.len());
    cmd.write_packed_command(out);
}

/// Several keys: one script that acts on all of them or on none.
fn encode_all(req: &Request, out: &mut Vec<u8>) {
    let (script, ttl_ms) = match req.op {
        Op::Acquire { ttl_ms } => (ACQUIRE_ALL_SCRIPT, Some(ttl_ms)),
        Op::Extend { ttl_ms } => (EXTEND_ALL_SCRIPT, Some(ttl_ms)),
        Op::Release { .. } => (RELEASE_ALL_SCRIPT, None),
        Op::AcquireFenced { .. } | Op::Fence { .. } => return encode_fenced(req, out),
    };
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(req.keys.len());
    for key in req.keys.iter() {
        cmd.arg(key.as_bytes());
    }
    cmd.arg(req.token.as_bytes());
    if let Some(ttl_ms) = ttl_ms {
        cmd.arg(ttl_ms);
    }
    if let Op::Release {
        notice: Some(notice),
    } = req.op
    {
        cmd.arg(notice);
    }
    cmd.write_packed_command(out);
}

/// Reads a node's reply to one request as a vote.
pub(crate) fn interpret(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    use redis::Value;
    let several = req.keys.len() > 1;
    match (req.op, value) {
        (Op::Acquire { .. }, Value::Okay) if !several => Ok(Vote::YES),
        (Op::Acquire { .. }, Value::SimpleString(s)) if !several && s == "OK" => Ok(Vote::YES),
        (Op::Acquire { .. }, Value::Nil) if !several => Ok(Vote::NO),
        // The all-or-nothing script for several keys.
        (Op::Acquire { .. }, Value::Int(n)) if several => Ok((n == 1).into()),
        (Op::Extend { .. } | Op::Fence { .. }, Value::Int(n)) => Ok((n == 1).into()),
        // `1 + subscribers reached` when deleted.
        (Op::Release { .. }, Value::Int(n)) if n >= 1 => {
            Ok(Vote::heard(u32::try_from(n - 1).unwrap_or(u32::MAX)))
        }
        (Op::Release { .. }, Value::Int(_)) => Ok(Vote::NO),
        // The largest fence value stored, or -1 when a key was held.
        (Op::AcquireFenced { .. }, Value::Int(-1)) => Ok(Vote::NO),
        (Op::AcquireFenced { .. }, Value::Int(n)) if n >= 0 => Ok(Vote::fenced(n.unsigned_abs())),
        (_, Value::ServerError(err)) => Err(NodeFailure::new(
            node.clone(),
            classify_code(err.code()),
            format!("{} {}", err.code(), err.details().unwrap_or(""))
                .trim_end()
                .to_owned(),
        )),
        // Never echo the reply itself: it could carry a token.
        (_, _) => Err(NodeFailure::new(
            node.clone(),
            FailureKind::Server,
            "unexpected reply type",
        )),
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
    use crate::settings::NodeTimeout;
    use std::time::{Duration, Instant};

    fn req(op: Op) -> Request {
        Request {
            op,
            keys: Arc::from([Arc::from("res")]),
            token: Arc::from("tok"),
            timeout: NodeTimeout::fixed(Duration::from_millis(5)),
            expires: Instant::now(),
        }
    }

    fn encoded(op: Op) -> String {
        let mut out = Vec::new();
        encode(&req(op), &mut out);
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
            resp(&["SET", "res", "tok", "NX", "PX", "1500"])
        );
    }

    #[test]
    fn scripts_go_out_as_eval_with_their_source() {
        assert_eq!(
            encoded(Op::Release { notice: None }),
            resp(&["EVAL", RELEASE_SCRIPT, "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Release { notice: Some(42) }),
            resp(&["EVAL", RELEASE_NOTIFY_SCRIPT, "1", "res", "tok", "42"])
        );
        assert_eq!(
            encoded(Op::Extend { ttl_ms: 30 }),
            resp(&["EVAL", EXTEND_SCRIPT, "1", "res", "tok", "30"])
        );
    }

    #[test]
    fn several_keys_go_out_as_one_all_or_nothing_script() {
        let mut all = req(Op::Acquire { ttl_ms: 70 });
        all.keys = Arc::from([Arc::from("a"), Arc::from("b")]);
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", ACQUIRE_ALL_SCRIPT, "2", "a", "b", "tok", "70"])
        );
        all.op = Op::Release { notice: None };
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", RELEASE_ALL_SCRIPT, "2", "a", "b", "tok"])
        );
        all.op = Op::Release { notice: Some(7) };
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", RELEASE_ALL_SCRIPT, "2", "a", "b", "tok", "7"])
        );
        for script in [RELEASE_NOTIFY_SCRIPT, RELEASE_ALL_SCRIPT] {
            assert!(
                script.contains(&format!("\"{CHANNEL_PREFIX}\".."))
                    || script.contains(&format!("\"{CHANNEL_PREFIX}\" .."))
            );
        }
        assert_eq!(channel("a"), "redlock-release:a");
        all.op = Op::Extend { ttl_ms: 9 };
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", EXTEND_ALL_SCRIPT, "2", "a", "b", "tok", "9"])
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
        assert_eq!(read(acquire, 1, Value::Okay), Ok(Vote::YES));
        assert_eq!(
            read(acquire, 1, Value::SimpleString("OK".into())),
            Ok(Vote::YES)
        );
        assert_eq!(read(acquire, 1, Value::Nil), Ok(Vote::NO));
        let release = Op::Release { notice: None };
        assert_eq!(read(release, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(release, 1, Value::Int(4)), Ok(Vote::heard(3)));
        assert_eq!(read(release, 2, Value::Int(2)), Ok(Vote::heard(1)));
        assert_eq!(read(release, 1, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(
            read(Op::Extend { ttl_ms: 1 }, 1, Value::Int(1)),
            Ok(Vote::YES)
        );
        // Several keys: the script's 1 or 0.
        assert_eq!(read(acquire, 2, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(acquire, 2, Value::Int(0)), Ok(Vote::NO));
        // Fenced: -1 refused, a fence value granted, anything else odd.
        let fenced = Op::AcquireFenced { ttl_ms: 1 };
        assert_eq!(read(fenced, 1, Value::Int(-1)), Ok(Vote::NO));
        assert_eq!(read(fenced, 1, Value::Int(7)), Ok(Vote::fenced(7)));
        assert!(read(fenced, 1, Value::Int(-2)).is_err());
        // A reply of the wrong shape is a failure that never echoes it.
        for (keys, odd) in [
            (1, Value::Int(1)),
            (2, Value::Okay),
            (1, Value::BulkString(b"tok".to_vec())),
        ] {
            let failure = read(acquire, keys, odd).unwrap_err();
            assert_eq!(failure.kind(), FailureKind::Server);
            assert!(!failure.to_string().contains("tok"));
        }
    }

    #[test]
    fn server_codes_map_to_actionable_kinds() {
        assert_eq!(classify_code("WRONGPASS"), FailureKind::Auth);
        assert_eq!(classify_code("NOAUTH"), FailureKind::Auth);
        assert_eq!(classify_code("NOPERM"), FailureKind::Auth);
        assert_eq!(classify_code("READONLY"), FailureKind::NotWritable);
        assert_eq!(classify_code("LOADING"), FailureKind::NotWritable);
        assert_eq!(classify_code("ERR"), FailureKind::Server);
    }
}
