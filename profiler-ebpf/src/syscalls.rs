//! Exec attempt boundaries from the raw `sys_enter`/`sys_exit` tracepoints, filtered by
//! syscall number first. The per-syscall `syscalls:sys_*_execve` tracepoints go through
//! perf's syscall path (a record built per hit): measured here, that alone cost the exec
//! chain ~6% of its time; a raw tracepoint runs the program directly and costs the rest of
//! the system one register read per syscall.
use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user_buf, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use profiler_common::{counter, exec_flags, exec_syscall, limits::FILENAME_CAP, ExecRecord, RecordHeader};

use crate::{
    maps::{self, InFlight},
    task,
};

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

/// `sys_enter(regs, id)`.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> u32 {
    let id: u64 = ctx.arg(1);
    // execve(filename, ...) has the name in rdi; execveat(fd, filename, ...) in rsi.
    let (reg, syscall) = match id {
        NR_EXECVE => (Some(REGS_DI), exec_syscall::EXECVE),
        NR_EXECVEAT => (Some(REGS_SI), exec_syscall::EXECVEAT),
        // The fork family is timed the same way (spawn cost next to exec cost); no name.
        NR_CLONE => (None, exec_syscall::CLONE),
        NR_CLONE3 => (None, exec_syscall::CLONE3),
        NR_FORK => (None, exec_syscall::FORK),
        NR_VFORK => (None, exec_syscall::VFORK),
        _ => return 0,
    };
    let regs: u64 = ctx.arg(0);
    enter(reg.map(|r| regs + r), syscall);
    0
}

/// `sys_exit(regs, ret)`. `orig_ax` still holds the syscall number after a successful exec.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    let regs: u64 = ctx.arg(0);
    let nr: u64 = unsafe { bpf_probe_read_kernel((regs + REGS_ORIG_AX) as *const u64) }.unwrap_or(u64::MAX);
    let spawn = matches!(nr, NR_CLONE | NR_CLONE3 | NR_FORK | NR_VFORK);
    if nr != NR_EXECVE && nr != NR_EXECVEAT && !spawn {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    // A new child also leaves clone/fork through sys_exit, returning 0 with nothing in flight.
    exit(ret, spawn);
    0
}

#[inline(always)]
fn enter(filename_reg: Option<u64>, syscall: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    if !maps::is_traced(tgid) {
        return;
    }
    let (min_flt, maj_flt, flags) = match task::faults(task::current()) {
        Some((min, maj)) => (min, maj, 0),
        None => (0, 0, exec_flags::FAULTS_UNAVAILABLE),
    };
    let attempt = InFlight {
        enter_ns: unsafe { bpf_ktime_get_ns() },
        prepare_ns: 0,
        loaded_ns: 0,
        min_flt,
        maj_flt,
        filename_ptr: filename_reg.and_then(|r| unsafe { bpf_probe_read_kernel(r as *const u64) }.ok()).unwrap_or(0),
        enter_pid: pid,
        syscall,
        flags,
        _reserved: 0,
    };
    if maps::IN_FLIGHT.insert(&pid, &attempt, BPF_ANY as u64).is_err() {
        maps::count(counter::IN_FLIGHT_FULL);
    }
}

#[inline(always)]
fn exit(ret: i64, spawn: bool) {
    // First thing: the probe's own work below stays outside the attempt's measured time.
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    // Only traced threads have an in-flight attempt: that lookup is the filter.
    let Some(attempt) = (unsafe { maps::IN_FLIGHT.get(&pid) }) else {
        if !spawn && maps::is_traced(tgid) {
            maps::count(counter::EXIT_WITHOUT_ENTER);
        }
        return;
    };
    let attempt = *attempt;
    let _ = maps::IN_FLIGHT.remove(&pid);
    let Some(mut entry) = maps::EVENTS.reserve::<ExecRecord>(0) else {
        maps::count(counter::RING_FULL);
        let _ = maps::NAMES.remove(&pid);
        return;
    };
    // SAFETY: the reservation is ours and sized for one ExecRecord; every field the user
    // side reads is written below (the name bytes past `filename_len` are not read).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = RecordHeader {
        kind: profiler_common::kind::EXEC,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: now,
        pid,
        tgid,
    };
    rec.enter_ns = attempt.enter_ns;
    rec.prepare_ns = attempt.prepare_ns;
    rec.loaded_ns = attempt.loaded_ns;
    rec.ret = ret;
    rec.enter_pid = attempt.enter_pid;
    rec.syscall = attempt.syscall;
    rec.flags = attempt.flags;
    rec.min_flt = 0;
    rec.maj_flt = 0;
    if attempt.flags & exec_flags::FAULTS_UNAVAILABLE == 0 {
        match task::faults(task::current()) {
            Some((min, maj)) => {
                rec.min_flt = min.wrapping_sub(attempt.min_flt);
                rec.maj_flt = maj.wrapping_sub(attempt.maj_flt);
            }
            None => rec.flags |= exec_flags::FAULTS_UNAVAILABLE,
        }
    }
    // The kernel's copy of the name exists only past the point of no return.
    let past_no_return = attempt.prepare_ns != 0 || attempt.loaded_ns != 0;
    if attempt.syscall >= exec_syscall::CLONE {
        rec.filename_len = 0;
    } else {
        write_filename(pid, attempt.filename_ptr, past_no_return, rec);
    }
    entry.submit(maps::NO_WAKEUP);
}

/// The name comes from the kernel's copy when the exec got past the point of no return (the
/// old image, and the user's string with it, is gone by now), else from user memory, which a
/// failed attempt leaves intact.
#[inline(always)]
fn write_filename(pid: u32, user_ptr: u64, past_no_return: bool, rec: &mut ExecRecord) {
    if let Some(saved) = past_no_return.then(|| unsafe { maps::NAMES.get(&pid) }).flatten() {
        let n = unsafe {
            generated::bpf_probe_read_kernel_str(rec.filename.as_mut_ptr().cast(), FILENAME_CAP as u32, saved.name.as_ptr().cast())
        };
        rec.filename_len = if n > 0 { (n - 1) as u32 } else { 0 };
        rec.flags |= saved.flags;
        let _ = maps::NAMES.remove(&pid);
        return;
    }
    let n = unsafe {
        generated::bpf_probe_read_user_str(rec.filename.as_mut_ptr().cast(), FILENAME_CAP as u32, user_ptr as *const _)
    };
    if n <= 0 {
        rec.filename_len = 0;
        rec.flags |= exec_flags::FILENAME_UNREADABLE;
        maps::count(counter::FILENAME_UNREADABLE);
        return;
    }
    // n counts the NUL. A full buffer is a cut name unless the name fits exactly.
    rec.filename_len = (n - 1) as u32;
    if n as usize == FILENAME_CAP {
        let mut next = [0u8; 1];
        let fits = unsafe { bpf_probe_read_user_buf((user_ptr + FILENAME_CAP as u64 - 1) as *const u8, &mut next) }.is_ok()
            && next[0] == 0;
        if !fits {
            rec.flags |= exec_flags::FILENAME_TRUNCATED;
        }
    }
}
