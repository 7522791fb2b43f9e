//! Running-system scopes (`--pid`, `--cgroup`, `--all`): checked before anything is attached,
//! told to the kernel side as globals, and seeded with the processes already running in them.
use std::{
    collections::{HashMap, HashSet},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::Result;
use profiler_common::scope as kernel_scope;

use crate::model::{failure::Failure, scope::Scope};

/// `statfs` magic of a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// A scope resolved for the kernel side: what its globals hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelScope {
    /// One of `profiler_common::scope`.
    pub kind: u64,
    /// `--cgroup`: the directory's cgroup id (inode number) and depth below the cgroup2 root.
    pub cgroup_id: u64,
    pub cgroup_level: u64,
    /// `--cgroup`: the directory itself, to seed from.
    pub cgroup_dir: Option<PathBuf>,
}

impl KernelScope {
    /// The launched-tree scope (the kernel side's default).
    pub(crate) fn tree() -> Self {
        Self { kind: kernel_scope::TREE, cgroup_id: 0, cgroup_level: 0, cgroup_dir: None }
    }
}

/// Checks `scope` and resolves it; a scope that cannot be used is a usage error that says why.
/// Returns the scope as the report names it (a cgroup by its path under the mount).
pub(crate) fn resolve(scope: &Scope) -> Result<(Scope, KernelScope)> {
    match scope {
        Scope::Launched => Ok((scope.clone(), KernelScope::tree())),
        Scope::All => Ok((scope.clone(), KernelScope { kind: kernel_scope::ALL, ..KernelScope::tree() })),
        Scope::Pids { pids } => {
            for &pid in pids {
                if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
                    return Err(Failure::usage(format!("--pid {pid}: no such process; check the id (`ps -p {pid}`)")).into());
                }
                if pid == std::process::id() {
                    return Err(Failure::usage(format!("--pid {pid} is execprof itself; give the id of the process to trace")).into());
                }
            }
            Ok((scope.clone(), KernelScope::tree()))
        }
        Scope::Cgroup { path } => {
            let mount = cgroup2_mount()?;
            let dir = cgroup_dir(&mount, Path::new(path))?;
            let rel = dir.strip_prefix(&mount).unwrap_or(Path::new(""));
            let level = rel.components().count() as u64;
            let id = std::fs::metadata(&dir).map_err(|e| Failure::usage(format!("--cgroup {}: {e}", dir.display())))?.ino();
            let shown = Scope::Cgroup { path: dir.display().to_string() };
            Ok((shown, KernelScope { kind: kernel_scope::CGROUP, cgroup_id: id, cgroup_level: level, cgroup_dir: Some(dir) }))
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on systemd machines).
pub(crate) fn cgroup2_mount() -> Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in info.lines() {
        // ... mount-point ... - fstype source options
        let mut halves = line.splitn(2, " - ");
        let (Some(left), Some(right)) = (halves.next(), halves.next()) else { continue };
        if right.split_whitespace().next() == Some("cgroup2")
            && let Some(point) = left.split_whitespace().nth(4)
        {
            return Ok(PathBuf::from(unescape_mount(point)));
        }
    }
    Err(Failure::usage(
        "--cgroup: this machine has no cgroup v2 hierarchy mounted (cgroup v1 only); --cgroup needs cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1), or trace the processes with --pid or --all",
    )
    .into())
}

/// mountinfo escapes space, tab, newline and backslash as octal.
pub(crate) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup directory `path` names: as given, or relative to the cgroup2 mount
/// (`system.slice/ssh.service`). It must be a directory of the cgroup2 file system.
fn cgroup_dir(mount: &Path, path: &Path) -> Result<PathBuf> {
    let candidates = [path.to_owned(), mount.join(path.strip_prefix("/").unwrap_or(path))];
    let Some(dir) = candidates.iter().find(|p| p.is_dir()) else {
        return Err(Failure::usage(format!(
            "--cgroup {}: no such cgroup directory (looked at {} and {}); list them with `ls {}` or `systemd-cgls`",
            path.display(),
            candidates[0].display(),
            candidates[1].display(),
            mount.display()
        ))
        .into());
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| Failure::usage("--cgroup: the path has a NUL byte"))?;
    // SAFETY: a valid C string and a zeroed statfs for the kernel to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 || st.f_type as u64 != CGROUP2_SUPER_MAGIC || !dir.starts_with(mount) {
        return Err(Failure::usage(format!(
            "--cgroup {}: not a cgroup v2 directory (the cgroup2 hierarchy is mounted at {}); give a directory under it",
            dir.display(),
            mount.display()
        ))
        .into());
    }
    Ok(dir)
}

/// Every process (tgid) of the machine with its parent, from `/proc/*/stat`.
fn parents() -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid …: comm may hold spaces and parentheses, so split after the last ')'.
        if let Some(ppid) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok()) {
            out.insert(pid, ppid);
        }
    }
    out
}

/// The processes to mark traced now, given those marked already: `--pid`'s processes and their
/// descendants, or the processes in `--cgroup`'s directory and below. Called after the kernel
/// side is attached and again until nothing new turns up, so a process forked by a seed just
/// before its parent was marked is not missed.
pub(crate) fn seeds(scope: &Scope, kernel: &KernelScope, marked: &HashSet<u32>) -> Vec<u32> {
    match scope {
        Scope::Pids { pids } => {
            let parents = parents();
            let mut found: Vec<u32> = pids.iter().copied().filter(|p| !marked.contains(p)).collect();
            let traced: HashSet<u32> = marked.iter().copied().chain(pids.iter().copied()).collect();
            for (&pid, ppid) in &parents {
                if !traced.contains(&pid) && has_traced_ancestor(pid, ppid, &parents, &traced) {
                    found.push(pid);
                }
            }
            found.sort_unstable();
            found.dedup();
            found
        }
        Scope::Cgroup { .. } => {
            let mut found = Vec::new();
            if let Some(dir) = &kernel.cgroup_dir {
                cgroup_procs(dir, &mut found);
            }
            found.retain(|p| !marked.contains(p) && *p != std::process::id());
            found.sort_unstable();
            found.dedup();
            found
        }
        Scope::Launched | Scope::All => Vec::new(),
    }
}

fn has_traced_ancestor(_pid: u32, ppid: &u32, parents: &HashMap<u32, u32>, traced: &HashSet<u32>) -> bool {
    let mut p = *ppid;
    // Bounded: a pid cycle cannot happen, but a racy /proc read should not loop forever.
    for _ in 0..4096 {
        if traced.contains(&p) {
            return true;
        }
        match parents.get(&p) {
            Some(&next) if next != p && p > 1 => p = next,
            _ => return false,
        }
    }
    false
}

/// The processes running when tracing began, by name, for the report's "who pays" tables:
/// every process (`--all`), or those marked traced and their ancestors (who started them).
/// Read after the kernel side is attached, so a process is either here or seen being born.
pub(crate) fn process_table(scope: &Scope, marked: &HashSet<u32>) -> Vec<crate::model::meta::ProcessName> {
    let parents = parents();
    let wanted: HashSet<u32> = match scope {
        Scope::Launched => return Vec::new(),
        Scope::All => parents.keys().copied().collect(),
        Scope::Pids { .. } | Scope::Cgroup { .. } => {
            let mut w = HashSet::new();
            for &pid in marked {
                let mut p = pid;
                // The process and its ancestors up to init (bounded against a racy /proc).
                for _ in 0..64 {
                    if !w.insert(p) {
                        break;
                    }
                    match parents.get(&p) {
                        Some(&next) if next != 0 && next != p => p = next,
                        _ => break,
                    }
                }
            }
            w
        }
    };
    let mut out: Vec<crate::model::meta::ProcessName> = wanted
        .into_iter()
        .filter_map(|tgid| {
            let ppid = *parents.get(&tgid)?;
            let exe = std::fs::read_link(format!("/proc/{tgid}/exe")).map(|p| p.into_os_string().into_encoded_bytes()).unwrap_or_default();
            let mut comm = std::fs::read(format!("/proc/{tgid}/comm")).unwrap_or_default();
            if comm.last() == Some(&b'\n') {
                comm.pop();
            }
            Some(crate::model::meta::ProcessName { tgid, ppid, exe, comm })
        })
        .collect();
    out.sort_by_key(|p| p.tgid);
    out
}

/// Traced processes running a 32-bit (ia32 or x32) program when tracing began: `--all`'s
/// every process, the marked ones of `--pid` and `--cgroup`, none of a launched tree (its
/// command is exec'd while traced). Told by their executable's ELF class.
pub(crate) fn running_32_bit(scope: &Scope, marked: &HashSet<u32>) -> u64 {
    let all;
    let pids: &HashSet<u32> = match scope {
        Scope::Launched => return 0,
        Scope::All => {
            all = parents().keys().copied().collect();
            &all
        }
        Scope::Pids { .. } | Scope::Cgroup { .. } => marked,
    };
    pids.iter().filter(|pid| elf_32_bit(Path::new(&format!("/proc/{pid}/exe")))).count() as u64
}

/// The file is an ELFCLASS32 executable (ia32, or x32: 32-bit class, x86_64 machine). A
/// kernel thread's missing `exe` is not.
fn elf_32_bit(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 5];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head[..4] == *b"\x7fELF" && head[4] == 1
}

/// The processes of a cgroup directory and of every directory below it.
fn cgroup_procs(dir: &Path, out: &mut Vec<u32>) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                cgroup_procs(&e.path(), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount(r"/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
    }

    #[test]
    fn bad_scopes_say_why() {
        let err = |s: Scope| resolve(&s).unwrap_err().to_string();
        assert!(err(Scope::Pids { pids: vec![u32::MAX - 1] }).contains("no such process"));
        assert!(err(Scope::Pids { pids: vec![std::process::id()] }).contains("execprof itself"));
        let e = err(Scope::Cgroup { path: "/no/such/cgroup".into() });
        assert!(e.contains("no such cgroup directory") || e.contains("cgroup v1 only"), "{e}");
        let e = err(Scope::Cgroup { path: "/tmp".into() });
        assert!(e.contains("not a cgroup v2 directory") || e.contains("cgroup v1 only"), "{e}");
    }

    /// This process's own descendants are found from /proc: a child of ours is a seed.
    #[test]
    fn pid_seeds_take_the_descendants() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id();
        let found = seeds(&Scope::Pids { pids: vec![me] }, &KernelScope::tree(), &HashSet::new());
        child.kill().ok();
        child.wait().ok();
        assert!(found.contains(&me) && found.contains(&child.id()), "{found:?}");
        let again = seeds(&Scope::Pids { pids: vec![me] }, &KernelScope::tree(), &found.iter().copied().collect());
        assert!(!again.contains(&me));
    }
}
