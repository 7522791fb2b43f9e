//! `execprof diff`: against known answers. A recording compared with itself changes nothing;
//! a chain against a command is weighed per exec attempt; figures from one attempt have no
//! interval; rounds (`--round`) combine further pairs; recorded chains that differ in one thing
//! attribute the change to what differs (root).
use std::{path::Path, process::Command};

use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chain-200.execprof");
/// Not the chain, made on kernel 6.18 by `execprof run --output sh-exec.execprof -- /usr/bin/env
/// PATH=/nonexistent-a:/nonexistent-b:/usr/bin:/bin sh -c '/etc/passwd 2>/dev/null; exec env
/// true'`: env, sh, env and true succeed in one process (so its analysis has 3 exec-to-exec
/// steps), each of the three PATH searches misses twice (6 ENOENT) and /etc/passwd is refused
/// once (1 EACCES): 11 attempts.
const COMMAND: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sh-exec.execprof");

macro_rules! require_root {
    () => {
        assert!(unsafe { libc::geteuid() } == 0, "this test traces with BPF and needs root (CAP_BPF + CAP_PERFMON): run it with sudo");
    };
}

fn execprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_execprof"))
}

/// `execprof diff A B --json`: (the JSON, the text).
fn diff(a: &Path, b: &Path) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("diff.json");
    let out = execprof().arg("diff").args([a, b]).arg("--json").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap(), String::from_utf8(out.stdout).unwrap())
}

/// Records the built-in chain with these options into `dir/name.execprof`.
fn record(dir: &Path, name: &str, args: &[&str]) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.execprof"));
    let out = execprof().arg("run").arg("--output").arg(&path).args(args).output().unwrap();
    // The whole report on failure: its table of losses says which records went missing.
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    path
}

fn lines(v: &Value) -> &Vec<Value> {
    v["lines"].as_array().unwrap()
}

fn outcome<'v>(v: &'v Value, o: &str) -> &'v Value {
    v["outcomes"].as_array().unwrap().iter().find(|x| x["outcome"] == o).unwrap_or_else(|| panic!("no {o} in {v}"))
}

/// The text's row of one outcome in the outcome table.
fn row<'t>(text: &'t str, label: &str) -> &'t str {
    text.lines().find(|l| l.starts_with(&format!("  {label} "))).unwrap_or_else(|| panic!("no {label} row in {text}"))
}

#[test]
fn a_chain_against_a_command_is_weighed_per_exec_attempt_not_per_step() {
    let (v, text) = diff(Path::new(FIXTURE), Path::new(COMMAND));
    assert_eq!((outcome(&v, "success")["count_b"].as_u64(), outcome(&v, "enoent")["count_b"].as_u64()), (Some(4), Some(6)));
    assert_eq!(v["unit"], "exec_attempt", "the command's exec-to-exec steps are not chain steps");
    assert_eq!((v["a"]["steps"].as_u64(), &v["b"]["steps"], &v["step"]), (Some(200), &Value::Null, &Value::Null));
    let enoent = outcome(&v, "enoent");
    assert_eq!((enoent["per_unit_a"].as_f64(), enoent["per_unit_b"].as_f64()), (Some(1200.0 / 1401.0), Some(6.0 / 11.0)));
    assert!(text.contains("0.86 → 0.55 attempts per exec attempt (any outcome)"), "{text}");
    assert!(!text.contains("attempts per chain step") && !text.contains("  chain step "), "{text}");
    assert!(text.contains("not both runs of the built-in chain"), "{text}");
}

#[test]
fn one_attempt_has_no_interval_and_an_outcome_without_attempts_says_so() {
    // Against itself: the one EACCES attempt a side gives a change of 0 with no interval, untested.
    let (v, text) = diff(Path::new(COMMAND), Path::new(COMMAND));
    let eacces = outcome(&v, "eacces");
    assert_eq!((eacces["count_a"].as_u64(), eacces["count_b"].as_u64()), (Some(1), Some(1)));
    assert_eq!(eacces["median_change"], serde_json::json!({ "value": 0.0 }), "{eacces}");
    assert_eq!((&eacces["significant"], eacces["per_unit_change"].get("low")), (&Value::Bool(false), None));
    let r = row(&text, "EACCES");
    assert!(r.contains("3.55 µs (n=1)") && r.ends_with("n<2") && !r.contains('['), "{r}");
    // Against the chain, which never had EACCES: no latency there, no change.
    let (v, text) = diff(Path::new(FIXTURE), Path::new(COMMAND));
    let eacces = outcome(&v, "eacces");
    assert_eq!((eacces["count_a"].as_u64(), &eacces["median_a"], &eacces["median_change"]), (Some(0), &Value::Null, &Value::Null));
    let r = row(&text, "EACCES");
    assert!(r.contains("no attempts") && !r.contains("0 ns"), "{r}");
    // Four successful execs are too few to be called multimodal.
    assert!(!v["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("multimodal")), "{}", v["warnings"]);
}

#[test]
fn the_report_of_few_attempts_claims_no_interval_and_no_modes() {
    let out = execprof().arg("report").arg(COMMAND).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(row(&text, "EACCES").contains(" 3.55 µs (n=1) "), "{text}");
    assert_eq!(row(&text, "ENOEXEC").trim_end(), "  ENOEXEC             0   no attempts");
    assert!(!text.contains("MULTIMODAL"), "4 successes: {text}");
}

#[test]
fn a_recording_compared_with_itself_changes_nothing() {
    let (v, text) = diff(Path::new(FIXTURE), Path::new(FIXTURE));
    assert!(v["warnings"].as_array().unwrap().is_empty(), "{}", v["warnings"]);
    assert!(!lines(&v).is_empty(), "the fixture has sampled lines to compare");
    for l in lines(&v).iter().chain(v["outcomes"].as_array().unwrap()) {
        assert_eq!(l["significant"], false, "{l}");
        let change = if l["change"].is_null() { &l["median_change"] } else { &l["change"] };
        assert_eq!(change["value"], 0.0, "{l}");
    }
    assert!(text.contains(&format!("0 of {} lines changed significantly", lines(&v).len())), "{text}");
    assert!(text.contains("Price–Bonett"), "the method is named: {text}");
}

#[test]
fn outcome_and_lines_choose_what_is_printed() {
    let out = execprof().arg("diff").args([FIXTURE, FIXTURE]).args(["--outcome", "enoent", "--lines", "3"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text.split("Where the time went").nth(1).unwrap().split("\nMethods").next().unwrap();
    let rows: Vec<&str> = section.lines().skip(2).take_while(|l| !l.starts_with("  ...")).collect();
    assert_eq!(rows.len(), 3, "{section}");
    assert!(rows.iter().all(|r| r.trim_start().starts_with("ENOENT")), "{section}");
    assert!(section.contains("more lines of ENOENT (--lines N prints more"), "{section}");
    assert!(section.contains("lines of other outcomes not shown"), "{section}");
    let bad = execprof().arg("diff").args([FIXTURE, FIXTURE, "--outcome", "sucess"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("possible values"), "names the choices");
}

#[test]
fn a_bad_recording_is_refused_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.execprof");
    std::fs::write(&bad, b"not a recording").unwrap();
    let out = execprof().arg("diff").arg(FIXTURE).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.execprof"), "names the file");
}

/// `--round A2 B2`: further pairs of recordings (here the same pair three times). Counts are
/// summed, figures are means over the rounds (the same recording's: no change), the JSON and
/// the text say so, and the flame graphs are the rounds' mean.
#[test]
fn rounds_combine_further_pairs_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let (json, folded) = (dir.path().join("diff.json"), dir.path().join("flames"));
    let out = execprof()
        .arg("diff")
        .args([FIXTURE, FIXTURE, "--round", FIXTURE, FIXTURE, "--round", FIXTURE, FIXTURE, "--json"])
        .arg(&json)
        .arg("--folded")
        .arg(&folded)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["rounds"]["count"], 3, "{}", v["rounds"]);
    assert!(v["rounds"]["method"].as_str().unwrap().contains("Welch"), "{}", v["rounds"]);
    assert_eq!(v["a"]["round_paths"].as_array().unwrap().len(), 3);
    assert_eq!((v["a"]["steps"].as_u64(), v["b"]["attempts"].as_u64()), (Some(600), Some(3 * 1401)));
    assert_eq!(outcome(&v, "enoent")["count_a"].as_u64(), Some(3 * 1200));
    for l in lines(&v).iter().chain(v["outcomes"].as_array().unwrap()) {
        assert_eq!(l["significant"], false, "{l}");
        let change = if l["change"].is_null() { &l["median_change"] } else { &l["change"] };
        assert_eq!(change["value"], 0.0, "{l}");
    }
    assert!(text.contains("means over 3 rounds with 95% Student intervals") && text.contains("Welch"), "{text}");
    assert!(text.contains("and 2 more rounds") && text.contains(" over 3 rounds; kernel"), "{text}");
    // A diff of two recordings has no rounds.
    assert_eq!(diff(Path::new(FIXTURE), Path::new(FIXTURE)).0["rounds"], Value::Null);
    // The same pair three times: the flame graph of one.
    let once = dir.path().join("once");
    let out = execprof().arg("diff").args([FIXTURE, FIXTURE, "--folded"]).arg(&once).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |d: &Path| std::fs::read_to_string(d.join("enoent.diff.folded")).unwrap();
    assert_eq!(read(&folded), read(&once));
}

#[test]
fn a_round_without_its_b_is_a_usage_error_and_a_missing_round_is_named() {
    let out = execprof().arg("diff").args([FIXTURE, FIXTURE, "--round", FIXTURE]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 values required for '--round <A> <B>'"), "says a round is two recordings: {err}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("b2.execprof");
    let out = execprof().arg("diff").args([FIXTURE, FIXTURE, "--round", FIXTURE]).arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("b2.execprof"), "names the file");
    // Rounds whose figures are per different units do not combine.
    let out = execprof().arg("diff").args([FIXTURE, FIXTURE, "--round", COMMAND, COMMAND]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("round 2 is compared per exec attempt") && err.contains("built-in chain"), "{err}");
}

/// 6 missed PATH directories per step against 1: the change is in ENOENT attempts (5 fewer per
/// step) and, within them, the lookup.
#[test]
#[ignore = "needs root"]
fn fewer_path_misses_show_as_fewer_enoent_lookups() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    // Enough failed lookups to sample at 999 Hz (a failed lookup is ~1 µs here); under
    // emulation each is ~30× slower and exact mode times every call.
    let steps = if execprof::testing::slowdown() > 1 { "2000" } else { "20000" };
    let a = record(dir.path(), "misses6", &["--steps", steps, "--misses", "6"]);
    let b = record(dir.path(), "misses1", &["--steps", steps, "--misses", "1"]);
    let (v, text) = diff(&a, &b);
    assert!(v["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("workload")), "{}", v["warnings"]);
    assert_eq!(v["unit"], "chain_step");
    let enoent = v["outcomes"].as_array().unwrap().iter().find(|o| o["outcome"] == "enoent").unwrap();
    assert_eq!((enoent["per_unit_a"].as_f64(), enoent["per_unit_b"].as_f64()), (Some(6.0), Some(1.0)));
    // Under emulation each step's first failed exec is far slower than the rest (a 6.12
    // guest under TCG: median 174 µs with one miss a step, 17 µs with six), once a step on
    // both sides: that spread can hide five ~17 µs lookups from a 95% interval of 2,000
    // steps (there: change -31 µs [-63, +1.2]). In a guest the fall itself is the known
    // answer; here its interval and significance too.
    let guest = execprof::testing::slowdown() > 1;
    let fell = |change: &Value| if guest { change["value"].as_f64().unwrap() < 0.0 } else { change["high"].as_f64().unwrap() < 0.0 };
    assert!(fell(&enoent["per_unit_change"]), "less ENOENT time per step: {enoent}");
    // Fewer misses also leave the successful exec's caches warmer, so its change can be as
    // large (it was, on a CI machine): the known answer is where the ENOENT time went, not
    // which outcome moved most: the ENOENT lines, led by a significant fall per step, and the
    // lookup phase among them.
    let first_enoent = lines(&v).iter().find(|l| l["outcome"] == "enoent").unwrap();
    assert!(
        (guest || first_enoent["per_unit_significant"] == true) && first_enoent["per_unit_change"]["value"].as_f64().unwrap() < 0.0,
        "the largest ENOENT change per step is a significant fall:\n{text}"
    );
    let lookup: Vec<&Value> =
        lines(&v).iter().filter(|l| l["outcome"] == "enoent" && l["kind"] == "phase" && l["name"] == "lookup").collect();
    assert!(!lookup.is_empty(), "{text}");
    for l in lookup {
        assert!((guest || l["per_unit_significant"] == true) && l["per_unit_change"]["value"].as_f64().unwrap() < 0.0, "{l}");
    }
}

/// 64 extra environment variables against none: successful execs copy more arguments.
#[test]
#[ignore = "needs root"]
fn extra_environment_shows_as_argument_copying_in_successful_execs() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    // Under emulation the published tiny variables drown in page-fault noise (see trace.rs).
    let size = if execprof::testing::slowdown() > 1 { "512" } else { "0" };
    let common = ["--steps", "5000", "--sample-hz", "4999", "--env-size", size];
    let a = record(dir.path(), "env0", &[&common[..], &["--env-vars", "0"]].concat());
    let b = record(dir.path(), "env64", &[&common[..], &["--env-vars", "64"]].concat());
    let (v, text) = diff(&a, &b);
    let success_phases = |source: &str| -> Vec<&Value> {
        lines(&v).iter().filter(|l| l["outcome"] == "success" && l["kind"] == "phase" && l["source"] == source).collect()
    };
    let mut sources = 0;
    for source in ["sampled", "exact"] {
        let phases = success_phases(source);
        let Some(args) = phases.iter().find(|l| l["name"] == "args") else { continue };
        sources += 1;
        assert!(args["significant"] == true && args["change"]["value"].as_f64().unwrap() > 0.0, "{source}: {args}\n{text}");
        let top =
            phases.iter().max_by(|x, y| x["change"]["value"].as_f64().unwrap().total_cmp(&y["change"]["value"].as_f64().unwrap())).unwrap();
        assert_eq!(top["name"], "args", "{source}: argument copying grew most among successful execs' phases\n{text}");
    }
    assert!(sources > 0, "no success phase lines: {text}");
}

/// `run --repeat 2 --vs '--misses 1'`: four traced runs, A B B A, merged into one recording per
/// side (the report says 2 runs), the spread between repeats and the diff printed.
#[test]
#[ignore = "needs root"]
fn repeated_a_b_runs_make_one_recording_per_side() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.execprof"), dir.path().join("b.execprof"));
    let marker = dir.path().join("setups");
    let out = execprof()
        .args(["run", "--steps", "100", "--repeat", "2", "--vs", "--misses 1", "--vs-output"])
        .arg(&b)
        .arg("--output")
        .arg(&a)
        .arg("--setup")
        .arg(format!("echo A >> {}", marker.display()))
        .arg("--vs-setup")
        .arg(format!("echo B >> {}", marker.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}\n{text}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "A\nB\nB\nA\n", "sides alternate A B, B A, each after its setup");
    assert!(text.contains("Side A: 2 runs merged") && text.contains("Side B: 2 runs merged") && text.contains("spread"), "{text}");
    assert!(text.contains("execprof diff"), "{text}");
    let report = |p: &Path| {
        let json = dir.path().join("r.json");
        let out = execprof().arg("report").arg(p).arg("--json").arg(&json).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str::<Value>(&std::fs::read_to_string(&json).unwrap()).unwrap()
    };
    let (ra, rb) = (report(&a), report(&b));
    assert_eq!((ra["repeats"].as_u64(), rb["repeats"].as_u64()), (Some(2), Some(2)));
    let count =
        |v: &Value, o: &str| v["analysis"]["outcomes"].as_array().unwrap().iter().find(|x| x["outcome"] == o).unwrap()["count"].clone();
    assert_eq!((count(&ra, "enoent"), count(&rb, "enoent")), (serde_json::json!(1200), serde_json::json!(200)));
    assert_eq!(count(&ra, "success"), 202);
}
