//! Starting the traced command: fork, hold the child on a pipe until the probes are attached
//! for its pid, then release it. An exec failure comes back as errno through a close-on-exec
//! pipe; if execprof dies first, or drops the child unreleased, the child sees EOF and exits
//! instead of running untraced.
//!
//! Fork before loading anything big: the child's first exec tears down the copy of its
//! parent's memory, inside the command's first exec attempt and on its CPU time. Forked after
//! the eBPF programs, the kernel's BTF and the ring buffer were loaded, that teardown cost the
//! chain's first exec ~1.5 M instructions under icount (`cargo xtask overhead`: the boundaries
//! alone measured 1.072× at 300 steps and 1.055× at 1,200, a fixed cost spread over the steps).
use std::{
    ffi::{CString, OsStr, OsString},
    os::unix::ffi::{OsStrExt as _, OsStringExt as _},
    path::{Path, PathBuf},
};

use anyhow::Result;

use crate::model::{failure::Failure, meta::ExitStatus, names::shell_quote};

/// A command resolved the way a shell would: the path to exec, argv and environment.
#[derive(Clone, Debug)]
pub struct Command {
    pub program: PathBuf,
    pub argv: Vec<OsString>,
    /// None: inherit execprof's environment.
    pub env: Option<Vec<(OsString, OsString)>>,
}

impl Command {
    /// Resolves `argv[0]` through `PATH` as a shell does (a name with '/' is used as is).
    pub fn resolve(argv: Vec<OsString>) -> Result<Self, Failure> {
        let name = argv.first().ok_or_else(|| Failure::usage("no command given"))?;
        let program = resolve_program(name, std::env::var_os("PATH").as_deref())?;
        Ok(Self { program, argv, env: None })
    }
}

fn resolve_program(name: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, Failure> {
    if name.as_bytes().contains(&b'/') {
        let p = PathBuf::from(name);
        // As a shell: 127 only when the file is not there, 126 with the reason otherwise
        // (a directory, a path through a non-directory, a symlink loop, a name too long).
        return match p.metadata() {
            Ok(m) if m.is_dir() => Err(Failure::not_executable(&p, "is a directory")),
            Ok(_) => Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure::not_found(name)),
            Err(e) => Err(Failure::not_executable(&p, &os_reason(&e))),
        };
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut unusable = None;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = dir.join(name);
        if let Ok(meta) = candidate.metadata() {
            if meta.is_file() && is_executable(&candidate) {
                return Ok(candidate);
            }
            let why = if meta.is_dir() { "is a directory" } else { "permission denied" };
            unusable.get_or_insert((candidate, why));
        }
    }
    match unusable {
        Some((p, why)) => Err(Failure::not_executable(&p, why)),
        None => Err(Failure::not_found(name)),
    }
}

/// The OS's reason without Rust's "(os error N)" suffix, lower-cased like a shell's.
fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_lowercase().chain(chars).collect())
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: valid C string.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// A forked child blocked before exec.
pub(crate) struct SuspendedChild {
    pid: libc::pid_t,
    release_fd: libc::c_int,
    status_fd: libc::c_int,
    program: PathBuf,
}

impl SuspendedChild {
    pub(crate) fn spawn(cmd: &Command) -> Result<Self> {
        // Everything the child touches is allocated before fork: after fork only
        // async-signal-safe calls are allowed.
        let program = cstring(cmd.program.as_os_str())?;
        let argv: Vec<CString> = cmd.argv.iter().map(|a| cstring(a)).collect::<Result<_>>()?;
        let envp: Vec<CString> = match &cmd.env {
            Some(env) => env
                .iter()
                .map(|(k, v)| {
                    let mut kv = k.clone().into_vec();
                    kv.push(b'=');
                    kv.extend_from_slice(v.as_bytes());
                    CString::new(kv).map_err(|_| anyhow::anyhow!("environment entry contains a NUL byte"))
                })
                .collect::<Result<_>>()?,
            None => std::env::vars_os()
                .filter_map(|(k, v)| {
                    let mut kv = k.into_vec();
                    kv.push(b'=');
                    kv.extend_from_slice(v.as_bytes());
                    CString::new(kv).ok()
                })
                .collect(),
        };
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());

        let (release_r, release_w) = pipe()?;
        let (status_r, status_w) = pipe()?;
        // SAFETY: plain getter.
        let parent = unsafe { libc::getpid() };
        // SAFETY: fork in a process whose other threads do not hold locks the child needs: the
        // child only calls async-signal-safe functions below.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).map_err(|e| anyhow::anyhow!("fork failed: {e}"));
        }
        if pid == 0 {
            // Child.
            unsafe {
                libc::close(release_w);
                libc::close(status_r);
                // Default dispositions and an empty mask for the command, as a shell gives it.
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                // If execprof dies (even by SIGKILL), the command dies too rather than running
                // on untraced; checked once more in case execprof died before the prctl.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(125);
                }
                let mut go = 0u8;
                let n = loop {
                    let n = libc::read(release_r, (&mut go as *mut u8).cast(), 1);
                    if n >= 0 || *libc::__errno_location() != libc::EINTR {
                        break n;
                    }
                };
                if n != 1 {
                    // execprof went away before attaching: never run untraced.
                    libc::_exit(125);
                }
                libc::close(release_r);
                libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(status_w, (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        unsafe {
            libc::close(release_r);
            libc::close(status_w);
        }
        Ok(Self { pid, release_fd: release_w, status_fd: status_r, program: cmd.program.clone() })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child exec. Returns once the exec has succeeded or failed.
    pub(crate) fn release(mut self) -> Result<RunningChild, (RunningChild, Failure)> {
        // Its fds and pid change hands here: no Drop (which would end the child). The name is
        // taken out first, so nothing is leaked.
        let program = std::mem::take(&mut self.program);
        let this = std::mem::ManuallyDrop::new(self);
        let running = RunningChild { pid: this.pid };
        let go = 1u8;
        // SAFETY: fds owned by this.
        unsafe {
            libc::write(this.release_fd, (&go as *const u8).cast(), 1);
            libc::close(this.release_fd);
        }
        let mut errno = 0i32;
        let n = loop {
            let n = unsafe { libc::read(this.status_fd, (&mut errno as *mut i32).cast(), 4) };
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        unsafe { libc::close(this.status_fd) };
        if n == 4 {
            let err = std::io::Error::from_raw_os_error(errno);
            let failure = match errno {
                // ENOENT for a file that is there: its interpreter or loader is missing.
                libc::ENOENT => match missing_interpreter(&program) {
                    Some(why) => Failure::missing_interpreter(&program, &why),
                    None => Failure::not_found(program.as_os_str()),
                },
                _ => Failure::not_executable(&program, &os_reason(&err)),
            };
            return Err((running, failure));
        }
        Ok(running)
    }
}

/// A child never released (the probes failed to attach, or a later step of the set-up did):
/// it reads EOF, exits without running the command, and is reaped.
impl Drop for SuspendedChild {
    fn drop(&mut self) {
        let mut status = 0;
        // SAFETY: fds and child owned by self; the child exits on EOF at once.
        unsafe {
            libc::close(self.release_fd);
            libc::close(self.status_fd);
            while libc::waitpid(self.pid, &mut status, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
        }
    }
}

/// Why exec said ENOENT ("No such file or directory") for a file that exists: a `#!` script
/// whose interpreter is missing, or an ELF program whose program interpreter (the dynamic
/// loader named in PT_INTERP) is. None when the file is not there or neither applies.
pub(crate) fn missing_interpreter(program: &Path) -> Option<String> {
    let bytes = std::fs::read(program).ok()?;
    let interpreter = if let Some(rest) = bytes.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next()?;
        let word = line.split(|b| b.is_ascii_whitespace()).find(|w| !w.is_empty())?;
        let path = PathBuf::from(OsStr::from_bytes(word));
        return (!path.exists()).then(|| format!("bad interpreter: {} does not exist", shell_quote(word)));
    } else {
        elf_interpreter(&bytes)?
    };
    (!Path::new(OsStr::from_bytes(&interpreter)).exists())
        .then(|| format!("its program interpreter (dynamic loader) {} does not exist", shell_quote(&interpreter)))
}

/// Which of `names` (files exec refused with ENOENT in a run) exist, and why they failed:
/// checked when the run ends, a relative name against execprof's own working directory (the
/// one the launched command started in).
pub(crate) fn missing_interpreters(names: &[Vec<u8>]) -> Vec<crate::model::meta::MissingInterpreter> {
    names
        .iter()
        .filter_map(|n| {
            let why = missing_interpreter(Path::new(OsStr::from_bytes(n)))?;
            Some(crate::model::meta::MissingInterpreter { file: n.clone(), why })
        })
        .collect()
}

/// The PT_INTERP path of a 32- or 64-bit little-endian ELF file.
fn elf_interpreter(b: &[u8]) -> Option<Vec<u8>> {
    if b.get(..4)? != b"\x7fELF" || *b.get(5)? != 1 {
        return None;
    }
    let wide = *b.get(4)? == 2;
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?) as usize);
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as usize);
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?) as usize);
    let (phoff, phentsize, phnum) =
        if wide { (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?) } else { (u32_at(0x1c)?, u16_at(0x2a)?, u16_at(0x2c)?) };
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != 3 {
            continue; // not PT_INTERP
        }
        let (offset, size) = if wide { (u64_at(ph + 8)?, u64_at(ph + 32)?) } else { (u32_at(ph + 4)?, u32_at(ph + 16)?) };
        let raw = b.get(offset..offset.checked_add(size)?)?;
        return Some(raw.split(|&c| c == 0).next()?.to_vec());
    }
    None
}

/// The command after release.
pub(crate) struct RunningChild {
    pid: libc::pid_t,
}

impl RunningChild {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// The command's status if it has ended (it is then reaped), without blocking.
    pub(crate) fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.wait_flags(libc::WNOHANG)
    }

    /// Waits for the command.
    pub(crate) fn wait_blocking(&mut self) -> Result<ExitStatus> {
        loop {
            if let Some(s) = self.wait_flags(0)? {
                return Ok(s);
            }
        }
    }

    fn wait_flags(&mut self, flags: i32) -> Result<Option<ExitStatus>> {
        let mut status = 0;
        // SAFETY: our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        if r == 0 {
            return Ok(None);
        }
        if r != self.pid {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                return Ok(None);
            }
            return Err(anyhow::anyhow!("waiting for the command failed: {err}"));
        }
        Ok(Some(if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        }))
    }
}

fn cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| anyhow::anyhow!("argument {s:?} contains a NUL byte"))
}

fn pipe() -> Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0; 2];
    // SAFETY: valid array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        anyhow::bail!("pipe2 failed: {}", std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// User and system CPU time of this process's reaped children so far, in ns
/// (`getrusage(RUSAGE_CHILDREN)`; their sum is the scheduler's exact runtime, the split
/// between them is tick-sampled).
pub(crate) fn children_cpu_ns() -> (u64, u64) {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_or_loader_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/nonexistent/interp -x\necho hi\n").unwrap();
        assert_eq!(missing_interpreter(&script).as_deref(), Some("bad interpreter: /nonexistent/interp does not exist"));
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(missing_interpreter(&script), None);
        // A dynamically linked program whose loader's name is changed to one that is missing.
        let mut elf = std::fs::read("/bin/true").unwrap();
        let loader = elf_interpreter(&elf).expect("/bin/true names its dynamic loader");
        assert!(Path::new(OsStr::from_bytes(&loader)).exists());
        let at = elf.windows(loader.len()).position(|w| w == loader.as_slice()).unwrap();
        *elf[at..at + loader.len()].last_mut().unwrap() = b'Q';
        let program = dir.path().join("prog");
        std::fs::write(&program, &elf).unwrap();
        let why = missing_interpreter(&program).expect("the changed loader is missing");
        assert!(why.starts_with("its program interpreter (dynamic loader) /") && why.ends_with("Q does not exist"), "{why}");
        assert_eq!(missing_interpreter(Path::new("/bin/true")), None);
        assert_eq!(missing_interpreter(&dir.path().join("absent")), None);
    }

    #[test]
    fn resolves_through_path_like_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let noexec = dir.path().join("data");
        std::fs::write(&noexec, "x").unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(resolve_program(OsStr::new("tool"), Some(&path)).unwrap(), exe);
        assert_eq!(resolve_program(OsStr::new("no-such-tool"), Some(&path)).unwrap_err().code, 127);
        assert_eq!(resolve_program(OsStr::new("data"), Some(&path)).unwrap_err().code, 126);
        assert_eq!(resolve_program(OsStr::new("/no/such/file"), Some(&path)).unwrap_err().code, 127);
        let in_dir = |p: &Path| resolve_program(p.as_os_str(), Some(&path)).unwrap_err();
        let e = in_dir(dir.path());
        assert_eq!((e.code, e.message.contains("is a directory")), (126, true), "{}", e.message);
        let e = in_dir(&noexec.join("x"));
        assert_eq!((e.code, e.message.contains("not a directory")), (126, true), "{}", e.message);
        let e = in_dir(&dir.path().join("n".repeat(300)));
        assert_eq!((e.code, e.message.contains("name too long")), (126, true), "{}", e.message);
        let l = dir.path().join("loop");
        std::os::unix::fs::symlink(&l, &l).unwrap();
        let e = in_dir(&l);
        assert_eq!((e.code, e.message.contains("symbolic links")), (126, true), "{}", e.message);
    }

    #[test]
    fn a_child_dropped_unreleased_never_runs_the_command_and_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("ran");
        let cmd = Command::resolve(vec!["/bin/sh".into(), "-c".into(), format!("touch {}", mark.display()).into()]).unwrap();
        let child = SuspendedChild::spawn(&cmd).unwrap();
        let pid = child.pid() as libc::pid_t;
        drop(child);
        // Reaped: no such child any more.
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) }, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ECHILD));
        assert!(!mark.exists(), "the command ran");
        // Released, the same command runs.
        let mut running = SuspendedChild::spawn(&cmd).unwrap().release().map_err(|(_, f)| f).unwrap();
        assert_eq!(running.wait_blocking().unwrap().shell_code(), 0);
        assert!(mark.exists());
    }

    #[test]
    fn shell_codes() {
        assert_eq!(ExitStatus::Code(3).shell_code(), 3);
        assert_eq!(ExitStatus::Signal(9).shell_code(), 137);
    }
}
