//! The fast-path lab's guest kernel: Debian's `linux-source-6.12` with
//! `kernel/exec-lookup-strategy.patch`, configured from `make tinyconfig` plus
//! `kernel/qemu.config`, built once and cached outside the clone under
//! `/var/cache/execprof/kernels/<key>/bzImage`, keyed by the source tarball's, the patch's and
//! the config fragment's SHA-256 (so CI runs in fresh clones reuse it).
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{run, vm::fetch_package};

pub const SOURCE_PACKAGE: &str = "linux-source-6.12";
const PATCH: &str = "kernel/exec-lookup-strategy.patch";
const CONFIG: &str = "kernel/qemu.config";
/// Options without which the lab cannot run: a build that lost one fails.
const ESSENTIAL: &[&str] = &[
    "CONFIG_BPF_SYSCALL",
    "CONFIG_DEBUG_INFO_BTF",
    "CONFIG_KPROBES",
    "CONFIG_FTRACE_SYSCALLS",
    "CONFIG_PERF_EVENTS",
    "CONFIG_MEMCG",
    "CONFIG_BINFMT_ELF",
    "CONFIG_SYSCTL",
    "CONFIG_HIGH_RES_TIMERS",
    "CONFIG_SECURITY_APPARMOR",
    "CONFIG_SMP",
];

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().map(|h| h[..16].to_owned()).ok_or_else(|| anyhow!("sha256sum printed nothing for {}", path.display()))
}

/// The patched kernel's bzImage, built if it is not cached yet.
pub fn patched_kernel() -> Result<PathBuf> {
    let pkg = fetch_package(SOURCE_PACKAGE)?;
    let tarball = std::fs::read_dir(pkg.join("root/usr/src"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.xz"))
        .ok_or_else(|| anyhow!("{SOURCE_PACKAGE} holds no source tarball under usr/src"))?;
    let (patch, config) = (Path::new(PATCH).canonicalize()?, Path::new(CONFIG).canonicalize()?);
    let key = format!("{}-{}-{}", sha256(&tarball)?, sha256(&patch)?, sha256(&config)?);
    let dir = PathBuf::from("/var/cache/execprof/kernels").join(&key);
    let image = dir.join("bzImage");
    if image.exists() {
        eprintln!("xtask: patched kernel cached: {}", image.display());
        return Ok(image);
    }
    let started = Instant::now();
    let build = dir.join("build");
    if build.exists() {
        std::fs::remove_dir_all(&build)?;
    }
    std::fs::create_dir_all(&build)?;
    eprintln!("xtask: building the patched 6.12 kernel in {} (once; cached by source, patch and config)", build.display());
    run(Command::new("tar").arg("-xJf").arg(&tarball).arg("-C").arg(&build).arg("--strip-components=1"))?;
    run(Command::new("patch").args(["-p1", "--quiet", "-i"]).arg(&patch).current_dir(&build))?;
    let make = |args: &[&str]| {
        let mut c = Command::new("make");
        c.args(args).current_dir(&build).stdin(Stdio::null());
        c
    };
    run(&mut make(&["tinyconfig"]))?;
    run(Command::new("scripts/kconfig/merge_config.sh").args(["-m", ".config"]).arg(&config).current_dir(&build).stdin(Stdio::null()))?;
    run(&mut make(&["olddefconfig"]))?;
    let got = std::fs::read_to_string(build.join(".config"))?;
    let wanted = std::fs::read_to_string(&config)?;
    let lost: Vec<&str> = wanted
        .lines()
        .filter_map(|l| l.strip_suffix("=y"))
        .filter(|l| !l.starts_with('#'))
        .filter(|opt| !got.lines().any(|g| g == format!("{opt}=y")))
        .collect();
    let unwanted: Vec<&str> = wanted
        .lines()
        .filter_map(|l| l.strip_prefix("# ")?.strip_suffix(" is not set"))
        .filter(|opt| got.lines().any(|g| g == format!("{opt}=y")))
        .collect();
    if !unwanted.is_empty() {
        bail!("the guest kernel config kept {unwanted:?}, which {CONFIG} turns off (selected by another option?); fix {CONFIG}");
    }
    if !lost.is_empty() {
        eprintln!("xtask: not set after olddefconfig (a dependency missing on this arch/config): {}", lost.join(", "));
    }
    let essential_lost: Vec<&&str> = ESSENTIAL.iter().filter(|o| lost.contains(o)).collect();
    if !essential_lost.is_empty() {
        bail!("the guest kernel config lost {essential_lost:?}; fix {CONFIG}");
    }
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
    run(&mut make(&["-j", &jobs, "bzImage"]))?;
    std::fs::copy(build.join("arch/x86/boot/bzImage"), &image)?;
    std::fs::copy(build.join(".config"), dir.join("config"))?;
    std::fs::remove_dir_all(&build)?;
    eprintln!("xtask: patched kernel built in {:.0} s: {}", started.elapsed().as_secs_f64(), image.display());
    Ok(image)
}
