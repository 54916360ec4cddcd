//! The TTLs every client uses at a node, kept on the node itself. A jump
//! of the node's clock cuts every lease counted there, whoever holds it:
//! whether a step is a jump is judged against the shortest TTL in use (its
//! drift allowance is the smallest), and how long the node stays out
//! against the longest (until every lease counted there before the jump
//! has run out). One client knows only its own; so each announces, on
//! every node before its votes count there ([`Announced`]), the drift
//! allowance of its shortest TTL (by its own drift factor) and its longest
//! TTL, in the sorted set [`TTLS`]: members `a<ms>` (an allowance) and
//! `t<ms>` (a TTL), scored with the node's time (ms) until which a lease
//! taken before the client announces again may still be valid.
//!
//! A step that moved the node's clock by `size` also made the entries
//! ending within `size` look ended: both scripts count an entry as in use
//! while its score is above the node's time less the step.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The sorted set of TTLs in use (on a cluster's master, a key in a hash
/// slot it serves: see `Admission::in_use_key`).
pub(crate) const TTLS: &str = "redlock:ttls";

/// How often a client announces again what it announced; its entries
/// last this long, plus their longest TTL, plus a second.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// Entries this long past their end are dropped (a later step larger
/// than this finds them gone: the client's own TTLs still count).
const KEEP_PAST_MS: u64 = 3_600_000;

/// `KEYS[1]` the set; `ARGV` the allowance and the longest TTL (ms), for
/// how long (ms) from the node's now they may be in use, and how long past
/// their end entries are kept. Never shortens another client's entry;
/// drops entries long past their end. (`PEXPIRE`, not `PEXPIREAT`: the
/// command ACLs written for earlier versions allow.)
const ANNOUNCE: &str = "local t = redis.call('time') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local untl = now + tonumber(ARGV[3]) \
     for i, m in ipairs({'a' .. ARGV[1], 't' .. ARGV[2]}) do \
       local old = tonumber(redis.call('zscore', KEYS[1], m)) \
       if not old or old < untl then redis.call('zadd', KEYS[1], untl, m) end \
     end \
     redis.call('zremrangebyscore', KEYS[1], '-inf', now - tonumber(ARGV[4])) \
     local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores') \
     redis.call('pexpire', KEYS[1], tonumber(last[2]) - now + tonumber(ARGV[4])) \
     return 1";

/// `KEYS[1]` the set; `ARGV[1]` a step of the node's clock (ms). The
/// smallest allowance and the longest TTL (ms) whose entries end after
/// the node's now less the step (`-1`: none).
pub(crate) const IN_USE: &str = "local t = redis.call('time') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local lo, hi = -1, -1 \
     local all = redis.call('zrangebyscore', KEYS[1], '(' .. (now - tonumber(ARGV[1])), '+inf') \
     for _, m in ipairs(all) do \
       local v = tonumber(string.sub(m, 2)) \
       if v and string.sub(m, 1, 1) == 'a' and (lo < 0 or v < lo) then lo = v end \
       if v and string.sub(m, 1, 1) == 't' and v > hi then hi = v end \
     end \
     return {lo, hi}";

/// What one client last announced at one node, and when.
#[derive(Debug, Default)]
pub(crate) struct Announced {
    last: Mutex<Option<(u64, u64, Instant)>>,
}

impl Announced {
    /// Whether `shortest` and `longest` (ms) are to be announced: they
    /// were not, by this client, within [`REFRESH`] (nothing is before the
    /// first TTL).
    pub(crate) fn due(&self, (shortest, longest): (u64, u64)) -> bool {
        let now = Instant::now();
        longest > 0
            && self.last.lock().is_none_or(|(s, l, at)| {
                s != shortest || l != longest || now.saturating_duration_since(at) >= REFRESH
            })
    }

    /// The command that announces an `allowance` and the `longest` TTL
    /// (ms) at `key`, packed to go in front of a batch.
    pub(crate) fn command(key: &str, (allowance, longest): (u64, u64)) -> Vec<u8> {
        let life = u64::try_from(REFRESH.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(longest)
            .saturating_add(1_000);
        redis::cmd("EVAL")
            .arg(ANNOUNCE)
            .arg(1)
            .arg(key)
            .arg(allowance)
            .arg(longest)
            .arg(life)
            .arg(KEEP_PAST_MS)
            .get_packed_command()
    }

    /// The node answered the announcement of `pair` (said it, or refused
    /// it: not tried again before the refresh either way).
    pub(crate) fn done(&self, pair: (u64, u64)) {
        *self.last.lock() = Some((pair.0, pair.1, Instant::now()));
    }
}

/// The smallest drift allowance and the longest TTL any client announced
/// at the node on `conn` that may still be in use, given that its clock
/// just stepped by `step`; `Ok(None)` when no client announced one. A
/// refusal is an error, as a failed connection is: the caller cannot tell.
pub(crate) fn in_use(
    conn: &mut redis::Connection,
    key: &str,
    step: Duration,
) -> redis::RedisResult<Option<(Duration, Duration)>> {
    let step_ms = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
    let pair: Vec<i64> = redis::cmd("EVAL")
        .arg(IN_USE)
        .arg(1)
        .arg(key)
        .arg(step_ms)
        .query(conn)?;
    let ms = |v: i64| Duration::from_millis(v.unsigned_abs());
    Ok(match pair[..] {
        [lo, hi] if lo >= 0 => Some((ms(lo), ms(hi.max(0)))),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_due_when_new_changed_or_old() {
        let announced = Announced::default();
        assert!(!announced.due((0, 0)), "no TTL yet: nothing to announce");
        assert!(announced.due((1_000, 10_000)));
        *announced.last.lock() = Some((1_000, 10_000, Instant::now()));
        assert!(!announced.due((1_000, 10_000)), "said lately");
        assert!(announced.due((500, 10_000)), "a shorter TTL");
        assert!(announced.due((1_000, 60_000)), "a longer TTL");
        let Some(long_ago) = Instant::now().checked_sub(REFRESH) else {
            return;
        };
        *announced.last.lock() = Some((1_000, 10_000, long_ago));
        assert!(
            announced.due((1_000, 10_000)),
            "due again after the refresh"
        );
    }
}
