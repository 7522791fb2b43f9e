//! Modes of a latency distribution: where its values pile up, and how many of them each pile
//! holds. A distribution with several modes (libMicro's `system` test: 30% of runs near 3.2 ms,
//! 11% near 15.7 ms) has a mean that describes none of its values.
//!
//! Method: the values' density over log(latency) (latencies are skewed; modes are ratios
//! apart), in bins of 1/40 decade, smoothed with a Gaussian kernel of 0.06 decade (±15%);
//! its local maxima are candidate modes; two neighbours merge unless the density between them
//! dips below 60% of the lower peak; a mode must hold at least 5% of the values and at least
//! 20 of them (see `MIN_VALUES`).
use serde::Serialize;

/// Bins per decade of latency.
const BINS_PER_DECADE: f64 = 40.0;
/// Kernel width (standard deviation) in decades.
const BANDWIDTH_DECADES: f64 = 0.06;
/// A valley deeper than this fraction of the lower peak separates two modes.
const DIP: f64 = 0.6;
/// The least weight of a mode.
const MIN_WEIGHT: f64 = 0.05;
/// The fewest values a mode holds, so two modes need at least twice as many attempts.
///
/// Why a count and not only a weight: the kernel's width is fixed (0.06 decade), so a few
/// values more than ~0.3 decade apart are separate peaks whatever they came from — two
/// attempts were "2 modes", and one of 20 was a "mode" of 5%. The dip between two piles says
/// something only when the piles' heights are known better than the dip (a pile of k values
/// is known to about ±1/√k; at 20, ±22%, against the 40% dip the rule asks for). Measured on
/// 1,000 seeded samples per size (the tests below keep the main cases): with 20, unimodal
/// latencies of 2 to 1,000 values (log-normal σ 0.1 and 0.3, and σ 0.15 with a 2% tail 10×
/// slower) are never called multimodal, where one value per mode called up to 30% of them so;
/// a second mode holding 30% of the values at 5× is found in 99% of samples of 100 values, one
/// holding 10% needs about 300. Not cured: a very wide unimodal latency (σ 0.8, p90 2.8× the
/// median) of 40 to 150 values is still called multimodal in up to 10% of samples, because the
/// width does not grow as the values get fewer.
const MIN_VALUES: u64 = 20;

/// One mode of a latency distribution: where values pile up, and how many of them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencyMode {
    /// Where the density peaks.
    pub ns: f64,
    /// Fraction of the values in this mode (between the valleys around it).
    pub weight: f64,
}

/// The modes of values given as (value ns, count) pairs, largest weight first among equals in
/// value order: empty for no values, one for a unimodal distribution.
pub fn modes(values: impl IntoIterator<Item = (u64, u64)>) -> Vec<LatencyMode> {
    let values: Vec<(f64, f64)> = values.into_iter().filter(|(_, n)| *n > 0).map(|(v, n)| ((v.max(1) as f64).log10(), n as f64)).collect();
    let total: f64 = values.iter().map(|(_, n)| n).sum();
    if total == 0.0 {
        return Vec::new();
    }
    let lo = values.iter().map(|(x, _)| *x).fold(f64::INFINITY, f64::min) - 4.0 * BANDWIDTH_DECADES;
    let hi = values.iter().map(|(x, _)| *x).fold(f64::NEG_INFINITY, f64::max) + 4.0 * BANDWIDTH_DECADES;
    let bins = (((hi - lo) * BINS_PER_DECADE).ceil() as usize).max(1) + 1;
    let mut raw = vec![0.0; bins];
    for &(x, n) in &values {
        raw[((x - lo) * BINS_PER_DECADE).round() as usize] += n;
    }
    let density = smooth(&raw);
    // Local maxima (plateaus count once, at their first bin).
    let mut peaks: Vec<usize> = (0..bins)
        .filter(|&i| density[i] > 0.0 && (i == 0 || density[i] > density[i - 1]) && (i + 1 == bins || density[i] >= density[i + 1]))
        .collect();
    // Merge neighbours without a real dip between them, keeping the higher peak.
    loop {
        let shallow = peaks.windows(2).position(|w| {
            let valley = density[w[0]..=w[1]].iter().copied().fold(f64::INFINITY, f64::min);
            valley > DIP * density[w[0]].min(density[w[1]])
        });
        let Some(i) = shallow else { break };
        let drop = if density[peaks[i]] >= density[peaks[i + 1]] { i + 1 } else { i };
        peaks.remove(drop);
    }
    // Weights: the values between the valleys around each peak; light modes fold into the
    // heavier neighbour until every mode holds MIN_WEIGHT and MIN_VALUES.
    loop {
        let weights = weigh(&raw, &density, &peaks, total);
        let light = weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w < MIN_WEIGHT || **w * total < MIN_VALUES as f64)
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i);
        match light {
            Some(i) if peaks.len() > 1 => {
                peaks.remove(i);
            }
            _ => {
                return peaks
                    .iter()
                    .zip(weights)
                    .map(|(&p, weight)| LatencyMode { ns: 10f64.powf(lo + p as f64 / BINS_PER_DECADE), weight })
                    .collect();
            }
        }
    }
}

fn smooth(raw: &[f64]) -> Vec<f64> {
    let sigma = BANDWIDTH_DECADES * BINS_PER_DECADE;
    let reach = (4.0 * sigma).ceil() as isize;
    let kernel: Vec<f64> = (-reach..=reach).map(|k| (-0.5 * (k as f64 / sigma).powi(2)).exp()).collect();
    (0..raw.len() as isize)
        .map(|i| (-reach..=reach).filter_map(|k| raw.get(usize::try_from(i + k).ok()?).map(|r| r * kernel[(k + reach) as usize])).sum())
        .collect()
}

/// Each peak's share of the values, split at the lowest density between neighbouring peaks.
fn weigh(raw: &[f64], density: &[f64], peaks: &[usize], total: f64) -> Vec<f64> {
    let mut bounds = vec![0];
    for w in peaks.windows(2) {
        let valley = (w[0]..=w[1]).min_by(|&a, &b| density[a].total_cmp(&density[b])).unwrap_or(w[0]);
        bounds.push(valley);
    }
    bounds.push(raw.len());
    bounds.windows(2).map(|b| raw[b[0]..b[1]].iter().sum::<f64>() / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::tests::Rng;

    fn of(v: impl IntoIterator<Item = u64>) -> Vec<LatencyMode> {
        let mut counts = std::collections::BTreeMap::new();
        for x in v {
            *counts.entry(x).or_insert(0u64) += 1;
        }
        modes(counts)
    }

    #[test]
    fn unimodal_samples_have_one_mode_however_skewed() {
        for (seed, sigma) in [(1, 0.1), (2, 0.3), (3, 0.8)] {
            let mut rng = Rng(seed);
            let m = of((0..20_000).map(|_| rng.latency(1_000.0, sigma)));
            assert_eq!(m.len(), 1, "sigma {sigma}: {m:?}");
            assert!((m[0].ns / 1_000.0 - 1.0).abs() < 0.2, "{m:?}");
        }
        // A long thin tail (interrupts hitting 1% of attempts) is not a mode.
        let mut rng = Rng(4);
        let m = of((0..20_000).map(|i| if i % 100 == 0 { rng.latency(50_000.0, 0.5) } else { rng.latency(1_000.0, 0.2) }));
        assert_eq!(m.len(), 1, "{m:?}");
    }

    #[test]
    fn bimodal_samples_have_two_modes_with_their_weights() {
        // libMicro's `system`: most runs near 3.2 ms, 11%-30% near 15.7 ms.
        for (seed, heavy) in [(5, 0.3), (6, 0.11)] {
            let mut rng = Rng(seed);
            let n = 10_000;
            let m = of((0..n).map(|_| if rng.uniform() < heavy { rng.latency(15.7e6, 0.08) } else { rng.latency(3.2e6, 0.08) }));
            assert_eq!(m.len(), 2, "{m:?}");
            assert!((m[0].ns / 3.2e6 - 1.0).abs() < 0.1 && (m[1].ns / 15.7e6 - 1.0).abs() < 0.1, "{m:?}");
            assert!((m[1].weight - heavy).abs() < 0.02, "{m:?}");
            assert!((m[0].weight + m[1].weight - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn a_mode_needs_min_values_of_its_own() {
        // Two attempts a decade apart: one distribution, not two modes.
        assert_eq!(modes([(1_000, 1), (100_000, 1)]).len(), 1);
        // Two piles a decade apart: one pile short of MIN_VALUES folds into the other ...
        let piles = |a: u64, b: u64| modes([(1_000, a), (100_000, b)]);
        assert_eq!(piles(MIN_VALUES - 1, 200).len(), 1);
        assert_eq!(piles(MIN_VALUES, MIN_VALUES - 1).len(), 1);
        // ... and at MIN_VALUES each, they are two modes of half the values.
        let m = piles(MIN_VALUES, MIN_VALUES);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m.iter().all(|m| (m.weight - 0.5).abs() < 1e-9), "{m:?}");
    }

    #[test]
    fn few_unimodal_values_are_never_multimodal() {
        // Samples of the sizes a short run gives, 200 seeds each; before MIN_VALUES a quarter of
        // the σ 0.3 samples of 2 to 5 values, and of those with a 2% tail of 20, were "modes".
        type Draw = fn(&mut Rng) -> u64;
        let shapes: [(&str, Draw); 2] = [
            ("log-normal σ 0.3", |r| r.latency(10_000.0, 0.3)),
            ("σ 0.15, 2% tail 10× slower", |r| if r.uniform() < 0.02 { r.latency(100_000.0, 0.5) } else { r.latency(10_000.0, 0.15) }),
        ];
        for (name, draw) in shapes {
            for n in [2, 3, 5, 10, 20, 30, 50, 100, 200] {
                let mut rng = Rng(n);
                for _ in 0..200 {
                    let m = of((0..n).map(|_| draw(&mut rng)));
                    assert_eq!(m.len(), 1, "{name}, {n} values: {m:?}");
                }
            }
        }
    }

    #[test]
    fn a_real_second_mode_is_found_from_a_hundred_values() {
        // 30% of the attempts 5× slower: found in almost every sample of 100 values.
        let mut rng = Rng(9);
        let found = (0..200)
            .filter(|_| {
                of((0..100).map(|_| if rng.uniform() < 0.3 { rng.latency(50_000.0, 0.08) } else { rng.latency(10_000.0, 0.08) })).len() == 2
            })
            .count();
        assert!(found >= 180, "found in {found} of 200");
    }

    #[test]
    fn empty_and_single() {
        assert!(modes([]).is_empty());
        let m = modes([(900, 5)]);
        assert_eq!(m.len(), 1);
        assert!((m[0].ns / 900.0 - 1.0).abs() < 0.03 && m[0].weight == 1.0, "{m:?}");
    }
}
