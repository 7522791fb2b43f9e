//! Who pays, compared: the calling programs and the PATH searches of A and B side by side, for
//! the question a running-system trace is taken to answer twice — before and after a PATH, a
//! build script or a service changed. Programs are matched by what they are (executable and
//! comm), not by process id; directories by name. Counts and kernel time are each run's
//! totals over its own window, whose lengths the comparison names (and warns about when they
//! differ), and per search where a search is the natural unit. They are counts, not samples:
//! no interval is given, and the per-attempt significance of each outcome is the outcome
//! table's. Two launched runs whose counts all agree (the same build twice) have nothing to
//! say here, nor two runs of the built-in chain, and the diff leaves the section out.
use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::{
    analysis::{callers::CallerSummary, identity::Program, searches::PathSearches},
    report::{RunReport, who_pays},
};

/// A figure of A and of B.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pair<T> {
    /// In A.
    pub a: T,
    /// In B.
    pub b: T,
}

impl Pair<u64> {
    /// B − A.
    pub fn change(&self) -> i128 {
        self.b as i128 - self.a as i128
    }
}

/// One calling program in A and in B (0 where it made no calls on that side).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramChange {
    /// The program, as the who-pays table names it.
    pub program: Program,
    /// Exec attempts it made (all outcomes).
    pub attempts: Pair<u64>,
    /// Of those, failed (abandoned ones included).
    pub failed: Pair<u64>,
    /// Kernel time in its failed attempts, in ns.
    pub failed_ns: Pair<u64>,
    /// Kernel time in its successful attempts, in ns.
    pub success_ns: Pair<u64>,
    /// Fork-family calls it made.
    pub fork_calls: Pair<u64>,
    /// Misses in its PATH searches.
    pub misses: Pair<u64>,
    /// Its PATH searches.
    pub searches: Pair<u64>,
}

impl ProgramChange {
    /// Kernel time in its exec attempts, B − A: what the programs are sorted by.
    pub fn exec_ns_change(&self) -> i128 {
        (self.failed_ns.b + self.success_ns.b) as i128 - (self.failed_ns.a + self.success_ns.a) as i128
    }
}

/// One missed directory in A and in B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DirChange {
    /// The directory, escaped as the report shows it.
    pub dir: String,
    /// Searches' failed attempts in it.
    pub misses: Pair<u64>,
    /// Kernel time in them, in ns.
    pub miss_ns: Pair<u64>,
}

/// The PATH searches of A and B.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchesChange {
    /// Searches (found or not).
    pub searches: Pair<u64>,
    /// Searches that ended in their last failure.
    pub not_found: Pair<u64>,
    /// Failed attempts in searches.
    pub misses: Pair<u64>,
    /// Misses per search.
    pub misses_per_search: Pair<f64>,
    /// Kernel time in the misses, in ns.
    pub miss_ns: Pair<u64>,
    /// Kernel time in the misses per search, in ns.
    pub miss_ns_per_search: Pair<f64>,
    /// Failed attempts not in any search.
    pub lone_failures: Pair<u64>,
    /// Directories that missed on either side, largest change in misses first.
    pub missed_dirs: Vec<DirChange>,
    /// Directories not compared: beyond a side's JSON list ([`crate::analysis::searches::MAX_LISTED`]).
    pub missed_dirs_not_listed: Pair<u64>,
}

/// Who pays in A and in B: present in a diff when either side's report shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhoPaysChange {
    /// Each side's traced window (release to end), in ns: the totals are over it.
    pub window_ns: Pair<u64>,
    /// Calling programs of either side, largest change in exec kernel time first; empty when
    /// neither report tells programs apart (a launched tree where one program made attempts).
    pub programs: Vec<ProgramChange>,
    /// Programs not compared: beyond a side's JSON list ([`crate::analysis::callers::MAX_CALLERS`]).
    pub programs_not_listed: Pair<u64>,
    /// The PATH searches.
    pub searches: SearchesChange,
}

/// Windows whose lengths differ by more than this share: the totals then are not comparable
/// as they stand, and the diff says so.
pub const WINDOW_TOLERANCE: f64 = 0.10;

impl WhoPaysChange {
    /// The windows differ in length by more than [`WINDOW_TOLERANCE`].
    pub fn windows_differ(&self) -> bool {
        let (a, b) = (self.window_ns.a as f64, self.window_ns.b as f64);
        (a - b).abs() > WINDOW_TOLERANCE * a.max(b)
    }
}

fn pair<T>(a: T, b: T) -> Pair<T> {
    Pair { a, b }
}

fn failed(c: &CallerSummary) -> u64 {
    c.attempts - c.successes
}

/// The comparison, when either report shows who pays (its calling programs or its PATH
/// searches) and either attached to running work or their counts differ.
pub fn compare(a: &RunReport, b: &RunReport) -> Option<WhoPaysChange> {
    // The built-in chain's searches are its design (the outcome table and the chain step say
    // what they cost), in directories and programs of its own temporary tree, never matched.
    if super::builtin_chain(a).is_some() && super::builtin_chain(b).is_some() {
        return None;
    }
    let w = side_by_side(a, b)?;
    (who_pays::attached(a) || who_pays::attached(b) || w.counts_differ()).then_some(w)
}

impl WhoPaysChange {
    /// Any count differs between the sides (times always do).
    fn counts_differ(&self) -> bool {
        let s = &self.searches;
        let programs = self.programs.iter().any(|p| [p.attempts, p.failed, p.fork_calls, p.misses, p.searches].iter().any(|c| c.a != c.b));
        let dirs = s.missed_dirs.iter().any(|d| d.misses.a != d.misses.b);
        programs || dirs || [s.searches, s.not_found, s.misses, s.lone_failures].iter().any(|c| c.a != c.b)
    }
}

fn side_by_side(a: &RunReport, b: &RunReport) -> Option<WhoPaysChange> {
    let shown = |r: &RunReport| who_pays::shows_callers(r) || who_pays::shows_searches(r);
    if !(shown(a) || shown(b)) {
        return None;
    }
    let (sa, sb) = (&a.analysis.path_searches, &b.analysis.path_searches);
    // The programs, as the reports: when either tells them apart (a chain alone is one program).
    let programs_shown = who_pays::shows_callers(a) || who_pays::shows_callers(b);
    let (la, lb): (&[CallerSummary], &[CallerSummary]) =
        if programs_shown { (&a.analysis.callers, &b.analysis.callers) } else { (&[], &[]) };
    // Indexed once: a running system's tables hold up to a thousand programs each.
    let (ia, ib): (HashMap<&Program, &CallerSummary>, HashMap<&Program, &CallerSummary>) =
        (a.analysis.callers.iter().map(|c| (&c.program, c)).collect(), b.analysis.callers.iter().map(|c| (&c.program, c)).collect());
    let (qa, qb) = (searches_by_program(sa), searches_by_program(sb));
    let mut seen = HashSet::new();
    let names: Vec<&Program> = la.iter().chain(lb).map(|c| &c.program).filter(|p| seen.insert(*p)).collect();
    let mut programs: Vec<ProgramChange> = names
        .into_iter()
        .map(|p| {
            let (ca, cb) = (ia.get(p).copied(), ib.get(p).copied());
            let get = |c: &Option<&CallerSummary>, f: fn(&CallerSummary) -> u64| c.map_or(0, f);
            let both = |f: fn(&CallerSummary) -> u64| pair(get(&ca, f), get(&cb, f));
            let ((ma, na), (mb, nb)) = (qa.get(p).copied().unwrap_or_default(), qb.get(p).copied().unwrap_or_default());
            ProgramChange {
                program: p.clone(),
                attempts: both(|c| c.attempts),
                failed: both(failed),
                failed_ns: both(|c| c.failed_ns),
                success_ns: both(|c| c.success_ns),
                fork_calls: both(|c| c.fork_calls),
                misses: pair(ma, mb),
                searches: pair(na, nb),
            }
        })
        .collect();
    programs.sort_by(|x, y| {
        y.exec_ns_change().abs().cmp(&x.exec_ns_change().abs()).then_with(|| x.program.to_string().cmp(&y.program.to_string()))
    });
    Some(WhoPaysChange {
        window_ns: pair(a.command_wall_ns, b.command_wall_ns),
        programs,
        programs_not_listed: pair(a.analysis.callers_not_listed, b.analysis.callers_not_listed),
        searches: searches(sa, sb),
    })
}

/// (misses, searches) of each program.
fn searches_by_program(s: &PathSearches) -> HashMap<&Program, (u64, u64)> {
    s.programs.iter().map(|x| (&x.program, (x.misses, x.searches))).collect()
}

/// (misses, miss time) of each missed directory.
fn misses_by_dir(s: &PathSearches) -> HashMap<&str, (u64, u64)> {
    s.missed_dirs.iter().map(|d| (d.dir.as_str(), (d.misses, d.miss_ns))).collect()
}

fn searches(a: &PathSearches, b: &PathSearches) -> SearchesChange {
    let (in_a, in_b) = (misses_by_dir(a), misses_by_dir(b));
    let mut seen = HashSet::new();
    let dirs: Vec<&str> = a.missed_dirs.iter().chain(&b.missed_dirs).map(|d| d.dir.as_str()).filter(|d| seen.insert(*d)).collect();
    let mut missed_dirs: Vec<DirChange> = dirs
        .into_iter()
        .map(|dir| {
            let ((ma, ta), (mb, tb)) = (in_a.get(dir).copied().unwrap_or_default(), in_b.get(dir).copied().unwrap_or_default());
            DirChange { dir: dir.to_owned(), misses: pair(ma, mb), miss_ns: pair(ta, tb) }
        })
        .collect();
    missed_dirs.sort_by(|x, y| y.misses.change().abs().cmp(&x.misses.change().abs()).then_with(|| x.dir.cmp(&y.dir)));
    let per_search = |s: &PathSearches| if s.searches == 0 { 0.0 } else { s.miss_ns as f64 / s.searches as f64 };
    SearchesChange {
        searches: pair(a.searches, b.searches),
        not_found: pair(a.not_found, b.not_found),
        misses: pair(a.misses, b.misses),
        misses_per_search: pair(a.misses_per_search(), b.misses_per_search()),
        miss_ns: pair(a.miss_ns, b.miss_ns),
        miss_ns_per_search: pair(per_search(a), per_search(b)),
        lone_failures: pair(a.lone_failures, b.lone_failures),
        missed_dirs,
        missed_dirs_not_listed: pair(a.missed_dirs_not_listed, b.missed_dirs_not_listed),
    }
}
