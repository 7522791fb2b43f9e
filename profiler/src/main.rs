//! execprof: where the kernel spends exec time.
//!
//! `CLI → config → launch + attach → collect → decode → analyse (pure) → render/export`.

use clap::Parser as _;

use execprof::{
    cli::{self, Cli, Command},
    doctor,
    run,
    exit::{Failure, code},
    run::{ModeRequest, RunConfig, Target},
    workload::ChainSpec,
};

fn main() {
    let cli = Cli::parse();
    env_logger::Builder::new()
        .filter_level(if cli.verbose { log::LevelFilter::Debug } else { log::LevelFilter::Warn })
        .format_target(false)
        .init();
    let result = match cli.command {
        Command::Run(args) => run_config(args, cli.verbose).and_then(run::run),
        Command::Doctor(args) => doctor::doctor(args.json.as_deref()).map(|()| 0),
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

/// The only place clap's types become the core's configuration.
fn run_config(args: cli::RunArgs, verbose: bool) -> anyhow::Result<RunConfig> {
    let ring_bytes = args.ring_mib.checked_mul(1 << 20).filter(|b| b.is_power_of_two() && *b >= 4096).ok_or_else(|| {
        Failure::usage(format!("--ring-mib {} is not a power of two between 1 and 2048; try --ring-mib 16", args.ring_mib))
    })?;
    let target = if args.command.is_empty() {
        let spec = ChainSpec {
            steps: args.steps.unwrap_or(ChainSpec::DEFAULT_STEPS),
            misses: args.misses.unwrap_or(ChainSpec::DEFAULT_MISSES),
        };
        if spec.misses > 64 {
            return Err(Failure::usage("--misses must be at most 64").into());
        }
        Target::Chain(spec)
    } else {
        Target::Command(args.command)
    };
    if args.folded.is_some() && args.sample_hz == 0 {
        return Err(Failure::usage("--folded needs samples; drop --sample-hz 0").into());
    }
    let mode = match args.mode {
        cli::ModeArg::Auto => ModeRequest::Auto,
        cli::ModeArg::Exact => ModeRequest::Exact,
        cli::ModeArg::Sampled => ModeRequest::Sampled,
    };
    if mode == ModeRequest::Sampled && args.sample_hz == 0 {
        return Err(Failure::usage("--mode sampled needs samples; drop --sample-hz 0").into());
    }
    Ok(RunConfig { target, json: args.json, trace: args.trace, folded: args.folded, sample_hz: args.sample_hz, mode, ring_bytes, verbose })
}
