//! The diff as text: what ran on each side, what differs besides, the outcomes, then the lines
//! that explain the change, largest first.
use std::fmt::Write as _;

use super::{Diff, LineChange, Unit};
use crate::analysis::outcome::Outcome;
use crate::model::names::terminal_safe;
use crate::{
    analysis::stats::Interval,
    report::{human_ns, signed_ci},
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

fn ci(i: &Interval) -> String {
    format!("{} [{} – {}]", human_ns(i.value), human_ns(i.low), human_ns(i.high))
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The diff as the terminal shows it, with the phase and function lines `shown` selects.
pub fn render(d: &Diff, shown: &Shown) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "execprof diff — B compared with A (change = B − A)");
    for (side, f) in [("A", &d.a), ("B", &d.b)] {
        let steps = f.steps.map_or(String::new(), |s| format!(", {s} chain steps"));
        let _ = writeln!(
            o,
            "{side}  {}: {} exec attempts{steps}; kernel {}, {} mode, {} Hz{}",
            terminal_safe(&f.path),
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
    for c in &d.outcomes {
        let _ = writeln!(
            o,
            "  {:<12} {:>9} {:>9}  {:>30}  {:>30}  {:>34}  {:>4}",
            c.outcome.label(),
            c.count_a,
            c.count_b,
            ci(&c.latency.median_a),
            ci(&c.latency.median_b),
            signed_ci(&c.latency.median_change),
            yes(c.latency.significant)
        );
        let _ = writeln!(
            o,
            "  {:<12} mean {} → {} ({}); {:.2} → {:.2} attempts {unit}: {} {unit}",
            "",
            human_ns(c.latency.mean_a.value),
            human_ns(c.latency.mean_b.value),
            signed_ci(&c.latency.mean_change),
            c.per_unit_a,
            c.per_unit_b,
            signed_ci(&c.per_unit_change)
        );
    }
    if let Some(s) = &d.step {
        let _ = writeln!(
            o,
            "  {:<12} {:>9} {:>9}  {:>30}  {:>30}  {:>34}  {:>4}",
            "chain step",
            d.a.steps.unwrap_or(0),
            d.b.steps.unwrap_or(0),
            ci(&s.median_a),
            ci(&s.median_b),
            signed_ci(&s.median_change),
            yes(s.significant)
        );
        let _ =
            writeln!(o, "  {:<12} mean {} → {} ({})", "", human_ns(s.mean_a.value), human_ns(s.mean_b.value), signed_ci(&s.mean_change));
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
        let _ = writeln!(
            o,
            "  {significant} of {} lines{of_outcome} changed significantly per attempt (Holm-corrected over all {} lines, family-wise 5%)",
            selected.len(),
            d.lines.len()
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Methods");
    for m in &d.methods {
        let _ = writeln!(o, "  {m}");
    }
    if d.unit == Unit::ExecAttempt {
        let _ =
            writeln!(o, "  not both runs of the built-in chain: changes are weighed per exec attempt of any outcome, not per chain step");
    }
    o
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
        signed_ci(&l.change),
        yes(l.significant),
        signed_ci(&l.per_unit_change),
        yes(l.per_unit_significant)
    )
}
