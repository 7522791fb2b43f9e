//! The run's results: one serializable struct for `--json`, and its terminal rendering.
//! Rendering is a pure function of the struct, so it is snapshot-tested without root.
use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    analysis::{
        Analysis,
        attribution::{Estimate, SampledAttribution},
        exact::ExactTiming,
        outcome::Outcome,
        stats::Distribution,
    },
    kernel::KernelInfo,
    launch::ExitStatus,
    tracer::LossCounters,
    workload::ChainSpec,
};

/// Bumped when a field of the JSON changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Mode {
    /// How exact times are taken.
    pub timing: String,
    /// `exact`, `exact+sampled`, `sampled` or `none`.
    pub functions_mode: String,
    /// How time is attributed to kernel functions, and why this mode.
    pub attribution: String,
}

impl Mode {
    /// `probed`: functions under entry/return probes (None: no exact mode).
    pub fn new(probed: Option<usize>, sample_hz: u64, note: Option<String>) -> Self {
        let sampled = format!("cpu-clock samples at {sample_hz} Hz per CPU with kernel stacks, inside exec attempts");
        let (mode, text) = match (probed, sample_hz > 0) {
            (Some(n), true) => ("exact+sampled", format!("exact: kprobe/kretprobe on {n} exec-path functions; plus {sampled}")),
            (Some(n), false) => ("exact", format!("exact: kprobe/kretprobe on {n} exec-path functions")),
            (None, true) => ("sampled", format!("sampled: {sampled}")),
            (None, false) => ("none", "off (--sample-hz 0, no exact mode)".to_owned()),
        };
        let attribution = match note {
            Some(n) if probed.is_none() => format!("{text} — {n}"),
            _ => text,
        };
        Self {
            timing: "exact at tracepoint boundaries (raw sys_enter/sys_exit for execve[at], sched_prepare_exec, sched_process_exec)".into(),
            functions_mode: mode.into(),
            attribution,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub execprof_version: String,
    pub command: Vec<String>,
    pub program: String,
    /// Set when the built-in exec chain ran.
    pub chain: Option<ChainSpec>,
    pub kernel: KernelInfo,
    pub mode: Mode,
    pub warnings: Vec<String>,
    pub exit_status: ExitStatus,
    /// From release of the command to its exit.
    pub command_wall_ns: u64,
    pub analysis: Analysis,
    pub losses: LossCounters,
    pub undecodable_records: u64,
    /// Why image-start-to-main is not measured, when it is not.
    pub startup_note: Option<String>,
}

/// Human time with three significant digits: 950 ns, 1.23 µs, 45.6 µs, 1.20 ms, 2.34 s.
pub fn human_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" {
        format!("{v:.0} {unit}")
    } else if v < 10.0 {
        format!("{v:.2} {unit}")
    } else if v < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

fn dist_cells(d: &Distribution) -> String {
    let c = |ns: u64| human_ns(ns as f64);
    format!(
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        c(d.min_ns),
        c(d.p50_ns),
        c(d.p90_ns),
        c(d.p99_ns),
        c(d.max_ns),
        human_ns(d.mean_ns)
    )
}

pub fn render(r: &RunReport) -> String {
    let mut o = String::new();
    let a = &r.analysis;
    let _ = writeln!(o, "execprof {} — exec attempts of the traced process tree", r.execprof_version);
    match &r.chain {
        Some(c) => {
            let _ = writeln!(o, "command   built-in exec chain: {} ({})", c.describe(), r.program);
        }
        None => {
            let _ = writeln!(o, "command   {}", r.command.join(" "));
        }
    }
    let _ = writeln!(o, "kernel    {} ({}), BTF {}", r.kernel.release, r.kernel.machine, if r.kernel.btf { "yes" } else { "no" });
    let _ = writeln!(o, "timing    {}", r.mode.timing);
    let _ = writeln!(o, "functions {}", r.mode.attribution);
    let _ = writeln!(
        o,
        "result    {} after {}; {} process(es), {} thread(s) created, {} exec attempts",
        r.exit_status,
        human_ns(r.command_wall_ns as f64),
        a.processes,
        a.threads_created,
        a.attempts
    );
    for w in &r.warnings {
        let _ = writeln!(o, "warning   {w}");
    }

    let _ = writeln!(o, "\nExec attempts by outcome (latency = syscall enter to exit)");
    let _ = writeln!(
        o,
        "  {:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>11}",
        "outcome", "count", "min", "p50", "p90", "p99", "max", "mean", "faults/att"
    );
    for s in &a.outcomes {
        let faults = match (s.minor_faults_per_attempt, s.major_faults_per_attempt) {
            (Some(mi), Some(ma)) if ma > 0.0 => format!("{mi:.2}+{ma:.2}maj"),
            (Some(mi), _) => format!("{mi:.2}"),
            _ => "-".into(),
        };
        match &s.latency {
            Some(d) => {
                let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", s.outcome.label(), s.count, dist_cells(d), faults);
            }
            None => {
                let _ = writeln!(o, "  {:<12} {:>8}", s.outcome.label(), s.count);
            }
        }
        if s.outcome == Outcome::Other && !s.errnos.is_empty() {
            let list: Vec<String> = s.errnos.iter().map(|(e, n)| format!("{} ×{n}", errno_name(*e))).collect();
            let _ = writeln!(o, "  {:<12} {}", "", list.join(", "));
        }
    }

    if let Some(split) = &a.success_split {
        let _ = writeln!(o, "\nSuccessful execs around the point of no return (sched_prepare_exec)");
        let _ = writeln!(o, "  {:<30} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}", "part", "min", "p50", "p90", "p99", "max", "mean");
        let _ = writeln!(o, "  {:<30} {}", "before (lookup, mm, args, load)", dist_cells(&split.before_ns));
        let _ = writeln!(o, "  {:<30} {}", "after (old mm out, new image)", dist_cells(&split.after_ns));
        if let Some(l) = &split.to_loaded_ns {
            let _ = writeln!(o, "  {:<30} {}", "  of which until image loaded", dist_cells(l));
        }
        if split.unsplit > 0 {
            let _ = writeln!(o, "  ({} successful execs had no point-of-no-return time)", split.unsplit);
        }
    }

    if let Some(c) = &a.chain {
        let _ = writeln!(
            o,
            "\nExec chain: {} steps in {} process(es), {:.2} failed attempts per step",
            c.steps, c.processes, c.failed_attempts_per_step
        );
        let _ = writeln!(o, "  {:<34} {:>9} {:>9} {:>9} {:>7}", "per step", "p50", "mean", "total", "share");
        let total = c.wall_ns.total_ns.max(1) as f64;
        let mut rows = vec![("kernel, failed attempts", &c.failed_ns), ("kernel, successful exec", &c.exec_ns)];
        if let (Some(b), Some(a)) = (&c.exec_before_ns, &c.exec_after_ns) {
            rows.push(("  before the point of no return", b));
            rows.push(("  after it", a));
        }
        if let Some(s) = &c.startup_ns {
            rows.push(("image start to main (loader, libc)", s));
        }
        rows.push(("off-CPU outside exec", &c.off_cpu_ns));
        rows.push(("user space + untraced syscalls", &c.rest_ns));
        rows.push(("step wall time", &c.wall_ns));
        for (label, d) in rows {
            let _ = writeln!(
                o,
                "  {:<34} {:>9} {:>9} {:>9} {:>6.1}%",
                label,
                human_ns(d.p50_ns as f64),
                human_ns(d.mean_ns),
                human_ns(d.total_ns as f64),
                100.0 * d.total_ns as f64 / total
            );
        }
        let steps_ns = c.wall_ns.total_ns;
        let _ = writeln!(
            o,
            "  execprof's own clock: the command ran {}; its steps add up to {}; the difference ({}) is the launch exec, the last image's run and the exit",
            human_ns(r.command_wall_ns as f64),
            human_ns(steps_ns as f64),
            human_ns(r.command_wall_ns.saturating_sub(steps_ns) as f64)
        );
        if let Some(note) = &r.startup_note {
            let _ = writeln!(o, "  {note}");
        }
    }

    if !a.spawns.is_empty() {
        let _ = writeln!(o, "\nFork-family calls (latency = syscall enter to exit in the caller)");
        let _ = writeln!(o, "  {:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>11}", "syscall", "count", "min", "p50", "p90", "p99", "max", "mean", "faults/call");
        for sp in &a.spawns {
            let faults = sp.minor_faults_per_call.map_or("-".into(), |f| format!("{f:.2}"));
            let _ = writeln!(o, "  {:<12} {:>8} {}  {:>11}", sp.syscall.label(), sp.count, dist_cells(&sp.latency), faults);
            if sp.failed > 0 {
                let _ = writeln!(o, "  {:<12} {} failed", "", sp.failed);
            }
        }
    }

    if let Some(x) = &a.exact {
        render_exact(&mut o, x);
    }
    if let Some(s) = &a.sampled {
        render_sampled(&mut o, s);
    }

    for ag in &a.agreement {
        let _ = writeln!(o, "\nExact vs sampled: {} (shares of exec-phase time; {} samples)", ag.outcome.label(), ag.samples);
        let _ = writeln!(o, "  {:<10} {:>7} {:>22}  agree", "phase", "exact", "sampled [95% CI]");
        for p in &ag.phases {
            let _ = writeln!(
                o,
                "  {:<10} {:>6}% {:>22}  {}",
                p.phase,
                pct(p.exact_share),
                format!("{}% [{}–{}]", pct(p.sampled_share), pct(p.sampled_low), pct(p.sampled_high)),
                if p.agree { "yes" } else { "no" }
            );
        }
    }

    if !a.files.is_empty() {
        let _ = writeln!(o, "\nFiles exec'd (most attempts first)");
        let _ = writeln!(o, "  {:>8} {:>9}  file", "attempts", "succeeded");
        for f in a.files.iter().take(10) {
            let _ = writeln!(o, "  {:>8} {:>9}  {}", f.attempts, f.successes, f.filename);
        }
        let more = a.files.len().saturating_sub(10) as u64 + a.files_not_listed;
        if more > 0 {
            let _ = writeln!(o, "  ... and {more} more (all in --json, up to {})", crate::analysis::MAX_FILES);
        }
    }

    let _ = writeln!(o, "\nLost or unseen (always printed; all should be 0)");
    for (name, n) in &r.losses.0 {
        let _ = writeln!(o, "  {name:<34} {n}");
    }
    let _ = writeln!(o, "  {:<34} {}", "records not decodable", r.undecodable_records);
    let _ = writeln!(o, "  {:<34} {}", "file names truncated (kept)", a.filenames_truncated);
    if r.losses.total() > 0 {
        let _ = writeln!(o, "  Some events were lost: raise --ring-mib, or reduce the workload, and run again.");
    }
    o
}

fn render_exact(o: &mut String, x: &ExactTiming) {
    for oc in &x.outcomes {
        let _ = writeln!(o, "\nExact per-function times: {} ({} attempts, exact mean {})", oc.outcome.label(), oc.attempts, human_ns(oc.mean_ns));
        if oc.functions.is_empty() {
            let _ = writeln!(o, "  no probed function ran inside these attempts");
        }
        let _ = writeln!(
            o,
            "  {:<28} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
            "function", "phase", "calls/att", "p50", "p99", "mean", "self", "called from"
        );
        for f in &oc.functions {
            let d = &f.inclusive_ns;
            let _ = writeln!(
                o,
                "  {:<28} {:<10} {:>9.2} {:>9} {:>9} {:>9} {:>9}  {}",
                f.function,
                f.phase.as_deref().unwrap_or("-"),
                f.calls_per_attempt,
                human_ns(d.p50_ns as f64),
                human_ns(d.p99_ns as f64),
                human_ns(d.mean_ns),
                human_ns(f.self_ns_mean),
                f.parent.as_deref().unwrap_or("(syscall)")
            );
        }
        let _ = writeln!(o, "  phases (self time of their probed functions, per attempt):");
        for p in &oc.phases {
            let _ = writeln!(o, "    {:<44} {:>9} {:>6.1}%", p.label, human_ns(p.ns_per_attempt), 100.0 * p.share);
        }
        let _ = writeln!(
            o,
            "    {:<44} {:>9} {:>6.1}%",
            "not inside a probed function",
            human_ns(oc.unprobed_ns_per_attempt),
            100.0 * oc.unprobed_ns_per_attempt / oc.mean_ns.max(1.0)
        );
    }
    let _ = writeln!(o, "  calls: {} recorded, {} not tied to a recorded attempt", x.calls, x.calls_without_attempt);
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn render_sampled(o: &mut String, s: &SampledAttribution) {
    for oc in &s.outcomes {
        let _ = writeln!(
            o,
            "\nWhere the kernel time goes: {} ({} attempts, exact mean {}, {} samples)",
            oc.outcome.label(),
            oc.attempts,
            human_ns(oc.mean_ns),
            oc.samples
        );
        let _ = writeln!(o, "  {:<46} {:>7} {:>20} {:>28}", "phase / function", "samples", "share [95% CI]", "per attempt [95% CI]");
        let mut unseen = Vec::new();
        for p in &oc.phases {
            if p.estimate.samples == 0 {
                unseen.push(p.phase.as_str());
                continue;
            }
            let line = |o: &mut String, name: &str, e: &Estimate| {
                let _ = writeln!(
                    o,
                    "  {:<46} {:>7} {:>20} {:>28}{}",
                    name,
                    e.samples,
                    format!("{}% [{}–{}]", pct(e.share), pct(e.share_low), pct(e.share_high)),
                    format!("{} [{}–{}]", human_ns(e.ns_per_attempt), human_ns(e.ns_per_attempt_low), human_ns(e.ns_per_attempt_high)),
                    if e.few_samples { "  (few samples)" } else { "" }
                );
            };
            line(o, &p.label, &p.estimate);
            for f in p.functions.iter().take(5) {
                line(o, &format!("    {}", f.function), &f.estimate);
            }
            if p.functions.len() > 5 {
                let _ = writeln!(o, "      ... {} more functions (in --json)", p.functions.len() - 5);
            }
        }
        if !unseen.is_empty() {
            let _ = writeln!(o, "  no samples in: {}", unseen.join(", "));
        }
    }
    let _ = writeln!(
        o,
        "  samples: {} taken; not attributed: {} of attempts never recorded, {} after their attempt's exit time; {} without a kernel stack; {} addresses without a symbol",
        s.samples, s.samples_without_attempt, s.samples_after_exit, s.samples_without_stack, s.unknown_addresses
    );
}

fn errno_name(e: i64) -> String {
    let name = match e as i32 {
        libc::E2BIG => "E2BIG",
        libc::ENOTDIR => "ENOTDIR",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ELOOP => "ELOOP",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::ETXTBSY => "ETXTBSY",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::EINTR => "EINTR",
        libc::ELIBBAD => "ELIBBAD",
        _ => return format!("errno {e}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis, analysis::test_support::attempt, events::Event};

    #[test]
    fn human_times() {
        assert_eq!(human_ns(950.0), "950 ns");
        assert_eq!(human_ns(1_234.0), "1.23 µs");
        assert_eq!(human_ns(45_600.0), "45.6 µs");
        assert_eq!(human_ns(1_200_000.0), "1.20 ms");
        assert_eq!(human_ns(2_340_000_000.0), "2.34 s");
    }

    struct Table;
    impl crate::analysis::attribution::Symbolizer for Table {
        fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
            let name = |a: u64| match a {
                0x10 => Some("path_openat".to_owned()),
                0x20 => Some("mm_alloc".to_owned()),
                0x30 => Some("__x64_sys_execve".to_owned()),
                _ => None,
            };
            addrs.iter().map(|&a| name(a)).collect()
        }
    }

    fn sample_report() -> RunReport {
        let (symbols, model) = (Table, crate::phases::PhaseModel::builtin().unwrap());
        let mut events = Vec::new();
        let mut t = 0;
        for step in 0..3u64 {
            for _ in 0..2 {
                events.push(Event::Exec(attempt(100, t, t + 1_500, -2, Some(0))));
                t += 2_000;
            }
            let mut ok = attempt(100, t, t + 40_000 + step * 1_000, 0, Some(25));
            ok.prepare_ns = Some(t + 15_000);
            ok.loaded_ns = Some(t + 35_000);
            events.push(Event::Exec(ok));
            t += 60_000;
        }
        events.push(Event::Exec(attempt(100, t, t + 300, -7, Some(0))));
        // Samples: two in the first ENOENT attempt (lookup), one in the first success (mm setup).
        let sample = |enter: u64, frames: &[u64]| {
            Event::Sample(crate::events::Sample { ts_ns: enter + 10, pid: 100, tgid: 100, attempt_enter_ns: enter, frames: frames.to_vec() })
        };
        events.push(sample(0, &[0x10, 0x30]));
        events.push(sample(0, &[0x10, 0x30]));
        events.push(sample(4_000, &[0x20, 0x30]));
        RunReport {
            schema_version: SCHEMA_VERSION,
            execprof_version: "0.0.0".into(),
            command: vec!["t".into(), "3".into()],
            program: "/x/t".into(),
            chain: None,
            kernel: KernelInfo { release: "6.18.0".into(), machine: "x86_64".into(), btf: true, lockdown: None },
            mode: Mode::new(None, 997, Some("auto mode: sampled, because exact mode is not possible here: no kprobes".into())),
            warnings: vec![],
            exit_status: ExitStatus::Code(0),
            command_wall_ns: 200_000,
            analysis: analysis::analyse(&events, Some(analysis::SymbolContext { symbols: &symbols, model: &model }), None),
            losses: LossCounters::zero(),
            undecodable_records: 0,
            startup_note: None,
        }
    }

    #[test]
    fn renders_every_section() {
        let text = render(&sample_report());
        insta::assert_snapshot!(text);
    }

    #[test]
    fn json_has_schema_version_and_outcomes() {
        let v: serde_json::Value = serde_json::to_value(sample_report()).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["analysis"]["outcomes"][1]["outcome"], "enoent");
        assert_eq!(v["analysis"]["outcomes"][1]["count"], 6);
        assert_eq!(v["analysis"]["chain"]["steps"], 2);
        assert_eq!(v["losses"][0][0], "ring buffer full");
    }
}
