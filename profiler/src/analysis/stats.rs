//! Latency distributions: exact order statistics over all samples (no histogram bucketing:
//! a run holds at most millions of attempts and sorting them is cheap next to tracing them).
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

impl Distribution {
    /// None for no samples: an empty distribution has no minimum to print.
    pub fn of(mut values: Vec<u64>) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let total: u64 = values.iter().sum();
        Some(Self {
            count: values.len() as u64,
            min_ns: values[0],
            p50_ns: percentile(&values, 50.0),
            p90_ns: percentile(&values, 90.0),
            p99_ns: percentile(&values, 99.0),
            max_ns: values[values.len() - 1],
            mean_ns: total as f64 / values.len() as f64,
            total_ns: total,
        })
    }
}

/// Nearest-rank percentile of sorted values: the smallest value with at least p% of the
/// samples at or below it (always an observed value).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    debug_assert!(!sorted.is_empty());
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        let d = Distribution::of(v).unwrap();
        assert_eq!((d.min_ns, d.p50_ns, d.p90_ns, d.p99_ns, d.max_ns), (1, 50, 90, 99, 100));
        assert_eq!(d.mean_ns, 50.5);
        assert_eq!(d.total_ns, 5050);
        assert_eq!(d.count, 100);
    }

    #[test]
    fn single_and_empty() {
        assert!(Distribution::of(vec![]).is_none());
        let d = Distribution::of(vec![7]).unwrap();
        assert_eq!((d.min_ns, d.p50_ns, d.p99_ns, d.max_ns), (7, 7, 7, 7));
    }

    #[test]
    fn unsorted_input_and_skew() {
        let mut v = vec![1_000u64; 95];
        v.extend([50_000; 5]);
        v.reverse();
        let d = Distribution::of(v).unwrap();
        assert_eq!((d.p50_ns, d.p90_ns, d.p99_ns), (1_000, 1_000, 50_000));
    }
}
