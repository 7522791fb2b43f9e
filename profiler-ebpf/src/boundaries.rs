//! Exec attempt and fork-family call boundaries from fentry/fexit, where the kernel has BPF
//! trampolines: no syscall tracepoint is attached then, so every other syscall of every
//! process runs no execprof program and keeps the syscall fast path. The exec calls are timed
//! on their syscall functions (`__x64_sys_execve` and kin, the ia32 ones; on arm64
//! `__arm64_sys_execve` and the AArch32 `__arm64_compat_sys_execve`), each with its own
//! pair of programs with its syscall and ABI built in; the fork family on `kernel_clone`,
//! which all of its calls in both ABIs go through (the `fork`/`vfork` syscall functions have
//! no BTF in Debian's kernels), classified by the syscall number in the thread's registers as
//! at `sys_enter`. The records are the raw tracepoints' own ([`crate::syscalls`]).
use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use profiler_common::{
    kernel_features,
    traced_syscall::{CLONE, EXECVE, EXECVEAT},
};

use crate::{
    aggregate,
    arch::{self, candidate, classify},
    maps,
    syscalls::{on_enter, on_exit},
    task::{self, Btf, Kmem, Probe},
};

// The programs read the kernel's structures through the BTF-typed pointers they hold
// (`task::Btf`): the current task, and the syscall's `pt_regs` argument. Where the kernel has
// no `bpf_task_pt_regs` (before 5.15) they read neither: 5.10 has no typed current task, and
// its verifier refuses to read the argument (`struct pt_regs` is only declared in the
// syscall functions' BTF: "arg0 type FWD is not a struct"). The task's own saved registers,
// the same ones, are read then, and everything through the helper (`task::Probe`). The
// agent's calls start in `on_enter` too, which reads an execveat's AT_EXECVE_CHECK flag first.

#[inline(always)]
fn enter(ctx: &FEntryContext, syscall: u32, compat: bool) {
    let (pid, tgid) = task::current_ids();
    if !maps::current_is_traced(tgid) {
        return;
    }
    if task::has(kernel_features::TASK_PT_REGS) {
        on_enter::<Btf>(ctx.arg(0), syscall, compat, pid, tgid, task::current_btf());
    } else {
        on_enter::<Probe>(task::current_regs(), syscall, compat, pid, tgid, task::current());
    }
}

#[inline(always)]
fn exit(ctx: &FExitContext, syscall: u32, compat: bool) {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if task::has(kernel_features::TASK_PT_REGS) {
        exited::<Btf>(ctx.arg(0), syscall, compat, ctx.arg(1), now, (pid, tgid, task::current_btf()));
    } else {
        exited::<Probe>(task::current_regs(), syscall, compat, ctx.arg(1), now, (pid, tgid, task::current()));
    }
}

#[inline(always)]
fn exited<M: Kmem>(regs: u64, syscall: u32, compat: bool, ret: i64, now: u64, who: (u32, u32, u64)) {
    if aggregate::on() {
        aggregate::returned::<M>(regs, syscall, compat, ret, now, who);
    } else {
        on_exit::<M>(regs, syscall, compat, ret, now, who);
    }
}

/// The fork-family syscall the current thread is in, from its saved registers `regs`: (syscall,
/// compat). None for another caller of `kernel_clone` (a kernel thread starting a user one),
/// and for x32's calls, which are counted at entry (`at_entry`). Where the kernel has
/// `bpf_task_pt_regs`, `current` and `regs` are BTF-typed and read with plain loads (a helper
/// call each cost ~150 instructions, four of them per fork).
#[inline(always)]
fn fork_call<M: Kmem>(current: u64, regs: u64, at_entry: bool) -> Option<(u32, bool)> {
    let nr = arch::call_nr::<M>(regs)?;
    if arch::untimed_abi(nr) {
        if at_entry {
            arch::count_untimed(nr);
        }
        return None;
    }
    if !candidate(nr) {
        return None;
    }
    let compat = arch::in_compat_syscall::<M>(current, regs);
    let syscall = classify(nr, compat).filter(|&s| s >= CLONE)?;
    Some((syscall, compat))
}

/// `kernel_clone(args)`: the fork family's calls.
#[fentry]
pub fn in_kernel_clone(_ctx: FEntryContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::current_is_traced(tgid) {
        return 0;
    }
    if task::has(kernel_features::TASK_PT_REGS) {
        let current = task::current_btf();
        clone_entered::<Btf>(task::pt_regs_btf(current), (pid, tgid, current));
    } else {
        clone_entered::<Probe>(task::current_regs(), (pid, tgid, task::current()));
    }
    0
}

#[inline(always)]
fn clone_entered<M: Kmem>(regs: u64, (pid, tgid, current): (u32, u32, u64)) {
    if let Some((syscall, compat)) = fork_call::<M>(current, regs, true) {
        // The agent's start too, as for the exec calls ([`on_enter`]).
        on_enter::<M>(regs, syscall, compat, pid, tgid, current);
    }
}

/// Its return (`pid_t`: the child's id or -errno; only the parent returns from it).
#[fexit]
pub fn out_kernel_clone(ctx: FExitContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let ret: i32 = ctx.arg(1);
    if task::has(kernel_features::TASK_PT_REGS) {
        let current = task::current_btf();
        clone_exited::<Btf>(task::pt_regs_btf(current), i64::from(ret), now, (pid, tgid, current));
    } else {
        clone_exited::<Probe>(task::current_regs(), i64::from(ret), now, (pid, tgid, task::current()));
    }
    0
}

#[inline(always)]
fn clone_exited<M: Kmem>(regs: u64, ret: i64, now: u64, who: (u32, u32, u64)) {
    if let Some((syscall, compat)) = fork_call::<M>(who.2, regs, false) {
        exited::<M>(regs, syscall, compat, ret, now, who);
    }
}

macro_rules! boundaries {
    ($($fentry:ident, $fexit:ident => $syscall:expr, $compat:expr;)*) => {$(
        #[fentry]
        pub fn $fentry(ctx: FEntryContext) -> u32 {
            enter(&ctx, $syscall, $compat);
            0
        }
        #[fexit]
        pub fn $fexit(ctx: FExitContext) -> u32 {
            exit(&ctx, $syscall, $compat);
            0
        }
    )*};
}

// Names as in `profiler_common::names::BOUNDARIES`, which says which function each pair is for.
boundaries! {
    in_execve, out_execve => EXECVE, false;
    in_execveat, out_execveat => EXECVEAT, false;
    in_compat_execve, out_compat_execve => EXECVE, true;
    in_compat_execveat, out_compat_execveat => EXECVEAT, true;
}

/// x32's exec calls have their own functions: counted, not timed (as at `sys_enter`).
#[cfg(bpf_target_arch = "x86_64")]
#[fentry]
pub fn in_x32_execve(_ctx: FEntryContext) -> u32 {
    arch::count_x32(520);
    0
}

#[cfg(bpf_target_arch = "x86_64")]
#[fentry]
pub fn in_x32_execveat(_ctx: FEntryContext) -> u32 {
    arch::count_x32(545);
    0
}
