//! Loads the eBPF object for this kernel, attaches the probe table, seeds the traced set, and
//! hands over the ring buffer for the event loop (`live`) to drain.

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, PerCpuValues, RingBuf},
    programs::{
        FEntry, FExit, KProbe, PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use profiler_common::{
    Attempt, SyscallEnterRecord, counter, id_flags, kernel_features,
    limits::{self, IDS_PER_ENTRY},
    names,
};

use crate::kernel::maps::take_map;
use crate::{
    kernel::layout::TaskLayout,
    kernel::probes::{self, AttachOutcome, ProbeSpec},
    model::meta::{Boundaries, ExactPlan, LossCounters, Mechanism, ProgramCost},
};

static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/execprof-ebpf"));

#[cfg(test)]
pub(crate) fn ebpf_object() -> &'static [u8] {
    EBPF_OBJECT
}

pub(crate) struct TracerOptions {
    pub ring_bytes: u32,
    pub verbose: bool,
    /// Which processes the kernel side traces.
    pub scope: crate::kernel::scope::KernelScope,
    /// `--argv`: read each exec attempt's arguments at its enter.
    pub argv: bool,
    /// `--boundaries`.
    pub boundaries: crate::kernel::boundaries::BoundaryRequest,
    /// A running-system scope (`--pid`, `--cgroup`, `--all`), not a launched command: what
    /// `--boundaries auto` weighs where fentry/fexit are refused.
    pub attached_scope: bool,
    /// `execprof agent`: fold every call into the in-kernel aggregates, send no records.
    pub agent: Option<AgentKernelOptions>,
    /// Exact mode may sum each exec attempt's probed calls in the kernel (false: every call
    /// is sent on its own, as `--trace`'s timelines need).
    pub call_sums: bool,
}

/// What the agent's load sets: the offsets of its reads and its maps' capacities.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AgentKernelOptions {
    pub layout: crate::kernel::layout::AgentLayout,
    pub max_series: u32,
    pub max_in_flight: u32,
    pub max_misses: u32,
}

pub(crate) struct Tracer {
    ebpf: Ebpf,
    ids: Array<MapData, [u8; IDS_PER_ENTRY]>,
    tree_alive: PerCpuArray<MapData, i64>,
    counters: PerCpuArray<MapData, u64>,
    /// Diagnostics from the eBPF side (`-v` only), for the event loop to drain.
    logger: Option<EbpfLog>,
    pub attach: AttachOutcome,
    /// Which hooks time the calls.
    pub boundaries: Boundaries,
    /// Why fentry/fexit do not, when they were wanted and refused.
    pub boundaries_note: Option<String>,
    /// Exact mode's return probes made through tracefs (removed when the tracer is dropped).
    return_probes: Vec<crate::kernel::return_probes::ReturnProbe>,
}

/// aya-log's reader of the eBPF side's log ring buffer.
pub(crate) type EbpfLog = aya_log::EbpfLogger<&'static dyn log::Log>;

impl Tracer {
    pub(crate) fn load(layout: &TaskLayout, probes: &[ProbeSpec], opts: &TracerOptions) -> Result<Self> {
        let mut ebpf = load_object(layout, opts)?;
        let (boundaries, boundaries_note) = crate::kernel::boundaries::choose(&mut ebpf, opts.boundaries, opts.attached_scope)?;
        let attach = probes::attach_all(&mut ebpf, probes, boundaries == Boundaries::RawTracepoints)?;
        let ids = take_map(&mut ebpf, names::MAP_IDS)?;
        let tree_alive = take_map(&mut ebpf, names::MAP_TREE_ALIVE)?;
        let counters = take_map(&mut ebpf, names::MAP_COUNTERS)?;
        // Diagnostics from the eBPF side (rare paths only); a missing logger is not an error.
        let logger = opts
            .verbose
            .then(|| aya_log::EbpfLogger::init(&mut ebpf))
            .and_then(|r| r.map_err(|e| log::debug!("eBPF logger not started: {e}")).ok());
        Ok(Self { ebpf, ids, tree_alive, counters, logger, attach, boundaries, boundaries_note, return_probes: Vec::new() })
    }

    /// The eBPF side's logger, when `-v` asked for one (once).
    pub(crate) fn take_logger(&mut self) -> Option<EbpfLog> {
        self.logger.take()
    }

    /// Puts a process into the traced set: its execs and its descendants are recorded. Call
    /// it before the process runs (a suspended child, or this process before it forks): the
    /// kernel side updates the same entries as the tree forks and exits.
    pub(crate) fn trace_process(&mut self, tgid: u32) -> Result<()> {
        let index = tgid / IDS_PER_ENTRY as u32;
        let context = || format!("adding process {tgid} to the traced set");
        let mut entry = self.ids.get(&index, 0).with_context(|| format!("{}: its id is above this kernel's pid_max", context()))?;
        if entry[tgid as usize % IDS_PER_ENTRY] & id_flags::TRACED != 0 {
            // Marked already (by its parent's fork, in a running-system scope): counted once.
            return Ok(());
        }
        entry[tgid as usize % IDS_PER_ENTRY] |= id_flags::TRACED;
        self.ids.set(index, entry, 0).with_context(context)?;
        let mut alive: Vec<i64> = self.tree_alive.get(&0, 0).with_context(context)?.iter().copied().collect();
        alive[0] += 1;
        self.tree_alive.set(0, PerCpuValues::try_from(alive).with_context(context)?, 0).with_context(context)
    }

    /// Number of traced processes still alive, by the kernel's own bookkeeping.
    pub(crate) fn traced_alive(&self) -> usize {
        self.tree_alive.get(&0, 0).map_or(0, |per_cpu| per_cpu.iter().sum::<i64>().max(0) as usize)
    }

    /// The kernel side's loss counters, and, read once the tree is gone, the probed calls
    /// whose return never came (a kretprobe can miss returns: their entries stay behind).
    pub(crate) fn losses(&self) -> Result<LossCounters> {
        let mut out = Vec::with_capacity(counter::COUNT as usize + 1);
        for (i, name) in counter::NAMES.iter().enumerate() {
            let per_cpu = self.counters.get(&(i as u32), 0).context("reading loss counters")?;
            // 32-bit images are a loss only to the per-syscall events, which never see them:
            // elsewhere the counter is not one, and the report does not list it.
            if i as u32 == counter::NON_NATIVE_EXEC && self.boundaries != Boundaries::SyscallEvents {
                continue;
            }
            out.push(((*name).to_owned(), per_cpu.iter().sum()));
        }
        let left = match self.ebpf.map(names::MAP_OPEN_CALLS) {
            Some(map) => aya::maps::Array::<_, [u64; limits::MAX_PROBED as usize]>::try_from(map)
                .map_or(0, |m| m.iter().filter_map(|t| t.ok()).map(|t| t.iter().filter(|&&c| c != 0).count() as u64).sum()),
            None => 0,
        };
        out.push((crate::model::meta::ENTRIES_WITHOUT_RETURN.to_owned(), left));
        out.push((crate::model::meta::RUNS_SKIPPED.to_owned(), self.runs_skipped()));
        out.push((crate::model::meta::RETURNS_MISSED.to_owned(), self.returns_missed()));
        Ok(LossCounters(out))
    }

    /// The runs of this process's programs the kernel skipped because the same program was
    /// already running on that CPU (`recursion_misses` in each program's fdinfo, Linux 5.12+;
    /// 0 where the kernel does not count them). Preemptible BPF makes this more than a
    /// theoretical loss: a program preempted mid-run blocks every other task's run of it on
    /// that CPU until it is scheduled again.
    pub(crate) fn runs_skipped(&self) -> u64 {
        use std::os::fd::{AsFd, AsRawFd};
        self.ebpf
            .programs()
            .filter_map(|(_, p)| p.fd().ok())
            .filter_map(|fd| std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd())).ok())
            .filter_map(|text| crate::kernel::facts::fdinfo_field(&text, "recursion_misses"))
            .sum()
    }

    /// The enter records exec attempts still in flight hold back (`profiler_common::Attempt`):
    /// read once tracing has stopped and the ring buffer is drained, they go to the pipeline
    /// last, as the enters of attempts that never returned.
    pub(crate) fn held_enters(&self) -> Result<Vec<SyscallEnterRecord>> {
        let Some(map) = self.ebpf.map(names::MAP_ATTEMPTS) else { return Ok(Vec::new()) };
        let cells = Array::<_, Attempt>::try_from(map).context("reading the exec attempts in flight")?;
        let mut held = Vec::new();
        for cell in cells.iter() {
            let a = cell.context("reading the exec attempts in flight")?;
            if a.owner != 0 && a.held != 0 {
                held.push(a.enter);
            }
        }
        held.sort_by_key(|e| e.header.ts_ns);
        Ok(held)
    }

    /// Samples kernel stacks at `hz` on every online CPU; the program keeps only samples of
    /// traced threads inside an exec attempt.
    pub(crate) fn start_sampling(&mut self, hz: u64) -> Result<()> {
        let cpus = online_cpus()?;
        let program: &mut PerfEvent = self
            .ebpf
            .program_mut(names::PROG_SAMPLE)
            .ok_or_else(|| anyhow!("program {} missing from the eBPF object", names::PROG_SAMPLE))?
            .try_into()?;
        program.load().context("loading the sampling program")?;
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .with_context(|| format!("attaching cpu-clock sampling on CPU {cpu} (perf_event_open)"))?;
        }
        Ok(())
    }

    /// Exact mode: entry and return probes on every function of the plan: fentry/fexit where
    /// the function has BTF and the kernel takes trampolines (a fraction of a kprobe's cost),
    /// kprobe/kretprobe otherwise. The plan keeps the functions that attached, each with the
    /// mechanism that times it; a function that attaches neither way is left out with a
    /// warning naming it and the kernel's answer. Fails when none attaches.
    pub(crate) fn attach_exact(&mut self, plan: &mut ExactPlan) -> Result<Vec<String>> {
        let btf = crate::kernel::vmlinux::aya().ok();
        // Set once trampolines prove unusable here (refused, or not built in): why.
        let mut no_trampolines: Option<String> = if btf.is_none() { Some("no kernel BTF".into()) } else { None };
        let (mut kept, mut warnings) = (Vec::new(), Vec::new());
        if let Ok(tracefs) = ensure_tracefs() {
            let removed = crate::kernel::return_probes::remove_stale(&tracefs);
            if removed > 0 {
                log::info!("removed {removed} return probe(s) an execprof that was killed left in {}/kprobe_events", tracefs.display());
            }
        }
        for mut f in std::mem::take(&mut plan.functions) {
            let mut mechanism = None;
            if let (Some(btf), None, false) = (&btf, &no_trampolines, f.by_address) {
                match self.attach_trampolines(f.slot, &f.raw_name, btf) {
                    Ok(()) => mechanism = Some(Mechanism::Fentry),
                    // Not in BTF (a compiler-suffixed name): kprobes for this one.
                    Err(aya::programs::ProgramError::Btf(_)) => {}
                    // Trampolines work here (the boundaries run on them), not on this
                    // function: 5.10 refuses one with a struct passed by value
                    // (do_execveat_common's `struct user_arg_ptr`). Kprobes for this one.
                    Err(e) if self.boundaries == Boundaries::Fentry => {
                        log::debug!("exact mode: {} by kprobe: fentry/fexit refused it: {e:#}", f.raw_name);
                        self.detach_trampolines(f.slot);
                    }
                    Err(e) => no_trampolines = Some(format!("{e:#}")),
                }
            }
            if mechanism.is_none() {
                match self.attach_kprobes(&f) {
                    Ok(()) => mechanism = Some(Mechanism::Kprobe),
                    Err(e) => warnings.push(format!(
                        "exact mode: {} ({}{}) not probed: {e:#}",
                        f.function,
                        f.raw_name,
                        if f.by_address { format!(" at {:#x}", f.address) } else { String::new() }
                    )),
                }
            }
            if let Some(m) = mechanism {
                f.mechanism = m;
                kept.push(f);
            }
        }
        plan.functions = kept;
        if plan.functions.is_empty() {
            let why = warnings.first().map_or("no candidates", String::as_str);
            match &no_trampolines {
                Some(t) => anyhow::bail!("no exec-path function could be probed: fentry/fexit: {t}; kprobes: {why}"),
                None => anyhow::bail!("no exec-path function could be probed: {why}"),
            }
        }
        if let Some(t) = no_trampolines
            && plan.functions.iter().any(|f| !f.by_address)
        {
            warnings.push(format!("exact mode: fentry/fexit not usable here ({t}): kprobes time every function, at a higher cost"));
        }
        Ok(warnings)
    }

    /// fentry/fexit programs of `slot` on the kernel function `name` (by its BTF).
    fn attach_trampolines(&mut self, slot: u32, name: &str, btf: &aya::Btf) -> std::result::Result<(), aya::programs::ProgramError> {
        let entry = format!("{}{slot}", names::PROG_EXACT_FENTRY_PREFIX);
        let exit = format!("{}{slot}", names::PROG_EXACT_FEXIT_PREFIX);
        // Both are in every object this execprof builds; a missing one is a build mismatch.
        let missing = || aya::programs::ProgramError::UnexpectedProgramType;
        {
            let p: &mut FEntry = self.ebpf.program_mut(&entry).ok_or_else(missing)?.try_into()?;
            p.load(name, btf)?;
            p.attach()?;
        }
        let p: &mut FExit = self.ebpf.program_mut(&exit).ok_or_else(missing)?.try_into()?;
        p.load(name, btf)?;
        p.attach()?;
        Ok(())
    }

    /// Unloads `slot`'s fentry/fexit programs (what attached of them), so its kprobes can
    /// time the function alone.
    fn detach_trampolines(&mut self, slot: u32) {
        let entry = format!("{}{slot}", names::PROG_EXACT_FENTRY_PREFIX);
        let exit = format!("{}{slot}", names::PROG_EXACT_FEXIT_PREFIX);
        if let Some(p) = self.ebpf.program_mut(&entry).and_then(|p| <&mut FEntry>::try_from(p).ok()) {
            let _ = p.unload();
        }
        if let Some(p) = self.ebpf.program_mut(&exit).and_then(|p| <&mut FExit>::try_from(p).ok()) {
            let _ = p.unload();
        }
    }

    /// kprobe/kretprobe programs of the function's slot (by name, or by address when the name
    /// is ambiguous).
    /// The return probe is made through tracefs with a pool of instances sized to the machine
    /// (`kernel::return_probes`) where tracefs takes it, so concurrent execs do not lose
    /// returns; by the kprobe PMU (the kernel's default pool) otherwise.
    fn attach_kprobes(&mut self, f: &crate::model::meta::ProbedFunction) -> Result<()> {
        use std::os::fd::AsFd as _;

        use crate::kernel::return_probes::{ReturnProbe, Target};
        let (name, offset) = if f.by_address { ("", f.address) } else { (f.raw_name.as_str(), 0) };
        for prefix in [names::PROG_EXACT_ENTRY_PREFIX, names::PROG_EXACT_RETURN_PREFIX] {
            let prog = format!("{prefix}{}", f.slot);
            let p: &mut KProbe = self.ebpf.program_mut(&prog).ok_or_else(|| anyhow!("program {prog} missing"))?.try_into()?;
            if p.fd().is_err() {
                p.load()?;
            }
            if prefix == names::PROG_EXACT_RETURN_PREFIX
                && let Ok(tracefs) = ensure_tracefs()
            {
                let target = if f.by_address { Target::Address(f.address) } else { Target::Symbol(name) };
                match ReturnProbe::attach(&tracefs, p.fd()?.as_fd(), target, f.slot) {
                    Ok(probe) => {
                        self.return_probes.push(probe);
                        continue;
                    }
                    Err(e) => {
                        log::debug!("exact mode: {}'s return probe by the kprobe PMU, with the kernel's default pool: {e:#}", f.raw_name);
                    }
                }
            }
            p.attach(name, offset)?;
        }
        Ok(())
    }

    /// The returns of exact mode's return probes the kernel missed (no instance free, or the
    /// probe already running on that CPU): counted where tracefs made the probe.
    pub(crate) fn returns_missed(&self) -> u64 {
        self.return_probes.iter().filter_map(|p| p.missed()).sum()
    }

    /// A uprobe on `main` of `program`, so a step's time from image start to `main`
    /// (dynamic loader, libc start-up) is measured.
    pub(crate) fn attach_main(&mut self, program: &std::path::Path) -> Result<()> {
        let p: &mut aya::programs::UProbe = self
            .ebpf
            .program_mut(names::PROG_MAIN_ENTRY)
            .ok_or_else(|| anyhow!("program {} missing", names::PROG_MAIN_ENTRY))?
            .try_into()?;
        p.load()?;
        p.attach("main", program, aya::programs::uprobe::UProbeScope::AllProcesses)?;
        Ok(())
    }

    /// Turns on the kernel's BPF run-time statistics for as long as the returned fd lives
    /// (BPF_ENABLE_STATS: nothing to restore afterwards). None where the kernel refuses.
    pub(crate) fn enable_run_stats() -> Option<std::os::fd::OwnedFd> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| log::debug!("BPF run-time statistics unavailable: {e}")).ok()
    }

    /// Runs and run time of every loaded program so far (needs [`Tracer::enable_run_stats`]).
    pub(crate) fn program_costs(&self) -> Vec<ProgramCost> {
        let mut costs: Vec<ProgramCost> = self
            .ebpf
            .programs()
            .filter_map(|(name, p)| {
                let info = p.info().ok()?;
                Some(ProgramCost { program: name.to_owned(), runs: info.run_count(), run_ns: info.run_time().as_nanos() as u64 })
            })
            .filter(|c| c.runs > 0)
            .collect();
        costs.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then_with(|| a.program.cmp(&b.program)));
        costs
    }

    /// Whether a bpf() call on this process's loaded programs succeeds (reading one's information):
    /// how `agent --user` learns whether the kernel still wants CAP_BPF for its map reads.
    pub(crate) fn bpf_works(&self) -> bool {
        self.ebpf.programs().find(|(_, p)| p.fd().is_ok()).is_some_and(|(_, p)| p.info().is_ok())
    }

    /// The agent's aggregates (once).
    pub(crate) fn take_aggregates(&mut self, capacity: u32) -> Result<crate::kernel::aggregates::AggregateMaps> {
        crate::kernel::aggregates::AggregateMaps::take(&mut self.ebpf, capacity)
    }

    /// The ring buffer the records arrive in (once).
    pub(crate) fn take_ring(&mut self) -> Result<RingBuf<MapData>> {
        take_map(&mut self.ebpf, names::MAP_EVENTS)
    }

    /// Records lost so far because the ring buffer was full (cheap: one per-CPU read).
    pub(crate) fn ring_full_so_far(&self) -> u64 {
        self.counters.get(&counter::RING_FULL, 0).map_or(0, |per_cpu| per_cpu.iter().sum())
    }
}

/// Loads execprof's eBPF object with this kernel's struct offsets; nothing is attached yet.
pub(crate) fn load_object(layout: &TaskLayout, opts: &TracerOptions) -> Result<Ebpf> {
    let memlock_left = bump_memlock_rlimit();
    let tracefs = ensure_tracefs()?;
    // Without the point-of-no-return tracepoint (before 6.10) the kernel's copy of the name
    // is read at the new image instead.
    let name_at_loaded = u64::from(!tracefs.join("events/sched/sched_prepare_exec").exists());
    let id_entries = crate::kernel::facts::pid_max()?.div_ceil(IDS_PER_ENTRY as u32);
    let argv = u64::from(opts.argv);
    let call_sums = u64::from(opts.call_sums);
    // bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15), for the raw syscall
    // tracepoints' and the per-syscall events' plain loads; not for the agent, which also
    // reads fields 6.1's verifier refuses as plain loads there (mm's `atomic_long_t` RSS
    // counters: "Type 'atomic_long_t' is not a struct").
    let features = layout.bpf_features;
    let btf_loads = u64::from(opts.agent.is_none() && features & kernel_features::TASK_PT_REGS != 0);
    // Without compare-and-exchange an attempt claims its cell in ATTEMPT_OWNERS.
    let attempt_owners =
        if opts.agent.is_none() && features & kernel_features::FETCH_ATOMICS == 0 { profiler_common::call_sums::TABLE } else { 1 };
    if opts.scope.kind == profiler_common::scope::CGROUP
        && features & kernel_features::ANCESTOR_CGROUP_ID == 0
        && (layout.cgroup_ancestor_ids == 0 || layout.cgroups == 0)
    {
        anyhow::bail!(
            "--cgroup: this kernel's tracing programs have no bpf_get_current_ancestor_cgroup_id and its \
             cgroups no ancestor_ids to read instead; trace the processes by --pid, or the command itself"
        );
    }
    for missing in crate::kernel::features::missing(features) {
        log::info!("this kernel has {missing}");
    }
    let aggregate = u64::from(opts.agent.is_some());
    // Only the agent fills the aggregates; a run keeps them at one entry each. The agent
    // sends no records: its ring buffer is one page.
    let agent = opts.agent.unwrap_or(AgentKernelOptions { layout: Default::default(), max_series: 1, max_in_flight: 1, max_misses: 1 });
    // IN_FLIGHT and PROCESSES are direct-mapped: a power of two of slots.
    let in_flight = profiler_common::aggregate::slots(agent.max_in_flight);
    let in_flight_mask = u64::from(in_flight - 1);
    let ring_bytes = if opts.agent.is_some() { page_size() } else { opts.ring_bytes };
    let l = &agent.layout;
    let mut loader = EbpfLoader::new();
    loader
        .override_global(names::GLOBAL_TASK_PID, &layout.pid, true)
        .override_global(names::GLOBAL_TASK_TGID, &layout.tgid, true)
        .override_global(names::GLOBAL_TASK_REAL_PARENT, &layout.real_parent, true)
        .override_global(names::GLOBAL_TASK_MIN_FLT, &layout.min_flt, true)
        .override_global(names::GLOBAL_TASK_MAJ_FLT, &layout.maj_flt, true)
        .override_global(names::GLOBAL_TASK_SIGNAL, &layout.signal, true)
        .override_global(names::GLOBAL_SIGNAL_LIVE, &layout.signal_live, true)
        .override_global(names::GLOBAL_BPRM_FILENAME, &layout.bprm_filename, true)
        .override_global(names::GLOBAL_TASK_PENDING_SIGNAL, &layout.pending_signal, true)
        .override_global(names::GLOBAL_SIGNAL_GROUP_EXEC_TASK, &layout.group_exec_task, true)
        .override_global(names::GLOBAL_THREAD_STATUS, &layout.thread_status, true)
        .override_global(names::GLOBAL_BTF_LOADS, &btf_loads, true)
        .override_global(names::GLOBAL_KERNEL_FEATURES, &features, true)
        .override_global(names::GLOBAL_TASK_STACK, &layout.stack, true)
        .override_global(names::GLOBAL_PT_REGS_IN_STACK, &layout.pt_regs_in_stack, true)
        .override_global(names::GLOBAL_TASK_STATE, &layout.state, true)
        .override_global(names::GLOBAL_TASK_CGROUPS, &layout.cgroups, true)
        .override_global(names::GLOBAL_CSS_SET_DFL_CGRP, &layout.css_set_dfl_cgrp, true)
        .override_global(names::GLOBAL_CGROUP_LEVEL_FIELD, &layout.cgroup_level, true)
        .override_global(names::GLOBAL_CGROUP_ANCESTOR_IDS, &layout.cgroup_ancestor_ids, true)
        .override_global(names::GLOBAL_SCOPE, &opts.scope.kind, true)
        .override_global(names::GLOBAL_CGROUP_ID, &opts.scope.cgroup_id, true)
        .override_global(names::GLOBAL_CGROUP_LEVEL, &opts.scope.cgroup_level, true)
        .override_global(names::GLOBAL_NAME_AT_LOADED, &name_at_loaded, true)
        .override_global(names::GLOBAL_ARGV, &argv, true)
        .override_global(names::GLOBAL_CALL_SUMS, &call_sums, true)
        .override_global(names::GLOBAL_AGGREGATE, &aggregate, true)
        .override_global(names::GLOBAL_IN_FLIGHT_MASK, &in_flight_mask, true)
        .override_global(names::GLOBAL_TASK_MM, &l.task_mm, true)
        .override_global(names::GLOBAL_MM_EXE_FILE, &l.mm_exe_file, true)
        .override_global(names::GLOBAL_FILE_INODE, &l.file_inode, true)
        .override_global(names::GLOBAL_INODE_INO, &l.inode_ino, true)
        .override_global(names::GLOBAL_INODE_SB, &l.inode_sb, true)
        .override_global(names::GLOBAL_INODE_GENERATION, &l.inode_generation, true)
        .override_global(names::GLOBAL_SB_DEV, &l.sb_dev, true)
        .override_global(names::GLOBAL_MM_RSS_FILE, &l.rss[0], true)
        .override_global(names::GLOBAL_MM_RSS_ANON, &l.rss[1], true)
        .override_global(names::GLOBAL_MM_RSS_SHMEM, &l.rss[2], true)
        .override_global(names::GLOBAL_FILE_DENTRY, &l.file_dentry, true)
        .override_global(names::GLOBAL_DENTRY_PARENT, &l.dentry_parent, true)
        .override_global(names::GLOBAL_DENTRY_NAME, &l.dentry_name, true)
        .map_max_entries(names::MAP_AGGREGATES, agent.max_series)
        .map_max_entries(names::MAP_IN_FLIGHT, in_flight)
        .map_max_entries(names::MAP_MISSES, agent.max_misses)
        .map_max_entries(names::MAP_PROCESSES, in_flight)
        // The agent holds its attempts in IN_FLIGHT.
        .map_max_entries(names::MAP_ATTEMPTS, if opts.agent.is_some() { 1 } else { profiler_common::call_sums::TABLE })
        .map_max_entries(names::MAP_ATTEMPT_OWNERS, attempt_owners)
        .map_max_entries(names::MAP_EVENTS, ring_bytes)
        .map_max_entries(names::MAP_IDS, id_entries);
    if opts.verbose {
        loader.verifier_log_level(aya::VerifierLogLevel::VERBOSE | aya::VerifierLogLevel::STATS);
    }
    let rewritten;
    let object = if features & kernel_features::FETCH_ATOMICS == 0 {
        rewritten = crate::kernel::features::without_fetch_atomics(EBPF_OBJECT)?;
        rewritten.bytes()
    } else {
        EBPF_OBJECT
    };
    loader.load(object).map_err(|e| {
        let e = anyhow::Error::new(e).context("loading execprof's eBPF object into the kernel");
        match memlock_left {
            // Kernels before 5.11 charge maps to RLIMIT_MEMLOCK: the usual cause of EPERM
            // for a process that has the BPF capabilities but not CAP_SYS_RESOURCE.
            Some(kib) if format!("{e:#}").contains("Operation not permitted") => e.context(format!(
                "execprof could not raise RLIMIT_MEMLOCK ({kib} KiB), which kernels before 5.11 charge \
                 BPF maps to: run it as root or with CAP_SYS_RESOURCE, or raise the limit first \
                 (`ulimit -l unlimited`; LimitMEMLOCK=infinity in a systemd unit)"
            )),
            _ => e,
        }
    })
}

fn page_size() -> u32 {
    // SAFETY: plain libc call.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u32 } else { 4096 }
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK: raised to unlimited. None when
/// it is; else the limit that stays (KiB), which is fine on kernels from 5.11 on.
fn bump_memlock_rlimit() -> Option<u64> {
    let rlim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain syscalls with valid structs.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) } == 0 {
        return None;
    }
    let mut now = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut now) } != 0 || now.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    log::debug!("could not raise RLIMIT_MEMLOCK; fine on kernels >= 5.11");
    Some(now.rlim_cur / 1024)
}

const TRACEFS: &str = "/sys/kernel/tracing";

/// Tracepoint ids are read from tracefs, which some systems do not mount: mount it (as root).
/// Returns where it is.
pub(crate) fn ensure_tracefs() -> Result<std::path::PathBuf> {
    // Mounted but closed to this user (CAP_BPF and CAP_PERFMON without root): say so, rather
    // than try to mount it again.
    for p in [TRACEFS, "/sys/kernel/debug/tracing"] {
        if let Err(e) = std::fs::metadata(std::path::Path::new(p).join("events"))
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            anyhow::bail!(
                "tracefs at {p} is mounted but not readable by this user ({e}); run execprof as root (sudo), or let this user read it (mount -o remount,mode=755 {p})"
            );
        }
    }
    let mounted = |p: &str| std::path::Path::new(p).join("events").is_dir().then(|| p.into());
    if let Some(dir) = mounted(TRACEFS).or_else(|| mounted("/sys/kernel/debug/tracing")) {
        return Ok(dir);
    }
    crate::kernel::facts::mount_pseudo_fs(c"tracefs", c"/sys/kernel/tracing")?;
    eprintln!("execprof: tracefs was not mounted; mounted it at {TRACEFS} for the tracepoints' ids (it stays mounted)");
    mounted(TRACEFS).ok_or_else(|| anyhow!("tracefs mounted at {TRACEFS} but has no events directory"))
}

/// CPUs to sample on, from `/sys/devices/system/cpu/online` ("0-3,5").
pub(crate) fn online_cpus() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").context("reading the online CPU list")?;
    parse_cpu_list(text.trim()).ok_or_else(|| anyhow!("cannot parse the online CPU list {text:?}"))
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-x"), None);
    }
}
