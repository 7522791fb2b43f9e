//! execprof: where the kernel spends exec time.
//!
//! `CLI → config → launch + attach → ring buffer → decode → assemble → analyse → render/export`.

use clap::Parser as _;

use execprof::{
    cli::{
        self, Cli, Command,
        config::{agent_command_config, chain_spec, check_repeatable, outputs, repeat_config, run_config, spawn_config, top_config},
    },
    commands::{agent, bench, doctor, manual, repeat, run, top},
    model::failure::{Failure, code},
};

fn main() {
    let argv = match cli::config_file::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(f) => {
            eprintln!("execprof: {}", execprof::model::names::terminal_safe(&f.message));
            std::process::exit(f.code);
        }
    };
    let cli = Cli::parse_from(argv);
    env_logger::Builder::new()
        .filter_level(if cli.verbose { log::LevelFilter::Debug } else { log::LevelFilter::Warn })
        .format_target(false)
        .init();
    let result = match cli.command {
        Command::Run(args) if args.repeat.any_given() => {
            let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
            check_repeatable(&args).and_then(|()| {
                repeat::Plan::new(&argv, &repeat_config(&args), args.output.as_deref(), outputs(args.outputs))
                    .map_err(anyhow::Error::from)
                    .and_then(repeat::run)
            })
        }
        Command::Run(args) => run_config(args, &std::env::args_os().skip(1).collect::<Vec<_>>(), cli.verbose).and_then(run::run),
        Command::Report(args) => run::replay(&args.recording, &outputs(args.outputs)),
        Command::Diff(args) => {
            let shown = execprof::report::diff::Shown { outcome: args.outcome, lines: args.lines };
            args.rounds()
                .map_err(anyhow::Error::from)
                .and_then(|rounds| run::diff_rounds(&rounds, args.json.as_deref(), args.folded.as_deref(), &shown))
        }
        Command::Agent(args) => agent_command_config(args, cli.verbose).map_err(anyhow::Error::from).and_then(agent::agent),
        Command::Top(args) => top_config(args, cli.verbose).map_err(anyhow::Error::from).and_then(top::top),
        Command::Doctor(args) => doctor::doctor(args.json.as_deref()).map(|()| 0),
        Command::Bench(cli::BenchCommand::Spawn(args)) => {
            spawn_config(&args).map_err(anyhow::Error::from).and_then(|c| bench::spawn(&c)).map(|()| 0)
        }
        Command::Bench(cli::BenchCommand::Chain(args)) => chain_spec(&args.chain)
            .map_err(anyhow::Error::from)
            .and_then(|spec| bench::chain(spec, args.rounds, args.json.as_deref()))
            .map(|()| 0),
        Command::Completions(args) => manual::completions(args.shell).map(|()| 0),
        Command::ManPages(args) => manual::man_pages(&args.dir).map(|()| 0),
    };
    let status = match result {
        Ok(status) => status,
        Err(err) => {
            let (status, msg) = match err.downcast_ref::<Failure>() {
                Some(f) => (f.code, f.message.clone()),
                None => (code::ERROR, format!("{err:#}")),
            };
            eprintln!("execprof: {}", execprof::model::names::terminal_safe(&msg));
            status
        }
    };
    std::process::exit(status);
}
