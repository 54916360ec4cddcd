//! A node's round-trip time, smoothed as TCP does (RFC 6298): the mean and
//! the mean deviation of the samples, each an exponential moving average.
//! What a request to the node needs is the mean plus room for its spread,
//! so that the per-node timeout never undercuts the network the node sits
//! behind (another availability zone, a proxy), and follows it when it
//! changes.

use std::time::Duration;

/// The least room above the smoothed round trip that a request gets.
const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct RoundTrip {
    /// The smoothed round trip (`None` before the first sample).
    smoothed: Option<Duration>,
    /// Its smoothed mean deviation.
    deviation: Duration,
    /// The least sample: what any round trip takes at the least.
    least: Option<Duration>,
}

impl RoundTrip {
    /// Takes one measured round trip.
    pub(crate) fn sample(&mut self, rtt: Duration) {
        self.least = Some(self.least.map_or(rtt, |least| least.min(rtt)));
        match self.smoothed {
            None => {
                self.smoothed = Some(rtt);
                self.deviation = rtt / 2;
            }
            Some(smoothed) => {
                let off = smoothed.abs_diff(rtt);
                self.deviation = self.deviation * 3 / 4 + off / 4;
                self.smoothed = Some(smoothed * 7 / 8 + rtt / 8);
            }
        }
    }

    /// The smoothed round trip, once measured.
    pub(crate) fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// The least round trip measured: no request is answered sooner (the
    /// first samples, a new connection's, are the slowest).
    pub(crate) fn least(&self) -> Option<Duration> {
        self.least
    }

    /// What a request to the node needs before it counts as unanswered:
    /// the smoothed round trip plus four deviations, and at least half the
    /// round trip (a steady network's deviation falls toward zero, where
    /// the next slightly slower answer would time out) and a millisecond.
    pub(crate) fn need(&self) -> Option<Duration> {
        let smoothed = self.smoothed?;
        let room = (self.deviation * 4).max(smoothed / 2).max(GRANULARITY);
        Some(smoothed.saturating_add(room))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_needed_before_the_first_sample() {
        assert_eq!(RoundTrip::default().need(), None);
    }

    #[test]
    fn the_first_sample_leaves_room_for_a_spread_of_half_of_it() {
        let mut rtt = RoundTrip::default();
        rtt.sample(30 * MS);
        assert_eq!(rtt.smoothed(), Some(30 * MS));
        assert_eq!(rtt.need(), Some(90 * MS), "30 + 4 × 15");
        rtt.sample(20 * MS);
        rtt.sample(25 * MS);
        assert_eq!(rtt.least(), Some(20 * MS));
    }

    #[test]
    fn a_steady_network_keeps_half_a_round_trip_of_room() {
        let mut rtt = RoundTrip::default();
        for _ in 0..200 {
            rtt.sample(30 * MS);
        }
        let need = rtt.need().unwrap();
        assert!(need >= 45 * MS && need < 46 * MS, "{need:?}");
    }

    #[test]
    fn a_slower_network_raises_the_need_within_a_few_samples() {
        let mut rtt = RoundTrip::default();
        for _ in 0..50 {
            rtt.sample(MS / 2);
        }
        assert!(rtt.need().unwrap() < 2 * MS);
        for _ in 0..3 {
            rtt.sample(40 * MS);
        }
        assert!(rtt.need().unwrap() > 40 * MS, "{:?}", rtt.need());
    }
}
