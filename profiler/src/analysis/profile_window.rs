//! The agent's recent exec samples, for `/debug/pprof/exec?seconds=N`: each read of the
//! kernel's aggregates adds the kernel stacks sampled inside exec attempts (named once per
//! distinct stack, with the phase `run` would attribute them to) and the attempts' measured
//! time, per series (cgroup, program, outcome); reads older than the window's span are
//! dropped. A profile of the last N seconds sums the reads inside it, each series' measured
//! time shared by its samples, as `run --pprof` shares an outcome's.
use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    aggregates::{Call, SeriesKey, Totals},
    attribution::Symbolizer,
    phases::PhaseModel,
};

/// A named stack: its phase, and its functions outermost first.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NamedStack {
    /// The phase `run` attributes the stack to.
    pub phase: String,
    /// Raw symbol names (`[unknown 0x…]` where none covers the address).
    pub frames: Vec<String>,
}

/// Kernel stacks named once: each distinct stack's symbols and phase, kept for later reads
/// (at most `MAX_NAMED`; past that the names start again). The metrics' phase counts and the
/// profile window share it.
#[derive(Default)]
pub struct StackNames {
    stacks: HashMap<Vec<u64>, Arc<NamedStack>>,
}

impl StackNames {
    /// `frames` (innermost first) named: symbols outermost first, and the phase `run` gives.
    pub fn named(&mut self, frames: &[u64], symbols: &dyn Symbolizer, model: &PhaseModel) -> Arc<NamedStack> {
        if let Some(s) = self.stacks.get(frames) {
            return s.clone();
        }
        if self.stacks.len() >= MAX_NAMED {
            self.stacks.clear();
        }
        let names: Vec<String> = if frames.is_empty() {
            vec!["[no kernel stack]".to_owned()]
        } else {
            symbols.symbolize(frames).into_iter().zip(frames).map(|(n, a)| n.unwrap_or_else(|| format!("[unknown {a:#x}]"))).collect()
        };
        let phase = if frames.is_empty() { model.other() } else { model.attribute(&names).phase };
        let stack = Arc::new(NamedStack { phase: model.phase(phase).name.clone(), frames: names.into_iter().rev().collect() });
        self.stacks.insert(frames.to_vec(), stack.clone());
        stack
    }
}

/// The labels a profile's samples carry: the series they were counted under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SampleSeries {
    /// As [`SeriesKey`]'s.
    pub cgroup: String,
    /// As [`SeriesKey`]'s.
    pub program: String,
    /// As [`SeriesKey`]'s.
    pub outcome: String,
}

impl SampleSeries {
    fn of(key: &SeriesKey) -> Self {
        Self { cgroup: key.cgroup.clone(), program: key.program.clone(), outcome: key.outcome.clone() }
    }
}

/// One read's additions.
struct Read {
    at: Instant,
    samples: Vec<(Arc<SampleSeries>, Arc<NamedStack>, u64)>,
    /// Exec attempts' measured kernel time per series, in ns.
    time: Vec<(Arc<SampleSeries>, u64)>,
}

/// A stack of a profile: its series, its samples in the window, and the measured attempt
/// time they stand for.
#[derive(Debug, PartialEq)]
pub struct WindowStack {
    /// The series the samples were counted under.
    pub series: Arc<SampleSeries>,
    /// Where they were taken.
    pub stack: Arc<NamedStack>,
    /// Samples in the window.
    pub samples: u64,
    /// The measured attempt time they stand for, in ns.
    pub exec_ns: u64,
}

/// What the last N seconds hold.
#[derive(Debug, PartialEq)]
pub struct WindowProfile {
    /// Most samples first.
    pub stacks: Vec<WindowStack>,
    /// How much time the profile covers: N seconds, or less when the agent has not run
    /// that long (or its oldest reads were dropped for space).
    pub covered: Duration,
    /// Samples whose series had no measured time in the window (its calls' start was not
    /// seen): each stands for one sampling period.
    pub untimed_samples: u64,
}

/// Distinct named stacks and series kept; past this the caches start again.
const MAX_NAMED: usize = 1 << 14;

/// The reads of the last span, bounded in rows.
pub struct ProfileWindow {
    span: Duration,
    started: Instant,
    reads: VecDeque<Read>,
    /// Entries (sample and time rows) over all reads, bounded by `max_entries`: the oldest
    /// reads go first.
    entries: usize,
    max_entries: usize,
    /// Samples dropped with reads that went for space before their time.
    pub dropped_samples: u64,
    /// The time of the last read dropped for space: what is kept covers only after it.
    dropped_until: Option<Instant>,
    series: HashMap<SampleSeries, Arc<SampleSeries>>,
}

impl ProfileWindow {
    /// A window of `span` from `started` (the agent's start), of at most `max_entries` rows.
    pub fn new(span: Duration, max_entries: usize, started: Instant) -> Self {
        Self {
            span,
            started,
            reads: VecDeque::new(),
            entries: 0,
            max_entries,
            dropped_samples: 0,
            dropped_until: None,
            series: HashMap::new(),
        }
    }

    /// How far back a profile may reach.
    pub fn span(&self) -> Duration {
        self.span
    }

    /// Adds one read at `at`: `samples` (series, named stack, count) of exec attempts, and
    /// the `deltas` of its series (only exec attempts' are kept).
    pub fn push<'a>(
        &mut self,
        at: Instant,
        samples: impl IntoIterator<Item = (&'a SeriesKey, Arc<NamedStack>, u64)>,
        deltas: &[(SeriesKey, Totals)],
    ) {
        let mut read = Read { at, samples: Vec::new(), time: Vec::new() };
        for (series, stack, count) in samples {
            if series.call != Call::Exec || count == 0 {
                continue;
            }
            read.samples.push((self.interned(series), stack, count));
        }
        for (series, delta) in deltas {
            if series.call == Call::Exec && delta.sum_ns > 0 {
                read.time.push((self.interned(series), delta.sum_ns));
            }
        }
        self.entries += read.samples.len() + read.time.len();
        if !read.samples.is_empty() || !read.time.is_empty() {
            self.reads.push_back(read);
        }
        self.trim(at);
    }

    /// Drops the reads older than the span, then the oldest while over the bound.
    fn trim(&mut self, now: Instant) {
        while let Some(first) = self.reads.front() {
            let old = now.saturating_duration_since(first.at) > self.span;
            if !old && self.entries <= self.max_entries {
                break;
            }
            if !old {
                self.dropped_samples += first.samples.iter().map(|s| s.2).sum::<u64>();
                self.dropped_until = Some(first.at);
            }
            self.entries -= first.samples.len() + first.time.len();
            self.reads.pop_front();
        }
    }

    fn interned(&mut self, key: &SeriesKey) -> Arc<SampleSeries> {
        let series = SampleSeries::of(key);
        if let Some(s) = self.series.get(&series) {
            return s.clone();
        }
        if self.series.len() >= MAX_NAMED {
            self.series.clear();
        }
        let s = Arc::new(series.clone());
        self.series.insert(series, s.clone());
        s
    }

    /// The reads of the last `seconds` before `now`, summed per series and stack; a series'
    /// measured time shared by its samples (a sampling period, `period_ns`, per sample where
    /// the series has none).
    pub fn last(&self, seconds: Duration, now: Instant, period_ns: u64) -> WindowProfile {
        // Reads dropped for space: the profile starts after the last of them.
        let from = now.checked_sub(seconds).unwrap_or(self.started).max(self.started).max(self.dropped_until.unwrap_or(self.started));
        let mut counts: HashMap<(Arc<SampleSeries>, Arc<NamedStack>), u64> = HashMap::new();
        let mut time: HashMap<Arc<SampleSeries>, u64> = HashMap::new();
        for read in self.reads.iter().filter(|r| r.at > from && r.at <= now) {
            for (series, stack, n) in &read.samples {
                *counts.entry((series.clone(), stack.clone())).or_default() += n;
            }
            for (series, ns) in &read.time {
                *time.entry(series.clone()).or_default() += ns;
            }
        }
        let mut per_series: HashMap<&Arc<SampleSeries>, u64> = HashMap::new();
        for ((series, _), n) in &counts {
            *per_series.entry(series).or_default() += n;
        }
        let mut untimed_samples = 0;
        let mut stacks: Vec<WindowStack> = counts
            .iter()
            .map(|((series, stack), &samples)| {
                let exec_ns = match time.get(series) {
                    Some(&ns) => (ns as f64 * samples as f64 / per_series[series] as f64).round() as u64,
                    None => {
                        untimed_samples += samples;
                        samples * period_ns
                    }
                };
                WindowStack { series: series.clone(), stack: stack.clone(), samples, exec_ns }
            })
            .collect();
        stacks.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.stack.frames.cmp(&b.stack.frames)));
        WindowProfile { stacks, covered: now.saturating_duration_since(from), untimed_samples }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;
    impl Symbolizer for Names {
        fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
            addrs
                .iter()
                .map(|a| match a {
                    1 => Some("do_execveat_common.isra.0".to_owned()),
                    2 => Some("do_open_execat".to_owned()),
                    3 => Some("path_openat".to_owned()),
                    4 => Some("bprm_execve".to_owned()),
                    _ => None,
                })
                .collect()
        }
    }

    fn series(program: &str, outcome: &str) -> SeriesKey {
        SeriesKey { cgroup: "/a.service".into(), program: program.into(), call: Call::Exec, outcome: outcome.into(), compat: false }
    }

    /// `w.push` of `samples` (series, frames, count) named by `Names`.
    fn push<const N: usize>(w: &mut ProfileWindow, at: Instant, samples: [(&SeriesKey, &[u64], u64); N], deltas: &[(SeriesKey, Totals)]) {
        let model = PhaseModel::builtin().unwrap();
        let mut names = StackNames::default();
        let named: Vec<_> = samples.into_iter().map(|(s, f, n)| (s, names.named(f, &Names, &model), n)).collect();
        w.push(at, named, deltas);
    }

    fn timed(ns: u64) -> Totals {
        Totals { count: 1, timed: 1, sum_ns: ns, ..Totals::default() }
    }

    #[test]
    fn a_window_sums_its_reads_and_shares_each_series_time_by_its_samples() {
        let t0 = Instant::now();
        let mut w = ProfileWindow::new(Duration::from_secs(60), 1000, t0);
        let (sh, true_) = (series("/bin/sh", "enoent"), series("/bin/sh", "success"));
        let lookup: &[u64] = &[3, 2, 1];
        let binfmt: &[u64] = &[4, 1];
        let at = |s: u64| t0 + Duration::from_secs(s);
        push(&mut w, at(1), [(&sh, lookup, 3), (&true_, binfmt, 1)], &[(sh.clone(), timed(3_000)), (true_.clone(), timed(500))]);
        push(&mut w, at(2), [(&sh, lookup, 1)], &[(sh.clone(), timed(1_000))]);
        // A fork's samples and time are not an exec's.
        let fork = SeriesKey { call: Call::Fork, ..series("/bin/sh", "success") };
        push(&mut w, at(2), [(&fork, binfmt, 9)], &[(fork.clone(), timed(9_000))]);
        let p = w.last(Duration::from_secs(30), at(3), 1_000_000);
        assert_eq!(p.stacks.len(), 2);
        let first = &p.stacks[0];
        assert_eq!((first.series.outcome.as_str(), first.samples, first.exec_ns), ("enoent", 4, 4_000));
        assert_eq!(first.stack.frames, ["do_execveat_common.isra.0", "do_open_execat", "path_openat"], "outermost first");
        assert_eq!(first.stack.phase, "lookup");
        assert_eq!((p.stacks[1].samples, p.stacks[1].exec_ns), (1, 500));
        assert_eq!(p.covered, Duration::from_secs(3), "from the start, not 30 s before it");
        // The last second only.
        let p = w.last(Duration::from_secs(1), at(2), 1_000_000);
        assert_eq!(p.stacks.iter().map(|s| (s.samples, s.exec_ns)).collect::<Vec<_>>(), [(1, 1_000)]);
        assert_eq!(p.covered, Duration::from_secs(1));
    }

    #[test]
    fn old_reads_leave_the_window_and_space_drops_the_oldest_counted() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let sh = series("/bin/sh", "enoent");
        let stack: &[u64] = &[2, 1];
        let mut w = ProfileWindow::new(Duration::from_secs(10), 30, t0);
        for s in 1..=20 {
            push(&mut w, at(s), [(&sh, stack, 1)], &[(sh.clone(), timed(100))]);
        }
        assert_eq!(w.reads.len(), 11, "the reads of 10..=20 s");
        let p = w.last(Duration::from_secs(10), at(20), 1_000);
        assert_eq!((p.stacks[0].samples, p.stacks[0].exec_ns, p.covered), (10, 1_000, Duration::from_secs(10)));
        assert_eq!(w.dropped_samples, 0, "aged out, not dropped");
        // 2 rows a read, 4 at most: the read of 1 s goes for space, and the profile says so.
        let mut w = ProfileWindow::new(Duration::from_secs(10), 4, t0);
        for s in 1..=3 {
            push(&mut w, at(s), [(&sh, stack, 1)], &[(sh.clone(), timed(100))]);
        }
        assert_eq!(w.dropped_samples, 1);
        let p = w.last(Duration::from_secs(10), at(3), 1_000);
        assert_eq!((p.stacks[0].samples, p.covered), (2, Duration::from_secs(2)), "after the read dropped");
    }

    #[test]
    fn samples_without_measured_time_stand_for_a_period_and_lost_stacks_are_named() {
        let t0 = Instant::now();
        let mut w = ProfileWindow::new(Duration::from_secs(10), 100, t0);
        let sh = series("/bin/sh", "success");
        push(&mut w, t0 + Duration::from_secs(1), [(&sh, &[][..], 2), (&sh, &[99u64][..], 1)], &[]);
        let p = w.last(Duration::from_secs(5), t0 + Duration::from_secs(2), 1_000);
        assert_eq!(p.untimed_samples, 3);
        assert_eq!(p.stacks[0].stack.frames, ["[no kernel stack]"]);
        assert_eq!(p.stacks[0].exec_ns, 2_000);
        assert_eq!(p.stacks[1].stack.frames, ["[unknown 0x63]"]);
    }
}
