//! `execprof diff A B`: two recordings' reports compared outcome by outcome, phase by phase and
//! function by function, normalised per attempt (never by raw sample counts) and per chain
//! step (when both are the built-in chain), each change with a 95% interval and whether it is
//! significant (where both sides have two values or more), sorted by how much of the total
//! change it explains. Pure: it reads two [`RunReport`]s. With rounds (`--round A2 B2`: boots,
//! machines), [`rounds::combine`] makes one diff of the rounds' diffs, tested between rounds.
mod flame;
mod render;
pub mod rounds;
pub mod who_pays;

use serde::Serialize;

pub use flame::{write_differential, write_differential_rounds};
pub use render::{LINES_SHOWN, Shown, render};
pub use rounds::{Rounds, combine};

use crate::{
    analysis::{
        outcome::Outcome,
        stats::{Distribution, Interval, holm},
    },
    model::names::escape_name,
    report::RunReport,
};

/// How each kind of figure is compared: printed with the diff and kept in its JSON.
pub const METHOD_MEDIAN: &str = "difference of medians, 95% Price–Bonett interval (each median's variance from its \
     distribution-free order-statistic interval): suits skewed latency distributions";
/// How mean latencies are compared.
pub const METHOD_MEAN: &str = "difference of means, 95% Welch interval (normal approximation)";
/// How sampled phase and function lines are compared.
pub const METHOD_SAMPLED: &str =
    "sampled: per attempt = Wilson 95% share of the outcome's samples × its measured mean; the two sides' intervals combined in quadrature";
/// How exact phase and function lines are compared.
pub const METHOD_EXACT: &str = "exact: mean per attempt over attempts, 95% normal interval; the two sides combined in quadrature";
/// How lines are tested for significance.
pub const METHOD_LINES: &str = "lines: sig = significant after Holm's correction over all lines with an interval (family-wise 5%), from normal p-values; \
     intervals are the unadjusted 95% ones";
/// How a diff over rounds (`--round`) makes its figures: the first of its methods.
pub const METHOD_ROUNDS: &str = "rounds: each figure is the mean of its rounds' figures (a round: one recording of A and one of B, e.g. one boot of each \
     kernel), with a 95% Student interval (rounds − 1 degrees of freedom); a change is B's rounds against A's, unpaired, by Welch's t-test \
     (Welch–Satterthwaite degrees of freedom); each side's variance over its rounds is at least the mean of the rounds' own squared standard \
     errors (a round's 95% interval half-width / 1.96), so rounds that agree exactly keep the spread each measured; counts are summed";
/// How a diff over rounds tests its lines, and what a line missing from a round counts as.
pub const METHOD_ROUNDS_LINES: &str = "lines: sig = significant after Holm's correction over all lines with an interval (family-wise 5%), from the Welch \
     p-values between rounds; intervals are the unadjusted 95% ones; a line missing from a round that measured its outcome the same way \
     (sampled or exact) is 0 there, nothing having been attributed to it; a round without attempts of the outcome counts 0 per unit and is \
     left out per attempt; a round that did not measure the outcome that way is left out";

/// One side of the comparison, as the diff shows it.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SideFacts {
    /// The recording's path, as given.
    pub path: String,
    /// The traced command line, joined with spaces.
    pub command: String,
    /// The kernel release the run ran on.
    pub kernel: String,
    /// `exact`, `exact+sampled`, `sampled` or `none` (see [`crate::model::meta::Mode`]).
    pub functions_mode: String,
    /// cpu-clock samples per second per CPU; 0: none.
    pub sample_hz: u64,
    /// Exec attempts completed (all outcomes).
    pub attempts: u64,
    /// Chain steps, when the run was the built-in chain (other workloads' exec-to-exec steps
    /// are not a unit two runs share, so the diff does not count them).
    pub steps: Option<u64>,
    /// False when the run lost records or was cut short.
    pub complete: bool,
    /// In a diff over rounds, every round's recording of this side in order (the first is
    /// `path`); the counts above are then summed over them. Empty for a diff of two recordings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_paths: Vec<String>,
}

/// What the per-unit figures are per: chain steps when both runs are the built-in chain, else
/// exec attempts of any outcome (so a change weighs by how often its outcome occurs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Per chain step of the built-in chain.
    ChainStep,
    /// Per exec attempt, of any outcome.
    ExecAttempt,
}

impl Unit {
    /// How the unit reads in the diff's headings (`per chain step`).
    pub fn label(self) -> &'static str {
        match self {
            Unit::ChainStep => "per chain step",
            Unit::ExecAttempt => "per exec attempt (any outcome)",
        }
    }
}

/// Observations a side needs for a figure's interval, and a change for its test. One value
/// has no spread: its "interval" was the value itself, zero wide, and a change from it was
/// significant whatever the data ("+2.43 ms [+2.43 … +2.43] yes").
pub const MIN_OBSERVATIONS: u64 = 2;

/// A figure of the diff and, where the data give one, its 95% interval (None from fewer than
/// [`MIN_OBSERVATIONS`] on a side). JSON: `value`, and `low` and `high` when known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Figure {
    /// The estimate.
    pub value: f64,
    /// Its 95% interval, when known.
    #[serde(flatten)]
    pub bounds: Option<Bounds>,
}

/// The ends of a [`Figure`]'s 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Bounds {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

impl Figure {
    /// `i`'s value, with its interval only when `known`.
    pub fn new(i: Interval, known: bool) -> Self {
        Figure { value: i.value, bounds: known.then_some(Bounds { low: i.low, high: i.high }) }
    }

    /// The figure with its interval, when it has one.
    pub fn interval(&self) -> Option<Interval> {
        self.bounds.map(|b| Interval { value: self.value, low: b.low, high: b.high })
    }

    /// Two-sided p-value of no change (normal, from the interval's width); None where there is
    /// no interval to test with. A diff over rounds keeps its Student p-values in its lines'
    /// `p_value`s instead.
    pub fn p_value(&self) -> Option<f64> {
        self.interval().map(|i| i.p_value())
    }
}

/// Enough observations on both sides for an interval.
fn both_known(na: u64, nb: u64) -> bool {
    na >= MIN_OBSERVATIONS && nb >= MIN_OBSERVATIONS
}

/// One outcome's latency in A and B.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeChange {
    /// The outcome.
    pub outcome: Outcome,
    /// Attempts with this outcome in A.
    pub count_a: u64,
    /// Attempts with this outcome in B.
    pub count_b: u64,
    /// Attempts of this outcome per unit.
    pub per_unit_a: f64,
    /// Attempts of this outcome per unit in B.
    pub per_unit_b: f64,
    /// Median and mean latency per attempt on both sides (flattened into this JSON object).
    #[serde(flatten)]
    pub latency: LatencyChange,
    /// Kernel time of this outcome per unit: B − A (how often × how long). A side without
    /// attempts adds exactly 0; its interval needs the others' [`MIN_OBSERVATIONS`].
    pub per_unit_change: Figure,
}

/// One latency distribution in A and B: medians and means with their changes. A side's
/// figures are None when it has no values (no attempts: there is no latency to show, not a
/// latency of 0), and the changes then too.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct LatencyChange {
    /// A's median latency, in ns, with its order-statistic interval.
    pub median_a: Option<Figure>,
    /// B's median latency, in ns, with its order-statistic interval.
    pub median_b: Option<Figure>,
    /// B − A of the medians, in ns, with its Price–Bonett interval.
    pub median_change: Option<Figure>,
    /// A's mean latency, in ns, with its normal interval.
    pub mean_a: Option<Figure>,
    /// B's mean latency, in ns, with its normal interval.
    pub mean_b: Option<Figure>,
    /// B − A of the means, in ns, with its Welch interval.
    pub mean_change: Option<Figure>,
    /// The medians differ (the Price–Bonett interval excludes zero; over rounds, the Welch
    /// interval between the rounds' medians); false where there is no interval to tell.
    pub significant: bool,
}

impl LatencyChange {
    fn new(a: Option<&Distribution>, b: Option<&Distribution>) -> Self {
        let side = |d: Option<&Distribution>, f: fn(&Distribution) -> Interval| d.map(|d| Figure::new(f(d), d.count >= MIN_OBSERVATIONS));
        let change =
            |f: fn(&Distribution) -> Interval| a.zip(b).map(|(a, b)| Figure::new(f(a).change_to(&f(b)), both_known(a.count, b.count)));
        let median_change = change(Distribution::median);
        Self {
            median_a: side(a, Distribution::median),
            median_b: side(b, Distribution::median),
            median_change,
            mean_a: side(a, Distribution::mean),
            mean_b: side(b, Distribution::mean),
            mean_change: change(Distribution::mean),
            significant: median_change.and_then(|c| c.interval()).is_some_and(|i| i.excludes_zero()),
        }
    }
}

/// Where a line's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// A phase (self time of its functions / samples attributed to it).
    Phase,
    /// Sampled: samples whose deciding exec-path frame is this function (its phase line's).
    Function,
    /// Time from entry to return, callees included (sampled: on the stack at all).
    FunctionInclusive,
    /// Exact: time not spent in probed callees; sampled: innermost frame.
    FunctionSelf,
}

impl LineKind {
    /// Short name of the kind in the diff's table (`phase`, `decides`, `inclusive`, `self`).
    pub fn label(self) -> &'static str {
        match self {
            LineKind::Phase => "phase",
            LineKind::Function => "decides",
            LineKind::FunctionInclusive => "inclusive",
            LineKind::FunctionSelf => "self",
        }
    }
}

/// One phase or function of one outcome in A and B.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct LineChange {
    /// The outcome whose attempts the line is about.
    pub outcome: Outcome,
    /// What the line measures.
    pub kind: LineKind,
    /// `sampled` or `exact`.
    pub source: String,
    /// The phase id or kernel function name.
    pub name: String,
    /// Nanoseconds per attempt of the outcome (an interval from [`MIN_OBSERVATIONS`] attempts).
    pub a: Figure,
    /// The same for B.
    pub b: Figure,
    /// B − A per attempt of the outcome, in ns (an interval when both sides have one).
    pub change: Figure,
    /// Nanoseconds per unit: B − A, weighed by how often the outcome occurs on each side.
    pub per_unit_change: Figure,
    /// Two-sided p-value of no change per attempt (normal approximation; over rounds, Welch's
    /// t-test between them); None, and not significant, without an interval (fewer than
    /// [`MIN_OBSERVATIONS`] attempts on a side).
    pub p_value: Option<f64>,
    /// The change per attempt is significant after Holm's correction over all tested lines
    /// (at most a 5% chance of any false positive among them).
    pub significant: bool,
    /// Two-sided p-value of no change per unit (normal approximation); None as `p_value`.
    pub per_unit_p_value: Option<f64>,
    /// The same for the change per unit (it moves with how often the outcome occurs too).
    pub per_unit_significant: bool,
}

/// The comparison of two recordings: what `diff` prints and writes as JSON.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Diff {
    /// Recording A (the baseline).
    pub a: SideFacts,
    /// Recording B (compared with A).
    pub b: SideFacts,
    /// What differs between the runs besides what was meant to (kernel, mode, probes, rate,
    /// CPU, workload): each a sentence naming both values.
    pub warnings: Vec<String>,
    /// What the per-unit figures are per.
    pub unit: Unit,
    /// How each kind of figure was compared (the `METHOD_*` texts).
    pub methods: Vec<String>,
    /// Per outcome seen on both sides: latency and kernel time per unit.
    pub outcomes: Vec<OutcomeChange>,
    /// Chain step wall time (both the built-in chain): median and mean change.
    pub step: Option<LatencyChange>,
    /// Largest contribution to the total change first.
    pub lines: Vec<LineChange>,
    /// The calling programs and PATH searches side by side, when either report shows them.
    #[serde(default)]
    pub who_pays: Option<who_pays::WhoPaysChange>,
    /// Set in a diff over rounds (`--round`): how many, and how its figures were made. Its
    /// figures are then means over the rounds with Student intervals, its changes and
    /// p-values Welch tests between the rounds, not within one recording.
    #[serde(default)]
    pub rounds: Option<Rounds>,
}

fn facts(path: &str, r: &RunReport) -> SideFacts {
    SideFacts {
        path: path.to_owned(),
        command: crate::model::names::shell_command(&r.meta.argv()),
        kernel: r.meta.kernel.release.clone(),
        functions_mode: r.meta.mode.functions_mode.clone(),
        sample_hz: r.meta.sample_hz,
        attempts: r.analysis.attempts,
        steps: builtin_chain(r).map(|c| c.steps),
        complete: r.complete,
        round_paths: Vec::new(),
    }
}

/// The chain steps of a run of the built-in chain. Any workload whose process execs twice has
/// exec-to-exec steps (a shell's `exec`, `env`, a wrapper), but only the built-in chain is made
/// of them: per step of a single `sh -c '...; exec env true'`, its 1,840 attempts would weigh as
/// 1,840 attempts per chain step against the chain's 7.
fn builtin_chain(r: &RunReport) -> Option<&crate::analysis::chain::ChainSummary> {
    r.meta.chain.as_ref().and(r.analysis.chain.as_ref())
}

/// Everything that makes A and B differ besides (perhaps) the point of the comparison.
fn warnings(a: &RunReport, b: &RunReport) -> Vec<String> {
    let mut w = Vec::new();
    let (arch_a, arch_b) = (&a.meta.kernel.machine, &b.meta.kernel.machine);
    if arch_a != arch_b {
        w.push(format!(
            "the recordings are of different architectures: A {}, B {}; the kernel's code differs between them, so a change is the architecture's as much as anything else's. Lines are compared where the function names match; the syscall entry functions (__x64_sys_*, __arm64_sys_*) and the architecture's own helpers appear on one side only",
            escape_name(arch_a.as_bytes()),
            escape_name(arch_b.as_bytes())
        ));
    }
    let mut differs = |what: &str, x: String, y: String| {
        if x != y {
            w.push(format!("the recordings differ in {what}: A {x}, B {y}"));
        }
    };
    differs("kernel", a.meta.kernel.release.clone(), b.meta.kernel.release.clone());
    differs("mode", a.meta.mode.functions_mode.clone(), b.meta.mode.functions_mode.clone());
    differs("sampling rate", format!("{} Hz", a.meta.sample_hz), format!("{} Hz", b.meta.sample_hz));
    differs(
        "CPU",
        format!("{} ×{}", a.meta.machine.cpu_model, a.meta.machine.cpus),
        format!("{} ×{}", b.meta.machine.cpu_model, b.meta.machine.cpus),
    );
    let workload = |r: &RunReport| match &r.meta.chain {
        Some(c) => format!("the built-in chain {}", serde_json::to_string(c).unwrap_or_default()),
        None => format!("`{}`", crate::model::names::shell_command(&r.meta.argv())),
    };
    differs("workload", workload(a), workload(b));
    let mechanisms = |r: &RunReport| {
        r.meta.exact_plan.as_ref().map_or_else(String::new, |p| {
            p.functions.iter().map(|f| format!("{}:{:?}", f.function, f.mechanism).to_lowercase()).collect::<Vec<_>>().join(", ")
        })
    };
    let (ma, mb) = (mechanisms(a), mechanisms(b));
    if !ma.is_empty() && !mb.is_empty() && ma != mb {
        w.push(format!("the recordings differ in exact mode's probes (which functions, or fentry vs kprobe): A [{ma}], B [{mb}]"));
    }
    for (side, r) in [("A", a), ("B", b)] {
        for o in r.analysis.outcomes.iter().filter(|o| o.modes.len() > 1) {
            let list: Vec<String> =
                o.modes.iter().map(|m| format!("{} ({:.0}%)", crate::report::human_ns(m.ns), m.weight * 100.0)).collect();
            w.push(format!(
                "{} latency in {side} is multimodal ({}): its mean describes none of them; trust the median change, and look at the modes",
                o.outcome.label(),
                list.join(", ")
            ));
        }
        if !r.complete {
            w.push(format!("recording {side} is incomplete (records lost or the run was cut short): its figures are not the whole run's"));
        }
    }
    w
}

/// Compares report `b` (from `path_b`) with report `a` (from `path_a`): per outcome, per
/// phase and function line, and per chain step when both are runs of the built-in chain.
pub fn compare(path_a: &str, a: &RunReport, path_b: &str, b: &RunReport) -> Diff {
    let chains = builtin_chain(a).zip(builtin_chain(b));
    let unit = if chains.is_some() { Unit::ChainStep } else { Unit::ExecAttempt };
    let units = |r: &RunReport| match unit {
        Unit::ChainStep => builtin_chain(r).map_or(0, |c| c.steps),
        Unit::ExecAttempt => r.analysis.attempts,
    };
    let (units_a, units_b) = (units(a).max(1) as f64, units(b).max(1) as f64);
    let mut outcomes = Vec::new();
    let mut weights: Vec<Weight> = Vec::new();
    for oa in &a.analysis.outcomes {
        let Some(ob) = b.analysis.outcomes.iter().find(|o| o.outcome == oa.outcome) else { continue };
        if oa.count == 0 && ob.count == 0 {
            continue;
        }
        let (pa, pb) = (oa.count as f64 / units_a, ob.count as f64 / units_b);
        weights.push(Weight { outcome: oa.outcome, a: pa, b: pb, attempts_a: oa.count, attempts_b: ob.count });
        let latency = LatencyChange::new(oa.latency.as_ref(), ob.latency.as_ref());
        // A side without attempts spends exactly 0 in the outcome per unit: known, not estimated.
        let mean = |d: &Option<Distribution>, p: f64| d.as_ref().map_or_else(Interval::default, |d| d.mean().scaled(p));
        let known = |n: u64| n == 0 || n >= MIN_OBSERVATIONS;
        let per_unit_change = Figure::new(mean(&oa.latency, pa).change_to(&mean(&ob.latency, pb)), known(oa.count) && known(ob.count));
        outcomes.push(OutcomeChange {
            outcome: oa.outcome,
            count_a: oa.count,
            count_b: ob.count,
            per_unit_a: pa,
            per_unit_b: pb,
            latency,
            per_unit_change,
        });
    }
    let step = chains.map(|(ca, cb)| LatencyChange::new(Some(&ca.wall_ns), Some(&cb.wall_ns)));
    let mut lines = Vec::new();
    for &w in &weights {
        lines.extend(sampled_lines(a, b, w));
        lines.extend(exact_lines(a, b, w));
    }
    test_and_sort(&mut lines);
    let who_pays = who_pays::compare(a, b);
    let mut warnings = warnings(a, b);
    if let Some(w) = who_pays.as_ref().filter(|w| w.windows_differ()) {
        warnings.push(format!(
            "the traced windows differ in length: A {}, B {}; the who-pays totals are each window's, so compare them per search or per attempt",
            crate::report::human_ns(w.window_ns.a as f64),
            crate::report::human_ns(w.window_ns.b as f64)
        ));
    }
    Diff {
        a: facts(path_a, a),
        b: facts(path_b, b),
        warnings,
        unit,
        methods: [METHOD_MEDIAN, METHOD_MEAN, METHOD_SAMPLED, METHOD_EXACT, METHOD_LINES].map(str::to_owned).to_vec(),
        outcomes,
        step,
        lines,
        who_pays,
        rounds: None,
    }
}

/// Marks the lines significant by Holm's correction over their p-values (per attempt and per
/// unit, each its own family) and sorts them: where the time went, significant contributions
/// first, largest first; then the rest.
fn test_and_sort(lines: &mut [LineChange]) {
    let p: Vec<Option<f64>> = lines.iter().map(|l| l.p_value).collect();
    let per_unit_p: Vec<Option<f64>> = lines.iter().map(|l| l.per_unit_p_value).collect();
    for ((l, s), u) in lines.iter_mut().zip(holm_tested(&p)).zip(holm_tested(&per_unit_p)) {
        l.significant = s;
        l.per_unit_significant = u;
    }
    lines.sort_by(|x, y| {
        y.per_unit_significant
            .cmp(&x.per_unit_significant)
            .then(y.per_unit_change.value.abs().total_cmp(&x.per_unit_change.value.abs()))
            .then(x.name.cmp(&y.name))
            .then(x.outcome.cmp(&y.outcome))
    });
}

/// Holm's correction over the tested lines (those with a p-value); the rest are not
/// significant, and do not count in the family.
fn holm_tested(p: &[Option<f64>]) -> Vec<bool> {
    let tested: Vec<f64> = p.iter().flatten().copied().collect();
    let mut verdicts = holm(&tested, 0.05).into_iter();
    p.iter().map(|x| x.is_some() && verdicts.next().unwrap_or(false)).collect()
}

/// An outcome and how many of its attempts make a unit on each side, and how many there are:
/// a line's change weighs per unit by how often its outcome occurs on each side.
#[derive(Clone, Copy)]
struct Weight {
    outcome: Outcome,
    a: f64,
    b: f64,
    attempts_a: u64,
    attempts_b: u64,
}

fn line(w: Weight, kind: LineKind, source: &'static str, name: &str, a: Interval, b: Interval) -> LineChange {
    let Weight { outcome, a: pa, b: pb, attempts_a, attempts_b } = w;
    let known = both_known(attempts_a, attempts_b);
    let change = Figure::new(a.change_to(&b), known);
    let per_unit_change = Figure::new(a.scaled(pa).change_to(&b.scaled(pb)), known);
    LineChange {
        outcome,
        kind,
        source: source.to_owned(),
        name: name.to_owned(),
        a: Figure::new(a, attempts_a >= MIN_OBSERVATIONS),
        b: Figure::new(b, attempts_b >= MIN_OBSERVATIONS),
        change,
        per_unit_change,
        p_value: change.p_value(),
        significant: false,
        per_unit_p_value: per_unit_change.p_value(),
        per_unit_significant: false,
    }
}

/// Lines present on one side only are 0 (exactly) on the other: the outcome ran there and
/// nothing was attributed to the line.
fn union<'n>(a: impl Iterator<Item = &'n str>, b: impl Iterator<Item = &'n str>) -> Vec<&'n str> {
    let mut names: Vec<&str> = a.collect();
    for n in b {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

fn sampled_lines(a: &RunReport, b: &RunReport, w: Weight) -> Vec<LineChange> {
    let outcome = w.outcome;
    let side = |r: &RunReport| r.analysis.sampled.as_ref().and_then(|s| s.outcomes.iter().find(|o| o.outcome == outcome).cloned());
    let (Some(sa), Some(sb)) = (side(a), side(b)) else { return Vec::new() };
    if sa.samples == 0 && sb.samples == 0 {
        return Vec::new();
    }
    let est = |e: &crate::analysis::attribution::Estimate| Interval {
        value: e.ns_per_attempt,
        low: e.ns_per_attempt_low,
        high: e.ns_per_attempt_high,
    };
    let mut out = Vec::new();
    for phase in union(sa.phases.iter().map(|p| p.phase.as_str()), sb.phases.iter().map(|p| p.phase.as_str())) {
        let pa_line = sa.phases.iter().find(|p| p.phase == phase);
        let pb_line = sb.phases.iter().find(|p| p.phase == phase);
        let v = |l: Option<&crate::analysis::attribution::PhaseLine>| l.map_or_else(Interval::default, |l| est(&l.estimate));
        out.push(line(w, LineKind::Phase, "sampled", phase, v(pa_line), v(pb_line)));
        let fa = pa_line.map(|l| l.functions.as_slice()).unwrap_or_default();
        let fb = pb_line.map(|l| l.functions.as_slice()).unwrap_or_default();
        for f in union(fa.iter().map(|f| f.function.as_str()), fb.iter().map(|f| f.function.as_str())) {
            let v = |list: &[crate::analysis::attribution::FunctionLine]| {
                list.iter().find(|x| x.function == f).map_or_else(Interval::default, |x| est(&x.estimate))
            };
            out.push(line(w, LineKind::Function, "sampled", f, v(fa), v(fb)));
        }
    }
    // Inclusive and self per function from the stacks: callers that mostly call others too.
    for f in union(sa.on_stack.iter().map(|f| f.function.as_str()), sb.on_stack.iter().map(|f| f.function.as_str())) {
        let get = |o: &crate::analysis::attribution::OutcomeAttribution| o.on_stack.iter().find(|x| x.function == f).cloned();
        let (fa, fb) = (get(&sa), get(&sb));
        let incl =
            |x: &Option<crate::analysis::attribution::FunctionTotals>| x.as_ref().map_or_else(Interval::default, |x| est(&x.inclusive));
        let own = |x: &Option<crate::analysis::attribution::FunctionTotals>| x.as_ref().map_or_else(Interval::default, |x| est(&x.own));
        out.push(line(w, LineKind::FunctionInclusive, "sampled", f, incl(&fa), incl(&fb)));
        out.push(line(w, LineKind::FunctionSelf, "sampled", f, own(&fa), own(&fb)));
    }
    out
}

fn exact_lines(a: &RunReport, b: &RunReport, w: Weight) -> Vec<LineChange> {
    let outcome = w.outcome;
    let side = |r: &RunReport| r.analysis.exact.as_ref().and_then(|s| s.outcomes.iter().find(|o| o.outcome == outcome).cloned());
    let (Some(ea), Some(eb)) = (side(a), side(b)) else { return Vec::new() };
    let mut out = Vec::new();
    for phase in union(ea.phases.iter().map(|p| p.phase.as_str()), eb.phases.iter().map(|p| p.phase.as_str())) {
        let v = |o: &crate::analysis::exact::OutcomeTiming| {
            o.phases.iter().find(|p| p.phase == phase).map_or_else(Interval::default, |p| p.per_attempt)
        };
        out.push(line(w, LineKind::Phase, "exact", phase, v(&ea), v(&eb)));
    }
    for f in union(ea.functions.iter().map(|f| f.function.as_str()), eb.functions.iter().map(|f| f.function.as_str())) {
        let get = |o: &crate::analysis::exact::OutcomeTiming| o.functions.iter().find(|x| x.function == f).cloned();
        let (fa, fb) = (get(&ea), get(&eb));
        let incl =
            |x: &Option<crate::analysis::exact::FunctionTiming>| x.as_ref().map_or_else(Interval::default, |x| x.inclusive_per_attempt);
        let own = |x: &Option<crate::analysis::exact::FunctionTiming>| x.as_ref().map_or_else(Interval::default, |x| x.self_per_attempt);
        out.push(line(w, LineKind::FunctionInclusive, "exact", f, incl(&fa), incl(&fb)));
        out.push(line(w, LineKind::FunctionSelf, "exact", f, own(&fa), own(&fb)));
    }
    out
}

#[cfg(test)]
mod tests;
