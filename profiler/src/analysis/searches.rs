//! PATH searches: what `execvp` and shells such as dash do for a bare command name, seen as
//! exec attempts. A search is a run of consecutive exec attempts by one thread for the same
//! basename in directory after directory, ending in a success (the program was found there)
//! or in its last failure (not found: the thread exec'd something else, started the same
//! name over from the search's first directory, or exited). Every failed attempt of a search
//! is a miss, whatever its errno (`execvp` goes on after ENOENT and EACCES alike).
//!
//! A search follows PATH entry by entry, and a PATH may list a directory more than once
//! (`/root/.cargo/bin:/root/.cargo/bin:...`): such a search tries that directory again, and
//! stays one search. Only a return to its first directory from another one starts the name
//! over, since a new search of the same name begins where PATH begins; a PATH that lists its
//! first directory again further on is read, at that entry, as the name searched anew (the two
//! look the same, attempt by attempt). A miss in a directory its search had already tried is
//! a repeated miss: pure waste, which a PATH listing each directory once saves.
//!
//! One successful attempt alone is a search of 0 misses (found at the first try, or exec'd
//! by its path: the two look the same), so every successful exec belongs to exactly one
//! search — but for execprof's own launch exec, which is no search (execprof looked the
//! command up itself) and is left out. Failed attempts in one directory alone are not a
//! search: they tried one directory, which is a direct exec of a missing or refused file
//! (`./configure` without a `+x`, a stale absolute path) as much as a PATH of one entry, and
//! no order of PATH would save them; such attempts are counted apart as lone failures, one
//! each (and a success in that directory after them is a search of 0 misses). Shells that
//! look PATH up with `stat` before one exec (bash, zsh) show no misses here: their misses are
//! `stat` calls, not exec attempts.
//!
//! A miss's directory is the attempt's file name without its basename (`.` for a bare
//! name). What a reordered PATH would save is counted per directory that held found
//! programs: the misses that came before it in the searches that found their program there
//! (moving it first would save them all), beside the searches that found theirs elsewhere
//! without trying it (moving it first costs each of those at most one miss, if it does not
//! hold that program).
//!
//! Memory follows the threads with a search open, the distinct directories and the
//! distinct (program, missed directory) pairs; each attempt costs a look at the distinct
//! directories its search has tried so far (PATH's length at most).
use foldhash::{HashMap, HashMapExt as _};

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
    /// Failed attempts in searches, the repeated misses included.
    pub misses: u64,
    /// Kernel time in them, in ns.
    pub miss_ns: u64,
    /// Of the misses, those in a directory their search had already tried (PATH lists it
    /// more than once): what a PATH without duplicates saves.
    #[serde(default)]
    pub repeated_misses: u64,
    /// Kernel time in them, in ns.
    #[serde(default)]
    pub repeated_miss_ns: u64,
    /// Directories tried again within a search, most repeated misses first (at most
    /// [`MAX_LISTED`]); a row's `misses` are the repeated ones only.
    #[serde(default)]
    pub repeated_dirs: Vec<MissedDir>,
    /// Such directories beyond [`MAX_LISTED`], not listed.
    #[serde(default)]
    pub repeated_dirs_not_listed: u64,
    /// Failed attempts alone, not part of any search (each attempt of a run in one directory).
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
    /// Searches' failed attempts in it (in [`PathSearches::repeated_dirs`], the repeated
    /// ones only).
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
    /// Each directory tried, in the order first tried: PATH's distinct entries at most.
    tried: Vec<TriedDir>,
    /// The directory of the last attempt.
    last: DirId,
}

/// One directory's failed attempts in one search.
#[derive(Clone, Copy, Debug)]
struct TriedDir {
    dir: DirId,
    /// More than one when PATH lists the directory more than once.
    misses: u64,
    miss_ns: u64,
    /// Kernel time in the misses after the first: the repeated ones.
    repeated_ns: u64,
}

impl TriedDir {
    fn repeated(&self) -> u64 {
        self.misses - 1
    }
}

impl OpenSearch {
    fn new(basename: &[u8], program: ProgramId) -> Self {
        OpenSearch { basename: basename.to_vec(), program, tried: Vec::new(), last: 0 }
    }

    /// Whether an attempt of `basename` in `dir` goes on with this search: the same name, and
    /// not back at the search's first directory from another one (the name searched anew).
    fn goes_on(&self, basename: &[u8], dir: DirId) -> bool {
        let starts_over = self.tried.first().is_some_and(|t| t.dir == dir) && self.last != dir;
        self.basename == basename && !starts_over
    }

    fn miss(&mut self, dir: DirId, ns: u64) {
        match self.tried.iter_mut().find(|t| t.dir == dir) {
            Some(t) => {
                t.misses += 1;
                t.miss_ns += ns;
                t.repeated_ns += ns;
            }
            None => self.tried.push(TriedDir { dir, misses: 1, miss_ns: ns, repeated_ns: 0 }),
        }
        self.last = dir;
    }

    /// The failed attempts when they were all in one directory: lone failures, not a search.
    fn one_directory(&self) -> Option<TriedDir> {
        match self.tried[..] {
            [only] => Some(only),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct DirTally {
    misses: u64,
    miss_ns: u64,
    /// Searches that missed in it and found their program in another directory.
    missed_before_found: u64,
    /// Misses in it that repeated a directory their search had tried.
    repeated: u64,
    repeated_ns: u64,
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
    /// An exec attempt made by a process running `program`. An `AT_EXECVE_CHECK` check is no
    /// step of a search: it neither misses, finds nor ends one.
    pub(crate) fn attempt(&mut self, program: ProgramId, a: &ExecAttempt) {
        if a.check {
            return;
        }
        if a.name.unreadable {
            // No name to compare: it ends its thread's search and starts none.
            self.thread_gone(a.pid);
            return;
        }
        let (dir, basename) = split(&a.name.bytes);
        let dir = self.dir_id(dir);
        let mut search = match self.open.remove(&a.pid) {
            Some(s) if s.goes_on(basename, dir) => s,
            ended => {
                if let Some(ended) = ended {
                    self.not_found(ended);
                }
                OpenSearch::new(basename, program)
            }
        };
        if a.ret == 0 {
            self.found(search, dir);
        } else {
            search.miss(dir, a.duration_ns());
            self.open.insert(a.pid, search);
        }
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

    /// Counts a search's misses, wherever it ended (`found_in`: where it found its program).
    fn misses(&mut self, s: &OpenSearch, found_in: Option<DirId>) -> (u64, u64) {
        let p = self.programs.entry(s.program).or_default();
        p.searches += 1;
        let (mut n, mut ns, mut repeated, mut repeated_ns) = (0, 0, 0, 0);
        for t in &s.tried {
            n += t.misses;
            ns += t.miss_ns;
            repeated += t.repeated();
            repeated_ns += t.repeated_ns;
            let d = &mut self.dirs[t.dir as usize].1;
            d.misses += t.misses;
            d.miss_ns += t.miss_ns;
            d.repeated += t.repeated();
            d.repeated_ns += t.repeated_ns;
            d.missed_before_found += u64::from(found_in.is_some_and(|f| f != t.dir));
            let pd = self.program_dirs.entry((s.program, t.dir)).or_default();
            pd.0 += t.misses;
            pd.1 += t.miss_ns;
        }
        p.misses += n;
        p.miss_ns += ns;
        let t = &mut self.totals;
        t.searches += 1;
        t.misses += n;
        t.miss_ns += ns;
        t.repeated_misses += repeated;
        t.repeated_miss_ns += repeated_ns;
        (n, ns)
    }

    /// Failed attempts in one directory alone, one lone failure each.
    fn lone_failures(&mut self, program: ProgramId, t: TriedDir) {
        self.totals.lone_failures += t.misses;
        self.totals.lone_failure_ns += t.miss_ns;
        self.programs.entry(program).or_default().lone_failures += t.misses;
    }

    fn found(&mut self, mut s: OpenSearch, dir: DirId) {
        if let Some(only) = s.one_directory().filter(|t| t.dir == dir) {
            // Failed, then found, in that one directory alone: direct execs of one file, not
            // a search; the success is a search of 0 misses.
            self.lone_failures(s.program, only);
            s.tried.clear();
        }
        let (n, ns) = self.misses(&s, Some(dir));
        self.totals.found += 1;
        self.totals.found_after_misses += u64::from(n > 0);
        let d = &mut self.dirs[dir as usize].1;
        d.found += 1;
        d.misses_before += n;
        d.misses_before_ns += ns;
    }

    fn not_found(&mut self, s: OpenSearch) {
        if let Some(only) = s.one_directory() {
            self.lone_failures(s.program, only);
            return;
        }
        self.misses(&s, None);
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
        t.repeated_dirs = self
            .dirs
            .iter()
            .filter(|(_, d)| d.repeated > 0)
            .map(|(name, d)| MissedDir { dir: dir_name(name), misses: d.repeated, miss_ns: d.repeated_ns })
            .collect();
        missed(&mut t.repeated_dirs);
        t.repeated_dirs_not_listed = capped(&mut t.repeated_dirs, MAX_LISTED);
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
    use crate::{
        analysis::test_support::{PATH, analyse_from, exec, exec_by, exit, process, who_pays},
        assemble::events::Event,
    };

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

    /// What ends a search: another name, the thread's exit; and two threads of one process
    /// search apart.
    #[test]
    fn a_search_ends_at_another_name_or_the_exit() {
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

    /// The attempts of one search along `dirs` for `name` by thread `pid`, from `t` on: each
    /// fails but for the last when `found`; attempt `i` takes `ns(i)`.
    fn search(pid: u32, name: &str, dirs: &[&str], found: bool, t: u64, ns: impl Fn(usize) -> u64) -> Vec<Event> {
        let last = dirs.len() - 1;
        dirs.iter()
            .enumerate()
            .map(|(i, d)| exec(pid, &format!("{d}/{name}"), if found && i == last { 0 } else { -2 }, t + i as u64 * 10_000, ns(i)))
            .collect()
    }

    fn summary(s: &PathSearches) -> [u64; 8] {
        [s.searches, s.found, s.not_found, s.misses, s.miss_ns, s.repeated_misses, s.repeated_miss_ns, s.lone_failures]
    }

    /// A PATH that lists a directory twice in a row, in the middle or at its start: the
    /// search tries it twice and stays one search; the second miss there is a repeated one,
    /// named with its time. Before, the repeat ended the search: a lone failure plus a
    /// search at the start; a search not found plus another one in the middle.
    #[test]
    fn a_directory_listed_twice_is_one_search_with_a_repeated_miss() {
        let init = [process(1, 0, "/sbin/init", "init")];
        // A, A, B, then found in C: 4 attempts, 3 misses, the second in A repeated.
        let at_start = search(10, "as", &["/a", "/a", "/b", "/c"], true, 0, |i| 1_000 * (i as u64 + 1));
        let s = analyse_from(&init, &at_start).path_searches;
        assert_eq!(summary(&s), [1, 1, 0, 3, 6_000, 1, 2_000, 0]);
        assert_eq!(s.found_after_misses, 1);
        assert_eq!(s.repeated_dirs, vec![missed("/a", 1, 2_000)]);
        assert_eq!(s.missed_dirs, vec![missed("/a", 2, 3_000), missed("/b", 1, 3_000)], "a directory's misses count its repeats");
        assert_eq!(
            s.found_dirs,
            vec![FoundDir { dir: "/c".into(), found: 1, misses_before: 3, misses_before_ns: 6_000, added_misses_at_most: 0 }]
        );
        assert_eq!((s.programs[0].searches, s.programs[0].misses, s.programs[0].lone_failures), (1, 3, 0));

        // X, A, A, B, then found in C; and the same name not found along that PATH.
        let mut events = search(20, "as", &["/x", "/a", "/a", "/b", "/c"], true, 0, |_| 1_000);
        events.extend(search(21, "ld", &["/x", "/a", "/a", "/b", "/c"], false, 0, |_| 500));
        let s = analyse_from(&init, &events).path_searches;
        assert_eq!(summary(&s), [2, 1, 1, 9, 6_500, 2, 1_500, 0]);
        assert_eq!(s.repeated_dirs, vec![missed("/a", 2, 1_500)]);
    }

    /// A search whose repeated directory is where it finds its program (the first try there
    /// failed, the second did not): one search, no repeated miss (the success is no waste),
    /// and that directory is not counted as tried first by a search found elsewhere.
    #[test]
    fn a_search_found_in_its_repeated_directory() {
        let init = [process(1, 0, "/sbin/init", "init")];
        let mut events = search(10, "cc", &["/a", "/b", "/b"], true, 0, |_| 1_000);
        // Found in /a at once: moving /b first would cost it at most one miss.
        events.push(exec(11, "/a/ld", 0, 100_000, 1_000));
        let s = analyse_from(&init, &events).path_searches;
        assert_eq!(summary(&s), [2, 2, 0, 2, 2_000, 0, 0, 0]);
        assert!(s.repeated_dirs.is_empty());
        let by_dir = |d: &str| s.found_dirs.iter().find(|f| f.dir == d).unwrap().clone();
        assert_eq!(
            by_dir("/b"),
            FoundDir { dir: "/b".into(), found: 1, misses_before: 2, misses_before_ns: 2_000, added_misses_at_most: 1 }
        );
        assert_eq!(by_dir("/a").added_misses_at_most, 0, "the search found in /b tried /a first");
    }

    /// Still separate: another name, a success between, the same name from its first
    /// directory again (searched anew), and attempts in one directory alone (lone failures,
    /// one each, even repeated, and before a success there).
    #[test]
    fn separate_searches_stay_separate() {
        let init = [process(1, 0, "/sbin/init", "init")];
        let path = ["/a", "/a", "/b"];
        let mut events = search(10, "x", &path, false, 0, |_| 100);
        // Another name: a search of its own, also repeating /a.
        events.extend(search(10, "y", &path, true, 100_000, |_| 100));
        // A success between two searches of one name.
        events.extend(search(10, "z", &path, true, 200_000, |_| 100));
        events.extend(search(10, "z", &path, true, 300_000, |_| 100));
        // The same name from the first directory again, not found twice.
        events.extend(search(10, "w", &path, false, 400_000, |_| 100));
        events.extend(search(10, "w", &path, false, 500_000, |_| 100));
        let s = analyse_from(&init, &events).path_searches;
        assert_eq!(summary(&s), [6, 3, 3, 15, 1_500, 6, 600, 0]);
        assert_eq!(s.repeated_dirs, vec![missed("/a", 6, 600)]);

        // One directory alone, twice and three times, then found there: no search but the
        // success's, 0 misses.
        let mut events = search(20, "run", &["/opt", "/opt"], false, 0, |_| 100);
        events.extend(search(21, "run", &["/opt", "/opt", "/opt"], true, 0, |_| 100));
        let s = analyse_from(&init, &events).path_searches;
        assert_eq!(summary(&s), [1, 1, 0, 0, 0, 0, 0, 4]);
        assert_eq!(s.lone_failure_ns, 400);
        assert!(s.missed_dirs.is_empty() && s.repeated_dirs.is_empty());
    }

    /// A PATH listing its first directory again further on cannot be told, attempt by attempt,
    /// from the name searched anew: it reads as a search that starts over there.
    #[test]
    fn the_first_directory_again_after_another_starts_the_name_over() {
        let init = [process(1, 0, "/sbin/init", "init")];
        let s = analyse_from(&init, &search(10, "x", &["/a", "/b", "/a", "/c"], true, 0, |_| 100)).path_searches;
        assert_eq!(summary(&s), [2, 1, 1, 3, 300, 0, 0, 0]);
        // Any other directory tried again, in a row or not, goes on with the search.
        let s = analyse_from(&init, &search(10, "x", &["/a", "/b", "/c", "/b", "/d"], true, 0, |_| 100)).path_searches;
        assert_eq!(summary(&s), [1, 1, 0, 4, 400, 1, 100, 0]);
        assert_eq!(s.repeated_dirs, vec![missed("/b", 1, 100)]);
    }
}
