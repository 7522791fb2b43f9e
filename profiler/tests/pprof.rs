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
/// sample carries the outcome, calling program and phase labels, ENOENT samples lie under the exec's path lookup
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
    for want in ["outcome", "enoent", "success", "phase", "lookup", "program", "/execprof-chain\n"] {
        assert!(tags.contains(want), "{want} in the tags:\n{tags}");
    }
    // The calling programs: the chain's own binary, and execprof's child launching it, whose
    // single exec (~0.1 ms) a 4,999 Hz clock samples about every other run.
    let programs = tags.split("program:").nth(1).unwrap_or_default();
    for line in programs.lines().skip(1).take_while(|l| !l.trim().is_empty()) {
        let name = line.split("): ").nth(1).unwrap();
        assert!(
            name.ends_with("/execprof-chain") || name == "execprof (launching the command)",
            "{name:?} is no program of the run:\n{tags}"
        );
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

/// One HTTP/1.0 GET to `addr`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, Vec<u8>) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    (head.lines().next().unwrap_or_default().to_owned(), raw[head_end + 4..].to_vec())
}

/// The agent's `/debug/pprof/exec`, fetched by `go tool pprof` from the URL as an operator
/// would: the window's samples are the agent's own report's, labelled with outcome, program
/// and phase; its ENOENT samples lie under the path lookup, and exec_time adds up to the
/// sampled series' measured time. A bad `seconds` is a 400.
#[test]
#[ignore = "needs root"]
fn the_agents_profile_endpoint_reads_in_go_tool_pprof() {
    use std::io::{BufRead as _, Write as _};
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("d/".repeat(500));
    std::fs::create_dir_all(&deep).unwrap();
    let json = dir.path().join("agent.json");
    // The workload waits for the agent, says when it is done, and stays until told (the agent
    // watching its tree ends with it).
    let script = format!(
        "read go; i=0; while [ $i -lt 1000 ]; do {deep}missing 2>/dev/null; i=$((i+1)); done; i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; echo done; read end",
        deep = deep.display()
    );
    let mut caller = Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_execprof"))
        .args(["agent", "--pid", &caller.id().to_string(), "--sample-hz", "4999", "--interval", "0.2", "--listen", "127.0.0.1:0", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(agent.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("agent counting") {
        if let Some(rest) = line.split("metrics at http://").nth(1) {
            addr = rest.split('/').next().map(str::to_owned);
        }
        line.clear();
    }
    let addr = addr.unwrap_or_else(|| panic!("the agent named no endpoint; it said: {line}"));
    let mut stdin = caller.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    let mut done = String::new();
    std::io::BufReader::new(caller.stdout.take().unwrap()).read_line(&mut done).unwrap();
    assert_eq!(done.trim(), "done");
    // Three reads of the kernel's maps after the last exec.
    std::thread::sleep(std::time::Duration::from_millis(800));

    let url = format!("http://{addr}/debug/pprof/exec?seconds=120");
    let file = dir.path().join("agent.pb.gz");
    let (status, body) = http_get(&addr, "/debug/pprof/exec?seconds=120");
    assert!(status.contains(" 200 "), "{status}");
    std::fs::write(&file, body).unwrap();
    let (status, body) = http_get(&addr, "/debug/pprof/exec?seconds=0");
    assert!(status.contains(" 400 ") && String::from_utf8_lossy(&body).contains("--profile-window"), "{status}");
    // go tool pprof fetches the URL itself, as it would from an operator's shell.
    let fetched = go_pprof(dir.path(), &["-top", "-sample_index=samples"], Path::new(&url));

    writeln!(stdin, "end").unwrap();
    assert!(caller.wait().unwrap().success());
    assert!(agent.wait().unwrap().success());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let outcomes = v["sampled"]["outcomes"].as_array().unwrap_or_else(|| panic!("no sampled outcomes: {}", v["sampled"]));
    let samples: u64 = outcomes.iter().map(|o| o["samples"].as_u64().unwrap()).sum();
    assert!(samples > 100, "too few samples to judge: {samples}");
    assert_eq!(total(&fetched) as u64, samples, "the window's samples are the agent's report's:\n{fetched}");

    let tags = go_pprof(dir.path(), &["-tags", "-sample_index=samples"], &file);
    let sh = std::fs::canonicalize("/bin/sh").unwrap().display().to_string();
    for want in ["outcome", "enoent", "success", "program", sh.as_str(), "phase", "lookup"] {
        assert!(tags.contains(want), "{want} in the tags:\n{tags}");
    }
    let enoent = go_pprof(dir.path(), &["-top", "-cum", "-sample_index=samples", "-tagfocus=outcome=enoent"], &file);
    let enoent_samples = outcomes.iter().find(|o| o["outcome"] == "enoent").unwrap()["samples"].as_u64().unwrap();
    let under_lookup = enoent.lines().find(|l| l.ends_with(" do_open_execat")).unwrap_or_else(|| panic!("do_open_execat in:\n{enoent}"));
    let cum: f64 = under_lookup.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(cum >= 0.5 * enoent_samples as f64, "most ENOENT samples under do_open_execat ({cum} of {enoent_samples}):\n{enoent}");

    // exec_time adds up to the measured time of the exec series that were sampled (the
    // shell's ENOENT and successful execs: both long and many enough to be).
    let measured: f64 = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["call"] == "exec" && s["program"] == sh.as_str())
        .map(|s| s["total_ns"].as_f64().unwrap())
        .sum();
    let time = go_pprof(dir.path(), &["-top", "-unit=ns"], &file);
    let got = total(&time);
    assert!((got - measured).abs() <= 0.01 * measured, "exec_time {got} ns vs measured {measured} ns:\n{time}");
}
