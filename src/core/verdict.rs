//! What the core's modules share about a round's end: when to stop
//! waiting for it, and the errors a failed one becomes.

use std::time::{Duration, Instant};

use crate::algorithm::Outcome;
use crate::error::{Error, LostCause};
use crate::settings::NodeTimeout;

/// The TTL a read's per-node timeout is derived from (a read has none).
pub(super) const READ_TTL: Duration = Duration::from_secs(10);

/// A TTL checked by `whole_ttl` in milliseconds (at most `u32::MAX`).
pub(super) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// When to stop waiting for a round started at `start`: one per-node
/// timeout later, never past `cap`.
pub(super) fn answer_by(start: Instant, timeout: NodeTimeout, cap: Option<Instant>) -> Instant {
    let by = start.checked_add(timeout.value).unwrap_or(start);
    cap.map_or(by, |cap| by.min(cap))
}

/// `NoQuorum` for a round that failed for want of nodes.
pub(super) fn no_quorum(resource: &str, outcome: Outcome) -> Error {
    Error::NoQuorum {
        resource: resource.to_owned(),
        confirmed: outcome.confirmed,
        quorum: outcome.quorum,
        failures: outcome.failures,
    }
}

/// `LockLost` for a round whose refusals show our token gone.
pub(super) fn lock_lost(resource: &str, outcome: Outcome) -> Error {
    Error::lock_lost(
        resource,
        LostCause::NotHeld,
        (outcome.confirmed, outcome.quorum),
        outcome.failures,
    )
}
