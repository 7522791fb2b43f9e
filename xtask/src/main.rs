//! What cargo cannot do alone: install the eBPF toolchain, and run the whole test suite
//! (unprivileged and root BPF tests) the way CI does.
//!
//! Every step checks before it acts, so a second run on a ready machine does nothing and
//! takes well under a second.
use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use setup::{Needs, setup};

mod arch;
mod cpio;
mod deb;
mod debian;
mod dist;
mod guest;
mod image;
mod kernel;
mod kube;
mod lab;
mod local_http;
mod monitoring;
mod overhead;
mod rpm;
mod setup;
mod suite;
mod support;
mod unpacked;
mod userland;
mod vm;

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing execprof need (apt packages, rustup toolchain link,
    /// bpf-linker), removing nothing.
    Setup,
    /// Check formatting, clippy (-D warnings) and the API docs (`cargo doc`, -D warnings); no
    /// root needed once `cargo xtask setup` has run.
    Lint,
    /// Set up, build, and run execprof on its built-in exec-chain workload.
    Run {
        /// Arguments passed to `execprof run`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Set up, check formatting and clippy, build, and run every test as root here, then the
    /// whole suite inside stock Debian kernels under QEMU (x86_64 5.10, 6.1 and the newest;
    /// arm64's newest), the kernel-dependent tests on 6.12 and 6.18, the exact-mode checks,
    /// `doctor` and the agent on every guest kernel line of both architectures, and the lab on
    /// the newest linux-source's kernel/patches/ (the kernels built once and cached).
    Ci,
    /// Build the Debian packages `execprof_VERSION_amd64.deb` and `_arm64.deb` under
    /// target/debian/ (the arm64 one from the cross-build).
    Deb {
        /// Only this architecture's package.
        #[arg(long, value_enum)]
        arch: Option<vm::Arch>,
    },
    /// Build the portable binaries (glibc 2.17 on, linked by Zig) and pack each with its man
    /// pages, completions, unit and checksums: target/dist/execprof-VERSION-ARCH-linux.tar.gz.
    Dist {
        /// Only this architecture's tarball.
        #[arg(long, value_enum, conflicts_with = "check")]
        arch: Option<vm::Arch>,
        /// Also check them as CI does: each binary's glibc floor, each tarball's contents and
        /// checksums, and the x86_64 binary run in a Debian 11 userland (debootstrap, cached).
        #[arg(long)]
        check: bool,
    },
    /// Build the RPMs for the RHEL family (x86_64 and aarch64; the portable builds):
    /// target/rpm/execprof-VERSION-1.ARCH.rpm.
    Rpm {
        /// Only this architecture's package.
        #[arg(long, value_enum, conflicts_with = "check")]
        arch: Option<vm::Arch>,
        /// Also check them as CI does: rpmlint, the glibc floor of their requirements, and the
        /// x86_64 one installed into a scratch root, verified, run and removed.
        #[arg(long)]
        check: bool,
    },
    /// Build the agent's OCI image for amd64 and arm64 from scratch (the portable builds and
    /// the glibc files they link, from Debian's libc6): target/image/execprof-VERSION.oci.tar.
    Image {
        /// Also check it as CI does: the index's platforms, and real podman running the agent
        /// from it, counting the known execs of two other containers exactly.
        #[arg(long)]
        check: bool,
    },
    /// Run the whole test suite (root tests included) inside stock Debian kernels under QEMU.
    VmSuite {
        /// Only this guest kernel: 5.10, 6.1, 6.12, 6.18, or newest (the newest stable line
        /// in trixie-backports or sid, also accepted by its number, e.g. 7.3). Without it,
        /// 6.1 and 6.12.
        #[arg(long)]
        kernel: Option<String>,
        /// The guests' architecture: x86_64 (this machine's userland), or arm64 (the tests
        /// cross-built for aarch64, in a userland of Debian's arm64 packages, under
        /// qemu-system-aarch64 -M virt, TCG).
        #[arg(long, value_enum, default_value_t = vm::Arch::X86_64)]
        arch: vm::Arch,
        /// Only the tests whose names contain this (as `cargo test FILTER`); several filters
        /// separated by spaces run the tests that match any of them.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Run execprof's exact-mode check inside stock Debian kernels under QEMU (TCG).
    VmTest {
        /// Only this guest kernel: 5.10, 6.1, 6.12, 6.18, or newest (the newest stable line
        /// in trixie-backports or sid, also accepted by its number, e.g. 7.3). Without it,
        /// 6.1 and 6.12, and the diff of their recordings.
        #[arg(long)]
        kernel: Option<String>,
        /// Chain steps inside the guest.
        #[arg(long, default_value_t = 200)]
        steps: u32,
        /// The guests' architecture: x86_64 (this machine's), or arm64 (execprof cross-built
        /// for aarch64, Debian's arm64 cloud kernels under qemu-system-aarch64 -M virt, TCG).
        #[arg(long, value_enum, default_value_t = vm::Arch::X86_64)]
        arch: vm::Arch,
        /// The guest's time limit, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Write docs/support.md's table from the rows `vm-test` kept in target/vm/support/ (one
    /// per guest that passed its checks); `cargo xtask ci` checks it against its own guests.
    SupportTable,
    /// The lab for any exec-path patch: build (once each, cached) the base kernel (Debian's
    /// newest linux-source, --linux-source LINE, or --kernel-src) and one kernel per patch, boot each under QEMU with
    /// -icount shift=0 (time = instructions) in alternating rounds running the same workload,
    /// and `execprof diff` every patched kernel against the base over the rounds: per outcome,
    /// phase and function. Results (recordings, diffs, kernels' configs) in --out.
    Lab {
        /// A patch to measure (`patch -p1` at the top of the kernel tree, applied exactly, on
        /// its own); repeat for several. kernel/patches/LINE/ has examples with known answers.
        #[arg(long = "patch", value_name = "FILE", required = true)]
        patches: Vec<PathBuf>,
        /// The workload every boot runs (or a command of your own after `--`, run in the
        /// guest's busybox userland).
        #[arg(long, value_enum, default_value_t = lab::WorkloadKind::Chain)]
        workload: lab::WorkloadKind,
        /// Chain steps per pass (spawns per method for spawn).
        #[arg(long, default_value_t = LAB_STEPS)]
        steps: u32,
        /// Rounds: every kernel boots once per round, alternating; the diff tests changes
        /// between the rounds (the boot is the unit of replication).
        #[arg(long, default_value_t = LAB_REPEAT)]
        repeat: u32,
        /// The sampled pass's rate (Hz).
        #[arg(long, default_value_t = lab::SAMPLE_HZ)]
        sample_hz: u32,
        /// Debian's linux-source line of the base: newest (the newest stable line in
        /// trixie-backports or sid, 7.3 today) or a line such as 6.12.
        #[arg(long, value_name = "LINE", default_value = "newest", conflicts_with = "kernel_src")]
        linux_source: String,
        /// A kernel source tree of your own as the base (copied, never changed; its .config, if
        /// it has one, gets the lab's options merged in and every change is listed).
        #[arg(long, value_name = "DIR")]
        kernel_src: Option<PathBuf>,
        /// The results directory (emptied first).
        #[arg(long, value_name = "DIR", default_value = "target/lab")]
        out: PathBuf,
        /// Only build the kernels.
        #[arg(long)]
        build_only: bool,
        /// --workload spawn: a spawn method (fork-exec, vfork-exec, posix-spawn, clone-vm-exec;
        /// repeat; all by default).
        #[arg(long, value_name = "METHOD")]
        spawn_method: Vec<String>,
        /// --workload spawn: the parent's memory (e.g. 64M, 1G).
        #[arg(long, value_name = "BYTES")]
        spawn_mem: Option<String>,
        /// --workload spawn: touch the parent's memory.
        #[arg(long)]
        spawn_dirty: bool,
        /// --workload spawn: map it as alternating read-only/read-write pages.
        #[arg(long)]
        spawn_fragment: bool,
        /// A command of your own as the workload (after `--`), instead of --workload.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// What watching costs, in instructions: the chain untraced and under execprof, and an
    /// untraced getpid loop beside it, inside the lab kernel under QEMU -icount shift=0.
    Overhead {
        /// Chain steps per run.
        #[arg(long, default_value_t = 300)]
        steps: u32,
        /// Rounds (each side once per round, the order rotating).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// getpid calls per loop.
        #[arg(long, default_value_t = 100_000)]
        getpid_calls: u32,
        /// Failed execve calls per loop.
        #[arg(long, default_value_t = 5_000)]
        enoent_calls: u32,
        /// Run only these sides (comma-separated tags, as in benches/README.md: e.g.
        /// `agent,enoent-agent,budget-agent`), beside the untraced ones; all by default.
        #[arg(long, value_delimiter = ',', value_name = "TAGS")]
        only: Vec<String>,
    },
}

/// Chain steps of the arm64 exact-mode checks in `cargo xtask ci`.
const ARM64_CHECK_STEPS: u32 = 600;

/// The lab's size, as `cargo xtask ci` runs it: chain steps per pass, rounds.
const LAB_STEPS: u32 = 300;
const LAB_REPEAT: u32 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup(Needs::Test),
        Task::Lint => setup(Needs::Build).and_then(|()| lint()),
        Task::Run { args } => setup(Needs::Build).and_then(|()| run_builtin(&args)),
        Task::Ci => setup(Needs::Test).and_then(|()| ci()),
        Task::Deb { arch } => setup(Needs::Package).and_then(|()| {
            let arches = arch.map_or(vec![vm::Arch::X86_64, vm::Arch::Arm64], |a| vec![a]);
            // The portable builds: the package installs on older Debian and Ubuntu too.
            arches.into_iter().try_for_each(|a| dist::portable_and_host(a).and_then(|(exe, host)| deb::pack(a, &exe, &host)).map(drop))
        }),
        Task::Dist { arch, check } => setup(if check { Needs::Test } else { Needs::Package }).and_then(|()| {
            if check {
                let (x86, arm64) = (dist::portable_binary(vm::Arch::X86_64)?, dist::portable_binary(vm::Arch::Arm64)?);
                dist::ci_checks(&x86, &arm64)
            } else {
                dist::dist(&arch.map_or(vec![vm::Arch::X86_64, vm::Arch::Arm64], |a| vec![a]))
            }
        }),
        Task::Rpm { arch, check } => setup(Needs::Test).and_then(|()| {
            if check {
                rpm::ci_checks(&dist::portable_binary(vm::Arch::X86_64)?, &dist::portable_binary(vm::Arch::Arm64)?)
            } else {
                arch.map_or(vec![vm::Arch::X86_64, vm::Arch::Arm64], |a| vec![a]).into_iter().try_for_each(|a| rpm::build(a).map(drop))
            }
        }),
        Task::Image { check } => setup(Needs::Test).and_then(|()| {
            let (x86, arm64) = (dist::portable_binary(vm::Arch::X86_64)?, dist::portable_binary(vm::Arch::Arm64)?);
            if check {
                image::ci_checks(&x86, &arm64)
            } else {
                image::build(&[(vm::Arch::X86_64, x86), (vm::Arch::Arm64, arm64)]).map(drop)
            }
        }),
        Task::VmSuite { kernel, arch, filter } => setup(Needs::Test).and_then(|()| vm_suite(arch, kernel.as_deref(), filter.as_deref())),
        Task::VmTest { kernel, steps, arch, timeout } => setup(Needs::Test).and_then(|()| vm_test(arch, kernel.as_deref(), steps, timeout)),
        Task::SupportTable => support::saved().and_then(|rows| {
            let changed = support::write(Path::new("."), &rows)?;
            println!("{}: {} guests' rows, {}", support::PAGE, rows.len(), if changed { "rewritten" } else { "unchanged" });
            Ok(())
        }),
        Task::Lab {
            patches,
            workload,
            steps,
            repeat,
            sample_hz,
            linux_source,
            kernel_src,
            out,
            build_only,
            spawn_method,
            spawn_mem,
            spawn_dirty,
            spawn_fragment,
            command,
        } => lab_workload(
            workload,
            command,
            lab::SpawnShape { methods: spawn_method, mem: spawn_mem, dirty: spawn_dirty, fragment: spawn_fragment },
        )
        .and_then(|workload| {
            setup(Needs::Test)?;
            lab::lab(&lab::LabArgs { patches, workload, steps, repeat, sample_hz, linux_source, kernel_src, out, build_only })
        }),
        Task::Overhead { steps, rounds, getpid_calls, enoent_calls, only } => {
            setup(Needs::Test).and_then(|()| overhead::overhead(overhead::Sizes { steps, rounds, getpid_calls, enoent_calls }, &only))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The lab's workload from its options: a command after `--` or a built-in one; the spawn
/// options only with `--workload spawn`.
fn lab_workload(kind: lab::WorkloadKind, command: Vec<String>, spawn: lab::SpawnShape) -> Result<lab::Workload> {
    let spawn_given = !spawn.methods.is_empty() || spawn.mem.is_some() || spawn.dirty || spawn.fragment;
    if spawn_given && kind != lab::WorkloadKind::Spawn {
        bail!("--spawn-method, --spawn-mem, --spawn-dirty and --spawn-fragment shape `--workload spawn`; add it, or drop them");
    }
    if !command.is_empty() {
        if kind != lab::WorkloadKind::Chain {
            bail!("give either --workload or a command after `--`, not both");
        }
        return Ok(lab::Workload::Command(command));
    }
    Ok(lab::Workload::Builtin(kind, spawn))
}

fn run_builtin(args: &[String]) -> Result<()> {
    run(Command::new("cargo").args(["build", "--release", "--package", "profiler"]))?;
    let exe = "target/release/execprof";
    if !is_root() {
        bail!("tracing needs root: run `sudo {exe} run` (the build is done)");
    }
    run(Command::new(exe).arg("run").args(args))
}

fn ci() -> Result<()> {
    if !is_root() {
        bail!(
            "the test suite traces with BPF and needs root: run `sudo cargo xtask ci` (plain `cargo test` runs the unprivileged tests and lists the rest as ignored)"
        );
    }
    // Hygiene gates first: they are cheap and say exactly what to fix.
    lint()?;
    // One x86_64 build serves the host's tests, the packages, the tarballs and the guests: the
    // portable one, which ships.
    dist::portable_binary(vm::Arch::X86_64)?;
    // The lab's kernels (its refusals checked first) build at the lowest priority beside the
    // host's tests and the guests' preparation, on the CPU those leave idle (the root tests run
    // one at a time, mostly waiting on their workloads): about 14 minutes of builds on a fresh
    // machine, nothing once cached. Both sides run to their end; each failure is reported.
    let (host, lab) = std::thread::scope(|s| {
        let lab = s.spawn(|| {
            kernel::build_in_background();
            lab::ci_prepare()
        });
        let host = host_tests().and_then(|()| ci_guests_prepare());
        (host, lab.join().unwrap_or_else(|_| Err(anyhow!("the lab's build thread panicked"))))
    });
    match (host, lab) {
        (Ok(prepared), Ok(())) => ci_guests(prepared),
        (host, lab) => {
            let failed: Vec<String> = [host.err(), lab.err().map(|e| e.context("the lab's refusals and kernels"))]
                .into_iter()
                .flatten()
                .map(|e| format!("{e:#}"))
                .collect();
            bail!("{}", failed.join("\n"))
        }
    }
}

/// The host's tests: every test binary, the root tests included, of the portable build (the
/// same binaries the x86_64 guests run).
fn host_tests() -> Result<()> {
    // One test thread: the root tests trace real workloads and time nothing, but two chains
    // competing for two cores make their runs slow for no gain.
    run(dist::zigbuild(vm::Arch::X86_64, "test")?.args(["--", "--include-ignored", "--test-threads=1"]))
}

/// Formatting, clippy and the API docs, each with what to do when it fails.
fn lint() -> Result<()> {
    run(Command::new("cargo").args(["fmt", "--all", "--check"]))
        .context("cargo fmt --check found unformatted code: run `cargo fmt --all` and commit")?;
    run(Command::new("cargo").args(["clippy", "--release", "--all-targets", "--", "-D", "warnings"]))
        .context("clippy found warnings: fix them (or allow one with a reason) and commit")?;
    // The library without the tracer: the pure pipeline xtask reads runs with.
    run(Command::new("cargo").args(["clippy", "--release", "-p", "profiler", "--no-default-features", "--lib", "--", "-D", "warnings"]))
        .context("clippy found warnings in the library built without the tracer feature: fix them and commit")?;
    // The eBPF crate is documented by its own build (bpfel target), not here.
    run(Command::new("cargo").env("RUSTDOCFLAGS", "-D warnings").args([
        "doc",
        "--release",
        "--no-deps",
        "--workspace",
        "--exclude",
        "profiler-ebpf",
    ]))
    .context("cargo doc found broken or private links: fix the doc comments it names and commit")
}

/// How long one guest may take to run the whole suite.
const SUITE_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// The whole test suite inside each guest kernel of `arch` (see `suite.rs`), side by side.
fn vm_suite(arch: vm::Arch, only: Option<&str>, filter: Option<&str>) -> Result<()> {
    // The kernels are resolved (a label that names none refused) before anything is built.
    let kernels = debian::guests(arch, only)?;
    let (bins, execprof) = suite::test_binaries(arch)?;
    let prepared = kernels.iter().map(|k| suite::prepare_guest(arch, k, (&bins, &execprof), filter)).collect::<Result<Vec<_>>>()?;
    // Each TCG guest runs on one vCPU: the two kernels' suites side by side, one per core.
    let runs: Vec<Result<suite::SuiteRun>> = std::thread::scope(|s| {
        let handles: Vec<_> = prepared.into_iter().map(|p| s.spawn(move || suite::boot_suite(p, SUITE_TIMEOUT))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a guest's thread panicked")))).collect()
    });
    let failures = suite_failures(runs);
    if !failures.is_empty() {
        bail!("the test suite failed inside a guest kernel:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// Prints each guest's summary line and returns what failed (a guest that could not run, too).
fn suite_failures(runs: impl IntoIterator<Item = Result<suite::SuiteRun>>) -> Vec<String> {
    let mut failures = Vec::new();
    for r in runs {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{e:#}"));
                continue;
            }
        };
        let failed = r.failures();
        if let Some(crash) = &r.survived_crash {
            println!(
                "vm-suite: {}: WARNING: the guest's kernel crashed: {crash}; a second boot ran the binaries that had not finished",
                r.kernel
            );
        }
        println!(
            "vm-suite: {}: {} of {} test binaries passed (console: {}; each binary's output: {})",
            r.kernel,
            r.results.iter().filter(|b| b.rc == Some(0)).count(),
            r.results.len(),
            r.console.display(),
            r.logs.display()
        );
        println!("vm-suite: {}: seconds per test binary: {}", r.kernel, r.durations());
        println!("vm-suite: {}: slowest tests (seconds): {}", r.kernel, r.slowest(8));
        failures.extend(failed);
    }
    failures
}

/// What the guests' jobs run: each architecture's test binaries and the execprof it traces with
/// (arm64's from its Debian package).
struct GuestsPrepared {
    x86: Vec<suite::TestBinary>,
    x86_execprof: PathBuf,
    arm64: Vec<suite::TestBinary>,
    arm64_execprof: PathBuf,
}

/// Builds the x86_64 and the arm64 test binaries (one build after another: each uses both
/// cores) and checks both Debian packages made from them.
fn ci_guests_prepare() -> Result<GuestsPrepared> {
    use vm::Arch::{Arm64, X86_64};
    let (x86, x86_execprof) = suite::test_binaries(X86_64)?;
    let (arm64, arm64_execprof) = suite::test_binaries(Arm64)?;
    // The support table is made from this run's guests only.
    match std::fs::remove_dir_all(support::rows_dir()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    // The portable builds: their glibc floor, the tarballs, the x86_64 one run in Debian 11's
    // userland; both RPMs, the x86_64 one installed into a scratch root; the OCI image, its
    // agent run by podman counting other containers. Then both Debian packages, from these
    // builds: lintian, the amd64 one installed, used and purged here; the arm64 guest's suite
    // runs the arm64 package's own binary.
    dist::ci_checks(&x86_execprof, &arm64_execprof)?;
    rpm::ci_checks(&x86_execprof, &arm64_execprof)?;
    image::ci_checks(&x86_execprof, &arm64_execprof)?;
    let arm64_execprof = deb::ci_checks(&x86_execprof, &arm64_execprof)?;
    Ok(GuestsPrepared { x86, x86_execprof, arm64, arm64_execprof })
}

/// The guests' part of `cargo xtask ci`, once [`ci_guests_prepare`] built the test binaries
/// and `lab::ci_prepare` the lab's kernels (after its refusals are checked: a patch that does
/// not apply, one that does not build). Then two
/// workers, one TCG guest per core, take the guests' jobs from one queue, longest first, each
/// the next job when it finishes its own (so neither core idles while the other has two jobs
/// left): the whole suite on the newest line (arm64 and x86_64), on x86_64 6.1 and 5.10, the
/// kernel-dependent tests ([`suite::KERNEL_DEPENDENT`]) on x86_64 6.12 and 6.18, the lab on
/// the newest linux-source's kernel/patches/ ([`lab::CI_LINE`]), and vm-test (the exact-mode checks, `doctor`
/// and the agent) on every guest kernel line of both architectures.
///
/// The 6.12 suites and arm64 6.1's are left to `cargo xtask vm-suite` (each would add about 10
/// minutes to a cold run, which must stay under 75). Every job runs to its end, and every
/// failure is reported; each job's minutes are printed.
fn ci_guests(prepared: GuestsPrepared) -> Result<()> {
    use vm::Arch::{Arm64, X86_64};
    let GuestsPrepared { x86, x86_execprof, arm64, arm64_execprof } = prepared;
    type Job = Box<dyn FnOnce() -> Vec<String> + Send>;
    let suite_job = |p: suite::PreparedSuite| -> Job { Box::new(move || suite_failures([suite::boot_suite(p, SUITE_TIMEOUT)])) };
    let check_job = |f: fn() -> Result<()>| -> Job { Box::new(move || f().err().map(|e| format!("{e:#}")).into_iter().collect()) };
    let jobs: Vec<(&str, Job)> = vec![
        // The newest stable line Debian ships, whole, on both architectures (resolved at run
        // time: 7.3 today): its exec path was rewritten since 6.12, and it runs tracepoint
        // programs preemptible.
        ("arm64 newest suite", suite_job(suite::prepare_suite(Arm64, debian::NEWEST, (&arm64, &arm64_execprof), None)?)),
        ("x86_64 newest suite", suite_job(suite::prepare_suite(X86_64, debian::NEWEST, (&x86, &x86_execprof), None)?)),
        // Debian 12's own kernel, whole: what the README promises a fresh Debian 12 machine.
        ("x86_64 6.1 suite", suite_job(suite::prepare_suite(X86_64, "6.1", (&x86, &x86_execprof), None)?)),
        // The oldest line Debian ships, whole (about 8 minutes): it lacks most of what the
        // object would use (atomics with fetch, typed tasks, the ancestor-cgroup helper,
        // sched_prepare_exec, fentry on by-value arguments).
        ("x86_64 5.10 suite", suite_job(suite::prepare_suite(X86_64, "5.10", (&x86, &x86_execprof), None)?)),
        // The lines between, on the tests whose answers depend on the kernel beyond what
        // vm-test checks: a 32-bit program's execs, AT_EXECVE_CHECK (6.14+: skipped, saying so,
        // on 6.12), the chain's exact counts.
        (
            "x86_64 6.12 kernel-dependent tests",
            suite_job(suite::prepare_suite(X86_64, "6.12", (&x86, &x86_execprof), Some(suite::KERNEL_DEPENDENT))?),
        ),
        (
            "x86_64 6.18 kernel-dependent tests",
            suite_job(suite::prepare_suite(X86_64, "6.18", (&x86, &x86_execprof), Some(suite::KERNEL_DEPENDENT))?),
        ),
        ("lab: kernel/patches", check_job(lab::ci_run)),
        // Debian's arm64 kernels, the cross-built execprof inside (~3 minutes). 600 steps:
        // under TCG, 6.1's kprobes (BRK exceptions) give failed attempts a tail of
        // millisecond outliers, and at 200 steps copy_strings' drop to 0 once fell short of
        // significance after Holm's correction (p = 6.5e-5).
        ("vm-test arm64", check_job(|| vm_test(Arm64, None, ARM64_CHECK_STEPS, 900))),
        ("vm-test x86_64", check_job(|| vm_test(X86_64, None, 200, 600))),
        // The newer lines Debian ships, about a minute each once cached.
        ("vm-test x86_64 5.10", check_job(|| vm_test(X86_64, Some("5.10"), 200, 600))),
        ("vm-test x86_64 6.18", check_job(|| vm_test(X86_64, Some("6.18"), 200, 600))),
        ("vm-test x86_64 newest", check_job(|| vm_test(X86_64, Some("newest"), 200, 600))),
        ("vm-test arm64 newest", check_job(|| vm_test(Arm64, Some("newest"), ARM64_CHECK_STEPS, 900))),
    ];
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let failures: Vec<String> = std::thread::scope(|s| {
        let worker = || {
            let mut failures = Vec::new();
            loop {
                // The lock is held only to take the next job.
                let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                let Some((name, job)) = next else { return failures };
                let started = std::time::Instant::now();
                let failed = job();
                println!(
                    "ci: {name}: {} in {:.1} min",
                    if failed.is_empty() { "passed" } else { "FAILED" },
                    started.elapsed().as_secs_f64() / 60.0
                );
                failures.extend(failed);
            }
        };
        let workers: Vec<_> = (0..2).map(|_| s.spawn(worker)).collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|_| vec!["a guest worker's thread panicked".to_owned()])).collect()
    });
    if !failures.is_empty() {
        bail!("the guests' checks failed:\n  {}", failures.join("\n  "));
    }
    // Every vm-test guest passed: the support table must be what they found.
    let rows = support::saved()?;
    print!("ci: the support table ({} guests):\n{}", rows.len(), support::render(&rows));
    if support::write(Path::new("."), &rows)? {
        bail!(
            "{} is not what the guests found (a kernel line changed, or what execprof does on one): \
             it is rewritten with their table; review it with `git diff {}` and commit it",
            support::PAGE,
            support::PAGE
        );
    }
    Ok(())
}

/// Boots each guest kernel, runs execprof's exact-mode chain in it, checks the known answers
/// (the 6.8 reordering: mm set-up and argument copying inside failed lookups on 6.1, not on
/// 6.12) and keeps the recordings under target/vm/.
fn vm_test(arch: vm::Arch, only: Option<&str>, steps: u32, timeout: u64) -> Result<()> {
    // The kernels are resolved (a label that names none refused) before anything is built.
    let kernels = debian::guests(arch, only)?;
    let exe = dist::portable_binary(arch)?.canonicalize()?;
    let opts = vm::VmOptions { steps, misses: 6, timeout: std::time::Duration::from_secs(timeout) };
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut guests = Vec::new();
    for k in &kernels {
        let (label, started) = (&k.label, std::time::Instant::now());
        let guest = vm::run_guest(arch, k, &exe, &opts)?;
        eprintln!("xtask: guest {label} report:\n{}", guest.text);
        let failed = vm::check_guest(&guest, &opts);
        if failed.is_empty() {
            support::save(&support::Row::of(&guest, (vm::AGENT_STEPS.into(), opts.misses.into())))?;
            println!("vm: {label} ({}) passed in {:.0} s", guest.package, started.elapsed().as_secs_f64());
            passed += 1;
        }
        failures.extend(failed);
        guests.push(guest);
    }
    // Both kernels: what the 6.8 reordering saved per failed attempt, by function.
    if let [old, new] = guests.as_slice() {
        // `execprof diff` of the recordings runs here, so it is the host's build.
        let host_exe = if arch == vm::Arch::X86_64 { exe.clone() } else { dist::portable_binary(vm::Arch::X86_64)?.canonicalize()? };
        failures.extend(vm::reordering_diff(&host_exe, old, new)?);
    }
    let kernels_failed = kernels.len() - passed;
    println!("vm-test: {passed} passed, {kernels_failed} failed");
    if !failures.is_empty() {
        bail!("guest checks failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

pub(crate) fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}
