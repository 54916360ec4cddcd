//! Restart quarantine: a node that restarted may have forgotten locks it
//! held — restarted empty, or from persisted data older than what it had
//! acknowledged (an `everysec` AOF that lost its last second, a restored
//! backup) — so until its process has been up for the quarantine period its
//! votes for acquisitions and extensions do not count.
//!
//! On every (re)connect the node says what it is: its `run_id` and its
//! uptime. It is admitted once its process has been up for the period,
//! whatever its persistence: nothing in a node's own data can show that it
//! is not older than what it acknowledged. A process that replaced one this
//! client saw at the same node waits the whole period from when the client
//! noticed, whatever its uptime: a replica promoted by a failover (a
//! Sentinel-managed node) has been up for long, but holds only what it had
//! replicated — it took over at the moment of the failover.
//!
//! A brand-new cluster therefore starts quarantined until its nodes have been
//! up for the period. An operator who knows the nodes hold no lock starts it
//! at once by setting the marker key [`MARKER`] to each node's `run_id`
//! (the marker admits that process only):
//! `redis-cli SET redlock:admitted "$(redis-cli INFO server | sed -n 's/^run_id:\(.*\)\r$/\1/p') operator"`.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::human::Human;

/// The marker key: the `run_id` of the process under which the node was
/// admitted.
pub(crate) const MARKER: &str = "redlock:admitted";

/// What a node said about itself on connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) run_id: String,
    /// As the node reports it (whole seconds, wall clock): may overstate
    /// the real uptime by up to a second, so [`MARGIN`] is added.
    pub(crate) uptime: Duration,
    pub(crate) marker: Option<String>,
}

/// Added to every quarantine: `uptime_in_seconds` may be a second ahead.
const MARGIN: Duration = Duration::from_secs(1);

impl Facts {
    /// Reads `INFO server` and the marker's value.
    pub(crate) fn parse(server: &str, marker: Option<String>) -> Option<Facts> {
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        Some(Facts {
            run_id: field(server, "run_id")?,
            uptime: Duration::from_secs(field(server, "uptime_in_seconds")?.parse().ok()?),
            marker,
        })
    }
}

/// Whether `marker` is an operator's admission of the process `run_id`:
/// `{run_id} operator`.
fn admits(marker: &str, run_id: &str) -> bool {
    let mut parts = marker.split_whitespace();
    parts.next() == Some(run_id) && parts.next() == Some("operator") && parts.next().is_none()
}

/// One node's admission, kept in its shared state.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Quarantined until then, and why.
    until: Option<(Instant, &'static str)>,
    /// The `run_id` of the process last seen at this node.
    seen: Option<String>,
}

/// What a batch must know about its node's admission.
#[derive(Debug, Default)]
pub(crate) struct Check {
    /// Quarantined: for how long yet, and why.
    pub(crate) quarantined: Option<(Duration, &'static str)>,
}

impl Admission {
    /// Decides on a fresh connection, from what the node said (`None`: it
    /// refused `INFO`, so it cannot be checked and waits the full period).
    pub(crate) fn connected(&self, address: &str, facts: Option<Facts>, period: Duration) {
        let mut state = self.state.lock();
        let Some(facts) = facts else {
            if state.until.is_none() {
                log::warn!(
                    "redlock: node {address} refused INFO, so a restart cannot be detected: it \
                     does not count toward any quorum for {} (restart quarantine); allow +info",
                    Human(period + MARGIN)
                );
            }
            let cause = "could not be checked for a restart (INFO refused; allow +info)";
            state.until = Instant::now()
                .checked_add(period + MARGIN)
                .map(|t| (t, cause));
            return;
        };
        let needed = period + MARGIN;
        let operator = facts
            .marker
            .as_deref()
            .is_some_and(|m| admits(m, &facts.run_id));
        let replaced = state
            .seen
            .replace(facts.run_id.clone())
            .is_some_and(|seen| seen != facts.run_id);
        // A quarantine under way is never cut short by the uptime rule: one
        // that began when the process was replaced counts from then.
        let pending = state.until.is_some_and(|(until, _)| until > Instant::now());
        if operator || (!replaced && !pending && facts.uptime >= needed) {
            if state.until.take().is_some() {
                log::warn!("redlock: node {address} leaves its restart quarantine");
            }
            return;
        }
        if pending && !replaced {
            return;
        }
        if replaced {
            log::warn!(
                "redlock: node {address} is now another process (restarted, or a replica \
                 promoted by a failover): it does not count toward any quorum for {} (restart \
                 quarantine)",
                Human(needed)
            );
            let cause = "another process since the last connection (restarted, or promoted)";
            state.until = Instant::now().checked_add(needed).map(|t| (t, cause));
            return;
        }
        let left = needed - facts.uptime;
        if state.until.is_none() {
            log::warn!(
                "redlock: node {address} has been up {} as a process this client has not \
                 admitted (restarted, or new): it does not count toward any quorum for another {} \
                 (restart quarantine); see RedlockBuilder::restart_quarantine to admit a new \
                 cluster at once",
                Human(facts.uptime),
                Human(left)
            );
        }
        let cause = "restarted (or new)";
        state.until = Instant::now().checked_add(left).map(|t| (t, cause));
    }

    /// For the next batch: quarantined or not (logging once when the
    /// quarantine ends).
    pub(crate) fn check(&self, address: &str) -> Check {
        let mut state = self.state.lock();
        if let Some((until, cause)) = state.until {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return Check {
                    quarantined: Some((left, cause)),
                };
            }
            state.until = None;
            log::warn!("redlock: node {address} leaves its restart quarantine");
        }
        Check { quarantined: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(run_id: &str, uptime: u64, marker: Option<&str>) -> Option<Facts> {
        Some(Facts {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime),
            marker: marker.map(str::to_owned),
        })
    }

    fn admitted(a: &Admission) -> bool {
        a.check("n").quarantined.is_none()
    }

    #[test]
    fn what_the_node_says_decides_its_admission() {
        let period = Duration::from_secs(60);
        // An operator admitted this very process.
        let a = Admission::default();
        a.connected("n", facts("r1", 5, Some("r1 operator")), period);
        assert!(admitted(&a));
        // Not this process, or not an operator's word: quarantined. A new
        // process with a marker from before (restarted with its data, or
        // from an older backup: the same to the client) waits too, whatever
        // its persistence.
        for m in ["r0 operator", "r1 60000", "r1 operator extra", "r1"] {
            let a = Admission::default();
            a.connected("n", facts("r1", 5, Some(m)), period);
            assert!(!admitted(&a), "{m}");
        }
        // Restarted (or new): quarantined for the rest of the period, plus
        // the margin for the node's coarse uptime.
        let a = Admission::default();
        a.connected("n", facts("r4", 20, None), period);
        let (left, cause) = a.check("n").quarantined.expect("quarantined");
        assert!(
            left > Duration::from_secs(40) && left <= Duration::from_secs(41),
            "{left:?}"
        );
        assert!(cause.contains("restarted"));
        // Up for the period (and the margin) already: admitted.
        let a = Admission::default();
        a.connected("n", facts("r5", 61, None), period);
        assert!(admitted(&a));
        // INFO refused: quarantined for the whole period, saying why.
        let a = Admission::default();
        a.connected("n", None, period);
        let (_, cause) = a.check("n").quarantined.expect("quarantined");
        assert!(cause.contains("INFO"));
    }

    #[test]
    fn a_process_that_replaced_one_seen_here_waits_the_whole_period() {
        let period = Duration::from_secs(60);
        let a = Admission::default();
        a.connected("n", facts("r1", 3600, None), period);
        assert!(admitted(&a), "up for an hour, first seen");
        // The same process again (a reconnect): still admitted.
        a.connected("n", facts("r1", 3700, None), period);
        assert!(admitted(&a));
        // A replica promoted by a failover: up for days, but another
        // process than the one this client saw here.
        a.connected("n", facts("r2", 400_000, None), period);
        let (left, cause) = a.check("n").quarantined.expect("quarantined");
        assert!(left > Duration::from_secs(60), "{left:?}");
        assert!(cause.contains("promoted"), "{cause}");
        // Reconnecting to it again does not restart the period.
        a.connected("n", facts("r2", 400_010, None), period);
        let (again, _) = a.check("n").quarantined.expect("still quarantined");
        assert!(again <= left, "{again:?} after {left:?}");
        // An operator's word for it admits it.
        a.connected("n", facts("r2", 400_020, Some("r2 operator")), period);
        assert!(admitted(&a));
    }

    #[test]
    fn info_is_parsed_and_garbage_is_refused() {
        let server =
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let f = Facts::parse(server, None).unwrap();
        assert_eq!(Some(f), facts("abc123", 42, None));
        assert_eq!(Facts::parse("run_id:x\r\n", None), None);
        assert_eq!(
            Facts::parse("run_id:x\r\nuptime_in_seconds:zz\r\n", None),
            None
        );
    }
}
