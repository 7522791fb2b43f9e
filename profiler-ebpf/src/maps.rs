//! Maps shared by the hook families, and the loss counters.
use aya_ebpf::{
    macros::map,
    maps::{Array, PerCpuArray, RingBuf},
};
use profiler_common::{counter, id_flags, limits::IDS_PER_ENTRY, scope};

/// Records to user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(profiler_common::limits::DEFAULT_RING_BYTES, 0);

/// One flag byte per id (pid or tid), `IDS_PER_ENTRY` ids per entry; user space sizes it to
/// cover `pid_max`. Bits of `id_flags`: the id is a traced process's tgid; the thread with
/// this id is inside a traced syscall. An array, not a hash: the verifier turns the lookup
/// into an address computation, and both bits of a single-threaded process sit in one byte,
/// so each hook touches one cache line for them (measured: a hash lookup costs ~60 ns more
/// per hook here, the exec path having evicted the map from the caches).
#[map]
pub static IDS: Array<[u8; IDS_PER_ENTRY]> = Array::with_max_entries(1, 0);

/// Processes in the traced tree that are still alive: +1 per traced fork of a new process
/// (and per process user space seeds), -1 when a traced process's last thread exits. Summed
/// over CPUs by user space to know when the tree is gone.
#[map]
pub static TREE_ALIVE: PerCpuArray<i64> = PerCpuArray::with_max_entries(1, 0);

/// Loss counters, indexed by `profiler_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(profiler_common::counter::COUNT, 0);

/// Stores `v` at `p` as written. LLVM merges neighbouring stores of zeros into a call of
/// `memset`, which the BPF target runs as a byte loop of about four instructions a byte (a
/// 21-byte call-sum entry cost ~90 where three stores do): the stores that would be merged
/// go through here.
#[inline(always)]
pub fn put<T>(p: *mut T, v: T) {
    // SAFETY: callers pass a place they may write (a field of a live map value or a local).
    unsafe { core::ptr::write_volatile(p, v) }
}

#[inline(always)]
pub fn count(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // Per-CPU slot: no other writer while this program runs on this CPU.
        unsafe { *slot += 1 };
    }
}

/// Sends a whole record; a full ring buffer is counted.
#[inline(always)]
pub fn send<T>(rec: &T) {
    if !try_send(rec) {
        count(counter::RING_FULL);
    }
}

/// Sends a whole record; false when the ring buffer is full (the caller counts it).
#[inline(always)]
pub fn try_send<T>(rec: &T) -> bool {
    EVENTS.output::<T>(rec, NO_WAKEUP).is_ok()
}

#[inline(always)]
pub fn tree_alive_add(delta: i64) {
    if let Some(slot) = TREE_ALIVE.get_ptr_mut(0) {
        unsafe { *slot += delta };
    }
}

/// The flag byte of `id`; None beyond the array (an id above the `pid_max` seen at start).
#[inline(always)]
fn id_byte(id: u32) -> Option<*mut u8> {
    let entry = IDS.get_ptr_mut(id / IDS_PER_ENTRY as u32)?;
    // SAFETY: the index is < IDS_PER_ENTRY and the entry is a live map value.
    Some(unsafe { (entry as *mut u8).add((id % IDS_PER_ENTRY as u32) as usize) })
}

/// The flags of `id` (0 beyond the array).
#[inline(always)]
pub fn flags(id: u32) -> u8 {
    id_byte(id).map_or(0, |b| unsafe { *b })
}

#[inline(always)]
fn has(id: u32, bit: u8) -> bool {
    id_byte(id).is_some_and(|b| unsafe { *b } & bit != 0)
}

/// Sets or clears `bit` of `id`; false when the id is beyond the array. Each bit has one
/// writer at a time (a thread's own hooks for IN_CALL; the fork and last exit of a process
/// for TRACED), so the byte's read-modify-write needs no atomics.
#[inline(always)]
fn set(id: u32, bit: u8, on: bool) -> bool {
    let Some(b) = id_byte(id) else { return false };
    unsafe { *b = if on { *b | bit } else { *b & !bit } };
    true
}

/// Which processes are traced (`profiler_common::scope`), and for `scope::CGROUP` which
/// cgroup: set by the loader.
#[unsafe(no_mangle)]
static SCOPE: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_ID: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_LEVEL: u64 = 0;

use crate::task::global;

/// Whether process `tgid` is traced: marked in the id flags, or every process (`--all`).
#[inline(always)]
pub fn is_traced(tgid: u32) -> bool {
    global(&SCOPE) == scope::ALL || has(tgid, id_flags::TRACED)
}

/// [`is_traced`] for the current task at one of its traced calls: with `--cgroup`, a process
/// not marked yet that is in the cgroup (or below it) now is marked here, so a task that moved
/// in after tracing began is traced from its first exec or fork-family call on; an
/// [`profiler_common::AdoptedRecord`] tells user space who it is, before the call's records.
#[inline(always)]
pub fn current_is_traced(tgid: u32) -> bool {
    if is_traced(tgid) {
        return true;
    }
    if global(&SCOPE) != scope::CGROUP {
        return false;
    }
    let id = crate::task::current_ancestor_cgroup_id(global(&CGROUP_LEVEL));
    if id == 0 || id != global(&CGROUP_ID) {
        return false;
    }
    if set_traced(tgid, true) {
        tree_alive_add(1);
        crate::sched::adopted(tgid);
    }
    true
}

/// Whether `tgid`'s own bit marks it traced (not `--all`'s every process).
#[inline(always)]
pub fn is_marked_traced(tgid: u32) -> bool {
    has(tgid, id_flags::TRACED)
}

#[inline(always)]
pub fn set_traced(tgid: u32, on: bool) -> bool {
    set(tgid, id_flags::TRACED, on)
}

#[inline(always)]
pub fn in_call(pid: u32) -> bool {
    has(pid, id_flags::IN_CALL)
}

#[inline(always)]
pub fn set_in_call(pid: u32, on: bool) {
    set(pid, id_flags::IN_CALL, on);
}

/// A traced call begins on thread `pid` (and whatever a dead thread of the same id left is
/// forgotten).
#[inline(always)]
pub fn enter_call(pid: u32) {
    if let Some(b) = id_byte(pid) {
        unsafe { *b = (*b | id_flags::IN_CALL) & !(id_flags::ENTER_LOST | id_flags::SUMMED) };
    }
}

/// Exact mode: thread `pid`'s exec attempt sums its probed calls in its cell
/// ([`crate::attempt::begin`]).
#[inline(always)]
pub fn set_summed(pid: u32) {
    set(pid, id_flags::SUMMED, true);
}

/// The enter record of `pid`'s current call was dropped.
#[inline(always)]
pub fn enter_lost(pid: u32) {
    set(pid, id_flags::ENTER_LOST, true);
}

/// The call on thread `pid` returns: its marks are cleared, and returned as they were
/// (`ENTER_LOST`: its enter record was dropped; `SUMMED`: its attempt summed its calls).
#[inline(always)]
pub fn leave_call(pid: u32) -> u8 {
    clear(pid, id_flags::IN_CALL | id_flags::ENTER_LOST | id_flags::SUMMED)
}

/// Clears `bits` of `id`'s flags (the thread's own hooks are their only writers) and returns
/// the flags as they were; 0 beyond the array.
#[inline(always)]
fn clear(id: u32, bits: u8) -> u8 {
    let Some(b) = id_byte(id) else { return 0 };
    unsafe {
        let v = *b;
        *b = v & !bits;
        v
    }
}

/// Submit without waking the reader: a wake-up per record costs the traced CPU an irq_work
/// (and an IPI) per exec attempt; the reader polls on a short timer instead.
pub const NO_WAKEUP: u64 = aya_ebpf::bindings::BPF_RB_NO_WAKEUP as u64;

/// `*p = new` if `*p == old`, atomically; the value `*p` held (BPF's `cmpxchg_64`, kernel 5.12+).
#[inline(always)]
pub fn compare_exchange(p: *mut u64, old: u64, new: u64) -> u64 {
    let mut r0 = old;
    // SAFETY: `p` points into a live map value, 8-byte aligned.
    unsafe { core::arch::asm!("r0 = cmpxchg_64({p} + 0, r0, {new})", p = in(reg) p, new = in(reg) new, inout("r0") r0) };
    r0
}
