//! Exec attempts grouped by how they ended.
use serde::Serialize;

use super::stats::{Distribution, Latencies};
use crate::{
    assemble::events::ExecAttempt,
    model::names::{ForkSyscall, Killed},
};

/// The kernel-internal errno an exec returns when it is killed mid-way (include/linux/errno.h).
const ERESTARTNOINTR: i64 = 513;

/// How an exec attempt ended (JSON: lowercase), or a fork-family call analysed alongside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The exec succeeded: the new image runs.
    Success,
    /// ENOENT: no such file (the usual miss of a PATH lookup).
    Enoent,
    /// EACCES: permission denied, or not a regular executable file.
    Eacces,
    /// ENOEXEC: no binary format handler recognised the file.
    Enoexec,
    /// Any other errno.
    Other,
    /// Killed mid-exec: the thread had SIGKILL pending when the call failed (the kernel side
    /// says so, and whether another thread's exec won: de_thread kills the other threads), or
    /// the call returned ERESTARTNOINTR (a fatal signal). Whatever errno it returned (an
    /// argument copy cut short gives E2BIG or EFAULT), not a cost of exec failing.
    Abandoned,
    /// An `execveat` with `AT_EXECVE_CHECK` (Linux 6.14+) returned 0: the kernel checked that
    /// the file would be executed (permissions, binary format, LSMs) and executed nothing.
    /// Not a success: no point of no return, no new image, the caller goes on as it was.
    Checked,
    /// An `AT_EXECVE_CHECK` check returned an errno (the file would not be executed; EINVAL
    /// also where the kernel predates the flag): the check's answer, not a failed exec, so it
    /// is no PATH miss and no failed attempt of a chain step. Its errnos are listed.
    CheckFailed,
    /// Not an exec: a fork-family call, analysed alongside.
    Fork(ForkSyscall),
}

impl Outcome {
    /// Every exec outcome, in the order reports list them (fork calls not included).
    pub const ALL: [Outcome; 8] = [
        Outcome::Success,
        Outcome::Enoent,
        Outcome::Eacces,
        Outcome::Enoexec,
        Outcome::Other,
        Outcome::Abandoned,
        Outcome::Checked,
        Outcome::CheckFailed,
    ];

    /// Whether this is the outcome of an `AT_EXECVE_CHECK` check rather than of an exec.
    pub fn is_check(self) -> bool {
        matches!(self, Outcome::Checked | Outcome::CheckFailed)
    }

    /// The outcome of an exec return value (0 or a negated errno), without kill information.
    pub fn of(ret: i64) -> Self {
        match ret {
            0 => Outcome::Success,
            r if r == -(libc::ENOENT as i64) => Outcome::Enoent,
            r if r == -(libc::EACCES as i64) => Outcome::Eacces,
            r if r == -(libc::ENOEXEC as i64) => Outcome::Enoexec,
            r if r == -ERESTARTNOINTR => Outcome::Abandoned,
            _ => Outcome::Other,
        }
    }

    /// An attempt's outcome: a check's pass or failure whatever its errno; else its errno,
    /// unless its thread was being killed.
    pub fn of_attempt(a: &ExecAttempt) -> Self {
        if a.check {
            if a.ret == 0 { Outcome::Checked } else { Outcome::CheckFailed }
        } else if a.ret != 0 && a.killed.is_some() {
            Outcome::Abandoned
        } else {
            Outcome::of(a.ret)
        }
    }

    /// The name the JSON and the command line (`diff --outcome`) use; None for fork calls.
    pub fn key(self) -> Option<&'static str> {
        Some(match self {
            Outcome::Success => "success",
            Outcome::Enoent => "enoent",
            Outcome::Eacces => "eacces",
            Outcome::Enoexec => "enoexec",
            Outcome::Other => "other",
            Outcome::Abandoned => "abandoned",
            Outcome::Checked => "checked",
            Outcome::CheckFailed => "check_failed",
            Outcome::Fork(_) => return None,
        })
    }

    /// Human-readable name for reports (`ENOENT`, `clone (fork)`).
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Enoent => "ENOENT",
            Outcome::Eacces => "EACCES",
            Outcome::Enoexec => "ENOEXEC",
            Outcome::Other => "other errno",
            Outcome::Abandoned => "abandoned",
            Outcome::Checked => "checked",
            Outcome::CheckFailed => "check failed",
            Outcome::Fork(s) => match s {
                ForkSyscall::Clone => "clone (fork)",
                ForkSyscall::Clone3 => "clone3",
                ForkSyscall::Fork => "fork",
                ForkSyscall::Vfork => "vfork",
            },
        }
    }
}

/// Latency and faults of the exec attempts that ended one way.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeSummary {
    /// The outcome.
    pub outcome: Outcome,
    /// Exec attempts with this outcome.
    pub count: u64,
    /// Latency per attempt; None without attempts.
    pub latency: Option<Distribution>,
    /// Mean minor / major faults per attempt, over the attempts whose faults were countable.
    pub minor_faults_per_attempt: Option<f64>,
    /// Mean major page faults per attempt, over the attempts whose faults were countable.
    pub major_faults_per_attempt: Option<f64>,
    /// For `Other`, `Abandoned` and `CheckFailed`: each errno and its count, most frequent
    /// first.
    pub errnos: Vec<(i64, u64)>,
    /// Where the latencies pile up: more than one mode means the mean describes none of them.
    pub modes: Vec<super::modes::LatencyMode>,
    /// For `Abandoned`: what killed the attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed: Option<KilledCounts>,
}

/// Abandoned attempts by what killed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct KilledCounts {
    /// Another thread of the process exec'd and de_thread killed this one.
    pub by_other_threads_exec: u64,
    /// SIGKILL pending with no exec in the process (it was being killed).
    pub by_signal: u64,
    /// ERESTARTNOINTR with no kill seen by the kernel side (recordings from before it looked).
    pub unexplained: u64,
}

/// One outcome's figures, folded as attempts arrive.
#[derive(Clone, Debug, Default)]
pub struct OutcomeTally {
    /// Latency per attempt of this outcome, in ns.
    pub latency: Latencies,
    minor: (u64, u64),
    major: (u64, u64),
    errnos: std::collections::BTreeMap<i64, u64>,
    killed: KilledCounts,
}

impl OutcomeTally {
    fn add(&mut self, a: &ExecAttempt) {
        self.latency.record(a.duration_ns());
        if let Some(n) = a.minor_faults {
            self.minor = (self.minor.0 + n, self.minor.1 + 1);
        }
        if let Some(n) = a.major_faults {
            self.major = (self.major.0 + n, self.major.1 + 1);
        }
        match Outcome::of_attempt(a) {
            Outcome::Other | Outcome::CheckFailed => *self.errnos.entry(-a.ret).or_default() += 1,
            Outcome::Abandoned => {
                *self.errnos.entry(-a.ret).or_default() += 1;
                match a.killed {
                    Some(Killed::ByOtherThreadsExec) => self.killed.by_other_threads_exec += 1,
                    Some(Killed::BySignal) => self.killed.by_signal += 1,
                    None => self.killed.unexplained += 1,
                }
            }
            _ => {}
        }
    }
}

/// Every exec outcome's tally, plus the success split.
#[derive(Clone, Debug, Default)]
pub struct Outcomes {
    by: std::collections::BTreeMap<Outcome, OutcomeTally>,
    split: SplitTally,
}

impl Outcomes {
    /// Adds one completed exec attempt under its outcome (and to the split when it succeeded).
    pub fn add(&mut self, a: &ExecAttempt) {
        let outcome = Outcome::of_attempt(a);
        self.by.entry(outcome).or_default().add(a);
        if outcome == Outcome::Success {
            self.split.add(a);
        }
    }

    /// One outcome's latency distribution (None: no attempts).
    pub fn latency(&self, outcome: Outcome) -> Option<Distribution> {
        self.by.get(&outcome).and_then(|t| t.latency.summary())
    }

    /// Attempts and mean latency of one outcome (0 attempts: none seen).
    pub fn count_and_mean(&self, outcome: Outcome) -> (u64, f64) {
        self.by.get(&outcome).map_or((0, 0.0), |t| (t.latency.count(), t.latency.mean()))
    }

    /// One summary per exec outcome in [`Outcome::ALL`], outcomes without attempts included;
    /// the checks' (`AT_EXECVE_CHECK`) only when there were checks.
    pub fn summaries(&self) -> Vec<OutcomeSummary> {
        let empty = OutcomeTally::default();
        Outcome::ALL
            .iter()
            .filter(|o| !o.is_check() || self.by.contains_key(o))
            .map(|&outcome| {
                let t = self.by.get(&outcome).unwrap_or(&empty);
                let mean = |(sum, n): (u64, u64)| (n > 0).then(|| sum as f64 / n as f64);
                let mut errnos: Vec<(i64, u64)> = t.errnos.iter().map(|(&e, &n)| (e, n)).collect();
                errnos.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                OutcomeSummary {
                    outcome,
                    count: t.latency.count(),
                    latency: t.latency.summary(),
                    minor_faults_per_attempt: mean(t.minor),
                    major_faults_per_attempt: mean(t.major),
                    errnos,
                    modes: t.latency.modes(),
                    killed: (outcome == Outcome::Abandoned && t.latency.count() > 0).then_some(t.killed),
                }
            })
            .collect()
    }

    /// The successful execs' split at the point of no return; None without successes.
    pub fn success_split(&self) -> Option<SuccessSplit> {
        self.split.summary()
    }
}

/// Successful execs split at the point of no return (`sched_prepare_exec`): before it the
/// kernel looks up, opens, sets up the new mm and copies arguments; after it, it tears down
/// the old mm and builds the new image.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SuccessSplit {
    /// Time from syscall entry to the point of no return, per successful exec.
    pub before_ns: Distribution,
    /// Time from the point of no return to the syscall's return, per successful exec.
    pub after_ns: Distribution,
    /// Of `after`: from the point of no return to the new image in place (`sched_process_exec`).
    pub to_loaded_ns: Option<Distribution>,
    /// Successful execs without a point-of-no-return time (hook missing on this kernel).
    pub unsplit: u64,
}

#[derive(Clone, Debug, Default)]
struct SplitTally {
    before: Latencies,
    after: Latencies,
    to_loaded: Latencies,
    unsplit: u64,
}

impl SplitTally {
    fn add(&mut self, a: &ExecAttempt) {
        let Some(p) = a.prepare_ns else {
            self.unsplit += 1;
            return;
        };
        self.before.record(p.saturating_sub(a.enter_ns));
        self.after.record(a.exit_ns.saturating_sub(p));
        if let Some(l) = a.loaded_ns {
            self.to_loaded.record(l.saturating_sub(p));
        }
    }

    fn summary(&self) -> Option<SuccessSplit> {
        Some(SuccessSplit {
            before_ns: self.before.summary()?,
            after_ns: self.after.summary()?,
            to_loaded_ns: self.to_loaded.summary(),
            unsplit: self.unsplit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::attempt;

    #[test]
    fn keys_are_the_names_the_json_uses() {
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), serde_json::json!(o.key().unwrap()));
        }
        assert_eq!(Outcome::Fork(ForkSyscall::Vfork).key(), None);
    }

    #[test]
    fn classifies_errnos() {
        assert_eq!(Outcome::of(0), Outcome::Success);
        assert_eq!(Outcome::of(-2), Outcome::Enoent);
        assert_eq!(Outcome::of(-13), Outcome::Eacces);
        assert_eq!(Outcome::of(-8), Outcome::Enoexec);
        assert_eq!(Outcome::of(-7), Outcome::Other);
        assert_eq!(Outcome::of(-513), Outcome::Abandoned);
        let mut a = attempt(1, 0, 10, -7, None);
        assert_eq!(Outcome::of_attempt(&a), Outcome::Other);
        a.killed = Some(Killed::ByOtherThreadsExec);
        assert_eq!(Outcome::of_attempt(&a), Outcome::Abandoned, "E2BIG from a copy cut short by the kill");
    }

    #[test]
    fn counts_latency_and_faults_per_outcome() {
        let a = [
            attempt(1, 0, 1_000, -2, Some(0)),
            attempt(1, 2_000, 4_000, -2, Some(2)),
            attempt(1, 5_000, 50_000, 0, Some(30)),
            attempt(1, 60_000, 60_100, -7, None),
        ];
        let mut o = Outcomes::default();
        a.iter().for_each(|x| o.add(x));
        let s = o.summaries();
        let get = |o| s.iter().find(|x| x.outcome == o).unwrap();
        assert_eq!(get(Outcome::Enoent).count, 2);
        assert_eq!(get(Outcome::Enoent).latency.unwrap().max_ns, 2_000);
        assert_eq!(get(Outcome::Enoent).minor_faults_per_attempt, Some(1.0));
        assert_eq!(get(Outcome::Success).latency.unwrap().p50_ns, 45_000);
        assert_eq!(get(Outcome::Eacces).count, 0);
        assert!(get(Outcome::Eacces).latency.is_none());
        assert_eq!(get(Outcome::Other).errnos, vec![(7, 1)]);
        assert_eq!(get(Outcome::Other).minor_faults_per_attempt, None);
    }

    #[test]
    fn checks_are_their_own_outcomes_never_successes() {
        let mut passed = attempt(1, 0, 5_000, 0, Some(0));
        passed.check = true;
        let mut refused = attempt(1, 10_000, 11_000, -13, Some(0));
        refused.check = true;
        let mut killed = attempt(1, 20_000, 21_000, -4, None);
        (killed.check, killed.killed) = (true, Some(Killed::BySignal));
        assert_eq!(Outcome::of_attempt(&passed), Outcome::Checked);
        assert_eq!(Outcome::of_attempt(&refused), Outcome::CheckFailed);
        assert_eq!(Outcome::of_attempt(&killed), Outcome::CheckFailed, "a check killed mid-way is still no exec");
        let mut o = Outcomes::default();
        let mut ok = attempt(1, 30_000, 70_000, 0, Some(3));
        ok.prepare_ns = Some(40_000);
        o.add(&ok);
        for _ in 0..3 {
            o.add(&passed);
        }
        o.add(&refused);
        o.add(&killed);
        let s = o.summaries();
        let get = |o| s.iter().find(|x| x.outcome == o).unwrap();
        assert_eq!(get(Outcome::Success).count, 1);
        assert_eq!(get(Outcome::Checked).count, 3);
        assert_eq!(get(Outcome::Eacces).count, 0);
        assert_eq!(get(Outcome::CheckFailed).count, 2);
        assert_eq!(get(Outcome::CheckFailed).errnos, vec![(4, 1), (13, 1)]);
        // Only the success is split at the point of no return.
        let split = o.success_split().unwrap();
        assert_eq!((split.before_ns.count, split.unsplit), (1, 0));
        assert_eq!(serde_json::to_value(Outcome::CheckFailed).unwrap(), serde_json::json!("check_failed"));
        // Without checks the reports list the exec outcomes alone, as before.
        let mut plain = Outcomes::default();
        plain.add(&attempt(1, 0, 1_000, -2, Some(0)));
        assert!(plain.summaries().iter().all(|x| !x.outcome.is_check()));
        assert_eq!(plain.summaries().len(), 6);
    }

    #[test]
    fn splits_success_at_point_of_no_return() {
        let mut ok = attempt(1, 1_000, 11_000, 0, Some(0));
        ok.prepare_ns = Some(4_000);
        ok.loaded_ns = Some(9_000);
        let no_prepare = attempt(1, 20_000, 30_000, 0, Some(0));
        let mut o = Outcomes::default();
        o.add(&ok);
        o.add(&no_prepare);
        let s = o.success_split().unwrap();
        assert_eq!((s.before_ns.p50_ns, s.after_ns.p50_ns), (3_000, 7_000));
        assert_eq!(s.to_loaded_ns.unwrap().p50_ns, 5_000);
        assert_eq!(s.unsplit, 1);
        let mut only_unsplit = Outcomes::default();
        only_unsplit.add(&no_prepare);
        assert!(only_unsplit.success_split().is_none());
    }
}
