//! `cargo xtask fastpath`: the fast-path lab. Boots the patched 6.12 kernel ([`crate::kernel`])
//! under QEMU and, inside, runs the built-in chain with each lookup strategy of
//! `fs.exec_lookup` (single and double interleaved by `execprof run --repeat --vs` with a
//! setup command per side; none on its own), in exact+sampled mode, for the plain chain, with
//! 64 extra environment variables, and in a child memory cgroup. The recordings come back
//! over the console; here they are diffed, and the known answers (structure, not timings:
//! this is TCG) are checked.
//!
//! `EXECPROF_LAB_PROBE=1 cargo xtask fastpath` runs only two smoke probes (a plain run and a
//! one-run `--repeat`) in the lab kernel. Not yet part of `cargo xtask ci`.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

use crate::vm::{Boot, INIT_PREAMBLE, base64_decode, between, boot, cache_dir, fetch_package, initramfs};

/// Workloads: a tag and the extra chain options.
const WORKLOADS: &[(&str, &str)] = &[("root", ""), ("env64", "--env-vars 64"), ("memcg", "")];

fn init_script(steps: u32, repeat: u32) -> String {
    let run = "/execprof run --mode auto --sample-hz 4999";
    let mut labs = String::new();
    for (tag, extra) in WORKLOADS.iter().take(if std::env::var_os("EXECPROF_LAB_PROBE").is_some() { 0 } else { WORKLOADS.len() }) {
        if *tag == "memcg" {
            // A child memory cgroup: struct file allocations are charged to it.
            labs.push_str(
                "echo +memory > /sys/fs/cgroup/cgroup.subtree_control\n$B mkdir /sys/fs/cgroup/lab\necho $$ > /sys/fs/cgroup/lab/cgroup.procs\necho \"EXECPROF-LAB-CGROUP $($B cat /proc/self/cgroup)\"\n",
            );
        }
        labs.push_str(&format!(
            "{run} --steps {steps} {extra} --repeat {repeat} --setup 'echo 0 > /proc/sys/fs/exec_lookup' --vs '' --vs-setup 'echo 1 > /proc/sys/fs/exec_lookup' -o /tmp/{tag}-single.execprof --vs-output /tmp/{tag}-double.execprof > /tmp/{tag}-ab.txt 2>&1\n\
             echo \"EXECPROF-LAB-RC {tag}-ab $?\"\n\
             {run} --steps {steps} {extra} --repeat {repeat} --setup 'echo 2 > /proc/sys/fs/exec_lookup' -o /tmp/{tag}-none.execprof > /tmp/{tag}-none.txt 2>&1\n\
             echo \"EXECPROF-LAB-RC {tag}-none $?\"\n"
        ));
    }
    format!(
        r#"{INIT_PREAMBLE}$B mount -t cgroup2 none /sys/fs/cgroup
echo "EXECPROF-LAB-KERNEL $($B uname -r) fs.exec_lookup=$($B cat /proc/sys/fs/exec_lookup)"
/execprof run --steps 20 > /tmp/probe.txt 2>&1
echo "EXECPROF-LAB-PROBE $?"
/execprof run --steps 20 --repeat 1 -o /tmp/probe.execprof > /tmp/probe-repeat.txt 2>&1
echo "EXECPROF-LAB-PROBE-REPEAT $?"
{labs}echo 0 > /proc/sys/fs/exec_lookup
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
    for f in ["do_filp_open", "alloc_empty_file"] {
        check(on_stack(single, "enoent", f) > 0, format!("single: failed attempts' stacks reach {f}"));
        check(
            on_stack(double, "enoent", f) == 0,
            format!("double: no failed attempt's stack reaches {f} ({} samples)", on_stack(double, "enoent", f)),
        );
    }
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
    // The failed-attempt change is the struct file: present in single, gone in double.
    check(
        file_part(single).is_some_and(|x| x > 0.0),
        format!("single: struct file alloc+release in failed attempts ({:?} ns)", file_part(single)),
    );
    check(file_part(double) == Some(0.0), format!("double: no struct file in failed attempts ({:?} ns)", file_part(double)));
    failed
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

pub fn lab(steps: u32, repeat: u32) -> Result<()> {
    let image = crate::kernel::patched_kernel()?;
    crate::run(Command::new("cargo").args(["build", "--release", "--package", "profiler"]))?;
    let execprof = Path::new("target/release/execprof").canonicalize()?;
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    let work = cache_dir().join("fastpath");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let initrd = work.join("initramfs.cpio");
    initramfs(&execprof, &busybox, &init_script(steps, repeat), &initrd)?;
    eprintln!(
        "xtask: fast-path lab: {} runs of {steps} steps inside the patched kernel (TCG: this takes minutes)",
        WORKLOADS.len() * repeat as usize * 3
    );
    let console =
        boot(&Boot { kernel: &image, initrd: &initrd, drives: &[], memory_mib: 1024, timeout: Duration::from_secs(1500) }, &work)?;
    let kernel = between(&console, "EXECPROF-LAB-KERNEL ", "\n")
        .ok_or_else(|| anyhow!("the lab kernel did not start; console in {}", work.join("console.log").display()))?;
    eprintln!("xtask: lab kernel {}", kernel.trim());
    let mut rest = console.as_str();
    let mut files: Vec<PathBuf> = Vec::new();
    while let Some(i) = rest.find("EXECPROF-FILE-BEGIN ") {
        let after = &rest[i + "EXECPROF-FILE-BEGIN ".len()..];
        let name = after.lines().next().unwrap_or_default().trim().to_owned();
        let body = between(after, "\n", "EXECPROF-FILE-END").ok_or_else(|| anyhow!("{name}: cut short on the console"))?;
        let path = work.join(&name);
        std::fs::write(&path, base64_decode(&body.replace(['\r', '\n'], "")).with_context(|| format!("{name}: base64"))?)?;
        files.push(path);
        rest = &after[body.len()..];
    }
    for line in console.lines().filter(|l| l.contains("EXECPROF-LAB-RC")) {
        eprintln!("xtask: {}", line.trim());
        if !line.trim().ends_with(" 0") {
            bail!("a lab run failed: {line}; its output is in {}", work.display());
        }
    }
    let mut failed = Vec::new();
    for (tag, _) in WORKLOADS {
        let rec = |v: &str| work.join(format!("{tag}-{v}.execprof"));
        let (single, double, none) =
            (report_json(&execprof, &rec("single"))?, report_json(&execprof, &rec("double"))?, report_json(&execprof, &rec("none"))?);
        failed.extend(check(tag, &single, &double, &none));
        let d = diff(&execprof, &work, &format!("{tag}-single"), &format!("{tag}-double"))?;
        // The diff puts the failed attempts' change in the struct file: alloc_empty_file's
        // inclusive time in ENOENT attempts falls to 0.
        let file_line = d["lines"].as_array().into_iter().flatten().find(|l| {
            l["outcome"] == "enoent" && l["source"] == "sampled" && l["kind"] == "function_inclusive" && l["name"] == "alloc_empty_file"
        });
        let ok = file_line.is_some_and(|l| l["a"]["value"].as_f64() > Some(0.0) && l["b"]["value"].as_f64() == Some(0.0));
        if !ok {
            failed.push(format!("{tag}: the diff single → double shows alloc_empty_file leaving failed attempts ({file_line:?})"));
        }
        diff(&execprof, &work, &format!("{tag}-single"), &format!("{tag}-none"))?;
        let out = Command::new(&execprof).arg("report").arg(rec("single")).arg("--fast-path").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let estimate = text.split("\nFast path:").nth(1).unwrap_or_default();
        println!("\n== {tag}: the single-lookup recording's --fast-path estimate ==\nFast path:{estimate}");
        let measured = d["outcomes"].as_array().and_then(|a| a.iter().find(|o| o["outcome"] == "enoent")).cloned().unwrap_or_default();
        println!(
            "   measured double − single (TCG: compare ratios): ENOENT mean {:.0} → {:.0} ns ({:.2}×), per chain step {:+.0} ns",
            measured["mean_a"]["value"].as_f64().unwrap_or(0.0),
            measured["mean_b"]["value"].as_f64().unwrap_or(0.0),
            measured["mean_b"]["value"].as_f64().unwrap_or(0.0) / measured["mean_a"]["value"].as_f64().unwrap_or(1.0),
            measured["per_unit_change"]["value"].as_f64().unwrap_or(0.0)
        );
    }
    println!("\nTimes are under QEMU/TCG (many times slower than hardware, skewed by emulation): read ratios and structure.");
    println!("Files: {}", work.display());
    if !failed.is_empty() {
        bail!("fast-path lab checks failed:\n  {}", failed.join("\n  "));
    }
    println!("fastpath: all checks passed ({} workloads × single, double, none)", WORKLOADS.len());
    Ok(())
}
