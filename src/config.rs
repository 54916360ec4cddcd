//! The builder and its validation (node URLs are parsed in `node_url.rs`
//! and `sentinel_url.rs`).

use std::fmt;
use std::time::Duration;

use crate::error::Error;
use crate::human::Human;
use crate::node_url::{Tls, parse_nodes};
use crate::sentinel_url::SentinelAuth;
use crate::settings::Config;
use crate::transport::NodeSpec;

/// Configures and builds a [`Redlock`](crate::Redlock) client.
///
/// Every setter consumes and returns the builder; every setting has a
/// documented default, and a built client shows them all with
/// [`Redlock::config`](crate::Redlock::config). [`build`](Self::build)
/// validates everything and returns [`Error::Config`] on bad input; it
/// never panics. The node URL forms are listed at
/// [`Redlock::new`](crate::Redlock::new).
///
/// Resource names are checked per call, not here: with a Redis Cluster node
/// (`redis+cluster://`) listed, a name that contains `}` without a hash tag
/// of its own (`a}b`) cannot keep its keys in one hash slot, and every call
/// with it fails with [`Error::Config`] (give it a tag, `{a}b`, or drop the
/// `}`).
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .retry_count(20)
///     .retry_delay(Duration::from_millis(100))
///     .connect_timeout(Duration::from_millis(500))
///     .build()?;
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    nodes: Vec<String>,
    settings: Config,
    tls: Tls,
    sentinel: SentinelAuth,
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Node URLs may carry passwords: show only how many there are.
        f.debug_struct("RedlockBuilder")
            .field("nodes", &self.nodes.len())
            .field("settings", &self.settings)
            .field("tls", &self.tls)
            .field("sentinel", &self.sentinel)
            .finish()
    }
}

impl RedlockBuilder {
    pub(crate) fn new<I>(nodes: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        RedlockBuilder {
            nodes: nodes.into_iter().map(|n| n.as_ref().to_owned()).collect(),
            settings: Config::defaults(),
            tls: Tls::default(),
            sentinel: SentinelAuth::default(),
        }
    }

    /// How many times [`Redlock::lock`](crate::Redlock::lock) (and
    /// `lock_all`) retries after the first round fails because the
    /// resource is busy or nodes failed, each retry after the retry delay
    /// or earlier when a release wakes the waiter: `retry_count + 1`
    /// attempts in all, which [`Error::Busy`](crate::Error::Busy) reports.
    /// (Rounds that only keep a waiting caller's place in the queue, and a
    /// round in which contenders split the votes and nobody won, or in
    /// which a queued waiter in its turn found the release not yet on every
    /// node, re-tried at once a few times, come on top: see
    /// [`Redlock::try_lock`](crate::Redlock::try_lock).)
    /// Defaults to `10`: with the default pauses (50–200 ms, see
    /// [`retry_delay`](Self::retry_delay)) `lock` waits about 1.1 s (0.5–2 s)
    /// for a resource that stays held. To wait for a set time, use
    /// [`Redlock::lock_for`](crate::Redlock::lock_for).
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.settings.retry_count = retries;
        self
    }

    /// The fixed part of the pause between two rounds. At most one hour.
    /// Defaults to 50 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.settings.retry_delay = delay;
        self
    }

    /// The random part of the pause between two rounds: a uniformly random
    /// duration in `[0, jitter]` is added to the retry delay, so competing
    /// clients fall out of step. At most one hour. Defaults to 150 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.settings.retry_jitter = jitter;
        self
    }

    /// The clock-drift factor: validity is `ttl - elapsed - (ttl * factor + 2 ms)`.
    /// Must be in `[0, 1)`. Defaults to `0.01`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.settings.drift_factor = factor;
        self
    }

    /// A fixed per-node socket timeout for every operation, instead of one
    /// derived from the TTL and the measured round trips. It is used as set,
    /// whatever the nodes' round trips. Must be above zero and at most 60 s.
    /// Defaults to derived (see
    /// [`node_timeout_factor`](Self::node_timeout_factor)).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.settings.node_timeout = Some(timeout);
        self
    }

    /// The share of the TTL used as the per-node timeout when no fixed
    /// [`node_timeout`](Self::node_timeout) is set. The result is kept between
    /// 10 ms and 250 ms and never above a third of the TTL: a 10 s TTL gives
    /// 50 ms. It is then raised, when the nodes are farther away, to what
    /// their measured round trips need: the smoothed round trip plus four
    /// times its mean deviation (at least half a round trip more), of the
    /// node that completes a majority — never above a third of the TTL.
    /// Must be in `(0, 1)`. Defaults to `0.005`.
    pub fn node_timeout_factor(mut self, factor: f64) -> Self {
        self.settings.node_timeout_factor = factor;
        self
    }

    /// How long opening a connection to one node (TCP, TLS, AUTH,
    /// `CLIENT ID`) may take. Connections are opened in the background, so this
    /// does not add to lock latency; it bounds how long [`build`](Self::build)
    /// waits for the first connections. Must be above zero and at most 60 s.
    /// Defaults to 1 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How many requests may wait for one node before new ones fail at once
    /// as [`FailureKind::Overloaded`](crate::FailureKind::Overloaded). Bounds
    /// memory while a node is stalled. Releases and other clean-ups (a
    /// waiter leaving its queue, a leader resigning) are queued even on a
    /// full queue: a full queue does not drop them. Like any request, one
    /// that the node does not answer within its per-node timeout fails (the
    /// key then expires after its TTL), and a node found failing fails the
    /// rest of its queue fast, so clean-ups beyond the capacity last about
    /// as long as a stall takes to be noticed. Must be between 1 and 2^20.
    /// Defaults to 4096.
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.settings.queue_capacity = capacity;
        self
    }

    /// Gives every lock a **fencing token**
    /// ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)): a
    /// number that grows with every acquisition of the same resource, so
    /// that the storage a lock protects can refuse a write from a holder
    /// whose lock has since passed to someone else (a process paused past its
    /// validity). See the crate docs, "Fencing tokens", for the guarantee and
    /// its assumptions.
    ///
    /// Cost: no extra round trip (the token is proposed and stored with the
    /// acquisition, by a script), none on extend or release; one extra key
    /// per resource on each node, `redlock-fence:{resource}`, expiring after
    /// [`fencing_idle`](Self::fencing_idle). Lock keys and values stay as
    /// they are, so other Redlock clients still exclude and are excluded.
    /// Defaults to `false`.
    pub fn fencing(mut self, on: bool) -> Self {
        self.settings.fencing = on;
        self
    }

    /// How long a resource's fence value is kept after its last
    /// acquisition. Tokens keep growing after it expired (they never fall
    /// below the wall clock in microseconds), provided client clocks are off
    /// by less than this. At least 1 s and at most 365 days. Defaults to
    /// 24 hours.
    pub fn fencing_idle(mut self, idle: Duration) -> Self {
        self.settings.fencing_idle = idle;
        self
    }

    /// Wakes waiting callers, one at a time and in the order they queued, as
    /// soon as the resource is released, instead of after their retry
    /// delay. Defaults to `true`.
    ///
    /// Each resource has a *gate node*: one of the nodes, picked by a hash
    /// of the resource name (the same node in every client that lists the
    /// nodes by the same addresses). It keeps the resource's waiters in
    /// arrival order, in `redlock-queue:{resource}` and
    /// `redlock-alive:{resource}`. A caller whose round finds the resource
    /// held is queued there and sleeps; a release that deletes the key there
    /// wakes the first waiter only — one `PUBLISH` on that client's own
    /// channel, `redlock-wake:{client id}` (a random id per client), however
    /// many wait — and to a queued waiter the gate node grants a free
    /// resource only in its turn. A caller's first round is a plain
    /// `SET NX` on every node (as fast as without queues): a newcomer may
    /// take a resource that is free at that instant, and the waiter whose
    /// turn it was keeps its place. Each client subscribes once per node (at most one extra
    /// connection and thread per node, opened on the first wait and closed
    /// about 2 s after the last), pings a node it heard nothing from for a
    /// second, and replaces a connection that does not answer.
    ///
    /// A woken waiter then tries a normal round, so a wake-up never stands in
    /// for the quorum: every acquisition still needs `SET NX` on a majority,
    /// and to the first waiter in line the gate node's "held" is one vote
    /// among N (a key left behind on it alone does not stop the queue) —
    /// except for a key it granted less than that round's per-node timeout
    /// ago, which is the queue's: the next in line waits for the granted
    /// round instead of taking the other nodes first. A waiter the gate node let through
    /// but a majority refused keeps its turn. A lock on several resources
    /// does not queue: it waits by retrying.
    /// A queued waiter confirms its place with a round at least every 500 ms
    /// and keeps it for 2 s without one, so a crashed waiter holds the queue
    /// up for 2 s at most; a waiter that gives up (deadline, retries,
    /// cancel) leaves the queue at once. Lost wake-ups (a dropped subscriber
    /// connection, a gate node that is down, a holder whose key expired or
    /// that never held it on the gate node) only mean the waiter tries
    /// again after its retry delay (at most 500 ms while queued).
    ///
    /// A client whose release woke a waiter lets the waiters go first: its
    /// next acquisition of that resource asks the gate node first and
    /// queues behind them.
    ///
    /// Clients with notifications off take no part in the queues: they may
    /// take a free resource ahead of queued waiters. An ACL user needs
    /// `+time +zadd +zcard +zscore +zrange +zrangebyscore +zrem
    /// +zremrangebyscore +pttl +pexpire +publish +subscribe +unsubscribe
    /// +punsubscribe +ping &redlock-wake:*` for this (see
    /// `docs/operations.md` for the whole list; without the
    /// pub/sub rights, releases still work, waiters fall back to their retry
    /// delay, and a client that waits warns once per node whose ACL refuses
    /// the subscription). With `false`, no queue is kept, nothing is
    /// published and no subscriber is ever opened.
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.settings.notifications = on;
        self
    }

    /// Enforces delayed restarts: a node that restarted (and so may have
    /// forgotten locks it held) does not count toward any quorum — its
    /// answers to acquisitions and extensions count as failures — until its
    /// process has been up for `period`. Set it to at least the longest TTL
    /// in use — for `redis+sentinel://` nodes, plus their confirmation
    /// window (5 s, or `1 s + 2 × connect timeout × (Sentinels + 1)` when
    /// longer; see `docs/sentinel.md`). Defaults to off.
    ///
    /// On every connection (and every 5 s on a live one) the node says its
    /// `run_id`, its uptime and the admission marker `redlock:admitted`. A
    /// process replacing one this client saw there (a restart, a promoted
    /// replica) waits the whole period from when the client noticed. A
    /// process this client meets first is admitted by the marker when it
    /// names this very process as admitted by an operator or by a client
    /// with at least this period; a marker naming another process (a
    /// restart with its data, a restored backup, a promoted replica) makes
    /// it wait the whole period; with no marker it waits until its process
    /// has been up for the period (plus a second: Redis reports uptime in
    /// whole seconds). Once this client admits a process it writes the
    /// marker, so clients started later — after a failover, say — know.
    /// The argument, and what cannot be detected (`FLUSHALL`, a node's
    /// clock jumping), are in `docs/operations.md`. A warning is logged
    /// when a node stops counting and when it counts again.
    ///
    /// **A new cluster** starts quarantined until its nodes have been up for
    /// the period (the client cannot tell "new" from "restarted"). To start
    /// one at once, when no lock can be held yet, an operator admits each
    /// node's current process with the marker key `redlock:admitted` (it
    /// admits that incarnation only — that process, until it is restarted or
    /// replaced by a promotion):
    /// `redis-cli SET redlock:admitted "$(redis-cli INFO server | sed -n 's/^run_id:\(.*\)\r$/\1/p'):$(redis-cli INFO replication | sed -n 's/^master_replid:\(.*\)\r$/\1/p') operator"`.
    ///
    /// With ACLs, allow `info`, and `get` and `set` on `redlock:admitted`
    /// (see the ACL line in `docs/operations.md`). Must be above zero and
    /// at most 7 days.
    pub fn restart_quarantine(mut self, period: Duration) -> Self {
        self.settings.restart_quarantine = Some(period);
        self
    }

    /// Admits nodes whose keys may be evicted before they expire: a
    /// `maxmemory` limit with a policy other than `noeviction`. Every key
    /// this client writes has a TTL, so `volatile-*` policies (the default
    /// of many managed services) evict lock keys first, and an evicted key
    /// lets a second holder in. Without this, such a node does not count
    /// toward any quorum ([`FailureKind::Eviction`](crate::FailureKind::Eviction))
    /// and [`build`](Self::build) fails if it finds one; the fix is
    /// `maxmemory-policy noeviction` (or `maxmemory 0`), or an instance of
    /// its own for the locks. With `true`, such nodes count, and the client
    /// says so once per node in the log. The policy is read on every
    /// connection and every few seconds (a change at run time is noticed
    /// within 5 s of the next request). Defaults to `false`.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.settings.allow_eviction = allow;
        self
    }

    /// How far a node's wall clock may be, steadily, from the median of
    /// the nodes' clocks before the node stops counting
    /// ([`FailureKind::Clock`](crate::FailureKind::Clock), with the size
    /// and "fix its time sync" in the reason). Redis expires keys by its
    /// wall clock, and a client cannot tell a clock that is steadily off
    /// from one that just jumped (whose keys expired early by the jump):
    /// every round and every examination reads each node's `TIME` to find
    /// out. Every round also refuses a node further off than its own drift
    /// allowance (`ttl × drift_factor + 2 ms`), so this bound matters for
    /// long TTLs, whose allowance is larger. Defaults to 500 ms: NTP keeps
    /// servers within milliseconds of each other. At least 1 ms and at
    /// most 1 hour. See "Clocks" in `docs/operations.md`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = redlock_sync::Redlock::builder(["redis://127.0.0.1:6379/"])
    ///     .max_clock_offset(Duration::from_millis(200));
    /// # let _ = builder;
    /// ```
    pub fn max_clock_offset(mut self, offset: Duration) -> Self {
        self.settings.max_clock_offset = offset;
        self
    }

    /// Verifies `rediss://` nodes against this CA certificate (PEM) instead
    /// of the system's trust store. Needs the `tls-rustls` or
    /// `tls-native-tls` feature. Defaults to the system's trust store.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// Presents this client certificate and key (PEM) to `rediss://` nodes
    /// that require one (mutual TLS, `tls-auth-clients yes`). Needs a TLS
    /// feature. The key never appears in `Debug` output or errors. Defaults
    /// to none.
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The password the Sentinels of `redis+sentinel://` nodes require
    /// (their `requirepass`; the master's own password goes in the URL). It
    /// never appears in `Debug` output or errors. Defaults to none.
    ///
    /// ```no_run
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::builder([
    ///     "redis+sentinel://:master-pw@s1:26379,s2:26379,s3:26379/lock-a",
    ///     "redis+sentinel://:master-pw@s1:26379,s2:26379,s3:26379/lock-b",
    ///     "redis+sentinel://:master-pw@s1:26379,s2:26379,s3:26379/lock-c",
    /// ])
    /// .sentinel_password("sentinel-pw")
    /// .build()?;
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn sentinel_password(mut self, password: &str) -> Self {
        self.sentinel.password = Some(password.to_owned());
        self
    }

    /// The user name for the Sentinels of `redis+sentinel://` nodes (with
    /// [`sentinel_password`](Self::sentinel_password), for an ACL user).
    /// Defaults to none (the default user).
    pub fn sentinel_username(mut self, username: &str) -> Self {
        self.sentinel.username = Some(username.to_owned());
        self
    }

    /// The parsed nodes and checked settings, or what is wrong with them.
    pub(crate) fn validated(self) -> Result<(Vec<NodeSpec>, Config), Error> {
        validate(&self.settings)?;
        let nodes = parse_nodes(&self.nodes, &self.tls, &self.sentinel)?;
        if let [a, b] = &nodes[..] {
            // Often taken for redundancy; it is the opposite.
            log::warn!(
                "redlock: two nodes ({}, {}) need both for a quorum (2 of 2): either one down \
                 stops every lock; list 3 or 5 independent nodes (or 1, knowingly)",
                a.address,
                b.address
            );
        }
        Ok((nodes, self.settings))
    }
}

/// Upper bound of `node_timeout` and `connect_timeout`.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of `queue_capacity`.
const MAX_QUEUE: usize = 1 << 20;
/// Upper bound of `restart_quarantine`.
const MAX_QUARANTINE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Upper bound of `max_clock_offset`.
const MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);
/// Upper bound of `fencing_idle`.
const MAX_FENCING_IDLE: Duration = Duration::from_secs(365 * 24 * 3600);
/// Upper bound of `retry_delay` and `retry_jitter`.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(3600);

fn validate(s: &Config) -> Result<(), Error> {
    if !(s.drift_factor.is_finite() && (0.0..1.0).contains(&s.drift_factor)) {
        return Err(Error::config(format!(
            "drift_factor must be a number in [0, 1), got {}",
            s.drift_factor
        )));
    }
    if !(s.node_timeout_factor.is_finite()
        && s.node_timeout_factor > 0.0
        && s.node_timeout_factor < 1.0)
    {
        return Err(Error::config(format!(
            "node_timeout_factor must be a number in (0, 1), got {}",
            s.node_timeout_factor
        )));
    }
    if let Some(timeout) = s.node_timeout
        && (timeout.is_zero() || timeout > MAX_TIMEOUT)
    {
        return Err(Error::config(format!(
            "node_timeout must be above zero and at most {}, got {}",
            Human(MAX_TIMEOUT),
            Human(timeout)
        )));
    }
    if s.connect_timeout.is_zero() || s.connect_timeout > MAX_TIMEOUT {
        return Err(Error::config(format!(
            "connect_timeout must be above zero and at most {}, got {}",
            Human(MAX_TIMEOUT),
            Human(s.connect_timeout)
        )));
    }
    for (name, value) in [
        ("retry_delay", s.retry_delay),
        ("retry_jitter", s.retry_jitter),
    ] {
        if value > MAX_RETRY_PAUSE {
            return Err(Error::config(format!(
                "{name} must be at most {}, got {}; use lock_for to wait long",
                Human(MAX_RETRY_PAUSE),
                Human(value)
            )));
        }
    }
    if s.fencing_idle < Duration::from_secs(1) || s.fencing_idle > MAX_FENCING_IDLE {
        return Err(Error::config(format!(
            "fencing_idle must be between 1 s and 365 days, got {}",
            Human(s.fencing_idle)
        )));
    }
    if let Some(period) = s.restart_quarantine
        && (period.is_zero() || period > MAX_QUARANTINE)
    {
        return Err(Error::config(format!(
            "restart_quarantine must be above zero and at most 7 days, got {}",
            Human(period)
        )));
    }
    if s.max_clock_offset < Duration::from_millis(1) || s.max_clock_offset > MAX_CLOCK_OFFSET {
        return Err(Error::config(format!(
            "max_clock_offset must be between 1 ms and 1 h, got {}",
            Human(s.max_clock_offset)
        )));
    }
    if s.queue_capacity == 0 || s.queue_capacity > MAX_QUEUE {
        return Err(Error::config(format!(
            "queue_capacity must be between 1 and {MAX_QUEUE}, got {}",
            s.queue_capacity
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_rejected() {
        let bad = [
            Config {
                drift_factor: f64::NAN,
                ..Config::defaults()
            },
            Config {
                drift_factor: -0.1,
                ..Config::defaults()
            },
            Config {
                drift_factor: 1.0,
                ..Config::defaults()
            },
            Config {
                node_timeout_factor: 0.0,
                ..Config::defaults()
            },
            Config {
                node_timeout_factor: f64::INFINITY,
                ..Config::defaults()
            },
            Config {
                node_timeout: Some(Duration::ZERO),
                ..Config::defaults()
            },
            Config {
                connect_timeout: Duration::ZERO,
                ..Config::defaults()
            },
            Config {
                connect_timeout: Duration::MAX,
                ..Config::defaults()
            },
            Config {
                node_timeout: Some(Duration::MAX),
                ..Config::defaults()
            },
            Config {
                retry_delay: Duration::MAX,
                ..Config::defaults()
            },
            Config {
                retry_jitter: Duration::from_secs(3601),
                ..Config::defaults()
            },
            Config {
                queue_capacity: 0,
                ..Config::defaults()
            },
        ];
        for settings in bad {
            assert!(validate(&settings).is_err(), "{settings:?}");
        }
        assert!(validate(&Config::defaults()).is_ok());
    }
}
