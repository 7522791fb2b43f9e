//! Reports built from synthetic events, for the report's and the diff's tests: known
//! attempts in, a [`RunReport`] out, through the same analysis a recording goes through.
use super::{RunReport, Source};
use crate::{
    analysis::{self, test_support::attempt},
    assemble::events::Event,
    model::{
        chain::ChainSpec,
        meta::{ExitStatus, KernelInfo, LossCounters, MachineFacts, Mode, RunEnd, RunMeta, Unjoined},
    },
};

/// What a test report's run was: `command`, or the built-in chain when `chain` is set.
pub(crate) fn meta(command: &[&str], chain: Option<ChainSpec>) -> RunMeta {
    RunMeta {
        execprof_version: "0.0.0".into(),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        command_hex: vec![],
        program: format!("/x/{}", command.first().copied().unwrap_or("t")),
        chain,
        kernel: KernelInfo { release: "6.18.0".into(), machine: "x86_64".into(), btf: true, lockdown: None },
        machine: MachineFacts::default(),
        mode: Mode::new(
            None,
            997,
            Some("auto mode: sampled, because exact mode is not possible here: no kprobes".into()),
            (crate::model::meta::Boundaries::RawTracepoints, None),
        ),
        sample_hz: 997,
        exact_plan: None,
        ring_bytes: 8 << 20,
        warnings: vec![],
        startup_note: None,
        started_unix_s: 0,
        started_mono_ns: 0,
        repeats: 1,
        scope: Default::default(),
        preexisting: vec![],
        argv_read: false,
    }
}

/// The built-in chain's spec with `steps` steps of `misses` PATH misses each.
pub(crate) fn chain_spec(steps: u32, misses: u32) -> ChainSpec {
    ChainSpec { steps, misses, direct: false, env_vars: 0, env_size: 0, args: 0, arg_size: 8, lookup_first: None }
}

/// The report of `events` run as `meta` describes, complete and live; sampled attribution
/// when `symbols` is given.
pub(crate) fn report(meta: RunMeta, events: &[Event], symbols: Option<(&[u64], &dyn analysis::attribution::Symbolizer)>) -> RunReport {
    let model = analysis::phases::PhaseModel::builtin().unwrap();
    let ctx = analysis::AnalysisContext {
        model: &model,
        sampled: symbols.is_some(),
        exact: None,
        preexisting: &meta.preexisting,
        launched: meta.launched(),
    };
    let table =
        symbols.map_or_else(analysis::attribution::SymbolTable::default, |(addrs, s)| analysis::attribution::SymbolTable::build(addrs, s));
    let end = RunEnd {
        exit_status: ExitStatus::Code(0),
        command_wall_ns: 200_000,
        command_cpu_ns: 0,
        kernel_losses: LossCounters::zero(),
        undecodable_records: 0,
        first_decode_error: None,
        partial: None,
        program_costs: vec![],
        missing_interpreters: vec![],
    };
    let analysis = analysis::analyse(events, ctx, &table);
    RunReport::new(meta, end, analysis, &Unjoined::default(), Source::Live { recording: None, ready_ms: 0 })
}

/// Exec attempts of one process in steps: a first successful exec, then `steps` times
/// `misses` ENOENT attempts of `fail_ns` each and a successful exec of `ok_ns(step)`.
pub(crate) fn steps(tgid: u32, steps: u64, misses: u64, fail_ns: u64, ok_ns: impl Fn(u64) -> u64) -> Vec<Event> {
    let mut events = vec![Event::Exec(attempt(tgid, 0, ok_ns(0), 0, Some(0)))];
    let mut t = 1_000_000;
    for step in 1..=steps {
        for _ in 0..misses {
            events.push(Event::Exec(attempt(tgid, t, t + fail_ns, -2, Some(0))));
            t += 10_000;
        }
        events.push(Event::Exec(attempt(tgid, t, t + ok_ns(step), 0, Some(0))));
        t += 1_000_000;
    }
    events
}
