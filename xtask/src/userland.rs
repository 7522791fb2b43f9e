//! The guests' userlands: the root file systems vm-suite's tests (and the overhead bench's
//! peers) run in, as read-only ext4 images cached outside the clone.
//!
//! - x86_64: this machine's own userland (`/usr`, `/etc`: the shell, python3, the C compilers
//!   with gcc-multilib's 32-bit libraries), keyed by the installed packages.
//! - arm64: Debian 12's arm64 packages, the same tools (dash, coreutils, util-linux, procps,
//!   python3, gcc with musl-tools, and the armhf cross gcc for the AArch32 test programs),
//!   their dependencies resolved by apt against an empty package status (this machine's
//!   packages are neither read nor touched), downloaded into the cache and unpacked into a
//!   merged-/usr tree (no maintainer scripts: the few links and files those would make are
//!   made here); keyed by the packages apt resolved.
use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::{run, vm::Arch};

/// The userland image for guests of `arch`.
pub(crate) fn image(arch: Arch) -> Result<PathBuf> {
    match arch {
        Arch::X86_64 => host_image(),
        Arch::Arm64 => debian_image(arch),
    }
}

/// Bumped when what goes into the userland image changes.
const HOST_RECIPE: u32 = 3;
/// What of this machine's userland the tests need (the rest of `/usr` is left out: the image
/// is ~1.5 GB as it is).
const HOST_PARTS: &[&str] = &[
    "usr/bin",
    "usr/sbin",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    // gcc-multilib's 32-bit and x32 C libraries: the ia32 and x32 tests build their programs
    // with gcc -m32/-mx32 inside the guest.
    "usr/lib32",
    "usr/libx32",
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

/// Outside the clone, so CI runs reuse it.
pub(crate) fn cache_root() -> PathBuf {
    PathBuf::from("/var/cache/execprof")
}

/// The ext4 image of this machine's userland, built once per set of installed packages.
fn host_image() -> Result<PathBuf> {
    let packages = Command::new("dpkg-query").args(["-W", "-f", "${Package} ${Version}\n"]).output().context("running dpkg-query")?;
    let mut h = DefaultHasher::new();
    (HOST_RECIPE, HOST_PARTS, &packages.stdout).hash(&mut h);
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
    for part in HOST_PARTS {
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
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("lib32", "usr/lib32"),
        ("libx32", "usr/libx32"),
    ] {
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
pub(crate) fn make_ext4(dir: &Path, image: &Path) -> Result<()> {
    let du = Command::new("du").args(["-sm"]).arg(dir).output().context("running du")?;
    let mib: u64 = String::from_utf8_lossy(&du.stdout).split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(1024);
    let _ = std::fs::remove_file(image);
    run(Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-O", "^has_journal", "-E", "root_owner=0:0", "-d"])
        .arg(dir)
        .arg(image)
        .arg(format!("{}M", mib + mib / 4 + 64)))
}

/// Bumped when what goes into a Debian userland image changes.
const DEBIAN_RECIPE: u32 = 1;
/// The packages a Debian userland is made of (their dependencies come with them): what the
/// suite's tests run (`sh`, `true`, `sleep`, `setpriv`, `setsid`, `unshare`, `mount`, `pgrep`,
/// python3), build with (`cc`/`gcc`, `musl-gcc`, `objcopy`, `strip`; on arm64 the armhf cross
/// gcc, for the AArch32 programs), and the user database `setpriv --reuid=65534` needs.
const DEBIAN_PACKAGES: &[&str] = &[
    "base-files",
    "base-passwd",
    "bash",
    "dash",
    "coreutils",
    "util-linux",
    "mount",
    "procps",
    "grep",
    "sed",
    "mawk",
    "findutils",
    "diffutils",
    "debianutils",
    "python3",
    "gcc",
    "libc6-dev",
    "binutils",
    "musl-tools",
    // `execprof top`'s test runs it in a terminal.
    "tmux",
];
/// What only an arm64 userland adds: the AArch32 (armhf) cross compiler and its C library.
const ARM64_PACKAGES: &[&str] = &["gcc-arm-linux-gnueabihf", "libc6-dev-armhf-cross"];

/// apt, asked about `arch`'s packages as if nothing were installed (an empty status file), with
/// its own download directory and no package cache of its own, so that this machine's apt state
/// is not touched.
fn foreign_apt(arch: Arch, dir: &Path) -> Result<Command> {
    let status = dir.join("empty-status");
    let archives = dir.join("debs");
    std::fs::create_dir_all(archives.join("partial"))?;
    if !status.exists() {
        std::fs::write(&status, "")?;
    }
    let mut cmd = Command::new("apt-get");
    cmd.args([
        "-q",
        "-y",
        "--no-install-recommends",
        "-o",
        "Debug::NoLocking=1",
        "-o",
        "Dir::Cache::pkgcache=",
        "-o",
        "Dir::Cache::srcpkgcache=",
    ])
    .arg("-o")
    .arg(format!("Dir::State::status={}", status.display()))
    .arg("-o")
    .arg(format!("Dir::Cache::archives={}", archives.display()))
    .arg("-o")
    .arg(format!("APT::Architecture={}", arch.debian()))
    .arg("-o")
    .arg(format!("APT::Architectures={}", arch.debian()));
    Ok(cmd)
}

/// One package apt would install: `Inst NAME (VERSION ...) ...` of `apt-get -s install`, with
/// the `.deb`'s file name apt gives it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Planned {
    name: String,
    version: String,
    arch: String,
}

impl Planned {
    /// The file apt downloads it as: `NAME_VERSION_ARCH.deb`, an epoch's colon as `%3a`.
    fn deb(&self) -> String {
        format!("{}_{}_{}.deb", self.name, self.version.replace(':', "%3a"), self.arch)
    }
}

/// The `Inst` lines of an apt simulation: `Inst libc6 (2.36-9+deb12u13 Debian:12.13/oldstable [arm64])`.
fn parse_plan(text: &str) -> Vec<Planned> {
    text.lines()
        .filter_map(|l| l.strip_prefix("Inst "))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once(" (")?;
            let (version, rest) = rest.split_once(' ')?;
            // `RELEASES [ARCH])`, then apt's list of packages it breaks (`[]`).
            let (inside, _) = rest.split_once(')')?;
            let arch = inside.rsplit_once('[')?.1.split_once(']')?.0;
            let name = name.split(':').next().unwrap_or(name);
            Some(Planned { name: name.to_owned(), version: version.to_owned(), arch: arch.to_owned() })
        })
        .collect()
}

/// The ext4 image of a Debian userland of `arch`, built once per set of resolved packages.
fn debian_image(arch: Arch) -> Result<PathBuf> {
    let dir = cache_root().join(format!("guest-userland-{}", arch.debian()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {} (run as root)", dir.display()))?;
    let mut pkgs: Vec<&str> = DEBIAN_PACKAGES.to_vec();
    if arch == Arch::Arm64 {
        pkgs.extend_from_slice(ARM64_PACKAGES);
    }
    let out =
        foreign_apt(arch, &dir)?.arg("-s").arg("install").args(&pkgs).stderr(Stdio::inherit()).output().context("running apt-get -s")?;
    if !out.status.success() {
        bail!(
            "apt cannot resolve the {} userland's packages (is dpkg's {} architecture added and `apt-get update` run? `cargo xtask setup` does both)",
            arch.debian(),
            arch.debian()
        );
    }
    let plan = parse_plan(&String::from_utf8_lossy(&out.stdout));
    if plan.len() < pkgs.len() {
        bail!("apt planned {} packages for the {} userland's {}: {plan:?}", plan.len(), arch.debian(), pkgs.len());
    }
    let mut h = DefaultHasher::new();
    (DEBIAN_RECIPE, &plan).hash(&mut h);
    let image = dir.join(format!("{:016x}.img", h.finish()));
    if image.exists() {
        return Ok(image);
    }
    eprintln!(
        "xtask: building the {} guests' userland image from {} Debian packages (once per set of packages)",
        arch.debian(),
        plan.len()
    );
    run(foreign_apt(arch, &dir)?.arg("--download-only").arg("install").args(&pkgs))
        .with_context(|| format!("downloading the {} userland's packages", arch.debian()))?;
    for old in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()).filter(|e| e.path().extension().is_some_and(|x| x == "img")) {
        let _ = std::fs::remove_file(old.path());
    }
    let stage = dir.join("stage");
    let _ = std::fs::remove_dir_all(&stage);
    // Debian 12's merged /usr: /bin, /sbin and /lib are links into /usr, kept as links while
    // the packages' trees are unpacked over them.
    for d in ["usr/bin", "usr/sbin", "usr/lib"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    for (link, target) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")] {
        std::os::unix::fs::symlink(target, stage.join(link))?;
    }
    let debs = dir.join("debs");
    for p in &plan {
        let deb = debs.join(p.deb());
        if !deb.exists() {
            bail!("apt downloaded no {} for {} {}", deb.display(), p.name, p.version);
        }
        let script = format!("dpkg-deb --fsys-tarfile '{}' | tar -x --keep-directory-symlink -C '{}'", deb.display(), stage.display());
        run(Command::new("sh").arg("-c").arg(script)).with_context(|| format!("unpacking {}", deb.display()))?;
    }
    finish_debian_tree(&stage)?;
    let partial = image.with_extension("partial");
    make_ext4(&stage, &partial)?;
    std::fs::rename(&partial, &image)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(image)
}

/// What the packages' maintainer scripts would have made: the alternatives' links the tests
/// call by name (`cc`, `awk`), `/bin/sh`, the user database from base-passwd's masters, and
/// the mount points.
fn finish_debian_tree(stage: &Path) -> Result<()> {
    let link = |target: &str, at: &str| -> Result<()> {
        let at = stage.join(at);
        if at.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(target, &at).with_context(|| format!("linking {}", at.display()))?;
        }
        Ok(())
    };
    link("gcc", "usr/bin/cc")?;
    link("mawk", "usr/bin/awk")?;
    link("dash", "usr/bin/sh")?;
    for (master, to) in [("passwd.master", "etc/passwd"), ("group.master", "etc/group")] {
        let from = stage.join("usr/share/base-passwd").join(master);
        std::fs::copy(&from, stage.join(to)).with_context(|| format!("copying {}", from.display()))?;
    }
    for d in ["proc", "sys", "dev", "tmp", "run", "root", "var/tmp"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    for must in ["usr/bin/sh", "usr/bin/true", "usr/bin/python3", "usr/bin/gcc", "usr/bin/musl-gcc", "usr/bin/setpriv"] {
        if stage.join(must).symlink_metadata().is_err() {
            bail!("the Debian userland has no /{must}: a package of it is missing");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_simulation_lines_name_the_packages_and_their_files() {
        let text = "NOTE: This is only a simulation!\n\
                    Inst libc6 (2.36-9+deb12u13 Debian:12.13/oldstable [arm64])\n\
                    Inst python3.11-minimal:arm64 (3.11.2-6+deb12u6 Debian-Security:12/oldstable-security [arm64]) []\n\
                    Inst libc6-dev-armhf-cross (2.36-8cross1 Debian:12.13/oldstable [all])\n\
                    Inst login (1:4.13+dfsg1-1+deb12u1 Debian:12.13/oldstable [arm64])\n\
                    Conf libc6 (2.36-9+deb12u13 Debian:12.13/oldstable [arm64])\n";
        let plan = parse_plan(text);
        let debs: Vec<String> = plan.iter().map(Planned::deb).collect();
        assert_eq!(
            debs,
            [
                "libc6_2.36-9+deb12u13_arm64.deb",
                "python3.11-minimal_3.11.2-6+deb12u6_arm64.deb",
                "libc6-dev-armhf-cross_2.36-8cross1_all.deb",
                "login_1%3a4.13+dfsg1-1+deb12u1_arm64.deb"
            ]
        );
    }
}
