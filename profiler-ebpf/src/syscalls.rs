//! `syscalls:sys_{enter,exit}_execve{,at}` tracepoints: exact attempt boundaries, the file
//! name and the return value. Syscall tracepoints fire only for their syscall, so untraced
//! work pays one map lookup per exec, not per syscall.
use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_user_buf, generated},
    macros::tracepoint,
    programs::TracePointContext,
};
use profiler_common::{counter, exec_flags, exec_syscall, limits::FILENAME_CAP, ExecRecord};

use crate::{maps, task};

/// Offsets in the tracepoints' records (`/sys/kernel/tracing/events/syscalls/*/format`):
/// 8 bytes of common fields, the syscall number, then the arguments as 8-byte slots.
const EXECVE_FILENAME: usize = 16;
const EXECVEAT_FILENAME: usize = 24;
const EXIT_RET: usize = 16;

#[tracepoint]
pub fn sys_enter_execve(ctx: TracePointContext) -> u32 {
    enter(&ctx, EXECVE_FILENAME, exec_syscall::EXECVE);
    0
}

#[tracepoint]
pub fn sys_enter_execveat(ctx: TracePointContext) -> u32 {
    enter(&ctx, EXECVEAT_FILENAME, exec_syscall::EXECVEAT);
    0
}

#[tracepoint]
pub fn sys_exit_execve(ctx: TracePointContext) -> u32 {
    exit(&ctx);
    0
}

#[tracepoint]
pub fn sys_exit_execveat(ctx: TracePointContext) -> u32 {
    exit(&ctx);
    0
}

#[inline(always)]
fn enter(ctx: &TracePointContext, filename_offset: usize, syscall: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    if !maps::is_traced(tgid) {
        return;
    }
    let Some(rec) = maps::SCRATCH.get_ptr_mut(0) else { return };
    let rec = unsafe { &mut *rec };
    rec.enter_ns = unsafe { bpf_ktime_get_ns() };
    rec.prepare_ns = 0;
    rec.loaded_ns = 0;
    rec.ret = 0;
    rec.enter_pid = pid;
    rec.syscall = syscall;
    rec.flags = 0;
    match task::faults(task::current()) {
        Some((min, maj)) => {
            rec.min_flt = min;
            rec.maj_flt = maj;
        }
        None => rec.flags |= exec_flags::FAULTS_UNAVAILABLE,
    }
    read_filename(ctx, filename_offset, rec);
    if maps::IN_FLIGHT.insert(&pid, &*rec, BPF_ANY as u64).is_err() {
        maps::count(counter::IN_FLIGHT_FULL);
    }
}

#[inline(always)]
fn read_filename(ctx: &TracePointContext, offset: usize, rec: &mut ExecRecord) {
    let user_ptr: u64 = unsafe { ctx.read_at(offset) }.unwrap_or(0);
    let n = unsafe {
        generated::bpf_probe_read_user_str(
            rec.filename.as_mut_ptr().cast(),
            FILENAME_CAP as u32,
            user_ptr as *const _,
        )
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
        let fits = unsafe {
            bpf_probe_read_user_buf((user_ptr + FILENAME_CAP as u64 - 1) as *const u8, &mut next)
        }
        .is_ok()
            && next[0] == 0;
        if !fits {
            rec.flags |= exec_flags::FILENAME_TRUNCATED;
        }
    }
}

#[inline(always)]
fn exit(ctx: &TracePointContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    if !maps::is_traced(tgid) {
        return;
    }
    let Some(inflight) = maps::IN_FLIGHT.get_ptr_mut(&pid) else {
        maps::count(counter::EXIT_WITHOUT_ENTER);
        return;
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let ret: i64 = unsafe { ctx.read_at(EXIT_RET) }.unwrap_or(0);
    if let Some(mut entry) = maps::EVENTS.reserve::<ExecRecord>(0) {
        let out = entry.as_mut_ptr();
        unsafe {
            // One helper call copies the whole record; then the exit fields are filled in.
            if aya_ebpf::helpers::bpf_probe_read_kernel_buf(
                inflight as *const u8,
                core::slice::from_raw_parts_mut(out as *mut u8, core::mem::size_of::<ExecRecord>()),
            )
            .is_err()
            {
                entry.discard(0);
                maps::count(counter::RING_FULL);
                let _ = maps::IN_FLIGHT.remove(&pid);
                return;
            }
            let rec = &mut *out;
            rec.header.kind = profiler_common::kind::EXEC;
            rec.header.cpu = bpf_get_smp_processor_id();
            rec.header.ts_ns = now;
            rec.header.pid = pid;
            rec.header.tgid = tgid;
            rec.ret = ret;
            if rec.flags & exec_flags::FAULTS_UNAVAILABLE == 0 {
                match task::faults(task::current()) {
                    Some((min, maj)) => {
                        rec.min_flt = min.wrapping_sub(rec.min_flt);
                        rec.maj_flt = maj.wrapping_sub(rec.maj_flt);
                    }
                    None => rec.flags |= exec_flags::FAULTS_UNAVAILABLE,
                }
            }
        }
        entry.submit(maps::NO_WAKEUP);
    } else {
        maps::count(counter::RING_FULL);
    }
    let _ = maps::IN_FLIGHT.remove(&pid);
}
