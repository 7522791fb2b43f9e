//! Pure analysis of events, folded as they arrive: no I/O, no kernel, tested without root.
//! [`Analyzer`] takes every event of a run once, in arrival order, keeps figures whose size
//! follows the distinct things seen (outcomes, processes alive, files, stacks, probed
//! functions) rather than the number of attempts, and turns them into an [`Analysis`] at the
//! end. A live run and the replay of its recording feed it the same events.
pub mod aggregates;
pub mod agreement;
pub mod attribution;
pub mod callers;
pub mod chain;
pub mod containers;
pub mod exact;
pub mod exposition;
pub mod fastpath;
pub mod identity;
pub mod modes;
pub mod outcome;
pub mod phases;
pub mod probe_cost;
pub mod profile_window;
pub mod searches;
pub mod stats;
pub mod tree;

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt as _};

use serde::Serialize;

use crate::{
    analysis::phases::PhaseModel,
    assemble::events::{Event, EventSink, ExecAttempt, ForkCall},
    model::meta::{ExactPlan, ProcessName},
    model::names::escape_name,
    model::names::{Abi, ExecSyscall, ForkSyscall},
};

/// Everything the analysis found in one run: the report's `analysis` section.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Analysis {
    /// Exec attempts completed (all outcomes).
    pub attempts: u64,
    /// One summary per exec outcome, every outcome listed (empty ones with count 0).
    pub outcomes: Vec<outcome::OutcomeSummary>,
    /// Successful execs split at the point of no return; None without successes.
    pub success_split: Option<outcome::SuccessSplit>,
    /// Exec-chain steps (successful exec to successful exec in one process); None when no step
    /// completed.
    pub chain: Option<chain::ChainSummary>,
    /// What a double lookup would save and cost (sampled mode, with failed lookups and
    /// successes): `--fast-path`.
    pub fast_path: Option<fastpath::FastPathVerdict>,
    /// Per-phase and per-function attribution from cpu-clock samples (sampled mode).
    pub sampled: Option<attribution::SampledAttribution>,
    /// Fork-family calls of the traced tree, per syscall.
    pub fork_calls: Vec<ForkCallSummary>,
    /// Per-function exact times from entry/return probes (exact mode).
    pub exact: Option<exact::ExactTiming>,
    /// Exact vs sampled phase shares, where both ran.
    pub agreement: Vec<agreement::OutcomeAgreement>,
    /// Processes seen in the traced tree (the launched one plus every forked process).
    pub processes: u64,
    /// Threads created in the traced tree (not counting processes).
    pub threads_created: u64,
    /// Attempts whose file name was cut at the kernel side's buffer size.
    pub filenames_truncated: u64,
    /// Attempts whose file name could not be read from user memory.
    pub filenames_unreadable: u64,
    /// Attempts through `execveat` (the rest went through `execve`).
    pub execveat_attempts: u64,
    /// Attempts whose thread id changed (a non-leader thread exec'd and took the leader's id).
    pub from_non_leader_threads: u64,
    /// What 32-bit (compat ABI) callers did, when there were any: the report then says how
    /// the run splits between the ABIs.
    #[serde(default)]
    pub compat: Option<CompatSummary>,
    /// ENOENT attempts of files that exist (not PATH misses): their interpreter or loader is
    /// missing. Most attempted first.
    #[serde(default)]
    pub enoent_existing: Vec<EnoentExisting>,
    /// Exec'd file names, most attempted first (at most [`MAX_FILES`]).
    pub files: Vec<FileCount>,
    /// Distinct file names beyond [`MAX_FILES`], not listed.
    pub files_not_listed: u64,
    /// Exec attempts and fork-family calls by the program that made them, most exec kernel
    /// time first (at most [`callers::MAX_CALLERS`]).
    #[serde(default)]
    pub callers: Vec<callers::CallerSummary>,
    /// Calling programs beyond [`callers::MAX_CALLERS`], not listed.
    #[serde(default)]
    pub callers_not_listed: u64,
    /// The run's PATH searches: misses, the directories they missed in, what a reordered
    /// PATH would save.
    #[serde(default)]
    pub path_searches: searches::PathSearches,
}

/// The calls made in the compat ABI (x86_64: by ia32 programs), traced like the 64-bit ones
/// and counted in every other figure too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CompatSummary {
    /// Exec attempts made by 32-bit callers.
    pub attempts: u64,
    /// Of those, successful.
    pub successes: u64,
    /// Mean latency of their failed attempts; None when none failed.
    pub failed_mean_ns: Option<f64>,
    /// Mean latency of their successful attempts; None when none succeeded.
    pub success_mean_ns: Option<f64>,
    /// Fork-family calls made by 32-bit callers.
    pub fork_calls: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct CompatTally {
    attempts: u64,
    successes: u64,
    failed_ns: u128,
    success_ns: u128,
    fork_calls: u64,
}

impl CompatTally {
    fn summary(self) -> Option<CompatSummary> {
        let failed = self.attempts - self.successes;
        (self.attempts + self.fork_calls > 0).then(|| CompatSummary {
            attempts: self.attempts,
            successes: self.successes,
            failed_mean_ns: (failed > 0).then(|| self.failed_ns as f64 / failed as f64),
            success_mean_ns: (self.successes > 0).then(|| self.success_ns as f64 / self.successes as f64),
            fork_calls: self.fork_calls,
        })
    }
}

/// Failed attempts with ENOENT of one file that exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct EnoentExisting {
    /// The name as the terminal shows it (escaped).
    pub filename: String,
    /// ENOENT attempts of it.
    pub attempts: u64,
    /// What is missing instead.
    pub why: String,
}

/// At most this many ENOENT names are checked for existence when a run ends.
pub const MAX_ENOENT_CHECKED: usize = 1000;

/// At most this many exec'd file names are listed in [`Analysis::files`].
pub const MAX_FILES: usize = 100;

/// The fork-family calls of one syscall made in the traced tree.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ForkCallSummary {
    /// The fork-family syscall.
    pub syscall: ForkSyscall,
    /// Calls made.
    pub count: u64,
    /// Calls that returned an error.
    pub failed: u64,
    /// Call latency, per call.
    pub latency: stats::Distribution,
    /// Mean minor page faults per call, over the calls whose faults were countable; None when none were.
    pub minor_faults_per_call: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct ForkCallTally {
    latency: stats::Latencies,
    failed: u64,
    minor_faults: (u64, u64),
}

/// How often one file name was exec'd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileCount {
    /// The name as the terminal shows it (see [`crate::model::names::escape_name`]).
    pub filename: String,
    /// The name's bytes, exactly, when they are not valid UTF-8 (else None).
    pub filename_bytes: Option<Vec<u8>>,
    /// Exec attempts of this name.
    pub attempts: u64,
    /// Of those, successful execs.
    pub successes: u64,
}

/// What the analysis needs besides the events: how functions map to phases, in exact mode
/// which function each probe slot holds, and which processes existed before tracing began.
#[derive(Clone, Copy)]
pub struct AnalysisContext<'a> {
    /// How functions map to phases.
    pub model: &'a PhaseModel,
    /// Set when samples were taken (sampled attribution runs).
    pub sampled: bool,
    /// In exact mode, which function each probe slot holds; None otherwise.
    pub exact: Option<&'a ExactPlan>,
    /// The processes that existed when tracing began ([`crate::model::meta::RunMeta::preexisting`]):
    /// what names the callers that started before the trace. Empty for a launched tree.
    pub preexisting: &'a [ProcessName],
    /// execprof launched what it traced ([`crate::model::meta::RunMeta::launched`]): a process
    /// seen without its start is then execprof's own child, not an unknown one.
    pub launched: bool,
}

/// Folds a run's events; see the module documentation.
pub struct Analyzer<'a> {
    ctx: AnalysisContext<'a>,
    outcomes: outcome::Outcomes,
    chain: chain::ChainTracker,
    fork_calls: BTreeMap<ForkSyscall, ForkCallTally>,
    samples: attribution::SampleTally,
    exact: exact::ExactTally,
    files: HashMap<Vec<u8>, (u64, u64)>,
    /// ENOENT attempts per name.
    enoent: HashMap<Vec<u8>, u64>,
    missing_interpreters: Vec<crate::model::meta::MissingInterpreter>,
    counts: Counts,
    compat: CompatTally,
    identities: identity::Identities,
    callers: callers::Callers,
    searches: searches::Searches,
}

/// Plain counts of the run.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    processes: u64,
    threads_created: u64,
    filenames_truncated: u64,
    filenames_unreadable: u64,
    execveat_attempts: u64,
    from_non_leader_threads: u64,
}

impl EventSink for Analyzer<'_> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(a) => self.exec(a),
            Event::ForkCall(f) => self.fork_call(f),
            Event::TaskNew(t) => {
                if t.thread {
                    self.counts.threads_created += 1;
                } else {
                    self.counts.processes += 1;
                }
                self.identities.task_new(t);
            }
            Event::TaskExit(x) => {
                self.searches.thread_gone(x.pid);
                if x.group_dead {
                    self.chain.process_gone(x.tgid);
                    self.identities.process_gone(x.tgid);
                }
            }
            Event::Adopted(a) => self.identities.adopted(a),
            Event::OffCpu(o) => self.chain.off_cpu(o),
            Event::Main(m) => self.chain.main(m),
            Event::OrphanSample(_) => self.samples.orphan(),
            Event::SampleBeforeEnter(_) => self.samples.before_enter(),
            Event::OrphanProbedCall(_) => self.exact.orphan(),
            Event::OrphanCallSums(sums) => self.exact.orphan_sums(sums),
        }
    }
}

impl<'a> Analyzer<'a> {
    /// An analyzer with nothing folded yet (the launched process counted as the first process).
    pub fn new(ctx: AnalysisContext<'a>) -> Self {
        Self {
            ctx,
            outcomes: outcome::Outcomes::default(),
            chain: chain::ChainTracker::default(),
            fork_calls: BTreeMap::new(),
            samples: attribution::SampleTally::default(),
            exact: exact::ExactTally::default(),
            files: HashMap::new(),
            enoent: HashMap::new(),
            missing_interpreters: Vec::new(),
            // The launched process is not forked inside the tree.
            counts: Counts { processes: 1, ..Counts::default() },
            compat: CompatTally::default(),
            identities: identity::Identities::new(ctx.preexisting, ctx.launched),
            callers: callers::Callers::default(),
            searches: searches::Searches::default(),
        }
    }

    fn exec(&mut self, a: &ExecAttempt) {
        // Charged to the program that made the attempt, before a success renames the process.
        let caller = self.identities.of(a.tgid);
        self.callers.attempt(caller, a);
        if !self.identities.is_launcher(caller.program) {
            // execprof looked the command up itself: the launch exec is no search.
            self.searches.attempt(caller.program, a);
        }
        self.identities.exec(a);
        let outcome = outcome::Outcome::of_attempt(a);
        self.outcomes.add(a);
        self.chain.attempt(a);
        self.samples.call(outcome, caller.program, a.exit_ns, &a.inside.samples);
        if let Some(plan) = self.ctx.exact {
            self.exact.attempt(outcome, &a.inside.probed, a.inside.sums.as_ref(), a.inside.off_cpu_ns(), plan, self.ctx.model);
        }
        // Looked up by reference first: the name is copied only to make a new entry.
        let succeeded = u64::from(a.executed());
        match self.files.get_mut(&a.name.bytes) {
            Some(file) => *file = (file.0 + 1, file.1 + succeeded),
            None => {
                self.files.insert(a.name.bytes.clone(), (1, succeeded));
            }
        }
        if outcome == outcome::Outcome::Enoent {
            match self.enoent.get_mut(&a.name.bytes) {
                Some(n) => *n += 1,
                None => {
                    self.enoent.insert(a.name.bytes.clone(), 1);
                }
            }
        }
        self.counts.filenames_truncated += u64::from(a.name.truncated);
        self.counts.filenames_unreadable += u64::from(a.name.unreadable);
        self.counts.execveat_attempts += u64::from(a.syscall == ExecSyscall::Execveat);
        self.counts.from_non_leader_threads += u64::from(a.pid != a.exit_pid);
        if a.abi == Abi::Compat {
            let c = &mut self.compat;
            c.attempts += 1;
            if a.executed() {
                c.successes += 1;
                c.success_ns += u128::from(a.duration_ns());
            } else {
                c.failed_ns += u128::from(a.duration_ns());
            }
        }
    }

    fn fork_call(&mut self, f: &ForkCall) {
        let caller = self.identities.of(f.tgid);
        self.callers.fork_call(caller, f);
        let t = self.fork_calls.entry(f.syscall).or_default();
        t.latency.record(f.duration_ns());
        t.failed += u64::from(f.ret < 0);
        if let Some(n) = f.minor_faults {
            t.minor_faults = (t.minor_faults.0 + n, t.minor_faults.1 + 1);
        }
        self.compat.fork_calls += u64::from(f.abi == Abi::Compat);
        self.samples.call(outcome::Outcome::Fork(f.syscall), caller.program, f.exit_ns, &f.inside.samples);
        for _ in &f.inside.probed {
            self.exact.orphan();
        }
        if let Some(sums) = &f.inside.sums {
            self.exact.orphan_sums(sums);
        }
    }

    /// Every distinct kernel address in the samples' stacks: what the symbol table handed to
    /// [`Analyzer::finish`] must name.
    pub fn stack_addresses(&self) -> Vec<u64> {
        self.samples.addresses()
    }

    /// The names that failed with ENOENT, most attempted first (at most
    /// [`MAX_ENOENT_CHECKED`]): what the live run checks for existence at its end.
    pub fn enoent_names(&self) -> Vec<Vec<u8>> {
        let mut names: Vec<(&Vec<u8>, u64)> = self.enoent.iter().map(|(n, c)| (n, *c)).collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        names.into_iter().take(MAX_ENOENT_CHECKED).map(|(n, _)| n.clone()).collect()
    }

    /// The existing files among [`Analyzer::enoent_names`], and why they failed.
    pub fn set_missing_interpreters(&mut self, found: Vec<crate::model::meta::MissingInterpreter>) {
        self.missing_interpreters = found;
    }

    /// Ends the run: attributes the samples with names from `symbols` and returns the analysis.
    pub fn finish(self, symbols: &dyn attribution::Symbolizer) -> Analysis {
        let Analyzer {
            ctx,
            outcomes,
            chain,
            fork_calls,
            samples,
            exact,
            files,
            enoent,
            missing_interpreters,
            counts,
            compat,
            identities,
            callers,
            searches,
        } = self;
        let programs = identities.programs();
        let (callers, callers_not_listed) = callers.finish(&programs);
        let mut enoent_existing: Vec<EnoentExisting> = missing_interpreters
            .into_iter()
            .filter_map(|m| {
                let attempts = *enoent.get(&m.file)?;
                Some(EnoentExisting { filename: escape_name(&m.file), attempts, why: m.why })
            })
            .collect();
        enoent_existing.sort_by(|a, b| b.attempts.cmp(&a.attempts).then_with(|| a.filename.cmp(&b.filename)));
        let fork_stats = |s: ForkSyscall| fork_calls.get(&s).map_or((0, 0.0), |t| (t.latency.count(), t.latency.mean()));
        let sampled = ctx.sampled.then(|| {
            samples.finish(
                symbols,
                ctx.model,
                |o| match o {
                    outcome::Outcome::Fork(s) => fork_stats(s),
                    o => outcomes.count_and_mean(o),
                },
                &programs,
            )
        });
        let exact = ctx.exact.map(|plan| exact.finish(&outcomes, plan, ctx.model));
        let agreement = match (&exact, &sampled) {
            (Some(e), Some(s)) => agreement::compare(e, s),
            _ => Vec::new(),
        };
        let (files, files_not_listed) = file_list(files);
        let summaries = outcomes.summaries();
        let fast_path = sampled.as_ref().and_then(|s| {
            let side = |o: outcome::Outcome| {
                let (attempts, mean) = outcomes.count_and_mean(o);
                let a = s.outcomes.iter().find(|x| x.outcome == o)?;
                Some((attempts, a.samples, mean, &a.open_parts))
            };
            fastpath::FastPathVerdict::new(side(outcome::Outcome::Enoent)?, side(outcome::Outcome::Success)?)
        });
        Analysis {
            attempts: summaries.iter().map(|s| s.count).sum(),
            outcomes: summaries,
            success_split: outcomes.success_split(),
            chain: chain.summary(),
            fast_path,
            sampled,
            fork_calls: fork_calls
                .iter()
                .filter_map(|(&syscall, t)| {
                    Some(ForkCallSummary {
                        syscall,
                        count: t.latency.count(),
                        failed: t.failed,
                        latency: t.latency.summary()?,
                        minor_faults_per_call: (t.minor_faults.1 > 0).then(|| t.minor_faults.0 as f64 / t.minor_faults.1 as f64),
                    })
                })
                .collect(),
            exact,
            agreement,
            processes: counts.processes,
            threads_created: counts.threads_created,
            filenames_truncated: counts.filenames_truncated,
            filenames_unreadable: counts.filenames_unreadable,
            execveat_attempts: counts.execveat_attempts,
            from_non_leader_threads: counts.from_non_leader_threads,
            compat: compat.summary(),
            enoent_existing,
            files,
            files_not_listed,
            callers,
            callers_not_listed,
            path_searches: searches.finish(&programs),
        }
    }
}

fn file_list(map: HashMap<Vec<u8>, (u64, u64)>) -> (Vec<FileCount>, u64) {
    let mut list: Vec<(Vec<u8>, u64, u64)> = map.into_iter().map(|(f, (n, ok))| (f, n, ok)).collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let extra = list.len().saturating_sub(MAX_FILES) as u64;
    list.truncate(MAX_FILES);
    let files = list
        .into_iter()
        .map(|(bytes, attempts, successes)| FileCount {
            filename: escape_name(&bytes),
            filename_bytes: std::str::from_utf8(&bytes).is_err().then_some(bytes),
            attempts,
            successes,
        })
        .collect();
    (files, extra)
}

/// Folds a list of events (tests and small inputs).
pub fn analyse(events: &[Event], ctx: AnalysisContext<'_>, symbols: &dyn attribution::Symbolizer) -> Analysis {
    let mut a = Analyzer::new(ctx);
    events.iter().for_each(|e| a.event(e));
    a.finish(symbols)
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::{Analysis, AnalysisContext, analyse, attribution::SymbolTable, phases::PhaseModel};
    use crate::{
        assemble::events::{Adopted, Event, ExecAttempt, ForkCall, Inside, TaskExit, TaskNew},
        model::meta::ProcessName,
        model::names::{Abi, ExecSyscall, ForkSyscall, Name},
    };

    pub(crate) fn attempt(tgid: u32, enter_ns: u64, exit_ns: u64, ret: i64, faults: Option<u64>) -> ExecAttempt {
        ExecAttempt {
            id: enter_ns,
            pid: tgid,
            exit_pid: tgid,
            tgid,
            cpu: 0,
            syscall: ExecSyscall::Execve,
            abi: Abi::Native,
            name: Name { bytes: b"/x".to_vec(), ..Name::default() },
            enter_ns,
            prepare_ns: None,
            loaded_ns: None,
            exit_ns,
            ret,
            killed: None,
            minor_faults: faults,
            major_faults: faults.map(|_| 0),
            argv: None,
            check: false,
            comm: None,
            inside: Inside::default(),
        }
    }

    /// An exec attempt of `name` by thread `pid` of process `tgid`, `ns` long.
    pub(crate) fn exec_by(pid: u32, tgid: u32, name: &str, ret: i64, enter_ns: u64, ns: u64) -> Event {
        let mut a = attempt(tgid, enter_ns, enter_ns + ns, ret, Some(0));
        a.pid = pid;
        a.exit_pid = if ret == 0 { tgid } else { pid };
        a.name.bytes = name.as_bytes().to_vec();
        Event::Exec(a)
    }

    /// An exec attempt of `name` by process `tgid`'s main thread.
    pub(crate) fn exec(tgid: u32, name: &str, ret: i64, enter_ns: u64, ns: u64) -> Event {
        exec_by(tgid, tgid, name, ret, enter_ns, ns)
    }

    /// `parent` forks `child` (the call and the new process).
    pub(crate) fn fork(parent: u32, child: u32, enter_ns: u64, ns: u64) -> [Event; 2] {
        let call = ForkCall {
            id: enter_ns,
            pid: parent,
            tgid: parent,
            syscall: ForkSyscall::Clone,
            abi: Abi::Native,
            enter_ns,
            exit_ns: enter_ns + ns,
            ret: i64::from(child),
            minor_faults: Some(0),
            major_faults: Some(0),
            inside: Inside::default(),
        };
        let new =
            TaskNew { ts_ns: enter_ns + ns, parent_pid: parent, parent_tgid: parent, child_pid: child, child_tgid: child, thread: false };
        [Event::TaskNew(new), Event::ForkCall(call)]
    }

    /// `--cgroup` adopts process `tgid` (child of `ppid`, named `comm`) at its first call.
    pub(crate) fn adopted(tgid: u32, ppid: Option<u32>, comm: &str, ts_ns: u64) -> Event {
        Event::Adopted(Adopted { ts_ns, pid: tgid, tgid, ppid, comm: comm.as_bytes().to_vec() })
    }

    /// Thread `pid` of `tgid` exits; the process with it when `group_dead`.
    pub(crate) fn exit(pid: u32, tgid: u32, group_dead: bool) -> Event {
        Event::TaskExit(TaskExit { ts_ns: 0, pid, tgid, group_dead })
    }

    /// A process of the table of those that existed before tracing.
    pub(crate) fn process(tgid: u32, ppid: u32, exe: &str, comm: &str) -> ProcessName {
        ProcessName { tgid, ppid, exe: exe.as_bytes().to_vec(), comm: comm.as_bytes().to_vec() }
    }

    /// The analysis of `events` traced with `preexisting` as the processes alive at attach
    /// (none: a launched tree).
    pub(crate) fn analyse_from(preexisting: &[ProcessName], events: &[Event]) -> Analysis {
        analyse_scope(preexisting, preexisting.is_empty(), events)
    }

    /// [`analyse_from`] with the scope said: `launched`, or attached to running processes
    /// (whose table may be empty).
    pub(crate) fn analyse_scope(preexisting: &[ProcessName], launched: bool, events: &[Event]) -> Analysis {
        let model = PhaseModel::builtin().unwrap();
        analyse(events, AnalysisContext { model: &model, sampled: false, exact: None, preexisting, launched }, &SymbolTable::default())
    }

    /// The PATH of [`who_pays`]'s searches, in order.
    pub(crate) const PATH: [&str; 3] = ["/usr/local/sbin", "/usr/local/bin", "/usr/bin"];

    /// A machine traced while running work that existed before: known answers for the
    /// calling programs and the PATH searches.
    /// - bash (300, under systemd) forks 301, which execs /usr/bin/make by its path (a search
    ///   of 0 misses, 200 µs);
    /// - make forks 10 children, each searching `cc` along [`PATH`]: misses of 1.0 and 1.5 µs,
    ///   found in /usr/bin (60 µs); then one child that misses `ccache` in all three (1.2 µs
    ///   each) and exits: not found;
    /// - cron (400) forks 3 children, each exec'ing the missing /opt/backup/run once (2 µs):
    ///   lone failures, not searches;
    /// - pid 777, not in the table, execs /usr/bin/true (50 µs).
    pub(crate) fn who_pays() -> (Vec<ProcessName>, Vec<Event>) {
        let table = vec![
            process(1, 0, "/usr/lib/systemd/systemd", "systemd"),
            process(300, 1, "/usr/bin/bash", "bash"),
            process(400, 1, "/usr/sbin/cron", "cron"),
        ];
        let mut events = Vec::new();
        let mut t = 1_000_000;
        let mut next = |ns: u64| {
            t += 10_000 + ns;
            t - ns
        };
        events.extend(fork(300, 301, next(30_000), 30_000));
        events.push(exec(301, "/usr/bin/make", 0, next(200_000), 200_000));
        for i in 0..11 {
            let child = 310 + i;
            events.extend(fork(301, child, next(25_000), 25_000));
            if i < 10 {
                events.push(exec(child, &format!("{}/cc", PATH[0]), -2, next(1_000), 1_000));
                events.push(exec(child, &format!("{}/cc", PATH[1]), -2, next(1_500), 1_500));
                events.push(exec(child, &format!("{}/cc", PATH[2]), 0, next(60_000), 60_000));
            } else {
                for dir in PATH {
                    events.push(exec(child, &format!("{dir}/ccache"), -2, next(1_200), 1_200));
                }
            }
            events.push(exit(child, child, true));
        }
        for i in 0..3 {
            let child = 401 + i;
            events.extend(fork(400, child, next(20_000), 20_000));
            events.push(exec(child, "/opt/backup/run", -2, next(2_000), 2_000));
            events.push(exit(child, child, true));
        }
        events.push(exec(777, "/usr/bin/true", 0, next(50_000), 50_000));
        (table, events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::attribution::SymbolTable, assemble::events::TaskNew};

    fn plain(events: &[Event]) -> Analysis {
        let model = PhaseModel::builtin().unwrap();
        analyse(
            events,
            AnalysisContext { model: &model, sampled: false, exact: None, preexisting: &[], launched: true },
            &SymbolTable::default(),
        )
    }

    /// The ENOENT names are offered most attempted first; those found to exist are reported
    /// with their own ENOENT counts, apart from the misses.
    #[test]
    fn enoent_of_existing_files_is_reported_apart() {
        let model = PhaseModel::builtin().unwrap();
        let mut a = Analyzer::new(AnalysisContext { model: &model, sampled: false, exact: None, preexisting: &[], launched: true });
        let named = |name: &[u8], ret| {
            let mut e = test_support::attempt(1, 0, 10, ret, None);
            e.name.bytes = name.to_vec();
            Event::Exec(e)
        };
        for _ in 0..3 {
            a.event(&named(b"/m/miss", -2));
        }
        a.event(&named(b"./script", -2));
        a.event(&named(b"./script", -13));
        assert_eq!(a.enoent_names(), vec![b"/m/miss".to_vec(), b"./script".to_vec()]);
        a.set_missing_interpreters(vec![crate::model::meta::MissingInterpreter { file: b"./script".to_vec(), why: "bad".into() }]);
        let r = a.finish(&SymbolTable::default());
        assert_eq!(r.enoent_existing, vec![EnoentExisting { filename: "./script".into(), attempts: 1, why: "bad".into() }]);
    }

    #[test]
    fn counts_processes_and_threads_from_new_tasks() {
        let new = |thread| {
            Event::TaskNew(TaskNew {
                ts_ns: 0,
                parent_pid: 1,
                parent_tgid: 1,
                child_pid: 2,
                child_tgid: if thread { 1 } else { 2 },
                thread,
            })
        };
        let events = vec![new(false), new(false), new(true), Event::Exec(test_support::attempt(1, 0, 10, 0, None))];
        let a = plain(&events);
        assert_eq!((a.processes, a.threads_created, a.attempts), (3, 1, 1));
    }

    #[test]
    fn counts_attempts_per_file() {
        let named = |enter, ret, name: &[u8]| {
            let mut a = test_support::attempt(1, enter, enter + 10, ret, None);
            a.name.bytes = name.to_vec();
            Event::Exec(a)
        };
        let events = vec![named(0, -2, b"/a/t"), named(20, -2, b"/a/t"), named(40, 0, b"/b/t\xff"), named(60, -2, b"/b/t\\xff")];
        let a = plain(&events);
        // Ties in byte order: a backslash (0x5c) sorts before 0xff.
        assert_eq!(
            a.files,
            vec![
                FileCount { filename: "/a/t".into(), filename_bytes: None, attempts: 2, successes: 0 },
                FileCount { filename: "/b/t\\\\xff".into(), filename_bytes: None, attempts: 1, successes: 0 },
                FileCount { filename: "/b/t\\xff".into(), filename_bytes: Some(b"/b/t\xff".to_vec()), attempts: 1, successes: 1 },
            ]
        );
        assert_eq!(a.files_not_listed, 0);
    }
}
