//! Exact mode: per-function latencies from entry/return probes, split by the outcome of the
//! exec attempt each call ran in, with nesting kept (a function's self time is its time
//! minus the probed functions it called), and phases rolled up from self times so that
//! phase times plus "not in a probed function" add up to the attempt's exact latency.
use std::collections::HashMap;

use serde::Serialize;

use super::{outcome::Outcome, stats::Distribution};
use crate::{
    events::{Call, ExecAttempt},
    exact_plan::ExactPlan,
    phases::PhaseModel,
};

#[derive(Clone, Debug, Serialize)]
pub struct FunctionTiming {
    pub function: String,
    pub phase: Option<String>,
    pub calls: u64,
    pub calls_per_attempt: f64,
    /// Time from entry to return, per call.
    pub inclusive_ns: Distribution,
    /// Mean per call of the time not spent in probed callees.
    pub self_ns_mean: f64,
    /// The probed function that called it most often (None: called from the syscall itself).
    pub parent: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseTiming {
    pub phase: String,
    pub label: String,
    /// Self time of the phase's probed functions, per attempt.
    pub ns_per_attempt: f64,
    pub share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct OutcomeTiming {
    pub outcome: Outcome,
    pub attempts: u64,
    pub mean_ns: f64,
    pub functions: Vec<FunctionTiming>,
    pub phases: Vec<PhaseTiming>,
    /// Attempt time outside every probed function (syscall entry, inlined helpers).
    pub unprobed_ns_per_attempt: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExactTiming {
    pub probed: Vec<String>,
    pub calls: u64,
    /// Calls that could not be tied to a recorded attempt: counted, not used.
    pub calls_without_attempt: u64,
    pub outcomes: Vec<OutcomeTiming>,
}

struct Node<'a> {
    call: &'a Call,
    function: &'a str,
    children_ns: u64,
    parent: Option<&'a str>,
}

pub fn analyse(attempts: &[&ExecAttempt], calls: &[&Call], plan: &ExactPlan, model: &PhaseModel) -> ExactTiming {
    let outcome_of: HashMap<(u32, u64), Outcome> = attempts.iter().map(|a| ((a.tgid, a.enter_ns), Outcome::of(a.ret))).collect();
    let mut by_attempt: HashMap<(u32, u64), Vec<&Call>> = HashMap::new();
    let mut without = 0u64;
    for c in calls {
        let key = (c.tgid, c.attempt_enter_ns);
        if plan.function_of(c.slot).is_none() || !outcome_of.contains_key(&key) {
            without += 1;
            continue;
        }
        by_attempt.entry(key).or_default().push(c);
    }

    // Per outcome: per function: (durations, self sum, parent counts).
    type Acc<'a> = HashMap<&'a str, (Vec<u64>, u64, HashMap<Option<&'a str>, u64>)>;
    let mut per: HashMap<Outcome, Acc<'_>> = HashMap::new();
    for (key, mut list) in by_attempt {
        let outcome = outcome_of[&key];
        list.sort_by(|a, b| a.enter_ns.cmp(&b.enter_ns).then(b.exit_ns.cmp(&a.exit_ns)));
        let mut nodes: Vec<Node<'_>> = Vec::with_capacity(list.len());
        let mut stack: Vec<usize> = Vec::new();
        for c in list {
            while stack.last().is_some_and(|&i| nodes[i].call.exit_ns <= c.enter_ns) {
                stack.pop();
            }
            let function = plan.function_of(c.slot).map_or("?", |f| f.function.as_str());
            let parent = stack.last().copied();
            if let Some(p) = parent {
                nodes[p].children_ns += c.exit_ns.saturating_sub(c.enter_ns);
            }
            nodes.push(Node { call: c, function, children_ns: 0, parent: parent.map(|p| nodes[p].function) });
            stack.push(nodes.len() - 1);
        }
        let acc = per.entry(outcome).or_default();
        for n in nodes {
            let d = n.call.exit_ns.saturating_sub(n.call.enter_ns);
            let e = acc.entry(n.function).or_default();
            e.0.push(d);
            e.1 += d.saturating_sub(n.children_ns);
            *e.2.entry(n.parent).or_default() += 1;
        }
    }

    let mut outcomes = Vec::new();
    for outcome in Outcome::ALL {
        let of_kind: Vec<&&ExecAttempt> = attempts.iter().filter(|a| Outcome::of(a.ret) == outcome).collect();
        if of_kind.is_empty() {
            continue;
        }
        let n_attempts = of_kind.len() as f64;
        let mean_ns = of_kind.iter().map(|a| a.duration_ns() as f64).sum::<f64>() / n_attempts;
        let acc = per.remove(&outcome).unwrap_or_default();
        let mut phase_self: Vec<f64> = vec![0.0; model.phases().len()];
        let mut total_self = 0.0;
        let mut functions: Vec<FunctionTiming> = acc
            .into_iter()
            .map(|(function, (durations, self_sum, parents))| {
                let phase = model.phase_of(function);
                if let Some(p) = phase {
                    phase_self[p.index()] += self_sum as f64;
                }
                total_self += self_sum as f64;
                let calls = durations.len() as u64;
                let parent = parents.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0))).and_then(|(p, _)| p);
                FunctionTiming {
                    function: function.to_owned(),
                    phase: phase.map(|p| model.phase(p).name.clone()),
                    calls,
                    calls_per_attempt: calls as f64 / n_attempts,
                    inclusive_ns: Distribution::of(durations).expect("at least one call"),
                    self_ns_mean: self_sum as f64 / calls as f64,
                    parent: parent.map(str::to_owned),
                }
            })
            .collect();
        functions.sort_by(|a, b| {
            let order = |f: &FunctionTiming| f.phase.as_deref().and_then(|p| model.phase_by_name(p)).map_or(usize::MAX, |p| p.index());
            order(a).cmp(&order(b)).then(b.inclusive_ns.total_ns.cmp(&a.inclusive_ns.total_ns))
        });
        let phases = model
            .phases()
            .iter()
            .filter(|p| phase_self[p.id.index()] > 0.0)
            .map(|p| {
                let per_attempt = phase_self[p.id.index()] / n_attempts;
                PhaseTiming { phase: p.name.clone(), label: p.label.clone(), ns_per_attempt: per_attempt, share: per_attempt / mean_ns }
            })
            .collect();
        outcomes.push(OutcomeTiming {
            outcome,
            attempts: of_kind.len() as u64,
            mean_ns,
            functions,
            phases,
            unprobed_ns_per_attempt: (mean_ns - total_self / n_attempts).max(0.0),
        });
    }
    ExactTiming {
        probed: plan.functions.iter().map(|f| f.raw_name.clone()).collect(),
        calls: calls.len() as u64,
        calls_without_attempt: without,
        outcomes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::attempt, exact_plan::ProbedFunction};

    fn plan(names: &[&str]) -> ExactPlan {
        ExactPlan {
            functions: names
                .iter()
                .enumerate()
                .map(|(i, n)| ProbedFunction { slot: i as u32, function: (*n).into(), raw_name: (*n).into(), address: 0, by_address: false })
                .collect(),
            ..Default::default()
        }
    }

    fn call(slot: u32, attempt: u64, enter: u64, exit: u64) -> Call {
        Call { pid: 1, tgid: 1, enter_ns: enter, exit_ns: exit, attempt_enter_ns: attempt, slot }
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
        let calls = [
            call(0, 0, 100, 900),
            call(1, 0, 150, 850),
            call(0, 20_000, 20_100, 25_100),
            call(1, 20_000, 20_200, 21_200),
            call(2, 20_000, 22_000, 24_000),
            call(2, 999, 1, 2), // no such attempt
        ];
        let refs: Vec<&Call> = calls.iter().collect();
        let t = analyse(&[&fail, &ok], &refs, &p, &model);
        assert_eq!((t.calls, t.calls_without_attempt), (6, 1));
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
    }
}
