//! The agent's figures: the kernel's aggregates ([`profiler_common::aggregate`]), read on an
//! interval as deltas, folded into totals per series (cgroup, calling program, call,
//! outcome) whose number is capped, the rest folded into one `other` series per outcome and
//! counted. Pure: the series' names come resolved, so this is tested without root.
use std::collections::HashMap;

use profiler_common::{
    AggValue,
    aggregate::{self, BUCKETS, CALL_EXEC, OUTCOME_ABANDONED, OUTCOME_SUCCESS},
};
use serde::Serialize;

use super::outcome::Outcome;
use crate::model::names::{errno_name, escape_name};

/// What a series counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Call {
    /// Exec attempts (`execve`, `execveat`).
    Exec,
    /// Fork-family calls (`clone`, `clone3`, `fork`, `vfork`), by the parent.
    Fork,
}

/// The outcome as the agent's JSON names it, as `run --json` names its classes, in lower case:
/// `success`, an errno's name (`enoent`, `e2big`), or `abandoned` ([`outcome_label`] on a
/// terminal)
/// (killed mid-exec, whatever its errno). An `AT_EXECVE_CHECK` check (`check`) is `checked`
/// when it passed, else `check_` and the rest (`check_eacces`): never an exec's outcome.
pub fn outcome_name(outcome: u16, check: bool) -> String {
    let name = match outcome {
        OUTCOME_SUCCESS if check => return CHECKED.to_owned(),
        OUTCOME_SUCCESS => "success".to_owned(),
        OUTCOME_ABANDONED => "abandoned".to_owned(),
        e => errno_name(i64::from(e)).to_lowercase(),
    };
    if check { format!("{CHECK_PREFIX}{name}") } else { name }
}

/// [`outcome_name`] of a passed check.
const CHECKED: &str = "checked";
/// What [`outcome_name`] puts in front of a failed check's outcome.
const CHECK_PREFIX: &str = "check_";

/// An outcome's name as terminals show it (and `run`'s reports): errno names in capitals.
pub fn outcome_label(name: &str) -> String {
    match name {
        "other" => "other errno".to_owned(),
        "success" | "abandoned" | "failed" | CHECKED => name.to_owned(),
        n if n.starts_with(CHECK_PREFIX) => format!("check {}", outcome_label(&n[CHECK_PREFIX.len()..])),
        n if n.starts_with("errno ") => n.to_owned(),
        n => n.to_uppercase(),
    }
}

/// Whether an outcome's name ([`outcome_name`]) is a check's.
pub fn is_check(name: &str) -> bool {
    name == CHECKED || name.starts_with(CHECK_PREFIX)
}

/// One series: where, by whom, what call, how it ended. Names are escaped for terminals.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SeriesKey {
    /// The cgroup's path under the cgroup v2 mount (`/` for the root), or
    /// `unknown_cgroup_id:N` when no directory has its id (gone before it was looked up).
    pub cgroup: String,
    /// The calling program's executable path, or `comm:NAME` when the path was not found
    /// (the process was gone, or a kernel thread called).
    pub program: String,
    /// Exec attempts or fork-family calls.
    pub call: Call,
    /// [`outcome_name`].
    pub outcome: String,
    /// Made in the compat ABI (ia32 on x86_64, AArch32 on arm64).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compat: bool,
}

/// The `other` series of a call and outcome: where a series that did not fit goes.
pub const OTHER: &str = "other";

/// Sums of one series (or of a delta of one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Totals {
    /// Calls counted.
    pub count: u64,
    /// Calls with a latency (their start was seen).
    pub timed: u64,
    /// Kernel time of the timed calls, in ns.
    pub sum_ns: u64,
    /// Minor page faults of the timed calls.
    pub min_flt: u64,
    /// Major page faults of the timed calls.
    pub maj_flt: u64,
    /// Fork-family calls: the parent's resident pages, summed over the timed calls.
    pub rss_pages_sum: u64,
    /// Fork-family calls: the parent's largest resident size, in pages.
    pub rss_pages_max: u64,
    /// Successful execs that ended a PATH search of at least one miss.
    pub searches: u64,
    /// The misses of those searches.
    pub search_misses: u64,
    /// Timed calls per latency bucket (`profiler_common::aggregate::bucket`).
    pub buckets: Vec<u64>,
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            count: 0,
            timed: 0,
            sum_ns: 0,
            min_flt: 0,
            maj_flt: 0,
            rss_pages_sum: 0,
            rss_pages_max: 0,
            searches: 0,
            search_misses: 0,
            buckets: vec![0; BUCKETS],
        }
    }
}

impl Totals {
    /// A kernel value as totals.
    pub fn of(v: &AggValue) -> Self {
        Self {
            count: v.count,
            timed: v.timed,
            sum_ns: v.sum_ns,
            min_flt: v.min_flt,
            maj_flt: v.maj_flt,
            rss_pages_sum: v.rss_pages_sum,
            rss_pages_max: v.rss_pages_max,
            searches: v.searches,
            search_misses: v.search_misses,
            buckets: v.buckets.to_vec(),
        }
    }

    /// What `self` (read now) added since `before` (read last time from the same entry).
    /// Counters only grow; an entry made anew (removed and re-made in between) counts whole.
    pub fn since(&self, before: &Totals) -> Totals {
        if self.count < before.count || self.timed < before.timed {
            return self.clone();
        }
        Totals {
            count: self.count - before.count,
            timed: self.timed - before.timed,
            sum_ns: self.sum_ns.saturating_sub(before.sum_ns),
            min_flt: self.min_flt.saturating_sub(before.min_flt),
            maj_flt: self.maj_flt.saturating_sub(before.maj_flt),
            rss_pages_sum: self.rss_pages_sum.saturating_sub(before.rss_pages_sum),
            rss_pages_max: self.rss_pages_max,
            searches: self.searches.saturating_sub(before.searches),
            search_misses: self.search_misses.saturating_sub(before.search_misses),
            buckets: self.buckets.iter().zip(&before.buckets).map(|(a, b)| a.saturating_sub(*b)).collect(),
        }
    }

    /// Adds `d` to these totals.
    pub fn add(&mut self, d: &Totals) {
        self.count += d.count;
        self.timed += d.timed;
        self.sum_ns = self.sum_ns.saturating_add(d.sum_ns);
        self.min_flt += d.min_flt;
        self.maj_flt += d.maj_flt;
        self.rss_pages_sum = self.rss_pages_sum.saturating_add(d.rss_pages_sum);
        self.rss_pages_max = self.rss_pages_max.max(d.rss_pages_max);
        self.searches += d.searches;
        self.search_misses += d.search_misses;
        for (a, b) in self.buckets.iter_mut().zip(&d.buckets) {
            *a += b;
        }
    }

    /// No call counted.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The latency distribution, to one bucket.
    pub fn latency(&self) -> Option<BucketedLatency> {
        BucketedLatency::of(&self.buckets, self.sum_ns)
    }
}

/// A latency distribution read from the log-linear buckets: each quantile is known to the
/// bucket it falls in (≤ 9.05% wide), given as that bucket's bounds and its geometric middle.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BucketedLatency {
    /// Timed calls.
    pub count: u64,
    /// Exact mean (from the summed time).
    pub mean_ns: f64,
    /// Summed time, in ns.
    pub total_ns: u64,
    /// The median.
    pub p50: Quantile,
    /// The 90th percentile.
    pub p90: Quantile,
    /// The 99th percentile.
    pub p99: Quantile,
}

/// A quantile to one bucket: it lies in `[low_ns, high_ns)`; `ns` is the bucket's middle.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Quantile {
    /// The bucket's geometric middle, in ns.
    pub ns: u64,
    /// The bucket's lower bound, in ns.
    pub low_ns: u64,
    /// The first value past the bucket, in ns.
    pub high_ns: u64,
}

impl BucketedLatency {
    /// The distribution of these buckets, whose values sum to `sum_ns`.
    pub fn of(buckets: &[u64], sum_ns: u64) -> Option<Self> {
        let count: u64 = buckets.iter().sum();
        if count == 0 {
            return None;
        }
        Some(Self {
            count,
            mean_ns: sum_ns as f64 / count as f64,
            total_ns: sum_ns,
            p50: quantile(buckets, count, 0.50),
            p90: quantile(buckets, count, 0.90),
            p99: quantile(buckets, count, 0.99),
        })
    }
}

/// The bucket holding the value of nearest rank ⌈q·n⌉.
fn quantile(buckets: &[u64], count: u64, q: f64) -> Quantile {
    let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
    let mut seen = 0;
    let i = buckets.iter().position(|&n| {
        seen += n;
        seen >= rank
    });
    let i = i.unwrap_or(buckets.len() - 1);
    let (low, high) = (aggregate::bucket_low_ns(i), aggregate::bucket_high_ns(i));
    let ns = if high == u64::MAX { low } else { ((low.max(1) as f64) * (high as f64)).sqrt() as u64 };
    Quantile { ns, low_ns: low, high_ns: high }
}

/// Totals per series, at most `capacity` of them; a new series past that is folded into the
/// `other` series of its call and outcome (program and cgroup `other`), and counted.
#[derive(Debug)]
pub struct SeriesTable {
    capacity: usize,
    series: HashMap<SeriesKey, Totals>,
    /// Calls folded into an `other` series here (not in the kernel).
    pub folded: u64,
}

impl SeriesTable {
    /// A new value.
    pub fn new(capacity: usize) -> Self {
        Self { capacity, series: HashMap::new(), folded: 0 }
    }

    /// Adds a delta to its series.
    pub fn add(&mut self, key: SeriesKey, delta: &Totals) {
        if delta.is_empty() {
            return;
        }
        if let Some(t) = self.series.get_mut(&key) {
            t.add(delta);
            return;
        }
        let key = if self.series.len() < self.capacity || key.program == OTHER {
            key
        } else {
            self.folded += delta.count;
            SeriesKey { cgroup: OTHER.into(), program: OTHER.into(), ..key }
        };
        self.series.entry(key).or_default().add(delta);
    }

    /// Series held.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// No call counted.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Every series with its totals.
    pub fn iter(&self) -> impl Iterator<Item = (&SeriesKey, &Totals)> {
        self.series.iter()
    }

    /// The figures the reports show, from the totals.
    pub fn summary(&self) -> AgentAnalysis {
        summarize(self.series.iter())
    }
}

/// What `top` groups series by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// The calling program.
    Program,
    /// The caller's cgroup.
    Cgroup,
}

/// A program's or a cgroup's calls, summed over its series.
#[derive(Clone, Debug, Default)]
pub struct GroupRow {
    /// The program's path or the cgroup's.
    pub name: String,
    /// Exec attempts, all outcomes (`AT_EXECVE_CHECK` checks not included).
    pub attempts: u64,
    /// Of those, ENOENT: missed PATH candidates, mostly.
    pub enoent: u64,
    /// Of those, failed otherwise (abandoned included).
    pub failed_otherwise: u64,
    /// Exec attempts' summed latencies, for their time and quantiles.
    pub exec: Totals,
    /// `AT_EXECVE_CHECK` checks (passed or not): no exec, so in none of the above.
    pub checks: u64,
    /// Their kernel time, in ns.
    pub check_ns: u64,
    /// Fork-family calls.
    pub forks: u64,
    /// Their kernel time, in ns.
    pub fork_ns: u64,
    /// The largest parent at a fork-family call, in resident pages.
    pub rss_pages_max: u64,
}

impl GroupRow {
    /// Kernel time of its exec attempts, checks and fork-family calls, in ns.
    pub fn kernel_ns(&self) -> u64 {
        self.exec.sum_ns + self.check_ns + self.fork_ns
    }
}

impl SeriesTable {
    /// The series summed per program or per cgroup.
    pub fn groups(&self, by: GroupBy) -> HashMap<String, GroupRow> {
        let mut out: HashMap<String, GroupRow> = HashMap::new();
        for (k, t) in &self.series {
            let name = match by {
                GroupBy::Program => &k.program,
                GroupBy::Cgroup => &k.cgroup,
            };
            let row = out.entry(name.clone()).or_insert_with(|| GroupRow { name: name.clone(), ..GroupRow::default() });
            match k.call {
                // A check's answer, passed or not, is no exec: counted apart.
                Call::Exec if is_check(&k.outcome) => {
                    row.checks += t.count;
                    row.check_ns += t.sum_ns;
                }
                Call::Exec => {
                    row.attempts += t.count;
                    match k.outcome.as_str() {
                        "success" => {}
                        "enoent" => row.enoent += t.count,
                        _ => row.failed_otherwise += t.count,
                    }
                    row.exec.add(t);
                }
                Call::Fork => {
                    row.forks += t.count;
                    row.fork_ns += t.sum_ns;
                    row.rss_pages_max = row.rss_pages_max.max(t.rss_pages_max);
                }
            }
        }
        out
    }
}

/// Everything the agent keeps: the series, the missed directories and the samples' stacks,
/// each bounded.
#[derive(Debug)]
pub struct AgentTotals {
    /// Totals per series.
    pub series: SeriesTable,
    /// ENOENT attempts per missed directory.
    pub misses: MissTable,
    /// Samples inside exec attempts per outcome and stack.
    pub stacks: super::attribution::SampleTally,
    stack_capacity: usize,
    /// Samples of stacks past the capacity, counted as stackless.
    pub stacks_folded: u64,
}

impl AgentTotals {
    /// Totals of at most `capacity` series, missed directories and stacks each.
    pub fn new(capacity: usize) -> Self {
        Self {
            series: SeriesTable::new(capacity),
            misses: MissTable::new(capacity),
            stacks: Default::default(),
            stack_capacity: capacity,
            stacks_folded: 0,
        }
    }

    /// `count` samples of `frames` inside calls of `call` that ended with `outcome` (kernel
    /// values, and whether the calls were `AT_EXECVE_CHECK` checks); only exec attempts' are
    /// kept.
    pub fn add_stack(&mut self, call: u16, (outcome, check): (u16, bool), frames: &[u64], count: u64) {
        if call != CALL_EXEC {
            return;
        }
        let frames = if self.stacks.distinct_stacks() >= self.stack_capacity && !self.stacks.has_stack(frames) {
            self.stacks_folded += count;
            &[][..]
        } else {
            frames
        };
        self.stacks.stack(exec_outcome(outcome, check), frames, count);
    }

    /// An exec outcome's (attempts, exact mean latency of the timed ones), for the sampled
    /// attribution's shares.
    pub fn outcome_stats(&self, outcome: Outcome) -> (u64, f64) {
        let (mut count, mut timed, mut ns) = (0, 0, 0u64);
        for (k, t) in self.series.iter() {
            if k.call == Call::Exec && exec_outcome_named(&k.outcome) == Some(outcome) {
                count += t.count;
                timed += t.timed;
                ns = ns.saturating_add(t.sum_ns);
            }
        }
        (count, if timed > 0 { ns as f64 / timed as f64 } else { 0.0 })
    }
}

/// The report's outcome class of a kernel exec outcome (`check`: of an `AT_EXECVE_CHECK`).
pub fn exec_outcome(outcome: u16, check: bool) -> Outcome {
    match outcome {
        OUTCOME_SUCCESS if check => Outcome::Checked,
        _ if check => Outcome::CheckFailed,
        OUTCOME_ABANDONED => Outcome::Abandoned,
        e => Outcome::of(-i64::from(e)),
    }
}

/// [`exec_outcome`] of an outcome's name ([`outcome_name`]); None for `other` series' names.
fn exec_outcome_named(name: &str) -> Option<Outcome> {
    Some(match name {
        CHECKED => Outcome::Checked,
        n if n.starts_with(CHECK_PREFIX) => Outcome::CheckFailed,
        "success" => Outcome::Success,
        "abandoned" => Outcome::Abandoned,
        "enoent" => Outcome::Enoent,
        "eacces" => Outcome::Eacces,
        "enoexec" => Outcome::Enoexec,
        "other" => Outcome::Other,
        n if n.starts_with('e') => Outcome::Other,
        _ => return None,
    })
}

/// The directory part of a name an exec failed with ENOENT: what PATH searching missed
/// (`/usr/local/bin` of `/usr/local/bin/gcc`; `.` for a bare name), escaped.
pub fn missed_directory(name: &[u8]) -> String {
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    let name = &name[..end];
    match name.iter().rposition(|&c| c == b'/') {
        Some(0) => "/".to_owned(),
        Some(i) => escape_name(&name[..i]),
        None => ".".to_owned(),
    }
}

/// ENOENT attempts per missed directory (and the caller's cgroup), at most `capacity`
/// directories; past that, new ones are counted as folded.
#[derive(Debug)]
pub struct MissTable {
    capacity: usize,
    dirs: HashMap<(String, String), MissCounts>,
    /// Attempts not kept per directory (the table full).
    pub folded: u64,
}

/// ENOENT attempts in one directory (of one cgroup, or all), and the repeated ones among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MissCounts {
    /// Attempts.
    pub misses: u64,
    /// Their kernel time, in ns.
    pub ns: u64,
    /// Of them, tries of a name their search had tried already.
    pub repeated: u64,
    /// Kernel time in those, in ns.
    pub repeated_ns: u64,
}

impl MissCounts {
    /// Adds `d`.
    pub fn add(&mut self, d: &MissCounts) {
        self.misses += d.misses;
        self.ns += d.ns;
        self.repeated += d.repeated;
        self.repeated_ns += d.repeated_ns;
    }
}

/// One missed directory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MissedDirectory {
    /// The directory (escaped).
    pub directory: String,
    /// ENOENT exec attempts for a name in it.
    pub misses: u64,
    /// Their kernel time, in ns.
    pub total_ns: u64,
    /// Of the misses, those of a search that had tried the same name already (the directory
    /// is listed in PATH more than once): pure waste.
    pub repeated_misses: u64,
    /// Kernel time in them, in ns.
    pub repeated_miss_ns: u64,
    /// The cgroups whose processes missed there.
    pub cgroups: Vec<String>,
}

impl MissTable {
    /// A table of at most `capacity` (cgroup, directory) pairs.
    pub fn new(capacity: usize) -> Self {
        Self { capacity, dirs: HashMap::new(), folded: 0 }
    }

    /// Adds misses to a cgroup's directory.
    pub fn add(&mut self, cgroup: &str, directory: &str, counts: &MissCounts) {
        let key = (cgroup.to_owned(), directory.to_owned());
        if !self.dirs.contains_key(&key) && self.dirs.len() >= self.capacity {
            self.folded += counts.misses;
            return;
        }
        self.dirs.entry(key).or_default().add(counts);
    }

    /// Repeated misses and their kernel time, every directory.
    pub fn repeated(&self) -> (u64, u64) {
        self.dirs.values().fold((0, 0), |(n, ns), c| (n + c.repeated, ns + c.repeated_ns))
    }

    /// Per missed directory, as `top` rows: its misses are exec attempts that all failed
    /// with ENOENT (no latency buckets: their time only).
    pub fn groups(&self) -> HashMap<String, GroupRow> {
        let mut out: HashMap<String, GroupRow> = HashMap::new();
        for ((_, dir), c) in &self.dirs {
            let row = out.entry(dir.clone()).or_insert_with(|| GroupRow { name: dir.clone(), ..GroupRow::default() });
            row.attempts += c.misses;
            row.enoent += c.misses;
            row.exec.count += c.misses;
            row.exec.sum_ns += c.ns;
        }
        out
    }

    /// The missed directories, most misses first.
    pub fn directories(&self) -> Vec<MissedDirectory> {
        let mut by_dir: HashMap<&str, MissedDirectory> = HashMap::new();
        for ((cgroup, dir), c) in &self.dirs {
            let d = by_dir.entry(dir).or_insert_with(|| MissedDirectory {
                directory: dir.clone(),
                misses: 0,
                total_ns: 0,
                repeated_misses: 0,
                repeated_miss_ns: 0,
                cgroups: Vec::new(),
            });
            d.misses += c.misses;
            d.total_ns += c.ns;
            d.repeated_misses += c.repeated;
            d.repeated_miss_ns += c.repeated_ns;
            d.cgroups.push(cgroup.clone());
        }
        let mut out: Vec<MissedDirectory> = by_dir.into_values().collect();
        for d in &mut out {
            d.cgroups.sort();
        }
        out.sort_by(|a, b| b.misses.cmp(&a.misses).then_with(|| a.directory.cmp(&b.directory)));
        out
    }
}

/// The `other` series key of a kernel `OTHER_AGGREGATES` slot.
pub fn other_series(slot: u32) -> SeriesKey {
    use profiler_common::aggregate::*;
    let (call, outcome) = match slot {
        OTHER_SUCCESS => (Call::Exec, "success".to_owned()),
        OTHER_ENOENT => (Call::Exec, outcome_name(2, false)),
        OTHER_EACCES => (Call::Exec, outcome_name(13, false)),
        OTHER_ENOEXEC => (Call::Exec, outcome_name(8, false)),
        OTHER_CHECKED => (Call::Exec, CHECKED.to_owned()),
        OTHER_CHECK_FAILED => (Call::Exec, format!("{CHECK_PREFIX}failed")),
        OTHER_ABANDONED => (Call::Exec, "abandoned".to_owned()),
        OTHER_FORK => (Call::Fork, "success".to_owned()),
        OTHER_FORK_FAILED => (Call::Fork, "failed".to_owned()),
        _ => (Call::Exec, "other".to_owned()),
    };
    SeriesKey { cgroup: OTHER.into(), program: OTHER.into(), call, outcome, compat: false }
}

/// The call of a kernel key.
pub fn call_of(call: u16) -> Call {
    if call == CALL_EXEC { Call::Exec } else { Call::Fork }
}

/// The agent's analysis, the same kinds of figures as `run --json`'s where they are the
/// same kind: attempts per outcome, callers, fork-family calls.
#[derive(Clone, Debug, Serialize)]
pub struct AgentAnalysis {
    /// Exec attempts, all outcomes.
    pub attempts: u64,
    /// Exec attempts per outcome, success first.
    pub outcomes: Vec<OutcomeRow>,
    /// Calling programs, most kernel time first.
    pub callers: Vec<CallerRow>,
    /// Fork-family calls.
    pub fork_calls: ForkRow,
    /// PATH searches, as far as the kernel follows them.
    pub path_searches: AgentPathSearches,
}

/// PATH searches as the agent counts them in the kernel: a process's ENOENT attempts for one
/// name (what follows the last `/`) form its search until an exec that does not fail with
/// ENOENT; a search that ends in a successful exec was found after its misses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentPathSearches {
    /// Searches that found their program after at least one miss.
    pub found_after_misses: u64,
    /// The misses of those searches.
    pub misses_before_found: u64,
    /// Misses of a name the same search had tried already (PATH lists the directory more
    /// than once), found or not: pure waste. Exact while the first try is among the names
    /// the kernel keeps for the searches in progress (8,192, least recently used first).
    pub repeated_misses: u64,
    /// Kernel time in them, in ns.
    pub repeated_miss_ns: u64,
}

/// Exec attempts of one outcome.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeRow {
    /// The outcome's name (`success`, an errno name, `abandoned`).
    pub outcome: String,
    /// Calls counted.
    pub count: u64,
    /// The latency distribution of the timed calls, to one bucket.
    pub latency: Option<BucketedLatency>,
    /// Minor page faults per timed attempt.
    pub minor_faults_per_attempt: Option<f64>,
    /// Major page faults per timed attempt.
    pub major_faults_per_attempt: Option<f64>,
}

/// One calling program (all its cgroups), most kernel time first.
#[derive(Clone, Debug, Serialize)]
pub struct CallerRow {
    /// The calling program (its path, or `comm:NAME`).
    pub program: String,
    /// Exec attempts.
    pub attempts: u64,
    /// Successful exec attempts.
    pub successes: u64,
    /// `AT_EXECVE_CHECK` checks, passed or not (in `attempts`, never in `failed`).
    #[serde(skip_serializing_if = "is_zero")]
    pub checks: u64,
    /// Failed attempts per outcome name, most first.
    pub failed: Vec<(String, u64)>,
    /// Kernel time of its failed (abandoned included) and successful attempts, in ns.
    pub failed_ns: u64,
    /// Kernel time of the successful attempts, in ns.
    pub success_ns: u64,
    /// Fork-family calls.
    pub fork_calls: u64,
    /// Kernel time of the fork-family calls, in ns.
    pub fork_ns: u64,
    /// Its fork-family calls' parent (itself) resident size: mean and largest, in pages.
    pub fork_parent_rss_pages_mean: Option<f64>,
    /// Largest resident size of the parent at a fork-family call, in pages.
    pub fork_parent_rss_pages_max: u64,
    /// PATH searches that found a program after at least one miss.
    pub searches_found_after_misses: u64,
    /// The misses of those searches.
    pub search_misses: u64,
}

/// Fork-family calls, all programs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForkRow {
    /// Calls counted.
    pub count: u64,
    /// Failed calls.
    pub failed: u64,
    /// The latency distribution of the timed calls, to one bucket.
    pub latency: Option<BucketedLatency>,
    /// Mean resident size of the parents at the calls, in pages.
    pub parent_rss_pages_mean: Option<f64>,
    /// Largest resident size of a parent at a call, in pages.
    pub parent_rss_pages_max: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn per(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

fn summarize<'a>(series: impl Iterator<Item = (&'a SeriesKey, &'a Totals)>) -> AgentAnalysis {
    let mut outcomes: HashMap<String, Totals> = HashMap::new();
    let mut callers: HashMap<String, CallerRow> = HashMap::new();
    let mut forks = Totals::default();
    let mut fork_failed = 0;
    let mut path_searches = AgentPathSearches::default();
    for (k, t) in series {
        let c = callers.entry(k.program.clone()).or_insert_with(|| CallerRow {
            program: k.program.clone(),
            attempts: 0,
            successes: 0,
            checks: 0,
            failed: Vec::new(),
            failed_ns: 0,
            success_ns: 0,
            fork_calls: 0,
            fork_ns: 0,
            fork_parent_rss_pages_mean: None,
            fork_parent_rss_pages_max: 0,
            searches_found_after_misses: 0,
            search_misses: 0,
        });
        match k.call {
            Call::Exec => {
                outcomes.entry(k.outcome.clone()).or_default().add(t);
                c.attempts += t.count;
                c.searches_found_after_misses += t.searches;
                c.search_misses += t.search_misses;
                path_searches.found_after_misses += t.searches;
                path_searches.misses_before_found += t.search_misses;
                if k.outcome == "success" {
                    c.successes += t.count;
                    c.success_ns += t.sum_ns;
                } else if is_check(&k.outcome) {
                    c.checks += t.count;
                } else {
                    c.failed_ns += t.sum_ns;
                    match c.failed.iter_mut().find(|(o, _)| *o == k.outcome) {
                        Some((_, n)) => *n += t.count,
                        None => c.failed.push((k.outcome.clone(), t.count)),
                    }
                }
            }
            Call::Fork => {
                forks.add(t);
                if k.outcome != "success" {
                    fork_failed += t.count;
                }
                c.fork_calls += t.count;
                c.fork_ns += t.sum_ns;
                // Summed pages over timed calls, kept as the mean's numerator below.
                c.fork_parent_rss_pages_mean = Some(c.fork_parent_rss_pages_mean.unwrap_or(0.0) + t.rss_pages_sum as f64);
                c.fork_parent_rss_pages_max = c.fork_parent_rss_pages_max.max(t.rss_pages_max);
            }
        }
    }
    let mut outcome_rows: Vec<OutcomeRow> = outcomes
        .into_iter()
        .map(|(outcome, t)| OutcomeRow {
            count: t.count,
            latency: t.latency(),
            minor_faults_per_attempt: per(t.min_flt, t.timed),
            major_faults_per_attempt: per(t.maj_flt, t.timed),
            outcome,
        })
        .collect();
    // Success first, then the failures, most first.
    outcome_rows.sort_by(|a, b| {
        (b.outcome == "success").cmp(&(a.outcome == "success")).then(b.count.cmp(&a.count)).then(a.outcome.cmp(&b.outcome))
    });
    let mut caller_rows: Vec<CallerRow> = callers.into_values().collect();
    for c in &mut caller_rows {
        c.failed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        c.fork_parent_rss_pages_mean = c.fork_parent_rss_pages_mean.and_then(|sum| per(sum as u64, c.fork_calls));
    }
    caller_rows.sort_by(|a, b| {
        (b.failed_ns + b.success_ns + b.fork_ns).cmp(&(a.failed_ns + a.success_ns + a.fork_ns)).then_with(|| a.program.cmp(&b.program))
    });
    AgentAnalysis {
        attempts: outcome_rows.iter().map(|o| o.count).sum(),
        outcomes: outcome_rows,
        callers: caller_rows,
        fork_calls: ForkRow {
            count: forks.count,
            failed: fork_failed,
            latency: forks.latency(),
            parent_rss_pages_mean: per(forks.rss_pages_sum, forks.timed),
            parent_rss_pages_max: forks.rss_pages_max,
        },
        path_searches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(latencies: &[u64]) -> Totals {
        let mut t = Totals::default();
        for &ns in latencies {
            t.count += 1;
            t.timed += 1;
            t.sum_ns += ns;
            t.buckets[aggregate::bucket(ns)] += 1;
        }
        t
    }

    fn key(program: &str, call: Call, outcome: &str) -> SeriesKey {
        SeriesKey { cgroup: "/a".into(), program: program.into(), call, outcome: outcome.into(), compat: false }
    }

    #[test]
    fn deltas_add_up_to_what_the_kernel_counted() {
        let first = totals(&[1_000, 2_000]);
        let mut later = first.clone();
        later.add(&totals(&[3_000]));
        let d = later.since(&first);
        assert_eq!((d.count, d.sum_ns), (1, 3_000));
        assert_eq!(d.buckets.iter().sum::<u64>(), 1);
        // An entry removed and made anew: its value is all new.
        let anew = totals(&[5_000]);
        assert_eq!(anew.since(&later).count, 1);
    }

    #[test]
    fn quantiles_hold_the_true_value_within_one_bucket() {
        let values: Vec<u64> = (1..=1000).map(|i| 10_000 + i * 37).collect();
        let l = totals(&values).latency().unwrap();
        let true_p50 = values[499];
        let true_p99 = values[989];
        assert!(l.p50.low_ns <= true_p50 && true_p50 < l.p50.high_ns, "{l:?}");
        assert!(l.p99.low_ns <= true_p99 && true_p99 < l.p99.high_ns, "{l:?}");
        assert!((l.p50.high_ns - l.p50.low_ns) as f64 / l.p50.low_ns as f64 <= 0.091);
        assert_eq!(l.count, 1000);
        assert_eq!(l.mean_ns, values.iter().sum::<u64>() as f64 / 1000.0);
    }

    #[test]
    fn series_past_the_capacity_fold_into_other_and_are_counted() {
        let mut t = SeriesTable::new(3);
        for i in 0..10 {
            t.add(key(&format!("/bin/p{i}"), Call::Exec, "enoent"), &totals(&[1_000, 2_000]));
        }
        // 3 kept, the 7 others in one `other` series (a fourth entry).
        assert_eq!(t.len(), 4);
        assert_eq!(t.folded, 14);
        let s = t.summary();
        assert_eq!(s.attempts, 20, "nothing lost");
        let other = s.callers.iter().find(|c| c.program == OTHER).unwrap();
        assert_eq!(other.attempts, 14);
        // An existing series keeps growing.
        t.add(key("/bin/p0", Call::Exec, "enoent"), &totals(&[1_000]));
        assert_eq!(t.folded, 14);
        assert_eq!(t.summary().attempts, 21);
    }

    /// `AT_EXECVE_CHECK` series: outcome rows of their own, a caller's checks apart from its
    /// successes and failures, and `top`'s rows count them apart from the execs.
    #[test]
    fn checks_are_neither_successes_nor_failures() {
        let mut t = SeriesTable::new(100);
        t.add(key("/usr/bin/x", Call::Exec, "success"), &totals(&[100_000]));
        t.add(key("/usr/bin/x", Call::Exec, &outcome_name(OUTCOME_SUCCESS, true)), &totals(&[9_000, 9_000, 9_000]));
        t.add(key("/usr/bin/x", Call::Exec, &outcome_name(13, true)), &totals(&[1_000]));
        let s = t.summary();
        let row = |o: &str| s.outcomes.iter().find(|r| r.outcome == o).map(|r| r.count);
        assert_eq!((row("success"), row("checked"), row("check_eacces"), row("eacces")), (Some(1), Some(3), Some(1), None));
        let c = &s.callers[0];
        assert_eq!((c.attempts, c.successes, c.checks), (5, 1, 4));
        assert!(c.failed.is_empty(), "{:?}", c.failed);
        assert_eq!(c.success_ns + c.failed_ns, 100_000, "the checks' time is in neither");
        let g = &t.groups(GroupBy::Program)["/usr/bin/x"];
        assert_eq!((g.attempts, g.enoent, g.failed_otherwise, g.checks, g.check_ns), (1, 0, 0, 4, 28_000));
        assert_eq!(g.kernel_ns(), 128_000);
    }

    #[test]
    fn the_summary_splits_outcomes_callers_and_forks() {
        let mut t = SeriesTable::new(100);
        t.add(key("/bin/sh", Call::Exec, "success"), &totals(&[100_000, 200_000]));
        t.add(key("/bin/sh", Call::Exec, "enoent"), &totals(&[10_000, 10_000, 10_000]));
        let mut fork = totals(&[50_000]);
        fork.rss_pages_sum = 1000;
        fork.rss_pages_max = 1000;
        t.add(key("/bin/sh", Call::Fork, "success"), &fork);
        t.add(key("/usr/bin/make", Call::Exec, "success"), &totals(&[1_000]));
        let s = t.summary();
        assert_eq!(s.attempts, 6);
        assert_eq!(s.outcomes[0].outcome, "success");
        assert_eq!(s.outcomes[0].count, 3);
        assert_eq!(s.outcomes[1].outcome, "enoent");
        let sh = &s.callers[0];
        assert_eq!(sh.program, "/bin/sh");
        assert_eq!((sh.attempts, sh.successes, sh.failed_ns, sh.success_ns), (5, 2, 30_000, 300_000));
        assert_eq!(sh.failed, vec![("enoent".to_owned(), 3)]);
        assert_eq!((sh.fork_calls, sh.fork_parent_rss_pages_mean, sh.fork_parent_rss_pages_max), (1, Some(1000.0), 1000));
        assert_eq!((s.fork_calls.count, s.fork_calls.parent_rss_pages_max), (1, 1000));
    }

    #[test]
    fn groups_sum_series_per_program_and_per_cgroup() {
        let mut t = SeriesTable::new(100);
        t.add(key("/bin/sh", Call::Exec, "success"), &totals(&[100_000]));
        t.add(key("/bin/sh", Call::Exec, "enoent"), &totals(&[10_000, 10_000]));
        t.add(key("/bin/sh", Call::Exec, "EACCES"), &totals(&[5_000]));
        let mut fork = totals(&[50_000]);
        fork.rss_pages_max = 300;
        t.add(key("/bin/sh", Call::Fork, "success"), &fork);
        t.add(SeriesKey { cgroup: "/b".into(), ..key("/bin/make", Call::Exec, "success") }, &totals(&[1_000]));
        let programs = t.groups(GroupBy::Program);
        let sh = &programs["/bin/sh"];
        assert_eq!((sh.attempts, sh.enoent, sh.failed_otherwise, sh.forks, sh.rss_pages_max), (4, 2, 1, 1, 300));
        assert_eq!(sh.kernel_ns(), 175_000);
        assert_eq!(sh.exec.latency().unwrap().count, 4);
        let cgroups = t.groups(GroupBy::Cgroup);
        assert_eq!(cgroups["/a"].attempts, 4);
        assert_eq!(cgroups["/b"].attempts, 1);
    }

    #[test]
    fn missed_directories_are_the_names_directories() {
        assert_eq!(missed_directory(b"/usr/local/bin/gcc\0\0\0"), "/usr/local/bin");
        assert_eq!(missed_directory(b"/gcc"), "/");
        assert_eq!(missed_directory(b"gcc"), ".");
        assert_eq!(missed_directory(b"./bin/x\x1b"), "./bin");
        let mut t = MissTable::new(2);
        let c = |misses, ns, repeated, repeated_ns| MissCounts { misses, ns, repeated, repeated_ns };
        t.add("/a", "/usr/local/bin", &c(3, 300, 1, 100));
        t.add("/b", "/usr/local/bin", &c(1, 100, 0, 0));
        t.add("/a", "/usr/local/sbin", &c(5, 50, 2, 20));
        assert_eq!(t.folded, 5, "a third pair does not fit");
        let d = t.directories();
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].misses, d[0].total_ns, d[0].repeated_misses, d[0].repeated_miss_ns), (4, 400, 1, 100));
        assert_eq!(d[0].cgroups, ["/a", "/b"]);
        assert_eq!(t.repeated(), (1, 100));
    }

    #[test]
    fn stacks_are_kept_per_exec_outcome_and_bounded() {
        let mut t = AgentTotals::new(2);
        t.series.add(key("/bin/sh", Call::Exec, "enoent"), &totals(&[1_000, 3_000]));
        t.add_stack(CALL_EXEC, (2, false), &[1, 2], 5);
        t.add_stack(CALL_EXEC, (2, false), &[1, 3], 1);
        t.add_stack(CALL_EXEC, (2, false), &[1, 4], 2);
        t.add_stack(profiler_common::aggregate::CALL_FORK, (0, false), &[9], 7);
        assert_eq!(t.stacks_folded, 2, "the third stack is past the capacity");
        assert_eq!(t.stacks.distinct_stacks(), 3, "two stacks and the stackless one");
        assert_eq!(t.outcome_stats(Outcome::Enoent), (2, 2_000.0));
        assert_eq!(exec_outcome(OUTCOME_ABANDONED, false), Outcome::Abandoned);
        assert_eq!(exec_outcome(8, false), Outcome::Enoexec);
        assert_eq!(exec_outcome(OUTCOME_SUCCESS, true), Outcome::Checked);
        assert_eq!(exec_outcome(13, true), Outcome::CheckFailed);
    }

    #[test]
    fn outcomes_are_named_by_errno() {
        assert_eq!(outcome_name(OUTCOME_SUCCESS, false), "success");
        assert_eq!(outcome_name(2, false), "enoent");
        assert_eq!(outcome_name(7, false), "e2big");
        assert_eq!(outcome_name(OUTCOME_ABANDONED, false), "abandoned");
        // A check is never a success or an exec's failure.
        assert_eq!(outcome_name(OUTCOME_SUCCESS, true), "checked");
        assert_eq!(outcome_name(13, true), "check_eacces");
        assert_eq!(outcome_label("check_eacces"), "check EACCES");
        assert_eq!(exec_outcome_named("check_eacces"), Some(Outcome::CheckFailed));
        assert_eq!(exec_outcome_named("checked"), Some(Outcome::Checked));
        // As run's JSON names the same outcomes, and as terminals show them.
        for o in Outcome::ALL {
            let name = serde_json::to_value(o).unwrap();
            assert!(
                ["success", "enoent", "eacces", "enoexec", "other", "abandoned", "checked", "check_failed"]
                    .contains(&name.as_str().unwrap())
            );
            assert_eq!(outcome_label(name.as_str().unwrap()), o.label());
        }
        assert_eq!((outcome_label("enoent"), outcome_label("errno 600")), ("ENOENT".to_owned(), "errno 600".to_owned()));
    }
}
