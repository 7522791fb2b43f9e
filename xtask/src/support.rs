//! The support table in `docs/support.md`: per guest kernel and architecture, what execprof
//! did there, taken from the vm-test guests' own results (their report, `doctor` and agent),
//! never written by hand. `vm-test` keeps each guest's row under `target/vm/support/`;
//! `cargo xtask ci` compares the table its guests give with the committed one and rewrites
//! the file when they differ, so the table cannot drift from what was tested.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use execprof::{
    analysis::outcome::Outcome,
    model::meta::{Boundaries, Mechanism},
};
use serde::{Deserialize, Serialize};

use crate::vm::GuestRun;

/// The manual's page that holds the table.
pub const PAGE: &str = "docs/support.md";
const BEGIN: &str = "<!-- support table: written by `cargo xtask ci` from its guests' results; do not edit -->";
const END: &str = "<!-- end of the support table -->";

/// One guest's line of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// `x86_64` or `aarch64`.
    pub machine: String,
    /// The kernel line, e.g. `6.12`.
    pub line: String,
    /// The Debian package booted.
    pub package: String,
    /// How the calls' boundaries were hooked.
    pub boundaries: String,
    /// Exact mode's functions by mechanism, e.g. `19 fentry, 8 kprobe`.
    pub exact: String,
    /// The phase model's functions exact mode could not probe (inlined or absent).
    pub not_probed: Vec<String>,
    /// Whether successful execs split at the point of no return (`sched_prepare_exec`).
    pub split: bool,
    /// What the agent counted of a known chain, e.g. `120/120 ENOENT, 20/20 success`.
    pub agent: String,
    /// What the kernel's BPF lacks (what runs instead is in docs/modes.md).
    pub lacks: Vec<String>,
}

impl Row {
    /// The row of a guest that passed its checks (`chain`: the agent's chain's steps and misses).
    pub fn of(run: &GuestRun, (steps, misses): (u64, u64)) -> Row {
        let r = &run.report;
        let line = r.meta.kernel.version().map_or_else(|| run.kernel.clone(), |(a, b)| format!("{a}.{b}"));
        let functions = r.meta.exact_plan.as_ref().map_or(&[][..], |p| p.functions.as_slice());
        let by = |m: Mechanism| functions.iter().filter(|f| f.mechanism == m).count();
        let exact = [Mechanism::Fentry, Mechanism::Kprobe]
            .into_iter()
            .filter(|&m| by(m) > 0)
            .map(|m| format!("{} {}", by(m), m.label()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut not_probed = r.meta.exact_plan.as_ref().map(|p| p.absent.clone()).unwrap_or_default();
        not_probed.sort();
        let a = &run.agent;
        let agent = format!(
            "{}/{} ENOENT, {}/{} success, by {}",
            a.chain_calls(Outcome::Enoent),
            steps * misses,
            a.chain_calls(Outcome::Success),
            steps,
            boundaries(a.boundaries)
        );
        // doctor's detail: "no X (5.12): what runs instead; no Y …; nothing is lost for it".
        let lacks = if run.bpf_features.ok {
            Vec::new()
        } else {
            run.bpf_features
                .detail
                .split("; ")
                .filter(|p| p.starts_with("no "))
                .map(|p| p.split(':').next().unwrap_or(p).trim_start_matches("no ").to_owned())
                .collect()
        };
        Row {
            machine: run.arch.machine_name().to_owned(),
            line,
            package: run.package.clone(),
            boundaries: boundaries(r.meta.mode.boundaries).to_owned(),
            exact,
            not_probed,
            split: r.meta.machine.sched_prepare_exec,
            agent,
            lacks,
        }
    }

    fn sort_key(&self) -> (String, Vec<u32>) {
        (self.machine.clone(), self.line.split('.').filter_map(|x| x.parse().ok()).collect())
    }
}

/// The table's name for a way of hooking the calls' boundaries.
fn boundaries(b: Boundaries) -> &'static str {
    match b {
        Boundaries::Fentry => "fentry/fexit",
        Boundaries::RawTracepoints => "raw tracepoints",
        Boundaries::SyscallEvents => "per-syscall events",
    }
}

/// The directory `vm-test` keeps its guests' rows in.
pub fn rows_dir() -> PathBuf {
    crate::vm::cache_dir().join("support")
}

/// Keeps a guest's row for `cargo xtask support-table`.
pub fn save(row: &Row) -> Result<()> {
    std::fs::create_dir_all(rows_dir())?;
    let path = rows_dir().join(format!("{}-{}.json", row.machine, row.line));
    std::fs::write(&path, serde_json::to_string_pretty(row)?).with_context(|| format!("writing {}", path.display()))
}

/// The rows `vm-test` kept.
pub fn saved() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let dir = rows_dir();
    let entries =
        std::fs::read_dir(&dir).with_context(|| format!("no guest rows in {}: run `cargo xtask vm-test` first", dir.display()))?;
    for e in entries {
        let path = e?.path();
        let text = std::fs::read_to_string(&path)?;
        rows.push(serde_json::from_str(&text).with_context(|| format!("{} is not a support row", path.display()))?);
    }
    Ok(rows)
}

/// The table's markdown, rows sorted by machine and kernel line.
pub fn render(rows: &[Row]) -> String {
    let mut rows = rows.to_vec();
    rows.sort_by_key(Row::sort_key);
    let mut out = String::from(
        "| kernel | machine | boundaries | exact functions | not probed (inlined or absent) | split at the point of no return | agent (untraced chain) | the kernel's BPF lacks |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let list =
        |v: &[String]| if v.is_empty() { "—".to_owned() } else { v.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ") };
    for r in &rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.line,
            r.machine,
            r.boundaries,
            r.exact,
            list(&r.not_probed),
            if r.split { "yes" } else { "no (`sched_prepare_exec` is 6.10+)" },
            r.agent,
            if r.lacks.is_empty() { "—".to_owned() } else { r.lacks.join("; ") },
        ));
    }
    out
}

/// `page` with its table replaced by `table`; an error when the page has no markers.
fn with_table(page: &str, table: &str) -> Result<String> {
    let (Some(b), Some(e)) = (page.find(BEGIN), page.find(END)) else {
        bail!("{PAGE} lacks the support table's markers ({BEGIN} … {END})");
    };
    Ok(format!("{}{BEGIN}\n{table}{}", &page[..b], &page[e..]))
}

/// Writes `rows`' table into the page under `root`; returns whether it changed.
pub fn write(root: &Path, rows: &[Row]) -> Result<bool> {
    let path = root.join(PAGE);
    let page = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let new = with_table(&page, &render(rows))?;
    if new == page {
        return Ok(false);
    }
    std::fs::write(&path, new)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(machine: &str, line: &str) -> Row {
        Row {
            machine: machine.into(),
            line: line.into(),
            package: format!("linux-image-{line}"),
            boundaries: "fentry/fexit".into(),
            exact: "19 fentry, 8 kprobe".into(),
            not_probed: vec!["exec_binprm".into()],
            split: line != "5.10",
            agent: "120/120 ENOENT, 20/20 success".into(),
            lacks: if line == "5.10" { vec!["BPF compare-and-exchange (Linux 5.12)".into()] } else { vec![] },
        }
    }

    /// Lines sort as numbers (5.10 before 6.1, 6.12 before 7.3), x86_64 and aarch64 apart.
    #[test]
    fn rows_sort_by_machine_then_kernel_line_as_numbers() {
        let t = render(&[row("x86_64", "7.3"), row("x86_64", "5.10"), row("aarch64", "6.12"), row("x86_64", "6.12"), row("x86_64", "6.1")]);
        let lines: Vec<&str> = t.lines().skip(2).map(|l| l.split(" | ").next().unwrap()).collect();
        assert_eq!(lines, ["| 6.12", "| 5.10", "| 6.1", "| 6.12", "| 7.3"]);
        assert!(
            t.contains("| 5.10 | x86_64 | fentry/fexit | 19 fentry, 8 kprobe | `exec_binprm` | no (`sched_prepare_exec` is 6.10+) |"),
            "{t}"
        );
        assert!(t.contains("| BPF compare-and-exchange (Linux 5.12) |"), "{t}");
    }

    /// Only the table between the markers changes; a page without them is an error.
    #[test]
    fn the_table_replaces_only_what_is_between_its_markers() {
        let page = format!("# Support\n\nintro\n\n{BEGIN}\nold\n{END}\n\nafter\n");
        let new = with_table(&page, "| t |\n").unwrap();
        assert_eq!(new, format!("# Support\n\nintro\n\n{BEGIN}\n| t |\n{END}\n\nafter\n"));
        assert_eq!(with_table(&new, "| t |\n").unwrap(), new);
        assert!(with_table("no markers", "x").is_err());
    }
}
