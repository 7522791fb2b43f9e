//! The command line without tracing: usage errors, and the privilege check, which must stop a
//! run before anything is spawned.
use assert_cmd::Command;
use predicates::prelude::*;

fn execprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_execprof"))
}

#[test]
fn unknown_option_is_a_usage_error() {
    execprof()
        .args(["run", "--no-such-option"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unexpected argument '--no-such-option'"));
}

#[test]
fn steps_conflict_with_a_command() {
    execprof()
        .args(["run", "--steps", "5", "--", "/bin/true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with a command"));
}

#[test]
fn bad_ring_size_says_what_to_use() {
    execprof().args(["run", "--ring-mib", "3"]).assert().code(2).stderr(predicate::str::contains("--ring-mib 3 is not a power of two"));
}

/// Runs execprof as an unprivileged user: as root through setpriv, else as the current user.
#[test]
fn without_privileges_run_names_the_capabilities_and_sudo() {
    let marker = tempfile::NamedTempFile::new().unwrap();
    let marker_path = marker.path().to_owned();
    drop(marker); // the command below would create it if it were ever started
    let exe = env!("CARGO_BIN_EXE_execprof");
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", exe]);
        c
    } else {
        Command::new(exe)
    };
    cmd.args(["run", "--", "/bin/touch"]).arg(&marker_path);
    cmd.assert().code(3).stderr(
        predicate::str::contains("CAP_BPF").and(predicate::str::contains("CAP_PERFMON")).and(predicate::str::contains("sudo execprof")),
    );
    assert!(!marker_path.exists(), "the command ran although tracing was not possible");
}

#[test]
fn chain_option_limits_are_usage_errors() {
    execprof().args(["bench", "chain", "--env-size", "200000"]).assert().code(2).stderr(predicate::str::contains("at most 131072"));
    execprof()
        .args(["bench", "chain", "--direct", "--misses", "3"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--direct does no PATH search"));
}

#[test]
fn a_sampling_rate_above_the_kernels_limit_names_it() {
    let limit: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").unwrap().trim().parse().unwrap();
    execprof()
        .args(["run", "--sample-hz", &(limit + 1).to_string()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("perf_event_max_sample_rate = {limit}")));
}

#[test]
fn output_paths_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("out.json");
    execprof()
        .arg("report")
        .arg("/nonexistent.execprof")
        .arg("--json")
        .arg(&missing)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a directory; create it first"));
    execprof()
        .arg("report")
        .arg("/nonexistent.execprof")
        .arg("--trace")
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is a directory; give a file name"));
    // A directory that refuses new files is found before anything runs, too.
    execprof()
        .arg("report")
        .arg("/nonexistent.execprof")
        .arg("--json")
        .arg("/proc/execprof-test.json")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot write /proc/execprof-test.json ("));
}

#[test]
fn a_dash_dash_with_nothing_after_it_is_a_usage_error_not_the_chain() {
    execprof()
        .args(["run", "--"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing follows `--`: give the command to trace after it"));
}

#[test]
fn side_b_options_without_vs_name_vs() {
    execprof()
        .args(["run", "--vs-output", "b.execprof"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--vs-output and --vs-setup describe side B: give B's options with --vs"));
}

/// `--version` names the version and the commit built (or says the commit is unknown, outside
/// a git checkout).
#[test]
fn version_names_the_commit() {
    let out = execprof().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rest = text.trim().strip_prefix(&format!("execprof {} (", env!("CARGO_PKG_VERSION"))).unwrap_or_else(|| panic!("{text}"));
    let commit = rest.strip_suffix(')').unwrap_or_else(|| panic!("{text}"));
    let hash = commit.strip_prefix("commit ").map(|h| h.trim_end_matches("-dirty"));
    assert!(commit == "unknown commit" || hash.is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit())), "{text}");
}

/// `man-pages DIR`: a page per command from the clap definitions (the agent's in section 8),
/// each read by man-db's `man` (installed by `cargo xtask setup` for the tests) with its name
/// and every long option `--help` lists.
#[test]
fn man_pages_render_in_man_with_every_option_of_help() {
    let dir = tempfile::tempdir().unwrap();
    execprof().arg("man-pages").arg(dir.path()).assert().success();
    let mut pages: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    pages.sort();
    for want in [
        "execprof.1",
        "execprof-run.1",
        "execprof-report.1",
        "execprof-diff.1",
        "execprof-agent.8",
        "execprof-top.1",
        "execprof-bench-spawn.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} missing from {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.starts_with("execprof-man-pages")), "hidden commands have no page");
    for (page, command) in [("execprof-run.1", "run"), ("execprof-agent.8", "agent")] {
        let out = std::process::Command::new("man")
            .arg("-l")
            .arg(dir.path().join(page))
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        assert!(out.status.success(), "man -l {page}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).replace("\u{2010}\n", "").replace('\u{2010}', "-");
        assert!(text.contains("NAME") && text.contains(&format!("execprof-{command}")), "{text}");
        let help = execprof().args([command, "--help"]).output().unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        for option in help.split_whitespace().filter(|w| w.starts_with("--") && w.len() > 2) {
            let option = option.trim_end_matches([',', '.', ')', ':']).split(['=', '[', '<']).next().unwrap();
            assert!(text.contains(option), "{page} lacks {option}");
        }
    }
}

/// `completions bash` loads in bash and completes execprof's subcommands; zsh's and fish's
/// scripts are theirs.
#[test]
fn completion_scripts_load() {
    let bash = execprof().args(["completions", "bash"]).output().unwrap();
    assert!(bash.status.success());
    let script = String::from_utf8(bash.stdout).unwrap();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("{script}\ncomplete -p execprof\nCOMP_WORDS=(execprof ag); COMP_CWORD=1; _execprof execprof ag execprof; printf '%s\\n' \"${{COMPREPLY[@]}}\""))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("-F _execprof execprof") && said.lines().any(|l| l == "agent"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let zsh = execprof().args(["completions", "zsh"]).output().unwrap();
    assert!(String::from_utf8_lossy(&zsh.stdout).starts_with("#compdef execprof"));
    let fish = execprof().args(["completions", "fish"]).output().unwrap();
    assert!(String::from_utf8_lossy(&fish.stdout).contains("complete -c execprof"));
    execprof().args(["completions", "tcsh"]).assert().code(2).stderr(predicate::str::contains("invalid value"));
}
