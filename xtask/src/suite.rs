//! The whole test suite (unprivileged and root tests) inside each guest kernel, so that what
//! the README promises is checked on a stock Debian 12 kernel (6.1) and on 6.12, not only on
//! this machine's 6.18.
//!
//! The guest's root file system is an overlay: on top, the repository's test binaries, the
//! execprof binary and the data files the tests read, at the same absolute paths as here (a
//! small ext4 image); below, this machine's userland (`/usr`, `/etc`: the shell, python3, the
//! C compilers the tests use; a large ext4 image cached outside the clone, keyed by the
//! installed packages); a tmpfs takes the writes. The initramfs only loads the virtio block and
//! overlay modules from the kernel package, mounts that, and runs every test binary in a
//! chroot with `--include-ignored`, one test thread, its package directory as the working
//! directory, as `cargo test` would.
use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{cpio::Cpio, run, vm};

/// Bumped when what goes into the userland image changes.
const USERLAND_RECIPE: u32 = 2;
/// What of this machine's userland the tests need (the rest of `/usr` is left out: the image
/// is ~1.5 GB as it is).
const USERLAND: &[&str] = &[
    "usr/bin",
    "usr/sbin",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib/python3",
    "usr/lib/python3.11",
    "usr/include",
    "usr/lib/gcc",
    "usr/libexec",
    "usr/lib/musl",
    "usr/lib/x86_64-linux-musl",
    "usr/lib/ld-musl-x86_64.so.1",
    "usr/lib/locale",
    "etc",
];
/// Modules to load where the kernel has them as modules (built-in ones are absent from the
/// package and skipped); loaded in the order their `depends=` lines require.
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko",
    "drivers/virtio/virtio_pci.ko",
    "drivers/block/virtio_blk.ko",
    "fs/overlayfs/overlay.ko",
];
/// TCG runs a guest this many times slower than this machine (measured: ~30×): the tests
/// scale their few wall-clock limits by it (`EXECPROF_TEST_SLOWDOWN`).
const SLOWDOWN: u32 = 40;

/// Outside the clone, so CI runs reuse it.
fn cache_root() -> PathBuf {
    PathBuf::from("/var/cache/execprof")
}

/// A test executable and the directory `cargo test` runs it in.
pub struct TestBinary {
    pub exe: PathBuf,
    pub dir: PathBuf,
}

/// Builds the test binaries and lists them (cargo's JSON messages name each executable).
pub fn test_binaries() -> Result<Vec<TestBinary>> {
    let out = Command::new("cargo")
        .args(["test", "--release", "--no-run", "--message-format=json-render-diagnostics"])
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the tests failed");
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
    Ok(bins)
}

/// The ext4 image of this machine's userland, built once per set of installed packages.
fn userland_image() -> Result<PathBuf> {
    let packages = Command::new("dpkg-query").args(["-W", "-f", "${Package} ${Version}\n"]).output().context("running dpkg-query")?;
    let mut h = DefaultHasher::new();
    (USERLAND_RECIPE, USERLAND, &packages.stdout).hash(&mut h);
    let dir = cache_root().join("guest-userland");
    let image = dir.join(format!("{:016x}.img", h.finish()));
    if image.exists() {
        return Ok(image);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {} (run as root)", dir.display()))?;
    // Older images are from other package sets: they only take room.
    for old in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
        let _ = std::fs::remove_file(old.path());
    }
    let stage = dir.join("stage");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(stage.join("usr/lib"))?;
    eprintln!("xtask: building the guests' userland image (once per set of installed packages)");
    for part in USERLAND {
        let from = Path::new("/").join(part);
        if !from.exists() {
            continue;
        }
        let to = stage.join(part);
        std::fs::create_dir_all(to.parent().unwrap_or(&stage))?;
        // Hard links where the cache is on the same file system (fast), copies where not.
        let linked = Command::new("cp").arg("-al").arg(&from).arg(&to).status().is_ok_and(|s| s.success());
        if !linked {
            let _ = std::fs::remove_dir_all(&to);
            run(Command::new("cp").arg("-a").arg(&from).arg(&to))?;
        }
    }
    for (link, target) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(target, stage.join(link))?;
    }
    for d in ["proc", "sys", "dev", "tmp", "run", "root", "var/tmp"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    let partial = image.with_extension("partial");
    make_ext4(&stage, &partial)?;
    std::fs::rename(&partial, &image)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(image)
}

/// An ext4 image holding `dir` (mke2fs -d: no mounting needed).
fn make_ext4(dir: &Path, image: &Path) -> Result<()> {
    let du = Command::new("du").args(["-sm"]).arg(dir).output().context("running du")?;
    let mib: u64 = String::from_utf8_lossy(&du.stdout).split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(1024);
    let _ = std::fs::remove_file(image);
    run(Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-O", "^has_journal", "-E", "root_owner=0:0", "-d"])
        .arg(dir)
        .arg(image)
        .arg(format!("{}M", mib + mib / 4 + 64)))
}

/// The repository's files the tests use, at their absolute paths, in a small image: the test
/// binaries and execprof without debug info, the fixtures, the snapshots, the seed's `t.c`.
fn repo_image(bins: &[TestBinary], work: &Path) -> Result<PathBuf> {
    let stage = work.join("repo-stage");
    let _ = std::fs::remove_dir_all(&stage);
    let root = std::env::current_dir()?;
    let place = |from: &Path| -> Result<PathBuf> {
        let to = stage.join(from.strip_prefix("/").unwrap_or(from));
        std::fs::create_dir_all(to.parent().unwrap_or(&stage))?;
        Ok(to)
    };
    let mut exes: Vec<PathBuf> = bins.iter().map(|b| b.exe.clone()).collect();
    exes.push(root.join("target/release/execprof"));
    for exe in exes {
        let to = place(&exe)?;
        run(Command::new("objcopy").arg("--strip-debug").arg(&exe).arg(&to))?;
    }
    // Each test runs in its package's directory, as under cargo.
    for b in bins {
        std::fs::create_dir_all(stage.join(b.dir.strip_prefix("/").unwrap_or(&b.dir)))?;
    }
    for data in ["profiler/tests/fixtures", "profiler/src/snapshots", "benches/seed", "README.md"] {
        let from = root.join(data);
        let to = place(&from)?;
        run(Command::new("cp").arg("-a").arg(&from).arg(&to))?;
    }
    let image = work.join("repo.img");
    make_ext4(&stage, &image)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(image)
}

/// The modules of [`MODULES`] this kernel package has, uncompressed (busybox's insmod takes
/// plain objects), numbered in an order that loads each after the modules it depends on.
fn modules(pkg_dir: &Path, cpio: &mut Cpio) -> Result<()> {
    let lib = pkg_dir.join("root/lib/modules");
    let version = std::fs::read_dir(&lib)?.filter_map(|e| e.ok()).next().ok_or_else(|| anyhow!("no modules in {}", lib.display()))?;
    let base = version.path().join("kernel");
    let mut found: Vec<(String, Vec<String>, Vec<u8>)> = Vec::new();
    for m in MODULES {
        let plain = base.join(m);
        let xz = base.join(format!("{m}.xz"));
        let bytes = if plain.exists() {
            std::fs::read(&plain)?
        } else if xz.exists() {
            let out = Command::new("xz").arg("-dc").arg(&xz).output().context("running xz")?;
            if !out.status.success() {
                bail!("xz could not decompress {}", xz.display());
            }
            out.stdout
        } else {
            continue;
        };
        let name = Path::new(m).file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        found.push((name, depends(&bytes), bytes));
    }
    cpio.dir("modules");
    let mut loaded: Vec<String> = Vec::new();
    while !found.is_empty() {
        let ready = found
            .iter()
            .position(|(_, deps, _)| deps.iter().all(|d| loaded.contains(d) || !MODULES.iter().any(|m| m.ends_with(&format!("/{d}.ko")))));
        let Some(i) = ready else { bail!("module dependencies form a cycle: {:?}", found.iter().map(|f| &f.0).collect::<Vec<_>>()) };
        let (name, _, bytes) = found.remove(i);
        cpio.file(&format!("modules/{:02}-{name}.ko", loaded.len()), &bytes, 0o644);
        loaded.push(name);
    }
    Ok(())
}

/// A module's `depends=` list (from its .modinfo strings).
fn depends(module: &[u8]) -> Vec<String> {
    let key = b"depends=";
    module
        .windows(key.len())
        .position(|w| w == key)
        .map(|at| {
            let rest = &module[at + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).split(',').filter(|d| !d.is_empty()).map(|d| d.replace('-', "_")).collect()
        })
        .unwrap_or_default()
}

fn init_script() -> &'static str {
    r#"#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in /modules/*.ko; do $B insmod $m || echo "EXECPROF-SUITE-NOTE insmod $m failed"; done
$B mkdir -p /userland /repo /rw /newroot
$B mount -t ext4 -o ro /dev/vda /userland || echo "EXECPROF-SUITE-NOTE no userland disk"
$B mount -t ext4 -o ro /dev/vdb /repo || echo "EXECPROF-SUITE-NOTE no repository disk"
$B mount -t tmpfs -o size=3g rw /rw
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/repo:/userland,upperdir=/rw/upper,workdir=/rw/work /newroot || echo "EXECPROF-SUITE-NOTE overlay failed"
$B mount -t proc proc /newroot/proc
$B mount -t sysfs sys /newroot/sys
$B mount -t devtmpfs dev /newroot/dev
$B cp /suite.sh /newroot/suite.sh
echo "EXECPROF-SUITE-KERNEL $($B uname -r)"
$B chroot /newroot /bin/sh /suite.sh
$B poweroff -f
"#
}

fn suite_script(bins: &[TestBinary], root: &Path) -> String {
    // insta finds the snapshots from the workspace root, which it asks cargo for otherwise.
    let mut s = format!(
        "export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root CI=true INSTA_UPDATE=no INSTA_WORKSPACE_ROOT={} EXECPROF_TEST_SLOWDOWN={SLOWDOWN}\n",
        root.display()
    );
    for b in bins {
        let (exe, dir) = (b.exe.display(), b.dir.display());
        s += &format!(
            "echo \"EXECPROF-SUITE-BEGIN {exe}\"\ncd {dir} && {exe} --include-ignored --test-threads=1 2>&1\necho \"EXECPROF-SUITE-RC $? {exe}\"\n"
        );
    }
    s + "echo EXECPROF-SUITE-DONE\n"
}

/// What one guest's run of the suite gave.
pub struct SuiteRun {
    pub kernel: String,
    /// Per test binary: its path and exit code (None: it never finished).
    pub results: Vec<(PathBuf, Option<i32>)>,
    pub console: PathBuf,
}

impl SuiteRun {
    pub fn failures(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|(_, rc)| *rc != Some(0))
            .map(|(exe, rc)| match rc {
                Some(rc) => format!("{}: {} failed with exit code {rc}", self.kernel, exe.display()),
                None => format!("{}: {} did not finish", self.kernel, exe.display()),
            })
            .collect()
    }
}

pub fn run_suite(label: &str, meta: &str, bins: &[TestBinary], timeout: Duration) -> Result<SuiteRun> {
    let package = vm::resolve_package(meta)?;
    let pkg_dir = vm::fetch_package(&package)?;
    let kernel = vm::vmlinuz(&pkg_dir)?;
    let busybox = vm::fetch_package("busybox-static")?.join("root/bin/busybox");
    let work = vm::cache_dir().join(format!("suite-{label}"));
    std::fs::create_dir_all(&work)?;
    let userland = userland_image()?;
    let repo = repo_image(bins, &work)?;
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "sys"] {
        c.dir(d);
    }
    c.char_device("dev/console", 5, 1);
    c.file("bin/busybox", &std::fs::read(&busybox)?, 0o755);
    modules(&pkg_dir, &mut c)?;
    c.file("init", init_script().as_bytes(), 0o755);
    c.file("suite.sh", suite_script(bins, &std::env::current_dir()?).as_bytes(), 0o755);
    let initrd = work.join("initramfs.cpio");
    std::fs::write(&initrd, c.finish())?;
    eprintln!("xtask: the whole test suite inside {label} ({package}); TCG is slow, this takes many minutes");
    let console = vm::boot(
        &vm::Boot {
            kernel: &kernel,
            initrd: &initrd,
            drives: &[userland, repo],
            results: None,
            memory_mib: 6144,
            timeout,
            cmdline: "",
            qemu: &[],
        },
        &work,
    )?;
    for note in console.lines().filter(|l| l.starts_with("EXECPROF-SUITE-NOTE")) {
        eprintln!("xtask: guest {label}: {note}");
    }
    let results = bins
        .iter()
        .map(|b| {
            let marker = "EXECPROF-SUITE-RC ";
            let rc = console.lines().filter_map(|l| l.trim_end_matches('\r').strip_prefix(marker)).find_map(|rest| {
                let (code, exe) = rest.split_once(' ')?;
                (Path::new(exe) == b.exe).then(|| code.parse().ok()).flatten()
            });
            (b.exe.clone(), rc)
        })
        .collect();
    Ok(SuiteRun { kernel: label.to_owned(), results, console: work.join("console.log") })
}
