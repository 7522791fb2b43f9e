//! `cargo xtask lab`: any exec-path patch, measured per outcome, phase and kernel function in
//! instructions. Builds the base kernel and one kernel per patch ([`crate::kernel`], cached),
//! boots each under QEMU with `-icount shift=0` in alternating rounds (base, patches, base,
//! …), runs the same workload in each boot (`xtask/guest/lab.sh`: an exact pass and a sampled
//! pass, each a recording), then `execprof diff` of every patched kernel against the base over
//! the rounds (`--round`: the boot is the unit of replication), and checks the known answers
//! of the patches execprof ships ([`known`]).
//!
//! Under `-icount shift=0` the guest's clock advances one nanosecond per instruction executed:
//! a time here is an instruction count, deterministic within a boot and free of the host's
//! noise, blind to caches and memory latency. Between boots a figure still moves (the
//! random-number batch refill, ~3,100 instructions, lands in whichever exec function draws at
//! that moment, which depends on the boot), so a change is tested over rounds, never within
//! one boot.
//!
//! Everything is kept in one directory (`--out`, target/lab by default): the recordings, the
//! guests' outputs and consoles, the diffs (text and JSON), the kernels' configs, hashes and
//! patches, and a README with the `execprof diff` commands that recompute every diff without
//! the guests.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use execprof::report::{RunReport, diff::Diff};

use crate::{
    debian,
    guest::{self, GuestEnv, ResultsDisk},
    kernel::{self, Kernel, Source, base_kernel, patched_dir, patched_kernel},
    vm::{Boot, boot, fetch_package, initramfs_base, kernel_crash, kernel_oops, run_diff},
};

pub(crate) mod known;

/// The sampling rate of the sampled pass, unless asked otherwise.
pub(crate) const SAMPLE_HZ: u32 = 4999;

/// The workloads the lab runs in every boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// The built-in chain (Linus's exec chain: 6 PATH misses, then the program, per step).
    Chain,
    /// The chain without misses: every exec by its path.
    Direct,
    /// The chain with 64 extra environment variables (the published runs).
    Env64,
    /// The chain in a child memory cgroup (the exec's allocations charged to it).
    Memcg,
    /// `execprof bench spawn` (the posix_spawn seed): spawn methods from a parent whose memory
    /// is shaped by `--spawn-*`.
    Spawn,
}

/// `bench spawn`'s options for `--workload spawn`.
#[derive(Clone, Debug, Default)]
pub struct SpawnShape {
    /// `--method` (each): fork-exec, vfork-exec, posix-spawn, clone-vm-exec; all when empty.
    pub methods: Vec<String>,
    /// `--mem`: the parent's memory, e.g. 64M.
    pub mem: Option<String>,
    /// `--dirty`.
    pub dirty: bool,
    /// `--fragment`.
    pub fragment: bool,
}

/// What every boot runs.
#[derive(Clone, Debug)]
pub enum Workload {
    /// One of the built-in ones.
    Builtin(WorkloadKind, SpawnShape),
    /// A command of the user's (after `--`), run in the guest's busybox userland.
    Command(Vec<String>),
}

/// `cargo xtask lab`'s arguments.
#[derive(Clone, Debug)]
pub struct LabArgs {
    /// The patches, each applied on its own to the base.
    pub patches: Vec<PathBuf>,
    pub workload: Workload,
    /// Chain steps (spawns per method for spawn) per pass.
    pub steps: u32,
    /// Rounds: every kernel boots once per round.
    pub repeat: u32,
    /// The sampled pass's rate.
    pub sample_hz: u32,
    /// Debian's `linux-source` line of the base: `newest` (the default) or a line such as 6.12.
    pub linux_source: String,
    /// A kernel tree of the user's own, instead of Debian's linux-source.
    pub kernel_src: Option<PathBuf>,
    /// The results directory.
    pub out: PathBuf,
    /// Stop after building the kernels.
    pub build_only: bool,
}

impl LabArgs {
    /// The lab's defaults for `patches` (as `cargo xtask ci` runs it).
    pub fn new(patches: Vec<PathBuf>) -> Self {
        LabArgs {
            patches,
            workload: Workload::Builtin(WorkloadKind::Chain, SpawnShape::default()),
            steps: 300,
            repeat: 3,
            sample_hz: SAMPLE_HZ,
            linux_source: debian::NEWEST.to_owned(),
            kernel_src: None,
            out: PathBuf::from("target/lab"),
            build_only: false,
        }
    }
}

/// Single-quoted for the guest's shell.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Workload {
    /// `execprof run`'s options, the command after `--` (quoted for the shell; empty for the
    /// chain), and whether it runs in a child memory cgroup.
    fn run_args(&self, steps: u32) -> (String, String, bool) {
        match self {
            Workload::Builtin(kind, spawn) => {
                let chain = format!("--steps {steps}");
                match kind {
                    WorkloadKind::Chain => (chain, String::new(), false),
                    WorkloadKind::Direct => (format!("{chain} --direct"), String::new(), false),
                    WorkloadKind::Env64 => (format!("{chain} --env-vars 64"), String::new(), false),
                    WorkloadKind::Memcg => (chain, String::new(), true),
                    WorkloadKind::Spawn => {
                        let mut cmd = format!("-- /execprof bench spawn --iterations {steps}");
                        for m in &spawn.methods {
                            cmd.push_str(&format!(" --method {}", quoted(m)));
                        }
                        if let Some(mem) = &spawn.mem {
                            cmd.push_str(&format!(" --mem {}", quoted(mem)));
                        }
                        if spawn.dirty {
                            cmd.push_str(" --dirty");
                        }
                        if spawn.fragment {
                            cmd.push_str(" --fragment");
                        }
                        (String::new(), cmd, false)
                    }
                }
            }
            Workload::Command(argv) => {
                (String::new(), format!("-- {}", argv.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(" ")), false)
            }
        }
    }

    /// For headings: `chain (300 steps)`, `spawn …`, `` `CMD` ``.
    fn describe(&self, steps: u32) -> String {
        match self {
            Workload::Builtin(WorkloadKind::Spawn, _) => {
                let (_, cmd, _) = self.run_args(steps);
                format!("spawn ({})", cmd.trim_start_matches("-- /"))
            }
            Workload::Builtin(kind, _) => format!("{} ({steps} steps)", format!("{kind:?}").to_lowercase()),
            Workload::Command(argv) => format!("`{}`", argv.join(" ")),
        }
    }

    /// The built-in chain with its PATH misses: where every known answer applies.
    fn has_misses(&self) -> bool {
        matches!(self, Workload::Builtin(WorkloadKind::Chain | WorkloadKind::Memcg | WorkloadKind::Env64, _))
    }
}

/// Boots `image` under `-icount shift=0` with `initrd`, a fresh ext4 lab disk in `work` as vda
/// (the workload's files go there, as on a real machine: negative dentries cached), the
/// read-only `drives` after it (vdb, ...) and the `results` disk last. Returns the console.
pub(crate) fn boot_lab(
    image: &Path,
    initrd: &Path,
    drives: &[PathBuf],
    results: &ResultsDisk,
    work: &Path,
    timeout: Duration,
) -> Result<String> {
    let lab_disk = work.join("lab-ext4.img");
    std::fs::File::create(&lab_disk)?.set_len(64 << 20)?;
    crate::run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&lab_disk))?;
    let drive = format!("file={},format=raw,if=virtio", lab_disk.display());
    // tsc=reliable: TCG's TSC follows the host clock, but the clocksource watchdog finds it
    // skewed after a while and falls back to jiffies, which ends high-resolution timers:
    // cpu-clock samples then come only on the 250 Hz tick.
    let console = boot(
        &Boot {
            arch: crate::vm::Arch::X86_64,
            kernel: image,
            initrd,
            drives,
            results: Some(results),
            memory_mib: 1024,
            timeout,
            cmdline: "tsc=reliable",
            qemu: &["-icount", "shift=0,sleep=off", "-drive", &drive],
        },
        work,
    )?;
    let _ = std::fs::remove_file(&lab_disk);
    Ok(console)
}

/// One kernel of the lab, by the name its files and headings use.
struct LabKernel {
    name: String,
    kernel: Kernel,
}

impl LabKernel {
    /// "the base kernel" or "the kernel with PATCH", for messages.
    fn describe(&self) -> String {
        match &self.kernel.patch {
            None => "the base kernel".to_owned(),
            Some(p) => format!("the kernel with {}", p.display()),
        }
    }
}

/// Names for the patched kernels: each patch's file stem, made unique.
fn kernel_names(patches: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in patches {
        let stem = p.file_stem().map_or_else(|| "patch".to_owned(), |s| s.to_string_lossy().into_owned());
        let stem: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        let stem = if stem == "base" { "base-patch".to_owned() } else { stem };
        let mut name = stem.clone();
        let mut n = 2;
        while names.contains(&name) {
            name = format!("{stem}-{n}");
            n += 1;
        }
        names.push(name);
    }
    names
}

/// The kernels: the base first, then one per patch, each built if it is not cached yet.
fn kernels(args: &LabArgs) -> Result<(Source, Vec<LabKernel>)> {
    let source = match &args.kernel_src {
        Some(dir) => Source::tree(dir)?,
        None => Source::debian(&args.linux_source)?,
    };
    let base = base_kernel(&source)?;
    let mut kernels = vec![LabKernel { name: "base".to_owned(), kernel: base.clone() }];
    for (patch, name) in args.patches.iter().zip(kernel_names(&args.patches)) {
        kernels.push(LabKernel { name, kernel: patched_kernel(&base, &source, patch)? });
    }
    Ok((source, kernels))
}

/// What one boot left: its recordings.
struct BootResult {
    exact: PathBuf,
    sampled: PathBuf,
    /// The workload's exit status in each pass (exact, sampled): `execprof run` passes on
    /// the traced command's own.
    status: [i32; 2],
}

/// The last non-empty lines of a file, for an error message.
fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n    ")
}

/// Boots `k` once with `initrd` and reads its results into `dir`; a kernel that does not boot,
/// crashes, or whose run fails is an error naming it.
fn boot_one(k: &LabKernel, initrd: &Path, dir: &Path, timeout: Duration) -> Result<BootResult> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let results = ResultsDisk::create(dir.join("results.img"), 128)?;
    let console_text = boot_lab(&k.kernel.image, initrd, &[], &results, dir, timeout)?;
    let console = dir.join("console.log");
    let crashed = kernel_crash(&console_text).or_else(|| kernel_oops(&console_text));
    let out = dir.join("out");
    let result = match results.read_back(&out, &console) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&results.image);
            return Err(match crashed {
                Some(c) => anyhow!(
                    "{} ({}): the kernel crashed: {c}; the console is in {}",
                    k.describe(),
                    k.kernel.image.display(),
                    console.display()
                ),
                None => anyhow!("{} ({}) did not boot to the lab's first step: {e:#}", k.describe(), k.kernel.image.display()),
            });
        }
    };
    let _ = std::fs::remove_file(&results.image);
    let mut status = [0; 2];
    for (i, pass) in ["exact", "sampled"].into_iter().enumerate() {
        let rc = result.code(&format!("rc_{pass}"));
        let recorded = out.join(format!("{pass}.execprof")).exists();
        // `execprof run` exits with the traced command's own status (docs/exit-codes.md), so
        // a status alone does not say who failed: a pass failed when it left no recording.
        if let Some(rc) = rc.filter(|_| recorded) {
            status[i] = rc;
        } else {
            let why = crashed.as_ref().map_or_else(String::new, |c| format!("; the kernel crashed: {c}"));
            bail!(
                "{}: the {pass} pass {} in the guest{why}; its last lines:\n    {}\n  its output: {}; the console: {}",
                k.describe(),
                match rc {
                    None => "never ended".to_owned(),
                    Some(c) => format!("left no recording (exit code {c})"),
                },
                last_lines(&out.join(format!("{pass}.txt")), 12),
                out.join(format!("{pass}.txt")).display(),
                console.display()
            );
        }
    }
    if let Some(c) = crashed {
        bail!("{}: the kernel crashed after the runs: {c}; the console is in {}", k.describe(), console.display());
    }
    if !result.finished() {
        bail!("{}: the lab guest did not run to its end; the console is in {}", k.describe(), console.display());
    }
    let fs = result.get("fs").unwrap_or_default();
    if result.get("tmpdir") != Some("/lab") || !fs.starts_with("ext") {
        bail!(
            "{}: the lab's ext4 disk was not mounted (fs {fs:?}): the workload would run on the initramfs; console in {}",
            k.describe(),
            console.display()
        );
    }
    Ok(BootResult { exact: out.join("exact.execprof"), sampled: out.join("sampled.execprof"), status })
}

/// The workload's exit statuses, when any was not 0: per kernel, the distinct ones over its
/// boots and passes, and whether the kernels differ (a patch that makes the workload fail is
/// a finding of its own: its diff compares different work).
fn exit_statuses(kernels: &[LabKernel], results: &[Vec<BootResult>]) -> Option<String> {
    let per_kernel: Vec<(String, Vec<i32>)> = kernels
        .iter()
        .zip(results)
        .map(|(k, r)| {
            let mut s: Vec<i32> = r.iter().flat_map(|b| b.status).collect();
            s.sort_unstable();
            s.dedup();
            (k.name.clone(), s)
        })
        .collect();
    if per_kernel.iter().all(|(_, s)| s == &[0]) {
        return None;
    }
    let list: Vec<String> = per_kernel.iter().map(|(n, s)| format!("{n} {s:?}")).collect();
    let differ = per_kernel.iter().any(|(_, s)| s != &per_kernel[0].1);
    Some(format!(
        "lab: the workload's exit status (every boot and pass): {}{}",
        list.join(", "),
        if differ { "; THE KERNELS DIFFER: a patched kernel's diff compares different work" } else { " (the same on every kernel)" }
    ))
}

/// A boot's two recordings.
#[derive(Clone, Copy)]
enum Pass {
    Exact,
    Sampled,
}

/// The reports of one pass of every round of a kernel.
fn reports(execprof: &Path, boots: &[BootResult], pass: Pass) -> Result<Vec<RunReport>> {
    boots
        .iter()
        .map(|b| {
            report(
                execprof,
                match pass {
                    Pass::Exact => &b.exact,
                    Pass::Sampled => &b.sampled,
                },
            )
        })
        .collect()
}

/// `execprof report RECORDING --json`, read back as execprof's own type.
pub(crate) fn report(execprof: &Path, rec: &Path) -> Result<RunReport> {
    let json = rec.with_extension("json");
    let out = Command::new(execprof).arg("report").arg(rec).arg("--json").arg(&json).output()?;
    if !out.status.success() {
        bail!("execprof report {}: {}", rec.display(), String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_str(&std::fs::read_to_string(&json)?).with_context(|| format!("{} is not execprof's report", json.display()))
}

/// `execprof diff` over rounds: `pairs` are (base, patched) recordings, one pair per round.
/// Its arguments, relative to `out` (for the README).
fn diff_command(pairs: &[(PathBuf, PathBuf)], json: &Path, out: &Path) -> Vec<String> {
    let rel = |p: &Path| p.strip_prefix(out).unwrap_or(p).display().to_string();
    let mut args = vec!["diff".to_owned()];
    for (i, (a, b)) in pairs.iter().enumerate() {
        if i > 0 {
            args.push("--round".to_owned());
        }
        args.push(rel(a));
        args.push(rel(b));
    }
    args.push("--json".to_owned());
    args.push(rel(json));
    args
}

/// Runs `execprof diff` over the rounds in `out`; the text goes to `name.txt`, the JSON to
/// `name.json` under `out/diffs`. Returns the diff and its text, and the command (for the README).
fn diff_rounds(execprof: &Path, out: &Path, pairs: &[(PathBuf, PathBuf)], name: &str) -> Result<(Diff, String, Vec<String>)> {
    let json = out.join("diffs").join(format!("{name}.json"));
    let args = diff_command(pairs, &json, out);
    let (diff, text) =
        run_diff(Command::new(execprof).args(&args).current_dir(out), &json, &out.join("diffs").join(format!("{name}.txt")))?;
    Ok((diff, text, args))
}

/// The results directory's README: what is there and how to recompute every diff.
fn readme(args: &LabArgs, execprof: &Path, source: &Source, kernels: &[LabKernel], commands: &[(String, Vec<String>)]) -> String {
    let version = Command::new(execprof)
        .arg("--version")
        .output()
        .map_or_else(|_| "?".to_owned(), |o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let mut o = String::from("# execprof lab results\n\n");
    o.push_str(&format!(
        "Made by `cargo xtask lab` on {}: the base kernel from {} and {} patched kernel(s); the workload {}; {} round(s), each booting \
         every kernel once (base, patches, base, …) under QEMU with `-icount shift=0` (a time is an instruction count); in every \
         boot an exact pass (`--mode exact --sample-hz 0`) and a sampled pass (`--mode sampled --sample-hz {}`).\n\n",
        chrono_like_now(),
        source.describe(),
        kernels.len() - 1,
        args.workload.describe(args.steps),
        args.repeat,
        args.sample_hz
    ));
    o.push_str(&format!("Recorded by {version}.\n\n"));
    o.push_str("- `kernels/NAME/`: each kernel's `config`, `about` (source, hashes, options changed) and `patch`\n");
    o.push_str("- `rounds/rR-NAME/`: one boot: `console.log`, and `out/` with the recordings (`exact.execprof`, `sampled.execprof`), execprof's output and the kernel's log\n");
    o.push_str("- `diffs/NAME-PASS.{txt,json}`: `execprof diff` of each patched kernel against the base, over the rounds\n\n");
    o.push_str("Recompute any diff here, without the guests (from this directory, with any execprof that has `diff --round`):\n\n```sh\n");
    for (name, cmd) in commands {
        o.push_str(&format!("# {name}\nexecprof {}\n", cmd.join(" ")));
    }
    o.push_str("```\n");
    o
}

/// Today's date as `date -u` prints it (no clock crate for one line).
fn chrono_like_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map_or_else(|_| "?".to_owned(), |o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// The significant lines of a diff, largest change per attempt first, at most `n`: outcome,
/// source, kind, name and the change with its interval.
fn significant_lines(d: &Diff, n: usize) -> Vec<String> {
    let mut lines: Vec<_> = d.lines.iter().filter(|l| l.significant).collect();
    lines.sort_by(|x, y| y.change.value.abs().total_cmp(&x.change.value.abs()));
    lines
        .iter()
        .take(n)
        .map(|l| {
            let bounds = l.change.bounds.map_or_else(String::new, |b| format!(" [{:+.0} … {:+.0}]", b.low, b.high));
            format!(
                "{:<9} {:<7} {:<9} {:<26} {:+.0}{bounds} instructions per attempt",
                l.outcome.label(),
                l.source,
                l.kind.label(),
                l.name,
                l.change.value
            )
        })
        .collect()
}

/// The lab: kernels, boots in rounds, diffs, known answers. Everything lands in `args.out`.
pub fn lab(args: &LabArgs) -> Result<()> {
    if args.patches.is_empty() {
        bail!("give at least one patch: `cargo xtask lab --patch FILE.patch` (kernel/patches/ has examples)");
    }
    if args.repeat < 2 && !args.build_only {
        eprintln!(
            "xtask: --repeat {}: one round has no spread between boots; the diff's intervals are within one boot only, and a change may be the boot's (use 3 or more)",
            args.repeat
        );
    }
    let started = Instant::now();
    // The portable build: what ships, and what CI's host tests and guests ran.
    let execprof = crate::dist::portable_binary(crate::vm::Arch::X86_64)?.canonicalize()?;
    let (source, kernels) = kernels(args)?;
    let out = &args.out;
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("emptying the results directory {}", out.display()))?;
    }
    for d in ["kernels", "rounds", "diffs"] {
        std::fs::create_dir_all(out.join(d))?;
    }
    let out = &out.canonicalize()?;
    for k in &kernels {
        let dir = out.join("kernels").join(&k.name);
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(k.kernel.dir.join("config"), dir.join("config"))?;
        std::fs::write(dir.join("about"), format!("{}image: {}\n", k.kernel.about(), k.kernel.image.display()))?;
        if let Some(p) = &k.kernel.patch {
            std::fs::copy(p, dir.join("patch"))?;
        }
    }
    if args.build_only {
        println!("lab: {} kernels built in {:.0} s (--build-only):", kernels.len(), started.elapsed().as_secs_f64());
        for k in &kernels {
            println!("  {:<20} {}", k.name, k.kernel.image.display());
        }
        return Ok(());
    }
    // One initramfs for every boot: the same execprof, the same workload.
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    let (run_opts, run_cmd, memcg) = args.workload.run_args(args.steps);
    let mut c = initramfs_base(&execprof, &busybox, guest::LAB_INIT)?;
    let env = GuestEnv::default()
        .set("SAMPLE_HZ", args.sample_hz)
        .set("RUN_OPTS", &run_opts)
        .set("RUN_CMD", &run_cmd)
        .set("MEMCG", if memcg { "yes" } else { "no" })
        .set("LAB_DEV", guest::virtio_disk(0))
        .set("RESULTS_DEV", guest::virtio_disk(1));
    c.file("guest.env", env.as_bytes(), 0o644);
    let initrd = out.join("initramfs.cpio");
    std::fs::write(&initrd, c.finish())?;
    let boots = kernels.len() * args.repeat as usize;
    eprintln!(
        "xtask: lab: {} kernels × {} rounds = {boots} boots of {} under -icount (TCG: about half a minute each)",
        kernels.len(),
        args.repeat,
        args.workload.describe(args.steps)
    );
    let timeout = Duration::from_secs(600 + u64::from(args.steps) * 4);
    // results[kernel][round]
    let mut results: Vec<Vec<BootResult>> = kernels.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.repeat {
        for (i, k) in kernels.iter().enumerate() {
            let dir = out.join("rounds").join(format!("r{round}-{}", k.name));
            eprintln!("xtask: lab: round {round} of {}: {}", args.repeat, k.describe());
            results[i].push(boot_one(k, &initrd, &dir, timeout)?);
        }
    }
    let _ = std::fs::remove_file(&initrd);
    if let Some(note) = exit_statuses(&kernels, &results) {
        println!("{note}");
    }
    println!(
        "lab: {} against the base kernel from {}, workload {}, {} rounds (means over rounds, Student intervals, Welch tests between the \
         kernels' rounds, Holm over each diff's lines); times are instructions (-icount shift=0)",
        kernels[1..].iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", "),
        source.describe(),
        args.workload.describe(args.steps),
        args.repeat
    );
    let mut commands = Vec::new();
    let mut failed = Vec::new();
    let mut summary = Vec::new();
    // The base's reports, read once for every patch: its sampled ones for the estimate, its
    // exact ones when a known answer is checked.
    let base_sampled = reports(&execprof, &results[0], Pass::Sampled)?;
    let mut base_exact: Option<Vec<RunReport>> = None;
    for (i, k) in kernels.iter().enumerate().skip(1) {
        let mut diffs = Vec::new();
        for pass in ["exact", "sampled"] {
            let pairs: Vec<(PathBuf, PathBuf)> = results[0]
                .iter()
                .zip(&results[i])
                .map(|(a, b)| if pass == "exact" { (a.exact.clone(), b.exact.clone()) } else { (a.sampled.clone(), b.sampled.clone()) })
                .collect();
            let name = format!("{}-{pass}", k.name);
            let (d, text, cmd) = diff_rounds(&execprof, out, &pairs, &name)?;
            println!("\n== {} ({pass} pass): base → {} ==\n{text}", k.name, k.name);
            commands.push((format!("{} − base, {pass} pass", k.name), cmd));
            diffs.push(d);
        }
        let [exact, sampled] = <[Diff; 2]>::try_from(diffs).map_err(|_| anyhow!("two diffs"))?;
        if let Some(text) = known::estimate_if_it_applies(&k.name, &base_sampled[0], &sampled, &execprof, &results[0][0].sampled)? {
            println!("{text}");
        }
        let lines = significant_lines(&exact, 8);
        summary.push(format!(
            "  {}: {} significant line(s) of {} (exact), {} of {} (sampled){}",
            k.name,
            exact.lines.iter().filter(|l| l.significant).count(),
            exact.lines.len(),
            sampled.lines.iter().filter(|l| l.significant).count(),
            sampled.lines.len(),
            if lines.is_empty() { String::new() } else { format!("; largest first:\n      {}", lines.join("\n      ")) }
        ));
        if let Some(check) = k.kernel.patch.as_deref().and_then(known::Known::of) {
            let builtin = matches!(args.workload, Workload::Builtin(..));
            if check.applies(builtin, args.workload.has_misses()) {
                let (patched_exact, patched_sampled) =
                    (reports(&execprof, &results[i], Pass::Exact)?, reports(&execprof, &results[i], Pass::Sampled)?);
                let base_exact = match &base_exact {
                    Some(r) => r,
                    None => base_exact.insert(reports(&execprof, &results[0], Pass::Exact)?),
                };
                let inputs = known::Inputs {
                    base_exact,
                    patched_exact: &patched_exact,
                    base_sampled: &base_sampled,
                    patched_sampled: &patched_sampled,
                    exact: &exact,
                    sampled: &sampled,
                    sample_hz: args.sample_hz,
                };
                let f = check.check(&k.name, &inputs, args.workload.has_misses());
                println!(
                    "lab: {}: the known answers of {}: {}",
                    k.name,
                    check.name(),
                    if f.is_empty() { "all passed".to_owned() } else { format!("{} failed", f.len()) }
                );
                failed.extend(f);
            } else {
                println!(
                    "lab: {}: the known answers of {} are for the chain with its PATH misses; not checked on this workload",
                    k.name,
                    check.name()
                );
            }
        }
    }
    std::fs::write(out.join("README.md"), readme(args, &execprof, &source, &kernels, &commands))?;
    println!("\nlab: summary (instructions per attempt of the outcome; Holm-significant over the rounds)");
    for s in &summary {
        println!("{s}");
    }
    println!(
        "\nTimes are guest time under QEMU/TCG with -icount shift=0: the guest clock advances 1 ns per instruction executed, so a time \
         here is an instruction count (free of the host's noise, blind to cache misses and memory latency): read instructions and \
         ratios, not hardware times.\nlab: results in {} (README.md there recomputes every diff without the guests); {:.1} min",
        out.display(),
        started.elapsed().as_secs_f64() / 60.0
    );
    if !failed.is_empty() {
        bail!("the lab's known answers failed:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

/// The patches CI runs the lab on: those of [`known::KNOWN_PATCHES`] made against `source`'s
/// line (`kernel/patches/LINE/`), every one of them there.
fn ci_patches(source: &Source) -> Result<Vec<PathBuf>> {
    let dir = source.patches()?;
    let patches: Vec<PathBuf> = known::KNOWN_PATCHES.iter().map(|(name, _)| dir.join(name)).collect();
    if let Some(missing) = patches.iter().find(|p| !p.is_file()) {
        bail!("{} is missing: every known patch is made against each line of {}", missing.display(), kernel::PATCHES);
    }
    Ok(patches)
}

/// A one-hunk patch of `fs/exec.c` adding `added` before its first three lines, with
/// `context` as those lines (the tree's own, or lines that are not there).
fn exec_c_patch(context: &[&str], added: &str) -> String {
    let mut p = format!(
        "execprof lab's CI: a patch that must be refused\n\n--- a/fs/exec.c\n+++ b/fs/exec.c\n@@ -1,{0} +1,{1} @@\n+{added}\n",
        context.len(),
        context.len() + 1
    );
    for l in context {
        p.push_str(&format!(" {l}\n"));
    }
    p
}

/// What CI checks before the guests start: a patch that does not apply and one that does not
/// build are refused with messages naming them, and nothing of theirs is cached; then the
/// kernels of [`ci_patches`] are built (cached).
pub fn ci_prepare() -> Result<()> {
    let source = Source::debian(CI_LINE)?;
    let base = base_kernel(&source)?;
    let dir = PathBuf::from("target/lab-refused");
    std::fs::create_dir_all(&dir)?;
    let exec_c = std::fs::read_to_string(base.dir.join("build/fs/exec.c")).context("the base's fs/exec.c")?;
    let first: Vec<&str> = exec_c.lines().take(3).collect();
    let not_applying = dir.join("not-applying.patch");
    std::fs::write(&not_applying, exec_c_patch(&["this line is not in fs/exec.c", "nor this one", "nor this"], "/* never applied */"))?;
    let not_building = dir.join("not-building.patch");
    std::fs::write(&not_building, exec_c_patch(&first, "#error execprof lab: this patch does not build"))?;
    let refused = |patch: &Path, wanted: &[&str]| -> Result<()> {
        let e = match patched_kernel(&base, &source, patch) {
            Ok(k) => bail!("{} was built ({}): the lab must refuse it", patch.display(), k.image.display()),
            Err(e) => format!("{e:#}"),
        };
        if let Some(w) = wanted.iter().find(|w| !e.contains(*w)) {
            bail!("refusing {} did not say {w:?}: {e}", patch.display());
        }
        eprintln!("xtask: lab: refused as it should be: {e}");
        Ok(())
    };
    let not_applying_said = format!("not-applying.patch does not apply to {}", source.describe());
    refused(&not_applying, &[&not_applying_said, "1 out of 1 hunk FAILED"])?;
    refused(&not_building, &["not-building.patch does not build", "#error execprof lab: this patch does not build", "build.log"])?;
    // Nothing of a refused patch is cached: no image, no build tree. (Only theirs: a build of
    // another patch that was killed half-way leaves its tree, which its next build replaces.)
    for patch in [&not_applying, &not_building] {
        let d = patched_dir(&base, patch)?;
        if d.join("bzImage").exists() || d.join("build").exists() || d.join("patch").exists() {
            bail!("a refused patch left a kernel or a build tree in the cache: {}", d.display());
        }
    }
    for p in ci_patches(&source)? {
        patched_kernel(&base, &source, &p)?;
    }
    Ok(())
}

/// The source line CI's lab runs on: the newest Debian ships, the lab's default (7.3 today).
/// x86 on 7.3 builds only the full and the lazy preemption models, so on the guest's one vCPU
/// a task woken inside an exec (execprof's own reader polls every 10 ms) runs inside the
/// probed call it interrupts: exact mode's times are on-CPU for that. The costly lookup's
/// growth is tested on its own line ([`known`]), which a CI run's spread beside another guest
/// (+1,925 [+1,422 … +2,428] per success) left unflagged among every line after Holm.
pub(crate) const CI_LINE: &str = crate::debian::NEWEST;

/// CI's lab: the known patches of [`CI_LINE`] on the chain, as [`LabArgs::new`] sets it.
pub fn ci_run() -> Result<()> {
    let mut args = LabArgs::new(ci_patches(&Source::debian(CI_LINE)?)?);
    args.linux_source = CI_LINE.to_owned();
    lab(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_that_fails_is_said_and_kernels_that_differ_are_flagged() {
        let k =
            |name: &str| LabKernel { name: name.to_owned(), kernel: Kernel { image: PathBuf::new(), dir: PathBuf::new(), patch: None } };
        let boot = |status: [i32; 2]| BootResult { exact: PathBuf::new(), sampled: PathBuf::new(), status };
        let kernels = [k("base"), k("p")];
        assert_eq!(exit_statuses(&kernels, &[vec![boot([0, 0])], vec![boot([0, 0])]]), None);
        let same = exit_statuses(&kernels, &[vec![boot([127, 127])], vec![boot([127, 127])]]).unwrap();
        assert!(same.ends_with("base [127], p [127] (the same on every kernel)"), "{same}");
        let differ = exit_statuses(&kernels, &[vec![boot([0, 0])], vec![boot([0, 139]), boot([0, 0])]]).unwrap();
        assert!(differ.contains("base [0], p [0, 139]; THE KERNELS DIFFER"), "{differ}");
    }

    #[test]
    fn kernel_names_are_the_patches_stems_made_unique() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            kernel_names(&[p("a/fix.patch"), p("b/fix.patch"), p("base.diff"), p("x y.patch")]),
            ["fix", "fix-2", "base-patch", "x_y"]
        );
    }

    #[test]
    fn workloads_become_run_options_and_a_quoted_command() {
        let spawn = SpawnShape { methods: vec!["fork-exec".into()], mem: Some("64M".into()), dirty: true, fragment: false };
        let (opts, cmd, memcg) = Workload::Builtin(WorkloadKind::Spawn, spawn).run_args(20);
        assert_eq!((opts.as_str(), memcg), ("", false));
        assert_eq!(cmd, "-- /execprof bench spawn --iterations 20 --method 'fork-exec' --mem '64M' --dirty");
        let (opts, cmd, memcg) = Workload::Builtin(WorkloadKind::Memcg, SpawnShape::default()).run_args(300);
        assert_eq!((opts.as_str(), cmd.as_str(), memcg), ("--steps 300", "", true));
        let (_, cmd, _) = Workload::Command(vec!["sh".into(), "-c".into(), "it's".into()]).run_args(1);
        assert_eq!(cmd, r"-- 'sh' '-c' 'it'\''s'");
    }

    #[test]
    fn the_readme_commands_are_relative_to_the_results_directory() {
        let out = Path::new("/r");
        let pairs = vec![
            (out.join("rounds/r1-base/out/exact.execprof"), out.join("rounds/r1-p/out/exact.execprof")),
            (PathBuf::from("/r/a2"), PathBuf::from("/r/b2")),
        ];
        assert_eq!(
            diff_command(&pairs, &out.join("diffs/p-exact.json"), out).join(" "),
            "diff rounds/r1-base/out/exact.execprof rounds/r1-p/out/exact.execprof --round a2 b2 --json diffs/p-exact.json"
        );
    }
}
