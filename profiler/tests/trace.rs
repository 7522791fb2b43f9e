//! Root tests with known answers: real BPF, real workloads. Skipped (with the reason) when not
//! root; CI runs as root.
use std::{path::Path, process::Command as StdCommand};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn root() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: tracing tests need root (CAP_BPF + CAP_PERFMON)");
    }
    root
}

/// Returns from the test (as a skip, with the reason printed) unless running as root.
macro_rules! require_root {
    () => {
        if !root() {
            return;
        }
    };
}

fn execprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_execprof"))
}

fn run_json(args: &[&str]) -> (Value, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = execprof().arg("run").arg("--json").arg(&json).args(args).output().unwrap();
    assert!(json.exists(), "no JSON written; stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, out)
}

fn outcome_count(v: &Value, outcome: &str) -> u64 {
    v["analysis"]["outcomes"].as_array().unwrap().iter().find(|o| o["outcome"] == outcome).unwrap()["count"].as_u64().unwrap()
}

fn assert_no_losses(v: &Value) {
    for pair in v["losses"].as_array().unwrap() {
        assert_eq!(pair[1], 0, "lost: {pair}");
    }
    assert_eq!(v["undecodable_records"], 0);
}

#[test]
fn chain_shows_exactly_n_times_k_enoent_and_n_successes() {
    require_root!();
    let (steps, misses) = (300u64, 4u64);
    let (v, out) = run_json(&["--steps", &steps.to_string(), "--misses", &misses.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(outcome_count(&v, "enoent"), steps * misses);
    // The chain's N execs plus the launch exec.
    assert_eq!(outcome_count(&v, "success"), steps + 1);
    assert_eq!(outcome_count(&v, "other"), 0);
    assert_eq!(v["analysis"]["chain"]["steps"], steps);
    assert_eq!(v["analysis"]["chain"]["failed_attempts_per_step"], misses as f64);
    // Every successful exec here passes the point of no return.
    assert_eq!(v["analysis"]["success_split"]["unsplit"], 0);
    assert_no_losses(&v);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Exec chain: 300 steps"), "{stdout}");
}

#[test]
fn chain_without_misses_has_no_enoent() {
    require_root!();
    let (v, _) = run_json(&["--steps", "50", "--misses", "0"]);
    assert_eq!(outcome_count(&v, "enoent"), 0);
    assert_eq!(outcome_count(&v, "success"), 51);
}

/// A grandchild shell forks /bin/true M times; meanwhile a process outside the tree execs
/// /bin/false in a loop. Only the tree's execs may appear.
#[test]
fn follows_forks_of_grandchildren_and_nothing_outside_the_tree() {
    require_root!();
    let m = 40;
    let mut outsider = StdCommand::new("/bin/sh")
        .args(["-c", "while :; do /bin/false; done"])
        .spawn()
        .unwrap();
    let script = format!("/bin/sh -c 'i=0; while [ $i -lt {m} ]; do /bin/true; i=$((i+1)); done'");
    let (v, out) = run_json(&["--", "/bin/sh", "-c", &script]);
    outsider.kill().unwrap();
    outsider.wait().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = v["analysis"]["files"].as_array().unwrap();
    let count = |name: &str| files.iter().filter(|f| f["filename"] == name).map(|f| f["successes"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(count("/bin/true"), m);
    assert_eq!(count("/bin/false"), 0, "an exec from outside the tree was recorded: {files:?}");
    // sh (launch) + inner sh + M forks of true.
    assert!(v["analysis"]["processes"].as_u64().unwrap() >= m + 2);
    assert_no_losses(&v);
}

#[test]
fn missing_command_exits_127_like_a_shell() {
    require_root!();
    execprof()
        .args(["run", "--", "no-such-command-execprof"])
        .assert()
        .code(127)
        .stderr(predicate::str::contains("no-such-command-execprof: command not found"));
}

#[test]
fn non_executable_file_exits_126() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("data.txt");
    std::fs::write(&f, "not a program").unwrap();
    execprof().arg("run").arg("--").arg(&f).assert().code(126).stderr(predicate::str::contains("cannot execute"));
}

#[test]
fn command_exit_status_becomes_execprofs() {
    require_root!();
    let out = execprof().args(["run", "--", "/bin/sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&out.stdout).contains("exit code 7"));
}

#[test]
fn doctor_tries_mechanisms_and_names_exec_functions() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("doctor.json");
    execprof().arg("doctor").arg("--json").arg(&json).assert().success().stdout(predicate::str::contains("Plan"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mech = |name: &str| v["mechanisms"].as_array().unwrap().iter().find(|m| m["name"] == name).cloned().unwrap();
    // Tracepoints are what `run` stands on: every kernel execprof supports has them.
    assert_eq!(mech("tracepoint")["ok"], true);
    assert_eq!(mech("raw tracepoint")["ok"], true);
    // Whatever kprobe support is, the answer must agree with the kernel's PMU list.
    let kprobe_pmu = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    assert_eq!(mech("kprobe")["ok"].as_bool().unwrap(), kprobe_pmu, "{}", mech("kprobe"));
    let funcs = v["functions"].as_array().unwrap();
    let f = |name: &str| funcs.iter().find(|f| f["function"] == name).cloned().unwrap();
    assert_eq!(f("bprm_execve")["presence"]["status"], "present");
    assert_ne!(f("do_execveat_common")["presence"]["status"], "absent");
}

fn python(script: &str) -> Vec<String> {
    vec!["--".into(), "/usr/bin/python3".into(), "-c".into(), script.into()]
}

/// An exec from a non-leader thread: the kernel kills the other threads (the leader among
/// them) and the exec'ing thread takes the leader's id. The attempt must survive the id
/// change and the process must stay traced.
#[test]
fn exec_from_a_thread_is_recorded_under_the_new_id() {
    require_root!();
    let args = python("import os, threading\nt = threading.Thread(target=lambda: os.execv('/bin/true', ['true']))\nt.start()\nt.join()");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (v, out) = run_json(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = v["analysis"]["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["filename"] == "/bin/true" && f["successes"] == 1), "{files:?}");
    assert_eq!(v["analysis"]["from_non_leader_threads"], 1);
    assert_no_losses(&v);
}

/// fexecve(3) goes through execveat(fd, "", AT_EMPTY_PATH).
#[test]
fn execveat_is_recorded() {
    require_root!();
    let args = python("import os\nfd = os.open('/bin/true', os.O_RDONLY)\nos.execve(fd, ['true'], {})");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (v, out) = run_json(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["analysis"]["execveat_attempts"], 1);
    assert_no_losses(&v);
}

/// A file name longer than the kept 255 bytes is cut and flagged, not dropped.
#[test]
fn long_file_names_are_cut_and_counted() {
    require_root!();
    let long = format!("/{}", "d/".repeat(150)) + "missing";
    let (v, out) = run_json(&["--", "/bin/sh", "-c", &long]);
    assert_eq!(out.status.code(), Some(127), "sh reports the missing file");
    assert_eq!(v["analysis"]["filenames_truncated"], 1);
    assert_eq!(outcome_count(&v, "enoent"), 1);
    let files = v["analysis"]["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["filename"].as_str().unwrap().len() == 255), "{files:?}");
}
