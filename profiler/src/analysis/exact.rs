//! Exact mode: per-function latencies from entry/return probes, split by the outcome of the
//! exec attempt each call ran in, with nesting kept (a function's self time is its time
//! minus the probed functions it called), and phases rolled up from self times so that
//! phase times plus "not in a probed function" add up to the attempt's exact latency.
//!
//! Times are on-CPU: the time a call's thread spent switched out between its entry and its
//! return (sched_switch) is taken out of the call's time and reported beside it, and the
//! attempt's whole off-CPU time is its own line. Another task that ran in between (on a
//! preemptible kernel, a woken reader) is not charged to the function it interrupted.
use foldhash::HashMap;

use serde::Serialize;

use super::{
    outcome::{Outcome, Outcomes},
    stats::{Distribution, Interval, Latencies, Moments},
    tree::{ExactTree, TreeNode},
};
use crate::{analysis::phases::PhaseModel, assemble::events::ProbedCall, model::meta::ExactPlan, record::CallSums};

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
    /// On-CPU time from entry to return, per call.
    pub inclusive_ns: Distribution,
    /// Mean per call of the on-CPU time not spent in probed callees.
    pub self_ns_mean: f64,
    /// Mean per call of the time its thread spent off-CPU between entry and return (not in
    /// `inclusive_ns`).
    #[serde(default)]
    pub off_cpu_ns_mean: f64,
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
    /// Attempt time on-CPU outside every probed function (syscall entry, inlined helpers).
    /// Negative when the probed functions' self times add up to more than the measured
    /// latency (the probes' own cost inside them): shown as it is, never clamped.
    pub unprobed_ns_per_attempt: f64,
    /// Attempt time off-CPU (its thread switched out), per attempt: with the phases and
    /// `unprobed_ns_per_attempt`, the mean latency.
    #[serde(default)]
    pub off_cpu_ns_per_attempt: f64,
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
    /// Calls the kernel counted but could not sum (an attempt with more call paths, or deeper
    /// nesting, than it keeps): their time is in their callers' self time.
    #[serde(default)]
    pub calls_unsummed: u64,
    /// Calls summed in the kernel per attempt and call path rather than sent one by one:
    /// exact in every sum, and in the per-call distribution (`inclusive_ns`) at their mean
    /// where an attempt called a function more than once on one path.
    #[serde(default)]
    pub calls_summed: u64,
    /// One timing per outcome that had attempts.
    pub outcomes: Vec<OutcomeTiming>,
}

/// One function's figures within one outcome.
#[derive(Clone, Debug, Default)]
struct FunctionTally {
    inclusive: Latencies,
    self_sum: u64,
    off_cpu_sum: u64,
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
    /// Off-CPU time per attempt.
    off_cpu: Moments,
}

/// One call of the attempt being folded: its index in the attempt's calls, time in probed
/// callees, the calling slot and its tree node.
#[derive(Clone, Copy, Debug)]
struct Nested {
    call: usize,
    /// On-CPU.
    children_ns: u64,
    parent: Option<u32>,
    node: usize,
}

/// Buffers reused from attempt to attempt: folding an attempt allocates nothing once they
/// have grown to the largest attempt's size.
#[derive(Clone, Debug, Default)]
struct Scratch {
    order: Vec<usize>,
    /// Summed calls: each entry's tree node (None: not placed).
    nodes: Vec<Option<usize>>,
    /// Summed calls: off-CPU time inside each entry's callees' entries.
    children_off: Vec<u64>,
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
    unsummed: u64,
    summed: u64,
}

/// On-CPU times of `calls` calls on one call path: entry to return, and less the probed
/// callees; and the time off-CPU between entry and return.
#[derive(Clone, Copy, Debug)]
struct PathTimes {
    calls: u64,
    inclusive: u64,
    own: u64,
    off_cpu: u64,
}

/// The calls `p` of `slot` on one call path (tree `node`, called from `parent`) in the attempt
/// being folded.
fn fold(per: &mut OutcomeTally, s: &mut Scratch, slot: u32, parent: Option<u32>, node: usize, p: PathTimes) {
    let PathTimes { calls, inclusive, own, off_cpu } = p;
    let t = per.functions[slot as usize].get_or_insert_with(FunctionTally::default);
    t.inclusive.record_n(inclusive / calls, calls);
    t.self_sum += own;
    t.off_cpu_sum += off_cpu;
    match t.parents.iter_mut().find(|(p, _)| *p == parent) {
        Some((_, k)) => *k += calls,
        None => t.parents.push((parent, calls)),
    }
    let e = &mut s.per_slot[slot as usize];
    if !e.2 {
        e.2 = true;
        s.slots_called.push(slot);
    }
    // Recursion (a function inside itself) would count the inner call twice inclusively.
    if parent != Some(slot) {
        e.0 += inclusive;
    }
    e.1 += own;
    per.tree.add(node, inclusive, own);
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

    /// The probed calls of one completed exec attempt: sent one by one (`calls`: nesting is
    /// rebuilt from times, a call that starts before another returns is inside it) or summed
    /// per call path in the kernel (`sums`). Summed calls keep every sum exact; what they
    /// cannot keep is each call's own time where one attempt called a function on one path
    /// more than once: those calls enter the per-call distribution at their mean. `off_cpu_ns`:
    /// the attempt's whole time off-CPU.
    pub fn attempt(
        &mut self,
        outcome: Outcome,
        calls: &[ProbedCall],
        sums: Option<&CallSums>,
        off_cpu_ns: u64,
        plan: &ExactPlan,
        model: &PhaseModel,
    ) {
        self.slot_table(plan, model);
        let mut s = std::mem::take(&mut self.scratch);
        let (slot_count, phase_count) = (self.slots.len(), self.phase_count);
        let per = self.per.entry(outcome).or_insert_with(|| OutcomeTally {
            functions: vec![None; slot_count],
            phases: vec![Moments::default(); phase_count],
            tree: ExactTree::default(),
            off_cpu: Moments::default(),
        });
        per.off_cpu.add(off_cpu_ns as f64);
        s.per_slot.clear();
        s.per_slot.resize(slot_count, (0, 0, false));
        s.slots_called.clear();
        if let Some(sums) = sums {
            // Per entry: its tree node, None when it is not placed (a slot nothing was attached
            // to, or under one): neither it nor its callees are.
            s.nodes.clear();
            s.children_off.clear();
            s.children_off.resize(sums.entries.len(), 0);
            for e in &sums.entries {
                if let Some(p) = e.parent.and_then(|p| s.children_off.get_mut(usize::from(p))) {
                    *p += e.off_cpu_ns;
                }
            }
            for (i, e) in sums.entries.iter().enumerate() {
                self.calls += u64::from(e.calls);
                let parent_node = match e.parent {
                    None => Some(ExactTree::ROOT),
                    Some(p) => s.nodes.get(usize::from(p)).copied().flatten(),
                };
                let known = self.slots.get(e.slot as usize).is_some_and(|i| i.known);
                let Some(parent_node) = parent_node.filter(|_| known) else {
                    self.without_attempt += u64::from(e.calls);
                    s.nodes.push(None);
                    continue;
                };
                let node = per.tree.node(parent_node, e.slot);
                s.nodes.push(Some(node));
                if e.calls > 0 {
                    let parent_slot = e.parent.map(|p| sums.entries[usize::from(p)].slot);
                    // The calls' self time less their own off-CPU time (their callees' is out of
                    // it already).
                    let own_off = e.off_cpu_ns.saturating_sub(s.children_off[i]);
                    let times = PathTimes {
                        calls: u64::from(e.calls),
                        inclusive: e.inclusive_ns.saturating_sub(e.off_cpu_ns),
                        own: e.self_ns.saturating_sub(own_off),
                        off_cpu: e.off_cpu_ns,
                    };
                    fold(per, &mut s, e.slot, parent_slot, node, times);
                }
            }
            self.summed += sums.calls();
            self.calls += u64::from(sums.unsummed);
            self.unsummed += u64::from(sums.unsummed);
            // Calls also sent one by one (an attempt whose sums another thread's took over):
            // not placed.
            self.calls += calls.len() as u64;
            self.without_attempt += calls.len() as u64;
        } else {
            s.order.clear();
            for (i, c) in calls.iter().enumerate() {
                self.calls += 1;
                if self.slots.get(c.slot as usize).is_some_and(|i| i.known) {
                    s.order.push(i);
                } else {
                    self.without_attempt += 1;
                }
            }
            s.order.sort_by(|&a, &b| calls[a].enter_ns.cmp(&calls[b].enter_ns).then(calls[b].exit_ns.cmp(&calls[a].exit_ns)));
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
                    s.nested[p].children_ns += c.exit_ns.saturating_sub(c.enter_ns).saturating_sub(c.off_cpu_ns);
                }
                let node = per.tree.node(parent_node, c.slot);
                s.nested.push(Nested { call: i, children_ns: 0, parent: parent.map(|p| calls[s.nested[p].call].slot), node });
                s.stack.push(s.nested.len() - 1);
            }
            for k in 0..s.nested.len() {
                let n = s.nested[k];
                let c = &calls[n.call];
                let on = c.exit_ns.saturating_sub(c.enter_ns).saturating_sub(c.off_cpu_ns);
                let times = PathTimes { calls: 1, inclusive: on, own: on.saturating_sub(n.children_ns), off_cpu: c.off_cpu_ns };
                fold(per, &mut s, c.slot, n.parent, n.node, times);
            }
        }
        per.tree.end_attempt();
        // This attempt's sums per function, and self time per phase.
        s.per_phase.clear();
        s.per_phase.resize(phase_count, (0, false));
        for &slot in &s.slots_called {
            let (incl, own, _) = s.per_slot[slot as usize];
            let t = per.functions[slot as usize].as_mut().expect("tallied in fold");
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

    /// An attempt's probed calls summed in the kernel, with no attempt to tie them to.
    pub fn orphan_sums(&mut self, sums: &CallSums) {
        let n = sums.calls() + u64::from(sums.unsummed);
        self.calls += n;
        self.without_attempt += n;
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
            let OutcomeTally { functions: acc, phases: phase_moments, tree, off_cpu } = self.per.remove(&outcome).unwrap_or_default();
            let over_attempts = |mut m: Moments| {
                m.pad_to(attempts);
                m.interval()
            };
            let off_cpu = over_attempts(off_cpu);
            let off_cpu_ns_per_attempt = off_cpu.value;
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
                        off_cpu_ns_mean: t.off_cpu_sum as f64 / calls as f64,
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
            let tree = tree.finish(&format!("{} attempt", outcome.label()), attempts, latency, off_cpu, &|s| name(s).to_owned());
            out.push(OutcomeTiming {
                outcome,
                attempts,
                mean_ns,
                functions,
                phases,
                tree,
                unprobed_ns_per_attempt: mean_ns - total_self / n_attempts - off_cpu_ns_per_attempt,
                off_cpu_ns_per_attempt,
            });
        }
        ExactTiming {
            probed: plan.functions.iter().map(|f| f.raw_name.clone()).collect(),
            calls: self.calls,
            calls_without_attempt: self.without_attempt,
            calls_unsummed: self.unsummed,
            calls_summed: self.summed,
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
        ProbedCall { pid: 1, enter_ns: enter, exit_ns: exit, slot, off_cpu_ns: 0 }
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
        tally.attempt(Outcome::Enoent, &[call(0, 100, 900), call(1, 150, 850)], None, 0, &p, &model);
        tally.attempt(Outcome::Success, &[call(0, 20_100, 25_100), call(1, 20_200, 21_200), call(2, 22_000, 24_000)], None, 0, &p, &model);
        tally.orphan(); // no attempt open on its thread
        tally.attempt(Outcome::Success, &[call(9, 1, 2)], None, 0, &p, &model); // a slot nothing was attached to
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

    /// The same attempts sent call by call and summed in the kernel give the same figures,
    /// except each call's own time where an attempt called a function twice on one path:
    /// those two calls count at their mean.
    #[test]
    fn kernel_sums_give_the_per_call_figures_and_pin_what_they_cannot_keep() {
        use crate::record::{CallSums, PathSum};
        let model = PhaseModel::builtin().unwrap();
        let p = plan(&["alloc_bprm", "do_open_execat", "mm_alloc"]);
        let mut outcomes = Outcomes::default();
        outcomes.add(&attempt(1, 0, 10_000, 0, None));
        outcomes.add(&attempt(1, 20_000, 30_000, 0, None));
        // Attempt 1: alloc_bprm 100..5100 calls do_open_execat twice (200..1200, 1300..1600)
        // and mm_alloc 2000..4000. Attempt 2: alloc_bprm 100..900 calls do_open_execat 150..850.
        let first = [call(0, 100, 5_100), call(1, 200, 1_200), call(1, 1_300, 1_600), call(2, 2_000, 4_000)];
        let second = [call(0, 20_100, 20_900), call(1, 20_150, 20_850)];
        let mut by_call = ExactTally::default();
        by_call.attempt(Outcome::Success, &first, None, 0, &p, &model);
        by_call.attempt(Outcome::Success, &second, None, 0, &p, &model);
        let path = |slot, parent, calls, inclusive_ns, self_ns| PathSum { slot, parent, calls, inclusive_ns, self_ns, off_cpu_ns: 0 };
        let sums_first = CallSums {
            entries: vec![path(0, None, 1, 5_000, 1_700), path(1, Some(0), 2, 1_300, 1_300), path(2, Some(0), 1, 2_000, 2_000)],
            unsummed: 0,
        };
        let sums_second = CallSums { entries: vec![path(0, None, 1, 800, 100), path(1, Some(0), 1, 700, 700)], unsummed: 1 };
        let mut summed = ExactTally::default();
        summed.attempt(Outcome::Success, &[], Some(&sums_first), 0, &p, &model);
        summed.attempt(Outcome::Success, &[], Some(&sums_second), 0, &p, &model);
        let (a, b) = (by_call.finish(&outcomes, &p, &model), summed.finish(&outcomes, &p, &model));
        assert_eq!((b.calls, b.calls_summed, b.calls_unsummed, b.calls_without_attempt), (a.calls + 1, 6, 1, 0));
        let (oa, ob) = (&a.outcomes[0], &b.outcomes[0]);
        assert_eq!(oa.tree, ob.tree, "the call tree is the same");
        assert_eq!(format!("{:?}", oa.phases), format!("{:?}", ob.phases), "so are the phases");
        for (fa, fb) in oa.functions.iter().zip(&ob.functions) {
            assert_eq!((&fa.function, fa.calls, fa.self_ns_mean, &fa.parent), (&fb.function, fb.calls, fb.self_ns_mean, &fb.parent));
            assert_eq!(
                format!("{:?}", (fa.inclusive_per_attempt, fa.self_per_attempt)),
                format!("{:?}", (fb.inclusive_per_attempt, fb.self_per_attempt))
            );
            assert_eq!(fa.inclusive_ns.total_ns, fb.inclusive_ns.total_ns, "{}: the total is exact", fa.function);
            if fa.function == "do_open_execat" {
                // Calls of 1000, 300 and 700 ns; summed, the first attempt's two count at 650 each.
                assert_eq!((fa.inclusive_ns.min_ns, fa.inclusive_ns.max_ns), (300, 1_000));
                assert_eq!((fb.inclusive_ns.min_ns, fb.inclusive_ns.max_ns), (650, 700));
            } else {
                assert_eq!(format!("{:?}", fa.inclusive_ns), format!("{:?}", fb.inclusive_ns), "{}: one call per path", fa.function);
            }
        }
    }

    /// Time off-CPU inside a call is out of its time (and its callers'), reported beside it
    /// and for the whole attempt, alike from calls sent one by one and summed in the kernel;
    /// with the phases and the time outside every probed function it adds up to the latency.
    #[test]
    fn off_cpu_time_is_out_of_the_functions_times_and_its_own_line() {
        use crate::record::{CallSums, PathSum};
        let model = PhaseModel::builtin().unwrap();
        let p = plan(&["alloc_bprm", "do_open_execat", "mm_alloc"]);
        let mut outcomes = Outcomes::default();
        outcomes.add(&attempt(1, 0, 10_000, 0, None));
        // alloc_bprm 100..5100 calls do_open_execat 200..1200 and mm_alloc 2000..4000; the thread
        // is off-CPU 500..800 (in do_open_execat), 3000..3500 (mm_alloc), 4500..4600
        // (alloc_bprm itself) and 6000..7000 (outside every probed function): 1,900 in all.
        let off = |c: ProbedCall, off_cpu_ns| ProbedCall { off_cpu_ns, ..c };
        let calls = [off(call(0, 100, 5_100), 900), off(call(1, 200, 1_200), 300), off(call(2, 2_000, 4_000), 500)];
        let mut by_call = ExactTally::default();
        by_call.attempt(Outcome::Success, &calls, None, 1_900, &p, &model);
        let path = |slot, parent, inclusive_ns, self_ns, off_cpu_ns| PathSum { slot, parent, calls: 1, inclusive_ns, self_ns, off_cpu_ns };
        let sums = CallSums {
            entries: vec![path(0, None, 5_000, 2_000, 900), path(1, Some(0), 1_000, 1_000, 300), path(2, Some(0), 2_000, 2_000, 500)],
            unsummed: 0,
        };
        let mut summed = ExactTally::default();
        summed.attempt(Outcome::Success, &[], Some(&sums), 1_900, &p, &model);
        for t in [by_call.finish(&outcomes, &p, &model), summed.finish(&outcomes, &p, &model)] {
            let o = &t.outcomes[0];
            let f = |n: &str| o.functions.iter().find(|f| f.function == n).unwrap();
            let figures = |n| (f(n).inclusive_ns.mean_ns, f(n).self_ns_mean, f(n).off_cpu_ns_mean);
            assert_eq!(figures("alloc_bprm"), (4_100.0, 1_900.0, 900.0));
            assert_eq!(figures("do_open_execat"), (700.0, 700.0, 300.0));
            assert_eq!(figures("mm_alloc"), (1_500.0, 1_500.0, 500.0));
            assert_eq!((o.off_cpu_ns_per_attempt, o.unprobed_ns_per_attempt), (1_900.0, 4_000.0));
            let phases: f64 = o.phases.iter().map(|p| p.ns_per_attempt).sum();
            assert_eq!(phases + o.off_cpu_ns_per_attempt + o.unprobed_ns_per_attempt, o.mean_ns);
            let node = o.tree.children.iter().find(|c| c.function == crate::analysis::tree::OFF_CPU_NODE).expect("an off-CPU node");
            assert_eq!(node.inclusive.value, 1_900.0);
            assert_eq!(o.tree.own.value, 4_000.0, "on-CPU outside every probed function");
        }
    }
}
