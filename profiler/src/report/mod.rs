//! The run's results: one serializable struct for `--json`, and its terminal rendering.
//! Rendering is a pure function of the struct, so it is snapshot-tested without root, and a
//! live run and the replay of its recording render alike but for the lines that say how the
//! report was made.
pub mod agent;
pub mod diff;
pub mod export;
#[cfg(test)]
pub(crate) mod test_support;
mod who_pays;
use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    analysis::{
        Analysis,
        attribution::{Estimate, SampledAttribution},
        exact::ExactTiming,
        outcome::Outcome,
        stats::Distribution,
    },
    model::meta::{ExactPlan, ExitStatus, LossCounters, RunEnd, RunMeta, TraceEnd, Unjoined},
    model::names::{errno_name, escape_name, shell_command, terminal_safe},
};

/// Bumped when a field of the JSON changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 2;

/// How a report was made: the only part that differs between a live run's report and the
/// report of its recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Source {
    /// Traced now; `recording` is where the records were also written; `ready_ms`: from the
    /// end of the traced tree to the report.
    Live {
        /// The recording written alongside, when one was.
        recording: Option<RecordingFacts>,
        /// From the end of the traced tree to the report, in ms.
        ready_ms: u64,
    },
    /// Replayed from a recording in `ready_ms`.
    Replay {
        /// The recording read.
        recording: RecordingFacts,
        /// From opening the recording to the report, in ms.
        ready_ms: u64,
    },
}

/// The recording a report was written to or read from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RecordingFacts {
    /// The recording's path, as given.
    pub path: String,
    /// The recording's size, in bytes.
    pub bytes: u64,
    /// Records it holds (read from it, for a recording cut short).
    pub records: u64,
    /// Set when the recording read was cut short (a run killed, a disk full): where, and how
    /// much of the run the report covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<RecordingCut>,
}

/// Where a recording read back ends early: the report covers its intact frames, the prefix
/// of the run they hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RecordingCut {
    /// The intact frames end here: the report covers the file's bytes before this offset (of
    /// [`RecordingFacts::bytes`]).
    pub at_byte: u64,
    /// How far into the run the intact records reach, in ns from the command's release; None
    /// when the cut came before the first record.
    pub covered_ns: Option<u64>,
    /// Whether the kernel symbol table was before the cut (without it, sampled stacks are
    /// kernel addresses without names).
    pub symbols: bool,
    /// Where and how the file ends, as the reader found it.
    pub detail: String,
}

/// One run's report: what `--json` writes and the terminal rendering shows.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RunReport {
    /// The JSON schema's version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// What ran and how it was traced (as the recording's head has it), at the top level of
    /// the JSON.
    #[serde(flatten)]
    pub meta: RunMeta,
    /// How the traced command ended.
    pub exit_status: ExitStatus,
    /// From release of the command to its exit.
    pub command_wall_ns: u64,
    /// CPU time of the launched command's reaped processes (see `RunEnd::command_cpu_ns`).
    #[serde(default)]
    pub command_cpu_ns: u64,
    /// Everything the analysis found.
    pub analysis: Analysis,
    /// Loss counters: the kernel's, then the pieces user space could not join.
    pub losses: LossCounters,
    /// Records user space could not decode (a version mismatch).
    pub undecodable_records: u64,
    /// False when anything was lost, the run was cut short or the recording read was: the
    /// figures are then not the whole run's.
    pub complete: bool,
    /// execprof's own programs' cost, and the part of each outcome's latency inside the
    /// attempt's window (None where the kernel keeps no BPF run-time statistics).
    pub probe_cost: Option<crate::analysis::probe_cost::ProbeCost>,
    /// Exec attempts and fork-family calls not seen whole: enter or exit record dropped (both,
    /// for most calls lost to a full ring buffer), or thread gone mid-call. What the losses cost
    /// in calls, not records: exact, because the kernel counts every enter it drops. The
    /// outcome, file and fork counts are lower bounds by this much.
    pub attempts_affected: u64,
    /// Set when the run was cut short: why.
    pub partial: Option<String>,
    /// Set when the run's recording could not be written to the end (a full disk, an I/O
    /// error): the figures here are the whole run's, the recording holds a prefix of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording_error: Option<String>,
    /// How the report was made: live or from a recording.
    pub source: Source,
}

impl RunReport {
    /// The report of a run from its metadata, how it ended and its analysis.
    pub fn new(meta: RunMeta, end: RunEnd, analysis: Analysis, unjoined: &Unjoined, source: Source) -> Self {
        let losses = end.kernel_losses.with_unjoined(unjoined);
        let cut = matches!(&source, Source::Replay { recording: RecordingFacts { cut: Some(_), .. }, .. });
        let complete = losses.total() == 0 && end.undecodable_records == 0 && end.partial.is_none() && !cut;
        let attempts_affected = calls_not_seen_whole(&losses, unjoined);
        let probe_cost = crate::analysis::probe_cost::estimate(&end.program_costs, &analysis, meta.exact_plan.as_ref());
        Self {
            schema_version: SCHEMA_VERSION,
            meta,
            exit_status: end.exit_status,
            command_wall_ns: end.command_wall_ns,
            command_cpu_ns: end.command_cpu_ns,
            analysis,
            losses,
            undecodable_records: end.undecodable_records,
            complete,
            probe_cost,
            attempts_affected,
            partial: end.partial,
            recording_error: None,
            source,
        }
    }

    /// The recording this report was read from (None for a live run).
    pub fn recording_read(&self) -> Option<&RecordingFacts> {
        match &self.source {
            Source::Replay { recording, .. } => Some(recording),
            Source::Live { .. } => None,
        }
    }

    /// Where the recording this report was read from was cut, when it was.
    pub fn recording_cut(&self) -> Option<&RecordingCut> {
        self.recording_read().and_then(|f| f.cut.as_ref())
    }
}

impl RecordingFacts {
    /// Where a recording read cut short was cut, in the file and in the run: `at byte N of M
    /// (after 1.23 s of the run)`; None for a whole one.
    pub fn cut_position(&self) -> Option<String> {
        let c = self.cut.as_ref()?;
        let when = match c.covered_ns {
            Some(ns) => format!("after {} of the run", human_ns(ns as f64)),
            None => "before the run's first record".to_owned(),
        };
        Some(format!("at byte {} of {} ({when})", c.at_byte, self.bytes))
    }
}

/// Calls made but not seen whole. Every call has one enter: those the kernel dropped, plus those
/// seen whose exit never joined them (exit dropped, or the thread gone). An exit without an
/// enter is one of the dropped enters' calls, unless more such exits came than enters were
/// dropped (tracing began mid-call).
pub(crate) fn calls_not_seen_whole(losses: &LossCounters, unjoined: &Unjoined) -> u64 {
    use profiler_common::counter::{EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED};
    let enters_dropped = losses.kernel(EXEC_ENTER_DROPPED) + losses.kernel(FORK_ENTER_DROPPED);
    enters_dropped + unjoined.enter_without_exit + unjoined.abandoned + unjoined.exit_without_enter.saturating_sub(enters_dropped)
}

/// Human time with three significant digits: 950 ns, 1.23 µs, 45.6 µs, 1.20 ms, 2.34 s.
pub fn human_ns(ns: f64) -> String {
    if ns < 0.0 {
        // A negative duration in its own unit: -2.10 ms, not -2100000 ns.
        return format!("-{}", human_ns(-ns));
    }
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" {
        format!("{v:.0} {unit}")
    } else if v < 10.0 {
        format!("{v:.2} {unit}")
    } else if v < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// A change and its interval, each signed in its own unit: `-2.49 µs [-2.68 µs … -2.30 µs]`.
pub fn signed_ci(i: &crate::analysis::stats::Interval) -> String {
    let sign = |v: f64| if v > 0.0 { format!("+{}", human_ns(v)) } else { human_ns(v) };
    format!("{} [{} … {}]", sign(i.value), sign(i.low), sign(i.high))
}

/// A figure and its interval in the figure's unit: `41.1 [41.0–41.2] µs`.
pub fn ci_cell(value: f64, low: f64, high: f64) -> String {
    let text = human_ns(value);
    let Some((_, unit)) = text.rsplit_once(' ') else { return text };
    let scale = match unit {
        "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => 1.0,
    };
    let decimals = text.split_once('.').map_or(0, |(_, rest)| rest.split(' ').next().unwrap_or("").len());
    let n = |v: f64| format!("{:.*}", decimals, v / scale);
    format!("{} [{}–{}] {unit}", n(value), n(low), n(high))
}

/// Header of the cells [`dist_cells`] writes.
const DIST_HEADER: [&str; 6] = ["min", "p50 [95% CI]", "p90", "p99", "max", "mean"];

fn dist_header() -> String {
    let h = DIST_HEADER;
    format!("{:>9} {:>24} {:>9} {:>9} {:>9} {:>9}", h[0], h[1], h[2], h[3], h[4], h[5])
}

fn dist_cells(d: &Distribution) -> String {
    let c = |ns: u64| human_ns(ns as f64);
    // One value has no spread: its "interval" would be the value itself, zero wide.
    let median = if d.count < 2 {
        format!("{} (n={})", c(d.p50_ns), d.count)
    } else {
        ci_cell(d.p50_ns as f64, d.p50_low_ns as f64, d.p50_high_ns as f64)
    };
    format!("{:>9} {:>24} {:>9} {:>9} {:>9} {:>9}", c(d.min_ns), median, c(d.p90_ns), c(d.p99_ns), c(d.max_ns), human_ns(d.mean_ns))
}

/// The report as the terminal shows it.
pub fn render(r: &RunReport) -> String {
    let mut o = String::new();
    render_header(&mut o, r);
    render_outcomes(&mut o, r);
    render_success_split(&mut o, r);
    render_chain(&mut o, r);
    render_fork_calls(&mut o, r);
    who_pays::render_callers(&mut o, r);
    who_pays::render_searches(&mut o, r);
    if let Some(x) = &r.analysis.exact {
        render_exact(&mut o, x, r.meta.exact_plan.as_ref());
    }
    if let Some(s) = &r.analysis.sampled {
        render_sampled(&mut o, s, r.meta.sample_hz);
    }
    render_agreement(&mut o, r);
    render_files(&mut o, r);
    render_probe_cost(&mut o, r);
    render_losses(&mut o, r);
    o
}

/// What ran, where, how it was measured, how it ended; and how this report was made.
fn render_header(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    if let Some(why) = &r.partial {
        let _ = writeln!(o, "PARTIAL   {why}: the figures cover the run up to that point");
    }
    if let Some(e) = &r.recording_error {
        let _ = writeln!(o, "RECORDING INCOMPLETE {e}: the figures below are the whole run's, the recording holds what was written before");
    }
    let cut = r.recording_cut();
    if let (Some(c), Some(at)) = (cut, r.recording_read().and_then(RecordingFacts::cut_position)) {
        let _ = writeln!(o, "RECORDING CUT {at}: the report covers the intact prefix; the run was killed or its disk filled up");
        if !c.symbols && r.meta.sample_hz > 0 {
            let _ = writeln!(o, "          the kernel's symbol table was written after the cut: sampled stacks have no function names");
        }
    }
    // A cut recording's unjoined calls are mostly the calls open at the cut: the line above says it.
    if r.losses.total() > 0 && cut.is_none() {
        let seen = a.attempts + a.fork_calls.iter().map(|f| f.count).sum::<u64>();
        let _ = writeln!(
            o,
            "INCOMPLETE {} of {} exec attempts and fork-family calls not seen whole ({} records lost or unjoined: see the table at the end): every count below is a lower bound, and the figures are not the whole run's",
            r.attempts_affected,
            seen + r.attempts_affected,
            r.losses.total()
        );
        let skipped = r.losses.named(crate::model::meta::RUNS_SKIPPED);
        if skipped > 0 {
            let _ = writeln!(
                o,
                "           and the kernel skipped {skipped} runs of execprof's programs (a thread switched out inside one holds it on its CPU): what they would have seen is in no count, and the total above may be off by as many calls"
            );
        }
    }
    let running = r.meta.scope.is_running_system();
    let what = if running { "the traced processes" } else { "the traced process tree" };
    let _ = writeln!(o, "execprof {} — exec attempts of {what}", r.meta.execprof_version);
    match &r.meta.chain {
        Some(c) => {
            let _ = writeln!(o, "command   built-in exec chain: {} ({})", c.describe(), escape_name(r.meta.program.as_bytes()));
        }
        None if running => {
            let _ = writeln!(o, "scope     {}", r.meta.scope.describe());
            if !r.meta.command.is_empty() {
                let _ = writeln!(o, "window    while {} ran", shell_command(&r.meta.argv()));
            }
        }
        None => {
            let _ = writeln!(o, "command   {}", shell_command(&r.meta.argv()));
        }
    }
    let _ = writeln!(
        o,
        "kernel    {} ({}), BTF {}",
        r.meta.kernel.release,
        r.meta.kernel.machine,
        if r.meta.kernel.btf { "yes" } else { "no" }
    );
    let _ = writeln!(o, "timing    {}", r.meta.mode.timing);
    let _ = writeln!(o, "functions {}", r.meta.mode.attribution);
    let ended = match r.exit_status {
        ExitStatus::Unknown => match r.recording_cut().and_then(|c| c.covered_ns) {
            Some(ns) => format!("unknown (the recording ends {} into the run)", human_ns(ns as f64)),
            None => "unknown (the recording ends before the run's first record)".to_owned(),
        },
        ExitStatus::Traced(end) => {
            let why = match end {
                TraceEnd::AllExited => "until every traced process exited",
                TraceEnd::Duration => "for --duration",
                TraceEnd::Signal => "until a signal (Ctrl-C) stopped it",
            };
            format!("traced {} ({why})", human_ns(r.command_wall_ns as f64))
        }
        status => format!("{status} after {}", human_ns(r.command_wall_ns as f64)),
    };
    // The analysis counts the launched process as the first; running processes were not.
    let processes = if running {
        format!("{} process(es) started while tracing", a.processes.saturating_sub(1))
    } else {
        format!("{} process(es)", a.processes)
    };
    let _ = writeln!(o, "result    {ended}; {processes}, {} thread(s) created, {} exec attempts", a.threads_created, a.attempts);
    if let Some(c) = &a.compat {
        render_compat(o, c, a, &r.meta.kernel.machine);
    }
    if r.meta.repeats > 1 {
        let _ =
            writeln!(o, "repeats   {} runs, each traced on its own, merged (run --repeat): figures are over all of them", r.meta.repeats);
    }
    for w in &r.meta.warnings {
        let _ = writeln!(o, "warning   {w}");
    }
    match &r.source {
        Source::Live { recording: Some(f), ready_ms } => {
            let _ = writeln!(
                o,
                "report    live, ready {ready_ms} ms after the traced tree ended; recorded to {}",
                recording_facts(f, a.attempts)
            );
        }
        Source::Live { recording: None, ready_ms } => {
            let _ = writeln!(o, "report    live, ready {ready_ms} ms after the traced tree ended");
        }
        Source::Replay { recording: f, ready_ms } => {
            let _ = writeln!(o, "report    from the recording {} in {ready_ms} ms", recording_facts(f, a.attempts));
        }
    }
}

/// How the run splits between the ABIs, when 32-bit callers took part (every other figure
/// counts both); `machine` is the recording's (`uname -m`), which names the 32-bit ABI.
fn render_compat(o: &mut String, c: &crate::analysis::CompatSummary, a: &crate::analysis::Analysis, machine: &str) {
    let abi = if machine == "aarch64" { "AArch32" } else { "ia32" };
    let forks: u64 = a.fork_calls.iter().map(|f| f.count).sum();
    let mean = |label: &str, ns: Option<f64>| ns.map(|ns| format!("{label} {}", human_ns(ns)));
    let means: Vec<String> = [mean("failed", c.failed_mean_ns), mean("successful", c.success_mean_ns)].into_iter().flatten().collect();
    let means = if means.is_empty() { String::new() } else { format!("; mean {}", means.join(", ")) };
    let rest = if c.attempts == a.attempts && c.fork_calls == forks { "every call was 32-bit" } else { "the rest were 64-bit" };
    let _ = writeln!(
        o,
        "abi       32-bit ({abi}) callers made {} of {} exec attempts ({} successful{means}) and {} of {} fork-family calls; {rest}",
        c.attempts, a.attempts, c.successes, c.fork_calls, forks
    );
}

fn recording_facts(f: &RecordingFacts, attempts: u64) -> String {
    // Of a cut recording, the bytes read hold the attempts.
    let per = f.cut.as_ref().map_or(f.bytes, |c| c.at_byte) as f64 / attempts.max(1) as f64;
    format!("{} ({} bytes, {} records, {per:.1} bytes per exec attempt)", escape_name(f.path.as_bytes()), f.bytes, f.records)
}

/// ENOENT attempts of files that exist: not PATH misses.
fn render_enoent_existing(o: &mut String, a: &crate::analysis::Analysis) {
    if a.enoent_existing.is_empty() {
        return;
    }
    let n: u64 = a.enoent_existing.iter().map(|e| e.attempts).sum();
    let _ = writeln!(
        o,
        "  ENOENT of files that exist (not PATH misses): {n} attempt(s) of {} file(s); exec says \"No such file or directory\" for what the file needs:",
        a.enoent_existing.len()
    );
    for e in &a.enoent_existing {
        let _ = writeln!(o, "    {:>8}  {}: {}", e.attempts, e.filename, terminal_safe(&e.why));
    }
}

/// Latency and faults per outcome.
fn render_outcomes(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    let _ = writeln!(o, "\nExec attempts by outcome (latency = syscall enter to exit; p50 with its 95% order-statistic interval)");
    let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", "outcome", "count", dist_header(), "faults/att");
    for s in &a.outcomes {
        let faults = match (s.minor_faults_per_attempt, s.major_faults_per_attempt) {
            (Some(mi), Some(ma)) if ma > 0.0 => format!("{mi:.2}+{ma:.2}maj"),
            (Some(mi), _) => format!("{mi:.2}"),
            _ => "-".into(),
        };
        match &s.latency {
            Some(d) => {
                let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", s.outcome.label(), s.count, dist_cells(d), faults);
            }
            None => {
                // Not a distribution of zeros: there is none.
                let _ = writeln!(o, "  {:<12} {:>8}   no attempts", s.outcome.label(), s.count);
            }
        }
        if s.modes.len() > 1 {
            let list: Vec<String> = s.modes.iter().map(|m| format!("{} ({:.0}%)", human_ns(m.ns), m.weight * 100.0)).collect();
            let _ = writeln!(
                o,
                "  {:<12} MULTIMODAL: {} modes at {}: the mean describes none of them; compare modes or medians, not means",
                "",
                s.modes.len(),
                list.join(", ")
            );
        }
        if let Some(k) = &s.killed {
            let mut why = Vec::new();
            if k.by_other_threads_exec > 0 {
                why.push(format!("{} by another thread's exec (it won)", k.by_other_threads_exec));
            }
            if k.by_signal > 0 {
                why.push(format!("{} by a fatal signal", k.by_signal));
            }
            if k.unexplained > 0 {
                why.push(format!("{} returned ERESTARTNOINTR (a fatal signal)", k.unexplained));
            }
            let _ = writeln!(o, "  {:<12} killed mid-exec, not failed: {}", "", why.join(", "));
        }
        if matches!(s.outcome, Outcome::Other | Outcome::Abandoned | Outcome::CheckFailed) && !s.errnos.is_empty() {
            let list: Vec<String> = s.errnos.iter().map(|(e, n)| format!("{} ×{n}", errno_name(*e))).collect();
            let _ = writeln!(o, "  {:<12} {}", "", list.join(", "));
        }
    }
    render_enoent_existing(o, a);
}

/// Successful execs before and after the point of no return.
fn render_success_split(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    let successes = a.outcomes.iter().find(|s| s.outcome == Outcome::Success).map_or(0, |s| s.count);
    if a.success_split.is_none() && successes > 0 {
        let _ =
            writeln!(o, "\nSuccessful execs are not split at the point of no return: this kernel has no sched_prepare_exec (Linux 6.10+)");
    }
    if let Some(split) = &a.success_split {
        let _ = writeln!(o, "\nSuccessful execs around the point of no return (sched_prepare_exec)");
        let _ = writeln!(o, "  {:<30} {}", "part", dist_header());
        let _ = writeln!(o, "  {:<30} {}", "before (lookup, mm, args, load)", dist_cells(&split.before_ns));
        let _ = writeln!(o, "  {:<30} {}", "after (old mm out, new image)", dist_cells(&split.after_ns));
        if let Some(l) = &split.to_loaded_ns {
            let _ = writeln!(o, "  {:<30} {}", "  of which until image loaded", dist_cells(l));
        }
        if split.unsplit > 0 {
            let _ = writeln!(o, "  ({} successful execs had no point-of-no-return time)", split.unsplit);
        }
    }
}

/// Per chain step: failed attempts, the successful exec, user space.
fn render_chain(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    if let Some(c) = &a.chain {
        let _ = writeln!(
            o,
            "\nExec chain: {} steps in {} process(es), {:.2} failed attempts per step",
            c.steps, c.processes, c.failed_attempts_per_step
        );
        let _ = writeln!(o, "  {:<34} {:>9} {:>9} {:>9} {:>7}", "per step", "p50", "mean", "total", "share");
        let total = c.wall_ns.total_ns.max(1) as f64;
        let mut rows = vec![("kernel, failed attempts", &c.failed_ns), ("kernel, successful exec", &c.exec_ns)];
        if let (Some(b), Some(a)) = (&c.exec_before_ns, &c.exec_after_ns) {
            rows.push(("  before the point of no return", b));
            rows.push(("  after it", a));
        }
        if let Some(s) = &c.startup_ns {
            rows.push(("image start to main (loader, libc)", s));
        }
        rows.push(("off-CPU outside exec", &c.off_cpu_ns));
        rows.push(("user space + untraced syscalls", &c.rest_ns));
        rows.push(("step wall time", &c.wall_ns));
        for (label, d) in rows {
            let _ = writeln!(
                o,
                "  {:<34} {:>9} {:>9} {:>9} {:>6.1}%",
                label,
                human_ns(d.p50_ns as f64),
                human_ns(d.mean_ns),
                human_ns(d.total_ns as f64),
                100.0 * d.total_ns as f64 / total
            );
        }
        let steps_ns = c.wall_ns.total_ns;
        // A cut recording never says how long the command ran.
        if r.exit_status != ExitStatus::Unknown {
            let _ = writeln!(
                o,
                "  execprof's own clock: the command ran {}; its steps add up to {}; the difference ({}) is the launch exec, the last image's run and the exit",
                human_ns(r.command_wall_ns as f64),
                human_ns(steps_ns as f64),
                human_ns(r.command_wall_ns.saturating_sub(steps_ns) as f64)
            );
        }
        if c.steps_with_parts_over_wall > 0 {
            let _ = writeln!(
                o,
                "  {} step(s) had parts adding up to more than their wall time (overlapping windows); their rest counts as 0",
                c.steps_with_parts_over_wall
            );
        }
        if let Some(note) = &r.meta.startup_note {
            // Written by a recording, which anyone may have made.
            let _ = writeln!(o, "  {}", terminal_safe(note));
        }
    }
}

/// Fork-family calls of the tree.
fn render_fork_calls(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    if !a.fork_calls.is_empty() {
        let _ = writeln!(o, "\nFork-family calls (latency = syscall enter to exit in the caller)");
        let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", "syscall", "count", dist_header(), "faults/call");
        for sp in &a.fork_calls {
            let faults = sp.minor_faults_per_call.map_or("-".into(), |f| format!("{f:.2}"));
            let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", sp.syscall.label(), sp.count, dist_cells(&sp.latency), faults);
            if sp.failed > 0 {
                let _ = writeln!(o, "  {:<12} {} failed", "", sp.failed);
            }
        }
    }
}

/// Exact vs sampled phase shares.
fn render_agreement(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    for ag in &a.agreement {
        let _ = writeln!(o, "\nExact vs sampled: {} (shares of exec-phase time; {} samples)", ag.outcome.label(), ag.samples);
        let _ = writeln!(o, "  {:<10} {:>7} {:>22}  agree", "phase", "exact", "sampled [95% CI]");
        for p in &ag.phases {
            let _ = writeln!(
                o,
                "  {:<10} {:>6}% {:>22}  {}",
                p.phase,
                pct(p.exact_share),
                format!("{}% [{}–{}]", pct(p.sampled_share), pct(p.sampled_low), pct(p.sampled_high)),
                if p.agree { "yes" } else { "no" }
            );
        }
    }
}

/// Files exec'd.
fn render_files(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    if !a.files.is_empty() {
        let _ = writeln!(o, "\nFiles exec'd (most attempts first)");
        let _ = writeln!(o, "  {:>8} {:>9}  file", "attempts", "succeeded");
        for f in a.files.iter().take(10) {
            let _ = writeln!(o, "  {:>8} {:>9}  {}", f.attempts, f.successes, f.filename);
        }
        let more = a.files.len().saturating_sub(10) as u64 + a.files_not_listed;
        if more > 0 {
            let _ = writeln!(o, "  ... and {more} more (all in --json, up to {})", crate::analysis::MAX_FILES);
        }
    }
}

/// execprof's own cost, from the kernel's BPF run-time statistics.
fn render_probe_cost(o: &mut String, r: &RunReport) {
    let Some(p) = &r.probe_cost else { return };
    let _ = writeln!(o, "\nexecprof's own eBPF programs (kernel BPF run-time statistics, --probe-costs)");
    let _ = writeln!(o, "  {:<24} {:>10} {:>9} {:>9}", "program", "runs", "per run", "total");
    for c in p.programs.iter().take(12) {
        let _ = writeln!(o, "  {:<24} {:>10} {:>9} {:>9}", c.program, c.runs, human_ns(c.ns_per_run()), human_ns(c.run_ns as f64));
    }
    if p.programs.len() > 12 {
        let _ = writeln!(o, "  ... {} more programs (in --json)", p.programs.len() - 12);
    }
    let _ = writeln!(o, "  inside each attempt's measured latency (hooks between its timestamps, samples, exact-mode probes):");
    for x in &p.outcomes {
        let _ = writeln!(
            o,
            "    {:<12} {:>9} of {:>9} per attempt; without it {:>9}",
            x.outcome.label(),
            human_ns(x.probe_ns_per_attempt),
            human_ns(x.mean_ns),
            human_ns(x.mean_without_probes_ns)
        );
    }
    let _ = writeln!(
        o,
        "  (not counted: the parts of sys_enter/sys_exit inside the window, i.e. the enter record sent after the clock read and the exit path before it; sampling shows them in the \"execprof's own probes\" phase)"
    );
}

/// What was lost or unseen: always printed.
fn render_losses(o: &mut String, r: &RunReport) {
    let a = &r.analysis;
    let _ = writeln!(o, "\nLost or unseen (always printed; all should be 0)");
    let cut = r.recording_cut().is_some();
    if cut {
        let _ = writeln!(o, "  {:<34} not known: they are written at the run's end, after the cut", "kernel loss counters");
    }
    for (name, n) in &r.losses.0 {
        let _ = writeln!(o, "  {name:<34} {n}");
    }
    let _ = writeln!(o, "  {:<34} {}", "records not decodable", r.undecodable_records);
    let _ = writeln!(o, "  {:<34} {}", "file names truncated (kept)", a.filenames_truncated);
    let _ = writeln!(o, "  {:<34} {}", "file names unreadable (kept)", a.filenames_unreadable);
    if cut && r.losses.total() > 0 {
        let _ = writeln!(o, "  The recording was cut: a call still open at the cut counts as an enter without exit.");
    } else if r.losses.total() > 0 {
        let non_native = profiler_common::counter::NAMES[profiler_common::counter::NON_NATIVE_EXEC as usize];
        let blind = r.losses.0.iter().find(|(k, _)| k == non_native).map_or(0, |(_, n)| *n);
        if blind > 0 {
            let _ = writeln!(
                o,
                "  {blind} traced process(es) ran a 32-bit program, whose exec and fork calls the per-syscall events never see: run again with --boundaries tracepoint."
            );
        }
        if r.losses.total() > blind {
            let _ = writeln!(o, "  Some events were lost: raise --ring-mib, or reduce the workload, and run again.");
        }
    }
}

fn render_exact(o: &mut String, x: &ExactTiming, plan: Option<&ExactPlan>) {
    for oc in &x.outcomes {
        let _ = writeln!(
            o,
            "\nExact per-function times, on-CPU: {} ({} attempts, exact mean {})",
            oc.outcome.label(),
            oc.attempts,
            human_ns(oc.mean_ns)
        );
        if oc.functions.is_empty() {
            let _ = writeln!(o, "  no probed function ran inside these attempts");
        }
        let _ = writeln!(
            o,
            "  {:<28} {:<7} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  called from",
            "function", "probe", "phase", "calls/att", "p50", "p99", "mean", "self", "off-CPU"
        );
        for f in &oc.functions {
            let d = &f.inclusive_ns;
            // Which mechanism timed it: trampolines cost less than kprobes inside the time.
            let probe = plan
                .and_then(|p| p.functions.iter().find(|x| x.function == f.function))
                .map_or("-", |x| if x.mechanism == crate::model::meta::Mechanism::Fentry { "fentry" } else { "kprobe" });
            let _ = writeln!(
                o,
                "  {:<28} {:<7} {:<10} {:>9.2} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                f.function,
                probe,
                f.phase.as_deref().unwrap_or("-"),
                f.calls_per_attempt,
                human_ns(d.p50_ns as f64),
                human_ns(d.p99_ns as f64),
                human_ns(d.mean_ns),
                human_ns(f.self_ns_mean),
                human_ns(f.off_cpu_ns_mean),
                f.parent.as_deref().unwrap_or("(syscall)")
            );
        }
        let _ = writeln!(o, "  phases (self time of their probed functions, per attempt):");
        for p in &oc.phases {
            let _ = writeln!(o, "    {:<44} {:>9} {:>6.1}%", p.label, human_ns(p.ns_per_attempt), 100.0 * p.share);
        }
        let _ = writeln!(
            o,
            "    {:<44} {:>9} {:>6.1}%",
            "off-CPU (the thread switched out)",
            human_ns(oc.off_cpu_ns_per_attempt),
            100.0 * oc.off_cpu_ns_per_attempt / oc.mean_ns.max(1.0)
        );
        let _ = writeln!(
            o,
            "    {:<44} {:>9} {:>6.1}%",
            "not inside a probed function",
            human_ns(oc.unprobed_ns_per_attempt),
            100.0 * oc.unprobed_ns_per_attempt / oc.mean_ns.max(1.0)
        );
        if oc.unprobed_ns_per_attempt < 0.0 {
            let _ = writeln!(
                o,
                "    (negative: the probed functions' self times exceed the measured latency; the probes' own cost lands inside them)"
            );
        }
    }
    let _ = writeln!(o, "  calls: {} recorded, {} not tied to a recorded attempt", x.calls, x.calls_without_attempt);
    if x.calls_summed > 0 {
        let _ = writeln!(
            o,
            "  {} of them summed in the kernel per attempt and call path (no record each): every sum exact; in the per-call \
             columns, a function called more than once on one path in one attempt counts at its mean there",
            x.calls_summed
        );
    }
    if x.calls_unsummed > 0 {
        let _ = writeln!(
            o,
            "  {} not summed (more call paths or deeper nesting than the kernel side keeps): their time is in their callers' self time",
            x.calls_unsummed
        );
    }
    if let Some(p) = plan {
        let by = |m: crate::model::meta::Mechanism| p.functions.iter().filter(|f| f.mechanism == m).count();
        let _ = writeln!(
            o,
            "  probed: {} functions ({} by fentry/fexit, {} by kprobe/kretprobe: no BTF for the name, or a name the kernel has twice)",
            p.functions.len(),
            by(crate::model::meta::Mechanism::Fentry),
            by(crate::model::meta::Mechanism::Kprobe)
        );
        if !p.absent.is_empty() {
            let _ = writeln!(o, "  not probed, no symbol on this kernel (inlined): {}", p.absent.join(", "));
        }
        if !p.over_capacity.is_empty() {
            let _ =
                writeln!(o, "  not probed, over the {} probe slots: {}", profiler_common::limits::MAX_PROBED, p.over_capacity.join(", "));
        }
    }
}

/// The fast-path estimate, `--fast-path`.
pub fn render_fast_path(r: &RunReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\nFast path: what a lookup before anything is allocated (a double lookup) would change, from this run's samples");
    let Some(v) = &r.analysis.fast_path else {
        let _ = writeln!(
            o,
            "  no estimate: it needs samples (sampled mode, --sample-hz above 0) of both failed PATH lookups (ENOENT) and successful execs; run the built-in chain, e.g. `execprof run --steps 100000 --fast-path`"
        );
        return o;
    };
    let cell = |i: &crate::analysis::stats::Interval| ci_cell(i.value, i.low, i.high);
    let _ = writeln!(
        o,
        "  failed attempt (ENOENT: {} attempts, mean {}, {} samples)",
        v.failed_attempts,
        human_ns(v.failed_mean_ns),
        v.failed_samples
    );
    let _ = writeln!(o, "    {:<50} {:>28}  under a double lookup", "part", "per attempt [95% CI]");
    for p in &v.failed_parts {
        let fate = if p.changes {
            "saved"
        } else if p.part == crate::analysis::fastpath::OpenPart::PathWalk {
            "kept (the lookup itself)"
        } else {
            "kept"
        };
        let _ = writeln!(o, "    {:<50} {:>28}  {fate}", p.label, cell(&p.per_attempt));
    }
    let _ = writeln!(o, "    {:<50} {:>28}", "saved per failed attempt", cell(&v.saved_per_failure));
    let _ = writeln!(o, "  successful exec ({} execs, mean {}, {} samples)", v.successes, human_ns(v.success_mean_ns), v.success_samples);
    for p in &v.success_parts {
        let fate = if p.changes { "paid twice" } else { "once" };
        let _ = writeln!(o, "    {:<50} {:>28}  {fate}", p.label, cell(&p.per_attempt));
    }
    let _ = writeln!(o, "    {:<50} {:>28}", "added per successful exec", cell(&v.added_per_success));
    let net = &v.net_per_success;
    let verdict = if net.high < 0.0 {
        format!("a double lookup would be faster by {} per step", human_ns(-net.value))
    } else if net.low > 0.0 {
        format!("a double lookup would be slower by {} per step", human_ns(net.value))
    } else {
        "no significant difference either way (the interval contains 0)".to_owned()
    };
    let _ = writeln!(
        o,
        "  net per successful exec with its {:.2} failed attempts (a chain step): {}: {verdict}",
        v.failed_per_success,
        signed_ci(net)
    );
    let _ = writeln!(
        o,
        "  method: each sample's stack falls in one part, from the syscall down (docs/diff.md, “The fast-path estimate”); a part's time = Wilson 95% share of the outcome's samples × its measured mean; a double lookup saves the struct file, the bprm (and before 6.8 its mm) and the rest of the open in a failed attempt and walks the path a second time in a success; check it with `execprof bench chain --lookup-first`"
    );
    o
}

/// Each outcome's call trees (sampled, then exact), `--tree`.
pub fn render_trees(r: &RunReport) -> String {
    let mut o = String::new();
    let a = &r.analysis;
    let mut trees: Vec<(String, &crate::analysis::tree::TreeNode)> = Vec::new();
    if let Some(s) = &a.sampled {
        for oc in s.outcomes.iter().filter(|o| o.samples > 0) {
            trees.push((format!("{}: from {} kernel stacks of {} attempts", oc.outcome.label(), oc.samples, oc.attempts), &oc.tree));
        }
    }
    if let Some(e) = &a.exact {
        for oc in &e.outcomes {
            trees.push((format!("{}: exact, from probe nesting in {} attempts", oc.outcome.label(), oc.attempts), &oc.tree));
        }
    }
    for (title, tree) in trees {
        let _ = writeln!(
            o,
            "\nCall tree: {title} (per attempt; under {:.0}% of the attempt folded)",
            crate::analysis::tree::COLLAPSE_BELOW * 100.0
        );
        let _ = writeln!(o, "  {:>28} {:>6} {:>9}  function", "inclusive [95% CI]", "share", "self");
        let root = tree.inclusive.value.max(f64::MIN_POSITIVE);
        for (depth, n) in tree.walk() {
            let _ = writeln!(
                o,
                "  {:>28} {:>5.1}% {:>9}  {}{}",
                ci_cell(n.inclusive.value, n.inclusive.low, n.inclusive.high),
                100.0 * n.inclusive.value / root,
                human_ns(n.own.value),
                "  ".repeat(depth),
                n.function
            );
        }
    }
    o
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// A warning when the kernel delivered far fewer samples than asked for (judged only when at
/// least 100 were due).
pub fn slow_sampling(s: &SampledAttribution, sample_hz: u64) -> Option<String> {
    let delivered = s.delivered_hz?;
    let due = sample_hz as f64 * crate::analysis::attribution::attempt_seconds(&s.outcomes);
    (sample_hz > 0 && due >= 100.0 && delivered < 0.5 * sample_hz as f64).then(|| {
        format!(
            "SAMPLING SLOWER THAN ASKED: {delivered:.0} Hz delivered inside exec attempts of the {sample_hz} Hz asked: this kernel's timers cannot fire that often (high-resolution timers off, or the clocksource fell back to jiffies: `grep resolution /proc/timer_list` shows 4000000 ns instead of 1 ns); the intervals are as wide as the samples taken"
        )
    })
}

pub(crate) fn render_sampled(o: &mut String, s: &SampledAttribution, sample_hz: u64) {
    for oc in &s.outcomes {
        let _ = writeln!(
            o,
            "\nWhere the kernel time goes: {} ({} attempts, exact mean {}, {} samples)",
            oc.outcome.label(),
            oc.attempts,
            human_ns(oc.mean_ns),
            oc.samples
        );
        let _ = writeln!(o, "  {:<46} {:>7} {:>20} {:>28}", "phase / function", "samples", "share [95% CI]", "per attempt [95% CI]");
        let mut unseen = Vec::new();
        for p in &oc.phases {
            if p.estimate.samples == 0 {
                unseen.push(p.phase.as_str());
                continue;
            }
            let line = |o: &mut String, name: &str, e: &Estimate| {
                let _ = writeln!(
                    o,
                    "  {:<46} {:>7} {:>20} {:>28}{}",
                    name,
                    e.samples,
                    format!("{}% [{}–{}]", pct(e.share), pct(e.share_low), pct(e.share_high)),
                    format!("{} [{}–{}]", human_ns(e.ns_per_attempt), human_ns(e.ns_per_attempt_low), human_ns(e.ns_per_attempt_high)),
                    if e.few_samples { "  (few samples)" } else { "" }
                );
            };
            line(o, &p.label, &p.estimate);
            for f in p.functions.iter().take(5) {
                line(o, &format!("    {}", f.function), &f.estimate);
            }
            if p.functions.len() > 5 {
                let _ = writeln!(o, "      ... {} more functions (in --json)", p.functions.len() - 5);
            }
        }
        if !unseen.is_empty() {
            let _ = writeln!(o, "  no samples in: {}", unseen.join(", "));
        }
        if let Some(a) = &oc.adequacy {
            let factor = a.samples_factor.ceil();
            let rate = (sample_hz as f64 * factor) as u64;
            // Rates above this are refused or throttled by most kernels: then only more steps.
            let rate = if rate <= 20_000 { format!(", or --sample-hz {rate}") } else { String::new() };
            let _ = writeln!(
                o,
                "  TOO FEW SAMPLES: a phase holding {}% is known only to ±{:.0}% of its value; for ±{:.0}% take about {factor:.0}× the samples: {factor:.0}× the steps (or run time){rate}",
                pct(a.phase_share),
                a.widest_relative * 100.0,
                crate::analysis::attribution::ADEQUACY_TARGET * 100.0,
            );
        }
    }
    let _ = writeln!(
        o,
        "  samples: {} taken; not attributed: {} of attempts never recorded, {} in execprof's probes outside their attempt's time ({} before enter, {} after exit); {} without a kernel stack; {} addresses without a symbol",
        s.samples,
        s.samples_without_attempt,
        s.samples_before_enter + s.samples_after_exit,
        s.samples_before_enter,
        s.samples_after_exit,
        s.samples_without_stack,
        s.unknown_addresses
    );
    if let Some(warning) = slow_sampling(s, sample_hz) {
        let _ = writeln!(o, "  {warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::attempt, assemble::events::Event};

    /// What a full ring buffer costs, in calls: every dropped enter is a call, plus the seen
    /// enters that never joined; exits without enters are the dropped enters' own calls.
    #[test]
    fn calls_not_seen_whole_counts_each_lost_call_once() {
        use profiler_common::counter::{EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED, NAMES};
        let mut losses = LossCounters::zero();
        for (name, n) in &mut losses.0 {
            if name == NAMES[EXEC_ENTER_DROPPED as usize] {
                *n = 400;
            } else if name == NAMES[FORK_ENTER_DROPPED as usize] {
                *n = 2;
            }
        }
        let unjoined = Unjoined { abandoned: 1, exit_without_enter: 150, enter_without_exit: 30 };
        assert_eq!(calls_not_seen_whole(&losses, &unjoined), 402 + 30 + 1);
        let mid_call = Unjoined { exit_without_enter: 410, ..Unjoined::default() };
        assert_eq!(calls_not_seen_whole(&losses, &mid_call), 402 + 8, "exits beyond the dropped enters: calls begun before tracing");
        assert_eq!(calls_not_seen_whole(&LossCounters::zero(), &Unjoined::default()), 0);
    }

    /// The 32-bit ABI is named as the recording's architecture has it.
    #[test]
    fn the_32_bit_abi_is_named_by_the_recordings_architecture() {
        let c = crate::analysis::CompatSummary { attempts: 2, successes: 1, failed_mean_ns: None, success_mean_ns: None, fork_calls: 0 };
        use crate::report::test_support::{meta, report};
        let a = report(meta(&["t"], None), &[], None).analysis;
        for (machine, abi) in [("x86_64", "32-bit (ia32) callers made 2 of"), ("aarch64", "32-bit (AArch32) callers made 2 of")] {
            let mut o = String::new();
            render_compat(&mut o, &c, &a, machine);
            assert!(o.contains(abi), "{machine}: {o}");
        }
    }

    #[test]
    fn human_times() {
        assert_eq!(human_ns(950.0), "950 ns");
        assert_eq!(human_ns(1_234.0), "1.23 µs");
        assert_eq!(human_ns(45_600.0), "45.6 µs");
        assert_eq!(human_ns(1_200_000.0), "1.20 ms");
        assert_eq!(human_ns(2_340_000_000.0), "2.34 s");
        assert_eq!(human_ns(-2_100_000.0), "-2.10 ms");
        assert_eq!(human_ns(-450.0), "-450 ns");
    }

    #[test]
    fn sampling_far_below_the_asked_rate_is_flagged() {
        use crate::analysis::attribution::{OutcomeAttribution, delivered_hz};
        // 1,000 attempts of 1 ms: one second of exec time, 4,999 samples due at 4999 Hz.
        let with = |samples: u64, attempts: u64| {
            let outcomes = vec![OutcomeAttribution {
                outcome: crate::analysis::outcome::Outcome::Success,
                attempts,
                mean_ns: 1e6,
                samples,
                phases: vec![],
                folded: vec![],
                adequacy: None,
                tree: Default::default(),
                open_parts: Default::default(),
                on_stack: vec![],
            }];
            SampledAttribution {
                samples,
                samples_without_attempt: 0,
                samples_after_exit: 0,
                samples_before_enter: 0,
                samples_without_stack: 0,
                unknown_addresses: 0,
                delivered_hz: delivered_hz(&outcomes),
                outcomes,
                by_program: Vec::new(),
            }
        };
        // The tick's 250 Hz: flagged, with the rate delivered.
        let w = slow_sampling(&with(250, 1_000), 4999).expect("flagged");
        assert!(w.contains("250 Hz delivered") && w.contains("4999 Hz asked"), "{w}");
        // None at all over a second of exec time: flagged too.
        assert!(slow_sampling(&with(0, 1_000), 4999).is_some());
        // Most of them: fine. Too little time to judge (10 ms: 50 due): silent.
        assert_eq!(slow_sampling(&with(4_000, 1_000), 4999), None);
        assert_eq!(slow_sampling(&with(0, 10), 4999), None);
        // Sampling off: nothing to say.
        assert_eq!(slow_sampling(&with(0, 1_000), 0), None);
    }

    struct Table;
    impl crate::analysis::attribution::Symbolizer for Table {
        fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
            let name = |a: u64| match a {
                0x10 => Some("path_openat".to_owned()),
                0x20 => Some("mm_alloc".to_owned()),
                0x30 => Some("__x64_sys_execve".to_owned()),
                _ => None,
            };
            addrs.iter().map(|&a| name(a)).collect()
        }
    }

    fn sample_report() -> RunReport {
        let mut events = Vec::new();
        let mut t = 0;
        let sample = |ts_ns: u64, frames: &[u64]| crate::assemble::events::Sample { ts_ns, pid: 100, frames: frames.to_vec() };
        for step in 0..3u64 {
            // The chain's PATH search: two missed directories, then the program's. This run
            // has no launch exec, so the first step's attempts are execprof's launcher's and
            // no search: the PATH searches count the two steps after it.
            for i in 0..2 {
                let mut fail = attempt(100, t, t + 1_500, -2, Some(0));
                fail.name.bytes = format!("/m{}/t", i + 1).into_bytes();
                if step == 0 && i == 0 {
                    // Two samples in the first ENOENT attempt (lookup).
                    fail.inside.samples = vec![sample(t + 10, &[0x10, 0x30]), sample(t + 20, &[0x10, 0x30])];
                }
                events.push(Event::Exec(fail));
                t += 2_000;
            }
            let mut ok = attempt(100, t, t + 40_000 + step * 1_000, 0, Some(25));
            ok.name.bytes = b"/bin/t".to_vec();
            ok.prepare_ns = Some(t + 15_000);
            ok.loaded_ns = Some(t + 35_000);
            if step == 0 {
                // One in the first success (mm set-up).
                ok.inside.samples = vec![sample(t + 10, &[0x20, 0x30])];
            }
            events.push(Event::Exec(ok));
            t += 60_000;
        }
        events.push(Event::Exec(attempt(100, t, t + 300, -7, Some(0))));
        let addrs = [0x10, 0x20, 0x30, 0x40];
        test_support::report(test_support::meta(&["t", "3"], None), &events, Some((&addrs, &Table)))
    }

    /// Successful execs of these latencies, in ns.
    fn successes(latencies: impl IntoIterator<Item = u64>) -> RunReport {
        let events: Vec<Event> = latencies
            .into_iter()
            .enumerate()
            .map(|(i, ns)| Event::Exec(attempt(100, i as u64 * 10_000_000, i as u64 * 10_000_000 + ns, 0, Some(0))))
            .collect();
        test_support::report(test_support::meta(&["t"], None), &events, None)
    }

    #[test]
    fn modes_are_called_only_from_enough_attempts() {
        // Two attempts a decade apart were "MULTIMODAL: 2 modes".
        let text = render(&successes([50_000, 500_000]));
        assert!(!text.contains("MULTIMODAL"), "{text}");
        // Twenty at each latency are two modes.
        let text = render(&successes([50_000, 500_000].iter().flat_map(|&ns| std::iter::repeat_n(ns, 20))));
        assert!(text.contains("MULTIMODAL: 2 modes at 51.2 µs (50%), 512 µs (50%)"), "{text}");
    }

    #[test]
    fn one_attempt_has_no_median_interval_and_none_says_no_attempts() {
        let text = render(&successes([597_000]));
        let row = |outcome: &str| text.lines().find(|l| l.trim_start().starts_with(outcome)).unwrap().to_owned();
        assert!(row("success ").contains(" 597 µs (n=1) ") && !text.contains("[597–597]"), "{text}");
        assert_eq!(row("ENOENT ").trim_end(), "  ENOENT              0   no attempts");
        // From two values on, the interval is back.
        assert!(render(&successes([597_000, 600_000])).contains("[597–600] µs"));
    }

    #[test]
    fn renders_every_section() {
        let text = render(&sample_report());
        insta::assert_snapshot!(text);
    }

    /// A report from a cut recording says where it was cut, claims no exit status, no own
    /// clock and no kernel counters, and is incomplete.
    #[test]
    fn a_cut_recording_is_marked_and_claims_nothing_it_lacks() {
        let sample = sample_report();
        let cut = RecordingCut { at_byte: 1306, covered_ns: Some(2_500_000_000), symbols: false, detail: "truncated at byte 5000".into() };
        let facts = RecordingFacts { path: "run\x1b.execprof".into(), bytes: 5000, records: 124, cut: Some(cut) };
        let end = RunEnd::cut(2_500_000_000);
        let r = RunReport::new(sample.meta, end, sample.analysis, &Unjoined::default(), Source::Replay { recording: facts, ready_ms: 1 });
        assert!(!r.complete);
        let text = render(&r);
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "RECORDING CUT at byte 1306 of 5000 (after 2.50 s of the run): the report covers the intact prefix; the run was killed or its disk filled up"
        );
        assert!(text.contains("the kernel's symbol table was written after the cut"), "{text}");
        assert!(text.contains("result    unknown (the recording ends 2.50 s into the run); "), "{text}");
        assert!(text.contains("from the recording run\\x1b.execprof (5000 bytes, 124 records"), "{text}");
        assert!(!text.contains("execprof's own clock"), "{text}");
        assert!(text.contains("kernel loss counters               not known: they are written at the run's end, after the cut"), "{text}");
        let json = serde_json::to_string(&r).unwrap();
        let back: RunReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.recording_cut(), r.recording_cut());
        assert_eq!(back.exit_status, ExitStatus::Unknown);
    }

    #[test]
    fn json_has_schema_version_and_outcomes() {
        let v: serde_json::Value = serde_json::to_value(sample_report()).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["analysis"]["outcomes"][1]["outcome"], "enoent");
        assert_eq!(v["analysis"]["outcomes"][1]["count"], 6);
        assert_eq!(v["analysis"]["chain"]["steps"], 2);
        assert_eq!(v["losses"][0][0], "ring buffer full");
    }

    #[test]
    fn json_reads_back_as_the_same_report() {
        // Other runs' reports (repeat, xtask) are read through this type, not by key names.
        let json = serde_json::to_string(&sample_report()).unwrap();
        let back: RunReport = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert_eq!(render(&back), render(&sample_report()));
    }
}
