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
}

impl ChainStep {
    pub fn wall_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
    /// What the exec attempts do not explain: user space, other syscalls, time off-CPU.
    pub fn rest_ns(&self) -> u64 {
        self.wall_ns().saturating_sub(self.failed_ns + self.exec_ns)
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
                out.push(ChainStep { tgid, start_ns: s, end_ns: a.exit_ns, failed_attempts: failed, failed_ns, exec_ns: a.duration_ns() });
            }
            start = Some(a.exit_ns);
            (failed, failed_ns) = (0, 0);
        }
    }
    out
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
        assert_eq!(s[0], ChainStep { tgid: 7, start_ns: 100, end_ns: 400, failed_attempts: 2, failed_ns: 30, exec_ns: 150 });
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
        assert_eq!(s, vec![ChainStep { tgid: 3, start_ns: 100, end_ns: 400, failed_attempts: 1, failed_ns: 10, exec_ns: 100 }]);
    }
}
