//! `sched_*` raw tracepoints: the point of no return, the new image, and the process tree.
//! Raw tracepoints are the cheapest hook per hit; their arguments are the TP_PROTO ones.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use aya_log_ebpf::warn;
use profiler_common::{
    AdoptedRecord, KernelFilename, LoadedRecord, NoReturnRecord, RecordHeader, TaskExitRecord, TaskNewRecord, WireRecord, counter,
    limits::FILENAME_CAP, record_flags, task_exit_flags, task_new_flags,
};

use crate::{maps, task};

#[inline(always)]
fn header<R: WireRecord>(pid: u32, tgid: u32) -> RecordHeader {
    RecordHeader { kind: R::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns: unsafe { bpf_ktime_get_ns() }, pid, tgid }
}

/// Non-zero when the kernel has no `sched_prepare_exec` (before 6.10): the name is then read
/// at `sched_process_exec`. Set by the loader.
#[unsafe(no_mangle)]
static NAME_AT_LOADED: u64 = 0;

/// `sched_prepare_exec(task, bprm)` (6.10+): fires in `begin_new_exec`, the point of no return.
/// The kernel's copy of the name is read here: past this point the caller's copy is gone.
#[raw_tracepoint(tracepoint = "sched_prepare_exec")]
pub fn sched_prepare_exec(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if maps::is_traced(tgid) {
        crate::attempt::flush(task::current());
        no_return(pid, tgid, ctx.arg(1));
    }
    0
}

/// `sched_process_exec(task, old_pid, bprm)`: the new image is in place. An exec from a
/// non-leader thread has taken the leader's id by now: the record says which thread it was.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let current = task::current();
    crate::attempt::flush(current);
    crate::syscall_events::count_non_native(current);
    let old_pid: u64 = ctx.arg(1);
    let old_pid = old_pid as u32;
    if old_pid != pid {
        maps::set_in_call(old_pid, false);
        maps::set_in_call(pid, true);
    }
    // SAFETY: a read-only global the loader fixed; volatile so it is not constant-folded.
    let name_here = unsafe { core::ptr::read_volatile(&NAME_AT_LOADED) } != 0;
    loaded(pid, tgid, old_pid, name_here.then(|| ctx.arg(2)));
    0
}

/// A [`NoReturnRecord`] with the kernel's copy of the file name.
#[inline(always)]
fn no_return(pid: u32, tgid: u32, bprm: u64) {
    let Some(mut entry) = maps::EVENTS.reserve::<NoReturnRecord>(0) else {
        maps::count(counter::RING_FULL);
        return;
    };
    // SAFETY: our reservation, sized for one NoReturnRecord; the name bytes past
    // `filename_len` are not read.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = header::<NoReturnRecord>(pid, tgid);
    rec._reserved = 0;
    kernel_filename(&mut rec.kernel_filename, Some(bprm));
    entry.submit(maps::NO_WAKEUP);
}

/// A [`LoadedRecord`], with the kernel's copy of the file name when `bprm` is given.
#[inline(always)]
fn loaded(pid: u32, tgid: u32, old_pid: u32, bprm: Option<u64>) {
    let Some(mut entry) = maps::EVENTS.reserve::<LoadedRecord>(0) else {
        maps::count(counter::RING_FULL);
        return;
    };
    // SAFETY: our reservation, sized for one LoadedRecord; the name bytes past
    // `filename_len` are not read.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = header::<LoadedRecord>(pid, tgid);
    rec.old_pid = old_pid;
    kernel_filename(&mut rec.kernel_filename, bprm);
    entry.submit(maps::NO_WAKEUP);
}

/// Fills in `bprm->filename`, or an empty name when `bprm` is None.
#[inline(always)]
fn kernel_filename(out: &mut KernelFilename, bprm: Option<u64>) {
    maps::put(&raw mut out.flags, 0);
    maps::put(&raw mut out.filename_len, 0);
    maps::put(&raw mut out._reserved, 0);
    if let Some(filename) = bprm.and_then(task::bprm_filename) {
        let n =
            unsafe { generated::bpf_probe_read_kernel_str(out.filename.as_mut_ptr().cast(), FILENAME_CAP as u32, filename as *const _) };
        if n > 0 {
            out.filename_len = (n - 1) as u32;
            if n as usize == FILENAME_CAP {
                let next: u8 = unsafe { bpf_probe_read_kernel((filename + FILENAME_CAP as u64 - 1) as *const u8) }.unwrap_or(1);
                if next != 0 {
                    out.flags = record_flags::FILENAME_TRUNCATED;
                }
            }
        }
    }
}

/// `sched_process_fork(parent, child)`: runs before the child can run, so a traced parent's
/// child is in the traced set before its first instruction.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    let child: u64 = ctx.arg(1);
    let Some((child_pid, child_tgid)) = task::ids(child) else { return 0 };
    let thread = child_tgid == tgid;
    if !thread {
        if maps::set_traced(child_tgid, true) {
            maps::tree_alive_add(1);
        } else {
            maps::count(counter::TRACED_FULL);
            warn!(&ctx, "process {} has an id above the pid_max seen at start: it is not traced", child_tgid);
        }
    }
    if crate::aggregate::on() {
        return 0;
    }
    let rec = TaskNewRecord {
        header: header::<TaskNewRecord>(pid, tgid),
        child_pid,
        child_tgid,
        flags: if thread { task_new_flags::THREAD } else { 0 },
        _reserved: 0,
    };
    maps::send(&rec);
    0
}

/// `--cgroup`: process `tgid`, found in the cgroup at the current call, was just marked
/// traced ([`maps::current_is_traced`]): its parent and comm, read now, before the call runs.
#[inline(always)]
pub fn adopted(tgid: u32) {
    // The agent sends no records: it counts the call, and names programs itself.
    if crate::aggregate::on() {
        return;
    }
    let (pid, _) = task::current_ids();
    let rec = AdoptedRecord {
        header: header::<AdoptedRecord>(pid, tgid),
        ppid: task::parent_tgid(task::current()).unwrap_or(0),
        _reserved: 0,
        comm: task::comm(),
    };
    maps::send(&rec);
}

/// `sched_process_exit(task, ...)`: a traced thread ends. The process leaves the traced set
/// only when its last thread is gone, so a pid reused later is not traced by mistake.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(_ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    // An exec in flight is abandoned; user space sees its enter without an exit and counts it.
    maps::set_in_call(pid, false);
    let dead = task::group_dead(task::current());
    if dead {
        maps::set_traced(tgid, false);
        maps::tree_alive_add(-1);
    }
    if crate::aggregate::on() {
        return 0;
    }
    // An exec attempt in flight: its enter and its calls summed so far go before the exit.
    let current = task::current();
    if let Some(enter) = crate::attempt::end(current, pid, tgid, unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() }, true) {
        crate::attempt::send_enter(&enter);
    }
    let rec = TaskExitRecord {
        header: header::<TaskExitRecord>(pid, tgid),
        flags: if dead { task_exit_flags::GROUP_DEAD } else { 0 },
        _reserved: 0,
    };
    maps::send(&rec);
    0
}
