//! `execprof diff A B --round A2 B2 …`: one diff of several rounds' diffs, tested between the
//! rounds. A round is one recording of A and one of B (one boot of each kernel, one machine
//! each); within a recording thousands of attempts make intervals tiny, but a figure moves
//! between boots (a random-number batch refill lands in whichever function draws at that
//! moment), so the round, not the attempt, is the unit of replication.
//!
//! Each side's figure is the mean of its rounds' figures with a Student interval (rounds − 1
//! degrees of freedom); each change is B's rounds against A's, unpaired (the boots of two
//! kernels are independent: paired, three identical round differences had no spread and were
//! "significant"), by Welch's t-test; each side's variance over its rounds is floored by the
//! mean of the rounds' squared within-round standard errors (half a round's 95% interval over
//! 1.96: the normal standard error its interval stands for, as
//! [`Interval::standard_error`](crate::analysis::stats::Interval::standard_error)), so rounds
//! that coincide exactly do not have zero spread. Lines are Holm-corrected over all lines, on
//! these p-values. Counts are summed. Pure: it reads the rounds' [`Diff`]s.
use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::{
    Bounds, Diff, Figure, LatencyChange, LineChange, METHOD_EXACT, METHOD_MEAN, METHOD_MEDIAN, METHOD_ROUNDS, METHOD_ROUNDS_LINES,
    METHOD_SAMPLED, MIN_OBSERVATIONS, OutcomeChange, SideFacts, test_and_sort,
    who_pays::{DirChange, Pair, ProgramChange, SearchesChange, WhoPaysChange},
};
use crate::analysis::{
    outcome::Outcome,
    stats::{over_rounds_floored, welch_over_rounds_floored},
};

/// What a diff over rounds says about them (its JSON's `rounds`).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Rounds {
    /// Rounds combined, each one recording of A and one of B; the first is the positional A B.
    pub count: usize,
    /// How the figures were made from the rounds' ([`METHOD_ROUNDS`]).
    pub method: String,
}

/// One side's value of a figure in one round, with the squared standard error its round's own
/// interval stands for (None: the round gave it no interval, from fewer than
/// [`MIN_OBSERVATIONS`] attempts).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Obs {
    value: f64,
    se2: Option<f64>,
}

impl Obs {
    /// Exactly 0, known to be (no attempts of the outcome: no time in it per unit).
    const ZERO: Obs = Obs { value: 0.0, se2: Some(0.0) };

    fn of(f: &Figure) -> Self {
        Self::scaled(f, 1.0)
    }

    /// `f` × `k`, its standard error too.
    fn scaled(f: &Figure, k: f64) -> Self {
        Obs { value: f.value * k, se2: f.interval().map(|i| (i.standard_error() * k).powi(2)) }
    }
}

fn mean(obs: &[Obs]) -> f64 {
    if obs.is_empty() { 0.0 } else { obs.iter().map(|o| o.value).sum::<f64>() / obs.len() as f64 }
}

/// A side's values and within-round squared standard errors, when it can be tested: two
/// rounds or more, each with its own interval.
fn testable(obs: &[Obs]) -> Option<(Vec<f64>, Vec<f64>)> {
    if obs.len() < MIN_OBSERVATIONS as usize {
        return None;
    }
    let se2: Option<Vec<f64>> = obs.iter().map(|o| o.se2).collect();
    Some((obs.iter().map(|o| o.value).collect(), se2?))
}

/// A side's figure over its rounds: their mean, with its floored Student interval where
/// [`testable`]; None without a round that has a value.
fn side(obs: &[Obs]) -> Option<Figure> {
    if obs.is_empty() {
        return None;
    }
    Some(match testable(obs) {
        Some((values, se2)) => Figure::new(over_rounds_floored(&values, &se2), true),
        None => Figure { value: mean(obs), bounds: None },
    })
}

/// B's rounds against A's: the change of means, with its Welch interval and p-value where both
/// sides are [`testable`]; None where a side has no round with a value.
fn change(a: &[Obs], b: &[Obs]) -> Option<(Figure, Option<f64>)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    Some(match testable(a).zip(testable(b)) {
        Some(((va, sa), (vb, sb))) => {
            let (i, p) = welch_over_rounds_floored(&va, &sa, &vb, &sb);
            (Figure::new(i, true), Some(p))
        }
        None => (Figure { value: mean(b) - mean(a), bounds: None }, None),
    })
}

/// One latency distribution over rounds: each figure from the rounds where its side has
/// attempts (a round without them has no latency, not a latency of 0).
fn latency(rounds: &[Option<&LatencyChange>]) -> LatencyChange {
    let obs = |f: fn(&LatencyChange) -> Option<Figure>| -> Vec<Obs> {
        rounds.iter().flatten().filter_map(|l| f(l)).map(|x| Obs::of(&x)).collect()
    };
    let (median_a, median_b) = (obs(|l| l.median_a), obs(|l| l.median_b));
    let (mean_a, mean_b) = (obs(|l| l.mean_a), obs(|l| l.mean_b));
    let median_change = change(&median_a, &median_b).map(|c| c.0);
    LatencyChange {
        median_a: side(&median_a),
        median_b: side(&median_b),
        median_change,
        mean_a: side(&mean_a),
        mean_b: side(&mean_b),
        mean_change: change(&mean_a, &mean_b).map(|c| c.0),
        significant: median_change.and_then(|c| c.interval()).is_some_and(|i| i.excludes_zero()),
    }
}

/// A or B.
#[derive(Clone, Copy)]
enum Side {
    A,
    B,
}

impl Side {
    /// (attempts, attempts per unit, mean latency) of the outcome on this side.
    fn of(self, c: &OutcomeChange) -> (u64, f64, Option<Figure>) {
        match self {
            Side::A => (c.count_a, c.per_unit_a, c.latency.mean_a),
            Side::B => (c.count_b, c.per_unit_b, c.latency.mean_b),
        }
    }
}

/// An outcome's kernel time per unit on one side in one round: attempts per unit × mean
/// latency; exactly 0 in a round without attempts of it (or without the outcome at all).
fn time_per_unit(c: Option<&OutcomeChange>, side: Side) -> Obs {
    match c.map(|c| side.of(c)) {
        Some((count, per_unit, Some(m))) if count > 0 => Obs::scaled(&m, per_unit),
        _ => Obs::ZERO,
    }
}

/// A line's figures on one side of one round: per attempt of its outcome and per unit.
/// `figure` None: the round measured the outcome this way and attributed nothing to the line,
/// which is then 0 there (known as the round's attempts allow).
fn push_line_side(
    per_attempt: &mut Vec<Obs>,
    per_unit: &mut Vec<Obs>,
    (count, units, _): (u64, f64, Option<Figure>),
    figure: Option<&Figure>,
) {
    if count == 0 {
        // No attempts of the outcome: no time in it per unit, and no per-attempt value.
        per_unit.push(Obs::ZERO);
        return;
    }
    let zero = Figure { value: 0.0, bounds: (count >= MIN_OBSERVATIONS).then_some(Bounds { low: 0.0, high: 0.0 }) };
    let f = figure.copied().unwrap_or(zero);
    per_attempt.push(Obs::of(&f));
    per_unit.push(Obs::scaled(&f, units));
}

/// What identifies a line across rounds: outcome, kind, source and name.
type LineKey<'d> = (Outcome, &'static str, &'d str, &'d str);

fn key(l: &LineChange) -> LineKey<'_> {
    (l.outcome, l.kind.label(), l.source.as_str(), l.name.as_str())
}

/// The lines over rounds. A line missing from a round is, there:
/// - 0 on both sides when the round measured its outcome the same way (another line of the
///   outcome and source is there): nothing was attributed to it, exactly as [`super::compare`]
///   counts a line one side lacks; per attempt only on a side with attempts;
/// - 0 per unit when the round had no attempts of the outcome at all (a function never
///   reached is no time per unit), and left out per attempt (no attempts: no value);
/// - left out otherwise (the round did not sample, or time exactly, that outcome: unmeasured,
///   not 0).
fn lines(rounds: &[Diff]) -> Vec<LineChange> {
    let index: Vec<HashMap<LineKey<'_>, &LineChange>> = rounds.iter().map(|d| d.lines.iter().map(|l| (key(l), l)).collect()).collect();
    let measured: Vec<HashSet<(Outcome, &str)>> =
        rounds.iter().map(|d| d.lines.iter().map(|l| (l.outcome, l.source.as_str())).collect()).collect();
    let outcomes: Vec<HashMap<Outcome, &OutcomeChange>> =
        rounds.iter().map(|d| d.outcomes.iter().map(|c| (c.outcome, c)).collect()).collect();
    let mut seen = HashSet::new();
    let templates: Vec<&LineChange> = rounds.iter().flat_map(|d| &d.lines).filter(|l| seen.insert(key(l))).collect();
    let mut out = Vec::with_capacity(templates.len());
    for t in templates {
        let k = key(t);
        let (mut att_a, mut att_b, mut unit_a, mut unit_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds.len() {
            let line = index[r].get(&k).copied();
            match (line, outcomes[r].get(&t.outcome).copied()) {
                (Some(l), Some(c)) => {
                    push_line_side(&mut att_a, &mut unit_a, Side::A.of(c), Some(&l.a));
                    push_line_side(&mut att_b, &mut unit_b, Side::B.of(c), Some(&l.b));
                }
                (None, Some(c)) if measured[r].contains(&(t.outcome, t.source.as_str())) => {
                    push_line_side(&mut att_a, &mut unit_a, Side::A.of(c), None);
                    push_line_side(&mut att_b, &mut unit_b, Side::B.of(c), None);
                }
                (None, None) => {
                    unit_a.push(Obs::ZERO);
                    unit_b.push(Obs::ZERO);
                }
                // Not measured this way in the round (or a line without its outcome's counts,
                // which `compare` never makes): left out.
                _ => {}
            }
        }
        // A side without a value is 0 there (no attempts), and the change the bare difference,
        // untested, as `compare` has it.
        let bare = |x: Option<Figure>, y: Option<Figure>| {
            (Figure { value: y.unwrap_or_default().value - x.unwrap_or_default().value, bounds: None }, None)
        };
        let (a, b) = (side(&att_a), side(&att_b));
        let (per_attempt, p_value) = change(&att_a, &att_b).unwrap_or_else(|| bare(a, b));
        let (per_unit, per_unit_p_value) = change(&unit_a, &unit_b).unwrap_or_else(|| bare(side(&unit_a), side(&unit_b)));
        out.push(LineChange {
            outcome: t.outcome,
            kind: t.kind,
            source: t.source.clone(),
            name: t.name.clone(),
            a: a.unwrap_or_default(),
            b: b.unwrap_or_default(),
            change: per_attempt,
            per_unit_change: per_unit,
            p_value,
            significant: false,
            per_unit_p_value,
            per_unit_significant: false,
        });
    }
    test_and_sort(&mut out);
    out
}

/// Every outcome of any round: counts summed; attempts per unit, latencies and kernel time per
/// unit over the rounds (a round without the outcome had none of its attempts: 0 per unit).
fn outcomes(rounds: &[Diff]) -> Vec<OutcomeChange> {
    let mut seen = HashSet::new();
    let order: Vec<Outcome> = rounds.iter().flat_map(|d| &d.outcomes).map(|c| c.outcome).filter(|o| seen.insert(*o)).collect();
    order
        .into_iter()
        .map(|o| {
            let per_round: Vec<Option<&OutcomeChange>> = rounds.iter().map(|d| d.outcomes.iter().find(|c| c.outcome == o)).collect();
            let sum = |f: fn(&OutcomeChange) -> u64| per_round.iter().flatten().map(|c| f(c)).sum::<u64>();
            let avg = |f: fn(&OutcomeChange) -> f64| per_round.iter().map(|c| c.map_or(0.0, f)).sum::<f64>() / per_round.len() as f64;
            let units = |side: Side| per_round.iter().map(|c| time_per_unit(*c, side)).collect::<Vec<Obs>>();
            let latencies: Vec<Option<&LatencyChange>> = per_round.iter().map(|c| c.map(|c| &c.latency)).collect();
            OutcomeChange {
                outcome: o,
                count_a: sum(|c| c.count_a),
                count_b: sum(|c| c.count_b),
                per_unit_a: avg(|c| c.per_unit_a),
                per_unit_b: avg(|c| c.per_unit_b),
                latency: latency(&latencies),
                per_unit_change: change(&units(Side::A), &units(Side::B)).map(|c| c.0).unwrap_or_default(),
            }
        })
        .collect()
}

/// `rounds 1, 3` or `round 2` (1-based).
fn round_list(rounds: &[usize]) -> String {
    let list: Vec<String> = rounds.iter().map(|r| (r + 1).to_string()).collect();
    format!("{} {}", if list.len() == 1 { "round" } else { "rounds" }, list.join(", "))
}

/// Distinct values in order of first appearance, each with the rounds that had it.
fn grouped<T: PartialEq>(values: impl IntoIterator<Item = T>) -> Vec<(T, Vec<usize>)> {
    let mut out: Vec<(T, Vec<usize>)> = Vec::new();
    for (r, v) in values.into_iter().enumerate() {
        match out.iter_mut().find(|(x, _)| *x == v) {
            Some((_, rs)) => rs.push(r),
            None => out.push((v, vec![r])),
        }
    }
    out
}

/// One side's facts over its rounds: the first round's run, with counts summed, and every
/// round's path.
fn side_facts(facts: &[&SideFacts]) -> SideFacts {
    let first = facts[0];
    SideFacts {
        path: first.path.clone(),
        command: first.command.clone(),
        kernel: first.kernel.clone(),
        functions_mode: first.functions_mode.clone(),
        sample_hz: first.sample_hz,
        attempts: facts.iter().map(|f| f.attempts).sum(),
        steps: facts.iter().map(|f| f.steps).sum(),
        complete: facts.iter().all(|f| f.complete),
        round_paths: facts.iter().map(|f| f.path.clone()).collect(),
    }
}

/// A side's fact its rounds should share, named, and how it reads.
type SideField = (&'static str, fn(&SideFacts) -> String);

/// What a side's rounds should share (else its figures mix them).
const SIDE_FIELDS: [SideField; 4] = [
    ("kernel", |f| f.kernel.clone()),
    ("mode", |f| f.functions_mode.clone()),
    ("sampling rate", |f| format!("{} Hz", f.sample_hz)),
    ("command", |f| format!("`{}`", f.command)),
];

/// The rounds' warnings, each once: as it is where every round has it, else naming the rounds
/// that do; then where a side's rounds differ from each other (its figures mix them).
fn warnings(rounds: &[Diff]) -> Vec<String> {
    let mut out: Vec<String> = grouped_warnings(rounds);
    for (label, side) in [("A", rounds.iter().map(|d| &d.a).collect::<Vec<_>>()), ("B", rounds.iter().map(|d| &d.b).collect())] {
        for (what, get) in SIDE_FIELDS {
            let groups = grouped(side.iter().map(|f| get(f)));
            if groups.len() > 1 {
                let list: Vec<String> = groups.iter().map(|(v, rs)| format!("{v} ({})", round_list(rs))).collect();
                out.push(format!("the rounds of {label} differ in {what}: {}; its figures are means over them all", list.join(", ")));
            }
        }
    }
    out
}

fn grouped_warnings(rounds: &[Diff]) -> Vec<String> {
    let all: Vec<(usize, &String)> = rounds.iter().enumerate().flat_map(|(r, d)| d.warnings.iter().map(move |w| (r, w))).collect();
    let mut texts: Vec<(&String, Vec<usize>)> = Vec::new();
    for (r, w) in all {
        match texts.iter_mut().find(|(x, _)| *x == w) {
            Some((_, rs)) => {
                if !rs.contains(&r) {
                    rs.push(r);
                }
            }
            None => texts.push((w, vec![r])),
        }
    }
    texts.into_iter().map(|(w, rs)| if rs.len() == rounds.len() { w.clone() } else { format!("{}: {w}", round_list(&rs)) }).collect()
}

fn add(x: &mut Pair<u64>, y: &Pair<u64>) {
    x.a += y.a;
    x.b += y.b;
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// Who pays, summed over the rounds that show it (its counts are totals, not estimates); the
/// ratios per search recomputed from the sums.
fn who_pays(rounds: &[Diff], warnings: &mut Vec<String>) -> Option<WhoPaysChange> {
    let shown: Vec<(usize, &WhoPaysChange)> = rounds.iter().enumerate().filter_map(|(r, d)| d.who_pays.as_ref().map(|w| (r, w))).collect();
    if shown.is_empty() {
        return None;
    }
    if shown.len() < rounds.len() {
        let rs: Vec<usize> = shown.iter().map(|(r, _)| *r).collect();
        warnings.push(format!(
            "who pays sums {} only: in the others both sides' counts agreed (or neither report shows who pays)",
            round_list(&rs)
        ));
    }
    let mut out = WhoPaysChange::default();
    let mut programs: Vec<ProgramChange> = Vec::new();
    let mut dirs: Vec<DirChange> = Vec::new();
    for (_, w) in shown {
        add(&mut out.window_ns, &w.window_ns);
        add(&mut out.programs_not_listed, &w.programs_not_listed);
        for p in &w.programs {
            match programs.iter_mut().find(|x| x.program == p.program) {
                Some(x) => {
                    for (mine, theirs) in [
                        (&mut x.attempts, &p.attempts),
                        (&mut x.failed, &p.failed),
                        (&mut x.failed_ns, &p.failed_ns),
                        (&mut x.success_ns, &p.success_ns),
                        (&mut x.fork_calls, &p.fork_calls),
                        (&mut x.misses, &p.misses),
                        (&mut x.searches, &p.searches),
                    ] {
                        add(mine, theirs);
                    }
                }
                None => programs.push(p.clone()),
            }
        }
        let (s, t) = (&mut out.searches, &w.searches);
        for (mine, theirs) in [
            (&mut s.searches, &t.searches),
            (&mut s.not_found, &t.not_found),
            (&mut s.misses, &t.misses),
            (&mut s.miss_ns, &t.miss_ns),
            (&mut s.lone_failures, &t.lone_failures),
            (&mut s.missed_dirs_not_listed, &t.missed_dirs_not_listed),
        ] {
            add(mine, theirs);
        }
        for d in &t.missed_dirs {
            match dirs.iter_mut().find(|x| x.dir == d.dir) {
                Some(x) => {
                    add(&mut x.misses, &d.misses);
                    add(&mut x.miss_ns, &d.miss_ns);
                }
                None => dirs.push(d.clone()),
            }
        }
    }
    programs.sort_by(|x, y| {
        y.exec_ns_change().abs().cmp(&x.exec_ns_change().abs()).then_with(|| x.program.to_string().cmp(&y.program.to_string()))
    });
    dirs.sort_by(|x, y| y.misses.change().abs().cmp(&x.misses.change().abs()).then_with(|| x.dir.cmp(&y.dir)));
    out.programs = programs;
    let s: &mut SearchesChange = &mut out.searches;
    s.missed_dirs = dirs;
    s.misses_per_search = Pair { a: ratio(s.misses.a, s.searches.a), b: ratio(s.misses.b, s.searches.b) };
    s.miss_ns_per_search = Pair { a: ratio(s.miss_ns.a, s.searches.a), b: ratio(s.miss_ns.b, s.searches.b) };
    Some(out)
}

/// One diff of `rounds` (each round's own [`super::compare`] of its A and B, the first the
/// positional pair): figures are means over the rounds with Student intervals, changes Welch
/// tests between B's rounds and A's (see the module documentation). One round is returned as
/// it is. Err, saying why, for no rounds, or rounds whose figures are per different units (a
/// round of two built-in chains is per chain step, any other per exec attempt).
pub fn combine(rounds: &[Diff]) -> Result<Diff, String> {
    let Some(first) = rounds.first() else { return Err("no rounds to combine".into()) };
    if rounds.len() == 1 {
        return Ok(first.clone());
    }
    if let Some((r, d)) = rounds.iter().enumerate().find(|(_, d)| d.unit != first.unit) {
        return Err(format!(
            "round {} is compared {} but round 1 {}: rounds combine figures of one unit only (make A and B of every round the built-in chain, or of none)",
            r + 1,
            d.unit.label(),
            first.unit.label()
        ));
    }
    let mut warnings = warnings(rounds);
    let who_pays = who_pays(rounds, &mut warnings);
    let steps: Vec<Option<&LatencyChange>> = rounds.iter().map(|d| d.step.as_ref()).collect();
    let mut methods = vec![METHOD_ROUNDS.to_owned(), METHOD_ROUNDS_LINES.to_owned()];
    methods.extend(
        [METHOD_MEDIAN, METHOD_MEAN, METHOD_SAMPLED, METHOD_EXACT].map(|m| format!("within each round (its standard errors): {m}")),
    );
    Ok(Diff {
        a: side_facts(&rounds.iter().map(|d| &d.a).collect::<Vec<_>>()),
        b: side_facts(&rounds.iter().map(|d| &d.b).collect::<Vec<_>>()),
        warnings,
        unit: first.unit,
        methods,
        outcomes: outcomes(rounds),
        step: steps.iter().all(Option::is_some).then(|| latency(&steps)),
        lines: lines(rounds),
        who_pays,
        rounds: Some(Rounds { count: rounds.len(), method: METHOD_ROUNDS.to_owned() }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::stats::Interval,
        report::diff::{LineKind, Unit, render},
    };

    /// A figure of `value` ± `half`.
    fn fig(value: f64, half: f64) -> Figure {
        Figure::new(Interval { value, low: value - half, high: value + half }, true)
    }

    fn facts(path: &str, kernel: &str) -> SideFacts {
        SideFacts {
            path: path.into(),
            command: "execprof-chain 100".into(),
            kernel: kernel.into(),
            functions_mode: "exact".into(),
            sample_hz: 0,
            attempts: 700,
            steps: Some(100),
            complete: true,
            round_paths: Vec::new(),
        }
    }

    fn outcome(o: Outcome, count: u64, per_unit: f64, mean_a: f64, mean_b: f64) -> OutcomeChange {
        let latency = LatencyChange {
            median_a: Some(fig(mean_a, 10.0)),
            median_b: Some(fig(mean_b, 10.0)),
            median_change: Some(fig(mean_b - mean_a, 14.0)),
            mean_a: Some(fig(mean_a, 10.0)),
            mean_b: Some(fig(mean_b, 10.0)),
            mean_change: Some(fig(mean_b - mean_a, 14.0)),
            significant: true,
        };
        OutcomeChange {
            outcome: o,
            count_a: count,
            count_b: count,
            per_unit_a: per_unit,
            per_unit_b: per_unit,
            latency,
            per_unit_change: fig((mean_b - mean_a) * per_unit, 14.0),
        }
    }

    /// An exact phase line of successful execs: `a` and `b` ns per attempt, each ± `half`.
    fn line(name: &str, source: &str, a: f64, b: f64, half: f64) -> LineChange {
        let (a, b) = (fig(a, half), fig(b, half));
        let change = Figure::new(a.interval().unwrap().change_to(&b.interval().unwrap()), true);
        LineChange {
            outcome: Outcome::Success,
            kind: LineKind::Phase,
            source: source.into(),
            name: name.into(),
            a,
            b,
            change,
            per_unit_change: change,
            p_value: change.p_value(),
            significant: false,
            per_unit_p_value: change.p_value(),
            per_unit_significant: false,
        }
    }

    /// Round `r` of the built-in chain: 100 successful execs a side (1 per step), these lines.
    fn round(r: usize, lines: Vec<LineChange>) -> Diff {
        let mut lines = lines;
        test_and_sort(&mut lines);
        Diff {
            a: facts(&format!("a{r}.execprof"), "6.18"),
            b: facts(&format!("b{r}.execprof"), "6.18+patch"),
            warnings: vec!["the recordings differ in kernel: A 6.18, B 6.18+patch".into()],
            unit: Unit::ChainStep,
            methods: vec![],
            outcomes: vec![outcome(Outcome::Success, 100, 1.0, 40_000.0, 40_100.0)],
            step: None,
            lines,
            who_pays: None,
            rounds: None,
        }
    }

    /// Rounds of one line `args`: A's and B's value in each, each ± `half` within its round.
    fn rounds(a: &[f64], b: &[f64], half: f64) -> Vec<Diff> {
        a.iter().zip(b).enumerate().map(|(r, (&a, &b))| round(r + 1, vec![line("args", "exact", a, b, half)])).collect()
    }

    fn the_line<'d>(d: &'d Diff, name: &str) -> &'d LineChange {
        d.lines.iter().find(|l| l.name == name).unwrap_or_else(|| panic!("no {name} in {:?}", d.lines))
    }

    #[test]
    fn a_change_every_round_agrees_on_is_significant() {
        let d = combine(&rounds(&[100.0, 101.0, 99.0], &[110.0, 111.0, 109.0], 0.5)).unwrap();
        let l = the_line(&d, "args");
        assert_eq!((l.a.value, l.b.value, l.change.value), (100.0, 110.0, 10.0));
        assert!(l.significant && l.per_unit_significant && l.p_value.unwrap() < 0.001, "{l:?}");
        // Its interval is Welch's: t(0.975, 4 df) × √(1/3 + 1/3).
        let half = l.change.bounds.unwrap().high - 10.0;
        assert!((half - 2.776_445 * (2.0f64 / 3.0).sqrt()).abs() < 1e-4, "{half}");
        // Each side: a Student interval over its 3 rounds.
        assert!((l.a.bounds.unwrap().high - 100.0 - 4.302_653 / 3f64.sqrt()).abs() < 1e-4, "{:?}", l.a);
        assert_eq!(d.rounds, Some(Rounds { count: 3, method: METHOD_ROUNDS.into() }));
        assert_eq!(d.methods[0], METHOD_ROUNDS);
        // Counts summed; attempts per unit averaged.
        let s = &d.outcomes[0];
        assert_eq!((s.count_a, s.count_b, s.per_unit_a, d.a.attempts, d.a.steps), (300, 300, 1.0, 2100, Some(300)));
        assert_eq!(d.a.round_paths, ["a1.execprof", "a2.execprof", "a3.execprof"]);
        assert_eq!(d.warnings, ["the recordings differ in kernel: A 6.18, B 6.18+patch"], "once, as every round has it");
    }

    #[test]
    fn a_change_whose_sign_moves_between_rounds_is_not() {
        // Within each round the change is ±10 with a ±0.5 interval: "significant" in each.
        let d = combine(&rounds(&[100.0, 100.0, 100.0], &[110.0, 90.0, 105.0], 0.5)).unwrap();
        let l = the_line(&d, "args");
        assert!(!l.significant && !l.per_unit_significant && l.p_value.unwrap() > 0.05, "{l:?}");
        assert!(!l.change.interval().unwrap().excludes_zero());
    }

    #[test]
    fn rounds_are_not_paired() {
        let (a, b) = ([100.0, 104.0, 99.0, 101.0], [103.0, 110.0, 102.0, 107.0]);
        let d = combine(&rounds(&a, &b, 0.5)).unwrap();
        let shuffled = combine(&rounds(&a, &[107.0, 102.0, 110.0, 103.0], 0.5)).unwrap();
        let (x, y) = (the_line(&d, "args"), the_line(&shuffled, "args"));
        assert_eq!((x.change, x.p_value, x.per_unit_change), (y.change, y.p_value, y.per_unit_change));
        // Paired, the differences +3, +6, +3, +6 would be significant (p 0.014); unpaired, A's
        // spread between rounds counts too.
        assert!(x.p_value.unwrap() > 0.05, "{x:?}");
    }

    #[test]
    fn rounds_that_coincide_exactly_keep_their_within_round_spread() {
        // −1 instruction in every round (discrete values), each round's own standard error 2:
        // the rounds' sample variance is 0, the floor is not.
        let se = 2.0 * crate::analysis::stats::Z95;
        let d = combine(&rounds(&[301.0; 3], &[300.0; 3], se)).unwrap();
        let l = the_line(&d, "args");
        assert!(!l.significant && l.p_value.unwrap() > 0.5, "{l:?}");
        let half = l.change.bounds.unwrap().high - l.change.value;
        assert!((half - 2.776_445 * (8.0f64 / 3.0).sqrt()).abs() < 1e-3, "{half}");
        // Without any spread at all, the same rounds would be a certain change.
        let exact = combine(&rounds(&[301.0; 3], &[300.0; 3], 0.0)).unwrap();
        assert!(the_line(&exact, "args").significant);
    }

    #[test]
    fn a_line_missing_from_a_round_is_zero_where_the_round_measured_it_and_left_out_where_not() {
        let other = || line("other", "exact", 5.0, 5.0, 0.5);
        // 1: the line. 2: the outcome timed exactly, nothing in `args`: 0 there.
        let mut d = vec![round(1, vec![line("args", "exact", 10.0, 20.0, 0.5), other()]), round(2, vec![other()])];
        // 3: no attempts of the outcome at all: 0 per unit, no value per attempt.
        let mut none = round(3, vec![]);
        none.outcomes.clear();
        d.push(none);
        // 4: the outcome was only sampled: `args` (exact) not measured there, left out.
        d.push(round(4, vec![line("lookup", "sampled", 1.0, 1.0, 0.5)]));
        let c = combine(&d).unwrap();
        let l = the_line(&c, "args");
        assert_eq!((l.a.value, l.b.value, l.change.value), (5.0, 10.0, 5.0), "per attempt over rounds 1 and 2");
        assert!((l.per_unit_change.value - 10.0 / 3.0).abs() < 1e-12, "per unit over rounds 1–3: {l:?}");
        // The sampled line of round 4 alone: one round, no interval, untested.
        let s = the_line(&c, "lookup");
        assert!(s.p_value.is_none() && s.change.bounds.is_none() && !s.significant, "{s:?}");
        // The outcome: summed over the rounds that had it, 0 per unit in round 3.
        let o = &c.outcomes[0];
        assert_eq!((o.count_a, o.per_unit_a), (300, 0.75));
        assert!((o.per_unit_change.value - 75.0).abs() < 1e-9, "{o:?}");
        assert_eq!(o.latency.mean_change.unwrap().value, 100.0, "latency over the rounds with attempts");
    }

    #[test]
    fn one_round_is_itself_and_mismatched_units_are_refused() {
        let one = round(1, vec![line("args", "exact", 10.0, 20.0, 0.5)]);
        let same = combine(std::slice::from_ref(&one)).unwrap();
        assert!(same.rounds.is_none() && same.lines.len() == 1 && same.a.round_paths.is_empty());
        assert!(combine(&[]).is_err());
        let mut other = one.clone();
        other.unit = Unit::ExecAttempt;
        let e = combine(&[one, other]).unwrap_err();
        assert!(e.contains("round 2 is compared per exec attempt") && e.contains("built-in chain"), "{e}");
    }

    #[test]
    fn warnings_name_their_rounds_and_a_side_whose_rounds_differ() {
        let mut d = rounds(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 0.5);
        d[1].warnings.push("recording B is incomplete".into());
        d[2].a.kernel = "6.19".into();
        let c = combine(&d).unwrap();
        assert!(c.warnings.contains(&"round 2: recording B is incomplete".to_owned()), "{:?}", c.warnings);
        assert!(
            c.warnings.contains(
                &"the rounds of A differ in kernel: 6.18 (rounds 1, 2), 6.19 (round 3); its figures are means over them all".to_owned()
            ),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn who_pays_is_summed_over_the_rounds_that_show_it() {
        let pair = |a, b| Pair { a, b };
        let shown = |attempts: u64, misses: u64, searches: u64| WhoPaysChange {
            window_ns: pair(1_000, 1_000),
            programs: vec![ProgramChange {
                program: crate::analysis::identity::Program::Exe { exe: "/bin/sh".into(), comm: None },
                attempts: pair(attempts, attempts + 1),
                failed: pair(0, 1),
                failed_ns: pair(0, 500),
                success_ns: pair(100, 100),
                fork_calls: pair(1, 1),
                misses: pair(misses, 0),
                searches: pair(searches, searches),
            }],
            programs_not_listed: pair(0, 0),
            searches: SearchesChange {
                searches: pair(searches, searches),
                misses: pair(misses, 0),
                miss_ns: pair(misses * 100, 0),
                missed_dirs: vec![DirChange { dir: "/nonexistent".into(), misses: pair(misses, 0), miss_ns: pair(misses * 100, 0) }],
                ..Default::default()
            },
        };
        let mut d = rounds(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 0.5);
        d[0].who_pays = Some(shown(2, 4, 2));
        d[2].who_pays = Some(shown(3, 2, 2));
        let c = combine(&d).unwrap();
        let w = c.who_pays.as_ref().unwrap();
        assert_eq!((w.window_ns, w.programs.len(), w.programs[0].attempts), (pair(2_000, 2_000), 1, pair(5, 7)));
        assert_eq!((w.searches.misses_per_search, w.searches.missed_dirs[0].misses), (Pair { a: 1.5, b: 0.0 }, pair(6, 0)));
        assert!(c.warnings.iter().any(|x| x.starts_with("who pays sums rounds 1, 3 only")), "{:?}", c.warnings);
    }

    #[test]
    fn the_text_and_the_json_say_the_figures_are_over_rounds() {
        let c = combine(&rounds(&[100.0, 101.0, 99.0], &[110.0, 111.0, 109.0], 0.5)).unwrap();
        let text = render(&c, &Default::default());
        assert!(text.contains("means over 3 rounds") && text.contains("Student") && text.contains("Welch"), "{text}");
        assert!(text.contains("a1.execprof and 2 more rounds (a2.execprof, a3.execprof)"), "{text}");
        assert!(text.contains(METHOD_ROUNDS), "{text}");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rounds"]["count"], 3);
        assert_eq!(json["a"]["round_paths"][2], "a3.execprof");
        let back: Diff = serde_json::from_value(json).unwrap();
        assert_eq!(back.rounds, c.rounds);
        // A diff of two recordings says nothing of rounds, and its JSON of old reads.
        let one = render(&rounds(&[1.0], &[2.0], 0.5)[0], &Default::default());
        assert!(!one.contains("rounds"), "{one}");
        let mut old = serde_json::to_value(&rounds(&[1.0], &[2.0], 0.5)[0]).unwrap();
        old.as_object_mut().unwrap().remove("rounds");
        assert!(serde_json::from_value::<Diff>(old).unwrap().rounds.is_none());
    }
}
