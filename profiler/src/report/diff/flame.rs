//! Differential flame graphs per outcome: each stack's time per attempt in A and in B
//! (samples × the outcome's mean / its samples, so different rates, lengths and attempt counts
//! compare), in picoseconds so rare stacks keep a width. Widths are B's; red grew, blue shrank.
//! Over rounds (`diff --round`), each side's time per attempt of a stack is its mean over the
//! side's rounds that sampled the outcome.
use std::{collections::BTreeMap, fs, io::BufWriter, path::Path};

use anyhow::{Context as _, Result};

use crate::{
    analysis::{
        attribution::{OutcomeAttribution, SampledAttribution},
        outcome::Outcome,
    },
    report::RunReport,
};

/// Each stack's picoseconds per attempt, its mean over `rounds` (0 in a round without it).
fn per_attempt<'o>(rounds: &[&'o OutcomeAttribution]) -> BTreeMap<&'o str, u64> {
    let mut sum: BTreeMap<&str, f64> = BTreeMap::new();
    for o in rounds {
        let ps_per_sample = if o.samples == 0 { 0.0 } else { o.mean_ns * 1_000.0 / o.samples as f64 };
        for (stack, n) in &o.folded {
            *sum.entry(stack.as_str()).or_default() += *n as f64 * ps_per_sample;
        }
    }
    let rounds = rounds.len().max(1) as f64;
    sum.into_iter().map(|(stack, ps)| (stack, (ps / rounds).round() as u64)).collect()
}

/// `stack a b` lines (inferno's differential input).
#[cfg(test)]
pub(super) fn differential_lines(a: &OutcomeAttribution, b: &OutcomeAttribution) -> Vec<String> {
    differential_lines_over(&[a], &[b])
}

/// `stack a b` lines over rounds: each side's mean over its rounds.
fn differential_lines_over(a: &[&OutcomeAttribution], b: &[&OutcomeAttribution]) -> Vec<String> {
    let (fa, fb) = (per_attempt(a), per_attempt(b));
    let mut stacks: Vec<&str> = fa.keys().chain(fb.keys()).copied().collect();
    stacks.sort_unstable();
    stacks.dedup();
    stacks
        .into_iter()
        .map(|s| (s, fa.get(s).copied().unwrap_or(0), fb.get(s).copied().unwrap_or(0)))
        .filter(|(_, x, y)| *x > 0 || *y > 0)
        .map(|(s, x, y)| format!("{s} {x} {y}"))
        .collect()
}

/// Writes `<outcome>.diff.folded` and `<outcome>.diff.svg` for every outcome sampled on both
/// sides. Returns the files written.
pub fn write_differential(dir: &Path, a: &RunReport, b: &RunReport) -> Result<Vec<std::path::PathBuf>> {
    write_differential_rounds(dir, &[a], &[b])
}

/// [`write_differential`] over rounds: `a` and `b` are each side's rounds' reports, and a
/// stack's time per attempt on a side its mean over the side's rounds that sampled the outcome.
pub fn write_differential_rounds(dir: &Path, a: &[&RunReport], b: &[&RunReport]) -> Result<Vec<std::path::PathBuf>> {
    fn sampled<'r>(side: &[&'r RunReport]) -> Vec<&'r SampledAttribution> {
        side.iter().filter_map(|r| r.analysis.sampled.as_ref()).collect()
    }
    fn of<'s>(side: &[&'s SampledAttribution], outcome: Outcome) -> Vec<&'s OutcomeAttribution> {
        side.iter().filter_map(|s| s.outcomes.iter().find(|o| o.outcome == outcome && o.samples > 0)).collect()
    }
    let (sa, sb) = (sampled(a), sampled(b));
    if sa.is_empty() || sb.is_empty() {
        anyhow::bail!("differential flame graphs need samples on both sides; record both runs with sampling on (--sample-hz above 0)");
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    // Every outcome sampled in any of A's rounds, in the order they first appear.
    let mut outcomes = Vec::new();
    for o in sa.iter().flat_map(|s| &s.outcomes).filter(|o| o.samples > 0) {
        if !outcomes.contains(&o.outcome) {
            outcomes.push(o.outcome);
        }
    }
    let rounds = a.len().max(b.len());
    for outcome in outcomes {
        let (oa, ob) = (of(&sa, outcome), of(&sb, outcome));
        if ob.is_empty() {
            continue;
        }
        let lines = differential_lines_over(&oa, &ob);
        let name = crate::report::export::outcome_file_name(outcome);
        let folded = dir.join(format!("{name}.diff.folded"));
        fs::write(&folded, lines.join("\n") + "\n").with_context(|| format!("writing {}", folded.display()))?;
        let svg = dir.join(format!("{name}.diff.svg"));
        let file = fs::File::create(&svg).with_context(|| format!("creating {}", svg.display()))?;
        let mut opts = inferno::flamegraph::Options::default();
        let over = if rounds > 1 { format!(", mean over {rounds} rounds") } else { String::new() };
        opts.title = format!("execprof diff: {} (B widths; red: more time per attempt in B, blue: less{over})", outcome.label());
        opts.count_name = "ps per attempt".into();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), BufWriter::new(file))
            .with_context(|| format!("rendering {}", svg.display()))?;
        written.extend([folded, svg]);
    }
    Ok(written)
}
