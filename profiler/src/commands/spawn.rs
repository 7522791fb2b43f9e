//! `execprof bench spawn`: Rich Felker's spawntime.c and Josh Triplett's spawnbench in one
//! command. A parent whose memory is shaped as asked (size, fragmented into alternating
//! read-only/read-write mappings, dirtied) spawns a tiny child repeatedly with each method;
//! the child's first act is to read the clock and leave it in shared memory, so the time
//! from just before the spawn call to the child's first instruction is measured, plus when
//! the spawn call returned in the parent and when the parent reaped the child.
use std::{
    ffi::CString,
    os::{fd::AsRawFd as _, unix::ffi::OsStrExt as _},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::{analysis::stats::Distribution, launch::workload::ChainWorkload};

/// How `bench spawn` starts its child (`--method`; JSON: kebab-case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// fork(), then execve in the child.
    ForkExec,
    /// vfork(), then execve in the child (the parent sleeps until the exec).
    VforkExec,
    /// glibc posix_spawn (clone(CLONE_VM|CLONE_VFORK) inside).
    PosixSpawn,
    /// clone(CLONE_VM|CLONE_VFORK) on a separate stack, then execve.
    CloneVfork,
}

impl Method {
    /// Every method, in the order results are listed.
    pub const ALL: [Method; 4] = [Method::ForkExec, Method::VforkExec, Method::PosixSpawn, Method::CloneVfork];

    /// The name the JSON and `--method` use.
    pub fn key(self) -> &'static str {
        match self {
            Method::ForkExec => "fork-exec",
            Method::VforkExec => "vfork-exec",
            Method::PosixSpawn => "posix-spawn",
            Method::CloneVfork => "clone-vfork",
        }
    }

    /// What the method does, for `--help`.
    pub fn about(self) -> &'static str {
        match self {
            Method::ForkExec => "fork(), then execve in the child",
            Method::VforkExec => "vfork(), then execve in the child (the parent sleeps until the exec)",
            Method::PosixSpawn => "glibc posix_spawn (clone(CLONE_VM|CLONE_VFORK) inside)",
            Method::CloneVfork => "clone(CLONE_VM|CLONE_VFORK) on a separate stack, then execve",
        }
    }

    /// Human-readable name for the results table (`fork+exec`).
    pub fn label(self) -> &'static str {
        match self {
            Method::ForkExec => "fork+exec",
            Method::VforkExec => "vfork+exec",
            Method::PosixSpawn => "posix_spawn",
            Method::CloneVfork => "clone(VM|VFORK)+exec",
        }
    }
}

/// The parent's memory before it spawns (spawntime.c's -n, -r, -d).
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize)]
pub struct MemoryShape {
    /// Bytes of extra memory mapped in the parent.
    pub bytes: u64,
    /// Mapped as alternating read-only/read-write pages, one mapping each.
    pub fragment: bool,
    /// The writable pages touched, so the memory is really there.
    pub dirty: bool,
}

/// One spawn method's timings over the iterations, in ns per spawn.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct MethodResult {
    /// The method.
    pub method: Method,
    /// Spawn call start → the child's first instruction.
    pub child_start_ns: Distribution,
    /// Spawn call start → the spawn call returned in the parent.
    pub call_return_ns: Distribution,
    /// Spawn call start → the parent reaped the exited child.
    pub reaped_ns: Distribution,
    /// Each spawn call's (start, return) on CLOCK_MONOTONIC, to match kernel records.
    #[serde(skip)]
    pub calls: Vec<(u64, u64)>,
}

/// The results of one `bench spawn`.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SpawnReport {
    /// The parent's memory shape.
    pub shape: MemoryShape,
    /// Spawns per method.
    pub iterations: u32,
    /// One result per method run, in the order asked.
    pub results: Vec<MethodResult>,
}

/// Memory kept mapped for the parent's lifetime, shaped like spawntime.c's `bloat_up`.
struct Bloat {
    maps: Vec<(usize, usize)>,
}

impl Drop for Bloat {
    fn drop(&mut self) {
        for &(p, len) in &self.maps {
            // SAFETY: our own mappings.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }
}

fn page_size() -> usize {
    // SAFETY: plain getter.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn bloat(shape: MemoryShape) -> Result<Bloat> {
    let pg = page_size();
    let mut maps = Vec::new();
    let map = |len: usize, prot: libc::c_int| -> Result<usize> {
        // SAFETY: anonymous private mapping.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            bail!("mmap of {len} bytes failed: {}", std::io::Error::last_os_error());
        }
        Ok(p as usize)
    };
    if shape.bytes == 0 {
        return Ok(Bloat { maps });
    }
    if shape.fragment {
        let pages = (shape.bytes as usize) / pg;
        let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<usize>().ok()).unwrap_or(65530);
        if pages + 1000 > max {
            bail!(
                "--fragment makes one mapping per page: {pages} pages exceed vm.max_map_count ({max}); use --mem {} or less, or raise vm.max_map_count",
                (max - 1000) * pg
            );
        }
        for i in 0..pages {
            let rw = i % 2 == 1;
            let p = map(pg, libc::PROT_READ | if rw { libc::PROT_WRITE } else { 0 })?;
            if shape.dirty && rw {
                // SAFETY: a writable page we just mapped.
                unsafe { *(p as *mut u8) = 42 };
            }
            maps.push((p, pg));
        }
    } else {
        let len = shape.bytes as usize;
        let p = map(len, libc::PROT_READ | libc::PROT_WRITE)?;
        if shape.dirty {
            // SAFETY: our writable mapping of `len` bytes.
            unsafe { std::ptr::write_bytes(p as *mut u8, 42, len) };
        }
        maps.push((p, len));
    }
    Ok(Bloat { maps })
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the child gets: program, argv, envp as C arrays, and the shared file's fd.
struct ChildSpec {
    _strings: Vec<CString>,
    program: *const libc::c_char,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    shared_fd: libc::c_int,
}

/// vfork + execve without running any Rust code in the child: the child shares the parent's
/// stack until it execs, so everything it does is in this one asm block (dup2, execve,
/// exit_group), with no stack use.
#[cfg(target_arch = "x86_64")]
unsafe fn vfork_exec(spec: &ChildSpec) -> i64 {
    let ret: i64;
    unsafe {
        std::arch::asm!(
            "mov eax, 58",
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov eax, 33",
            "mov rdi, r12",
            "mov esi, 3",
            "syscall",
            "mov eax, 59",
            "mov rdi, r13",
            "mov rsi, r14",
            "mov rdx, r15",
            "syscall",
            "mov eax, 231",
            "mov edi, 127",
            "syscall",
            "2:",
            in("r12") spec.shared_fd as i64,
            in("r13") spec.program,
            in("r14") spec.argv.as_ptr(),
            in("r15") spec.envp.as_ptr(),
            lateout("rax") ret,
            lateout("rcx") _,
            lateout("r11") _,
            lateout("rdi") _,
            lateout("rsi") _,
            lateout("rdx") _,
            options(nostack),
        );
    }
    ret
}

/// arm64's vfork: it has no `vfork` syscall, so `clone(CLONE_VM | CLONE_VFORK | SIGCHLD)`
/// with no new stack (what libc's vfork does there); then, as on x86_64, the child does
/// everything in this one asm block (dup3, execve, exit_group) with no stack use. x9..x12
/// survive the syscalls (the kernel preserves every register but x0).
#[cfg(target_arch = "aarch64")]
unsafe fn vfork_exec(spec: &ChildSpec) -> i64 {
    let ret: i64;
    unsafe {
        std::arch::asm!(
            "mov x8, #220",
            "mov x0, #0x4111",
            "mov x1, #0",
            "mov x2, #0",
            "mov x3, #0",
            "mov x4, #0",
            "svc #0",
            "cbnz x0, 2f",
            "mov x8, #24",
            "mov x0, x9",
            "mov x1, #3",
            "mov x2, #0",
            "svc #0",
            "mov x8, #221",
            "mov x0, x10",
            "mov x1, x11",
            "mov x2, x12",
            "svc #0",
            "mov x8, #94",
            "mov x0, #127",
            "svc #0",
            "2:",
            in("x9") spec.shared_fd as i64,
            in("x10") spec.program,
            in("x11") spec.argv.as_ptr(),
            in("x12") spec.envp.as_ptr(),
            lateout("x0") ret,
            lateout("x1") _,
            lateout("x2") _,
            lateout("x3") _,
            lateout("x4") _,
            lateout("x8") _,
            options(nostack),
        );
    }
    ret
}

extern "C" fn clone_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the ChildSpec the parent keeps alive until the child has exec'd
    // (CLONE_VFORK); only async-signal-safe calls follow.
    unsafe {
        let spec = &*(arg as *const ChildSpec);
        libc::dup2(spec.shared_fd, 3);
        libc::execve(spec.program, spec.argv.as_ptr(), spec.envp.as_ptr());
        libc::_exit(127)
    }
}

/// Spawns once; returns the pid.
fn spawn(method: Method, spec: &ChildSpec, clone_stack: &mut [u8]) -> Result<libc::pid_t> {
    // SAFETY (all arms): the child only runs async-signal-safe code before execve.
    let pid = unsafe {
        match method {
            Method::ForkExec => {
                let pid = libc::fork();
                if pid == 0 {
                    libc::dup2(spec.shared_fd, 3);
                    libc::execve(spec.program, spec.argv.as_ptr(), spec.envp.as_ptr());
                    libc::_exit(127);
                }
                pid
            }
            Method::VforkExec => vfork_exec(spec) as libc::pid_t,
            Method::PosixSpawn => {
                let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
                libc::posix_spawn_file_actions_init(&mut actions);
                libc::posix_spawn_file_actions_adddup2(&mut actions, spec.shared_fd, 3);
                let mut pid = 0;
                let r = libc::posix_spawn(
                    &mut pid,
                    spec.program,
                    &actions,
                    std::ptr::null(),
                    spec.argv.as_ptr() as *const *mut _,
                    spec.envp.as_ptr() as *const *mut _,
                );
                libc::posix_spawn_file_actions_destroy(&mut actions);
                if r != 0 {
                    bail!("posix_spawn failed: {}", std::io::Error::from_raw_os_error(r));
                }
                pid
            }
            Method::CloneVfork => {
                let top = clone_stack.as_mut_ptr().add(clone_stack.len() & !15);
                libc::clone(
                    clone_child,
                    top as *mut libc::c_void,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    spec as *const ChildSpec as *mut libc::c_void,
                )
            }
        }
    };
    if pid < 0 {
        bail!("{} failed: {}", method.label(), std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// Times each of `methods` `iterations` times from a parent shaped as `shape`, spawning the
/// chain's program (`child`) as the tiny child.
pub fn run(methods: &[Method], shape: MemoryShape, iterations: u32, child: &ChainWorkload) -> Result<SpawnReport> {
    // The shared page the child stamps (spawntime.c uses a tmpfile on fd 3).
    // SAFETY: memfd_create with a valid name (the raw call: glibc's wrapper is 2.27's, above
    // the portable builds' floor).
    let memfd = unsafe { libc::syscall(libc::SYS_memfd_create, c"execprof-spawn".as_ptr(), libc::MFD_CLOEXEC) } as libc::c_int;
    if memfd < 0 {
        bail!("memfd_create failed: {}", std::io::Error::last_os_error());
    }
    // Keep it off fd 3 so the child's dup2 always clears close-on-exec there.
    // SAFETY: valid fd.
    let shared = unsafe { libc::fcntl(memfd, libc::F_DUPFD_CLOEXEC, 10) };
    unsafe { libc::close(memfd) };
    let shared_file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(shared) };
    shared_file.set_len(16).context("sizing the shared page")?;

    let program = CString::new(child.program().as_os_str().as_bytes())?;
    let strings = vec![program.clone(), CString::new("execprof-chain")?, CString::new("stamp")?];
    let spec = ChildSpec {
        program: strings[0].as_ptr(),
        argv: vec![strings[1].as_ptr(), strings[2].as_ptr(), std::ptr::null()],
        envp: vec![std::ptr::null()],
        shared_fd: shared_file.as_raw_fd(),
        _strings: strings,
    };
    let _bloat = bloat(shape)?;
    let mut stack = vec![0u8; 64 << 10];
    let mut results = Vec::new();
    for &method in methods {
        let (mut start, mut ret, mut reaped, mut calls) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iterations {
            let zero = [0u8; 16];
            std::os::unix::fs::FileExt::write_all_at(&shared_file, &zero, 0)?;
            let t0 = now_ns();
            let pid = spawn(method, &spec, &mut stack)?;
            let t_ret = now_ns();
            let mut status = 0;
            // SAFETY: our child.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    bail!("waitpid failed: {}", std::io::Error::last_os_error());
                }
            }
            let t_reaped = now_ns();
            if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
                bail!("{}: the child failed (wait status {status:#x}); is {} executable?", method.label(), child.program().display());
            }
            let mut buf = [0u8; 16];
            std::os::unix::fs::FileExt::read_exact_at(&shared_file, &mut buf, 0)?;
            let sec = i64::from_ne_bytes(buf[..8].try_into().expect("8 bytes"));
            let nsec = i64::from_ne_bytes(buf[8..].try_into().expect("8 bytes"));
            if sec == 0 && nsec == 0 {
                bail!("{}: the child never stamped the shared page", method.label());
            }
            let child_ns = sec as u64 * 1_000_000_000 + nsec as u64;
            start.push(child_ns.saturating_sub(t0));
            ret.push(t_ret - t0);
            reaped.push(t_reaped - t0);
            calls.push((t0, t_ret));
        }
        let d = |v| Distribution::of(v).expect("iterations > 0");
        results.push(MethodResult { method, child_start_ns: d(start), call_return_ns: d(ret), reaped_ns: d(reaped), calls });
    }
    Ok(SpawnReport { shape, iterations, results })
}

/// The results as the terminal shows them; `traced`: the spawn syscalls were traced meanwhile
/// (the heading says so).
pub fn render(r: &SpawnReport, traced: bool) -> String {
    use std::fmt::Write as _;

    use crate::report::human_ns;
    let mut o = String::new();
    let s = r.shape;
    let _ = writeln!(
        o,
        "execprof bench spawn ({}): parent memory {} bytes{}{}; {} spawns per method",
        if traced { "spawn syscalls traced" } else { "untraced" },
        s.bytes,
        if s.fragment { ", fragmented (alternating ro/rw pages)" } else { "" },
        if s.dirty { ", dirty" } else { "" },
        r.iterations
    );
    let _ = writeln!(
        o,
        "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "method", "start p50", "start p90", "start mean", "start max", "returned p50", "reaped p50"
    );
    for m in &r.results {
        let c = &m.child_start_ns;
        let _ = writeln!(
            o,
            "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
            m.method.label(),
            human_ns(c.p50_ns as f64),
            human_ns(c.p90_ns as f64),
            human_ns(c.mean_ns),
            human_ns(c.max_ns as f64),
            human_ns(m.call_return_ns.p50_ns as f64),
            human_ns(m.reaped_ns.p50_ns as f64)
        );
    }
    let _ = writeln!(
        o,
        "  start: spawn call → the child's first instruction (its clock read); returned: → the call returned in the parent; reaped: → waitpid returned"
    );
    o
}

#[cfg(test)]
mod tests {
    use super::Method;

    #[test]
    fn method_keys_are_the_names_the_json_uses() {
        for m in Method::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), serde_json::json!(m.key()));
        }
    }
}
