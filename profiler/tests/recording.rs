//! Recordings without root: a real recording (the built-in chain, 200 steps, 6 misses, samples
//! at 4999 Hz, made by `execprof run --output` on kernel 6.18) replays to its known answers;
//! the reader refuses every damaged copy of it (cut, flipped, mutated) with a message that
//! says what is wrong and where, never a panic; and `report` reads a cut copy up to its last
//! intact frame, marked as cut, while a flipped byte stays an error.
use std::{io::Cursor, path::Path, time::Duration};

use assert_cmd::Command;
use execprof::{
    analysis::outcome::Outcome,
    recording::{Ending, RecordingReader, check_mutations},
    report::RunReport,
};
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

/// Taken as a cut instead (`finish_or_cut`), every cut after the META frame ends the intact
/// prefix at the last frame boundary before it, with the records of the frames before.
#[test]
fn every_cut_after_the_meta_frame_keeps_the_frames_before_it() {
    let bytes = fixture();
    // (frame end, records up to it): META, RECORDS #1, RECORDS #2, SYMBOLS.
    let boundaries = [(725u64, 0u64), (1306, 124), (7630, 3276), (9528, 3276)];
    for cut in 0..bytes.len() {
        let reader = RecordingReader::new(Cursor::new(&bytes[..cut]));
        let Some(&(at, records)) = boundaries.iter().rev().find(|(end, _)| *end <= cut as u64) else {
            assert!(reader.is_err(), "cut at {cut}, inside the META frame, was read");
            continue;
        };
        let mut reader = reader.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        while let Ok(Some(_)) = reader.next_record() {}
        let read = reader.records_read();
        match reader.finish_or_cut() {
            Ok(Ending::Cut(c)) => {
                assert_eq!((c.intact_bytes, read), (at, records), "cut at {cut}");
                assert_eq!(c.symbols.is_some(), at == 9528, "cut at {cut}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = fixture();
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        assert!(read_all(&b).is_err(), "a flipped bit at byte {at} went unnoticed");
        // Nor is it taken for a cut, which `report` would read up to.
        let lenient = RecordingReader::new(Cursor::new(&b)).and_then(|mut r| {
            while r.next_record().is_ok_and(|x| x.is_some()) {}
            r.finish_or_cut()
        });
        assert!(lenient.is_err(), "a flipped bit at byte {at} read as {lenient:?}");
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
    let mut flipped = bytes[..5000].to_vec();
    flipped[1000] ^= 0x01; // inside RECORDS frame #1, before the cut
    report(&write("flipped", &flipped)).stderr(predicate::str::contains(
        "corrupted recording at byte 754: RECORDS frame #1 (starting at byte 725): payload checksum mismatch",
    ));
    report(&write("header", &bytes[..12])).stderr(predicate::str::contains("the file ends right after its header, before the META frame"));
    report(&write("empty", b"")).stderr(predicate::str::contains("the file is empty: nothing was ever recorded into it"));
    let mut newer = bytes.clone();
    newer[8] = execprof::recording::FORMAT_VERSION as u8 + 1; // the format version, little-endian after the 8-byte magic
    report(&write("newer", &newer)).stderr(predicate::str::contains("upgrade execprof"));
    report(&write("text", b"hello, not a recording")).stderr(predicate::str::contains("not an execprof recording"));
    Command::new(env!("CARGO_BIN_EXE_execprof"))
        .arg("report")
        .arg(dir.path().join("missing"))
        .assert()
        .code(5)
        .stderr(predicate::str::contains("cannot open it"));
}

/// The fixture's frames: META ends at byte 725, RECORDS #1 (124 records: the launch exec, six
/// steps and the seventh's enter) at 1306, RECORDS #2 (the other 3152) at 7630, SYMBOLS at
/// 9528, END at 9758.
fn report_of_cut(cut: usize) -> (String, String, RunReport) {
    let dir = tempfile::tempdir().unwrap();
    let (rec, json) = (dir.path().join("cut.execprof"), dir.path().join("out.json"));
    std::fs::write(&rec, &fixture()[..cut]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execprof")).arg("report").arg(&rec).arg("--json").arg(&json).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(out.status.code(), Some(0), "cut at {cut}: {stderr}");
    (stdout, stderr, serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap())
}

fn count(r: &RunReport, o: Outcome) -> u64 {
    r.analysis.outcomes.iter().find(|s| s.outcome == o).map_or(0, |s| s.count)
}

/// A recording cut where a killed run leaves it is reported up to its last intact frame,
/// marked as cut (exit 0: the report is made, `complete` says it is not the whole run).
#[test]
fn a_cut_recording_is_reported_up_to_its_last_intact_frame() {
    for cut in [1306, 1306 + 10, 5000, 7629] {
        let (stdout, stderr, r) = report_of_cut(cut);
        assert_eq!((count(&r, Outcome::Enoent), count(&r, Outcome::Success)), (42, 7), "cut at {cut}: RECORDS #1 only");
        assert!(!r.complete);
        let c = r.recording_cut().expect("marked as cut");
        assert_eq!(c.at_byte, 1306);
        let head = format!(
            "RECORDING CUT at byte 1306 of {cut} (after 3.19 ms of the run): the report covers the intact prefix; the run was killed or its disk filled up\n"
        );
        assert!(stdout.starts_with(&head), "cut at {cut}: {stdout}");
        assert!(stdout.contains("result    unknown (the recording ends 3.19 ms into the run)"), "{stdout}");
        assert!(stderr.contains("warning: the report is incomplete: the recording was cut at byte 1306"), "{stderr}");
    }
    // Cut right after RECORDS #2, or in the END frame: every attempt is in, 1,200 misses and
    // 201 successes as in the whole file; past SYMBOLS, the stacks are named too.
    for (cut, symbols) in [(7630, false), (9600, true)] {
        let (_, _, r) = report_of_cut(cut);
        assert_eq!((count(&r, Outcome::Enoent), count(&r, Outcome::Success)), (1200, 201), "cut at {cut}");
        assert_eq!(r.recording_cut().map(|c| c.symbols), Some(symbols), "cut at {cut}");
        assert!(!r.complete);
    }
}

/// `diff` reads a cut recording the same way, and says which side was cut.
#[test]
fn diff_reads_a_cut_recording_and_names_the_cut_side() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.execprof");
    std::fs::write(&cut, &fixture()[..5000]).unwrap();
    Command::new(env!("CARGO_BIN_EXE_execprof"))
        .arg("diff")
        .arg(FIXTURE)
        .arg(&cut)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("recording B is incomplete"))
        .stderr(
            predicate::str::contains("warning: recording B (")
                .and(predicate::str::contains(") was cut at byte 1306 of 5000 (after 3.19 ms of the run)")),
        );
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
