//! Recordings without root: a real recording (the built-in chain, 200 steps, 6 misses, samples
//! at 4999 Hz, made by `execprof run --output` on kernel 6.18) replays to its known answers,
//! and every damaged copy of it (cut, flipped, mutated) is refused with a message that says
//! what is wrong and where, never a panic.
use std::{io::Cursor, path::Path, time::Duration};

use assert_cmd::Command;
use execprof::recording::{RecordingReader, check_mutations};
use predicates::prelude::*;
use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chain-200.execprof");

fn fixture() -> Vec<u8> {
    std::fs::read(FIXTURE).unwrap()
}

/// Reads a whole recording; Err carries the reader's message.
fn read_all(bytes: &[u8]) -> Result<u64, String> {
    let mut r = RecordingReader::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut n = 0;
    while r.next_record().map_err(|e| e.to_string())?.is_some() {
        n += 1;
    }
    r.finish().map_err(|e| e.to_string())?;
    Ok(n)
}

#[test]
fn the_fixture_replays_to_its_known_answers() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_execprof")).arg("report").arg(FIXTURE).arg("--json").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("report    from the recording"), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let count = |o: &str| v["analysis"]["outcomes"].as_array().unwrap().iter().find(|x| x["outcome"] == o).unwrap()["count"].clone();
    assert_eq!(count("enoent"), 1_200);
    assert_eq!(count("success"), 201);
    assert_eq!(v["analysis"]["chain"]["steps"], 200);
    assert_eq!(v["complete"], true);
    assert!(v["analysis"]["sampled"]["samples"].as_u64().unwrap() > 0, "the fixture has samples");
    assert_eq!(v["source"]["recording"]["records"], read_all(&fixture()).unwrap());
}

#[test]
fn every_cut_is_refused_with_an_offset() {
    let bytes = fixture();
    for cut in 0..bytes.len() {
        let err = read_all(&bytes[..cut]).expect_err(&format!("a recording cut at byte {cut} was read as whole"));
        assert!(err.contains("byte"), "cut at {cut}: no offset in {err:?}");
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = fixture();
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        assert!(read_all(&b).is_err(), "a flipped bit at byte {at} went unnoticed");
    }
}

#[test]
fn random_damage_never_panics() {
    let cases = check_mutations(&fixture(), Duration::from_secs(3), 0x5eed).unwrap();
    let want = (50 / execprof::testing::slowdown()).max(3) as u64;
    assert!(cases >= want, "only {cases} mutated recordings tried");
}

#[test]
fn report_names_the_damage_and_fails_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = fixture();
    let write = |name: &str, b: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    let report = |p: &Path| Command::new(env!("CARGO_BIN_EXE_execprof")).arg("report").arg(p).assert().code(5);
    report(&write("cut", &bytes[..bytes.len() / 2])).stderr(predicate::str::contains("truncated at byte"));
    let mut newer = bytes.clone();
    newer[8] = 2; // the format version, little-endian after the 8-byte magic
    report(&write("newer", &newer)).stderr(predicate::str::contains("upgrade execprof"));
    report(&write("text", b"hello, not a recording")).stderr(predicate::str::contains("not an execprof recording"));
    Command::new(env!("CARGO_BIN_EXE_execprof"))
        .arg("report")
        .arg(dir.path().join("missing"))
        .assert()
        .code(5)
        .stderr(predicate::str::contains("cannot open it"));
}

/// The call trees of a real recording: every node's children add up to at most the node, and
/// the root is the outcome's measured mean; `--tree` prints them.
#[test]
fn the_fixtures_call_trees_add_up_to_the_measured_mean() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out =
        Command::new(env!("CARGO_BIN_EXE_execprof")).arg("report").arg(FIXTURE).arg("--tree").arg("--json").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Call tree: ENOENT"), "--tree prints the trees");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    fn adds_up(n: &Value) {
        let inclusive = n["inclusive"]["value"].as_f64().unwrap();
        let children: f64 = n["children"].as_array().unwrap().iter().map(|c| c["inclusive"]["value"].as_f64().unwrap()).sum();
        assert!(children <= inclusive * (1.0 + 1e-9) + 1e-6, "{}: children {children} > {inclusive}", n["function"]);
        n["children"].as_array().unwrap().iter().for_each(adds_up);
    }
    let outcomes = v["analysis"]["sampled"]["outcomes"].as_array().unwrap();
    assert!(!outcomes.is_empty());
    for o in outcomes {
        let tree = &o["tree"];
        assert_eq!(tree["inclusive"]["value"], o["mean_ns"], "the root is the outcome's measured mean");
        adds_up(tree);
    }
}

/// The report of a recording: (its text, its JSON).
fn report_of(path: &str) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_execprof")).arg("report").arg(path).arg("--json").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap())
}

/// The chain's PATH searches are its steps: 200 searches of 6 misses, one directory each
/// time, all found in its bin directory; one program searched, so no programs table.
#[test]
fn the_chains_path_searches_are_its_steps() {
    let (text, v) = report_of(FIXTURE);
    let s = &v["analysis"]["path_searches"];
    assert_eq!((s["searches"].as_u64(), s["found_after_misses"].as_u64(), s["misses"].as_u64()), (Some(200), Some(200), Some(1_200)));
    assert_eq!((s["not_found"].as_u64(), s["lone_failures"].as_u64()), (Some(0), Some(0)));
    let missed = s["missed_dirs"].as_array().unwrap();
    assert_eq!(missed.len(), 6);
    assert!(missed.iter().all(|d| d["misses"] == 200 && d["dir"].as_str().unwrap().contains("/miss")), "{missed:?}");
    let found = &s["found_dirs"][0];
    assert!(found["dir"].as_str().unwrap().ends_with("/bin"), "{found}");
    assert_eq!(
        (found["found"].as_u64(), found["misses_before"].as_u64(), found["added_misses_at_most"].as_u64()),
        (Some(200), Some(1_200), Some(0))
    );
    assert_eq!(found["misses_before_ns"], s["miss_ns"], "moving bin first saves every miss");
    assert!(
        text.contains("\nPATH searches")
            && text.contains("200 searches: 200 found (200 after misses), 0 not found; 1200 misses, 6.00 per search"),
        "{text}"
    );
    assert!(!text.contains("Exec attempts by calling program"), "one program besides the launcher: {text}");
}

/// A recorded command (see tests/diff.rs: env, sh, env, true in one process, each PATH
/// search missing twice, and a child of sh refused /etc/passwd): who made each attempt.
#[test]
fn the_command_fixture_says_who_made_each_attempt() {
    let (text, v) = report_of(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sh-exec.execprof"));
    let callers = v["analysis"]["callers"].as_array().unwrap();
    let row = |exe: &str| callers.iter().find(|c| c["program"]["exe"] == exe).unwrap_or_else(|| panic!("no {exe} in {callers:?}"));
    let counts = |c: &Value| ["attempts", "successes", "enoent", "eacces", "fork_calls"].map(|k| c[k].as_u64().unwrap());
    assert_eq!(counts(row("/usr/bin/env")), [6, 2, 4, 0, 0], "env searched sh and true");
    assert_eq!(counts(row("/usr/bin/sh")), [4, 1, 2, 1, 1], "sh searched env, and its child tried /etc/passwd");
    let launcher = callers.iter().find(|c| c["program"]["kind"] == "launcher").unwrap();
    assert_eq!(counts(launcher), [1, 1, 0, 0, 0]);
    assert_eq!(callers.len(), 3);
    let s = &v["analysis"]["path_searches"];
    assert_eq!((s["searches"].as_u64(), s["misses"].as_u64(), s["lone_failures"].as_u64()), (Some(3), Some(6), Some(1)));
    let mut dirs: Vec<(&str, u64)> =
        s["missed_dirs"].as_array().unwrap().iter().map(|d| (d["dir"].as_str().unwrap(), d["misses"].as_u64().unwrap())).collect();
    dirs.sort();
    assert_eq!(dirs, [("/nonexistent-a", 3), ("/nonexistent-b", 3)]);
    assert_eq!((s["found_dirs"][0]["dir"].as_str(), s["found_dirs"][0]["misses_before"].as_u64()), (Some("/usr/bin"), Some(6)));
    assert!(text.contains("Exec attempts by calling program (3 programs,"), "{text}");
    assert!(text.contains("/usr/bin/sh (started by /usr/bin/env)"), "{text}");
}
