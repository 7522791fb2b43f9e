//! PATH searches: what `execvp` and shells such as dash do for a bare command name, seen as
//! exec attempts. A search is a run of consecutive exec attempts by one thread for the same
//! basename, each in a directory the run has not tried yet, ending in a success (the program
//! was found there) or in its last failure (not found: the thread exec'd something else, the
//! same name in a directory it had tried, or exited). Every failed attempt of a search is a
//! miss, whatever its errno (`execvp` goes on after ENOENT and EACCES alike).
//!
//! One successful attempt alone is a search of 0 misses (found at the first try, or exec'd
//! by its path: the two look the same), so every successful exec belongs to exactly one
//! search — but for execprof's own launch exec, which is no search (execprof looked the
//! command up itself) and is left out. One failed attempt alone is not a search: it tried one directory, which is a
//! direct exec of a missing or refused file (`./configure` without a `+x`, a stale absolute
//! path) as much as a PATH of one entry, and no order of PATH would save it; such attempts
//! are counted apart as lone failures. Shells that look PATH up with `stat` before one exec
//! (bash, zsh) show no misses here: their misses are `stat` calls, not exec attempts.
//!
//! A miss's directory is the attempt's file name without its basename (`.` for a bare
//! name). What a reordered PATH would save is counted per directory that held found
//! programs: the misses that came before it in the searches that found their program there
//! (moving it first would save them all), beside the searches that found theirs elsewhere
//! without trying it (moving it first costs each of those at most one miss, if it does not
//! hold that program).
//!
//! Memory follows the threads with a search open, the distinct directories and the
//! distinct (program, missed directory) pairs; each attempt costs a look at the directories
//! its search has tried so far (PATH's length at most).
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::identity::{Program, ProgramId};
use crate::{assemble::events::ExecAttempt, model::names::escape_name};

/// At most this many directories, and programs, are kept in each list of the JSON.
pub const MAX_LISTED: usize = 1000;

/// At most this many most-missed directories are kept per program.
pub const MAX_PROGRAM_DIRS: usize = 5;

/// An interned directory: an index into [`Searches`]' table.
type DirId = u32;

/// Every PATH search of a run (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathSearches {
    /// Searches (found or not), the successful execs' searches of 0 misses included.
    pub searches: u64,
    /// Searches that ended in a successful exec.
    pub found: u64,
    /// Of those, found after at least one miss.
    pub found_after_misses: u64,
    /// Searches that ended in their last failure.
    pub not_found: u64,
    /// Failed attempts in searches.
    pub misses: u64,
    /// Kernel time in them, in ns.
    pub miss_ns: u64,
    /// Failed attempts alone, not part of any search.
    pub lone_failures: u64,
    /// Kernel time in them, in ns.
    pub lone_failure_ns: u64,
    /// Directories that missed, most misses first (at most [`MAX_LISTED`]).
    pub missed_dirs: Vec<MissedDir>,
    /// Missed directories beyond [`MAX_LISTED`], not listed.
    pub missed_dirs_not_listed: u64,
    /// Directories where searches found their program, most saving first (at most
    /// [`MAX_LISTED`]).
    pub found_dirs: Vec<FoundDir>,
    /// Such directories beyond [`MAX_LISTED`], not listed.
    pub found_dirs_not_listed: u64,
    /// Per program that searched, most miss time first (at most [`MAX_LISTED`]).
    pub programs: Vec<ProgramSearches>,
    /// Programs beyond [`MAX_LISTED`], not listed.
    pub programs_not_listed: u64,
}

impl PathSearches {
    /// Misses per search; 0 without searches.
    pub fn misses_per_search(&self) -> f64 {
        ratio(self.misses, self.searches)
    }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// One directory's misses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissedDir {
    /// The directory, escaped ([`escape_name`]).
    pub dir: String,
    /// Searches' failed attempts in it.
    pub misses: u64,
    /// Kernel time in them, in ns.
    pub miss_ns: u64,
}

/// A directory where searches found their program, and what moving it to the front of PATH
/// would change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundDir {
    /// The directory, escaped ([`escape_name`]).
    pub dir: String,
    /// Searches that found their program in it.
    pub found: u64,
    /// The misses before it in those searches: what moving it first would save.
    pub misses_before: u64,
    /// Kernel time in them, in ns.
    pub misses_before_ns: u64,
    /// Searches that found their program elsewhere without trying it first: moving it first
    /// would cost each of them at most one miss.
    pub added_misses_at_most: u64,
}

/// One program's searches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramSearches {
    /// The program that searched (the caller of the attempts).
    pub program: Program,
    /// Its searches (found or not).
    pub searches: u64,
    /// Of those, not found.
    pub not_found: u64,
    /// Failed attempts in its searches.
    pub misses: u64,
    /// Kernel time in them, in ns.
    pub miss_ns: u64,
    /// Its lone failures (not part of a search).
    pub lone_failures: u64,
    /// Where its searches missed, most misses first (at most [`MAX_PROGRAM_DIRS`]).
    pub missed_dirs: Vec<MissedDir>,
}

impl ProgramSearches {
    /// Misses per search; 0 without searches.
    pub fn misses_per_search(&self) -> f64 {
        ratio(self.misses, self.searches)
    }
}

/// A search still going on: its thread's last attempts failed.
#[derive(Clone, Debug)]
struct OpenSearch {
    basename: Vec<u8>,
    program: ProgramId,
    /// Each directory tried and its attempt's kernel time, in order.
    misses: Vec<(DirId, u64)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct DirTally {
    misses: u64,
    miss_ns: u64,
    /// Misses in searches that found their program in another directory.
    missed_before_found: u64,
    found: u64,
    misses_before: u64,
    misses_before_ns: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct ProgramTally {
    searches: u64,
    not_found: u64,
    misses: u64,
    miss_ns: u64,
    lone_failures: u64,
}

/// The searches of a run, folded as attempts arrive.
#[derive(Clone, Debug, Default)]
pub(crate) struct Searches {
    /// By thread id.
    open: HashMap<u32, OpenSearch>,
    dir_ids: HashMap<Vec<u8>, DirId>,
    dirs: Vec<(Vec<u8>, DirTally)>,
    programs: HashMap<ProgramId, ProgramTally>,
    program_dirs: HashMap<(ProgramId, DirId), (u64, u64)>,
    totals: PathSearches,
}

/// A file name's directory and basename: `/usr/bin/ls` → (`/usr/bin`, `ls`), `/ls` → (`/`,
/// `ls`), `ls` → (`.`, `ls`).
fn split(name: &[u8]) -> (&[u8], &[u8]) {
    match name.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &name[1..]),
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (b".", name),
    }
}

impl Searches {
    /// An exec attempt made by a process running `program`.
    pub(crate) fn attempt(&mut self, program: ProgramId, a: &ExecAttempt) {
        if a.name.unreadable {
            // No name to compare: it ends its thread's search and starts none.
            self.thread_gone(a.pid);
            return;
        }
        let (dir, basename) = split(&a.name.bytes);
        let dir = self.dir_id(dir);
        let ns = a.duration_ns();
        let found = a.ret == 0;
        let continues = self.open.get(&a.pid).map(|s| s.basename == basename && s.misses.iter().all(|&(d, _)| d != dir));
        let search = match continues {
            Some(true) => {
                let s = self.open.get_mut(&a.pid).expect("open");
                if !found {
                    s.misses.push((dir, ns));
                    return;
                }
                self.open.remove(&a.pid).expect("open")
            }
            Some(false) | None => {
                if continues == Some(false) {
                    let ended = self.open.remove(&a.pid).expect("open");
                    self.not_found(ended);
                }
                let s = OpenSearch { basename: basename.to_vec(), program, misses: Vec::new() };
                if !found {
                    self.open.insert(a.pid, OpenSearch { misses: vec![(dir, ns)], ..s });
                    return;
                }
                s
            }
        };
        self.found(search, dir);
    }

    /// The thread exited: its search, if one is open, ends in its last failure.
    pub(crate) fn thread_gone(&mut self, pid: u32) {
        if let Some(s) = self.open.remove(&pid) {
            self.not_found(s);
        }
    }

    fn dir_id(&mut self, dir: &[u8]) -> DirId {
        if let Some(&id) = self.dir_ids.get(dir) {
            return id;
        }
        let id = self.dirs.len() as DirId;
        self.dirs.push((dir.to_vec(), DirTally::default()));
        self.dir_ids.insert(dir.to_vec(), id);
        id
    }

    /// Counts a search's misses, wherever it ended.
    fn misses(&mut self, s: &OpenSearch, found_elsewhere: bool) -> (u64, u64) {
        let p = self.programs.entry(s.program).or_default();
        p.searches += 1;
        let mut ns = 0;
        for &(d, miss_ns) in &s.misses {
            ns += miss_ns;
            let t = &mut self.dirs[d as usize].1;
            t.misses += 1;
            t.miss_ns += miss_ns;
            t.missed_before_found += u64::from(found_elsewhere);
            let pd = self.program_dirs.entry((s.program, d)).or_default();
            pd.0 += 1;
            pd.1 += miss_ns;
        }
        let n = s.misses.len() as u64;
        p.misses += n;
        p.miss_ns += ns;
        let t = &mut self.totals;
        t.searches += 1;
        t.misses += n;
        t.miss_ns += ns;
        (n, ns)
    }

    fn found(&mut self, s: OpenSearch, dir: DirId) {
        let (n, ns) = self.misses(&s, true);
        self.totals.found += 1;
        self.totals.found_after_misses += u64::from(n > 0);
        let d = &mut self.dirs[dir as usize].1;
        d.found += 1;
        d.misses_before += n;
        d.misses_before_ns += ns;
    }

    fn not_found(&mut self, s: OpenSearch) {
        if let [(_, ns)] = s.misses[..] {
            self.totals.lone_failures += 1;
            self.totals.lone_failure_ns += ns;
            self.programs.entry(s.program).or_default().lone_failures += 1;
            return;
        }
        self.misses(&s, false);
        self.totals.not_found += 1;
        self.programs.entry(s.program).or_default().not_found += 1;
    }

    /// Ends the searches still open and returns them all; `programs` names the program ids.
    pub(crate) fn finish(mut self, programs: &[Program]) -> PathSearches {
        let mut open: Vec<(u32, OpenSearch)> = self.open.drain().collect();
        open.sort_by_key(|(pid, _)| *pid);
        for (_, s) in open {
            self.not_found(s);
        }
        let dir_name = |d: &[u8]| escape_name(d);
        let mut t = self.totals;
        let missed = |dirs: &mut Vec<MissedDir>| {
            dirs.sort_by(|a, b| b.misses.cmp(&a.misses).then(b.miss_ns.cmp(&a.miss_ns)).then_with(|| a.dir.cmp(&b.dir)));
        };
        t.missed_dirs = self
            .dirs
            .iter()
            .filter(|(_, d)| d.misses > 0)
            .map(|(name, d)| MissedDir { dir: dir_name(name), misses: d.misses, miss_ns: d.miss_ns })
            .collect();
        missed(&mut t.missed_dirs);
        t.missed_dirs_not_listed = capped(&mut t.missed_dirs, MAX_LISTED);
        t.found_dirs = self
            .dirs
            .iter()
            .filter(|(_, d)| d.found > 0)
            .map(|(name, d)| FoundDir {
                dir: dir_name(name),
                found: d.found,
                misses_before: d.misses_before,
                misses_before_ns: d.misses_before_ns,
                added_misses_at_most: t.found - d.found - d.missed_before_found,
            })
            .collect();
        t.found_dirs
            .sort_by(|a, b| b.misses_before_ns.cmp(&a.misses_before_ns).then(b.found.cmp(&a.found)).then_with(|| a.dir.cmp(&b.dir)));
        t.found_dirs_not_listed = capped(&mut t.found_dirs, MAX_LISTED);
        let mut by_program: HashMap<ProgramId, Vec<MissedDir>> = HashMap::new();
        for ((p, d), (misses, miss_ns)) in self.program_dirs {
            by_program.entry(p).or_default().push(MissedDir { dir: dir_name(&self.dirs[d as usize].0), misses, miss_ns });
        }
        t.programs = self
            .programs
            .into_iter()
            .map(|(p, s)| {
                let mut missed_dirs = by_program.remove(&p).unwrap_or_default();
                missed(&mut missed_dirs);
                missed_dirs.truncate(MAX_PROGRAM_DIRS);
                ProgramSearches {
                    program: programs[p as usize].clone(),
                    searches: s.searches,
                    not_found: s.not_found,
                    misses: s.misses,
                    miss_ns: s.miss_ns,
                    lone_failures: s.lone_failures,
                    missed_dirs,
                }
            })
            .collect();
        t.programs.sort_by(|a, b| b.miss_ns.cmp(&a.miss_ns).then(b.searches.cmp(&a.searches)).then_with(|| a.program.cmp(&b.program)));
        t.programs_not_listed = capped(&mut t.programs, MAX_LISTED);
        t
    }
}

/// Cuts `list` to `cap` entries; returns how many were cut.
fn capped<T>(list: &mut Vec<T>, cap: usize) -> u64 {
    let cut = list.len().saturating_sub(cap) as u64;
    list.truncate(cap);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::{PATH, analyse_from, exec, exec_by, exit, process, who_pays};

    fn missed(dir: &str, misses: u64, miss_ns: u64) -> MissedDir {
        MissedDir { dir: dir.into(), misses, miss_ns }
    }

    #[test]
    fn file_names_split_into_directory_and_basename() {
        assert_eq!(split(b"/usr/bin/ls"), (&b"/usr/bin"[..], &b"ls"[..]));
        assert_eq!(split(b"/ls"), (&b"/"[..], &b"ls"[..]));
        assert_eq!(split(b"ls"), (&b"."[..], &b"ls"[..]));
        assert_eq!(split(b"/dev/fd/3"), (&b"/dev/fd"[..], &b"3"[..]));
    }

    /// Ten searches of 2 misses and a hit, one search missing everywhere, lone failures of
    /// another program, and execs by path: every figure known.
    #[test]
    fn searches_of_a_machine_have_their_known_answers() {
        let (table, events) = who_pays();
        let s = analyse_from(&table, &events).path_searches;
        assert_eq!(
            (s.searches, s.found, s.found_after_misses, s.not_found, s.misses, s.miss_ns),
            (13, 12, 10, 1, 23, 10 * 2_500 + 3 * 1_200)
        );
        assert_eq!((s.lone_failures, s.lone_failure_ns), (3, 6_000));
        assert_eq!(s.missed_dirs, vec![missed(PATH[1], 11, 16_200), missed(PATH[0], 11, 11_200), missed(PATH[2], 1, 1_200)]);
        assert_eq!(
            s.found_dirs,
            vec![FoundDir { dir: PATH[2].into(), found: 12, misses_before: 20, misses_before_ns: 25_000, added_misses_at_most: 0 }]
        );
        let programs: Vec<(String, u64, u64, u64, u64)> =
            s.programs.iter().map(|p| (p.program.to_string(), p.searches, p.not_found, p.misses, p.lone_failures)).collect();
        assert_eq!(
            programs,
            vec![
                ("/usr/bin/make".into(), 11, 1, 23, 0),
                ("/usr/bin/bash".into(), 1, 0, 0, 0),
                ("pid 777 (unknown program)".into(), 1, 0, 0, 0),
                ("/usr/sbin/cron".into(), 0, 0, 0, 3),
            ]
        );
        assert_eq!(s.programs[0].missed_dirs, s.missed_dirs, "make made every miss");
        assert!((s.misses_per_search() - 23.0 / 13.0).abs() < 1e-12);
    }

    /// Moving a directory first saves the misses before it where programs were found in it,
    /// and costs at most a miss in each search found elsewhere that did not try it first.
    #[test]
    fn a_reordered_path_saves_the_misses_before_each_found_directory() {
        let init = [process(1, 0, "/sbin/init", "init")];
        let mut events = Vec::new();
        let mut t = 0;
        for i in 0..10 {
            // Two misses, found in /c.
            for (dir, ret) in [("/a", -2), ("/b", -2), ("/c", 0)] {
                events.push(exec(100 + i, &format!("{dir}/cc"), ret, t, 1_000));
                t += 2_000;
            }
        }
        for i in 0..4 {
            // Found in /a at once: moving /c first would cost these a miss each, at most.
            events.push(exec(200 + i, "/a/ld", 0, t, 5_000));
            t += 10_000;
        }
        let s = analyse_from(&init, &events).path_searches;
        let by_dir = |d: &str| s.found_dirs.iter().find(|f| f.dir == d).unwrap().clone();
        assert_eq!(
            by_dir("/c"),
            FoundDir { dir: "/c".into(), found: 10, misses_before: 20, misses_before_ns: 20_000, added_misses_at_most: 4 }
        );
        assert_eq!(
            by_dir("/a"),
            FoundDir { dir: "/a".into(), found: 4, misses_before: 0, misses_before_ns: 0, added_misses_at_most: 0 },
            "the searches found in /c all tried /a first"
        );
        assert_eq!(s.found_dirs[0].dir, "/c", "most saving first");
    }

    /// What ends a search: another name, a directory already tried, the thread's exit; and
    /// two threads of one process search apart.
    #[test]
    fn a_search_ends_at_another_name_a_repeated_directory_or_the_exit() {
        let init = [process(1, 0, "/sbin/init", "init"), process(50, 1, "/usr/bin/dash", "dash")];
        let events = vec![
            // Thread 51 and thread 52 of one process, interleaved: two searches of 1 miss.
            exec_by(51, 50, "/a/x", -2, 0, 10),
            exec_by(52, 50, "/a/y", -2, 100, 10),
            exec_by(51, 50, "/b/x", -2, 200, 10),
            exec_by(52, 50, "/b/y", -2, 300, 10),
            exec_by(52, 50, "/c/y", 0, 400, 10),
            // Thread 51's search for x ends at another name (not found: 2 misses), and z
            // tried twice in one directory is two lone failures, not a search.
            exec_by(51, 50, "/a/z", -2, 500, 10),
            exec_by(51, 50, "/a/z", -2, 600, 10),
            // A bare name's directory is `.`; the exit ends the search: not found.
            exec(60, "w", -2, 700, 10),
            exec(60, "/bin/w", -13, 800, 10),
            exit(60, 60, true),
        ];
        let s = analyse_from(&init, &events).path_searches;
        assert_eq!((s.searches, s.found, s.not_found, s.misses, s.lone_failures), (3, 1, 2, 6, 2));
        let dirs: Vec<(&str, u64)> = s.missed_dirs.iter().map(|d| (d.dir.as_str(), d.misses)).collect();
        assert_eq!(dirs, [("/a", 2), ("/b", 2), (".", 1), ("/bin", 1)]);
        assert_eq!(s.found_dirs[0].misses_before, 2);
    }

    /// A search still open when the run ends is counted as not found.
    #[test]
    fn a_search_open_at_the_end_is_not_found() {
        let events = [exec(10, "/a/x", -2, 0, 10), exec(10, "/b/x", -2, 100, 10)];
        let s = analyse_from(&[process(1, 0, "/sbin/init", "init")], &events).path_searches;
        assert_eq!((s.searches, s.not_found, s.misses, s.lone_failures), (1, 1, 2, 0));
        assert_eq!(s.programs[0].program, Program::Unknown { pid: 10 });
    }

    /// In a launched tree the launch exec is execprof's, no search: a chain of 3 steps of 2
    /// misses is 3 searches of 2 misses each, as its spec says.
    #[test]
    fn the_launch_exec_is_no_search() {
        let mut events = vec![exec(100, "/t/bin/chain", 0, 0, 40_000)];
        for step in 1..=3u64 {
            for (i, dir) in ["/t/m1", "/t/m2"].iter().enumerate() {
                events.push(exec(100, &format!("{dir}/chain"), -2, step * 100_000 + i as u64 * 1_000, 500));
            }
            events.push(exec(100, "/t/bin/chain", 0, step * 100_000 + 10_000, 40_000));
        }
        let s = analyse_from(&[], &events).path_searches;
        assert_eq!((s.searches, s.found_after_misses, s.misses, s.misses_per_search()), (3, 3, 6, 2.0));
        assert!(s.programs.iter().all(|p| p.program != Program::Launcher));
    }
}
