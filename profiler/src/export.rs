//! Files people look at: folded stacks (`flamegraph.pl` / inferno input) and flame graph SVGs,
//! one pair per exec outcome.
use std::{fs, io::BufWriter, path::Path};

use anyhow::{Context as _, Result};

use crate::analysis::attribution::SampledAttribution;

/// Writes `<outcome>.folded` and `<outcome>.svg` for every outcome that has samples.
pub fn write_folded(dir: &Path, sampled: &SampledAttribution) -> Result<Vec<std::path::PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for oc in sampled.outcomes.iter().filter(|o| o.samples > 0) {
        let name: String = oc.outcome.label().to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let name = name.trim_matches('-').replace("--", "-");
        let lines: Vec<String> = oc.folded.iter().map(|(stack, n)| format!("{stack} {n}")).collect();
        let folded = dir.join(format!("{name}.folded"));
        fs::write(&folded, lines.join("\n") + "\n").with_context(|| format!("writing {}", folded.display()))?;
        let svg = dir.join(format!("{name}.svg"));
        let file = fs::File::create(&svg).with_context(|| format!("creating {}", svg.display()))?;
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = format!("execprof: {} exec attempts ({} samples)", oc.outcome.label(), oc.samples);
        opts.count_name = "samples".into();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), BufWriter::new(file))
            .with_context(|| format!("rendering {}", svg.display()))?;
        written.extend([folded, svg]);
    }
    Ok(written)
}

/// A Perfetto-loadable trace (Chrome trace-event JSON): one track per thread, a slice per
/// exec attempt with its parts nested inside (before/after the point of no return; probed
/// kernel functions in exact mode), user-space slices between a chain's execs, instant
/// events for forks and for each attempt's page faults. Times are relative to the first
/// event, in microseconds as the format wants (fractions keep nanoseconds).
pub fn trace_events(events: &[crate::events::Event], plan: Option<&crate::exact_plan::ExactPlan>) -> serde_json::Value {
    use serde_json::json;

    use crate::events::Event;
    let t0 = events
        .iter()
        .map(|e| match e {
            Event::Exec(a) => a.enter_ns,
            Event::Fork(f) => f.ts_ns,
            Event::Exit(x) => x.ts_ns,
            Event::Sample(s) => s.ts_ns,
            Event::Call(c) => c.enter_ns,
            Event::Spawn(s) => s.enter_ns,
            Event::OffCpu { start_ns, .. } => *start_ns,
            Event::Main { ts_ns, .. } => *ts_ns,
        })
        .min()
        .unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1000.0;
    let dur = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1000.0;
    let mut out = Vec::new();
    let mut threads = std::collections::BTreeSet::new();
    let mut attempts: Vec<&crate::events::ExecAttempt> = Vec::new();
    for e in events {
        match e {
            Event::Exec(a) => {
                threads.insert((a.tgid, a.exit_pid));
                attempts.push(a);
                let outcome = crate::analysis::outcome::Outcome::of(a.ret);
                out.push(json!({
                    "name": format!("exec {}", outcome.label()), "cat": "exec", "ph": "X",
                    "ts": us(a.enter_ns), "dur": dur(a.enter_ns, a.exit_ns), "pid": a.tgid, "tid": a.exit_pid,
                    "args": { "filename": a.filename, "ret": a.ret, "minor_faults": a.minor_faults, "major_faults": a.major_faults }
                }));
                if let Some(p) = a.prepare_ns {
                    out.push(json!({"name": "before point of no return", "cat": "exec.part", "ph": "X", "ts": us(a.enter_ns), "dur": dur(a.enter_ns, p), "pid": a.tgid, "tid": a.exit_pid}));
                    out.push(json!({"name": "after point of no return", "cat": "exec.part", "ph": "X", "ts": us(p), "dur": dur(p, a.exit_ns), "pid": a.tgid, "tid": a.exit_pid}));
                }
                if let Some(n) = a.minor_faults.filter(|n| *n > 0) {
                    out.push(json!({"name": format!("{n} page faults"), "cat": "faults", "ph": "i", "s": "t", "ts": us(a.exit_ns), "pid": a.tgid, "tid": a.exit_pid,
                        "args": {"minor": n, "major": a.major_faults}}));
                }
            }
            Event::Fork(f) => {
                threads.insert((f.parent_tgid, f.parent_pid));
                out.push(json!({"name": if f.thread { "clone (thread)" } else { "fork" }, "cat": "fork", "ph": "i", "s": "t", "ts": us(f.ts_ns),
                    "pid": f.parent_tgid, "tid": f.parent_pid, "args": {"child_pid": f.child_pid, "child_tgid": f.child_tgid}}));
            }
            Event::Call(c) => {
                let name = plan.and_then(|p| p.function_of(c.slot)).map_or_else(|| format!("slot {}", c.slot), |f| f.function.clone());
                out.push(json!({"name": name, "cat": "function", "ph": "X", "ts": us(c.enter_ns), "dur": dur(c.enter_ns, c.exit_ns), "pid": c.tgid, "tid": c.pid}));
            }
            Event::Spawn(s) => {
                threads.insert((s.tgid, s.pid));
                out.push(json!({"name": s.syscall.label(), "cat": "spawn", "ph": "X", "ts": us(s.enter_ns), "dur": dur(s.enter_ns, s.exit_ns),
                    "pid": s.tgid, "tid": s.pid, "args": {"ret": s.ret, "minor_faults": s.minor_faults}}));
            }
            Event::OffCpu { pid, tgid, start_ns, end_ns } => {
                out.push(json!({"name": "off-CPU", "cat": "offcpu", "ph": "X", "ts": us(*start_ns), "dur": dur(*start_ns, *end_ns), "pid": tgid, "tid": pid}));
            }
            Event::Main { pid, tgid, ts_ns } => {
                out.push(json!({"name": "main", "cat": "main", "ph": "i", "s": "t", "ts": us(*ts_ns), "pid": tgid, "tid": pid}));
            }
            Event::Exit(_) | Event::Sample(_) => {}
        }
    }
    // User space between a process's successive attempts after a successful exec.
    attempts.sort_by_key(|a| (a.tgid, a.enter_ns));
    for pair in attempts.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.tgid == b.tgid && a.ret == 0 && b.enter_ns > a.exit_ns {
            out.push(json!({"name": "user space", "cat": "user", "ph": "X", "ts": us(a.exit_ns), "dur": dur(a.exit_ns, b.enter_ns), "pid": b.tgid, "tid": b.pid}));
        }
    }
    for (tgid, tid) in threads {
        out.push(json!({"name": "thread_name", "ph": "M", "pid": tgid, "tid": tid, "args": {"name": format!("tid {tid}")}}));
    }
    json!({ "traceEvents": out, "displayTimeUnit": "ns" })
}

pub fn write_trace(path: &Path, events: &[crate::events::Event], plan: Option<&crate::exact_plan::ExactPlan>) -> Result<()> {
    let file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    serde_json::to_writer(BufWriter::new(file), &trace_events(events, plan)).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::test_support::attempt,
        events::{Event, Fork},
    };

    #[test]
    fn one_exec_slice_per_attempt_with_parts_faults_and_user_gaps() {
        let mut ok = attempt(7, 1_000, 41_000, 0, Some(3));
        ok.prepare_ns = Some(11_000);
        let events = vec![
            Event::Fork(Fork { ts_ns: 500, parent_pid: 6, parent_tgid: 6, child_pid: 7, child_tgid: 7, thread: false }),
            Event::Exec(ok),
            Event::Exec(attempt(7, 50_000, 51_500, -2, Some(0))),
            Event::Exec(attempt(7, 52_000, 90_000, 0, Some(2))),
        ];
        let v = trace_events(&events, None);
        let evs = v["traceEvents"].as_array().unwrap();
        let count = |cat: &str| evs.iter().filter(|e| e["cat"] == cat).count();
        assert_eq!(count("exec"), 3);
        assert_eq!(count("exec.part"), 2);
        assert_eq!(count("fork"), 1);
        assert_eq!(count("faults"), 2, "attempts with faults get an instant each");
        assert_eq!(count("user"), 1, "one gap after the first successful exec");
        let first = evs.iter().find(|e| e["cat"] == "exec").unwrap();
        assert_eq!(first["ts"], 0.5, "relative to the first event, in µs");
        assert_eq!(first["dur"], 40.0);
        let text = serde_json::to_string(&v).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    }
}
