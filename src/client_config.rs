//! What a built client was configured with: the getters belong on what was
//! built, not on the builder.

use std::time::Duration;

use crate::settings::Settings;

/// A built client's settings, from [`Redlock::config`](crate::Redlock::config).
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
    settings: Settings,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.settings.fmt(f)
    }
}

impl Config {
    pub(crate) fn new(settings: Settings) -> Self {
        Config { settings }
    }

    /// See [`RedlockBuilder::retry_count`](crate::RedlockBuilder::retry_count).
    pub fn retry_count(&self) -> u32 {
        self.settings.retry_count
    }

    /// See [`RedlockBuilder::retry_delay`](crate::RedlockBuilder::retry_delay).
    pub fn retry_delay(&self) -> Duration {
        self.settings.retry_delay
    }

    /// See [`RedlockBuilder::retry_jitter`](crate::RedlockBuilder::retry_jitter).
    pub fn retry_jitter(&self) -> Duration {
        self.settings.retry_jitter
    }

    /// See [`RedlockBuilder::drift_factor`](crate::RedlockBuilder::drift_factor).
    pub fn drift_factor(&self) -> f64 {
        self.settings.drift_factor
    }

    /// The fixed per-node timeout, if one was set. See
    /// [`RedlockBuilder::node_timeout`](crate::RedlockBuilder::node_timeout).
    pub fn node_timeout(&self) -> Option<Duration> {
        self.settings.node_timeout
    }

    /// See [`RedlockBuilder::node_timeout_factor`](crate::RedlockBuilder::node_timeout_factor).
    pub fn node_timeout_factor(&self) -> f64 {
        self.settings.node_timeout_factor
    }

    /// See [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout).
    pub fn connect_timeout(&self) -> Duration {
        self.settings.connect_timeout
    }

    /// See [`RedlockBuilder::queue_capacity`](crate::RedlockBuilder::queue_capacity).
    pub fn queue_capacity(&self) -> usize {
        self.settings.queue_capacity
    }

    /// See [`RedlockBuilder::fencing`](crate::RedlockBuilder::fencing).
    pub fn fencing(&self) -> bool {
        self.settings.fencing
    }

    /// See [`RedlockBuilder::fencing_idle`](crate::RedlockBuilder::fencing_idle).
    pub fn fencing_idle(&self) -> Duration {
        self.settings.fencing_idle
    }

    /// See [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine).
    pub fn restart_quarantine(&self) -> Option<Duration> {
        self.settings.restart_quarantine
    }

    /// See [`RedlockBuilder::allow_eviction`](crate::RedlockBuilder::allow_eviction).
    pub fn allow_eviction(&self) -> bool {
        self.settings.allow_eviction
    }

    /// See [`RedlockBuilder::max_clock_offset`](crate::RedlockBuilder::max_clock_offset).
    pub fn max_clock_offset(&self) -> Duration {
        self.settings.max_clock_offset
    }

    /// See [`RedlockBuilder::release_notifications`](crate::RedlockBuilder::release_notifications).
    pub fn release_notifications(&self) -> bool {
        self.settings.notifications
    }
}
