//! Exec attempt (and fork-family call) boundaries from the raw `sys_enter`/`sys_exit`
//! tracepoints. The per-syscall `syscalls:sys_*_execve` tracepoints go through perf's syscall
//! path (a record built per hit): measured here, that alone cost the exec chain ~6% of its
//! time; a raw tracepoint runs the program directly. Other syscalls are dropped first:
//! `sys_enter` by its syscall-number argument, `sys_exit` by the traced flag (cheaper than
//! reading the number from the registers; `benches/othercost.sh`).
//!
//! Enter and exit each make a record, which user space joins per thread: a hash map keyed by
//! thread cost ~300 ns of the ~1 µs the two programs took per attempt (measured with
//! `kernel.bpf_stats_enabled`). An exec's enter record waits in the attempt's cell of an
//! array instead ([`crate::attempt`]), and goes out with the thread's next record.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_user_buf, generated},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use profiler_common::{
    RecordHeader, SyscallEnterRecord, SyscallExitRecord, WireRecord, counter, id_flags, limits::FILENAME_CAP, record_flags, traced_syscall,
};

use crate::{
    aggregate,
    arch::{self, arg_regs, argv_reg, candidate, classify},
    argv, attempt, maps,
    task::{self, Btf, Kmem, Probe},
};

const AT_FDCWD: i32 = -100;
const AT_EMPTY_PATH: u64 = 0x1000;
/// `execveat`'s flag (Linux 6.14+) asking only whether the file would be executed.
const AT_EXECVE_CHECK: u64 = 0x10000;

/// The saved user register at `off` in `regs`, read with `M`.
#[inline(always)]
fn reg<M: Kmem>(regs: u64, off: u64, compat: bool) -> u64 {
    let v: u64 = M::at(regs, off);
    // A compat call's arguments are 32-bit (the upper half is not the caller's).
    if compat { v & 0xffff_ffff } else { v }
}

/// `sys_enter(regs, id)`.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> u32 {
    let nr: u64 = ctx.arg(1);
    if !candidate(nr) {
        if arch::untimed_abi(nr) {
            arch::count_untimed(nr);
        }
        return 0;
    }
    let (pid, tgid) = task::current_ids();
    if !maps::current_is_traced(tgid) {
        return 0;
    }
    if task::btf_loads() {
        let current = task::current_btf();
        entered::<Btf>(task::pt_regs_btf(current), nr, pid, tgid, current);
    } else {
        // ctx.arg() again where it is used: a read x86_64's compat test does not need is dropped.
        entered::<Probe>(ctx.arg(0), nr, pid, tgid, task::current());
    }
    0
}

/// A candidate call `nr` entered by traced thread `pid` at the raw tracepoint: its ABI, then
/// [`on_enter`]. `M` reads `regs` and `current` (BTF-typed where [`task::btf_loads`]).
#[inline(always)]
fn entered<M: Kmem>(regs: u64, nr: u64, pid: u32, tgid: u32, current: u64) {
    let compat = arch::in_compat_syscall::<M>(current, regs);
    let Some(syscall) = classify(nr, compat) else { return };
    on_enter::<M>(regs, syscall, compat, pid, tgid, current);
}

/// An exec or fork-family call entered by a traced thread, whichever hook saw it: its
/// arguments first (with `--argv`), then the clock, last, so the probe's own work stays
/// outside the attempt. `M` reads the task and the registers: plain loads where the hook holds
/// BTF-typed pointers to them (fentry/fexit), a helper call each otherwise.
#[inline(always)]
pub fn on_enter<M: Kmem>(regs: u64, syscall: u32, compat: bool, pid: u32, tgid: u32, current: u64) {
    let check = execve_check::<M>(regs, syscall, compat);
    if aggregate::on() {
        aggregate::start::<M>(pid, tgid, current, syscall, compat, check);
        return;
    }
    let (min_flt, maj_flt, mut flags) = match M::faults(current) {
        Some((min, maj)) => (min, maj, 0),
        None => (0, 0, record_flags::FAULTS_UNAVAILABLE),
    };
    if compat {
        flags |= record_flags::COMPAT;
    }
    if check {
        flags |= record_flags::EXECVE_CHECK;
    }
    if syscall < traced_syscall::CLONE && argv::wanted() {
        argv::send(reg::<M>(regs, argv_reg(syscall, compat), compat), compat, pid, tgid);
    }
    maps::enter_call(pid);
    let header = RecordHeader {
        kind: SyscallEnterRecord::KIND,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid,
        tgid,
    };
    let rec = SyscallEnterRecord { header, min_flt, maj_flt, syscall, flags };
    // An exec's enter waits in its attempt's cell for the attempt's next record. The cell is
    // found from the task's address as a number (`current` may be a BTF pointer, on which the
    // verifier allows no arithmetic).
    if syscall < traced_syscall::CLONE && attempt::begin(task::current(), pid, &rec, crate::exact::summing()) {
        return;
    }
    if !maps::try_send(&rec) {
        // Counted by kind: with the enters user space sees, the number of calls made stays
        // exact however many records are lost; and the exit must not join an older call.
        maps::count(if syscall < traced_syscall::CLONE { counter::EXEC_ENTER_DROPPED } else { counter::FORK_ENTER_DROPPED });
        maps::enter_lost(pid);
    }
}

/// Whether the call entering with `regs` is an `execveat` with `AT_EXECVE_CHECK`: a check that
/// executes nothing. One register read, for `execveat` only; read at the enter, where the
/// flags are the caller's whatever the call then does (kernels before 6.14 refuse the flag
/// with EINVAL: a failed check all the same).
#[inline(always)]
fn execve_check<M: Kmem>(regs: u64, syscall: u32, compat: bool) -> bool {
    syscall == traced_syscall::EXECVEAT && reg::<M>(regs, arg_regs(syscall, compat).2, compat) & AT_EXECVE_CHECK != 0
}

/// `sys_exit(regs, ret)`. The saved registers still hold the syscall number (x86_64:
/// `orig_ax`, arm64: `syscallno`). After a successful exec x86 has set it, and `TS_COMPAT`, to
/// `execve` of the new image's ABI (an ia32 program that execs a 64-bit one returns from 59,
/// not 11); arm64 keeps the caller's number ([`arch::classify_exit`]). Either way the exit's
/// ABI flag is the one the thread has now, and user space pairs the exit with its enter.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    // The traced check first: for every other process in the system it is cheaper than
    // reading the syscall number out of the registers.
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) {
        return 0;
    }
    // The return value read once: reading the context twice let LLVM keep `ctx + 8` in a
    // register for the second read, which the verifier refuses ("dereference of modified ctx
    // ptr", arm64's build on 6.1).
    let ret: i64 = ctx.arg(1);
    if task::btf_loads() {
        let current = task::current_btf();
        returned::<Btf>(task::pt_regs_btf(current), ret, pid, tgid, current);
    } else {
        returned::<Probe>(ctx.arg(0), ret, pid, tgid, task::current());
    }
    0
}

/// A call of traced thread `pid` returned `ret` at the raw tracepoint: its number and ABI from
/// `regs` and `current` read with `M`, then [`on_exit`] if it is an exec or fork-family call.
#[inline(always)]
fn returned<M: Kmem>(regs: u64, ret: i64, pid: u32, tgid: u32, current: u64) {
    let nr = arch::call_nr::<M>(regs).unwrap_or(u64::MAX);
    if !candidate(nr) {
        return;
    }
    let compat = arch::in_compat_syscall::<M>(current, regs);
    let Some(syscall) = arch::classify_exit(nr, compat, ret, pid) else { return };
    // First thing past the filter: the probe's own work below stays outside the attempt.
    let now = unsafe { bpf_ktime_get_ns() };
    on_exit::<M>(regs, syscall, compat, ret, now, (pid, tgid, current));
}

/// An exec or fork-family call of a traced thread returned `ret` at `now`, whichever hook saw
/// it. `ids`: the thread's (pid, tgid) and its `task_struct` as `M` reads it (see [`on_enter`]).
#[inline(always)]
pub fn on_exit<M: Kmem>(regs: u64, syscall: u32, compat: bool, ret: i64, now: u64, ids: (u32, u32, u64)) {
    let (pid, tgid, current) = ids;
    let exec = syscall < traced_syscall::CLONE;
    if !exec && ret == 0 {
        // A new child leaving clone/fork: it never entered the syscall.
        return;
    }
    if aggregate::on() {
        aggregate::returned::<M>(regs, syscall, compat, ret, now, ids);
        return;
    }
    // The sums, and the enter if it is still held, first; then the marks are read, one of
    // which (`ENTER_LOST`) sending them can set.
    let held = if exec { attempt::end(task::current(), pid, tgid, now, false) } else { None };
    let enter_lost = maps::leave_call(pid) & id_flags::ENTER_LOST != 0;
    let exit = Exit { syscall, compat, ret, now, enter_lost };
    match held {
        // One item: the enter, then the exit.
        Some(enter) => {
            let Some(mut entry) = maps::EVENTS.reserve::<EnterThenExit>(0) else {
                maps::count(counter::RING_FULL);
                maps::count(counter::EXEC_ENTER_DROPPED);
                return;
            };
            // SAFETY: our reservation, sized for both records; every field the user side
            // reads is written (the name bytes past `filename_len` are not read).
            let both = unsafe { &mut *entry.as_mut_ptr() };
            both.enter = enter;
            fill_exit::<M>(&mut both.exit, regs, &exit, (pid, tgid, current));
            entry.submit(maps::NO_WAKEUP);
        }
        None => {
            let Some(mut entry) = maps::EVENTS.reserve::<SyscallExitRecord>(0) else {
                maps::count(counter::RING_FULL);
                return;
            };
            // SAFETY: as above, for one SyscallExitRecord.
            let rec = unsafe { &mut *entry.as_mut_ptr() };
            fill_exit::<M>(rec, regs, &exit, (pid, tgid, current));
            entry.submit(maps::NO_WAKEUP);
        }
    }
}

/// An exec attempt's enter and exit records, sent as one ring buffer item.
#[repr(C)]
struct EnterThenExit {
    enter: SyscallEnterRecord,
    exit: SyscallExitRecord,
}

/// What [`on_exit`] knows of the returning call.
struct Exit {
    syscall: u32,
    compat: bool,
    ret: i64,
    now: u64,
    enter_lost: bool,
}

/// Writes every field of the exit record `rec` user space reads.
#[inline(always)]
fn fill_exit<M: Kmem>(rec: &mut SyscallExitRecord, regs: u64, e: &Exit, (pid, tgid, current): (u32, u32, u64)) {
    let Exit { syscall, compat, ret, now, enter_lost } = *e;
    rec.header = RecordHeader { kind: SyscallExitRecord::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns: now, pid, tgid };
    rec.ret = ret;
    rec.syscall = syscall;
    rec.dirfd = 0;
    (rec.min_flt, rec.maj_flt, rec.flags) = match M::faults(current) {
        Some((min, maj)) => (min, maj, 0),
        None => (0, 0, record_flags::FAULTS_UNAVAILABLE),
    };
    if compat {
        rec.flags |= record_flags::COMPAT;
    }
    if enter_lost {
        rec.flags |= record_flags::ENTER_LOST;
    }
    rec.filename_len = 0;
    // A failed exec leaves the caller's memory, and its arguments, as they were (x86_64: the
    // name in rdi for execve, rsi for execveat, ebx/ecx in the ia32 ABI; arm64: orig_x0 / x1
    // in both ABIs). A successful one's name comes from the kernel's copy; so does a passed
    // `AT_EXECVE_CHECK`'s, which never reaches it: its arguments are the caller's still. (A
    // successful exec leaves no such flag: x86_64 returns from `execveat` as `execve`, arm64
    // with the new image's cleared registers.)
    if syscall < traced_syscall::CLONE && (ret != 0 || execve_check::<M>(regs, syscall, compat)) {
        let (name_reg, dirfd_reg, flags_reg) = arg_regs(syscall, compat);
        read_user_filename(reg::<M>(regs, name_reg, compat), rec);
        if dirfd_reg != 0 {
            rec.dirfd = reg::<M>(regs, dirfd_reg, compat) as i32;
            if reg::<M>(regs, flags_reg, compat) & AT_EMPTY_PATH != 0 {
                rec.flags |= record_flags::AT_EMPTY_PATH;
            }
        } else {
            rec.dirfd = AT_FDCWD;
        }
        rec.flags |= task::kill_flags::<M>(current);
    }
}

#[inline(always)]
fn read_user_filename(user_ptr: u64, rec: &mut SyscallExitRecord) {
    let n = unsafe { generated::bpf_probe_read_user_str(rec.filename.as_mut_ptr().cast(), FILENAME_CAP as u32, user_ptr as *const _) };
    if n < 0 {
        rec.flags |= record_flags::FILENAME_UNREADABLE;
        maps::count(counter::FILENAME_UNREADABLE);
        return;
    }
    // n counts the NUL, but on 6.1 and 6.12 an empty name gives 0, not 1 (their
    // strncpy_from_user_nofault adds the NUL only to a length > 0): `execveat(fd, "",
    // AT_EMPTY_PATH)` is an empty name there, not an unreadable one. A full buffer is a cut
    // name unless the name fits exactly.
    rec.filename_len = if n > 0 { (n - 1) as u32 } else { 0 };
    if n as usize == FILENAME_CAP {
        let mut next = [0u8; 1];
        let fits = unsafe { bpf_probe_read_user_buf((user_ptr + FILENAME_CAP as u64 - 1) as *const u8, &mut next) }.is_ok() && next[0] == 0;
        if !fits {
            rec.flags |= record_flags::FILENAME_TRUNCATED;
        }
    }
}
