//! Numbers for dashboards, through the [`metrics`] facade, behind the
//! `metrics` cargo feature. With the feature off every function here is an
//! empty `#[inline]` body and `Started` reads no clock: nothing is compiled
//! in, and the `metrics` crate is not a dependency.
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `redlock_acquire_total` | counter | `outcome`: `acquired`, `busy`, `no_quorum`, `too_slow`, `cancelled` |
//! | `redlock_acquire_seconds` | histogram | `outcome`: from the call to the guard or the error, waits included |
//! | `redlock_acquire_rounds` | histogram | `outcome`: rounds per acquisition |
//! | `redlock_round_seconds` | histogram | `op`: `acquire`, `fence`, `extend`, `release` — one round on every node |
//! | `redlock_renewals_total` | counter | `result`: `ok`, `failed` — keep-alive renewals |
//! | `redlock_leases_lost_total` | counter | — (a kept-alive lock lost, or an extend or release that found the token gone) |
//! | `redlock_node_failures_total` | counter | `node` (address), `kind`: `timeout`, `connection`, `auth`, `not_writable`, `server`, `overloaded`, `quarantined`, `not_redis`, `unsupported`, `duplicate`, `eviction` |
//! | `redlock_nodes_admitted` | gauge | — nodes that count toward quorums now (connected and admitted: see `Redlock::verify`), summed over the process's clients |

use std::time::Instant;

use crate::error::FailureKind;

/// When an acquisition started: a clock read only with the feature on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started(#[cfg(feature = "metrics")] Instant);

impl Started {
    #[inline]
    pub(crate) fn now() -> Self {
        Started(
            #[cfg(feature = "metrics")]
            Instant::now(),
        )
    }
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    Ok,
    Busy,
    NoQuorum,
    TooSlow,
    Cancelled,
}

/// Which round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundOp {
    Acquire,
    Extend,
    Release,
}

#[cfg(feature = "metrics")]
mod on {
    use super::*;

    fn outcome(outcome: Acquired) -> &'static str {
        match outcome {
            Acquired::Ok => "acquired",
            Acquired::Busy => "busy",
            Acquired::NoQuorum => "no_quorum",
            Acquired::TooSlow => "too_slow",
            Acquired::Cancelled => "cancelled",
        }
    }

    pub(crate) fn acquired(how: Acquired, rounds: u32, started: &Started) {
        let took = started.0.elapsed();
        let label = outcome(how);
        metrics::counter!("redlock_acquire_total", "outcome" => label).increment(1);
        metrics::histogram!("redlock_acquire_seconds", "outcome" => label)
            .record(took.as_secs_f64());
        metrics::histogram!("redlock_acquire_rounds", "outcome" => label).record(f64::from(rounds));
    }

    pub(crate) fn round(op: RoundOp, start: Instant) {
        let took = start.elapsed();
        let op = match op {
            RoundOp::Acquire => "acquire",
            RoundOp::Extend => "extend",
            RoundOp::Release => "release",
        };
        metrics::histogram!("redlock_round_seconds", "op" => op).record(took.as_secs_f64());
    }

    pub(crate) fn renewal(ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        metrics::counter!("redlock_renewals_total", "result" => result).increment(1);
    }

    pub(crate) fn lease_lost() {
        metrics::counter!("redlock_leases_lost_total").increment(1);
    }

    pub(crate) fn clock_jump(node: &str) {
        metrics::counter!("redlock_clock_jumps_total", "node" => node.to_owned()).increment(1);
    }

    pub(crate) fn node_admitted(counts: bool) {
        let gauge = metrics::gauge!("redlock_nodes_admitted");
        if counts {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }

    pub(crate) fn node_failure(node: &str, kind: FailureKind) {
        let kind = match kind {
            FailureKind::Timeout => "timeout",
            FailureKind::Connection => "connection",
            FailureKind::Auth => "auth",
            FailureKind::NotWritable => "not_writable",
            FailureKind::Server => "server",
            FailureKind::Overloaded => "overloaded",
            FailureKind::Quarantined => "quarantined",
            FailureKind::NotRedis => "not_redis",
            FailureKind::Unsupported => "unsupported",
            FailureKind::Duplicate => "duplicate",
            FailureKind::Eviction => "eviction",
            FailureKind::Clock => "clock",
            FailureKind::Unanswered => return,
        };
        metrics::counter!("redlock_node_failures_total", "node" => node.to_owned(), "kind" => kind)
            .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use super::*;

    #[inline]
    pub(crate) fn acquired(_: Acquired, _: u32, _: &Started) {}
    #[inline]
    pub(crate) fn round(_: RoundOp, _: Instant) {}
    #[inline]
    pub(crate) fn renewal(_: bool) {}
    #[inline]
    pub(crate) fn lease_lost() {}
    #[inline]
    pub(crate) fn clock_jump(_: &str) {}
    #[inline]
    pub(crate) fn node_failure(_: &str, _: FailureKind) {}
    #[inline]
    pub(crate) fn node_admitted(_: bool) {}
}

pub(crate) use on::{
    acquired, clock_jump, lease_lost, node_admitted, node_failure, renewal, round,
};
