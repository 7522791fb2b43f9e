//! Exact mode: per-function latencies from entry/return probes, split by the outcome of the
//! exec attempt each call ran in, with nesting kept (a function's self time is its time
//! minus the probed functions it called), and phases rolled up from self times so that
//! phase times plus "not in a probed function" add up to the attempt's exact latency.
use foldhash::{HashMap, HashMapExt as _};

use serde::Serialize;

use super::{
    outcome::{Outcome, Outcomes},
    stats::{Distribution, Interval, Latencies, Moments},
    tree::{ExactTree, TreeNode},
};
use crate::{analysis::phases::PhaseModel, assemble::events::ProbedCall, model::meta::ExactPlan};

/// Exact timing of one probed kernel function within one outcome's attempts.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FunctionTiming {
    /// The kernel's own name, suffix kept.
    pub function: String,
    /// The phase the phase model puts the function in; None when it names none.
    pub phase: Option<String>,
    /// Calls of the function in this outcome's attempts.
    pub calls: u64,
    /// Mean calls per attempt of the outcome.
    pub calls_per_attempt: f64,
    /// Time from entry to return, per call.
    pub inclusive_ns: Distribution,
    /// Mean per call of the time not spent in probed callees.
    pub self_ns_mean: f64,
    /// Per attempt of the outcome (every call in it, 0 where it was not called), with a 95%
    /// interval over attempts: inclusive and self time.
    pub inclusive_per_attempt: Interval,
    /// Self time per attempt of the outcome (0 where not called), with its 95% interval over attempts.
    pub self_per_attempt: Interval,
    /// The probed function that called it most often (None: called from the syscall itself).
    pub parent: Option<String>,
}

/// Exact time of one phase within one outcome's attempts, rolled up from its functions' self times.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct PhaseTiming {
    /// Phase id from the phase model.
    pub phase: String,
    /// Human-readable phase label from the phase model.
    pub label: String,
    /// Self time of the phase's probed functions, per attempt.
    pub ns_per_attempt: f64,
    /// Fraction of the outcome's mean attempt latency (`ns_per_attempt` over `mean_ns`).
    pub share: f64,
    /// `ns_per_attempt` with its 95% interval over attempts.
    pub per_attempt: Interval,
}

/// Exact timing of one outcome's attempts: per function, per phase, and as a call tree.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeTiming {
    /// The outcome these attempts ended with.
    pub outcome: Outcome,
    /// Completed exec attempts with this outcome.
    pub attempts: u64,
    /// Mean latency of these attempts, in ns (tracepoints).
    pub mean_ns: f64,
    /// Probed functions called in these attempts, in phase order, then most total time first.
    pub functions: Vec<FunctionTiming>,
    /// Phases with any self time, in exec order.
    pub phases: Vec<PhaseTiming>,
    /// The call tree from probe nesting, rooted at the syscall (its self time: outside every
    /// probed function).
    pub tree: TreeNode,
    /// Attempt time outside every probed function (syscall entry, inlined helpers). Negative
    /// when the probed functions' self times add up to more than the measured latency (the
    /// probes' own cost inside them): shown as it is, never clamped.
    pub unprobed_ns_per_attempt: f64,
}

/// The exact-mode result of a run: the probed functions and one timing per outcome.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ExactTiming {
    /// Raw kernel names of the functions probed (the exact plan's order).
    pub probed: Vec<String>,
    /// Probed calls reported, used or not.
    pub calls: u64,
    /// Calls that could not be tied to a recorded attempt: counted, not used.
    pub calls_without_attempt: u64,
    /// One timing per outcome that had attempts.
    pub outcomes: Vec<OutcomeTiming>,
}

/// One function's figures within one outcome.
#[derive(Clone, Debug, Default)]
struct FunctionTally {
    inclusive: Latencies,
    self_sum: u64,
    /// Per attempt that called it: inclusive and self time summed over its calls.
    inclusive_per_attempt: Moments,
    self_per_attempt: Moments,
    /// Calling probed function (None: the syscall itself) → calls.
    parents: HashMap<Option<u32>, u64>,
}

/// Probed calls folded per attempt as attempts complete: per outcome and function, a latency
/// histogram, the self-time sum and who called it. Memory follows the probed functions.
#[derive(Clone, Debug, Default)]
pub struct ExactTally {
    per: HashMap<Outcome, HashMap<u32, FunctionTally>>,
    /// Per outcome and phase (by name): self time per attempt that had any.
    phase_per_attempt: HashMap<Outcome, HashMap<String, Moments>>,
    trees: HashMap<Outcome, ExactTree>,
    calls: u64,
    without_attempt: u64,
}

impl ExactTally {
    /// The probed calls of one completed exec attempt. Nesting is rebuilt from times: a call
    /// that starts before another returns is inside it.
    pub fn attempt(&mut self, outcome: Outcome, calls: &[ProbedCall], plan: &ExactPlan, model: &PhaseModel) {
        let mut list: Vec<&ProbedCall> = Vec::with_capacity(calls.len());
        for c in calls {
            self.calls += 1;
            if plan.function_of(c.slot).is_some() {
                list.push(c);
            } else {
                self.without_attempt += 1;
            }
        }
        list.sort_by(|a, b| a.enter_ns.cmp(&b.enter_ns).then(b.exit_ns.cmp(&a.exit_ns)));
        // (call, time in probed callees, calling slot)
        let mut nodes: Vec<(&ProbedCall, u64, Option<u32>)> = Vec::with_capacity(list.len());
        // Each call's path of slots from the outermost probed call.
        let mut paths: Vec<Vec<u32>> = Vec::with_capacity(list.len());
        let mut stack: Vec<usize> = Vec::new();
        for c in list {
            while stack.last().is_some_and(|&i| nodes[i].0.exit_ns <= c.enter_ns) {
                stack.pop();
            }
            let parent = stack.last().copied();
            if let Some(p) = parent {
                nodes[p].1 += c.exit_ns.saturating_sub(c.enter_ns);
            }
            nodes.push((c, 0, parent.map(|p| nodes[p].0.slot)));
            let mut path = parent.map_or_else(Vec::new, |p| paths[p].clone());
            path.push(c.slot);
            paths.push(path);
            stack.push(nodes.len() - 1);
        }
        let per = self.per.entry(outcome).or_default();
        // This attempt's (inclusive, self) per function and self per phase.
        let mut in_attempt: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut tree_calls: Vec<(Vec<u32>, u64, u64)> = Vec::with_capacity(nodes.len());
        for ((c, children_ns, parent), path) in nodes.into_iter().zip(paths) {
            let d = c.exit_ns.saturating_sub(c.enter_ns);
            let own = d.saturating_sub(children_ns);
            let t = per.entry(c.slot).or_default();
            t.inclusive.record(d);
            t.self_sum += own;
            *t.parents.entry(parent).or_default() += 1;
            let e = in_attempt.entry(c.slot).or_default();
            // Recursion (a function inside itself) would count the inner call twice inclusively.
            if parent != Some(c.slot) {
                e.0 += d;
            }
            e.1 += own;
            tree_calls.push((path, d, own));
        }
        self.trees.entry(outcome).or_default().attempt(&tree_calls);
        let mut phase_self: HashMap<&str, u64> = HashMap::new();
        for (slot, (incl, own)) in in_attempt {
            let t = per.get_mut(&slot).expect("tallied above");
            t.inclusive_per_attempt.add(incl as f64);
            t.self_per_attempt.add(own as f64);
            if let Some(p) = plan.function_of(slot).and_then(|f| model.phase_of(&f.function)) {
                *phase_self.entry(model.phase(p).name.as_str()).or_default() += own;
            }
        }
        let phases = self.phase_per_attempt.entry(outcome).or_default();
        for (phase, ns) in phase_self {
            phases.entry(phase.to_owned()).or_default().add(ns as f64);
        }
    }

    /// Probed calls on a thread with no exec attempt open.
    pub fn orphan(&mut self) {
        self.calls += 1;
        self.without_attempt += 1;
    }

    /// Turns the folded calls into per-outcome timings, with names and phases from `plan` and
    /// `model`; outcomes without attempts are left out.
    pub fn finish(mut self, outcomes: &Outcomes, plan: &ExactPlan, model: &PhaseModel) -> ExactTiming {
        let name = |slot: u32| plan.function_of(slot).map_or("?", |f| f.function.as_str());
        let mut out = Vec::new();
        for outcome in Outcome::ALL {
            let (attempts, mean_ns) = outcomes.count_and_mean(outcome);
            if attempts == 0 {
                continue;
            }
            let n_attempts = attempts as f64;
            let acc = self.per.remove(&outcome).unwrap_or_default();
            let mut phase_moments = self.phase_per_attempt.remove(&outcome).unwrap_or_default();
            let over_attempts = |mut m: Moments| {
                m.pad_to(attempts);
                m.interval()
            };
            let mut phase_self: Vec<f64> = vec![0.0; model.phases().len()];
            let mut total_self = 0.0;
            let mut functions: Vec<FunctionTiming> = acc
                .into_iter()
                .filter_map(|(slot, t)| {
                    let inclusive_ns = t.inclusive.summary()?;
                    let function = name(slot);
                    let phase = model.phase_of(function);
                    if let Some(p) = phase {
                        phase_self[p.index()] += t.self_sum as f64;
                    }
                    total_self += t.self_sum as f64;
                    let calls = t.inclusive.count();
                    let parent = t
                        .parents
                        .into_iter()
                        .map(|(p, n)| (p.map(name), n))
                        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
                        .and_then(|(p, _)| p);
                    Some(FunctionTiming {
                        function: function.to_owned(),
                        phase: phase.map(|p| model.phase(p).name.clone()),
                        calls,
                        calls_per_attempt: calls as f64 / n_attempts,
                        inclusive_ns,
                        self_ns_mean: t.self_sum as f64 / calls as f64,
                        inclusive_per_attempt: over_attempts(t.inclusive_per_attempt),
                        self_per_attempt: over_attempts(t.self_per_attempt),
                        parent: parent.map(str::to_owned),
                    })
                })
                .collect();
            functions.sort_by(|a, b| {
                let order = |f: &FunctionTiming| f.phase.as_deref().and_then(|p| model.phase_by_name(p)).map_or(usize::MAX, |p| p.index());
                order(a).cmp(&order(b)).then(b.inclusive_ns.total_ns.cmp(&a.inclusive_ns.total_ns)).then(a.function.cmp(&b.function))
            });
            let phases = model
                .phases()
                .iter()
                .filter(|p| phase_self[p.id.index()] > 0.0)
                .map(|p| {
                    let per_attempt = phase_self[p.id.index()] / n_attempts;
                    PhaseTiming {
                        phase: p.name.clone(),
                        label: p.label.clone(),
                        ns_per_attempt: per_attempt,
                        share: per_attempt / mean_ns,
                        per_attempt: over_attempts(phase_moments.remove(&p.name).unwrap_or_default()),
                    }
                })
                .collect();
            let latency = outcomes.latency(outcome).map_or_else(Interval::default, |d| d.mean());
            let tree =
                self.trees
                    .remove(&outcome)
                    .unwrap_or_default()
                    .finish(&format!("{} attempt", outcome.label()), attempts, latency, &|s| name(s).to_owned());
            out.push(OutcomeTiming {
                outcome,
                attempts,
                mean_ns,
                functions,
                phases,
                tree,
                unprobed_ns_per_attempt: mean_ns - total_self / n_attempts,
            });
        }
        ExactTiming {
            probed: plan.functions.iter().map(|f| f.raw_name.clone()).collect(),
            calls: self.calls,
            calls_without_attempt: self.without_attempt,
            outcomes: out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::attempt, model::meta::ProbedFunction};

    fn plan(names: &[&str]) -> ExactPlan {
        ExactPlan {
            functions: names
                .iter()
                .enumerate()
                .map(|(i, n)| ProbedFunction {
                    slot: i as u32,
                    function: (*n).into(),
                    raw_name: (*n).into(),
                    address: 0,
                    by_address: false,
                    mechanism: crate::model::meta::Mechanism::Kprobe,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn call(slot: u32, enter: u64, exit: u64) -> ProbedCall {
        ProbedCall { pid: 1, enter_ns: enter, exit_ns: exit, slot }
    }

    #[test]
    fn nesting_gives_self_time_and_phases_reconcile() {
        let model = PhaseModel::builtin().unwrap();
        // slots: 0 alloc_bprm, 1 do_open_execat, 2 mm_alloc
        let p = plan(&["alloc_bprm", "do_open_execat", "mm_alloc"]);
        // A failed attempt (1000 ns): alloc_bprm 100..900 calls do_open_execat 150..850.
        let fail = attempt(1, 0, 1_000, -2, None);
        // A success (10_000 ns): alloc_bprm 100..5100 calls do_open_execat 200..1200 and mm_alloc 2000..4000.
        let ok = attempt(1, 20_000, 30_000, 0, None);
        let mut outcomes = Outcomes::default();
        outcomes.add(&fail);
        outcomes.add(&ok);
        let mut tally = ExactTally::default();
        tally.attempt(Outcome::Enoent, &[call(0, 100, 900), call(1, 150, 850)], &p, &model);
        tally.attempt(Outcome::Success, &[call(0, 20_100, 25_100), call(1, 20_200, 21_200), call(2, 22_000, 24_000)], &p, &model);
        tally.orphan(); // no attempt open on its thread
        tally.attempt(Outcome::Success, &[call(9, 1, 2)], &p, &model); // a slot nothing was attached to
        let t = tally.finish(&outcomes, &p, &model);
        assert_eq!((t.calls, t.calls_without_attempt), (7, 2));
        let enoent = t.outcomes.iter().find(|o| o.outcome == Outcome::Enoent).unwrap();
        let f = |o: &OutcomeTiming, n: &str| o.functions.iter().find(|f| f.function == n).cloned();
        assert_eq!(f(enoent, "alloc_bprm").unwrap().self_ns_mean, 100.0);
        assert_eq!(f(enoent, "do_open_execat").unwrap().parent.as_deref(), Some("alloc_bprm"));
        assert!(f(enoent, "mm_alloc").is_none(), "no mm set-up in the failed attempt");
        assert_eq!(enoent.unprobed_ns_per_attempt, 200.0);
        let phase_sum: f64 = enoent.phases.iter().map(|p| p.ns_per_attempt).sum();
        assert_eq!(phase_sum + enoent.unprobed_ns_per_attempt, enoent.mean_ns);

        let success = t.outcomes.iter().find(|o| o.outcome == Outcome::Success).unwrap();
        assert_eq!(f(success, "alloc_bprm").unwrap().self_ns_mean, 2_000.0);
        assert_eq!(f(success, "mm_alloc").unwrap().inclusive_ns.p50_ns, 2_000);
        assert_eq!(f(success, "mm_alloc").unwrap().calls_per_attempt, 1.0);
        let lookup = success.phases.iter().find(|p| p.phase == "lookup").unwrap();
        assert_eq!(lookup.ns_per_attempt, 1_000.0);
        assert_eq!(success.unprobed_ns_per_attempt, 5_000.0);
        // Per-attempt figures with intervals agree with the per-call ones.
        assert_eq!(f(enoent, "alloc_bprm").unwrap().inclusive_per_attempt.value, 800.0);
        assert_eq!(f(enoent, "alloc_bprm").unwrap().self_per_attempt.value, 100.0);
        for o in [enoent, success] {
            for p in &o.phases {
                assert!((p.per_attempt.value - p.ns_per_attempt).abs() < 1e-9, "{p:?}");
            }
        }
    }
}
