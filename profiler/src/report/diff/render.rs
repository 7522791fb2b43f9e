//! The diff as text: what ran on each side, what differs besides, the outcomes, then the lines
//! that explain the change, largest first.
use std::fmt::Write as _;

use super::{
    Diff, Figure, LatencyChange, LineChange, MIN_OBSERVATIONS, Rounds, SideFacts, Unit,
    who_pays::{Pair, WhoPaysChange},
};
use crate::analysis::outcome::Outcome;
use crate::model::names::terminal_safe;
use crate::report::{
    human_ns, signed_ci,
    who_pays::{MISSED_DIRS_SHOWN, ROWS_SHOWN},
};

/// Lines printed by default (the JSON has them all).
pub const LINES_SHOWN: usize = 30;

/// Which phase and function lines the text shows.
#[derive(Clone, Copy, Debug)]
pub struct Shown {
    /// Only this outcome's lines.
    pub outcome: Option<Outcome>,
    /// At most this many, largest change first.
    pub lines: usize,
}

impl Default for Shown {
    fn default() -> Self {
        Shown { outcome: None, lines: LINES_SHOWN }
    }
}

/// What the significance column says where a change has no interval to test (fewer than
/// two values on a side), and what the methods call that.
const UNTESTED: &str = "n<2";

/// A side's latency: with its interval; from one value, the value and `(n=1)` (over rounds,
/// `(no CI)`: a round's figure had none, or one round had a value); without values, `no
/// attempts` (never a distribution of zeros).
fn side_cell(f: Option<&Figure>, values: u64, rounds: bool) -> String {
    match (f, f.and_then(Figure::interval)) {
        (None, _) => "no attempts".into(),
        (Some(f), None) if rounds => format!("{} (no CI)", human_ns(f.value)),
        (Some(f), None) => format!("{} (n={values})", human_ns(f.value)),
        (Some(_), Some(i)) => format!("{} [{} – {}]", human_ns(i.value), human_ns(i.low), human_ns(i.high)),
    }
}

/// A change: with its interval, or the bare difference where a side has fewer than two
/// values; `-` where a side has none.
fn change_cell(f: Option<&Figure>) -> String {
    match (f, f.and_then(Figure::interval)) {
        (None, _) => "-".into(),
        (Some(f), None) => signed(f.value),
        (Some(_), Some(i)) => signed_ci(&i),
    }
}

fn signed(ns: f64) -> String {
    if ns > 0.0 { format!("+{}", human_ns(ns)) } else { human_ns(ns) }
}

/// The significance column: `n<2` where the change has no interval to test, `-` where there
/// is no change at all.
fn sig_cell(f: Option<&Figure>, significant: bool) -> &'static str {
    match f.map(|f| f.bounds.is_some()) {
        None => "-",
        Some(false) => UNTESTED,
        Some(true) if significant => "yes",
        Some(true) => "no",
    }
}

/// `mean A → B (change)`, each side `(no attempts)` where it has none.
fn means(l: &LatencyChange) -> String {
    let side = |f: Option<Figure>| f.map_or("(no attempts)".into(), |f| human_ns(f.value));
    let change = match l.mean_change {
        None => String::new(),
        Some(c) if c.bounds.is_none() => format!(" ({}, {UNTESTED})", signed(c.value)),
        Some(c) => format!(" ({})", change_cell(Some(&c))),
    };
    format!("mean {} → {}{change}", side(l.mean_a), side(l.mean_b))
}

/// Paths of a side's further rounds the header names (the JSON has them all).
const ROUND_PATHS_SHOWN: usize = 4;

/// A side's recording, or over rounds its first and the others': `a1 and 2 more rounds (a2, a3)`.
fn paths(f: &SideFacts) -> String {
    let first = terminal_safe(&f.path);
    let Some(rest) = f.round_paths.get(1..).filter(|r| !r.is_empty()) else { return first };
    let mut shown: Vec<String> = rest.iter().take(ROUND_PATHS_SHOWN).map(|p| terminal_safe(p)).collect();
    if rest.len() > ROUND_PATHS_SHOWN {
        shown.push("… (all in --json)".into());
    }
    let more = if rest.len() == 1 { "1 more round".to_owned() } else { format!("{} more rounds", rest.len()) };
    format!("{first} and {more} ({})", shown.join(", "))
}

/// Over rounds: what the figures now are, said before them.
fn rounds_header(o: &mut String, r: &Rounds) {
    let n = r.count;
    let _ = writeln!(
        o,
        "Over {n} rounds (each an A and a B recording: boots, machines): figures are means over {n} rounds with 95% Student intervals ({} degrees of freedom), changes Welch tests of B's rounds against A's (unpaired); with {n} rounds a side the intervals are wide: they are the spread between rounds, not within one recording",
        n.saturating_sub(1)
    );
}

/// The diff as the terminal shows it, with the phase and function lines `shown` selects.
pub fn render(d: &Diff, shown: &Shown) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "execprof diff — B compared with A (change = B − A)");
    let rounds = d.rounds.is_some();
    if let Some(r) = &d.rounds {
        rounds_header(&mut o, r);
    }
    for (side, f) in [("A", &d.a), ("B", &d.b)] {
        let steps = f.steps.map_or(String::new(), |s| format!(", {s} chain steps"));
        let over = d.rounds.as_ref().map_or(String::new(), |r| format!(" over {} rounds", r.count));
        let _ = writeln!(
            o,
            "{side}  {}: {} exec attempts{steps}{over}; kernel {}, {} mode, {} Hz{}",
            paths(f),
            f.attempts,
            terminal_safe(&f.kernel),
            f.functions_mode,
            f.sample_hz,
            if f.complete { "" } else { "; INCOMPLETE" }
        );
        let _ = writeln!(o, "   command: {}", terminal_safe(&f.command));
    }
    for w in &d.warnings {
        let _ = writeln!(o, "warning: {}", terminal_safe(w));
    }
    let unit = d.unit.label();
    let _ = writeln!(o);
    let _ = writeln!(o, "Exec attempts by outcome (latency per attempt; kernel time {unit} = attempts {unit} × mean)");
    let _ = writeln!(
        o,
        "  {:<12} {:>9} {:>9}  {:>30}  {:>30}  {:>34}  {:>4}",
        "outcome", "A count", "B count", "A median [95% CI]", "B median [95% CI]", "median change [95% CI]", "sig"
    );
    let row = |o: &mut String, label: &str, na: u64, nb: u64, l: &LatencyChange| {
        let _ = writeln!(
            o,
            "  {:<12} {:>9} {:>9}  {:>30}  {:>30}  {:>34}  {:>4}",
            label,
            na,
            nb,
            side_cell(l.median_a.as_ref(), na, rounds),
            side_cell(l.median_b.as_ref(), nb, rounds),
            change_cell(l.median_change.as_ref()),
            sig_cell(l.median_change.as_ref(), l.significant)
        );
    };
    for c in &d.outcomes {
        row(&mut o, c.outcome.label(), c.count_a, c.count_b, &c.latency);
        let _ = writeln!(
            o,
            "  {:<12} {}; {:.2} → {:.2} attempts {unit}: {} {unit}",
            "",
            means(&c.latency),
            c.per_unit_a,
            c.per_unit_b,
            change_cell(Some(&c.per_unit_change))
        );
    }
    if let Some(s) = &d.step {
        row(&mut o, "chain step", d.a.steps.unwrap_or(0), d.b.steps.unwrap_or(0), s);
        let _ = writeln!(o, "  {:<12} {}", "", means(s));
    }
    let _ = writeln!(o);
    if d.lines.is_empty() {
        let _ = writeln!(o, "No phase or function lines to compare: the recordings share no outcome with samples or exact times.");
    } else {
        let _ = writeln!(o, "Where the time went ({unit}: significant changes first, largest first; per attempt of the outcome beside it)");
        let _ = writeln!(
            o,
            "  {:<10} {:<7} {:<9} {:<34} {:>9} {:>9}  {:>32} {:>3}  {:>32} {:>3}",
            "outcome", "source", "line", "name", "A/att", "B/att", "change/att [95% CI]", "sig", "change/unit [95% CI]", "sig"
        );
        let selected: Vec<&LineChange> = d.lines.iter().filter(|l| shown.outcome.is_none_or(|x| l.outcome == x)).collect();
        for l in selected.iter().take(shown.lines) {
            let _ = writeln!(o, "{}", line(l));
        }
        let of_outcome = shown.outcome.map_or(String::new(), |x| format!(" of {}", x.label()));
        if selected.len() > shown.lines {
            let _ = writeln!(o, "  ... {} more lines{of_outcome} (--lines N prints more; all in --json)", selected.len() - shown.lines);
        }
        if shown.outcome.is_some() {
            let _ = writeln!(o, "  {} lines of other outcomes not shown (drop --outcome to see them)", d.lines.len() - selected.len());
        }
        let significant = selected.iter().filter(|l| l.significant).count();
        let tested = d.lines.iter().filter(|l| l.p_value.is_some()).count();
        if tested > 0 {
            let family =
                if tested == d.lines.len() { format!("all {tested} lines") } else { format!("the {tested} lines with an interval") };
            let _ = writeln!(
                o,
                "  {significant} of {} lines{of_outcome} changed significantly per attempt (Holm-corrected over {family}, family-wise 5%)",
                selected.len(),
            );
        }
        let untested = selected.iter().filter(|l| l.p_value.is_none()).count();
        if untested > 0 {
            let why = if rounds {
                format!(
                    "fewer than {MIN_OBSERVATIONS} rounds with a value on a side, or a round with fewer than {MIN_OBSERVATIONS} attempts of their outcome"
                )
            } else {
                format!("their outcome has fewer than {MIN_OBSERVATIONS} attempts on a side")
            };
            let _ = writeln!(o, "  {untested} of {} lines{of_outcome} not tested ({UNTESTED}): {why}, so no interval", selected.len());
        }
    }
    if let Some(w) = &d.who_pays {
        render_who_pays(&mut o, w);
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Methods");
    for m in &d.methods {
        let _ = writeln!(o, "  {m}");
    }
    let few = |n: u64| n < MIN_OBSERVATIONS;
    let step_few = d.step.is_some() && (few(d.a.steps.unwrap_or(0)) || few(d.b.steps.unwrap_or(0)));
    if rounds {
        if d.outcomes.iter().map(|c| &c.latency).chain(&d.step).any(untested)
            || d.outcomes.iter().any(|c| c.per_unit_change.bounds.is_none())
        {
            let _ = writeln!(
                o,
                "  {UNTESTED}, no CI: fewer than {MIN_OBSERVATIONS} rounds with a value on a side, or a round with fewer than {MIN_OBSERVATIONS} attempts (or steps): no interval and no test; no attempts: the outcome did not occur on that side in any round"
            );
        }
    } else if step_few || d.outcomes.iter().any(|c| few(c.count_a) || few(c.count_b)) {
        let _ = writeln!(
            o,
            "  {UNTESTED}: fewer than {MIN_OBSERVATIONS} attempts (or steps) on a side: one value has no spread, so no interval and no test; no attempts: the outcome did not occur on that side"
        );
    }
    if d.unit == Unit::ExecAttempt {
        let _ =
            writeln!(o, "  not both runs of the built-in chain: changes are weighed per exec attempt of any outcome, not per chain step");
    }
    o
}

/// A latency figure that is there without an interval.
fn untested(l: &LatencyChange) -> bool {
    [l.median_a, l.median_b, l.median_change, l.mean_a, l.mean_b, l.mean_change].iter().flatten().any(|f| f.bounds.is_none())
}

fn line(l: &LineChange) -> String {
    let mut name = l.name.clone();
    if name.chars().count() > 34 {
        name = name.chars().take(33).collect::<String>() + "…";
    }
    format!(
        "  {:<10} {:<7} {:<9} {:<34} {:>9} {:>9}  {:>32} {:>3}  {:>32} {:>3}",
        l.outcome.label(),
        l.source,
        l.kind.label(),
        name,
        human_ns(l.a.value),
        human_ns(l.b.value),
        change_cell(Some(&l.change)),
        sig_cell(Some(&l.change), l.significant),
        change_cell(Some(&l.per_unit_change)),
        sig_cell(Some(&l.per_unit_change), l.per_unit_significant)
    )
}

/// Calling programs printed in the diff (the JSON has them all).
pub(crate) const PROGRAMS_SHOWN: usize = 2 * ROWS_SHOWN;

fn signed_count(n: i128) -> String {
    if n > 0 { format!("+{n}") } else { n.to_string() }
}

/// `2.16  0.22  -1.94`-style cells of a figure that is not a count.
fn signed_ratio(p: &Pair<f64>) -> String {
    let c = p.b - p.a;
    if c > 0.0 { format!("+{c:.2}") } else { format!("{c:.2}") }
}

/// The calling programs and PATH searches of both sides: totals over each side's window.
fn render_who_pays(o: &mut String, w: &WhoPaysChange) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Who pays (each run's totals over its own window: A {}, B {}; counts, not estimates)",
        human_ns(w.window_ns.a as f64),
        human_ns(w.window_ns.b as f64)
    );
    if !w.programs.is_empty() {
        let _ = writeln!(o, "  calling programs, largest change in exec kernel time first");
        let _ = writeln!(
            o,
            "    {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>11} {:>7} {:>7}  program",
            "A att", "B att", "A failed", "B failed", "A exec time", "B exec time", "change", "A forks", "B forks"
        );
        for p in w.programs.iter().take(PROGRAMS_SHOWN) {
            let (ta, tb) = (p.failed_ns.a + p.success_ns.a, p.failed_ns.b + p.success_ns.b);
            let _ = writeln!(
                o,
                "    {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>11} {:>7} {:>7}  {}",
                p.attempts.a,
                p.attempts.b,
                p.failed.a,
                p.failed.b,
                human_ns(ta as f64),
                human_ns(tb as f64),
                signed(p.exec_ns_change() as f64),
                p.fork_calls.a,
                p.fork_calls.b,
                p.program
            );
        }
        if w.programs.len() > PROGRAMS_SHOWN {
            let _ = writeln!(o, "    ... and {} more programs (all in --json)", w.programs.len() - PROGRAMS_SHOWN);
        }
        let (na, nb) = (w.programs_not_listed.a, w.programs_not_listed.b);
        if na + nb > 0 {
            let _ = writeln!(o, "    not compared: {na} programs of A and {nb} of B beyond their reports' lists (the fewest exec time)");
        }
    }
    let s = &w.searches;
    let _ = writeln!(o, "  PATH searches          {:>10} {:>10} {:>10}", "A", "B", "change");
    let count = |o: &mut String, label: &str, p: &Pair<u64>| {
        let _ = writeln!(o, "    {label:<20} {:>10} {:>10} {:>10}", p.a, p.b, signed_count(p.change()));
    };
    let time = |o: &mut String, label: &str, a: f64, b: f64| {
        let _ = writeln!(o, "    {label:<20} {:>10} {:>10} {:>10}", human_ns(a), human_ns(b), signed(b - a));
    };
    count(o, "searches", &s.searches);
    count(o, "not found", &s.not_found);
    count(o, "misses", &s.misses);
    let _ = writeln!(
        o,
        "    {:<20} {:>10.2} {:>10.2} {:>10}",
        "misses per search",
        s.misses_per_search.a,
        s.misses_per_search.b,
        signed_ratio(&s.misses_per_search)
    );
    time(o, "miss time", s.miss_ns.a as f64, s.miss_ns.b as f64);
    time(o, "miss time per search", s.miss_ns_per_search.a, s.miss_ns_per_search.b);
    count(o, "lone failures", &s.lone_failures);
    if !s.missed_dirs.is_empty() {
        let _ = writeln!(o, "  missed directories, largest change in misses first");
        let _ = writeln!(o, "    {:>8} {:>8} {:>8} {:>9} {:>9}  directory", "A misses", "B misses", "change", "A time", "B time");
        for d in s.missed_dirs.iter().take(MISSED_DIRS_SHOWN) {
            let _ = writeln!(
                o,
                "    {:>8} {:>8} {:>8} {:>9} {:>9}  {}",
                d.misses.a,
                d.misses.b,
                signed_count(d.misses.change()),
                human_ns(d.miss_ns.a as f64),
                human_ns(d.miss_ns.b as f64),
                d.dir
            );
        }
        if s.missed_dirs.len() > MISSED_DIRS_SHOWN {
            let _ = writeln!(o, "    ... and {} more directories (all in --json)", s.missed_dirs.len() - MISSED_DIRS_SHOWN);
        }
    }
}
