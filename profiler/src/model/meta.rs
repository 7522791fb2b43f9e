//! What the pipeline carries besides events, as plain data: the run's metadata (written at
//! the start of a recording), how it ended (written at its end), loss counters, the exact-mode
//! probe plan. Nothing here touches aya or the kernel, so analysis, rendering and the replay
//! of a recording depend on this module only; the loader fills these types in.
use serde::{Deserialize, Serialize};

use crate::model::{chain::ChainSpec, names::HexBytes};

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
    /// Not known: the recording read was cut before the run ended (its END frame, which says
    /// how the command ended, is missing). A live run always knows.
    Unknown,
    /// No command of its own: running processes were traced (`--pid`, `--cgroup`, `--all`
    /// without a window command) until they were gone, Ctrl-C or `--duration`. Named by how
    /// tracing ended.
    Traced(TraceEnd),
}

/// How tracing of running processes ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceEnd {
    /// Every traced process exited.
    AllExited,
    /// `--duration` ran out.
    Duration,
    /// SIGINT (Ctrl-C), SIGTERM or SIGHUP reached execprof.
    Signal,
}

impl ExitStatus {
    /// The status a shell would report: the code, or 128 + signal (and execprof's own error
    /// code for an unknown status, which only a cut recording has).
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
            ExitStatus::Unknown => crate::model::failure::code::ERROR,
            ExitStatus::Traced(_) => 0,
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "killed by signal {s}"),
            ExitStatus::Unknown => f.write_str("exit status unknown"),
            ExitStatus::Traced(TraceEnd::AllExited) => f.write_str("traced until every traced process exited"),
            ExitStatus::Traced(TraceEnd::Duration) => f.write_str("traced for --duration"),
            ExitStatus::Traced(TraceEnd::Signal) => f.write_str("traced until a signal stopped execprof"),
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

/// The runs of execprof's programs the kernel skipped (`bpf_prog_info.recursion_misses`, read
/// after the run): a program already running on that CPU (preempted inside it, or entered
/// again from an interrupt) is not run a second time, and what it would have recorded is
/// lost. Listed after [`ENTRIES_WITHOUT_RETURN`].
pub const RUNS_SKIPPED: &str = "program runs skipped by the kernel";

/// What a skipped run leaves: the entry or return, enter or exit it did not record (and a
/// thread that exits after its exec's exit was skipped leaves that exec open).
pub const FOLLOW_FROM_SKIPPED_RUNS: [&str; 6] = [
    "probed entry overwritten",
    "probed return without entry",
    ENTRIES_WITHOUT_RETURN,
    "exec exit without enter",
    "exec enter without exit",
    "exec abandoned by exiting thread",
];

/// The returns of exact mode's return probes the kernel missed (`kprobe_profile`'s misses of
/// the probes execprof made through tracefs): each leaves a probed call without its return.
/// Listed after [`RUNS_SKIPPED`].
pub const RETURNS_MISSED: &str = "probed returns the kernel missed";

impl LossCounters {
    /// Adds `n` to the counter `name` (a new one if it is not there).
    pub fn add(&mut self, name: &str, n: u64) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v += n,
            None => self.0.push((name.to_owned(), n)),
        }
    }

    /// All losses together, kernel and user space.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// The losses the kernel's skipped runs ([`RUNS_SKIPPED`]) cannot explain: every counter
    /// when none was skipped; otherwise every counter but the skips and what a skipped run
    /// leaves behind ([`FOLLOW_FROM_SKIPPED_RUNS`]).
    pub fn beyond_skipped_runs(&self) -> u64 {
        let skipped = self.named(RUNS_SKIPPED) > 0;
        self.0
            .iter()
            .filter(|(name, _)| !skipped || (name != RUNS_SKIPPED && !FOLLOW_FROM_SKIPPED_RUNS.contains(&name.as_str())))
            .map(|(_, n)| n)
            .sum()
    }

    /// Appends the pieces user space could not join (the assembler's counters) to the kernel's.
    pub fn with_unjoined(mut self, unjoined: &Unjoined) -> Self {
        self.0.extend(unjoined.as_losses().iter().map(|&(name, n)| (name.to_owned(), n)));
        self
    }

    /// The counter named `name`; 0 when absent (a recording from an older execprof).
    pub fn named(&self, name: &str) -> u64 {
        self.0.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }

    /// The kernel counter `index` (`profiler_common::counter`), found by its name (recordings
    /// store the counters by name); 0 when a recording from an older execprof lacks it.
    pub fn kernel(&self, index: u32) -> u64 {
        let Some(name) = profiler_common::counter::NAMES.get(index as usize) else { return 0 };
        self.0.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }

    /// Records of any kind dropped because the ring buffer was full.
    pub fn ring_full(&self) -> u64 {
        use profiler_common::counter::{ARGV_DROPPED, EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED, RING_FULL};
        [RING_FULL, EXEC_ENTER_DROPPED, FORK_ENTER_DROPPED, ARGV_DROPPED].iter().map(|&i| self.kernel(i)).sum()
    }

    /// All kernel counters at zero (for reports built without a kernel), as a run that did not
    /// time with the per-syscall events lists them (without the 32-bit counter, which is a
    /// loss only there).
    pub fn zero() -> Self {
        let non_native = profiler_common::counter::NAMES[profiler_common::counter::NON_NATIVE_EXEC as usize];
        let names = profiler_common::counter::NAMES.iter().copied().filter(|&n| n != non_native).chain([
            ENTRIES_WITHOUT_RETURN,
            RUNS_SKIPPED,
            RETURNS_MISSED,
        ]);
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

/// How exec attempts' and fork-family calls' boundaries were hooked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundaries {
    /// The raw `sys_enter`/`sys_exit` tracepoints: while execprof traces, every syscall of
    /// every process runs them (and takes the syscall slow path).
    #[default]
    RawTracepoints,
    /// fentry/fexit on the syscalls' own entry functions (`__x64_sys_execve`, arm64's
    /// `__arm64_sys_execve`, and kin): no
    /// syscall tracepoint is attached, so other syscalls run no execprof program.
    Fentry,
    /// The per-syscall `syscalls:sys_enter_*`/`sys_exit_*` events of the exec and fork-family
    /// calls: other syscalls take the slow path but run no execprof program; 32-bit processes'
    /// calls are not seen (counted as a loss where one ran).
    SyscallEvents,
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
    /// Which hooks timed the calls.
    #[serde(default)]
    pub boundaries: Boundaries,
    /// Why not fentry/fexit, when they were wanted (the kernel's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fentry_refused: Option<String>,
}

impl Mode {
    /// `plan`: exact mode's probes (None: no exact mode); `boundaries`: the hooks that timed
    /// the calls, and why not fentry/fexit when they were wanted.
    pub fn new(plan: Option<&ExactPlan>, sample_hz: u64, note: Option<String>, boundaries: (Boundaries, Option<&str>)) -> Self {
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
        let timing = match boundaries {
            (Boundaries::Fentry, _) => {
                format!(
                    "exact at fentry/fexit boundaries (the syscalls' own {}[at] and kin; no syscall tracepoint: other syscalls run nothing), sched_prepare_exec, sched_process_exec",
                    profiler_common::names::BOUNDARIES[0].function
                )
            }
            (Boundaries::RawTracepoints, why) => format!(
                "exact at tracepoint boundaries (raw sys_enter/sys_exit for execve[at], sched_prepare_exec, sched_process_exec){}",
                if why.is_some() { "; fentry/fexit refused here" } else { "" }
            ),
            (Boundaries::SyscallEvents, why) => format!(
                "exact at per-syscall event boundaries (syscalls:sys_enter/exit_execve[at] and the fork family: other syscalls run nothing, 32-bit processes are not seen), sched_prepare_exec, sched_process_exec{}",
                if why.is_some() { "; fentry/fexit refused here" } else { "" }
            ),
        };
        Self { timing, functions_mode: mode.into(), attribution, boundaries: boundaries.0, fentry_refused: boundaries.1.map(str::to_owned) }
    }
}

/// Everything known about a run before its first record: the head of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The execprof version that made the run (the crate version).
    pub execprof_version: String,
    /// The command line as given (the built-in chain's generated one when it ran), as text:
    /// in an argument that is not valid UTF-8, each bad sequence is U+FFFD here, and
    /// `command_hex` keeps the exact bytes ([`RunMeta::argv`] reads them back).
    pub command: Vec<String>,
    /// Present only when an argument is not valid UTF-8: one entry per argument of `command`,
    /// the argument's exact bytes in hex where it is not valid UTF-8, null where `command`
    /// holds it exactly. Absent from the recordings of older execprofs (read as empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_hex: Vec<Option<HexBytes>>,
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
    /// Which processes were traced.
    #[serde(default)]
    pub scope: crate::model::scope::Scope,
    /// The processes that existed when tracing began (read from /proc at attach), so that an
    /// exec attempt or fork-family call of a process started before the trace is charged to
    /// a program by name. Empty when execprof launched what it traces (every traced process
    /// then descends from the launched one; see `analysis::identity`), and for a `--cgroup`
    /// that was empty at attach.
    #[serde(default)]
    pub preexisting: Vec<ProcessName>,
    /// `--argv`: the kernel side read each exec attempt's arguments (a recording has them).
    #[serde(default)]
    pub argv_read: bool,
}

impl RunMeta {
    /// The `command` and `command_hex` of a command line: text for each argument, and the
    /// exact bytes of those that are not valid UTF-8 (none at all when every one is).
    pub fn command_fields<A: AsRef<[u8]>>(argv: &[A]) -> (Vec<String>, Vec<Option<HexBytes>>) {
        let text = argv.iter().map(|a| String::from_utf8_lossy(a.as_ref()).into_owned()).collect();
        let exact: Vec<Option<HexBytes>> =
            argv.iter().map(|a| std::str::from_utf8(a.as_ref()).is_err().then(|| HexBytes(a.as_ref().to_vec()))).collect();
        (text, if exact.iter().any(Option::is_some) { exact } else { Vec::new() })
    }

    /// Whether execprof launched what it traced (the command, or the built-in chain), rather
    /// than attaching to running processes (`--pid`, `--cgroup`, `--all`). Every recording
    /// with a process table also says its scope, and those from before scopes were launched.
    pub fn launched(&self) -> bool {
        self.scope == crate::model::scope::Scope::Launched
    }

    /// The command line's exact bytes, argument by argument.
    pub fn argv(&self) -> Vec<Vec<u8>> {
        let exact = |i: usize| self.command_hex.get(i).and_then(Option::as_ref);
        self.command.iter().enumerate().map(|(i, text)| exact(i).map_or_else(|| text.clone().into_bytes(), |h| h.0.clone())).collect()
    }
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
    /// CPU time (user + system) of the launched command's processes that were reaped, from
    /// the scheduler's exact accounting: what the workload itself ran, probes in its context
    /// included, execprof's own user-space work not. 0 when nothing was launched.
    #[serde(default)]
    pub command_cpu_ns: u64,
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

impl RunEnd {
    /// What a recording cut before the run ended says of its end: only how far its records
    /// reach (`covered_ns` after the command's release). No exit status, and no kernel loss
    /// counters: those are read after the run and written in the END frame the cut lost.
    pub fn cut(covered_ns: u64) -> Self {
        RunEnd {
            exit_status: ExitStatus::Unknown,
            command_wall_ns: covered_ns,
            command_cpu_ns: 0,
            kernel_losses: LossCounters::default(),
            undecodable_records: 0,
            first_decode_error: None,
            partial: None,
            program_costs: Vec::new(),
            missing_interpreters: Vec::new(),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a skipped run leaves is named as the loss table names it, and a skipped run excuses
    /// only those: any other loss still counts.
    #[test]
    fn losses_beyond_skipped_runs_are_the_ones_a_skip_cannot_explain() {
        let mut all = LossCounters::zero().with_unjoined(&Unjoined::default());
        for name in FOLLOW_FROM_SKIPPED_RUNS {
            assert!(all.0.iter().any(|(n, _)| n == name), "{name} is not a loss counter");
        }
        all.add("probed entry overwritten", 2);
        assert_eq!(all.beyond_skipped_runs(), 2, "no skipped run: every loss counts");
        all.add(RUNS_SKIPPED, 3);
        all.add("exec enter without exit", 1);
        assert_eq!(all.beyond_skipped_runs(), 0);
        all.add(profiler_common::counter::NAMES[profiler_common::counter::RING_FULL as usize], 4);
        assert_eq!(all.beyond_skipped_runs(), 4, "a full ring is no skipped run's doing");
    }

    /// The timing line names the hooks, and says when fentry/fexit were wanted but refused;
    /// the JSON keeps the kernel's answer.
    #[test]
    fn the_timing_line_says_which_boundaries_ran() {
        let fentry = Mode::new(None, 0, None, (Boundaries::Fentry, None));
        assert!(fentry.timing.starts_with("exact at fentry/fexit boundaries"), "{}", fentry.timing);
        let fell_back = Mode::new(None, 0, None, (Boundaries::RawTracepoints, Some("EPERM")));
        assert!(fell_back.timing.ends_with("; fentry/fexit refused here"), "{}", fell_back.timing);
        assert_eq!(serde_json::to_value(&fell_back).unwrap()["fentry_refused"], "EPERM");
        let forced = Mode::new(None, 0, None, (Boundaries::RawTracepoints, None));
        assert!(!forced.timing.contains("refused") && serde_json::to_value(&forced).unwrap().get("fentry_refused").is_none());
        let old: Mode = serde_json::from_str(r#"{"timing": "t", "functions_mode": "none", "attribution": "a"}"#).unwrap();
        assert_eq!(old.boundaries, Boundaries::RawTracepoints, "recordings from before fentry boundaries used the tracepoints");
    }

    fn meta_json(command: serde_json::Value, command_hex: Option<serde_json::Value>) -> serde_json::Value {
        let mut v = serde_json::json!({
            "execprof_version": "0.1.0", "command": command, "program": "/bin/sh", "chain": null,
            "kernel": {"release": "6.1.0", "machine": "x86_64", "btf": true, "lockdown": null},
            "machine": MachineFacts::default(), "mode": Mode::new(None, 0, None, (Boundaries::RawTracepoints, None)), "sample_hz": 0,
            "exact_plan": null, "ring_bytes": 1, "warnings": [], "startup_note": null,
            "started_unix_s": 0, "started_mono_ns": 0,
        });
        if let (Some(hex), Some(map)) = (command_hex, v.as_object_mut()) {
            map.insert("command_hex".into(), hex);
        }
        v
    }

    /// An argument with 0xff and a newline keeps its bytes through the JSON (a recording's
    /// META, a report), and only it gets an exact entry.
    #[test]
    fn argv_bytes_that_are_not_utf8_round_trip_exactly() {
        let argv: [&[u8]; 3] = [b"/bin/echo", b"a\xff\nb", "é\n".as_bytes()];
        let (command, command_hex) = RunMeta::command_fields(&argv);
        assert_eq!(command, ["/bin/echo", "a\u{fffd}\nb", "é\n"]);
        let v = meta_json(serde_json::to_value(&command).unwrap(), Some(serde_json::to_value(&command_hex).unwrap()));
        assert_eq!(v["command_hex"], serde_json::json!([null, "61ff0a62", null]));
        let meta: RunMeta = serde_json::from_value(v).unwrap();
        assert_eq!(meta.argv(), argv.map(<[u8]>::to_vec));
        let again: RunMeta = serde_json::from_str(&serde_json::to_string(&meta).unwrap()).unwrap();
        assert_eq!(again, meta);
    }

    /// All UTF-8: no `command_hex` at all, as in older recordings, which read as before.
    #[test]
    fn a_utf8_command_line_has_no_hex_and_old_recordings_read() {
        let (command, command_hex) = RunMeta::command_fields(&["true", "x y"]);
        assert!(command_hex.is_empty());
        let old: RunMeta = serde_json::from_value(meta_json(serde_json::json!(["true", "x y"]), None)).unwrap();
        assert_eq!((old.command.clone(), old.command_hex.clone()), (command, command_hex));
        assert!(serde_json::to_value(&old).unwrap().get("command_hex").is_none());
        assert_eq!(old.argv(), [b"true".to_vec(), b"x y".to_vec()]);
    }

    #[test]
    fn hex_that_is_not_bytes_is_refused() {
        for bad in ["f", "zz", "0g", "\u{e9}0"] {
            let v = meta_json(serde_json::json!(["x"]), Some(serde_json::json!([bad])));
            let e = serde_json::from_value::<RunMeta>(v).expect_err(bad).to_string();
            assert!(e.contains("is not hex bytes"), "{bad}: {e}");
        }
    }
}
