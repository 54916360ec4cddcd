//! Restart quarantine: a node that restarted without its data forgot the
//! locks it held, so until it has been up for the quarantine period its
//! votes for acquisitions and extensions do not count.
//!
//! On every (re)connect the node says what it is: its `run_id`, its uptime,
//! whether it persists with an AOF, and the marker key [`MARKER`], which the
//! client sets to the node's `run_id` once it admits the node. The marker
//! survives only if the data did:
//!
//! * marker equal to the current `run_id`: same process, admitted;
//! * marker from an earlier process and AOF on: restarted *with* its data,
//!   admitted at once;
//! * otherwise (no marker: restarted empty, or new; or RDB only): admitted
//!   once its uptime reaches the period, quarantined until then.
//!
//! A brand-new cluster therefore starts quarantined until its nodes have been
//! up for the period. An operator who knows the nodes hold no lock starts it
//! at once by setting the marker on each node:
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
    /// AOF on with `appendfsync always`: nothing acknowledged is lost.
    pub(crate) durable: bool,
    pub(crate) marker: Option<String>,
}

/// Added to every quarantine: `uptime_in_seconds` may be a second ahead.
const MARGIN: Duration = Duration::from_secs(1);

impl Facts {
    /// Reads `INFO server`, `INFO persistence`, the `appendfsync` setting
    /// (`None` if the node would not say) and the marker's value.
    pub(crate) fn parse(
        server: &str,
        persistence: &str,
        appendfsync: Option<&str>,
        marker: Option<String>,
    ) -> Option<Facts> {
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let aof = field(persistence, "aof_enabled").as_deref() == Some("1");
        Some(Facts {
            run_id: field(server, "run_id")?,
            uptime: Duration::from_secs(field(server, "uptime_in_seconds")?.parse().ok()?),
            durable: aof && appendfsync == Some("always"),
            marker,
        })
    }
}

/// The marker this client writes: `{run_id} {period in ms}`. An operator's
/// marker, `{run_id} operator`, admits the process for any period.
fn marker(run_id: &str, period: Duration) -> String {
    format!("{run_id} {}", period.as_millis())
}

/// Whether `marker` admits the process `run_id` for `period`.
fn admits(marker: &str, run_id: &str, period: Duration) -> bool {
    let mut parts = marker.split_whitespace();
    let (Some(id), Some(grant)) = (parts.next(), parts.next()) else {
        return false;
    };
    id == run_id
        && (grant == "operator"
            || grant
                .parse::<u128>()
                .is_ok_and(|ms| ms >= period.as_millis()))
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
    /// The marker to write once admitted (not yet written).
    mark: Option<String>,
}

/// What a batch must know about its node's admission.
#[derive(Debug, Default)]
pub(crate) struct Check {
    /// Quarantined: for how long yet, and why.
    pub(crate) quarantined: Option<(Duration, &'static str)>,
    /// A marker to write now (once, after admission).
    pub(crate) mark: Option<String>,
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
            state.mark = None;
            return;
        };
        if facts
            .marker
            .as_deref()
            .is_some_and(|m| admits(m, &facts.run_id, period))
        {
            state.until = None;
            state.mark = None;
            return;
        }
        let survived = facts.marker.is_some() && facts.durable;
        let needed = period + MARGIN;
        if survived || facts.uptime >= needed {
            if state.until.take().is_some() {
                log::warn!("redlock: node {address} leaves its restart quarantine");
            }
            state.mark = Some(marker(&facts.run_id, period));
            return;
        }
        let left = needed - facts.uptime;
        if state.until.is_none() {
            log::warn!(
                "redlock: node {address} has been up {} without our marker (restarted without \
                 its data, or new): it does not count toward any quorum for another {} (restart \
                 quarantine); see RedlockBuilder::restart_quarantine to admit a new cluster at once",
                Human(facts.uptime),
                Human(left)
            );
        }
        let cause = "restarted without its data (or new)";
        state.until = Instant::now().checked_add(left).map(|t| (t, cause));
        state.mark = Some(marker(&facts.run_id, period));
    }

    /// For the next batch: quarantined or not (logging once when the
    /// quarantine ends), and the marker to write now, if any.
    pub(crate) fn check(&self, address: &str) -> Check {
        let mut state = self.state.lock();
        if let Some((until, cause)) = state.until {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return Check {
                    quarantined: Some((left, cause)),
                    mark: None,
                };
            }
            state.until = None;
            log::warn!("redlock: node {address} leaves its restart quarantine");
        }
        Check {
            quarantined: None,
            mark: state.mark.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(run_id: &str, uptime: u64, durable: bool, marker: Option<&str>) -> Option<Facts> {
        Some(Facts {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime),
            durable,
            marker: marker.map(str::to_owned),
        })
    }

    fn admitted(a: &Admission) -> bool {
        a.check("n").quarantined.is_none()
    }

    #[test]
    fn what_the_node_says_decides_its_admission() {
        let period = Duration::from_secs(60);
        // Same process, admitted for at least this period (or by an operator).
        for m in ["r1 60000", "r1 3600000", "r1 operator"] {
            let a = Admission::default();
            a.connected("n", facts("r1", 5, false, Some(m)), period);
            assert!(admitted(&a), "{m}");
        }
        // Admitted by a client with a shorter period: not enough for us.
        let a = Admission::default();
        a.connected("n", facts("r1", 5, false, Some("r1 1000")), period);
        assert!(!admitted(&a));
        // Restarted with its data (marker survived, AOF with fsync always).
        let a = Admission::default();
        a.connected("n", facts("r2", 5, true, Some("r1 60000")), period);
        let check = a.check("n");
        assert!(check.quarantined.is_none());
        assert_eq!(check.mark.as_deref(), Some("r2 60000"));
        assert_eq!(a.check("n").mark, None, "written once");
        // Not durable (RDB, or AOF without fsync always): quarantined.
        let a = Admission::default();
        a.connected("n", facts("r3", 1, false, Some("r1 60000")), period);
        assert!(!admitted(&a));
        // Restarted empty (or new): quarantined for the rest of the period,
        // plus the margin for the node's coarse uptime.
        let a = Admission::default();
        a.connected("n", facts("r4", 20, true, None), period);
        let (left, cause) = a.check("n").quarantined.expect("quarantined");
        assert!(
            left > Duration::from_secs(40) && left <= Duration::from_secs(41),
            "{left:?}"
        );
        assert!(cause.contains("restarted"));
        // Up for the period (and the margin) already: admitted and marked.
        let a = Admission::default();
        a.connected("n", facts("r5", 61, false, None), period);
        assert_eq!(a.check("n").mark.as_deref(), Some("r5 60000"));
        // INFO refused: quarantined for the whole period, saying why.
        let a = Admission::default();
        a.connected("n", None, period);
        let (_, cause) = a.check("n").quarantined.expect("quarantined");
        assert!(cause.contains("INFO"));
    }

    #[test]
    fn info_is_parsed_and_garbage_is_refused() {
        let server =
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let persistence = "# Persistence\r\naof_enabled:1\r\n";
        let f = Facts::parse(server, persistence, Some("always"), None).unwrap();
        assert_eq!(Some(f), facts("abc123", 42, true, None));
        let f = Facts::parse(server, persistence, Some("everysec"), None).unwrap();
        assert!(!f.durable, "AOF with everysec may lose the last second");
        assert_eq!(Facts::parse("run_id:x\r\n", persistence, None, None), None);
        assert_eq!(
            Facts::parse("run_id:x\r\nuptime_in_seconds:zz\r\n", "", None, None),
            None
        );
    }
}
