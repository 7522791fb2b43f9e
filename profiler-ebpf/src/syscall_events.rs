//! Exec attempt and fork-family call boundaries from the per-syscall `syscalls:sys_enter_*` /
//! `sys_exit_*` events (execve, execveat, clone, clone3, fork, vfork), for kernels that refuse
//! fentry/fexit: attaching them still puts every syscall on the slow path, but the kernel
//! filters the other syscalls by a bitmap in C and runs no execprof program for them, where
//! the raw `sys_enter`/`sys_exit` tracepoints run one at every syscall of every process. The
//! price is on the traced calls (perf's syscall path builds a record per hit) and on the ABIs
//! these events ignore: x86 drops ia32 and x32 calls from them, so a 32-bit program's calls
//! are never seen. That cannot be made up for here, only found and counted: a traced exec of
//! a 32-bit image is counted at `sched_process_exec` ([`count_non_native`]), and user space
//! adds the 32-bit processes that were running when tracing began. The records are the raw
//! tracepoints' own ([`crate::syscalls`]).
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use profiler_common::counter;

use crate::{
    arch::{self, classify},
    maps,
    syscalls::{on_enter, on_exit},
    task::{self, Btf, Probe},
};

/// Byte offsets in a `syscalls:*` event's record, after the 8 bytes of common fields.
const SYSCALL_NR: usize = 8;
const EXIT_RET: usize = 16;

/// `syscalls:sys_enter_{execve,execveat,clone,clone3,fork,vfork}`: only the 64-bit ABI's.
#[tracepoint]
pub fn sys_enter_event(ctx: TracePointContext) -> u32 {
    let Ok(nr) = (unsafe { ctx.read_at::<i32>(SYSCALL_NR) }) else { return 0 };
    let Some(syscall) = classify(nr as u64, false) else { return 0 };
    let (pid, tgid) = task::current_ids();
    if !maps::current_is_traced(tgid) {
        return 0;
    }
    if task::btf_loads() {
        let current = task::current_btf();
        on_enter::<Btf>(task::pt_regs_btf(current), syscall, false, pid, tgid, current);
    } else {
        on_enter::<Probe>(task::current_regs(), syscall, false, pid, tgid, task::current());
    }
    0
}

/// The matching `syscalls:sys_exit_*` events.
#[tracepoint]
pub fn sys_exit_event(ctx: TracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let Ok(nr) = (unsafe { ctx.read_at::<i32>(SYSCALL_NR) }) else { return 0 };
    let Some(syscall) = classify(nr as u64, false) else { return 0 };
    let Ok(ret) = (unsafe { ctx.read_at::<i64>(EXIT_RET) }) else { return 0 };
    if task::btf_loads() {
        let current = task::current_btf();
        on_exit::<Btf>(task::pt_regs_btf(current), syscall, false, ret, now, (pid, tgid, current));
    } else {
        on_exit::<Probe>(task::current_regs(), syscall, false, ret, now, (pid, tgid, task::current()));
    }
    0
}

/// At `sched_process_exec` of a traced process: the new image is 32-bit
/// ([`arch::image_32_bit`]). Counted whatever the boundaries; user space reports it as a loss
/// only where the syscall events timed the calls. Read with plain loads where
/// [`task::btf_loads`] (two `bpf_probe_read_kernel` calls cost a successful exec ~200
/// instructions under icount).
#[inline(always)]
pub fn count_non_native(current: u64) {
    let image_32_bit = if task::btf_loads() {
        let current = task::current_btf();
        arch::image_32_bit::<Btf>(current, task::pt_regs_btf(current))
    } else {
        arch::image_32_bit::<Probe>(current, task::current_regs())
    };
    if image_32_bit {
        maps::count(counter::NON_NATIVE_EXEC);
    }
}
