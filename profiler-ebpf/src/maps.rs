//! Maps shared by the hook families, and the loss counters.
use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use profiler_common::{limits, ExecRecord};

/// Records to user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(limits::DEFAULT_RING_BYTES, 0);

/// The traced process tree, keyed by tgid. User space seeds it with the launched child;
/// `sched_process_fork` adds descendants, `sched_process_exit` removes dead processes.
#[map]
pub static TRACED: HashMap<u32, u32> = HashMap::with_max_entries(limits::MAX_TRACED, 0);

/// Exec attempts between syscall enter and exit, keyed by thread id.
#[map]
pub static IN_FLIGHT: HashMap<u32, ExecRecord> =
    HashMap::with_max_entries(limits::MAX_IN_FLIGHT, 0);

/// Per-CPU scratch to build a record bigger than the eBPF stack allows.
#[map]
pub static SCRATCH: PerCpuArray<ExecRecord> = PerCpuArray::with_max_entries(1, 0);

/// Loss counters, indexed by `profiler_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(profiler_common::counter::COUNT, 0);

#[inline(always)]
pub fn count(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // Per-CPU slot: no other writer while this program runs on this CPU.
        unsafe { *slot += 1 };
    }
}

#[inline(always)]
pub fn is_traced(tgid: u32) -> bool {
    unsafe { TRACED.get(&tgid).is_some() }
}

/// Submit without waking the reader: a wake-up per record costs the traced CPU an irq_work
/// (and an IPI) per exec attempt; the reader polls on a short timer instead.
pub const NO_WAKEUP: u64 = aya_ebpf::bindings::BPF_RB_NO_WAKEUP as u64;
