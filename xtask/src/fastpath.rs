//! `cargo xtask fastpath`: the fast-path lab. Boots the patched 6.12 kernel ([`crate::kernel`])
//! under QEMU and, inside, runs the built-in chain with each lookup strategy of
//! `fs.exec_lookup` (single and double interleaved by `execprof run --repeat --vs` with a
//! setup command per side; none on its own), in exact+sampled mode and again sampled alone,
//! for the plain chain, with 64 extra environment variables, and in a child memory cgroup
//! (`xtask/guest/fastpath.sh`). The recordings come back on the results disk
//! ([`crate::guest`]); here they are diffed, read back as execprof's own `RunReport` and
//! `Diff`, and the known answers (structure, not timings) are checked.
//!
//! QEMU runs with `-icount shift=0`: the guest's clock advances one nanosecond per
//! instruction, so the lab's times are instruction counts, deterministic from run to run
//! (medians repeat to the nanosecond) and free of the host's noise; the chain's directories
//! are on an ext4 disk (negative dentries cached, as on a real machine, unlike tmpfs).
//!
//! `EXECPROF_LAB_PROBE=1 cargo xtask fastpath` runs only two smoke probes (a plain run and a
//! one-run `--repeat`) in the lab kernel. `cargo xtask ci` runs the whole lab last.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use execprof::{
    analysis::{fastpath::OpenPart, outcome::Outcome, stats::Interval},
    report::{
        RunReport,
        diff::{Diff, Figure},
    },
};

use crate::{
    guest::{self, GuestEnv, ResultsDisk},
    vm::{Boot, boot, cache_dir, exact_calls as calls, execprof_diff, fetch_package, inclusive_line, initramfs_base},
};

/// The sampling rate inside the lab kernel.
const SAMPLE_HZ: u32 = 4999;

/// Workloads: a tag and the extra chain options.
const WORKLOADS: &[(&str, &str)] = &[("root", ""), ("env64", "--env-vars 64"), ("memcg", "")];

/// The chain without PATH misses (`--direct`: every exec by its path), under the three
/// strategies in exact mode only (the guest runs its `ab` and `none` runs, not the sampled
/// ones): the seeds' spawnbench ordering, single slower than both double and none, asked of
/// instructions function by function.
const DIRECT: (&str, &str) = ("direct", "--direct");

/// The guest's `/guest.env`: the lab's size and its workloads (none in probe mode).
fn guest_env(steps: u32, repeat: u32, probe_only: bool) -> GuestEnv {
    let workloads: Vec<(&str, &str)> = if probe_only { vec![] } else { WORKLOADS.iter().copied().chain([DIRECT]).collect() };
    let tags: Vec<&str> = workloads.iter().map(|(tag, _)| *tag).collect();
    let mut env = GuestEnv::default()
        .set("STEPS", steps)
        .set("REPEAT", repeat)
        .set("SAMPLE_HZ", SAMPLE_HZ)
        .set("WORKLOADS", tags.join(" "))
        .set("LAB_DEV", guest::virtio_disk(0))
        .set("RESULTS_DEV", guest::virtio_disk(1));
    for (tag, extra) in &workloads {
        env = env.set(&format!("EXTRA_{tag}"), extra);
    }
    env
}

/// `execprof report RECORDING --json`, read back as execprof's own type.
fn report(execprof: &Path, rec: &Path) -> Result<RunReport> {
    let json = rec.with_extension("json");
    let out = Command::new(execprof).arg("report").arg(rec).arg("--json").arg(&json).output()?;
    if !out.status.success() {
        bail!("execprof report {}: {}", rec.display(), String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_str(&std::fs::read_to_string(&json)?).with_context(|| format!("{} is not execprof's report", json.display()))
}

fn count(r: &RunReport, outcome: Outcome) -> u64 {
    r.analysis.outcomes.iter().find(|o| o.outcome == outcome).map_or(0, |o| o.count)
}

/// Samples of `outcome` with `function` on the stack (prefix match: compiler suffixes).
fn on_stack(r: &RunReport, outcome: Outcome, function: &str) -> u64 {
    r.analysis
        .sampled
        .as_ref()
        .and_then(|s| s.outcomes.iter().find(|o| o.outcome == outcome))
        .map_or(&[][..], |o| o.on_stack.as_slice())
        .iter()
        .filter(|f| f.function == function || f.function.starts_with(&format!("{function}.")))
        .map(|f| f.inclusive.samples)
        .sum()
}

fn probed(r: &RunReport, function: &str) -> bool {
    r.meta.exact_plan.as_ref().is_some_and(|p| p.functions.iter().any(|f| f.function == function))
}

fn file_part(r: &RunReport) -> Option<f64> {
    Some(r.analysis.fast_path.as_ref()?.failed_parts.iter().find(|p| p.part == OpenPart::FileAllocFree)?.per_attempt.value)
}

/// An outcome's name as the report's JSON spells it.
fn name(o: Outcome) -> String {
    format!("{o:?}").to_lowercase()
}

/// The known answers for one workload. Returns the checks that failed.
fn check(tag: &str, single: &RunReport, double: &RunReport, none: &RunReport) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{tag}: {what}"));
        }
    };
    for f in ["do_open_execat", "filename_lookup", "mm_alloc", "copy_strings"] {
        check(probed(single, f), format!("{f} is probed"));
    }
    for o in [Outcome::Success, Outcome::Enoent, Outcome::Other, Outcome::Abandoned] {
        let (s, d, n) = (count(single, o), count(double, o), count(none, o));
        check(s == d && d == n, format!("{} attempts identical between variants (single {s}, double {d}, none {n})", name(o)));
    }
    check(
        calls(single, Outcome::Enoent, "do_open_execat") >= 0.99,
        format!("single: every failed attempt opens ({:.2})", calls(single, Outcome::Enoent, "do_open_execat")),
    );
    check(
        calls(double, Outcome::Enoent, "do_open_execat") == 0.0,
        format!("double: no failed attempt opens ({:.2})", calls(double, Outcome::Enoent, "do_open_execat")),
    );
    let (ls, ld) = (calls(single, Outcome::Success, "filename_lookup"), calls(double, Outcome::Success, "filename_lookup"));
    check((ld - ls - 1.0).abs() < 0.01, format!("double: one more lookup per successful exec (filename_lookup {ls:.2} → {ld:.2})"));
    check(calls(double, Outcome::Enoent, "filename_lookup") >= 0.99, "double: every failed attempt is a filename_lookup".into());
    // none: the pre-6.8 order, mm set-up and argument copying before the open.
    check(
        calls(none, Outcome::Enoent, "mm_alloc") >= 0.99,
        format!("none: failed attempts set up an mm ({:.2})", calls(none, Outcome::Enoent, "mm_alloc")),
    );
    check(
        calls(none, Outcome::Enoent, "copy_strings") >= 0.99,
        format!("none: failed attempts copy arguments ({:.2})", calls(none, Outcome::Enoent, "copy_strings")),
    );
    check(calls(single, Outcome::Enoent, "mm_alloc") == 0.0, "single: no mm set-up in failed attempts".into());
    failed
}

/// The known answers the samples give, for a single/double pair and their diff (`label` says
/// which runs). Returns the checks that failed.
fn check_sampled(label: &str, single: &RunReport, double: &RunReport, diff: &Diff) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{label}: {what}"));
        }
    };
    // The timers deliver the asked rate (a kernel without high-resolution timers, or on the
    // jiffies clocksource, samples only on the tick: 250 Hz, and the intervals stay wide).
    for (side, v) in [("single", single), ("double", double)] {
        let hz = v.analysis.sampled.as_ref().and_then(|s| s.delivered_hz).unwrap_or(0.0);
        check(hz >= SAMPLE_HZ as f64 / 4.0, format!("{side}: samples delivered at {hz:.0} Hz of the {SAMPLE_HZ} Hz asked"));
    }
    for f in ["do_filp_open", "alloc_empty_file"] {
        check(on_stack(single, Outcome::Enoent, f) > 0, format!("single: failed attempts' stacks reach {f}"));
        check(
            on_stack(double, Outcome::Enoent, f) == 0,
            format!("double: no failed attempt's stack reaches {f} ({} samples)", on_stack(double, Outcome::Enoent, f)),
        );
    }
    // The failed-attempt change is the struct file: present in single, gone in double.
    check(
        file_part(single).is_some_and(|x| x > 0.0),
        format!("single: struct file alloc+release in failed attempts ({:?} ns)", file_part(single)),
    );
    check(file_part(double) == Some(0.0), format!("double: no struct file in failed attempts ({:?} ns)", file_part(double)));
    // The diff puts it there too: alloc_empty_file's inclusive time in ENOENT attempts falls to 0.
    let file_line = inclusive_line(diff, Outcome::Enoent, "sampled", "alloc_empty_file");
    check(
        file_line.is_some_and(|l| l.a.value > 0.0 && l.b.value == 0.0),
        format!("the diff single → double shows alloc_empty_file leaving failed attempts ({file_line:?})"),
    );
    failed
}

/// `value [low … high]` in µs, signed.
fn us(i: &Interval) -> String {
    format!("{:+.2} µs [{:+.2} … {:+.2}]", i.value / 1e3, i.low / 1e3, i.high / 1e3)
}

/// Two intervals' sum, their half-widths combined in quadrature.
fn sum(a: &Interval, b: &Interval) -> Interval {
    let value = a.value + b.value;
    let half = |i: &Interval| (i.high - i.low) / 2.0;
    let h = (half(a).powi(2) + half(b).powi(2)).sqrt();
    Interval { value, low: value - h, high: value + h }
}

/// Where a figure is missing: shown as NaN, as it always was.
const MISSING: Interval = Interval { value: f64::NAN, low: f64::NAN, high: f64::NAN };

/// A diff figure as an interval: NaN where it is missing, or its interval is (too few values).
fn interval(f: Option<Figure>) -> Interval {
    f.map_or(MISSING, |f| f.interval().unwrap_or(Interval { value: f.value, ..MISSING }))
}

/// The single-lookup recording's `--fast-path` estimate beside what the double lookup measured
/// (means: the estimate is of means).
fn estimate_beside_measured(tag: &str, single: &RunReport, d: &Diff) -> String {
    let fp = single.analysis.fast_path.as_ref();
    let estimate = |f: fn(&execprof::analysis::fastpath::FastPathVerdict) -> Interval| fp.map_or(MISSING, f);
    let outcome = |o: Outcome| d.outcomes.iter().find(|x| x.outcome == o);
    let (enoent, success) = (outcome(Outcome::Enoent), outcome(Outcome::Success));
    let neg = |i: Interval| Interval { value: -i.value, low: -i.high, high: -i.low };
    let ratio = |median_a: Option<Figure>, median_b: Option<Figure>| format!("{:.3}×", interval(median_b).value / interval(median_a).value);
    let mean_change = |o: Option<&execprof::report::diff::OutcomeChange>| interval(o.and_then(|o| o.latency.mean_change));
    let median_change = |o: Option<&execprof::report::diff::OutcomeChange>| interval(o.and_then(|o| o.latency.median_change));
    let per_unit = |o: Option<&execprof::report::diff::OutcomeChange>| interval(o.map(|o| o.per_unit_change));
    let outcome_ratio =
        |o: Option<&execprof::report::diff::OutcomeChange>| ratio(o.and_then(|o| o.latency.median_a), o.and_then(|o| o.latency.median_b));
    let step = d.step.as_ref();
    let rows = [
        (
            "per failed attempt",
            us(&neg(estimate(|f| f.saved_per_failure))),
            us(&mean_change(enoent)),
            us(&median_change(enoent)),
            outcome_ratio(enoent),
        ),
        (
            "per successful exec",
            us(&estimate(|f| f.added_per_success)),
            us(&mean_change(success)),
            us(&median_change(success)),
            outcome_ratio(success),
        ),
        (
            "per chain step",
            us(&estimate(|f| f.net_per_success)),
            us(&sum(&per_unit(enoent), &per_unit(success))),
            us(&interval(step.and_then(|s| s.median_change))),
            ratio(step.and_then(|s| s.median_a), step.and_then(|s| s.median_b)),
        ),
    ];
    let mut o = format!(
        "\n== {tag}: double − single, estimated from the single run's samples and measured ==\n  {:<20} {:>30} {:>30} {:>30} {:>8}\n",
        "", "estimate (--fast-path)", "measured mean change", "measured median change", "median"
    );
    for (what, est, mean, median, r) in rows {
        o.push_str(&format!("  {what:<20} {est:>30} {mean:>30} {median:>30} {r:>8}\n"));
    }
    o.push_str("  (the estimate is of means; per chain step: kernel time for the estimate and the mean, the whole step for the median)\n");
    o
}

fn diff(execprof: &Path, dir: &Path, a: &str, b: &str) -> Result<Diff> {
    let (d, text) = execprof_diff(
        execprof,
        &dir.join(format!("{a}.execprof")),
        &dir.join(format!("{b}.execprof")),
        &dir.join(format!("diff-{a}-{b}.json")),
        &dir.join(format!("diff-{a}-{b}.txt")),
    )?;
    println!("\n== {a} → {b} ==\n{text}");
    Ok(d)
}

/// The lab: the guest runs (unless `analyse_only`: the recordings of the last run in
/// `target/vm/fastpath/results` are analysed again), then the diffs and the checks.
/// The lab's kernel: `EXECPROF_LAB_KERNEL` (a bzImage of your own, the patch applied to your
/// tree), else the patched one built here.
pub(crate) fn lab_kernel() -> Result<PathBuf> {
    match std::env::var_os("EXECPROF_LAB_KERNEL") {
        Some(path) => Ok(PathBuf::from(path)),
        None => crate::kernel::patched_kernel(),
    }
}

/// Boots the lab kernel `image` under `-icount shift=0` with `initrd`, a fresh ext4 lab disk
/// in `work` as vda (the chain's directories go there, as on a real machine: negative dentries
/// cached), the read-only `drives` after it (vdb, ...) and the `results` disk last.
pub(crate) fn boot_lab(
    image: &Path,
    initrd: &Path,
    drives: &[PathBuf],
    results: &ResultsDisk,
    work: &Path,
    timeout: Duration,
) -> Result<()> {
    let lab_disk = work.join("lab-ext4.img");
    std::fs::File::create(&lab_disk)?.set_len(64 << 20)?;
    crate::run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&lab_disk))?;
    // The lab disk is vda: its -drive comes before the read-only drives' and the results disk's.
    let drive = format!("file={},format=raw,if=virtio", lab_disk.display());
    // tsc=reliable: TCG's TSC follows the host clock, but the clocksource watchdog finds it
    // skewed after a while and falls back to jiffies, which ends high-resolution timers:
    // cpu-clock samples then come only on the 250 Hz tick.
    boot(
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
    Ok(())
}

pub fn lab(steps: u32, repeat: u32, analyse_only: bool) -> Result<()> {
    crate::run(Command::new("cargo").args(["build", "--release", "--package", "profiler"]))?;
    let execprof = Path::new("target/release/execprof").canonicalize()?;
    let work = cache_dir().join("fastpath");
    let results = work.join("results");
    let probe_only = std::env::var_os("EXECPROF_LAB_PROBE").is_some();
    if !analyse_only {
        run_guest(&execprof, &work, steps, repeat, probe_only)?;
    } else if !results.join("root-single.execprof").exists() {
        bail!("no lab recordings in {}: run `cargo xtask fastpath` first", results.display());
    }
    if probe_only && !analyse_only {
        println!("fastpath: the smoke probes passed inside the lab kernel (EXECPROF_LAB_PROBE: no workloads, nothing to analyse)");
        return Ok(());
    }
    analyse(&execprof, &results)
}

/// Boots the lab kernel, runs every workload and variant inside (none but the smoke probes
/// with `probe_only`), and reads the results disk back into `work/results`.
fn run_guest(execprof: &Path, work: &Path, steps: u32, repeat: u32, probe_only: bool) -> Result<()> {
    let image = lab_kernel()?;
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    std::fs::create_dir_all(work)?;
    let results = ResultsDisk::create(work.join("results.img"), 512)?;
    let initrd = work.join("initramfs.cpio");
    let mut c = initramfs_base(execprof, &busybox, guest::FASTPATH_INIT)?;
    c.file("guest.env", guest_env(steps, repeat, probe_only).as_bytes(), 0o644);
    std::fs::write(&initrd, c.finish())?;
    eprintln!(
        "xtask: fast-path lab: {} runs of {steps} steps inside the patched kernel (TCG: this takes minutes)",
        if probe_only { 0 } else { (WORKLOADS.len() * 5 + 3) * repeat as usize }
    );
    boot_lab(&image, &initrd, &[], &results, work, Duration::from_secs(1500))?;
    let console = work.join("console.log");
    let result = results.read_back(&work.join("results"), &console)?;
    let kernel = result.get("kernel").unwrap_or_default();
    eprintln!("xtask: lab kernel {kernel} fs.exec_lookup={}", result.get("exec_lookup").unwrap_or_default());
    let fs = result.get("fs").unwrap_or_default();
    if result.get("tmpdir") != Some("/lab") || !fs.starts_with("ext") {
        bail!(
            "the lab's ext4 disk was not mounted (fs {fs:?}, TMPDIR {:?}): the chain would run on the initramfs; console in {}",
            result.get("tmpdir"),
            console.display()
        );
    }
    let mut runs = vec!["probe_rc".to_owned(), "probe_repeat_rc".to_owned()];
    if !probe_only {
        for (tag, _) in WORKLOADS {
            runs.extend(["ab", "sampled-ab", "none"].map(|r| format!("rc_{tag}-{r}")));
        }
        runs.extend(["ab", "none"].map(|r| format!("rc_{}-{r}", DIRECT.0)));
    }
    for key in &runs {
        let rc = result.code(key);
        eprintln!("xtask: {key} {}", rc.map_or("never written".into(), |c| c.to_string()));
        if rc != Some(0) {
            bail!("a lab run failed: {key} {rc:?}; its output is in {}", result.dir.display());
        }
    }
    if !result.finished() {
        bail!("the lab guest did not run to its end; console in {}", console.display());
    }
    Ok(())
}

/// Diffs the recordings in `work`, prints the estimate beside the measurement, and checks the
/// known answers.
fn analyse(execprof: &Path, work: &Path) -> Result<()> {
    let mut failed = Vec::new();
    for (tag, _) in WORKLOADS {
        let rec = |v: &str| work.join(format!("{tag}-{v}.execprof"));
        let (single, double, none) =
            (report(execprof, &rec("single"))?, report(execprof, &rec("double"))?, report(execprof, &rec("none"))?);
        failed.extend(check(tag, &single, &double, &none));
        let d = diff(execprof, work, &format!("{tag}-single"), &format!("{tag}-double"))?;
        failed.extend(check_sampled(&format!("{tag} (exact+sampled)"), &single, &double, &d));
        let (sampled_single, sampled_double) = (report(execprof, &rec("sampled-single"))?, report(execprof, &rec("sampled-double"))?);
        let sampled_diff = diff(execprof, work, &format!("{tag}-sampled-single"), &format!("{tag}-sampled-double"))?;
        failed.extend(check_sampled(&format!("{tag} (sampled)"), &sampled_single, &sampled_double, &sampled_diff));
        diff(execprof, work, &format!("{tag}-single"), &format!("{tag}-none"))?;
        // The estimate from the sampled-only runs: there execprof's exact probes do not sit
        // inside the parts being weighed.
        let out = Command::new(execprof).arg("report").arg(rec("sampled-single")).arg("--fast-path").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let estimate = text.split("\nFast path:").nth(1).unwrap_or_default();
        println!("\n== {tag}: the single-lookup recording's --fast-path estimate (sampled) ==\nFast path:{estimate}");
        println!("{}", estimate_beside_measured(tag, &sampled_single, &sampled_diff));
    }
    failed.extend(analyse_direct(execprof, work)?);
    println!(
        "\nTimes are guest time under QEMU/TCG with -icount shift=0: the guest clock advances 1 ns per instruction executed, so a time \
         here is an instruction count (deterministic, free of the host's noise, blind to cache misses and memory latency): read \
         instructions and ratios, not hardware times. The tails (means) hold timer interrupts and sampling; medians are exact."
    );
    println!("Files: {}", work.display());
    if !failed.is_empty() {
        bail!("fast-path lab checks failed:\n  {}", failed.join("\n  "));
    }
    println!("fastpath: all checks passed ({} workloads × single, double, none)", WORKLOADS.len());
    Ok(())
}

/// Probed functions shown in the direct chain's table.
const DIRECT_FUNCTIONS_SHOWN: usize = 16;

/// The direct chain under the three strategies: each successful exec's median and mean
/// instructions, and per probed function its self instructions per exec in each, largest
/// difference first, with the probed functions' sum and what lies outside them; so whether
/// the instructions give the seeds' ordering (single slower than double and none), and which
/// functions carry it, is read off rather than guessed. Checks only the structure (the same
/// successful execs, no failures, exact times on both sides). Returns the checks that failed.
fn analyse_direct(execprof: &Path, work: &Path) -> Result<Vec<String>> {
    let tag = DIRECT.0;
    let rec = |v: &str| work.join(format!("{tag}-{v}.execprof"));
    let variants = [
        ("single", report(execprof, &rec("single"))?),
        ("double", report(execprof, &rec("double"))?),
        ("none", report(execprof, &rec("none"))?),
    ];
    let mut failed = Vec::new();
    let successes: Vec<u64> = variants.iter().map(|(_, r)| count(r, Outcome::Success)).collect();
    if successes.iter().any(|&n| n != successes[0] || n == 0) {
        failed.push(format!("{tag}: successful execs differ between variants or are missing: {successes:?}"));
    }
    for (v, r) in &variants {
        let failures = r.analysis.attempts - count(r, Outcome::Success);
        if failures != 0 {
            failed.push(format!("{tag}-{v}: {failures} failed attempts in a chain without misses"));
        }
    }
    diff(execprof, work, &format!("{tag}-single"), &format!("{tag}-double"))?;
    diff(execprof, work, &format!("{tag}-single"), &format!("{tag}-none"))?;
    let timing = |r: &RunReport| r.analysis.exact.as_ref().and_then(|x| x.outcomes.iter().find(|o| o.outcome == Outcome::Success)).cloned();
    let timings: Vec<_> = variants.iter().map(|(v, r)| (*v, timing(r))).collect();
    if let Some((v, _)) = timings.iter().find(|(_, t)| t.is_none()) {
        failed.push(format!("{tag}-{v}: no exact times for the successful execs"));
        return Ok(failed);
    }
    let timings: Vec<_> = timings.into_iter().map(|(v, t)| (v, t.unwrap_or_else(|| unreachable!()))).collect();
    let latency = |r: &RunReport| r.analysis.outcomes.iter().find(|o| o.outcome == Outcome::Success).and_then(|o| o.latency);
    println!("\n== {tag}: the chain without misses (every exec by its path), successful execs, instructions per exec ==");
    println!("  {:<40} {:>12} {:>12} {:>12}", "", "single", "double", "none");
    let row = |what: &str, f: &dyn Fn(usize) -> f64| {
        println!("  {what:<40} {:>12.0} {:>12.0} {:>12.0}", f(0), f(1), f(2));
    };
    row("median (the tracepoints' window)", &|i| latency(&variants[i].1).map_or(f64::NAN, |l| l.median().value));
    row("mean", &|i| timings[i].1.mean_ns);
    row("probed functions' self time, summed", &|i| timings[i].1.functions.iter().map(|f| f.self_per_attempt.value).sum());
    row("outside every probed function", &|i| timings[i].1.unprobed_ns_per_attempt);
    let mut names: Vec<&str> = Vec::new();
    for (_, t) in &timings {
        for f in &t.functions {
            if !names.contains(&f.function.as_str()) {
                names.push(&f.function);
            }
        }
    }
    let own = |i: usize, name: &str| timings[i].1.functions.iter().find(|f| f.function == name).map_or(0.0, |f| f.self_per_attempt.value);
    names.sort_by(|x, y| {
        let spread = |n: &str| (own(0, n) - own(1, n)).abs() + (own(0, n) - own(2, n)).abs();
        spread(y).total_cmp(&spread(x)).then(x.cmp(y))
    });
    println!("  self instructions per exec, by function (largest difference first; single − double, single − none):");
    for n in names.iter().take(DIRECT_FUNCTIONS_SHOWN) {
        let (s, d, x) = (own(0, n), own(1, n), own(2, n));
        println!("    {n:<38} {s:>12.0} {d:>12.0} {x:>12.0}   {:>+8.0} {:>+8.0}", s - d, s - x);
    }
    if names.len() > DIRECT_FUNCTIONS_SHOWN {
        println!("    ... {} more functions (in the recordings' reports)", names.len() - DIRECT_FUNCTIONS_SHOWN);
    }
    Ok(failed)
}
