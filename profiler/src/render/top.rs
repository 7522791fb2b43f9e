//! `execprof top`'s frame: the agent's aggregates per program or cgroup, the last interval
//! beside the whole run, drawn with ratatui into a buffer: the terminal's (interactive) or
//! one of 80 columns printed as text (`--once`). 80 columns wide at the least.
use std::collections::HashMap;

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Modifier, Style},
    text::Line,
    widgets::{Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget},
};

use crate::analysis::aggregates::{GroupBy, GroupRow};

/// What the rows are sorted by (`s` cycles through them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SortKey {
    /// Kernel time in exec attempts and fork-family calls in the last interval.
    LastTime,
    /// The same since the start.
    TotalTime,
    /// Exec attempts since the start.
    Attempts,
    /// Failed exec attempts since the start.
    Failures,
}

impl SortKey {
    /// The next sort key (`s`).
    pub(crate) fn next(self) -> Self {
        match self {
            SortKey::LastTime => SortKey::TotalTime,
            SortKey::TotalTime => SortKey::Attempts,
            SortKey::Attempts => SortKey::Failures,
            SortKey::Failures => SortKey::LastTime,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortKey::LastTime => "kernel time, last interval",
            SortKey::TotalTime => "kernel time, in all",
            SortKey::Attempts => "exec attempts",
            SortKey::Failures => "failed exec attempts",
        }
    }
}

/// What the rows are (`p`, `c`, `d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum View {
    /// Calling programs.
    Programs,
    /// Callers' cgroups.
    Cgroups,
    /// Directories where exec attempts failed with ENOENT (PATH's misses).
    Directories,
}

impl View {
    /// The series grouping of the view; None for missed directories (not series).
    pub(crate) fn group_by(self) -> Option<GroupBy> {
        match self {
            View::Programs => Some(GroupBy::Program),
            View::Cgroups => Some(GroupBy::Cgroup),
            View::Directories => None,
        }
    }
}

/// What the user chose: the grouping, the sort, the selected row.
#[derive(Clone, Debug)]
pub(crate) struct TopState {
    /// Programs, cgroups or missed directories.
    pub(crate) view: View,
    /// The sort.
    pub(crate) sort: SortKey,
    /// The selected row.
    pub(crate) table: TableState,
}

impl Default for TopState {
    fn default() -> Self {
        Self { view: View::Programs, sort: SortKey::LastTime, table: TableState::default().with_selected(Some(0)) }
    }
}

/// One frame's figures.
pub(crate) struct TopModel {
    /// The scope and boundaries line.
    pub(crate) title: String,
    /// Seconds since the start, and of the last interval.
    pub(crate) elapsed_s: f64,
    /// Length of the last interval, in seconds.
    pub(crate) interval_s: f64,
    /// Per group: the last interval's figures and the totals.
    pub(crate) last: HashMap<String, GroupRow>,
    /// Totals since the start, per group.
    pub(crate) all: HashMap<String, GroupRow>,
    /// Why the figures are incomplete, if they are.
    pub(crate) incomplete: Option<String>,
}

/// The rows of the frame in order: (all, last) per group.
fn sorted(model: &TopModel, sort: SortKey) -> Vec<(&GroupRow, Option<&GroupRow>)> {
    let mut rows: Vec<(&GroupRow, Option<&GroupRow>)> = model.all.values().map(|a| (a, model.last.get(&a.name))).collect();
    let key = |r: &(&GroupRow, Option<&GroupRow>)| -> u64 {
        match sort {
            SortKey::LastTime => r.1.map_or(0, GroupRow::kernel_ns),
            SortKey::TotalTime => r.0.kernel_ns(),
            SortKey::Attempts => r.0.attempts,
            SortKey::Failures => r.0.enoent + r.0.failed_otherwise,
        }
    };
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| b.0.kernel_ns().cmp(&a.0.kernel_ns())).then_with(|| a.0.name.cmp(&b.0.name)));
    rows
}

/// A duration in at most 6 characters: `953µs`, `12.3ms`, `1.25s`.
fn short_ns(ns: u64) -> String {
    let v = ns as f64;
    let (x, unit) = if v < 1e3 {
        (v, "ns")
    } else if v < 1e6 {
        (v / 1e3, "µs")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    if x >= 100.0 || unit == "ns" {
        format!("{x:.0}{unit}")
    } else if x >= 10.0 {
        format!("{x:.1}{unit}")
    } else {
        format!("{x:.2}{unit}")
    }
}

/// A count in at most 6 characters: `999999`, `1.23M`.
fn short_count(n: u64) -> String {
    if n < 1_000_000 { n.to_string() } else { format!("{:.2}M", n as f64 / 1e6) }
}

/// Resident pages as bytes in at most 5 characters: `812M`, `1.5G`.
fn short_pages(pages: u64) -> String {
    if pages == 0 {
        return "-".into();
    }
    let mib = pages as f64 * 4096.0 / (1 << 20) as f64;
    if mib >= 1024.0 { format!("{:.1}G", mib / 1024.0) } else { format!("{mib:.0}M") }
}

/// The end of `s` in `n` characters: a path's end says most.
fn tail(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n { s.to_owned() } else { std::iter::once('…').chain(s.chars().skip(len - n + 1)).collect() }
}

const WIDTHS: [u16; 10] = [18, 7, 7, 6, 5, 5, 6, 6, 5, 5];

/// Draws the frame into `area` of `buf`.
pub(crate) fn draw(area: Rect, buf: &mut Buffer, model: &TopModel, state: &mut TopState) {
    let [head, body, foot] = Layout::vertical([Constraint::Length(2), Constraint::Min(1), Constraint::Length(1)]).areas(area);
    let rows = sorted(model, state.sort);
    let execs_per_s = |r: Option<&GroupRow>| r.map_or(0, |r| r.attempts);
    let last_execs: u64 = rows.iter().map(|r| execs_per_s(r.1)).sum();
    let last_forks: u64 = rows.iter().map(|r| r.1.map_or(0, |l| l.forks)).sum();
    let last_checks: u64 = rows.iter().map(|r| r.1.map_or(0, |l| l.checks)).sum();
    let per_s = |n: u64| if model.interval_s > 0.0 { n as f64 / model.interval_s } else { 0.0 };
    // AT_EXECVE_CHECK checks run nothing: not in EXECS, said apart when there are any.
    let checks =
        if last_checks > 0 { format!(", {:.0} execveat checks/s (AT_EXECVE_CHECK, not execs)", per_s(last_checks)) } else { String::new() };
    let header = vec![
        Line::from(format!("execprof top  {}  {:.0} s", model.title, model.elapsed_s)),
        Line::from(format!(
            "{:.0} execs/s, {:.0} forks/s{checks}; {} by {}{}",
            per_s(last_execs),
            per_s(last_forks),
            match state.view {
                View::Programs => "programs",
                View::Cgroups => "cgroups",
                View::Directories => "missed directories",
            },
            state.sort.name(),
            model.incomplete.as_deref().map(|w| format!("; incomplete: {w}")).unwrap_or_default()
        )),
    ];
    Paragraph::new(header).render(head, buf);
    let name_title = match state.view {
        View::Programs => "PROGRAM",
        View::Cgroups => "CGROUP",
        View::Directories => "DIRECTORY",
    };
    let titles = [name_title, "LAST", "TOTAL", "EXECS", "MISS", "FAIL", "P50", "P99", "FORKS", "RSS"];
    let header = Row::new(titles.iter().enumerate().map(|(i, t)| Cell::from(right(t, WIDTHS[i] as usize, i > 0))))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    let table_rows = rows.iter().map(|(all, last)| {
        let latency = all.exec.latency();
        let cells = [
            tail(&all.name, WIDTHS[0] as usize),
            last.map(GroupRow::kernel_ns).filter(|&ns| ns > 0).map_or("-".into(), short_ns),
            short_ns(all.kernel_ns()),
            short_count(all.attempts),
            short_count(all.enoent),
            short_count(all.failed_otherwise),
            latency.as_ref().map_or("-".into(), |l| short_ns(l.p50.ns)),
            latency.as_ref().map_or("-".into(), |l| short_ns(l.p99.ns)),
            short_count(all.forks),
            short_pages(all.rss_pages_max),
        ];
        Row::new(cells.into_iter().enumerate().map(|(i, c)| Cell::from(right(&c, WIDTHS[i] as usize, i > 0))))
    });
    let table = Table::new(table_rows, WIDTHS.map(Constraint::Length))
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    if let Some(selected) = state.table.selected()
        && selected >= rows.len()
    {
        state.table.select(Some(rows.len().saturating_sub(1)));
    }
    StatefulWidget::render(table, body, buf, &mut state.table);
    Paragraph::new("q quit  s sort  p programs  c cgroups  d missed dirs  ↑↓ select").render(foot, buf);
}

/// `s` padded to `n` columns, right-aligned for figures.
fn right(s: &str, n: usize, right: bool) -> String {
    if right { format!("{s:>n$}") } else { format!("{s:<n$}") }
}

/// The frame as plain text, `width` columns wide, as many lines as it needs (`--once`).
pub(crate) fn text(model: &TopModel, state: &mut TopState, width: u16) -> String {
    let height = (model.all.len() as u16).saturating_add(4).max(5);
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    state.table.select(None);
    draw(area, &mut buf, model, state);
    let mut out = String::new();
    for y in 0..height {
        let line: String = (0..width).map(|x| buf[(x, y)].symbol().to_owned()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::aggregates::Totals;

    fn row(name: &str, attempts: u64, enoent: u64, ns: u64) -> GroupRow {
        let mut exec = Totals { count: attempts, timed: attempts, sum_ns: ns * attempts, ..Totals::default() };
        exec.buckets[profiler_common::aggregate::bucket(ns)] = attempts;
        GroupRow { name: name.into(), attempts, enoent, exec, forks: 2, fork_ns: 100_000, rss_pages_max: 25_600, ..GroupRow::default() }
    }

    fn model() -> TopModel {
        let all: HashMap<String, GroupRow> =
            [row("/usr/bin/make", 100, 10, 300_000), row("/usr/lib/gcc/x86_64-linux-gnu/12/collect2", 5, 0, 400_000)]
                .into_iter()
                .map(|r| (r.name.clone(), r))
                .collect();
        let last: HashMap<String, GroupRow> =
            [row("/usr/lib/gcc/x86_64-linux-gnu/12/collect2", 5, 0, 400_000)].into_iter().map(|r| (r.name.clone(), r)).collect();
        TopModel { title: "--all".into(), elapsed_s: 10.0, interval_s: 1.0, last, all, incomplete: None }
    }

    #[test]
    fn the_frame_fits_80_columns_and_sorts_by_the_last_interval() {
        let text = text(&model(), &mut TopState::default(), 80);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{text}");
        assert!(lines[0].starts_with("execprof top  --all"), "{text}");
        assert!(lines[1].starts_with("5 execs/s, 2 forks/s; programs by kernel time, last interval"), "{text}");
        assert!(lines[2].starts_with("PROGRAM"), "{text}");
        // collect2 was busy in the last interval: first, its path cut from the left.
        assert!(lines[3].starts_with("…"), "{text}");
        assert!(lines[3].contains("2.10ms"), "{text}");
        assert!(lines[4].starts_with("/usr/bin/make"), "{text}");
        assert!(lines[4].contains(" 100 ") && lines[4].contains("100M"), "{text}");
        assert!(text.contains("q quit"), "{text}");
    }

    #[test]
    fn sorting_by_total_time_puts_the_busiest_program_first() {
        let mut state = TopState { sort: SortKey::TotalTime, ..TopState::default() };
        let text = text(&model(), &mut state, 80);
        assert!(text.lines().nth(3).unwrap().starts_with("/usr/bin/make"), "{text}");
        assert_eq!(SortKey::Failures.next(), SortKey::LastTime);
    }

    #[test]
    fn figures_fit_their_columns() {
        assert_eq!(short_ns(953_000), "953µs");
        assert_eq!(short_ns(12_345_678), "12.3ms");
        assert_eq!(short_ns(1_250_000_000), "1.25s");
        assert_eq!(short_count(1_234_567), "1.23M");
        assert_eq!(short_pages(262_144), "1.0G");
        assert_eq!(tail("/usr/lib/gcc/cc1", 8), "…gcc/cc1");
    }
}
