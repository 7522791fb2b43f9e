//! Who pays for exec, as the terminal shows it: the calling programs and the PATH searches.
//! Each section is printed only when it says something the rest of the report does not: in
//! a launched tree, the programs table when more than one program besides execprof's own
//! launcher made attempts (a single program's figures are the outcome table's) and the
//! searches when some missed; when the run attached to processes that already ran
//! (a `--pid`, `--cgroup` or `--all` scope: not `RunMeta::launched`), both always,
//! since who made the attempts is then the question. Every name was escaped by the analysis.
use std::fmt::Write as _;

use super::{RunReport, human_ns};
use crate::analysis::{
    callers::{CallerSummary, MAX_CALLERS},
    identity::Program,
    searches::{MAX_LISTED, PathSearches},
};

/// Calling programs printed (the JSON keeps [`MAX_CALLERS`]).
pub(crate) const CALLERS_SHOWN: usize = 50;

/// Missed directories printed.
pub(crate) const MISSED_DIRS_SHOWN: usize = 10;

/// Directories printed in the reordering table, and programs in the per-program table.
pub(crate) const ROWS_SHOWN: usize = 10;

/// Whether the run attached to processes that existed before it (any scope but a launched
/// tree).
pub(crate) fn attached(r: &RunReport) -> bool {
    !r.meta.launched()
}

/// Up to two of these programs that are not execprof's launcher: whether more than one is.
fn programs_besides_launcher(programs: impl Iterator<Item = Program>) -> usize {
    programs.filter(|p| *p != Program::Launcher).take(2).count()
}

/// `/usr/bin/make (started by /usr/bin/bash, +2 others)`.
fn with_starter(c: &CallerSummary) -> String {
    let mut named = c.started_by.iter().filter_map(|s| s.program.as_ref());
    let Some(first) = named.next() else { return c.program.to_string() };
    let others = (c.started_by.len() as u64 - 1) + c.started_by_not_listed;
    let more = if others > 0 { format!(", +{others} other{}", if others == 1 { "" } else { "s" }) } else { String::new() };
    format!("{} (started by {first}{more})", c.program)
}

/// Whether the report shows the calling programs: an attached scope, or more than one program
/// besides the launcher made attempts.
pub(crate) fn shows_callers(r: &RunReport) -> bool {
    let a = &r.analysis;
    let making = || a.callers.iter().filter(|c| c.attempts > 0).map(|c| c.program.clone());
    !a.callers.is_empty() && (attached(r) || programs_besides_launcher(making()) > 1)
}

/// Whether the report shows the PATH searches: some missed, or an attached scope made any.
pub(crate) fn shows_searches(r: &RunReport) -> bool {
    let s = &r.analysis.path_searches;
    s.misses > 0 || (attached(r) && s.searches + s.lone_failures > 0)
}

/// Exec attempts by calling program.
pub(crate) fn render_callers(o: &mut String, r: &RunReport) {
    if !shows_callers(r) {
        return;
    }
    let a = &r.analysis;
    let listed = a.callers.len() as u64 + a.callers_not_listed;
    let _ = writeln!(
        o,
        "\nExec attempts by calling program ({listed} programs, most exec kernel time first; an attempt counts for the program that made it, not the one it exec'd)"
    );
    // AT_EXECVE_CHECK checks get a column only when a program made some.
    let checks = a.callers.iter().any(|c| c.checks > 0);
    let check_cell = |cell: String| if checks { format!(" {cell:>6}") } else { String::new() };
    let _ = writeln!(
        o,
        "  {:>9} {:>10} {:>8} {:>7} {:>7} {:>7} {:>7} {:>6}{} {:>6}  program (started by)",
        "failed",
        "successful",
        "attempts",
        "success",
        "ENOENT",
        "EACCES",
        "ENOEXEC",
        "other",
        check_cell("checks".into()),
        "forks"
    );
    for c in a.callers.iter().take(CALLERS_SHOWN) {
        let _ = writeln!(
            o,
            "  {:>9} {:>10} {:>8} {:>7} {:>7} {:>7} {:>7} {:>6}{} {:>6}  {}",
            human_ns(c.failed_ns as f64),
            human_ns(c.success_ns as f64),
            c.attempts,
            c.successes,
            c.enoent,
            c.eacces,
            c.enoexec,
            c.other + c.abandoned,
            check_cell(c.checks.to_string()),
            c.fork_calls,
            with_starter(c)
        );
    }
    let more = listed.saturating_sub(CALLERS_SHOWN as u64);
    if more > 0 {
        let _ = writeln!(o, "  ... and {more} more programs (in --json, up to {MAX_CALLERS})");
    }
    let _ = writeln!(
        o,
        "  (kernel time in the failed and the successful attempts; other: any other errno, and attempts killed mid-exec; forks: fork-family calls)"
    );
    if checks {
        let _ = writeln!(
            o,
            "  (checks: execveat calls with AT_EXECVE_CHECK, which only ask whether a file would be executed and run nothing: no success, no failure, not in either time)"
        );
    }
}

/// PATH searches: their misses, where, and what another PATH order would save.
pub(crate) fn render_searches(o: &mut String, r: &RunReport) {
    if !shows_searches(r) {
        return;
    }
    let s = &r.analysis.path_searches;
    let _ = writeln!(
        o,
        "\nPATH searches (one thread's attempts of one name in directory after directory, to a success or the last failure; an exec found at once counts as a search of 0 misses)"
    );
    if s.misses == 0 {
        let _ = writeln!(o, "  {} searches, none missed: every successful exec found its file at the first try", s.searches);
    } else {
        let _ = writeln!(
            o,
            "  {} searches: {} found ({} after misses), {} not found; {} misses, {:.2} per search, {} of kernel time",
            s.searches,
            s.found,
            s.found_after_misses,
            s.not_found,
            s.misses,
            s.misses_per_search(),
            human_ns(s.miss_ns as f64)
        );
    }
    render_repeated_misses(o, s);
    if s.lone_failures > 0 {
        let _ = writeln!(
            o,
            "  {} failed attempt(s) not in any search (one directory tried: a missing file exec'd by its path, or a PATH of one entry): {}",
            s.lone_failures,
            human_ns(s.lone_failure_ns as f64)
        );
    }
    render_missed_dirs(o, s);
    render_reordering(o, s);
    render_program_searches(o, r, s);
}

/// The misses that tried a directory again within one search: PATH lists it more than once,
/// and each such miss is waste a PATH without duplicates saves.
fn render_repeated_misses(o: &mut String, s: &PathSearches) {
    if s.repeated_misses == 0 {
        return;
    }
    let _ = writeln!(o, "  {} of these misses repeated a directory already tried in the same search:", s.repeated_misses);
    let _ = writeln!(o, "  {} of kernel time that a PATH listing each directory once saves", human_ns(s.repeated_miss_ns as f64));
    let _ = writeln!(o, "    {:>8} {:>9}  directory tried again", "repeats", "time");
    for d in s.repeated_dirs.iter().take(MISSED_DIRS_SHOWN) {
        let _ = writeln!(o, "    {:>8} {:>9}  {}", d.misses, human_ns(d.miss_ns as f64), d.dir);
    }
    let more = (s.repeated_dirs.len() as u64 + s.repeated_dirs_not_listed).saturating_sub(MISSED_DIRS_SHOWN as u64);
    if more > 0 {
        let _ = writeln!(o, "    ... and {more} more directories (in --json, up to {MAX_LISTED})");
    }
}

fn render_missed_dirs(o: &mut String, s: &PathSearches) {
    if s.missed_dirs.is_empty() {
        return;
    }
    let repeats = if s.repeated_misses > 0 { " (repeats included)" } else { "" };
    let _ = writeln!(o, "  most missed directories{repeats}");
    let _ = writeln!(o, "    {:>8} {:>9}  directory", "misses", "time");
    for d in s.missed_dirs.iter().take(MISSED_DIRS_SHOWN) {
        let _ = writeln!(o, "    {:>8} {:>9}  {}", d.misses, human_ns(d.miss_ns as f64), d.dir);
    }
    let more = (s.missed_dirs.len() as u64 + s.missed_dirs_not_listed).saturating_sub(MISSED_DIRS_SHOWN as u64);
    if more > 0 {
        let _ = writeln!(o, "    ... and {more} more directories (in --json, up to {MAX_LISTED})");
    }
}

fn render_reordering(o: &mut String, s: &PathSearches) {
    let saving: Vec<_> = s.found_dirs.iter().filter(|d| d.misses_before > 0).collect();
    if saving.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "  a directory moved to the front of PATH saves the misses before it where it held the program, and costs at most one miss in each search found elsewhere that had not tried it"
    );
    let _ = writeln!(o, "    {:>8} {:>8} {:>9} {:>15}  directory", "found", "saves", "time", "costs at most");
    for d in saving.iter().take(ROWS_SHOWN) {
        let _ = writeln!(
            o,
            "    {:>8} {:>8} {:>9} {:>15}  {}",
            d.found,
            d.misses_before,
            human_ns(d.misses_before_ns as f64),
            d.added_misses_at_most,
            d.dir
        );
    }
    if saving.len() > ROWS_SHOWN {
        let _ = writeln!(o, "    ... and {} more directories (in --json)", saving.len() - ROWS_SHOWN);
    }
}

/// Per program, when telling them apart says more than the totals: more than one program
/// (besides the launcher) missed, or the run attached to running work.
fn render_program_searches(o: &mut String, r: &RunReport, s: &PathSearches) {
    let missing = || s.programs.iter().filter(|p| p.misses > 0).map(|p| p.program.clone());
    let n = programs_besides_launcher(missing());
    if n == 0 || (n == 1 && !attached(r)) {
        return;
    }
    let _ = writeln!(o, "  by calling program (most miss time first)");
    let _ = writeln!(o, "    {:>8} {:>8} {:>13} {:>9}  program: most missed directory", "searches", "misses", "misses/search", "time");
    let rows: Vec<_> = s.programs.iter().filter(|p| p.misses > 0).collect();
    for p in rows.iter().take(ROWS_SHOWN) {
        let most = p.missed_dirs.first().map_or(String::new(), |d| format!(": {} ({})", d.dir, d.misses));
        let _ = writeln!(
            o,
            "    {:>8} {:>8} {:>13.2} {:>9}  {}{most}",
            p.searches,
            p.misses,
            p.misses_per_search(),
            human_ns(p.miss_ns as f64),
            p.program
        );
    }
    if rows.len() > ROWS_SHOWN {
        let _ = writeln!(o, "    ... and {} more programs (in --json)", rows.len() - ROWS_SHOWN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::test_support::{PATH, exec, who_pays},
        assemble::events::Event,
        report::{render, test_support},
    };

    /// The synthetic machine: bash, make and its children, cron, a pid not in the table.
    fn machine() -> RunReport {
        let (table, events) = who_pays();
        let mut meta = test_support::meta(&["sleep", "10"], None);
        meta.preexisting = table;
        meta.scope = crate::model::scope::Scope::All;
        test_support::report(meta, &events, None)
    }

    fn section(text: &str, title: &str) -> String {
        let Some(start) = text.find(&format!("\n{title}")) else { return String::new() };
        let rest = &text[start + 1..];
        rest[..rest.find("\n\n").map_or(rest.len(), |e| e + 1)].to_owned()
    }

    #[test]
    fn an_attached_scope_shows_who_pays() {
        let text = render(&machine());
        let both = format!("{}\n{}", section(&text, "Exec attempts by calling program"), section(&text, "PATH searches"));
        insta::assert_snapshot!(both);
    }

    #[test]
    fn the_json_reads_back_with_the_callers_and_searches() {
        let r = machine();
        let json = serde_json::to_string(&r).unwrap();
        let back: RunReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.analysis.callers, r.analysis.callers);
        assert_eq!(back.analysis.path_searches, r.analysis.path_searches);
        assert_eq!(back.meta.preexisting, r.meta.preexisting);
        assert_eq!(render(&back), render(&r));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["analysis"]["callers"][0]["program"], serde_json::json!({"kind": "exe", "exe": "/usr/bin/make"}));
        assert_eq!(v["analysis"]["callers"][2]["program"], serde_json::json!({"kind": "unknown", "pid": 777}));
        assert_eq!(v["analysis"]["path_searches"]["misses"], 23);
        // A report from before these fields reads as one without callers or searches.
        let mut old = v.clone();
        for key in ["callers", "callers_not_listed", "path_searches"] {
            old["analysis"].as_object_mut().unwrap().remove(key);
        }
        old.as_object_mut().unwrap().remove("preexisting");
        let old: RunReport = serde_json::from_value(old).unwrap();
        // One from before the repeated misses reads as one without them.
        let mut before_repeats = v.clone();
        for key in ["repeated_misses", "repeated_miss_ns", "repeated_dirs", "repeated_dirs_not_listed"] {
            before_repeats["analysis"]["path_searches"].as_object_mut().unwrap().remove(key).expect(key);
        }
        let before_repeats: RunReport = serde_json::from_value(before_repeats).unwrap();
        assert_eq!(before_repeats.analysis.path_searches, r.analysis.path_searches, "the machine repeats no directory");
        assert!(old.analysis.callers.is_empty() && old.analysis.path_searches.searches == 0 && old.meta.preexisting.is_empty());
    }

    /// Launched: one program searching (a chain) shows the searches, not the programs table;
    /// a second program making attempts brings the table.
    #[test]
    fn a_launched_tree_shows_the_programs_table_only_for_more_than_one_program() {
        let mut events = vec![exec(100, "/t/bin/chain", 0, 0, 40_000)];
        for step in 1..=3u64 {
            events.push(exec(100, "/t/m1/chain", -2, step * 100_000, 1_000));
            events.push(exec(100, "/t/bin/chain", 0, step * 100_000 + 10_000, 40_000));
        }
        let chain = render(&test_support::report(test_support::meta(&["chain"], None), &events, None));
        assert!(!chain.contains("Exec attempts by calling program"), "{chain}");
        let searches = section(&chain, "PATH searches");
        assert!(searches.contains("3 searches: 3 found (3 after misses), 0 not found; 3 misses, 1.00 per search"), "{searches}");
        assert!(!searches.contains("by calling program"), "one program: the totals are its own");
        let mut two = events.clone();
        two.extend(crate::analysis::test_support::fork(100, 101, 500_000, 1_000));
        two.push(exec(101, &format!("{}/cc", PATH[0]), -2, 600_000, 1_000));
        two.push(exec(101, &format!("{}/cc", PATH[2]), 0, 610_000, 30_000));
        two.push(exec(101, "/x/ld", -2, 700_000, 1_000));
        // cc searches too: a second program that missed.
        two.push(exec(101, "/a/as", -2, 710_000, 1_000));
        two.push(exec(101, "/b/as", 0, 720_000, 30_000));
        let text = render(&test_support::report(test_support::meta(&["chain"], None), &two, None));
        let table = section(&text, "Exec attempts by calling program");
        assert!(table.contains("(3 programs,"), "{table}");
        assert!(table.contains("/usr/bin/cc (started by /t/bin/chain)"), "{table}");
        assert!(section(&text, "PATH searches").contains("by calling program"), "{text}");
    }

    /// A PATH listing directories twice (GNU hello's configure under a default PATH of
    /// this kind): make's children search `gcc`, then, as gcc, `as`, each search trying the
    /// doubled directories twice: one search each, its repeats named as waste, and the
    /// misses counting them.
    #[test]
    fn a_path_listing_a_directory_twice_shows_the_repeats_as_waste() {
        let path = ["/root/.cargo/bin", "/root/.cargo/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/local/bin", "/usr/sbin", "/usr/bin"];
        let mut events = vec![exec(100, "/usr/bin/make", 0, 0, 200_000)];
        let mut t = 1_000_000;
        for i in 0..4u32 {
            let child = 200 + i;
            events.extend(crate::analysis::test_support::fork(100, child, t, 20_000));
            for name in ["gcc", "as"] {
                for (j, dir) in path.iter().enumerate() {
                    let last = j == path.len() - 1;
                    t += 10_000;
                    events.push(exec(child, &format!("{dir}/{name}"), if last { 0 } else { -2 }, t, if last { 60_000 } else { 1_500 }));
                }
            }
        }
        let r = test_support::report(test_support::meta(&["make"], None), &events, None);
        let v = serde_json::to_value(&r).unwrap();
        let s = &v["analysis"]["path_searches"];
        assert_eq!((&s["searches"], &s["misses"], &s["lone_failures"]), (&8.into(), &48.into(), &0.into()));
        assert_eq!((&s["repeated_misses"], &s["repeated_miss_ns"]), (&16.into(), &24_000.into()));
        let repeated: Vec<&str> = s["repeated_dirs"].as_array().unwrap().iter().map(|d| d["dir"].as_str().unwrap()).collect();
        assert_eq!(repeated, ["/root/.cargo/bin", "/usr/local/bin"]);
        let text = render(&r);
        let searches = section(&text, "PATH searches");
        assert!(!searches.contains("not in any search"), "{searches}");
        insta::assert_snapshot!(searches);
    }

    /// Nothing to say, nothing printed: execs by path in a launched tree.
    #[test]
    fn execs_by_path_alone_print_no_search_section() {
        let events: Vec<Event> = (0..3).map(|i| exec(100, "/bin/true", 0, i * 100_000, 40_000)).collect();
        let text = render(&test_support::report(test_support::meta(&["true"], None), &events, None));
        assert!(!text.contains("PATH searches") && !text.contains("calling program"), "{text}");
    }
}
