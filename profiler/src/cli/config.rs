//! The only place clap's types become the core's plain configuration: every command takes
//! these, never a clap struct.
use clap::Args as _;

use super::{BenchSpawnArgs, BoundariesArg, ChainArgs, ModeArg, OutputArgs, RepeatArgs, RunArgs};
use crate::kernel::boundaries::BoundaryRequest;
use crate::{
    analysis::containers::RuntimeSocket,
    commands::{
        bench::SpawnConfig,
        repeat::{OwnOption, RepeatConfig},
        run::{ModeRequest, Outputs, RunConfig, Target},
    },
    model::{chain::ChainSpec, failure::Failure, scope::Scope},
};

/// Linux refuses an argument or environment string over 128 KiB, and the whole over a
/// quarter of the stack limit; stay well inside.
const MAX_ARG_BYTES: u64 = 1 << 20;

/// The built-in chain's shape from its options, defaults filled in; a usage error for
/// contradictory or oversized options.
pub fn chain_spec(a: &ChainArgs) -> Result<ChainSpec, Failure> {
    let mut spec = ChainSpec::new(a.steps.unwrap_or(ChainSpec::DEFAULT_STEPS), a.misses.unwrap_or(ChainSpec::DEFAULT_MISSES));
    spec.direct = a.direct;
    spec.env_vars = a.env_vars.unwrap_or(0);
    spec.env_size = a.env_size.unwrap_or(0);
    spec.args = a.args.unwrap_or(0);
    spec.arg_size = a.arg_size.unwrap_or(8);
    spec.lookup_first = a.lookup_first.then_some(true);
    if a.lookup_first && a.direct {
        return Err(Failure::usage("--direct does no PATH search, so there is nothing to look up first; drop one of them"));
    }
    if spec.misses > 64 {
        return Err(Failure::usage("--misses must be at most 64"));
    }
    if spec.direct && a.misses.is_some() {
        return Err(Failure::usage("--direct does no PATH search, so --misses has no effect; drop one of them"));
    }
    if spec.env_size > 128 << 10 || spec.arg_size > 128 << 10 {
        return Err(Failure::usage("--env-size and --arg-size must be at most 131072 (Linux's limit per string)"));
    }
    let total = u64::from(spec.env_vars) * (u64::from(spec.env_size.max(8)) + 8) + u64::from(spec.args) * (u64::from(spec.arg_size) + 1);
    if total > MAX_ARG_BYTES {
        return Err(Failure::usage(format!(
            "the extra arguments and environment add up to {total} bytes; keep them under {MAX_ARG_BYTES}"
        )));
    }
    Ok(spec)
}

/// `execprof run` (without --repeat/--vs). `argv`: execprof's own arguments, which tell a
/// `--` with nothing after it (clap sees no command either way) from no `--` at all.
pub fn run_config(args: RunArgs, argv: &[std::ffi::OsString], verbose: bool) -> anyhow::Result<RunConfig> {
    if args.command.is_empty() && argv.last().is_some_and(|a| a == "--") {
        return Err(Failure::usage(
            "nothing follows `--`: give the command to trace after it, or drop `--` to run the built-in exec chain",
        )
        .into());
    }
    let ring_bytes = args.ring_mib.checked_mul(1 << 20).filter(|b| b.is_power_of_two() && *b >= 4096).ok_or_else(|| {
        Failure::usage(format!("--ring-mib {} is not a power of two between 1 and 2048; try --ring-mib 16", args.ring_mib))
    })?;
    let scope = if !args.pid.is_empty() {
        Some(Scope::Pids { pids: args.pid.clone() })
    } else if let Some(path) = &args.cgroup {
        Some(Scope::Cgroup { path: path.display().to_string() })
    } else if args.all {
        Some(Scope::All)
    } else {
        None
    };
    let duration = match args.duration {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some(std::time::Duration::from_secs_f64(s)),
        Some(s) => return Err(Failure::usage(format!("--duration {s}: give a number of seconds above 0, e.g. --duration 10")).into()),
    };
    let target = if let Some(scope) = scope {
        if args.chain.any_given() {
            return Err(Failure::usage("the chain options shape the built-in workload, which --pid, --cgroup and --all do not run").into());
        }
        let window = (!args.command.is_empty()).then_some(args.command);
        if window.is_some() && matches!(scope, Scope::Pids { .. }) {
            return Err(Failure::usage("--pid traces the processes given until they exit; a command after `--` is a window for --all and --cgroup only (or use --duration)").into());
        }
        Target::Running { scope, window }
    } else if args.command.is_empty() {
        Target::Chain(chain_spec(&args.chain)?)
    } else if args.chain.any_given() {
        return Err(Failure::usage("the chain options (--steps, --misses, --direct, --env-*, --args, --arg-size) shape the built-in workload and cannot be used with a command").into());
    } else {
        Target::Command(args.command)
    };
    if args.outputs.folded.is_some() && args.sample_hz == 0 {
        return Err(Failure::usage("--folded needs samples; drop --sample-hz 0").into());
    }
    let mode = match args.mode {
        ModeArg::Auto => ModeRequest::Auto,
        ModeArg::Exact => ModeRequest::Exact,
        ModeArg::Sampled => ModeRequest::Sampled,
    };
    if let Some(limit) = max_sample_rate()
        && args.sample_hz > limit
    {
        return Err(Failure::usage(format!(
            "--sample-hz {} is above this kernel's limit, kernel.perf_event_max_sample_rate = {limit}; use at most {limit}, or raise the limit (sysctl -w kernel.perf_event_max_sample_rate=N)",
            args.sample_hz
        ))
        .into());
    }
    if mode == ModeRequest::Sampled && args.sample_hz == 0 {
        return Err(Failure::usage("--mode sampled needs samples; drop --sample-hz 0").into());
    }
    Ok(RunConfig {
        duration,
        target,
        outputs: outputs(args.outputs),
        recording: args.output,
        progress: args.progress,
        probe_costs: args.probe_costs,
        sample_hz: args.sample_hz,
        mode,
        ring_bytes,
        boundaries: boundary_request(args.boundaries),
        verbose,
    })
}

fn boundary_request(arg: BoundariesArg) -> BoundaryRequest {
    match arg {
        BoundariesArg::Auto => BoundaryRequest::Auto,
        BoundariesArg::Tracepoint => BoundaryRequest::Tracepoints,
        BoundariesArg::SyscallEvents => BoundaryRequest::SyscallEvents,
        BoundariesArg::Fentry => BoundaryRequest::Fentry,
    }
}

/// `execprof top`'s options, checked.
pub fn top_config(args: crate::cli::TopArgs, verbose: bool) -> Result<crate::commands::top::TopConfig, Failure> {
    Ok(crate::commands::top::TopConfig { once: args.once, agent: agent_config(args.agent, verbose)? })
}

/// `execprof agent`'s options, checked.
pub fn agent_config(args: crate::cli::AgentArgs, verbose: bool) -> Result<crate::commands::agent::AgentConfig, Failure> {
    agent_config_with(args, None, verbose)
}

/// `execprof agent`'s options with its metrics endpoint's, checked.
pub fn agent_command_config(args: crate::cli::AgentCommandArgs, verbose: bool) -> Result<crate::commands::agent::AgentConfig, Failure> {
    let metrics = metrics_config(args.metrics)?;
    let user = args.user.as_deref().map(crate::kernel::privileges::RunAs::lookup).transpose()?;
    Ok(crate::commands::agent::AgentConfig { user, ..agent_config_with(args.agent, metrics, verbose)? })
}

/// The metrics endpoint's options, checked (None without `--listen`).
fn metrics_config(args: crate::cli::MetricsArgs) -> Result<Option<crate::commands::agent::MetricsConfig>, Failure> {
    let Some(listen) = args.listen else {
        let set = !args.metrics_program.is_empty() || args.web_config.is_some() || !args.container_runtime.is_empty();
        return if set {
            Err(Failure::usage(
                "--metrics-program, --web-config and --container-runtime need --listen ADDR: there is no endpoint without it",
            ))
        } else {
            Ok(None)
        };
    };
    let listen = parse_listen(&listen)?;
    let allow = args
        .metrics_program
        .iter()
        .map(|r| {
            regex::Regex::new(&format!("^(?:{r})$"))
                .map_err(|e| Failure::usage(format!("--metrics-program {r:?} is not a regular expression: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.metrics_max_series == 0 {
        return Err(Failure::usage("--metrics-max-series must be at least 1"));
    }
    if !(args.metrics_idle.is_finite() && args.metrics_idle >= 1.0 && args.metrics_idle <= 1e9) {
        return Err(Failure::usage(format!("--metrics-idle {}: give a number of seconds, at least 1", args.metrics_idle)));
    }
    if !(1..=86_400).contains(&args.profile_window) {
        return Err(Failure::usage(format!("--profile-window {}: give a number of seconds from 1 to 86400", args.profile_window)));
    }
    let runtimes = container_runtimes(&args.container_runtime)?;
    Ok(Some(crate::commands::agent::MetricsConfig {
        runtimes,
        listen,
        allow,
        programs: args.metrics_programs,
        max_series: args.metrics_max_series,
        idle: std::time::Duration::from_secs_f64(args.metrics_idle),
        web_config: args.web_config,
        profile_window: std::time::Duration::from_secs(args.profile_window),
    }))
}

/// `--container-runtime`: the runtimes asked (their usual sockets when none is named; none
/// for `none`).
fn container_runtimes(args: &[String]) -> Result<Vec<RuntimeSocket>, Failure> {
    match args {
        [] => Ok(RuntimeSocket::defaults()),
        [none] if none == "none" => Ok(Vec::new()),
        _ if args.iter().any(|a| a == "none") => {
            Err(Failure::usage("--container-runtime none asks no runtime: give it alone, or name the runtimes to ask"))
        }
        _ => args.iter().map(|a| RuntimeSocket::parse(a).map_err(|e| Failure::usage(format!("--container-runtime {e}")))).collect(),
    }
}

/// `--listen`: `HOST:PORT`, `[V6]:PORT`, or a port alone (`127.0.0.1:PORT`).
pub fn parse_listen(text: &str) -> Result<std::net::SocketAddr, Failure> {
    use std::net::ToSocketAddrs as _;
    let bad = |why: &str| Failure::usage(format!("--listen {text:?}: {why}; give HOST:PORT (127.0.0.1:9435) or a port alone"));
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let mut addrs = text.to_socket_addrs().map_err(|e| bad(&e.to_string()))?;
    addrs.next().ok_or_else(|| bad("it names no address"))
}

fn agent_config_with(
    args: crate::cli::AgentArgs,
    metrics: Option<crate::commands::agent::MetricsConfig>,
    verbose: bool,
) -> Result<crate::commands::agent::AgentConfig, Failure> {
    let seconds = |name: &str, v: f64, min: f64| {
        if v.is_finite() && v >= min && v <= 1e9 {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(Failure::usage(format!("--{name} {v}: give a number of seconds, at least {min}")))
        }
    };
    let scope = if !args.pid.is_empty() {
        Scope::Pids { pids: args.pid }
    } else if let Some(path) = args.cgroup {
        Scope::Cgroup { path: path.display().to_string() }
    } else {
        Scope::All
    };
    if args.max_series == 0 || args.max_in_flight == 0 || args.max_misses == 0 || args.max_totals == 0 {
        return Err(Failure::usage("--max-series, --max-in-flight, --max-misses and --max-totals must be at least 1"));
    }
    Ok(crate::commands::agent::AgentConfig {
        scope,
        duration: args.duration.map(|d| seconds("duration", d, 0.001)).transpose()?,
        json: args.json,
        interval: seconds("interval", args.interval, 0.01)?,
        max_series: args.max_series,
        max_in_flight: args.max_in_flight,
        max_misses: args.max_misses,
        sample_hz: args.sample_hz,
        max_totals: args.max_totals,
        idle: seconds("idle", args.idle, 0.0)?,
        boundaries: boundary_request(args.boundaries),
        probe_costs: args.probe_costs,
        metrics,
        verbose,
        user: None,
    })
}

/// The kernel's ceiling on perf sampling rates (it lowers it by itself when sampling
/// interrupts run long); None where it cannot be read.
fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").ok()?.trim().parse().ok()
}

/// What a report writes besides the terminal text, from its output options.
pub fn outputs(a: OutputArgs) -> Outputs {
    Outputs {
        json: a.json,
        trace: a.trace,
        trace_format: a.trace_format,
        folded: a.folded,
        pprof: a.pprof,
        tree: a.tree,
        fast_path: a.fast_path,
        events: a.events,
        argv: a.argv,
    }
}

/// `--repeat`/`--vs` with a running-system scope: each run is the scope traced over its window
/// command again (`--all --repeat 5 -- make`); without a window, or with `--pid` (whose
/// processes do not come back), there is nothing to run again.
pub fn check_repeatable(args: &RunArgs) -> anyhow::Result<()> {
    if !args.pid.is_empty() || ((args.all || args.cgroup.is_some()) && args.command.is_empty()) {
        return Err(Failure::usage(
            "--repeat and --vs run a command again; with --pid, or --all/--cgroup without a window command after `--`, there is none: record runs with --output and compare them with `execprof diff`",
        )
        .into());
    }
    Ok(())
}

/// `execprof run --repeat/--vs ...`: the repeated run's own options, and which options of the
/// command line are its own (to leave out of each child run's), as clap defines them.
pub fn repeat_config(args: &RunArgs) -> RepeatConfig {
    let r = &args.repeat;
    RepeatConfig {
        repeats: r.repeat,
        vs: r.vs.clone(),
        vs_output: r.vs_output.clone(),
        setup: r.setup.clone(),
        vs_setup: r.vs_setup.clone(),
        own: own_options(),
    }
}

/// Options of `run` that belong to the whole repeated run, not to each child run: the repeat
/// options, the outputs (the merged report's or the diff's) and `--output`. Read from clap's
/// own definitions, so no second list of flag names exists.
fn own_options() -> Vec<OwnOption> {
    let ids: Vec<String> = [RepeatArgs::augment_args(clap::Command::new("r")), OutputArgs::augment_args(clap::Command::new("o"))]
        .iter()
        .flat_map(|c| c.get_arguments().map(|a| a.get_id().to_string()).collect::<Vec<_>>())
        .chain(["output".to_owned()])
        .collect();
    RunArgs::augment_args(clap::Command::new("run"))
        .get_arguments()
        .filter(|a| ids.iter().any(|id| id == a.get_id().as_str()))
        .filter_map(|a| {
            Some(OwnOption { long: a.get_long()?.to_owned(), short: a.get_short(), takes_value: a.get_action().takes_values() })
        })
        .collect()
}

/// `execprof bench spawn`.
pub fn spawn_config(a: &BenchSpawnArgs) -> Result<SpawnConfig, Failure> {
    if a.iterations == 0 {
        return Err(Failure::usage("--iterations must be at least 1"));
    }
    Ok(SpawnConfig {
        methods: a.methods.clone(),
        mem: a.mem,
        fragment: a.fragment,
        dirty: a.dirty,
        iterations: a.iterations,
        json: a.json.clone(),
        kernel: a.kernel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repeated_runs_own_options_come_from_clap() {
        let own = own_options();
        let find = |l: &str| own.iter().find(|o| o.long == l);
        for l in ["repeat", "vs", "vs-output", "setup", "vs-setup", "output", "json", "trace", "folded"] {
            assert!(find(l).is_some_and(|o| o.takes_value), "--{l}: {own:?}");
        }
        for l in ["tree", "fast-path"] {
            assert!(find(l).is_some_and(|o| !o.takes_value), "--{l}: {own:?}");
        }
        assert_eq!(find("output").and_then(|o| o.short), Some('o'));
        // What each child run needs stays on its command line.
        for l in ["steps", "misses", "mode", "sample-hz", "ring-mib", "progress"] {
            assert!(find(l).is_none(), "--{l} must reach the child runs");
        }
    }
}
