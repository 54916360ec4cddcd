//! Durations as people write them: `50 ms`, `1.5 s`, `2 min 5 s`.

use std::fmt;
use std::time::Duration;

/// Formats a duration the way a person writes it, rounded to what matters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Human(pub(crate) Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let micros = d.as_micros();
        if micros == 0 {
            return f.write_str("0 ms");
        }
        if micros < 1_000 {
            return write!(f, "{micros} µs");
        }
        if micros < 10_000 {
            return write!(f, "{} ms", trim(micros as f64 / 1_000.0, 1));
        }
        if micros < 1_000_000 {
            return write!(f, "{} ms", (micros + 500) / 1_000);
        }
        let secs = d.as_secs();
        if secs < 60 {
            return write!(f, "{} s", trim(d.as_secs_f64(), 2));
        }
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        let mut parts = Vec::new();
        if h > 0 {
            parts.push(format!("{h} h"));
        }
        if m > 0 {
            parts.push(format!("{m} min"));
        }
        if s > 0 {
            parts.push(format!("{s} s"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// `value` with at most `places` decimals, trailing zeros dropped.
fn trim(value: f64, places: usize) -> String {
    let text = format!("{value:.places$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(d: Duration) -> String {
        Human(d).to_string()
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(h(Duration::ZERO), "0 ms");
        assert_eq!(h(Duration::from_micros(900)), "900 µs");
        assert_eq!(h(Duration::from_micros(2_500)), "2.5 ms");
        assert_eq!(h(Duration::from_millis(2)), "2 ms");
        assert_eq!(h(Duration::from_nanos(50_124_478)), "50 ms");
        assert_eq!(h(Duration::from_millis(999)), "999 ms");
        assert_eq!(h(Duration::from_millis(1_500)), "1.5 s");
        assert_eq!(h(Duration::from_secs(10)), "10 s");
        assert_eq!(h(Duration::from_secs(125)), "2 min 5 s");
        assert_eq!(h(Duration::from_secs(3_600)), "1 h");
        assert_eq!(
            h(Duration::from_millis(u32::MAX as u64)),
            "1193 h 2 min 47 s"
        );
        assert!(!h(Duration::MAX).is_empty());
    }
}
