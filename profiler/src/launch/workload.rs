//! The built-in exec-chain workload: Linus's benchmark, re-executing itself N times, each step
//! searching a PATH whose first `misses` directories do not hold it (one ENOENT each).
//! The executable (a ~9 KB static program without libc start-up, built by build.rs) is
//! embedded in execprof and unpacked into a private temporary directory per run.
use std::{ffi::OsString, os::unix::fs::PermissionsExt as _, path::PathBuf};

use anyhow::{Context as _, Result};

use crate::{launch::child::Command, model::chain::ChainSpec};

static CHAIN_EXE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/execprof-chain"));
pub(crate) const CHAIN_NAME: &str = "execprof-chain";
/// The chain's switch for the user-space lookup before each exec (`first` or `exec`).
pub(crate) const LOOKUP_VAR: &str = "EXECPROF_CHAIN_LOOKUP";

/// The filesystem under `path` when it is one that drops a missing name's dentry at once
/// (tmpfs, ramfs: `always_delete_dentry`), so that no lookup of a missing name is cached.
pub(crate) fn keeps_no_negative_dentries(path: &std::path::Path) -> Option<&'static str> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a statfs buffer of the right type.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    match st.f_type {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

/// `execprof-chain.PID.XXXXXX` under the temporary directory.
const DIR_PREFIX: &str = "execprof-chain.";

/// Removes the chain directories that an execprof killed before it could clean up left in
/// `tmp`: those named with a pid that is no longer running and owned by this user.
fn remove_stale(tmp: &std::path::Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    // SAFETY: plain getter.
    let uid = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) =
            name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)).and_then(|r| r.split_once('.')).and_then(|(p, _)| p.parse::<i32>().ok())
        else {
            continue;
        };
        let owned_dir = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if owned_dir && pid != std::process::id() as i32 && !running(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether a process with this pid exists (EPERM: it does, someone else's).
fn running(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The unpacked workload; the directory is removed when this is dropped.
pub struct ChainWorkload {
    dir: tempfile::TempDir,
    pub spec: ChainSpec,
}

impl ChainWorkload {
    pub fn prepare(spec: ChainSpec) -> Result<Self> {
        remove_stale(&std::env::temp_dir());
        // The owner's pid in the name: a later run can tell a directory whose execprof was
        // killed (SIGKILL skips every drop) from one in use.
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{}.", std::process::id()))
            .tempdir()
            .context("creating a temporary directory for the built-in workload")?;
        if let Some(fs) = keeps_no_negative_dentries(dir.path()) {
            eprintln!(
                "execprof: warning: the chain's PATH directories are on {fs} ({}), which keeps no negative dentries: every failed lookup allocates and frees a dentry (__lookup_slow), unlike PATH directories on a disk filesystem; set TMPDIR to a directory on ext4/xfs/btrfs to measure what the seeds measured",
                dir.path().display()
            );
        }
        for i in 1..=spec.misses_per_step() {
            std::fs::create_dir(dir.path().join(format!("miss{i}")))?;
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin)?;
        let exe = bin.join(CHAIN_NAME);
        std::fs::write(&exe, CHAIN_EXE).with_context(|| format!("writing {}", exe.display()))?;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self { dir, spec })
    }

    pub fn program(&self) -> PathBuf {
        self.dir.path().join("bin").join(CHAIN_NAME)
    }

    /// The temporary directory (removed on drop; exit paths that skip drops remove it).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The PATH the chain searches: the empty miss directories, then its own.
    pub fn path_var(&self) -> OsString {
        let mut dirs: Vec<PathBuf> = (1..=self.spec.misses_per_step()).map(|i| self.dir.path().join(format!("miss{i}"))).collect();
        dirs.push(self.dir.path().join("bin"));
        std::env::join_paths(dirs).expect("temporary paths contain no ':'")
    }

    /// Launched by absolute path with argv[0] a bare name, so every step after the launch
    /// does the PATH search (`execvpe` semantics), with PATH as the whole environment
    /// (`env -i PATH=... t N`, as in the published runs).
    pub fn command(&self) -> Command {
        let s = &self.spec;
        // argv[0] with a '/' makes the chain execve it directly; a bare name makes it search PATH.
        let argv0: OsString = if s.direct { self.program().into() } else { CHAIN_NAME.into() };
        let mut argv = vec![argv0, s.steps.to_string().into()];
        argv.extend((0..s.args).map(|_| OsString::from("a".repeat(s.arg_size as usize))));
        let mut env: Vec<(OsString, OsString)> = (1..=s.env_vars)
            .map(|i| {
                let value = if s.env_size == 0 { i.to_string() } else { "v".repeat(s.env_size as usize) };
                (format!("x{i}").into(), value.into())
            })
            .collect();
        if let Some(first) = s.lookup_first {
            env.push((LOOKUP_VAR.into(), if first { "first" } else { "exec" }.into()));
        }
        env.push(("PATH".into(), self.path_var()));
        Command { program: self.program(), argv, env: Some(env) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystems_without_negative_dentries_are_recognised() {
        assert_eq!(keeps_no_negative_dentries(std::path::Path::new("/proc")), None, "procfs");
        // Every tmpfs mount /proc/mounts lists is recognised as such.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        for line in mounts.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() > 2 && fields[2] == "tmpfs" && !fields[1].contains('\\') {
                assert_eq!(keeps_no_negative_dentries(std::path::Path::new(fields[1])), Some("tmpfs"), "{line}");
            }
        }
    }
}
