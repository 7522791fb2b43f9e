//! Exact mode: entry and return probes on the exec-path functions this kernel has. Each
//! function gets its own slot, with the slot number built into its programs, so the return
//! probe knows which function returned without relying on helpers older kernels lack. A slot
//! has two program pairs: fentry/fexit (BPF trampolines: a fraction of a kprobe's cost), used
//! where the function has BTF and the kernel allows them, and kprobe/kretprobe for the rest
//! (compiler-suffixed names without BTF, names present twice, kernels without trampolines).
//! Only calls inside a traced thread's exec attempt are kept.
//!
//! A call's entry time waits for its return in an array, not a hash map (measured under icount:
//! a probed call's programs ran 1,253 instructions with the hash map, 678 without): each thread
//! has two candidate tables of one cell per slot, found from its `task_struct` address, and a
//! cell holds the entry time with a key that tells threads apart ([`open_call`]). Where threads
//! sharing a table are in the same function at once, the entry takes the other table; where
//! both are taken, the later entry evicts the first's occupant, whose return is counted as one
//! without entry, never given another thread's time.
//!
//! That is the path of a call sent on its own ([`ProbedCallRecord`]). An exec attempt whose
//! thread claimed its [`Attempt`] cell at the enter ([`crate::attempt`]) instead sums its
//! calls there, per call path, and sends them in one [`CallSumsRecord`] before its exit: a
//! probed call then costs a push and a pop on the attempt's stack of open calls, and no ring
//! record.
//!
//! A summed path also keeps how much of its calls' time the thread spent off-CPU: the
//! attempt's off-CPU clock (advanced by `sched_switch` when the thread runs again) is read at
//! each entry and return. User space reports a function's on-CPU time, which another task
//! running in between (a preemptible kernel's woken reader, say) does not inflate.
use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::Array,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use profiler_common::{
    Attempt, CallSum, CallSumsRecord, OpenSummedCall, ProbedCallRecord, RecordHeader, SyscallEnterRecord, WireRecord,
    call_sums::{MAX_DEPTH, MAX_ENTRIES, NONE, UNSUMMED},
    counter, limits, open_call,
};

use crate::{attempt, maps, task, task::global};

/// Set by the loader ([`profiler_common::names::GLOBAL_CALL_SUMS`]).
#[unsafe(no_mangle)]
static CALL_SUMS: u64 = 0;

/// Whether exec attempts sum their probed calls in the kernel (not with `--trace`, whose
/// timelines show each call).
#[inline(always)]
pub fn summing() -> bool {
    global(&CALL_SUMS) != 0
}

/// The attempt being summed on thread `task`, if its calls are summed.
#[inline(always)]
fn summed(task: u64) -> Option<&'static mut Attempt> {
    attempt::of(task).filter(|a| a.summing != 0)
}

/// The sums of the attempt `a` go out, just before its exit's own record: in one item with
/// its enter, when that is still held.
#[inline(always)]
pub fn send_sums(a: &mut Attempt, pid: u32, tgid: u32, now: u64) {
    let count = a.sums.count as usize;
    if count == 0 && a.sums.unsummed == 0 {
        return;
    }
    a.sums.header = RecordHeader { kind: CallSumsRecord::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns: now, pid, tgid };
    if count > MAX_ENTRIES {
        return;
    }
    let held = attempt::take(a);
    let start = if held { core::mem::size_of::<SyscallEnterRecord>() } else { 0 };
    let len = start + CallSumsRecord::HEAD + count * core::mem::size_of::<CallSum>();
    let from = if held { (&a.enter as *const SyscallEnterRecord).cast::<u8>() } else { (&a.sums as *const CallSumsRecord).cast::<u8>() };
    // SAFETY: `sums` follows `enter` in the cell (asserted in profiler-common), so from either
    // start `len` bytes lie inside the live map value.
    let bytes = unsafe { core::slice::from_raw_parts(from, len) };
    if maps::EVENTS.output::<[u8]>(bytes, maps::NO_WAKEUP).is_err() {
        maps::count(counter::CALL_SUMS_LOST);
        if held {
            attempt::held_dropped(&a.enter);
        }
    }
}

/// Stack and entry indices are masked to their arrays' sizes (powers of two) where they are
/// used ([`masked`]), so the verifier sees them bounded however the compiler rearranges the
/// loops.
const DEPTH_MASK: usize = MAX_DEPTH - 1;
const ENTRY_MASK: usize = MAX_ENTRIES - 1;

/// `i & mask`, the mask kept. LLVM drops a mask it can prove redundant from the checks before
/// it, and the verifier does not always learn the same from them: 6.1's learns nothing from
/// `depth != 0`, so with 32-byte stack cells `stack[(depth - 1) & DEPTH_MASK]` lost its mask
/// and 6.1 refused the return programs ("math between map_value pointer and register with
/// unbounded min value"). A volatile read of a copy hides the range from LLVM; the verifier
/// keeps a spilled register's bounds.
#[inline(always)]
fn masked(i: usize, mask: usize) -> usize {
    let copy = i;
    // SAFETY: a read of a live local.
    unsafe { core::ptr::read_volatile(&copy) & mask }
}
const _: () = assert!(MAX_DEPTH.is_power_of_two() && MAX_ENTRIES.is_power_of_two());
/// Callees of one path compared before a call gets a new entry.
const SIBLINGS_SCANNED: usize = 6;

/// A probed call of `slot` enters in the attempt `a`: it goes on the stack with the entry of
/// its call path (the entry of `slot` among its caller's path's callees, made if new).
#[inline(always)]
fn push(a: &mut Attempt, slot: u32, now: u64) {
    let depth = a.depth as usize;
    a.depth += 1;
    if depth >= MAX_DEPTH {
        // Not kept: its return, the next one on this thread, is dropped at the same depth.
        a.sums.unsummed += 1;
        return;
    }
    let parent = if depth == 0 { u32::from(NONE) } else { a.stack[masked(depth - 1, DEPTH_MASK)].entry };
    let entry = if parent == u32::from(UNSUMMED) { u32::from(UNSUMMED) } else { path_entry(a, parent, slot) };
    if entry == u32::from(UNSUMMED) {
        a.sums.unsummed += 1;
    }
    // Read after the clock: an interval off-CPU between the two reads is subtracted from no
    // call, so a call's on-CPU time is never short.
    a.stack[masked(depth, DEPTH_MASK)] = OpenSummedCall { enter_ns: now, children_ns: 0, off_cpu_at_enter: a.off_cpu_ns, slot, entry };
}

/// The entry of `slot` called from the path of entry `parent` (`NONE`: the syscall), made if
/// new; `UNSUMMED` when every entry is taken.
#[inline(always)]
fn path_entry(a: &mut Attempt, parent: u32, slot: u32) -> u32 {
    let mut e =
        if parent == u32::from(NONE) { a.root_child } else { u32::from(a.sums.entries[masked(parent as usize, ENTRY_MASK)].first_child) };
    // Only the most recent few callees of the path are compared (a loop short enough to be
    // unrolled): a path found no further down gets a second entry, which user space merges.
    for _ in 0..SIBLINGS_SCANNED {
        if e as usize >= MAX_ENTRIES {
            break;
        }
        let c = &a.sums.entries[masked(e as usize, ENTRY_MASK)];
        if u32::from(c.slot) == slot {
            return e;
        }
        e = u32::from(c.next_sibling);
    }
    let n = a.sums.count;
    if n as usize >= MAX_ENTRIES {
        return u32::from(UNSUMMED);
    }
    let head = if parent == u32::from(NONE) {
        core::mem::replace(&mut a.root_child, n)
    } else {
        u32::from(core::mem::replace(&mut a.sums.entries[masked(parent as usize, ENTRY_MASK)].first_child, n as u8))
    };
    let e = &mut a.sums.entries[masked(n as usize, ENTRY_MASK)];
    // Field by field: as one struct literal LLVM zeroed the first 21 bytes with `memset`.
    maps::put(&raw mut e.inclusive_ns, 0);
    maps::put(&raw mut e.self_ns, 0);
    maps::put(&raw mut e.off_cpu_ns, 0);
    maps::put(&raw mut e.calls, 0);
    (e.slot, e.parent, e.first_child, e.next_sibling) = (slot as u8, parent as u8, NONE, head as u8);
    a.sums.count = n + 1;
    n
}

/// A probed call of `slot` returns in the attempt `a` at `now`, when its off-CPU time had
/// reached `off_cpu_ns` (read before the clock): summed into its entry, its time added to its
/// caller's callees. A return one call below the innermost (a kretprobe that missed
/// the return of the call inside it) closes that call unsummed, counted as lost; any other
/// return without its entry is counted and dropped.
#[inline(always)]
fn pop(a: &mut Attempt, slot: u32, now: u64, off_cpu_ns: u64) {
    let depth = a.depth as usize;
    if depth > MAX_DEPTH {
        a.depth -= 1;
        return;
    }
    if depth == 0 {
        maps::count(counter::PROBED_RETURN_WITHOUT_ENTRY);
        return;
    }
    // The open call of `slot` is the top; or, after a kretprobe missed one return, the one
    // below it. No loop: the verifier must see every index bounded.
    let below = if a.stack[masked(depth - 1, DEPTH_MASK)].slot == slot {
        0
    } else if depth >= 2 && a.stack[masked(depth - 2, DEPTH_MASK)].slot == slot {
        maps::count(counter::PROBED_ENTRY_OVERWRITTEN);
        1
    } else {
        maps::count(counter::PROBED_RETURN_WITHOUT_ENTRY);
        return;
    };
    let top = masked(depth - 1 - below, DEPTH_MASK);
    let f = a.stack[top];
    a.depth = top as u32;
    let d = now.saturating_sub(f.enter_ns);
    if (f.entry as usize) < MAX_ENTRIES {
        let e = &mut a.sums.entries[masked(f.entry as usize, ENTRY_MASK)];
        e.calls += 1;
        e.inclusive_ns += d;
        e.self_ns += d.saturating_sub(f.children_ns);
        e.off_cpu_ns += off_cpu_ns.saturating_sub(f.off_cpu_at_enter);
        if top > 0 {
            a.stack[masked(top - 1, DEPTH_MASK)].children_ns += d;
        }
    }
}

/// Open probed calls: `limits::OPEN_CALL_TABLES` tables of one cell per slot ([`open_call`]).
/// Exec-path functions do not recurse, so a thread has at most one open call per slot.
#[map]
static OPEN_CALLS: Array<[u64; limits::MAX_PROBED as usize]> = Array::with_max_entries(limits::OPEN_CALL_TABLES, 0);

/// The current thread's two candidate cells for `slot`, and its key in each. From the
/// `task_struct` address, not the thread id: an exec from a non-leader thread changes the id
/// mid-call (de_thread gives it the leader's), and a call entered under the old id must still
/// find its entry on return.
#[inline(always)]
fn cells(slot: u32) -> Option<([*mut u64; 2], [u64; 2])> {
    let (tables, keys) = open_call::place(task::current());
    // slot < MAX_PROBED (built into each program; the modulo is for the verifier).
    let slot = (slot % limits::MAX_PROBED) as usize;
    let first = OPEN_CALLS.get_ptr_mut(tables[0])?;
    let second = OPEN_CALLS.get_ptr_mut(tables[1])?;
    // SAFETY: both are live map values of MAX_PROBED cells.
    Some(unsafe { ([(first as *mut u64).add(slot), (second as *mut u64).add(slot)], keys) })
}

#[inline(always)]
fn entry(slot: u32) {
    if let Some(a) = summed(task::current()) {
        push(a, slot, unsafe { bpf_ktime_get_ns() });
        return;
    }
    let (pid, tgid) = task::current_ids();
    if !maps::is_traced(tgid) || !maps::in_call(pid) {
        return;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let Some((cells, keys)) = cells(slot) else { return };
    // SAFETY: aligned 64-bit words of map values: read and written whole.
    unsafe {
        let held = [cells[0].read_volatile(), cells[1].read_volatile()];
        let way = if open_call::is_of(held[0], keys[0]) || open_call::is_of(held[1], keys[1]) {
            // This thread's earlier call of the function never returned to us (a kretprobe
            // missed it): it is lost, and counted, as it is overwritten.
            maps::count(counter::PROBED_ENTRY_OVERWRITTEN);
            usize::from(!open_call::is_of(held[0], keys[0]))
        } else {
            // The first free cell; both taken by other threads' calls: the first's is evicted.
            usize::from(open_call::is_taken(held[0]) && !open_call::is_taken(held[1]))
        };
        let way = way & 1;
        cells[way].write_volatile(open_call::pack(keys[way], now));
    }
}

#[inline(always)]
fn ret(slot: u32) {
    if let Some(a) = summed(task::current()) {
        let off_cpu_ns = a.off_cpu_ns;
        pop(a, slot, unsafe { bpf_ktime_get_ns() }, off_cpu_ns);
        return;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let (pid, tgid) = task::current_ids();
    let Some((cells, keys)) = cells(slot) else { return };
    // SAFETY: as in `entry`. Each cell is matched against this thread's key for that table
    // only: the other key could be another thread's in that table.
    let found = unsafe {
        let first = cells[0].read_volatile();
        if open_call::is_of(first, keys[0]) {
            Some((cells[0], first))
        } else {
            let second = cells[1].read_volatile();
            open_call::is_of(second, keys[1]).then_some((cells[1], second))
        }
    };
    let Some((cell, value)) = found else {
        // System-wide helpers return all the time; only a traced call's missing entry is a loss.
        if maps::is_traced(tgid) && maps::in_call(pid) {
            maps::count(counter::PROBED_RETURN_WITHOUT_ENTRY);
        }
        return;
    };
    unsafe { cell.write_volatile(0) };
    attempt::flush(task::current());
    let rec = ProbedCallRecord {
        header: RecordHeader { kind: ProbedCallRecord::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns: now, pid, tgid },
        enter_ns: open_call::entered(value, now),
        slot,
        _reserved: 0,
    };
    maps::send(&rec);
}

macro_rules! slots {
    ($($n:literal => $entry:ident, $ret:ident, $fentry:ident, $fexit:ident;)*) => {$(
        #[kprobe]
        pub fn $entry(_ctx: ProbeContext) -> u32 {
            entry($n);
            0
        }
        #[kretprobe]
        pub fn $ret(_ctx: RetProbeContext) -> u32 {
            ret($n);
            0
        }
        /// The function is chosen at load time (user space passes its BTF name).
        #[fentry]
        pub fn $fentry(_ctx: FEntryContext) -> u32 {
            entry($n);
            0
        }
        #[fexit]
        pub fn $fexit(_ctx: FExitContext) -> u32 {
            ret($n);
            0
        }
    )*};
}

slots! {
    0 => exact_entry_0, exact_return_0, exact_fentry_0, exact_fexit_0;
    1 => exact_entry_1, exact_return_1, exact_fentry_1, exact_fexit_1;
    2 => exact_entry_2, exact_return_2, exact_fentry_2, exact_fexit_2;
    3 => exact_entry_3, exact_return_3, exact_fentry_3, exact_fexit_3;
    4 => exact_entry_4, exact_return_4, exact_fentry_4, exact_fexit_4;
    5 => exact_entry_5, exact_return_5, exact_fentry_5, exact_fexit_5;
    6 => exact_entry_6, exact_return_6, exact_fentry_6, exact_fexit_6;
    7 => exact_entry_7, exact_return_7, exact_fentry_7, exact_fexit_7;
    8 => exact_entry_8, exact_return_8, exact_fentry_8, exact_fexit_8;
    9 => exact_entry_9, exact_return_9, exact_fentry_9, exact_fexit_9;
    10 => exact_entry_10, exact_return_10, exact_fentry_10, exact_fexit_10;
    11 => exact_entry_11, exact_return_11, exact_fentry_11, exact_fexit_11;
    12 => exact_entry_12, exact_return_12, exact_fentry_12, exact_fexit_12;
    13 => exact_entry_13, exact_return_13, exact_fentry_13, exact_fexit_13;
    14 => exact_entry_14, exact_return_14, exact_fentry_14, exact_fexit_14;
    15 => exact_entry_15, exact_return_15, exact_fentry_15, exact_fexit_15;
    16 => exact_entry_16, exact_return_16, exact_fentry_16, exact_fexit_16;
    17 => exact_entry_17, exact_return_17, exact_fentry_17, exact_fexit_17;
    18 => exact_entry_18, exact_return_18, exact_fentry_18, exact_fexit_18;
    19 => exact_entry_19, exact_return_19, exact_fentry_19, exact_fexit_19;
    20 => exact_entry_20, exact_return_20, exact_fentry_20, exact_fexit_20;
    21 => exact_entry_21, exact_return_21, exact_fentry_21, exact_fexit_21;
    22 => exact_entry_22, exact_return_22, exact_fentry_22, exact_fexit_22;
    23 => exact_entry_23, exact_return_23, exact_fentry_23, exact_fexit_23;
    24 => exact_entry_24, exact_return_24, exact_fentry_24, exact_fexit_24;
    25 => exact_entry_25, exact_return_25, exact_fentry_25, exact_fexit_25;
    26 => exact_entry_26, exact_return_26, exact_fentry_26, exact_fexit_26;
    27 => exact_entry_27, exact_return_27, exact_fentry_27, exact_fexit_27;
    28 => exact_entry_28, exact_return_28, exact_fentry_28, exact_fexit_28;
    29 => exact_entry_29, exact_return_29, exact_fentry_29, exact_fexit_29;
    30 => exact_entry_30, exact_return_30, exact_fentry_30, exact_fexit_30;
    31 => exact_entry_31, exact_return_31, exact_fentry_31, exact_fexit_31;
}
