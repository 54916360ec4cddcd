//! [`NodeHealth`]: what a client knows about each of its nodes.

use std::time::Duration;

use crate::error::NodeFailure;

/// One node as the client sees it, from [`Redlock::node_health`](crate::Redlock::node_health):
/// what a blocking web server shows at `/healthz`.
///
/// ```no_run
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// for node in redlock.node_health() {
///     println!(
///         "{} {} latency {:?} last failure {:?}",
///         node.address(),
///         if node.is_up() { "up" } else { "DOWN" },
///         node.latency(),
///         node.last_failure().map(|f| f.to_string()),
///     );
/// }
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct NodeHealth {
    address: String,
    up: bool,
    last_failure: Option<(NodeFailure, Duration)>,
    latency: Option<Duration>,
    resolved: Option<String>,
}

impl NodeHealth {
    pub(crate) fn new(
        address: String,
        up: bool,
        last_failure: Option<(NodeFailure, Duration)>,
        latency: Option<Duration>,
    ) -> Self {
        NodeHealth {
            address,
            up,
            last_failure,
            latency,
            resolved: None,
        }
    }

    /// With the address a Sentinel-managed node's last connection went to.
    pub(crate) fn with_resolved(mut self, resolved: Option<String>) -> Self {
        self.resolved = resolved;
        self
    }

    /// For a node given as a Sentinel service (`redis+sentinel://…`): the
    /// address of the master its last connection went to (`None` before
    /// the first, and for other nodes). [`address`](Self::address) stays
    /// `sentinel:{service}`.
    pub fn resolved_address(&self) -> Option<&str> {
        self.resolved.as_deref()
    }

    /// The node's address: `host:port`, or the socket path.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether the node is connected and the last batch of requests sent to
    /// it succeeded — as of the last request: the client does not probe
    /// nodes it has nothing to send to.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The last failure of a request or connection attempt to this node, if
    /// any ever failed.
    pub fn last_failure(&self) -> Option<&NodeFailure> {
        self.last_failure.as_ref().map(|(failure, _)| failure)
    }

    /// How long ago [`last_failure`](Self::last_failure) happened.
    pub fn last_failure_age(&self) -> Option<Duration> {
        self.last_failure.as_ref().map(|(_, age)| *age)
    }

    /// A moving average of recent round trips to the node (about the last
    /// eight), or `None` before the first answer.
    pub fn latency(&self) -> Option<Duration> {
        self.latency
    }
}
