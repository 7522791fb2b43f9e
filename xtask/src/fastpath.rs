//! `cargo xtask fastpath`: the fast-path lab. Boots the patched 6.12 kernel ([`crate::kernel`])
//! under QEMU and, inside, runs the built-in chain with each lookup strategy of
//! `fs.exec_lookup` (single and double interleaved by `execprof run --repeat --vs` with a
//! setup command per side; none on its own), in exact+sampled mode and again sampled alone,
//! for the plain chain, with 64 extra environment variables, and in a child memory cgroup. The recordings come back
//! over the console; here they are diffed, and the known answers (structure, not timings)
//! are checked.
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

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

use crate::vm::{Boot, boot, cache_dir, fetch_package, initramfs};

/// The sampling rate inside the lab kernel.
const SAMPLE_HZ: u32 = 4999;

/// The start of the lab's init: busybox, and the filesystems execprof needs.
const INIT_PREAMBLE: &str = r#"#!/bin/busybox sh
B=/bin/busybox
export PATH=/bin
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
$B mount -t tmpfs tmp /tmp
"#;

fn between<'a>(text: &'a str, begin: &str, end: &str) -> Option<&'a str> {
    let start = text.find(begin)? + begin.len();
    let stop = text[start..].find(end)? + start;
    Some(text[start..stop].trim_matches(['\r', '\n']))
}

/// Standard base64 (RFC 4648, padded), as busybox writes it.
fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("unexpected byte {c:#04x}"),
        }
        .into())
    };
    let bytes = text.trim().as_bytes();
    if !bytes.len().is_multiple_of(4) {
        bail!("length {} is not a multiple of 4", bytes.len());
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Ok(out)
}

/// Workloads: a tag and the extra chain options.
const WORKLOADS: &[(&str, &str)] = &[("root", ""), ("env64", "--env-vars 64"), ("memcg", "")];

fn init_script(steps: u32, repeat: u32) -> String {
    let run = format!("/execprof run --sample-hz {SAMPLE_HZ}");
    let mut labs = String::new();
    for (tag, extra) in WORKLOADS.iter().take(if std::env::var_os("EXECPROF_LAB_PROBE").is_some() { 0 } else { WORKLOADS.len() }) {
        if *tag == "memcg" {
            // A child memory cgroup: struct file allocations are charged to it.
            labs.push_str(
                "echo +memory > /sys/fs/cgroup/cgroup.subtree_control\n$B mkdir /sys/fs/cgroup/lab\necho $$ > /sys/fs/cgroup/lab/cgroup.procs\necho \"EXECPROF-LAB-CGROUP $($B cat /proc/self/cgroup)\"\n",
            );
        }
        // Exact and sampled together (auto), then sampled alone: without the exact probes'
        // cost inside every probed call, the samples' shares are the kernel's own.
        labs.push_str(&format!(
            "{run} --mode auto --steps {steps} {extra} --repeat {repeat} --setup 'echo 0 > /proc/sys/fs/exec_lookup' --vs '' --vs-setup 'echo 1 > /proc/sys/fs/exec_lookup' -o /tmp/{tag}-single.execprof --vs-output /tmp/{tag}-double.execprof > /tmp/{tag}-ab.txt 2>&1\n\
             echo \"EXECPROF-LAB-RC {tag}-ab $?\"\n\
             {run} --mode sampled --steps {steps} {extra} --repeat {repeat} --setup 'echo 0 > /proc/sys/fs/exec_lookup' --vs '' --vs-setup 'echo 1 > /proc/sys/fs/exec_lookup' -o /tmp/{tag}-sampled-single.execprof --vs-output /tmp/{tag}-sampled-double.execprof > /tmp/{tag}-sampled-ab.txt 2>&1\n\
             echo \"EXECPROF-LAB-RC {tag}-sampled-ab $?\"\n\
             {run} --mode auto --steps {steps} {extra} --repeat {repeat} --setup 'echo 2 > /proc/sys/fs/exec_lookup' -o /tmp/{tag}-none.execprof > /tmp/{tag}-none.txt 2>&1\n\
             echo \"EXECPROF-LAB-RC {tag}-none $?\"\n"
        ));
    }
    format!(
        r#"{INIT_PREAMBLE}$B mount -t cgroup2 none /sys/fs/cgroup
echo "EXECPROF-LAB-KERNEL $($B uname -r) fs.exec_lookup=$($B cat /proc/sys/fs/exec_lookup)"
# Emulated perf interrupts are slow: without this the kernel would lower
# perf_event_max_sample_rate during a run, and the next run's --sample-hz would be refused.
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
$B mount -t securityfs none /sys/kernel/security
echo "EXECPROF-LAB-LSM $($B cat /sys/kernel/security/lsm)"
# The chain's directories (execprof makes them under $TMPDIR) on the ext4 disk.
$B mkdir -p /lab && $B mount -t ext4 /dev/vda /lab && export TMPDIR=/lab
echo "EXECPROF-LAB-FS $($B stat -f -c %T /lab) TMPDIR=$TMPDIR"
echo "EXECPROF-LAB-CLOCK $($B cat /sys/devices/system/clocksource/clocksource0/current_clocksource) $($B grep -m1 '.resolution' /proc/timer_list)"
/execprof run --steps 20 > /tmp/probe.txt 2>&1
echo "EXECPROF-LAB-PROBE $?"
/execprof run --steps 20 --repeat 1 -o /tmp/probe.execprof > /tmp/probe-repeat.txt 2>&1
echo "EXECPROF-LAB-PROBE-REPEAT $?"
{labs}echo 0 > /proc/sys/fs/exec_lookup
echo "EXECPROF-LAB-CLOCK-END $($B cat /sys/devices/system/clocksource/clocksource0/current_clocksource) $($B grep -m1 '.resolution' /proc/timer_list)"
$B dmesg | $B grep -i 'clocksource\|unstable\|hrtimer\|high.res'
for f in /tmp/*.execprof /tmp/*.txt; do
  [ -f "$f" ] || continue
  echo "EXECPROF-FILE-BEGIN $($B basename $f)"
  $B base64 $f
  echo "EXECPROF-FILE-END"
done
# No ACPI in this kernel: power-off halts. A reboot ends QEMU (-no-reboot).
$B reboot -f
"#
    )
}

fn report_json(execprof: &Path, rec: &Path) -> Result<Value> {
    let json = rec.with_extension("json");
    let out = Command::new(execprof).arg("report").arg(rec).arg("--json").arg(&json).output()?;
    if !out.status.success() {
        bail!("execprof report {}: {}", rec.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(&json)?)?)
}

fn count(v: &Value, outcome: &str) -> u64 {
    v["analysis"]["outcomes"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["outcome"] == outcome))
        .and_then(|o| o["count"].as_u64())
        .unwrap_or(0)
}

/// Exact calls per attempt of `function` in `outcome` (0 when it never ran).
fn calls(v: &Value, outcome: &str, function: &str) -> f64 {
    v["analysis"]["exact"]["outcomes"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["outcome"] == outcome))
        .and_then(|o| o["functions"].as_array()?.iter().find(|f| f["function"] == function)?["calls_per_attempt"].as_f64())
        .unwrap_or(0.0)
}

/// Samples of `outcome` with `function` on the stack (prefix match: compiler suffixes).
fn on_stack(v: &Value, outcome: &str, function: &str) -> u64 {
    v["analysis"]["sampled"]["outcomes"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["outcome"] == outcome))
        .and_then(|o| o["on_stack"].as_array())
        .into_iter()
        .flatten()
        .filter(|f| f["function"].as_str().is_some_and(|n| n == function || n.starts_with(&format!("{function}."))))
        .filter_map(|f| f["inclusive"]["samples"].as_u64())
        .sum()
}

fn probed(v: &Value, function: &str) -> bool {
    v["exact_plan"]["functions"].as_array().is_some_and(|a| a.iter().any(|f| f["function"] == function))
}

fn file_part(v: &Value) -> Option<f64> {
    v["analysis"]["fast_path"]["failed_parts"].as_array()?.iter().find(|p| p["part"] == "file_alloc_free")?["per_attempt"]["value"].as_f64()
}

/// The known answers for one workload. Returns the checks that failed.
fn check(tag: &str, single: &Value, double: &Value, none: &Value) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{tag}: {what}"));
        }
    };
    for f in ["do_open_execat", "filename_lookup", "mm_alloc", "copy_strings"] {
        check(probed(single, f), format!("{f} is probed"));
    }
    for o in ["success", "enoent", "other", "abandoned"] {
        let (s, d, n) = (count(single, o), count(double, o), count(none, o));
        check(s == d && d == n, format!("{o} attempts identical between variants (single {s}, double {d}, none {n})"));
    }
    check(
        calls(single, "enoent", "do_open_execat") >= 0.99,
        format!("single: every failed attempt opens ({:.2})", calls(single, "enoent", "do_open_execat")),
    );
    check(
        calls(double, "enoent", "do_open_execat") == 0.0,
        format!("double: no failed attempt opens ({:.2})", calls(double, "enoent", "do_open_execat")),
    );
    let (ls, ld) = (calls(single, "success", "filename_lookup"), calls(double, "success", "filename_lookup"));
    check((ld - ls - 1.0).abs() < 0.01, format!("double: one more lookup per successful exec (filename_lookup {ls:.2} → {ld:.2})"));
    check(calls(double, "enoent", "filename_lookup") >= 0.99, "double: every failed attempt is a filename_lookup".into());
    // none: the pre-6.8 order, mm set-up and argument copying before the open.
    check(
        calls(none, "enoent", "mm_alloc") >= 0.99,
        format!("none: failed attempts set up an mm ({:.2})", calls(none, "enoent", "mm_alloc")),
    );
    check(
        calls(none, "enoent", "copy_strings") >= 0.99,
        format!("none: failed attempts copy arguments ({:.2})", calls(none, "enoent", "copy_strings")),
    );
    check(calls(single, "enoent", "mm_alloc") == 0.0, "single: no mm set-up in failed attempts".into());
    failed
}

/// The known answers the samples give, for a single/double pair and their diff (`label` says
/// which runs). Returns the checks that failed.
fn check_sampled(label: &str, single: &Value, double: &Value, diff: &Value) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{label}: {what}"));
        }
    };
    // The timers deliver the asked rate (a kernel without high-resolution timers, or on the
    // jiffies clocksource, samples only on the tick: 250 Hz, and the intervals stay wide).
    for (side, v) in [("single", single), ("double", double)] {
        let hz = v["analysis"]["sampled"]["delivered_hz"].as_f64().unwrap_or(0.0);
        check(hz >= SAMPLE_HZ as f64 / 4.0, format!("{side}: samples delivered at {hz:.0} Hz of the {SAMPLE_HZ} Hz asked"));
    }
    for f in ["do_filp_open", "alloc_empty_file"] {
        check(on_stack(single, "enoent", f) > 0, format!("single: failed attempts' stacks reach {f}"));
        check(
            on_stack(double, "enoent", f) == 0,
            format!("double: no failed attempt's stack reaches {f} ({} samples)", on_stack(double, "enoent", f)),
        );
    }
    // The failed-attempt change is the struct file: present in single, gone in double.
    check(
        file_part(single).is_some_and(|x| x > 0.0),
        format!("single: struct file alloc+release in failed attempts ({:?} ns)", file_part(single)),
    );
    check(file_part(double) == Some(0.0), format!("double: no struct file in failed attempts ({:?} ns)", file_part(double)));
    // The diff puts it there too: alloc_empty_file's inclusive time in ENOENT attempts falls to 0.
    let file_line = diff["lines"].as_array().into_iter().flatten().find(|l| {
        l["outcome"] == "enoent" && l["source"] == "sampled" && l["kind"] == "function_inclusive" && l["name"] == "alloc_empty_file"
    });
    check(
        file_line.is_some_and(|l| l["a"]["value"].as_f64() > Some(0.0) && l["b"]["value"].as_f64() == Some(0.0)),
        format!("the diff single → double shows alloc_empty_file leaving failed attempts ({file_line:?})"),
    );
    failed
}

/// `value [low … high]` in µs, signed.
fn us(i: &Value) -> String {
    let f = |k: &str| i[k].as_f64().unwrap_or(f64::NAN) / 1e3;
    format!("{:+.2} µs [{:+.2} … {:+.2}]", f("value"), f("low"), f("high"))
}

/// Two intervals' sum, their half-widths combined in quadrature.
fn sum(a: &Value, b: &Value) -> Value {
    let f = |i: &Value, k: &str| i[k].as_f64().unwrap_or(f64::NAN);
    let value = f(a, "value") + f(b, "value");
    let half = |i: &Value| (f(i, "high") - f(i, "low")) / 2.0;
    let h = (half(a).powi(2) + half(b).powi(2)).sqrt();
    serde_json::json!({ "value": value, "low": value - h, "high": value + h })
}

/// The single-lookup recording's `--fast-path` estimate beside what the double lookup measured
/// (means: the estimate is of means).
fn estimate_beside_measured(tag: &str, single: &Value, d: &Value) -> String {
    let fp = &single["analysis"]["fast_path"];
    let outcome = |o: &str| d["outcomes"].as_array().and_then(|a| a.iter().find(|x| x["outcome"] == o)).cloned().unwrap_or_default();
    let (enoent, success) = (outcome("enoent"), outcome("success"));
    let neg = |i: &Value| {
        let f = |k: &str| -i[k].as_f64().unwrap_or(f64::NAN);
        serde_json::json!({ "value": f("value"), "low": f("high"), "high": f("low") })
    };
    let ratio = |o: &Value| {
        let f = |k: &str| o[k]["value"].as_f64().unwrap_or(f64::NAN);
        format!("{:.3}×", f("median_b") / f("median_a"))
    };
    let step = &d["step"];
    let rows = [
        (
            "per failed attempt",
            us(&neg(&fp["saved_per_failure"])),
            us(&enoent["mean_change"]),
            us(&enoent["median_change"]),
            ratio(&enoent),
        ),
        ("per successful exec", us(&fp["added_per_success"]), us(&success["mean_change"]), us(&success["median_change"]), ratio(&success)),
        (
            "per chain step",
            us(&fp["net_per_success"]),
            us(&sum(&enoent["per_unit_change"], &success["per_unit_change"])),
            us(&step["median_change"]),
            ratio(step),
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

fn diff(execprof: &Path, dir: &Path, a: &str, b: &str) -> Result<Value> {
    let json = dir.join(format!("diff-{a}-{b}.json"));
    let out = Command::new(execprof)
        .arg("diff")
        .arg(dir.join(format!("{a}.execprof")))
        .arg(dir.join(format!("{b}.execprof")))
        .arg("--json")
        .arg(&json)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    std::fs::write(dir.join(format!("diff-{a}-{b}.txt")), text.as_bytes())?;
    println!("\n== {a} → {b} ==\n{text}");
    if !out.status.success() {
        bail!("execprof diff {a} {b}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(&json)?)?)
}

/// The lab: the guest runs (unless `analyse_only`: the recordings of the last run in
/// `target/vm/fastpath` are analysed again), then the diffs and the checks.
pub fn lab(steps: u32, repeat: u32, analyse_only: bool) -> Result<()> {
    crate::run(Command::new("cargo").args(["build", "--release", "--package", "profiler"]))?;
    let execprof = Path::new("target/release/execprof").canonicalize()?;
    let work = cache_dir().join("fastpath");
    if !analyse_only {
        run_guest(&execprof, &work, steps, repeat)?;
    } else if !work.join("root-single.execprof").exists() {
        bail!("no lab recordings in {}: run `cargo xtask fastpath` first", work.display());
    }
    analyse(&execprof, &work)
}

/// Boots the lab kernel, runs every workload and variant inside, and copies the recordings
/// from the console into `work`.
fn run_guest(execprof: &Path, work: &Path, steps: u32, repeat: u32) -> Result<()> {
    // EXECPROF_LAB_KERNEL: a bzImage of your own (the patch applied to your tree) instead of
    // the one built here.
    let image = match std::env::var_os("EXECPROF_LAB_KERNEL") {
        Some(path) => PathBuf::from(path),
        None => crate::kernel::patched_kernel()?,
    };
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    std::fs::create_dir_all(work)?;
    let disk = work.join("lab-ext4.img");
    std::fs::File::create(&disk)?.set_len(64 << 20)?;
    crate::run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&disk))?;
    let initrd = work.join("initramfs.cpio");
    initramfs(execprof, &busybox, &init_script(steps, repeat), &initrd)?;
    eprintln!(
        "xtask: fast-path lab: {} runs of {steps} steps inside the patched kernel (TCG: this takes minutes)",
        WORKLOADS.len() * repeat as usize * 5
    );
    let console =
        // tsc=reliable: TCG's TSC follows the host clock, but the clocksource watchdog finds it
        // skewed after a while and falls back to jiffies, which ends high-resolution timers:
        // cpu-clock samples then come only on the 250 Hz tick.
        boot(
            &Boot {
                kernel: &image,
                initrd: &initrd,
                drives: &[],
                results: None,
                memory_mib: 1024,
                timeout: Duration::from_secs(1500),
                cmdline: "tsc=reliable",
                qemu: &["-icount", "shift=0,sleep=off", "-drive", &format!("file={},format=raw,if=virtio", disk.display())],
            },
            work,
        )?;
    let kernel = between(&console, "EXECPROF-LAB-KERNEL ", "\n")
        .ok_or_else(|| anyhow!("the lab kernel did not start; console in {}", work.join("console.log").display()))?;
    eprintln!("xtask: lab kernel {}", kernel.trim());
    let fs = between(&console, "EXECPROF-LAB-FS ", "\n").unwrap_or_default();
    if !fs.contains("TMPDIR=/lab") || !fs.starts_with("ext") {
        bail!(
            "the lab's ext4 disk was not mounted ({fs:?}): the chain would run on the initramfs; console in {}",
            work.join("console.log").display()
        );
    }
    let mut rest = console.as_str();
    while let Some(i) = rest.find("EXECPROF-FILE-BEGIN ") {
        let after = &rest[i + "EXECPROF-FILE-BEGIN ".len()..];
        let name = after.lines().next().unwrap_or_default().trim().to_owned();
        let body = between(after, "\n", "EXECPROF-FILE-END").ok_or_else(|| anyhow!("{name}: cut short on the console"))?;
        let path = work.join(&name);
        std::fs::write(&path, base64_decode(&body.replace(['\r', '\n'], "")).with_context(|| format!("{name}: base64"))?)?;
        rest = &after[body.len()..];
    }
    for line in console.lines().filter(|l| l.contains("EXECPROF-LAB-RC")) {
        eprintln!("xtask: {}", line.trim());
        if !line.trim().ends_with(" 0") {
            bail!("a lab run failed: {line}; its output is in {}", work.display());
        }
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
            (report_json(execprof, &rec("single"))?, report_json(execprof, &rec("double"))?, report_json(execprof, &rec("none"))?);
        failed.extend(check(tag, &single, &double, &none));
        let d = diff(execprof, work, &format!("{tag}-single"), &format!("{tag}-double"))?;
        failed.extend(check_sampled(&format!("{tag} (exact+sampled)"), &single, &double, &d));
        let (sampled_single, sampled_double) =
            (report_json(execprof, &rec("sampled-single"))?, report_json(execprof, &rec("sampled-double"))?);
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

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_round_trips_what_busybox_writes() {
        assert_eq!(base64_decode("RVhFQ1BST0Y=").unwrap(), b"EXECPROF");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("YW!j").is_err());
    }
}
