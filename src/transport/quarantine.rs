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
//! `redis-cli SET redlock:admitted "$(redis-cli INFO server | sed -n 's/^run_id:\(.*\)\r$/\1/p')"`.

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
    pub(crate) uptime: Duration,
    pub(crate) aof: bool,
    pub(crate) marker: Option<String>,
}

impl Facts {
    /// Reads `INFO server`, `INFO persistence` and the marker's value.
    pub(crate) fn parse(server: &str, persistence: &str, marker: Option<String>) -> Option<Facts> {
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        Some(Facts {
            run_id: field(server, "run_id")?,
            uptime: Duration::from_secs(field(server, "uptime_in_seconds")?.parse().ok()?),
            aof: field(persistence, "aof_enabled").as_deref() == Some("1"),
            marker,
        })
    }
}

/// One node's admission, kept in its shared state.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Quarantined until then.
    until: Option<Instant>,
    /// The `run_id` to write as the marker once admitted (not yet written).
    mark: Option<String>,
}

impl Admission {
    /// Decides on a fresh connection, from what the node said.
    pub(crate) fn connected(&self, address: &str, facts: Facts, period: Duration) {
        let mut state = self.state.lock();
        let survived = match &facts.marker {
            Some(marker) if *marker == facts.run_id => {
                state.until = None;
                return;
            }
            Some(_) => facts.aof,
            None => false,
        };
        if survived || facts.uptime >= period {
            if state.until.take().is_some() {
                log::warn!("redlock: node {address} leaves its restart quarantine");
            }
            state.mark = Some(facts.run_id);
            return;
        }
        let left = period - facts.uptime;
        if state.until.is_none() {
            log::warn!(
                "redlock: node {address} has been up {} without our marker (restarted without \
                 its data, or new): it does not count toward any quorum for another {} (restart \
                 quarantine); see RedlockBuilder::restart_quarantine to admit a new cluster at once",
                Human(facts.uptime),
                Human(left)
            );
        }
        state.until = Instant::now().checked_add(left);
        state.mark = Some(facts.run_id);
    }

    /// How long the node stays quarantined, if it is; logs once when the
    /// quarantine ends.
    pub(crate) fn remaining(&self, address: &str) -> Option<Duration> {
        let mut state = self.state.lock();
        let until = state.until?;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            state.until = None;
            log::warn!("redlock: node {address} leaves its restart quarantine");
            return None;
        }
        Some(left)
    }

    /// The marker to write now: once admitted, and only once.
    pub(crate) fn take_mark(&self) -> Option<String> {
        let mut state = self.state.lock();
        if state.until.is_some() {
            return None;
        }
        state.mark.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(run_id: &str, uptime: u64, aof: bool, marker: Option<&str>) -> Facts {
        Facts {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime),
            aof,
            marker: marker.map(str::to_owned),
        }
    }

    #[test]
    fn what_the_node_says_decides_its_admission() {
        let period = Duration::from_secs(60);
        // Same process as when admitted.
        let a = Admission::default();
        a.connected("n", facts("r1", 5, false, Some("r1")), period);
        assert_eq!(a.remaining("n"), None);
        assert_eq!(a.take_mark(), None, "already marked");
        // Restarted with its data (marker survived, AOF): admitted, remarked.
        let a = Admission::default();
        a.connected("n", facts("r2", 5, true, Some("r1")), period);
        assert_eq!(a.remaining("n"), None);
        assert_eq!(a.take_mark().as_deref(), Some("r2"));
        assert_eq!(a.take_mark(), None, "only once");
        // Restarted empty (or new): quarantined for the rest of the period.
        let a = Admission::default();
        a.connected("n", facts("r3", 20, true, None), period);
        let left = a.remaining("n").expect("quarantined");
        assert!(left > Duration::from_secs(39) && left <= Duration::from_secs(40));
        assert_eq!(a.take_mark(), None, "not marked while quarantined");
        // A marker from an earlier process without AOF (an RDB snapshot may
        // be stale): quarantined too.
        let a = Admission::default();
        a.connected("n", facts("r4", 1, false, Some("r1")), period);
        assert!(a.remaining("n").is_some());
        // Up for the period already: admitted and marked.
        let a = Admission::default();
        a.connected("n", facts("r5", 60, false, None), period);
        assert_eq!(a.remaining("n"), None);
        assert_eq!(a.take_mark().as_deref(), Some("r5"));
    }

    #[test]
    fn info_is_parsed_and_garbage_is_refused() {
        let server =
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let persistence = "# Persistence\r\naof_enabled:1\r\n";
        let f = Facts::parse(server, persistence, None).unwrap();
        assert_eq!(f, facts("abc123", 42, true, None));
        assert_eq!(Facts::parse("run_id:x\r\n", persistence, None), None);
        assert_eq!(
            Facts::parse("run_id:x\r\nuptime_in_seconds:zz\r\n", "", None),
            None
        );
    }
}
