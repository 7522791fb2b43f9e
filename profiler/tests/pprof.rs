//! pprof profiles read by the real reader: `go tool pprof` from Debian's golang-go (installed by
//! `cargo xtask setup` for the tests). Root tests (`#[ignore = "needs root"]`), run by `cargo
//! xtask ci` on the host only: the format does not depend on the kernel, and Go under TCG
//! would take the guests' minutes.
use std::{path::Path, process::Command};

use serde_json::Value;

macro_rules! require_root {
    () => {
        assert!(unsafe { libc::geteuid() } == 0, "this test traces with BPF and needs root (CAP_BPF + CAP_PERFMON): run it with sudo");
    };
}

/// `go tool pprof ARGS FILE`'s standard output; fails the test with its error otherwise.
fn go_pprof(home: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        // Go wants a home for its caches; pprof fetches nothing for a local file.
        .env("HOME", home)
        .output()
        .expect("go (Debian's golang-go) runs: `cargo xtask setup` installs it");
    assert!(out.status.success(), "go tool pprof {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The total `go tool pprof -top` states: "… of N total" (N in the sample index's unit).
fn total(top: &str) -> f64 {
    let line = top.lines().find(|l| l.contains(" total")).unwrap_or_else(|| panic!("no total in:\n{top}"));
    let n = line.split(" of ").nth(1).and_then(|t| t.split_whitespace().next()).unwrap();
    n.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().unwrap_or_else(|_| panic!("total {n:?} in {line}"))
}

/// `run --pprof`: the profile's samples are the run's (their total equals the report's), every
/// sample carries the outcome and phase labels, ENOENT samples lie under the exec's path lookup
/// (`do_open_execat` on every kernel), and exec_time, the default sample type, adds up to the
/// attempts' measured time.
#[test]
#[ignore = "needs root"]
fn a_runs_profile_reads_in_go_tool_pprof_with_its_samples_labels_and_lookups() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let (file, json) = (dir.path().join("exec.pb.gz"), dir.path().join("run.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_execprof"))
        .args(["run", "--mode", "sampled", "--steps", "3000", "--sample-hz", "4999", "--pprof"])
        .arg(&file)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let outcomes = v["analysis"]["sampled"]["outcomes"].as_array().unwrap();
    let samples: u64 = outcomes.iter().map(|o| o["samples"].as_u64().unwrap()).sum();
    assert!(samples > 100, "too few samples to judge: {samples}");

    let top = go_pprof(dir.path(), &["-top", "-sample_index=samples"], &file);
    assert_eq!(total(&top) as u64, samples, "the profile's samples are the report's:\n{top}");

    let tags = go_pprof(dir.path(), &["-tags", "-sample_index=samples"], &file);
    for want in ["outcome", "enoent", "success", "phase", "lookup"] {
        assert!(tags.contains(want), "{want} in the tags:\n{tags}");
    }
    let enoent = go_pprof(dir.path(), &["-top", "-cum", "-sample_index=samples", "-tagfocus=outcome=enoent"], &file);
    let enoent_samples = outcomes.iter().find(|o| o["outcome"] == "enoent").unwrap()["samples"].as_u64().unwrap();
    assert_eq!(total(&enoent) as u64, samples, "-tagfocus keeps the total:\n{enoent}");
    let under_lookup = enoent.lines().find(|l| l.ends_with(" do_open_execat")).unwrap_or_else(|| panic!("do_open_execat in:\n{enoent}"));
    // flat flat% sum% cum cum% name: the cumulative samples under the lookup.
    let cum: f64 = under_lookup.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(cum >= 0.5 * enoent_samples as f64, "most ENOENT samples under do_open_execat ({cum} of {enoent_samples}):\n{enoent}");

    // exec_time (nanoseconds, the default) adds up to the sampled outcomes' measured time.
    let measured: f64 = outcomes
        .iter()
        .filter(|o| o["samples"].as_u64() > Some(0))
        .map(|o| o["attempts"].as_f64().unwrap() * o["mean_ns"].as_f64().unwrap())
        .sum();
    let time = go_pprof(dir.path(), &["-top", "-unit=ns"], &file);
    let got = total(&time);
    assert!((got - measured).abs() <= 0.01 * measured, "exec_time {got} ns vs measured {measured} ns:\n{time}");
}
