//! Sampled per-phase and per-function attribution of exec time, split by outcome.
//!
//! Each cpu-clock sample was taken inside one exec attempt; once the attempt's outcome is
//! known the sample counts for that outcome. A sample's phase comes from the phase model
//! (the innermost exec-path frame decides, interrupts and the scheduler are "other"); its
//! function is the frame that decided. Shares become time by multiplying with the outcome's
//! exact total from the tracepoints, so phases always reconcile with the measured total, and
//! each share carries a 95% Wilson interval that widens as samples get few.
use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt as _};

use serde::Serialize;

use super::{
    fastpath::{OpenPart, PartTally},
    identity::{Program, ProgramId},
    outcome::Outcome,
    stats::wilson,
    tree::{SampledTree, TreeNode},
};
use crate::{
    analysis::phases::{AttributionReason, PhaseModel},
    assemble::events::Sample,
};

/// Kernel addresses → function names, in one batch (symbolizers are fastest that way).
/// Behind a trait so tests use a fake table.
pub trait Symbolizer {
    /// For each address, the raw symbol name (`copy_strings.isra.0`), or None when no symbol
    /// covers it.
    fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>>;
}

/// Names for the addresses of one run's stacks, made once at its end: from the kernel in a
/// live run, from the recording in a replay, so both attribute alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolTable(pub BTreeMap<u64, String>);

impl SymbolTable {
    /// Names `addrs` with `symbols`; addresses without a symbol are left out (and show as
    /// `[unknown 0x…]`).
    pub fn build(addrs: &[u64], symbols: &dyn Symbolizer) -> Self {
        let names = symbols.symbolize(addrs);
        Self(addrs.iter().zip(names).filter_map(|(&a, n)| Some((a, n?))).collect())
    }

    /// The table's (address, name) pairs in address order, as a recording stores them.
    pub fn entries(&self) -> Vec<(u64, String)> {
        self.0.iter().map(|(&a, n)| (a, n.clone())).collect()
    }
}

impl Symbolizer for SymbolTable {
    fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
        addrs.iter().map(|a| self.0.get(a).cloned()).collect()
    }
}

/// Below this many samples a line's share is shown but flagged as weakly supported.
pub const MIN_SAMPLES: u64 = 30;

/// A sampled share with its 95% Wilson interval, and that share as time per attempt.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Estimate {
    /// Samples counted for this line.
    pub samples: u64,
    /// Of the outcome's samples.
    pub share: f64,
    /// Lower end of the share's 95% Wilson interval.
    pub share_low: f64,
    /// Upper end of the share's 95% Wilson interval.
    pub share_high: f64,
    /// share × the outcome's exact mean latency, with the interval scaled the same way.
    pub ns_per_attempt: f64,
    /// Lower end of `ns_per_attempt`'s interval, in ns per attempt.
    pub ns_per_attempt_low: f64,
    /// Upper end of `ns_per_attempt`'s interval, in ns per attempt.
    pub ns_per_attempt_high: f64,
    /// Fewer than [`MIN_SAMPLES`] samples: the share is shown but weakly supported.
    pub few_samples: bool,
}

impl Estimate {
    fn new(samples: u64, of: u64, mean_ns: f64) -> Self {
        let (lo, hi) = wilson(samples, of);
        let share = if of == 0 { 0.0 } else { samples as f64 / of as f64 };
        Self {
            samples,
            share,
            share_low: lo,
            share_high: hi,
            ns_per_attempt: share * mean_ns,
            ns_per_attempt_low: lo * mean_ns,
            ns_per_attempt_high: hi * mean_ns,
            few_samples: samples < MIN_SAMPLES,
        }
    }
}

/// One kernel function's share of a phase's samples.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FunctionLine {
    /// The kernel's own name, suffix kept (`do_execveat_common.isra.0`).
    pub function: String,
    /// The function's samples and estimated time per attempt.
    pub estimate: Estimate,
}

/// One phase's share of an outcome's samples, with the functions that decided it.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct PhaseLine {
    /// Phase id from the phase model (`args`, `open`, ...).
    pub phase: String,
    /// Human-readable phase label from the phase model, for reports.
    pub label: String,
    /// The phase's samples and estimated time per attempt.
    pub estimate: Estimate,
    /// Functions that decided this phase's samples, most samples first.
    pub functions: Vec<FunctionLine>,
}

/// Sampled attribution of one outcome's exec time to phases and functions.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeAttribution {
    /// The outcome these attempts ended with.
    pub outcome: Outcome,
    /// Completed exec attempts with this outcome.
    pub attempts: u64,
    /// Exact mean latency of this outcome's attempts (tracepoints).
    pub mean_ns: f64,
    /// Samples attributed to this outcome's attempts.
    pub samples: u64,
    /// In exec order; phases without samples included, so "not seen" is visible.
    pub phases: Vec<PhaseLine>,
    /// Folded stacks (`phase;outermost;...;innermost count`) for flame graphs.
    #[serde(skip)]
    pub folded: Vec<(String, u64)>,
    /// Set when the phases' intervals are too wide to quote: how many more samples would do.
    pub adequacy: Option<Adequacy>,
    /// The call tree from the stacks, rooted at the syscall.
    pub tree: TreeNode,
    /// Samples per part of the open path (the fast-path verdict's input).
    #[serde(skip)]
    pub open_parts: PartTally,
    /// Every function on at least [`CALLERS_MIN_SHARE`] of the samples' stacks: inclusive
    /// (on the stack at all) and self (innermost) time per attempt, most inclusive first.
    pub on_stack: Vec<FunctionTotals>,
}

/// Functions on fewer of the stacks than this are left out of [`OutcomeAttribution::on_stack`].
pub const CALLERS_MIN_SHARE: f64 = 0.005;

/// One function's time on the sampled stacks of an outcome.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FunctionTotals {
    /// The kernel's own name, suffix kept.
    pub function: String,
    /// Samples with the function anywhere on the stack, as share and time per attempt.
    pub inclusive: Estimate,
    /// Samples with the function innermost (its own work), as share and time per attempt (JSON field `self`).
    #[serde(rename = "self")]
    pub own: Estimate,
}

/// Phases holding at least this share are the ones whose precision matters.
const ADEQUACY_MIN_SHARE: f64 = 0.05;
/// Wider than ± this fraction of the figure is too wide to quote.
pub const ADEQUACY_TOLERANCE: f64 = 0.25;
/// The precision the advice aims at.
pub const ADEQUACY_TARGET: f64 = 0.10;

/// The widest interval among an outcome's phases of at least 5%, relative to its figure, and
/// how many times the samples would narrow it to ±10% (widths shrink as 1/√samples).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Adequacy {
    /// Half the interval's width over the share, for the worst phase.
    pub widest_relative: f64,
    /// The share of that worst phase.
    pub phase_share: f64,
    /// Samples needed ÷ samples taken, for ±10%.
    pub samples_factor: f64,
}

impl Adequacy {
    /// The advice for these phases, or None when every phase of at least 5% is within ±25%.
    pub fn of(phases: &[PhaseLine]) -> Option<Self> {
        let (rel, share) = phases
            .iter()
            .filter(|p| p.estimate.share >= ADEQUACY_MIN_SHARE)
            .map(|p| ((p.estimate.share_high - p.estimate.share_low) / 2.0 / p.estimate.share, p.estimate.share))
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        (rel > ADEQUACY_TOLERANCE).then(|| Adequacy {
            widest_relative: rel,
            phase_share: share,
            samples_factor: (rel / ADEQUACY_TARGET).powi(2),
        })
    }
}

/// The sampled attribution of a run: sample accounting and one attribution per outcome.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SampledAttribution {
    /// Samples the kernel delivered during the run, used or not.
    pub samples: u64,
    /// Samples whose attempt was never recorded (its exit was lost): counted, not used.
    pub samples_without_attempt: u64,
    /// Samples taken after the attempt's exit timestamp (in the exit probe's own work): not
    /// part of the measured latency, so not attributed.
    pub samples_after_exit: u64,
    /// Likewise before its enter timestamp (in the enter probe's own work).
    pub samples_before_enter: u64,
    /// Samples whose kernel stack could not be read: attributed to "other".
    pub samples_without_stack: u64,
    /// Distinct addresses no kernel symbol covers (shown as `[unknown 0x…]`).
    pub unknown_addresses: u64,
    /// Samples attributed per second of measured exec-attempt time: the rate the kernel
    /// delivered (per CPU), to set beside the one asked for. None without attempt time.
    pub delivered_hz: Option<f64>,
    /// One attribution per outcome that had samples.
    pub outcomes: Vec<OutcomeAttribution>,
    /// The samples per outcome, calling program and stack (a run's or a recording's; the
    /// agent's carry no program): what a pprof profile labels by program. Not in the JSON,
    /// whose per-program figures are the callers table.
    #[serde(skip)]
    pub by_program: Vec<ProgramStack>,
}

/// Samples of one stack inside the calls of one outcome made by one program.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProgramStack {
    /// The calls' outcome.
    pub outcome: Outcome,
    /// The calling program, as the report names it.
    pub program: String,
    /// `phase;outermost;…;innermost`, as [`OutcomeAttribution::folded`]'s lines.
    pub folded: String,
    /// Samples.
    pub samples: u64,
}

/// The outcomes' measured exec-attempt time, in seconds.
pub fn attempt_seconds(outcomes: &[OutcomeAttribution]) -> f64 {
    outcomes.iter().map(|o| o.attempts as f64 * o.mean_ns).sum::<f64>() / 1e9
}

/// Samples attributed per second of the outcomes' measured time.
pub fn delivered_hz(outcomes: &[OutcomeAttribution]) -> Option<f64> {
    let seconds = attempt_seconds(outcomes);
    let samples: u64 = outcomes.iter().map(|o| o.samples).sum();
    (seconds > 0.0).then(|| samples as f64 / seconds)
}

/// Samples folded as their calls complete: per outcome, how often each distinct stack was
/// seen. Stacks are symbolized and attributed once each, at the end, so memory and work
/// follow the number of distinct stacks, not of samples.
#[derive(Clone, Debug, Default)]
pub struct SampleTally {
    stacks: HashMap<Vec<u64>, usize>,
    per_outcome: BTreeMap<Outcome, HashMap<usize, u64>>,
    /// Per (outcome, calling program, stack id): samples (calls made through
    /// [`SampleTally::call`] only).
    per_program: HashMap<(Outcome, ProgramId, usize), u64>,
    samples: u64,
    without_call: u64,
    before_enter: u64,
    after_exit: u64,
}

impl SampleTally {
    /// The samples taken inside one completed call by `program` that ended at `exit_ns` with
    /// `outcome`.
    pub(crate) fn call(&mut self, outcome: Outcome, program: ProgramId, exit_ns: u64, samples: &[Sample]) {
        for s in samples {
            self.samples += 1;
            // Taken in the probes' own work after the exit timestamp: outside the measured time.
            if s.ts_ns > exit_ns {
                self.after_exit += 1;
                continue;
            }
            let next = self.stacks.len();
            let id = *self.stacks.entry(s.frames.clone()).or_insert(next);
            *self.per_outcome.entry(outcome).or_default().entry(id).or_default() += 1;
            *self.per_program.entry((outcome, program, id)).or_default() += 1;
        }
    }

    /// `count` samples of one stack inside calls that ended with `outcome`, counted in the
    /// kernel (the agent's, whose samples carry no timestamps).
    pub fn stack(&mut self, outcome: Outcome, frames: &[u64], count: u64) {
        self.samples += count;
        let next = self.stacks.len();
        let id = *self.stacks.entry(frames.to_vec()).or_insert(next);
        *self.per_outcome.entry(outcome).or_default().entry(id).or_default() += count;
    }

    /// Distinct stacks held (what the memory follows).
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Whether this stack is held already.
    pub fn has_stack(&self, frames: &[u64]) -> bool {
        self.stacks.contains_key(frames)
    }

    /// A sample no completed call took.
    pub fn orphan(&mut self) {
        self.samples += 1;
        self.without_call += 1;
    }

    /// A sample in the enter probe, before its call's first timestamp.
    pub fn before_enter(&mut self) {
        self.samples += 1;
        self.before_enter += 1;
    }

    /// Every distinct address in the stacks, sorted (what the symbol table must name).
    pub fn addresses(&self) -> Vec<u64> {
        let mut addrs: Vec<u64> = self.stacks.keys().flatten().copied().collect();
        addrs.sort_unstable();
        addrs.dedup();
        addrs
    }

    /// `outcome_stats(outcome)` gives the outcome's (attempts, exact mean latency);
    /// `programs` names the program ids calls were made by.
    pub(crate) fn finish(
        self,
        symbols: &dyn Symbolizer,
        model: &PhaseModel,
        outcome_stats: impl Fn(Outcome) -> (u64, f64),
        programs: &[Program],
    ) -> SampledAttribution {
        let addrs = self.addresses();
        let names: HashMap<u64, String> = addrs
            .iter()
            .zip(symbols.symbolize(&addrs).into_iter().chain(std::iter::repeat(None)))
            .map(|(&a, n)| (a, n.unwrap_or_else(|| format!("[unknown {a:#x}]"))))
            .collect();
        let unknown = names.values().filter(|n| n.starts_with("[unknown ")).count() as u64;
        // Each distinct stack: its phase, the function that decided it, its folded line.
        let mut by_id: Vec<(usize, String, String)> = vec![(0, String::new(), String::new()); self.stacks.len()];
        let mut frames_of: Vec<Vec<&str>> = vec![Vec::new(); self.stacks.len()];
        let mut part_of: Vec<OpenPart> = vec![OpenPart::Rest; self.stacks.len()];
        let mut stackless: Option<usize> = None;
        for (frames, &id) in &self.stacks {
            let frames: Vec<&str> = frames.iter().map(|a| names[a].as_str()).collect();
            let (phase, function) = if frames.is_empty() {
                stackless = Some(id);
                (model.other(), "[no stack]".to_owned())
            } else {
                let a = model.attribute(&frames);
                let decider = match a.reason {
                    AttributionReason::Overhead { frame }
                    | AttributionReason::Async { frame }
                    | AttributionReason::Strong { frame }
                    | AttributionReason::Weak { frame } => frame,
                    AttributionReason::Fallback => 0,
                };
                (a.phase, frames[decider].to_owned())
            };
            let mut folded = model.phase(phase).name.clone();
            for f in frames.iter().rev() {
                folded.push(';');
                folded.push_str(f);
            }
            part_of[id] = OpenPart::of(&frames, Some(phase) == model.tracer());
            by_id[id] = (phase.index(), function, folded);
            frames_of[id] = frames;
        }
        let mut without_stack = 0;
        let mut outcomes = Vec::new();
        for (outcome, counts) in self.per_outcome {
            let mut by_phase: Vec<HashMap<&str, u64>> = vec![HashMap::new(); model.phases().len()];
            let mut folded: HashMap<&str, u64> = HashMap::new();
            let mut tree = SampledTree::default();
            let mut on_stack: HashMap<&str, (u64, u64)> = HashMap::new();
            let mut open_parts = PartTally::default();
            for (&id, &n) in &counts {
                open_parts.add(part_of[id], n);
                tree.add(&frames_of[id], n);
                let frames = &frames_of[id];
                for (i, f) in frames.iter().enumerate() {
                    // Recursion: a function counts once per stack. The syscall entry's own
                    // frames are the whole attempt: not a line of their own.
                    // Trampolines wrap every probed function: not a line either.
                    if !frames[..i].contains(f)
                        && !crate::analysis::tree::ENTRY_FRAMES.contains(f)
                        && model.frame_class(f) != crate::analysis::phases::FrameClass::Wrapper
                    {
                        on_stack.entry(f).or_default().0 += n;
                    }
                }
                if let Some(leaf) = frames.first() {
                    on_stack.entry(leaf).or_default().1 += n;
                }
                let (phase, function, line) = &by_id[id];
                *by_phase[*phase].entry(function.as_str()).or_default() += n;
                *folded.entry(line.as_str()).or_default() += n;
                if Some(id) == stackless {
                    without_stack += n;
                }
            }
            let (attempts, mean_ns) = outcome_stats(outcome);
            let total: u64 = counts.values().sum();
            let phases: Vec<PhaseLine> = model
                .phases()
                .iter()
                .map(|p| {
                    let funcs = &by_phase[p.id.index()];
                    let mut functions: Vec<FunctionLine> = funcs
                        .iter()
                        .map(|(f, &n)| FunctionLine { function: (*f).to_owned(), estimate: Estimate::new(n, total, mean_ns) })
                        .collect();
                    functions.sort_by(|a, b| b.estimate.samples.cmp(&a.estimate.samples).then_with(|| a.function.cmp(&b.function)));
                    PhaseLine {
                        phase: p.name.clone(),
                        label: p.label.clone(),
                        estimate: Estimate::new(funcs.values().sum(), total, mean_ns),
                        functions,
                    }
                })
                .collect();
            let mut folded: Vec<(String, u64)> = folded.into_iter().map(|(l, n)| (l.to_owned(), n)).collect();
            folded.sort();
            let adequacy = Adequacy::of(&phases);
            let tree = tree.finish(&format!("{} attempt", outcome.label()), mean_ns);
            let mut on_stack: Vec<FunctionTotals> = on_stack
                .into_iter()
                .filter(|(_, (k, _))| *k as f64 >= CALLERS_MIN_SHARE * total as f64)
                .map(|(f, (k, own))| FunctionTotals {
                    function: f.to_owned(),
                    inclusive: Estimate::new(k, total, mean_ns),
                    own: Estimate::new(own, total, mean_ns),
                })
                .collect();
            on_stack.sort_by(|a, b| b.inclusive.samples.cmp(&a.inclusive.samples).then(a.function.cmp(&b.function)));
            outcomes.push(OutcomeAttribution {
                outcome,
                attempts,
                mean_ns,
                samples: total,
                phases,
                folded,
                adequacy,
                tree,
                open_parts,
                on_stack,
            });
        }
        let mut by_program: Vec<ProgramStack> = self
            .per_program
            .iter()
            .map(|(&(outcome, program, id), &samples)| ProgramStack {
                outcome,
                program: programs.get(program as usize).map_or_else(|| format!("program {program}"), ToString::to_string),
                folded: by_id[id].2.clone(),
                samples,
            })
            .collect();
        by_program.sort();
        SampledAttribution {
            by_program,
            samples: self.samples,
            samples_without_attempt: self.without_call,
            samples_after_exit: self.after_exit,
            samples_before_enter: self.before_enter,
            samples_without_stack: without_stack,
            unknown_addresses: unknown,
            delivered_hz: delivered_hz(&outcomes),
            outcomes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeSymbols(Vec<(u64, &'static str)>);
    impl Symbolizer for FakeSymbols {
        fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
            addrs.iter().map(|addr| self.0.iter().find(|(a, _)| a == addr).map(|(_, n)| (*n).to_owned())).collect()
        }
    }

    const PATH_OPENAT: u64 = 0x10;
    const DO_OPEN_EXECAT: u64 = 0x20;
    const SYSCALL: u64 = 0x30;
    const MM_ALLOC: u64 = 0x40;
    const IRQ: u64 = 0x50;

    fn symbols() -> FakeSymbols {
        FakeSymbols(vec![
            (PATH_OPENAT, "path_openat"),
            (DO_OPEN_EXECAT, "do_open_execat"),
            (SYSCALL, "__x64_sys_execve"),
            (MM_ALLOC, "mm_alloc"),
            (IRQ, "__sysvec_apic_timer_interrupt"),
        ])
    }

    fn sample(ts_ns: u64, frames: &[u64]) -> Sample {
        Sample { ts_ns, pid: 1, frames: frames.to_vec() }
    }

    #[test]
    fn samples_count_for_their_attempts_outcome_and_phase() {
        let model = PhaseModel::builtin().unwrap();
        let mut tally = SampleTally::default();
        // A failed attempt 100..1100 and a success 2000..42000.
        tally.call(
            Outcome::Enoent,
            0,
            1_100,
            &[
                sample(101, &[PATH_OPENAT, DO_OPEN_EXECAT, SYSCALL]),
                sample(102, &[PATH_OPENAT, DO_OPEN_EXECAT, SYSCALL]),
                sample(103, &[0xdead, SYSCALL]),
                sample(1_200, &[PATH_OPENAT]), // after exit
            ],
        );
        tally.call(
            Outcome::Success,
            1,
            42_000,
            &[sample(2_001, &[MM_ALLOC, SYSCALL]), sample(2_002, &[IRQ, MM_ALLOC, SYSCALL]), sample(2_003, &[])],
        );
        tally.orphan(); // its attempt was lost
        let table = SymbolTable::build(&tally.addresses(), &symbols());
        let programs = [Program::Exe { exe: "/bin/sh".into(), comm: None }, Program::Launcher];
        let a = tally.finish(&table, &model, |o| if o == Outcome::Enoent { (1, 1_000.0) } else { (1, 40_000.0) }, &programs);
        assert_eq!((a.samples, a.samples_without_attempt, a.samples_without_stack, a.unknown_addresses), (8, 1, 1, 1));
        assert_eq!(a.samples_after_exit, 1);
        let enoent = a.outcomes.iter().find(|o| o.outcome == Outcome::Enoent).unwrap();
        assert_eq!(enoent.samples, 3);
        let lookup = enoent.phases.iter().find(|p| p.phase == "lookup").unwrap();
        assert_eq!(lookup.estimate.samples, 2);
        assert_eq!(lookup.functions[0].function, "path_openat");
        // 2 of 3 samples of a 1 µs outcome: 667 ns per attempt.
        assert!((lookup.estimate.ns_per_attempt - 666.67).abs() < 0.1);
        assert!(lookup.estimate.few_samples);
        // Shares of all phases add up to the whole, so time reconciles with the exact mean.
        let sum: f64 = enoent.phases.iter().map(|p| p.estimate.ns_per_attempt).sum();
        assert!((sum - enoent.mean_ns).abs() < 1e-6);
        let other = enoent.phases.iter().find(|p| p.phase == "other").unwrap();
        assert_eq!(other.functions[0].function, "[unknown 0xdead]");

        let success = a.outcomes.iter().find(|o| o.outcome == Outcome::Success).unwrap();
        let mm = success.phases.iter().find(|p| p.phase == "bprm_mm").unwrap();
        assert_eq!(mm.estimate.samples, 1);
        let other = success.phases.iter().find(|p| p.phase == "other").unwrap();
        assert_eq!(other.estimate.samples, 2, "the interrupt and the stackless sample");
        assert!(success.folded.iter().any(|(s, n)| s == "bprm_mm;__x64_sys_execve;mm_alloc" && *n == 1), "{:?}", success.folded);
        // Each sample once more under its caller's program, by the same folded lines.
        let of = |o: Outcome| a.by_program.iter().filter(move |p| p.outcome == o);
        assert!(of(Outcome::Enoent).all(|p| p.program == "/bin/sh"));
        assert!(of(Outcome::Success).all(|p| p.program == "execprof (launching the command)"));
        assert_eq!(of(Outcome::Enoent).map(|p| p.samples).sum::<u64>(), enoent.samples);
        assert_eq!(of(Outcome::Success).map(|p| p.samples).sum::<u64>(), success.samples);
        for p in &a.by_program {
            let line = a.outcomes.iter().find(|o| o.outcome == p.outcome).unwrap().folded.iter().find(|(l, _)| *l == p.folded);
            assert!(line.is_some_and(|(_, n)| *n >= p.samples), "{p:?}");
        }
    }
}
