//! Latency distributions folded as values arrive: an HDR histogram (3 significant digits,
//! i.e. at most 0.1% relative error in a percentile) beside exact count, minimum, maximum and
//! sum, so memory stays a few kilobytes whether a run has ten attempts or ten million.
use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub total_ns: u64,
}

/// Values (nanoseconds) folded one at a time.
#[derive(Clone, Debug)]
pub struct Latencies {
    hist: Histogram<u64>,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    pub fn new() -> Self {
        // 3 significant digits with auto-resize cannot fail to build.
        let hist = Histogram::new(3).expect("3 significant digits is a valid HDR precision");
        Self { hist, count: 0, min: u64::MAX, max: 0, sum: 0 }
    }

    pub fn record(&mut self, ns: u64) {
        // Auto-resizing: only a value beyond what any histogram can hold fails, and is then
        // kept at the largest one (min, max and sum stay exact).
        if self.hist.record(ns).is_err() {
            self.hist.saturating_record(ns);
        }
        self.count += 1;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += u128::from(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.sum as f64 / self.count as f64 }
    }

    /// Nearest-rank percentile: the smallest recorded value with at least p% of the values at
    /// or below it, to the histogram's precision (exact at the extremes).
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let v = self.hist.value_at_quantile(p / 100.0);
        self.hist.median_equivalent(v).clamp(self.min, self.max)
    }

    /// None for no values: an empty distribution has no minimum to print.
    pub fn summary(&self) -> Option<Distribution> {
        (self.count > 0).then(|| Distribution {
            count: self.count,
            min_ns: self.min,
            p50_ns: self.percentile(50.0),
            p90_ns: self.percentile(90.0),
            p99_ns: self.percentile(99.0),
            max_ns: self.max,
            mean_ns: self.mean(),
            total_ns: u64::try_from(self.sum).unwrap_or(u64::MAX),
        })
    }
}

impl Distribution {
    /// Folds a list (tests and small inputs).
    pub fn of(values: impl IntoIterator<Item = u64>) -> Option<Self> {
        let mut l = Latencies::new();
        values.into_iter().for_each(|v| l.record(v));
        l.summary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Distribution::of(1..=100).unwrap();
        assert_eq!((d.min_ns, d.p50_ns, d.p90_ns, d.p99_ns, d.max_ns), (1, 50, 90, 99, 100));
        assert_eq!(d.mean_ns, 50.5);
        assert_eq!(d.total_ns, 5050);
        assert_eq!(d.count, 100);
    }

    #[test]
    fn single_and_empty() {
        assert!(Distribution::of([]).is_none());
        let d = Distribution::of([7]).unwrap();
        assert_eq!((d.min_ns, d.p50_ns, d.p99_ns, d.max_ns), (7, 7, 7, 7));
        let d = Distribution::of([45_001]).unwrap();
        assert_eq!(d.p50_ns, 45_001, "clamped to the exact extremes");
    }

    #[test]
    fn unsorted_input_and_skew() {
        let mut v = vec![1_000u64; 95];
        v.extend([50_000; 5]);
        v.reverse();
        let d = Distribution::of(v).unwrap();
        assert_eq!((d.p50_ns, d.p90_ns, d.p99_ns), (1_000, 1_000, 50_000));
    }

    #[test]
    fn large_values_within_a_tenth_of_a_percent() {
        let v: Vec<u64> = (0..10_000u64).map(|i| 1_000_000 + i * 97).collect();
        let d = Distribution::of(v.clone()).unwrap();
        let exact = v[4_999];
        assert!((d.p50_ns as f64 - exact as f64).abs() / exact as f64 <= 1e-3, "{} vs {exact}", d.p50_ns);
        assert_eq!(d.total_ns, v.iter().sum::<u64>());
    }
}
