//! `execprof agent`: each exec attempt and fork-family call folded where it returns into its
//! entry of the in-kernel aggregates ([`profiler_common::aggregate`]); no ring record. The
//! boundary hooks call [`start`] and [`finish`] instead of sending records when the loader set
//! `AGGREGATE`; what a call needs between them waits in its `IN_FLIGHT` slot.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns, generated},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext as _},
};
use profiler_common::{
    AggKey, AggValue, InFlight, MissKey, MissValue, ProcessState, ProgramPath, StackKey,
    aggregate::{
        self, CALL_EXEC, CALL_FORK, OUTCOME_ABANDONED, OUTCOME_SUCCESS, PATH_COMPONENT, PATH_DEPTH, agg_counter, key_flags, path_flags,
    },
    record_flags, traced_syscall,
};

use crate::{
    arch::arg_regs,
    task::{self, Kmem, Probe, global},
};

#[map]
pub static AGGREGATES: HashMap<AggKey, AggValue> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_SERIES, 0);

#[map]
pub static OTHER_AGGREGATES: Array<AggValue> = Array::with_max_entries(aggregate::OTHER_SLOTS, 0);

/// Calls begun and not yet returned, direct-mapped by [`aggregate::table_slot`] of their key: an
/// array's lookup is an address computation (no hashing, no insert or delete), and each slot
/// says whose it is. A call whose slot another call takes is counted as pushed out.
#[map]
pub static IN_FLIGHT: Array<InFlight> = Array::with_max_entries(aggregate::DEFAULT_MAX_IN_FLIGHT, 0);

#[map]
pub static MISSES: HashMap<MissKey, MissValue> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_MISSES, 0);

/// Each process's identity and PATH search, direct-mapped by process id as `IN_FLIGHT` is (a
/// process that exits leaves its slot to the next one).
#[map]
pub static PROCESSES: Array<ProcessState> = Array::with_max_entries(aggregate::DEFAULT_MAX_IN_FLIGHT, 0);

/// Kernel stacks of the samples inside calls, by id.
#[map]
pub static STACKS: StackTrace = StackTrace::with_max_entries(aggregate::DEFAULT_MAX_STACKS, 0);

/// Samples per (stack, series), counted when the call returns.
#[map]
pub static STACK_COUNTS: HashMap<StackKey, u64> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_STACK_COUNTS, 0);

#[map]
pub static AGG_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(agg_counter::COUNT, 0);

/// A missed name being read, and a new `MISSES` entry's first value, per CPU (too large
/// for the stack).
#[map]
static MISS_SCRATCH: PerCpuArray<MissValue> = PerCpuArray::with_max_entries(1, 0);

/// A new entry's first value, per CPU: its buckets are never written, so they stay zero.
#[map]
static NEW_ENTRY: PerCpuArray<AggValue> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static AGGREGATE: u64 = 0;
/// Slots of `IN_FLIGHT` and `SEARCHES`, minus one (a power of two minus one).
#[unsafe(no_mangle)]
static IN_FLIGHT_MASK: u64 = 0;
#[unsafe(no_mangle)]
static TASK_MM_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static MM_EXE_FILE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FILE_INODE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static INODE_INO_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static INODE_SB_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SB_DEV_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static INODE_GENERATION_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static MM_RSS_FILE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static MM_RSS_ANON_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static MM_RSS_SHMEM_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static FILE_DENTRY_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static DENTRY_PARENT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static DENTRY_NAME_OFFSET: u64 = 0;

/// Whether this load is the agent's (fixed before load: the verifier prunes the other path).
#[inline(always)]
pub fn on() -> bool {
    global(&AGGREGATE) != 0
}

#[inline(always)]
fn count(index: u32) {
    if let Some(slot) = AGG_COUNTERS.get_ptr_mut(index) {
        unsafe { *slot += 1 };
    }
}

/// The `IN_FLIGHT` (or `PROCESSES`) slot of `key`.
#[inline(always)]
fn slot_of<T>(map: &Array<T>, key: u32) -> Option<*mut T> {
    map.get_ptr_mut(aggregate::table_slot(key, global(&IN_FLIGHT_MASK) as u32))
}

/// Sets a slot's key where a cpu-clock sample (an NMI on this CPU) sees it only in order.
#[inline(always)]
fn set_key(slot: *mut InFlight, key: u32) {
    // SAFETY: a live map value.
    unsafe { core::ptr::write_volatile(&raw mut (*slot).key, key) };
}

/// A call of `syscall` begins on thread `pid`: who makes it, from where, and the clock last.
/// `check`: an `execveat` with `AT_EXECVE_CHECK`, kept in its key's flags.
#[inline(always)]
pub fn start<M: Kmem>(pid: u32, tgid: u32, current: u64, syscall: u32, compat: bool, check: bool) {
    let key = aggregate::in_flight_key(pid, tgid, syscall < traced_syscall::CLONE);
    let Some(slot) = slot_of(&IN_FLIGHT, key) else { return };
    // SAFETY: a live map value; its key hides it from samples while it is filled.
    let f = unsafe { &mut *slot };
    if f.key != 0 && f.key != key {
        count(agg_counter::IN_FLIGHT_FULL);
    }
    set_key(slot, 0);
    let mm: u64 = M::at(current, global(&TASK_MM_OFFSET));
    f.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    f.tgid = tgid;
    f.tid = pid;
    f.flags = if compat { key_flags::COMPAT } else { 0 } | if check { key_flags::EXECVE_CHECK } else { 0 };
    f.nr_stacks = 0;
    identify::<M>(f, tgid, mm);
    f.rss_pages = 0;
    if syscall >= traced_syscall::CLONE && mm != 0 && global(&MM_RSS_ANON_OFFSET) != 0 {
        // Through the helper on every kernel: 6.1's verifier refuses a BTF-typed load of its
        // `atomic_long_t` counters ("Type 'atomic_long_t' is not a struct"), which failed the
        // agent's fentry programs there and left it on the per-syscall events.
        let pages = |off: u64| Probe::at::<i64>(mm, off).max(0) as u64;
        f.rss_pages = pages(global(&MM_RSS_FILE_OFFSET)) + pages(global(&MM_RSS_ANON_OFFSET)) + pages(global(&MM_RSS_SHMEM_OFFSET));
    }
    (f.min_flt, f.maj_flt) = task::faults_with::<M>(current).unwrap_or((u64::MAX, 0));
    f.start_ns = unsafe { bpf_ktime_get_ns() };
    set_key(slot, key);
}

/// The calling program of `f` (a call of process `tgid`, whose address space is `mm`): its
/// executable's identity, from the process's slot when it was read under the same `mm` and
/// inode (see [`ProcessState`]), else read from the inode and kept there.
#[inline(always)]
fn identify<M: Kmem>(f: &mut InFlight, tgid: u32, mm: u64) {
    (f.exe_file, f.ino, f.dev, f.generation) = (0, 0, 0, 0);
    let exe_file: u64 = M::at(mm, global(&MM_EXE_FILE_OFFSET));
    let inode: u64 = M::at(exe_file, global(&FILE_INODE_OFFSET));
    if mm == 0 || exe_file == 0 || inode == 0 {
        f.flags |= key_flags::NO_PROGRAM;
        f.comm = task::comm();
        return;
    }
    f.exe_file = exe_file;
    let Some(p) = slot_of(&PROCESSES, tgid) else { return };
    // SAFETY: a live map value. Two processes sharing the slot can interleave their writes:
    // the identity read back is used only if the owner, `mm` and inode still match after.
    let p = unsafe { &mut *p };
    let same = |p: &ProcessState| p.tgid == tgid && p.mm == mm && p.inode == inode;
    if same(p) {
        (f.ino, f.dev, f.generation) = (p.ino, p.dev, p.generation);
        task::copy_comm(&mut f.comm, &p.comm);
        if same(p) {
            return;
        }
    }
    f.comm = task::comm();
    f.ino = M::at(inode, global(&INODE_INO_OFFSET));
    f.generation = M::at(inode, global(&INODE_GENERATION_OFFSET));
    f.dev = M::at(M::at::<u64>(inode, global(&INODE_SB_OFFSET)), global(&SB_DEV_OFFSET));
    if p.tgid != tgid {
        if p.tgid != 0 && p.misses != 0 {
            count(agg_counter::SEARCH_PUSHED_OUT);
        }
        p.tgid = tgid;
        (crate::maps::put(&raw mut p.misses, 0), crate::maps::put(&raw mut p.nr_tried, 0), crate::maps::put(&raw mut p.name_hash, 0));
    }
    p.mm = 0;
    (p.inode, p.ino, p.dev, p.generation) = (inode, f.ino, f.dev, f.generation);
    task::copy_comm(&mut p.comm, &f.comm);
    p.mm = mm;
}

/// An exec or fork-family call returned `ret` at `now` on thread `pid` of process `tgid`
/// (`current`: its task), whichever hook saw it; `regs`: the syscall's saved registers.
#[inline(always)]
pub fn returned<M: Kmem>(regs: u64, syscall: u32, compat: bool, ret: i64, now: u64, (pid, tgid, current): (u32, u32, u64)) {
    let exec = syscall < traced_syscall::CLONE;
    if !exec && ret == 0 {
        // A new child leaving clone/fork: it never entered the syscall.
        return;
    }
    // A missed PATH candidate's name, for the missed directories (ENOENT only). A compat
    // call's arguments are 32-bit (the upper half is not the caller's).
    let missed = (exec && ret == -2).then(|| {
        let v: u64 = M::at(regs, arg_regs(syscall, compat).0);
        if compat { v & 0xffff_ffff } else { v }
    });
    finish::<M>((pid, tgid), current, syscall, ret, now, missed);
}

/// The call on thread `pid` of process `tgid` returned `ret` at `now`: folded into its
/// entry. `missed`: an ENOENT exec's file name in the caller's memory.
#[inline(always)]
fn finish<M: Kmem>((pid, tgid): (u32, u32), current: u64, syscall: u32, ret: i64, now: u64, missed: Option<u64>) {
    let exec = syscall < traced_syscall::CLONE;
    let key = aggregate::in_flight_key(pid, tgid, exec);
    let call = if exec { CALL_EXEC } else { CALL_FORK };
    // A fork-family call returns the child's id to the parent (the child's own 0 never
    // reaches here).
    let outcome = if ret >= 0 {
        OUTCOME_SUCCESS
    } else if exec && (ret == -513 || task::kill_flags::<M>(current) & record_flags::KILLED != 0) {
        OUTCOME_ABANDONED
    } else {
        (-ret).min(0xfffe) as u16
    };
    let slot = match slot_of(&IN_FLIGHT, key) {
        // SAFETY: a live map value, read.
        Some(slot) if unsafe { (*slot).key } == key => slot,
        _ => {
            count(agg_counter::START_NOT_SEEN);
            fold_other(call, outcome, false, None);
            return;
        }
    };
    // SAFETY: a live map value: this call's until its key is cleared below.
    let f = unsafe { &*slot };
    let ns = now.saturating_sub(f.start_ns);
    let check = f.flags & key_flags::EXECVE_CHECK != 0;
    // A successful exec ends its process's search (found); a failure other than ENOENT ends
    // it too (not found). The process id is the one a successful exec keeps. A check
    // (`AT_EXECVE_CHECK`) is no step of a search: it neither misses nor ends one.
    let mut search_misses = 0;
    if exec && !check {
        match missed {
            Some(name) => count_miss(tgid, f.cgroup_id, name, ns),
            None => {
                if let Some(p) = slot_of(&PROCESSES, tgid) {
                    // SAFETY: a live map value of this process's slot.
                    let p = unsafe { &mut *p };
                    if p.tgid == tgid && p.misses != 0 {
                        search_misses = if outcome == OUTCOME_SUCCESS { u64::from(p.misses) } else { 0 };
                        (
                            crate::maps::put(&raw mut p.misses, 0),
                            crate::maps::put(&raw mut p.nr_tried, 0),
                            crate::maps::put(&raw mut p.name_hash, 0),
                        );
                    }
                }
            }
        }
    }
    let agg_key =
        AggKey { cgroup_id: f.cgroup_id, ino: f.ino, dev: f.dev, call, outcome, flags: f.flags, _reserved: 0, generation: f.generation };
    count_stacks(f, &agg_key);
    let faults = match (f.min_flt, task::faults_with::<M>(current)) {
        (u64::MAX, _) | (_, None) => None,
        (min0, Some((min, maj))) => Some((min.saturating_sub(min0), maj.saturating_sub(f.maj_flt))),
    };
    let timing = Timing { ns, faults, rss_pages: f.rss_pages, search_misses };
    let value = match AGGREGATES.get_ptr_mut(&agg_key) {
        Some(v) => Some(v),
        None => new_entry(&agg_key, f),
    };
    set_key(slot as *mut InFlight, 0);
    match value {
        Some(v) => add(v, Some(&timing)),
        None => {
            count(if exec { agg_counter::EXEC_FOLDED } else { agg_counter::FORK_FOLDED });
            fold_other(call, outcome, check, Some(&timing));
        }
    }
}

struct Timing {
    ns: u64,
    faults: Option<(u64, u64)>,
    rss_pages: u64,
    /// A successful exec that ended a search: its misses (0: none).
    search_misses: u64,
}

/// A cpu-clock sample on thread `pid` of process `tgid`: kept (its stack's id) in the call
/// the thread is in, if any: its own fork-family call, or its process's exec attempt if the
/// thread is the one making it (or, after `de_thread`, the leader it became).
#[inline(always)]
pub fn sample(ctx: &PerfEventContext, pid: u32, tgid: u32) {
    if pid == 0 {
        // The idle task: never in a call, and its fork key, 0, is an empty slot's.
        return;
    }
    let fork_key = aggregate::in_flight_key(pid, tgid, false);
    let exec_key = aggregate::in_flight_key(pid, tgid, true);
    let f = match slot_of(&IN_FLIGHT, fork_key) {
        // SAFETY: a live map value, read.
        Some(f) if unsafe { (*f).key } == fork_key => f,
        _ => match slot_of(&IN_FLIGHT, exec_key) {
            // SAFETY: as above.
            Some(f) if unsafe { (*f).key == exec_key && ((*f).tid == pid || pid == tgid) } => f,
            _ => return,
        },
    };
    // SAFETY: a live map value; only the calling thread's samples write its stack list (a
    // sample runs on the thread's CPU, in its context).
    let f = unsafe { &mut *f };
    let n = f.nr_stacks as usize;
    if n >= aggregate::SAMPLES_PER_CALL {
        count(agg_counter::SAMPLES_NOT_KEPT);
        return;
    }
    match ctx.get_stackid(&STACKS, 0) {
        Ok(id) => {
            f.stacks[n] = id as u32;
            f.nr_stacks = n as u32 + 1;
        }
        Err(_) => count(agg_counter::SAMPLES_NOT_KEPT),
    }
}

/// The samples kept in call `f`, counted per stack and series now that its outcome is known.
#[inline(always)]
fn count_stacks(f: &InFlight, series: &AggKey) {
    let mut i = 0;
    while i < aggregate::SAMPLES_PER_CALL {
        if i >= f.nr_stacks as usize {
            return;
        }
        let key = StackKey { stack_id: f.stacks[i], _reserved: 0, series: *series };
        let slot = match STACK_COUNTS.get_ptr_mut(&key) {
            Some(v) => Some(v),
            None => {
                // The first value from a local, not `&0`: rustc promotes `&0` to a constant
                // in .rodata, which LLVM merged with the loader-set `AGGREGATE` global (also
                // 0 there, 1 once loaded), so every new entry began at 1 and counted its first
                // sample twice.
                let zero: u64 = 0;
                let _ = STACK_COUNTS.insert(&key, &zero, aggregate_noexist());
                STACK_COUNTS.get_ptr_mut(&key)
            }
        };
        match slot {
            Some(v) => atomic_add(v, 1),
            None => count(agg_counter::STACK_COUNTS_FULL),
        }
        i += 1;
    }
}

/// An ENOENT attempt of process `tgid` in `cgroup_id` for the name at `name` (user memory)
/// took `ns`: counted per name in `MISSES`, keyed by the name's hash (the name itself is
/// written once, when its entry is made).
#[inline(always)]
fn count_miss(tgid: u32, cgroup_id: u64, name: u64, ns: u64) {
    let Some(scratch) = MISS_SCRATCH.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch value.
    let scratch = unsafe { &mut *scratch };
    let n = unsafe { generated::bpf_probe_read_user_str(scratch.name.as_mut_ptr().cast(), aggregate::MISS_NAME as u32, name as *const _) };
    if n <= 0 {
        count(agg_counter::MISS_UNREADABLE);
        return;
    }
    let len = n as usize - 1;
    // The name sits 8-aligned in the value (after four u64s).
    let words = scratch.name.as_ptr() as *const u64;
    // SAFETY: the index stays within the name's MISS_NAME / 8 words.
    let hash = aggregate::name_hash(|i| unsafe { *words.add(i & (aggregate::MISS_NAME / 8 - 1)) }, len);
    let repeated = in_search(tgid, &scratch.name, len, hash);
    let key = MissKey { cgroup_id, name_hash: hash };
    let value = match MISSES.get_ptr_mut(&key) {
        Some(v) => v,
        None => {
            let z = |f: &mut u64| crate::maps::put(f, 0);
            (z(&mut scratch.count), z(&mut scratch.sum_ns), z(&mut scratch.repeated), z(&mut scratch.repeated_ns));
            let _ = MISSES.insert(&key, &*scratch, aggregate_noexist());
            match MISSES.get_ptr_mut(&key) {
                Some(v) => v,
                None => {
                    count(agg_counter::MISS_FOLDED);
                    return;
                }
            }
        }
    };
    // SAFETY: a live map value; its fields are added to atomically.
    unsafe {
        atomic_add(&raw mut (*value).count, 1);
        atomic_add(&raw mut (*value).sum_ns, ns);
        if repeated {
            atomic_add(&raw mut (*value).repeated, 1);
            atomic_add(&raw mut (*value).repeated_ns, ns);
        }
    }
}

/// The ENOENT attempt of process `tgid` for `name` (`len` bytes, hashed `hash`) joins the
/// process's search for what follows its last '/' (or begins one); true when the search had
/// tried this very name already.
#[inline(always)]
fn in_search(tgid: u32, name: &[u8; aggregate::MISS_NAME], len: usize, hash: u64) -> bool {
    // The searched-for name: what follows the last '/', hashed (FNV-1a) from its end.
    let mut searched: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < aggregate::MISS_NAME {
        if i >= len {
            break;
        }
        let c = name[(len - 1 - i) & (aggregate::MISS_NAME - 1)];
        if c == b'/' {
            break;
        }
        searched = (searched ^ u64::from(c)).wrapping_mul(0x100_0000_01b3);
        i += 1;
    }
    let Some(s) = slot_of(&PROCESSES, tgid) else { return false };
    // SAFETY: a live map value; of its process, only the thread in exec writes the search.
    let s = unsafe { &mut *s };
    if s.tgid != tgid {
        if s.tgid != 0 && s.misses != 0 {
            count(agg_counter::SEARCH_PUSHED_OUT);
        }
        // Taken over: its identity is another process's.
        (s.tgid, s.mm, s.misses) = (tgid, 0, 0);
    }
    if s.misses == 0 || s.name_hash != searched {
        (s.name_hash, s.misses, s.nr_tried) = (searched, 0, 0);
    }
    let tried = s.nr_tried as usize;
    let mut repeated = false;
    let mut i = 0;
    while i < aggregate::TRIED_PER_SEARCH {
        if i >= tried {
            break;
        }
        if s.tried[i] == hash {
            repeated = true;
            break;
        }
        i += 1;
    }
    if !repeated {
        if tried < aggregate::TRIED_PER_SEARCH {
            // Masked where LLVM cannot drop it: 6.1's verifier follows a merged path where
            // the test's bounds contradict each other (umin 16, umax 15) and refuses the
            // index unless it is bounded by itself.
            // SAFETY: the mask keeps the index inside the array (a power of two long), and
            // unchecked: a bounds check the compiler cannot drop would be a panic path, which
            // a BPF program cannot have.
            unsafe { *s.tried.as_mut_ptr().add(masked(tried, aggregate::TRIED_PER_SEARCH - 1)) = hash };
            s.nr_tried = tried as u32 + 1;
        } else {
            // Past the names kept: a repeat of a later one would go unseen.
            count(agg_counter::REPEAT_NOT_CHECKED);
        }
    }
    s.misses = s.misses.saturating_add(1);
    repeated
}

/// `i & mask`, kept in the program whatever the compiler knows of `i`.
#[inline(always)]
fn masked(mut i: usize, mask: usize) -> usize {
    // SAFETY: arithmetic on a register.
    unsafe { core::arch::asm!("{i} &= {m}", i = inout(reg) i, m = in(reg) mask) };
    i
}

#[inline(always)]
fn aggregate_noexist() -> u64 {
    aya_ebpf::bindings::BPF_NOEXIST as u64
}

/// Makes `key`'s entry (another CPU may have made it meanwhile); None when the map is full.
#[inline(always)]
fn new_entry(key: &AggKey, f: &InFlight) -> Option<*mut AggValue> {
    let template = NEW_ENTRY.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot; only its header fields are written, its buckets stay zero.
    unsafe {
        (*template).first_tgid = f.tgid;
        task::copy_comm(&mut (*template).comm, &f.comm);
        program_path(&mut (*template).path, f.exe_file);
        let _ = AGGREGATES.insert(key, &*template, aggregate_noexist());
    }
    AGGREGATES.get_ptr_mut(key)
}

/// The path of the program whose file is `exe_file`, read up its dentries. At the return of
/// a successful exec the caller's old file is still open: its last reference is dropped on
/// the way back to user space, after the boundary hooks.
#[inline(always)]
fn program_path(out: &mut ProgramPath, exe_file: u64) {
    out.depth = 0;
    out.flags = 0;
    if exe_file == 0 {
        return;
    }
    let mut dentry: u64 = Probe::at(exe_file, global(&FILE_DENTRY_OFFSET));
    let mut i = 0;
    while i < PATH_DEPTH {
        if dentry == 0 {
            return;
        }
        let parent: u64 = Probe::at(dentry, global(&DENTRY_PARENT_OFFSET));
        if parent == dentry {
            // The file system's root: its name ("/") is not a component.
            out.flags |= path_flags::ROOT_REACHED;
            return;
        }
        let name: u64 = Probe::at(dentry, global(&DENTRY_NAME_OFFSET));
        let n = unsafe { generated::bpf_probe_read_kernel_str(out.names[i].as_mut_ptr().cast(), PATH_COMPONENT as u32, name as *const _) };
        if n <= 0 {
            return;
        }
        out.depth = i as u32 + 1;
        dentry = parent;
        i += 1;
    }
    if Probe::at::<u64>(dentry, global(&DENTRY_PARENT_OFFSET)) == dentry {
        out.flags |= path_flags::ROOT_REACHED;
    }
}

#[inline(always)]
fn fold_other(call: u16, outcome: u16, check: bool, timing: Option<&Timing>) {
    if let Some(v) = OTHER_AGGREGATES.get_ptr_mut(aggregate::other_slot(call, outcome, check)) {
        add(v, timing);
    }
}

/// `*p += n` as one atomic instruction (BPF's `lock xadd`: the target has no atomic
/// read-modify-write in `core`, and its result is not needed).
#[inline(always)]
fn atomic_add(p: *mut u64, n: u64) {
    // SAFETY: `p` points into a live map value, 8-byte aligned (a `u64` field).
    unsafe { core::arch::asm!("lock *(u64 *)({p} + 0) += {n}", p = in(reg) p, n = in(reg) n) };
}

#[inline(always)]
fn add(v: *mut AggValue, timing: Option<&Timing>) {
    // SAFETY: a live map value; every shared field is added to atomically.
    unsafe {
        atomic_add(&raw mut (*v).count, 1);
        let Some(t) = timing else { return };
        atomic_add(&raw mut (*v).timed, 1);
        atomic_add(&raw mut (*v).sum_ns, t.ns);
        // Masked in a register the verifier sees, then bounded: the compiler's form of
        // `bucket` leaves the index's range unknown to it.
        let b = masked(aggregate::bucket(t.ns), 0xff);
        if b < aggregate::BUCKETS {
            atomic_add(&raw mut (*v).buckets[b], 1);
        }
        if let Some((min, maj)) = t.faults {
            atomic_add(&raw mut (*v).min_flt, min);
            if maj != 0 {
                atomic_add(&raw mut (*v).maj_flt, maj);
            }
        }
        if t.search_misses != 0 {
            atomic_add(&raw mut (*v).searches, 1);
            atomic_add(&raw mut (*v).search_misses, t.search_misses);
        }
        if t.rss_pages != 0 {
            atomic_add(&raw mut (*v).rss_pages_sum, t.rss_pages);
            // The largest: a race between CPUs can keep the smaller of two at worst.
            if t.rss_pages > (*v).rss_pages_max {
                (*v).rss_pages_max = t.rss_pages;
            }
        }
    }
}
