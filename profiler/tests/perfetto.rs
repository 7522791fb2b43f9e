//! Perfetto traces read by Perfetto's own published protos: PyPI's `perfetto` (its
//! `perfetto_trace_pb2`), parsed by PyPI's `protobuf`, offline, in the virtual environment
//! `cargo xtask setup` makes for the tests (`/var/cache/execprof/python`). The reader,
//! `programs/perfetto_check.py`, resolves times through the trace's clocks and names through
//! its interned data, and rebuilds every track's slices as a trace processor does. Root tests
//! (`#[ignore = "needs root"]`), run by `cargo xtask ci` on the host only: the format does not
//! depend on the kernel.
use std::{collections::HashMap, path::Path, process::Command};

use serde_json::Value;

macro_rules! require_root {
    () => {
        assert!(unsafe { libc::geteuid() } == 0, "this test traces with BPF and needs root (CAP_BPF + CAP_PERFMON): run it with sudo");
    };
}

const PYTHON: &str = "/var/cache/execprof/python/bin/python3";

/// What `perfetto_check.py` reads in `trace`; fails the test if it finds anything wrong.
fn read_trace(trace: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/perfetto_check.py");
    let out = Command::new(PYTHON)
        .arg(script)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("{PYTHON}: {e}; `cargo xtask setup` makes it (PyPI's perfetto and protobuf)"));
    assert!(out.status.success(), "perfetto_check.py: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error_count"], 0, "{}", v["errors"]);
    v
}

/// Slices whose name starts with `prefix`: how many, and their summed nanoseconds.
fn slices_named(v: &Value, prefix: &str) -> (u64, u64) {
    let sum = |key: &str| -> u64 {
        v[key].as_object().unwrap().iter().filter(|(name, _)| name.starts_with(prefix)).map(|(_, n)| n.as_u64().unwrap()).sum()
    };
    (sum("slices"), sum("slice_ns"))
}

fn execprof(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_execprof")).args(args).output().unwrap();
    assert!(out.status.success(), "execprof {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The report's exec outcomes: count and summed latency, by outcome.
fn outcomes(report: &Value) -> HashMap<String, (u64, u64)> {
    report["analysis"]["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["count"].as_u64() > Some(0))
        .map(|o| (o["outcome"].as_str().unwrap().to_owned(), (o["count"].as_u64().unwrap(), o["latency"]["total_ns"].as_u64().unwrap())))
        .collect()
}

/// `run --trace` on the built-in chain: one exec slice per attempt, named by its outcome, whose
/// count and summed time per outcome are the report's to the nanosecond; every successful exec's
/// part after the point of no return where the kernel reports it (6.10+); a recording of the
/// run replays to the same bytes. Nothing the reader resolves is missing or unbalanced.
#[test]
#[ignore = "needs root"]
fn a_runs_trace_reads_in_perfettos_protos_with_the_reports_attempts_and_times() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_str().unwrap().to_owned();
    execprof(&[
        "run",
        "--steps",
        "500",
        "--misses",
        "3",
        "--trace",
        &p("live.pftrace"),
        "--json",
        &p("run.json"),
        "--output",
        &p("run.execprof"),
    ]);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(p("run.json")).unwrap()).unwrap();
    let v = read_trace(Path::new(&p("live.pftrace")));
    let want = outcomes(&report);
    assert_eq!(want["enoent"].0, 500 * 3);
    for (outcome, label) in [("enoent", "ENOENT"), ("success", "success")] {
        assert_eq!(slices_named(&v, &format!("exec {label} ")), want[outcome], "{outcome}: slices and their time, as the report");
    }
    let attempts: u64 = want.values().map(|w| w.0).sum();
    assert_eq!(slices_named(&v, "exec ").0, attempts);
    let (success, parts) = (want["success"].0, slices_named(&v, "after point of no return").0);
    if execprof::testing::kernel_version() >= (6, 10) {
        assert_eq!(parts, success);
    } else {
        assert_eq!(parts, 0);
    }
    let args = v["args"].as_object().unwrap();
    assert!(
        args.iter()
            .filter(|(name, _)| name.starts_with("exec success "))
            .all(|(_, a)| a.as_array().unwrap().contains(&"minor_faults".into())),
        "each successful exec's page faults: {}",
        v["args"]
    );

    execprof(&["report", &p("run.execprof"), "--trace", &p("replay.pftrace")]);
    assert!(std::fs::read(p("live.pftrace")).unwrap() == std::fs::read(p("replay.pftrace")).unwrap(), "the replay writes the same trace");
}

/// A shell script's forks and execs: a process track for each child, its fork calls as slices
/// (as many as the report counts per syscall) and instants, its failed lookup named by its file.
#[test]
#[ignore = "needs root"]
fn a_shell_scripts_forks_and_execs_each_have_their_process_and_slices() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let (trace, json) = (dir.path().join("t.pftrace"), dir.path().join("r.json"));
    let script = "for i in $(seq 40); do /bin/true; done; /nonexistent/execprof-cmd 2>/dev/null; true";
    let out = Command::new(env!("CARGO_BIN_EXE_execprof"))
        .args(["run", "--trace"])
        .arg(&trace)
        .arg("--json")
        .arg(&json)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = read_trace(&trace);
    assert_eq!(slices_named(&v, "exec success /bin/true").0, 40);
    assert_eq!(slices_named(&v, "exec ENOENT /nonexistent/execprof-cmd").0, 1);
    let forks: u64 = report["analysis"]["fork_calls"].as_array().unwrap().iter().map(|f| f["count"].as_u64().unwrap()).sum();
    assert!(forks >= 41, "{forks} fork-family calls");
    let syscalls = ["clone", "clone3", "fork", "vfork"];
    let fork_slices: u64 = syscalls.iter().map(|s| v["slices"][s].as_u64().unwrap_or(0)).sum();
    assert_eq!(fork_slices, forks, "{}", v["slices"]);
    assert!(v["instants"]["fork"].as_u64().unwrap() >= 41, "{}", v["instants"]);
    assert!(v["processes"].as_u64().unwrap() >= 42, "the shell and a process per command: {}", v["processes"]);
}
