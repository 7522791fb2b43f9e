//! Portable builds, and `cargo xtask dist`: the tarballs
//! `target/dist/execprof-VERSION-ARCH-linux.tar.gz` (ARCH `x86_64`, `aarch64`).
//!
//! execprof for each architecture is linked by Zig (`cargo-zigbuild`; both from PyPI, in
//! [`ZIG`]) against the symbols of glibc [`GLIBC_FLOOR`], so one binary starts on every
//! distribution whose glibc is that or newer: RHEL 7 and 8 and their rebuilds, Amazon Linux 2,
//! Debian 8 and Ubuntu 14.04 on. The Debian packages, the guests' tests and the tarballs all
//! take these builds: what ships is what the guests ran.
//!
//! A tarball holds the binary, the man pages and the shell completions it writes, the agent's
//! unit and configuration file, the licences (the crates it links included), a README of where
//! each file goes, and `SHA256SUMS` of them all; beside it, `NAME.tar.gz.sha256`. Its entries
//! are owned by root, sorted, and dated at the commit, so the same commit packs the same bytes.
//!
//! CI checks them ([`ci_checks`]): each binary's highest glibc symbol version, printed and held
//! to the floor; each tarball's contents and checksums; and the x86_64 binary, as unpacked from
//! its tarball, run inside a Debian 11 userland (bullseye's glibc 2.31, made by `debootstrap`
//! once and cached): `--version`, `doctor`, and a traced command whose execs are known.
use std::{
    fmt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{run, setup::ZIG, vm::Arch};

/// The oldest glibc the portable builds run on (the first with an arm64 port, and RHEL 7's).
pub(crate) const GLIBC_FLOOR: GlibcVersion = GlibcVersion([2, 17, 0]);

/// Where `cargo xtask dist` writes.
pub(crate) const OUT_DIR: &str = "target/dist";

/// A glibc symbol version (`GLIBC_2.2.5` is 2.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GlibcVersion(pub [u32; 3]);

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.0;
        if c == 0 { write!(f, "{a}.{b}") } else { write!(f, "{a}.{b}.{c}") }
    }
}

impl GlibcVersion {
    /// `2.17` or `2.2.5`.
    fn parse(s: &str) -> Option<GlibcVersion> {
        let parts: Vec<u32> = s.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        match parts[..] {
            [a, b] => Some(GlibcVersion([a, b, 0])),
            [a, b, c] => Some(GlibcVersion([a, b, c])),
            _ => None,
        }
    }
}

/// The glibc symbol versions a binary asks for, as `readelf --version-info` lists them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GlibcNeeds {
    /// The highest numbered version: the oldest glibc that can run the binary.
    pub highest: Option<GlibcVersion>,
    /// Versions that are no release (`GLIBC_PRIVATE`): glibc's internals, which no other glibc
    /// build is bound to keep.
    pub unnumbered: Vec<String>,
}

/// [`GlibcNeeds`] from `readelf --version-info -W`'s text: the `Name: GLIBC_…` entries of the
/// version needs (`.gnu.version_r`) of libc, libm, libpthread and the loader alike.
pub(crate) fn glibc_needs(readelf: &str) -> GlibcNeeds {
    let mut needs = GlibcNeeds { highest: None, unnumbered: Vec::new() };
    for name in readelf.split_whitespace().filter_map(|w| w.strip_prefix("GLIBC_")) {
        match GlibcVersion::parse(name) {
            Some(v) => needs.highest = needs.highest.max(Some(v)),
            None if !needs.unnumbered.iter().any(|u| u == name) => needs.unnumbered.push(name.to_owned()),
            None => {}
        }
    }
    needs
}

/// [`glibc_needs`] of the binary at `exe` (binutils' readelf reads either architecture).
pub(crate) fn glibc_needs_of(exe: &Path) -> Result<GlibcNeeds> {
    let out = Command::new("readelf").args(["--version-info", "-W"]).arg(exe).output().context("running readelf (binutils)")?;
    if !out.status.success() {
        bail!("readelf --version-info {} failed: {}", exe.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(glibc_needs(&String::from_utf8_lossy(&out.stdout)))
}

/// Prints the glibc `exe` needs and fails where that is above [`GLIBC_FLOOR`] or unnumbered.
pub(crate) fn check_glibc(arch: Arch, exe: &Path) -> Result<GlibcVersion> {
    let needs = glibc_needs_of(exe)?;
    let Some(highest) = needs.highest else {
        bail!("{} asks for no glibc symbol version: is it the dynamically linked build?", exe.display());
    };
    println!("xtask: {} ({}): highest glibc symbol version GLIBC_{highest}, the floor {GLIBC_FLOOR}", exe.display(), arch.machine_name());
    if !needs.unnumbered.is_empty() {
        bail!(
            "{} needs glibc's internal symbol versions {:?}: it runs only with the glibc it was linked against",
            exe.display(),
            needs.unnumbered
        );
    }
    if highest > GLIBC_FLOOR {
        bail!(
            "{} needs GLIBC_{highest}, above the portable floor {GLIBC_FLOOR}: a dependency calls a newer glibc function directly; \
             find it with `readelf --dyn-syms -W {}` and call it through libc::syscall or a weak symbol",
            exe.display(),
            exe.display()
        );
    }
    Ok(highest)
}

/// `cargo-zigbuild SUBCOMMAND --release --target TRIPLE.FLOOR` for `arch`: Zig links against
/// the floor's glibc. arm64 builds with rustc-web, which has that target's std (see
/// .cargo/config.toml); `cargo xtask setup` installs both.
pub(crate) fn zigbuild(arch: Arch, subcommand: &str) -> Result<Command> {
    let bin = Path::new(ZIG).join("bin");
    if !bin.join("cargo-zigbuild").exists() {
        bail!(
            "{} is missing: run `cargo xtask setup` (it installs cargo-zigbuild and Zig from PyPI there)",
            bin.join("cargo-zigbuild").display()
        );
    }
    // cargo-zigbuild runs Zig as `python3 -m ziglang`: the environment's python3 first.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))?;
    let mut cmd = Command::new(bin.join("cargo-zigbuild"));
    cmd.env("PATH", path);
    if arch == Arch::Arm64 {
        cmd.env("RUSTUP_TOOLCHAIN", "rustc-web");
        // The built-in chain links no libc, statically; Zig refuses that for a glibc target.
        let gcc = Path::new(".cargo/aarch64-linux-gnu-gcc")
            .canonicalize()
            .context("finding .cargo/aarch64-linux-gnu-gcc (run from the clone's top)")?;
        cmd.env("EXECPROF_CHAIN_LINKER", gcc);
    }
    cmd.args([subcommand, "--release", "--target", &format!("{}.{GLIBC_FLOOR}", arch.triple())]);
    Ok(cmd)
}

/// Where the portable build of execprof for `arch` lands.
pub(crate) fn binary_path(arch: Arch) -> PathBuf {
    Path::new("target").join(arch.triple()).join("release/execprof")
}

/// The portable build of execprof for `arch`, built if needed.
pub(crate) fn portable_binary(arch: Arch) -> Result<PathBuf> {
    run(zigbuild(arch, "zigbuild")?.args(["--package", "profiler"]))?;
    Ok(binary_path(arch))
}

/// The portable build for `arch` and the one that runs here (the same for x86_64), whose
/// man pages and completions a package of `arch` ships: both built if needed.
pub(crate) fn portable_and_host(arch: Arch) -> Result<(PathBuf, PathBuf)> {
    let exe = portable_binary(arch)?;
    let host = if arch == Arch::X86_64 { exe.clone() } else { portable_binary(Arch::X86_64)? };
    Ok((exe, host))
}

/// The tarball's name, without `.tar.gz`.
pub(crate) fn name(arch: Arch) -> String {
    format!("execprof-{}-{}-linux", env!("CARGO_PKG_VERSION"), arch.machine_name())
}

/// What every tarball holds, under its top directory.
const EXPECTED: &[&str] = &[
    "execprof",
    "README",
    "SHA256SUMS",
    "man/man1/execprof.1",
    "man/man1/execprof-run.1",
    "man/man8/execprof-agent.8",
    "completions/execprof.bash",
    "completions/_execprof",
    "completions/execprof.fish",
    "systemd/execprof-agent.service",
    "agent.toml",
    "LICENSE-APACHE",
    "LICENSE-MIT",
    "LICENSE-GPL-2.0",
    "COPYRIGHT",
];

/// The README inside a tarball: what each file is and where it goes.
const README: &str = "execprof VERSION for ARCH Linux (glibc FLOOR or newer, any distribution)

  execprof                       the program: install as /usr/bin/execprof
                                 (the unit runs that path; edit ExecStart for another)
  man/man1, man/man8             its man pages: copy into /usr/local/share/man/man1 and man8
  completions/execprof.bash      bash: /usr/share/bash-completion/completions/execprof
  completions/_execprof          zsh: a directory of your $fpath, e.g. /usr/local/share/zsh/site-functions
  completions/execprof.fish      fish: /usr/share/fish/vendor_completions.d/execprof.fish
  systemd/execprof-agent.service the agent's unit: /etc/systemd/system/execprof-agent.service
  agent.toml                     the agent's configuration: /etc/execprof/agent.toml
  LICENSE-*, COPYRIGHT           the licences of execprof and of the crates it links
  SHA256SUMS                     checksums of the files above: sha256sum -c SHA256SUMS

Tracing needs root, or CAP_BPF, CAP_PERFMON and CAP_SYSLOG (CAP_SYS_ADMIN where
perf_event_paranoid is above 2): see `man execprof-run` and `execprof doctor`.
";

/// Packs `exe` (the portable build for `arch`) into `target/dist/NAME.tar.gz` and writes
/// `NAME.tar.gz.sha256` beside it; the man pages and completions are written by `host`
/// (a build that runs here). Returns the tarball's path.
pub(crate) fn tarball(arch: Arch, exe: &Path, host: &Path) -> Result<PathBuf> {
    let out = Path::new(OUT_DIR);
    let name = name(arch);
    let root = out.join(&name);
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let bin = root.join("execprof");
    std::fs::copy(exe, &bin).with_context(|| format!("copying {}", exe.display()))?;
    crate::deb::strip(arch, &bin)?;

    let generated = crate::deb::generated(host)?;
    for (file, section, text) in &generated.man_pages {
        crate::deb::write(&root.join(format!("man/man{section}/{file}")), text, 0o644)?;
    }
    for (shell, text) in &generated.completions {
        let file = match *shell {
            "bash" => "execprof.bash",
            "zsh" => "_execprof",
            _ => "execprof.fish",
        };
        crate::deb::write(&root.join("completions").join(file), text, 0o644)?;
    }
    crate::deb::write(&root.join("systemd/execprof-agent.service"), &std::fs::read("packaging/execprof-agent.service")?, 0o644)?;
    crate::deb::write(&root.join("agent.toml"), &std::fs::read("packaging/agent.toml")?, 0o644)?;
    for licence in ["LICENSE-APACHE", "LICENSE-MIT", "LICENSE-GPL-2.0"] {
        crate::deb::write(&root.join(licence), &std::fs::read(licence)?, 0o644)?;
    }
    crate::deb::write(&root.join("COPYRIGHT"), crate::deb::copyright_of(arch)?.as_bytes(), 0o644)?;
    let readme = README
        .replace("VERSION", env!("CARGO_PKG_VERSION"))
        .replace("ARCH", arch.machine_name())
        .replace("FLOOR", &GLIBC_FLOOR.to_string());
    crate::deb::write(&root.join("README"), readme.as_bytes(), 0o644)?;
    let sums = sha256sums(&root)?;
    crate::deb::write(&root.join("SHA256SUMS"), sums.as_bytes(), 0o644)?;

    let tarball = out.join(format!("{name}.tar.gz"));
    let mtime = format!("@{}", crate::deb::commit_time()?);
    let tar = Command::new("tar")
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mode=go-w", "--mtime", &mtime, "-C"])
        .arg(out)
        .args(["-cf", "-", &name])
        .output()
        .context("running tar")?;
    if !tar.status.success() {
        bail!("tar of {} failed: {}", root.display(), String::from_utf8_lossy(&tar.stderr));
    }
    crate::deb::gzip(&tar.stdout, &tarball)?;
    let sum = sha256(&tarball)?;
    crate::deb::write(&out.join(format!("{name}.tar.gz.sha256")), format!("{sum}  {name}.tar.gz\n").as_bytes(), 0o644)?;
    println!("xtask: built {} (sha256 {sum})", tarball.display());
    Ok(tarball)
}

/// `sha256sum`'s lines for every file under `root`, by path relative to it, sorted.
fn sha256sums(root: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir)? {
            let path = e?.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path.strip_prefix(root)?.to_owned());
            }
        }
    }
    files.sort();
    let mut text = String::new();
    for f in files {
        text += &format!("{}  {}\n", sha256(&root.join(&f))?, f.display());
    }
    Ok(text)
}

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    if !out.status.success() {
        bail!("sha256sum {} failed", path.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.split_whitespace().next().context("sha256sum printed nothing")?.to_owned())
}

/// A tarball's contents and both checksum files, checked on an unpacked copy; returns the
/// unpacked top directory.
fn check_tarball(tarball: &Path) -> Result<PathBuf> {
    let out = tarball.parent().context("the tarball's directory")?;
    let file = tarball.file_name().and_then(|f| f.to_str()).context("the tarball's name")?;
    run(Command::new("sha256sum").args(["--check", "--quiet", &format!("{file}.sha256")]).current_dir(out))
        .with_context(|| format!("{file}.sha256 does not match {file}"))?;
    let unpacked = out.join("check");
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)?;
    }
    std::fs::create_dir_all(&unpacked)?;
    run(Command::new("tar").arg("-xzf").arg(tarball).arg("-C").arg(&unpacked))?;
    let top = unpacked.join(file.trim_end_matches(".tar.gz"));
    let missing: Vec<&&str> = EXPECTED.iter().filter(|f| !top.join(f).is_file()).collect();
    if !missing.is_empty() {
        bail!("{} lacks {missing:?}", tarball.display());
    }
    run(Command::new("sha256sum").args(["--check", "--quiet", "SHA256SUMS"]).current_dir(&top))
        .with_context(|| format!("{}'s SHA256SUMS does not match its files", tarball.display()))?;
    Ok(top)
}

/// `cargo xtask dist`: the portable builds of `arches`, checked against the floor, packed.
pub(crate) fn dist(arches: &[Arch]) -> Result<()> {
    let host = portable_binary(Arch::X86_64)?;
    for &arch in arches {
        let exe = if arch == Arch::X86_64 { host.clone() } else { portable_binary(arch)? };
        check_glibc(arch, &exe)?;
        tarball(arch, &exe, &host)?;
    }
    Ok(())
}

/// CI's checks of the portable builds `x86` and `arm64` (see the module's documentation).
pub(crate) fn ci_checks(x86: &Path, arm64: &Path) -> Result<()> {
    for (arch, exe) in [(Arch::X86_64, x86), (Arch::Arm64, arm64)] {
        check_glibc(arch, exe)?;
    }
    let x86_tarball = tarball(Arch::X86_64, x86, x86)?;
    let arm64_tarball = tarball(Arch::Arm64, arm64, x86)?;
    check_tarball(&arm64_tarball)?;
    let top = check_tarball(&x86_tarball)?;
    in_bullseye(&top.join("execprof"))
}

/// The Debian 11 userland the portable binary is run in, made once.
const BULLSEYE_ROOT: &str = "/var/cache/execprof/bullseye-root";

/// [`BULLSEYE_ROOT`]: a minimal bullseye made by debootstrap from the machine's own Debian
/// mirror (about 250 MB, a minute), marked complete by a stamp.
fn bullseye_root() -> Result<PathBuf> {
    let root = PathBuf::from(BULLSEYE_ROOT);
    let stamp = root.join(".execprof-complete");
    if stamp.exists() {
        return Ok(root);
    }
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing the unfinished {}", root.display()))?;
    }
    let archive = crate::debian::host_archive()?;
    eprintln!("xtask: making a Debian 11 (bullseye) userland in {BULLSEYE_ROOT} with debootstrap from {}", archive.uri);
    let mut cmd = Command::new("debootstrap");
    cmd.args(["--variant=minbase", "--arch=amd64"]);
    if let Some(k) = &archive.signed_by {
        cmd.arg(format!("--keyring={k}"));
    }
    cmd.args(["bullseye", BULLSEYE_ROOT, &archive.uri]);
    let out = cmd.output().context("running debootstrap (installed by `cargo xtask setup`)")?;
    if !out.status.success() {
        let log = std::fs::read_to_string(root.join("debootstrap/debootstrap.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        bail!("debootstrap bullseye failed: {}\n{}", String::from_utf8_lossy(&out.stderr).trim(), tail.join("\n"));
    }
    std::fs::write(&stamp, "")?;
    Ok(root)
}

/// Runs `exe` inside [`bullseye_root`] (its own mount namespace: /proc, /sys and /dev bound
/// in, gone when it ends): `--version`, `doctor`, and `run` over a shell whose execs are known
/// (itself, 3 of /bin/true, 3 of a missing file).
fn in_bullseye(exe: &Path) -> Result<()> {
    let root = bullseye_root()?;
    let dir = root.join("opt/execprof");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(exe, dir.join("execprof"))?;
    let json = root.join("tmp/execprof-bullseye.json");
    std::fs::remove_file(&json).ok();
    let inside = |args: &str| -> Result<(bool, String)> {
        let script = format!(
            "set -e; for d in proc sys dev; do mount --rbind /$d {root}/$d; done; exec chroot {root} {args}",
            root = root.display()
        );
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .output()
            .context("running unshare")?;
        Ok((out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))))
    };
    let (ok, libc) = inside("/lib/x86_64-linux-gnu/libc.so.6")?;
    let libc = libc.lines().next().unwrap_or_default().to_owned();
    if !ok || !libc.contains("2.31") {
        bail!("the bullseye userland's libc is not glibc 2.31: {libc:?}");
    }
    let (ok, version) = inside("/opt/execprof/execprof --version")?;
    let want = format!("execprof {} (commit ", env!("CARGO_PKG_VERSION"));
    if !ok || !version.starts_with(&want) {
        bail!("the portable execprof --version in Debian 11's userland said {version:?}, not {want}…");
    }
    let (ok, doctor) = inside("/opt/execprof/execprof doctor")?;
    if !ok {
        bail!("the portable execprof doctor failed in Debian 11's userland:\n{doctor}");
    }
    let (ok, said) = inside(
        "/opt/execprof/execprof run --json /tmp/execprof-bullseye.json -- /bin/sh -c \
         'for i in 1 2 3; do /bin/true; /nonexistent/execprof-bullseye 2>/dev/null || :; done'",
    )?;
    if !ok {
        bail!("the portable execprof run failed in Debian 11's userland:\n{said}");
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json).ok();
    let count = |outcome: &str| {
        report["analysis"]["outcomes"]
            .as_array()
            .and_then(|o| o.iter().find(|x| x["outcome"] == outcome))
            .and_then(|x| x["count"].as_u64())
            .unwrap_or(0)
    };
    let (successes, enoent) = (count("success"), count("enoent"));
    if (successes, enoent) != (4, 3) || report["complete"] != true {
        bail!(
            "the portable execprof in Debian 11's userland counted {successes} successful execs and {enoent} ENOENT (complete: {}), not 4 and 3",
            report["complete"]
        );
    }
    println!(
        "xtask: {} ran in Debian 11's userland ({libc}): --version, doctor, and run counting the known execs (4 successes, 3 ENOENT)",
        exe.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_glibc_version_is_read_from_readelfs_version_needs() {
        let readelf = "Version needs section '.gnu.version_r' contains 3 entries:\n \
            Addr: 0x0000000000000d88  Offset: 0x000d88  Link: 7 (.dynstr)\n  \
            000000: Version: 1  File: libc.so.6  Cnt: 5\n  \
            0x0010:   Name: GLIBC_2.14  Flags: none  Version: 7\n  \
            0x0020:   Name: GLIBC_2.2.5  Flags: none  Version: 3\n  \
            0x0030:   Name: GLIBC_2.17  Flags: none  Version: 9\n  \
            0x0040:   Name: GLIBC_2.3.4  Flags: none  Version: 5\n";
        let needs = glibc_needs(readelf);
        assert_eq!(needs.highest, Some(GlibcVersion([2, 17, 0])));
        assert!(needs.unnumbered.is_empty());
        assert_eq!(needs.highest.unwrap().to_string(), "2.17");
        assert!(needs.highest.unwrap() <= GLIBC_FLOOR);
        // What the host's own build asked for: above the floor.
        let host = glibc_needs("Name: GLIBC_2.34 Flags: none\n Name: GLIBC_2.35 Flags: none\n Name: GLIBC_PRIVATE\n");
        assert_eq!(host.highest, Some(GlibcVersion([2, 35, 0])));
        assert!(host.highest.unwrap() > GLIBC_FLOOR);
        assert_eq!(host.unnumbered, ["PRIVATE"]);
        assert_eq!(GlibcVersion::parse("2.2.5").unwrap().to_string(), "2.2.5");
        assert!(GlibcVersion::parse("2.2.5").unwrap() < GlibcVersion::parse("2.17").unwrap());
        assert_eq!(glibc_needs("a static binary: no version needs").highest, None);
    }

    #[test]
    fn tarballs_are_named_by_version_and_machine() {
        assert_eq!(name(Arch::X86_64), format!("execprof-{}-x86_64-linux", env!("CARGO_PKG_VERSION")));
        assert_eq!(name(Arch::Arm64), format!("execprof-{}-aarch64-linux", env!("CARGO_PKG_VERSION")));
        assert_eq!(binary_path(Arch::Arm64), Path::new("target/aarch64-unknown-linux-gnu/release/execprof"));
    }
}
