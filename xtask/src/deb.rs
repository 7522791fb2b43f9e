//! `cargo xtask deb`: the Debian packages `execprof_VERSION-REVISION_{amd64,arm64}.deb` under
//! `target/debian/`, put together from the release builds (the arm64 one the cross-build) and
//! packed by `dpkg-deb`, Debian's own tool: `/usr/bin/execprof`, a man page per command and
//! the shell completions (written by the built execprof from its clap definitions), the
//! agent's unit and configuration file (`packaging/`), the copyright and changelogs. The
//! maintainer scripts are what `dh_installsystemd --no-enable` writes: the unit is known to
//! systemd, never enabled or started by the install, stopped on removal, forgotten on purge.
//!
//! CI checks them ([`check_amd64`], [`check_arm64`]): lintian, an install with apt, the
//! installed files, the unit with `systemd-analyze verify`, the built-in chain from
//! `/usr/bin/execprof`, and a purge that leaves nothing behind.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{run, vm::Arch};

/// The package's name.
const PACKAGE: &str = "execprof";
/// The Debian revision of this packaging of the workspace's version.
const REVISION: &str = "1";
/// The maintainer, as the project's commits name it.
pub(crate) const MAINTAINER: &str = "execprof maintainers <maintainers@users.noreply.a-seed-d63047d5.example>";
/// Where the packages are written.
pub(crate) const OUT_DIR: &str = "target/debian";
/// The agent's unit, as installed.
pub(crate) const UNIT: &str = "lib/systemd/system/execprof-agent.service";
/// The agent's configuration file, a conffile.
const CONFIG: &str = "etc/execprof/agent.toml";

/// `VERSION-REVISION`, the version the package carries.
pub(crate) fn version() -> String {
    format!("{}-{REVISION}", env!("CARGO_PKG_VERSION"))
}

/// What `host` (a build of execprof that runs here) writes from its clap definitions: the man
/// pages (file name, section, text) and the completions (shell, script).
pub(crate) struct Generated {
    pub man_pages: Vec<(String, String, Vec<u8>)>,
    pub completions: Vec<(&'static str, Vec<u8>)>,
}

/// [`Generated`], written by `host`.
pub(crate) fn generated(host: &Path) -> Result<Generated> {
    let dir = tempfile_dir(Path::new("target"), &format!("man-pages-{}", std::process::id()))?;
    run(Command::new(host).arg("man-pages").arg(&dir))?;
    let mut man_pages = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let file = path.file_name().and_then(|f| f.to_str()).context("a man page's name")?.to_owned();
        let section = file.rsplit('.').next().context("a man page's section")?.to_owned();
        man_pages.push((file, section, std::fs::read(&path)?));
    }
    std::fs::remove_dir_all(&dir)?;
    man_pages.sort();
    let mut completions = Vec::new();
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(host).args(["completions", shell]).output().context("running execprof completions")?;
        if !o.status.success() || o.stdout.is_empty() {
            bail!("execprof completions {shell} failed: {}", String::from_utf8_lossy(&o.stderr));
        }
        completions.push((shell, o.stdout));
    }
    Ok(Generated { man_pages, completions })
}

/// Strips `bin` (built for `arch`) as dh_strip does an executable: no debug information, no
/// symbol table (the doctor finds its uprobe target by file offset).
pub(crate) fn strip(arch: Arch, bin: &Path) -> Result<()> {
    run(Command::new(strip_for(arch)?).args(["--remove-section=.comment", "--remove-section=.note"]).arg(bin))?;
    set_mode(bin, 0o755)
}

/// Packs `exe` (built for `arch`) into `target/debian/`, with the man pages and completions
/// `host` (a build that runs here) writes.
pub(crate) fn pack(arch: Arch, exe: &Path, host: &Path) -> Result<PathBuf> {
    let name = format!("{PACKAGE}_{}_{}", version(), arch.debian());
    let out = Path::new(OUT_DIR);
    let root = out.join(&name);
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    let bin = root.join("usr/bin/execprof");
    mkdirs(&root, &["usr/bin", "usr/share/man/man1", "usr/share/man/man8", "usr/share/doc/execprof", "DEBIAN"])?;
    std::fs::copy(exe, &bin).with_context(|| format!("copying {}", exe.display()))?;
    strip(arch, &bin)?;

    // Man pages, gzipped as Debian ships them (-n: no name or time inside, reproducible), and
    // the completions where bash-completion, zsh and fish look for a package's.
    let generated = generated(host)?;
    for (file, section, text) in &generated.man_pages {
        gzip(text, &root.join(format!("usr/share/man/man{section}/{file}.gz")))?;
    }
    for (shell, text) in &generated.completions {
        let dest = match *shell {
            "bash" => "usr/share/bash-completion/completions/execprof",
            "zsh" => "usr/share/zsh/vendor-completions/_execprof",
            _ => "usr/share/fish/vendor_completions.d/execprof.fish",
        };
        write(&root.join(dest), text, 0o644)?;
    }

    write(&root.join(UNIT), &std::fs::read("packaging/execprof-agent.service")?, 0o644)?;
    write(&root.join(CONFIG), &std::fs::read("packaging/agent.toml")?, 0o644)?;
    write(&root.join("usr/share/lintian/overrides/execprof"), &std::fs::read("packaging/lintian-overrides")?, 0o644)?;
    let doc = root.join("usr/share/doc/execprof");
    write(&doc.join("copyright"), copyright(&linked_crates(arch)?)?.as_bytes(), 0o644)?;
    write(&doc.join("README.Debian"), &std::fs::read("packaging/README.Debian")?, 0o644)?;
    gzip(&std::fs::read("CHANGELOG.md")?, &doc.join("changelog.gz"))?;
    gzip(debian_changelog()?.as_bytes(), &doc.join("changelog.Debian.gz"))?;

    let debian = root.join("DEBIAN");
    write(&debian.join("conffiles"), format!("/{CONFIG}\n").as_bytes(), 0o644)?;
    for (script, text) in [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)] {
        write(&debian.join(script), text.as_bytes(), 0o755)?;
    }
    write(&debian.join("md5sums"), md5sums(&root)?.as_bytes(), 0o644)?;
    let depends = depends(&bin)?;
    write(&debian.join("control"), control(arch, installed_size(&root)?, &depends).as_bytes(), 0o644)?;

    let deb = out.join(format!("{name}.deb"));
    run(Command::new("dpkg-deb").args(["--root-owner-group", "-Zxz", "--build"]).arg(&root).arg(&deb))?;
    println!("xtask: built {}", deb.display());
    Ok(deb)
}

/// The `strip` that reads `arch`'s ELF files (binutils' own, or the cross one).
fn strip_for(arch: Arch) -> Result<PathBuf> {
    let name = match arch {
        Arch::X86_64 => "strip",
        Arch::Arm64 => "aarch64-linux-gnu-strip",
    };
    for dir in std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default() {
        if dir.join(name).is_file() {
            return Ok(dir.join(name));
        }
    }
    bail!("{name} is not installed: run `cargo xtask setup` (it installs binutils and the arm64 cross-build's binutils)")
}

fn tempfile_dir(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = parent.join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn mkdirs(root: &Path, dirs: &[&str]) -> Result<()> {
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).with_context(|| format!("creating {}", root.join(d).display()))?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).with_context(|| format!("setting the mode of {}", path.display()))
}

pub(crate) fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    set_mode(path, mode)
}

pub(crate) fn gzip(bytes: &[u8], dest: &Path) -> Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = child.stdin.take().context("gzip's input")?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer.join().map_err(|_| anyhow::anyhow!("writing to gzip panicked"))??;
    if !out.status.success() {
        bail!("gzip failed on {}", dest.display());
    }
    write(dest, &out.stdout, 0o644)
}

/// Every regular file of the package but the conffiles, with its MD5 sum, as dpkg keeps them.
fn md5sums(root: &Path) -> Result<String> {
    let files = files_under(root, Path::new(""))?;
    let listed: Vec<&String> = files.iter().filter(|f| !f.starts_with("DEBIAN/") && !f.starts_with("etc/")).collect();
    let out = Command::new("md5sum").current_dir(root).args(&listed).output().context("running md5sum")?;
    if !out.status.success() {
        bail!("md5sum failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The regular files under `root/rel`, as paths relative to `root`, sorted.
fn files_under(root: &Path, rel: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let path = rel.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            out.extend(files_under(root, &path)?);
        } else {
            out.insert(path.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// Installed-Size: the files' sizes in KiB, each rounded up, as dpkg-gencontrol counts them.
fn installed_size(root: &Path) -> Result<u64> {
    let mut kib = 0;
    for f in files_under(root, Path::new(""))?.iter().filter(|f| !f.starts_with("DEBIAN/")) {
        kib += std::fs::metadata(root.join(f))?.len().div_ceil(1024);
    }
    Ok(kib)
}

/// The packages the binary's shared libraries come from, with the least version that has
/// every symbol version it uses: what dpkg-shlibdeps would say for glibc and libgcc, read
/// with readelf (which reads either architecture's ELF).
fn depends(bin: &Path) -> Result<String> {
    let dynamic = Command::new("readelf").args(["--wide", "--dynamic"]).arg(bin).output().context("running readelf")?;
    let versions = Command::new("readelf").args(["--wide", "--version-info"]).arg(bin).output().context("running readelf")?;
    if !dynamic.status.success() || !versions.status.success() {
        bail!("readelf could not read {}", bin.display());
    }
    depends_from(&String::from_utf8_lossy(&dynamic.stdout), &String::from_utf8_lossy(&versions.stdout))
}

/// [`depends`] from readelf's `--dynamic` and `--version-info` outputs.
fn depends_from(dynamic: &str, versions: &str) -> Result<String> {
    let needed: BTreeSet<&str> =
        dynamic.lines().filter(|l| l.contains("(NEEDED)")).filter_map(|l| l.split('[').nth(1)?.split(']').next()).collect();
    let highest = |prefix: &str| -> Option<(u32, u32, u32)> {
        versions
            .split_whitespace()
            .filter_map(|w| w.strip_prefix(prefix))
            .filter_map(|v| {
                let mut p = v.split('.').map(|n| n.parse::<u32>().ok());
                Some((p.next()??, p.next().unwrap_or(Some(0))?, p.next().unwrap_or(Some(0))?))
            })
            .max()
    };
    let show = |(a, b, c): (u32, u32, u32)| if c == 0 { format!("{a}.{b}") } else { format!("{a}.{b}.{c}") };
    let mut deps = BTreeSet::new();
    for lib in &needed {
        match *lib {
            "libc.so.6"
            | "libm.so.6"
            | "libpthread.so.0"
            | "libdl.so.2"
            | "librt.so.1"
            | "ld-linux-x86-64.so.2"
            | "ld-linux-aarch64.so.1" => {
                let v = highest("GLIBC_").context("the binary links glibc but names no GLIBC_ symbol version")?;
                deps.insert(format!("libc6 (>= {})", show(v)));
            }
            "libgcc_s.so.1" => {
                let v = highest("GCC_").map_or("3.0".to_owned(), show);
                deps.insert(format!("libgcc-s1 (>= {v})"));
            }
            other => bail!("the binary needs {other}, which `cargo xtask deb` does not know the package of: add it to deb.rs"),
        }
    }
    Ok(deps.into_iter().collect::<Vec<_>>().join(", "))
}

fn control(arch: Arch, installed_kib: u64, depends: &str) -> String {
    format!(
        "Package: {PACKAGE}\n\
         Version: {}\n\
         Architecture: {}\n\
         Maintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Section: devel\n\
         Priority: optional\n\
         Description: where the kernel spends exec time, per exec attempt\n \
         execprof traces the execve calls of a command, a process tree, a cgroup or\n \
         the whole machine with eBPF and says where the kernel spends their time: per\n \
         attempt, phase and kernel function, split by outcome (successes, the ENOENT\n \
         misses of PATH searches, other errors), with fork-family costs beside them.\n \
         .\n \
         Its agent (execprof-agent.service, not enabled on install) counts exec\n \
         attempts and fork-family calls in the kernel at a cost low enough to leave\n \
         on, and serves them as Prometheus metrics and pprof profiles.\n",
        version(),
        arch.debian()
    )
}

/// The commit's date in RFC 5322 form: the changelog's date, the same for every build of it.
fn commit_date() -> Result<String> {
    let out = Command::new("git").args(["log", "-1", "--format=%aD"]).output().context("running git log")?;
    let date = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || date.is_empty() {
        bail!("git log gave no date: `cargo xtask deb` runs in a clone of execprof");
    }
    Ok(date)
}

/// The commit's time in seconds since the epoch: the tarballs' entries' time.
pub(crate) fn commit_time() -> Result<u64> {
    let out = Command::new("git").args(["log", "-1", "--format=%ct"]).output().context("running git log")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .ok()
        .filter(|_| out.status.success())
        .context("git log gave no commit time: `cargo xtask dist` runs in a clone of execprof")
}

/// The copyright file of `arch`'s build: execprof's licences and every crate it links.
pub(crate) fn copyright_of(arch: Arch) -> Result<String> {
    copyright(&linked_crates(arch)?)
}

fn debian_changelog() -> Result<String> {
    Ok(format!(
        "{PACKAGE} ({}) unstable; urgency=medium\n\n  * Packaged by `cargo xtask deb`; what changed is in\n    /usr/share/doc/execprof/changelog.gz.\n\n -- {MAINTAINER}  {}\n",
        version(),
        commit_date()?
    ))
}

/// A crate linked into the binary (or its eBPF object): `name version: license`, the license
/// as the crate declares it.
type LinkedCrate = String;

/// The crates `/usr/bin/execprof` links statically, built for `arch`: the normal (not build,
/// not dev) dependencies of `profiler` and of the eBPF crate it embeds, proc macros left out
/// (they run in the compiler and are not linked), as `cargo metadata` resolves them.
fn linked_crates(arch: Arch) -> Result<Vec<LinkedCrate>> {
    let triple = arch.triple();
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", triple])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    linked_crates_from(&serde_json::from_slice(&out.stdout)?)
}

/// [`linked_crates`] from `cargo metadata`'s JSON.
fn linked_crates_from(meta: &serde_json::Value) -> Result<Vec<LinkedCrate>> {
    let packages: std::collections::HashMap<&str, &serde_json::Value> =
        meta["packages"].as_array().context("cargo metadata's packages")?.iter().filter_map(|p| Some((p["id"].as_str()?, p))).collect();
    let nodes: std::collections::HashMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata's resolve")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let ours = ["profiler", "profiler-common", "profiler-ebpf"];
    let mut todo: Vec<&str> = packages
        .values()
        .filter(|p| p["name"].as_str().is_some_and(|n| ["profiler", "profiler-ebpf"].contains(&n)))
        .filter_map(|p| p["id"].as_str())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes.get(id).and_then(|n| n["deps"].as_array()).into_iter().flatten() {
            let normal = dep["dep_kinds"].as_array().is_some_and(|k| k.iter().any(|k| k["kind"].is_null()));
            if normal && let Some(d) = dep["pkg"].as_str() {
                todo.push(d);
            }
        }
    }
    let mut out = Vec::new();
    for id in seen {
        let p = packages.get(id).context("a resolved package cargo metadata does not list")?;
        let name = p["name"].as_str().unwrap_or_default();
        let proc_macro = p["targets"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "proc-macro"))));
        if ours.contains(&name) || proc_macro {
            continue;
        }
        let license = p["license"].as_str().context(format!("{name} declares no license: read its files and name it here"))?;
        out.push(format!("{name} {}: {license}", p["version"].as_str().unwrap_or_default()));
    }
    out.sort();
    Ok(out)
}

/// The machine-readable copyright file: execprof's licenses, the eBPF object's, the crates
/// linked in with theirs, and where Debian keeps the long texts.
fn copyright(crates: &[LinkedCrate]) -> Result<String> {
    let mit = std::fs::read_to_string("LICENSE-MIT").context("reading LICENSE-MIT")?;
    let indented: String = mit.lines().map(|l| if l.trim().is_empty() { " .\n".to_owned() } else { format!(" {l}\n") }).collect();
    let linked: String = crates.iter().map(|c| format!(" {c}\n")).collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: execprof\n\
         Upstream-Contact: {MAINTAINER}\n\
         Comment: /usr/bin/execprof links these Rust crates statically (name, version and the\n \
         license each declares; their sources, with their license texts, are on\n \
         crates.io; the texts of Apache-2.0, LGPL-2.1 and GPL-2 are also in\n \
         /usr/share/common-licenses):\n{linked}\
         \n\
         Files: *\n\
         Copyright: 2026 execprof maintainers\n\
         License: MIT or Apache-2.0\n\
         \n\
         Files: profiler-ebpf/*\n\
         Copyright: 2026 execprof maintainers\n\
         License: MIT or GPL-2\n\
         Comment: The eBPF object inside /usr/bin/execprof, loaded into the kernel, declares\n \
         itself \"Dual MIT/GPL\" to the kernel.\n\
         \n\
         License: MIT\n{indented}\
         \n\
         License: Apache-2.0\n \
         On Debian systems, the complete text of the Apache License, Version 2.0, is in\n \
         /usr/share/common-licenses/Apache-2.0.\n\
         \n\
         License: GPL-2\n \
         On Debian systems, the complete text of the GNU General Public License,\n \
         version 2, is in /usr/share/common-licenses/GPL-2.\n"
    ))
}

/// What `dh_installsystemd --no-enable --no-start` writes: the unit is loaded, not enabled.
const POSTINST: &str = "#!/bin/sh\nset -e\n\
if [ \"$1\" = \"configure\" ] || [ \"$1\" = \"abort-upgrade\" ] || [ \"$1\" = \"abort-deconfigure\" ] || [ \"$1\" = \"abort-remove\" ] ; then\n\
\tif command -v deb-systemd-helper >/dev/null 2>&1; then\n\
\t\tdeb-systemd-helper update-state 'execprof-agent.service' >/dev/null || true\n\
\tfi\n\
\tif [ -d /run/systemd/system ]; then\n\
\t\tsystemctl --system daemon-reload >/dev/null || true\n\
\t\tif [ -n \"$2\" ]; then\n\
\t\t\tdeb-systemd-invoke try-restart 'execprof-agent.service' >/dev/null || true\n\
\t\tfi\n\
\tfi\n\
fi\n";

const PRERM: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ] && [ \"$1\" = remove ]; then\n\
\tdeb-systemd-invoke stop 'execprof-agent.service' >/dev/null || true\n\
fi\n";

const POSTRM: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ]; then\n\
\tsystemctl --system daemon-reload >/dev/null || true\n\
fi\n\
if [ \"$1\" = \"purge\" ]; then\n\
\tif command -v deb-systemd-helper >/dev/null 2>&1; then\n\
\t\tdeb-systemd-helper purge 'execprof-agent.service' >/dev/null || true\n\
\tfi\n\
fi\n";

/// CI's checks of both packages, built from `x86` and `arm64` (release builds of execprof):
/// lintian on each, the arm64 one's contents, and the amd64 one installed, used and purged
/// here. Returns the arm64 package's own binary, for the arm64 guest to run.
pub(crate) fn ci_checks(x86: &Path, arm64: &Path) -> Result<PathBuf> {
    let amd64_deb = pack(Arch::X86_64, x86, x86)?;
    let arm64_deb = pack(Arch::Arm64, arm64, x86)?;
    for deb in [&amd64_deb, &arm64_deb] {
        lintian(deb)?;
    }
    let arm64_bin = check_arm64(&arm64_deb)?;
    check_amd64(&amd64_deb)?;
    Ok(arm64_bin)
}

/// lintian, failing on any error or warning (overrides, each with its reason, are shipped in
/// the package).
fn lintian(deb: &Path) -> Result<()> {
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--display-info", "--tag-display-limit", "0"])
        .arg(deb)
        .output()
        .context("running lintian (installed by `cargo xtask setup`)")?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("xtask: lintian {}: {}", deb.display(), if said.trim().is_empty() { "nothing to report" } else { "" });
    for line in said.lines() {
        println!("  {line}");
    }
    if !out.status.success() {
        bail!("lintian found errors or warnings in {}: fix them (or override one with its reason)", deb.display());
    }
    Ok(())
}

/// The paths a package installs (`dpkg-deb -c`), without the leading `.`, directories
/// ending in `/`.
fn contents(deb: &Path) -> Result<Vec<String>> {
    let out = Command::new("dpkg-deb").arg("-c").arg(deb).output().context("running dpkg-deb -c")?;
    if !out.status.success() {
        bail!("dpkg-deb -c {} failed: {}", deb.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5)?.strip_prefix('.').map(str::to_owned))
        .collect())
}

/// Files every package holds.
const EXPECTED: &[&str] = &[
    "/usr/bin/execprof",
    "/usr/share/man/man1/execprof.1.gz",
    "/usr/share/man/man1/execprof-run.1.gz",
    "/usr/share/man/man1/execprof-report.1.gz",
    "/usr/share/man/man1/execprof-diff.1.gz",
    "/usr/share/man/man8/execprof-agent.8.gz",
    "/usr/share/bash-completion/completions/execprof",
    "/usr/share/zsh/vendor-completions/_execprof",
    "/usr/share/fish/vendor_completions.d/execprof.fish",
    "/lib/systemd/system/execprof-agent.service",
    "/etc/execprof/agent.toml",
    "/usr/share/doc/execprof/copyright",
    "/usr/share/doc/execprof/changelog.Debian.gz",
    "/usr/share/doc/execprof/README.Debian",
];

fn check_contents(deb: &Path) -> Result<Vec<String>> {
    let listed = contents(deb)?;
    let missing: Vec<&&str> = EXPECTED.iter().filter(|p| !listed.iter().any(|l| l == **p)).collect();
    if !missing.is_empty() {
        bail!("{} lacks {missing:?}", deb.display());
    }
    Ok(listed)
}

/// The arm64 package: its contents, its binary an AArch64 executable; returns that binary,
/// unpacked.
fn check_arm64(deb: &Path) -> Result<PathBuf> {
    check_contents(deb)?;
    let dir = tempfile_dir(Path::new(OUT_DIR), "arm64-unpacked")?;
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir))?;
    let bin = dir.join("usr/bin/execprof");
    let header = Command::new("readelf").arg("-h").arg(&bin).output().context("running readelf -h")?;
    let header = String::from_utf8_lossy(&header.stdout);
    if !header.lines().any(|l| l.trim_start().starts_with("Machine:") && l.contains("AArch64")) {
        bail!("{}'s /usr/bin/execprof is not an AArch64 executable:\n{header}", deb.display());
    }
    println!("xtask: {}: contents and architecture (AArch64) as expected; its binary runs in the arm64 guest", deb.display());
    Ok(bin.canonicalize()?)
}

/// The amd64 package, installed with apt, used and purged. Skipped, saying so, where an
/// execprof package is already installed: the check would replace and purge the user's.
fn check_amd64(deb: &Path) -> Result<()> {
    let installed = Command::new("dpkg-query").args(["-W", "-f=${db:Status-Status}", PACKAGE]).output().context("running dpkg-query")?;
    if String::from_utf8_lossy(&installed.stdout).trim() == "installed" {
        println!("xtask: the package check is skipped: an {PACKAGE} package is installed here, and the check would replace and purge it");
        return Ok(());
    }
    let listed = check_contents(deb)?;
    let deb = deb.canonicalize()?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .arg(&deb))?;
    let checked = installed_checks();
    run(Command::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args(["purge", "-y", "-qq", PACKAGE]))?;
    checked?;
    let left: Vec<&String> = listed.iter().filter(|p| !p.ends_with('/') && Path::new(p).exists()).collect();
    if !left.is_empty() {
        bail!("purging {PACKAGE} left {left:?}");
    }
    if Path::new("/etc/execprof").exists() {
        bail!("purging {PACKAGE} left /etc/execprof");
    }
    // Nor does systemd's or deb-systemd-helper's state name the unit.
    let state = Command::new("find").args(["/etc/systemd", "/var/lib/systemd", "-name", "execprof-agent*"]).output()?;
    if !String::from_utf8_lossy(&state.stdout).trim().is_empty() {
        bail!("purging {PACKAGE} left {}", String::from_utf8_lossy(&state.stdout).trim());
    }
    let after = Command::new("dpkg-query").args(["-W", "-f=${db:Status-Status}", PACKAGE]).output()?;
    if !String::from_utf8_lossy(&after.stdout).trim().is_empty() && String::from_utf8_lossy(&after.stdout).trim() != "not-installed" {
        bail!("dpkg still knows {PACKAGE} after the purge: {}", String::from_utf8_lossy(&after.stdout));
    }
    println!("xtask: {}: installed, checked, purged; nothing it installed is left", deb.display());
    Ok(())
}

/// What the installed package gives: the version with the commit, the man pages where `man`
/// finds them, the completions, a unit systemd accepts, the built-in chain traced by
/// `/usr/bin/execprof`, and the agent from its configuration file serving metrics.
fn installed_checks() -> Result<()> {
    let version = output(Command::new("/usr/bin/execprof").arg("--version"))?;
    let want = format!("execprof {} (commit ", env!("CARGO_PKG_VERSION"));
    if !version.starts_with(&want) {
        bail!("/usr/bin/execprof --version says {version:?}, not {want}…");
    }
    for page in ["execprof", "execprof-run", "execprof-report", "execprof-diff", "execprof-agent"] {
        let at = output(Command::new("man").args(["-w", page]))?;
        if !at.trim().starts_with("/usr/share/man/man") {
            bail!("man -w {page} found {at:?}");
        }
    }
    let complete =
        output(Command::new("bash").args(["-c", "source /usr/share/bash-completion/completions/execprof && complete -p execprof"]))?;
    if !complete.contains("execprof") {
        bail!("the bash completion registers nothing for execprof: {complete:?}");
    }
    run(Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(Path::new("/").join(UNIT)))
        .context("systemd-analyze verify rejects the agent's unit")?;
    let json = std::env::temp_dir().join(format!("execprof-deb-check-{}.json", std::process::id()));
    run(Command::new("/usr/bin/execprof").args(["run", "--steps", "300", "--json"]).arg(&json))?;
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json).ok();
    let successes = report["analysis"]["outcomes"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["outcome"] == "success"))
        .and_then(|x| x["count"].as_u64())
        .unwrap_or(0);
    if successes < 300 || report["complete"] != true {
        bail!("/usr/bin/execprof run --steps 300 counted {successes} successful execs (complete: {})", report["complete"]);
    }
    agent_from_config()
}

/// `/usr/bin/execprof agent --config /etc/execprof/agent.toml`, as the unit starts it (on a
/// free port instead of the file's): its /metrics answers with the build's version.
fn agent_from_config() -> Result<()> {
    let port = crate::local_http::free_port()?;
    let mut agent = Command::new("/usr/bin/execprof")
        .args(["agent", "--config", "/etc/execprof/agent.toml", "--duration", "30", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting the installed agent")?;
    let mut body = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(300));
        if let Ok(page) = crate::local_http::get(port, "/metrics") {
            body = page;
            break;
        }
    }
    // SIGTERM: the agent's orderly end.
    run(Command::new("kill").args(["-TERM", &agent.id().to_string()]))?;
    let status = agent.wait()?;
    if !body.contains("execprof_build_info{") {
        bail!("the installed agent, started from its configuration file, served no metrics on 127.0.0.1:{port}: {:?}", body.lines().next());
    }
    if !status.success() {
        bail!("the installed agent ended with {status} on SIGTERM");
    }
    Ok(())
}

/// `cmd`'s standard output; when it fails, its status and everything it printed (a linter's
/// findings go to its standard output).
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_name_the_highest_symbol_versions() {
        let dynamic = " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n \
                       0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n \
                       0x0000000000000001 (NEEDED)             Shared library: [ld-linux-aarch64.so.1]\n";
        let versions = "  0x0010:   Name: GCC_3.0  Flags: none  Version: 5\n  0x0020:   Name: GCC_4.2.0  Flags: none\n\
                        \x20 0x0030:   Name: GLIBC_2.17  Flags: none\n  0x0040:   Name: GLIBC_2.34  Flags: none\n  Name: GLIBC_2.3.4\n";
        assert_eq!(depends_from(dynamic, versions).unwrap(), "libc6 (>= 2.34), libgcc-s1 (>= 4.2)");
        let e = depends_from(" (NEEDED) Shared library: [libz.so.1]\n", "").unwrap_err();
        assert!(format!("{e}").contains("libz.so.1"), "{e}");
    }

    /// Normal dependencies of ours are listed, transitively; build and dev dependencies, proc
    /// macros and our own crates are not; a crate without a license is an error.
    #[test]
    fn linked_crates_are_the_normal_dependencies_that_are_linked() {
        let pkg = |name: &str, license: Option<&str>, kind: &str| serde_json::json!({"id": name, "name": name, "version": "1.0.0", "license": license, "targets": [{"kind": [kind]}]});
        let dep = |to: &str, kind: Option<&str>| serde_json::json!({"pkg": to, "dep_kinds": [{"kind": kind}]});
        let meta = serde_json::json!({
            "packages": [pkg("profiler", Some("MIT"), "lib"), pkg("profiler-ebpf", Some("MIT"), "bin"), pkg("a", Some("MIT"), "lib"),
                         pkg("b", Some("LGPL-2.1-or-later"), "lib"), pkg("c", Some("MIT"), "lib"), pkg("d", Some("MIT"), "proc-macro"),
                         pkg("e", Some("CDDL-1.0"), "lib"), pkg("f", Some("MIT"), "lib")],
            "resolve": {"nodes": [
                {"id": "profiler", "deps": [dep("a", None), dep("c", Some("build")), dep("d", None), dep("f", Some("dev"))]},
                {"id": "a", "deps": [dep("b", None)]},
                {"id": "profiler-ebpf", "deps": [dep("e", None)]},
            ]}
        });
        assert_eq!(linked_crates_from(&meta).unwrap(), ["a 1.0.0: MIT", "b 1.0.0: LGPL-2.1-or-later", "e 1.0.0: CDDL-1.0"]);
        let mut meta = meta;
        meta["packages"][2]["license"] = serde_json::Value::Null;
        assert!(linked_crates_from(&meta).unwrap_err().to_string().contains("a declares no license"));
    }

    #[test]
    fn the_control_file_is_well_formed() {
        let c = control(Arch::Arm64, 12_345, "libc6 (>= 2.34)");
        assert!(c.contains("\nArchitecture: arm64\n") && c.contains("\nInstalled-Size: 12345\n"));
        // Every continuation line of the description starts with one space; none is empty.
        let desc: Vec<&str> = c.split("Description: ").nth(1).unwrap().lines().skip(1).collect();
        assert!(desc.iter().all(|l| l.starts_with(' ') && !l.trim().is_empty()), "{desc:?}");
        assert!(desc.iter().all(|l| l.len() <= 80), "{desc:?}");
    }
}
