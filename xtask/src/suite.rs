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
//! `suite.sh`). Each binary's exit code and output come back on the results disk
//! ([`crate::guest`]).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{
    cpio::Cpio,
    guest::{self, GuestEnv, ResultsDisk},
    run,
    userland::{self, make_ext4},
    vm::{self, Arch},
};

/// TCG runs a guest this many times slower than this machine (measured: ~30×): the tests
/// scale their few wall-clock limits by it (`EXECPROF_TEST_SLOWDOWN`).
const SLOWDOWN: u32 = 40;

/// A test executable and the directory `cargo test` runs it in.
pub struct TestBinary {
    pub exe: PathBuf,
    pub dir: PathBuf,
}

/// The test binaries for `arch` and the execprof they run, built and listed (cargo's JSON
/// messages name each executable): the host's build for x86_64, the cross-build (rustc-web,
/// which has the target's std; see .cargo/config.toml) for arm64.
pub fn test_binaries(arch: Arch) -> Result<(Vec<TestBinary>, PathBuf)> {
    let mut cargo = Command::new("cargo");
    let execprof = match arch.rust_target() {
        None => {
            cargo.arg("test");
            PathBuf::from("target/release/execprof")
        }
        Some(target) => {
            cargo.args(["+rustc-web", "test", "--target", target]);
            Path::new("target").join(target).join("release/execprof")
        }
    };
    // The integration tests' binary (execprof) is built with them.
    let out = cargo
        .args(["--release", "--no-run", "--message-format=json-render-diagnostics"])
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
    let mut exes: Vec<PathBuf> = bins.iter().map(|b| b.exe.clone()).collect();
    exes.push(execprof.to_owned());
    for exe in exes {
        let to = place(&exe)?;
        run(Command::new(crate::setup::tool(arch.objcopy())).arg("--strip-debug").arg(&exe).arg(&to))?;
    }
    // Each test runs in its package's directory, as under cargo.
    for b in bins {
        std::fs::create_dir_all(stage.join(b.dir.strip_prefix("/").unwrap_or(&b.dir)))?;
    }
    // insta's snapshots sit beside the modules they test, wherever those move.
    let mut data: Vec<PathBuf> =
        ["profiler/tests/fixtures", "profiler/tests/programs", "benches/seed", "README.md"].iter().map(|d| root.join(d)).collect();
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

/// What one guest's run of the suite gave.
pub struct SuiteRun {
    pub kernel: String,
    /// Per test binary: its path and exit code (None: it never finished).
    pub results: Vec<(PathBuf, Option<i32>)>,
    pub console: PathBuf,
    /// Each binary's output, `N.log` in the order of [`SuiteRun::results`].
    pub logs: PathBuf,
}

impl SuiteRun {
    pub fn failures(&self) -> Vec<String> {
        let console = std::fs::read_to_string(&self.console).unwrap_or_default();
        let crash = vm::kernel_crash(&console)
            .map(|c| format!("{}: the guest's kernel crashed: {c} (console: {})", self.kernel, self.console.display()));
        crash.into_iter().chain(self.failed_binaries()).collect()
    }

    fn failed_binaries(&self) -> impl Iterator<Item = String> + '_ {
        self.results.iter().enumerate().filter(|(_, (_, rc))| *rc != Some(0)).map(|(i, (exe, rc))| {
            let log = self.logs.join(format!("{i}.log"));
            match rc {
                Some(rc) => format!("{}: {} failed with exit code {rc} (output: {})", self.kernel, exe.display(), log.display()),
                None => format!("{}: {} did not finish (output: {})", self.kernel, exe.display(), log.display()),
            }
        })
    }
}

/// A guest ready to boot: its kernel, initramfs, disks and work directory, all built.
pub struct PreparedSuite {
    arch: Arch,
    /// The kernel's version label (`6.1`).
    label: String,
    package: String,
    kernel: PathBuf,
    initrd: PathBuf,
    drives: [PathBuf; 2],
    disk: ResultsDisk,
    work: PathBuf,
    /// The test binaries, in the order the guest runs them.
    exes: Vec<PathBuf>,
}

/// Builds everything one guest's suite needs (fetching its kernel, the shared userland image
/// once): done one guest after the other, so the guests can then boot side by side.
pub fn prepare_suite(arch: Arch, label: &str, (bins, execprof): (&[TestBinary], &Path), filter: Option<&str>) -> Result<PreparedSuite> {
    let (_, meta) = arch
        .kernels()
        .into_iter()
        .find(|(l, _)| *l == label)
        .ok_or_else(|| anyhow!("no {} guest kernel {label}: the kernels are {:?}", arch.debian(), arch.kernels()))?;
    let package = vm::resolve_package(&meta)?;
    let pkg_dir = vm::fetch_package(&package)?;
    let kernel = vm::vmlinuz(&pkg_dir)?;
    let busybox = arch.busybox()?;
    let work = vm::cache_dir().join(match arch {
        Arch::X86_64 => format!("suite-{label}"),
        _ => format!("suite-{}-{label}", arch.debian()),
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
        .set("TEST_FILTER", filter.unwrap_or(""));
    c.file("guest.env", env.as_bytes(), 0o644);
    let initrd = work.join("initramfs.cpio");
    std::fs::write(&initrd, c.finish())?;
    let disk = ResultsDisk::create(work.join("results.img"), 256)?;
    let exes = bins.iter().map(|b| b.exe.clone()).collect();
    Ok(PreparedSuite { arch, label: label.to_owned(), package, kernel, initrd, drives: [userland, repo], disk, work, exes })
}

/// Boots a prepared guest (one vCPU) and reads its results back. The shared disks are
/// read-only, so two guests may boot at once.
pub fn boot_suite(p: PreparedSuite, timeout: Duration) -> Result<SuiteRun> {
    let PreparedSuite { arch, label, package, kernel, initrd, drives, disk, work, exes } = p;
    let name = arch.guest_name(&label);
    eprintln!("xtask: the whole test suite inside {name} ({package}); TCG is slow, this takes many minutes");
    vm::boot(
        &vm::Boot {
            arch,
            kernel: &kernel,
            initrd: &initrd,
            drives: &drives,
            results: Some(&disk),
            memory_mib: 6144,
            timeout,
            // Debian's x86_64 kernels build x32 in but leave it off: on, the suite's x32 test
            // sees x32 calls counted rather than refused.
            cmdline: if arch == Arch::X86_64 { "syscall.x32=y" } else { "" },
            qemu: &[],
        },
        &work,
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
    if !result.finished() {
        eprintln!("xtask: guest {name}: the suite did not run to its end (time limit {timeout:?}); console in {}", console.display());
    }
    let results = exes.into_iter().enumerate().map(|(i, exe)| (exe, result.code(&format!("test_rc_{i}")))).collect();
    Ok(SuiteRun { kernel: name, results, console, logs: result.dir.join("tests") })
}
