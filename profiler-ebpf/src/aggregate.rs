//! `execprof agent`: each exec attempt and fork-family call folded where it returns into its
//! entry of the in-kernel aggregates ([`profiler_common::aggregate`]); no ring record. The
//! boundary hooks call [`start`] and [`finish`] instead of sending records when the loader set
//! `AGGREGATE`; what a call needs between them waits in `IN_FLIGHT`, keyed by thread.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_ktime_get_ns, bpf_probe_read_kernel, generated},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext as _},
};
use profiler_common::{
    AggKey, AggValue, InFlight, MissKey, MissValue, ProgramPath, StackKey,
    aggregate::{
        self, CALL_EXEC, CALL_FORK, OUTCOME_ABANDONED, OUTCOME_SUCCESS, PATH_COMPONENT, PATH_DEPTH, agg_counter, key_flags, path_flags,
    },
    record_flags, traced_syscall,
};

use crate::task::{self, global};

#[map]
pub static AGGREGATES: HashMap<AggKey, AggValue> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_SERIES, 0);

#[map]
pub static OTHER_AGGREGATES: Array<AggValue> = Array::with_max_entries(aggregate::OTHER_SLOTS, 0);

/// LRU: a thread killed inside a call leaves its entry behind; the oldest go first.
#[map]
pub static IN_FLIGHT: LruHashMap<u32, InFlight> = LruHashMap::with_max_entries(aggregate::DEFAULT_MAX_IN_FLIGHT, 0);

#[map]
pub static MISSES: HashMap<MissKey, MissValue> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_MISSES, 0);

/// Kernel stacks of the samples inside calls, by id.
#[map]
pub static STACKS: StackTrace = StackTrace::with_max_entries(aggregate::DEFAULT_MAX_STACKS, 0);

/// Samples per (stack, call, outcome), counted when the call returns.
#[map]
pub static STACK_COUNTS: HashMap<StackKey, u64> = HashMap::with_max_entries(aggregate::DEFAULT_MAX_STACKS, 0);

#[map]
pub static AGG_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(agg_counter::COUNT, 0);

/// A `MISSES` key being made, per CPU (too large for the stack beside the rest).
#[map]
static MISS_KEY: PerCpuArray<MissKey> = PerCpuArray::with_max_entries(1, 0);

/// A new entry's first value, per CPU: its buckets are never written, so they stay zero.
#[map]
static NEW_ENTRY: PerCpuArray<AggValue> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static AGGREGATE: u64 = 0;
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
fn read<T: Copy + Default>(addr: u64) -> T {
    if addr < 4096 {
        return T::default();
    }
    unsafe { bpf_probe_read_kernel(addr as *const T) }.unwrap_or_default()
}

#[inline(always)]
fn count(index: u32) {
    if let Some(slot) = AGG_COUNTERS.get_ptr_mut(index) {
        unsafe { *slot += 1 };
    }
}

/// A call of `syscall` begins on thread `pid`: who makes it, from where, and the clock last.
#[inline(always)]
pub fn start(pid: u32, tgid: u32, current: u64, syscall: u32, compat: bool) {
    let mm: u64 = read(current + global(&TASK_MM_OFFSET));
    let mut f = InFlight {
        start_ns: 0,
        exe_file: 0,
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        ino: 0,
        min_flt: 0,
        maj_flt: 0,
        rss_pages: 0,
        dev: 0,
        tgid,
        flags: if compat { key_flags::COMPAT } else { 0 },
        _reserved: [0; 3],
        comm: bpf_get_current_comm().unwrap_or_default(),
        stacks: [0; aggregate::SAMPLES_PER_CALL],
        nr_stacks: 0,
        _reserved2: 0,
    };
    let exe_file: u64 = read(mm + global(&MM_EXE_FILE_OFFSET));
    let inode: u64 = read(exe_file + global(&FILE_INODE_OFFSET));
    if mm == 0 || exe_file == 0 || inode == 0 {
        f.flags |= key_flags::NO_PROGRAM;
    } else {
        f.exe_file = exe_file;
        f.ino = read(inode + global(&INODE_INO_OFFSET));
        f.dev = read(read::<u64>(inode + global(&INODE_SB_OFFSET)) + global(&SB_DEV_OFFSET));
    }
    if syscall >= traced_syscall::CLONE && mm != 0 && global(&MM_RSS_ANON_OFFSET) != 0 {
        let pages = |off: u64| read::<i64>(mm + off).max(0) as u64;
        f.rss_pages = pages(global(&MM_RSS_FILE_OFFSET)) + pages(global(&MM_RSS_ANON_OFFSET)) + pages(global(&MM_RSS_SHMEM_OFFSET));
    }
    if let Some((min, maj)) = task::faults(current) {
        (f.min_flt, f.maj_flt) = (min, maj);
    }
    f.start_ns = unsafe { bpf_ktime_get_ns() };
    if IN_FLIGHT.insert(&pid, &f, 0).is_err() {
        count(agg_counter::IN_FLIGHT_FULL);
    }
}

/// The call on thread `pid` returned `ret` at `now`: folded into its entry. `missed`: an
/// ENOENT exec's file name in the caller's memory.
#[inline(always)]
pub fn finish(pid: u32, current: u64, syscall: u32, ret: i64, now: u64, missed: Option<u64>) {
    let exec = syscall < traced_syscall::CLONE;
    let call = if exec { CALL_EXEC } else { CALL_FORK };
    // A fork-family call returns the child's id to the parent (the child's own 0 never
    // reaches here).
    let outcome = if ret >= 0 {
        OUTCOME_SUCCESS
    } else if exec && (ret == -513 || task::kill_flags(current) & record_flags::KILLED != 0) {
        OUTCOME_ABANDONED
    } else {
        (-ret).min(0xfffe) as u16
    };
    // SAFETY: a copy out of the map value before the entry is removed.
    let Some(f) = (unsafe { IN_FLIGHT.get(&pid) }).copied() else {
        count(agg_counter::START_NOT_SEEN);
        fold_other(call, outcome, None);
        return;
    };
    let _ = IN_FLIGHT.remove(&pid);
    if let Some(name) = missed {
        count_miss(f.cgroup_id, name, now.saturating_sub(f.start_ns));
    }
    let key = AggKey { cgroup_id: f.cgroup_id, ino: f.ino, dev: f.dev, call, outcome, flags: f.flags, _reserved: [0; 3] };
    count_stacks(&f, call, outcome);
    let faults = task::faults(current).map(|(min, maj)| (min.saturating_sub(f.min_flt), maj.saturating_sub(f.maj_flt)));
    let timing = Timing { ns: now.saturating_sub(f.start_ns), faults, rss_pages: f.rss_pages };
    let value = match AGGREGATES.get_ptr_mut(&key) {
        Some(v) => v,
        None => match new_entry(&key, &f) {
            Some(v) => v,
            None => {
                count(if exec { agg_counter::EXEC_FOLDED } else { agg_counter::FORK_FOLDED });
                fold_other(call, outcome, Some(&timing));
                return;
            }
        },
    };
    add(value, Some(&timing));
}

struct Timing {
    ns: u64,
    faults: Option<(u64, u64)>,
    rss_pages: u64,
}

/// A cpu-clock sample on thread `pid`: kept (its stack's id) in the thread's in-flight call,
/// if it is in one.
#[inline(always)]
pub fn sample(ctx: &PerfEventContext, pid: u32) {
    let Some(f) = IN_FLIGHT.get_ptr_mut(&pid) else { return };
    // SAFETY: a live map value; only this thread's samples write its stack list (a sample
    // runs on the thread's CPU, in its context).
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

/// The samples kept in call `f`, counted per stack now that its outcome is known.
#[inline(always)]
fn count_stacks(f: &InFlight, call: u16, outcome: u16) {
    let mut i = 0;
    while i < aggregate::SAMPLES_PER_CALL {
        if i >= f.nr_stacks as usize {
            return;
        }
        let key = StackKey { stack_id: f.stacks[i], call, outcome };
        let slot = match STACK_COUNTS.get_ptr_mut(&key) {
            Some(v) => Some(v),
            None => {
                let _ = STACK_COUNTS.insert(&key, &0, aggregate_noexist());
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

/// An ENOENT attempt of a caller in `cgroup_id` for the name at `name` (user memory) took
/// `ns`: counted per name in `MISSES`.
#[inline(always)]
fn count_miss(cgroup_id: u64, name: u64, ns: u64) {
    let Some(key) = MISS_KEY.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch key; zeroed past the name so equal names hash alike.
    let key = unsafe { &mut *key };
    key.cgroup_id = cgroup_id;
    key.name = [0; aggregate::MISS_NAME];
    let n = unsafe { generated::bpf_probe_read_user_str(key.name.as_mut_ptr().cast(), aggregate::MISS_NAME as u32, name as *const _) };
    if n <= 0 {
        count(agg_counter::MISS_UNREADABLE);
        return;
    }
    let value = match MISSES.get_ptr_mut(&*key) {
        Some(v) => v,
        None => {
            let _ = MISSES.insert(&*key, &MissValue::default(), aggregate_noexist());
            match MISSES.get_ptr_mut(&*key) {
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
    }
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
        (*template).comm = f.comm;
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
    let mut dentry: u64 = read(exe_file + global(&FILE_DENTRY_OFFSET));
    let mut i = 0;
    while i < PATH_DEPTH {
        if dentry == 0 {
            return;
        }
        let parent: u64 = read(dentry + global(&DENTRY_PARENT_OFFSET));
        if parent == dentry {
            // The file system's root: its name ("/") is not a component.
            out.flags |= path_flags::ROOT_REACHED;
            return;
        }
        let name: u64 = read(dentry + global(&DENTRY_NAME_OFFSET));
        let n = unsafe { generated::bpf_probe_read_kernel_str(out.names[i].as_mut_ptr().cast(), PATH_COMPONENT as u32, name as *const _) };
        if n <= 0 {
            return;
        }
        out.depth = i as u32 + 1;
        dentry = parent;
        i += 1;
    }
    if read::<u64>(dentry + global(&DENTRY_PARENT_OFFSET)) == dentry {
        out.flags |= path_flags::ROOT_REACHED;
    }
}

#[inline(always)]
fn fold_other(call: u16, outcome: u16, timing: Option<&Timing>) {
    if let Some(v) = OTHER_AGGREGATES.get_ptr_mut(aggregate::other_slot(call, outcome)) {
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
        let b = aggregate::bucket(t.ns);
        if b < aggregate::BUCKETS {
            atomic_add(&raw mut (*v).buckets[b], 1);
        }
        if let Some((min, maj)) = t.faults {
            atomic_add(&raw mut (*v).min_flt, min);
            if maj != 0 {
                atomic_add(&raw mut (*v).maj_flt, maj);
            }
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
