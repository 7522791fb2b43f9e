//! Installing what building and testing execprof need, without ever removing a package.
//!
//! Two sets: what building and running the profiler needs (`cargo xtask run`), and what the
//! tests add (QEMU for the guests, the lab kernel's build tools). Every step checks before it
//! acts, so a second run on a ready machine does nothing and takes well under a second.
//!
//! apt is asked first what an install would do (`apt-get install -s`). A package whose install
//! would remove one the user has (a fresh machine here ships `qemu-utils` 10 from backports,
//! which breaks Debian 12's `qemu-system-common` 7.2) is not installed: its `.deb` is unpacked
//! under [`UNPACKED`] instead, as the guests' kernels are, and its dependencies that remove
//! nothing are installed as usual. Tools are then looked up with [`crate::unpacked::tool`].
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{run, unpacked::UNPACKED};

/// Debian packages for building and running the profiler: the rustc whose `core` sources match
/// it (for `-Z build-std=core` on the bpfel target), the LLVM that bpf-linker links against, and
/// musl for the built-in chain's static helper programs.
pub(crate) const BUILD_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "libllvm22", "musl-tools"];

/// What the tests add: the guests (QEMU for x86_64 and, for `vm-test --arch arm64`, aarch64; ext4 images, unpacking kernels), 32-bit test programs
/// (`gcc -m32 -static`), and building the lab's kernels.
pub(crate) const TEST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "qemu-system-arm",
    "gcc-multilib",
    "e2fsprogs",
    "binutils",
    "xz-utils",
    "flex",
    "bison",
    "libelf-dev",
    "dwarves",
    "bc",
    // `execprof top`'s test runs it in a terminal.
    "tmux",
    // `go tool pprof` reads the pprof profiles in the tests.
    "golang-go",
    // The virtual environment for Perfetto's published protos ([`PYTHON_READERS`]).
    "python3-venv",
    // `man` reads the generated man pages.
    "man-db",
    // Debian's package checker, run on both packages.
    "lintian",
    // A Debian 11 userland (bullseye's glibc 2.31) the portable binary runs in.
    "debootstrap",
    // The RPMs: rpmbuild packs them, rpmlint checks them, rpm installs one into a scratch root.
    "rpm",
    "rpmlint",
    // The OCI image: buildah builds it, podman (with runc: crun refuses hybrid cgroup hosts)
    // runs the agent from it beside other containers.
    "buildah",
    "podman",
    "runc",
];

/// Where the tests' Python readers live: a virtual environment (not the system's Python) with
/// PyPI's `perfetto`, whose `perfetto_trace_pb2` is Perfetto's own trace format, parsed by
/// PyPI's `protobuf`, offline; and `kubernetes-validate`, which holds the Kubernetes manifests
/// to the API schemas of each release it bundles (1.25 to 1.37), offline. Pinned, so a test
/// reads with the same protos and schemas every time.
pub(crate) const PYTHON_READERS: &str = "/var/cache/execprof/python";
const PYTHON_READER_PACKAGES: &[&str] = &["perfetto==0.59.1", "protobuf==7.36.2", "kubernetes-validate==1.37.0"];

/// Programs the tests run against the real consumers of execprof's formats, unpacked under
/// [`UNPACKED`], never installed: Debian's `prometheus` (with `promtool`) would start a
/// Prometheus server on every interface from its maintainer scripts. Its binaries are static.
/// Debian's `containerd` and `docker.io` would start and enable system services: the image's
/// test runs their `containerd`, `ctr`, `dockerd` and `docker` from here, each with a root,
/// state and socket of the test's own (dockerd on that containerd, with runc, installed).
pub(crate) const UNPACKED_TEST_PACKAGES: &[&str] = &["prometheus", "containerd", "docker.io"];

/// Where the portable builds' linker lives: a virtual environment with PyPI's `cargo-zigbuild`
/// (prebuilt) and `ziglang` (Zig, whose `zig cc` links against the glibc version a target
/// names: `x86_64-unknown-linux-gnu.2.17`). Pinned: the floor is the same every build.
pub(crate) const ZIG: &str = "/var/cache/execprof/zig";
const ZIG_PACKAGES: &[&str] = &["cargo-zigbuild==0.24.1", "ziglang==0.17.1"];

/// What the arm64 cross-build adds (`cargo build --target aarch64-unknown-linux-gnu`): the C
/// cross toolchain whose `aarch64-linux-gnu-gcc` links the profiler and the built-in chain,
/// and the arm64 glibc it links against (only recommended by the compiler). In Debian 12 the
/// compiler conflicts with `gcc-multilib` (the 32-bit test programs'), so there its two
/// packages are unpacked, not installed (`.cargo/aarch64-linux-gnu-gcc` runs that copy); its
/// binutils, cc1, libc and libgcc install as usual.
pub(crate) const CROSS_PACKAGES: &[&str] = &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];

/// The foreign dpkg architecture of the cross-build.
const CROSS_ARCH: &str = "arm64";

/// Debian's std for `aarch64-unknown-linux-gnu`, the same version as rustc-web: its rlibs are
/// all the cross-build needs, at [`CROSS_RUSTLIB`], where rustc-web (sysroot `/usr`) looks.
const CROSS_STD: &str = "libstd-rust-web-dev:arm64";
const CROSS_RUSTLIB: &str = "/usr/lib/rustlib/aarch64-unknown-linux-gnu";

const TOOLCHAIN_NAME: &str = "rustc-web";
const TOOLCHAIN_DIR: &str = "/opt/rustc-web";
const LLVM_PREFIX: &str = "/opt/execprof-llvm22";
const LIBLLVM: &str = "/usr/lib/x86_64-linux-gnu/libLLVM.so.22.1";
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Which set of packages a command needs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Building and running the profiler.
    Build,
    /// Building it for both architectures and packing the Debian packages (the arm64
    /// cross-build; `dpkg-deb`, `gzip` and `readelf` are on every Debian machine).
    Package,
    /// Building, and every test (guests and the lab included).
    Test,
}

/// Everything a command needs, installed once.
pub(crate) fn setup(needs: Needs) -> Result<()> {
    let mut pkgs = BUILD_PACKAGES.to_vec();
    if needs == Needs::Test {
        pkgs.extend_from_slice(TEST_PACKAGES);
    }
    apt_packages(&pkgs)?;
    if needs == Needs::Test {
        for pkg in UNPACKED_TEST_PACKAGES {
            if !stamp(pkg).exists() {
                if !crate::is_root() {
                    bail!("the tests need {pkg}'s programs unpacked under {UNPACKED}; run this as root: cargo xtask setup");
                }
                unpack_deb(pkg)?;
            }
        }
        python_readers()?;
    }
    if needs != Needs::Build {
        cross_build()?;
        zig()?;
    }
    toolchain_link()?;
    bpf_linker()
}

/// [`PYTHON_READERS`], made once.
fn python_readers() -> Result<()> {
    venv(PYTHON_READERS, PYTHON_READER_PACKAGES, "the tests read Perfetto traces with Python packages")
}

/// [`ZIG`], made once.
fn zig() -> Result<()> {
    apt_packages(&["python3-venv"])?;
    venv(ZIG, ZIG_PACKAGES, "the portable builds link with Zig")
}

/// A Python virtual environment at `dir` holding the pinned `packages`, made once: its stamp
/// names them. `why` starts the message when it must be made and this is not root.
fn venv(dir: &str, packages: &[&str], why: &str) -> Result<()> {
    let venv = Path::new(dir);
    let stamp = venv.join(".execprof-packages");
    let want = packages.join(" ");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        return Ok(());
    }
    if !crate::is_root() {
        bail!("{why} in {dir}; run this as root: cargo xtask setup");
    }
    eprintln!("xtask: installing {want} into {dir}");
    run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv))?;
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "--disable-pip-version-check", "--no-input"]).args(packages))?;
    std::fs::write(&stamp, format!("{want}\n")).with_context(|| format!("writing {}", stamp.display()))
}

/// What the arm64 cross-build needs: dpkg's arm64 architecture (for `apt-get`'s arm64 package
/// lists), the cross linker, and the arm64 std. Nothing a user has is removed or upgraded: the
/// std's install would pull the arm64 LLVM its `librustc_driver` needs (not the rlibs), whose
/// multiarch libraries must match the host's versions and upgrade them, so where it would
/// change anything only its rlibs are unpacked and linked into rustc-web's sysroot.
fn cross_build() -> Result<()> {
    apt_packages(CROSS_PACKAGES)?;
    // dpkg's arm64 architecture first: apt finds no arm64 package (the guests' busybox, the
    // std) until it is added and the lists are fetched.
    if !foreign_archs()?.iter().any(|a| a == CROSS_ARCH) {
        if !crate::is_root() {
            bail!("the arm64 cross-build needs dpkg's {CROSS_ARCH} architecture; run this as root: cargo xtask setup");
        }
        eprintln!("xtask: adding dpkg architecture {CROSS_ARCH} (for {CROSS_STD} and the arm64 guests' packages)");
        run(Command::new("dpkg").args(["--add-architecture", CROSS_ARCH]))?;
        run(Command::new("apt-get").args(["update", "-qq"]))?;
    }
    // The arm64 guests' busybox, unpacked beside the kernels (as the host's busybox-static is).
    crate::vm::busybox(crate::vm::Arch::Arm64)?;
    if rustlib_has_std(Path::new(CROSS_RUSTLIB)) {
        return Ok(());
    }
    if !crate::is_root() {
        bail!("the arm64 cross-build's std is missing ({CROSS_RUSTLIB}); run this as root: cargo xtask setup");
    }
    cross_std()
}

/// The arm64 std: installed when that changes no package, else its rlibs unpacked.
fn cross_std() -> Result<()> {
    if !dpkg_installed(CROSS_STD) {
        let plan = simulate(&[CROSS_STD])?;
        if plan.removes.is_empty() && plan.upgrades.is_empty() {
            return apt_install(&[CROSS_STD]);
        }
        eprintln!("xtask: installing {CROSS_STD} would {}; unpacking its rlibs into {UNPACKED} instead", plan.describe_changes());
        if !stamp(CROSS_STD).exists() {
            unpack_deb(CROSS_STD)?;
        }
    }
    let unpacked = Path::new(UNPACKED).join(CROSS_RUSTLIB.trim_start_matches('/'));
    if !rustlib_has_std(&unpacked) {
        bail!("{} has no libstd rlib after unpacking {CROSS_STD}", unpacked.display());
    }
    let link = Path::new(CROSS_RUSTLIB);
    match std::fs::read_link(link) {
        // This set-up's own link, made before the cache was emptied: good again now.
        Ok(to) if to == unpacked => return Ok(()),
        // A link of this set-up's whose target is gone: made again below.
        Ok(to) if to.starts_with(UNPACKED) => std::fs::remove_file(link).with_context(|| format!("removing {CROSS_RUSTLIB}"))?,
        _ if link.symlink_metadata().is_ok() => {
            bail!("{CROSS_RUSTLIB} exists but holds no libstd rlib: remove it, then run this again")
        }
        _ => {}
    }
    std::os::unix::fs::symlink(&unpacked, link).with_context(|| format!("linking {CROSS_RUSTLIB} to {}", unpacked.display()))?;
    eprintln!("xtask: {CROSS_RUSTLIB} -> {}", unpacked.display());
    Ok(())
}

/// `dir/lib` holds a `libstd-*.rlib`.
fn rustlib_has_std(dir: &Path) -> bool {
    std::fs::read_dir(dir.join("lib")).is_ok_and(|entries| {
        entries.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("libstd-") && n.ends_with(".rlib")))
    })
}

fn foreign_archs() -> Result<Vec<String>> {
    let out = Command::new("dpkg").arg("--print-foreign-architectures").output().context("running dpkg")?;
    Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect())
}

pub(crate) fn apt_packages(pkgs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = pkgs.iter().copied().filter(|p| !present(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !crate::is_root() {
        bail!("missing packages {}; run this as root, or install them: apt-get install {}", missing.join(" "), missing.join(" "));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    let plan = simulate(&missing)?;
    if plan.removes.is_empty() {
        return apt_install(&missing);
    }
    // Something would be removed: find the packages whose own install removes something, unpack
    // those, and install the rest (which then removes nothing: checked again before it runs).
    eprintln!(
        "xtask: installing {} would remove {}; unpacking the packages that conflict into {UNPACKED} instead",
        missing.join(" "),
        plan.removes.join(" ")
    );
    let mut unpack = Vec::new();
    let mut install = Vec::new();
    for p in plan.installs.iter().filter(|p| !present(p)) {
        if simulate(&[p.as_str()])?.removes.is_empty() {
            install.push(p.as_str());
        } else {
            unpack.push(p.as_str());
        }
    }
    if !install.is_empty() {
        let again = simulate(&install)?;
        if !again.removes.is_empty() {
            bail!(
                "installing {} would still remove {}: install them by hand in a way that keeps your packages, then run this again",
                install.join(" "),
                again.removes.join(" ")
            );
        }
        apt_install(&install)?;
    }
    for p in unpack {
        unpack_deb(p)?;
    }
    Ok(())
}

/// Installed by dpkg, or unpacked here before.
fn present(pkg: &str) -> bool {
    dpkg_installed(pkg) || stamp(pkg).exists()
}

fn stamp(pkg: &str) -> PathBuf {
    Path::new(UNPACKED).join(".stamps").join(pkg)
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// What `apt-get install` of these would do.
struct Plan {
    installs: Vec<String>,
    removes: Vec<String>,
    /// Installed packages it would upgrade (`Inst NAME [OLD] (NEW ...)`).
    upgrades: Vec<String>,
}

impl Plan {
    fn describe_changes(&self) -> String {
        let mut parts = Vec::new();
        if !self.removes.is_empty() {
            parts.push(format!("remove {}", self.removes.join(" ")));
        }
        if !self.upgrades.is_empty() {
            parts.push(format!("upgrade {}", self.upgrades.join(" ")));
        }
        parts.join(" and ")
    }
}

fn simulate(pkgs: &[&str]) -> Result<Plan> {
    let out = Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-s", "--no-install-recommends"])
        .args(pkgs)
        .output()
        .context("running apt-get install -s")?;
    if !out.status.success() {
        bail!("apt-get cannot install {}: {}", pkgs.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(parse_simulation(&String::from_utf8_lossy(&out.stdout)))
}

/// `Inst NAME (...)`, `Inst NAME [OLD] (...)` (an upgrade) and `Remv NAME [...]` lines of
/// `apt-get -s`.
fn parse_simulation(text: &str) -> Plan {
    let name = |l: &str| l.split_whitespace().nth(1).map(str::to_owned);
    let upgrade = |l: &&str| l.split_whitespace().nth(2).is_some_and(|w| w.starts_with('['));
    Plan {
        installs: text.lines().filter(|l| l.starts_with("Inst ")).filter_map(name).collect(),
        removes: text.lines().filter(|l| l.starts_with("Remv ")).filter_map(name).collect(),
        upgrades: text.lines().filter(|l| l.starts_with("Inst ")).filter(upgrade).filter_map(name).collect(),
    }
}

fn apt_install(pkgs: &[&str]) -> Result<()> {
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(pkgs))
}

/// Downloads one package's `.deb` and unpacks it under [`UNPACKED`] (no maintainer scripts run).
fn unpack_deb(pkg: &str) -> Result<()> {
    let dl = Path::new(UNPACKED).join(".debs");
    std::fs::create_dir_all(&dl)?;
    run(Command::new("apt-get").current_dir(&dl).args(["download", "-q", pkg]))?;
    // The file is NAME_VERSION_ARCH.deb, also for a NAME:ARCH package.
    let name = pkg.split(':').next().unwrap_or(pkg);
    let deb = std::fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{name}_")) && n.ends_with(".deb")))
        .with_context(|| format!("apt-get download {pkg} left no .deb in {}", dl.display()))?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(UNPACKED))?;
    std::fs::create_dir_all(stamp(pkg).parent().expect("has a parent"))?;
    std::fs::write(stamp(pkg), deb.file_name().expect("a file").as_encoded_bytes())?;
    eprintln!("xtask: {pkg} unpacked into {UNPACKED}");
    Ok(())
}

/// rustup names Debian's rustc-web so aya-build can select it; rustup refuses a toolchain dir
/// without `lib/`, and linking `/usr` itself would set LD_LIBRARY_PATH=/usr/lib.
fn toolchain_link() -> Result<()> {
    let dir = Path::new(TOOLCHAIN_DIR);
    std::fs::create_dir_all(dir.join("bin")).context("creating the toolchain directory (run as root)")?;
    std::fs::create_dir_all(dir.join("lib"))?;
    for tool in ["rustc", "rustdoc", "cargo"] {
        let link = dir.join("bin").join(tool);
        if std::fs::read_link(&link).ok().as_deref() != Some(Path::new(&format!("/usr/bin/{tool}"))) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(format!("/usr/bin/{tool}"), &link)?;
        }
    }
    let list = Command::new("rustup").args(["toolchain", "list"]).output().context("running rustup")?;
    if !String::from_utf8_lossy(&list.stdout).lines().any(|l| l.starts_with(TOOLCHAIN_NAME)) {
        run(Command::new("rustup").args(["toolchain", "link", TOOLCHAIN_NAME, TOOLCHAIN_DIR]))?;
    }
    Ok(())
}

/// bpf-linker built against Debian's LLVM 22 through a prefix holding only `lib/libLLVM.so`
/// (no llvm-22-dev needed).
fn bpf_linker() -> Result<()> {
    let have = Command::new("bpf-linker").arg("--version").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if have.as_deref().is_some_and(|v| v.contains(BPF_LINKER_VERSION)) {
        return Ok(());
    }
    let prefix = Path::new(LLVM_PREFIX).join("lib");
    std::fs::create_dir_all(&prefix)?;
    let so = prefix.join("libLLVM.so");
    if std::fs::read_link(&so).is_err() {
        std::os::unix::fs::symlink(LIBLLVM, &so)?;
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)");
    run(Command::new("cargo").env("LLVM_PREFIX", LLVM_PREFIX).args([
        "install",
        "--locked",
        &format!("bpf-linker@{BPF_LINKER_VERSION}"),
        "--no-default-features",
        "--features",
        "llvm-22",
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulation_lines_name_what_apt_would_install_and_remove() {
        let text = "Reading package lists...\n\
                    The following packages will be REMOVED:\n  qemu-utils\n\
                    Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]\n\
                    Inst libfdt1 (1.6.1-4+b1 Debian:12.15/oldstable [amd64])\n\
                    Inst qemu-system-common (1:7.2+dfsg-7+deb12u18+b3 Debian:12.15/oldstable [amd64])\n\
                    Conf libfdt1 (1.6.1-4+b1 Debian:12.15/oldstable [amd64])\n";
        let plan = parse_simulation(text);
        assert_eq!(plan.installs, ["libfdt1", "qemu-system-common"]);
        assert_eq!(plan.removes, ["qemu-utils"]);
        assert!(plan.upgrades.is_empty());
    }

    /// The arm64 std's install as apt planned it here: multiarch libraries upgrade the host's.
    #[test]
    fn simulation_lines_name_what_apt_would_upgrade() {
        let text = "Inst liblzma5 [5.4.1-1] (5.4.1-1+deb12u2 Debian-Security:12/oldstable-security [amd64])\n\
                    Inst liblzma5:arm64 (5.4.1-1+deb12u2 Debian-Security:12/oldstable-security [arm64]) []\n\
                    Inst libstd-rust-web-dev:arm64 (1.96.0+dfsg1-1~deb12u2 Debian-Security:12/oldstable-security [arm64])\n";
        let plan = parse_simulation(text);
        assert_eq!(plan.installs, ["liblzma5", "liblzma5:arm64", "libstd-rust-web-dev:arm64"]);
        assert_eq!(plan.upgrades, ["liblzma5"]);
        assert_eq!(plan.describe_changes(), "upgrade liblzma5");
    }

    #[test]
    fn the_cross_build_is_set_up_for_tests_only() {
        assert!(!BUILD_PACKAGES.iter().chain(TEST_PACKAGES).any(|p| CROSS_PACKAGES.contains(p)));
        assert!(CROSS_PACKAGES.iter().any(|p| p.ends_with("aarch64-linux-gnu")));
        assert_eq!(Path::new(CROSS_RUSTLIB).file_name().and_then(|n| n.to_str()), Some("aarch64-unknown-linux-gnu"));
    }

    #[test]
    fn building_needs_no_qemu() {
        assert!(!BUILD_PACKAGES.iter().any(|p| p.starts_with("qemu")));
        assert!(TEST_PACKAGES.contains(&"qemu-system-x86"));
    }
}
