//! What execprof's own eBPF programs cost, from the kernel's BPF run-time statistics (runs
//! and run time per program), and how much of each outcome's measured latency is probe time
//! inside the attempt's window, so figures can be shown with it subtracted.
//!
//! Inside an attempt's window (between the enter program's clock read and the exit
//! program's) run: `sched_prepare_exec` and `sched_process_exec` once per successful exec;
//! the sampling program once per sample taken inside the attempt; in exact mode, each probed
//! function's entry and return programs once per call. Their mean cost per run times their
//! runs per attempt is the estimate. The `sys_enter`/`sys_exit` programs run around every
//! attempt and read the clock near their end and start, so most of them lies outside the
//! measured time; the rest (the enter record sent after the clock read, the tracepoint path
//! into the exit program before it) is inside but cannot be told apart in per-program totals:
//! it is not subtracted here, and the sampled "tracer" phase shows it. A program's mean also
//! includes its runs for threads it filters out at once: the estimate is a lower bound.
use serde::Serialize;

use super::{Analysis, outcome::Outcome};
use crate::model::meta::{ExactPlan, Mechanism, ProgramCost};
use profiler_common::names;

/// The estimated probe time inside one outcome's attempts.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeProbeCost {
    /// The outcome.
    pub outcome: Outcome,
    /// Measured mean latency of its attempts, in ns, probes included.
    pub mean_ns: f64,
    /// Estimated probe time inside one attempt's window.
    pub probe_ns_per_attempt: f64,
    /// The mean latency with that subtracted.
    pub mean_without_probes_ns: f64,
}

/// What execprof's eBPF programs cost in a run, and how much of each outcome's latency is theirs.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ProbeCost {
    /// Each program's runs and run time, from the kernel's BPF statistics.
    pub programs: Vec<ProgramCost>,
    /// Probe time per attempt, per outcome with attempts.
    pub outcomes: Vec<OutcomeProbeCost>,
}

fn ns_per_run(costs: &[ProgramCost], program: &str) -> f64 {
    costs.iter().find(|c| c.program == program).map_or(0.0, ProgramCost::ns_per_run)
}

/// The probe-cost estimate for the analysis `a` from the programs' `costs` (`plan`: exact
/// mode's probes); None when the kernel reported no costs.
pub fn estimate(costs: &[ProgramCost], a: &Analysis, plan: Option<&ExactPlan>) -> Option<ProbeCost> {
    if costs.is_empty() {
        return None;
    }
    let sched = ns_per_run(costs, names::PROG_SCHED_PREPARE_EXEC) + ns_per_run(costs, names::PROG_SCHED_PROCESS_EXEC);
    let sample = ns_per_run(costs, names::PROG_SAMPLE);
    let mut outcomes = Vec::new();
    for s in a.outcomes.iter().filter(|s| s.count > 0) {
        let mean_ns = s.latency.map_or(0.0, |d| d.mean_ns);
        let mut probe = if s.outcome == Outcome::Success { sched } else { 0.0 };
        if let Some(o) = a.sampled.as_ref().and_then(|x| x.outcomes.iter().find(|o| o.outcome == s.outcome)) {
            probe += sample * o.samples as f64 / s.count as f64;
        }
        if let (Some(x), Some(plan)) = (&a.exact, plan)
            && let Some(o) = x.outcomes.iter().find(|o| o.outcome == s.outcome)
        {
            for f in &o.functions {
                // A function with two slots (present twice) has both pairs' runs in its calls.
                let per_call: f64 = plan
                    .functions
                    .iter()
                    .filter(|p| p.function == f.function)
                    .map(|p| {
                        let (entry, exit) = match p.mechanism {
                            Mechanism::Fentry => (names::PROG_EXACT_FENTRY_PREFIX, names::PROG_EXACT_FEXIT_PREFIX),
                            Mechanism::Kprobe => (names::PROG_EXACT_ENTRY_PREFIX, names::PROG_EXACT_RETURN_PREFIX),
                        };
                        ns_per_run(costs, &format!("{entry}{}", p.slot)) + ns_per_run(costs, &format!("{exit}{}", p.slot))
                    })
                    .fold(0.0, f64::max);
                probe += per_call * f.calls_per_attempt;
            }
        }
        outcomes.push(OutcomeProbeCost {
            outcome: s.outcome,
            mean_ns,
            probe_ns_per_attempt: probe,
            mean_without_probes_ns: mean_ns - probe,
        });
    }
    Some(ProbeCost { programs: costs.to_vec(), outcomes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::phases::PhaseModel,
        analysis::{AnalysisContext, analyse, attribution::SymbolTable, test_support::attempt},
        assemble::events::{Event, Sample},
    };

    fn cost(program: &str, runs: u64, run_ns: u64) -> ProgramCost {
        ProgramCost { program: program.into(), runs, run_ns }
    }

    #[test]
    fn sched_hooks_count_for_successes_and_samples_for_their_outcome() {
        let model = PhaseModel::builtin().unwrap();
        let mut fail = attempt(1, 0, 1_000, -2, None);
        fail.inside.samples = vec![Sample { ts_ns: 10, pid: 1, frames: vec![] }, Sample { ts_ns: 20, pid: 1, frames: vec![] }];
        let events =
            vec![Event::Exec(fail), Event::Exec(attempt(1, 2_000, 3_000, -2, None)), Event::Exec(attempt(1, 5_000, 45_000, 0, None))];
        let a = analyse(
            &events,
            AnalysisContext { model: &model, sampled: true, exact: None, preexisting: &[], launched: true },
            &SymbolTable::default(),
        );
        let costs = [
            cost(names::PROG_SCHED_PREPARE_EXEC, 10, 3_000),
            cost(names::PROG_SCHED_PROCESS_EXEC, 10, 2_000),
            cost(names::PROG_SAMPLE, 100, 20_000),
            cost(names::PROG_SYS_ENTER, 1_000, 500_000),
        ];
        let p = estimate(&costs, &a, None).unwrap();
        let get = |o: Outcome| p.outcomes.iter().find(|x| x.outcome == o).unwrap();
        // Success: 300 + 200 ns of sched hooks; no samples.
        assert_eq!(get(Outcome::Success).probe_ns_per_attempt, 500.0);
        assert_eq!(get(Outcome::Success).mean_without_probes_ns, 40_000.0 - 500.0);
        // ENOENT: 2 samples over 2 attempts at 200 ns each; sys_enter is outside the window.
        assert_eq!(get(Outcome::Enoent).probe_ns_per_attempt, 200.0);
        assert!(estimate(&[], &a, None).is_none());
    }
}
