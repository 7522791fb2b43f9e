//! Exec attempts in flight: a thread's attempt claims its [`Attempt`] cell at the enter and
//! holds its enter record there instead of sending it; the attempt's next record of the thread
//! carries it in front, in the same ring buffer item. A failed exec then costs one ring record,
//! its exit, where it cost two (under icount, with the fentry programs' plain loads of the same
//! change: the enter program ran 520 instructions, now 310; the boundaries added 1,544 to a
//! failed exec, now 1,148). Exact mode sums the attempt's probed calls in the same cell
//! (`crate::exact`).
//!
//! The cell is claimed with a compare-and-exchange (before 5.12, which has none, by inserting
//! the cell's index into a hash map, which fails if it is there), so two threads that pick one
//! cell never both write it: the one that finds it taken sends its enter at once, as before. Every probe
//! that sends a record of a thread that may be inside an attempt sends the held enter first
//! ([`flush`]), so user space sees each thread's records in their order; samples are not
//! held up for it (user space places a sample by its time once the enter arrives).
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, HashMap},
};
use profiler_common::{Attempt, SyscallEnterRecord, call_sums, counter, id_flags, kernel_features};

use crate::{maps, task};

#[map]
static ATTEMPTS: Array<Attempt> = Array::with_max_entries(call_sums::TABLE, 0);

/// Cell index → the task holding it, where the kernel has no compare-and-exchange (the loader
/// leaves it one entry elsewhere).
#[map]
static ATTEMPT_OWNERS: HashMap<u32, u64> = HashMap::with_max_entries(call_sums::TABLE, 0);

/// The cell of thread `task`, whoever holds it.
#[inline(always)]
fn cell(task: u64) -> Option<&'static mut Attempt> {
    let a = ATTEMPTS.get_ptr_mut(call_sums::cell(task))?;
    // SAFETY: a live map value; only its owner's programs write it while it is owned (one
    // thread runs one program at a time), and it is claimed atomically.
    Some(unsafe { &mut *a })
}

/// Claims `a`, thread `task`'s cell, if it is free: the task that held it (0: none, so `task`
/// holds it now). A task that holds it already keeps it.
#[inline(always)]
fn claim(a: &mut Attempt, task: u64) -> u64 {
    if task::has(kernel_features::FETCH_ATOMICS) {
        return maps::compare_exchange(&raw mut a.owner, 0, task);
    }
    let index = call_sums::cell(task);
    if ATTEMPT_OWNERS.insert(&index, &task, u64::from(BPF_NOEXIST)).is_ok() {
        maps::put(&raw mut a.owner, task);
        return 0;
    }
    // Taken, or freed since the insert failed: either way not this attempt's to use now.
    ATTEMPT_OWNERS.get_ptr(&index).map_or(u64::MAX, |owner| unsafe { *owner })
}

/// Frees `a`, held by `task`, once everything read from it is copied: another thread may
/// claim it and write it right after.
#[inline(always)]
fn release(a: &mut Attempt, task: u64) {
    if task::has(kernel_features::FETCH_ATOMICS) {
        // The same atomic instruction that claims it (a full barrier).
        maps::compare_exchange(&raw mut a.owner, task, 0);
        return;
    }
    maps::put(&raw mut a.owner, 0);
    // The map's bucket lock orders the stores above before another thread's claim.
    let _ = ATTEMPT_OWNERS.remove(&call_sums::cell(task));
}

/// The attempt in flight on thread `task`, if it holds its cell.
#[inline(always)]
pub fn of(task: u64) -> Option<&'static mut Attempt> {
    cell(task).filter(|a| a.owner == task)
}

/// An exec attempt enters on thread `task` (`pid`): its cell is claimed, if free (or still
/// held by an attempt of its own that never returned), and `enter` is held there. False when
/// another thread's attempt holds the cell: the caller sends `enter` now.
#[inline(always)]
pub fn begin(task: u64, pid: u32, enter: &SyscallEnterRecord, summing: bool) -> bool {
    let Some(a) = cell(task) else { return false };
    let was = claim(a, task);
    if was != 0 && was != task {
        return false;
    }
    if was == task && a.held != 0 {
        // An earlier attempt of the thread whose exit was never seen (it entered before the
        // exit probe was attached): its enter goes out, counted as one without exit.
        send_enter(&a.enter);
    }
    a.enter = *enter;
    a.held = 1;
    a.summing = u32::from(summing);
    a.off_cpu_ns = 0;
    if summing {
        a.depth = 0;
        a.root_child = u32::from(call_sums::NONE);
        a.sums.count = 0;
        a.sums.unsummed = 0;
    }
    if summing {
        maps::set_summed(pid);
    }
    true
}

/// Sends a held enter on its own; false, and counted as a dropped exec enter, when the ring
/// buffer is full.
#[inline(always)]
pub fn send_enter(enter: &SyscallEnterRecord) -> bool {
    let sent = maps::try_send(enter);
    if !sent {
        maps::count(counter::EXEC_ENTER_DROPPED);
    }
    sent
}

/// Thread `task` is about to send a record inside its attempt: the held enter goes first.
#[inline(always)]
pub fn flush(task: u64) {
    let Some(a) = of(task) else { return };
    if !take(a) {
        return;
    }
    if !maps::try_send(&a.enter) {
        held_dropped(&a.enter);
    }
}

/// Thread `task` runs again after `off_ns` off-CPU (`sched_switch`, about to send the
/// interval): the time is added to its attempt's off-CPU time, which its probed calls'
/// sums take theirs from, and the held enter goes out first, as in [`flush`].
#[inline(always)]
pub fn ran_again(task: u64, off_ns: u64) {
    let Some(a) = of(task) else { return };
    a.off_cpu_ns += off_ns;
    if take(a) && !maps::try_send(&a.enter) {
        held_dropped(&a.enter);
    }
}

/// Thread `task` is about to send a record inside its attempt and takes the held enter to put
/// in front of it, in the same item (one reservation for both); if that item cannot be
/// reserved, [`held_dropped`].
#[inline(always)]
pub fn take_held(task: u64) -> Option<SyscallEnterRecord> {
    let a = of(task)?;
    take(a).then_some(a.enter)
}

/// Takes the held enter of `a` for sending: true for exactly one of the programs that try,
/// however they interleave. Since 7.x the kernel runs tracepoint programs preemptible (as it
/// always ran fentry ones), so a thread can be switched out in the middle of its own exit
/// program, and `sched_switch` then flushes the same enter when the thread comes back: a
/// plain read-then-clear sent it twice (15,006 attempts seen of 15,002 made, on 7.3). With
/// compare-and-exchange on the word `held` shares with `summing` (which only the owner writes,
/// never while another program of its own runs) the take is one atomic step; before 5.12
/// there is none, and no preemptible BPF either (migrate_disable was preempt_disable then).
#[inline(always)]
pub fn take(a: &mut Attempt) -> bool {
    if !task::has(kernel_features::FETCH_ATOMICS) {
        let held = a.held != 0;
        a.held = 0;
        return held;
    }
    let word = (&raw mut a.held).cast::<u64>();
    // SAFETY: `held` and `summing` are one aligned 8-byte word (asserted in profiler-common);
    // both architectures are little-endian, so `held` is its low half.
    let old = unsafe { core::ptr::read_volatile(word) };
    old as u32 != 0 && maps::compare_exchange(word, old, old & !u64::from(u32::MAX)) == old
}

/// A held enter could not be sent (a full ring buffer), on its own or with the record it went
/// in front of: counted as a dropped enter, and the attempt's exit joins no older call.
#[inline(always)]
pub fn held_dropped(enter: &SyscallEnterRecord) {
    maps::count(counter::EXEC_ENTER_DROPPED);
    maps::enter_lost(enter.header.pid);
}

/// The attempt on thread `task` ends (its exit, or the thread's: `exiting`): its call sums go
/// out (after the held enter, in the same item), the cell is freed, and the enter, if still
/// held, is returned for the caller to send in front of its own record. Found by the task, not
/// the thread id, which an exec from a non-leader thread changes; the id's flags only tell
/// that the attempt had claimed a cell.
#[inline(always)]
pub fn end(task: u64, pid: u32, tgid: u32, now: u64, exiting: bool) -> Option<SyscallEnterRecord> {
    let Some(a) = of(task) else {
        if !exiting && maps::flags(pid) & id_flags::SUMMED != 0 {
            maps::count(counter::CALL_SUMS_LOST);
        }
        return None;
    };
    if a.summing != 0 {
        crate::exact::send_sums(a, pid, tgid, now);
    }
    // A freed cell holds nothing: its next owner, preempted between its claim and its own
    // enter, must not flush this one again.
    let held = take(a).then_some(a.enter);
    release(a, task);
    held
}
