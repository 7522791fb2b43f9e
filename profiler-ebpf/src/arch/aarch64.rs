//! arm64: syscall numbers of the native (asm-generic) and compat (AArch32 EABI) ABIs, the
//! kernel's `struct pt_regs` offsets (arch/arm64/include/asm/ptrace.h), and the compat test
//! (`pstate`'s AArch32 bit). Both ABIs pass a call's arguments in x0.. (r0.. for AArch32), so
//! one register map serves both, and x0 holds the return value by `sys_exit`: the first
//! argument is read from `orig_x0`, which the kernel saves at every syscall entry.
use profiler_common::traced_syscall;

use crate::{maps, task::Kmem};

/// Native (asm-generic) syscall numbers: no `fork` or `vfork` (libc makes them `clone`).
mod native {
    pub const EXECVE: u64 = 221;
    pub const EXECVEAT: u64 = 281;
    pub const CLONE: u64 = 220;
    pub const CLONE3: u64 = 435;
}
/// AArch32 (EABI) numbers: what `sys_enter`/`sys_exit` report for a compat task. Its 221 or
/// 281 is another call (`fcntl64`, `socket`), never an exec.
mod compat {
    pub const EXECVE: u64 = 11;
    pub const EXECVEAT: u64 = 387;
    pub const FORK: u64 = 2;
    pub const CLONE: u64 = 120;
    pub const VFORK: u64 = 190;
    pub const CLONE3: u64 = 435;
}
/// Byte offsets in arm64 `struct pt_regs`: `regs[31]`, `sp`, `pc`, `pstate` (the user-visible
/// `user_pt_regs`), then `orig_x0` and the 32-bit `syscallno`.
const REGS_X1: u64 = 8;
const REGS_X2: u64 = 2 * 8;
const REGS_X4: u64 = 4 * 8;
const REGS_PSTATE: u64 = 33 * 8;
const REGS_ORIG_X0: u64 = 34 * 8;
const REGS_SYSCALLNO: u64 = 35 * 8;
/// `pstate`: the task runs AArch32 code (`PSR_MODE32_BIT`; `compat_user_mode()`).
const PSR_MODE32_BIT: u64 = 0x10;

/// No ABI here is counted without being timed.
#[inline(always)]
pub fn untimed_abi(_nr: u64) -> bool {
    false
}

#[inline(always)]
pub fn count_untimed(_nr: u64) {}

/// Whether `nr` is a traced syscall in either ABI: the first, cheapest filter, before the
/// task is looked at. Bit `n` of the mask is syscall `n` below 64.
#[inline(always)]
pub fn candidate(nr: u64) -> bool {
    const LOW: u64 = 1 << compat::EXECVE | 1 << compat::FORK;
    if nr < 64 {
        return LOW >> nr & 1 != 0;
    }
    matches!(nr, native::EXECVE | native::EXECVEAT | native::CLONE | native::CLONE3 | compat::EXECVEAT | compat::CLONE | compat::VFORK)
}

/// The traced syscalls: ours to record, and how. `compat`: the task is in the AArch32 ABI.
#[inline(always)]
pub fn classify(nr: u64, compat: bool) -> Option<u32> {
    Some(if compat {
        match nr {
            compat::EXECVE => traced_syscall::EXECVE,
            compat::EXECVEAT => traced_syscall::EXECVEAT,
            compat::CLONE => traced_syscall::CLONE,
            compat::CLONE3 => traced_syscall::CLONE3,
            compat::FORK => traced_syscall::FORK,
            compat::VFORK => traced_syscall::VFORK,
            _ => return None,
        }
    } else {
        match nr {
            native::EXECVE => traced_syscall::EXECVE,
            native::EXECVEAT => traced_syscall::EXECVEAT,
            native::CLONE => traced_syscall::CLONE,
            native::CLONE3 => traced_syscall::CLONE3,
            _ => return None,
        }
    })
}

/// [`classify`] at `sys_exit`. A successful exec into the other ABI returns with `syscallno`
/// still the caller's number (`start_thread_common` keeps it, 5.19+) but `pstate` already the
/// new image's, so its number is looked up in the other ABI: only for a return of 0 by a
/// thread inside a traced call (every other exit leaves that call's ABI as it was).
#[inline(always)]
pub fn classify_exit(nr: u64, compat: bool, ret: i64, pid: u32) -> Option<u32> {
    classify(nr, compat).or_else(|| {
        let exec = classify(nr, !compat).filter(|&s| s < traced_syscall::CLONE)?;
        (ret == 0 && maps::in_call(pid)).then_some(exec)
    })
}

/// Where a failed exec's arguments are: (name, dirfd, flags) registers, the same in both ABIs
/// (the first from `orig_x0`).
#[inline(always)]
pub fn arg_regs(syscall: u32, _compat: bool) -> (u64, u64, u64) {
    if syscall == traced_syscall::EXECVE { (REGS_ORIG_X0, 0, 0) } else { (REGS_X1, REGS_ORIG_X0, REGS_X4) }
}

/// Where an exec's `argv` is (both ABIs).
#[inline(always)]
pub fn argv_reg(syscall: u32, _compat: bool) -> u64 {
    if syscall == traced_syscall::EXECVE { REGS_X1 } else { REGS_X2 }
}

/// The syscall number in the thread's saved registers (`syscallno`, an `s32`: -1, no
/// syscall, becomes `u64::MAX`); None if unreadable.
#[inline(always)]
pub fn call_nr<M: Kmem>(regs: u64) -> Option<u64> {
    Some(i64::from(M::at::<i32>(regs, REGS_SYSCALLNO)) as u64)
}

/// The current call is in the AArch32 ABI: `pstate` says the task runs AArch32 code (the
/// kernel's own `compat_user_mode()`). An AArch64 task cannot make an AArch32 call or the
/// reverse, so this is the call's ABI, and after a successful exec the new image's, as
/// `TIF_32BIT` would say; unlike `thread_info.flags` it needs no BTF offset.
#[inline(always)]
pub fn in_compat_syscall<M: Kmem>(_current: u64, regs: u64) -> bool {
    M::at::<u64>(regs, REGS_PSTATE) & PSR_MODE32_BIT != 0
}

/// At `sched_process_exec`: the new image is 32-bit (AArch32).
#[inline(always)]
pub fn image_32_bit<M: Kmem>(current: u64, regs: u64) -> bool {
    in_compat_syscall::<M>(current, regs)
}
