//! The domain events the assembler makes of records, and everything after it works on: exec
//! attempts and fork-family calls whole (enter to exit, with the samples and probed calls
//! taken inside them), tasks starting and ending, processes adopted by `--cgroup`, off-CPU
//! intervals, `main` reached.
//! Times are CLOCK_MONOTONIC nanoseconds.

#[cfg(test)]
use crate::model::names::escape_name;
use crate::model::names::{Abi, Argv, ExecSyscall, ForkSyscall, Killed, Name};
use crate::record::CallSums;

/// Handed out by the assembler, one per exec attempt or fork-family call, in enter order.
/// Samples and probed calls are tied to their call by it, never by (process, time).
pub(crate) type CallId = u64;

/// One `execve`/`execveat` attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecAttempt {
    pub id: CallId,
    /// Thread id at syscall enter.
    pub pid: u32,
    /// Thread id at syscall exit (differs from `pid` when a non-leader thread exec'd).
    pub exit_pid: u32,
    pub tgid: u32,
    pub cpu: u32,
    pub syscall: ExecSyscall,
    /// The ABI the caller made it in (a 32-bit program's: compat).
    pub abi: Abi,
    /// The kernel's copy of the name when the exec got that far, else the caller's.
    pub name: Name,
    pub enter_ns: u64,
    /// Point of no return (`sched_prepare_exec`), when reached and observable.
    pub prepare_ns: Option<u64>,
    /// New image in place (`sched_process_exec`), when reached.
    pub loaded_ns: Option<u64>,
    pub exit_ns: u64,
    /// 0 or -errno.
    pub ret: i64,
    /// A failed attempt's thread was being killed at its exit (the errno is then not its own).
    pub killed: Option<Killed>,
    /// Page faults taken by the thread during the attempt; None when not countable here.
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    /// `--argv`: the arguments it was called with (None without `--argv`, or when their
    /// record was lost).
    pub argv: Option<Argv>,
    /// An `execveat` with `AT_EXECVE_CHECK` (Linux 6.14+): the kernel only checked whether the
    /// file would be executed; `ret` is its answer, and nothing was executed.
    pub check: bool,
    /// A successful exec's new comm as the kernel set it (None: not seen, as in recordings
    /// made before it was kept; then it is the name's last part cut to 15 bytes, which is what
    /// kernels before 6.14 set for `execveat(fd, "", AT_EMPTY_PATH)` too: the fd number).
    pub comm: Option<Vec<u8>>,
    pub inside: Inside,
}

impl ExecAttempt {
    pub fn duration_ns(&self) -> u64 {
        self.exit_ns.saturating_sub(self.enter_ns)
    }

    /// A new image runs: the call returned 0 and was no `AT_EXECVE_CHECK` check.
    pub fn executed(&self) -> bool {
        self.ret == 0 && !self.check
    }
}

/// What was observed inside one exec attempt or fork-family call, in arrival order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inside {
    pub samples: Vec<Sample>,
    /// Exact mode, calls sent one by one.
    pub probed: Vec<ProbedCall>,
    /// Exact mode, calls summed per call path in the kernel (an exec attempt's, sent before its
    /// exit; its calls are then not in `probed`).
    pub sums: Option<CallSums>,
    /// The calling thread's off-CPU intervals (start, end) that ended inside the call.
    pub off_cpu: Vec<(u64, u64)>,
}

impl Inside {
    /// Time the calling thread spent off-CPU inside the call.
    pub fn off_cpu_ns(&self) -> u64 {
        self.off_cpu.iter().map(|&(start, end)| end.saturating_sub(start)).sum()
    }
}

/// A fork-family syscall (clone, clone3, fork, vfork) of the traced tree, timed like an exec
/// attempt: the cost of creating a process beside the cost of exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkCall {
    pub id: CallId,
    pub pid: u32,
    pub tgid: u32,
    pub syscall: ForkSyscall,
    /// The ABI the caller made it in.
    pub abi: Abi,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// The child's id, or -errno.
    pub ret: i64,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    pub inside: Inside,
}

impl ForkCall {
    pub fn duration_ns(&self) -> u64 {
        self.exit_ns.saturating_sub(self.enter_ns)
    }
}

/// A new thread or process in the traced tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskNew {
    pub ts_ns: u64,
    pub parent_pid: u32,
    pub parent_tgid: u32,
    pub child_pid: u32,
    pub child_tgid: u32,
    pub thread: bool,
}

/// `--cgroup`: a process that moved into the cgroup after tracing began joined the traced
/// set at one of its calls (no fork of it was seen): who it is, as the kernel saw it then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopted {
    pub ts_ns: u64,
    /// The thread whose call found it.
    pub pid: u32,
    pub tgid: u32,
    /// Its parent process; None when the kernel could not read it.
    pub ppid: Option<u32>,
    /// The calling thread's comm (for a single-threaded process, the process's).
    pub comm: Vec<u8>,
}

/// A traced thread ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskExit {
    pub ts_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    /// The process's last thread: the process is gone.
    pub group_dead: bool,
}

/// A cpu-clock sample inside a traced call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub ts_ns: u64,
    pub pid: u32,
    /// Kernel return addresses, innermost first; empty when the stack was unreadable.
    pub frames: Vec<u64>,
}

/// Exact mode: one call of a probed kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbedCall {
    pub pid: u32,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// Probe slot; the exact-mode plan says which function is there.
    pub slot: u32,
    /// Of `exit_ns - enter_ns`, the time the thread was off-CPU.
    pub off_cpu_ns: u64,
}

/// A traced thread was off-CPU from `start_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpu {
    pub pid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A traced process entered `main` of the launched program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainEntry {
    pub pid: u32,
    pub tgid: u32,
    pub ts_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Exec(ExecAttempt),
    ForkCall(ForkCall),
    TaskNew(TaskNew),
    TaskExit(TaskExit),
    Adopted(Adopted),
    OffCpu(OffCpu),
    Main(MainEntry),
    /// A sample taken on a thread with no traced call open (or whose call was never
    /// completed): counted, not attributed.
    OrphanSample(Sample),
    /// A sample taken in execprof's enter probe just before the call's first timestamp:
    /// outside the measured time, counted, not attributed.
    SampleBeforeEnter(Sample),
    /// Likewise for a probed call.
    OrphanProbedCall(ProbedCall),
    /// Likewise for an attempt's summed probed calls.
    OrphanCallSums(CallSums),
}

/// Where events go: the analysis, the trace writer, tests.
pub(crate) trait EventSink {
    fn event(&mut self, event: &Event);
}

impl EventSink for Vec<Event> {
    fn event(&mut self, event: &Event) {
        self.push(event.clone());
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_stay_distinct() {
        assert_eq!(escape_name(b"/bin/true"), "/bin/true");
        assert_eq!(escape_name(b"a\nb\x1b[31m"), "a\\x0ab\\x1b[31m");
        assert_eq!(escape_name("é".as_bytes()), "é");
        assert_eq!(escape_name(b"\xff/x"), "\\xff/x");
        assert_ne!(escape_name(b"\\x41"), escape_name(b"A"));
        assert_ne!(escape_name(b"\\x41"), escape_name(b"\x41"));
    }
}
