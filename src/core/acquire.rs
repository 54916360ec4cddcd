//! Acquisition: one round (`SET NX PX` on every node — for several resources
//! one all-or-nothing script per node —, a quorum within the validity) and
//! the retry policy around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handoff::Woken;
use super::{Core, Lease, answer_by, no_quorum};
use crate::algorithm::{self, Outcome, Verdict};
use crate::cancel::CancelToken;
use crate::error::Error;
use crate::metrics;
use crate::transport::{Keys, Op, Watch};

/// The longest pause after a split round, before trying again.
const SPLIT_JITTER: Duration = Duration::from_millis(2);
/// Quick retries after split rounds per wake-up.
const QUICK_SPLIT_RETRIES: u32 = 2;
/// The head start a woken waiter gives each one that lost the gate more
/// often than it did: enough for its gate request to arrive first.
const STAGGER_STEP: Duration = Duration::from_micros(100);
/// At most this many steps.
const STAGGER_MAX_STEPS: u32 = 4;

/// How long a woken waiter that lost the gate `losses` times holds back
/// when `listeners` clients listened as the release was announced. One of
/// them is usually the releasing client, which does not contend (it lets the
/// others go first); of the rest, each waiter holds back one step for every
/// contender that may have lost more often than it did. With one contender,
/// or when the count is unknown (0), nobody holds back.
fn stagger(listeners: u32, losses: u32) -> Duration {
    let contenders = listeners.saturating_sub(1);
    let steps = contenders
        .saturating_sub(1)
        .saturating_sub(losses)
        .min(STAGGER_MAX_STEPS);
    STAGGER_STEP * steps
}

/// The most resources one lock may hold at once.
pub(crate) const MAX_RESOURCES: usize = 128;

/// When to stop retrying, and what may cancel the wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct Patience {
    /// At most this many more rounds after the first (`None`: no limit).
    pub(crate) retries: Option<u32>,
    /// No new round after this instant (`None`: no limit).
    pub(crate) deadline: Option<Instant>,
    /// Ends the wait at once, with `Error::Cancelled`.
    pub(crate) cancel: Option<CancelToken>,
}

impl Patience {
    /// At most `retries` more rounds.
    pub(crate) fn attempts(retries: u32) -> Self {
        Patience {
            retries: Some(retries),
            ..Patience::default()
        }
    }

    /// Rounds until `deadline` (`None`: forever).
    pub(crate) fn until(deadline: Option<Instant>) -> Self {
        Patience {
            deadline,
            ..Patience::default()
        }
    }

    fn exhausted(&self, attempts: u32) -> bool {
        self.retries.is_some_and(|retries| attempts > retries)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }
}

/// Why one acquisition round failed; the partial lock has been released.
enum Failed {
    /// Enough nodes hold the key for someone else. `split`: some nodes
    /// granted it to us, so it may be that nobody won the round.
    Busy { split: bool },
    /// Too many nodes failed. `permanent`: failures that will not heal by
    /// themselves (rejected credentials) alone rule out a majority.
    NoQuorum { outcome: Outcome, permanent: bool },
    /// A majority granted it, too late for any validity to be left.
    TooSlow { elapsed: Duration, ttl: Duration },
}

impl Failed {
    fn kind(&self) -> metrics::Acquired {
        match self {
            Failed::Busy { .. } => metrics::Acquired::Busy,
            Failed::NoQuorum { .. } => metrics::Acquired::NoQuorum,
            Failed::TooSlow { .. } => metrics::Acquired::TooSlow,
        }
    }

    fn into_error(self, resource: &str, attempts: u32) -> Error {
        match self {
            Failed::Busy { .. } => Error::Busy {
                resource: resource.to_owned(),
                attempts,
            },
            Failed::NoQuorum { outcome, .. } => no_quorum(resource, outcome),
            Failed::TooSlow { elapsed, ttl } => Error::TooSlow {
                resource: resource.to_owned(),
                elapsed,
                ttl,
            },
        }
    }
}

impl Core {
    /// Acquires every one of `resources` for `ttl` (all or none), retrying
    /// as `patience` allows.
    pub(crate) fn acquire(
        &self,
        resources: &[&str],
        ttl: Duration,
        patience: Patience,
    ) -> Result<Lease, Error> {
        let keys = checked_keys(resources)?;
        let ttl = self.whole_ttl(ttl)?;
        let name: Arc<str> = Arc::from(display_name(&keys));
        let started = metrics::Started::now();
        let cancelled = || Error::Cancelled {
            resource: name.to_string(),
        };
        if patience.cancelled() {
            metrics::acquired(metrics::Acquired::Cancelled, 0, &started);
            return Err(cancelled());
        }
        // Local waiters queue on the first resource.
        let key = keys[0].clone();
        let settings = &self.settings;
        // A caller that may retry registers as a waiter before its first
        // round, so that a local release at any moment from now on ends its
        // next pause at once. If this client's threads already wait for the
        // resource, queue behind them (bounded by one retry pause), so that
        // ownership rotates.
        //
        // Likewise, if this client just released the resource while other
        // clients waited for it, let one of them have it first: wait (for a
        // moment at most) for the next release.
        let mut ticket = None;
        let mut watch = None;
        // Whether the next round follows a release that may have woken
        // waiters in other clients too (see `Transport::start_gated_round`).
        let mut gated = false;
        if patience.retries != Some(0) {
            let queued = self.waiters.has_waiters(&key);
            let owed = self.waiters.owed(&key);
            let mut entered = self.waiters.enter(&key);
            if queued || owed.is_some() {
                let pause = algorithm::retry_delay(settings.retry_delay, settings.retry_jitter);
                let mut until = pause_until(pause, &patience);
                // No subscription of its own for this wait: its
                // acknowledgement would end the wait early. A release heard
                // through a subscription still lingering from an earlier
                // wait ends it.
                if let Some(owed) = owed
                    && !queued
                {
                    until = patience.deadline.map_or(owed, |d| d.min(owed));
                }
                let woken = entered.wait(until, patience.cancel.as_ref());
                gated = woken == Woken::Released && settings.notifications;
                if woken == Woken::Cancelled {
                    metrics::acquired(metrics::Acquired::Cancelled, 0, &started);
                    return Err(cancelled());
                }
            }
            ticket = Some(entered);
        }
        // Rounds right after a release (gated) do not count against the
        // retries: losing the gate to another woken client is not a try of
        // its own. The wait stays bounded as before: by what the counted
        // rounds and their pauses could take at most.
        let budget = patience.retries.and_then(|retries| {
            let per_try = settings
                .retry_delay
                .saturating_add(settings.retry_jitter)
                .saturating_add(self.node_timeout(ttl).value);
            Instant::now().checked_add(per_try.checked_mul(retries.saturating_add(1))?)
        });
        let mut attempts = 0u32;
        let mut counted = 0u32;
        // Quick retries after split rounds since the last wake-up.
        let mut splits = 0u32;
        // Gated rounds lost to other woken clients in this call.
        let mut losses = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            if !gated {
                counted = counted.saturating_add(1);
            }
            if patience.cancelled() {
                metrics::acquired(metrics::Acquired::Cancelled, attempts - 1, &started);
                return Err(cancelled());
            }
            // Clients woken together go to the gate in the order of how
            // often they already lost it: the longest waiter first.
            if gated && let Some(ticket) = &ticket {
                let ahead = stagger(ticket.listeners(), losses);
                if !ahead.is_zero() {
                    std::thread::sleep(ahead);
                    if patience.cancelled() {
                        metrics::acquired(metrics::Acquired::Cancelled, attempts - 1, &started);
                        return Err(cancelled());
                    }
                }
            }
            // Any local release from here on wakes the pause below at once.
            if let Some(ticket) = &mut ticket {
                ticket.arm();
            }
            let round = self.attempt(&keys, &name, ttl, gated);
            if patience.cancelled() {
                // Cancelled during the round: what it took is released like
                // the partial lock of any failed round.
                if let Ok(lease) = round {
                    lease.abandon(self);
                }
                metrics::acquired(metrics::Acquired::Cancelled, attempts, &started);
                return Err(cancelled());
            }
            let failed = match round {
                Ok(lease) => {
                    metrics::acquired(metrics::Acquired::Ok, attempts, &started);
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            let permanent = matches!(
                failed,
                Failed::NoQuorum {
                    permanent: true,
                    ..
                }
            );
            let out_of_time = budget.is_some_and(|b| Instant::now() >= b);
            if permanent || patience.exhausted(counted) || out_of_time {
                metrics::acquired(failed.kind(), attempts, &started);
                return Err(failed.into_error(&name, attempts));
            }
            // Held by someone: hear its release from now on. Until a majority
            // of nodes has the subscription, a release would go unheard; the
            // subscription's acknowledgement wakes the pause below for one
            // more round, which catches such a release.
            if watch.is_none() && ticket.is_some() && matches!(failed, Failed::Busy { .. }) {
                watch = self.watch(&key);
            }
            // Sleep until the pause is over, until the resource is released
            // (by this client or, heard through the nodes, by another), or
            // until cancelled.
            // A split round right after a release (several clients woken
            // together, each won some nodes) may leave the resource free, and
            // nobody will announce it: retry soon, after a random pause so
            // that the next round is not split again — at most twice per
            // wake-up, since a holder missing from one node (restarted
            // empty) looks the same and must not be polled in a loop.
            if gated && matches!(failed, Failed::Busy { .. }) {
                losses = losses.saturating_add(1);
            }
            let split = matches!(failed, Failed::Busy { split: true });
            splits = if gated { 0 } else { splits };
            let pause = if split
                && watch.is_some()
                && splits < QUICK_SPLIT_RETRIES
                && (gated || splits > 0)
            {
                splits += 1;
                algorithm::retry_delay(Duration::ZERO, SPLIT_JITTER)
            } else {
                algorithm::retry_delay(settings.retry_delay, settings.retry_jitter)
            };
            let until = pause_until(pause, &patience);
            let woken = match &mut ticket {
                Some(ticket) => ticket.wait(until, patience.cancel.as_ref()),
                None => Woken::TimedOut,
            };
            if woken == Woken::Cancelled {
                metrics::acquired(metrics::Acquired::Cancelled, attempts, &started);
                return Err(cancelled());
            }
            gated = woken == Woken::Released && settings.notifications;
        }
    }

    /// Subscribes to `key`'s releases, if this client listens for them.
    fn watch(&self, key: &Arc<str>) -> Option<Watch> {
        self.settings
            .notifications
            .then(|| self.transport.watch(key))
    }

    /// One acquisition round (two on a fencing client), `gated` after a
    /// release. On failure the partial lock is released everywhere (without
    /// waiting).
    fn attempt(
        &self,
        keys: &Keys,
        name: &Arc<str>,
        ttl: Duration,
        gated: bool,
    ) -> Result<Lease, Failed> {
        let token = new_token();
        let start = Instant::now();
        let timeout = self.node_timeout(ttl);
        let by = answer_by(start, timeout, None);
        let ttl_ms = millis(ttl);
        let op = if self.settings.fencing {
            Op::AcquireFenced { ttl_ms }
        } else {
            Op::Acquire { ttl_ms }
        };
        let request = self.request(op, keys, &token, ttl, by);
        let pending = if gated {
            // Refused by the gate node: another client passed it first and
            // nothing was set anywhere.
            self.transport
                .start_gated_round(request, by)
                .ok_or(Failed::Busy { split: false })?
        } else {
            self.transport.start_round(request)
        };
        let outcome = pending.collect(by);
        metrics::round(metrics::RoundOp::Acquire, start);
        let valid_until = algorithm::valid_until(start, ttl, self.settings.drift_factor);
        let failed = match outcome.verdict {
            Verdict::Confirmed if Instant::now() < valid_until => {
                let fence = if self.settings.fencing {
                    self.write_fence(keys, &token, ttl, outcome.fence, (start, valid_until))
                } else {
                    Ok(None)
                };
                match fence {
                    Ok(fence) => {
                        log::debug!("redlock: acquired {keys:?} in {:?}", start.elapsed());
                        let gone_by = self.keys_gone_by(start, ttl);
                        let lease = Lease::new(
                            keys.clone(),
                            name.clone(),
                            token,
                            ttl,
                            valid_until,
                            gone_by,
                        );
                        return Ok(lease.with_fence(fence));
                    }
                    Err(failed) => failed,
                }
            }
            Verdict::Confirmed => Failed::TooSlow {
                elapsed: start.elapsed(),
                ttl,
            },
            Verdict::Refused => Failed::Busy {
                split: outcome.confirmed > 0,
            },
            Verdict::Unreachable => Failed::NoQuorum {
                permanent: outcome.permanent,
                outcome,
            },
        };
        self.clean_up(keys, &token, start, ttl);
        log::debug!("redlock: round for {keys:?} failed");
        Err(failed)
    }

    /// The fencing token's write-back. The granting nodes reported their
    /// fence values with their yes; the token is one more than the largest
    /// of them, never below the wall clock in microseconds, and it counts
    /// only once a majority has stored it (as `max(stored, token)`, on nodes
    /// where every key still holds our lock token) while the lock is valid.
    /// Any later acquisition's majority then meets that write.
    fn write_fence(
        &self,
        keys: &Keys,
        token: &Arc<str>,
        ttl: Duration,
        read: Option<u64>,
        (acquiring, valid_until): (Instant, Instant),
    ) -> Result<Option<u64>, Failed> {
        let floor = if self.settings.fencing_floor {
            wall_clock_micros()
        } else {
            0
        };
        let fence = read.unwrap_or(0).saturating_add(1).max(floor);
        let start = Instant::now();
        let by = answer_by(start, self.node_timeout(ttl), Some(valid_until));
        let op = Op::Fence {
            value: fence,
            idle_ms: millis(self.settings.fencing_idle),
        };
        let outcome = self
            .transport
            .start_round(self.request(op, keys, token, ttl, by))
            .collect(by);
        metrics::round(metrics::RoundOp::Fence, start);
        match outcome.verdict {
            Verdict::Confirmed if Instant::now() < valid_until => Ok(Some(fence)),
            Verdict::Confirmed => Err(Failed::TooSlow {
                elapsed: acquiring.elapsed(),
                ttl,
            }),
            _ => Err(Failed::NoQuorum {
                permanent: outcome.permanent,
                outcome,
            }),
        }
    }
}

/// Microseconds since the Unix epoch (0 for a clock before it): the floor
/// under every fencing token, so that tokens keep growing after a
/// resource's fence values expired or a node lost them.
fn wall_clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The resources as keys, or a `Config` error: none, an empty name, a
/// duplicate, or more than [`MAX_RESOURCES`].
fn checked_keys(resources: &[&str]) -> Result<Keys, Error> {
    match resources {
        [] => Err(Error::config(
            "no resources given; name at least one resource to lock",
        )),
        [""] => Err(Error::config(
            "the resource name is empty; name what you lock",
        )),
        _ if resources.iter().any(|r| reserved(r)) => Err(Error::config(
            "resource names starting with `redlock-fence:`, and `redlock:admitted`, are \
             reserved for the client's own keys; choose another name",
        )),
        [one] => Ok(Arc::from([Arc::from(*one)])),
        _ if resources.len() > MAX_RESOURCES => Err(Error::config(format!(
            "{} resources given; one lock holds at most {MAX_RESOURCES}",
            resources.len()
        ))),
        _ => {
            let mut seen = std::collections::HashSet::with_capacity(resources.len());
            for (index, resource) in resources.iter().enumerate() {
                if resource.is_empty() {
                    return Err(Error::config(format!(
                        "resource #{index} has an empty name; name what you lock"
                    )));
                }
                if !seen.insert(*resource) {
                    return Err(Error::config(format!(
                        "resource {resource:?} is listed twice; list each resource once"
                    )));
                }
            }
            Ok(resources.iter().map(|r| Arc::from(*r)).collect())
        }
    }
}

/// The client's own keys, which no resource may be named after.
fn reserved(resource: &str) -> bool {
    resource.starts_with("redlock-fence:") || resource == "redlock:admitted"
}

/// How errors name a lock: its resource, or its resources joined by `, `.
pub(crate) fn display_name(keys: &Keys) -> String {
    match &**keys {
        [one] => one.to_string(),
        many => many.iter().map(|k| &**k).collect::<Vec<_>>().join(", "),
    }
}

/// A TTL checked by `whole_ttl` in milliseconds (at most `u32::MAX`).
pub(super) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// The end of a retry pause, never past the caller's deadline.
fn pause_until(pause: Duration, patience: &Patience) -> Instant {
    let now = Instant::now();
    let end = now.checked_add(pause).unwrap_or(now);
    patience.deadline.map_or(end, |deadline| end.min(deadline))
}

/// 20 bytes from the thread-local CSPRNG, hex-encoded (40 characters).
fn new_token() -> Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 20];
    rand::fill(&mut bytes);
    let mut token = String::with_capacity(40);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Arc::from(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn woken_waiters_hold_back_by_how_often_others_may_have_lost() {
        // Unknown count, or one contender: nobody holds back.
        assert_eq!(stagger(0, 0), Duration::ZERO);
        assert_eq!(stagger(2, 0), Duration::ZERO);
        // Three contenders (four listeners, one of them the releaser).
        assert_eq!(stagger(4, 0), STAGGER_STEP * 2);
        assert_eq!(stagger(4, 1), STAGGER_STEP);
        assert_eq!(stagger(4, 2), Duration::ZERO);
        assert_eq!(stagger(100, 0), STAGGER_STEP * STAGGER_MAX_STEPS);
    }

    #[test]
    fn tokens_are_long_hex_and_unique() {
        let tokens: std::collections::HashSet<_> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        for token in &tokens {
            assert_eq!(token.len(), 40);
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
