//! Runs execprof inside stock Debian kernels under QEMU (TCG: this machine's KVM cannot run
//! a stock kernel) to test exact mode where kprobes exist, and brings the recordings back.
//!
//! Each guest boots a minimal initramfs: busybox, the execprof binary with the glibc files
//! it links against, the virtio modules, and `xtask/guest/vm-test.sh` as init, which runs
//! the built-in chain and writes the recording, the JSON report and `result.env` onto the
//! results disk ([`crate::guest`]). The host reads the report back as execprof's
//! `RunReport`.
use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use execprof::{
    analysis::outcome::Outcome,
    model::meta::{Boundaries, Mechanism, RUNS_SKIPPED},
    report::{
        RunReport,
        diff::{Diff, LineChange, LineKind},
    },
};

use crate::{
    cpio::Cpio,
    debian::{self, Apt, Resolved},
    guest::{self, GuestEnv, ResultsDisk},
    run,
};

/// The sampling rate inside the guests.
const SAMPLE_HZ: u32 = 4999;

/// Steps of the untraced chain the guest's agent counts.
pub(crate) const AGENT_STEPS: u32 = 20;

pub use crate::arch::Arch;

/// The busybox `arch`'s guests run.
pub(crate) fn busybox(arch: Arch) -> Result<PathBuf> {
    Ok(fetch_package(&arch.package("busybox-static"))?.join("root/bin/busybox"))
}

pub struct VmOptions {
    pub steps: u32,
    pub misses: u32,
    pub timeout: Duration,
}

pub struct GuestRun {
    pub arch: Arch,
    pub kernel: String,
    pub package: String,
    /// execprof's terminal report.
    pub text: String,
    pub report: RunReport,
    /// The run's recording, copied off the guest's results disk.
    pub recording: PathBuf,
    /// `doctor`'s "BPF features" check: what the kernel's BPF lacks, and what runs instead.
    pub bpf_features: Check,
    /// What the guest's agent counted of its chain.
    pub agent: AgentRun,
}

/// The parts of `doctor --json` the guests read (its `commands::doctor` is not in the library
/// xtask links: it comes with the tracer).
#[derive(serde::Deserialize)]
struct DoctorJson {
    mechanisms: Vec<Check>,
}

/// One check of `doctor --json`.
#[derive(serde::Deserialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// The guest's agent: how it ended, and the parts of its JSON checked (`agent --json`).
#[derive(serde::Deserialize)]
pub struct AgentRun {
    /// The agent's exit code (not in its JSON: read from `result.env`).
    #[serde(skip)]
    pub rc: Option<i32>,
    pub boundaries: Boundaries,
    pub complete: bool,
    pub series: Vec<AgentSeries>,
}

/// One series of the agent's JSON.
#[derive(serde::Deserialize)]
pub struct AgentSeries {
    pub program: String,
    /// The exec outcome (fork-family series have none).
    #[serde(default)]
    pub outcome: Option<String>,
    pub count: u64,
}

impl AgentRun {
    /// Calls of the chain's program (`…/bin/execprof-chain`) with `outcome`.
    pub fn chain_calls(&self, outcome: Outcome) -> u64 {
        self.series
            .iter()
            .filter(|s| s.program.ends_with("/bin/execprof-chain") && s.outcome.as_deref() == outcome.key())
            .map(|s| s.count)
            .sum()
    }
}

pub(crate) fn cache_dir() -> PathBuf {
    PathBuf::from("target/vm")
}

/// Downloaded packages: outside the clone, so CI runs in fresh clones reuse them (a package
/// name includes its version, which keys the cache).
fn package_cache() -> PathBuf {
    PathBuf::from("/var/cache/execprof/packages")
}

/// Downloads and unpacks a Debian package of the machine's apt sources into the cache (never
/// installs it).
pub(crate) fn fetch_package(pkg: &str) -> Result<PathBuf> {
    fetch_as(Apt::Host, pkg, pkg)
}

/// One build of a package (`NAME=VERSION`) as `apt` has it, downloaded and unpacked into the
/// cache under its name and version (never installed).
pub(crate) fn fetch_version(apt: Apt, pkg: &str, version: &str) -> Result<PathBuf> {
    fetch_as(apt, &format!("{pkg}={version}"), &format!("{pkg}_{version}"))
}

/// `spec` (`NAME` or `NAME=VERSION`) as `apt` has it, unpacked once into the cache's `name`.
fn fetch_as(apt: Apt, spec: &str, name: &str) -> Result<PathBuf> {
    let dir = package_cache().join(name);
    let done = dir.join(".extracted");
    if done.exists() {
        return Ok(dir);
    }
    let started = Instant::now();
    unpack_into(apt, spec, &dir)?;
    std::fs::write(&done, "")?;
    eprintln!("xtask: fetched and unpacked {spec} in {:.1} s", started.elapsed().as_secs_f64());
    Ok(dir)
}

/// A guest's kernel, downloaded and unpacked into the cache (never installed): its
/// `linux-image-…` package and, where that is a metapackage over split packages (Debian's
/// 7.x: the kernel in `linux-binary-…`, the modules in `linux-modules-…`), those too, all in
/// one tree.
pub(crate) fn fetch_kernel(k: &Resolved) -> Result<PathBuf> {
    let dir = package_cache().join(&k.package);
    let done = dir.join(".kernel");
    if done.exists() {
        return Ok(dir);
    }
    let started = Instant::now();
    let depends = debian::apt_cache_depends(k.apt, &k.package)?;
    let mut parts = vec![k.package.clone()];
    parts.extend(debian::depends(&depends, "linux-binary-"));
    parts.extend(debian::depends(&depends, "linux-modules-"));
    for p in &parts {
        unpack_into(k.apt, p, &dir)?;
    }
    std::fs::write(&done, parts.join("\n") + "\n")?;
    eprintln!("xtask: fetched and unpacked {} in {:.1} s", parts.join(" "), started.elapsed().as_secs_f64());
    Ok(dir)
}

/// `apt-get download PKG` with `apt`, unpacked into `dir/root`. With the private
/// configuration a failed download fetches its lists again and retries once (the lists may
/// name a build the archive has since replaced).
fn unpack_into(apt: Apt, pkg: &str, dir: &Path) -> Result<()> {
    let dl = dir.join("deb");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl)?;
    let download = || -> Result<()> {
        let mut cmd = Command::new("apt-get");
        if apt == Apt::Private {
            cmd.args(debian::private_options()?);
        }
        run(cmd.current_dir(&dl).args(["download", "-q", pkg]))
    };
    if let Err(e) = download() {
        if apt == Apt::Host {
            return Err(e).context(format!("downloading {pkg} (run `apt-get update`, then this again)"));
        }
        eprintln!("xtask: downloading {pkg} failed ({e:#}); fetching the package lists again");
        debian::update_lists(true)?;
        download().with_context(|| format!("downloading {pkg} (the lists under {} are fresh)", debian::APT_DIR))?;
    }
    let deb = std::fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| anyhow!("apt-get download {pkg} produced no .deb"))?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir.join("root")))?;
    std::fs::remove_dir_all(&dl)?;
    Ok(())
}

/// The kernel image of an unpacked kernel package: `/boot/vmlinuz-VERSION`, or (Debian's 7.x
/// packages, which have no /boot) `/usr/lib/modules/VERSION/vmlinuz`.
pub(crate) fn vmlinuz(pkg_dir: &Path) -> Result<PathBuf> {
    let root = pkg_dir.join("root");
    let in_boot = std::fs::read_dir(root.join("boot"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")));
    let in_modules = || module_trees(&root).into_iter().map(|d| d.join("vmlinuz")).find(|p| p.is_file());
    in_boot.or_else(in_modules).ok_or_else(|| {
        anyhow!(
            "no vmlinuz in {} (neither boot/vmlinuz-* nor usr/lib/modules/*/vmlinuz); remove that directory to fetch it again",
            pkg_dir.display()
        )
    })
}

/// The `lib/modules/VERSION` and `usr/lib/modules/VERSION` directories under an unpacked
/// package's root.
pub(crate) fn module_trees(root: &Path) -> Vec<PathBuf> {
    let mut trees: Vec<PathBuf> = ["lib/modules", "usr/lib/modules"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    trees.sort();
    trees
}

/// Shared libraries the binary needs, as `ldd` lists them (the loader included); for an arm64
/// binary, its DT_NEEDED closure from the cross libc (see [`foreign_libraries`]).
fn shared_libraries(exe: &Path) -> Result<Vec<(PathBuf, String)>> {
    if elf_machine(exe)? == EM_AARCH64 {
        return foreign_libraries(exe, Path::new(AARCH64_LIBS));
    }
    let out = Command::new("ldd").arg(exe).output().context("running ldd")?;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push((PathBuf::from(p), p.trim_start_matches('/').to_owned()));
        }
    }
    Ok(libs)
}

const EM_AARCH64: u16 = 183;
/// The arm64 cross libc's libraries (libc6-arm64-cross, libgcc-s1-arm64-cross).
const AARCH64_LIBS: &str = "/usr/aarch64-linux-gnu/lib";

/// An ELF file's `e_machine` (little-endian files only, which are all this project builds).
fn elf_machine(exe: &Path) -> Result<u16> {
    let mut head = [0u8; 20];
    std::fs::File::open(exe)?.read_exact(&mut head).with_context(|| format!("reading {}", exe.display()))?;
    if &head[..4] != b"\x7fELF" {
        bail!("{} is not an ELF file", exe.display());
    }
    Ok(u16::from_le_bytes([head[18], head[19]]))
}

/// A cross-built binary's libraries (ldd cannot run it): the DT_NEEDED names, transitively, found
/// in `libdir`, each placed in the initramfs where the guest's loader looks: the program
/// interpreter at its own path (`/lib/ld-linux-aarch64.so.1`), the rest in `/lib` (in every
/// glibc's default search path).
fn foreign_libraries(exe: &Path, libdir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let readelf = |args: &[&str], f: &Path| -> Result<String> {
        let out = Command::new("readelf").args(args).arg(f).output().context("running readelf (binutils)")?;
        if !out.status.success() {
            bail!("readelf {args:?} {} failed: {}", f.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let bracketed = |line: &str| line.split_once('[').and_then(|(_, r)| r.split_once(']')).map(|(n, _)| n.trim().to_owned());
    let interp = readelf(&["-lW"], exe)?
        .lines()
        .find(|l| l.contains("program interpreter:"))
        .and_then(|l| l.split_once("interpreter:").and_then(|(_, r)| r.split_once(']')).map(|(p, _)| p.trim().to_owned()));
    let mut todo = vec![exe.to_path_buf()];
    let mut names: Vec<String> = Vec::new();
    let mut libs = Vec::new();
    while let Some(f) = todo.pop() {
        for line in readelf(&["-dW"], &f)?.lines().filter(|l| l.contains("(NEEDED)")) {
            let Some(name) = bracketed(line) else { continue };
            if names.contains(&name) {
                continue;
            }
            let path = libdir.join(&name);
            if !path.exists() {
                bail!("{} needs {name}, which {} does not have", f.display(), libdir.display());
            }
            let dest = match &interp {
                Some(i) if Path::new(i).file_name().is_some_and(|n| n.to_string_lossy() == name) => i.trim_start_matches('/').to_owned(),
                _ => format!("lib/{name}"),
            };
            names.push(name);
            libs.push((path.clone(), dest));
            todo.push(path);
        }
    }
    if let Some(i) = interp.filter(|i| !libs.iter().any(|(_, d)| d == i.trim_start_matches('/'))) {
        let name = Path::new(&i).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        libs.push((libdir.join(name), i.trim_start_matches('/').to_owned()));
    }
    Ok(libs)
}

/// busybox (also as /bin/sh), execprof with the libraries it links, and `init`; callers add
/// the rest (modules, `/guest.env`).
pub(crate) fn initramfs_base(execprof: &Path, busybox: &Path, init: &str) -> Result<Cpio> {
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "sys", "tmp", "lib", "lib64", "lib/x86_64-linux-gnu", "etc"] {
        c.dir(d);
    }
    c.char_device("dev/console", 5, 1);
    let busybox = std::fs::read(busybox)?;
    c.file("bin/busybox", &busybox, 0o755);
    // `execprof run --setup` runs its command with sh.
    c.file("bin/sh", &busybox, 0o755);
    c.file("execprof", &std::fs::read(execprof)?, 0o755);
    for (lib, name) in shared_libraries(execprof)? {
        c.file(&name, &std::fs::read(&lib).with_context(|| format!("reading {}", lib.display()))?, 0o755);
    }
    c.file("init", init.as_bytes(), 0o755);
    Ok(c)
}

/// One QEMU boot: a kernel, an initramfs, read-only raw disks (in order: vda, vdb, ...), then
/// the writable results disk, if any (the next name after the read-only ones).
pub(crate) struct Boot<'a> {
    pub arch: Arch,
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    pub drives: &'a [PathBuf],
    pub results: Option<&'a ResultsDisk>,
    pub memory_mib: u32,
    pub timeout: Duration,
    /// Kernel command-line parameters beyond the console's.
    pub cmdline: &'a str,
    /// More QEMU arguments.
    pub qemu: &'a [&'a str],
}

/// Boots under TCG and returns everything the serial console printed (also kept in
/// `work/console.log`, for humans). QEMU exits 0 even when killed, so callers decide from
/// what the guest left on its results disk.
pub(crate) fn boot(b: &Boot<'_>, work: &Path) -> Result<String> {
    let started = Instant::now();
    let qemu = b.arch.qemu();
    let mut cmd = Command::new(crate::unpacked::tool(qemu));
    // One vCPU: under multi-threaded TCG, the kernel's text patching (static keys flipped by
    // attaching and detaching tracepoints, int3-based text_poke_bp) raced the other vCPU and
    // crashed the 6.12 guest now and then ("Oops: int3" in __schedule, bpf_trace_run2).
    // No network: no guest needs one (and QEMU's default NIC wants an option ROM).
    cmd.args(crate::unpacked::qemu_firmware_args(qemu))
        .args(b.arch.machine())
        .args(["-accel", "tcg", "-cpu", b.arch.cpu(), "-smp", "1", "-nographic", "-no-reboot", "-nic", "none"])
        .arg("-m")
        .arg(b.memory_mib.to_string())
        .arg("-kernel")
        .arg(b.kernel)
        .arg("-initrd")
        .arg(b.initrd)
        .arg("-append")
        .arg(format!("console={} panic=-1 quiet loglevel=3 {}", b.arch.console(), b.cmdline))
        .args(b.qemu);
    for d in b.drives {
        cmd.arg("-drive").arg(format!("file={},format=raw,if=virtio,readonly=on", d.display()));
    }
    if let Some(r) = b.results {
        cmd.arg("-drive").arg(format!("file={},format=raw,if=virtio", r.image.display()));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {qemu} (is QEMU installed? `cargo xtask setup` installs it)"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // The console goes to console.log as it comes, so a guest that hangs can be watched.
    let mut log = std::fs::File::create(work.join("console.log"))?;
    let reader = std::thread::spawn(move || {
        let (mut all, mut buf) = (Vec::new(), [0u8; 8192]);
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            let _ = std::io::Write::write_all(&mut log, &buf[..n]);
            all.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > b.timeout {
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let console = reader.join().map_err(|_| anyhow!("console reader panicked"))?;
    let errors = errors.join().map_err(|_| anyhow!("QEMU's error reader panicked"))?;
    if let Some(status) = status.filter(|s| !s.success()) {
        bail!("QEMU failed ({status}): {}", errors.trim());
    }
    eprintln!(
        "xtask: guest ran {:.1} s{}",
        started.elapsed().as_secs_f64(),
        if timed_out { format!(" and was stopped at the {:?} time limit", b.timeout) } else { String::new() }
    );
    Ok(console)
}

pub fn run_guest(arch: Arch, k: &Resolved, execprof: &Path, opts: &VmOptions) -> Result<GuestRun> {
    let (label, package) = (k.label.as_str(), k.package.clone());
    let pkg_dir = fetch_kernel(k)?;
    let kernel = vmlinuz(&pkg_dir)?;
    let busybox = busybox(arch)?;
    let work = cache_dir().join(match arch {
        Arch::X86_64 => format!("guest-{label}"),
        _ => format!("guest-{}-{label}", arch.debian()),
    });
    std::fs::create_dir_all(&work)?;
    let initrd = work.join("initramfs.cpio");
    let mut c = initramfs_base(execprof, &busybox, guest::VM_TEST_INIT)?;
    guest::modules(&pkg_dir, &mut c)?;
    let env = GuestEnv::default()
        .set("STEPS", opts.steps)
        .set("MISSES", opts.misses)
        .set("AGENT_STEPS", AGENT_STEPS)
        .set("SAMPLE_HZ", SAMPLE_HZ)
        .set("RESULTS_DEV", guest::virtio_disk(0));
    c.file("guest.env", env.as_bytes(), 0o644);
    std::fs::write(&initrd, c.finish())?;
    let disk = ResultsDisk::create(work.join("results.img"), 64)?;

    boot(
        &Boot {
            arch,
            kernel: &kernel,
            initrd: &initrd,
            drives: &[],
            results: Some(&disk),
            memory_mib: 1024,
            timeout: opts.timeout,
            cmdline: "",
            qemu: &[],
        },
        &work,
    )?;
    eprintln!("xtask: guest {label} ({package}) done");
    let console = work.join("console.log");
    let result = disk.read_back(&work.join("results"), &console)?;
    for note in result.all("note") {
        eprintln!("xtask: guest {label}: {note}");
    }
    let rc = result.code("execprof_rc");
    if rc != Some(0) || !result.finished() {
        // What execprof said last (its error, when it stopped at load or attach).
        let said = std::fs::read_to_string(result.dir.join("report.txt")).unwrap_or_default();
        let tail: Vec<&str> = said.lines().rev().take(6).collect();
        bail!(
            "guest {label} ({package}): execprof did not succeed (exit code {}, {}; time limit {:?}); console in {}{}",
            rc.map_or("never written".into(), |c| c.to_string()),
            if result.finished() { "the guest finished" } else { "the guest did not finish" },
            opts.timeout,
            console.display(),
            if tail.is_empty() {
                String::new()
            } else {
                format!("; execprof's last words:\n    {}", tail.into_iter().rev().collect::<Vec<_>>().join("\n    "))
            }
        );
    }
    let release = result.get("kernel").unwrap_or_default();
    if !release.starts_with(&format!("{label}.")) {
        bail!("guest {label}: the guest ran kernel {release:?}, not {label}; console in {}", console.display());
    }
    let text = std::fs::read_to_string(result.dir.join("report.txt")).unwrap_or_default();
    let json = result.dir.join("run.json");
    let report: RunReport =
        serde_json::from_str(&std::fs::read_to_string(&json).with_context(|| format!("guest {label}: no JSON report"))?)
            .with_context(|| format!("guest {label}: {} is not execprof's report", json.display()))?;
    let recording = result.dir.join("run.execprof");
    if !recording.exists() {
        bail!("guest {label}: no recording on the results disk");
    }
    let read_json = |name: &str| -> Result<String> {
        std::fs::read_to_string(result.dir.join(name)).with_context(|| {
            format!("guest {label}: no {name} (doctor exit code {:?}); console in {}", result.code("doctor_rc"), console.display())
        })
    };
    let doctor: DoctorJson = serde_json::from_str(&read_json("doctor.json")?).with_context(|| format!("guest {label}: doctor.json"))?;
    let bpf_features = doctor
        .mechanisms
        .into_iter()
        .find(|c| c.name == "BPF features")
        .ok_or_else(|| anyhow!("guest {label}: doctor's JSON has no \"BPF features\" check"))?;
    let agent_said = std::fs::read_to_string(result.dir.join("agent.txt")).unwrap_or_default();
    let mut agent: AgentRun = serde_json::from_str(&read_json("agent.json").with_context(|| format!("the agent said:\n{agent_said}"))?)
        .with_context(|| format!("guest {label}: agent.json"))?;
    agent.rc = result.code("agent_rc");
    Ok(GuestRun { arch, kernel: label.to_owned(), package, text, report, recording, bpf_features, agent })
}

/// What must hold in a guest. Returns the checks that failed (empty: all passed).
pub fn check_guest(run: &GuestRun, opts: &VmOptions) -> Vec<String> {
    let mut failed = Vec::new();
    let r = &run.report;
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{}: {what}", run.kernel));
        }
    };
    let mode = &r.meta.mode.functions_mode;
    check(mode.starts_with("exact"), format!("auto mode chose exact mode (got {mode:?})"));
    let outcome = |o: Outcome| r.analysis.outcomes.iter().find(|s| s.outcome == o);
    let count = |o: Outcome| outcome(o).map_or(0, |s| s.count);
    let (steps, misses) = (u64::from(opts.steps), u64::from(opts.misses));
    // Exactly, unless the kernel skipped runs of execprof's programs (7.3 runs tracing programs
    // preemptible: a thread switched out inside one makes the kernel skip it on that CPU),
    // each of which may hide one attempt: counted, and marked incomplete.
    let skipped = r.losses.named(RUNS_SKIPPED);
    let mut exact = |o: Outcome, want: u64, what: &str| {
        let got = count(o);
        check(got <= want && got + skipped >= want, format!("{what} = {got} (want {want}; {skipped} program runs skipped)"));
    };
    exact(Outcome::Enoent, steps * misses, "ENOENT attempts");
    exact(Outcome::Success, steps + 1, "successful execs");
    let lost = r.losses.beyond_skipped_runs();
    check(lost == 0, format!("{lost} events lost (beside {skipped} program runs the kernel skipped): {:?}", r.losses.0));
    check(skipped == 0 || !r.complete, "runs the kernel skipped mark the report incomplete".into());

    let calls = |f: &str| exact_calls(r, Outcome::Enoent, f);
    let faults = outcome(Outcome::Enoent).and_then(|s| s.minor_faults_per_attempt).unwrap_or(f64::NAN);
    let functions = r.meta.exact_plan.as_ref().map_or(&[][..], |p| p.functions.as_slice());
    // An absence only means something for a function that was probed.
    for f in ["do_open_execat", "mm_alloc", "copy_strings"] {
        check(functions.iter().any(|p| p.function == f), format!("{f} is probed (it is a symbol on this kernel)"));
    }
    let version: Vec<u32> = run.kernel.split('.').filter_map(|x| x.parse().ok()).collect();
    // Both x86_64 guest kernels have BPF trampolines; arm64 attaches them only from 6.4 (before,
    // fentry/fexit load with -ENOTSUPP). With trampolines, a function whose name has BTF (no
    // compiler suffix, not present twice) is timed by fentry/fexit; the others by kprobes.
    let trampolines = run.arch == Arch::X86_64 || version.as_slice() >= [6, 4].as_slice();
    // Trampolines take a struct passed by value from 6.1 on (before: "arg2 type STRUCT is
    // unsupported"): there a function with one is timed by kprobes, the others keep fentry.
    const STRUCT_BY_VALUE: &[&str] = &["do_execveat_common", "copy_strings", "count"];
    let struct_args = r.meta.kernel.version().is_some_and(|v| v >= (6, 1));
    for f in functions {
        let btf_name = f.function == f.raw_name && !f.by_address;
        let trampoline_takes_it = struct_args || !STRUCT_BY_VALUE.contains(&f.function.as_str());
        let want = if btf_name && trampolines && trampoline_takes_it { Mechanism::Fentry } else { Mechanism::Kprobe };
        check(f.mechanism == want, format!("{} ({}) timed by {} (want {})", f.function, f.raw_name, f.mechanism.label(), want.label()));
    }
    // The calls' boundaries: fentry/fexit on the syscalls' functions (`__x64_sys_execve`,
    // `__arm64_sys_execve` and kin) where trampolines exist, else the raw syscall tracepoints
    // (arm64: `orig_x0` holds the first argument at sys_exit). Auto mode falls back without
    // failing, so a boundary program the verifier refuses shows only here.
    let want = if trampolines { Boundaries::Fentry } else { Boundaries::RawTracepoints };
    check(r.meta.mode.boundaries == want, format!("boundaries {:?} (want {want:?})", r.meta.mode.boundaries));
    check(
        r.meta.kernel.machine == run.arch.machine_name(),
        format!("the guest's machine is {:?} (want {:?})", r.meta.kernel.machine, run.arch.machine_name()),
    );
    check(calls("do_open_execat") >= 0.99, format!("do_open_execat runs in every failed attempt ({:.2}/attempt)", calls("do_open_execat")));
    // 6.8 moved the open before the mm set-up and the argument copying.
    let before_68 = version.as_slice() < [6, 8].as_slice();
    if before_68 {
        check(calls("mm_alloc") >= 0.99, format!("failed attempts set up an mm before 6.8 (mm_alloc {:.2}/attempt)", calls("mm_alloc")));
        check(
            calls("copy_strings") >= 0.99,
            format!("failed attempts copy arguments before 6.8 (copy_strings {:.2}/attempt)", calls("copy_strings")),
        );
        check((0.5..2.0).contains(&faults), format!("about one fault per failed attempt before 6.8 (got {faults:.2})"));
    } else {
        check(calls("mm_alloc") == 0.0, format!("no mm set-up in failed attempts since 6.8 (mm_alloc {:.2}/attempt)", calls("mm_alloc")));
        check(
            calls("copy_strings") == 0.0,
            format!("no argument copying in failed attempts since 6.8 (copy_strings {:.2}/attempt)", calls("copy_strings")),
        );
        check(faults < 0.1, format!("no fault in failed attempts since 6.8 (got {faults:.2})"));
    }
    // Large phases (a fifth or more of a successful exec's exec-phase samples): the exact share
    // must fall within the sampled 95% interval widened by 5 points. The widening is the
    // systematic part, measured here over repeated runs: a probe's own cost lands in its
    // caller's self time, which TCG inflates (run to run the 95% intervals alone missed by up
    // to 2 points). It still catches a phase misattributed by a large margin. The report's
    // "Exact vs sampled" table shows every phase.
    //
    // Printed, not asserted, on arm64 before 6.4 (no trampolines: every function a kprobe):
    // arm64's cpu-clock samples are ordinary IRQs (no pseudo-NMI in Debian's kernels) and
    // arm64 has no kprobes on ftrace, so every probe hit is a BRK and a single-step exception
    // with interrupts masked, which the exact times include and the samples cannot see where
    // it happens. There old_mm's exact share stays below its sampled one: at 200 steps
    // 0.165 against [0.181, 0.290] in one run (its sampled share 0.235 made it a large phase),
    // inside in another (sampled below 0.2); new_image agreed in both. 6.12 (fentry on 18 of
    // 26) agreed in both 200-step runs; a 20-step run missed by 0.3 points.
    //
    // Printed, not asserted, either, for a phase holding a function timed by a kprobe, for the
    // same reason: its hit's trap and return land in that phase's exact time. On 5.10 (x86_64)
    // load_elf_binary and load_elf_phdrs are kprobes (no trampolines on struct arguments
    // before 6.1), and in one CI run binfmt's exact share was 0.328 against [0.155, 0.313].
    let kprobed: Vec<&str> = functions.iter().filter(|f| f.mechanism == Mechanism::Kprobe).map(|f| f.function.as_str()).collect();
    let kprobed_phases: Vec<&str> = r
        .analysis
        .exact
        .as_ref()
        .and_then(|e| e.outcomes.iter().find(|o| o.outcome == Outcome::Success))
        .map_or(&[][..], |o| o.functions.as_slice())
        .iter()
        .filter(|f| kprobed.contains(&f.function.as_str()))
        .filter_map(|f| f.phase.as_deref())
        .collect();
    let agreement = r.analysis.agreement.iter().find(|a| a.outcome == Outcome::Success);
    let mut large = 0;
    for p in agreement.map_or(&[][..], |a| a.phases.as_slice()) {
        if p.sampled_share < 0.2 {
            continue;
        }
        large += 1;
        let (lo, hi) = (p.sampled_low - 0.05, p.sampled_high + 0.05);
        let what = format!("{:?} share: exact {:.3} within the sampled 95% interval ±0.05 [{lo:.3}, {hi:.3}]", p.phase, p.exact_share);
        let ok = (lo..=hi).contains(&p.exact_share);
        let asserted = (run.arch == Arch::X86_64 || trampolines) && !kprobed_phases.contains(&p.phase.as_str());
        if asserted {
            check(ok, what);
        } else if !ok {
            eprintln!("xtask: guest {} ({}): not asserted (kprobes in the phase): {what}", run.kernel, run.package);
        }
    }
    check(large > 0, "no large phase to compare exact and sampled shares on".into());
    // The agent, counting an untraced chain with every process in scope.
    let a = &run.agent;
    check(a.rc == Some(0), format!("the agent exited with {:?} (want 0)", a.rc));
    // Without trampolines the agent's auto boundaries are the per-syscall events (no program
    // runs for other syscalls), where `run` takes the raw tracepoints.
    let want = if trampolines { Boundaries::Fentry } else { Boundaries::SyscallEvents };
    check(a.boundaries == want, format!("the agent's boundaries {:?} (want {want:?})", a.boundaries));
    check(a.complete, "the agent's figures are complete".into());
    let agent_steps = u64::from(AGENT_STEPS);
    let (enoent, success) = (a.chain_calls(Outcome::Enoent), a.chain_calls(Outcome::Success));
    check(
        enoent == agent_steps * misses,
        format!("the agent counted {enoent} ENOENT attempts of the chain (want {})", agent_steps * misses),
    );
    check(success == agent_steps, format!("the agent counted {success} successful execs of the chain (want {agent_steps})"));
    failed
}

/// Exact calls per attempt of `function` in `outcome`'s attempts (0 when it never ran).
pub(crate) fn exact_calls(r: &RunReport, outcome: Outcome, function: &str) -> f64 {
    r.analysis
        .exact
        .as_ref()
        .and_then(|e| e.outcomes.iter().find(|o| o.outcome == outcome))
        .and_then(|o| o.functions.iter().find(|f| f.function == function))
        .map_or(0.0, |f| f.calls_per_attempt)
}

/// The diff's line for one function's inclusive time in one outcome, from one source.
pub(crate) fn inclusive_line<'a>(d: &'a Diff, outcome: Outcome, source: &str, function: &str) -> Option<&'a LineChange> {
    d.lines.iter().find(|l| l.outcome == outcome && l.source == source && l.kind == LineKind::FunctionInclusive && l.name == function)
}

/// `execprof diff A B --json`, read back as execprof's own type; the text goes to `text`.
pub(crate) fn execprof_diff(execprof: &Path, a: &Path, b: &Path, json: &Path, text: &Path) -> Result<(Diff, String)> {
    run_diff(Command::new(execprof).arg("diff").arg(a).arg(b).arg("--json").arg(json), json, text)
}

/// Runs an `execprof diff … --json JSON` command: its text goes to `text`, its JSON is read
/// back as execprof's own type.
pub(crate) fn run_diff(cmd: &mut Command, json: &Path, text: &Path) -> Result<(Diff, String)> {
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(text, &printed)?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let diff =
        serde_json::from_str(&std::fs::read_to_string(json)?).with_context(|| format!("{} is not execprof's diff", json.display()))?;
    Ok((diff, printed))
}

/// The 6.8 reordering seen by `execprof diff` of the two guests' recordings: 6.1's failed
/// lookups set up an mm and copied the arguments, 6.12's do not. Prints the diff (kept in
/// target/vm/diff-6.1-6.12.{txt,json}, arm64's in diff-arm64-6.1-6.12.*) and returns the
/// checks that failed.
pub fn reordering_diff(execprof: &Path, old: &GuestRun, new: &GuestRun) -> Result<Vec<String>> {
    let name = match old.arch {
        Arch::X86_64 => format!("diff-{}-{}", old.kernel, new.kernel),
        arch => format!("diff-{}-{}-{}", arch.debian(), old.kernel, new.kernel),
    };
    let (d, text) = execprof_diff(
        execprof,
        &old.recording,
        &new.recording,
        &cache_dir().join(format!("{name}.json")),
        &cache_dir().join(format!("{name}.txt")),
    )
    .context("execprof diff of the guest recordings")?;
    eprintln!("xtask: execprof diff {} {}:\n{text}", old.kernel, new.kernel);
    let mut failed = Vec::new();
    // These two lines are the hypotheses named before the guests ran, so each is tested on its
    // own at 5% split over the two (Bonferroni), not among the diff's hundreds of lines: its
    // `significant` (Holm over every line) answers a question nobody asked in advance, and a
    // noisy guest (one attempt's mm_alloc stretched by the host) can leave a real drop
    // unflagged there (p = 8.5e-5 over 1,103 lines, seen in CI).
    const ALPHA_EACH: f64 = 0.05 / 2.0;
    for f in ["mm_alloc", "copy_strings"] {
        let line = inclusive_line(&d, Outcome::Enoent, "exact", f);
        let ok = line.is_some_and(|l| {
            l.a.value > 0.0
                && l.b.value == 0.0
                && l.change.interval().is_some_and(|i| i.high < 0.0)
                && l.p_value.is_some_and(|p| p < ALPHA_EACH)
        });
        if !ok {
            failed.push(format!(
                "diff {} → {}: {f} in failed attempts should drop to 0, significantly (p < {ALPHA_EACH}; line: {})",
                old.kernel,
                new.kernel,
                line.map_or("missing".into(), |l| format!("{l:?}"))
            ));
        }
    }
    Ok(failed)
}

/// The first oops line and the panic line of a guest's console, when its kernel crashed: so a
/// crash reads as one (a suite's binaries would only seem not to have finished).
/// An oops the kernel survived (no panic: a BUG or an oops in a process's context kills
/// only that process): its `BUG`/`Oops` and `RIP` lines, joined; None without one.
pub fn kernel_oops(console: &str) -> Option<String> {
    let lines: Vec<&str> = console
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("Oops: ") || l.contains("kernel BUG at") || l.contains("BUG: ") || l.contains("RIP: 0010:"))
        .take(4)
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

pub fn kernel_crash(console: &str) -> Option<String> {
    // A printk timestamp (`[    1.234567] `) is cut off; nothing else: the lab's kernels print
    // none, and "Oops: … [#1] SMP NOPTI" holds a "] " of its own.
    let text = |l: &str| {
        let l = l.trim();
        let stamp = l.strip_prefix('[').and_then(|r| r.split_once("] ")).filter(|(t, _)| t.trim().parse::<f64>().is_ok());
        stamp.map_or(l, |(_, t)| t).trim().to_string()
    };
    let panic = console.lines().find(|l| l.contains("Kernel panic - not syncing"))?;
    let oops = console.lines().find(|l| l.contains("Oops: ") || l.contains("BUG: ")).map(text);
    let rip = console.lines().find(|l| l.contains("RIP: 0010:") || l.contains(" pc : ")).map(text);
    Some([oops, rip, Some(text(panic))].into_iter().flatten().collect::<Vec<_>>().join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_of_another_architecture_are_named_with_it() {
        assert_eq!(Arch::Arm64.package("busybox-static"), "busybox-static:arm64");
        assert_eq!(Arch::X86_64.package("busybox-static"), "busybox-static");
    }

    /// Debian's packages up to 6.x put the kernel in /boot and the modules in /lib/modules;
    /// 7.x's split packages both in /usr/lib/modules/VERSION.
    #[test]
    fn the_kernel_and_its_modules_are_found_in_either_layout() {
        let base = std::env::temp_dir().join(format!("execprof-xtask-layout-{}", std::process::id()));
        let old = base.join("old");
        std::fs::create_dir_all(old.join("root/boot")).unwrap();
        std::fs::create_dir_all(old.join("root/lib/modules/6.1.0-57-cloud-amd64/kernel")).unwrap();
        std::fs::write(old.join("root/boot/config-6.1.0-57-cloud-amd64"), "").unwrap();
        std::fs::write(old.join("root/boot/vmlinuz-6.1.0-57-cloud-amd64"), "").unwrap();
        assert_eq!(vmlinuz(&old).unwrap(), old.join("root/boot/vmlinuz-6.1.0-57-cloud-amd64"));
        assert_eq!(module_trees(&old.join("root")), [old.join("root/lib/modules/6.1.0-57-cloud-amd64")]);
        let split = base.join("split");
        let tree = split.join("root/usr/lib/modules/7.3.4+deb13-cloud-amd64");
        std::fs::create_dir_all(tree.join("kernel")).unwrap();
        std::fs::create_dir_all(split.join("root/usr/share/doc")).unwrap();
        std::fs::write(tree.join("vmlinuz"), "").unwrap();
        assert_eq!(vmlinuz(&split).unwrap(), tree.join("vmlinuz"));
        assert_eq!(module_trees(&split.join("root")), [tree]);
        let e = vmlinuz(&base).unwrap_err().to_string();
        assert!(e.contains("remove that directory to fetch it again"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn each_architecture_boots_with_its_own_console_and_machine() {
        assert_eq!((Arch::X86_64.console(), Arch::X86_64.qemu()), ("ttyS0", "qemu-system-x86_64"));
        assert_eq!((Arch::Arm64.console(), Arch::Arm64.qemu()), ("ttyAMA0", "qemu-system-aarch64"));
        assert!(Arch::X86_64.machine().is_empty());
        assert_eq!(Arch::Arm64.machine(), ["-M", "virt"]);
        assert_eq!((Arch::X86_64.cpu(), Arch::Arm64.cpu()), ("max", "max,pauth-impdef=on"));
        assert_eq!((Arch::X86_64.objcopy(), Arch::Arm64.objcopy()), ("objcopy", "aarch64-linux-gnu-objcopy"));
    }

    #[test]
    fn guests_of_another_architecture_are_named_with_it() {
        assert_eq!(Arch::X86_64.guest_name("6.1"), "6.1");
        assert_eq!(Arch::Arm64.guest_name("6.12"), "arm64 6.12");
    }

    #[test]
    fn a_panicked_guest_names_its_oops_and_where() {
        let console = "[  559.206602] traps: PANIC: double fault, error_code: 0x0\n\
            [  559.209891] Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI\n\
            [  559.211499] RIP: 0010:kmem_cache_alloc_noprof+0xc3/0x2f0\n\
            [  559.214327] RIP: 0033:0x201fd1\n\
            [  559.215126] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert_eq!(
            kernel_crash(console).as_deref(),
            Some(
                "Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI; RIP: 0010:kmem_cache_alloc_noprof+0xc3/0x2f0; Kernel panic - not syncing: Fatal exception in interrupt"
            )
        );
    }

    #[test]
    fn a_console_without_timestamps_keeps_the_whole_oops_line() {
        // The lab's kernels print no timestamps: the oops line's own "] " is not one.
        let console = "kernel BUG at fs/exec.c:2218!\n\
            Oops: invalid opcode: 0000 [#1] SMP NOPTI\n\
            RIP: 0010:init_fs_exec_sysctls+0x28/0x30\n\
            Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n";
        assert_eq!(
            kernel_crash(console).as_deref(),
            Some(
                "Oops: invalid opcode: 0000 [#1] SMP NOPTI; RIP: 0010:init_fs_exec_sysctls+0x28/0x30; Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b"
            )
        );
    }

    #[test]
    fn a_console_without_a_panic_is_no_crash() {
        assert_eq!(kernel_crash("[    1.0] Run /init as init process\nexecprof-suite: done\n"), None);
    }
}
