//! Exec chains: a process that replaces its image again and again (Linus's benchmark, a shell
//! `exec`ing). A step runs from one successful exec's end (the new image starts) to the next
//! successful exec's end in the same process; inside it the kernel spends time in failed
//! attempts and in the successful exec, and the rest is user space and other syscalls.
//!
//! Steps are folded as the attempts arrive: each process keeps only its current step (its
//! attempts' windows, its off-CPU intervals, its `main`) and the step before it, which stays
//! open for one more step so that an off-CPU interval reported late (by another thread) can
//! still be clipped into it. The parts of a step are joined by a sweep over its windows
//! ([`uncovered`]), so the whole is linear in the run.
use foldhash::HashMap;

use serde::Serialize;

use super::stats::{Distribution, Latencies};
use crate::assemble::events::{ExecAttempt, MainEntry, OffCpu};

/// One step of an exec chain: from one successful exec's end to the next's in the same process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChainStep {
    /// The process (thread-group id) the step ran in.
    pub tgid: u32,
    /// When the step began: the previous successful exec's end (kernel monotonic clock, ns).
    pub start_ns: u64,
    /// When the step ended: this step's successful exec's end (kernel monotonic clock, ns).
    pub end_ns: u64,
    /// Failed exec attempts inside the step.
    pub failed_attempts: u32,
    /// Kernel time in the step's failed attempts.
    pub failed_ns: u64,
    /// Kernel time in the step's successful exec.
    pub exec_ns: u64,
    /// Of `exec_ns`, the part before the point of no return (where the kernel reports it).
    pub exec_before_ns: Option<u64>,
    /// From the new image's start to its `main` (dynamic loader, libc start-up), where a
    /// uprobe on `main` saw it.
    pub startup_ns: Option<u64>,
    /// Time off-CPU inside the step but outside its exec attempts and start-up (the
    /// attempts' own include theirs), counted once however many threads were off.
    pub off_cpu_ns: u64,
}

impl ChainStep {
    /// The step's length, end minus start, in ns.
    pub fn wall_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
    /// The measured parts together.
    pub fn parts_ns(&self) -> u64 {
        self.failed_ns + self.exec_ns + self.startup_ns.unwrap_or(0) + self.off_cpu_ns
    }

    /// What the measured parts do not explain: user space and untraced syscalls (0 where
    /// the parts exceed the step, which [`ChainSummary::steps_with_parts_over_wall`] counts).
    pub fn rest_ns(&self) -> u64 {
        self.wall_ns().saturating_sub(self.parts_ns())
    }
}

/// Exec-chain steps of a run, summarized: each part's distribution per chain step, in ns.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ChainSummary {
    /// Processes with at least one step.
    pub processes: u64,
    /// Chain steps measured, over all processes.
    pub steps: u64,
    /// Step length, per chain step.
    pub wall_ns: Distribution,
    /// Kernel time in failed attempts, per chain step.
    pub failed_ns: Distribution,
    /// Kernel time in the successful exec, per chain step.
    pub exec_ns: Distribution,
    /// What the measured parts leave unexplained (user space, untraced syscalls), per chain step.
    pub rest_ns: Distribution,
    /// Successful exec before / after the point of no return, where the kernel reports it.
    pub exec_before_ns: Option<Distribution>,
    /// Of the successful exec, the part after the point of no return, per chain step.
    pub exec_after_ns: Option<Distribution>,
    /// Present when a uprobe on `main` saw the steps' images start.
    pub startup_ns: Option<Distribution>,
    /// Off-CPU time outside the exec attempts and start-up, per chain step.
    pub off_cpu_ns: Distribution,
    /// Mean failed exec attempts per chain step.
    pub failed_attempts_per_step: f64,
    /// Steps whose measured parts add up to more than their wall time (overlapping windows
    /// the sweep could not separate): their rest is counted as 0, and this says how often.
    pub steps_with_parts_over_wall: u64,
}

/// A step still collecting its parts.
#[derive(Clone, Debug, Default)]
struct OpenStep {
    start_ns: u64,
    failed: u32,
    failed_ns: u64,
    /// Exec attempt windows inside the step.
    attempts: Vec<(u64, u64)>,
    off_cpu: Vec<(u64, u64)>,
    main_ns: Option<u64>,
}

/// A closed step waiting one more step for late off-CPU intervals.
#[derive(Clone, Debug)]
struct ClosedStep {
    step: ChainStep,
    covered: Vec<(u64, u64)>,
    off_cpu: Vec<(u64, u64)>,
}

#[derive(Clone, Debug, Default)]
struct Process {
    /// None until the first successful exec: attempts before it belong to no step.
    open: Option<OpenStep>,
    closed: Option<ClosedStep>,
    had_step: bool,
}

/// Folds exec attempts, `main` entries and off-CPU intervals into chain-step figures.
#[derive(Clone, Debug, Default)]
pub struct ChainTracker {
    processes: HashMap<u32, Process>,
    tally: StepTally,
}

impl ChainTracker {
    /// Adds one exec attempt: a failed one joins its process's open step; a successful one
    /// closes that step and opens the next. An `AT_EXECVE_CHECK` check does neither: it
    /// executes nothing, and whether it passes is its answer, not a failure (its time stays
    /// in the step's rest).
    pub fn attempt(&mut self, a: &ExecAttempt) {
        if a.check {
            return;
        }
        let p = self.processes.entry(a.tgid).or_default();
        if a.ret != 0 {
            if let Some(open) = &mut p.open {
                open.failed += 1;
                open.failed_ns += a.duration_ns();
                open.attempts.push((a.enter_ns, a.exit_ns));
            }
            return;
        }
        if let Some(open) = p.open.take() {
            if let Some(prev) = p.closed.take() {
                self.tally.add(&prev.finish());
            }
            p.closed = Some(close(a, open));
            p.had_step = true;
        }
        p.open = Some(OpenStep { start_ns: a.exit_ns, ..OpenStep::default() });
    }

    /// Adds a uprobe hit on `main`: the first one after the open step's start is its start-up end.
    pub fn main(&mut self, m: &MainEntry) {
        if let Some(open) = self.processes.get_mut(&m.tgid).and_then(|p| p.open.as_mut())
            && open.main_ns.is_none()
            && m.ts_ns > open.start_ns
        {
            open.main_ns = Some(m.ts_ns);
        }
    }

    /// Adds an off-CPU interval to the steps of its process it overlaps (the open one and the one
    /// before, still waiting for late intervals).
    pub fn off_cpu(&mut self, o: &OffCpu) {
        let Some(p) = self.processes.get_mut(&o.tgid) else { return };
        if let Some(closed) = &mut p.closed
            && o.start_ns < closed.step.end_ns
        {
            closed.off_cpu.push((o.start_ns, o.end_ns));
        }
        if let Some(open) = &mut p.open
            && o.end_ns > open.start_ns
        {
            open.off_cpu.push((o.start_ns, o.end_ns));
        }
    }

    /// A process is gone: its last step is final (its open step never closes).
    pub fn process_gone(&mut self, tgid: u32) {
        if let Some(p) = self.processes.remove(&tgid) {
            self.flush(p);
        }
    }

    /// Closes every process's steps and summarizes them; None when no step completed.
    pub fn summary(mut self) -> Option<ChainSummary> {
        let mut left: Vec<(u32, Process)> = self.processes.drain().collect();
        left.sort_by_key(|(tgid, _)| *tgid);
        for (_, p) in left {
            self.flush(p);
        }
        self.tally.summary()
    }

    fn flush(&mut self, p: Process) {
        if let Some(prev) = p.closed {
            self.tally.add(&prev.finish());
        }
        if p.had_step {
            self.tally.processes += 1;
        }
    }
}

/// Closes the open step with the successful exec `a` that ends it.
fn close(a: &ExecAttempt, open: OpenStep) -> ClosedStep {
    let step = ChainStep {
        tgid: a.tgid,
        start_ns: open.start_ns,
        end_ns: a.exit_ns,
        failed_attempts: open.failed,
        failed_ns: open.failed_ns,
        exec_ns: a.duration_ns(),
        exec_before_ns: a.prepare_ns.map(|p| p.saturating_sub(a.enter_ns)),
        startup_ns: open.main_ns.filter(|&m| m < a.exit_ns).map(|m| m - open.start_ns),
        off_cpu_ns: 0,
    };
    let mut covered = open.attempts;
    covered.push((a.enter_ns, a.exit_ns));
    if let Some(s) = step.startup_ns {
        covered.push((step.start_ns, step.start_ns + s));
    }
    ClosedStep { step, covered, off_cpu: open.off_cpu }
}

impl ClosedStep {
    fn finish(mut self) -> ChainStep {
        self.step.off_cpu_ns = uncovered((self.step.start_ns, self.step.end_ns), &self.off_cpu, &self.covered);
        self.step
    }
}

/// Length of the time inside `window` that some interval of `marked` covers and no interval
/// of `covered` does: a sweep over the sorted boundaries of both sets, O(n log n). Intervals
/// may overlap, nest, or be empty.
pub fn uncovered(window: (u64, u64), marked: &[(u64, u64)], covered: &[(u64, u64)]) -> u64 {
    // (time, +1/-1 for marked, +1/-1 for covered); ends sort before starts at equal times.
    let mut edges: Vec<(u64, i8, i32, i32)> = Vec::with_capacity(2 * (marked.len() + covered.len()));
    let clip = |&(s, e): &(u64, u64)| (s.max(window.0), e.min(window.1));
    for (s, e) in marked.iter().map(clip).filter(|(s, e)| s < e) {
        edges.push((s, 1, 1, 0));
        edges.push((e, 0, -1, 0));
    }
    for (s, e) in covered.iter().map(clip).filter(|(s, e)| s < e) {
        edges.push((s, 1, 0, 1));
        edges.push((e, 0, 0, -1));
    }
    edges.sort_unstable();
    let (mut depth_marked, mut depth_covered, mut last, mut total) = (0i32, 0i32, 0u64, 0u64);
    for (t, _, dm, dc) in edges {
        if depth_marked > 0 && depth_covered == 0 {
            total += t - last;
        }
        depth_marked += dm;
        depth_covered += dc;
        last = t;
    }
    total
}

/// Step figures folded as steps close.
#[derive(Clone, Debug, Default)]
struct StepTally {
    processes: u64,
    steps: u64,
    failed_attempts: u64,
    parts_over_wall: u64,
    wall: Latencies,
    failed: Latencies,
    exec: Latencies,
    rest: Latencies,
    before: Latencies,
    after: Latencies,
    startup: Latencies,
    off_cpu: Latencies,
}

impl StepTally {
    fn add(&mut self, s: &ChainStep) {
        self.steps += 1;
        self.failed_attempts += u64::from(s.failed_attempts);
        self.parts_over_wall += u64::from(s.parts_ns() > s.wall_ns());
        self.wall.record(s.wall_ns());
        self.failed.record(s.failed_ns);
        self.exec.record(s.exec_ns);
        self.rest.record(s.rest_ns());
        self.off_cpu.record(s.off_cpu_ns);
        if let Some(b) = s.exec_before_ns {
            self.before.record(b);
            self.after.record(s.exec_ns - b);
        }
        if let Some(st) = s.startup_ns {
            self.startup.record(st);
        }
    }

    fn summary(&self) -> Option<ChainSummary> {
        Some(ChainSummary {
            processes: self.processes,
            steps: self.steps,
            wall_ns: self.wall.summary()?,
            failed_ns: self.failed.summary()?,
            exec_ns: self.exec.summary()?,
            rest_ns: self.rest.summary()?,
            exec_before_ns: self.before.summary(),
            exec_after_ns: self.after.summary(),
            startup_ns: self.startup.summary(),
            off_cpu_ns: self.off_cpu.summary()?,
            failed_attempts_per_step: self.failed_attempts as f64 / self.steps as f64,
            steps_with_parts_over_wall: self.parts_over_wall,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::attempt;

    fn track(attempts: &[ExecAttempt], mains: &[(u32, u64)], off: &[OffCpu]) -> ChainTracker {
        // Events in time order, as the ring buffer hands them over.
        enum E<'a> {
            A(&'a ExecAttempt),
            M(MainEntry),
            O(&'a OffCpu),
        }
        let mut all: Vec<(u64, E<'_>)> = attempts.iter().map(|a| (a.exit_ns, E::A(a))).collect();
        all.extend(mains.iter().map(|&(tgid, ts_ns)| (ts_ns, E::M(MainEntry { pid: tgid, tgid, ts_ns }))));
        all.extend(off.iter().map(|o| (o.end_ns, E::O(o))));
        all.sort_by_key(|(t, _)| *t);
        let mut t = ChainTracker::default();
        for (_, e) in all {
            match e {
                E::A(a) => t.attempt(a),
                E::M(m) => t.main(&m),
                E::O(o) => t.off_cpu(o),
            }
        }
        t
    }

    #[test]
    fn a_step_runs_from_one_successful_exec_to_the_next() {
        // Launch exec, then two steps with two ENOENT attempts each.
        let a = [
            attempt(7, 0, 100, 0, None),
            attempt(7, 200, 210, -2, None),
            attempt(7, 220, 240, -2, None),
            attempt(7, 250, 400, 0, None),
            attempt(7, 500, 505, -2, None),
            attempt(7, 510, 515, -2, None),
            attempt(7, 520, 700, 0, None),
            attempt(9, 0, 50, 0, None), // another process with a single exec: no step
        ];
        let sum = track(&a, &[], &[]).summary().unwrap();
        assert_eq!((sum.processes, sum.steps), (1, 2));
        assert_eq!(sum.failed_attempts_per_step, 2.0);
        assert_eq!((sum.failed_ns.total_ns, sum.exec_ns.total_ns), (30 + 10, 150 + 180));
        assert_eq!(sum.wall_ns.total_ns, 300 + 300);
        assert_eq!(sum.rest_ns.total_ns, 120 + 110);
        assert_eq!(sum.wall_ns.total_ns, sum.failed_ns.total_ns + sum.exec_ns.total_ns + sum.rest_ns.total_ns);
        assert!(ChainTracker::default().summary().is_none());
    }

    /// `AT_EXECVE_CHECK` checks, passed or refused, neither close a step nor fail in one.
    #[test]
    fn checks_are_no_steps_and_no_failed_attempts() {
        let checked = |enter_ns, ret| {
            let mut a = attempt(7, enter_ns, enter_ns + 5, ret, None);
            a.check = true;
            a
        };
        let a = [
            attempt(7, 0, 100, 0, None),
            checked(110, 0),
            checked(120, 0),
            checked(130, -13),
            attempt(7, 200, 210, -2, None),
            attempt(7, 250, 400, 0, None),
            checked(410, 0),
            attempt(7, 520, 700, 0, None),
        ];
        let sum = track(&a, &[], &[]).summary().unwrap();
        assert_eq!(sum.steps, 2);
        assert_eq!(sum.failed_attempts_per_step, 0.5);
    }

    #[test]
    fn start_up_and_off_cpu_split_the_rest_of_a_step() {
        // Step 100..400: failed 150..160, exec 300..400; main at 130; off-CPU 140..170
        // (10 of it inside the failed attempt), 250..260, and 110..120 (inside start-up).
        let a = [attempt(3, 0, 100, 0, None), attempt(3, 150, 160, -2, None), attempt(3, 300, 400, 0, None)];
        let off = [
            OffCpu { pid: 3, tgid: 3, start_ns: 140, end_ns: 170 },
            OffCpu { pid: 3, tgid: 3, start_ns: 250, end_ns: 260 },
            OffCpu { pid: 3, tgid: 3, start_ns: 110, end_ns: 120 },
            OffCpu { pid: 9, tgid: 9, start_ns: 0, end_ns: 999 },
        ];
        let sum = track(&a, &[(3, 130), (3, 50)], &off).summary().unwrap();
        assert_eq!(sum.startup_ns.unwrap().p50_ns, 30);
        assert_eq!(sum.off_cpu_ns.total_ns, 30);
        assert_eq!(sum.rest_ns.total_ns, 300 - 10 - 100 - 30 - 30);
    }

    #[test]
    fn two_threads_off_cpu_at_once_count_once() {
        let a = [attempt(3, 0, 100, 0, None), attempt(3, 900, 1_000, 0, None)];
        let off = [OffCpu { pid: 3, tgid: 3, start_ns: 200, end_ns: 600 }, OffCpu { pid: 4, tgid: 3, start_ns: 300, end_ns: 700 }];
        let sum = track(&a, &[], &off).summary().unwrap();
        assert_eq!(sum.off_cpu_ns.total_ns, 500, "the union, never more than the step");
    }

    #[test]
    fn an_off_cpu_interval_across_a_step_boundary_is_split_between_the_steps() {
        // Steps 100..400 and 400..700; another thread off-CPU 350..450, reported at 450.
        let a = [attempt(3, 0, 100, 0, None), attempt(3, 390, 400, 0, None), attempt(3, 690, 700, 0, None)];
        let off = [OffCpu { pid: 4, tgid: 3, start_ns: 350, end_ns: 450 }];
        let sum = track(&a, &[], &off).summary().unwrap();
        assert_eq!(sum.steps, 2);
        assert_eq!(sum.off_cpu_ns.total_ns, 40 + 50, "350..390 in the first, 400..450 in the second");
    }

    /// The sweep against a brute-force count over every nanosecond, on random small inputs
    /// with overlapping, nested and empty intervals.
    #[test]
    fn uncovered_matches_brute_force() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..2_000 {
            let mut intervals = |k: u64| -> Vec<(u64, u64)> {
                (0..next(k))
                    .map(|_| {
                        let s = next(60);
                        (s, s + next(25))
                    })
                    .collect()
            };
            let marked = intervals(6);
            let covered = intervals(6);
            let w0 = next(40);
            let window = (w0, w0 + next(40));
            let inside = |t: u64, list: &[(u64, u64)]| list.iter().any(|&(s, e)| s <= t && t < e);
            let brute = (window.0..window.1).filter(|&t| inside(t, &marked) && !inside(t, &covered)).count() as u64;
            assert_eq!(uncovered(window, &marked, &covered), brute, "{window:?} {marked:?} {covered:?}");
        }
    }
}
