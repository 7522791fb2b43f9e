//! Exec attempts grouped by how they ended.
use serde::Serialize;

use super::stats::Distribution;
use crate::events::ExecAttempt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Success,
    Enoent,
    Eacces,
    Enoexec,
    /// Any other errno.
    Other,
    /// Not an exec: a fork-family call, analysed alongside.
    Spawn(crate::events::SpawnSyscall),
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [Outcome::Success, Outcome::Enoent, Outcome::Eacces, Outcome::Enoexec, Outcome::Other];

    pub fn of(ret: i64) -> Self {
        match ret {
            0 => Outcome::Success,
            r if r == -(libc::ENOENT as i64) => Outcome::Enoent,
            r if r == -(libc::EACCES as i64) => Outcome::Eacces,
            r if r == -(libc::ENOEXEC as i64) => Outcome::Enoexec,
            _ => Outcome::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Enoent => "ENOENT",
            Outcome::Eacces => "EACCES",
            Outcome::Enoexec => "ENOEXEC",
            Outcome::Other => "other errno",
            Outcome::Spawn(s) => match s {
                crate::events::SpawnSyscall::Clone => "clone (fork)",
                crate::events::SpawnSyscall::Clone3 => "clone3",
                crate::events::SpawnSyscall::Fork => "fork",
                crate::events::SpawnSyscall::Vfork => "vfork",
            },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OutcomeSummary {
    pub outcome: Outcome,
    pub count: u64,
    pub latency: Option<Distribution>,
    /// Mean minor / major faults per attempt, over the attempts whose faults were countable.
    pub minor_faults_per_attempt: Option<f64>,
    pub major_faults_per_attempt: Option<f64>,
    /// For `Other`: each errno and its count, most frequent first.
    pub errnos: Vec<(i64, u64)>,
}

pub fn summarize(attempts: &[&ExecAttempt]) -> Vec<OutcomeSummary> {
    Outcome::ALL
        .iter()
        .map(|&outcome| {
            let of_kind: Vec<&ExecAttempt> = attempts.iter().copied().filter(|a| Outcome::of(a.ret) == outcome).collect();
            let mean = |f: fn(&ExecAttempt) -> Option<u64>| {
                let vals: Vec<u64> = of_kind.iter().filter_map(|a| f(a)).collect();
                (!vals.is_empty()).then(|| vals.iter().sum::<u64>() as f64 / vals.len() as f64)
            };
            let mut errnos: Vec<(i64, u64)> = Vec::new();
            if outcome == Outcome::Other {
                let mut map = std::collections::BTreeMap::<i64, u64>::new();
                for a in &of_kind {
                    *map.entry(-a.ret).or_default() += 1;
                }
                errnos = map.into_iter().collect();
                errnos.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            }
            OutcomeSummary {
                outcome,
                count: of_kind.len() as u64,
                latency: Distribution::of(of_kind.iter().map(|a| a.duration_ns()).collect()),
                minor_faults_per_attempt: mean(|a| a.minor_faults),
                major_faults_per_attempt: mean(|a| a.major_faults),
                errnos,
            }
        })
        .collect()
}

/// Successful execs split at the point of no return (`sched_prepare_exec`): before it the
/// kernel looks up, opens, sets up the new mm and copies arguments; after it, it tears down
/// the old mm and builds the new image.
#[derive(Clone, Debug, Serialize)]
pub struct SuccessSplit {
    pub before_ns: Distribution,
    pub after_ns: Distribution,
    /// Of `after`: from the point of no return to the new image in place (`sched_process_exec`).
    pub to_loaded_ns: Option<Distribution>,
    /// Successful execs without a point-of-no-return time (hook missing on this kernel).
    pub unsplit: u64,
}

pub fn success_split(attempts: &[&ExecAttempt]) -> Option<SuccessSplit> {
    let ok: Vec<&ExecAttempt> = attempts.iter().copied().filter(|a| a.ret == 0).collect();
    let split: Vec<(u64, u64, Option<u64>)> = ok
        .iter()
        .filter_map(|a| {
            let p = a.prepare_ns?;
            Some((p.saturating_sub(a.enter_ns), a.exit_ns.saturating_sub(p), a.loaded_ns.map(|l| l.saturating_sub(p))))
        })
        .collect();
    let unsplit = (ok.len() - split.len()) as u64;
    Some(SuccessSplit {
        before_ns: Distribution::of(split.iter().map(|s| s.0).collect())?,
        after_ns: Distribution::of(split.iter().map(|s| s.1).collect())?,
        to_loaded_ns: Distribution::of(split.iter().filter_map(|s| s.2).collect()),
        unsplit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::attempt;

    #[test]
    fn classifies_errnos() {
        assert_eq!(Outcome::of(0), Outcome::Success);
        assert_eq!(Outcome::of(-2), Outcome::Enoent);
        assert_eq!(Outcome::of(-13), Outcome::Eacces);
        assert_eq!(Outcome::of(-8), Outcome::Enoexec);
        assert_eq!(Outcome::of(-7), Outcome::Other);
    }

    #[test]
    fn counts_latency_and_faults_per_outcome() {
        let a = [attempt(1, 0, 1_000, -2, Some(0)), attempt(1, 2_000, 4_000, -2, Some(2)), attempt(1, 5_000, 50_000, 0, Some(30)), attempt(1, 60_000, 60_100, -7, None)];
        let refs: Vec<&ExecAttempt> = a.iter().collect();
        let s = summarize(&refs);
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
    fn splits_success_at_point_of_no_return() {
        let mut ok = attempt(1, 1_000, 11_000, 0, Some(0));
        ok.prepare_ns = Some(4_000);
        ok.loaded_ns = Some(9_000);
        let no_prepare = attempt(1, 20_000, 30_000, 0, Some(0));
        let refs = [&ok, &no_prepare];
        let s = success_split(&refs).unwrap();
        assert_eq!((s.before_ns.p50_ns, s.after_ns.p50_ns), (3_000, 7_000));
        assert_eq!(s.to_loaded_ns.unwrap().p50_ns, 5_000);
        assert_eq!(s.unsplit, 1);
        assert!(success_split(&[&no_prepare]).is_none());
    }
}
