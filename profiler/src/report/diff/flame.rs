//! Differential flame graphs per outcome: each stack's time per attempt in A and in B
//! (samples × the outcome's mean / its samples, so different rates, lengths and attempt counts
//! compare), in picoseconds so rare stacks keep a width. Widths are B's; red grew, blue shrank.
use std::{collections::BTreeMap, fs, io::BufWriter, path::Path};

use anyhow::{Context as _, Result};

use crate::{analysis::attribution::OutcomeAttribution, report::RunReport};

/// Each stack's picoseconds per attempt.
fn per_attempt(o: &OutcomeAttribution) -> BTreeMap<&str, u64> {
    let ps_per_sample = if o.samples == 0 { 0.0 } else { o.mean_ns * 1_000.0 / o.samples as f64 };
    o.folded.iter().map(|(stack, n)| (stack.as_str(), (*n as f64 * ps_per_sample).round() as u64)).collect()
}

/// `stack a b` lines (inferno's differential input).
pub(super) fn differential_lines(a: &OutcomeAttribution, b: &OutcomeAttribution) -> Vec<String> {
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
    let (Some(sa), Some(sb)) = (&a.analysis.sampled, &b.analysis.sampled) else {
        anyhow::bail!("differential flame graphs need samples on both sides; record both runs with sampling on (--sample-hz above 0)");
    };
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for oa in sa.outcomes.iter().filter(|o| o.samples > 0) {
        let Some(ob) = sb.outcomes.iter().find(|o| o.outcome == oa.outcome && o.samples > 0) else { continue };
        let lines = differential_lines(oa, ob);
        let name = crate::report::export::outcome_file_name(oa.outcome);
        let folded = dir.join(format!("{name}.diff.folded"));
        fs::write(&folded, lines.join("\n") + "\n").with_context(|| format!("writing {}", folded.display()))?;
        let svg = dir.join(format!("{name}.diff.svg"));
        let file = fs::File::create(&svg).with_context(|| format!("creating {}", svg.display()))?;
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = format!("execprof diff: {} (B widths; red: more time per attempt in B, blue: less)", oa.outcome.label());
        opts.count_name = "ps per attempt".into();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), BufWriter::new(file))
            .with_context(|| format!("rendering {}", svg.display()))?;
        written.extend([folded, svg]);
    }
    Ok(written)
}
