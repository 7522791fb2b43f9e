//! Exec attempt (and fork-family call) boundaries from the raw `sys_enter`/`sys_exit`
//! tracepoints. The per-syscall `syscalls:sys_*_execve` tracepoints go through perf's syscall
//! path (a record built per hit): measured here, that alone cost the exec chain ~6% of its
//! time; a raw tracepoint runs the program directly. Other syscalls are dropped first:
//! `sys_enter` by its syscall-number argument, `sys_exit` by the traced flag (cheaper than
//! reading the number from the registers; `benches/othercost.sh`).
//!
//! Enter and exit each send a record and keep nothing in between (user space joins them per
//! thread): measured with `kernel.bpf_stats_enabled`, remembering the attempt in a hash map
//! cost ~300 ns of the ~1 µs the two programs took per attempt.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user_buf, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use profiler_common::{
    RecordHeader, SyscallEnterRecord, SyscallExitRecord, WireRecord, counter, limits::FILENAME_CAP, record_flags, traced_syscall,
};

use crate::{maps, task};

/// x86_64 syscall numbers.
const NR_EXECVE: u64 = 59;
const NR_EXECVEAT: u64 = 322;
const NR_CLONE: u64 = 56;
const NR_FORK: u64 = 57;
const NR_VFORK: u64 = 58;
const NR_CLONE3: u64 = 435;
/// Byte offsets in x86_64 `struct pt_regs` (a stable user-visible layout).
const REGS_SI: u64 = 13 * 8;
const REGS_DI: u64 = 14 * 8;
const REGS_ORIG_AX: u64 = 15 * 8;

/// The traced syscalls: ours to record, and how.
#[inline(always)]
fn classify(nr: u64) -> Option<u32> {
    Some(match nr {
        NR_EXECVE => traced_syscall::EXECVE,
        NR_EXECVEAT => traced_syscall::EXECVEAT,
        // The fork family is timed the same way (spawn cost next to exec cost).
        NR_CLONE => traced_syscall::CLONE,
        NR_CLONE3 => traced_syscall::CLONE3,
        NR_FORK => traced_syscall::FORK,
        NR_VFORK => traced_syscall::VFORK,
        _ => return None,
    })
}

/// `sys_enter(regs, id)`.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> u32 {
    let Some(syscall) = classify(ctx.arg(1)) else {
        return 0;
    };
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let (min_flt, maj_flt, flags) = match task::faults(task::current()) {
        Some((min, maj)) => (min, maj, 0),
        None => (0, 0, record_flags::FAULTS_UNAVAILABLE),
    };
    maps::set_in_call(pid, true);
    // The clock last: the probe's own work above stays outside the attempt.
    let header = RecordHeader {
        kind: SyscallEnterRecord::KIND,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid,
        tgid,
    };
    let rec = SyscallEnterRecord { header, min_flt, maj_flt, syscall, flags };
    maps::send(&rec);
    0
}

/// `sys_exit(regs, ret)`. `orig_ax` still holds the syscall number after a successful exec.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    // The traced check first: for every other process in the system it is cheaper than
    // reading the syscall number out of the registers.
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let regs: u64 = ctx.arg(0);
    let nr: u64 = unsafe { bpf_probe_read_kernel((regs + REGS_ORIG_AX) as *const u64) }.unwrap_or(u64::MAX);
    let Some(syscall) = classify(nr) else {
        return 0;
    };
    // First thing past the filter: the probe's own work below stays outside the attempt.
    let now = unsafe { bpf_ktime_get_ns() };
    let ret: i64 = ctx.arg(1);
    let exec = syscall < traced_syscall::CLONE;
    if !exec && ret == 0 {
        // A new child leaving clone/fork: it never entered the syscall.
        return 0;
    }
    maps::set_in_call(pid, false);
    let Some(mut entry) = maps::EVENTS.reserve::<SyscallExitRecord>(0) else {
        maps::count(counter::RING_FULL);
        return 0;
    };
    // SAFETY: the reservation is ours and sized for one SyscallExitRecord; every field the user
    // side reads is written below (the name bytes past `filename_len` are not read).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = RecordHeader { kind: SyscallExitRecord::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns: now, pid, tgid };
    rec.ret = ret;
    rec.syscall = syscall;
    rec._reserved = 0;
    (rec.min_flt, rec.maj_flt, rec.flags) = match task::faults(task::current()) {
        Some((min, maj)) => (min, maj, 0),
        None => (0, 0, record_flags::FAULTS_UNAVAILABLE),
    };
    rec.filename_len = 0;
    // A failed exec leaves the caller's memory, and its name argument, as it was: execve's
    // name is in rdi, execveat's in rsi. A successful one's name comes from the kernel's copy.
    if exec && ret != 0 {
        let reg = if syscall == traced_syscall::EXECVE { REGS_DI } else { REGS_SI };
        let ptr = unsafe { bpf_probe_read_kernel((regs + reg) as *const u64) }.unwrap_or(0);
        read_user_filename(ptr, rec);
        rec.flags |= task::kill_flags(task::current());
    }
    entry.submit(maps::NO_WAKEUP);
    0
}

#[inline(always)]
fn read_user_filename(user_ptr: u64, rec: &mut SyscallExitRecord) {
    let n = unsafe { generated::bpf_probe_read_user_str(rec.filename.as_mut_ptr().cast(), FILENAME_CAP as u32, user_ptr as *const _) };
    if n <= 0 {
        rec.flags |= record_flags::FILENAME_UNREADABLE;
        maps::count(counter::FILENAME_UNREADABLE);
        return;
    }
    // n counts the NUL. A full buffer is a cut name unless the name fits exactly.
    rec.filename_len = (n - 1) as u32;
    if n as usize == FILENAME_CAP {
        let mut next = [0u8; 1];
        let fits = unsafe { bpf_probe_read_user_buf((user_ptr + FILENAME_CAP as u64 - 1) as *const u8, &mut next) }.is_ok() && next[0] == 0;
        if !fits {
            rec.flags |= record_flags::FILENAME_TRUNCATED;
        }
    }
}
