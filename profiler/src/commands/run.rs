//! `execprof run`: launch, attach, trace through the pipeline as records arrive, report.
//! `execprof report`: the same pipeline fed from a recording. The data flows one way.
use std::{
    ffi::OsString,
    fs::File,
    io::BufWriter,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result};

use crate::{
    analysis::phases::PhaseModel,
    analysis::{AnalysisContext, attribution::SymbolTable},
    kernel::ksyms::KernelSymbols,
    kernel::layout::TaskLayout,
    kernel::privileges,
    kernel::probes::RUN_PROBES,
    kernel::scope::KernelScope,
    kernel::symbolize::KernelSymbolizer,
    kernel::tracer::{Tracer, TracerOptions},
    launch::child::{Command, SuspendedChild},
    launch::workload::ChainWorkload,
    model::chain::ChainSpec,
    model::failure::{Failure, code},
    model::meta::{ExactPlan, KernelInfo, MachineFacts, Mode, RunEnd, RunMeta},
    model::names::escape_name,
    model::scope::Scope,
    pipeline::{Finished, OutputFile, Recorder, RunPipeline, TraceOutput},
    recording::RecordingWriter,
    report::export,
    report::{self, RecordingFacts, RunReport, Source},
    source::{
        backlog::Backlog,
        live::{self, Progress, SlowNotice},
        replay::{self, load},
    },
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

/// What `run` traces.
pub enum Target {
    /// This command line (program and arguments), run as given.
    Command(Vec<OsString>),
    /// The built-in exec chain, of this shape.
    Chain(ChainSpec),
    /// Running processes (`--pid`, `--cgroup`, `--all`); `window`: a command run meanwhile
    /// whose run is the window traced (`--all -- sleep 10`), traced only if it is in scope.
    Running {
        /// Which processes.
        scope: Scope,
        /// The window command, if any.
        window: Option<Vec<OsString>>,
    },
}

/// Files a report can write besides the terminal output.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// The report as JSON goes here.
    pub json: Option<PathBuf>,
    /// Perfetto-loadable trace file.
    pub trace: Option<PathBuf>,
    /// Its format.
    pub trace_format: crate::render::TraceFormat,
    /// Folded stacks and flame graphs per outcome go here.
    pub folded: Option<PathBuf>,
    /// The sampled stacks as a pprof profile go here.
    pub pprof: Option<PathBuf>,
    /// Print the call trees.
    pub tree: bool,
    /// Print the fast-path estimate.
    pub fast_path: bool,
    /// One line per exec attempt here (`-`: standard output).
    pub events: Option<PathBuf>,
    /// `--argv`: each attempt's arguments, read by the kernel side (run) and shown on the
    /// events lines.
    pub argv: bool,
}

/// Everything `execprof run` needs, from its command line.
pub struct RunConfig {
    /// What to trace.
    pub target: Target,
    /// What to write besides the terminal report.
    pub outputs: Outputs,
    /// Recording written as the run goes.
    pub recording: Option<PathBuf>,
    /// Print progress once a second even when standard error is not a terminal.
    pub progress: bool,
    /// Keep the kernel's BPF run-time statistics on during the run (`--probe-costs`).
    pub probe_costs: bool,
    /// cpu-clock sampling rate per CPU; 0 = no per-function attribution.
    pub sample_hz: u64,
    /// How per-function time is measured.
    pub mode: ModeRequest,
    /// Size of the kernel-to-user ring buffer, in bytes (a power of two).
    pub ring_bytes: u32,
    /// `--boundaries`: which hooks time the calls.
    pub boundaries: crate::kernel::boundaries::BoundaryRequest,
    /// Debug logs and eBPF-side diagnostics.
    pub verbose: bool,
    /// Stop tracing this long after the start (`--duration`).
    pub duration: Option<std::time::Duration>,
}

/// Everything attached and decided before the command starts.
struct Attached {
    tracer: Tracer,
    exact_plan: Option<ExactPlan>,
    sample_hz: u64,
    mode: Mode,
    warnings: Vec<String>,
    startup_note: Option<String>,
    sched_prepare_exec: bool,
}

/// Runs and reports; returns the exit code execprof should end with.
pub fn run(cfg: RunConfig) -> Result<i32> {
    privileges::require_tracing_privileges("run")?;
    if cfg.mode != ModeRequest::Exact && cfg.sample_hz > 0 {
        privileges::require_perf_events("run")?;
    }
    check_outputs(&cfg.outputs, cfg.recording.as_deref())?;
    // Resolve before tracing: a missing command fails fast, like a shell; a scope that
    // cannot be used fails before anything is attached.
    let (workload, command, chain, scope) = match &cfg.target {
        Target::Command(argv) => (None, Some(Command::resolve(argv.clone())?), None, Scope::Launched),
        Target::Chain(spec) => {
            let w = ChainWorkload::prepare(*spec)?;
            let command = w.command();
            (Some(w), Some(command), Some(*spec), Scope::Launched)
        }
        Target::Running { scope, window } => (None, window.clone().map(Command::resolve).transpose()?, None, scope.clone()),
    };
    let (scope, kernel_scope) = crate::kernel::scope::resolve(&scope)?;
    let launched = scope == Scope::Launched;
    let model = PhaseModel::builtin()?;
    // Forked while execprof is small: its first exec would tear down a copy of everything
    // loaded below (`launch::child`). Held until the probes are attached for it.
    let child = command.as_ref().map(SuspendedChild::spawn).transpose()?;
    let mut attached = attach(&cfg, &model, command.as_ref().filter(|_| launched), chain.is_some(), &kernel_scope)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the event loop")?;

    if let Some(c) = child.as_ref().filter(|_| launched) {
        attached.tracer.trace_process(c.pid())?;
    }
    let seeded = seed(&mut attached.tracer, &scope, &kernel_scope);
    // What the per-syscall events will never see: 32-bit programs already running.
    let running_32_bit = if attached.tracer.boundaries == crate::model::meta::Boundaries::SyscallEvents {
        crate::kernel::scope::running_32_bit(&scope, &seeded)
    } else {
        0
    };
    if matches!(scope, Scope::Pids { .. }) && seeded.is_empty() {
        return Err(Failure::usage("--pid: every process given exited before it could be traced; nothing to trace").into());
    }
    let mut machine = MachineFacts::current();
    machine.sched_prepare_exec = attached.sched_prepare_exec;
    let argv: Vec<OsString> = command.as_ref().map(|c| c.argv.clone()).unwrap_or_default();
    let (command_text, command_hex) = RunMeta::command_fields(&argv.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
    let meta = RunMeta {
        execprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        command: command_text,
        command_hex,
        program: command.as_ref().map(|c| c.program.display().to_string()).unwrap_or_default(),
        chain,
        kernel: KernelInfo::current(),
        machine,
        mode: attached.mode.clone(),
        sample_hz: attached.sample_hz,
        exact_plan: attached.exact_plan.clone(),
        ring_bytes: cfg.ring_bytes,
        warnings: attached.warnings.clone(),
        startup_note: attached.startup_note.clone(),
        started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        started_mono_ns: monotonic_ns(),
        repeats: 1,
        scope: scope.clone(),
        preexisting: crate::kernel::scope::process_table(&scope, &seeded),
        argv_read: cfg.outputs.argv,
    };
    let ctx = AnalysisContext {
        model: &model,
        sampled: attached.sample_hz > 0,
        exact: attached.exact_plan.as_ref(),
        preexisting: &meta.preexisting,
        launched: meta.launched(),
    };
    let recorder = match &cfg.recording {
        Some(path) => Some(create_recording(path, &meta)?),
        None => None,
    };
    let trace = TraceOutput::create(cfg.outputs.trace.as_deref(), cfg.outputs.trace_format, &meta)?;
    // Only the launched tree's processes are signalled when execprof is.
    let events = crate::pipeline::events_output(cfg.outputs.events.as_deref(), &meta, cfg.outputs.argv)?;
    let launched_pid = child.as_ref().filter(|_| launched).map(SuspendedChild::pid);
    let ring = attached.tracer.take_ring()?;
    let logger = attached.tracer.take_logger();
    let mut progress = Progress::new(cfg.progress);

    // BPF run-time statistics with exact mode soft-locked both CPUs of a Debian 6.1 guest
    // (`cargo xtask vm-suite`); 6.12 and 6.18 are fine: taken from 6.10 on only.
    let run_stats = if !cfg.probe_costs {
        None
    } else if meta.kernel.version() >= Some((6, 10)) {
        Tracer::enable_run_stats()
    } else {
        eprintln!("execprof: --probe-costs: not on this kernel (before 6.10 the statistics with exact mode soft-locked a 6.1 guest)");
        None
    };
    // The records go through the pipeline on a worker thread at the lowest priority
    // (`source::backlog`): the event loop only copies them out of the ring buffer. The worker
    // starts before the command does, and what it has not taken when the tree ends is taken
    // after, while the report is being made.
    let tracer = &attached.tracer;
    let (end, pipeline, (cpu_before, cpu_after), tree_ended) = std::thread::scope(|s| {
        // Built on the worker, so that its memory is the worker's own (`source::backlog`).
        let make = move || RunPipeline::new(ctx, (trace, events), recorder, launched_pid);
        let mut backlog = Backlog::start(s, make).context("starting the thread that analyses the records")?;
        let cpu_before = crate::launch::child::children_cpu_ns();
        let released = Instant::now();
        let running = match child.map(SuspendedChild::release).transpose() {
            Ok(running) => running,
            Err((mut running, failure)) => {
                running.wait_blocking()?;
                return Err(failure.into());
            }
        };
        if !launched {
            eprintln!(
                "execprof: tracing {}{}",
                scope.describe(),
                match (cfg.duration, running.is_some()) {
                    (Some(d), _) => format!(" for {} s; Ctrl-C stops it sooner", d.as_secs_f64()),
                    (None, true) => " while the command runs; Ctrl-C stops it sooner".to_owned(),
                    (None, false) if matches!(scope, Scope::Pids { .. }) => " until they exit; Ctrl-C stops it sooner".to_owned(),
                    (None, false) => "; Ctrl-C stops it".to_owned(),
                }
            );
        }
        let watch = live::Watch { child: running, launched, until_scope_gone: matches!(scope, Scope::Pids { .. }), duration: cfg.duration };
        let end =
            runtime.block_on(live::trace(tracer, live::Feeds { ring, logger, run_stats }, &mut backlog, watch, released, &mut progress));
        drop(runtime);
        let cpu_after = crate::launch::child::children_cpu_ns();
        live::exit_on_signal_while_reporting(workload.iter().map(|w| w.dir().to_owned()).collect());
        let tree_ended = Instant::now();
        anyhow::Ok((end, backlog.finish(), (cpu_before, cpu_after), tree_ended))
    })?;
    let end = end?;

    let mut kernel_losses = attached.tracer.losses()?;
    if running_32_bit > 0 {
        kernel_losses.add(profiler_common::counter::NAMES[profiler_common::counter::NON_NATIVE_EXEC as usize], running_32_bit);
    }
    let program_costs = attached.tracer.program_costs();
    let attempts = pipeline.attempts();
    let _notice = SlowNotice::start(format!("analysing {} exec attempts…", live::group(attempts)));
    let sampled = attached.sample_hz > 0;
    let finished = pipeline.finish(
        |addrs| if sampled { SymbolTable::build(addrs, &KernelSymbolizer::new()) } else { SymbolTable::default() },
        crate::launch::child::missing_interpreters,
    );
    let run_end = RunEnd {
        exit_status: end.status,
        command_wall_ns: end.command_wall_ns,
        command_cpu_ns: if launched { (cpu_after.0 + cpu_after.1).saturating_sub(cpu_before.0 + cpu_before.1) } else { 0 },
        kernel_losses,
        undecodable_records: finished.undecodable,
        first_decode_error: finished.first_decode_error.clone(),
        partial: end.partial,
        program_costs,
        missing_interpreters: finished.missing_interpreters.clone(),
    };
    let mut finished = finished;
    let mut errors = std::mem::take(&mut finished.output_errors);
    let recording = close_recording(finished.recorder.take(), &finished.symbols, &run_end, &mut errors);
    let source = Source::Live { recording, ready_ms: tree_ended.elapsed().as_millis() as u64 };
    let report = deliver(meta, run_end, finished, source, &cfg.outputs, &mut errors);
    if !errors.is_empty() {
        return Err(Failure::new(code::ERROR, errors.join("\n")).into());
    }
    Ok(report.exit_status.shell_code())
}

/// `execprof report FILE`: a recording through the same pipeline, without the kernel.
pub fn replay(path: &Path, outputs: &Outputs) -> Result<i32> {
    check_outputs(outputs, None)?;
    let started = Instant::now();
    let loaded = load(path, (outputs.trace.as_deref(), outputs.trace_format), outputs.events.as_deref(), outputs.argv)?;
    let source = Source::Replay { recording: loaded.facts, ready_ms: started.elapsed().as_millis() as u64 };
    let mut finished = loaded.finished;
    if outputs.trace.is_some() && finished.analysis.exact.as_ref().is_some_and(|x| x.calls_summed > 0) {
        eprintln!(
            "execprof: note: this recording holds each exec attempt's probed calls summed in the kernel, so the timeline has no \
             kernel functions track; record with `run --trace FILE --output REC` to keep every call"
        );
    }
    let mut errors = std::mem::take(&mut finished.output_errors);
    deliver(loaded.meta, loaded.end, finished, source, outputs, &mut errors);
    if !errors.is_empty() {
        return Err(Failure::new(code::ERROR, errors.join("\n")).into());
    }
    Ok(0)
}

/// `execprof diff A B`: both recordings through the pipeline, then compared.
pub fn diff(a: &Path, b: &Path, json: Option<&Path>, folded: Option<&Path>, shown: &crate::report::diff::Shown) -> Result<i32> {
    diff_rounds(&[(a.to_path_buf(), b.to_path_buf())], json, folded, shown)
}

/// `execprof diff A B [--round A2 B2 …]`: each round's pair compared, and over two rounds or
/// more the rounds combined ([`crate::report::diff::combine`]): means over the rounds, Welch
/// tests between them.
pub fn diff_rounds(
    rounds: &[(PathBuf, PathBuf)],
    json: Option<&Path>,
    folded: Option<&Path>,
    shown: &crate::report::diff::Shown,
) -> Result<i32> {
    let outputs = Outputs {
        json: json.map(Path::to_path_buf),
        trace: None,
        trace_format: Default::default(),
        folded: folded.map(Path::to_path_buf),
        pprof: None,
        tree: false,
        fast_path: false,
        events: None,
        argv: false,
    };
    check_outputs(&outputs, None)?;
    let mut diffs = Vec::with_capacity(rounds.len());
    // The reports, kept only for the flame graphs (a diff keeps what it needs of them).
    let mut reports = Vec::new();
    for (r, (a, b)) in rounds.iter().enumerate() {
        let (ra, rb) = (replay::report(a)?, replay::report(b)?);
        for (side, recording) in [("A", ra.recording_read()), ("B", rb.recording_read())] {
            if let Some(f) = recording
                && let Some(at) = f.cut_position()
            {
                let of_round = if rounds.len() > 1 { format!(" of round {}", r + 1) } else { String::new() };
                eprintln!(
                    "execprof: warning: recording {side}{of_round} ({}) was cut {at}: its figures cover the intact prefix; the run was killed or its disk filled up",
                    escape_name(f.path.as_bytes()),
                );
            }
        }
        diffs.push(crate::report::diff::compare(&a.display().to_string(), &ra, &b.display().to_string(), &rb));
        if folded.is_some() {
            reports.push((ra, rb));
        }
    }
    let d = crate::report::diff::combine(&diffs).map_err(Failure::usage)?;
    print!("{}", crate::report::diff::render(&d, shown));
    let mut errors = Vec::new();
    if let Some(dir) = folded {
        let (a, b): (Vec<&RunReport>, Vec<&RunReport>) = reports.iter().map(|(a, b)| (a, b)).unzip();
        if let Err(e) = crate::report::diff::write_differential_rounds(dir, &a, &b) {
            errors.push(format!("writing differential flame graphs into {} failed: {e:#}", dir.display()));
        }
    }
    if let Some(path) = json {
        let written = serde_json::to_string_pretty(&d)
            .map_err(anyhow::Error::from)
            .and_then(|text| std::fs::write(path, text + "\n").map_err(anyhow::Error::from));
        if let Err(e) = written {
            errors.push(format!("writing the JSON diff {} failed: {e:#}", path.display()));
        }
    }
    if !errors.is_empty() {
        return Err(Failure::new(code::ERROR, errors.join("\n")).into());
    }
    Ok(0)
}

/// Prints the report and writes the outputs asked for; an output that fails is named in
/// `errors` and the others are still written.
fn deliver(meta: RunMeta, end: RunEnd, finished: Finished, source: Source, outputs: &Outputs, errors: &mut Vec<String>) -> RunReport {
    let mut report = RunReport::new(meta, end, finished.analysis, &finished.unjoined, source);
    // The figures are the whole run's; its recording is not.
    if let Some(e) = finished.recording_error {
        report.recording_error = Some(e);
        report.complete = false;
    }
    if let Some(err) = &report_decode_error(&report, finished.first_decode_error.as_deref()) {
        eprintln!("execprof: warning: {err}");
    }
    if !report.complete {
        eprintln!(
            "execprof: warning: the report is incomplete: {}{}",
            incompleteness(&report),
            if report.losses.ring_full() > 0 { "; raise --ring-mib and run again" } else { "" }
        );
    }
    print!("{}", report::render(&report));
    if outputs.tree {
        print!("{}", report::render_trees(&report));
    }
    if outputs.fast_path {
        print!("{}", report::render_fast_path(&report));
    }
    if let Some(dir) = &outputs.folded {
        match &report.analysis.sampled {
            Some(sampled) => {
                if let Err(e) = export::write_folded(dir, sampled) {
                    errors.push(format!("writing folded stacks into {} failed: {e:#}", dir.display()));
                }
            }
            None => errors.push(format!("no folded stacks written into {}: the run took no samples", dir.display())),
        }
    }
    if let Some(path) = &outputs.pprof {
        match &report.analysis.sampled {
            Some(sampled) => {
                let started_ns = report.meta.started_unix_s.saturating_mul(1_000_000_000) as i64;
                let profile = crate::render::pprof::from_sampled(sampled, report.meta.sample_hz, started_ns, report.command_wall_ns as i64);
                if let Err(e) = profile.gzipped().and_then(|bytes| std::fs::write(path, bytes).map_err(anyhow::Error::from)) {
                    errors.push(format!("writing the pprof profile {} failed: {e:#}", path.display()));
                }
            }
            None => errors.push(format!(
                "no pprof profile written to {}: the run took no samples (--mode sampled or both, --sample-hz above 0)",
                path.display()
            )),
        }
    }
    if let Some(path) = &outputs.json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(anyhow::Error::from)
            .and_then(|json| std::fs::write(path, json + "\n").map_err(anyhow::Error::from));
        if let Err(e) = written {
            errors.push(format!("writing the JSON report {} failed: {e:#}", path.display()));
        }
    }
    report
}

fn report_decode_error(report: &RunReport, first: Option<&str>) -> Option<String> {
    first.map(|e| format!("{} records could not be decoded (first: {e})", report.undecodable_records))
}

fn incompleteness(r: &RunReport) -> String {
    let mut why = Vec::new();
    let cut = r.recording_cut();
    if let Some(at) = r.recording_read().and_then(RecordingFacts::cut_position) {
        why.push(format!("the recording was cut {at}: the report covers the intact prefix; the run was killed or its disk filled up"));
    }
    if let Some(p) = &r.partial {
        why.push(p.clone());
    }
    if let Some(e) = &r.recording_error {
        why.push(format!("its recording stopped early ({e})"));
    }
    if r.losses.total() > 0 && cut.is_some() {
        why.push(format!("{} exec attempts or fork calls unjoined (those open at the cut among them)", r.attempts_affected));
    } else if r.losses.total() > 0 {
        why.push(format!(
            "{} records lost or unjoined: {} exec attempts or fork calls not seen whole (the counts are lower bounds)",
            r.losses.total(),
            r.attempts_affected
        ));
    }
    if r.undecodable_records > 0 {
        why.push(format!("{} records not decodable", r.undecodable_records));
    }
    why.join("; ")
}

/// Writes the recording's end; says what the report should of it, or why it failed.
fn close_recording(recorder: Option<Recorder>, symbols: &SymbolTable, end: &RunEnd, errors: &mut Vec<String>) -> Option<RecordingFacts> {
    let recorder = recorder?;
    let path = recorder.path.display().to_string();
    let end = match serde_json::to_value(end) {
        Ok(v) => v,
        Err(e) => {
            errors.push(format!("writing the recording {path} failed: {e}"));
            return None;
        }
    };
    match recorder.close(symbols, &end) {
        Ok(stats) => Some(RecordingFacts { path, bytes: stats.bytes, records: stats.records, cut: None }),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// Output paths are checked before anything runs: a typo must not cost a long run.
fn check_outputs(outputs: &Outputs, recording: Option<&Path>) -> Result<()> {
    if outputs.argv && outputs.events.is_none() && recording.is_none() {
        return Err(Failure::usage(
            "--argv shows each attempt's arguments on the --events lines: add --events (or, with run, --output FILE to keep them in a recording)",
        )
        .into());
    }
    let files = [outputs.json.as_deref(), outputs.trace.as_deref(), outputs.pprof.as_deref(), recording].into_iter().flatten();
    for path in files {
        check_output_file(path)?;
    }
    if let Some(dir) = &outputs.folded
        && dir.exists()
        && !dir.is_dir()
    {
        return Err(Failure::usage(format!("--folded {} exists and is not a directory", dir.display())).into());
    }
    Ok(())
}

/// A file an output goes to can be written: checked before anything runs, leaving no empty
/// file behind.
pub(crate) fn check_output_file(path: &Path) -> Result<()> {
    {
        if path.is_dir() {
            return Err(Failure::usage(format!("{} is a directory; give a file name", path.display())).into());
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(Failure::usage(format!(
                "cannot write {}: {} is not a directory; create it first",
                path.display(),
                parent.display()
            ))
            .into());
        }
        // A directory can exist and still refuse the file (/proc, a read-only mount, no
        // permission): open it now, before any workload runs, and leave no empty file behind.
        let existed = path.exists();
        if let Err(e) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
            return Err(Failure::usage(format!("cannot write {} ({e}); give a path you can write", path.display())).into());
        }
        if !existed {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

fn create_recording(path: &Path, meta: &RunMeta) -> Result<Recorder> {
    let file = File::create(path).with_context(|| format!("creating the recording {}", path.display()))?;
    let meta = serde_json::to_value(meta)?;
    let writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, file), &meta)
        .with_context(|| format!("writing the recording {}", path.display()))?;
    Ok(OutputFile { path: path.to_owned(), writer })
}

/// CLOCK_MONOTONIC, the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Loads and attaches everything the run needs, before the command exists.
/// `command`: the launched command (None in a running-system scope, where start-up to main is
/// not measured).
fn attach(cfg: &RunConfig, model: &PhaseModel, command: Option<&Command>, builtin_chain: bool, scope: &KernelScope) -> Result<Attached> {
    crate::kernel::vmlinux::sharing(|| load_and_attach(cfg, model, command, builtin_chain, scope))
}

/// [`attach`]'s work, the kernel's BTF shared by its parts.
fn load_and_attach(
    cfg: &RunConfig,
    model: &PhaseModel,
    command: Option<&Command>,
    builtin_chain: bool,
    scope: &KernelScope,
) -> Result<Attached> {
    let layout = TaskLayout::from_running_kernel().map_err(|e| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}")))?;
    let mut tracer = Tracer::load(
        &layout,
        RUN_PROBES,
        &TracerOptions {
            ring_bytes: cfg.ring_bytes,
            verbose: cfg.verbose,
            scope: scope.clone(),
            argv: cfg.outputs.argv,
            boundaries: cfg.boundaries,
            attached_scope: command.is_none(),
            agent: None,
            // Timelines show each probed call: there every call is sent on its own.
            call_sums: cfg.outputs.trace.is_none() && cfg.mode != ModeRequest::Sampled,
        },
    )
    .map_err(|e| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}")))?;
    let mut warnings = tracer.attach.warnings.clone();
    if layout.maj_flt != layout.min_flt + 8 {
        warnings.push("task_struct.maj_flt does not follow min_flt on this kernel: page faults per attempt are not counted".into());
    }
    for w in &warnings {
        eprintln!("execprof: warning: {w}");
    }
    let (exact_plan, mode_note) = attach_exact(&mut tracer, cfg.mode, model)?;
    let sample_hz = if cfg.mode == ModeRequest::Exact { 0 } else { cfg.sample_hz };
    if sample_hz > 0 {
        tracer.start_sampling(sample_hz).map_err(|e| {
            Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}; run with --sample-hz 0 to trace without per-function attribution"))
        })?;
    }
    if let Some(note) = &mode_note {
        eprintln!("execprof: {note}");
    }
    let startup_note = match command {
        _ if builtin_chain => Some("image start to main: not applicable, the built-in chain has no libc start-up and no main".to_owned()),
        None => {
            Some("image start to main: not measured when tracing running processes (it needs a uprobe on one program's main)".to_owned())
        }
        Some(command) => tracer.attach_main(&command.program).err().map(|e| crate::launch::elf::main_not_probed(&command.program, &e)),
    };
    let mode = Mode::new(exact_plan.as_ref(), sample_hz, mode_note, (tracer.boundaries, tracer.boundaries_note.as_deref()));
    let sched_prepare_exec = crate::kernel::tracer::ensure_tracefs().is_ok_and(|t| t.join("events/sched/sched_prepare_exec").exists());
    Ok(Attached { tracer, exact_plan, sample_hz, mode, warnings, startup_note, sched_prepare_exec })
}

/// Marks the processes already running in a `--pid` or `--cgroup` scope as traced (the
/// kernel side is attached, so what they fork from now on is marked by the fork hook), looking
/// again until nothing new turns up. Returns those marked.
pub(crate) fn seed(tracer: &mut Tracer, scope: &Scope, kernel: &KernelScope) -> std::collections::HashSet<u32> {
    let mut marked = std::collections::HashSet::new();
    for _ in 0..4 {
        let new = crate::kernel::scope::seeds(scope, kernel, &marked);
        if new.is_empty() {
            break;
        }
        for pid in new {
            // A process that exited meanwhile cannot be marked: nothing of it to trace.
            if tracer.trace_process(pid).is_ok() {
                marked.insert(pid);
            }
        }
    }
    marked
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
        let warnings = tracer.attach_exact(&mut plan)?;
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

/// Why neither fentry/fexit nor kprobes attached, in the user's terms.
fn no_exact_reason(err: &anyhow::Error) -> String {
    if !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        let trampolines = format!("{err:#}");
        let trampolines = trampolines.split("fentry/fexit: ").nth(1).and_then(|t| t.split("; kprobes:").next()).unwrap_or("not tried");
        let trampolines = trampolines.split(". Verifier output").next().unwrap_or(trampolines);
        return format!("the kernel has no kprobes (no kprobe PMU; CONFIG_KPROBES is off) and refuses fentry/fexit ({trampolines})");
    }
    format!("{err:#}")
}
