//! Command-line types (clap only); `config` turns them into what the core uses.
use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "execprof", version, about = "Where the kernel spends exec time: traces every execve of a process tree")]
pub struct Cli {
    /// Show more: eBPF verifier statistics, eBPF-side diagnostics, debug logs.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND (or the built-in exec chain) and trace every exec attempt of its process tree.
    Run(RunArgs),
    /// Print what this machine allows execprof to attach, by trying it.
    Doctor(DoctorArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Built-in chain: number of steps (re-execs).
    #[arg(long, value_name = "N", conflicts_with = "command")]
    pub steps: Option<u32>,
    /// Built-in chain: PATH directories missed (one ENOENT each) before the program's own.
    #[arg(long, value_name = "K", conflicts_with = "command")]
    pub misses: Option<u32>,
    /// Per-function timing: exact (kprobes on exec-path functions), sampled (kernel stacks),
    /// or auto (exact where the kernel allows it, plus sampling; sampled otherwise).
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// Kernel-stack sampling rate inside exec attempts, per CPU (0 turns sampling off). Higher
    /// rates narrow the intervals and cost more: see benches/README.md.
    #[arg(long, value_name = "HZ", default_value_t = 999)]
    pub sample_hz: u64,
    /// Write a Perfetto-loadable trace (Chrome trace-event JSON) to FILE: a track per thread,
    /// a slice per exec attempt with its parts, user-space gaps, forks, faults.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write folded stacks and a flame graph SVG per outcome into DIR.
    #[arg(long, value_name = "DIR")]
    pub folded: Option<PathBuf>,
    /// Ring buffer size in MiB (a power of two); raise it if the report shows "ring buffer full".
    #[arg(long, value_name = "MIB", default_value_t = 8)]
    pub ring_mib: u32,
    /// The command to trace, after `--`. Without it, the built-in exec chain runs.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModeArg {
    Auto,
    Exact,
    Sampled,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also write the findings as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}
