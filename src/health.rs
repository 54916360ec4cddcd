//! [`NodeHealth`]: what a client knows about each of its nodes.

use std::fmt;
use std::time::Duration;

use crate::error::{FailureKind, NodeFailure};
use crate::human::Human;

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
    refusal: Option<NodeFailure>,
    masters: Vec<NodeHealth>,
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
            refusal: None,
            masters: Vec::new(),
        }
    }

    /// As it is once the client was shut down: down, and counting for
    /// nothing, with the shutdown as the reason (not the health last seen).
    pub(crate) fn shut_down(self) -> Self {
        let failure = NodeFailure::new(
            self.address.as_str().into(),
            FailureKind::Connection,
            "the client was shut down (Redlock::shutdown): it no longer connects to any node",
        );
        NodeHealth {
            up: false,
            refusal: Some(failure),
            masters: self
                .masters
                .into_iter()
                .map(NodeHealth::shut_down)
                .collect(),
            ..self
        }
    }

    /// With why the node does not count now, if it does not.
    pub(crate) fn with_refusal(mut self, refusal: Option<NodeFailure>) -> Self {
        self.refusal = refusal;
        self
    }

    /// Whether the node's votes count toward quorums now: it is reachable
    /// and admitted (see [`refusal`](Self::refusal)).
    pub fn is_admitted(&self) -> bool {
        self.refusal.is_none()
    }

    /// Why the node's votes do not count toward quorums now, or `None`
    /// when they do. Its [`kind`](NodeFailure::kind) says which check it
    /// failed: down ([`Connection`](crate::FailureKind::Connection),
    /// [`Timeout`](crate::FailureKind::Timeout),
    /// [`Auth`](crate::FailureKind::Auth) for refused credentials, …),
    /// [`Quarantined`](crate::FailureKind::Quarantined) (the detail says
    /// for how long yet), [`Duplicate`](crate::FailureKind::Duplicate) (the
    /// detail names the node that counts for that server),
    /// [`Eviction`](crate::FailureKind::Eviction),
    /// [`NotWritable`](crate::FailureKind::NotWritable) (a replica) or
    /// [`Unsupported`](crate::FailureKind::Unsupported) (too old, or `INFO`
    /// refused). As of the last request or
    /// [`Redlock::verify`](crate::Redlock::verify).
    pub fn refusal(&self) -> Option<&NodeFailure> {
        self.refusal.as_ref()
    }

    /// With the address a Sentinel-managed node's last connection went to.
    pub(crate) fn with_masters(mut self, mut masters: Vec<NodeHealth>) -> Self {
        masters.sort_by(|a, b| a.address.cmp(&b.address));
        self.masters = masters;
        self
    }

    /// A Redis Cluster node's masters (`redis+cluster://`), each with its
    /// own health and admission: the cluster's vote is made of their
    /// answers, each master's counting only while it is admitted. Empty
    /// for any other node, and for a cluster whose map was never read.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlock_sync::Error> {
    /// let redlock = redlock_sync::Redlock::new([
    ///     "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
    ///     "redis://10.0.1.1:6379",
    ///     "redis://10.0.2.1:6379",
    /// ])?;
    /// for master in redlock.node_health()[0].masters() {
    ///     println!("{}: up {}, admitted {}", master.address(), master.is_up(), master.is_admitted());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn masters(&self) -> &[NodeHealth] {
        &self.masters
    }

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

/// One line an operator reads (a Redis Cluster's masters, one more line
/// each, indented): the address, up or `DOWN`, the round trip, whether its
/// votes count and why not, and the last failure of a node that is down.
///
/// ```text
/// 10.0.0.1:6379: up, 412 µs round trip, counts
/// 10.0.0.2:6379: DOWN, does not count: connection failed: connection refused; last failure 3.2 s ago
/// ```
impl fmt::Display for NodeHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address)?;
        if let Some(resolved) = &self.resolved {
            write!(f, " (master {resolved})")?;
        }
        f.write_str(if self.up { ": up" } else { ": DOWN" })?;
        if let Some(latency) = self.latency {
            write!(f, ", {} round trip", Human(latency))?;
        }
        match &self.refusal {
            None => f.write_str(", counts")?,
            Some(why) => {
                write!(f, ", does not count: {}", why.kind())?;
                if !why.detail().is_empty() {
                    write!(f, ": {}", why.detail())?;
                }
            }
        }
        if let Some((failure, age)) = &self.last_failure
            && !self.up
        {
            let same = self
                .refusal
                .as_ref()
                .is_some_and(|r| r.detail() == failure.detail());
            if !same {
                write!(
                    f,
                    "; last failure: {}: {}",
                    failure.kind(),
                    failure.detail()
                )?;
            }
            write!(f, "; last failure {} ago", Human(*age))?;
        }
        for master in &self.masters {
            write!(f, "\n  {master}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(detail: &str) -> NodeFailure {
        NodeFailure::new("10.0.0.2:6379".into(), FailureKind::Connection, detail)
    }

    #[test]
    fn an_operator_reads_one_line_per_node() {
        let up = NodeHealth::new(
            "10.0.0.1:6379".into(),
            true,
            None,
            Some(Duration::from_micros(412)),
        );
        assert_eq!(
            up.to_string(),
            "10.0.0.1:6379: up, 412 µs round trip, counts"
        );
        let down = NodeHealth::new(
            "10.0.0.2:6379".into(),
            false,
            Some((failure("connection refused"), Duration::from_millis(3_200))),
            None,
        )
        .with_refusal(Some(failure("connection refused")));
        assert_eq!(
            down.to_string(),
            "10.0.0.2:6379: DOWN, does not count: connection failed: connection refused; last \
             failure 3.2 s ago"
        );
        let cluster = NodeHealth::new("cluster:10.0.0.5:7000".into(), true, None, None)
            .with_masters(vec![up.clone()]);
        assert_eq!(
            cluster.to_string(),
            "cluster:10.0.0.5:7000: up, counts\n  10.0.0.1:6379: up, 412 µs round trip, counts"
        );
    }
}
