//! A `metrics` recorder for the tests that use the feature (included by
//! path: the rest of the harness builds without it), reading back every
//! series by `name{label=value,...}` (labels sorted): a counter's total, a
//! gauge's value, a histogram's samples since the last read.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
    SharedString, Unit,
};

#[derive(Debug)]
enum Series {
    Counter(Arc<Total>),
    Gauge(Arc<Level>),
    Histogram(Arc<Samples>),
}

#[derive(Debug, Default)]
struct Total(AtomicU64);
#[derive(Debug, Default)]
struct Level(Mutex<f64>);
#[derive(Debug, Default)]
struct Samples(Mutex<Vec<f64>>);

impl CounterFn for Total {
    fn increment(&self, by: u64) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Level {
    fn increment(&self, by: f64) {
        *self.0.lock().unwrap() += by;
    }
    fn decrement(&self, by: f64) {
        *self.0.lock().unwrap() -= by;
    }
    fn set(&self, value: f64) {
        *self.0.lock().unwrap() = value;
    }
}

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every series recorded, by name and labels. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    series: Arc<Mutex<HashMap<String, Series>>>,
}

fn name(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder {
    /// `name{labels}` → a counter's total, a gauge's value, or the number
    /// of a histogram's samples since the last read (which it drains).
    pub fn snapshot(&self) -> HashMap<String, u64> {
        let series = self.series.lock().unwrap();
        series
            .iter()
            .map(|(name, series)| {
                let value = match series {
                    Series::Counter(total) => total.0.load(Ordering::SeqCst),
                    Series::Gauge(level) => *level.0.lock().unwrap() as u64,
                    Series::Histogram(samples) => {
                        std::mem::take(&mut *samples.0.lock().unwrap()).len() as u64
                    }
                };
                (name.clone(), value)
            })
            .collect()
    }

    /// The samples of the histograms named `metric` (any labels) since the
    /// last read, which it drains.
    pub fn samples(&self, metric: &str) -> Vec<f64> {
        let series = self.series.lock().unwrap();
        let prefix = format!("{metric}{{");
        series
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .flat_map(|(_, series)| match series {
                Series::Histogram(samples) => std::mem::take(&mut *samples.0.lock().unwrap()),
                _ => Vec::new(),
            })
            .collect()
    }

    /// The series of `key`, made on first use.
    fn series<T>(
        &self,
        key: &Key,
        make: impl FnOnce() -> Series,
        get: impl Fn(&Series) -> Option<T>,
    ) -> T {
        let mut series = self.series.lock().unwrap();
        let entry = series.entry(name(key)).or_insert_with(make);
        get(entry).expect("one kind of series per name")
    }
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let total = self.series(
            key,
            || Series::Counter(Arc::default()),
            |s| match s {
                Series::Counter(total) => Some(total.clone()),
                _ => None,
            },
        );
        Counter::from_arc(total)
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let level = self.series(
            key,
            || Series::Gauge(Arc::default()),
            |s| match s {
                Series::Gauge(level) => Some(level.clone()),
                _ => None,
            },
        );
        Gauge::from_arc(level)
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let samples = self.series(
            key,
            || Series::Histogram(Arc::default()),
            |s| match s {
                Series::Histogram(samples) => Some(samples.clone()),
                _ => None,
            },
        );
        Histogram::from_arc(samples)
    }
}
