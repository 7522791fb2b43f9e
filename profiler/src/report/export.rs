//! Files people look at: folded stacks (`flamegraph.pl` / inferno input) and flame graph SVGs,
//! one pair per exec outcome. (The Perfetto trace is written as events arrive: `perfetto`.)
use std::{fs, io::BufWriter, path::Path};

use anyhow::{Context as _, Result};

use crate::analysis::{attribution::SampledAttribution, outcome::Outcome};

/// An outcome's label as a file name: `enoent`, `other-errno`, `clone-fork`.
pub fn outcome_file_name(o: Outcome) -> String {
    let name: String = o.label().to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    name.trim_matches('-').replace("--", "-")
}

/// Writes `<outcome>.folded` and `<outcome>.svg` for every outcome that has samples.
pub fn write_folded(dir: &Path, sampled: &SampledAttribution) -> Result<Vec<std::path::PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for oc in sampled.outcomes.iter().filter(|o| o.samples > 0) {
        let name = outcome_file_name(oc.outcome);
        let lines: Vec<String> = oc.folded.iter().map(|(stack, n)| format!("{stack} {n}")).collect();
        let folded = dir.join(format!("{name}.folded"));
        fs::write(&folded, lines.join("\n") + "\n").with_context(|| format!("writing {}", folded.display()))?;
        let svg = dir.join(format!("{name}.svg"));
        let file = fs::File::create(&svg).with_context(|| format!("creating {}", svg.display()))?;
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = format!("execprof: {} exec attempts ({} samples)", oc.outcome.label(), oc.samples);
        opts.count_name = "samples".into();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), BufWriter::new(file))
            .with_context(|| format!("rendering {}", svg.display()))?;
        written.extend([folded, svg]);
    }
    Ok(written)
}
