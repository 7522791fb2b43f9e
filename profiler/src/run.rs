//! `execprof run`: launch, trace, collect, analyse, report. The data flows one way.
use std::{
    ffi::OsString,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::{
    analysis::{self, ExactContext, SymbolContext},
    exact_plan::ExactPlan,
    ksyms::KernelSymbols,
    export,
    symbolize::KernelSymbolizer,
    phases::PhaseModel,
    exit::{Failure, code},
    kernel::KernelInfo,
    kernel_layout::TaskLayout,
    launch::{self, Command, SuspendedChild},
    privileges,
    probes::RUN_PROBES,
    report::{self, RunReport},
    tracer::{Tracer, TracerOptions},
    workload::{ChainSpec, ChainWorkload},
};

/// How per-function time is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRequest {
    /// Exact where the kernel allows kprobes, plus sampling; sampling alone otherwise.
    Auto,
    /// Entry/return probes only; fail where the kernel has no kprobes.
    Exact,
    /// cpu-clock samples with kernel stacks only.
    Sampled,
}

pub enum Target {
    Command(Vec<OsString>),
    Chain(ChainSpec),
}

pub struct RunConfig {
    pub target: Target,
    pub json: Option<PathBuf>,
    /// Perfetto-loadable trace file.
    pub trace: Option<PathBuf>,
    /// Folded stacks and flame graphs per outcome go here.
    pub folded: Option<PathBuf>,
    /// cpu-clock sampling rate per CPU; 0 = no per-function attribution.
    pub sample_hz: u64,
    pub mode: ModeRequest,
    pub ring_bytes: u32,
    pub verbose: bool,
}

/// Runs and reports; returns the exit code execprof should end with.
pub fn run(cfg: RunConfig) -> Result<i32> {
    privileges::require_tracing_privileges("run")?;
    let kernel = KernelInfo::current();
    let layout = TaskLayout::from_running_kernel().map_err(|e| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}")))?;

    // Resolve before tracing: a missing command fails fast, like a shell.
    let workload;
    let (command, chain) = match cfg.target {
        Target::Command(argv) => (Command::resolve(argv)?, None),
        Target::Chain(spec) => {
            workload = ChainWorkload::prepare(spec)?;
            (workload.command(), Some(spec))
        }
    };

    let mut tracer = Tracer::load(&layout, RUN_PROBES, &TracerOptions { ring_bytes: cfg.ring_bytes, verbose: cfg.verbose })
        .map_err(|e| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}")))?;
    if layout.maj_flt != layout.min_flt + 8 {
        tracer.attach.warnings.push("task_struct.maj_flt does not follow min_flt on this kernel: page faults per attempt are not counted".into());
    }
    for w in &tracer.attach.warnings {
        eprintln!("execprof: warning: {w}");
    }
    let model = PhaseModel::builtin()?;
    let (exact_plan, mode_note) = attach_exact(&mut tracer, cfg.mode, &model)?;
    let sample_hz = match (cfg.mode, &exact_plan) {
        (ModeRequest::Exact, _) => 0,
        _ => cfg.sample_hz,
    };
    if sample_hz > 0 {
        tracer.start_sampling(sample_hz).map_err(|e| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}; run with --sample-hz 0 to trace without per-function attribution")))?;
    }
    if let Some(note) = &mode_note {
        eprintln!("execprof: {note}");
    }
    let startup_note = match chain {
        Some(_) => Some("image start to main: not applicable, the built-in chain has no libc start-up and no main".to_owned()),
        None => tracer.attach_main(&command.program).err().map(|e| {
            format!("image start to main: not measured, no uprobe on main in {} ({e:#})", command.program.display())
        }),
    };
    let collector = tracer.start_collector()?;
    launch::install_signal_forwarding();

    let child = SuspendedChild::spawn(&command)?;
    tracer.trace_process(child.pid())?;
    let started = Instant::now();
    let (status, launch_failure) = match child.release() {
        Ok(running) => (running.wait()?, None),
        Err((running, failure)) => (running.wait()?, Some(failure)),
    };
    let command_ns = started.elapsed().as_nanos() as u64;
    wait_for_tree(&tracer);

    let collected = collector.finish()?;
    let losses = tracer.losses()?.with_unjoined(&collected.unjoined);
    if let Some(failure) = launch_failure {
        return Err(failure.into());
    }
    let symbolizer = (sample_hz > 0).then(KernelSymbolizer::new);
    let analysis = analysis::analyse(
        &collected.events,
        symbolizer.as_ref().map(|symbols| SymbolContext { symbols, model: &model }),
        exact_plan.as_ref().map(|plan| ExactContext { plan, model: &model }),
    );
    let report = RunReport {
        schema_version: report::SCHEMA_VERSION,
        execprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        command: command.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        program: command.program.display().to_string(),
        chain,
        kernel,
        mode: report::Mode::new(exact_plan.as_ref().map(|p| p.functions.len()), sample_hz, mode_note),
        warnings: tracer.attach.warnings.clone(),
        exit_status: status,
        command_wall_ns: command_ns,
        analysis,
        losses,
        undecodable_records: collected.undecodable,
        startup_note,
    };
    if let Some(err) = &collected.first_decode_error {
        eprintln!("execprof: warning: {} records could not be decoded (first: {err})", collected.undecodable);
    }
    print!("{}", report::render(&report));
    if let (Some(dir), Some(sampled)) = (&cfg.folded, &report.analysis.sampled) {
        export::write_folded(dir, sampled)?;
    }
    if let Some(path) = &cfg.trace {
        export::write_trace(path, &collected.events, exact_plan.as_ref())?;
    }
    if let Some(path) = &cfg.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(status.shell_code())
}

/// After the command exits, its descendants may still run: keep collecting until the kernel's
/// traced set is empty (Ctrl-C ends the wait).
fn wait_for_tree(tracer: &Tracer) {
    let start = Instant::now();
    let mut announced = false;
    while tracer.traced_alive() > 0 && !launch::interrupted() {
        if !announced && start.elapsed() > Duration::from_secs(1) {
            eprintln!(
                "execprof: the command exited; waiting for {} traced descendant process(es) to finish (Ctrl-C to stop waiting)",
                tracer.traced_alive()
            );
            announced = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Attaches exact-mode probes as the mode asks. Returns the plan of what is probed (None:
/// no exact mode) and, when auto mode fell back or a function could not be probed, a
/// one-line explanation for the user.
fn attach_exact(tracer: &mut Tracer, mode: ModeRequest, model: &PhaseModel) -> Result<(Option<ExactPlan>, Option<String>)> {
    if mode == ModeRequest::Sampled {
        return Ok((None, None));
    }
    let result = KernelSymbols::load().and_then(|symbols| {
        let mut plan = ExactPlan::resolve(model, &symbols, profiler_common::limits::MAX_PROBED);
        let (attached, warnings) = tracer.attach_exact(&plan)?;
        plan.functions.retain(|f| attached.contains(&f.slot));
        Ok((plan, warnings))
    });
    match (result, mode) {
        (Ok((plan, warnings)), _) => {
            let note = (!warnings.is_empty()).then(|| warnings.join("\n"));
            Ok((Some(plan), note))
        }
        (Err(e), ModeRequest::Exact) => Err(Failure::new(
            code::UNSUPPORTED_KERNEL,
            format!("exact mode is not possible on this kernel: {}; use --mode sampled (or auto)", no_exact_reason(&e)),
        )
        .into()),
        (Err(e), _) => Ok((None, Some(format!("auto mode: sampled, because exact mode is not possible here: {}", no_exact_reason(&e))))),
    }
}

/// Why kprobes failed, in the user's terms.
fn no_exact_reason(err: &anyhow::Error) -> String {
    if !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        return "the kernel has no kprobes (no kprobe PMU; CONFIG_KPROBES is off)".into();
    }
    format!("{err:#}")
}
