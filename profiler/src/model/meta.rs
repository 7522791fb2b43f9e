//! What the pipeline carries besides events, as plain data: the run's metadata (written at
//! the start of a recording), how it ended (written at its end), loss counters, the exact-mode
//! probe plan. Nothing here touches aya or the kernel, so analysis, rendering and the replay
//! of a recording depend on this module only; the loader fills these types in.
use serde::{Deserialize, Serialize};

use crate::model::chain::ChainSpec;

/// Facts about the kernel a run ran on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The kernel release (`uname -r`), e.g. `6.18.0-1-amd64`.
    pub release: String,
    /// The machine architecture (`uname -m`), e.g. `x86_64`.
    pub machine: String,
    /// Whether the kernel exposes its BTF (`/sys/kernel/btf/vmlinux`).
    pub btf: bool,
    /// The active lockdown mode (`none`, `integrity`, `confidentiality`), when readable.
    pub lockdown: Option<String>,
}

impl KernelInfo {
    /// (major, minor) of the release, e.g. (6, 18).
    pub fn version(&self) -> Option<(u32, u32)> {
        let mut it = self.release.split(['.', '-']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }
}

/// What changes exec cost or what execprof can measure, beyond the release: kept in every
/// recording so that two recordings can be compared knowingly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineFacts {
    /// The CPU model (`/proc/cpuinfo`), e.g. "AMD EPYC 7B13".
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: u32,
    /// Whether the kernel has kprobes (a kprobe PMU).
    pub kprobes: bool,
    /// Whether the kernel has `sched_prepare_exec` (6.10+): successful execs split there.
    pub sched_prepare_exec: bool,
    /// Whether the memory cgroup controller is enabled (struct file allocation is charged).
    pub memcg: bool,
    /// The traced command's cgroup (from `/proc/self/cgroup`), e.g. "/" or "/user.slice/...".
    pub cgroup: String,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "value")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// The status a shell would report: the code, or 128 + signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// Loss counters: the kernel's, summed over CPUs, in `profiler_common::counter` order, then
/// the pieces user space could not join.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCounters(pub Vec<(String, u64)>);

/// The loss user space reads from the kernel after the run (exact-mode entries whose return
/// never came), listed after the kernel's own counters.
pub const ENTRIES_WITHOUT_RETURN: &str = "probed entry without return";

impl LossCounters {
    /// All losses together, kernel and user space.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// Appends the pieces user space could not join (the assembler's counters) to the kernel's.
    pub fn with_unjoined(mut self, unjoined: &Unjoined) -> Self {
        self.0.extend(unjoined.as_losses().iter().map(|&(name, n)| (name.to_owned(), n)));
        self
    }

    /// The kernel counter `index` (`profiler_common::counter`), found by its name (recordings
    /// store the counters by name); 0 when a recording from an older execprof lacks it.
    pub fn kernel(&self, index: u32) -> u64 {
        let Some(name) = profiler_common::counter::NAMES.get(index as usize) else { return 0 };
        self.0.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }

    /// Records of any kind dropped because the ring buffer was full.
    pub fn ring_full(&self) -> u64 {
        use profiler_common::counter::{EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED, RING_FULL};
        [RING_FULL, EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED].iter().map(|&i| self.kernel(i)).sum()
    }

    /// All kernel counters at zero (for reports built without a kernel).
    pub fn zero() -> Self {
        let names = profiler_common::counter::NAMES.iter().copied().chain([ENTRIES_WITHOUT_RETURN]);
        Self(names.map(|n| (n.to_string(), 0)).collect())
    }
}

/// One exec-path function under exact mode's probes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedFunction {
    /// Probe slot: the index the eBPF side reports the call under.
    pub slot: u32,
    /// Canonical name (no compiler suffix): what the report groups by.
    pub function: String,
    /// The kernel's name for the attached symbol.
    pub raw_name: String,
    /// Address of the attached symbol (kernel address space).
    pub address: u64,
    /// Attached by address because the name is ambiguous.
    pub by_address: bool,
    /// What times it (set when attached).
    #[serde(default)]
    pub mechanism: Mechanism,
}

/// How exact mode times a function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// fentry/fexit: BPF trampolines, where the function has BTF and the kernel allows them.
    Fentry,
    /// kprobe/kretprobe: everywhere else.
    #[default]
    Kprobe,
}

impl Mechanism {
    /// Human-readable mechanism for reports (`fentry/fexit`, `kprobe/kretprobe`).
    pub fn label(self) -> &'static str {
        match self {
            Mechanism::Fentry => "fentry/fexit",
            Mechanism::Kprobe => "kprobe/kretprobe",
        }
    }
}

/// Which exec-path functions exact mode probes, in which slot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactPlan {
    /// Sorted by slot.
    pub functions: Vec<ProbedFunction>,
    /// Candidates this kernel does not have as symbols (inlined): no exact time for them.
    pub absent: Vec<String>,
    /// Candidates left out because the slots ran out.
    pub over_capacity: Vec<String>,
}

impl ExactPlan {
    /// The function attached at `slot` (slots stay as assigned when some fail to attach).
    pub fn function_of(&self, slot: u32) -> Option<&ProbedFunction> {
        self.functions.binary_search_by_key(&slot, |f| f.slot).ok().map(|i| &self.functions[i])
    }
}

/// How functions were timed in a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mode {
    /// How exact times are taken.
    pub timing: String,
    /// `exact`, `exact+sampled`, `sampled` or `none`.
    pub functions_mode: String,
    /// How time is attributed to kernel functions, and why this mode.
    pub attribution: String,
}

impl Mode {
    /// `plan`: exact mode's probes (None: no exact mode).
    pub fn new(plan: Option<&ExactPlan>, sample_hz: u64, note: Option<String>) -> Self {
        let sampled = format!("cpu-clock samples at {sample_hz} Hz per CPU with kernel stacks, inside exec attempts");
        let probed = plan.map(|p| {
            let by = |m: Mechanism| p.functions.iter().filter(|f| f.mechanism == m).count();
            let parts: Vec<String> = [Mechanism::Fentry, Mechanism::Kprobe]
                .into_iter()
                .filter(|&m| by(m) > 0)
                .map(|m| format!("{} on {}", m.label(), by(m)))
                .collect();
            format!("{} exec-path functions", parts.join(" and "))
        });
        let exact = probed.is_some();
        let (mode, text) = match (probed, sample_hz > 0) {
            (Some(n), true) => ("exact+sampled", format!("exact: {n}; plus {sampled}")),
            (Some(n), false) => ("exact", format!("exact: {n}")),
            (None, true) => ("sampled", format!("sampled: {sampled}")),
            (None, false) => ("none", "off (--sample-hz 0, no exact mode)".to_owned()),
        };
        let attribution = match note {
            Some(n) if !exact => format!("{text} — {n}"),
            _ => text,
        };
        Self {
            timing: "exact at tracepoint boundaries (raw sys_enter/sys_exit for execve[at], sched_prepare_exec, sched_process_exec)".into(),
            functions_mode: mode.into(),
            attribution,
        }
    }
}

/// Everything known about a run before its first record: the head of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The execprof version that made the run (the crate version).
    pub execprof_version: String,
    /// The command line as given (the built-in chain's generated one when it ran).
    pub command: Vec<String>,
    /// Path of the executable that ran (after the `PATH` search).
    pub program: String,
    /// Set when the built-in exec chain ran.
    pub chain: Option<ChainSpec>,
    /// The kernel the run ran on.
    pub kernel: KernelInfo,
    /// Facts about the machine that change exec cost or what can be measured.
    pub machine: MachineFacts,
    /// How functions were timed.
    pub mode: Mode,
    /// cpu-clock samples per second per CPU; 0: none.
    pub sample_hz: u64,
    /// Exact mode's probes, when it ran.
    pub exact_plan: Option<ExactPlan>,
    /// Size of the kernel-to-user ring buffer, in bytes.
    pub ring_bytes: u32,
    /// Warnings raised while attaching (probes that could not attach, counts not taken).
    pub warnings: Vec<String>,
    /// Why image-start-to-main is not measured, when it is not.
    pub startup_note: Option<String>,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// CLOCK_MONOTONIC at the command's release (the records' clock): time zero of traces.
    pub started_mono_ns: u64,
    /// Runs merged into this recording (`run --repeat`); 0 or 1: a single run.
    #[serde(default)]
    pub repeats: u32,
    /// The processes that existed when tracing began (read from /proc at attach), so that an
    /// exec attempt or fork-family call of a process started before the trace is charged to
    /// a program by name. Empty when execprof launched what it traces: every traced process
    /// then descends from the launched one, and the report takes it as that mode (see
    /// `analysis::identity`).
    #[serde(default)]
    pub preexisting: Vec<ProcessName>,
}

/// A process that existed before tracing began, as /proc showed it at attach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessName {
    /// Its process id (thread group id).
    pub tgid: u32,
    /// Its parent's process id (0 for the kernel's own roots, init and kthreadd).
    pub ppid: u32,
    /// The target of `/proc/PID/exe`, as bytes; empty when it cannot be read (kernel
    /// threads, or another user's process without the privilege).
    pub exe: Vec<u8>,
    /// `/proc/PID/comm` without its newline (at most 15 bytes).
    pub comm: Vec<u8>,
}

/// How a run ended: the tail of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// How the traced command ended.
    pub exit_status: ExitStatus,
    /// From release of the command to its exit.
    pub command_wall_ns: u64,
    /// The kernel's loss counters (the assembler's are recomputed from the records).
    pub kernel_losses: LossCounters,
    /// Records user space could not decode (a version mismatch): not in the recording.
    pub undecodable_records: u64,
    /// The first undecodable record's error, when there was one.
    pub first_decode_error: Option<String>,
    /// Set when the run was cut short (a signal reached execprof): why.
    pub partial: Option<String>,
    /// What each of execprof's eBPF programs cost during the run, by the kernel's own
    /// accounting (BPF run-time statistics, `--probe-costs`); empty without them.
    #[serde(default)]
    pub program_costs: Vec<ProgramCost>,
    /// Files that failed to exec with ENOENT although they exist, and why (checked when the
    /// run ended): the live run's findings, kept so that a replay reports the same.
    #[serde(default)]
    pub missing_interpreters: Vec<MissingInterpreter>,
}

/// A file that exec refused with ENOENT ("No such file or directory") although it exists: its
/// `#!` interpreter or its ELF program interpreter (dynamic loader) is what is missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingInterpreter {
    /// The exec'd name's bytes, as the attempts carry it.
    pub file: Vec<u8>,
    /// What is missing, in words ("bad interpreter: /x does not exist").
    pub why: String,
}

/// One eBPF program's runs and run time during a run (`bpf_prog_info.run_cnt/run_time_ns`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramCost {
    /// Program name, as execprof's eBPF object names it.
    pub program: String,
    /// Times the program ran during the run.
    pub runs: u64,
    /// Total run time of the program, in ns.
    pub run_ns: u64,
}

impl ProgramCost {
    /// Mean run time per run, in ns; 0 when it never ran.
    pub fn ns_per_run(&self) -> f64 {
        if self.runs == 0 { 0.0 } else { self.run_ns as f64 / self.runs as f64 }
    }
}

/// What could not be joined, in the order the report lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unjoined {
    /// A thread exited inside an exec or fork call (no exit was ever seen).
    pub abandoned: u64,
    /// An exit without its enter (tracing started mid-call, or the enter record was lost).
    pub exit_without_enter: u64,
    /// An enter followed by another enter, or still open when tracing stopped.
    pub enter_without_exit: u64,
}

impl Unjoined {
    /// (name, count) pairs in the loss table's wording.
    pub fn as_losses(&self) -> [(&'static str, u64); 3] {
        [
            ("exec abandoned by exiting thread", self.abandoned),
            ("exec exit without enter", self.exit_without_enter),
            ("exec enter without exit", self.enter_without_exit),
        ]
    }
}
