//! Runs execprof inside stock Debian kernels under QEMU (TCG: this machine's KVM cannot run
//! a stock kernel) to test exact mode where kprobes exist, and brings the recordings back.
//!
//! Each guest boots a minimal initramfs: busybox, the execprof binary with the glibc files
//! it links against, and an init script that runs the built-in chain and prints the JSON
//! between markers on the serial console. QEMU exits 0 even when killed, so pass or fail
//! is decided from the guest's output only.
use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{cpio::Cpio, run};

/// Guest kernels: a label and the Debian metapackage that names the current build.
pub const KERNELS: &[(&str, &str)] = &[("6.1", "linux-image-cloud-amd64"), ("6.12", "linux-image-6.12-cloud-amd64")];

pub struct VmOptions {
    pub steps: u32,
    pub misses: u32,
    pub timeout: Duration,
}

pub struct GuestRun {
    pub kernel: String,
    pub package: String,
    pub report: String,
    pub json: serde_json::Value,
    /// The run's recording, copied out of the guest.
    pub recording: PathBuf,
}

pub(crate) fn cache_dir() -> PathBuf {
    PathBuf::from("target/vm")
}

/// The concrete package a metapackage depends on (ABI numbers change; old ones leave the archive).
pub(crate) fn resolve_package(meta: &str) -> Result<String> {
    let out = Command::new("apt-cache").args(["depends", meta]).output().context("running apt-cache")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("cannot resolve {meta} (run `apt-get update`?)"))
}

/// Downloaded packages: outside the clone, so CI runs in fresh clones reuse them (a package
/// name includes its version, which keys the cache).
fn package_cache() -> PathBuf {
    PathBuf::from("/var/cache/execprof/packages")
}

/// Downloads and unpacks a Debian package into the cache (never installs it).
pub(crate) fn fetch_package(pkg: &str) -> Result<PathBuf> {
    let dir = package_cache().join(pkg);
    let done = dir.join(".extracted");
    if done.exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let dl = dir.join("deb");
    std::fs::create_dir_all(&dl)?;
    run(Command::new("apt-get").current_dir(&dl).args(["download", "-q", pkg]))?;
    let deb = std::fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| anyhow!("apt-get download {pkg} produced no .deb"))?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir.join("root")))?;
    std::fs::remove_file(&deb)?;
    std::fs::write(&done, "")?;
    Ok(dir)
}

pub(crate) fn vmlinuz(pkg_dir: &Path) -> Result<PathBuf> {
    std::fs::read_dir(pkg_dir.join("root/boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .ok_or_else(|| anyhow!("no vmlinuz in {}", pkg_dir.display()))
}

/// Shared libraries the binary needs, as `ldd` lists them (the loader included).
fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(exe).output().context("running ldd")?;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// The start of every guest's init: busybox, and the filesystems execprof needs.
pub(crate) const INIT_PREAMBLE: &str = r#"#!/bin/busybox sh
B=/bin/busybox
export PATH=/bin
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
$B mount -t tmpfs tmp /tmp
"#;

fn init_script(opts: &VmOptions) -> String {
    format!(
        r#"{INIT_PREAMBLE}echo "EXECPROF-VM-KERNEL $($B uname -r)"
/execprof run --mode auto --sample-hz 4999 --steps {steps} --misses {misses} --json /tmp/out.json --output /tmp/run.execprof > /tmp/report.txt 2>&1
echo "EXECPROF-VM-RC $?"
echo EXECPROF-REPORT-BEGIN
$B cat /tmp/report.txt
echo EXECPROF-REPORT-END
echo EXECPROF-JSON-BEGIN
$B cat /tmp/out.json
echo EXECPROF-JSON-END
echo EXECPROF-RECORDING-BEGIN
$B base64 /tmp/run.execprof
echo EXECPROF-RECORDING-END
$B poweroff -f
"#,
        steps = opts.steps,
        misses = opts.misses
    )
}

fn build_initramfs(execprof: &Path, busybox: &Path, opts: &VmOptions, out: &Path) -> Result<()> {
    initramfs(execprof, busybox, &init_script(opts), out)
}

/// busybox (also as /bin/sh), execprof with the libraries it links, and `init`.
pub(crate) fn initramfs(execprof: &Path, busybox: &Path, init: &str, out: &Path) -> Result<()> {
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
    for lib in shared_libraries(execprof)? {
        let name = lib.to_string_lossy().trim_start_matches('/').to_owned();
        c.file(&name, &std::fs::read(&lib).with_context(|| format!("reading {}", lib.display()))?, 0o755);
    }
    c.file("init", init.as_bytes(), 0o755);
    std::fs::write(out, c.finish())?;
    Ok(())
}

pub(crate) fn between<'a>(text: &'a str, begin: &str, end: &str) -> Option<&'a str> {
    let start = text.find(begin)? + begin.len();
    let stop = text[start..].find(end)? + start;
    Some(text[start..stop].trim_matches(['\r', '\n']))
}

/// One QEMU boot: a kernel, an initramfs, read-only raw disks (in order: vda, vdb, ...).
pub(crate) struct Boot<'a> {
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    pub drives: &'a [PathBuf],
    pub memory_mib: u32,
    pub timeout: Duration,
    /// Kernel command-line parameters beyond the console's.
    pub cmdline: &'a str,
    /// More QEMU arguments.
    pub qemu: &'a [&'a str],
}

/// Boots under TCG and returns everything the serial console printed (also kept in
/// `work/console.log`). QEMU exits 0 even when killed, so callers decide from the output.
pub(crate) fn boot(b: &Boot<'_>, work: &Path) -> Result<String> {
    let started = Instant::now();
    let mut cmd = Command::new(crate::setup::tool("qemu-system-x86_64"));
    // One vCPU: under multi-threaded TCG, the kernel's text patching (static keys flipped by
    // attaching and detaching tracepoints, int3-based text_poke_bp) raced the other vCPU and
    // crashed the 6.12 guest now and then ("Oops: int3" in __schedule, bpf_trace_run2).
    // No network: no guest needs one (and QEMU's default NIC wants an option ROM).
    cmd.args(crate::setup::qemu_firmware_args())
        .args(["-accel", "tcg", "-cpu", "max", "-smp", "1", "-nographic", "-no-reboot", "-nic", "none"])
        .arg("-m")
        .arg(b.memory_mib.to_string())
        .arg("-kernel")
        .arg(b.kernel)
        .arg("-initrd")
        .arg(b.initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 panic=-1 quiet loglevel=3 {}", b.cmdline))
        .args(b.qemu);
    for d in b.drives {
        cmd.arg("-drive").arg(format!("file={},format=raw,if=virtio,readonly=on", d.display()));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64 (is qemu-system-x86 installed? `cargo xtask setup` installs it)")?;
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

pub fn run_guest(label: &str, meta: &str, execprof: &Path, opts: &VmOptions) -> Result<GuestRun> {
    let package = resolve_package(meta)?;
    let kernel = vmlinuz(&fetch_package(&package)?)?;
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    let work = cache_dir().join(format!("guest-{label}"));
    std::fs::create_dir_all(&work)?;
    let initrd = work.join("initramfs.cpio");
    build_initramfs(execprof, &busybox, opts, &initrd)?;

    let console = boot(
        &Boot { kernel: &kernel, initrd: &initrd, drives: &[], memory_mib: 1024, timeout: opts.timeout, cmdline: "", qemu: &[] },
        &work,
    )?;
    eprintln!("xtask: guest {label} ({package}) done");
    let rc = between(&console, "EXECPROF-VM-RC ", "\n").map(|s| s.trim().to_owned());
    if rc.as_deref() != Some("0") {
        bail!(
            "guest {label}: execprof did not succeed (exit {rc:?}, timeout {:?}); console in {}",
            opts.timeout,
            work.join("console.log").display()
        );
    }
    let report = between(&console, "EXECPROF-REPORT-BEGIN", "EXECPROF-REPORT-END").unwrap_or_default().replace('\r', "");
    let json_text =
        between(&console, "EXECPROF-JSON-BEGIN", "EXECPROF-JSON-END").ok_or_else(|| anyhow!("guest {label}: no JSON on the console"))?;
    let json: serde_json::Value =
        serde_json::from_str(&json_text.replace('\r', "")).with_context(|| format!("guest {label}: JSON does not parse"))?;
    std::fs::write(work.join("report.txt"), &report)?;
    std::fs::write(work.join("run.json"), serde_json::to_string_pretty(&json)?)?;
    let encoded = between(&console, "EXECPROF-RECORDING-BEGIN", "EXECPROF-RECORDING-END")
        .ok_or_else(|| anyhow!("guest {label}: no recording on the console"))?
        .replace(['\r', '\n'], "");
    let recording = work.join("run.execprof");
    std::fs::write(&recording, base64_decode(&encoded).with_context(|| format!("guest {label}: the recording's base64"))?)?;
    Ok(GuestRun { kernel: label.to_owned(), package, report, json, recording })
}

/// Standard base64 (RFC 4648, padded), as busybox writes it.
pub(crate) fn base64_decode(text: &str) -> Result<Vec<u8>> {
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

/// What must hold in a guest. Returns the checks that failed (empty: all passed).
pub fn check_guest(run: &GuestRun, opts: &VmOptions) -> Vec<String> {
    let mut failed = Vec::new();
    let v = &run.json;
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{}: {what}", run.kernel));
        }
    };
    let mode = v["mode"]["functions_mode"].as_str().unwrap_or("");
    check(mode.starts_with("exact"), format!("auto mode chose exact mode (got {mode:?})"));
    let outcome = |name: &str| {
        v["analysis"]["outcomes"].as_array().and_then(|a| a.iter().find(|o| o["outcome"] == name)).cloned().unwrap_or_default()
    };
    let (steps, misses) = (u64::from(opts.steps), u64::from(opts.misses));
    check(
        outcome("enoent")["count"] == steps * misses,
        format!("ENOENT attempts = {} (want {})", outcome("enoent")["count"], steps * misses),
    );
    check(outcome("success")["count"] == steps + 1, format!("successful execs = {} (want {})", outcome("success")["count"], steps + 1));
    let lost: u64 = v["losses"].as_array().map_or(0, |a| a.iter().filter_map(|p| p[1].as_u64()).sum());
    check(lost == 0, format!("{lost} events lost"));

    let exact_enoent = v["analysis"]["exact"]["outcomes"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["outcome"] == "enoent"))
        .cloned()
        .unwrap_or_default();
    let calls = |f: &str| {
        exact_enoent["functions"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["function"] == f))
            .and_then(|x| x["calls_per_attempt"].as_f64())
            .unwrap_or(0.0)
    };
    let faults = outcome("enoent")["minor_faults_per_attempt"].as_f64().unwrap_or(f64::NAN);
    // An absence only means something for a function that was probed.
    let probed = |f: &str| v["exact_plan"]["functions"].as_array().is_some_and(|a| a.iter().any(|x| x["function"] == f));
    for f in ["do_open_execat", "mm_alloc", "copy_strings"] {
        check(probed(f), format!("{f} is probed (it is a symbol on this kernel)"));
    }
    // Both guest kernels have BPF trampolines: a function whose name has BTF (no compiler
    // suffix, not present twice) is timed by fentry/fexit; the others by kprobes.
    for f in v["exact_plan"]["functions"].as_array().into_iter().flatten() {
        let btf_name = f["function"] == f["raw_name"] && f["by_address"] == false;
        let want = if btf_name { "fentry" } else { "kprobe" };
        check(f["mechanism"] == want, format!("{} ({}) timed by {} (want {want})", f["function"], f["raw_name"], f["mechanism"]));
    }
    check(calls("do_open_execat") >= 0.99, format!("do_open_execat runs in every failed attempt ({:.2}/attempt)", calls("do_open_execat")));
    // 6.8 moved the open before the mm set-up and the argument copying.
    let version: Vec<u32> = run.kernel.split('.').filter_map(|x| x.parse().ok()).collect();
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
    let agreement =
        v["analysis"]["agreement"].as_array().and_then(|a| a.iter().find(|o| o["outcome"] == "success")).cloned().unwrap_or_default();
    let mut large = 0;
    for p in agreement["phases"].as_array().into_iter().flatten() {
        let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
        if f("sampled_share") < 0.2 {
            continue;
        }
        large += 1;
        let (lo, hi) = (f("sampled_low") - 0.05, f("sampled_high") + 0.05);
        check(
            (lo..=hi).contains(&f("exact_share")),
            format!("{} share: exact {:.3} within the sampled 95% interval ±0.05 [{lo:.3}, {hi:.3}]", p["phase"], f("exact_share")),
        );
    }
    check(large > 0, "no large phase to compare exact and sampled shares on".into());
    failed
}

/// The 6.8 reordering seen by `execprof diff` of the two guests' recordings: 6.1's failed
/// lookups set up an mm and copied the arguments, 6.12's do not. Prints the diff (kept in
/// target/vm/diff-6.1-6.12.{txt,json}) and returns the checks that failed.
pub fn reordering_diff(execprof: &Path, old: &GuestRun, new: &GuestRun) -> Result<Vec<String>> {
    let json = cache_dir().join(format!("diff-{}-{}.json", old.kernel, new.kernel));
    let out = Command::new(execprof).arg("diff").arg(&old.recording).arg(&new.recording).arg("--json").arg(&json).output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(cache_dir().join(format!("diff-{}-{}.txt", old.kernel, new.kernel)), &text)?;
    eprintln!("xtask: execprof diff {} {}:\n{text}", old.kernel, new.kernel);
    if !out.status.success() {
        bail!("execprof diff of the guest recordings failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    let mut failed = Vec::new();
    for f in ["mm_alloc", "copy_strings"] {
        let line = v["lines"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["outcome"] == "enoent" && l["source"] == "exact" && l["kind"] == "function_inclusive" && l["name"] == f);
        let ok = line.is_some_and(|l| {
            l["a"]["value"].as_f64() > Some(0.0)
                && l["b"]["value"].as_f64() == Some(0.0)
                && l["change"]["high"].as_f64() < Some(0.0)
                && l["significant"] == true
        });
        if !ok {
            failed.push(format!(
                "diff {} → {}: {f} in failed attempts should drop to 0, significantly (line: {})",
                old.kernel,
                new.kernel,
                line.map_or("missing".into(), |l| l.to_string())
            ));
        }
    }
    Ok(failed)
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
