//! Maps shared by the hook families, and the loss counters.
use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use profiler_common::limits;

/// Records to user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(limits::DEFAULT_RING_BYTES, 0);

/// The traced process tree, keyed by tgid. User space seeds it with the launched child;
/// `sched_process_fork` adds descendants, `sched_process_exit` removes dead processes.
#[map]
pub static TRACED: HashMap<u32, u32> = HashMap::with_max_entries(limits::MAX_TRACED, 0);

/// An exec attempt between syscall enter and exit. Small on purpose: this is written and
/// deleted once per attempt, and the file name is read only once, at exit, straight into the
/// ring buffer (measured: carrying a 344-byte record here cost the exec chain ~6%).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InFlight {
    pub enter_ns: u64,
    pub prepare_ns: u64,
    pub loaded_ns: u64,
    pub min_flt: u64,
    pub maj_flt: u64,
    /// The user-space file name pointer from the syscall's arguments.
    pub filename_ptr: u64,
    pub enter_pid: u32,
    pub syscall: u32,
    pub flags: u32,
    pub _reserved: u32,
}

/// Exec attempts between syscall enter and exit, keyed by thread id.
#[map]
pub static IN_FLIGHT: HashMap<u32, InFlight> = HashMap::with_max_entries(limits::MAX_IN_FLIGHT, 0);

/// The kernel's copy of the file name (`bprm->filename`), saved for attempts that pass the
/// point of no return: after it the user's copy is unmapped. Keyed by thread id.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SavedName {
    pub flags: u32,
    pub _reserved: u32,
    pub name: [u8; limits::FILENAME_CAP],
}

#[map]
pub static NAMES: HashMap<u32, SavedName> = HashMap::with_max_entries(limits::MAX_IN_FLIGHT, 0);

/// Per-CPU scratch for a [`SavedName`], too big for the eBPF stack.
#[map]
pub static NAME_SCRATCH: PerCpuArray<SavedName> = PerCpuArray::with_max_entries(1, 0);

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
