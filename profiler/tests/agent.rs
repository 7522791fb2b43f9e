//! Root tests of `execprof agent` with known answers: real BPF, the kernel's aggregates, real
//! workloads in fresh cgroups. `#[ignore = "needs root"]`, run by `cargo xtask ci` here and in
//! every guest kernel.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

macro_rules! require_root {
    () => {
        assert!(unsafe { libc::geteuid() } == 0, "this test counts with BPF and needs root (CAP_BPF + CAP_PERFMON): run it with sudo");
    };
}

/// The cgroup2 hierarchy's mount point, mounting one under `dir` when none is mounted.
fn cgroup2_root(dir: &Path) -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    if let Some(point) = info.lines().find(|l| l.contains(" - cgroup2 ")).and_then(|l| l.split_whitespace().nth(4)) {
        return point.into();
    }
    let point = dir.join("cgroup2");
    std::fs::create_dir(&point).unwrap();
    let ok = Command::new("mount").args(["-t", "cgroup2", "none"]).arg(&point).status().unwrap();
    assert!(ok.success(), "mounting cgroup2");
    point
}

/// A fresh cgroup directory under the cgroup2 root, removed on drop (with its children).
struct Cgroup {
    path: PathBuf,
    /// Its name as the agent shows it: its path under the mount.
    shown: String,
}

impl Cgroup {
    fn new(root: &Path, name: &str) -> Self {
        let path = root.join(format!("execprof-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).unwrap();
        let shown = format!("/{}", path.strip_prefix(root).unwrap().display());
        Self { path, shown }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.path) {
            for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Starts the agent and waits until it counts (its start line on standard error).
fn start_agent(args: &[&str], json: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_execprof"))
        .arg("agent")
        .arg("--json")
        .arg(json)
        .args(["--interval", "0.2"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0 && Instant::now() < deadline, "the agent did not start: {line}");
        if line.contains("agent counting") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::stderr()));
    child
}

/// Stops the agent with SIGTERM and reads its JSON.
fn stop_agent(agent: Child, json: &Path) -> Value {
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let out = agent.wait_with_output().unwrap();
    assert!(out.status.success(), "agent failed: {}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// Runs `script` in `/bin/sh` after it moved itself into `cgroup` (None: where it is).
fn sh_in(cgroup: Option<&Path>, script: &str) {
    let enter = cgroup.map(|c| format!("echo $$ > {}/cgroup.procs; ", c.display())).unwrap_or_default();
    let ok = Command::new("/bin/sh").arg("-c").arg(format!("{enter}{script}")).stderr(Stdio::null()).status().unwrap();
    assert!(ok.code().is_some());
}

/// The sum of `count` over the series matching `pred`.
fn count(v: &Value, pred: impl Fn(&Value) -> bool) -> u64 {
    v["series"].as_array().unwrap().iter().filter(|s| pred(s)).map(|s| s["count"].as_u64().unwrap()).sum()
}

fn sh_path() -> String {
    std::fs::canonicalize("/bin/sh").unwrap().display().to_string()
}

/// N failing and M successful execs and their N + M forks, by a shell inside a fresh cgroup,
/// are exactly N, M and N + M in that cgroup's series for the shell's program; the same
/// workload outside the cgroup adds nothing to it.
#[test]
#[ignore = "needs root"]
fn known_answers_per_cgroup_program_and_outcome() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let root = cgroup2_root(dir.path());
    let cg = Cgroup::new(&root, "known");
    let json = dir.path().join("agent.json");
    let agent = start_agent(&["--cgroup", cg.path.to_str().unwrap()], &json);
    let (n, m) = (7u64, 5u64);
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do /nonexistent/execprof-missing; i=$((i+1)); done; i=0; while [ $i -lt {m} ]; do /bin/true; i=$((i+1)); done"
    );
    sh_in(None, &script);
    sh_in(Some(&cg.path), &script);
    let v = stop_agent(agent, &json);
    // The shell's path, read by the kernel from its file: the shell is gone by the agent's
    // next read.
    let sh = sh_path();
    let mine = |s: &Value| s["cgroup"] == cg.shown.as_str() && s["program"] == sh.as_str();
    assert_eq!(count(&v, |s| mine(s) && s["call"] == "exec" && s["outcome"] == "ENOENT"), n, "{}", v["series"]);
    assert_eq!(count(&v, |s| mine(s) && s["call"] == "exec" && s["outcome"] == "success"), m, "{}", v["series"]);
    assert_eq!(count(&v, |s| mine(s) && s["call"] == "fork" && s["outcome"] == "success"), n + m, "{}", v["series"]);
    // Nothing else was counted: the scope is the cgroup (the outside shell is not in it).
    assert_eq!(v["analysis"]["attempts"], n + m, "{}", v["series"]);
    assert_eq!(v["analysis"]["fork_calls"]["count"], n + m);
    assert_eq!(v["complete"], true, "{}", v["losses"]);
    // The histogram holds every timed call; its median lies in a bucket of at most 9.05%.
    let enoent = v["analysis"]["outcomes"].as_array().unwrap().iter().find(|o| o["outcome"] == "ENOENT").unwrap();
    let p50 = &enoent["latency"]["p50"];
    assert_eq!(enoent["latency"]["count"], n);
    let (low, high) = (p50["low_ns"].as_f64().unwrap(), p50["high_ns"].as_f64().unwrap());
    assert!(low > 0.0 && (high - low - 1.0) / low <= 0.0906, "{p50}");
    // The missed directory of the N failures, exactly, and nothing else missed.
    let missed = v["missed_directories"].as_array().unwrap();
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0]["directory"], "/nonexistent");
    assert_eq!(missed[0]["misses"], n);
    assert_eq!(missed[0]["cgroups"][0], cg.shown.as_str());
    // Forks name their parent's size: the shell has resident pages.
    let forks = v["series"].as_array().unwrap().iter().find(|s| mine(s) && s["call"] == "fork").unwrap();
    assert!(forks["parent_rss_pages_max"].as_u64().unwrap() > 0, "{forks}");
}

/// With a kernel map of 4 series, 1,000 distinct programs (200 in a guest) fold into `other` with the exact
/// count of what was folded, and the totals still equal the attempts made.
#[test]
#[ignore = "needs root"]
fn a_full_map_folds_into_other_and_counts_it() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let root = cgroup2_root(dir.path());
    let cg = Cgroup::new(&root, "fold");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // 1,000 here; 200 under emulation (a guest under TCG), enough for the same folding.
    let programs = if execprof::testing::slowdown() > 1 { 200 } else { 1000u64 };
    // Distinct files (copies, not links) of env(1): distinct calling programs, each exec'ing
    // /bin/true once.
    let env = std::fs::canonicalize("/usr/bin/env").unwrap();
    for i in 0..programs {
        std::fs::copy(&env, bin.join(format!("p{i}"))).unwrap();
    }
    let json = dir.path().join("agent.json");
    let agent = start_agent(&["--cgroup", cg.path.to_str().unwrap(), "--max-series", "4"], &json);
    // The shell forks and execs each copy, which execs /bin/true: 1,000 callers of one exec.
    let script = format!("i=0; while [ $i -lt {programs} ]; do {}/p$i /bin/true; i=$((i+1)); done", bin.display());
    sh_in(Some(&cg.path), &script);
    let v = stop_agent(agent, &json);
    let folded = v["losses"]["exec_folded_in_kernel"].as_u64().unwrap() + v["losses"]["fork_folded_in_kernel"].as_u64().unwrap();
    let in_other = count(&v, |s| s["program"] == "other");
    assert!(folded > 0, "nothing folded with 4 series: {}", v["losses"]);
    // The copies that got a series of their own are named by their paths.
    let named = count(&v, |s| s["program"].as_str().is_some_and(|p| p.starts_with(&format!("{}/p", bin.display()))));
    assert!(named > 0, "{}", v["series"]);
    assert_eq!(in_other, folded, "what is in other is what was counted as folded");
    // Every exec and fork is in some series: the shell's fork and exec of each copy, and the
    // copy's exec of /bin/true.
    assert_eq!(v["analysis"]["attempts"], 2 * programs, "{}", v["analysis"]["outcomes"]);
    assert_eq!(v["analysis"]["fork_calls"]["count"], programs);
    assert_eq!(v["complete"], false);
    assert!(v["capacities"]["series_in_kernel"].as_u64().unwrap() <= 4);
}

/// Entries of cgroups that are gone are removed from the kernel after their last read: after
/// 1,000 cgroups (200 in a guest) are made, used and removed, the kernel map holds none of them, and the
/// totals keep every exec.
#[test]
#[ignore = "needs root"]
fn entries_of_removed_cgroups_age_out() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let root = cgroup2_root(dir.path());
    let parent = Cgroup::new(&root, "aging");
    let json = dir.path().join("agent.json");
    let agent = start_agent(&["--cgroup", parent.path.to_str().unwrap()], &json);
    // 1,000 here; 200 under emulation (a guest under TCG).
    let cgroups = if execprof::testing::slowdown() > 1 { 200 } else { 1000u64 };
    let script = format!(
        "i=0; while [ $i -lt {cgroups} ]; do d={p}/c$i; mkdir $d; sh -c \"echo \\$\\$ > $d/cgroup.procs; exec /bin/true\"; rmdir $d; i=$((i+1)); done",
        p = parent.path.display()
    );
    sh_in(None, &script);
    // The cgroup tree is walked every 5 s: wait for a walk after the last removal.
    std::thread::sleep(Duration::from_secs(7));
    let v = stop_agent(agent, &json);
    assert_eq!(count(&v, |s| s["call"] == "exec" && s["outcome"] == "success"), cgroups, "{}", v["analysis"]["outcomes"]);
    assert!(v["capacities"]["series_removed"].as_u64().unwrap() >= cgroups, "{}", v["capacities"]);
    assert_eq!(v["capacities"]["series_in_kernel"], 0, "{}", v["capacities"]);
}

/// Bad options get a usage error that says what to give, and no agent runs.
#[test]
fn bad_agent_options_are_usage_errors() {
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_execprof")).arg("agent").args(args).output().unwrap();
    let out = run(&["--interval", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--interval 0: give a number of seconds"));
    let out = run(&["--max-series", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--all", "--pid", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A shell in `cgroup` exec'ing /bin/true in a loop, killed when dropped (also when the
/// test fails: a loop left behind would slow every test after it).
struct BusyCaller(Child);

impl BusyCaller {
    fn start(cgroup: &Path) -> Self {
        let script = format!("echo $$ > {}/cgroup.procs; while :; do /bin/true; done", cgroup.display());
        Self(Command::new("/bin/sh").arg("-c").arg(script).spawn().unwrap())
    }
}

impl Drop for BusyCaller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether tmux can start a session here: the guests' minimal userlands may lack what it
/// needs (a pty file system, a UTF-8 locale); this machine has it.
fn tmux_works(socket: &str) -> Result<(), String> {
    let out = tmux(socket, &["new-session", "-d", "-s", "probe", "true"]);
    tmux(socket, &["kill-server"]);
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
}

fn tmux(socket: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux").args(["-L", socket, "-f", "/dev/null"]).args(args).output().expect("tmux (cargo xtask setup installs it)")
}

/// Waits until the pane shows what `want` accepts; returns the screen.
fn screen_until(socket: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let screen = String::from_utf8_lossy(&tmux(socket, &["capture-pane", "-p", "-t", "top"]).stdout).into_owned();
        if want(&screen) {
            return screen;
        }
        assert!(Instant::now() < deadline, "the screen never showed what was expected:\n{screen}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `top --once` prints one 80-column frame with the busy caller's row; `top` in a terminal
/// (tmux, 80×24) shows it too, switches to cgroups on `c`, and ends on `q` (in a guest only
/// where tmux can run: the x86_64 guests have no pty file system, the arm64 one no UTF-8
/// locale).
#[test]
#[ignore = "needs root"]
fn top_shows_the_callers_row_once_and_in_a_terminal() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let root = cgroup2_root(dir.path());
    let cg = Cgroup::new(&root, "top");
    let _caller = BusyCaller::start(&cg.path);
    let sh = sh_path();
    let once =
        Command::new(env!("CARGO_BIN_EXE_execprof")).args(["top", "--once", "--cgroup", cg.path.to_str().unwrap()]).output().unwrap();
    let frame = String::from_utf8_lossy(&once.stdout).into_owned();
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
    assert!(frame.lines().all(|l| l.chars().count() <= 80), "{frame}");
    let row = frame.lines().find(|l| l.starts_with(&sh)).unwrap_or_else(|| panic!("no row for {sh}:\n{frame}"));
    let execs: u64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(execs > 0, "{row}");

    let socket = format!("execprof-top-{}", std::process::id());
    // Interactive: under tmux, required here; in a guest only where its userland can run it.
    if let Err(why) = tmux_works(&socket) {
        assert!(execprof::testing::slowdown() > 1, "tmux cannot start a session here: {why}");
        eprintln!("top in a terminal not tried in this guest: tmux cannot start a session ({why})");
        return;
    }
    let command = format!("{} top --cgroup {}", env!("CARGO_BIN_EXE_execprof"), cg.path.display());
    let started = tmux(&socket, &["new-session", "-d", "-s", "top", "-x", "80", "-y", "24", &command]);
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let screen = screen_until(&socket, |s| s.lines().any(|l| l.starts_with(&sh)));
    assert!(screen.contains("PROGRAM") && screen.contains("q quit"), "{screen}");
    tmux(&socket, &["send-keys", "-t", "top", "c"]);
    let screen = screen_until(&socket, |s| s.contains("CGROUP"));
    assert!(screen.lines().any(|l| l.starts_with(&cg.shown) || l.starts_with('…')), "{screen}");
    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tmux(&socket, &["has-session", "-t", "top"]).status.success() {
        assert!(Instant::now() < deadline, "top did not end on q");
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux(&socket, &["kill-server"]);
}

/// Kernel stacks sampled inside exec attempts are counted in the kernel per outcome and
/// stack, and attributed to phases as `run` attributes them: every sample of the successful
/// execs is in one of their phases.
#[test]
#[ignore = "needs root"]
fn samples_inside_exec_attempts_are_attributed_per_outcome() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let root = cgroup2_root(dir.path());
    let cg = Cgroup::new(&root, "samples");
    let json = dir.path().join("agent.json");
    let agent = start_agent(&["--cgroup", cg.path.to_str().unwrap(), "--sample-hz", "999"], &json);
    sh_in(Some(&cg.path), "i=0; while [ $i -lt 400 ]; do /bin/true; i=$((i+1)); done");
    let v = stop_agent(agent, &json);
    assert_eq!(v["sample_hz"], 999);
    let outcomes = v["sampled"]["outcomes"].as_array().unwrap_or_else(|| panic!("no sampled section: {}", v["sampled"]));
    let success = outcomes.iter().find(|o| o["outcome"] == "success").unwrap_or_else(|| panic!("no success samples: {outcomes:?}"));
    assert_eq!(success["attempts"], 400);
    let samples = success["samples"].as_u64().unwrap();
    assert!(samples > 0, "{success}");
    let in_phases: u64 = success["phases"].as_array().unwrap().iter().map(|p| p["estimate"]["samples"].as_u64().unwrap()).sum();
    assert_eq!(in_phases, samples, "every sample is in a phase: {success}");
}
