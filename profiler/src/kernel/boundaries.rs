//! Which hooks time exec attempts and fork-family calls: fentry/fexit on the syscalls' own
//! entry functions where the kernel has BPF trampolines (no syscall tracepoint attached: every
//! other syscall of every process runs no execprof program and keeps the fast path); where it
//! refuses them, the raw `sys_enter`/`sys_exit` tracepoints (a program at every syscall of
//! every process, the cheapest per traced call) or the per-syscall `syscalls:*` events (no
//! program for other syscalls, a dearer traced call, blind to 32-bit processes). All three
//! send the same records.
use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, ProgramError, TracePoint},
};
use profiler_common::names::{self, BOUNDARIES, Boundary, SYSCALL_EVENTS};

use crate::model::meta::Boundaries;

/// `--boundaries`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BoundaryRequest {
    /// fentry/fexit where the kernel allows them; otherwise the raw syscall tracepoints for a
    /// launched command (the least added to what is measured), the per-syscall events for a
    /// running-system scope (the least added to everyone else's syscalls, for hours).
    #[default]
    Auto,
    /// The raw syscall tracepoints, even where fentry/fexit would do.
    Tracepoints,
    /// The per-syscall `syscalls:sys_enter_*`/`sys_exit_*` events, or fail.
    SyscallEvents,
    /// fentry/fexit, or fail.
    Fentry,
}

/// The per-syscall events' programs on every `syscalls:sys_{enter,exit}_NAME` of
/// [`SYSCALL_EVENTS`] (needs a kernel built with `CONFIG_FTRACE_SYSCALLS` and tracefs). On
/// failure both programs are unloaded, which detaches what was attached.
pub(crate) fn attach_syscall_events(ebpf: &mut Ebpf) -> Result<()> {
    let result = (|| {
        for (program, side) in [(names::PROG_SYS_ENTER_EVENT, "enter"), (names::PROG_SYS_EXIT_EVENT, "exit")] {
            let p: &mut TracePoint =
                ebpf.program_mut(program).ok_or_else(|| anyhow!("program {program} missing from the eBPF object"))?.try_into()?;
            p.load().with_context(|| format!("loading {program}"))?;
            for name in SYSCALL_EVENTS {
                let event = format!("sys_{side}_{name}");
                p.attach("syscalls", &event).with_context(|| format!("attaching syscalls:{event}"))?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        for program in [names::PROG_SYS_ENTER_EVENT, names::PROG_SYS_EXIT_EVENT] {
            if let Some(p) = ebpf.program_mut(program).and_then(|p| <&mut TracePoint>::try_from(p).ok()) {
                let _ = p.unload();
            }
        }
    }
    result
}

/// fentry/fexit on every boundary function this kernel has. The 64-bit ABI's are required;
/// an ia32 or x32 one is left out only where the kernel has no such function at all (no
/// such emulation built in), never where it has one execprof cannot hook. On failure every
/// program attached so far is unloaded, so the tracepoints can take over alone.
pub(crate) fn attach_fentry(ebpf: &mut Ebpf) -> Result<()> {
    let btf = crate::kernel::vmlinux::aya()?;
    // Read only when a function has no BTF (an ABI the kernel may not have built in).
    let in_kernel =
        |f: &str| std::fs::read_to_string("/proc/kallsyms").is_ok_and(|k| k.lines().any(|l| l.split_whitespace().nth(2) == Some(f)));
    let mut loaded: Vec<&'static str> = Vec::new();
    let result = (|| {
        for b in BOUNDARIES {
            match attach_pair(ebpf, b, &btf, &mut loaded) {
                Ok(()) => {}
                Err(ProgramError::Btf(_)) if !b.native && !in_kernel(b.function) => {}
                Err(e) => bail!("{}: {e}", b.function),
            }
        }
        Ok(())
    })();
    if result.is_err() {
        for name in loaded {
            let Some(p) = ebpf.program_mut(name) else { continue };
            if let Ok(f) = <&mut FEntry>::try_from(&mut *p) {
                let _ = f.unload();
            } else if let Ok(f) = <&mut FExit>::try_from(p) {
                let _ = f.unload();
            }
        }
    }
    result
}

fn attach_pair(ebpf: &mut Ebpf, b: &Boundary, btf: &Btf, loaded: &mut Vec<&'static str>) -> std::result::Result<(), ProgramError> {
    let missing = || ProgramError::UnexpectedProgramType;
    {
        let p: &mut FEntry = ebpf.program_mut(b.entry).ok_or_else(missing)?.try_into()?;
        p.load(b.function, btf)?;
        loaded.push(b.entry);
        p.attach()?;
    }
    if !b.exit.is_empty() {
        let p: &mut FExit = ebpf.program_mut(b.exit).ok_or_else(missing)?.try_into()?;
        p.load(b.function, btf)?;
        loaded.push(b.exit);
        p.attach()?;
    }
    Ok(())
}

/// What `request` gets on this kernel (`attached_scope`: a running-system scope, not a
/// launched command): fentry/fexit, the per-syscall events, or the raw tracepoints (attached
/// by the caller with the other probes), and why fentry/fexit were not used, when they were
/// wanted.
pub(crate) fn choose(ebpf: &mut Ebpf, request: BoundaryRequest, attached_scope: bool) -> Result<(Boundaries, Option<String>)> {
    match request {
        BoundaryRequest::Tracepoints => Ok((Boundaries::RawTracepoints, None)),
        BoundaryRequest::SyscallEvents => {
            attach_syscall_events(ebpf).map_err(|e| {
                anyhow!(
                    "--boundaries syscall-events: the per-syscall events cannot time the calls here ({e:#}); use --boundaries tracepoint"
                )
            })?;
            Ok((Boundaries::SyscallEvents, None))
        }
        BoundaryRequest::Fentry => {
            attach_fentry(ebpf).map_err(|e| {
                anyhow!("--boundaries fentry: fentry/fexit cannot time the syscalls here ({e:#}); use --boundaries tracepoint")
            })?;
            Ok((Boundaries::Fentry, None))
        }
        BoundaryRequest::Auto => match attach_fentry(ebpf) {
            Ok(()) => Ok((Boundaries::Fentry, None)),
            Err(e) if attached_scope => match attach_syscall_events(ebpf) {
                Ok(()) => Ok((Boundaries::SyscallEvents, Some(format!("{e:#}")))),
                Err(events) => Ok((Boundaries::RawTracepoints, Some(format!("{e:#}; the per-syscall events too: {events:#}")))),
            },
            Err(e) => Ok((Boundaries::RawTracepoints, Some(format!("{e:#}")))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boundary functions are the target architecture's syscall wrappers (the prefix of
    /// its arch/*/include/asm/syscall_wrapper.h), each program is used once, and the 64-bit
    /// ABI's exec calls and the fork family are required.
    #[test]
    fn boundaries_name_this_architectures_syscall_functions() {
        let prefixes: &[&str] = if cfg!(target_arch = "aarch64") { &["__arm64_"] } else { &["__x64_", "__ia32_"] };
        for b in BOUNDARIES {
            assert!(b.function == "kernel_clone" || prefixes.iter().any(|p| b.function.starts_with(p)), "{b:?}");
        }
        let mut programs: Vec<&str> = BOUNDARIES.iter().flat_map(|b| [b.entry, b.exit]).filter(|p| !p.is_empty()).collect();
        let n = programs.len();
        programs.sort_unstable();
        programs.dedup();
        assert_eq!(programs.len(), n, "a program serves one function");
        let required: Vec<&str> = BOUNDARIES.iter().filter(|b| b.native).map(|b| b.entry).collect();
        assert_eq!(required, ["in_execve", "in_execveat", "in_kernel_clone"]);
        let compat = BOUNDARIES.iter().filter(|b| b.entry.starts_with("in_compat_")).count();
        assert_eq!(compat, 2, "execve and execveat of the compat ABI");
    }
}
