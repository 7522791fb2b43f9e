//! `sched_*` raw tracepoints: the point of no return, the new image, and the process tree.
//! Raw tracepoints are the cheapest hook per hit; their arguments are the TP_PROTO ones.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use aya_log_ebpf::warn;
use profiler_common::{
    AdoptedRecord, KernelFilename, LoadedRecord, NoReturnRecord, RecordHeader, SyscallEnterRecord, TaskExitRecord, TaskNewRecord,
    WireRecord, counter, limits::FILENAME_CAP, record_flags, task_exit_flags, task_new_flags,
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
        no_return(pid, tgid, ctx.arg(1), crate::attempt::take_held(task::current()));
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
    crate::syscall_events::count_non_native(current);
    let old_pid: u64 = ctx.arg(1);
    let old_pid = old_pid as u32;
    if old_pid != pid {
        maps::set_in_call(old_pid, false);
        maps::set_in_call(pid, true);
    }
    // SAFETY: a read-only global the loader fixed; volatile so it is not constant-folded.
    let name_here = unsafe { core::ptr::read_volatile(&NAME_AT_LOADED) } != 0;
    loaded(pid, tgid, old_pid, name_here.then(|| ctx.arg(2)), crate::attempt::take_held(current));
    0
}

/// Sends one `R`, filled in by `fill`, behind the attempt's enter if it was still held: one
/// ring buffer item for both, the enter first (as user space splits items), one reservation.
#[inline(always)]
fn send_behind<R: 'static>(held: Option<SyscallEnterRecord>, fill: impl FnOnce(&mut R)) {
    let Some(enter) = held else {
        let Some(mut entry) = maps::EVENTS.reserve::<R>(0) else {
            maps::count(counter::RING_FULL);
            return;
        };
        // SAFETY: our reservation, sized for one R, which `fill` writes.
        fill(unsafe { &mut *entry.as_mut_ptr() });
        entry.submit(maps::NO_WAKEUP);
        return;
    };
    let Some(mut entry) = maps::EVENTS.reserve::<EnterThen<R>>(0) else {
        maps::count(counter::RING_FULL);
        crate::attempt::held_dropped(&enter);
        return;
    };
    // SAFETY: our reservation, sized for both records.
    let both = unsafe { &mut *entry.as_mut_ptr() };
    both.enter = enter;
    fill(&mut both.rec);
    entry.submit(maps::NO_WAKEUP);
}

/// An exec attempt's held enter and the record it goes in front of, as one ring buffer item.
#[repr(C)]
struct EnterThen<R> {
    enter: SyscallEnterRecord,
    rec: R,
}

/// A [`NoReturnRecord`] with the kernel's copy of the file name (the name bytes past
/// `filename_len` are not read).
#[inline(always)]
fn no_return(pid: u32, tgid: u32, bprm: u64, held: Option<SyscallEnterRecord>) {
    send_behind(held, |rec: &mut NoReturnRecord| {
        rec.header = header::<NoReturnRecord>(pid, tgid);
        rec._reserved = 0;
        kernel_filename(&mut rec.kernel_filename, Some(bprm));
    });
}

/// A [`LoadedRecord`], with the kernel's copy of the file name when `bprm` is given.
#[inline(always)]
fn loaded(pid: u32, tgid: u32, old_pid: u32, bprm: Option<u64>, held: Option<SyscallEnterRecord>) {
    send_behind(held, |rec: &mut LoadedRecord| {
        rec.header = header::<LoadedRecord>(pid, tgid);
        rec.old_pid = old_pid;
        kernel_filename(&mut rec.kernel_filename, bprm);
        // Set by now (`begin_new_exec`); from 6.14 not always the name's last part.
        rec.comm = task::comm();
    });
}

/// Fills in `bprm->filename`, or an empty name when `bprm` is None.
#[inline(always)]
fn kernel_filename(out: &mut KernelFilename, bprm: Option<u64>) {
    maps::put(&raw mut out.flags, 0);
    maps::put(&raw mut out.filename_len, 0);
    maps::put(&raw mut out._reserved, 0);
    if let Some(filename) = bprm.and_then(task::bprm_filename) {
        read_kernel_name(out, filename);
    }
}

/// Bytes of the name read per helper call.
const CHUNK: usize = 64;

/// The name's bytes start 8-aligned in both records that carry it (ring buffer items are).
const NAME_ALIGNED: () = {
    use core::mem::offset_of;
    let name = offset_of!(KernelFilename, filename);
    assert!((offset_of!(NoReturnRecord, kernel_filename) + name) % 8 == 0);
    assert!((offset_of!(LoadedRecord, kernel_filename) + name) % 8 == 0);
    // And behind a held enter ([`EnterThen`]).
    assert!(size_of::<SyscallEnterRecord>() % 8 == 0);
};

/// `bprm->filename` into `out`, as `bpf_probe_read_kernel_str` would: the name and its length
/// without the NUL; a name of `FILENAME_CAP` bytes or more cut to `FILENAME_CAP - 1` and
/// marked truncated. The kernel's string helper copies a byte per loop turn (832 instructions
/// per exec of the built-in chain's 51-byte names under icount); here `CHUNK` bytes go per
/// helper call, a word per turn, and the NUL is found in the words read. A chunk reads at most
/// `CHUNK - 1` bytes past the NUL; one the kernel refuses (past the end of mapped memory) is
/// read with the string helper from there on.
#[inline(always)]
fn read_kernel_name(out: &mut KernelFilename, filename: u64) {
    let () = NAME_ALIGNED;
    let base = out.filename.as_mut_ptr();
    for c in 0..FILENAME_CAP / CHUNK {
        let off = c * CHUNK;
        // SAFETY: `off + CHUNK <= FILENAME_CAP`: inside `out.filename`.
        let dst = unsafe { core::slice::from_raw_parts_mut(base.add(off), CHUNK) };
        if unsafe { bpf_probe_read_kernel_buf((filename + off as u64) as *const u8, dst) }.is_err() {
            read_kernel_str_from(out, filename, off);
            return;
        }
        for w in 0..CHUNK / 8 {
            // SAFETY: inside the chunk just written; 8-aligned in the ring buffer item (`NAME_ALIGNED`),
            // so one load (as unaligned, the BPF target would load it a byte at a time).
            let word = unsafe { core::ptr::read_volatile(base.add(off + w * 8).cast::<u64>()) };
            if let Some(i) = first_nul(word) {
                out.filename_len = (off + w * 8 + i) as u32;
                return;
            }
        }
    }
    out.filename_len = FILENAME_CAP as u32 - 1;
    out.flags = record_flags::FILENAME_TRUNCATED;
}

/// The rest of the name from byte `off` on, with the string helper.
#[inline(always)]
fn read_kernel_str_from(out: &mut KernelFilename, filename: u64, off: usize) {
    if off >= FILENAME_CAP {
        return;
    }
    // SAFETY: `off < FILENAME_CAP`; the helper writes at most `FILENAME_CAP - off` bytes there.
    let n = unsafe {
        generated::bpf_probe_read_kernel_str(
            out.filename.as_mut_ptr().add(off).cast(),
            (FILENAME_CAP - off) as u32,
            (filename + off as u64) as *const _,
        )
    };
    if n <= 0 {
        // Unreadable from here: the name is what was read before (none if nothing was).
        out.filename_len = off as u32;
        return;
    }
    out.filename_len = (off + n as usize - 1) as u32;
    if off + n as usize == FILENAME_CAP {
        let next: u8 = unsafe { bpf_probe_read_kernel((filename + FILENAME_CAP as u64 - 1) as *const u8) }.unwrap_or(1);
        if next != 0 {
            out.flags = record_flags::FILENAME_TRUNCATED;
        }
    }
}

/// The index of the first NUL byte of `word` as it lies in memory (little-endian, as both
/// BPF targets here are), if any. The classic test marks the lowest zero byte exactly (only
/// bytes above it can be marked falsely); its index by halving, without a count-trailing-zeros
/// the BPF target lacks.
#[inline(always)]
fn first_nul(word: u64) -> Option<usize> {
    let mut m = word.wrapping_sub(0x0101_0101_0101_0101) & !word & 0x8080_8080_8080_8080;
    if m == 0 {
        return None;
    }
    let mut i = 0;
    if m & 0x8080_8080 == 0 {
        i += 4;
        m >>= 32;
    }
    if m & 0x8080 == 0 {
        i += 2;
        m >>= 16;
    }
    if m & 0x80 == 0 {
        i += 1;
    }
    Some(i)
}

/// `sched_process_fork(parent, child)`: runs before the child can run, so a traced parent's
/// child is in the traced set before its first instruction.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        // A new process of an untraced parent is untraced, whatever its id's bit says: where
        // the kernel skipped a traced process's exit (7.3 counts such skipped runs), its id
        // stayed marked, and a process that reuses it would be traced by mistake.
        let child: u64 = ctx.arg(1);
        if let Some((_, child_tgid)) = task::ids(child)
            && child_tgid != tgid
            && maps::is_marked_traced(child_tgid)
        {
            maps::set_traced(child_tgid, false);
            maps::tree_alive_add(-1);
        }
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
