//! Decoded kernel records: one variant per record kind the eBPF side sends, named alike
//! (`kind::SYSCALL_ENTER` ↔ `SyscallEnterRecord` ↔ `Body::SyscallEnter` ↔ `syscall_enter`
//! here and in the assembler; the table is `profiler_common::RECORD_KINDS`). Decoding is the only place that knows the wire layout; a record of
//! unknown kind or size is an error that names it, never a silent skip. A recording stores
//! these records as they came, so a replay runs the same assembler and analysis as a live run.
use anyhow::{Result, bail};
use profiler_common::{
    AdoptedRecord, ArgvRecord, CallSum, CallSumsRecord, KernelFilename, LoadedRecord, MainRecord, NoReturnRecord, OffCpuRecord,
    ProbedCallRecord, RecordHeader, RecordKind, SampleRecord, SyscallEnterRecord, SyscallExitRecord, TaskExitRecord, TaskNewRecord,
    argv_flags, call_sums, kind, record_flags, task_exit_flags, task_new_flags,
};

use crate::model::names::{Abi, Argv, Killed, Name, TracedSyscall};

/// What every record carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns). Records arrive in nearly (not strictly)
    /// increasing time order: consecutive records may step back by a few microseconds.
    pub ts_ns: u64,
    /// Thread id, process id (tgid), CPU.
    pub pid: u32,
    pub tgid: u32,
    pub cpu: u32,
}

/// The kernel's kill flags on a failed exec's exit record.
fn killed_from_flags(flags: u32) -> Option<Killed> {
    if flags & record_flags::KILLED_BY_OTHER_THREADS_EXEC != 0 {
        Some(Killed::ByOtherThreadsExec)
    } else if flags & record_flags::KILLED != 0 {
        Some(Killed::BySignal)
    } else {
        None
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A traced syscall was entered. `faults`: the thread's (minor, major) fault counters, None
    /// when not readable.
    /// `abi`: the ABI the call was made in. `check`: an `execveat` with `AT_EXECVE_CHECK`,
    /// which checks the file and executes nothing.
    SyscallEnter { syscall: TracedSyscall, abi: Abi, faults: Option<(u64, u64)>, check: bool },
    /// It returned. `ret` is 0/-errno for execs, the child id for forks. `name` only for failed
    /// execs (an `execveat` relative to a directory fd named as the kernel names it,
    /// `/dev/fd/N/name`, or `/dev/fd/N` for the fd itself). `killed`: a failed exec's thread
    /// was being killed at its exit. `abi`: the ABI at exit (a successful exec's new image's).
    /// `enter_lost`: the kernel dropped this call's enter record (so it is not the call open on
    /// the thread, whose exit was dropped).
    SyscallExit {
        syscall: TracedSyscall,
        abi: Abi,
        ret: i64,
        faults: Option<(u64, u64)>,
        name: Option<Name>,
        killed: Option<Killed>,
        enter_lost: bool,
    },
    /// An exec passed its point of no return.
    NoReturn { name: Option<Name> },
    /// An exec's new image is in place; `old_pid` is the thread id before the exec. `comm`:
    /// the comm the exec set (None in recordings from before it was kept).
    Loaded { old_pid: u32, name: Option<Name>, comm: Option<Vec<u8>> },
    /// A new task in the traced tree (head ids are the parent's).
    TaskNew { child_pid: u32, child_tgid: u32, thread: bool },
    /// A traced thread exited.
    TaskExit { group_dead: bool },
    /// A cpu-clock sample: kernel return addresses (0..=64 of them, innermost first; values near
    /// 0xffff_ffff_8xxx_xxxx). Few distinct stacks repeat many times.
    Sample { frames: Vec<u64> },
    /// Exact mode: one probed kernel function call, from `enter_ns` to head.ts_ns. slot < 32.
    ProbedCall { enter_ns: u64, slot: u32 },
    /// Exact mode: an exec attempt's probed calls summed per call path in the kernel.
    CallSums(CallSums),
    /// A thread was off-CPU from `start_ns` to head.ts_ns.
    OffCpu { start_ns: u64 },
    /// A traced process reached `main`.
    Main,
    /// `--argv`: the arguments of the exec the thread enters next.
    Argv(Argv),
    /// `--cgroup`: the head's process moved into the cgroup after tracing began and is traced
    /// from this call on; its parent (None when unreadable) and comm as the kernel saw them.
    Adopted { ppid: Option<u32>, comm: Vec<u8> },
}

/// One call path's calls in one exec attempt, summed in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathSum {
    /// The probe slot of the function called.
    pub slot: u32,
    /// The entry (an earlier one) of the calling path; None: called from the syscall itself.
    pub parent: Option<u8>,
    pub calls: u32,
    /// Entry to return, summed over the calls.
    pub inclusive_ns: u64,
    /// The same less the time in probed callees.
    pub self_ns: u64,
    /// Of `inclusive_ns`, the time the thread was off-CPU (0 in recordings made before it was
    /// kept).
    pub off_cpu_ns: u64,
}

/// An exec attempt's probed calls summed per call path, entries in the order paths were first
/// called; calls that could not be summed are counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSums {
    pub entries: Vec<PathSum>,
    pub unsummed: u32,
}

impl CallSums {
    /// Calls summed.
    pub fn calls(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.calls)).sum()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub head: Head,
    pub body: Body,
}

impl Body {
    /// The kernel kind number it was sent under.
    pub(crate) fn kind(&self) -> u32 {
        match self {
            Body::SyscallEnter { .. } => kind::SYSCALL_ENTER,
            Body::SyscallExit { .. } => kind::SYSCALL_EXIT,
            Body::NoReturn { .. } => kind::NO_RETURN,
            Body::Loaded { .. } => kind::LOADED,
            Body::TaskNew { .. } => kind::TASK_NEW,
            Body::TaskExit { .. } => kind::TASK_EXIT,
            Body::Sample { .. } => kind::SAMPLE,
            Body::ProbedCall { .. } => kind::PROBED_CALL,
            Body::CallSums(_) => kind::CALL_SUMS,
            Body::OffCpu { .. } => kind::OFF_CPU,
            Body::Main => kind::MAIN,
            Body::Argv(_) => kind::ARGV,
            Body::Adopted { .. } => kind::ADOPTED,
        }
    }

    /// A short name for error messages.
    pub fn kind_name(&self) -> &'static str {
        RecordKind::of_kind(self.kind()).map_or("unknown", |k| k.name)
    }
}

/// Reads a `#[repr(C)]` record from the front of `bytes` (ring buffer items are 8-byte
/// aligned, but a copy avoids relying on it).
fn read<T: Copy>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < size_of::<T>() {
        bail!("record of {} bytes is shorter than {} ({} bytes)", bytes.len(), std::any::type_name::<T>(), size_of::<T>());
    }
    // SAFETY: length checked; T is a plain-old-data record from profiler-common.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A held enter read from its attempt's cell, as the ring buffer would have carried it.
#[cfg(any(test, feature = "tracer"))]
pub(crate) fn enter_bytes(r: &SyscallEnterRecord) -> &[u8] {
    // SAFETY: a repr(C) record of integers without padding (asserted in profiler-common):
    // every byte is initialised.
    unsafe { std::slice::from_raw_parts((r as *const SyscallEnterRecord).cast::<u8>(), size_of::<SyscallEnterRecord>()) }
}

/// The records of one ring buffer item: most hold one; an exec attempt's enter, which the
/// kernel holds back until the thread's next record (`profiler_common::Attempt`), comes in
/// front of that record in the same item.
pub(crate) fn split_item(bytes: &[u8]) -> (&[u8], Option<&[u8]>) {
    const ENTER: usize = size_of::<SyscallEnterRecord>();
    match read::<RecordHeader>(bytes) {
        Ok(h) if h.kind == kind::SYSCALL_ENTER && bytes.len() > ENTER => {
            let (enter, next) = bytes.split_at(ENTER);
            (enter, Some(next))
        }
        _ => (bytes, None),
    }
}

/// Decodes one record (an item, or a part of one: [`split_item`]).
pub(crate) fn decode(bytes: &[u8]) -> Result<Record> {
    let h: RecordHeader = read(bytes)?;
    let head = Head { ts_ns: h.ts_ns, pid: h.pid, tgid: h.tgid, cpu: h.cpu };
    let body = match h.kind {
        kind::SYSCALL_ENTER => syscall_enter(read(bytes)?)?,
        kind::SYSCALL_EXIT => syscall_exit(read(bytes)?)?,
        kind::NO_RETURN => no_return(read(bytes)?),
        kind::LOADED => loaded(read(bytes)?),
        kind::TASK_NEW => task_new(read(bytes)?),
        kind::TASK_EXIT => task_exit(read(bytes)?),
        kind::SAMPLE => sample(read(bytes)?),
        kind::PROBED_CALL => probed_call(read(bytes)?),
        kind::CALL_SUMS => call_sums(bytes)?,
        kind::OFF_CPU => off_cpu(read(bytes)?),
        kind::MAIN => main(read(bytes)?),
        kind::ARGV => argv(read(bytes)?),
        kind::ADOPTED => adopted(read(bytes)?),
        other => bail!("unknown record kind {other} ({} bytes): the eBPF object and execprof disagree", bytes.len()),
    };
    Ok(Record { head, body })
}

fn syscall_enter(r: SyscallEnterRecord) -> Result<Body> {
    let syscall = syscall(r.syscall)?;
    Ok(Body::SyscallEnter {
        syscall,
        abi: abi(r.flags),
        faults: faults(r.flags, r.min_flt, r.maj_flt),
        check: syscall == TracedSyscall::Execveat && r.flags & record_flags::EXECVE_CHECK != 0,
    })
}

fn syscall_exit(r: SyscallExitRecord) -> Result<Body> {
    let syscall = syscall(r.syscall)?;
    let failed_exec = syscall.is_exec() && r.ret != 0;
    // A passed `AT_EXECVE_CHECK` check returns from `execveat` with 0 and its name read (a
    // successful exec returns as `execve`, or with no name: the kernel's copy names it).
    let passed_check = syscall == TracedSyscall::Execveat
        && r.ret == 0
        && (r.filename_len > 0 || r.flags & (record_flags::FILENAME_UNREADABLE | record_flags::AT_EMPTY_PATH) != 0);
    let name = |r: &SyscallExitRecord| {
        let n = name(&r.filename, r.filename_len, r.flags);
        if syscall == TracedSyscall::Execveat { at_dirfd(n, r.dirfd, r.flags & record_flags::AT_EMPTY_PATH != 0) } else { n }
    };
    Ok(Body::SyscallExit {
        syscall,
        abi: abi(r.flags),
        ret: r.ret,
        faults: faults(r.flags, r.min_flt, r.maj_flt),
        name: (failed_exec || passed_check).then(|| name(&r)),
        killed: if failed_exec { killed_from_flags(r.flags) } else { None },
        enter_lost: r.flags & record_flags::ENTER_LOST != 0,
    })
}

fn abi(flags: u32) -> Abi {
    if flags & record_flags::COMPAT != 0 { Abi::Compat } else { Abi::Native }
}

/// A failed `execveat`'s name as the kernel names a successful one's (`bprm->filename`): a
/// name relative to a directory fd as `/dev/fd/N/name`, the fd itself (`AT_EMPTY_PATH` and an
/// empty name) as `/dev/fd/N`, so failures and successes on the same fd are one file.
fn at_dirfd(n: Name, dirfd: i32, empty_path: bool) -> Name {
    const AT_FDCWD: i32 = -100;
    if n.unreadable || dirfd == AT_FDCWD || n.bytes.first() == Some(&b'/') || (n.bytes.is_empty() && !empty_path) {
        return n;
    }
    let mut bytes = format!("/dev/fd/{dirfd}").into_bytes();
    if !n.bytes.is_empty() {
        bytes.push(b'/');
        bytes.extend_from_slice(&n.bytes);
    }
    Name { bytes, ..n }
}

fn no_return(r: NoReturnRecord) -> Body {
    Body::NoReturn { name: kernel_filename(&r.kernel_filename) }
}

fn loaded(r: LoadedRecord) -> Body {
    let comm = r.comm.iter().position(|&b| b == 0).map_or(&r.comm[..], |n| &r.comm[..n]);
    Body::Loaded { old_pid: r.old_pid, name: kernel_filename(&r.kernel_filename), comm: Some(comm.to_vec()) }
}

fn task_new(r: TaskNewRecord) -> Body {
    Body::TaskNew { child_pid: r.child_pid, child_tgid: r.child_tgid, thread: r.flags & task_new_flags::THREAD != 0 }
}

fn task_exit(r: TaskExitRecord) -> Body {
    Body::TaskExit { group_dead: r.flags & task_exit_flags::GROUP_DEAD != 0 }
}

fn sample(r: SampleRecord) -> Body {
    let n = (r.nr_frames as usize).min(r.frames.len());
    Body::Sample { frames: r.frames[..n].to_vec() }
}

fn probed_call(r: ProbedCallRecord) -> Body {
    Body::ProbedCall { enter_ns: r.enter_ns, slot: r.slot }
}

/// Only the entries in use are sent: the record is read up to them.
fn call_sums(bytes: &[u8]) -> Result<Body> {
    let head = CallSumsRecord::HEAD;
    let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if bytes.len() < head {
        bail!("a probed call sums record of {} bytes, shorter than its {head}-byte head", bytes.len());
    }
    let (count, unsummed) = (word(head - 8) as usize, word(head - 4));
    let size = std::mem::size_of::<CallSum>();
    if count > call_sums::MAX_ENTRIES || bytes.len() < head + count * size {
        bail!("a probed call sums record of {} bytes with {count} entries", bytes.len());
    }
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let at = head + i * size;
        // SAFETY: length checked; CallSum is plain-old-data from profiler-common.
        let e: CallSum = unsafe { std::ptr::read_unaligned(bytes[at..at + size].as_ptr().cast::<CallSum>()) };
        if e.parent != call_sums::NONE && usize::from(e.parent) >= i {
            bail!("probed call sums entry {i} has parent {}, not an earlier entry", e.parent);
        }
        entries.push(PathSum {
            slot: u32::from(e.slot),
            parent: (e.parent != call_sums::NONE).then_some(e.parent),
            calls: e.calls,
            inclusive_ns: e.inclusive_ns,
            self_ns: e.self_ns,
            off_cpu_ns: e.off_cpu_ns,
        });
    }
    Ok(Body::CallSums(CallSums { entries, unsummed }))
}

fn off_cpu(r: OffCpuRecord) -> Body {
    Body::OffCpu { start_ns: r.start_ns }
}

fn main(_: MainRecord) -> Body {
    Body::Main
}

fn argv(r: ArgvRecord) -> Body {
    let len = (r.len as usize).min(r.bytes.len());
    let mut args: Vec<Vec<u8>> = r.bytes[..len].split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    // Each argument ends with its NUL: the split leaves one empty piece after the last.
    args.pop();
    args.truncate(r.argc as usize);
    Body::Argv(Argv { args, cut: r.flags & argv_flags::CUT != 0, unreadable: r.flags & argv_flags::UNREADABLE != 0 })
}

fn adopted(r: AdoptedRecord) -> Body {
    let len = r.comm.iter().position(|&b| b == 0).unwrap_or(r.comm.len());
    Body::Adopted { ppid: (r.ppid != 0).then_some(r.ppid), comm: r.comm[..len].to_vec() }
}

/// The name the kernel read at this record, if it read one here.
fn kernel_filename(f: &KernelFilename) -> Option<Name> {
    (f.filename_len > 0).then(|| name(&f.filename, f.filename_len, f.flags))
}

fn syscall(code: u32) -> Result<TracedSyscall> {
    TracedSyscall::from_code(code)
        .ok_or_else(|| anyhow::anyhow!("unknown syscall code {code} in a record: the eBPF object and execprof disagree"))
}

fn faults(flags: u32, min_flt: u64, maj_flt: u64) -> Option<(u64, u64)> {
    (flags & record_flags::FAULTS_UNAVAILABLE == 0).then_some((min_flt, maj_flt))
}

fn name(bytes: &[u8], len: u32, flags: u32) -> Name {
    let len = (len as usize).min(bytes.len());
    Name {
        bytes: bytes[..len].to_vec(),
        truncated: flags & record_flags::FILENAME_TRUNCATED != 0,
        unreadable: flags & record_flags::FILENAME_UNREADABLE != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::{
        limits::{FILENAME_CAP, MAX_FRAMES},
        traced_syscall,
    };

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: test-only view of a padding-free repr(C) record.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn header(kind: u32, ts_ns: u64, pid: u32, tgid: u32) -> RecordHeader {
        RecordHeader { kind, cpu: 1, ts_ns, pid, tgid }
    }

    fn head(ts_ns: u64, pid: u32, tgid: u32) -> Head {
        Head { ts_ns, pid, tgid, cpu: 1 }
    }

    fn exit_record(ret: i64, syscall: u32, flags: u32, name: &[u8]) -> SyscallExitRecord {
        let mut filename = [0; FILENAME_CAP];
        filename[..name.len()].copy_from_slice(name);
        SyscallExitRecord {
            header: header(kind::SYSCALL_EXIT, 5_000, 10, 10),
            ret,
            min_flt: 9,
            maj_flt: 1,
            syscall,
            flags,
            filename_len: name.len() as u32,
            dirfd: -100,
            filename,
        }
    }

    #[test]
    fn decodes_syscall_enter_records() {
        let r = SyscallEnterRecord {
            header: header(kind::SYSCALL_ENTER, 1_000, 11, 10),
            min_flt: 7,
            maj_flt: 0,
            syscall: traced_syscall::EXECVEAT,
            flags: 0,
        };
        let want = Record {
            head: head(1_000, 11, 10),
            body: Body::SyscallEnter { syscall: TracedSyscall::Execveat, abi: Abi::Native, faults: Some((7, 0)), check: false },
        };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), want);
        let r = SyscallEnterRecord { flags: record_flags::FAULTS_UNAVAILABLE, syscall: traced_syscall::VFORK, ..r };
        assert_eq!(
            decode(&bytes_of(&r)).unwrap().body,
            Body::SyscallEnter { syscall: TracedSyscall::Vfork, abi: Abi::Native, faults: None, check: false }
        );
        let r = SyscallEnterRecord { flags: record_flags::COMPAT, ..r };
        assert!(matches!(decode(&bytes_of(&r)).unwrap().body, Body::SyscallEnter { abi: Abi::Compat, faults: Some(_), .. }));
    }

    /// The kernel holds an exec's enter back until the thread's next record, and sends the two
    /// in one item: the enter first. Any other item is one record.
    #[test]
    fn a_held_enter_comes_in_front_of_the_next_record_in_one_item() {
        let enter = SyscallEnterRecord {
            header: header(kind::SYSCALL_ENTER, 1_000, 10, 10),
            min_flt: 7,
            maj_flt: 0,
            syscall: traced_syscall::EXECVE,
            flags: 0,
        };
        let exit = exit_record(-2, traced_syscall::EXECVE, 0, b"/m1/t");
        let mut item = bytes_of(&enter);
        item.extend(bytes_of(&exit));
        let (first, next) = split_item(&item);
        assert_eq!(
            decode(first).unwrap().body,
            Body::SyscallEnter { syscall: TracedSyscall::Execve, abi: Abi::Native, faults: Some((7, 0)), check: false }
        );
        let Body::SyscallExit { ret: -2, name: Some(n), .. } = decode(next.expect("the exit")).unwrap().body else { panic!() };
        assert_eq!(n.bytes, b"/m1/t");
        assert_eq!(enter_bytes(&enter), &item[..size_of::<SyscallEnterRecord>()], "a held enter read from its cell");
        for alone in [bytes_of(&enter), bytes_of(&exit)] {
            assert_eq!(split_item(&alone), (&alone[..], None));
        }
        // Too short for a header: left whole, for decode to refuse and count.
        assert_eq!(split_item(&[1, 2]), (&[1u8, 2][..], None));
    }

    /// An `AT_EXECVE_CHECK` check is marked at its enter (only an execveat can be one), and a
    /// passed check's exit, the only 0 an execveat returns with its arguments still read,
    /// carries the checked file's name; a successful exec's exit carries none.
    #[test]
    fn a_checks_enter_is_marked_and_its_passed_exit_named() {
        let enter = |syscall| SyscallEnterRecord {
            header: header(kind::SYSCALL_ENTER, 1_000, 11, 10),
            min_flt: 7,
            maj_flt: 0,
            syscall,
            flags: record_flags::EXECVE_CHECK,
        };
        let check = |r| match decode(&bytes_of(&r)).unwrap().body {
            Body::SyscallEnter { check, .. } => check,
            b => panic!("{b:?}"),
        };
        assert!(check(enter(traced_syscall::EXECVEAT)));
        assert!(!check(enter(traced_syscall::EXECVE)), "execve has no flags argument");
        let name = |r: SyscallExitRecord| match decode(&bytes_of(&r)).unwrap().body {
            Body::SyscallExit { name, .. } => name.map(|n| n.bytes),
            b => panic!("{b:?}"),
        };
        let passed = SyscallExitRecord { dirfd: 3, ..exit_record(0, traced_syscall::EXECVEAT, record_flags::AT_EMPTY_PATH, b"") };
        assert_eq!(name(passed), Some(b"/dev/fd/3".to_vec()));
        let passed_by_path = exit_record(0, traced_syscall::EXECVEAT, 0, b"/usr/bin/env");
        assert_eq!(name(passed_by_path), Some(b"/usr/bin/env".to_vec()));
        let executed = SyscallExitRecord { dirfd: 0, ..exit_record(0, traced_syscall::EXECVEAT, 0, b"") };
        assert_eq!(name(executed), None, "arm64's successful execveat returns as execveat, with nothing read");
        assert_eq!(name(exit_record(0, traced_syscall::EXECVE, 0, b"")), None);
    }

    /// A failed execveat is named as the kernel names a successful one: by its fd.
    #[test]
    fn a_failed_execveat_is_named_by_its_directory_fd() {
        let named = |name: &[u8], dirfd, flags| {
            let r = SyscallExitRecord { dirfd, ..exit_record(-2, traced_syscall::EXECVEAT, flags, name) };
            let Body::SyscallExit { name: Some(n), .. } = decode(&bytes_of(&r)).unwrap().body else { panic!() };
            n.bytes
        };
        assert_eq!(named(b"", 5, record_flags::AT_EMPTY_PATH), b"/dev/fd/5");
        assert_eq!(named(b"sub/x", 7, 0), b"/dev/fd/7/sub/x");
        assert_eq!(named(b"sub/x", -100, 0), b"sub/x", "AT_FDCWD: relative to the working directory");
        assert_eq!(named(b"/abs", 7, 0), b"/abs", "an absolute name ignores the fd");
        assert_eq!(named(b"", 7, 0), b"", "an empty name without AT_EMPTY_PATH is ENOENT of nothing");
        // execve's name is never rewritten.
        let r = SyscallExitRecord { dirfd: 3, ..exit_record(-2, traced_syscall::EXECVE, 0, b"x") };
        let Body::SyscallExit { name: Some(n), abi: Abi::Native, .. } = decode(&bytes_of(&r)).unwrap().body else { panic!() };
        assert_eq!(n.bytes, b"x");
    }

    #[test]
    fn failed_exec_exit_carries_the_callers_name_and_a_success_none() {
        let r = exit_record(-2, traced_syscall::EXECVE, record_flags::FILENAME_TRUNCATED, b"/bin/\xff");
        let Body::SyscallExit { name: Some(n), ret: -2, faults: Some((9, 1)), .. } = decode(&bytes_of(&r)).unwrap().body else { panic!() };
        assert_eq!(n, Name { bytes: b"/bin/\xff".to_vec(), truncated: true, unreadable: false });
        let ok = exit_record(0, traced_syscall::EXECVE, 0, b"");
        assert!(matches!(decode(&bytes_of(&ok)).unwrap().body, Body::SyscallExit { name: None, ret: 0, .. }));
        let fork = exit_record(77, traced_syscall::CLONE3, 0, b"");
        assert!(matches!(decode(&bytes_of(&fork)).unwrap().body, Body::SyscallExit { name: None, syscall: TracedSyscall::Clone3, .. }));
    }

    #[test]
    fn a_failed_execs_kill_flags_say_who_killed_it() {
        let killed = |ret, flags| {
            let Body::SyscallExit { killed, .. } = decode(&bytes_of(&exit_record(ret, traced_syscall::EXECVE, flags, b"/x"))).unwrap().body
            else {
                panic!()
            };
            killed
        };
        let (sig, by_exec) = (record_flags::KILLED, record_flags::KILLED | record_flags::KILLED_BY_OTHER_THREADS_EXEC);
        assert_eq!(killed(-7, 0), None);
        assert_eq!(killed(-7, sig), Some(Killed::BySignal));
        assert_eq!(killed(-514, by_exec), Some(Killed::ByOtherThreadsExec));
        // A success is never killed, whatever the bits.
        assert_eq!(killed(0, by_exec), None);
    }

    fn kernel_filename(name: &[u8]) -> KernelFilename {
        let mut filename = [0; FILENAME_CAP];
        filename[..name.len()].copy_from_slice(name);
        KernelFilename { flags: 0, filename_len: name.len() as u32, _reserved: 0, filename }
    }

    #[test]
    fn decodes_no_return_and_loaded_records() {
        let mut comm = [0u8; 16];
        comm[..1].copy_from_slice(b"x");
        let r = LoadedRecord { header: header(kind::LOADED, 3_000, 10, 10), old_pid: 12, kernel_filename: kernel_filename(b"/t/x"), comm };
        let name = Some(Name { bytes: b"/t/x".to_vec(), ..Name::default() });
        assert_eq!(
            decode(&bytes_of(&r)).unwrap(),
            Record { head: head(3_000, 10, 10), body: Body::Loaded { old_pid: 12, name, comm: Some(b"x".to_vec()) } }
        );
        let r = NoReturnRecord { header: header(kind::NO_RETURN, 2_000, 10, 10), _reserved: 0, kernel_filename: kernel_filename(b"") };
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::NoReturn { name: None });
        let r =
            NoReturnRecord { kernel_filename: KernelFilename { flags: record_flags::FILENAME_TRUNCATED, ..kernel_filename(b"/t/y") }, ..r };
        let name = Some(Name { bytes: b"/t/y".to_vec(), truncated: true, unreadable: false });
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::NoReturn { name });
    }

    #[test]
    fn decodes_task_new_and_task_exit() {
        let f = TaskNewRecord { header: header(kind::TASK_NEW, 9, 1, 1), child_pid: 2, child_tgid: 2, flags: 0, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&f)).unwrap().body, Body::TaskNew { child_pid: 2, child_tgid: 2, thread: false });
        let x = TaskExitRecord { header: header(kind::TASK_EXIT, 10, 2, 2), flags: task_exit_flags::GROUP_DEAD, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&x)).unwrap(), Record { head: head(10, 2, 2), body: Body::TaskExit { group_dead: true } });
    }

    /// The comm up to its NUL (all 16 bytes when it has none); a parent id of 0 is unread.
    #[test]
    fn decodes_adopted_records() {
        let mut r = AdoptedRecord { header: header(kind::ADOPTED, 4, 8, 7), ppid: 6, _reserved: 0, comm: [0xaa; 16] };
        r.comm[..5].copy_from_slice(b"bash\0");
        let want = Record { head: head(4, 8, 7), body: Body::Adopted { ppid: Some(6), comm: b"bash".to_vec() } };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), want);
        r.comm = *b"runc:[2:INIT]xyz";
        r.ppid = 0;
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::Adopted { ppid: None, comm: b"runc:[2:INIT]xyz".to_vec() });
    }

    /// The NUL-separated arguments up to `len`, `argc` of them, with the kernel's flags.
    #[test]
    fn decodes_argv_records() {
        let mut r = ArgvRecord {
            header: header(kind::ARGV, 5, 3, 3),
            len: 0,
            argc: 0,
            flags: 0,
            _reserved: 0,
            bytes: [0xaa; profiler_common::limits::ARGV_CAP + profiler_common::limits::ARG_CAP],
        };
        let text = b"/bin/ls\0\0-l\0";
        r.bytes[..text.len()].copy_from_slice(text);
        (r.len, r.argc, r.flags) = (text.len() as u32, 3, argv_flags::CUT);
        let want = Argv { args: vec![b"/bin/ls".to_vec(), Vec::new(), b"-l".to_vec()], cut: true, unreadable: false };
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::Argv(want));
        (r.len, r.argc, r.flags) = (0, 0, argv_flags::UNREADABLE);
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::Argv(Argv { args: vec![], cut: false, unreadable: true }));
    }

    #[test]
    fn decodes_sample_frames_up_to_nr_frames() {
        let mut r = SampleRecord { header: header(kind::SAMPLE, 50, 3, 3), nr_frames: 2, _reserved: 0, frames: [0; MAX_FRAMES] };
        r.frames[0] = 0xffff_ffff_8100_0010;
        r.frames[1] = 0xffff_ffff_8100_0020;
        r.frames[2] = 0xdead;
        assert_eq!(decode(&bytes_of(&r)).unwrap().body, Body::Sample { frames: vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020] });
    }

    #[test]
    fn decodes_probed_calls_off_cpu_and_main() {
        let r = ProbedCallRecord { header: header(kind::PROBED_CALL, 90, 4, 4), enter_ns: 70, slot: 3, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), Record { head: head(90, 4, 4), body: Body::ProbedCall { enter_ns: 70, slot: 3 } });
        let m = OffCpuRecord { header: header(kind::OFF_CPU, 90, 4, 4), start_ns: 40 };
        assert_eq!(decode(&bytes_of(&m)).unwrap().body, Body::OffCpu { start_ns: 40 });
        let m = MainRecord { header: header(kind::MAIN, 90, 4, 4), _reserved: 0 };
        assert_eq!(decode(&bytes_of(&m)).unwrap().body, Body::Main);
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(decode(&[0u8; 4]).is_err());
        let mut h = RecordHeader { kind: 99, ..Default::default() };
        let err = decode(&bytes_of(&h)).unwrap_err().to_string();
        assert!(err.contains("unknown record kind 99"), "{err}");
        h.kind = kind::SYSCALL_EXIT;
        assert!(decode(&bytes_of(&h)).unwrap_err().to_string().contains("shorter"));
        let bad = SyscallEnterRecord { header: header(kind::SYSCALL_ENTER, 1, 1, 1), min_flt: 0, maj_flt: 0, syscall: 42, flags: 0 };
        assert!(decode(&bytes_of(&bad)).unwrap_err().to_string().contains("unknown syscall code 42"));
    }

    /// `NO_RETURN` → `NoReturn`: the rule that a kind's constant and its variant share a name.
    fn variant_name(constant: &str) -> String {
        constant
            .split('_')
            .map(|w| {
                let w = w.to_ascii_lowercase();
                let mut c = w.chars();
                c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn call_sums_are_read_up_to_their_last_entry_and_checked() {
        let mut r = CallSumsRecord {
            header: header(kind::CALL_SUMS, 90, 4, 4),
            count: 2,
            unsummed: 1,
            entries: [CallSum::default(); call_sums::MAX_ENTRIES],
        };
        r.entries[0] = CallSum {
            inclusive_ns: 900,
            self_ns: 400,
            off_cpu_ns: 300,
            calls: 1,
            slot: 2,
            parent: call_sums::NONE,
            first_child: 1,
            next_sibling: call_sums::NONE,
        };
        r.entries[1] = CallSum {
            inclusive_ns: 500,
            self_ns: 500,
            off_cpu_ns: 0,
            calls: 2,
            slot: 7,
            parent: 0,
            first_child: call_sums::NONE,
            next_sibling: call_sums::NONE,
        };
        let len = CallSumsRecord::HEAD + 2 * std::mem::size_of::<CallSum>();
        let bytes = &bytes_of(&r)[..len];
        let want = CallSums {
            entries: vec![
                PathSum { slot: 2, parent: None, calls: 1, inclusive_ns: 900, self_ns: 400, off_cpu_ns: 300 },
                PathSum { slot: 7, parent: Some(0), calls: 2, inclusive_ns: 500, self_ns: 500, off_cpu_ns: 0 },
            ],
            unsummed: 1,
        };
        assert_eq!(decode(bytes).unwrap(), Record { head: head(90, 4, 4), body: Body::CallSums(want) });
        assert!(decode(&bytes[..len - 1]).unwrap_err().to_string().contains("with 2 entries"));
        r.entries[1].parent = 1;
        assert!(decode(&bytes_of(&r)[..len]).unwrap_err().to_string().contains("not an earlier entry"));
        r.count = call_sums::MAX_ENTRIES as u32 + 1;
        assert!(decode(&bytes_of(&r)).is_err(), "more entries than the kernel keeps");
    }

    #[test]
    fn every_kind_decodes_from_its_size_to_the_variant_of_its_name() {
        for k in &profiler_common::RECORD_KINDS {
            let mut bytes = vec![0u8; k.size];
            bytes[..4].copy_from_slice(&k.kind.to_ne_bytes());
            let body = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", k.constant)).body;
            let debug = format!("{body:?}");
            let variant: String = debug.chars().take_while(char::is_ascii_alphanumeric).collect();
            assert_eq!(variant, variant_name(k.constant), "kind {} decodes to {debug}", k.constant);
            assert_eq!(body.kind(), k.kind);
            assert_eq!(body.kind_name(), k.name);
            // A probed call sums record is sent up to its last entry in use.
            let least = if k.kind == kind::CALL_SUMS { CallSumsRecord::HEAD } else { k.size };
            let short = decode(&bytes[..least - 1]).unwrap_err().to_string();
            assert!(short.contains("shorter"), "{}: {short}", k.constant);
        }
    }
}
