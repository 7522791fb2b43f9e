//! Pure analysis of decoded events: no I/O, no kernel, tested without root.
pub mod agreement;
pub mod attribution;
pub mod chain;
pub mod exact;
pub mod outcome;
pub mod stats;

use serde::Serialize;

use crate::{
    events::{Call, Event, ExecAttempt, Sample, SpawnCall, SpawnSyscall},
    exact_plan::ExactPlan,
    phases::PhaseModel,
};

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub attempts: u64,
    pub outcomes: Vec<outcome::OutcomeSummary>,
    pub success_split: Option<outcome::SuccessSplit>,
    pub chain: Option<chain::ChainSummary>,
    /// Per-phase and per-function attribution from cpu-clock samples (sampled mode).
    pub sampled: Option<attribution::SampledAttribution>,
    /// Fork-family calls of the traced tree, per syscall.
    pub spawns: Vec<SpawnSummary>,
    /// Per-function exact times from entry/return probes (exact mode).
    pub exact: Option<exact::ExactTiming>,
    /// Exact vs sampled phase shares, where both ran.
    pub agreement: Vec<agreement::OutcomeAgreement>,
    /// Processes seen in the traced tree (the launched one plus every forked process).
    pub processes: u64,
    pub threads_created: u64,
    pub filenames_truncated: u64,
    pub filenames_unreadable: u64,
    /// Attempts through `execveat` (the rest went through `execve`).
    pub execveat_attempts: u64,
    /// Attempts whose thread id changed (a non-leader thread exec'd and took the leader's id).
    pub from_non_leader_threads: u64,
    /// Exec'd file names, most attempted first (at most [`MAX_FILES`]).
    pub files: Vec<FileCount>,
    /// Distinct file names beyond [`MAX_FILES`], not listed.
    pub files_not_listed: u64,
}

pub const MAX_FILES: usize = 100;

#[derive(Clone, Debug, Serialize)]
pub struct SpawnSummary {
    pub syscall: SpawnSyscall,
    pub count: u64,
    pub failed: u64,
    pub latency: stats::Distribution,
    pub minor_faults_per_call: Option<f64>,
}

fn spawn_summaries(spawns: &[&SpawnCall]) -> Vec<SpawnSummary> {
    let mut by: std::collections::BTreeMap<SpawnSyscall, Vec<&SpawnCall>> = std::collections::BTreeMap::new();
    for s in spawns {
        by.entry(s.syscall).or_default().push(s);
    }
    by.into_iter()
        .filter_map(|(syscall, list)| {
            let faults: Vec<u64> = list.iter().filter_map(|s| s.minor_faults).collect();
            Some(SpawnSummary {
                syscall,
                count: list.len() as u64,
                failed: list.iter().filter(|s| s.ret < 0).count() as u64,
                latency: stats::Distribution::of(list.iter().map(|s| s.duration_ns()).collect())?,
                minor_faults_per_call: (!faults.is_empty()).then(|| faults.iter().sum::<u64>() as f64 / faults.len() as f64),
            })
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileCount {
    pub filename: String,
    pub attempts: u64,
    pub successes: u64,
}

fn files(attempts: &[&ExecAttempt]) -> (Vec<FileCount>, u64) {
    let mut map: std::collections::HashMap<&str, (u64, u64)> = std::collections::HashMap::new();
    for a in attempts {
        let e = map.entry(a.filename.as_str()).or_default();
        e.0 += 1;
        e.1 += u64::from(a.ret == 0);
    }
    let mut list: Vec<FileCount> =
        map.into_iter().map(|(f, (n, ok))| FileCount { filename: f.to_owned(), attempts: n, successes: ok }).collect();
    list.sort_by(|a, b| b.attempts.cmp(&a.attempts).then_with(|| a.filename.cmp(&b.filename)));
    let extra = list.len().saturating_sub(MAX_FILES) as u64;
    list.truncate(MAX_FILES);
    (list, extra)
}

/// What sampled attribution needs besides the events.
pub struct SymbolContext<'a> {
    pub symbols: &'a dyn attribution::Symbolizer,
    pub model: &'a PhaseModel,
}

/// What exact-mode analysis needs besides the events.
pub struct ExactContext<'a> {
    pub plan: &'a ExactPlan,
    pub model: &'a PhaseModel,
}

pub fn analyse(events: &[Event], symbols: Option<SymbolContext<'_>>, exact: Option<ExactContext<'_>>) -> Analysis {
    let attempts: Vec<&ExecAttempt> = events.iter().filter_map(|e| if let Event::Exec(a) = e { Some(a) } else { None }).collect();
    let spawns: Vec<&SpawnCall> = events.iter().filter_map(|e| if let Event::Spawn(s) = e { Some(s) } else { None }).collect();
    let calls: Vec<&Call> = events.iter().filter_map(|e| if let Event::Call(c) = e { Some(c) } else { None }).collect();
    let samples: Vec<&Sample> = events.iter().filter_map(|e| if let Event::Sample(s) = e { Some(s) } else { None }).collect();
    let forks = events.iter().filter_map(|e| if let Event::Fork(f) = e { Some(f) } else { None });
    let (mut processes, mut threads) = (1u64, 0u64);
    for f in forks {
        if f.thread { threads += 1 } else { processes += 1 }
    }
    let mut steps = chain::steps(&attempts);
    let mains: Vec<(u32, u64)> = events.iter().filter_map(|e| if let Event::Main { tgid, ts_ns, .. } = e { Some((*tgid, *ts_ns)) } else { None }).collect();
    let off_cpu: Vec<chain::OffCpu> = events
        .iter()
        .filter_map(|e| if let Event::OffCpu { tgid, start_ns, end_ns, .. } = e { Some(chain::OffCpu { tgid: *tgid, start_ns: *start_ns, end_ns: *end_ns }) } else { None })
        .collect();
    chain::annotate(&mut steps, &attempts, &mains, &off_cpu);
    let sampled = symbols.map(|c| attribution::attribute(&attempts, &spawns, &samples, c.symbols, c.model));
    let exact = exact.map(|c| exact::analyse(&attempts, &calls, c.plan, c.model));
    let agreement = match (&exact, &sampled) {
        (Some(e), Some(s)) => agreement::compare(e, s),
        _ => Vec::new(),
    };
    let (files, files_not_listed) = files(&attempts);
    Analysis {
        attempts: attempts.len() as u64,
        outcomes: outcome::summarize(&attempts),
        success_split: outcome::success_split(&attempts),
        chain: chain::summarize(&steps),
        spawns: spawn_summaries(&spawns),
        sampled,
        exact,
        agreement,
        processes,
        threads_created: threads,
        filenames_truncated: attempts.iter().filter(|a| a.filename_truncated).count() as u64,
        filenames_unreadable: attempts.iter().filter(|a| a.filename_unreadable).count() as u64,
        execveat_attempts: attempts.iter().filter(|a| a.syscall == crate::events::Syscall::Execveat).count() as u64,
        from_non_leader_threads: attempts.iter().filter(|a| a.pid != a.exit_pid).count() as u64,
        files,
        files_not_listed,
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::events::{ExecAttempt, Syscall};

    pub fn attempt(tgid: u32, enter_ns: u64, exit_ns: u64, ret: i64, faults: Option<u64>) -> ExecAttempt {
        ExecAttempt {
            pid: tgid,
            exit_pid: tgid,
            tgid,
            cpu: 0,
            syscall: Syscall::Execve,
            filename: "/x".into(),
            filename_truncated: false,
            filename_unreadable: false,
            enter_ns,
            prepare_ns: None,
            loaded_ns: None,
            exit_ns,
            ret,
            minor_faults: faults,
            major_faults: faults.map(|_| 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Fork;

    #[test]
    fn counts_processes_and_threads_from_forks() {
        let fork = |thread| Event::Fork(Fork { ts_ns: 0, parent_pid: 1, parent_tgid: 1, child_pid: 2, child_tgid: if thread { 1 } else { 2 }, thread });
        let events = vec![fork(false), fork(false), fork(true), Event::Exec(test_support::attempt(1, 0, 10, 0, None))];
        let a = analyse(&events, None, None);
        assert_eq!((a.processes, a.threads_created, a.attempts), (3, 1, 1));
    }

    #[test]
    fn counts_attempts_per_file() {
        let mut miss = test_support::attempt(1, 0, 10, -2, None);
        miss.filename = "/a/t".into();
        let mut hit = test_support::attempt(1, 20, 30, 0, None);
        hit.filename = "/b/t".into();
        let events = vec![Event::Exec(miss.clone()), Event::Exec(miss), Event::Exec(hit)];
        let a = analyse(&events, None, None);
        assert_eq!(
            a.files,
            vec![
                FileCount { filename: "/a/t".into(), attempts: 2, successes: 0 },
                FileCount { filename: "/b/t".into(), attempts: 1, successes: 1 }
            ]
        );
        assert_eq!(a.files_not_listed, 0);
    }
}
