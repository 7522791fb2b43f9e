//! `sched_*` raw tracepoints: the point of no return, the new image, and the process tree.
//! Raw tracepoints are the cheapest hook per hit; their arguments are the TP_PROTO ones.
use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use aya_log_ebpf::warn;
use profiler_common::{counter, exec_flags, exit_flags, fork_flags, kind, limits::FILENAME_CAP, ExitRecord, ForkRecord, RecordHeader};

use crate::{maps, task};

#[inline(always)]
fn current_ids() -> (u32, u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

#[inline(always)]
fn header(kind: u32, pid: u32, tgid: u32) -> RecordHeader {
    RecordHeader {
        kind,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid,
        tgid,
    }
}

/// `sched_prepare_exec(task, bprm)` (6.10+): fires in `begin_new_exec`, the point of no return.
#[raw_tracepoint(tracepoint = "sched_prepare_exec")]
pub fn sched_prepare_exec(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    if let Some(rec) = maps::IN_FLIGHT.get_ptr_mut(&pid) {
        unsafe { (*rec).prepare_ns = bpf_ktime_get_ns() };
        let bprm: u64 = ctx.arg(1);
        save_name(pid, bprm);
    }
    0
}

/// `sched_process_exec(task, old_pid, bprm)`: the new image is in place. An exec from a
/// non-leader thread has taken the leader's id by now, so the attempt moves to the new id.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let old_pid: u64 = ctx.arg(1);
    let old_pid = old_pid as u32;
    let bprm: u64 = ctx.arg(2);
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(rec) = maps::IN_FLIGHT.get_ptr_mut(&old_pid) else { return 0 };
    unsafe { (*rec).loaded_ns = now };
    if old_pid != pid {
        let moved = unsafe { maps::IN_FLIGHT.insert(&pid, &*rec, BPF_ANY as u64) };
        if moved.is_err() {
            maps::count(counter::IN_FLIGHT_FULL);
        }
        let _ = maps::IN_FLIGHT.remove(&old_pid);
        let _ = maps::NAMES.remove(&old_pid);
    }
    // Saved again here for kernels without sched_prepare_exec, and under the new id.
    save_name(pid, bprm);
    0
}

/// Keeps the kernel's copy of the exec'd file name for the syscall exit.
#[inline(always)]
fn save_name(pid: u32, bprm: u64) {
    let Some(filename) = task::bprm_filename(bprm) else { return };
    let Some(saved) = maps::NAME_SCRATCH.get_ptr_mut(0) else { return };
    let saved = unsafe { &mut *saved };
    let n = unsafe {
        generated::bpf_probe_read_kernel_str(saved.name.as_mut_ptr().cast(), FILENAME_CAP as u32, filename as *const _)
    };
    if n <= 0 {
        return;
    }
    saved.flags = 0;
    if n as usize == FILENAME_CAP {
        let next: u8 = unsafe { bpf_probe_read_kernel((filename + FILENAME_CAP as u64 - 1) as *const u8) }.unwrap_or(1);
        if next != 0 {
            saved.flags = exec_flags::FILENAME_TRUNCATED;
        }
    }
    if maps::NAMES.insert(&pid, &*saved, BPF_ANY as u64).is_err() {
        maps::count(counter::IN_FLIGHT_FULL);
    }
}

/// `sched_process_fork(parent, child)`: runs before the child can run, so a traced parent's
/// child is in the traced set before its first instruction.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let child: u64 = ctx.arg(1);
    let Some((child_pid, child_tgid)) = task::ids(child) else { return 0 };
    let thread = child_tgid == tgid;
    if !thread && maps::TRACED.insert(&child_tgid, &tgid, BPF_ANY as u64).is_err() {
        maps::count(counter::TRACED_FULL);
        warn!(&ctx, "traced-process table full: process {} is not traced", child_tgid);
    }
    let rec = ForkRecord {
        header: header(kind::FORK, pid, tgid),
        child_pid,
        child_tgid,
        flags: if thread { fork_flags::THREAD } else { 0 },
        _reserved: 0,
    };
    if maps::EVENTS.output::<ForkRecord>(&rec, maps::NO_WAKEUP).is_err() {
        maps::count(counter::RING_FULL);
    }
    0
}

/// `sched_process_exit(task, ...)`: a traced thread ends. The process leaves the traced set
/// only when its last thread is gone, so a pid reused later is not traced by mistake.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(_ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    if unsafe { maps::IN_FLIGHT.get(&pid) }.is_some() {
        maps::count(counter::ABANDONED);
        let _ = maps::IN_FLIGHT.remove(&pid);
    }
    let _ = maps::NAMES.remove(&pid);
    let dead = task::group_dead(task::current());
    if dead {
        let _ = maps::TRACED.remove(&tgid);
    }
    let rec = ExitRecord {
        header: header(kind::EXIT, pid, tgid),
        flags: if dead { exit_flags::GROUP_DEAD } else { 0 },
        _reserved: 0,
    };
    if maps::EVENTS.output::<ExitRecord>(&rec, maps::NO_WAKEUP).is_err() {
        maps::count(counter::RING_FULL);
    }
    0
}
