//! Reads of `struct task_struct` fields at offsets user space found in the running kernel's
//! BTF (Rust eBPF has no CO-RE). An offset of 0 means "not available on this kernel".
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel};
use profiler_common::{kernel_features, limits::COMM_LEN, record_flags};

#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_REAL_PARENT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_MIN_FLT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_MAJ_FLT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_SIGNAL_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SIGNAL_LIVE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static BPRM_FILENAME_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_PENDING_SIGNAL_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static SIGNAL_GROUP_EXEC_TASK_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static THREAD_STATUS_OFFSET: u64 = 0;
/// See `names::GLOBAL_BTF_LOADS`.
#[unsafe(no_mangle)]
static BTF_LOADS: u64 = 0;
/// See `names::GLOBAL_KERNEL_FEATURES`.
#[unsafe(no_mangle)]
static KERNEL_FEATURES: u64 = 0;
#[unsafe(no_mangle)]
static TASK_STACK_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static PT_REGS_IN_STACK: u64 = 0;
#[unsafe(no_mangle)]
static TASK_STATE_OFFSET: u64 = 0;
/// See `names::GLOBAL_TASK_CGROUPS`.
#[unsafe(no_mangle)]
static TASK_CGROUPS_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static CSS_SET_DFL_CGRP_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_LEVEL_FIELD_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_ANCESTOR_IDS_OFFSET: u64 = 0;

/// A global the loader set (a read-only setting for the run).
#[inline(always)]
pub fn global(g: &'static u64) -> u64 {
    // Globals are rewritten by the loader; a plain read would be constant-folded to 0.
    unsafe { core::ptr::read_volatile(g) }
}

#[inline(always)]
unsafe fn read_at<T: Copy>(base: u64, offset: u64) -> Option<T> {
    unsafe { bpf_probe_read_kernel((base + offset) as *const T).ok() }
}

/// How a program reads a field of a kernel structure at `base + off`, by the kind of pointer
/// its hook gives it.
pub trait Kmem: Sized {
    /// The field, or its default when `base` is null or the read fails.
    fn at<T: Copy + Default>(base: u64, off: u64) -> T;

    /// (minor, major) fault counts of `task`, or None when the offsets are unknown.
    #[inline(always)]
    fn faults(task: u64) -> Option<(u64, u64)> {
        faults_with::<Self>(task)
    }
}

/// `bpf_probe_read_kernel`: works on any address, from any hook; a helper call each
/// (~150 instructions on the lab kernel under icount).
pub struct Probe;

/// Plain loads through the BTF-typed pointers fentry/fexit programs hold (the current task
/// from `bpf_get_current_task_btf`, the hooked function's arguments, and what is read through
/// them): the verifier checks each offset against the kernel's BTF and the JIT turns the load
/// into a few instructions that read 0 on a fault. The offsets are the loader's read-only
/// globals, constants to the verifier.
pub struct Btf;

impl Kmem for Probe {
    #[inline(always)]
    fn at<T: Copy + Default>(base: u64, off: u64) -> T {
        if base < 4096 {
            return T::default();
        }
        unsafe { bpf_probe_read_kernel((base + off) as *const T) }.unwrap_or_default()
    }

    /// Both counts in one helper call ([`faults`]).
    #[inline(always)]
    fn faults(task: u64) -> Option<(u64, u64)> {
        faults(task)
    }
}

impl Kmem for Btf {
    #[inline(always)]
    fn at<T: Copy + Default>(base: u64, off: u64) -> T {
        // The null test also tells the verifier a maybe-null pointer is not null here.
        if base == 0 {
            return T::default();
        }
        // SAFETY: a kernel pointer the verifier typed; a faulting load reads 0.
        unsafe { core::ptr::read((base + off) as *const T) }
    }
}

/// The raw syscall tracepoints may read through BTF-typed pointers (a constant to the
/// verifier, which checks only the branch it selects).
#[inline(always)]
pub fn btf_loads() -> bool {
    global(&BTF_LOADS) != 0
}

/// Whether the kernel has `feature`, one of `profiler_common::kernel_features` (a constant
/// to the verifier).
#[inline(always)]
pub fn has(feature: u64) -> bool {
    global(&KERNEL_FEATURES) & feature != 0
}

/// The saved user registers of `task` (a BTF-typed task pointer), BTF-typed.
#[inline(always)]
pub fn pt_regs_btf(task: u64) -> u64 {
    unsafe { aya_ebpf::helpers::generated::bpf_task_pt_regs(task as *mut _) as u64 }
}

/// The current task's saved user registers, to read with [`Probe`]: `bpf_task_pt_regs` where
/// the kernel has it, else their place at the top of the task's kernel stack.
#[inline(always)]
pub fn current_regs() -> u64 {
    if has(kernel_features::TASK_PT_REGS) {
        return pt_regs_btf(current_btf());
    }
    let stack: u64 = Probe::at(current(), global(&TASK_STACK_OFFSET));
    if stack == 0 { 0 } else { stack + global(&PT_REGS_IN_STACK) }
}

/// The current task as a BTF-typed pointer (fentry/fexit and other BTF-aware programs).
#[inline(always)]
pub fn current_btf() -> u64 {
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_task_btf() as u64 }
}

/// (minor, major) fault counts of `task` read with `M`, or None when the offsets are unknown.
#[inline(always)]
pub fn faults_with<M: Kmem>(task: u64) -> Option<(u64, u64)> {
    let (min_off, maj_off) = (global(&TASK_MIN_FLT_OFFSET), global(&TASK_MAJ_FLT_OFFSET));
    if min_off == 0 || maj_off == 0 {
        return None;
    }
    Some((M::at(task, min_off), M::at(task, maj_off)))
}

/// Why a failed exec's thread is dying, as [`record_flags`] bits: SIGKILL pending on the thread
/// (`task->pending.signal`; zap_other_threads and a process-wide SIGKILL both set it there),
/// and whether another thread's exec is under way (`signal->group_exec_task`, set by de_thread).
#[inline(always)]
pub fn kill_flags<M: Kmem>(task: u64) -> u32 {
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let pending_off = global(&TASK_PENDING_SIGNAL_OFFSET);
    if pending_off == 0 || M::at::<u64>(task, pending_off) & SIGKILL_BIT == 0 {
        return 0;
    }
    let (sig_off, exec_off) = (global(&TASK_SIGNAL_OFFSET), global(&SIGNAL_GROUP_EXEC_TASK_OFFSET));
    let exec_task: u64 = if sig_off == 0 || exec_off == 0 { 0 } else { M::at(M::at::<u64>(task, sig_off), exec_off) };
    if exec_task != 0 && exec_task != task {
        record_flags::KILLED | record_flags::KILLED_BY_OTHER_THREADS_EXEC
    } else {
        record_flags::KILLED
    }
}

/// (pid, tgid) of the current task: its thread id and process id.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

#[inline(always)]
pub fn current() -> u64 {
    unsafe { bpf_get_current_task() }
}

/// (minor, major) fault counts of `task`, or None when the offsets are unknown. User space
/// sets the major offset only when it directly follows the minor one, so one read gets both.
#[inline(always)]
pub fn faults(task: u64) -> Option<(u64, u64)> {
    let (min_off, maj_off) = (global(&TASK_MIN_FLT_OFFSET), global(&TASK_MAJ_FLT_OFFSET));
    if min_off == 0 || maj_off != min_off + 8 {
        return None;
    }
    let both = unsafe { read_at::<[u64; 2]>(task, min_off)? };
    Some((both[0], both[1]))
}

/// True while `task` runs an ia32 (compat) syscall: `TS_COMPAT` in `thread_info.status`, which
/// the kernel sets on every 32-bit entry (also `int $0x80` from 64-bit code, where `cs` would
/// say 64-bit) and which an exec sets or clears for the new image's ABI. False when the
/// kernel's BTF has no such field (no ia32 emulation there). x86 only: arm64 reads `pstate`
/// (`crate::arch`).
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
pub fn in_compat_syscall<M: Kmem>(task: u64) -> bool {
    const TS_COMPAT: u32 = 0x0002;
    let off = global(&THREAD_STATUS_OFFSET);
    off != 0 && M::at::<u32>(task, off) & TS_COMPAT != 0
}

/// `bprm->filename`: the kernel's copy of the exec'd path.
#[inline(always)]
pub fn bprm_filename(bprm: u64) -> Option<u64> {
    let off = global(&BPRM_FILENAME_OFFSET);
    if off == 0 || bprm == 0 {
        return None;
    }
    unsafe { read_at::<u64>(bprm, off) }.filter(|p| *p != 0)
}

/// (pid, tgid) of `task`.
#[inline(always)]
pub fn ids(task: u64) -> Option<(u32, u32)> {
    let (pid_off, tgid_off) = (global(&TASK_PID_OFFSET), global(&TASK_TGID_OFFSET));
    if pid_off == 0 || tgid_off == 0 {
        return None;
    }
    unsafe { Some((read_at::<u32>(task, pid_off)?, read_at::<u32>(task, tgid_off)?)) }
}

/// `task`'s scheduler state (`__state`, `state` before 5.14: its low 32 bits, all the flags).
#[inline(always)]
pub fn state(task: u64) -> u32 {
    Probe::at(task, global(&TASK_STATE_OFFSET))
}

/// The id of the current task's cgroup-v2 ancestor at `level` (its own cgroup at its own
/// level; 0 when it sits above `level`), as `bpf_get_current_ancestor_cgroup_id` gives it
/// where tracing programs have that helper (5.14+).
#[inline(always)]
pub fn current_ancestor_cgroup_id(level: u64) -> u64 {
    if has(kernel_features::ANCESTOR_CGROUP_ID) {
        return unsafe { aya_ebpf::helpers::generated::bpf_get_current_ancestor_cgroup_id(level as i32) };
    }
    // Before it: the kernel keeps each cgroup's ancestors' ids in the cgroup
    // (`ancestor_ids[level]`, through `task->cgroups->dfl_cgrp`).
    let ids = global(&CGROUP_ANCESTOR_IDS_OFFSET);
    if ids == 0 {
        return 0;
    }
    let css_set: u64 = Probe::at(current(), global(&TASK_CGROUPS_OFFSET));
    let cgroup: u64 = Probe::at(css_set, global(&CSS_SET_DFL_CGRP_OFFSET));
    let own_level: i32 = Probe::at(cgroup, global(&CGROUP_LEVEL_FIELD_OFFSET));
    if own_level < 0 || level > own_level as u64 {
        return 0;
    }
    Probe::at(cgroup, ids + 8 * (level & 0xff))
}

/// The process id (tgid) of `task`'s parent (`real_parent`).
#[inline(always)]
pub fn parent_tgid(task: u64) -> Option<u32> {
    let (parent_off, tgid_off) = (global(&TASK_REAL_PARENT_OFFSET), global(&TASK_TGID_OFFSET));
    if parent_off == 0 || tgid_off == 0 {
        return None;
    }
    unsafe { read_at::<u64>(task, parent_off).filter(|p| *p != 0).and_then(|p| read_at::<u32>(p, tgid_off)) }
}

/// True when no thread of `task`'s process is left alive (`signal->live == 0`). At
/// `sched_process_exit` this tells a process exit from one thread's exit; a thread killed by
/// another thread's exec (de_thread) must not end the process's tracing.
#[inline(always)]
pub fn group_dead(task: u64) -> bool {
    let (sig_off, live_off) = (global(&TASK_SIGNAL_OFFSET), global(&SIGNAL_LIVE_OFFSET));
    if sig_off == 0 {
        return true;
    }
    unsafe {
        match read_at::<u64>(task, sig_off) {
            Some(signal) if signal != 0 => read_at::<i32>(signal, live_off).map_or(true, |live| live <= 0),
            _ => true,
        }
    }
}

/// The current task's name, NUL-padded (all zeros if there is none). The buffer is zeroed a
/// word at a time first: 6.1's helper copies with `strscpy`, which leaves the bytes after the
/// NUL as they were, and aya's `bpf_get_current_comm` zeroes it with a byte-loop `memset`.
#[inline(always)]
pub fn comm() -> [u8; COMM_LEN] {
    let mut words = [0u64; COMM_LEN / 8];
    for w in &mut words {
        crate::maps::put(w, 0);
    }
    // SAFETY: the helper writes at most COMM_LEN bytes into the buffer.
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_comm(words.as_mut_ptr().cast(), COMM_LEN as u32) };
    // SAFETY: two u64 words are 16 bytes, any bit pattern a valid [u8; 16].
    unsafe { core::mem::transmute::<[u64; COMM_LEN / 8], [u8; COMM_LEN]>(words) }
}

/// Copies a task name between two 8-aligned fields of map values (asserted in
/// profiler-common) as two words: as bytes LLVM copies it with a byte-loop `memmove`. Not for
/// names on the stack, whose alignment the verifier checks and LLVM does not promise.
#[inline(always)]
pub fn copy_comm(dst: &mut [u8; COMM_LEN], src: &[u8; COMM_LEN]) {
    let (d, s) = (dst.as_mut_ptr().cast::<u64>(), src.as_ptr().cast::<u64>());
    for i in 0..COMM_LEN / 8 {
        // SAFETY: both point at COMM_LEN bytes, 8-aligned (see above).
        unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
    }
}
