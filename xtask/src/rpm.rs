//! `cargo xtask rpm`: `target/rpm/execprof-VERSION-1.ARCH.rpm` (ARCH `x86_64`, `aarch64`) for
//! the RHEL family, beside the `.deb`: the same portable binary ([`crate::dist`]), man pages,
//! completions, unit and configuration file, packed by Debian's `rpmbuild` from a spec this
//! module writes. Its dependencies are rpmbuild's own reading of the binary (`libc.so.6
//! (GLIBC_2.17)(64bit)` and kin), so an RPM-based system refuses it where its glibc is older
//! than the floor.
//!
//! CI checks both ([`ci_checks`]): `rpmlint`, the glibc floor among the package's requirements,
//! and the x86_64 one installed into a scratch `rpm --root`, listed, verified (`rpm -V`), run,
//! and removed, an edited configuration file kept as `.rpmsave`.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{deb::output, run, vm::Arch};

/// Where the packages are written.
pub(crate) const OUT_DIR: &str = "target/rpm";

/// The package's release: its first build of each version.
const RELEASE: &str = "1";

/// The package's file name.
pub(crate) fn file_name(arch: Arch) -> String {
    format!("execprof-{}-{RELEASE}.{}.rpm", env!("CARGO_PKG_VERSION"), arch.machine_name())
}

/// Builds the portable execprof for `arch` and packs it; returns the package's path.
pub(crate) fn build(arch: Arch) -> Result<PathBuf> {
    let (exe, host) = crate::dist::portable_and_host(arch)?;
    pack(arch, &exe, &host)
}

/// Where each file goes, as RHEL lays a package out (the unit under /usr/lib/systemd).
const UNIT: &str = "usr/lib/systemd/system/execprof-agent.service";
const CONFIG: &str = "etc/execprof/agent.toml";
const LICENCES: &str = "usr/share/licenses/execprof";
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions/execprof"),
    ("zsh", "usr/share/zsh/site-functions/_execprof"),
    ("fish", "usr/share/fish/vendor_completions.d/execprof.fish"),
];

/// Packs `exe` (the portable build for `arch`) into [`OUT_DIR`]; the man pages and completions
/// are written by `host`. Returns the package's path.
pub(crate) fn pack(arch: Arch, exe: &Path, host: &Path) -> Result<PathBuf> {
    let out = Path::new(OUT_DIR);
    let work = out.join(format!("build-{}", arch.machine_name()));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("emptying {}", work.display()))?;
    }
    let root = work.join("root");
    let put = |rel: &str, bytes: &[u8]| -> Result<()> {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().context("a file's directory")?)?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    put("usr/bin/execprof", &std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?)?;
    crate::deb::strip(arch, &root.join("usr/bin/execprof"))?;
    let generated = crate::deb::generated(host)?;
    let mut man_pages = Vec::new();
    for (file, section, text) in &generated.man_pages {
        let rel = format!("usr/share/man/man{section}/{file}.gz");
        std::fs::create_dir_all(root.join(&rel).parent().context("the man page's directory")?)?;
        crate::deb::gzip(text, &root.join(&rel))?;
        man_pages.push(rel);
    }
    for (shell, text) in &generated.completions {
        let (_, rel) = COMPLETIONS.iter().find(|(s, _)| s == shell).context("a completion's place")?;
        put(rel, text)?;
    }
    put(UNIT, &std::fs::read("packaging/execprof-agent.service")?)?;
    put(CONFIG, &std::fs::read("packaging/agent.toml")?)?;
    for licence in ["LICENSE-APACHE", "LICENSE-MIT", "LICENSE-GPL-2.0"] {
        put(&format!("{LICENCES}/{licence}"), &std::fs::read(licence)?)?;
    }
    put(&format!("{LICENCES}/COPYRIGHT"), crate::deb::copyright_of(arch)?.as_bytes())?;

    let spec = work.join("execprof.spec");
    let epoch = crate::deb::commit_time()?;
    std::fs::write(&spec, spec_text(&man_pages, &changelog_date(epoch)?)).with_context(|| format!("writing {}", spec.display()))?;
    let abs = |p: &Path| -> Result<String> { Ok(std::path::absolute(p)?.display().to_string()) };
    let built = Command::new("rpmbuild")
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .args(["-bb", "--quiet", "--target", &format!("{}-linux", arch.machine_name())])
        .args(["--define", &format!("_topdir {}", abs(&work.join("top"))?)])
        .args(["--define", &format!("_sourcedir {}", abs(&root)?)])
        .args(["--define", &format!("_rpmdir {}", abs(out)?)])
        .args(["--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm"])
        // Stripped already, by the architecture's own strip; no debuginfo package, no build-id
        // links (the binary is one file, its build id in its notes).
        .args(["--define", "__strip /bin/true", "--define", "debug_package %{nil}", "--define", "_build_id_links none"])
        // The same commit packs the same bytes: times from the commit.
        .args(["--define", "use_source_date_epoch_as_buildtime 1", "--define", "clamp_mtime_to_source_date_epoch 1"])
        .arg(&spec)
        .output()
        .context("running rpmbuild (Debian's rpm, installed by `cargo xtask setup`)")?;
    if !built.status.success() {
        bail!("rpmbuild of {} failed:\n{}", spec.display(), String::from_utf8_lossy(&built.stderr));
    }
    let rpm = out.join(file_name(arch));
    if !rpm.exists() {
        bail!("rpmbuild wrote no {}: {}", rpm.display(), String::from_utf8_lossy(&built.stderr));
    }
    std::fs::remove_dir_all(&work)?;
    println!("xtask: built {}", rpm.display());
    Ok(rpm)
}

/// `Mon Dec 07 2026`, a changelog entry's date, for the time `epoch` (UTC).
fn changelog_date(epoch: u64) -> Result<String> {
    let out = Command::new("date").args(["-u", "-d", &format!("@{epoch}"), "+%a %b %d %Y"]).output().context("running date")?;
    if !out.status.success() {
        bail!("date -d @{epoch} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The spec: the files under `%{_sourcedir}` (the staged tree) copied in as they are.
fn spec_text(man_pages: &[String], date: &str) -> String {
    let files: Vec<String> = std::iter::once("/usr/bin/execprof".to_owned())
        .chain(man_pages.iter().map(|m| format!("/{m}")))
        .chain(COMPLETIONS.iter().map(|(_, rel)| format!("/{rel}")))
        .chain(std::iter::once(format!("/{UNIT}")))
        .collect();
    format!(
        "Name: execprof\n\
         Version: {version}\n\
         Release: {RELEASE}\n\
         Summary: Where the kernel spends exec time, per exec attempt\n\
         License: (MIT OR Apache-2.0) AND (MIT OR GPL-2.0-only)\n\
         Group: Development/Tools/Other\n\
         Packager: {packager}\n\
         \n\
         %description\n\
         execprof traces the execve calls of a command, a process tree, a cgroup or\n\
         the whole machine with eBPF and says where the kernel spends their time: per\n\
         attempt, phase and kernel function, split by outcome (successes, the ENOENT\n\
         misses of PATH searches, other errors), with fork-family costs beside them.\n\
         \n\
         Its agent (execprof-agent.service, not enabled on install) counts exec\n\
         attempts and fork-family calls in the kernel at a cost low enough to leave\n\
         on, and serves them as Prometheus metrics and pprof profiles.\n\
         \n\
         %prep\n\
         \n\
         %build\n\
         \n\
         %install\n\
         cp -a %{{_sourcedir}}/. %{{buildroot}}/\n\
         \n\
         # What systemd's %systemd_post, %systemd_preun and %systemd_postun_with_restart do,\n\
         # without the preset: the unit is loaded, not enabled.\n\
         %post\n\
         if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null 2>&1 || :; fi\n\
         \n\
         %preun\n\
         if [ $1 -eq 0 ] && [ -d /run/systemd/system ]; then\n\
         \x20 systemctl --no-reload disable --now execprof-agent.service >/dev/null 2>&1 || :\n\
         fi\n\
         \n\
         %postun\n\
         if [ -d /run/systemd/system ]; then\n\
         \x20 systemctl --system daemon-reload >/dev/null 2>&1 || :\n\
         \x20 if [ $1 -ge 1 ]; then systemctl try-restart execprof-agent.service >/dev/null 2>&1 || :; fi\n\
         fi\n\
         \n\
         %files\n\
         {files}\n\
         %dir /etc/execprof\n\
         %config(noreplace) /{CONFIG}\n\
         %license /{LICENCES}/LICENSE-APACHE\n\
         %license /{LICENCES}/LICENSE-MIT\n\
         %license /{LICENCES}/LICENSE-GPL-2.0\n\
         %license /{LICENCES}/COPYRIGHT\n\
         \n\
         %changelog\n\
         * {date} {packager} - {version}-{RELEASE}\n\
         - Packaged by cargo xtask rpm; what changed is in execprof's own history.\n",
        version = env!("CARGO_PKG_VERSION"),
        files = files.join("\n"),
        packager = crate::deb::MAINTAINER,
    )
}

/// CI's checks of both packages, built from `x86` and `arm64` (the portable builds; see the
/// module's documentation).
pub(crate) fn ci_checks(x86: &Path, arm64: &Path) -> Result<()> {
    let rpms = [(Arch::X86_64, pack(Arch::X86_64, x86, x86)?), (Arch::Arm64, pack(Arch::Arm64, arm64, x86)?)];
    let lint = output(Command::new("rpmlint").args(["-c", "packaging/rpmlint.toml"]).args(rpms.iter().map(|(_, p)| p)))?;
    if !lint.contains(" 0 errors, 0 warnings") {
        bail!("rpmlint found errors or warnings (fix them, or filter one in packaging/rpmlint.toml with its reason):\n{lint}");
    }
    for (arch, rpm) in &rpms {
        let listed = output(Command::new("rpm").args(["-qpl"]).arg(rpm))?;
        let missing: Vec<&&str> = EXPECTED.iter().filter(|f| !listed.lines().any(|l| l == **f)).collect();
        if !missing.is_empty() {
            bail!("{} lacks {missing:?}", rpm.display());
        }
        let requires = output(Command::new("rpm").args(["-qp", "--requires"]).arg(rpm))?;
        let needs = crate::dist::glibc_needs(&requires.replace(['(', ')'], " "));
        match needs.highest {
            Some(v) if v <= crate::dist::GLIBC_FLOOR && needs.unnumbered.is_empty() => {
                println!("xtask: {} requires glibc {v} at most ({})", rpm.display(), arch.machine_name());
            }
            _ => bail!("{} requires glibc beyond the floor {}: {requires}", rpm.display(), crate::dist::GLIBC_FLOOR),
        }
        for script in scriptlets(&output(Command::new("rpm").args(["-qp", "--scripts"]).arg(rpm))?) {
            let mut sh = Command::new("sh").args(["-n", "-c", &script]).output()?;
            if !sh.status.success() {
                sh.stderr.extend_from_slice(script.as_bytes());
                bail!("a scriptlet of {} is not valid sh: {}", rpm.display(), String::from_utf8_lossy(&sh.stderr));
            }
        }
    }
    scratch_install(&rpms[0].1)
}

/// What every package holds.
const EXPECTED: &[&str] = &[
    "/usr/bin/execprof",
    "/usr/share/man/man1/execprof.1.gz",
    "/usr/share/man/man1/execprof-run.1.gz",
    "/usr/share/man/man8/execprof-agent.8.gz",
    "/usr/share/bash-completion/completions/execprof",
    "/usr/share/zsh/site-functions/_execprof",
    "/usr/share/fish/vendor_completions.d/execprof.fish",
    "/usr/lib/systemd/system/execprof-agent.service",
    "/etc/execprof/agent.toml",
    "/usr/share/licenses/execprof/COPYRIGHT",
];

/// The bodies of `rpm -qp --scripts`' scriptlets (each after its `… scriptlet (using /bin/sh):`
/// line).
fn scriptlets(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.ends_with("scriptlet (using /bin/sh):") {
            out.push(String::new());
        } else if let Some(s) = out.last_mut() {
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

/// `rpm` installs `package` into an empty scratch root (no dependencies there, no shell for
/// the scriptlets), lists and verifies it, runs its binary, and removes it: every file gone
/// but an edited configuration file, kept as `.rpmsave`.
fn scratch_install(package: &Path) -> Result<()> {
    let root = std::path::absolute(Path::new(OUT_DIR).join("scratch-root"))?;
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    std::fs::create_dir_all(&root)?;
    let rpm = || {
        let mut c = Command::new("rpm");
        c.arg("--root").arg(&root);
        c
    };
    run(rpm().arg("--initdb"))?;
    run(rpm().args(["-i", "--nodeps", "--noscripts"]).arg(package))?;
    let name = output(rpm().args(["-q", "execprof"]))?;
    if name.trim() != format!("execprof-{}-{RELEASE}.x86_64", env!("CARGO_PKG_VERSION")) {
        bail!("rpm -q execprof in the scratch root says {name:?}");
    }
    output(rpm().args(["-V", "--nodeps", "execprof"])).context("rpm -V finds the installed files changed")?;
    let version = output(Command::new(root.join("usr/bin/execprof")).arg("--version"))?;
    if !version.starts_with(&format!("execprof {} (commit ", env!("CARGO_PKG_VERSION"))) {
        bail!("the installed execprof --version says {version:?}");
    }
    let config = root.join(CONFIG);
    let mut edited = std::fs::read_to_string(&config)?;
    edited.push_str("sample-hz = 49\n");
    std::fs::write(&config, edited)?;
    run(rpm().args(["-e", "--noscripts", "execprof"]))?;
    if rpm().args(["-q", "execprof"]).output()?.status.success() {
        bail!("rpm still knows execprof in the scratch root after removing it");
    }
    let kept = root.join(format!("{CONFIG}.rpmsave"));
    if !kept.exists() || config.exists() {
        bail!("removing the package did not keep the edited configuration as {}", kept.display());
    }
    for f in EXPECTED.iter().filter(|f| !f.starts_with("/etc/")) {
        if root.join(&f[1..]).exists() {
            bail!("removing the package left {f}");
        }
    }
    std::fs::remove_dir_all(&root)?;
    println!(
        "xtask: {}: installed into a scratch root, listed, verified, run and removed (the edited configuration kept as .rpmsave)",
        package.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scriptlets_are_read_from_rpms_listing() {
        let text = "postinstall scriptlet (using /bin/sh):\nif [ -d /run/systemd/system ]; then :; fi\n\
                    preuninstall scriptlet (using /bin/sh):\nif [ $1 -eq 0 ]; then\n  :\nfi\n";
        assert_eq!(scriptlets(text), ["if [ -d /run/systemd/system ]; then :; fi\n", "if [ $1 -eq 0 ]; then\n  :\nfi\n"]);
        assert_eq!(file_name(Arch::Arm64), format!("execprof-{}-1.aarch64.rpm", env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn the_spec_lists_every_expected_file() {
        let spec = spec_text(&["usr/share/man/man1/execprof.1.gz".into()], "Mon Dec 07 2026");
        for f in EXPECTED.iter().filter(|f| !f.contains("/man/man") || f.ends_with("execprof.1.gz")) {
            assert!(spec.lines().any(|l| l.ends_with(f)), "{f} is not in the spec's %files");
        }
        assert!(spec.contains("%config(noreplace) /etc/execprof/agent.toml"));
        assert!(spec.contains("* Mon Dec 07 2026 "));
    }
}
