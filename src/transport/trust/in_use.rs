//! The TTLs every client uses at a node, kept on the node itself. A jump
//! of the node's clock cuts every lease counted there, whoever holds it:
//! whether a step is a jump is judged against the shortest TTL in use (its
//! drift allowance is the smallest), and how long the node stays out
//! against the longest (until every lease counted there before the jump
//! has run out). One client knows only its own; so each announces its
//! shortest and longest on every node before its votes with them count
//! there ([`Announced`]), in the sorted set [`TTLS`]: member a TTL in
//! milliseconds, score the node's time (ms) until which a lease of it,
//! taken before the client announces again, may still be valid.
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

/// `KEYS[1]` the set; `ARGV` the shortest and longest TTL (ms), and for
/// how long (ms) from the node's now they may be in use. Never shortens
/// another client's entry; drops entries long past their end.
const ANNOUNCE: &str = "local t = redis.call('time') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local untl = now + tonumber(ARGV[3]) \
     for i = 1, 2 do \
       local old = tonumber(redis.call('zscore', KEYS[1], ARGV[i])) \
       if not old or old < untl then redis.call('zadd', KEYS[1], untl, ARGV[i]) end \
     end \
     redis.call('zremrangebyscore', KEYS[1], '-inf', now - tonumber(ARGV[4])) \
     local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores') \
     redis.call('pexpireat', KEYS[1], tonumber(last[2]) + tonumber(ARGV[4])) \
     return 1";

/// `KEYS[1]` the set; `ARGV[1]` a step of the node's clock (ms). The
/// shortest and longest TTL (ms) whose entries end after the node's now
/// less the step; `{}` when none does.
pub(crate) const IN_USE: &str = "local t = redis.call('time') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local lo, hi = nil, nil \
     local all = redis.call('zrangebyscore', KEYS[1], '(' .. (now - tonumber(ARGV[1])), '+inf') \
     for _, m in ipairs(all) do \
       local v = tonumber(m) \
       if v and (not lo or v < lo) then lo = v end \
       if v and (not hi or v > hi) then hi = v end \
     end \
     if not lo then return {} end \
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

    /// The command that announces `shortest` and `longest` (ms) at `key`,
    /// packed to go in front of a batch.
    pub(crate) fn command(key: &str, (shortest, longest): (u64, u64)) -> Vec<u8> {
        let life = u64::try_from(REFRESH.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(longest)
            .saturating_add(1_000);
        redis::cmd("EVAL")
            .arg(ANNOUNCE)
            .arg(1)
            .arg(key)
            .arg(shortest)
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

/// The shortest and longest TTL any client announced at the node on
/// `conn` that may still be in use, given that its clock just stepped by
/// `step`; `Ok(None)` when none, or when the node refused to say.
pub(crate) fn in_use(
    conn: &mut redis::Connection,
    key: &str,
    step: Duration,
) -> redis::RedisResult<Option<(Duration, Duration)>> {
    let step_ms = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
    let said: redis::RedisResult<Vec<u64>> = redis::cmd("EVAL")
        .arg(IN_USE)
        .arg(1)
        .arg(key)
        .arg(step_ms)
        .query(conn);
    match said {
        Ok(pair) => Ok(match pair[..] {
            [lo, hi] => Some((Duration::from_millis(lo), Duration::from_millis(hi))),
            _ => None,
        }),
        Err(err) if err.code().is_some() => Ok(None),
        Err(err) => Err(err),
    }
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
