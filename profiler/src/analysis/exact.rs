//! Exact mode: per-function latencies from entry/return probes, split by the outcome of the
//! exec attempt each call ran in, with nesting kept (a function's self time is its time
//! minus the probed functions it called), and phases rolled up from self times so that
//! phase times plus "not in a probed function" add up to the attempt's exact latency.
use foldhash::HashMap;

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
    /// Calling probed function (None: the syscall itself) → calls; one or two entries.
    parents: Vec<(Option<u32>, u64)>,
}

/// What the tally needs of a slot, looked up once per plan instead of once per call.
#[derive(Clone, Copy, Debug, Default)]
struct SlotInfo {
    /// The plan names a function in it.
    known: bool,
    /// Its phase's index in the phase model.
    phase: Option<usize>,
}

/// One outcome's figures: per slot (indexed by slot number) and per phase (by index).
#[derive(Clone, Debug, Default)]
struct OutcomeTally {
    functions: Vec<Option<FunctionTally>>,
    /// Per phase: self time per attempt that had any of its functions.
    phases: Vec<Moments>,
    tree: ExactTree,
}

/// One call of the attempt being folded: its index in the attempt's calls, time in probed
/// callees, the calling slot and its tree node.
#[derive(Clone, Copy, Debug)]
struct Nested {
    call: usize,
    children_ns: u64,
    parent: Option<u32>,
    node: usize,
}

/// Buffers reused from attempt to attempt: folding an attempt allocates nothing once they
/// have grown to the largest attempt's size.
#[derive(Clone, Debug, Default)]
struct Scratch {
    order: Vec<usize>,
    nested: Vec<Nested>,
    stack: Vec<usize>,
    /// Per slot: this attempt's (inclusive, self) sums, and whether the slot was called.
    per_slot: Vec<(u64, u64, bool)>,
    slots_called: Vec<u32>,
    per_phase: Vec<(u64, bool)>,
}

/// Probed calls folded per attempt as attempts complete: per outcome and function, a latency
/// histogram, the self-time sum and who called it. Memory follows the probed functions. One
/// tally serves one exact plan (a run's, or the merged runs' of a recording).
#[derive(Clone, Debug, Default)]
pub struct ExactTally {
    per: HashMap<Outcome, OutcomeTally>,
    /// Per slot number, from the plan and the phase model (built on the first attempt).
    slots: Vec<SlotInfo>,
    phase_count: usize,
    scratch: Scratch,
    calls: u64,
    without_attempt: u64,
}

impl ExactTally {
    fn slot_table(&mut self, plan: &ExactPlan, model: &PhaseModel) {
        if !self.slots.is_empty() {
            return;
        }
        let len = plan.functions.iter().map(|f| f.slot as usize + 1).max().unwrap_or(0);
        self.slots = vec![SlotInfo::default(); len.max(1)];
        for f in &plan.functions {
            self.slots[f.slot as usize] = SlotInfo { known: true, phase: model.phase_of(&f.function).map(|p| p.index()) };
        }
        self.phase_count = model.phases().len();
    }

    fn slot(&self, slot: u32) -> SlotInfo {
        self.slots.get(slot as usize).copied().unwrap_or_default()
    }

    /// The probed calls of one completed exec attempt. Nesting is rebuilt from times: a call
    /// that starts before another returns is inside it.
    pub fn attempt(&mut self, outcome: Outcome, calls: &[ProbedCall], plan: &ExactPlan, model: &PhaseModel) {
        self.slot_table(plan, model);
        let mut s = std::mem::take(&mut self.scratch);
        s.order.clear();
        for (i, c) in calls.iter().enumerate() {
            self.calls += 1;
            if self.slot(c.slot).known {
                s.order.push(i);
            } else {
                self.without_attempt += 1;
            }
        }
        s.order.sort_by(|&a, &b| calls[a].enter_ns.cmp(&calls[b].enter_ns).then(calls[b].exit_ns.cmp(&calls[a].exit_ns)));
        let (slot_count, phase_count) = (self.slots.len(), self.phase_count);
        let per = self.per.entry(outcome).or_insert_with(|| OutcomeTally {
            functions: vec![None; slot_count],
            phases: vec![Moments::default(); phase_count],
            tree: ExactTree::default(),
        });
        s.nested.clear();
        s.stack.clear();
        for &i in &s.order {
            let c = &calls[i];
            while s.stack.last().is_some_and(|&n| calls[s.nested[n].call].exit_ns <= c.enter_ns) {
                s.stack.pop();
            }
            let parent = s.stack.last().copied();
            let parent_node = parent.map_or(ExactTree::ROOT, |p| s.nested[p].node);
            if let Some(p) = parent {
                s.nested[p].children_ns += c.exit_ns.saturating_sub(c.enter_ns);
            }
            let node = per.tree.node(parent_node, c.slot);
            s.nested.push(Nested { call: i, children_ns: 0, parent: parent.map(|p| calls[s.nested[p].call].slot), node });
            s.stack.push(s.nested.len() - 1);
        }
        // This attempt's (inclusive, self) per function and self per phase.
        s.per_slot.clear();
        s.per_slot.resize(slot_count, (0, 0, false));
        s.slots_called.clear();
        for n in &s.nested {
            let c = &calls[n.call];
            let d = c.exit_ns.saturating_sub(c.enter_ns);
            let own = d.saturating_sub(n.children_ns);
            let t = per.functions[c.slot as usize].get_or_insert_with(FunctionTally::default);
            t.inclusive.record(d);
            t.self_sum += own;
            match t.parents.iter_mut().find(|(p, _)| *p == n.parent) {
                Some((_, k)) => *k += 1,
                None => t.parents.push((n.parent, 1)),
            }
            let e = &mut s.per_slot[c.slot as usize];
            if !e.2 {
                e.2 = true;
                s.slots_called.push(c.slot);
            }
            // Recursion (a function inside itself) would count the inner call twice inclusively.
            if n.parent != Some(c.slot) {
                e.0 += d;
            }
            e.1 += own;
            per.tree.add(n.node, d, own);
        }
        per.tree.end_attempt();
        s.per_phase.clear();
        s.per_phase.resize(phase_count, (0, false));
        for &slot in &s.slots_called {
            let (incl, own, _) = s.per_slot[slot as usize];
            let t = per.functions[slot as usize].as_mut().expect("tallied above");
            t.inclusive_per_attempt.add(incl as f64);
            t.self_per_attempt.add(own as f64);
            if let Some(p) = self.slots[slot as usize].phase {
                s.per_phase[p].0 += own;
                s.per_phase[p].1 = true;
            }
        }
        for (p, &(ns, touched)) in s.per_phase.iter().enumerate() {
            if touched {
                per.phases[p].add(ns as f64);
            }
        }
        self.scratch = s;
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
            let OutcomeTally { functions: acc, phases: phase_moments, tree } = self.per.remove(&outcome).unwrap_or_default();
            let over_attempts = |mut m: Moments| {
                m.pad_to(attempts);
                m.interval()
            };
            let mut phase_self: Vec<f64> = vec![0.0; model.phases().len()];
            let mut total_self = 0.0;
            let mut functions: Vec<FunctionTiming> = acc
                .into_iter()
                .enumerate()
                .filter_map(|(slot, t)| Some((slot as u32, t?)))
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
                        per_attempt: over_attempts(phase_moments.get(p.id.index()).copied().unwrap_or_default()),
                    }
                })
                .collect();
            let latency = outcomes.latency(outcome).map_or_else(Interval::default, |d| d.mean());
            let tree = tree.finish(&format!("{} attempt", outcome.label()), attempts, latency, &|s| name(s).to_owned());
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
