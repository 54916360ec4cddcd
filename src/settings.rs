//! A client's validated settings ([`Config`]): what every layer reads and
//! `Redlock::config` returns, and the per-node timeout they imply for a
//! TTL. Plain data: no I/O. A new setting is a field here, its default,
//! its getter, and its builder setter in `config.rs`.

use std::fmt;
use std::time::Duration;

use crate::algorithm;
use crate::human::Human;

/// The longest a queued waiter sleeps between two rounds: each round
/// confirms its place in the queue of waiters (see `transport/protocol/scripts/`).
pub(crate) const QUEUE_REFRESH: Duration = Duration::from_millis(500);

/// The default of `max_clock_offset`: how far a node's clock may be from
/// the others' median, steadily. NTP keeps servers within milliseconds of
/// each other; half a second off is a broken time sync, whatever the TTL.
pub(crate) const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_millis(500);

/// A built client's settings (validated, shared by every clone of it), from [`Redlock::config`](crate::Redlock::config).
/// Each getter names the [`RedlockBuilder`](crate::RedlockBuilder) setter
/// that sets it, where its meaning and default are documented.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .retry_count(20)
///     .build()?;
/// assert_eq!(redlock.config().retry_count(), 20);
/// assert_eq!(redlock.config().retry_delay(), Duration::from_millis(50));
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) node_timeout_factor: f64,
    pub(crate) connect_timeout: Duration,
    pub(crate) queue_capacity: usize,
    pub(crate) fencing: bool,
    pub(crate) fencing_idle: Duration,
    /// Tokens never below the wall clock in microseconds. Always on; unit
    /// tests turn it off to test the majority protocol on its own.
    pub(crate) fencing_floor: bool,
    pub(crate) restart_quarantine: Option<Duration>,
    pub(crate) allow_eviction: bool,
    pub(crate) max_clock_offset: Duration,
    /// Publish releases and wake waiters on other clients' releases.
    pub(crate) notifications: bool,
    /// The longest a queued waiter sleeps between rounds. Always
    /// [`QUEUE_REFRESH`]; unit tests lengthen it so that only a wake-up can
    /// end a wait early.
    pub(crate) queue_refresh: Duration,
}

impl Config {
    /// Every setting at its default (see the builder's setters).
    pub(crate) fn defaults() -> Self {
        Config {
            retry_count: 10,
            retry_delay: Duration::from_millis(50),
            retry_jitter: Duration::from_millis(150),
            drift_factor: 0.01,
            node_timeout: None,
            node_timeout_factor: 0.005,
            connect_timeout: Duration::from_secs(1),
            queue_capacity: 4096,
            fencing: false,
            fencing_idle: Duration::from_secs(24 * 3600),
            fencing_floor: true,
            restart_quarantine: None,
            allow_eviction: false,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            notifications: true,
            queue_refresh: QUEUE_REFRESH,
        }
    }
}

impl fmt::Debug for Config {
    /// The settings a user sets (as the builder names them), not the
    /// fields tests change.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("node_timeout_factor", &self.node_timeout_factor)
            .field("connect_timeout", &self.connect_timeout)
            .field("queue_capacity", &self.queue_capacity)
            .field("fencing", &self.fencing)
            .field("fencing_idle", &self.fencing_idle)
            .field("restart_quarantine", &self.restart_quarantine)
            .field("allow_eviction", &self.allow_eviction)
            .field("max_clock_offset", &self.max_clock_offset)
            .field("release_notifications", &self.notifications)
            .finish()
    }
}

impl Config {
    /// See [`RedlockBuilder::retry_count`](crate::RedlockBuilder::retry_count).
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// See [`RedlockBuilder::retry_delay`](crate::RedlockBuilder::retry_delay).
    pub fn retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// See [`RedlockBuilder::retry_jitter`](crate::RedlockBuilder::retry_jitter).
    pub fn retry_jitter(&self) -> Duration {
        self.retry_jitter
    }

    /// See [`RedlockBuilder::drift_factor`](crate::RedlockBuilder::drift_factor).
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// The fixed per-node timeout, if one was set. See
    /// [`RedlockBuilder::node_timeout`](crate::RedlockBuilder::node_timeout).
    pub fn node_timeout(&self) -> Option<Duration> {
        self.node_timeout
    }

    /// See [`RedlockBuilder::node_timeout_factor`](crate::RedlockBuilder::node_timeout_factor).
    pub fn node_timeout_factor(&self) -> f64 {
        self.node_timeout_factor
    }

    /// See [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// See [`RedlockBuilder::queue_capacity`](crate::RedlockBuilder::queue_capacity).
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }

    /// See [`RedlockBuilder::fencing`](crate::RedlockBuilder::fencing).
    pub fn fencing(&self) -> bool {
        self.fencing
    }

    /// See [`RedlockBuilder::fencing_idle`](crate::RedlockBuilder::fencing_idle).
    pub fn fencing_idle(&self) -> Duration {
        self.fencing_idle
    }

    /// See [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine).
    pub fn restart_quarantine(&self) -> Option<Duration> {
        self.restart_quarantine
    }

    /// See [`RedlockBuilder::allow_eviction`](crate::RedlockBuilder::allow_eviction).
    pub fn allow_eviction(&self) -> bool {
        self.allow_eviction
    }

    /// See [`RedlockBuilder::max_clock_offset`](crate::RedlockBuilder::max_clock_offset).
    pub fn max_clock_offset(&self) -> Duration {
        self.max_clock_offset
    }

    /// See [`RedlockBuilder::release_notifications`](crate::RedlockBuilder::release_notifications).
    pub fn release_notifications(&self) -> bool {
        self.notifications
    }

    /// The per-node timeout for operations on a lock with this TTL, and
    /// where it came from.
    pub(crate) fn node_timeout_for(&self, ttl: Duration) -> NodeTimeout {
        match self.node_timeout {
            Some(value) => NodeTimeout {
                value,
                origin: Origin::Set,
            },
            None => NodeTimeout {
                value: algorithm::derived_node_timeout(ttl, self.node_timeout_factor),
                origin: Origin::Derived {
                    ttl,
                    factor: self.node_timeout_factor,
                },
            },
        }
    }
}

/// A per-node timeout and its origin, so that a timeout failure can say how
/// to change it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NodeTimeout {
    pub(crate) value: Duration,
    origin: Origin,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Origin {
    Set,
    Derived {
        ttl: Duration,
        factor: f64,
    },
    /// Derived from the TTL (`derived`), then raised to what the nodes'
    /// measured round trips need.
    Measured {
        ttl: Duration,
        derived: Duration,
    },
}

impl NodeTimeout {
    /// A timeout derived from the TTL, raised to `need` — what the nodes'
    /// measured round trips need — but never above a third of the TTL (what
    /// the TTL allows: a round that took longer would leave little
    /// validity). A timeout set with `RedlockBuilder::node_timeout` stays
    /// as set.
    pub(crate) fn at_least(self, need: Option<Duration>) -> Self {
        let (Origin::Derived { ttl, .. }, Some(need)) = (self.origin, need) else {
            return self;
        };
        let raised = need.min(ttl / 3);
        if raised <= self.value {
            return self;
        }
        NodeTimeout {
            value: raised,
            origin: Origin::Measured {
                ttl,
                derived: self.value,
            },
        }
    }

    /// A fixed timeout (tests, and callers that know no TTL).
    #[cfg(test)]
    pub(crate) fn fixed(value: Duration) -> Self {
        NodeTimeout {
            value,
            origin: Origin::Set,
        }
    }
}

impl fmt::Display for NodeTimeout {
    /// `the 50 ms per-node timeout (derived from the 10 s ttl × 0.005; set
    /// RedlockBuilder::node_timeout to change it)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} per-node timeout (", Human(self.value))?;
        match self.origin {
            Origin::Set => f.write_str(
                "set with RedlockBuilder::node_timeout; raise it if the nodes are farther away",
            )?,
            // Capped: the ttl × factor, kept within its bounds, was more.
            Origin::Derived { ttl, .. } if self.value < algorithm::MIN_NODE_TIMEOUT => write!(
                f,
                "a third of the {} ttl, the most so short a ttl allows; use a longer ttl",
                Human(ttl),
            )?,
            Origin::Derived { ttl, factor } => write!(
                f,
                "derived from the {} ttl × {factor}, kept within {}–{}; raise it with \
                 RedlockBuilder::node_timeout or node_timeout_factor",
                Human(ttl),
                Human(algorithm::MIN_NODE_TIMEOUT),
                Human(algorithm::MAX_NODE_TIMEOUT),
            )?,
            Origin::Measured { ttl, derived } => write!(
                f,
                "raised from {} for the {} ttl to what the nodes' measured round trips need, \
                 at most a third of the ttl; set RedlockBuilder::node_timeout to fix it",
                Human(derived),
                Human(ttl),
            )?,
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_where_it_came_from_and_how_to_change_it() {
        let derived = Config::defaults().node_timeout_for(Duration::from_secs(10));
        assert_eq!(derived.value, Duration::from_millis(50));
        let text = derived.to_string();
        assert!(
            text.starts_with("the 50 ms per-node timeout (derived from the 10 s ttl"),
            "{text}"
        );
        assert!(text.contains("RedlockBuilder::node_timeout"), "{text}");
        let set = Config {
            node_timeout: Some(Duration::from_millis(1500)),
            ..Config::defaults()
        }
        .node_timeout_for(Duration::from_secs(10));
        assert_eq!(set.value, Duration::from_millis(1500));
        assert!(
            set.to_string()
                .starts_with("the 1.5 s per-node timeout (set with"),
            "{set}"
        );
    }

    /// The derived timeout rises to what the round trips need, never above
    /// a third of the TTL, and says so; a timeout set stays as set.
    #[test]
    fn a_derived_timeout_rises_to_the_round_trips_within_the_ttl() {
        let ms = Duration::from_millis;
        let derived = Config::defaults().node_timeout_for(Duration::from_secs(5));
        assert_eq!(derived.value, ms(25));
        assert_eq!(derived.at_least(None), derived);
        assert_eq!(derived.at_least(Some(ms(20))), derived, "never lowered");
        let raised = derived.at_least(Some(ms(90)));
        assert_eq!(raised.value, ms(90));
        let text = raised.to_string();
        assert!(
            text.starts_with("the 90 ms per-node timeout (raised from 25 ms"),
            "{text}"
        );
        assert!(text.contains("measured round trips"), "{text}");
        let capped = derived.at_least(Some(Duration::from_secs(10)));
        assert_eq!(
            capped.value,
            Duration::from_secs(5) / 3,
            "a third of the ttl"
        );
        let set = Config {
            node_timeout: Some(ms(40)),
            ..Config::defaults()
        }
        .node_timeout_for(Duration::from_secs(5));
        assert_eq!(set.at_least(Some(ms(90))), set);
    }

    /// A TTL under 30 ms gets a third of it, and the text says that rather
    /// than "kept within 10 ms–250 ms".
    #[test]
    fn a_very_short_ttl_gets_a_third_of_it_and_says_so() {
        let timeout = Config::defaults().node_timeout_for(Duration::from_millis(3));
        assert_eq!(timeout.value, Duration::from_millis(1));
        let text = timeout.to_string();
        assert!(text.contains("a third of the 3 ms ttl"), "{text}");
        assert!(!text.contains("kept within"), "{text}");
    }
}
