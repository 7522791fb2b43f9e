//! The contract between execprof's eBPF programs and its user-space side, and nothing else.
//!
//! Every record the kernel side sends starts with [`RecordHeader`]; records are `#[repr(C)]`,
//! fixed-size, with no `bool` and no implicit padding (checked at compile time below), so the
//! user side can copy them out of the ring buffer byte for byte.
#![cfg_attr(not(test), no_std)]

/// Names of the maps, programs and globals, shared so neither side spells them on its own.
pub mod names {
    pub const MAP_EVENTS: &str = "EVENTS";
    pub const MAP_IDS: &str = "IDS";
    pub const MAP_TREE_ALIVE: &str = "TREE_ALIVE";
    pub const MAP_COUNTERS: &str = "COUNTERS";
    /// Exact mode: entry times of probed calls still open, per (thread, slot): [`crate::open_call`].
    pub const MAP_OPEN_CALLS: &str = "OPEN_CALLS";
    /// Exec attempts in flight: held enter records, exact mode's call sums ([`crate::Attempt`]).
    pub const MAP_ATTEMPTS: &str = "ATTEMPTS";
    /// Who holds each cell of [`MAP_ATTEMPTS`], where the kernel has no compare-and-exchange
    /// ([`crate::kernel_features::FETCH_ATOMICS`]): cell index → task, claimed by an insert
    /// that fails if the key exists.
    pub const MAP_ATTEMPT_OWNERS: &str = "ATTEMPT_OWNERS";
    /// The agent's maps ([`crate::aggregate`]).
    pub const MAP_AGGREGATES: &str = "AGGREGATES";
    pub const MAP_OTHER_AGGREGATES: &str = "OTHER_AGGREGATES";
    pub const MAP_IN_FLIGHT: &str = "IN_FLIGHT";
    pub const MAP_AGG_COUNTERS: &str = "AGG_COUNTERS";
    pub const MAP_MISSES: &str = "MISSES";
    pub const MAP_STACKS: &str = "STACKS";
    pub const MAP_STACK_COUNTS: &str = "STACK_COUNTS";
    pub const MAP_PROCESSES: &str = "PROCESSES";

    pub const PROG_SYS_ENTER: &str = "sys_enter";
    pub const PROG_SYS_EXIT: &str = "sys_exit";
    /// Per-syscall event boundaries: one program for every `syscalls:sys_enter_*` of
    /// [`SYSCALL_EVENTS`], one for every `sys_exit_*`.
    pub const PROG_SYS_ENTER_EVENT: &str = "sys_enter_event";
    pub const PROG_SYS_EXIT_EVENT: &str = "sys_exit_event";
    /// The syscalls whose `syscalls:sys_enter_NAME`/`sys_exit_NAME` events time the calls: the
    /// target architecture's own ABI's (the events never fire for compat calls).
    #[cfg(not(target_arch = "aarch64"))]
    pub const SYSCALL_EVENTS: &[&str] = &["execve", "execveat", "clone", "clone3", "fork", "vfork"];
    /// arm64's (asm-generic) ABI has no `fork` or `vfork`: its C library makes them `clone`.
    #[cfg(target_arch = "aarch64")]
    pub const SYSCALL_EVENTS: &[&str] = &["execve", "execveat", "clone", "clone3"];
    pub const PROG_SCHED_PREPARE_EXEC: &str = "sched_prepare_exec";
    pub const PROG_SCHED_PROCESS_EXEC: &str = "sched_process_exec";
    pub const PROG_SCHED_PROCESS_FORK: &str = "sched_process_fork";
    pub const PROG_SCHED_PROCESS_EXIT: &str = "sched_process_exit";
    pub const PROG_SAMPLE: &str = "sample_exec_stack";
    pub const PROG_SCHED_SWITCH: &str = "sched_switch";
    pub const PROG_MAIN_ENTRY: &str = "main_entry";
    /// Exact mode: `exact_entry_N` / `exact_return_N` for function slot N < MAX_PROBED.
    pub const PROG_EXACT_ENTRY_PREFIX: &str = "exact_entry_";
    pub const PROG_EXACT_RETURN_PREFIX: &str = "exact_return_";
    /// Exact mode on kernels with BPF trampolines: `exact_fentry_N` / `exact_fexit_N`.
    pub const PROG_EXACT_FENTRY_PREFIX: &str = "exact_fentry_";
    pub const PROG_EXACT_FEXIT_PREFIX: &str = "exact_fexit_";

    /// fentry/fexit boundaries: each exec syscall function, and `kernel_clone` for the fork
    /// family, with its entry and exit programs (exit `""`: only counted, x32's execs). The
    /// functions are the target architecture's (arch/*/include/asm/syscall_wrapper.h); the
    /// programs are the same on both, the compat pair timing ia32 or AArch32 calls.
    #[cfg(not(target_arch = "aarch64"))]
    pub const BOUNDARIES: &[Boundary] = &[
        Boundary { function: "__x64_sys_execve", entry: "in_execve", exit: "out_execve", native: true },
        Boundary { function: "__x64_sys_execveat", entry: "in_execveat", exit: "out_execveat", native: true },
        Boundary { function: "__ia32_compat_sys_execve", entry: "in_compat_execve", exit: "out_compat_execve", native: false },
        Boundary { function: "__ia32_compat_sys_execveat", entry: "in_compat_execveat", exit: "out_compat_execveat", native: false },
        Boundary { function: "kernel_clone", entry: "in_kernel_clone", exit: "out_kernel_clone", native: true },
        Boundary { function: "__x64_compat_sys_execve", entry: "in_x32_execve", exit: "", native: false },
        Boundary { function: "__x64_compat_sys_execveat", entry: "in_x32_execveat", exit: "", native: false },
    ];
    /// arm64's: the AArch32 functions exist only with `CONFIG_COMPAT`; there is no x32.
    #[cfg(target_arch = "aarch64")]
    pub const BOUNDARIES: &[Boundary] = &[
        Boundary { function: "__arm64_sys_execve", entry: "in_execve", exit: "out_execve", native: true },
        Boundary { function: "__arm64_sys_execveat", entry: "in_execveat", exit: "out_execveat", native: true },
        Boundary { function: "__arm64_compat_sys_execve", entry: "in_compat_execve", exit: "out_compat_execve", native: false },
        Boundary { function: "__arm64_compat_sys_execveat", entry: "in_compat_execveat", exit: "out_compat_execveat", native: false },
        Boundary { function: "kernel_clone", entry: "in_kernel_clone", exit: "out_kernel_clone", native: true },
    ];

    /// One row of [`BOUNDARIES`].
    #[derive(Clone, Copy, Debug)]
    pub struct Boundary {
        /// The kernel function (its BTF name).
        pub function: &'static str,
        pub entry: &'static str,
        pub exit: &'static str,
        /// The 64-bit ABI's: every kernel of the architecture has it. The others exist only
        /// with compat (ia32, AArch32) or x32 emulation built in.
        pub native: bool,
    }

    /// Globals fixed before load: byte offsets inside kernel structs, taken from the running
    /// kernel's BTF because Rust eBPF has no CO-RE relocations.
    pub const GLOBAL_TASK_PID: &str = "TASK_PID_OFFSET";
    pub const GLOBAL_TASK_TGID: &str = "TASK_TGID_OFFSET";
    /// `task_struct.real_parent`.
    pub const GLOBAL_TASK_REAL_PARENT: &str = "TASK_REAL_PARENT_OFFSET";
    pub const GLOBAL_TASK_MIN_FLT: &str = "TASK_MIN_FLT_OFFSET";
    pub const GLOBAL_TASK_MAJ_FLT: &str = "TASK_MAJ_FLT_OFFSET";
    pub const GLOBAL_TASK_SIGNAL: &str = "TASK_SIGNAL_OFFSET";
    pub const GLOBAL_SIGNAL_LIVE: &str = "SIGNAL_LIVE_OFFSET";
    pub const GLOBAL_BPRM_FILENAME: &str = "BPRM_FILENAME_OFFSET";
    /// `task_struct.pending.signal` (the thread's own pending set).
    pub const GLOBAL_TASK_PENDING_SIGNAL: &str = "TASK_PENDING_SIGNAL_OFFSET";
    /// `signal_struct.group_exec_task` (5.17+; 0 when absent).
    pub const GLOBAL_SIGNAL_GROUP_EXEC_TASK: &str = "SIGNAL_GROUP_EXEC_TASK_OFFSET";
    /// `task_struct.thread_info.status` (x86: its `TS_COMPAT` bit marks an ia32 syscall).
    pub const GLOBAL_THREAD_STATUS: &str = "THREAD_STATUS_OFFSET";
    /// 1: the raw syscall tracepoints and the per-syscall events read the task and its
    /// registers through BTF-typed pointers (`bpf_get_current_task_btf`, `bpf_task_pt_regs`:
    /// Linux 5.15+), plain loads instead of a `bpf_probe_read_kernel` call each (`run` only).
    pub const GLOBAL_BTF_LOADS: &str = "BTF_LOADS";
    /// What the running kernel's BPF allows, found by trying at load: bits of
    /// [`crate::kernel_features`]. The programs branch on it; the verifier sees a constant and
    /// checks only the branch taken, so an instruction or helper the kernel lacks may stand
    /// in the other.
    pub const GLOBAL_KERNEL_FEATURES: &str = "KERNEL_FEATURES";
    /// `task_struct.stack`, and the saved user registers' distance from it
    /// (`THREAD_SIZE - sizeof(struct pt_regs)`, less the architecture's padding): the
    /// registers of a task where the kernel has no `bpf_task_pt_regs` (before 5.15).
    pub const GLOBAL_TASK_STACK: &str = "TASK_STACK_OFFSET";
    pub const GLOBAL_PT_REGS_IN_STACK: &str = "PT_REGS_IN_STACK";
    /// Which processes are traced: one of [`crate::scope`].
    pub const GLOBAL_SCOPE: &str = "SCOPE";
    /// `scope::CGROUP`: the cgroup v2 directory's id (its inode number) and its depth below
    /// the root (the ancestor level `bpf_get_current_ancestor_cgroup_id` compares at).
    pub const GLOBAL_CGROUP_ID: &str = "CGROUP_ID";
    pub const GLOBAL_CGROUP_LEVEL: &str = "CGROUP_LEVEL";
    /// Where a kernel has no `bpf_get_current_ancestor_cgroup_id` for tracing programs
    /// (before 5.14), the ancestor's id is read from the task: `task_struct.cgroups`,
    /// `css_set.dfl_cgrp`, `cgroup.level` and `cgroup.ancestor_ids` (an array of ids, which
    /// such kernels have; 0: absent).
    pub const GLOBAL_TASK_CGROUPS: &str = "TASK_CGROUPS_OFFSET";
    pub const GLOBAL_CSS_SET_DFL_CGRP: &str = "CSS_SET_DFL_CGRP_OFFSET";
    pub const GLOBAL_CGROUP_LEVEL_FIELD: &str = "CGROUP_LEVEL_FIELD_OFFSET";
    pub const GLOBAL_CGROUP_ANCESTOR_IDS: &str = "CGROUP_ANCESTOR_IDS_OFFSET";
    /// `task_struct.__state` (`state` before 5.14): whether a switched-out thread is dying.
    pub const GLOBAL_TASK_STATE: &str = "TASK_STATE_OFFSET";
    /// Non-zero when the kernel has no `sched_prepare_exec`: the exec'd name is then read at
    /// `sched_process_exec` instead.
    pub const GLOBAL_NAME_AT_LOADED: &str = "NAME_AT_LOADED";
    /// Non-zero with `--argv`: each exec attempt's arguments are read at its enter and sent
    /// as an [`crate::ArgvRecord`] just before its [`crate::SyscallEnterRecord`].
    pub const GLOBAL_ARGV: &str = "ARGV";
    /// Non-zero for `execprof agent`: the boundaries fold each call into the aggregates
    /// ([`crate::aggregate`]) and send no record; the sched hooks only keep the traced set.
    pub const GLOBAL_AGGREGATE: &str = "AGGREGATE";
    /// Non-zero where exact mode may sum each exec attempt's probed calls in the kernel
    /// ([`crate::call_sums`]) instead of sending a record per call; zero where each call is
    /// wanted on its own (`--trace`'s timelines, `--mode sampled`).
    pub const GLOBAL_CALL_SUMS: &str = "CALL_SUMS";
    pub const GLOBAL_IN_FLIGHT_MASK: &str = "IN_FLIGHT_MASK";
    /// The agent's reads of the caller's executable and memory: `task_struct.mm`,
    /// `mm_struct.exe_file`, `file.f_inode`, `inode.i_ino`, `inode.i_sb`, `super_block.s_dev`,
    /// and the resident-page counters (file, anon, shmem) inside `mm_struct` (0: unknown).
    pub const GLOBAL_TASK_MM: &str = "TASK_MM_OFFSET";
    pub const GLOBAL_MM_EXE_FILE: &str = "MM_EXE_FILE_OFFSET";
    pub const GLOBAL_FILE_INODE: &str = "FILE_INODE_OFFSET";
    pub const GLOBAL_INODE_INO: &str = "INODE_INO_OFFSET";
    pub const GLOBAL_INODE_SB: &str = "INODE_SB_OFFSET";
    pub const GLOBAL_INODE_GENERATION: &str = "INODE_GENERATION_OFFSET";
    pub const GLOBAL_SB_DEV: &str = "SB_DEV_OFFSET";
    pub const GLOBAL_MM_RSS_FILE: &str = "MM_RSS_FILE_OFFSET";
    pub const GLOBAL_MM_RSS_ANON: &str = "MM_RSS_ANON_OFFSET";
    pub const GLOBAL_MM_RSS_SHMEM: &str = "MM_RSS_SHMEM_OFFSET";
    /// The program's path: `file.f_path.dentry`, `dentry.d_parent`, `dentry.d_name.name`.
    pub const GLOBAL_FILE_DENTRY: &str = "FILE_DENTRY_OFFSET";
    pub const GLOBAL_DENTRY_PARENT: &str = "DENTRY_PARENT_OFFSET";
    pub const GLOBAL_DENTRY_NAME: &str = "DENTRY_NAME_OFFSET";
}

/// Bits of [`names::GLOBAL_KERNEL_FEATURES`]: what the kernel's BPF has, found by trying.
pub mod kernel_features {
    /// Atomic instructions that return the old value (compare-and-exchange; Linux 5.12+).
    /// Without them an exec attempt claims its cell by inserting into a hash map.
    pub const FETCH_ATOMICS: u64 = 1;
    /// `bpf_get_current_task_btf` (5.11+): the current task as a BTF-typed pointer, read with
    /// plain loads. Without it the task's fields are read with `bpf_probe_read_kernel`.
    pub const CURRENT_TASK_BTF: u64 = 2;
    /// `bpf_task_pt_regs` (5.15+): a task's saved user registers. Without it they are found
    /// from `task_struct.stack` ([`super::names::GLOBAL_PT_REGS_IN_STACK`]).
    pub const TASK_PT_REGS: u64 = 4;
    /// `bpf_get_current_ancestor_cgroup_id` in tracing programs (5.14+), for `--cgroup`.
    /// Without it the id is read through the task ([`super::names::GLOBAL_TASK_CGROUPS`]).
    pub const ANCESTOR_CGROUP_ID: u64 = 8;
}

/// Capacity limits, shared so the user side can report them when they are hit.
pub mod limits {
    /// Bytes of an exec's file name kept (including the terminating NUL).
    pub const FILENAME_CAP: usize = 256;
    /// Bytes of a task's comm (the kernel's `TASK_COMM_LEN`, with its NUL).
    pub const COMM_LEN: usize = 16;
    /// Ids (pids, tids) per entry of the `IDS` flag array; user space sizes the array to
    /// cover the kernel's `pid_max`.
    pub const IDS_PER_ENTRY: usize = 64;
    /// Kernel frames kept per sample (deeper stacks keep their innermost frames).
    pub const MAX_FRAMES: usize = 64;
    /// Kernel functions exact mode can probe at once (one entry/return program pair each).
    pub const MAX_PROBED: u32 = 32;
    /// Traced threads off-CPU at once (for the step timeline).
    pub const MAX_OFF_CPU: u32 = 65_536;
    /// Exact mode: tables of open probed calls, one cell per slot each; a thread's table is
    /// chosen by its `task_struct` address ([`crate::open_call`]). A power of two.
    pub const OPEN_CALL_TABLES: u32 = 4096;
    /// `--argv`: bytes of an exec's arguments kept, each with its NUL ...
    pub const ARGV_CAP: usize = 512;
    /// ... of at most this many arguments ...
    pub const ARGV_MAX_ARGS: usize = 16;
    /// ... each cut to this many bytes with its NUL.
    pub const ARG_CAP: usize = 128;
    /// Default ring buffer size in bytes (a power of two, a multiple of the page size).
    pub const DEFAULT_RING_BYTES: u32 = 8 << 20;
}

// The table of record kinds: its rule and columns are on `RECORD_KINDS`, which it generates.
macro_rules! record_kinds {
    ($($(#[$doc:meta])* $constant:ident = $kind:literal, tag $tag:literal, $name:literal, $record:ident;)*) => {
        /// What a record is; the first field of every record (see [`crate::RECORD_KINDS`]).
        pub mod kind {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nSent as [`", stringify!($record), "`](crate::", stringify!($record), ").")]
                pub const $constant: u32 = $kind;
            )*
        }

        /// The tag byte's kind nibble of each record kind in a recording file (see
        /// [`crate::RECORD_KINDS`]); user space only, kept here so the table stays one.
        pub mod recording_tag {
            $(pub const $constant: u8 = $tag;)*
        }

        /// The record kinds, the one list of them: `kind::*`, the recording's tags and the kind names
        /// are generated from it, and the decoder's and assembler's handlers are named after it, so
        /// the lists cannot drift apart.
        ///
        /// The naming rule, so one name can be grepped across the crates: a kind `X_Y` is sent as
        /// `XYRecord` (with [`WireRecord::KIND`] `kind::X_Y`), decodes to `Body::XY`, and the decoder
        /// and the assembler handle it in functions named `x_y`. "Syscall" is a traced syscall (exec
        /// or fork family) entering or exiting; "task" is a thread or process starting or ending; a
        /// "probed call" is one call of a kernel function under exact mode's entry/return probes.
        ///
        /// Columns: the constant, the number the kernel sends in [`RecordHeader::kind`], the tag a
        /// recording file stores, the name messages use, and the record struct. The tag is a second
        /// numbering because recordings already written store it: it cannot follow the kernel's.
        ///
        /// Rows are in recording tag order.
        pub const RECORD_KINDS: [RecordKind; [$($kind),*].len()] = [$(
            RecordKind {
                constant: stringify!($constant),
                kind: kind::$constant,
                tag: recording_tag::$constant,
                name: $name,
                size: core::mem::size_of::<$record>(),
            },
        )*];

        $(impl WireRecord for $record {
            const KIND: u32 = kind::$constant;
        })*
    };
}

record_kinds! {
    /// A traced syscall (exec or fork family) was entered.
    SYSCALL_ENTER = 8, tag 0, "syscall enter", SyscallEnterRecord;
    /// A traced syscall (exec or fork family) returned.
    SYSCALL_EXIT = 1, tag 1, "syscall exit", SyscallExitRecord;
    /// An exec passed its point of no return (`sched_prepare_exec`).
    NO_RETURN = 9, tag 2, "point of no return", NoReturnRecord;
    /// An exec's new image is in place (`sched_process_exec`).
    LOADED = 10, tag 3, "new image", LoadedRecord;
    /// A new thread or process in the traced tree (`sched_process_fork`).
    TASK_NEW = 2, tag 4, "task new", TaskNewRecord;
    /// A traced thread exited (`sched_process_exit`).
    TASK_EXIT = 3, tag 5, "task exit", TaskExitRecord;
    /// A cpu-clock sample inside a traced syscall.
    SAMPLE = 4, tag 6, "sample", SampleRecord;
    /// Exact mode, one call of a probed kernel function.
    PROBED_CALL = 5, tag 7, "probed call", ProbedCallRecord;
    /// A traced thread ran again after being off-CPU.
    OFF_CPU = 6, tag 8, "off-CPU", OffCpuRecord;
    /// A traced process reached `main` (uprobe).
    MAIN = 7, tag 9, "main", MainRecord;
    /// `--argv`: an exec attempt's arguments, read at its enter (sent just before it).
    ARGV = 11, tag 10, "arguments", ArgvRecord;
    /// `--cgroup`: a process found in the cgroup at one of its calls joined the traced set
    /// (sent just before that call's records).
    ADOPTED = 12, tag 11, "adopted", AdoptedRecord;
    /// Exact mode: an exec attempt's probed calls summed per call path in the kernel (sent
    /// just before its exit; only the entries in use).
    CALL_SUMS = 13, tag 12, "probed call sums", CallSumsRecord;
}

/// One row of [`RECORD_KINDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordKind {
    /// The `kind::*` constant's name, e.g. `"NO_RETURN"`.
    pub constant: &'static str,
    pub kind: u32,
    pub tag: u8,
    /// The words messages use for it.
    pub name: &'static str,
    /// Bytes of its record struct.
    pub size: usize,
}

impl RecordKind {
    /// The row of a kernel kind number.
    pub fn of_kind(kind: u32) -> Option<&'static RecordKind> {
        RECORD_KINDS.iter().find(|k| k.kind == kind)
    }

    /// The row of a recording tag's kind nibble.
    pub fn of_tag(tag: u8) -> Option<&'static RecordKind> {
        RECORD_KINDS.iter().find(|k| k.tag == tag)
    }
}

/// A record struct's kind, from the table: the eBPF side takes a header's kind from the struct
/// it sends, so a struct cannot go out under another kind's number.
pub trait WireRecord: Copy {
    const KIND: u32;
}

/// Bits of the per-id flag bytes in the `IDS` array (one byte per pid/tid).
pub mod id_flags {
    /// The id is the tgid of a process in the traced tree.
    pub const TRACED: u8 = 1;
    /// The thread with this id is inside a traced syscall (exec or fork family).
    pub const IN_CALL: u8 = 2;
    /// The enter record of the thread's current call was dropped (ring buffer full): its exit
    /// must not join an older call of the thread whose exit was dropped.
    pub const ENTER_LOST: u8 = 4;
    /// Exact mode: the thread's current exec attempt sums its probed calls in the kernel.
    pub const SUMMED: u8 = 8;
}

/// Values of the `SCOPE` global: which processes the kernel side traces.
pub mod scope {
    /// The processes marked traced in the id flags (a launched command, `--pid` processes)
    /// and every process they fork.
    pub const TREE: u64 = 0;
    /// Every process on the machine (`--all`).
    pub const ALL: u64 = 1;
    /// The marked ones, plus any process found in the cgroup (or below) at one of its exec
    /// or fork-family calls, which marks it (`--cgroup`).
    pub const CGROUP: u64 = 2;
}

/// Exact mode's open calls: where a thread's probed call waits for its return, and how its
/// entry time is kept. A thread has two candidate tables, picked from its `task_struct`
/// address by a bijective mix of the address's bits 6–40 (task structs come from slabs at
/// fixed offsets, so raw address bits would put many threads of one process in the same
/// table); the entry goes to the first whose cell for the slot is free or the thread's own,
/// else the second, else it evicts the first's occupant (whose return then counts as one
/// without entry). A cell holds a valid bit, a 24-bit key (which of the two tables, and a
/// 23-bit tag of the mixed address) and the entry time's low 39 bits, in one 64-bit word
/// written and read whole: table and key together give back the address's bits 6–40, so a
/// thread never takes another's time for threads whose structs lie within 2 TiB of each other
/// (all of a machine's memory, below 2 TiB). 39 bits of nanoseconds span 9 minutes, far
/// beyond any one call of the exec path.
pub mod open_call {
    use crate::limits::OPEN_CALL_TABLES;

    const LINE_SHIFT: u32 = 6;
    const TABLE_BITS: u32 = OPEN_CALL_TABLES.trailing_zeros();
    const TABLE_MASK: u64 = OPEN_CALL_TABLES as u64 - 1;
    const TAG_BITS: u32 = 23;
    const MIXED_BITS: u32 = TABLE_BITS + TAG_BITS;
    const MIXED_MASK: u64 = (1 << MIXED_BITS) - 1;
    const KEY_BITS: u32 = TAG_BITS + 1;
    const NS_BITS: u32 = 39;
    const NS_MASK: u64 = (1 << NS_BITS) - 1;
    const VALID: u64 = 1 << 63;
    const _: () = assert!(OPEN_CALL_TABLES.is_power_of_two() && KEY_BITS + NS_BITS + 1 == 64);

    /// A bijection of the low `MIXED_BITS` bits (odd multipliers and right xor-shifts are each
    /// invertible modulo a power of two), whose low bits depend on every input bit.
    #[inline(always)]
    fn mix(x: u64) -> u64 {
        let mut x = x & MIXED_MASK;
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & MIXED_MASK;
        x ^= x >> 17;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & MIXED_MASK;
        x ^ (x >> 16)
    }

    /// The two candidate tables of the thread whose `task_struct` is at `task`, and its key
    /// in each.
    #[inline(always)]
    pub fn place(task: u64) -> ([u32; 2], [u64; 2]) {
        let m = mix(task >> LINE_SHIFT);
        let (first, tag) = (m & TABLE_MASK, m >> TABLE_BITS);
        // Never the first table again (the low bit is set), and from the tag alone, so the
        // second table and the tag give back the first.
        let step = ((tag.wrapping_mul(0x9E37_79B9) >> 11) & TABLE_MASK) | 1;
        ([first as u32, (first ^ step) as u32], [tag, tag | 1 << TAG_BITS])
    }

    /// A cell holding an entry at `now_ns` under `key`.
    #[inline(always)]
    pub fn pack(key: u64, now_ns: u64) -> u64 {
        VALID | key << NS_BITS | (now_ns & NS_MASK)
    }

    /// Whether `cell` holds an entry under `key`.
    #[inline(always)]
    pub fn is_of(cell: u64, key: u64) -> bool {
        cell & VALID != 0 && (cell >> NS_BITS) & ((1 << KEY_BITS) - 1) == key
    }

    /// Whether `cell` holds an entry at all.
    #[inline(always)]
    pub fn is_taken(cell: u64) -> bool {
        cell & VALID != 0
    }

    /// The full entry time of the call in `cell`, returning at `now_ns`.
    #[inline(always)]
    pub fn entered(cell: u64, now_ns: u64) -> u64 {
        now_ns - (now_ns.wrapping_sub(cell) & NS_MASK)
    }
}

/// Indices into the per-CPU `COUNTERS` array. Every way the kernel side can lose or not see
/// something has a counter here, and the user side always prints all of them.
pub mod counter {
    /// A record other than a syscall enter could not be reserved in the ring buffer (user
    /// space too slow).
    pub const RING_FULL: u32 = 0;
    /// A forked process could not be added to the traced set (its id is beyond the flag
    /// array, i.e. `pid_max` was raised during the run): it and its descendants are lost.
    pub const TRACED_FULL: u32 = 1;
    /// The exec's file name could not be read from user memory (kept as empty, flagged).
    pub const FILENAME_UNREADABLE: u32 = 2;
    /// Exact mode: a probed function's entry found the same thread's previous call of it still
    /// open, its return never seen (a kretprobe can miss returns): that call is lost.
    pub const PROBED_ENTRY_OVERWRITTEN: u32 = 3;
    /// A traced thread's switch-out could not be remembered: that off-CPU interval is lost.
    pub const OFF_CPU_FULL: u32 = 4;
    /// Exact mode: a probed function returned inside a traced call without its entry having
    /// been seen (its time is lost).
    pub const PROBED_RETURN_WITHOUT_ENTRY: u32 = 5;
    /// A traced process entered an exec or fork-family syscall of the x32 ABI (64-bit
    /// registers, 32-bit pointers), which execprof does not time: counted, not guessed.
    pub const X32_CALL_UNTRACED: u32 = 6;
    /// An exec attempt's enter record was dropped (ring buffer full): with the enters user
    /// space saw, this makes the number of attempts made exact however many records are lost.
    pub const EXEC_ENTER_DROPPED: u32 = 7;
    /// The same for a fork-family call.
    pub const FORK_ENTER_DROPPED: u32 = 8;
    /// `--argv`: an exec attempt's arguments record was dropped (ring buffer full).
    pub const ARGV_DROPPED: u32 = 9;
    /// A traced process exec'd a 32-bit (ia32 or x32) image. Counted under every boundary
    /// mechanism; a loss only under the per-syscall events, which never see such a process's
    /// calls (user space then also adds the 32-bit processes running when tracing began).
    pub const NON_NATIVE_EXEC: u32 = 10;
    /// Exact mode: exec attempts whose probed calls, summed in the kernel, could not be sent
    /// (ring buffer full), or were taken over by another thread's attempt (two threads'
    /// attempts claiming one table cell at the same moment): one per attempt; the attempt
    /// itself is still timed, its functions are not.
    pub const CALL_SUMS_LOST: u32 = 11;
    pub const COUNT: u32 = 12;

    pub const NAMES: [&str; COUNT as usize] = [
        "ring buffer full",
        "traced-process table full",
        "file name unreadable",
        "probed entry overwritten",
        "off-CPU table full",
        "probed return without entry",
        "x32 exec/fork calls not traced",
        "ring buffer full: exec enters",
        "ring buffer full: fork enters",
        "ring buffer full: exec arguments",
        "32-bit processes, calls not seen",
        "probed call sums lost",
    ];
}

/// The agent's in-kernel aggregates (`execprof agent`): no ring record per attempt. Each exec
/// attempt and fork-family call is folded where it returns into the entry of its
/// [`AggKey`] (cgroup, calling program, call, outcome) in `AGGREGATES`: a count, the
/// summed kernel time and page faults, the parent's resident memory for forks, and a
/// log-linear latency histogram ([`bucket`](aggregate::bucket)). A key that does not fit is
/// folded into the `OTHER_AGGREGATES` slot of its [`other_slot`](aggregate::other_slot) and
/// counted in `AGG_COUNTERS`, so every attempt is in some entry.
pub mod aggregate {
    /// Bucket bounds per power of two: the bounds are Prometheus's native histogram schema 3
    /// in seconds, 2^(i/8) s, so each bucket is ≤ 9.05% wide and is exactly one native bucket.
    pub const SUB_BUCKETS: u32 = 8;
    /// The first power of two (ns) holding bounds: 2^6 = 64 ns; the first bound is 65 ns
    /// (2^(-191/8) s), below it the underflow bucket 0.
    pub const FIRST_OCTAVE: u32 = 6;
    /// Powers of two holding bounds: up to 2^34 ns; the last bound is 16 s (2^(32/8) s),
    /// above it the overflow bucket.
    pub const OCTAVES: u32 = 28;
    /// Buckets of one histogram: an underflow bucket, one per bound above it (the last
    /// holding everything past 16 s).
    pub const BUCKETS: usize = (OCTAVES * SUB_BUCKETS) as usize + 1;
    /// The native schema the bounds are (Prometheus: factor 2^(2^-3)).
    pub const NATIVE_SCHEMA: i32 = 3;
    /// The native bucket index of bucket 1: bucket k (1 ≤ k < BUCKETS) is the native bucket
    /// `NATIVE_FIRST_INDEX + k - 1`, (2^((i-1)/8) s, 2^(i/8) s].
    /// Bucket 1 lies past the first bound 2^(-191/8) s: its native index is -190.
    pub const NATIVE_FIRST_INDEX: i32 = 8 * (FIRST_OCTAVE as i32 - 30) + 2;
    /// 2^(f/8) · 2^63, rounded, for the 8 fractions f/8 of a power of two at which a bound
    /// 10^9 · 2^(i/8) ns falls (log2(10^9) = 29.897…: 0.0224, 0.1474, … 0.8974, the last
    /// exactly 10^9 / 2^29). A bound in the power of two 2^o is `(C >> (63 - o)) + 1`: the
    /// first whole ns past 10^9 · 2^(i/8), so a latency is in bucket k exactly when it is
    /// in the native bucket's (lower, upper].
    const BOUND_FRACTIONS: [u64; 8] = [
        9367390095664785123,
        10215211334214395865,
        11139766950770582417,
        12148001999904198770,
        13247490117328543392,
        14446490411353358019,
        15754009503455335899,
        17179869184000000000,
    ];

    /// The `j`-th bound (0..8) in the power of two 2^`octave` ns.
    #[inline(always)]
    const fn bound_ns(octave: u32, j: usize) -> u64 {
        (BOUND_FRACTIONS[j] >> (63 - octave)) + 1
    }

    /// The histogram bucket of a latency of `ns` nanoseconds: how many bounds it reaches.
    #[inline(always)]
    pub fn bucket(ns: u64) -> usize {
        if ns < 1 << FIRST_OCTAVE {
            return 0;
        }
        let octave = 63 - ns.leading_zeros();
        if octave >= FIRST_OCTAVE + OCTAVES {
            return BUCKETS - 1;
        }
        let mut reached = 0;
        let mut j = 0;
        while j < BOUND_FRACTIONS.len() {
            if ns >= bound_ns(octave, j) {
                reached += 1;
            }
            j += 1;
        }
        ((octave - FIRST_OCTAVE) * SUB_BUCKETS) as usize + reached
    }

    /// The smallest latency (ns) in bucket `i` (0 for the underflow bucket).
    pub fn bucket_low_ns(i: usize) -> u64 {
        if i == 0 {
            return 0;
        }
        let k = (i - 1) as u32;
        bound_ns(FIRST_OCTAVE + k / SUB_BUCKETS, (k % SUB_BUCKETS) as usize)
    }

    /// The first latency (ns) past bucket `i` (`u64::MAX` for the overflow bucket).
    pub fn bucket_high_ns(i: usize) -> u64 {
        if i + 1 >= BUCKETS { u64::MAX } else { bucket_low_ns(i + 1) }
    }

    /// The upper bound in seconds of bucket `i` as Prometheus names it (`le`; the native
    /// bucket's upper end): 2^((NATIVE_FIRST_INDEX + i - 1)/8); infinite for the overflow.
    pub fn bucket_le_seconds(i: usize) -> f64 {
        if i + 1 >= BUCKETS {
            return f64::INFINITY;
        }
        let index = NATIVE_FIRST_INDEX + i as i32 - 1;
        // 2^(index/8) from whole powers of two and the eighth roots, exactly as Prometheus
        // computes its schema-3 bounds.
        let (whole, eighth) = (index.div_euclid(8), index.rem_euclid(8));
        const ROOTS: [f64; 8] = [
            1.0,
            1.0905077326652577,
            1.189207115002721,
            1.2968395546510096,
            core::f64::consts::SQRT_2,
            1.5422108254079407,
            1.681792830507429,
            1.8340080864093424,
        ];
        // 2^whole by its exponent bits (whole is -24 … 4: a normal number; no libm here).
        ROOTS[eighth as usize] * f64::from_bits(((whole + 1023) as u64) << 52)
    }

    /// [`AggKey::call`](crate::AggKey::call): an exec attempt or a fork-family call.
    pub const CALL_EXEC: u16 = 0;
    pub const CALL_FORK: u16 = 1;

    /// [`AggKey::outcome`](crate::AggKey::outcome) values besides an errno (a positive number): 0 is success, and an
    /// exec whose thread was being killed when it failed is abandoned, whatever its errno.
    pub const OUTCOME_SUCCESS: u16 = 0;
    pub const OUTCOME_ABANDONED: u16 = 0xffff;

    /// Bits of [`AggKey::flags`](crate::AggKey::flags).
    pub mod key_flags {
        /// The call was made in the compat ABI (ia32 on x86_64, AArch32 on arm64).
        pub const COMPAT: u16 = 1;
        /// The calling program's file was not readable (a kernel thread's call, no `mm`):
        /// the entry is keyed by cgroup alone, and named by the comm it keeps.
        pub const NO_PROGRAM: u16 = 2;
        /// An `execveat` with `AT_EXECVE_CHECK` ([`record_flags::EXECVE_CHECK`](crate::record_flags::EXECVE_CHECK)):
        /// a check, not an exec; its outcome is 0 (the file would be executed) or the errno
        /// that says why not.
        pub const EXECVE_CHECK: u16 = 4;
    }

    /// Slots of `OTHER_AGGREGATES`, where a key that did not fit in `AGGREGATES` is folded:
    /// the exec outcomes by class, then fork-family calls that succeeded and that failed,
    /// then `AT_EXECVE_CHECK` checks that passed and that failed.
    pub const OTHER_SUCCESS: u32 = 0;
    pub const OTHER_ENOENT: u32 = 1;
    pub const OTHER_EACCES: u32 = 2;
    pub const OTHER_ENOEXEC: u32 = 3;
    pub const OTHER_ERRNO: u32 = 4;
    pub const OTHER_ABANDONED: u32 = 5;
    pub const OTHER_FORK: u32 = 6;
    pub const OTHER_FORK_FAILED: u32 = 7;
    pub const OTHER_CHECKED: u32 = 8;
    pub const OTHER_CHECK_FAILED: u32 = 9;
    pub const OTHER_SLOTS: u32 = 10;

    /// The `OTHER_AGGREGATES` slot of a call and outcome; `check`: an exec attempt that was
    /// an `AT_EXECVE_CHECK` check ([`key_flags::EXECVE_CHECK`]).
    #[inline(always)]
    pub fn other_slot(call: u16, outcome: u16, check: bool) -> u32 {
        const ENOENT: u16 = 2;
        const EACCES: u16 = 13;
        const ENOEXEC: u16 = 8;
        match (call, outcome) {
            (CALL_FORK, OUTCOME_SUCCESS) => OTHER_FORK,
            (CALL_FORK, _) => OTHER_FORK_FAILED,
            (_, OUTCOME_SUCCESS) if check => OTHER_CHECKED,
            _ if check => OTHER_CHECK_FAILED,
            (_, OUTCOME_SUCCESS) => OTHER_SUCCESS,
            (_, ENOENT) => OTHER_ENOENT,
            (_, EACCES) => OTHER_EACCES,
            (_, ENOEXEC) => OTHER_ENOEXEC,
            (_, OUTCOME_ABANDONED) => OTHER_ABANDONED,
            _ => OTHER_ERRNO,
        }
    }

    /// Indices of the per-CPU `AGG_COUNTERS`: what the aggregates could not hold as asked.
    pub mod agg_counter {
        /// Exec attempts folded into `OTHER_AGGREGATES` (`AGGREGATES` was full).
        pub const EXEC_FOLDED: u32 = 0;
        /// Fork-family calls folded there.
        pub const FORK_FOLDED: u32 = 1;
        /// Calls in flight whose `IN_FLIGHT` slot another call took (the table is
        /// direct-mapped by id): the pushed-out call returns untimed (`START_NOT_SEEN`).
        pub const IN_FLIGHT_FULL: u32 = 2;
        /// Calls that returned without their start seen (begun before the agent attached,
        /// or their start was pushed out of `IN_FLIGHT`): counted by their return alone.
        pub const START_NOT_SEEN: u32 = 3;
        /// ENOENT attempts whose file name did not fit in `MISSES` (full): counted in their
        /// series, not per missed directory.
        pub const MISS_FOLDED: u32 = 4;
        /// ENOENT attempts whose file name could not be read from the caller's memory.
        pub const MISS_UNREADABLE: u32 = 5;
        /// cpu-clock samples inside a call that were not kept: more than
        /// [`SAMPLES_PER_CALL`](super::SAMPLES_PER_CALL) in one call, or no stack id (the
        /// stack map full).
        pub const SAMPLES_NOT_KEPT: u32 = 6;
        /// Samples of a call not counted per stack: `STACK_COUNTS` full.
        pub const STACK_COUNTS_FULL: u32 = 7;
        /// PATH searches in progress whose `PROCESSES` slot another process took
        /// (direct-mapped by process id; the other may have ended): the search restarts.
        pub const SEARCH_PUSHED_OUT: u32 = 8;
        /// ENOENT attempts for a name not among the first
        /// [`TRIED_PER_SEARCH`](super::TRIED_PER_SEARCH) distinct ones of their search: not
        /// remembered, so a later repeat of it goes unseen.
        pub const REPEAT_NOT_CHECKED: u32 = 9;
        pub const COUNT: u32 = 10;
        pub const NAMES: [&str; COUNT as usize] = [
            "exec attempts folded into other (aggregates full)",
            "fork-family calls folded into other (aggregates full)",
            "calls not timed: in-flight table full",
            "calls not timed: start not seen",
            "ENOENT attempts not per file (misses map full)",
            "ENOENT attempts not per file (name unreadable)",
            "samples not kept (too many in one call, or stack map full)",
            "samples not counted per stack (stack counts full)",
            "PATH searches restarted (search table slot taken)",
            "ENOENT names not remembered for repeats (search too long)",
        ];
    }

    /// The calling program's path as the kernel reads it when an entry is made: this many
    /// names, from the file up its directories ...
    pub const PATH_DEPTH: usize = 6;
    /// ... each cut to this many bytes with its NUL.
    pub const PATH_COMPONENT: usize = 48;

    /// Bits of [`ProgramPath::flags`](crate::ProgramPath::flags).
    pub mod path_flags {
        /// The walk reached its file system's root: the names are the whole path below it.
        pub const ROOT_REACHED: u32 = 1;
    }

    /// cpu-clock samples one call keeps (their stack ids wait in its `IN_FLIGHT` entry until
    /// the outcome is known).
    pub const SAMPLES_PER_CALL: usize = 8;

    /// Bytes of a missed file's name kept in a `MISSES` key, with its NUL (longer names are
    /// cut: their directory still shows).
    pub const MISS_NAME: usize = 128;

    /// Default capacities (the agent's flags change them).
    pub const DEFAULT_MAX_SERIES: u32 = 4096;
    pub const DEFAULT_MAX_MISSES: u32 = 4096;
    pub const DEFAULT_MAX_STACKS: u32 = 4096;
    /// `STACK_COUNTS`: a stack counts once per series it was sampled in (the same lookup
    /// under many programs and cgroups), so four entries a stack.
    pub const DEFAULT_MAX_STACK_COUNTS: u32 = 4 * DEFAULT_MAX_STACKS;
    /// Slots of `IN_FLIGHT` and `PROCESSES` (rounded up to a power of two: both are
    /// direct-mapped by id).
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 8192;
    /// Names a search remembers to find a repeated one (PATH listing a directory twice).
    pub const TRIED_PER_SEARCH: usize = 16;

    /// Set in an `IN_FLIGHT` key that names a process, not a thread (pids stay below 2^22).
    pub const IN_FLIGHT_PROCESS: u32 = 1 << 31;

    /// The `IN_FLIGHT` key of a call on thread `pid` of process `tgid`: a fork-family call's
    /// is the thread's, an exec's the process's. A thread that is not the leader and execs
    /// successfully returns as the leader, with the leader's id (`de_thread`): its process id
    /// is the one that stays. (Two threads of one process inside exec at once share the entry;
    /// one of them is killed by the other's success.)
    #[inline(always)]
    pub fn in_flight_key(pid: u32, tgid: u32, exec: bool) -> u32 {
        if exec { tgid | IN_FLIGHT_PROCESS } else { pid }
    }

    /// A 64-bit hash of a name of `len` bytes whose `i`th 8-byte word (little-endian) is
    /// `word(i)`: a word at a time, bytes past `len` masked off (what follows the NUL in a
    /// scratch buffer is whatever an earlier name left there).
    #[inline(always)]
    pub fn name_hash(word: impl Fn(usize) -> u64, len: usize) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h: u64 = len as u64 ^ 0x243f_6a88_85a3_08d3;
        let mut i = 0;
        while i < MISS_NAME / 8 {
            if i * 8 >= len {
                break;
            }
            let mut w = word(i);
            let left = len - i * 8;
            if left < 8 {
                w &= (1u64 << (8 * left)) - 1;
            }
            h = (h ^ w).wrapping_mul(K);
            h ^= h >> 29;
            i += 1;
        }
        h.wrapping_mul(K) ^ (h >> 32)
    }

    /// The slot of `key` in a direct-mapped table of `mask + 1` slots: the id's low bits, an
    /// exec's moved off its leader thread's own fork-family slot.
    #[inline(always)]
    pub fn table_slot(key: u32, mask: u32) -> u32 {
        (key ^ (key >> 20)) & mask
    }

    /// The table size for `wanted` slots: a power of two.
    pub fn slots(wanted: u32) -> u32 {
        wanted.max(1).checked_next_power_of_two().unwrap_or(1 << 31)
    }
}

/// An `AGGREGATES` key: where and by whom a call was made, and how it ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggKey {
    /// The caller's cgroup v2 id (`bpf_get_current_cgroup_id`: the directory's inode number).
    pub cgroup_id: u64,
    /// The calling program: its executable's inode number and the kernel's `dev_t` of its
    /// file system (`mm->exe_file->f_inode`), read at the call's start.
    pub ino: u64,
    pub dev: u32,
    /// [`aggregate::CALL_EXEC`] or [`aggregate::CALL_FORK`].
    pub call: u16,
    /// [`aggregate::OUTCOME_SUCCESS`], an errno, or [`aggregate::OUTCOME_ABANDONED`].
    pub outcome: u16,
    /// Bits of [`aggregate::key_flags`].
    pub flags: u16,
    pub _reserved: u16,
    /// The executable's inode generation (`i_generation`): a file made where a deleted one
    /// was, with its inode number, is another program.
    pub generation: u32,
}

/// A program's path as the kernel found it from its file (`f_path.dentry` up `d_parent`):
/// the file's name first, then its directories', up to the root of its file system (user
/// space puts the mount point in front).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProgramPath {
    /// Names in use.
    pub depth: u32,
    /// Bits of [`aggregate::path_flags`].
    pub flags: u32,
    pub names: [[u8; aggregate::PATH_COMPONENT]; aggregate::PATH_DEPTH],
}

/// An `AGGREGATES` (or `OTHER_AGGREGATES`) value: everything summed since the entry was made.
/// The kernel side adds with atomic instructions (one entry is shared by every CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AggValue {
    /// Calls.
    pub count: u64,
    /// Calls whose start was seen (timed): the histogram's total.
    pub timed: u64,
    /// Kernel time of the timed calls, in ns (enter to return, as `run` measures an attempt).
    pub sum_ns: u64,
    /// Page faults of the timed calls (the thread's counters at return minus at start).
    pub min_flt: u64,
    pub maj_flt: u64,
    /// Fork-family calls: the parent's resident pages at the call's start, summed, and the
    /// largest.
    pub rss_pages_sum: u64,
    pub rss_pages_max: u64,
    /// Successful execs that ended a PATH search of at least one miss (the process's
    /// ENOENT attempts for the same name just before), and those misses.
    pub searches: u64,
    pub search_misses: u64,
    /// The process that made the entry: its id (for user space to find its executable's
    /// path while it lives) and its comm (the name when the path cannot be found).
    pub first_tgid: u32,
    pub _reserved: u32,
    pub comm: [u8; 16],
    /// The calling program's path, read when the entry was made (while the caller's
    /// executable is still its own: before a successful exec's new image returns).
    pub path: ProgramPath,
    /// Timed calls per latency bucket ([`aggregate::bucket`]).
    pub buckets: [u64; aggregate::BUCKETS],
}

/// A `MISSES` key: an exec attempt that failed with ENOENT, by the caller's cgroup and the
/// name it tried (user space takes the directory from the value's copy of the name: PATH's
/// missed directories).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MissKey {
    pub cgroup_id: u64,
    /// A 64-bit hash of the name ([`aggregate::name_hash`]): a short key is a cheap lookup.
    pub name_hash: u64,
}

/// A `MISSES` value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MissValue {
    /// Attempts.
    pub count: u64,
    /// Their kernel time, in ns (0 for attempts not timed).
    pub sum_ns: u64,
    /// Of the attempts, those whose search had tried this very name already (PATH lists
    /// the directory more than once): pure waste.
    pub repeated: u64,
    /// Their kernel time, in ns.
    pub repeated_ns: u64,
    /// The name as the caller passed it (written when the entry is made), NUL-terminated.
    pub name: [u8; aggregate::MISS_NAME],
}

impl Default for MissValue {
    fn default() -> Self {
        Self { count: 0, sum_ns: 0, repeated: 0, repeated_ns: 0, name: [0; aggregate::MISS_NAME] }
    }
}

/// A `PROCESSES` slot: what the kernel side keeps per process between its calls: who it is
/// (read once per executable image, not at every call) and the PATH search it is in (its
/// ENOENT exec attempts for one name, until an exec that does not fail with ENOENT or an
/// ENOENT for another name).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessState {
    /// The process whose slot this is (0: none).
    pub tgid: u32,
    /// The search's misses so far (0: no search).
    pub misses: u32,
    /// A hash of the name searched for (what follows the last `/`).
    pub name_hash: u64,
    /// Names in `tried`.
    pub nr_tried: u32,
    /// The identity below, read from the executable's `inode` (its address) while the
    /// process had the address space `mm` (0: not read). Used again only while the process,
    /// its `mm` and its executable's inode are the same objects: an exec replaces `mm`, and a
    /// process id reused with an `mm` allocated where the old one was still has another
    /// inode unless it runs the same file.
    pub generation: u32,
    pub mm: u64,
    pub inode: u64,
    pub ino: u64,
    pub dev: u32,
    pub _reserved: u32,
    pub comm: [u8; 16],
    /// The [`MissKey::name_hash`]es of the first names missed: one of them tried again is a
    /// repeat.
    pub tried: [u64; aggregate::TRIED_PER_SEARCH],
}

/// An `IN_FLIGHT` value: a call begun by a thread (keyed by its id) and not yet returned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    pub start_ns: u64,
    /// The caller's `mm->exe_file`, to read its path from if this call makes a new entry.
    pub exe_file: u64,
    pub cgroup_id: u64,
    pub ino: u64,
    pub min_flt: u64,
    pub maj_flt: u64,
    pub rss_pages: u64,
    pub dev: u32,
    pub tgid: u32,
    /// Bits of [`aggregate::key_flags`].
    pub flags: u16,
    pub _reserved: u16,
    pub generation: u32,
    pub comm: [u8; 16],
    /// Stack ids (in `STACKS`) of the cpu-clock samples taken inside the call so far.
    pub stacks: [u32; aggregate::SAMPLES_PER_CALL],
    pub nr_stacks: u32,
    /// The thread that made the call (an exec's entry is the process's: see
    /// [`aggregate::in_flight_key`]).
    pub tid: u32,
    /// The slot's key ([`aggregate::in_flight_key`]; 0: free).
    pub key: u32,
    pub _reserved2: u32,
}

/// A `STACK_COUNTS` key: samples of one kernel stack inside the calls of one series (the
/// [`AggKey`] the calls were counted under: cgroup, program, call and outcome), so that user
/// space names a profile's samples as it names the series.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// The stack's id in `STACKS`.
    pub stack_id: u32,
    pub _reserved: u32,
    pub series: AggKey,
}

/// Slots of the doctor's hit counters (`DOCTOR_HITS`), one per attach mechanism tried.
pub mod doctor {
    pub const TRACEPOINT: u32 = 0;
    pub const RAW_TRACEPOINT: u32 = 1;
    pub const KPROBE: u32 = 2;
    pub const KRETPROBE: u32 = 3;
    pub const FENTRY: u32 = 4;
    pub const FEXIT: u32 = 5;
    pub const UPROBE: u32 = 6;
    pub const PERF_EVENT: u32 = 7;
    /// perf_event samples that captured a kernel stack.
    pub const KERNEL_STACK: u32 = 8;
    pub const COUNT: u32 = 9;

    pub const MAP_HITS: &str = "DOCTOR_HITS";
}

/// Bits of [`SyscallExitRecord::flags`].
pub mod record_flags {
    /// The file name was longer than [`crate::limits::FILENAME_CAP`] - 1 bytes and was cut.
    pub const FILENAME_TRUNCATED: u32 = 1;
    /// The file name could not be read at all.
    pub const FILENAME_UNREADABLE: u32 = 2;
    /// The task's fault counters could not be read (no BTF offsets): faults are not counted.
    pub const FAULTS_UNAVAILABLE: u32 = 4;
    /// A failed exec's thread had SIGKILL pending at exit: it was being killed, and its errno
    /// (often E2BIG or EFAULT from an interrupted argument copy) is not a cost of failing.
    pub const KILLED: u32 = 8;
    /// ... and another thread of its process was exec'ing (`signal->group_exec_task`): that
    /// exec won and de_thread killed this one.
    pub const KILLED_BY_OTHER_THREADS_EXEC: u32 = 16;
    /// The syscall ran in the compat ABI (ia32 on x86_64: `TS_COMPAT`), with that ABI's
    /// numbers and argument registers. On an exit record it is the ABI at exit: after a
    /// successful exec, the new image's.
    pub const COMPAT: u32 = 32;
    /// A failed `execveat` was called with `AT_EMPTY_PATH` (its `dirfd` is then the file).
    pub const AT_EMPTY_PATH: u32 = 64;
    /// On an exit record: the call's enter record was dropped (the exit is not the thread's
    /// previous open call's).
    pub const ENTER_LOST: u32 = 128;
    /// On an enter record: an `execveat` called with `AT_EXECVE_CHECK` (Linux 6.14+), which
    /// only checks whether the file would be executed (permissions, binary format, LSMs) and
    /// executes nothing: 0 means it would be, an errno why not. Read from the flags argument
    /// at the enter, where it is the caller's.
    pub const EXECVE_CHECK: u32 = 256;
}

/// Which traced syscall a [`SyscallEnterRecord`] / [`SyscallExitRecord`] is.
pub mod traced_syscall {
    pub const EXECVE: u32 = 0;
    pub const EXECVEAT: u32 = 1;
    /// The fork family, recorded in the same records (no file name): the cost of creating a
    /// process beside the cost of exec. Values from here on are fork-family calls.
    pub const CLONE: u32 = 2;
    pub const CLONE3: u32 = 3;
    pub const FORK: u32 = 4;
    pub const VFORK: u32 = 5;
}

/// Bits of [`TaskExitRecord::flags`].
pub mod task_exit_flags {
    /// The last thread of the process exited: the process is gone.
    pub const GROUP_DEAD: u32 = 1;
}

/// Bits of [`TaskNewRecord::flags`].
pub mod task_new_flags {
    /// The child is a new thread of the parent's process, not a new process.
    pub const THREAD: u32 = 1;
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// One of [`kind`].
    pub kind: u32,
    pub cpu: u32,
    /// `bpf_ktime_get_ns`, i.e. CLOCK_MONOTONIC in nanoseconds.
    pub ts_ns: u64,
    /// Thread id of the task the record is about.
    pub pid: u32,
    /// Process id (thread group id).
    pub tgid: u32,
}

/// An exec or fork-family syscall was entered by a traced thread. The header's time is the
/// enter time. Enter, point of no return, new image and exit arrive as separate records in
/// the one ring buffer (in the order they were reserved) and are joined per thread in user
/// space: the kernel keeps no per-attempt state, which is what tracing costs least.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallEnterRecord {
    pub header: RecordHeader,
    /// The thread's minor and major fault counters at enter.
    pub min_flt: u64,
    pub maj_flt: u64,
    /// One of [`traced_syscall`].
    pub syscall: u32,
    /// Bits of [`record_flags`].
    pub flags: u32,
}

/// An exec or fork-family syscall returned. The header's time is the exit time and its ids
/// are the ones at exit (an exec from a non-leader thread has taken the leader's id; the
/// [`LoadedRecord`] says which thread it was before).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallExitRecord {
    pub header: RecordHeader,
    /// The syscall's return value: 0 or -errno (for the fork family: the child's id).
    pub ret: i64,
    /// The thread's minor and major fault counters at exit.
    pub min_flt: u64,
    pub maj_flt: u64,
    /// One of [`traced_syscall`], from `orig_ax` at exit. After a successful `execveat` the
    /// kernel reports `execve` here; the [`SyscallEnterRecord`]'s is the one to trust.
    pub syscall: u32,
    /// Bits of [`record_flags`].
    pub flags: u32,
    /// Bytes of `filename` in use, without the NUL. A failed exec's name is read here from
    /// the caller's memory; a successful one's comes with [`KernelFilename`].
    pub filename_len: u32,
    /// A failed exec's directory fd: `execveat`'s (the name is relative to it, or with
    /// [`record_flags::AT_EMPTY_PATH`] it is the file), `AT_FDCWD` (-100) for `execve`; 0 in
    /// every other record.
    pub dirfd: i32,
    pub filename: [u8; limits::FILENAME_CAP],
}

/// The kernel's copy of an exec's file name (`bprm->filename`), which [`NoReturnRecord`] and
/// [`LoadedRecord`] both carry: the kernel reads it at whichever of the two comes first on
/// the running kernel (`filename_len` 0 in the other).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelFilename {
    /// Bits of [`record_flags`].
    pub flags: u32,
    pub filename_len: u32,
    pub _reserved: u32,
    pub filename: [u8; limits::FILENAME_CAP],
}

/// An exec reached its point of no return; its thread id is still the one it entered with.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NoReturnRecord {
    pub header: RecordHeader,
    /// Where [`LoadedRecord::old_pid`] is, so both have one layout and one name read.
    pub _reserved: u32,
    pub kernel_filename: KernelFilename,
}

/// An exec has its new image in place.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LoadedRecord {
    pub header: RecordHeader,
    /// The thread's id before the exec (differs from the header's when a non-leader thread
    /// exec'd and took the leader's id).
    pub old_pid: u32,
    pub kernel_filename: KernelFilename,
    /// The comm the exec gave the process, NUL-terminated unless all 16 bytes are used: the
    /// file name's last part, except for `execveat(fd, "", AT_EMPTY_PATH)` from Linux 6.14 on,
    /// which takes the file's own name (`memfd:NAME` for a memfd) where older kernels took the
    /// fd number (`bprm->filename` is `/dev/fd/N`).
    pub comm: [u8; limits::COMM_LEN],
}

/// A new task in the traced tree (`sched_process_fork`): header ids are the parent's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskNewRecord {
    pub header: RecordHeader,
    pub child_pid: u32,
    pub child_tgid: u32,
    /// Bits of [`task_new_flags`].
    pub flags: u32,
    pub _reserved: u32,
}

/// A cpu-clock sample taken while a traced thread was inside an exec attempt or fork-family
/// call: the kernel stack, innermost frame first. User space ties it to the open call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleRecord {
    pub header: RecordHeader,
    /// Frames in use; 0 when the stack could not be read (the sample still counts).
    pub nr_frames: u32,
    pub _reserved: u32,
    pub frames: [u64; limits::MAX_FRAMES],
}

/// Exact mode: one call of a probed kernel function inside an exec attempt, from its
/// kprobe to its kretprobe. The header's time is the return time.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProbedCallRecord {
    pub header: RecordHeader,
    pub enter_ns: u64,
    /// The probe slot: user space knows which function it attached there.
    pub slot: u32,
    pub _reserved: u32,
}

/// Exact mode's sums of one exec attempt's probed calls ([`CallSumsRecord`]).
pub mod call_sums {
    /// Call paths one attempt can hold; calls on further paths are counted, not summed.
    pub const MAX_ENTRIES: usize = 64;
    /// Probed calls open at once on one thread (nesting depth).
    pub const MAX_DEPTH: usize = 16;
    /// No entry: the syscall itself as a parent, the end of a list.
    pub const NONE: u8 = 0xff;
    /// A call not summed (no entry left, or under such a call): its time stays in its caller's.
    pub const UNSUMMED: u8 = 0xfe;
    /// Cells of the table of exec attempts in flight ([`crate::Attempt`]), found from the
    /// thread's `task_struct` address; a thread whose cell another thread's attempt holds
    /// sends its enter at once, and its calls one by one.
    pub const TABLE: u32 = 1024;
    /// The cell of the thread whose `task_struct` is at `task`.
    pub const fn cell(task: u64) -> u32 {
        ((task >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - TABLE.trailing_zeros())) as u32
    }
    const _: () = assert!(TABLE.is_power_of_two() && MAX_ENTRIES < UNSUMMED as usize);
}

/// One call path's calls in one exec attempt: the calls of the function in `slot` made from
/// the path of entry `parent`, summed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallSum {
    /// Entry to return, summed over the calls.
    pub inclusive_ns: u64,
    /// The same less the time in probed callees.
    pub self_ns: u64,
    /// Of `inclusive_ns`, the time the thread was off-CPU (switched out between the entry and
    /// the return): the rest ran on a CPU.
    pub off_cpu_ns: u64,
    pub calls: u32,
    /// The probe slot: user space knows which function it attached there.
    pub slot: u8,
    /// The entry of the calling call path ([`call_sums::NONE`]: the syscall itself); always
    /// an earlier entry.
    pub parent: u8,
    /// The kernel side's list of each path's callees (not read by user space).
    pub first_child: u8,
    pub next_sibling: u8,
}

/// Exact mode: an exec attempt's probed calls summed per call path (the slots from the
/// syscall down) in the kernel, sent once before the attempt's exit instead of a
/// [`ProbedCallRecord`] per call; only the first `count` entries are sent.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallSumsRecord {
    pub header: RecordHeader,
    /// Entries in use.
    pub count: u32,
    /// Calls not summed (no entry left, or nested deeper than [`call_sums::MAX_DEPTH`]).
    pub unsummed: u32,
    pub entries: [CallSum; call_sums::MAX_ENTRIES],
}

impl CallSumsRecord {
    /// Bytes before the entries.
    pub const HEAD: usize = core::mem::offset_of!(CallSumsRecord, entries);
}

/// An open probed call of an attempt whose calls are summed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenSummedCall {
    pub enter_ns: u64,
    /// Time in its probed callees so far.
    pub children_ns: u64,
    /// The attempt's `off_cpu_ns` at the entry.
    pub off_cpu_at_enter: u64,
    pub slot: u32,
    /// Its entry, or [`call_sums::UNSUMMED`].
    pub entry: u32,
}

/// An exec attempt in flight on a thread, in the cell of the kernel side's `ATTEMPTS` table
/// its `task_struct` address picks ([`call_sums::cell`]), claimed at the attempt's enter:
///
/// - its enter record, held back (`held`) until the thread sends its next record, which
///   carries it in front of its own in one ring buffer item: a failed attempt's enter and
///   exit go out together, and nothing is sent at the enter. A probe that sends a record of
///   the thread in between (the point of no return, the new image, an off-CPU interval, a
///   probed call, the thread's exit) sends the enter first. User space reads the cells still
///   held when tracing stops: those attempts were in flight.
/// - exact mode: its probed calls summed per call path (`summing`), sent in one
///   [`CallSumsRecord`] before the exit, the held enter in front of it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Attempt {
    /// The `task_struct` address of the thread whose attempt this is; 0: free.
    pub owner: u64,
    /// Non-zero while `enter` has not been sent.
    pub held: u32,
    /// Non-zero while the attempt's probed calls are summed in `sums`.
    pub summing: u32,
    pub enter: SyscallEnterRecord,
    /// Right after `enter`: the two go out as one item.
    pub sums: CallSumsRecord,
    pub depth: u32,
    /// The first of the syscall's own callees' entries.
    pub root_child: u32,
    /// Time the thread has spent off-CPU since the attempt's enter (added by `sched_switch`
    /// when it runs again): what a probed call's entry-to-return time holds of it is its
    /// `CallSum::off_cpu_ns`.
    pub off_cpu_ns: u64,
    pub stack: [OpenSummedCall; call_sums::MAX_DEPTH],
}

/// A traced thread ran again; the header's time is when, `start_ns` when it went off-CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuRecord {
    pub header: RecordHeader,
    pub start_ns: u64,
}

/// A traced process reached `main`: the header is all there is to say.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MainRecord {
    pub header: RecordHeader,
    /// Keeps the layout [`OffCpuRecord`]'s, the size the user side has always read.
    pub _reserved: u64,
}

/// Bits of [`ArgvRecord::flags`].
pub mod argv_flags {
    /// There were more arguments, or more bytes, than the caps keep (or one was cut).
    pub const CUT: u32 = 1;
    /// The argument array or one of its strings was not in memory (BPF cannot fault it in):
    /// what was read before it is kept.
    pub const UNREADABLE: u32 = 2;
}

/// `--argv`: an exec attempt's arguments as the caller passed them, read from its memory at
/// the syscall's enter (before the enter's clock, so outside the attempt's time) and sent
/// just before its [`SyscallEnterRecord`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ArgvRecord {
    pub header: RecordHeader,
    /// Bytes of `bytes` in use: `argc` strings, each with its NUL.
    pub len: u32,
    pub argc: u32,
    /// Bits of [`argv_flags`].
    pub flags: u32,
    pub _reserved: u32,
    /// Room for one more argument past [`limits::ARGV_CAP`], so each read has a fixed bound.
    pub bytes: [u8; limits::ARGV_CAP + limits::ARG_CAP],
}

/// `--cgroup`: a process that was not traced was found in the cgroup (or below it) at one of
/// its exec or fork-family calls and is traced from that call on: it moved in after tracing
/// began (a container runtime or systemd moves a process in, then it execs). No fork of it was
/// seen, so this says who it is, as the kernel sees it at that moment (before the exec: the
/// program that makes the call). The header's ids are the calling thread's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AdoptedRecord {
    pub header: RecordHeader,
    /// The process's parent (`real_parent`'s tgid); 0 when it could not be read.
    pub ppid: u32,
    pub _reserved: u32,
    /// The calling thread's comm, NUL-terminated unless all 16 bytes are used.
    pub comm: [u8; limits::COMM_LEN],
}

/// A traced thread exited (`sched_process_exit`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskExitRecord {
    pub header: RecordHeader,
    /// Bits of [`task_exit_flags`].
    pub flags: u32,
    pub _reserved: u32,
}

// The layouts are the contract: a change here must be deliberate on both sides.
const _: () = assert!(core::mem::size_of::<RecordHeader>() == 24);
// The eBPF side takes `held` with one compare-and-exchange of the word it shares with `summing`.
const _: () = assert!(
    core::mem::offset_of!(Attempt, held) % 8 == 0 && core::mem::offset_of!(Attempt, summing) == core::mem::offset_of!(Attempt, held) + 4
);
const _: () = assert!(core::mem::size_of::<SyscallEnterRecord>() == 24 + 3 * 8);
const _: () = assert!(core::mem::size_of::<SyscallExitRecord>() == 24 + 3 * 8 + 4 * 4 + limits::FILENAME_CAP);
const _: () = assert!(core::mem::size_of::<KernelFilename>() == 3 * 4 + limits::FILENAME_CAP);
const _: () = assert!(core::mem::size_of::<NoReturnRecord>() == 24 + 4 * 4 + limits::FILENAME_CAP);
const _: () = assert!(core::mem::size_of::<LoadedRecord>() == 24 + 4 * 4 + limits::FILENAME_CAP + limits::COMM_LEN);
const _: () = assert!(core::mem::size_of::<TaskNewRecord>() == 24 + 16);
const _: () = assert!(core::mem::size_of::<TaskExitRecord>() == 24 + 8);
const _: () = assert!(core::mem::size_of::<ProbedCallRecord>() == 24 + 16);
const _: () = assert!(core::mem::size_of::<CallSum>() == 32);
const _: () = assert!(core::mem::size_of::<CallSumsRecord>() == 24 + 8 + 32 * call_sums::MAX_ENTRIES);
const _: () = assert!(core::mem::size_of::<OffCpuRecord>() == 24 + 8);
const _: () = assert!(core::mem::size_of::<MainRecord>() == 24 + 8);
const _: () = assert!(core::mem::size_of::<SampleRecord>() == 24 + 8 + 8 * limits::MAX_FRAMES);
const _: () = assert!(core::mem::size_of::<AdoptedRecord>() == 24 + 8 + limits::COMM_LEN);
const _: () = assert!(core::mem::size_of::<ArgvRecord>() == 24 + 16 + limits::ARGV_CAP + limits::ARG_CAP);
const _: () = assert!(limits::ARGV_CAP.is_power_of_two());
const _: () = assert!(core::mem::size_of::<AggKey>() == 32);
const _: () = assert!(core::mem::size_of::<MissKey>() == 16);
const _: () = assert!(core::mem::size_of::<MissValue>() == 32 + aggregate::MISS_NAME);
const _: () = assert!(core::mem::offset_of!(MissValue, name).is_multiple_of(8) && aggregate::MISS_NAME.is_multiple_of(8));
// The kernel side copies these task names a word at a time (`task::copy_comm`).
const _: () = assert!(
    core::mem::offset_of!(InFlight, comm).is_multiple_of(8)
        && core::mem::offset_of!(ProcessState, comm).is_multiple_of(8)
        && core::mem::offset_of!(AggValue, comm).is_multiple_of(8)
);
const _: () = assert!(core::mem::size_of::<ProcessState>() == 72 + 8 * aggregate::TRIED_PER_SEARCH);
const _: () = assert!(aggregate::TRIED_PER_SEARCH.is_power_of_two());
const _: () = assert!(core::mem::size_of::<ProgramPath>() == 8 + aggregate::PATH_DEPTH * aggregate::PATH_COMPONENT);
const _: () = assert!(core::mem::size_of::<AggValue>() == 8 * 9 + 8 + 16 + core::mem::size_of::<ProgramPath>() + 8 * aggregate::BUCKETS);
const _: () = assert!(core::mem::size_of::<InFlight>() == 7 * 8 + 8 + 8 + 16 + 4 * aggregate::SAMPLES_PER_CALL + 16);
const _: () = assert!(core::mem::size_of::<StackKey>() == 8 + core::mem::size_of::<AggKey>());
const _: () = assert!(core::mem::size_of::<SyscallEnterRecord>() == 48);
const _: () =
    assert!(core::mem::offset_of!(Attempt, sums) == core::mem::offset_of!(Attempt, enter) + core::mem::size_of::<SyscallEnterRecord>());
const _: () = assert!(core::mem::size_of::<OpenSummedCall>() == 32);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: plain `#[repr(C)]` integers and byte arrays without padding (asserted above).
    unsafe impl aya::Pod for RecordHeader {}
    unsafe impl aya::Pod for SyscallEnterRecord {}
    unsafe impl aya::Pod for SyscallExitRecord {}
    unsafe impl aya::Pod for KernelFilename {}
    unsafe impl aya::Pod for NoReturnRecord {}
    unsafe impl aya::Pod for LoadedRecord {}
    unsafe impl aya::Pod for TaskNewRecord {}
    unsafe impl aya::Pod for TaskExitRecord {}
    unsafe impl aya::Pod for SampleRecord {}
    unsafe impl aya::Pod for ProbedCallRecord {}
    unsafe impl aya::Pod for CallSumsRecord {}
    unsafe impl aya::Pod for OffCpuRecord {}
    unsafe impl aya::Pod for MainRecord {}
    unsafe impl aya::Pod for ArgvRecord {}
    unsafe impl aya::Pod for AdoptedRecord {}
    unsafe impl aya::Pod for AggKey {}
    unsafe impl aya::Pod for AggValue {}
    unsafe impl aya::Pod for InFlight {}
    unsafe impl aya::Pod for ProgramPath {}
    unsafe impl aya::Pod for MissKey {}
    unsafe impl aya::Pod for MissValue {}
    unsafe impl aya::Pod for ProcessState {}
    unsafe impl aya::Pod for StackKey {}
    unsafe impl aya::Pod for Attempt {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `name_hash` as the kernel side calls it: words of a 128-byte buffer.
    fn hash_of(buf: &[u8; aggregate::MISS_NAME], len: usize) -> u64 {
        aggregate::name_hash(|i| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap()), len)
    }

    fn buffer(name: &[u8], garbage: u8) -> [u8; aggregate::MISS_NAME] {
        let mut b = [garbage; aggregate::MISS_NAME];
        b[..name.len()].copy_from_slice(name);
        b[name.len()] = 0;
        b
    }

    #[test]
    fn a_names_hash_ignores_what_follows_it_in_the_buffer() {
        for name in [&b""[..], b"a", b"/usr/bin/as", b"/root/.cargo/bin/x86_64-linux-gnu-gcc-12"] {
            assert_eq!(hash_of(&buffer(name, 0), name.len()), hash_of(&buffer(name, 0xa5), name.len()), "{name:?}");
        }
    }

    #[test]
    fn names_differing_anywhere_hash_apart() {
        let names: [&[u8]; 6] = [b"/usr/bin/as", b"/usr/bin/at", b"/usr/sbin/as", b"/usr/bin/as\0", b"a", b"b"];
        let hashes: std::collections::HashSet<u64> = names.iter().map(|n| hash_of(&buffer(n, 0), n.len())).collect();
        assert_eq!(hashes.len(), names.len());
        // Same bytes, another length (a name that is a prefix of another, NUL-padded).
        assert_ne!(hash_of(&buffer(b"ab", 0), 1), hash_of(&buffer(b"ab", 0), 2));
    }

    #[test]
    fn a_leaders_exec_and_fork_calls_take_different_slots() {
        let mask = aggregate::slots(8192) - 1;
        for tgid in [1, 300, 4095, 8191, 32767, 4_194_303] {
            let exec = aggregate::table_slot(aggregate::in_flight_key(tgid, tgid, true), mask);
            let fork = aggregate::table_slot(aggregate::in_flight_key(tgid, tgid, false), mask);
            assert_ne!(exec, fork, "tgid {tgid}");
            assert!(exec <= mask && fork <= mask);
        }
        assert_eq!((aggregate::slots(1), aggregate::slots(5000), aggregate::slots(8192)), (1, 8192, 8192));
    }

    #[test]
    fn the_kind_table_has_no_repeats() {
        for (i, a) in RECORD_KINDS.iter().enumerate() {
            for b in &RECORD_KINDS[i + 1..] {
                assert_ne!(a.constant, b.constant);
                assert_ne!(a.kind, b.kind, "{} and {} share a kind number", a.constant, b.constant);
                assert_ne!(a.tag, b.tag, "{} and {} share a recording tag", a.constant, b.constant);
                assert_ne!(a.name, b.name, "{} and {} share a name", a.constant, b.constant);
            }
        }
    }

    #[test]
    fn open_calls_keep_entry_times_and_tell_threads_apart() {
        use super::open_call::{entered, is_of, is_taken, pack, place};
        use std::collections::HashSet;
        // Task structs as a slab lays them out: objects of ~9.5 KiB at fixed offsets in
        // 32 KiB slabs; 512 slabs spread over 64 MiB. Their (table, key) pairs are all
        // distinct, in each of the two ways.
        let base = 0xffff_8881_0000_0000u64;
        let tasks: Vec<u64> = (0..512u64).flat_map(|s| (0..3u64).map(move |k| base + s * (128 << 10) + k * 9728)).collect();
        for way in 0..2 {
            let seen: HashSet<(u32, u64)> = tasks.iter().map(|&t| (place(t).0[way], place(t).1[way])).collect();
            assert_eq!(seen.len(), tasks.len(), "way {way}");
        }
        // Spread over the tables (raw address bits put a third of these in 64 tables).
        let first: HashSet<u32> = tasks.iter().map(|&t| place(t).0[0]).collect();
        assert!(first.len() > 1_000, "{} tables", first.len());
        for &t in &tasks {
            let (tables, keys) = place(t);
            assert_ne!(tables[0], tables[1]);
            assert_ne!(keys[0], keys[1]);
        }
        let (_, keys) = place(tasks[0]);
        let (_, other) = place(tasks[1]);
        let now = 1_234_567_890_123_456u64;
        let cell = pack(keys[0], now - 5_000);
        assert!(is_of(cell, keys[0]) && is_taken(cell));
        assert!(!is_of(cell, keys[1]) && !is_of(cell, other[0]));
        assert!(!is_of(0, keys[0]) && !is_taken(0));
        assert_eq!(entered(cell, now), now - 5_000);
        // The entry's low bits wrapped since: still the right time.
        let before_wrap = (now | ((1 << 39) - 1)) - 10;
        assert_eq!(entered(pack(keys[0], before_wrap), before_wrap + 20), before_wrap);
        // Key 0 is a valid key, told from an empty cell by the valid bit.
        assert!(is_of(pack(0, 0), 0));
    }

    #[test]
    fn latency_buckets_are_log_linear_and_contiguous() {
        use super::aggregate::{BUCKETS, bucket, bucket_high_ns, bucket_low_ns};
        assert_eq!(bucket(0), 0);
        // The first bound is 65 ns (2^(-191/8) s = 64.8 ns), the last 16 s.
        assert_eq!(bucket(64), 0);
        assert_eq!(bucket(65), 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(16_000_000_000), BUCKETS - 2);
        assert_eq!(bucket(16_000_000_001), BUCKETS - 1);
        // A bound that is a whole number of ns (1 s, 1/2^9 s) belongs to the bucket below it,
        // as a native histogram's upper bound does.
        assert_eq!(bucket_high_ns(bucket(1_000_000_000)), 1_000_000_001);
        assert_eq!(bucket_high_ns(bucket(1_953_125)), 1_953_126);
        for i in 1..BUCKETS - 1 {
            let (low, high) = (bucket_low_ns(i), bucket_high_ns(i));
            assert!(low < high, "bucket {i}");
            assert_eq!(bucket(low), i, "bucket {i} starts at {low}");
            assert_eq!(bucket(high - 1), i, "bucket {i} ends before {high}");
            // No wider than 2^(1/8) (9.05%) beyond the integer rounding of small values.
            if low >= 1000 {
                assert!((high - low - 1) as f64 / low as f64 <= 0.0906, "bucket {i}: {low}..{high}");
            }
        }
        // 100 ns to 10 s lie inside the log-linear range.
        assert!(bucket(100) > 0 && bucket(10_000_000_000) < BUCKETS - 1);
        // Every value lands in the bucket whose bounds hold it.
        let mut v = 1u64;
        while v < 1 << 36 {
            let b = bucket(v);
            assert!(bucket_low_ns(b) <= v && v < bucket_high_ns(b), "{v} in {b}");
            v = v * 17 / 16 + 1;
        }
    }

    /// Each bucket is the native schema-3 bucket it claims: its bounds in ns are the first
    /// whole ns past 10^9 · 2^(i/8), for i = NATIVE_FIRST_INDEX - 1 … (the bucket's `le`).
    #[test]
    fn latency_buckets_are_native_schema_3_buckets_in_seconds() {
        use super::aggregate::{BUCKETS, NATIVE_FIRST_INDEX, bucket_le_seconds, bucket_low_ns};
        for i in 1..BUCKETS {
            let lower = 2f64.powf((NATIVE_FIRST_INDEX + i as i32 - 2) as f64 / 8.0) * 1e9;
            assert_eq!(bucket_low_ns(i), lower.floor() as u64 + 1, "bucket {i}'s lower bound {lower} ns");
            if i + 1 < BUCKETS {
                let le = bucket_le_seconds(i);
                let want = 2f64.powf((NATIVE_FIRST_INDEX + i as i32 - 1) as f64 / 8.0);
                assert!((le - want).abs() <= want * 1e-15, "bucket {i}: le {le} vs {want}");
                assert_eq!(bucket_low_ns(i + 1), (le * 1e9).floor() as u64 + 1, "bucket {i}'s upper bound");
            }
        }
        assert_eq!(bucket_le_seconds(BUCKETS - 2), 16.0);
        assert_eq!(bucket_le_seconds(BUCKETS - 1), f64::INFINITY);
    }

    #[test]
    fn other_slots_follow_the_outcome_classes() {
        use super::aggregate::*;
        assert_eq!(other_slot(CALL_EXEC, OUTCOME_SUCCESS, false), OTHER_SUCCESS);
        assert_eq!(other_slot(CALL_EXEC, 2, false), OTHER_ENOENT);
        assert_eq!(other_slot(CALL_EXEC, 13, false), OTHER_EACCES);
        assert_eq!(other_slot(CALL_EXEC, 8, false), OTHER_ENOEXEC);
        assert_eq!(other_slot(CALL_EXEC, 7, false), OTHER_ERRNO);
        assert_eq!(other_slot(CALL_EXEC, OUTCOME_ABANDONED, false), OTHER_ABANDONED);
        assert_eq!(other_slot(CALL_FORK, OUTCOME_SUCCESS, false), OTHER_FORK);
        assert_eq!(other_slot(CALL_FORK, 11, false), OTHER_FORK_FAILED);
        // A check is never an exec's success or failure.
        assert_eq!(other_slot(CALL_EXEC, OUTCOME_SUCCESS, true), OTHER_CHECKED);
        assert_eq!(other_slot(CALL_EXEC, 13, true), OTHER_CHECK_FAILED);
        assert_eq!(other_slot(CALL_EXEC, 2, true), OTHER_CHECK_FAILED);
        const { assert!(OTHER_CHECK_FAILED < OTHER_SLOTS) };
    }

    #[test]
    fn rows_are_found_by_kind_and_by_tag() {
        for k in &RECORD_KINDS {
            assert_eq!(RecordKind::of_kind(k.kind), Some(k));
            assert_eq!(RecordKind::of_tag(k.tag), Some(k));
        }
        assert_eq!(RecordKind::of_kind(kind::LOADED).map(|k| (k.constant, k.tag)), Some(("LOADED", recording_tag::LOADED)));
        assert_eq!(RecordKind::of_kind(0), None);
    }

    #[test]
    fn each_struct_is_paired_with_its_own_kind() {
        assert_eq!(NoReturnRecord::KIND, kind::NO_RETURN);
        assert_eq!(LoadedRecord::KIND, kind::LOADED);
        assert_eq!(OffCpuRecord::KIND, kind::OFF_CPU);
        assert_eq!(MainRecord::KIND, kind::MAIN);
        assert_eq!(RecordKind::of_kind(kind::SAMPLE).map(|k| k.size), Some(core::mem::size_of::<SampleRecord>()));
    }
}
