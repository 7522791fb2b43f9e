//! What `execprof agent` prints and writes on exit: its aggregates as the same kinds of
//! figures as `run`'s report (outcomes, callers, fork-family calls), the series, and what
//! the maps could not hold, counted.
use serde::Serialize;

use crate::{
    analysis::{
        aggregates::{AgentAnalysis, AgentTotals, BucketedLatency, MissedDirectory, SeriesKey, outcome_label},
        attribution::SampledAttribution,
    },
    model::{
        meta::{Boundaries, ProgramCost},
        scope::Scope,
    },
    report::human_ns,
};

/// The agent's JSON (`--json`), and what its terminal summary shows.
#[derive(Clone, Debug, Serialize)]
pub struct AgentReport {
    /// The execprof version.
    pub execprof_version: String,
    /// Which processes are watched.
    pub scope: Scope,
    /// Which hooks time the calls.
    pub boundaries: Boundaries,
    /// When the agent started (Unix time, s).
    pub started_unix_s: u64,
    /// How long it counted, in s.
    pub duration_s: f64,
    /// The maps' sizes and use.
    pub capacities: Capacities,
    /// The figures, as `run --json` has them where they are the same kind.
    pub analysis: AgentAnalysis,
    /// Every series with its totals, most calls first.
    pub series: Vec<SeriesRow>,
    /// ENOENT exec attempts per missed directory (PATH searching), most first: exact, every
    /// attempt whose name was read (see `losses`).
    pub missed_directories: Vec<MissedDirectory>,
    /// cpu-clock sampling rate per CPU (0: no samples).
    pub sample_hz: u64,
    /// Where the kernel time goes, per exec outcome: the samples' stacks attributed to phases
    /// and functions as `run` does, their shares made time with the exact means.
    pub sampled: Option<SampledAttribution>,
    /// What did not go where it belonged, counted.
    pub losses: AgentLosses,
    /// Each of the agent's eBPF programs: runs and run time (`--probe-costs`; empty without).
    pub programs: Vec<ProgramCost>,
    /// False when some call is not in the series of its own program and cgroup (folded into
    /// `other`) or was counted without a latency.
    pub complete: bool,
}

/// The maps' sizes, and how full they were at the end.
#[derive(Clone, Debug, Serialize)]
pub struct Capacities {
    /// The kernel's series map (`--max-series`).
    pub max_series: u32,
    /// Slots of the kernel's in-flight and search tables (a power of two).
    pub max_in_flight: u32,
    /// The agent's own totals (`--max-totals`).
    pub max_totals: usize,
    /// Kernel entries in use at the end.
    pub series_in_kernel: usize,
    /// Kernel entries removed after their last read (idle, or their cgroup gone).
    pub series_removed: usize,
}

/// What did not go where it belonged, counted.
#[derive(Clone, Debug, Serialize)]
pub struct AgentLosses {
    /// Exec attempts folded into `other` by the kernel (its series map full).
    pub exec_folded_in_kernel: u64,
    /// Fork-family calls folded into `other` by the kernel.
    pub fork_folded_in_kernel: u64,
    /// Calls folded into `other` by the agent's own totals (`--max-totals`).
    pub folded_in_totals: u64,
    /// Calls counted without a latency (in their `other` series): their start was not seen.
    pub not_timed_start_not_seen: u64,
    /// In-flight slots taken from another call (the table is direct-mapped by id): that call,
    /// if it returns, is among those whose start was not seen.
    pub in_flight_slots_taken: u64,
    /// PATH searches restarted because another process's search took their slot.
    pub searches_restarted: u64,
    /// ENOENT attempts for a name past their search's first `TRIED_PER_SEARCH` distinct ones:
    /// a later repeat of it goes unseen.
    pub miss_names_not_remembered: u64,
    /// ENOENT attempts counted in their series but not per missed directory: the misses
    /// maps were full, or the name was not readable from the caller's memory.
    pub misses_not_per_directory: u64,
    /// cpu-clock samples inside calls not counted per stack (more than the kernel keeps in
    /// one call, or its stack maps full): the sampled attribution and the profiles are short
    /// of them; the counts are whole, so `complete` does not depend on them.
    pub samples_not_kept: u64,
    /// Runs of the agent's programs the kernel skipped because the program was already
    /// running on that CPU (preempted inside it): the calls those runs would have counted.
    pub program_runs_skipped: u64,
}

impl AgentLosses {
    /// A new value.
    /// `program_runs_skipped` is what the tracer read from the kernel's per-program recursion
    /// misses (0 in tests and reports built without a kernel).
    pub fn new(
        counters: &[u64; profiler_common::aggregate::agg_counter::COUNT as usize],
        folded_in_totals: u64,
        program_runs_skipped: u64,
    ) -> Self {
        use profiler_common::aggregate::agg_counter::*;
        Self {
            exec_folded_in_kernel: counters[EXEC_FOLDED as usize],
            fork_folded_in_kernel: counters[FORK_FOLDED as usize],
            folded_in_totals,
            not_timed_start_not_seen: counters[START_NOT_SEEN as usize],
            in_flight_slots_taken: counters[IN_FLIGHT_FULL as usize],
            searches_restarted: counters[SEARCH_PUSHED_OUT as usize],
            miss_names_not_remembered: counters[REPEAT_NOT_CHECKED as usize],
            misses_not_per_directory: counters[MISS_FOLDED as usize] + counters[MISS_UNREADABLE as usize],
            samples_not_kept: counters[SAMPLES_NOT_KEPT as usize] + counters[STACK_COUNTS_FULL as usize],
            program_runs_skipped,
        }
    }

    /// Each figure with its JSON name, for the metrics' `reason` label.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("exec_folded_in_kernel", self.exec_folded_in_kernel),
            ("fork_folded_in_kernel", self.fork_folded_in_kernel),
            ("folded_in_totals", self.folded_in_totals),
            ("not_timed_start_not_seen", self.not_timed_start_not_seen),
            ("in_flight_slots_taken", self.in_flight_slots_taken),
            ("searches_restarted", self.searches_restarted),
            ("miss_names_not_remembered", self.miss_names_not_remembered),
            ("misses_not_per_directory", self.misses_not_per_directory),
            ("samples_not_kept", self.samples_not_kept),
            ("program_runs_skipped", self.program_runs_skipped),
        ]
    }

    /// What is lost, in a few words for a status line; None when nothing is.
    pub fn summary(&self) -> Option<String> {
        let folded = self.exec_folded_in_kernel + self.fork_folded_in_kernel + self.folded_in_totals;
        let untimed = self.not_timed_start_not_seen;
        let mut parts = Vec::new();
        if folded > 0 {
            parts.push(format!("{folded} calls in other"));
        }
        if untimed > 0 {
            parts.push(format!("{untimed} not timed"));
        }
        if self.misses_not_per_directory > 0 {
            parts.push(format!("{} misses not per directory", self.misses_not_per_directory));
        }
        if self.searches_restarted > 0 {
            parts.push(format!("{} searches restarted", self.searches_restarted));
        }
        if self.miss_names_not_remembered > 0 {
            parts.push(format!("{} misses not remembered for repeats", self.miss_names_not_remembered));
        }
        if self.program_runs_skipped > 0 {
            parts.push(format!("{} program runs skipped by the kernel", self.program_runs_skipped));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    fn total(&self) -> u64 {
        self.exec_folded_in_kernel
            + self.fork_folded_in_kernel
            + self.folded_in_totals
            + self.not_timed_start_not_seen
            + self.in_flight_slots_taken
            + self.misses_not_per_directory
            + self.searches_restarted
            + self.miss_names_not_remembered
            + self.program_runs_skipped
    }
}

/// One series' totals.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesRow {
    /// The series.
    #[serde(flatten)]
    pub key: SeriesKey,
    /// Calls counted.
    pub count: u64,
    /// Calls with a latency (their start was seen).
    pub timed: u64,
    /// Summed time, in ns.
    pub total_ns: u64,
    /// The latency distribution of the timed calls, to one bucket.
    pub latency: Option<BucketedLatency>,
    /// Minor page faults of the timed calls.
    pub minor_faults: u64,
    /// Major page faults of the timed calls.
    pub major_faults: u64,
    /// Fork-family calls: the parent's resident pages, summed over the timed calls, and the
    /// largest.
    #[serde(skip_serializing_if = "is_zero")]
    pub parent_rss_pages_sum: u64,
    /// Largest resident size of a parent at a call, in pages.
    #[serde(skip_serializing_if = "is_zero")]
    pub parent_rss_pages_max: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl AgentReport {
    /// A new value.
    pub fn new(
        (scope, boundaries): (&Scope, Boundaries),
        (started_unix_s, duration): (u64, std::time::Duration),
        capacities: Capacities,
        totals: &AgentTotals,
        mut losses: AgentLosses,
        (sample_hz, sampled): (u64, Option<SampledAttribution>),
        programs: Vec<ProgramCost>,
    ) -> Self {
        let (series_totals, misses) = (&totals.series, &totals.misses);
        losses.misses_not_per_directory += misses.folded;
        let mut series: Vec<SeriesRow> = series_totals
            .iter()
            .map(|(k, t)| SeriesRow {
                key: k.clone(),
                count: t.count,
                timed: t.timed,
                total_ns: t.sum_ns,
                latency: t.latency(),
                minor_faults: t.min_flt,
                major_faults: t.maj_flt,
                parent_rss_pages_sum: t.rss_pages_sum,
                parent_rss_pages_max: t.rss_pages_max,
            })
            .collect();
        series.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        Self {
            execprof_version: env!("CARGO_PKG_VERSION").to_owned(),
            scope: scope.clone(),
            boundaries,
            started_unix_s,
            duration_s: duration.as_secs_f64(),
            capacities,
            analysis: {
                let mut a = series_totals.summary();
                (a.path_searches.repeated_misses, a.path_searches.repeated_miss_ns) = misses.repeated();
                a
            },
            series,
            missed_directories: misses.directories(),
            sample_hz,
            sampled,
            complete: losses.total() == 0,
            losses,
            programs,
        }
    }
}

/// Missed directories listed on the terminal (all are in the JSON).
const MISSED_SHOWN: usize = 10;

/// Callers listed on the terminal (all are in the JSON).
const CALLERS_SHOWN: usize = 15;

/// The terminal summary: 80 columns.
pub fn render(r: &AgentReport) -> String {
    use std::fmt::Write as _;
    let a = &r.analysis;
    let mut o = String::new();
    let _ =
        writeln!(o, "execprof agent: {} exec attempts and {} fork-family calls in {:.1} s", a.attempts, a.fork_calls.count, r.duration_s);
    let _ = writeln!(o, "  scope: {}", r.scope.describe());
    let _ = writeln!(
        o,
        "  series: {} (kernel map {} of {} at the end)",
        r.series.len(),
        r.capacities.series_in_kernel,
        r.capacities.max_series
    );
    let _ = writeln!(o, "\n{:<12} {:>10} {:>10} {:>10} {:>10} {:>10}", "outcome", "attempts", "mean", "p50", "p99", "faults");
    for row in &a.outcomes {
        let (mean, p50, p99) = row
            .latency
            .as_ref()
            .map_or(("-".into(), "-".into(), "-".into()), |l| (human_ns(l.mean_ns), human_ns(l.p50.ns as f64), human_ns(l.p99.ns as f64)));
        let faults = row.minor_faults_per_attempt.map_or("-".to_owned(), |f| format!("{f:.1}"));
        let _ = writeln!(
            o,
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10}",
            clip(&outcome_label(&row.outcome), 12),
            row.count,
            mean,
            p50,
            p99,
            faults
        );
    }
    if a.fork_calls.count > 0 {
        let f = &a.fork_calls;
        let (mean, p50, p99) = f
            .latency
            .as_ref()
            .map_or(("-".into(), "-".into(), "-".into()), |l| (human_ns(l.mean_ns), human_ns(l.p50.ns as f64), human_ns(l.p99.ns as f64)));
        let _ = writeln!(o, "{:<12} {:>10} {:>10} {:>10} {:>10}", "fork family", f.count, mean, p50, p99);
    }
    if !a.callers.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<34} {:>8} {:>8} {:>10} {:>7} {:>9}",
            "program (most kernel time first)", "execs", "failed", "exec time", "forks", "fork time"
        );
        for c in a.callers.iter().take(CALLERS_SHOWN) {
            let failed: u64 = c.failed.iter().map(|(_, n)| n).sum();
            let _ = writeln!(
                o,
                "{:<34} {:>8} {:>8} {:>10} {:>7} {:>9}",
                clip_left(&c.program, 34),
                // AT_EXECVE_CHECK checks execute nothing: not execs (the outcome table has them).
                c.attempts - c.checks,
                failed,
                human_ns((c.failed_ns + c.success_ns) as f64),
                c.fork_calls,
                human_ns(c.fork_ns as f64)
            );
        }
        if a.callers.len() > CALLERS_SHOWN {
            let _ = writeln!(o, "({} more programs in --json)", a.callers.len() - CALLERS_SHOWN);
        }
        let checks: u64 = a.callers.iter().map(|c| c.checks).sum();
        if checks > 0 {
            let _ = writeln!(
                o,
                "({checks} execveat calls with AT_EXECVE_CHECK are not in execs: they only checked a file, as the outcome table says)"
            );
        }
    }
    if !r.missed_directories.is_empty() {
        let _ = writeln!(o, "\n{:<42} {:>10} {:>9} {:>14}", "missed directories (ENOENT attempts)", "misses", "repeated", "kernel time");
        for d in r.missed_directories.iter().take(MISSED_SHOWN) {
            let _ = writeln!(
                o,
                "{:<42} {:>10} {:>9} {:>14}",
                clip_left(&d.directory, 42),
                d.misses,
                d.repeated_misses,
                human_ns(d.total_ns as f64)
            );
        }
        if r.missed_directories.len() > MISSED_SHOWN {
            let _ = writeln!(o, "({} more directories in --json)", r.missed_directories.len() - MISSED_SHOWN);
        }
    }
    let p = &a.path_searches;
    if p.found_after_misses > 0 || p.repeated_misses > 0 {
        let _ = writeln!(
            o,
            "PATH searches found after misses: {}, with {} misses ({:.1} per search)",
            p.found_after_misses,
            p.misses_before_found,
            p.misses_before_found as f64 / p.found_after_misses.max(1) as f64
        );
        if p.repeated_misses > 0 {
            let _ = writeln!(
                o,
                "  {} misses tried a directory their search had tried already (PATH lists it twice):\n  {} of kernel time wasted; remove the duplicate from PATH",
                p.repeated_misses,
                human_ns(p.repeated_miss_ns as f64)
            );
        }
    }
    if let Some(s) = &r.sampled {
        crate::report::render_sampled(&mut o, s, r.sample_hz);
    }
    if !r.programs.is_empty() {
        let _ = writeln!(o, "\n{:<34} {:>12} {:>14} {:>12}", "execprof's eBPF programs", "runs", "run time", "per run");
        for p in &r.programs {
            let _ = writeln!(o, "{:<34} {:>12} {:>14} {:>12}", p.program, p.runs, human_ns(p.run_ns as f64), human_ns(p.ns_per_run()));
        }
    }
    let l = &r.losses;
    if r.complete {
        let _ = writeln!(o, "\nnothing lost: every call is in its own series, timed");
    } else {
        let _ = writeln!(o, "\nincomplete: some calls are not in their own series, or not timed:");
        for (n, what) in [
            (l.exec_folded_in_kernel, "exec attempts folded into other in the kernel: raise --max-series"),
            (l.fork_folded_in_kernel, "fork-family calls folded into other in the kernel: raise --max-series"),
            (l.folded_in_totals, "calls folded into other in the agent's totals: raise --max-totals"),
            (l.not_timed_start_not_seen, "calls not timed: begun before the agent, or their start lost"),
            (l.in_flight_slots_taken, "in-flight slots taken from another call (it returns untimed): raise --max-in-flight"),
            (l.misses_not_per_directory, "ENOENT attempts not per directory: raise --max-misses (or names unreadable)"),
            (l.searches_restarted, "PATH searches restarted (another process took their slot): raise --max-in-flight"),
            (l.miss_names_not_remembered, "ENOENT names past their search's first 16 distinct ones: a repeat of them goes unseen"),
            (
                l.program_runs_skipped,
                "program runs the kernel skipped (the program was already running on that CPU): their calls are not counted",
            ),
        ] {
            if n > 0 {
                let _ = writeln!(o, "  {n:>10}  {what}");
            }
        }
    }
    o
}

/// The first `n` characters (names are escaped already: no control characters).
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).chain(['…']).collect() }
}

/// The last `n` characters: a path's end says most.
fn clip_left(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n { s.to_owned() } else { ['…'].into_iter().chain(s.chars().skip(len - n + 1)).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::aggregate::agg_counter;

    #[test]
    fn samples_not_kept_are_counted_and_leave_the_counts_complete() {
        let mut counters = [0; agg_counter::COUNT as usize];
        counters[agg_counter::SAMPLES_NOT_KEPT as usize] = 3;
        counters[agg_counter::STACK_COUNTS_FULL as usize] = 2;
        let l = AgentLosses::new(&counters, 0, 0);
        assert_eq!(l.samples_not_kept, 5);
        assert!(l.pairs().contains(&("samples_not_kept", 5)));
        assert_eq!(l.total(), 0, "the counts are whole");
        counters[agg_counter::START_NOT_SEEN as usize] = 1;
        assert_eq!(AgentLosses::new(&counters, 0, 0).total(), 1);
    }

    #[test]
    fn program_runs_the_kernel_skipped_make_the_counts_incomplete() {
        let counters = [0; agg_counter::COUNT as usize];
        let l = AgentLosses::new(&counters, 0, 4);
        assert_eq!(l.total(), 4);
        assert!(l.pairs().contains(&("program_runs_skipped", 4)));
        assert_eq!(l.summary().as_deref(), Some("4 program runs skipped by the kernel"));
    }
}
