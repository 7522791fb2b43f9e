//! execprof: where the kernel spends exec time.
//!
//! `CLI → config → launch + attach → ring buffer → decode → assemble → analyse → render/export`.

use clap::Parser as _;

use execprof::{
    cli::{self, Cli, Command},
    commands::bench,
    commands::doctor,
    commands::run,
    commands::run::{ModeRequest, Outputs, RunConfig, Target},
    model::chain::ChainSpec,
    model::failure::{Failure, code},
};

fn main() {
    let cli = Cli::parse();
    env_logger::Builder::new()
        .filter_level(if cli.verbose { log::LevelFilter::Debug } else { log::LevelFilter::Warn })
        .format_target(false)
        .init();
    let result = match cli.command {
        Command::Run(args) if args.repeat.any_given() => {
            let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
            execprof::commands::repeat::Plan::new(&argv, &args.repeat, args.output.as_deref(), outputs(args.outputs))
                .map_err(anyhow::Error::from)
                .and_then(execprof::commands::repeat::run)
        }
        Command::Run(args) => run_config(args, cli.verbose).and_then(run::run),
        Command::Report(args) => run::replay(&args.recording, &outputs(args.outputs)),
        Command::Diff(args) => {
            let shown = execprof::report::diff::Shown { outcome: args.outcome, lines: args.lines };
            run::diff(&args.a, &args.b, args.json.as_deref(), args.folded.as_deref(), &shown)
        }
        Command::Doctor(args) => doctor::doctor(args.json.as_deref()).map(|()| 0),
        Command::Bench(cli::BenchCommand::Spawn(args)) => bench::spawn(&args).map(|()| 0),
        Command::Bench(cli::BenchCommand::Chain(args)) => chain_spec(&args.chain)
            .map_err(anyhow::Error::from)
            .and_then(|spec| bench::chain(spec, args.rounds, args.json.as_deref()))
            .map(|()| 0),
    };
    let status = match result {
        Ok(status) => status,
        Err(err) => {
            let (status, msg) = match err.downcast_ref::<Failure>() {
                Some(f) => (f.code, f.message.clone()),
                None => (code::ERROR, format!("{err:#}")),
            };
            eprintln!("execprof: {msg}");
            status
        }
    };
    std::process::exit(status);
}

/// Linux refuses an argument or environment string over 128 KiB, and the whole over a
/// quarter of the stack limit; stay well inside.
const MAX_ARG_BYTES: u64 = 1 << 20;

fn chain_spec(a: &cli::ChainArgs) -> Result<ChainSpec, Failure> {
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

/// The only place clap's types become the core's configuration.
fn run_config(args: cli::RunArgs, verbose: bool) -> anyhow::Result<RunConfig> {
    let ring_bytes = args.ring_mib.checked_mul(1 << 20).filter(|b| b.is_power_of_two() && *b >= 4096).ok_or_else(|| {
        Failure::usage(format!("--ring-mib {} is not a power of two between 1 and 2048; try --ring-mib 16", args.ring_mib))
    })?;
    let target = if args.command.is_empty() {
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
        cli::ModeArg::Auto => ModeRequest::Auto,
        cli::ModeArg::Exact => ModeRequest::Exact,
        cli::ModeArg::Sampled => ModeRequest::Sampled,
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
        target,
        outputs: outputs(args.outputs),
        recording: args.output,
        progress: args.progress,
        probe_costs: args.probe_costs,
        sample_hz: args.sample_hz,
        mode,
        ring_bytes,
        verbose,
    })
}

/// The kernel's ceiling on perf sampling rates (it lowers it by itself when sampling
/// interrupts run long); None where it cannot be read.
fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").ok()?.trim().parse().ok()
}

fn outputs(a: cli::OutputArgs) -> Outputs {
    Outputs { json: a.json, trace: a.trace, folded: a.folded, tree: a.tree, fast_path: a.fast_path }
}
