//! The agent's source: the kernel's aggregates read on an interval, each entry's growth since
//! the last read handed on as a delta of its series, named (cgroup path, program path) in
//! user space once per entry; entries that are idle, or whose cgroup is gone, are removed from
//! the kernel after their last read, so its maps hold what is alive.
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Result;
use profiler_common::{
    AggKey, AggValue, MissKey, MissValue, ProgramPath, StackKey,
    aggregate::{PATH_DEPTH, agg_counter, key_flags, path_flags},
};

use crate::{
    analysis::aggregates::{MissCounts, SeriesKey, Totals, call_of, missed_directory, other_series, outcome_name},
    kernel::aggregates::AggregateMaps,
    model::names::escape_name,
    source::mounts::Mounts,
};

/// One read's growth: per series, what was added since the read before.
pub(crate) struct Poll {
    pub deltas: Vec<(SeriesKey, Totals)>,
    /// `AGG_COUNTERS` now (totals since start).
    pub counters: [u64; agg_counter::COUNT as usize],
    /// Kernel entries in use after this read's removals.
    pub entries: usize,
    /// Entries removed by this read (idle, or their cgroup gone).
    pub removed: usize,
    /// ENOENT attempts since the last poll: (cgroup, missed directory, what they added).
    pub misses: Vec<(String, String, MissCounts)>,
    /// Samples inside calls since the last poll, per stack and series.
    pub stacks: Vec<StackDelta>,
}

/// Samples of one kernel stack inside the calls of one series, since the last poll.
pub(crate) struct StackDelta {
    /// The call and outcome as in `AggKey`.
    pub call: u16,
    pub outcome: u16,
    /// The calls were `AT_EXECVE_CHECK` checks (`key_flags::EXECVE_CHECK`).
    pub check: bool,
    /// The series the calls were counted under, named; `other`'s when that series did not
    /// fit in the kernel's map (its calls were folded).
    pub series: SeriesKey,
    /// Innermost first.
    pub frames: std::rc::Rc<Vec<u64>>,
    pub samples: u64,
}

/// What the source keeps of a `MISSES` entry between reads.
struct SeenMiss {
    cgroup: String,
    directory: String,
    last: MissValue,
    changed: Instant,
}

/// How often the cgroup tree is walked to find removed cgroups (and on a new id, at most once
/// a second).
const CGROUP_WALK_EVERY: Duration = Duration::from_secs(5);

/// What the source keeps of a kernel entry between reads.
struct Seen {
    series: SeriesKey,
    last: Totals,
    changed: Instant,
}

pub(crate) struct AggregateSource {
    maps: AggregateMaps,
    names: Names,
    seen: HashMap<AggKey, Seen>,
    seen_misses: HashMap<MissKey, SeenMiss>,
    /// `STACK_COUNTS` entries: the count last read, when it last changed, the frames.
    seen_stacks: HashMap<StackKey, (u64, Instant, std::rc::Rc<Vec<u64>>)>,
    other_last: Vec<Totals>,
    idle: Duration,
}

impl AggregateSource {
    pub(crate) fn new(maps: AggregateMaps, cgroup_mount: Option<PathBuf>, idle: Duration) -> Self {
        Self {
            maps,
            names: Names::new(cgroup_mount),
            seen: HashMap::new(),
            seen_misses: HashMap::new(),
            seen_stacks: HashMap::new(),
            other_last: Vec::new(),
            idle,
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.maps.capacity
    }

    /// Reads the kernel's aggregates: the deltas since the last poll, and the removal of the
    /// entries read for the last time.
    pub(crate) fn poll(&mut self, now: Instant) -> Result<Poll> {
        self.names.refresh(CGROUP_WALK_EVERY);
        let snapshot = self.maps.read()?;
        self.names.new_read();
        let new: Vec<(AggKey, &AggValue)> =
            snapshot.entries.iter().filter(|(k, _)| !self.seen.contains_key(k)).map(|(k, v)| (*k, v)).collect();
        self.names.learn_programs(&new);
        for (key, value) in new {
            let series = self.names.series(&key, value);
            self.seen.insert(key, Seen { series, last: Totals::default(), changed: now });
        }
        let mut deltas = Vec::new();
        let mut present = std::collections::HashSet::with_capacity(snapshot.entries.len());
        for (key, value) in &snapshot.entries {
            present.insert(*key);
            let totals = Totals::of(value);
            let Some(seen) = self.seen.get_mut(key) else { continue };
            let delta = totals.since(&seen.last);
            if !delta.is_empty() {
                seen.changed = now;
                deltas.push((seen.series.clone(), delta));
            }
            seen.last = totals;
        }
        // Entries removed by us last time and not made again.
        self.seen.retain(|k, _| present.contains(k));
        for (slot, value) in snapshot.other.iter().enumerate() {
            let totals = Totals::of(value);
            if self.other_last.len() <= slot {
                self.other_last.push(Totals::default());
            }
            let delta = totals.since(&self.other_last[slot]);
            if !delta.is_empty() {
                deltas.push((other_series(slot as u32), delta));
            }
            self.other_last[slot] = totals;
        }
        // Named by their series, before a series read for the last time is forgotten.
        let stacks = self.poll_stacks(&snapshot.stack_counts, now);
        // Read for the last time: idle for `idle`, or of a cgroup that is gone.
        let gone: Vec<AggKey> = self
            .seen
            .iter()
            .filter(|(k, s)| now.duration_since(s.changed) >= self.idle || self.names.cgroup_gone(k.cgroup_id))
            .map(|(k, _)| *k)
            .collect();
        for key in &gone {
            self.maps.remove(key);
            self.seen.remove(key);
        }
        let misses = self.poll_misses(&snapshot.misses, now);
        Ok(Poll { deltas, counters: snapshot.counters, entries: self.seen.len(), removed: gone.len(), misses, stacks })
    }

    /// The growth of each `STACK_COUNTS` entry, with its frames (read once per stack); idle
    /// entries removed after, and a stack no entry counts any more with them.
    fn poll_stacks(&mut self, entries: &[(StackKey, u64)], now: Instant) -> Vec<StackDelta> {
        let mut out = Vec::new();
        let mut present = std::collections::HashSet::with_capacity(entries.len());
        let mut frames_of: HashMap<u32, std::rc::Rc<Vec<u64>>> =
            self.seen_stacks.iter().map(|(k, (_, _, f))| (k.stack_id, f.clone())).collect();
        for (key, count) in entries {
            present.insert(*key);
            let frames = frames_of.entry(key.stack_id).or_insert_with(|| std::rc::Rc::new(self.maps.frames(key.stack_id))).clone();
            let seen = self.seen_stacks.entry(*key).or_insert((0, now, frames));
            let before = if *count < seen.0 { 0 } else { seen.0 };
            if *count > before {
                seen.1 = now;
                let (call, outcome) = (key.series.call, key.series.outcome);
                let check = key.series.flags & key_flags::EXECVE_CHECK != 0;
                let series = match self.seen.get(&key.series) {
                    Some(s) => s.series.clone(),
                    None => SeriesKey { call: call_of(call), outcome: outcome_name(outcome, check), ..other_series(u32::MAX) },
                };
                out.push(StackDelta { call, outcome, check, series, frames: seen.2.clone(), samples: count - before });
            }
            seen.0 = *count;
        }
        self.seen_stacks.retain(|k, _| present.contains(k));
        let gone: Vec<StackKey> = self.seen_stacks.iter().filter(|(_, s)| now.duration_since(s.1) >= self.idle).map(|(k, _)| *k).collect();
        for key in &gone {
            self.seen_stacks.remove(key);
            let last_use = !self.seen_stacks.keys().any(|k| k.stack_id == key.stack_id);
            self.maps.remove_stack_count(key, last_use);
        }
        out
    }

    /// The growth of each `MISSES` entry, named; idle and gone entries removed after.
    fn poll_misses(&mut self, entries: &[(MissKey, MissValue)], now: Instant) -> Vec<(String, String, MissCounts)> {
        let mut out = Vec::new();
        let mut present = std::collections::HashSet::with_capacity(entries.len());
        for (key, value) in entries {
            present.insert(*key);
            if !self.seen_misses.contains_key(key) {
                let seen = SeenMiss {
                    cgroup: self.names.cgroup(key.cgroup_id),
                    directory: missed_directory(&value.name),
                    last: MissValue::default(),
                    changed: now,
                };
                self.seen_misses.insert(*key, seen);
            }
            let Some(seen) = self.seen_misses.get_mut(key) else { continue };
            // An entry removed and made anew counts whole.
            let before = if value.count < seen.last.count { MissValue::default() } else { seen.last };
            if value.count > before.count {
                seen.changed = now;
                out.push((
                    seen.cgroup.clone(),
                    seen.directory.clone(),
                    MissCounts {
                        misses: value.count - before.count,
                        ns: value.sum_ns.saturating_sub(before.sum_ns),
                        repeated: value.repeated.saturating_sub(before.repeated),
                        repeated_ns: value.repeated_ns.saturating_sub(before.repeated_ns),
                    },
                ));
            }
            seen.last = *value;
        }
        self.seen_misses.retain(|k, _| present.contains(k));
        let gone: Vec<MissKey> = self
            .seen_misses
            .iter()
            .filter(|(k, s)| now.duration_since(s.changed) >= self.idle || self.names.cgroup_gone(k.cgroup_id))
            .map(|(k, _)| *k)
            .collect();
        for key in &gone {
            self.maps.remove_miss(key);
            self.seen_misses.remove(key);
        }
        out
    }
}

/// Names of cgroup ids and programs, looked up once each.
struct Names {
    cgroup_mount: Option<PathBuf>,
    cgroups: HashMap<u64, String>,
    /// When the cgroup tree was last walked.
    walked: Option<Instant>,
    /// Whether it was walked since the kernel's maps were last read.
    walked_since_read: bool,
    /// By the executable's (device, inode number, inode generation).
    programs: HashMap<(u32, u64, u32), String>,
    mounts: Mounts,
}

impl Names {
    fn new(cgroup_mount: Option<PathBuf>) -> Self {
        Self {
            cgroup_mount,
            cgroups: HashMap::new(),
            walked: None,
            walked_since_read: false,
            programs: HashMap::new(),
            mounts: Mounts::default(),
        }
    }

    fn series(&mut self, key: &AggKey, value: &AggValue) -> SeriesKey {
        SeriesKey {
            cgroup: self.cgroup(key.cgroup_id),
            program: self.program(key, value),
            call: call_of(key.call),
            outcome: outcome_name(key.outcome, key.flags & key_flags::EXECVE_CHECK != 0),
            compat: key.flags & key_flags::COMPAT != 0,
        }
    }

    /// A read of the kernel's maps was made: cgroups its entries name may be newer than the
    /// last walk of the tree.
    fn new_read(&mut self) {
        self.walked_since_read = false;
    }

    /// The cgroup's path under the mount. On a miss the tree is walked again, once per read
    /// of the kernel's maps, so a cgroup made since the last walk is found, however soon after
    /// it (a series keeps the name it is first given: a cgroup missed once would lose its
    /// unit, container and pod labels for good).
    fn cgroup(&mut self, id: u64) -> String {
        if let Some(name) = self.cgroups.get(&id) {
            return name.clone();
        }
        if !self.walked_since_read {
            self.walk();
        }
        self.cgroups.get(&id).cloned().unwrap_or_else(|| format!("unknown_cgroup_id:{id}"))
    }

    fn walk(&mut self) {
        self.walked = Some(Instant::now());
        self.walked_since_read = true;
        let Some(mount) = self.cgroup_mount.clone() else { return };
        self.cgroups.clear();
        let mut stack = vec![mount.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            let rel = dir.strip_prefix(&mount).unwrap_or(Path::new(""));
            let name = format!("/{}", escape_name(rel.as_os_str().as_encoded_bytes()));
            self.cgroups.insert(meta.ino(), name);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }

    /// Walks the cgroup tree again when the last walk is older than `every`: removed cgroups
    /// are found that way (their entries are then read a last time and removed).
    fn refresh(&mut self, every: Duration) {
        if self.walked.is_none_or(|t| t.elapsed() >= every) {
            self.walk();
        }
    }

    /// Whether the cgroup's directory is gone: not found in the last walk of the tree.
    fn cgroup_gone(&self, id: u64) -> bool {
        self.cgroup_mount.is_some() && self.walked.is_some() && !self.cgroups.contains_key(&id)
    }

    /// Finds the paths of the programs of `entries` not named yet: the path the kernel read
    /// from the program's file when the entry was made, as the process that made the entry
    /// sees it (through its mount table: [`Mounts`]), else the executable of the process that
    /// made the entry if it still runs that program. A program found neither way is named by
    /// the comm of its first caller, `comm:NAME`, and keeps that name, so a series keeps one
    /// name.
    fn learn_programs(&mut self, entries: &[(AggKey, &AggValue)]) {
        self.mounts.new_read();
        // Programs whose process is gone are named after the live ones, which show the mount
        // namespaces (containers) their file systems were seen in.
        let mut gone = Vec::new();
        for (key, value) in entries {
            let id = (key.dev, key.ino, key.generation);
            if key.flags & key_flags::NO_PROGRAM != 0 || self.programs.contains_key(&id) {
                continue;
            }
            let path = match kernel_path(&value.path) {
                Some(KernelPath::Whole(below)) => match self.mounts.own_path(user_dev(key.dev), &below, value.first_tgid) {
                    Some(path) => Some(path),
                    None => {
                        gone.push((id, below));
                        continue;
                    }
                },
                Some(KernelPath::Tail(tail)) => Some(tail),
                None => match exe_of(value.first_tgid) {
                    Some((dev, ino, path)) if (dev, ino) == (user_dev(key.dev), key.ino) => Some(path),
                    _ => None,
                },
            };
            if let Some(path) = path {
                self.programs.insert(id, path);
            }
        }
        for (id, below) in gone {
            let path = self.mounts.known_path(user_dev(id.0), &below);
            self.programs.entry(id).or_insert(path);
        }
    }

    /// The series name of the entry's program ([`Names::learn_programs`] first).
    fn program(&mut self, key: &AggKey, value: &AggValue) -> String {
        let comm_len = value.comm.iter().position(|&c| c == 0).unwrap_or(value.comm.len());
        let comm = format!("comm:{}", escape_name(&value.comm[..comm_len]));
        if key.flags & key_flags::NO_PROGRAM != 0 {
            return comm;
        }
        if self.programs.len() >= MAX_PROGRAM_NAMES {
            self.programs.clear();
        }
        self.programs.entry((key.dev, key.ino, key.generation)).or_insert(comm).clone()
    }
}

/// Program names kept; past this the cache starts again (a program seen again is looked up
/// again).
const MAX_PROGRAM_NAMES: usize = 1 << 16;

/// The executable of process `pid`: its file's device and inode (as `stat` gives them) and
/// its path, escaped.
fn exe_of(pid: u32) -> Option<(u64, u64, String)> {
    let link = PathBuf::from(format!("/proc/{pid}/exe"));
    let meta = std::fs::metadata(&link).ok()?;
    let path = std::fs::read_link(&link).ok()?;
    Some((meta.dev(), meta.ino(), escape_name(path.as_os_str().as_encoded_bytes())))
}

/// A program path as the kernel read it.
#[derive(Debug, PartialEq, Eq)]
enum KernelPath {
    /// From its file system's root: `/usr/bin/dash` (the mount point goes in front).
    Whole(String),
    /// Its last names only, the walk cut before the root: `…/lib/gcc/x86_64/12/cc1`.
    Tail(String),
}

/// The path in `p` (names innermost first), escaped; None when the kernel read none.
fn kernel_path(p: &ProgramPath) -> Option<KernelPath> {
    let depth = (p.depth as usize).min(PATH_DEPTH);
    if depth == 0 {
        return None;
    }
    let mut path = String::new();
    for name in p.names[..depth].iter().rev() {
        let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        path.push('/');
        path.push_str(&escape_name(&name[..len]));
    }
    Some(if p.flags & path_flags::ROOT_REACHED != 0 { KernelPath::Whole(path) } else { KernelPath::Tail(format!("…{path}")) })
}

/// A kernel `dev_t` (`MKDEV`: major << 20 | minor) as `stat` gives it.
fn user_dev(kernel_dev: u32) -> u64 {
    libc::makedev(kernel_dev >> 20, kernel_dev & 0xf_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_devices_read_as_stat_gives_them() {
        // sda1 (8:1), and a minor number past 255 (an overlay's anonymous device 0:300).
        assert_eq!(user_dev(8 << 20 | 1), libc::makedev(8, 1));
        assert_eq!(user_dev(300), libc::makedev(0, 300));
        let me = std::fs::metadata("/proc/self/exe").unwrap();
        let (major, minor) = (libc::major(me.dev()), libc::minor(me.dev()));
        assert_eq!(user_dev(major << 20 | minor), me.dev());
    }

    fn path_of(names: &[&str], flags: u32) -> ProgramPath {
        let mut p = ProgramPath { depth: names.len() as u32, flags, names: [[0; profiler_common::aggregate::PATH_COMPONENT]; PATH_DEPTH] };
        for (slot, name) in p.names.iter_mut().zip(names) {
            slot[..name.len()].copy_from_slice(name.as_bytes());
        }
        p
    }

    #[test]
    fn kernel_paths_read_from_the_root_down() {
        assert_eq!(
            kernel_path(&path_of(&["dash", "bin", "usr"], path_flags::ROOT_REACHED)),
            Some(KernelPath::Whole("/usr/bin/dash".into()))
        );
        assert_eq!(
            kernel_path(&path_of(&["cc1", "12", "x86_64", "gcc", "lib", "usr"], 0)),
            Some(KernelPath::Tail("…/usr/lib/gcc/x86_64/12/cc1".into()))
        );
        assert_eq!(kernel_path(&path_of(&[], 0)), None);
        // A hostile name is escaped.
        assert_eq!(kernel_path(&path_of(&["a\x1b[2Jb"], path_flags::ROOT_REACHED)), Some(KernelPath::Whole("/a\\x1b[2Jb".into())));
    }

    #[test]
    fn cgroups_are_named_by_their_path_under_the_mount() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("system.slice/ssh.service")).unwrap();
        let mut names = Names::new(Some(dir.path().to_owned()));
        let ino = std::fs::metadata(dir.path().join("system.slice/ssh.service")).unwrap().ino();
        assert_eq!(names.cgroup(ino), "/system.slice/ssh.service");
        assert_eq!(names.cgroup(std::fs::metadata(dir.path()).unwrap().ino()), "/");
        assert!(!names.cgroup_gone(ino));
        assert_eq!(names.cgroup(1), "unknown_cgroup_id:1");
        // A cgroup made right after a walk is found at the next read, not a second later.
        std::fs::create_dir(dir.path().join("system.slice/web.scope")).unwrap();
        let web = std::fs::metadata(dir.path().join("system.slice/web.scope")).unwrap().ino();
        names.new_read();
        assert_eq!(names.cgroup(web), "/system.slice/web.scope");
        std::fs::remove_dir(dir.path().join("system.slice/ssh.service")).unwrap();
        names.walk();
        assert!(names.cgroup_gone(ino));
    }
}
