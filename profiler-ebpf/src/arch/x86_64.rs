//! x86_64: syscall numbers of the 64-bit and ia32 ABIs, `struct pt_regs` offsets, and the
//! ia32 test (`TS_COMPAT`). x32 calls are counted, not timed.
use profiler_common::{counter, traced_syscall};

use crate::{
    maps,
    task::{self, Kmem},
};

/// x86_64 syscall numbers.
mod x64 {
    pub const EXECVE: u64 = 59;
    pub const EXECVEAT: u64 = 322;
    pub const CLONE: u64 = 56;
    pub const FORK: u64 = 57;
    pub const VFORK: u64 = 58;
    pub const CLONE3: u64 = 435;
}
/// ia32 syscall numbers: what `sys_enter`/`sys_exit` report for a compat task. Its 59 or 322
/// is another call (`oldolduname`, `timerfd_create`), never an exec.
mod ia32 {
    pub const EXECVE: u64 = 11;
    pub const EXECVEAT: u64 = 358;
    pub const FORK: u64 = 2;
    pub const CLONE: u64 = 120;
    pub const VFORK: u64 = 190;
    pub const CLONE3: u64 = 435;
}
/// Byte offsets in x86_64 `struct pt_regs` (a stable user-visible layout).
const REGS_BX: u64 = 5 * 8;
const REGS_R8: u64 = 9 * 8;
const REGS_CX: u64 = 11 * 8;
const REGS_DX: u64 = 12 * 8;
const REGS_SI: u64 = 13 * 8;
const REGS_DI: u64 = 14 * 8;
const REGS_ORIG_AX: u64 = 15 * 8;

/// The x32 ABI's calls carry this bit in their number (execve is 520 there, execveat 545; the
/// fork family keeps its x86_64 numbers).
const X32_SYSCALL_BIT: u64 = 0x4000_0000;

/// An x32 exec or fork-family call of a traced process (x32 is off in Debian's kernels unless
/// booted with `syscall.x32=y`): not timed, but counted, so the report says so and is marked
/// incomplete rather than silently short.
#[inline(always)]
pub fn count_x32(nr: u64) {
    if matches!(nr & !X32_SYSCALL_BIT, 520 | 545 | x64::CLONE | x64::FORK | x64::VFORK | x64::CLONE3)
        && maps::is_traced(task::current_ids().1)
    {
        maps::count(counter::X32_CALL_UNTRACED);
    }
}

/// `nr` is in an ABI execprof counts but does not time (x32).
#[inline(always)]
pub fn untimed_abi(nr: u64) -> bool {
    nr & X32_SYSCALL_BIT != 0
}

/// Counts a call of an untimed ABI ([`untimed_abi`]) when it is an exec or fork-family one.
#[inline(always)]
pub fn count_untimed(nr: u64) {
    count_x32(nr);
}

/// Whether `nr` is a traced syscall in either ABI: the first, cheapest filter, before the
/// task is looked at. Bit `n` of the mask is syscall `n` below 64.
#[inline(always)]
pub fn candidate(nr: u64) -> bool {
    const LOW: u64 = 1 << x64::EXECVE | 1 << x64::CLONE | 1 << x64::FORK | 1 << x64::VFORK | 1 << ia32::EXECVE | 1 << ia32::FORK;
    if nr < 64 {
        return LOW >> nr & 1 != 0;
    }
    matches!(nr, x64::EXECVEAT | x64::CLONE3 | ia32::EXECVEAT | ia32::CLONE | ia32::VFORK)
}

/// The traced syscalls: ours to record, and how. `compat`: the task is in the ia32 ABI.
#[inline(always)]
pub fn classify(nr: u64, compat: bool) -> Option<u32> {
    Some(if compat {
        match nr {
            ia32::EXECVE => traced_syscall::EXECVE,
            ia32::EXECVEAT => traced_syscall::EXECVEAT,
            ia32::CLONE => traced_syscall::CLONE,
            ia32::CLONE3 => traced_syscall::CLONE3,
            ia32::FORK => traced_syscall::FORK,
            ia32::VFORK => traced_syscall::VFORK,
            _ => return None,
        }
    } else {
        match nr {
            x64::EXECVE => traced_syscall::EXECVE,
            x64::EXECVEAT => traced_syscall::EXECVEAT,
            // The fork family is timed the same way (spawn cost next to exec cost).
            x64::CLONE => traced_syscall::CLONE,
            x64::CLONE3 => traced_syscall::CLONE3,
            x64::FORK => traced_syscall::FORK,
            x64::VFORK => traced_syscall::VFORK,
            _ => return None,
        }
    })
}

/// [`classify`] at `sys_exit`: after a successful exec the kernel has set `orig_ax` to
/// `execve` of the new image's ABI, and `TS_COMPAT` with it, so the two agree.
#[inline(always)]
pub fn classify_exit(nr: u64, compat: bool, _ret: i64, _pid: u32) -> Option<u32> {
    classify(nr, compat)
}

/// Where a failed exec's arguments are: (name, dirfd, flags) registers, per ABI.
#[inline(always)]
pub fn arg_regs(syscall: u32, compat: bool) -> (u64, u64, u64) {
    match (syscall == traced_syscall::EXECVE, compat) {
        (true, false) => (REGS_DI, 0, 0),
        (true, true) => (REGS_BX, 0, 0),
        (false, false) => (REGS_SI, REGS_DI, REGS_R8),
        (false, true) => (REGS_CX, REGS_BX, REGS_DI),
    }
}

/// Where an exec's `argv` is, per ABI.
#[inline(always)]
pub fn argv_reg(syscall: u32, compat: bool) -> u64 {
    match (syscall == traced_syscall::EXECVE, compat) {
        (true, false) => REGS_SI,
        (true, true) => REGS_CX,
        (false, _) => REGS_DX,
    }
}

/// The syscall number in the thread's saved registers (`orig_ax`); None if unreadable.
#[inline(always)]
pub fn call_nr<M: Kmem>(regs: u64) -> Option<u64> {
    Some(M::at(regs, REGS_ORIG_AX))
}

/// The current call is in the ia32 ABI: `TS_COMPAT` ([`task::in_compat_syscall`]; the
/// registers' `cs` would miss `int $0x80` from 64-bit code).
#[inline(always)]
pub fn in_compat_syscall<M: Kmem>(current: u64, _regs: u64) -> bool {
    task::in_compat_syscall::<M>(current)
}

/// At `sched_process_exec`: the new image is 32-bit (ia32: `TS_COMPAT`; x32: the x32 bit in
/// the number the kernel set for the first return).
#[inline(always)]
pub fn image_32_bit<M: Kmem>(current: u64, regs: u64) -> bool {
    M::at::<u64>(regs, REGS_ORIG_AX) & X32_SYSCALL_BIT != 0 || task::in_compat_syscall::<M>(current)
}
