//! Exec chains: a process that replaces its image again and again (Linus's benchmark, a shell
//! `exec`ing). A step runs from one successful exec's end (the new image starts) to the next
//! successful exec's end in the same process; inside it the kernel spends time in failed
//! attempts and in the successful exec, and the rest is user space and other syscalls.
use std::collections::BTreeMap;

use serde::Serialize;

use super::stats::Distribution;
use crate::events::ExecAttempt;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainStep {
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
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
    /// Time off-CPU outside the step's exec attempts (the attempts' own include theirs).
    pub off_cpu_ns: u64,
}

impl ChainStep {
    pub fn wall_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
    /// What the measured parts do not explain: user space and untraced syscalls.
    pub fn rest_ns(&self) -> u64 {
        self.wall_ns().saturating_sub(self.failed_ns + self.exec_ns + self.startup_ns.unwrap_or(0) + self.off_cpu_ns)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ChainSummary {
    /// Processes with at least one step.
    pub processes: u64,
    pub steps: u64,
    pub wall_ns: Distribution,
    pub failed_ns: Distribution,
    pub exec_ns: Distribution,
    pub rest_ns: Distribution,
    /// Successful exec before / after the point of no return, where the kernel reports it.
    pub exec_before_ns: Option<Distribution>,
    pub exec_after_ns: Option<Distribution>,
    /// Present when a uprobe on `main` saw the steps' images start.
    pub startup_ns: Option<Distribution>,
    pub off_cpu_ns: Distribution,
    pub failed_attempts_per_step: f64,
}

/// Steps of every process that exec'd successfully at least twice.
pub fn steps(attempts: &[&ExecAttempt]) -> Vec<ChainStep> {
    let mut by_process: BTreeMap<u32, Vec<&ExecAttempt>> = BTreeMap::new();
    for a in attempts {
        by_process.entry(a.tgid).or_default().push(a);
    }
    let mut out = Vec::new();
    for (tgid, mut list) in by_process {
        list.sort_by_key(|a| (a.enter_ns, a.exit_ns));
        let mut start: Option<u64> = None;
        let (mut failed, mut failed_ns) = (0u32, 0u64);
        for a in list {
            if a.ret != 0 {
                failed += 1;
                failed_ns += a.duration_ns();
                continue;
            }
            if let Some(s) = start {
                out.push(ChainStep {
                    tgid,
                    start_ns: s,
                    end_ns: a.exit_ns,
                    failed_attempts: failed,
                    failed_ns,
                    exec_ns: a.duration_ns(),
                    exec_before_ns: a.prepare_ns.map(|p| p.saturating_sub(a.enter_ns)),
                    startup_ns: None,
                    off_cpu_ns: 0,
                });
            }
            start = Some(a.exit_ns);
            (failed, failed_ns) = (0, 0);
        }
    }
    out
}

/// An off-CPU interval of a traced thread.
#[derive(Clone, Copy, Debug)]
pub struct OffCpu {
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> u64 {
    a.1.min(b.1).saturating_sub(a.0.max(b.0))
}

/// Fills in each step's start-up time (first `main` of its process after the step began)
/// and its off-CPU time outside exec attempts and outside that start-up, so the parts of a
/// step never overlap and add up to its wall time.
pub fn annotate(steps: &mut [ChainStep], attempts: &[&ExecAttempt], mains: &[(u32, u64)], off_cpu: &[OffCpu]) {
    let mut mains_by: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for &(tgid, ts) in mains {
        mains_by.entry(tgid).or_default().push(ts);
    }
    mains_by.values_mut().for_each(|v| v.sort_unstable());
    let mut off_by: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for o in off_cpu {
        off_by.entry(o.tgid).or_default().push((o.start_ns, o.end_ns));
    }
    let mut attempts_by: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for a in attempts {
        attempts_by.entry(a.tgid).or_default().push((a.enter_ns, a.exit_ns));
    }
    for step in steps.iter_mut() {
        let window = (step.start_ns, step.end_ns);
        if let Some(list) = mains_by.get(&step.tgid) {
            let i = list.partition_point(|&t| t <= step.start_ns);
            if let Some(&t) = list.get(i).filter(|&&t| t < step.end_ns) {
                step.startup_ns = Some(t - step.start_ns);
            }
        }
        // Windows already accounted for: the step's exec attempts and its start-up to main.
        let mut inside: Vec<(u64, u64)> =
            attempts_by.get(&step.tgid).map(|v| v.iter().copied().filter(|&w| overlap(w, window) > 0).collect()).unwrap_or_default();
        if let Some(s) = step.startup_ns {
            inside.push((step.start_ns, step.start_ns + s));
        }
        step.off_cpu_ns = off_by
            .get(&step.tgid)
            .map(|v| {
                v.iter()
                    .map(|&o| overlap(o, window).saturating_sub(inside.iter().map(|&w| overlap(o, w)).sum::<u64>()))
                    .sum()
            })
            .unwrap_or(0);
    }
}

pub fn summarize(steps: &[ChainStep]) -> Option<ChainSummary> {
    let dist = |f: fn(&ChainStep) -> u64| Distribution::of(steps.iter().map(f).collect());
    let processes = steps.iter().map(|s| s.tgid).collect::<std::collections::BTreeSet<_>>().len() as u64;
    Some(ChainSummary {
        processes,
        steps: steps.len() as u64,
        wall_ns: dist(ChainStep::wall_ns)?,
        failed_ns: dist(|s| s.failed_ns)?,
        exec_ns: dist(|s| s.exec_ns)?,
        rest_ns: dist(ChainStep::rest_ns)?,
        startup_ns: Distribution::of(steps.iter().filter_map(|s| s.startup_ns).collect()),
        exec_before_ns: Distribution::of(steps.iter().filter_map(|s| s.exec_before_ns).collect()),
        exec_after_ns: Distribution::of(steps.iter().filter_map(|s| s.exec_before_ns.map(|b| s.exec_ns - b)).collect()),
        off_cpu_ns: dist(|s| s.off_cpu_ns)?,
        failed_attempts_per_step: steps.iter().map(|s| s.failed_attempts as f64).sum::<f64>() / steps.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::attempt;

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
        let refs: Vec<&ExecAttempt> = a.iter().collect();
        let s = steps(&refs);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], ChainStep { tgid: 7, start_ns: 100, end_ns: 400, failed_attempts: 2, failed_ns: 30, exec_ns: 150, exec_before_ns: None, startup_ns: None, off_cpu_ns: 0 });
        assert_eq!((s[0].wall_ns(), s[0].rest_ns()), (300, 120));
        assert_eq!((s[1].failed_ns, s[1].exec_ns, s[1].rest_ns()), (10, 180, 110));
        let sum = summarize(&s).unwrap();
        assert_eq!((sum.processes, sum.steps), (1, 2));
        assert_eq!(sum.failed_attempts_per_step, 2.0);
        assert_eq!(sum.wall_ns.total_ns, sum.failed_ns.total_ns + sum.exec_ns.total_ns + sum.rest_ns.total_ns);
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn attempts_are_ordered_by_time_not_arrival() {
        let a = [attempt(3, 300, 400, 0, None), attempt(3, 0, 100, 0, None), attempt(3, 150, 160, -2, None)];
        let refs: Vec<&ExecAttempt> = a.iter().collect();
        let s = steps(&refs);
        assert_eq!(s, vec![ChainStep { tgid: 3, start_ns: 100, end_ns: 400, failed_attempts: 1, failed_ns: 10, exec_ns: 100, exec_before_ns: None, startup_ns: None, off_cpu_ns: 0 }]);
    }

    #[test]
    fn start_up_and_off_cpu_split_the_rest_of_a_step() {
        // Step 100..400: failed 150..160, exec 300..400; main at 130; off-CPU 140..170
        // (10 of it inside the failed attempt), 250..260, and 110..120 (inside start-up).
        let a = [attempt(3, 0, 100, 0, None), attempt(3, 150, 160, -2, None), attempt(3, 300, 400, 0, None)];
        let refs: Vec<&ExecAttempt> = a.iter().collect();
        let mut s = steps(&refs);
        let off = [OffCpu { tgid: 3, start_ns: 140, end_ns: 170 }, OffCpu { tgid: 3, start_ns: 250, end_ns: 260 }, OffCpu { tgid: 3, start_ns: 110, end_ns: 120 }, OffCpu { tgid: 9, start_ns: 0, end_ns: 999 }];
        annotate(&mut s, &refs, &[(3, 130), (3, 50)], &off);
        assert_eq!(s[0].startup_ns, Some(30));
        assert_eq!(s[0].off_cpu_ns, 30);
        assert_eq!(s[0].rest_ns(), 300 - 10 - 100 - 30 - 30);
        let sum = summarize(&s).unwrap();
        assert_eq!(sum.startup_ns.unwrap().p50_ns, 30);
    }
}
