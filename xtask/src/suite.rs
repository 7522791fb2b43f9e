//! The whole test suite (unprivileged and root tests) inside each guest kernel, so that what
//! the README promises is checked on a stock Debian 12 kernel (6.1) and on 6.12, not only on
//! this machine's 6.18: on x86_64 and, cross-built, on arm64 (`--arch arm64`).
//!
//! The guest's root file system is an overlay: on top, the repository's test binaries, the
//! execprof binary and the data files the tests read, at the same absolute paths as here (a
//! small ext4 image); below, a userland with the shell, python3 and the C compilers the tests
//! use ([`crate::userland`]: this machine's own for x86_64, Debian's arm64 packages for arm64;
//! a large ext4 image cached outside the clone); a tmpfs takes the writes. The initramfs
//! only loads the virtio block and overlay modules from the kernel package, mounts that, and
//! runs every test binary in a chroot with `--include-ignored`, one test thread, its package
//! directory as the working directory, as `cargo test` would (`xtask/guest/suite-init.sh` and
//! `suite.sh`), except the tests and binaries whose answers do not depend on the kernel
//! ([`HOST_ONLY_TESTS`], [`HOST_ONLY_BINARIES`]: the host runs them). Each binary's exit code
//! and output, with each test's seconds, come back on the results disk ([`crate::guest`]).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{
    cpio::Cpio,
    debian::{self, Resolved},
    guest::{self, GuestEnv, ResultsDisk},
    run,
    userland::{self, make_ext4},
    vm::{self, Arch},
};

/// TCG runs a guest this many times slower than this machine (measured: ~30×): the tests
/// scale their few wall-clock limits by it (`EXECPROF_TEST_SLOWDOWN`).
const SLOWDOWN: u32 = 40;

/// Tests the guests leave to the host: their answers come from execprof's own user space
/// (output files, signals, recordings and replay, escaping, the HTTP server, statistics over
/// recordings), the same on every kernel once the tracer loads, which every other test in the
/// guests checks. Each guest test costs ~12 s of start-up under TCG (loading and verifying the
/// eBPF programs, reading BTF and kallsyms), so these would add minutes per guest and check
/// no kernel. Matched by name (libtest's `--skip`); a unit test keeps each name a real test's.
pub const HOST_ONLY_TESTS: &[&str] = &[
    // trace.rs: output, signals, recordings, escaping.
    "a_failing_output_is_named_and_the_others_are_written",
    "a_full_disk_stops_the_recording_not_the_run_and_marks_it_incomplete",
    "a_recording_of_the_builtin_chain_replays_to_the_same_report",
    "a_recording_of_the_seeds_chain_replays_to_the_same_report",
    "a_second_sigint_stops_at_once",
    "sighup_stops_the_tree_and_reports_what_ran",
    "sigterm_ends_execprof_within_a_second_with_a_partial_report",
    "sigkill_of_execprof_takes_the_command_with_it",
    "the_chains_directory_is_removed_after_a_signal",
    "file_names_are_escaped_on_the_terminal_and_kept_apart",
    "hostile_names_reach_the_terminal_escaped_and_shell_quoted",
    "events_are_one_line_per_attempt_live_and_replayed",
    "command_exit_status_becomes_execprofs",
    "a_bimodal_exec_workload_is_flagged_with_its_modes",
    // diff.rs: diff's statistics over two recordings; per kernel, vm-test's diff of 6.1 against
    // 6.12 checks its known answer on each architecture.
    "fewer_path_misses_show_as_fewer_enoent_lookups",
    "extra_environment_shows_as_argument_copying_in_successful_execs",
    "repeated_a_b_runs_make_one_recording_per_side",
    // cli.rs: man-db's `man` and bash read the generated man pages and completions; the
    // guests' userlands have no man.
    "man_pages_render_in_man_with_every_option_of_help",
    "completion_scripts_load",
    // agent.rs: the HTTP server and Prometheus (which under TCG would take minutes).
    "bad_clients_get_http_errors_and_cost_no_count",
    "prometheus_scrapes_exact_counts_in_both_histogram_forms",
    "prometheus_scrapes_over_tls_with_basic_auth_and_nothing_else_gets_in",
];

/// Test binaries (cargo's target names) the guests leave to the host: no test in them reads
/// the kernel (recording.rs reads fixtures only; xtask's own unit tests check xtask, and read
/// the repository's sources, which the guests do not carry), or need a reader only the host
/// has (pprof.rs: `go tool pprof`; perfetto.rs: PyPI's `perfetto` protos). docs.rs checks
/// the manual's examples against execprof's text, the same on every kernel.
pub const HOST_ONLY_BINARIES: &[&str] = &["recording", "xtask", "pprof", "perfetto", "docs"];

/// The tests CI runs on the kernel lines without a whole-suite lane, beyond vm-test's checks
/// (a `vm-suite` filter: the names containing any of these words): a 32-bit program's execs,
/// AT_EXECVE_CHECK as its own outcome in `run` and the agent, the chain's exact counts.
pub const KERNEL_DEPENDENT: &str = "a_32_bit_programs execve_checks chain_shows_exactly";

/// The arguments that leave [`HOST_ONLY_TESTS`] out of a guest's run.
fn host_only_skips() -> String {
    HOST_ONLY_TESTS.iter().map(|t| format!("--skip {t}")).collect::<Vec<_>>().join(" ")
}

/// A test executable and the directory `cargo test` runs it in.
#[derive(Clone)]
pub struct TestBinary {
    pub exe: PathBuf,
    pub dir: PathBuf,
}

/// Where cargo builds execprof for `arch` (release), as the tests find it.
pub fn execprof_path(arch: Arch) -> PathBuf {
    crate::dist::binary_path(arch)
}

/// The test binaries for `arch` and the execprof they run, built and listed (cargo's JSON
/// messages name each executable): the portable builds ([`crate::dist`]) of both
/// architectures, so the guests run the execprof that ships.
pub fn test_binaries(arch: Arch) -> Result<(Vec<TestBinary>, PathBuf)> {
    let mut cargo = crate::dist::zigbuild(arch, "test")?;
    let execprof = execprof_path(arch);
    // The integration tests' binary (execprof) is built with them.
    let out = cargo
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the tests for {} failed", arch.debian());
    }
    let mut bins = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if m["reason"] != "compiler-artifact" || m["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(manifest)) = (m["executable"].as_str(), m["manifest_path"].as_str()) else { continue };
        if m["target"]["name"].as_str().is_some_and(|n| HOST_ONLY_BINARIES.contains(&n)) {
            continue;
        }
        let dir = Path::new(manifest).parent().ok_or_else(|| anyhow!("manifest path {manifest} has no directory"))?;
        bins.push(TestBinary { exe: exe.into(), dir: dir.to_owned() });
    }
    if bins.is_empty() {
        bail!("cargo listed no test binaries");
    }
    let execprof = execprof.canonicalize().with_context(|| format!("cargo test built no {}", execprof.display()))?;
    Ok((bins, execprof))
}

/// The repository's files the tests use, at their absolute paths, in a small image: the test
/// binaries and execprof without debug info, the fixtures, the C sources of the test programs
/// (built with gcc inside the guest), the snapshots, the seed's `t.c`.
fn repo_image(arch: Arch, bins: &[TestBinary], execprof: &Path, work: &Path) -> Result<PathBuf> {
    let stage = work.join("repo-stage");
    let _ = std::fs::remove_dir_all(&stage);
    let root = std::env::current_dir()?;
    let place = |from: &Path| -> Result<PathBuf> {
        let to = stage.join(from.strip_prefix("/").unwrap_or(from));
        std::fs::create_dir_all(to.parent().unwrap_or(&stage))?;
        Ok(to)
    };
    // The tests run execprof where cargo built it; the file put there may be another build of
    // it (CI: the arm64 package's own binary).
    let mut exes: Vec<(PathBuf, PathBuf)> = bins.iter().map(|b| (b.exe.clone(), b.exe.clone())).collect();
    // At its absolute path, as cargo put it in the tests (test_binaries canonicalizes it too).
    exes.push((execprof.to_owned(), root.join(execprof_path(arch)).canonicalize()?));
    for (exe, at) in exes {
        let to = place(&at)?;
        run(Command::new(crate::unpacked::tool(arch.objcopy())).arg("--strip-debug").arg(&exe).arg(&to))?;
    }
    // Each test runs in its package's directory, as under cargo.
    for b in bins {
        std::fs::create_dir_all(stage.join(b.dir.strip_prefix("/").unwrap_or(&b.dir)))?;
    }
    // insta's snapshots sit beside the modules they test, wherever those move.
    let mut data: Vec<PathBuf> = ["profiler/tests/fixtures", "profiler/tests/programs", "benches/seed", "README.md", "docs", "packaging"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    snapshot_dirs(&root.join("profiler/src"), &mut data)?;
    for from in data {
        let to = place(&from)?;
        run(Command::new("cp").arg("-a").arg(&from).arg(&to))?;
    }
    let image = work.join("repo.img");
    make_ext4(&stage, &image)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(image)
}

/// Every `snapshots` directory under `dir`.
fn snapshot_dirs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "snapshots") {
                out.push(path);
            } else {
                snapshot_dirs(&path, out)?;
            }
        }
    }
    Ok(())
}

/// The list of test binaries suite.sh runs, one `EXECUTABLE DIRECTORY` a line (binary N of
/// it reports as `test_rc_N`).
fn test_list(bins: &[TestBinary]) -> Result<String> {
    let mut list = String::new();
    for b in bins {
        let (exe, dir) = (b.exe.to_string_lossy(), b.dir.to_string_lossy());
        if exe.contains(char::is_whitespace) || dir.contains(char::is_whitespace) {
            bail!("the guest's test list cannot hold a path with white space: {exe} in {dir}");
        }
        list += &format!("{exe} {dir}\n");
    }
    Ok(list)
}

/// One test binary's run in a guest.
pub struct BinaryResult {
    pub exe: PathBuf,
    /// Its exit code; None: it never finished.
    pub rc: Option<i32>,
    /// Its output.
    pub log: PathBuf,
}

/// What one guest's run of the suite gave.
pub struct SuiteRun {
    pub kernel: String,
    pub results: Vec<BinaryResult>,
    /// The console of the guest's last boot.
    pub console: PathBuf,
    /// The directory of the binaries' outputs (of the first boot).
    pub logs: PathBuf,
    /// A kernel crash of the first boot, after which a second boot ran every binary that had
    /// not finished to its end: the crash and that boot's console, said but not failed on.
    pub survived_crash: Option<String>,
}

impl SuiteRun {
    pub fn failures(&self) -> Vec<String> {
        let crash = self.crash().map(|c| format!("{}: the guest's kernel crashed: {c} (console: {})", self.kernel, self.console.display()));
        crash.into_iter().chain(self.failed_binaries()).collect()
    }

    /// Each binary's wall time as its harness said it (`finished in 12.34s`), largest first,
    /// by the binary's name without cargo's hash: where a suite's minutes go.
    pub fn durations(&self) -> String {
        let mut times: Vec<(String, f64)> = self
            .results
            .iter()
            .map(|r| {
                let name = r.exe.file_name().unwrap_or_default().to_string_lossy();
                let name = name.rsplit_once('-').map_or(name.to_string(), |(stem, _)| stem.to_owned());
                (name, harness_seconds(&std::fs::read_to_string(&r.log).unwrap_or_default()))
            })
            .collect();
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        times.iter().map(|(n, t)| format!("{n} {t:.0}")).collect::<Vec<_>>().join(", ")
    }

    /// The `n` slowest tests of the whole suite, with their seconds (from libtest's
    /// `--report-time`): where the next cut in the guests' minutes is.
    pub fn slowest(&self, n: usize) -> String {
        let logs: Vec<String> = self.results.iter().map(|r| std::fs::read_to_string(&r.log).unwrap_or_default()).collect();
        let mut times: Vec<(&str, f64)> = logs.iter().flat_map(|l| test_seconds(l)).collect();
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        times.iter().take(n).map(|(t, s)| format!("{t} {s:.0}")).collect::<Vec<_>>().join(", ")
    }

    /// The last boot's kernel crash, if it crashed.
    fn crash(&self) -> Option<String> {
        vm::kernel_crash(&std::fs::read_to_string(&self.console).unwrap_or_default())
    }

    fn failed_binaries(&self) -> impl Iterator<Item = String> + '_ {
        self.results.iter().filter(|r| r.rc != Some(0)).map(|r| {
            let (exe, log) = (r.exe.display(), r.log.display());
            match r.rc {
                Some(rc) => format!("{}: {exe} failed with exit code {rc} (output: {log}){}", self.kernel, failure_excerpt(&r.log)),
                None => format!("{}: {exe} did not finish (output: {log}){}", self.kernel, failure_excerpt(&r.log)),
            }
        })
    }
}

/// The sum of the `finished in N.NNs` times a test binary's harness printed (one per
/// test group it ran).
fn harness_seconds(log: &str) -> f64 {
    log.lines().filter_map(|l| l.split("finished in ").nth(1)?.trim_end().strip_suffix('s')?.parse::<f64>().ok()).sum()
}

/// Each test's name and seconds from libtest's `test NAME ... ok <1.234s>` lines; the result
/// may come on a later line when the test's child wrote to the shared stderr meanwhile.
fn test_seconds(log: &str) -> Vec<(&str, f64)> {
    let mut out = Vec::new();
    let mut pending = None;
    for line in log.lines() {
        let rest = match line.strip_prefix("test ").and_then(|l| l.split_once(" ... ")) {
            Some((name, rest)) => {
                pending = Some(name);
                rest
            }
            None => line,
        };
        let seconds = rest.rsplit_once(" <").and_then(|(_, t)| t.strip_suffix("s>")?.parse().ok());
        if let (Some(name), Some(seconds)) = (pending, seconds) {
            out.push((name, seconds));
            pending = None;
        }
    }
    out
}

/// What a CI log needs to see of a failed test binary's output, which stays in the guest's
/// results otherwise: each failed test's block (the lines from `---- NAME stdout ----` to the
/// next block or the `failures:` list, blank lines dropped, at most 30 per test: a test's own
/// output may come before its panic message), else the output's last 20 lines.
fn failure_excerpt(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else { return String::new() };
    let lines: Vec<&str> = text.lines().collect();
    let mut picked: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("---- ") && lines[i].ends_with(" stdout ----") {
            let rest = &lines[i + 1..];
            let end = rest.iter().position(|l| l.starts_with("---- ") || *l == "failures:").unwrap_or(rest.len());
            picked.push(lines[i]);
            picked.extend(rest[..end].iter().filter(|l| !l.trim().is_empty()).take(30));
        }
        i += 1;
    }
    if picked.is_empty() {
        picked = lines[lines.len().saturating_sub(20)..].to_vec();
    }
    picked.iter().map(|l| format!("\n      {}", l.chars().take(400).collect::<String>())).collect()
}

/// A guest ready to boot: its kernel, initramfs, disks and work directory, all built.
pub struct PreparedSuite {
    arch: Arch,
    /// The kernel, resolved once: a second boot runs the same build.
    guest_kernel: Resolved,
    /// The kernel's version label (`6.1`; the newest line's number for `newest`).
    label: String,
    package: String,
    kernel: PathBuf,
    initrd: PathBuf,
    drives: [PathBuf; 2],
    disk: ResultsDisk,
    work: PathBuf,
    /// The test binaries, in the order the guest runs them, the execprof they run, and the
    /// test filter: what a second boot after a crash is prepared from.
    bins: Vec<TestBinary>,
    execprof: PathBuf,
    filter: Option<String>,
}

/// Builds everything one guest's suite needs (fetching its kernel, the shared userland image
/// once): done one guest after the other, so the guests can then boot side by side.
/// `label` is a guest kernel's ([`crate::debian::KERNELS`]; `newest` or its line's number).
pub fn prepare_suite(arch: Arch, label: &str, (bins, execprof): (&[TestBinary], &Path), filter: Option<&str>) -> Result<PreparedSuite> {
    prepare_guest(arch, &debian::guest(arch, label)?, (bins, execprof), filter)
}

/// [`prepare_suite`] for a kernel already resolved.
pub fn prepare_guest(arch: Arch, k: &Resolved, (bins, execprof): (&[TestBinary], &Path), filter: Option<&str>) -> Result<PreparedSuite> {
    prepare_in(arch, k, (bins, execprof), filter, "")
}

/// [`prepare_suite`] in the guest's work directory with `suffix` (a second boot's files sit
/// beside the first's).
fn prepare_in(
    arch: Arch,
    guest_kernel: &Resolved,
    (bins, execprof): (&[TestBinary], &Path),
    filter: Option<&str>,
    suffix: &str,
) -> Result<PreparedSuite> {
    let (label, package) = (guest_kernel.label.as_str(), guest_kernel.package.clone());
    let pkg_dir = vm::fetch_kernel(guest_kernel)?;
    let kernel = vm::vmlinuz(&pkg_dir)?;
    let busybox = vm::busybox(arch)?;
    let work = vm::cache_dir().join(match arch {
        Arch::X86_64 => format!("suite-{label}{suffix}"),
        _ => format!("suite-{}-{label}{suffix}", arch.debian()),
    });
    std::fs::create_dir_all(&work)?;
    let userland = userland::image(arch)?;
    let repo = repo_image(arch, bins, execprof, &work)?;
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "sys"] {
        c.dir(d);
    }
    c.char_device("dev/console", 5, 1);
    c.file("bin/busybox", &std::fs::read(&busybox)?, 0o755);
    guest::modules(&pkg_dir, &mut c)?;
    c.file("init", guest::SUITE_INIT.as_bytes(), 0o755);
    c.file("suite.sh", guest::SUITE_SCRIPT.as_bytes(), 0o755);
    c.file("suite-tests", test_list(bins)?.as_bytes(), 0o644);
    let env = GuestEnv::default()
        .set("USERLAND_DEV", guest::virtio_disk(0))
        .set("REPO_DEV", guest::virtio_disk(1))
        .set("RESULTS_DEV", guest::virtio_disk(2))
        .set("INSTA_ROOT", std::env::current_dir()?.display())
        .set("SLOWDOWN", SLOWDOWN)
        .set("TEST_FILTER", filter.unwrap_or(""))
        .set("HOST_ONLY", host_only_skips());
    c.file("guest.env", env.as_bytes(), 0o644);
    let initrd = work.join("initramfs.cpio");
    std::fs::write(&initrd, c.finish())?;
    let disk = ResultsDisk::create(work.join("results.img"), 256)?;
    Ok(PreparedSuite {
        arch,
        guest_kernel: guest_kernel.clone(),
        label: label.to_owned(),
        package,
        kernel,
        initrd,
        drives: [userland, repo],
        disk,
        work,
        bins: bins.to_vec(),
        execprof: execprof.to_owned(),
        filter: filter.map(str::to_owned),
    })
}

/// Boots a prepared guest (one vCPU) and reads its results back. The shared disks are
/// read-only, so two guests may boot at once.
///
/// A guest whose kernel crashes is booted once more for the binaries that had not finished
/// (TCG has crashed a guest kernel once in CI, in a test that then passed on every rerun):
/// the crash is said either way, and fails the run only if the second boot crashes too or a
/// binary fails there.
pub fn boot_suite(p: PreparedSuite, timeout: Duration) -> Result<SuiteRun> {
    let mut run = boot_once(&p, timeout)?;
    let Some(crash) = run.crash() else { return Ok(run) };
    let unfinished: Vec<TestBinary> = p.bins.iter().zip(&run.results).filter(|(_, r)| r.rc.is_none()).map(|(b, _)| b.clone()).collect();
    if unfinished.is_empty() {
        return Ok(run);
    }
    eprintln!(
        "xtask: guest {}: the kernel crashed ({crash}; console: {}); booting it once more for the {} test binaries that had not finished",
        run.kernel,
        run.console.display(),
        unfinished.len()
    );
    let again = prepare_in(p.arch, &p.guest_kernel, (&unfinished, &p.execprof), p.filter.as_deref(), "-rerun")?;
    let rerun = boot_once(&again, timeout)?;
    let first_console = std::mem::replace(&mut run.console, rerun.console);
    take_rerun(&mut run.results, rerun.results)?;
    run.survived_crash = Some(format!("{crash} (console: {})", first_console.display()));
    Ok(run)
}

/// The second boot's results in place of the first's unfinished ones, in order.
fn take_rerun(results: &mut [BinaryResult], rerun: Vec<BinaryResult>) -> Result<()> {
    let unfinished = results.iter().filter(|r| r.rc.is_none()).count();
    if rerun.len() != unfinished {
        bail!("the second boot ran {} test binaries, not the {unfinished} unfinished ones", rerun.len());
    }
    for (r, again) in results.iter_mut().filter(|r| r.rc.is_none()).zip(rerun) {
        if again.exe != r.exe {
            bail!("the second boot ran {}, not {}", again.exe.display(), r.exe.display());
        }
        *r = again;
    }
    Ok(())
}

fn boot_once(p: &PreparedSuite, timeout: Duration) -> Result<SuiteRun> {
    let PreparedSuite { arch, label, package, kernel, initrd, drives, disk, work, bins, .. } = p;
    let (arch, label) = (*arch, label.as_str());
    let name = arch.guest_name(label);
    eprintln!("xtask: the whole test suite inside {name} ({package}); TCG is slow, this takes many minutes");
    vm::boot(
        &vm::Boot {
            arch,
            kernel,
            initrd,
            drives,
            results: Some(disk),
            memory_mib: 6144,
            timeout,
            // Debian's x86_64 kernels build x32 in but leave it off: on, the suite's x32 test
            // sees x32 calls counted rather than refused.
            cmdline: if arch == Arch::X86_64 { "syscall.x32=y" } else { "" },
            qemu: &[],
        },
        work,
    )?;
    let console = work.join("console.log");
    let result = disk.read_back(&work.join("results"), &console)?;
    for note in result.all("note") {
        eprintln!("xtask: guest {name}: {note}");
    }
    let release = result.get("kernel").unwrap_or_default();
    if !release.starts_with(&format!("{label}.")) {
        bail!("guest {name}: the guest ran kernel {release:?}, not {label}; console in {}", console.display());
    }
    // A crash is said by the caller, with its oops.
    let crashed = vm::kernel_crash(&std::fs::read_to_string(&console).unwrap_or_default()).is_some();
    if !result.finished() && !crashed {
        eprintln!("xtask: guest {name}: the suite did not run to its end (time limit {timeout:?}); console in {}", console.display());
    }
    let logs = result.dir.join("tests");
    let results = bins
        .iter()
        .enumerate()
        .map(|(i, b)| BinaryResult { exe: b.exe.clone(), rc: result.code(&format!("test_rc_{i}")), log: logs.join(format!("{i}.log")) })
        .collect();
    Ok(SuiteRun { kernel: name, results, console, logs, survived_crash: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every test the guests leave to the host is a test of the repository's integration
    /// tests, named once, and no other test's name contains it (`--skip` matches substrings);
    /// every binary left to the host is one of them or a package's. (A host-only test itself:
    /// it reads the sources.)
    #[test]
    fn the_host_only_names_are_real_tests_and_skip_nothing_else() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiler/tests");
        let mut names = Vec::new();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path.file_stem().unwrap().to_string_lossy().into_owned());
                let text = std::fs::read_to_string(&path).unwrap();
                let mut lines = text.lines().peekable();
                while let Some(line) = lines.next() {
                    if line.trim() == "#[test]" {
                        // The attribute lines that may follow, then the function.
                        let f = lines.by_ref().find(|l| l.trim_start().starts_with("fn ")).unwrap();
                        names.push(f.trim_start()["fn ".len()..].split('(').next().unwrap().to_owned());
                    }
                }
            }
        }
        assert!(names.len() > 50, "found the integration tests: {names:?}");
        for t in HOST_ONLY_TESTS {
            assert_eq!(names.iter().filter(|n| n == t).count(), 1, "{t} is one integration test");
            let others: Vec<&String> = names.iter().filter(|n| *n != t && n.contains(t)).collect();
            assert!(others.is_empty(), "--skip {t} would skip {others:?} too");
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for b in HOST_ONLY_BINARIES {
            let package = root.join(b).join("Cargo.toml").is_file();
            assert!(package || files.iter().any(|f| f == b), "{b} is an integration test binary or a package: {files:?}");
        }
        assert_eq!(host_only_skips().matches("--skip ").count(), HOST_ONLY_TESTS.len());
        // Each word of the kernel-dependent filter picks tests, none of them host-only.
        for word in KERNEL_DEPENDENT.split_whitespace() {
            let picked: Vec<&String> = names.iter().filter(|n| n.contains(word)).collect();
            assert!(!picked.is_empty(), "{word} names no integration test");
            assert!(picked.iter().all(|n| !HOST_ONLY_TESTS.contains(&n.as_str())), "{word} picks a host-only test: {picked:?}");
        }
    }

    fn result(exe: &str, rc: Option<i32>, boot: &str) -> BinaryResult {
        BinaryResult { exe: exe.into(), rc, log: format!("{boot}/{exe}.log").into() }
    }

    #[test]
    fn each_tests_seconds_are_read_from_its_line() {
        let log = "running 2 tests\ntest a ... ok <1.500s>\ntest b::c ... FAILED <12.250s>\ntest d ... ok\ntest e ... the agent's line\nok <18.488s>\ntest result: ok. finished in 2.00s\n";
        assert_eq!(test_seconds(log), [("a", 1.5), ("b::c", 12.25), ("e", 18.488)]);
    }

    #[test]
    fn a_failed_binarys_panics_reach_the_ci_log() {
        let dir = tempfile_dir();
        let log = dir.join("7.log");
        let text = "running 3 tests\ntest a ... ok\ntest b ... FAILED\n\nfailures:\n\n---- b stdout ----\nthe test's own line\n\nthread 'b' panicked at x.rs:1:2:\nleft 3 right 4\n\nfailures:\n    b\n\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 61.50s\n";
        std::fs::write(&log, text).unwrap();
        assert_eq!(
            failure_excerpt(&log),
            "\n      ---- b stdout ----\n      the test's own line\n      thread 'b' panicked at x.rs:1:2:\n      left 3 right 4"
        );
        assert_eq!(harness_seconds(text), 61.5);
        // No panic block (a binary killed by the time limit): the output's last lines.
        std::fs::write(&log, "running 3 tests\ntest a ... ok\n").unwrap();
        assert_eq!(failure_excerpt(&log), "\n      running 3 tests\n      test a ... ok");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-suite-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_second_boot_fills_in_only_the_binaries_that_had_not_finished() {
        let mut first = vec![result("a", Some(0), "1"), result("b", None, "1"), result("c", Some(101), "1"), result("d", None, "1")];
        take_rerun(&mut first, vec![result("b", Some(0), "2"), result("d", None, "2")]).unwrap();
        let got: Vec<_> = first.iter().map(|r| (r.exe.to_str().unwrap(), r.rc, r.log.to_str().unwrap())).collect();
        assert_eq!(got, [("a", Some(0), "1/a.log"), ("b", Some(0), "2/b.log"), ("c", Some(101), "1/c.log"), ("d", None, "2/d.log")]);
        // A second boot that ran other binaries, or another number of them, is an error.
        let mut first = vec![result("a", None, "1")];
        assert!(take_rerun(&mut first, vec![result("z", Some(0), "2")]).is_err());
        assert!(take_rerun(&mut first, vec![]).is_err());
    }

    #[test]
    fn a_crash_of_the_last_boot_and_every_unfinished_binary_fail_the_run() {
        let dir = scratch_dir();
        let console = dir.join("console.log");
        std::fs::write(&console, "[  1.0] Oops: double fault: 0000 [#1]\n[  1.1] RIP: 0010:kmem_cache_alloc+0xc3\n[  1.2] Kernel panic - not syncing: Fatal exception\n").unwrap();
        let run = SuiteRun {
            kernel: "6.12".into(),
            results: vec![result("a", Some(0), "1"), result("b", None, "1")],
            console: console.clone(),
            logs: dir.clone(),
            survived_crash: None,
        };
        let failures = run.failures();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].contains("kernel crashed: Oops: double fault") && failures[0].contains("Kernel panic"), "{failures:?}");
        assert!(failures[1].contains("b did not finish (output: 1/b.log)"), "{failures:?}");
        // The crash survived by a second boot that ran everything: no failure.
        std::fs::write(&console, "[  1.0] reboot: Power down\n").unwrap();
        let run =
            SuiteRun { results: vec![result("a", Some(0), "1"), result("b", Some(0), "2")], survived_crash: Some("Oops".into()), ..run };
        assert!(run.failures().is_empty(), "{:?}", run.failures());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A directory of the calling test's own: tests run side by side, and each removes its own.
    fn scratch_dir() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtask-suite-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
