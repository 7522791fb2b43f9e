//! Command-line types (clap only); `config` turns them into what the core uses.
pub mod config;
pub mod config_file;

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand};

/// `--version`: the package's version and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("EXECPROF_COMMIT"), ")");

/// The `execprof` command line.
#[derive(Debug, Parser)]
#[command(name = "execprof", version = VERSION, about = "Where the kernel spends exec time: traces every execve of a process tree")]
#[command(args_override_self = true)]
pub struct Cli {
    /// Show more: eBPF verifier statistics, eBPF-side diagnostics, debug logs.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// execprof's subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process; boxing the run options would only move the bytes")]
pub enum Command {
    /// Run COMMAND (or the built-in exec chain) and trace every exec attempt of its process tree.
    Run(RunArgs),
    /// Replay a recording made with `run --output`: the same report, without root.
    Report(ReportArgs),
    /// Compare two recordings: per outcome, phase and function, what changed per attempt and
    /// per chain step, with 95% intervals, largest change first. No root needed.
    Diff(DiffArgs),
    /// Print what this machine allows execprof to attach, by trying it.
    Doctor(DoctorArgs),
    /// Stay on: count every exec attempt and fork-family call of the machine (or a cgroup, or
    /// processes) in the kernel, per cgroup, calling program and outcome, with latency
    /// histograms, at a cost low enough to leave running. Ends on SIGTERM, Ctrl-C or
    /// --duration.
    Agent(AgentCommandArgs),
    /// The agent's counts live in the terminal: programs (or cgroups) by the exec kernel time
    /// they cost in the last second and in all, attempts, PATH misses, failures, p50/p99,
    /// forks and their parents' size. Keys: s sort, p programs, c cgroups, ↑↓, q quit.
    Top(TopArgs),
    /// Run the classic exec benchmarks without tracing and print their own timings.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Print SHELL's completion script for execprof (bash, zsh, fish, elvish, powershell), e.g.
    /// `execprof completions bash > ~/.local/share/bash-completion/completions/execprof`.
    Completions(CompletionsArgs),
    /// Write a man page per command into DIR (execprof.1, execprof-run.1, …, execprof-agent.8):
    /// what the package installs.
    #[command(hide = true)]
    ManPages(ManPagesArgs),
}

/// Options of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Options of `man-pages`.
#[derive(Debug, Args)]
pub struct ManPagesArgs {
    /// Where the pages go (made if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// The benchmarks `bench` runs.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Linus's exec chain (the built-in workload of `run`), timed by execprof's own clock.
    Chain(BenchChainArgs),
    /// spawntime.c / spawnbench: spawn a tiny child with each method from a parent whose
    /// memory is shaped as asked; time to the child's first instruction.
    Spawn(BenchSpawnArgs),
}

/// Options of `bench spawn`.
#[derive(Debug, Args)]
pub struct BenchSpawnArgs {
    /// Spawn methods to run (repeat the option; default: all four).
    #[arg(long = "method", value_enum, value_name = "METHOD")]
    pub methods: Vec<crate::commands::spawn::Method>,
    /// Parent memory to map first, e.g. 200M or 1G (spawntime.c -n).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "0")]
    pub mem: u64,
    /// Map it as alternating read-only/read-write pages, one mapping each (spawntime.c -r).
    #[arg(long)]
    pub fragment: bool,
    /// Touch the memory (the writable pages) so it is really there (spawntime.c -d).
    #[arg(long)]
    pub dirty: bool,
    /// Spawns per method.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub iterations: u32,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also trace the spawn syscalls in the kernel (needs root) and print, per method, the
    /// benchmark's own time for the spawn call beside the kernel's, with the difference.
    #[arg(long)]
    pub kernel: bool,
}

/// `4096`, `200M`, `1G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix `{c}`; use K, M or G")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(|| format!("`{s}` is not a size like 4096, 200M or 1G"))
}

/// Options of `bench chain`.
#[derive(Debug, Args)]
pub struct BenchChainArgs {
    /// The chain's shape.
    #[command(flatten)]
    pub chain: ChainArgs,
    /// Also write every round's times as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Rounds, each the whole chain; the report gives the spread between them.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: u32,
}

/// The built-in exec chain's shape (shared by `run` without a command and `bench chain`).
#[derive(Debug, Args)]
pub struct ChainArgs {
    /// Number of steps (re-execs) [default: 10000].
    #[arg(long, value_name = "N")]
    pub steps: Option<u32>,
    /// PATH directories missed (one ENOENT each) before the program's own [default: 6].
    #[arg(long, value_name = "K")]
    pub misses: Option<u32>,
    /// execve by absolute path instead of searching PATH (no ENOENT at all).
    #[arg(long)]
    pub direct: bool,
    /// Extra environment variables (the published runs used 64).
    #[arg(long, value_name = "N")]
    pub env_vars: Option<u32>,
    /// Bytes in each extra variable's value [default: the published `xN=N`].
    #[arg(long, value_name = "BYTES")]
    pub env_size: Option<u32>,
    /// Extra arguments after the step count.
    #[arg(long, value_name = "N")]
    pub args: Option<u32>,
    /// Bytes in each extra argument [default: 8].
    #[arg(long, value_name = "BYTES")]
    pub arg_size: Option<u32>,
    /// Look each PATH candidate up from user space (access(2)) before exec'ing it: the
    /// double-lookup idea, paying a syscall entry of its own. With `bench chain`: run it beside
    /// the plain chain in the same interleaved rounds and print the difference.
    #[arg(long)]
    pub lookup_first: bool,
}

impl ChainArgs {
    /// Whether any chain option was given (they shape the built-in chain, so a COMMAND excludes them).
    pub fn any_given(&self) -> bool {
        self.steps.is_some()
            || self.misses.is_some()
            || self.direct
            || self.env_vars.is_some()
            || self.env_size.is_some()
            || self.args.is_some()
            || self.arg_size.is_some()
            || self.lookup_first
    }
}

/// What every report can also write (shared by `run` and `report`).
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print each outcome's call tree, rooted at the syscall: every function's inclusive and
    /// self time per attempt with 95% intervals (from stacks, and from probe nesting in exact
    /// mode). Always in --json.
    #[arg(long, help_heading = "Report")]
    pub tree: bool,
    /// Print the fast-path estimate: what looking the name up before allocating anything (a
    /// double lookup) would save per failed attempt and add per successful exec, from this
    /// run's samples. Always in --json when the run has both.
    #[arg(long, help_heading = "Report")]
    pub fast_path: bool,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE", help_heading = "Outputs")]
    pub json: Option<PathBuf>,
    /// Write a Perfetto trace to FILE (open it in ui.perfetto.dev): a track per thread, a slice
    /// per exec attempt named by its outcome with its file and faults, its parts, kernel
    /// functions (exact mode), user-space gaps, fork calls, off-CPU time.
    #[arg(long, value_name = "FILE", help_heading = "Outputs")]
    pub trace: Option<PathBuf>,
    /// --trace's format: Perfetto's own protobuf, or the legacy Chrome trace-event JSON.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t, requires = "trace", help_heading = "Outputs")]
    pub trace_format: crate::render::TraceFormat,
    /// Write folded stacks and a flame graph SVG per outcome into DIR.
    #[arg(long, value_name = "DIR", help_heading = "Outputs")]
    pub folded: Option<PathBuf>,
    /// Write the kernel stacks sampled inside exec attempts as a pprof profile (gzipped
    /// profile.proto) to FILE, for `go tool pprof`, Parca or Pyroscope: sample types samples
    /// and exec_time (nanoseconds), labels outcome and phase.
    #[arg(long, value_name = "FILE", help_heading = "Outputs")]
    pub pprof: Option<PathBuf>,
    /// One line per exec attempt as attempts finish (time, pid, ppid, comm, outcome, latency,
    /// file), to FILE, or to standard output without one (or with `-`).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-", help_heading = "Outputs")]
    pub events: Option<PathBuf>,
    /// Each exec attempt's arguments too: read in the kernel from the caller's memory at the
    /// attempt's enter (outside its measured time), at most 16 arguments and 512 bytes, each
    /// cut at 127 bytes. `run`: shown on the --events lines and kept in the --output
    /// recording; `report`: shown on its --events lines when the recording has them.
    #[arg(long, help_heading = "Outputs")]
    pub argv: bool,
}

/// Options of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A recording written by `execprof run --output FILE`.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
    /// What to write besides the terminal report.
    #[command(flatten)]
    pub outputs: OutputArgs,
}

/// Repeated and A/B runs: every run traced on its own, the repeats of a side merged into one
/// recording, sides interleaved A B B A A B … so that machine drift hits both.
#[derive(Debug, Args)]
#[command(next_help_heading = "Comparing")]
pub struct RepeatArgs {
    /// Run N times (each traced on its own) and merge them into the --output recording; the
    /// report shows the spread between the repeats.
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// A second side B: run options that differ from A's, e.g. --vs '--misses 1', or another
    /// command: --vs '-- ./t2 100000'. Sides alternate; B's recording goes to --vs-output.
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    pub vs: Option<String>,
    /// Where side B's recording goes (with --vs).
    #[arg(long, value_name = "FILE")]
    pub vs_output: Option<PathBuf>,
    /// A shell command run before each of A's runs (e.g. `sysctl -w ...`).
    #[arg(long, value_name = "COMMAND")]
    pub setup: Option<String>,
    /// A shell command run before each of B's runs.
    #[arg(long, value_name = "COMMAND")]
    pub vs_setup: Option<String>,
}

impl RepeatArgs {
    /// Whether any repeat or A/B option was given (the run is then a repeated one).
    pub fn any_given(&self) -> bool {
        self.repeat.is_some() || self.vs.is_some() || self.vs_output.is_some() || self.setup.is_some() || self.vs_setup.is_some()
    }
}

/// Options of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline recording (`execprof run --output A`).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The recording compared with it: changes are B − A.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Write the whole comparison (every line, intervals, methods) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a differential flame graph (folded and SVG) per outcome sampled on both sides into DIR.
    #[arg(long, value_name = "DIR")]
    pub folded: Option<PathBuf>,
    /// Print only this outcome's phase and function lines (the JSON keeps them all).
    #[arg(long, value_enum)]
    pub outcome: Option<crate::analysis::outcome::Outcome>,
    /// How many phase and function lines to print, largest change first (the JSON keeps them all).
    #[arg(long, value_name = "N", default_value_t = crate::report::diff::LINES_SHOWN)]
    pub lines: usize,
    /// A further round: its recording of A and of B (`--round A2 B2 --round A3 B3`; round 1 is
    /// A B). Figures become means over the rounds with Student intervals, changes Welch tests
    /// between B's rounds and A's: for boots or machines, whose spread one recording's
    /// intervals do not show.
    #[arg(long, num_args = 2, action = clap::ArgAction::Append, value_names = ["A", "B"])]
    pub round: Vec<PathBuf>,
}

impl DiffArgs {
    /// Every round's (A, B): the positional pair, then each `--round`'s.
    pub fn rounds(&self) -> Result<Vec<(PathBuf, PathBuf)>, crate::model::failure::Failure> {
        if !self.round.len().is_multiple_of(2) {
            return Err(crate::model::failure::Failure::usage(format!(
                "--round takes two recordings per round, A then B (`--round A2 B2`); got {} paths",
                self.round.len()
            )));
        }
        let mut pairs = vec![(self.a.clone(), self.b.clone())];
        pairs.extend(self.round.chunks_exact(2).map(|p| (p[0].clone(), p[1].clone())));
        Ok(pairs)
    }
}

/// Exec outcomes on the command line (`--outcome enoent`), by the names the JSON uses.
impl clap::ValueEnum for crate::analysis::outcome::Outcome {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        self.key().map(clap::builder::PossibleValue::new)
    }
}

/// Spawn methods on the command line (`--method posix-spawn`), by the names the JSON uses.
impl clap::ValueEnum for crate::commands::spawn::Method {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.key()).help(self.about()))
    }
}

/// Options of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Trace running processes instead of a command: these (comma-separated ids), their
    /// threads, their descendants and every descendant born while tracing. Ends when they have
    /// all exited, on Ctrl-C, or after --duration.
    #[arg(long, value_name = "PID", value_delimiter = ',', conflicts_with_all = ["cgroup", "all"], help_heading = "Scope")]
    pub pid: Vec<u32>,
    /// Trace every task in this cgroup v2 directory or below (a container's, a systemd
    /// service's), including tasks that move in later. PATH under the cgroup2 mount, or
    /// relative to it (`system.slice/ssh.service`).
    #[arg(long, value_name = "PATH", conflicts_with = "all", help_heading = "Scope")]
    pub cgroup: Option<PathBuf>,
    /// Trace every process on the machine.
    #[arg(long, short = 'a', help_heading = "Scope")]
    pub all: bool,
    /// Stop tracing after this many seconds (any scope).
    #[arg(long, value_name = "SECONDS", help_heading = "Scope")]
    pub duration: Option<f64>,
    /// The built-in chain's shape (without a COMMAND).
    #[command(flatten, next_help_heading = "Workload")]
    pub chain: ChainArgs,
    /// The command to trace, after `--`. Without it, the built-in exec chain runs. With --all or
    /// --cgroup, the command is the window: the scope is traced while it runs.
    #[arg(last = true, value_name = "COMMAND", help_heading = "Workload")]
    pub command: Vec<OsString>,
    /// Per-function timing: exact (fentry/fexit on exec-path functions, kprobes where there is
    /// no BTF), sampled (kernel stacks), or auto (exact where the kernel allows it, plus
    /// sampling; sampled otherwise).
    #[arg(long, value_enum, default_value_t = ModeArg::Auto, help_heading = "Tracing")]
    pub mode: ModeArg,
    /// Kernel-stack sampling rate inside exec attempts, per CPU (0 turns sampling off). Higher
    /// rates narrow the intervals and cost more: see benches/README.md.
    #[arg(long, value_name = "HZ", default_value_t = 999, help_heading = "Tracing")]
    pub sample_hz: u64,
    /// Which hooks time exec attempts and fork-family calls: fentry/fexit on the syscalls'
    /// own functions where the kernel allows them (no syscall tracepoint: other processes'
    /// syscalls run nothing of execprof's), else the raw sys_enter/sys_exit tracepoints (auto);
    /// or one of them.
    #[arg(long, value_enum, default_value_t = BoundariesArg::Auto, help_heading = "Tracing")]
    pub boundaries: BoundariesArg,
    /// Ring buffer size in MiB (a power of two); raise it if the report shows "ring buffer full".
    #[arg(long, value_name = "MIB", default_value_t = 8, help_heading = "Tracing")]
    pub ring_mib: u32,
    /// Keep the kernel's BPF run-time statistics on during the run, and report what each of
    /// execprof's programs cost and how much of each outcome's latency is probe time. They
    /// cost the traced workload ~4%: every run of every BPF program on the machine, not only
    /// execprof's, reads the clock twice more while they are on.
    #[arg(long, help_heading = "Tracing")]
    pub probe_costs: bool,
    /// What to write besides the terminal report.
    #[command(flatten)]
    pub outputs: OutputArgs,
    /// Record the run to FILE as it goes (compact, versioned; `execprof report FILE` replays it).
    #[arg(long, short = 'o', value_name = "FILE", help_heading = "Outputs")]
    pub output: Option<PathBuf>,
    /// Print progress on standard error once a second even when it is not a terminal.
    #[arg(long, help_heading = "Outputs")]
    pub progress: bool,
    /// Repeated and A/B runs.
    #[command(flatten)]
    pub repeat: RepeatArgs,
}

/// How per-function time is measured (`--mode`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModeArg {
    /// Exact where the kernel allows it, plus sampling; sampled otherwise.
    Auto,
    /// Entry/return probes on the exec-path functions: fentry/fexit, kprobes where there is no BTF.
    Exact,
    /// Kernel-stack samples only.
    Sampled,
}

/// Which hooks time the calls (`--boundaries`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum BoundariesArg {
    /// fentry/fexit where the kernel allows them; otherwise raw syscall tracepoints for a
    /// launched command, per-syscall events for --pid, --cgroup and --all.
    Auto,
    /// The raw sys_enter/sys_exit tracepoints.
    Tracepoint,
    /// The per-syscall syscalls:sys_enter/exit_* events of the exec and fork-family calls (no
    /// program runs for other syscalls; 32-bit processes are not seen).
    SyscallEvents,
    /// fentry/fexit on the syscalls' functions, or fail.
    Fentry,
}

/// Options of `agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Every process on the machine (the default).
    #[arg(long, short = 'a', conflicts_with_all = ["pid", "cgroup"], help_heading = "Scope")]
    pub all: bool,
    /// Only the tasks in this cgroup v2 directory or below, including tasks that move in
    /// later. PATH under the cgroup2 mount, or relative to it.
    #[arg(long, value_name = "PATH", conflicts_with = "pid", help_heading = "Scope")]
    pub cgroup: Option<PathBuf>,
    /// Only these processes (comma-separated ids) and what they start.
    #[arg(long, value_name = "PID", value_delimiter = ',', help_heading = "Scope")]
    pub pid: Vec<u32>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS", help_heading = "Scope")]
    pub duration: Option<f64>,
    /// Kernel-stack sampling rate per CPU inside exec attempts (0 turns it off): where the
    /// kernel time goes, per outcome, phase and function.
    #[arg(long, value_name = "HZ", default_value_t = 99, help_heading = "Tracing")]
    pub sample_hz: u64,
    /// Which hooks time the calls (as `run --boundaries`).
    #[arg(long, value_enum, default_value_t = BoundariesArg::Auto, help_heading = "Tracing")]
    pub boundaries: BoundariesArg,
    /// Keep the kernel's BPF run-time statistics on and report what each of the agent's eBPF
    /// programs ran and cost (as metrics too). Off by default: while they are on, every run of
    /// every BPF program on the machine, not only the agent's, reads the clock twice more.
    #[arg(long, help_heading = "Tracing")]
    pub probe_costs: bool,
    /// Write the aggregates as JSON to FILE on exit.
    #[arg(long, value_name = "FILE", help_heading = "Agent")]
    pub json: Option<PathBuf>,
    /// Seconds between reads of the kernel's aggregates.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, help_heading = "Agent")]
    pub interval: f64,
    /// Series (cgroup, program, call, outcome) the kernel keeps; one past that is folded into
    /// the `other` series of its outcome, and counted.
    #[arg(long, value_name = "N", default_value_t = profiler_common::aggregate::DEFAULT_MAX_SERIES, help_heading = "Capacity")]
    pub max_series: u32,
    /// Slots for calls in flight (begun, not returned) and for PATH searches in progress,
    /// rounded up to a power of two: the tables are direct-mapped by thread or process id, so
    /// two ids sharing a slot at the same moment push one out (counted).
    #[arg(long, value_name = "N", default_value_t = profiler_common::aggregate::DEFAULT_MAX_IN_FLIGHT, help_heading = "Capacity")]
    pub max_in_flight: u32,
    /// Missed names (ENOENT attempts: PATH's missed directories) the kernel keeps per cgroup.
    #[arg(long, value_name = "N", default_value_t = profiler_common::aggregate::DEFAULT_MAX_MISSES, help_heading = "Capacity")]
    pub max_misses: u32,
    /// Series the agent keeps in its own totals (the kernel's entries are emptied into them);
    /// past that, new series are folded into `other`.
    #[arg(long, value_name = "N", default_value_t = 65_536, help_heading = "Capacity")]
    pub max_totals: usize,
    /// Seconds a kernel entry may stay unchanged before it is read one last time and removed
    /// (its totals stay in the agent's).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0, help_heading = "Capacity")]
    pub idle: f64,
}

/// Options of `agent`: the agent's, and its metrics endpoint's.
#[derive(Debug, Args)]
pub struct AgentCommandArgs {
    /// Read options from FILE, a TOML file whose keys are these options' long names
    /// (`listen = "127.0.0.1:9435"`, `sample-hz = 99`, `metrics-program = ["/usr/bin/make"]`);
    /// an option given on the command line wins over the file's.
    #[arg(long, value_name = "FILE", help_heading = "Agent")]
    pub config: Option<PathBuf>,
    /// The agent's options.
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Once its programs are attached (and its endpoint listening), run as USER (a name or
    /// uid) with no capabilities, no supplementary groups and no way to regain them (CAP_BPF
    /// alone is kept on an older kernel that checks it on every bpf() call when
    /// kernel.unprivileged_bpf_disabled is set). Kernel symbols are read before.
    #[arg(long, value_name = "USER", help_heading = "Agent")]
    pub user: Option<String>,
    /// The metrics endpoint's options.
    #[command(flatten, next_help_heading = "Metrics endpoint")]
    pub metrics: MetricsArgs,
}

/// Options of the agent's metrics endpoint.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics (and /debug/pprof/exec, /healthz,
    /// /readyz): HOST:PORT, or a port alone for 127.0.0.1:PORT. Only the address named is
    /// listened on.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// TLS and basic auth for the endpoint, from a file in the Prometheus exporters' format
    /// (`tls_server_config` with `cert_file` and `key_file`, `basic_auth_users` with bcrypt
    /// hashes).
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// A program (executable path) that always gets a `program` label of its own: a regular
    /// expression matched against the whole path; repeatable.
    #[arg(long = "metrics-program", value_name = "REGEX")]
    pub metrics_program: Vec<String>,
    /// How many other programs get a `program` label of their own, the first ones seen; the
    /// rest are counted under program="other" (a label once given stays, so counters only
    /// grow).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub metrics_programs: usize,
    /// Label sets the metrics keep; a new one past that is counted without its cgroup's names
    /// and program (and in execprof_lost_total{reason="folded_in_metrics"}).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub metrics_max_series: usize,
    /// Seconds a label set may stay unchanged before it leaves the metrics (a container that
    /// is gone stops being exposed).
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub metrics_idle: f64,
    /// Seconds of sampled exec stacks the endpoint keeps for /debug/pprof/exec?seconds=N (a
    /// pprof profile of the last N seconds, N at most this).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub profile_window: u64,
    /// A container runtime asked for the names of the containers seen (name, image, and the
    /// Kubernetes pod, namespace and container): RUNTIME=SOCKET, RUNTIME one of containerd,
    /// crio, docker, podman (`containerd=/run/k3s/containerd/containerd.sock`); repeatable,
    /// asked in order. Without it: containerd, CRI-O, Docker and podman at their usual
    /// sockets; `none` asks none (containers keep the names their cgroup paths give).
    #[arg(long = "container-runtime", value_name = "RUNTIME=SOCKET")]
    pub container_runtime: Vec<String>,
}

/// Options of `top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The agent's options.
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Print one frame after one interval, as text, and exit (for scripts).
    #[arg(long)]
    pub once: bool,
}

/// Options of `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also write the findings as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("200M"), Ok(200 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("1T").is_err());
        assert!(parse_size("x").is_err());
    }
}
