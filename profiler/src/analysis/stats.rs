//! Latency distributions folded as values arrive: an HDR histogram (3 significant digits,
//! i.e. at most 0.1% relative error in a percentile) beside exact count, minimum, maximum and
//! sum, so memory stays a few kilobytes whether a run has ten attempts or ten million.
use hdrhistogram::Histogram;
use serde::Serialize;

/// 1.96: the two-sided 95% normal quantile, used by every interval here.
pub const Z95: f64 = 1.959_964;

/// Summary of a latency distribution, as the report's JSON holds it (all times in ns).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Distribution {
    /// Values summarized (attempts, steps or calls, depending on what was measured).
    pub count: u64,
    /// Smallest value.
    pub min_ns: u64,
    /// Median, to the histogram's 0.1% precision.
    pub p50_ns: u64,
    /// Distribution-free 95% interval of the median: the order statistics at ranks
    /// n/2 ∓ 1.96·√n/2 (binomial normal approximation), read from the histogram. From one
    /// value both ends are the value: no interval, and the report shows none.
    pub p50_low_ns: u64,
    /// Upper end of the median's 95% interval (see `p50_low_ns`).
    pub p50_high_ns: u64,
    /// 90th percentile (nearest rank).
    pub p90_ns: u64,
    /// 99th percentile (nearest rank).
    pub p99_ns: u64,
    /// Largest value (exact).
    pub max_ns: u64,
    /// Arithmetic mean (exact: from the sum, not the histogram).
    pub mean_ns: f64,
    /// Standard deviation (from the histogram, to its precision).
    pub stddev_ns: f64,
    /// Sum of all values (saturates at `u64::MAX`).
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
    /// An empty set of values.
    pub fn new() -> Self {
        // 3 significant digits with auto-resize cannot fail to build.
        let hist = Histogram::new(3).expect("3 significant digits is a valid HDR precision");
        Self { hist, count: 0, min: u64::MAX, max: 0, sum: 0 }
    }

    /// Adds one value, in ns.
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

    /// Adds `n` values of `ns` each.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        if self.hist.record_n(ns, n).is_err() {
            self.hist.saturating_record(ns);
        }
        self.count += n;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += u128::from(ns) * u128::from(n);
    }

    /// Values recorded so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact arithmetic mean in ns; 0 for no values.
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

    /// The value of the r-th smallest of the n values (1-based), to the histogram's precision.
    fn at_rank(&self, r: u64) -> u64 {
        self.percentile(100.0 * r as f64 / self.count as f64)
    }

    /// 95% order-statistic interval of the median (distribution-free: the rank of the true
    /// median among n values is binomial(n, ½)).
    fn median_interval(&self) -> (u64, u64) {
        let n = self.count as f64;
        if self.count == 0 {
            return (0, 0);
        }
        let half = Z95 * n.sqrt() / 2.0;
        let lo = ((n / 2.0 - half).floor() as u64).clamp(1, self.count);
        let hi = ((n / 2.0 + half).ceil() as u64 + 1).clamp(1, self.count);
        (self.at_rank(lo), self.at_rank(hi))
    }

    /// The distribution's modes ([`super::modes`]), from the histogram's recorded values.
    pub fn modes(&self) -> Vec<super::modes::LatencyMode> {
        super::modes::modes(self.hist.iter_recorded().map(|v| (self.hist.median_equivalent(v.value_iterated_to()), v.count_at_value())))
    }

    /// None for no values: an empty distribution has no minimum to print.
    pub fn summary(&self) -> Option<Distribution> {
        let (p50_low_ns, p50_high_ns) = self.median_interval();
        (self.count > 0).then(|| Distribution {
            count: self.count,
            min_ns: self.min,
            p50_ns: self.percentile(50.0),
            p50_low_ns,
            p50_high_ns,
            p90_ns: self.percentile(90.0),
            p99_ns: self.percentile(99.0),
            max_ns: self.max,
            mean_ns: self.mean(),
            stddev_ns: if self.count > 1 { self.hist.stdev() } else { 0.0 },
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

/// 95% Wilson score interval for `k` successes out of `n`.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let center = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((center - half).max(0.0), (center + half).min(1.0))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn wilson_interval_narrows_with_samples() {
        let (lo, hi) = wilson(5, 10);
        assert!(lo < 0.5 && hi > 0.5 && hi - lo > 0.5);
        let (lo, hi) = wilson(5_000, 10_000);
        assert!(hi - lo < 0.02);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (lo, _) = wilson(0, 100);
        assert_eq!(lo, 0.0);
    }

    /// A seeded generator for simulations (splitmix64), no dependency needed.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        pub(crate) fn uniform(&mut self) -> f64 {
            ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        pub(crate) fn normal(&mut self) -> f64 {
            (-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
        }

        /// Log-normal latency around `median` ns: skewed like exec latencies.
        pub(crate) fn latency(&mut self, median: f64, sigma: f64) -> u64 {
            (median * (sigma * self.normal()).exp()).round() as u64
        }
    }

    #[test]
    fn median_interval_covers_the_true_median_near_95_percent() {
        // Log-normal(ln 1000, 0.5): true median 1000 ns. 400 seeded runs of 2,000 values.
        let mut rng = Rng(7);
        let runs = 400;
        let covered = (0..runs)
            .filter(|_| {
                let d = Distribution::of((0..2_000).map(|_| rng.latency(1_000.0, 0.5))).unwrap();
                d.p50_low_ns <= 1_000 && 1_000 <= d.p50_high_ns
            })
            .count();
        let coverage = covered as f64 / runs as f64;
        assert!((0.92..=0.985).contains(&coverage), "coverage {coverage}");
    }

    #[test]
    fn difference_of_medians_is_significant_about_5_percent_of_the_time_without_a_change() {
        let mut rng = Rng(11);
        let runs = 400;
        let mut significant = 0;
        let mut shifted_found = 0;
        for _ in 0..runs {
            let a = Distribution::of((0..2_000).map(|_| rng.latency(1_000.0, 0.6))).unwrap();
            let b = Distribution::of((0..2_000).map(|_| rng.latency(1_000.0, 0.6))).unwrap();
            let c = Distribution::of((0..2_000).map(|_| rng.latency(1_100.0, 0.6))).unwrap();
            significant += usize::from(a.median().change_to(&b.median()).excludes_zero());
            shifted_found += usize::from(a.median().change_to(&c.median()).excludes_zero());
        }
        let false_rate = significant as f64 / runs as f64;
        assert!(false_rate <= 0.09, "false positives {false_rate}");
        // A 10% shift with 2,000 values a side is found nearly always.
        assert!(shifted_found as f64 / runs as f64 >= 0.9, "power {shifted_found}/{runs}");
    }

    #[test]
    fn p_values_and_holm() {
        assert!((two_sided_p(1.959_964) - 0.05).abs() < 1e-6);
        assert!((two_sided_p(0.0) - 1.0).abs() < 1e-6);
        assert!((two_sided_p(-3.290_527) - 0.001).abs() < 1e-6);
        // Holm at 0.05 over 4: 0.01 ≤ 0.0125 and 0.015 ≤ 0.0167 pass, 0.04 > 0.025 stops.
        assert_eq!(holm(&[0.04, 0.01, 0.5, 0.015], 0.05), vec![false, true, false, true]);
        assert_eq!(holm(&[], 0.05), Vec::<bool>::new());
    }

    /// Two-sided 95% t quantiles of the tables (three decimals).
    #[test]
    fn student_quantiles_match_the_t_table() {
        for (df, t) in [(1.0, 12.706), (2.0, 4.303), (3.0, 3.182), (4.0, 2.776), (10.0, 2.228), (30.0, 2.042), (120.0, 1.980)] {
            assert!((student_t95(df) - t).abs() < 5e-4, "t(0.975, {df}) = {} not {t}", student_t95(df));
        }
        assert!((student_t95(1e9) - Z95).abs() < 1e-5);
        // Fractional (Welch) degrees of freedom fall between their neighbours.
        assert!(student_t95(2.5) < student_t95(2.0) && student_t95(2.5) > student_t95(3.0));
        assert_eq!(student_t95(0.0), f64::INFINITY);
    }

    #[test]
    fn student_p_values_match_the_t_table() {
        // At the tabled quantiles: two-sided 0.05, 0.01 and 0.10.
        for (t, df, p) in [
            (4.302_653, 2.0, 0.05),
            (2.776_445, 4.0, 0.05),
            (2.228_139, 10.0, 0.05),
            (12.706_205, 1.0, 0.05),
            (9.924_843, 2.0, 0.01),
            (1.812_461, 10.0, 0.10),
        ] {
            let got = student_two_sided_p(t, df);
            assert!((got - p).abs() < 1e-6, "p(|T| > {t}, {df} df) = {got} not {p}");
        }
        // Cauchy (1 df) in closed form: p = 1 − 2·atan(t)/π.
        assert!((student_two_sided_p(1.0, 1.0) - 0.5).abs() < 1e-12);
        assert!((student_two_sided_p(3.0, 1.0) - (1.0 - 2.0 * 3f64.atan() / std::f64::consts::PI)).abs() < 1e-12);
        // 2 df in closed form: p = 1 − t/√(2 + t²).
        assert!((student_two_sided_p(1.5, 2.0) - (1.0 - 1.5 / (2.0f64 + 2.25).sqrt())).abs() < 1e-12);
        assert_eq!(student_two_sided_p(0.0, 3.0), 1.0);
        assert_eq!(student_two_sided_p(-4.302_653, 2.0), student_two_sided_p(4.302_653, 2.0));
        // Many degrees of freedom: the normal's.
        assert!((student_two_sided_p(1.959_964, 1e6) - 0.05).abs() < 1e-5);
        assert!(student_two_sided_p(1.0, 0.0).is_nan());
    }

    #[test]
    fn incomplete_beta_in_closed_forms() {
        // I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 − (1 − x)^b.
        for x in [0.1, 0.5, 0.9] {
            assert!((incomplete_beta(1.0, 1.0, x) - x).abs() < 1e-12);
            assert!((incomplete_beta(3.0, 1.0, x) - x.powi(3)).abs() < 1e-12);
            assert!((incomplete_beta(1.0, 4.0, x) - (1.0 - (1.0 - x).powi(4))).abs() < 1e-12);
        }
        assert_eq!((incomplete_beta(2.0, 3.0, 0.0), incomplete_beta(2.0, 3.0, 1.0)), (0.0, 1.0));
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12 && (ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn a_mean_over_rounds_has_a_student_interval() {
        let i = over_rounds(&[10.0, 12.0, 14.0]);
        // s = 2, n = 3: 12 ± 4.303 · 2/√3.
        assert_eq!(i.value, 12.0);
        assert!((i.high - 12.0 - 4.302_653 * 2.0 / 3f64.sqrt()).abs() < 1e-5, "{i:?}");
        assert_eq!(over_rounds(&[5.0]), Interval { value: 5.0, low: 5.0, high: 5.0 });
        assert_eq!(over_rounds(&[]), Interval::default());
        // Rounds that agree exactly keep the spread each measured within itself.
        let i = over_rounds_floored(&[7.0, 7.0, 7.0], &[4.0, 4.0, 4.0]);
        assert!((i.high - 7.0 - 4.302_653 * (4.0f64 / 3.0).sqrt()).abs() < 1e-5, "{i:?}");
        // The floor is a floor: rounds spread wider than their own errors keep their spread.
        assert_eq!(over_rounds_floored(&[10.0, 12.0, 14.0], &[0.01; 3]), over_rounds(&[10.0, 12.0, 14.0]));
    }

    #[test]
    fn welch_between_rounds() {
        let none = [0.0; 3];
        // Every round agrees on +10 with a little spread: significant.
        let (i, p) = welch_over_rounds_floored(&[100.0, 101.0, 99.0], &none, &[110.0, 111.0, 109.5], &none);
        assert!(i.excludes_zero() && p < 0.01 && (i.value - 10.166_666).abs() < 1e-5, "{i:?} {p}");
        // A change whose sign moves between rounds: not.
        let (i, p) = welch_over_rounds_floored(&[100.0, 101.0, 99.0], &none, &[110.0, 92.0, 105.0], &none);
        assert!(!i.excludes_zero() && p > 0.05, "{i:?} {p}");
        // Unpaired: B's rounds in any order give the same answer.
        let shuffled = welch_over_rounds_floored(&[100.0, 101.0, 99.0], &none, &[105.0, 110.0, 92.0], &none);
        assert_eq!(shuffled, (i, p));
        // Equal variances and sizes: Welch's df is 2(n − 1); the interval is t(0.975, 4)·se.
        let (i, p) = welch_over_rounds_floored(&[1.0, 2.0, 3.0], &none, &[3.0, 4.0, 5.0], &none);
        assert!((i.high - 2.0 - 2.776_445 * (2.0f64 / 3.0).sqrt()).abs() < 1e-5, "{i:?}");
        assert!((p - student_two_sided_p(2.0 / (2.0f64 / 3.0).sqrt(), 4.0)).abs() < 1e-12);
        // Rounds that coincide exactly (discrete values: −1 in every round) with within-round
        // errors of 2: zero sample variance, yet not significant.
        let (i, p) = welch_over_rounds_floored(&[300.0; 3], &[4.0; 3], &[299.0; 3], &[4.0; 3]);
        assert!(!i.excludes_zero() && p > 0.05, "{i:?} {p}");
        // Without the floor's errors, exactly equal rounds are a certain change.
        assert_eq!(welch_over_rounds_floored(&[300.0; 3], &none, &[299.0; 3], &none).1, 0.0);
        assert_eq!(welch_over_rounds_floored(&[300.0; 3], &none, &[300.0; 3], &none).1, 1.0);
        // Fewer than two rounds a side: nothing tested.
        assert_eq!(welch_over_rounds_floored(&[1.0], &[0.0], &[3.0, 4.0], &[0.0; 2]), (Interval { value: 2.5, low: 2.5, high: 2.5 }, 1.0));
    }

    #[test]
    fn moments_give_a_mean_interval_and_count_zero_units() {
        let mut m = Moments::default();
        for x in [2.0, 4.0, 6.0] {
            m.add(x);
        }
        let i = m.interval();
        assert_eq!(i.value, 4.0);
        assert!((i.high - i.value - Z95 * (4.0f64 / 3.0).sqrt()).abs() < 1e-9, "{i:?}");
        m.pad_to(6);
        assert_eq!(m.interval().value, 2.0);
    }

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

/// Sum and sum of squares of per-unit values (per attempt, per step), for a mean with a 95%
/// interval (normal approximation: the means here are over thousands of attempts).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    /// Units added (or padded to with `pad_to`).
    pub n: u64,
    sum: f64,
    sum_sq: f64,
}

impl Moments {
    /// Adds one unit's value.
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
    }

    /// Counts units whose value is 0 without adding them one by one (a function not called
    /// in an attempt): the moments then cover `n` units.
    pub fn pad_to(&mut self, n: u64) {
        self.n = self.n.max(n);
    }

    /// The mean over the `n` units with its 95% interval; the default (all zero) for no units.
    pub fn interval(&self) -> Interval {
        if self.n == 0 {
            return Interval::default();
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = if self.n > 1 { ((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0) } else { 0.0 };
        Interval::normal(mean, (var / n).sqrt())
    }
}

/// A figure with its 95% interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Interval {
    /// The estimate.
    pub value: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end of the 95% interval.
    pub high: f64,
}

impl Interval {
    /// `value` ± 1.96 standard errors.
    pub fn normal(value: f64, standard_error: f64) -> Self {
        Interval { value, low: value - Z95 * standard_error, high: value + Z95 * standard_error }
    }

    /// The standard error an interval stands for (half its width over 1.96).
    pub fn standard_error(&self) -> f64 {
        (self.high - self.low).max(0.0) / (2.0 * Z95)
    }

    /// The interval of `b - self` for independent estimates: standard errors add in quadrature.
    pub fn change_to(&self, b: &Interval) -> Interval {
        Interval::normal(b.value - self.value, self.standard_error().hypot(b.standard_error()))
    }

    /// Excludes zero.
    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }

    /// The interval multiplied by `k` (ends swapped for negative `k`, so `low` stays the lower).
    pub fn scaled(&self, k: f64) -> Interval {
        let (a, b) = (self.low * k, self.high * k);
        Interval { value: self.value * k, low: a.min(b), high: a.max(b) }
    }
}

/// Two-sided p-value of a normal z statistic: 2·(1 − Φ(|z|)), from erfc (Abramowitz & Stegun
/// 7.1.26, absolute error below 1.5e-7: enough to rank and to test at 0.05/m).
pub fn two_sided_p(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (poly * (-x * x).exp()).clamp(0.0, 1.0)
}

/// Holm's step-down correction: which of these p-values are significant at family-wise level
/// `alpha` (the chance of any false positive among them at most `alpha`).
pub fn holm(p_values: &[f64], alpha: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let m = p_values.len();
    let mut out = vec![false; m];
    for (rank, &i) in order.iter().enumerate() {
        if p_values[i] > alpha / (m - rank) as f64 {
            break;
        }
        out[i] = true;
    }
    out
}

/// ln Γ(x) for x > 0: Lanczos' approximation (g = 7, 9 terms; about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)·Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let sum = C[1..].iter().enumerate().fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    let t = x + G + 0.5;
    0.5 * std::f64::consts::TAU.ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The continued fraction of the incomplete beta function (Numerical Recipes' `betacf`),
/// evaluated by the modified Lentz method; converges fast for x < (a + 1) / (a + b + 2).
fn beta_continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPSILON: f64 = 1e-15;
    let nonzero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / nonzero(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=1_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        // Even step.
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / nonzero(1.0 + aa * d);
        c = nonzero(1.0 + aa / c);
        h *= d * c;
        // Odd step.
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / nonzero(1.0 + aa * d);
        c = nonzero(1.0 + aa / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < EPSILON {
            break;
        }
    }
    h
}

/// The regularized incomplete beta function I_x(a, b) (a, b > 0; x clamped to [0, 1]): the
/// continued fraction on whichever side of the mean converges, the other by symmetry,
/// I_x(a, b) = 1 − I_{1−x}(b, a).
pub fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x.is_nan() || a.is_nan() || b.is_nan() || a <= 0.0 || b <= 0.0 {
        return f64::NAN;
    }
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    let i = if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b
    };
    i.clamp(0.0, 1.0)
}

/// Degrees of freedom beyond which Student's t is taken as normal (they differ by less than
/// 1e-6 in a p-value there, and the continued fraction would need ever more terms).
const STUDENT_NORMAL_DF: f64 = 1e7;

/// Two-sided p-value of a Student t statistic with `df` degrees of freedom (fractional ones
/// too, as Welch's): P(|T| ≥ |t|) = I_{df/(df+t²)}(df/2, ½). 1 for t = 0 or a NaN statistic; NaN
/// for `df` ≤ 0.
pub fn student_two_sided_p(t: f64, df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_nan() {
        return 1.0;
    }
    if t.is_infinite() {
        return 0.0;
    }
    if df > STUDENT_NORMAL_DF {
        return two_sided_p(t);
    }
    incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (fractional ones too): the
/// half-width, in standard errors, of a two-sided 95% interval (12.71 at 1, 2.776 at 4, 1.96
/// in the limit). By bisection on [`student_two_sided_p`]; infinite for `df` ≤ 0.
pub fn student_t95(df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 {
        return f64::INFINITY;
    }
    let (mut low, mut high) = (0.0, Z95);
    while student_two_sided_p(high, df) > 0.05 {
        low = high;
        high *= 2.0;
        if high > 1e12 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if student_two_sided_p(mid, df) > 0.05 {
            low = mid;
        } else {
            high = mid;
        }
        if high - low <= 1e-12 * high {
            break;
        }
    }
    0.5 * (low + high)
}

fn mean_of(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// The sample variance (n − 1 in the denominator) of `values`; 0 for fewer than two.
pub fn sample_variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean_of(values);
    values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (values.len() - 1) as f64
}

/// The variance of a figure between rounds (boots, machines: the unit of replication), at
/// least what each round measured within itself: the larger of the rounds' sample variance
/// and the mean of their squared within-round standard errors `within_se2`. R rounds that
/// happen to agree exactly (discrete values) then still have the spread each one had, not
/// none.
pub fn floored_variance(values: &[f64], within_se2: &[f64]) -> f64 {
    sample_variance(values).max(mean_of(within_se2))
}

/// The mean of a figure over rounds with its 95% Student interval (len − 1 degrees of
/// freedom). From one value the interval is the value itself (zero wide: no spread to tell);
/// from none, the default (all zero).
pub fn over_rounds(values: &[f64]) -> Interval {
    over_rounds_floored(values, &[])
}

/// [`over_rounds`] with the variance floored by the rounds' squared within-round standard
/// errors ([`floored_variance`]).
pub fn over_rounds_floored(values: &[f64], within_se2: &[f64]) -> Interval {
    let m = mean_of(values);
    if values.len() < 2 {
        return Interval { value: m, low: m, high: m };
    }
    let n = values.len() as f64;
    let half = student_t95(n - 1.0) * (floored_variance(values, within_se2) / n).sqrt();
    Interval { value: m, low: m - half, high: m + half }
}

/// B's rounds against A's, unpaired (the rounds of two sides are independent: two kernels'
/// boots), by Welch's t-test with Welch–Satterthwaite degrees of freedom, each side's
/// variance floored as in [`floored_variance`]: the change of means B − A with its 95% interval
/// and the two-sided p-value of no change. Each side needs two values or more; with fewer the
/// interval is the bare difference (zero wide) and p is 1 (nothing tested). Where both sides
/// have no spread at all (every round exact and equal), p is 1 for no change and 0 for any.
pub fn welch_over_rounds_floored(a: &[f64], a_se2: &[f64], b: &[f64], b_se2: &[f64]) -> (Interval, f64) {
    let d = mean_of(b) - mean_of(a);
    let bare = Interval { value: d, low: d, high: d };
    if a.len() < 2 || b.len() < 2 {
        return (bare, 1.0);
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (floored_variance(a, a_se2) / na, floored_variance(b, b_se2) / nb);
    let se = (va + vb).sqrt();
    if se == 0.0 || !se.is_finite() {
        return (bare, if d == 0.0 { 1.0 } else { 0.0 });
    }
    let df = (va + vb).powi(2) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let half = student_t95(df) * se;
    (Interval { value: d, low: d - half, high: d + half }, student_two_sided_p(d / se, df))
}

impl Interval {
    /// Two-sided p-value of "no change" for an estimate with this interval.
    pub fn p_value(&self) -> f64 {
        let se = self.standard_error();
        if se == 0.0 {
            return if self.value == 0.0 { 1.0 } else { 0.0 };
        }
        two_sided_p(self.value / se)
    }
}

impl Distribution {
    /// The median with its order-statistic interval.
    pub fn median(&self) -> Interval {
        Interval { value: self.p50_ns as f64, low: self.p50_low_ns as f64, high: self.p50_high_ns as f64 }
    }

    /// The mean with its normal interval.
    pub fn mean(&self) -> Interval {
        Interval::normal(self.mean_ns, self.stddev_ns / (self.count.max(1) as f64).sqrt())
    }
}
