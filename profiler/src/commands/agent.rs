//! `execprof agent`: the in-kernel aggregates source, folded into bounded totals, until a
//! signal or `--duration`; then the summary on the terminal and `--json`.
use std::{
    net::SocketAddr,
    path::PathBuf,
    rc::Rc,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result};

use crate::{
    analysis::{
        aggregates::AgentTotals,
        containers::RuntimeSocket,
        exposition::{CgroupNames, Exposition, ProgramLabels},
        phases::PhaseModel,
        profile_window::{ProfileWindow, StackNames},
    },
    kernel::{
        layout::{AgentLayout, TaskLayout},
        privileges::{self, RunAs},
        probes::{AGENT_PROBES, AGENT_TREE_PROBES},
        symbolize::KernelSymbolizer,
        tracer::{AgentKernelOptions, Tracer, TracerOptions},
    },
    model::{
        failure::{Failure, code},
        names::escape_name,
        scope::Scope,
    },
    render::metrics::{MetricsState, OwnFigures},
    report::agent::{AgentLosses, AgentReport, Capacities},
    serve::{Shared, WebConfig},
    source::{
        aggregates::{AggregateSource, Poll},
        runtimes::Runtimes,
    },
};

/// Everything `execprof agent` needs, from its command line.
pub struct AgentConfig {
    /// Which processes are watched.
    pub scope: Scope,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Write the report as JSON here on exit.
    pub json: Option<PathBuf>,
    /// Time between reads of the kernel's aggregates.
    pub interval: Duration,
    /// Capacity of the kernel's series map.
    pub max_series: u32,
    /// Capacity of the kernel's in-flight map.
    pub max_in_flight: u32,
    /// Capacity of the kernel's map of missed names (ENOENT attempts).
    pub max_misses: u32,
    /// cpu-clock sampling rate per CPU for the kernel stacks inside exec attempts (0: none).
    pub sample_hz: u64,
    /// Series the agent keeps in its own totals.
    pub max_totals: usize,
    /// How long a kernel entry may stay unchanged before it is removed (after its last read).
    pub idle: Duration,
    /// Which hooks time the calls.
    pub boundaries: crate::kernel::boundaries::BoundaryRequest,
    /// Keep the kernel's BPF run-time statistics on (`--probe-costs`).
    pub probe_costs: bool,
    /// The metrics endpoint (`--listen`); None: no endpoint.
    pub metrics: Option<MetricsConfig>,
    /// Debug logs and eBPF-side diagnostics.
    pub verbose: bool,
    /// Run as this user once attached (`--user`).
    pub user: Option<crate::kernel::privileges::RunAs>,
}

/// The agent's metrics endpoint.
pub struct MetricsConfig {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Programs that always get a label of their own (whole-path patterns).
    pub allow: Vec<regex::Regex>,
    /// How many other programs get one, the first seen.
    pub programs: usize,
    /// Label sets kept.
    pub max_series: usize,
    /// How long a label set may stay unchanged before it leaves the metrics.
    pub idle: Duration,
    /// TLS and basic auth (`--web-config`).
    pub web_config: Option<PathBuf>,
    /// The sampled stacks kept for `/debug/pprof/exec` (`--profile-window`).
    pub profile_window: Duration,
    /// The container runtimes asked for containers' names, in order (`--container-runtime`).
    pub runtimes: Vec<RuntimeSocket>,
}

/// The kernel side loaded and attached for the aggregates, and the source that reads them:
/// what `agent` and `top` share.
pub(crate) struct AgentSession {
    pub tracer: Tracer,
    pub source: AggregateSource,
    /// The scope as reports name it.
    pub scope: Scope,
    /// Holds the kernel's BPF run-time statistics on (`--probe-costs`).
    pub run_stats: Option<std::os::fd::OwnedFd>,
}

impl AgentSession {
    /// Checks the options, loads and attaches the aggregating programs for `cfg`'s scope.
    pub(crate) fn start(cfg: &AgentConfig, command: &str) -> Result<Self> {
        privileges::require_tracing_privileges(command)?;
        if cfg.sample_hz > 0 {
            privileges::require_perf_events(command)?;
        }
        if let Some(path) = &cfg.json {
            crate::commands::run::check_output_file(path)?;
        }
        let (scope, kernel_scope) = crate::kernel::scope::resolve(&cfg.scope)?;
        let unsupported = |e: anyhow::Error| Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}"));
        let layout = TaskLayout::from_running_kernel().map_err(unsupported)?;
        let agent_layout = AgentLayout::from_running_kernel().map_err(unsupported)?;
        log::debug!("agent layout: {agent_layout:?}");
        // `--all` needs no process tree: every call is counted where it is made.
        let probes = if scope == Scope::All { AGENT_PROBES } else { AGENT_TREE_PROBES };
        let mut tracer = Tracer::load(
            &layout,
            probes,
            &TracerOptions {
                ring_bytes: 0,
                verbose: cfg.verbose,
                scope: kernel_scope.clone(),
                argv: false,
                boundaries: cfg.boundaries,
                attached_scope: true,
                agent: Some(AgentKernelOptions {
                    layout: agent_layout,
                    max_series: cfg.max_series,
                    max_in_flight: cfg.max_in_flight,
                    max_misses: cfg.max_misses,
                }),
                call_sums: false,
            },
        )
        .map_err(unsupported)?;
        for w in &tracer.attach.warnings {
            eprintln!("execprof: warning: {w}");
        }
        let seeded = crate::commands::run::seed(&mut tracer, &scope, &kernel_scope);
        if matches!(scope, Scope::Pids { .. }) && seeded.is_empty() {
            return Err(Failure::usage("--pid: every process given exited before it could be counted; nothing to watch").into());
        }
        if cfg.sample_hz > 0 {
            tracer.start_sampling(cfg.sample_hz).map_err(|e| {
                Failure::new(code::UNSUPPORTED_KERNEL, format!("{e:#}; run with --sample-hz 0 to count without kernel stacks"))
            })?;
        }
        let maps = tracer.take_aggregates(cfg.max_series)?;
        let mount = crate::kernel::scope::cgroup2_mount().ok();
        let source = AggregateSource::new(maps, mount, cfg.idle);
        // Only when asked: while the descriptor is held the kernel times every run of every
        // BPF program on the machine, not only the agent's.
        let run_stats = if cfg.probe_costs {
            let fd = Tracer::enable_run_stats();
            if fd.is_none() {
                eprintln!("execprof: warning: --probe-costs: this kernel refuses BPF run-time statistics; the report has no program costs");
            }
            fd
        } else {
            None
        };
        Ok(Self { tracer, source, scope, run_stats })
    }

    /// Whether the watched processes are all gone (`--pid`; never for the other scopes).
    pub(crate) fn scope_gone(&self) -> bool {
        matches!(self.scope, Scope::Pids { .. }) && self.tracer.traced_alive() == 0
    }

    /// The scope and the hooks, for the first line the user sees.
    pub(crate) fn describe(&self) -> String {
        format!("{} ({})", self.scope.describe(), boundaries_name(self.tracer.boundaries))
    }
}

/// What the agent gives up once its programs are attached.
#[derive(Clone, Copy)]
enum GiveUp<'a> {
    /// Root, for this user (`--user`).
    Root(&'a RunAs),
    /// The capabilities a non-root agent was started with (the packaged unit's).
    Capabilities,
}

impl<'a> GiveUp<'a> {
    /// Root without `--user` keeps root; a non-root process gives up whatever capabilities it holds.
    fn of(user: Option<&'a RunAs>) -> Option<Self> {
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        match user {
            Some(u) => Some(GiveUp::Root(u)),
            None if euid != 0 && privileges::effective_caps() != 0 => Some(GiveUp::Capabilities),
            None => None,
        }
    }
}

/// Runs the agent; returns the exit code.
pub fn agent(cfg: AgentConfig) -> Result<i32> {
    // The endpoint's files are read before anything is loaded: a mistake in them is one message.
    let web = match cfg.metrics.as_ref().and_then(|m| m.web_config.as_deref()) {
        Some(path) => WebConfig::load(path).map_err(|e| Failure::usage(format!("{e:#}")))?,
        None => WebConfig::default(),
    };
    let AgentSession { tracer, mut source, scope, run_stats } = AgentSession::start(&cfg, "agent")?;
    let mut totals = AgentTotals::new(cfg.max_totals);
    let started = Instant::now();
    let started_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the event loop")?;
    // Privileges are given up once everything is attached (below): what needs them is read first.
    let give_up = GiveUp::of(cfg.user.as_ref());
    // Read while privileged: the symbols' addresses, the JSON file's directory.
    let symbols = Rc::new(match give_up {
        None => KernelSymbolizer::new(),
        Some(GiveUp::Root(_)) => KernelSymbolizer::snapshot()
            .map_err(|e| Failure::new(code::ERROR, format!("--user: reading the kernel's symbols first: {e:#}")))?,
        // Without CAP_SYSLOG where the kernel hides addresses: frames unnamed, counted as such.
        Some(GiveUp::Capabilities) => KernelSymbolizer::snapshot().unwrap_or_else(|e| {
            eprintln!("execprof: warning: {e:#}; the sampled frames stay unnamed (counted as unknown addresses)");
            KernelSymbolizer::new()
        }),
    });
    let mut json_file = match (&give_up, &cfg.json) {
        (Some(_), Some(path)) => Some(
            std::fs::File::create(path)
                .map_err(|e| Failure::new(code::ERROR, format!("creating the JSON report {} failed: {e}", path.display())))?,
        ),
        _ => None,
    };
    let endpoint = match &cfg.metrics {
        Some(m) => Some(runtime.block_on(Endpoint::start(m, &cfg, run_stats.is_some(), web, symbols.clone()))?),
        None => None,
    };
    match give_up {
        Some(GiveUp::Root(user)) => {
            let kept = privileges::drop_privileges(user, || tracer.bpf_works())?;
            eprintln!(
                "execprof: agent now runs as {} (uid {}, gid {}) with {}",
                escape_name(user.name.as_bytes()),
                user.uid,
                user.gid,
                kept.describe()
            );
        }
        Some(GiveUp::Capabilities) => {
            let kept = privileges::drop_capabilities(|| tracer.bpf_works())?;
            // SAFETY: getuid cannot fail.
            let uid = unsafe { libc::getuid() };
            eprintln!(
                "execprof: agent attached; it gave up the capabilities it was started with and runs as uid {uid} with {}",
                kept.describe()
            );
        }
        None => {}
    }
    eprintln!(
        "execprof: agent counting the exec attempts and fork-family calls of {} ({}){}; SIGTERM or Ctrl-C stops it",
        scope.describe(),
        boundaries_name(tracer.boundaries),
        cfg.duration.map(|d| format!(" for {} s", d.as_secs_f64())).unwrap_or_default()
    );
    let tree = matches!(scope, Scope::Pids { .. });
    let mut last = runtime.block_on(watch(&mut source, &mut totals, &cfg, &tracer, tree, endpoint.as_ref()))?;
    // The last read, after the loop: nothing counted before the end is left out.
    let poll = source.poll(Instant::now())?;
    fold(&poll, &mut totals);
    last.counters = poll.counters;
    last.entries = poll.entries;
    last.removed += poll.removed;
    let report = AgentReport::new(
        (&scope, tracer.boundaries),
        (started_unix_s, started.elapsed()),
        Capacities {
            max_series: source.capacity(),
            max_in_flight: profiler_common::aggregate::slots(cfg.max_in_flight),
            max_totals: cfg.max_totals,
            series_in_kernel: last.entries,
            series_removed: last.removed,
        },
        &totals,
        AgentLosses::new(&last.counters, totals.series.folded, tracer.runs_skipped()),
        (cfg.sample_hz, sampled(&totals, cfg.sample_hz, &symbols)?),
        if run_stats.is_some() { tracer.program_costs() } else { Vec::new() },
    );
    drop(run_stats);
    print!("{}", crate::report::agent::render(&report));
    if let Some(path) = &cfg.json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        let written = match json_file.as_mut() {
            Some(f) => std::io::Write::write_all(f, text.as_bytes()),
            None => std::fs::write(path, text),
        };
        written.map_err(|e| Failure::new(code::ERROR, format!("writing the JSON report {} failed: {e}", path.display())))?;
    }
    Ok(0)
}

/// Where the kernel time goes per exec outcome, from the samples' stacks (None without
/// sampling): symbolized and attributed to phases and functions as `run` does.
fn sampled(
    totals: &AgentTotals,
    sample_hz: u64,
    symbols: &KernelSymbolizer,
) -> Result<Option<crate::analysis::attribution::SampledAttribution>> {
    if sample_hz == 0 {
        return Ok(None);
    }
    let model = crate::analysis::phases::PhaseModel::builtin()?;
    Ok(Some(totals.stacks.clone().finish(symbols, &model, |o| totals.outcome_stats(o), &[])))
}

/// A poll's deltas into the totals.
pub(crate) fn fold(poll: &Poll, totals: &mut AgentTotals) {
    for (key, delta) in &poll.deltas {
        totals.series.add(key.clone(), delta);
    }
    for (cgroup, dir, counts) in &poll.misses {
        totals.misses.add(cgroup, dir, counts);
    }
    for s in &poll.stacks {
        totals.add_stack(s.call, (s.outcome, s.check), &s.frames, s.samples);
    }
}

/// The metrics endpoint: serving from what each read of the kernel's maps updates.
struct Endpoint {
    shared: Shared,
    /// Names the samples' stacks once per distinct stack.
    symbols: Rc<KernelSymbolizer>,
    /// The samples' stacks, each named once.
    stack_names: std::cell::RefCell<StackNames>,
    model: PhaseModel,
    /// The capacities the maps' gauges show.
    max_series: u64,
    max_totals: u64,
    max_label_sets: u64,
    program_stats: bool,
    /// The container runtimes asked for the names of the containers seen.
    runtimes: Runtimes,
}

impl Endpoint {
    /// Binds the address and starts serving (before the first read: `/readyz` says 503 until
    /// then).
    async fn start(
        m: &MetricsConfig,
        cfg: &AgentConfig,
        program_stats: bool,
        web: WebConfig,
        symbols: Rc<KernelSymbolizer>,
    ) -> Result<Self> {
        let listener = crate::serve::bind(m.listen).await.map_err(|e| Failure::new(code::ERROR, format!("{e:#}")))?;
        let state = MetricsState {
            exposition: Exposition::new(ProgramLabels::new(m.allow.clone(), m.programs), m.max_series, m.idle),
            own: OwnFigures { sample_hz: cfg.sample_hz, started: Some(SystemTime::now()), program_stats, ..OwnFigures::default() },
        };
        let scheme = if web.tls.is_some() { "https" } else { "http" };
        let auth = if web.auth.is_some() { "; basic auth" } else { "" };
        // Sampled stacks kept for /debug/pprof/exec, at most 64 rows per second of the span
        // on average beyond the first 100,000.
        let profiles = (cfg.sample_hz > 0).then(|| {
            let rows = 100_000 + 64 * m.profile_window.as_secs() as usize;
            Arc::new(Mutex::new(ProfileWindow::new(m.profile_window, rows, Instant::now())))
        });
        let shared = Shared {
            metrics: Arc::new(Mutex::new(state)),
            ready: Arc::new(AtomicBool::new(false)),
            web,
            profiles,
            sample_hz: cfg.sample_hz,
            started: SystemTime::now(),
        };
        let local = listener.local_addr().context("reading the listening address")?;
        tokio::spawn(crate::serve::serve(listener, shared.clone()));
        eprintln!("execprof: metrics at {scheme}://{local}/metrics (and /healthz, /readyz{auth})");
        Ok(Self {
            shared,
            symbols,
            stack_names: Default::default(),
            model: PhaseModel::builtin()?,
            max_series: u64::from(cfg.max_series),
            max_totals: cfg.max_totals as u64,
            max_label_sets: m.max_series as u64,
            program_stats,
            runtimes: Runtimes::new(m.runtimes.clone()),
        })
    }

    /// Asks the container runtimes about the containers in `poll` not asked about yet, so
    /// their first figures carry their names.
    async fn name_containers(&self, poll: &Poll) {
        let new: std::collections::BTreeSet<String> = {
            let state = self.shared.metrics.lock().unwrap_or_else(|p| p.into_inner());
            poll.deltas
                .iter()
                .flat_map(|(key, _)| CgroupNames::container_ids(&key.cgroup))
                .filter(|id| !state.exposition.containers.asked(id))
                .collect()
        };
        for id in new {
            let info = self.runtimes.ask(&id).await;
            self.shared.metrics.lock().unwrap_or_else(|p| p.into_inner()).exposition.containers.insert(&id, info);
        }
    }

    /// Folds one read into the metrics.
    fn update(&self, poll: &Poll, last: &Last, totals: &AgentTotals, tracer: &Tracer) {
        let now = Instant::now();
        // Each exec stack named once, for the phase counts and the profile window alike.
        let mut names = self.stack_names.borrow_mut();
        let samples: Vec<_> = poll
            .stacks
            .iter()
            .filter(|s| s.call == profiler_common::aggregate::CALL_EXEC)
            .map(|s| (&s.series, names.named(&s.frames, &*self.symbols, &self.model), s.samples))
            .collect();
        drop(names);
        let window_dropped = self.shared.profiles.as_ref().map(|window| {
            let mut window = window.lock().unwrap_or_else(|p| p.into_inner());
            window.push(now, samples.iter().map(|(series, stack, n)| (*series, stack.clone(), *n)), &poll.deltas);
            window.dropped_samples
        });
        let mut state = self.shared.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let MetricsState { exposition, own } = &mut *state;
        for (key, delta) in &poll.deltas {
            exposition.add(key, delta, now);
        }
        for (_, directory, counts) in &poll.misses {
            exposition.add_misses(directory, counts, now);
        }
        for (series, stack, n) in &samples {
            exposition.add_samples(&series.outcome, &stack.phase, *n);
        }
        exposition.age(now);
        own.losses = AgentLosses::new(&poll.counters, totals.series.folded, tracer.runs_skipped()).pairs();
        if let Some(dropped) = window_dropped {
            own.losses.push(("samples_dropped_from_profile_window", dropped));
        }
        own.maps = vec![
            ("kernel_series", poll.entries as u64, self.max_series),
            ("agent_totals", totals.series.len() as u64, self.max_totals),
            ("metric_label_sets", exposition.series.len() as u64, self.max_label_sets),
        ];
        own.removed = last.removed as u64;
        if self.program_stats {
            own.programs = tracer.program_costs();
        }
        own.reads += 1;
        own.last_read_unix_s = SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.shared.ready.store(true, Ordering::Release);
    }
}

/// What the loop leaves for the report.
struct Last {
    counters: [u64; profiler_common::aggregate::agg_counter::COUNT as usize],
    entries: usize,
    removed: usize,
}

/// Reads the aggregates every interval until a signal, `--duration`, or (`--pid`) the
/// processes are gone.
async fn watch(
    source: &mut AggregateSource,
    totals: &mut AgentTotals,
    cfg: &AgentConfig,
    tracer: &Tracer,
    tree: bool,
    endpoint: Option<&Endpoint>,
) -> Result<Last> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut int, mut term, mut hup) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?, signal(SignalKind::hangup())?);
    let deadline = cfg.duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Last { counters: Default::default(), entries: 0, removed: 0 };
    loop {
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {
                let poll = source.poll(Instant::now())?;
                fold(&poll, totals);
                last.counters = poll.counters;
                last.entries = poll.entries;
                last.removed += poll.removed;
                if let Some(endpoint) = endpoint {
                    endpoint.name_containers(&poll).await;
                    endpoint.update(&poll, &last, totals, tracer);
                }
                if tree && tracer.traced_alive() == 0 {
                    eprintln!("execprof: the processes watched have all exited");
                    return Ok(last);
                }
            }
            _ = int.recv() => return Ok(last),
            _ = term.recv() => return Ok(last),
            _ = hup.recv() => return Ok(last),
            () = until => return Ok(last),
        }
    }
}

fn boundaries_name(b: crate::model::meta::Boundaries) -> &'static str {
    use crate::model::meta::Boundaries;
    match b {
        Boundaries::Fentry => "fentry/fexit on the syscalls' functions",
        Boundaries::RawTracepoints => "raw sys_enter/sys_exit tracepoints",
        Boundaries::SyscallEvents => "per-syscall events",
    }
}
