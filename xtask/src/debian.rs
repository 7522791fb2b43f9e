//! The guests' stock Debian kernels, by label (`5.10`, `6.1`, `6.12`, `6.18`, `newest`), and
//! the apt that finds each one's current build.
//!
//! 6.1 and 6.12 come from this machine's own apt sources (Debian 12's suites). The other lines
//! come from suites the machine does not name: bullseye (5.10), trixie-backports (6.18, and
//! with sid the newest line). Those are read through a private apt configuration under
//! [`APT_DIR`] (its own sources list, package lists, cache and an empty status file), so the
//! machine's apt sources and state are never touched; it names the archive mirror the
//! machine's own sources use. Its lists are fetched once and again when older than
//! [`LISTS_MAX_AGE`], or when a download fails (a superseded build leaves the archive).
//!
//! A line's build is resolved at run time, so a guest follows Debian's updates: from a
//! metapackage (`linux-image-cloud-amd64` as one suite has it), or as the newest build of one
//! line among a suite's packages (trixie-backports keeps the builds of every line it carried,
//! and no metapackage names an old one).
use std::{
    cmp::Ordering,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{arch::Arch, run};

/// The private apt configuration's directory.
pub(crate) const APT_DIR: &str = "/var/cache/execprof/apt";

/// The suites the private configuration reads.
pub(crate) const SUITES: &[&str] = &["bullseye", "trixie", "trixie-backports", "sid"];

/// How old the private package lists may get before they are fetched again.
pub(crate) const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// Which apt answers for a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Apt {
    /// The machine's own configuration.
    Host,
    /// The private one under [`APT_DIR`].
    Private,
}

/// Where a kernel line's current build is named. Package names are amd64's; [`Arch::package`]
/// and [`for_arch`] give another architecture's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A metapackage of the machine's own apt sources.
    Host { meta: &'static str },
    /// A metapackage as one suite of the private configuration has it.
    Suite { suite: &'static str, meta: &'static str },
    /// The newest build of `line` among one suite's `linux-image-LINE.N+debNN-cloud-amd64`.
    Line { suite: &'static str, line: &'static str },
    /// The metapackage's newest version among these suites that is no release candidate.
    Newest { suites: &'static [&'static str], meta: &'static str },
}

/// A guest kernel: its label and where its build is named.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GuestKernel {
    pub label: &'static str,
    pub source: Source,
    /// Run when no `--kernel` is given (and so in `cargo xtask ci`'s vm-test jobs).
    pub default: bool,
}

/// The label that stands for the newest stable line (also accepted by that line's number).
pub(crate) const NEWEST: &str = "newest";

/// The suites where the newest stable kernel line is looked for (guests and the lab's source).
pub(crate) const NEWEST_SUITES: &[&str] = &["trixie-backports", "sid"];

/// Every guest kernel, oldest first. The same labels on both architectures: Debian builds
/// each of these lines' cloud kernels for amd64 and arm64.
pub(crate) const KERNELS: &[GuestKernel] = &[
    GuestKernel { label: "5.10", source: Source::Suite { suite: "bullseye", meta: "linux-image-cloud-amd64" }, default: false },
    GuestKernel { label: "6.1", source: Source::Host { meta: "linux-image-cloud-amd64" }, default: true },
    GuestKernel { label: "6.12", source: Source::Host { meta: "linux-image-6.12-cloud-amd64" }, default: true },
    GuestKernel { label: "6.18", source: Source::Line { suite: "trixie-backports", line: "6.18" }, default: false },
    GuestKernel { label: NEWEST, source: Source::Newest { suites: NEWEST_SUITES, meta: "linux-image-cloud-amd64" }, default: false },
];

/// One guest kernel, resolved: its line's number (`7.3` for `newest`), the concrete
/// `linux-image-…` package (`NAME:arm64` for arm64), and the apt that fetches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub label: String,
    pub package: String,
    pub apt: Apt,
}

/// Every label, for messages.
pub(crate) fn labels() -> String {
    let mut names: Vec<String> = KERNELS.iter().map(|k| k.label.to_owned()).collect();
    if let Some(last) = names.last_mut() {
        *last = format!("{NEWEST} (the newest stable line in trixie-backports or sid, also accepted by its number, e.g. 7.3)");
    }
    names.join(", ")
}

/// The kernels a command asked for: the one labelled `only` (or the line number the newest
/// must have, for a number that is no fixed label), or the default ones. Nothing is resolved.
pub(crate) fn select(only: Option<&str>) -> Result<Vec<(&'static GuestKernel, Option<String>)>> {
    let Some(only) = only else { return Ok(KERNELS.iter().filter(|k| k.default).map(|k| (k, None)).collect()) };
    if let Some(k) = KERNELS.iter().find(|k| k.label == only) {
        return Ok(vec![(k, None)]);
    }
    let is_line = only.split_once('.').is_some_and(|(a, b)| [a, b].iter().all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit())));
    match KERNELS.iter().find(|k| k.label == NEWEST) {
        Some(newest) if is_line => Ok(vec![(newest, Some(only.to_owned()))]),
        _ => bail!("there is no guest kernel {only:?}: give --kernel one of {}", labels()),
    }
}

/// The guest kernels a command runs ([`select`]), each resolved.
pub fn guests(arch: Arch, only: Option<&str>) -> Result<Vec<Resolved>> {
    select(only)?.into_iter().map(|(k, line)| resolve(arch, k, line.as_deref())).collect()
}

/// One guest kernel by its label, resolved.
pub fn guest(arch: Arch, label: &str) -> Result<Resolved> {
    guests(arch, Some(label))?.pop().ok_or_else(|| anyhow!("there is no guest kernel {label:?}: give one of {}", labels()))
}

/// A package name of amd64's for `arch` (`…-cloud-amd64` → `…-cloud-arm64:arm64`).
pub(crate) fn for_arch(arch: Arch, amd64_name: &str) -> String {
    arch.package(&format!("{}-{}", amd64_name.trim_end_matches("-amd64"), arch.debian()))
}

/// Finds the current build of `k`'s line for `arch`; `want_line`: the line it must be.
fn resolve(arch: Arch, k: &GuestKernel, want_line: Option<&str>) -> Result<Resolved> {
    let (label, package, apt) = match k.source {
        Source::Host { meta } => (k.label.to_owned(), depends_on_image(Apt::Host, &for_arch(arch, meta))?, Apt::Host),
        Source::Suite { suite, meta } => {
            let meta = for_arch(arch, meta);
            let versions = madison(&meta)?;
            let version = versions
                .iter()
                .filter(|m| m.suite == suite)
                .map(|m| m.version.as_str())
                .max_by(|a, b| compare_versions(a, b))
                .ok_or_else(|| anyhow!("{suite} has no {meta}; apt's lists under {APT_DIR} have {versions:?}"))?;
            (k.label.to_owned(), depends_on_image(Apt::Private, &format!("{meta}={version}"))?, Apt::Private)
        }
        Source::Line { suite, line } => {
            let names = Command::new("apt-cache")
                .args(private_options()?)
                .args(["pkgnames", &format!("linux-image-{line}.")])
                .output()
                .context("running apt-cache pkgnames")?;
            let names = String::from_utf8_lossy(&names.stdout).into_owned();
            let builds: Vec<&str> = names.lines().filter(|n| line_build(n, line, arch).is_some()).collect();
            let mut in_suite: Vec<Madison> = if builds.is_empty() {
                Vec::new()
            } else {
                madison_of(Apt::Private, &builds.iter().map(|n| arch.package(n)).collect::<Vec<_>>())?
                    .into_iter()
                    .filter(|m| m.suite == suite)
                    .collect()
            };
            in_suite.sort_by(|a, b| compare_versions(&a.version, &b.version));
            let newest = in_suite.pop().ok_or_else(|| {
                anyhow!(
                    "{suite} has no {} build of {line} (linux-image-{line}.N-…-cloud-{}); apt's lists are under {APT_DIR}",
                    arch.debian(),
                    arch.debian()
                )
            })?;
            (line.to_owned(), newest.package, Apt::Private)
        }
        Source::Newest { suites, meta } => {
            let meta = for_arch(arch, meta);
            let versions = madison(&meta)?;
            let newest = newest_stable(&versions, suites)
                .ok_or_else(|| anyhow!("none of {suites:?} has a {meta} that is no release candidate: {versions:?}"))?;
            let line = kernel_line(&newest.version).ok_or_else(|| anyhow!("{meta}'s version {} names no kernel line", newest.version))?;
            (line, depends_on_image(Apt::Private, &format!("{meta}={}", newest.version))?, Apt::Private)
        }
    };
    if let Some(want) = want_line.filter(|w| *w != label) {
        bail!("there is no guest kernel {want:?}: the newest stable line Debian has is {label}; give --kernel one of {}", labels());
    }
    Ok(Resolved { label, package, apt })
}

/// A Debian `linux-source-LINE` build: the lab's base source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxSource {
    /// Its line (`7.3`).
    pub line: String,
    /// `linux-source-7.3`.
    pub package: String,
    /// `7.3.4-1~bpo13+1`.
    pub version: String,
    pub apt: Apt,
}

/// The current build of Debian's `linux-source` for `line`: [`NEWEST`] (the newest stable line
/// in [`NEWEST_SUITES`], as the `linux-source` metapackage names it), or a line such as `6.12`
/// (the machine's own apt first, then the private configuration's suites).
pub(crate) fn linux_source(line: &str) -> Result<LinuxSource> {
    if line == NEWEST {
        let versions = madison("linux-source")?;
        let meta = newest_stable(&versions, NEWEST_SUITES)
            .ok_or_else(|| anyhow!("none of {NEWEST_SUITES:?} has a linux-source that is no release candidate: {versions:?}"))?;
        let line = kernel_line(&meta.version).ok_or_else(|| anyhow!("linux-source's version {} names no kernel line", meta.version))?;
        return linux_source_in(&line, Apt::Private, NEWEST_SUITES);
    }
    if kernel_line(&format!("{line}-1")).as_deref() != Some(line) {
        bail!("--linux-source {line:?}: give a kernel line such as 6.12, or {NEWEST}");
    }
    let package = format!("linux-source-{line}");
    let mut own = madison_of(Apt::Host, std::slice::from_ref(&package))?;
    own.sort_by(|a, b| compare_versions(&a.version, &b.version));
    match own.pop() {
        Some(m) => Ok(LinuxSource { line: line.to_owned(), package, version: m.version, apt: Apt::Host }),
        None => linux_source_in(line, Apt::Private, SUITES),
    }
}

fn linux_source_in(line: &str, apt: Apt, suites: &[&str]) -> Result<LinuxSource> {
    let package = format!("linux-source-{line}");
    let versions = madison(&package)?;
    let newest = newest_stable(&versions, suites).ok_or_else(|| {
        anyhow!("Debian has no {package} in {suites:?} (nor does this machine's apt); give --linux-source {NEWEST} or a line it has, or --kernel-src DIR")
    })?;
    Ok(LinuxSource { line: line.to_owned(), version: newest.version.clone(), package, apt })
}

/// The `linux-image-…` package a metapackage (`NAME` or `NAME=VERSION`) depends on.
fn depends_on_image(apt: Apt, meta: &str) -> Result<String> {
    let text = apt_cache_depends(apt, meta)?;
    depends(&text, "linux-image-").into_iter().next().ok_or_else(|| match apt {
        Apt::Host => anyhow!("cannot resolve {meta}: apt names no linux-image package for it (run `apt-get update`, then this again)"),
        Apt::Private => anyhow!("cannot resolve {meta} in the lists under {APT_DIR} (remove {APT_DIR}/lists to fetch them again)"),
    })
}

/// `apt-cache depends PKG` as `apt` answers it.
pub(crate) fn apt_cache_depends(apt: Apt, pkg: &str) -> Result<String> {
    let mut cmd = Command::new("apt-cache");
    if apt == Apt::Private {
        cmd.args(private_options()?);
    }
    let out = cmd.args(["depends", pkg]).output().context("running apt-cache")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The real packages of `apt-cache depends`' `Depends:` lines whose names start with
/// `prefix` (not a virtual `<name>`, not an alternative's `|Depends:`).
pub(crate) fn depends(text: &str, prefix: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.trim().strip_prefix("Depends: ")).filter(|p| p.starts_with(prefix)).map(str::to_owned).collect()
}

/// A version of a package as `apt-cache madison` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Madison {
    pub package: String,
    pub version: String,
    pub suite: String,
}

/// `apt-cache madison PKG` through the private configuration.
fn madison(pkg: &str) -> Result<Vec<Madison>> {
    madison_of(Apt::Private, &[pkg.to_owned()])
}

/// `apt-cache madison PKGS…` as `apt` answers it.
fn madison_of(apt: Apt, pkgs: &[String]) -> Result<Vec<Madison>> {
    let mut cmd = Command::new("apt-cache");
    if apt == Apt::Private {
        cmd.args(private_options()?);
    }
    let out = cmd.arg("madison").args(pkgs).output().context("running apt-cache madison")?;
    Ok(parse_madison(&String::from_utf8_lossy(&out.stdout)))
}

/// `NAME | VERSION | URI SUITE/COMPONENT ARCH Packages` lines.
pub(crate) fn parse_madison(text: &str) -> Vec<Madison> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('|').map(str::trim);
            let (package, version, from) = (f.next()?, f.next()?, f.next()?);
            let suite = from.split_whitespace().nth(1)?.split('/').next()?;
            Some(Madison { package: package.to_owned(), version: version.to_owned(), suite: suite.to_owned() })
        })
        .collect()
}

/// The newest version in `suites` that is no release candidate (`~rc`).
pub(crate) fn newest_stable<'a>(versions: &'a [Madison], suites: &[&str]) -> Option<&'a Madison> {
    versions
        .iter()
        .filter(|m| suites.contains(&m.suite.as_str()) && !m.version.contains("~rc"))
        .max_by(|a, b| compare_versions(&a.version, &b.version))
}

/// A kernel package's line from its version: `7.3.4-1~bpo13+1` → `7.3`.
pub(crate) fn kernel_line(version: &str) -> Option<String> {
    let version = version.split_once(':').map_or(version, |(_, v)| v);
    let upstream = version.rsplit_once('-').map_or(version, |(u, _)| u);
    let mut parts = upstream.split(['.', '~', '+']);
    let (major, minor) = (parts.next()?, parts.next()?);
    [major, minor].iter().all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit())).then(|| format!("{major}.{minor}"))
}

/// For `linux-image-6.18.15+deb13-cloud-amd64` (line 6.18, amd64): `6.18.15+deb13`; None for
/// another line, flavour or architecture, and for `-dbg` or `-unsigned` packages.
pub(crate) fn line_build<'a>(name: &'a str, line: &str, arch: Arch) -> Option<&'a str> {
    let build = name.strip_prefix("linux-image-")?.strip_suffix(&format!("-cloud-{}", arch.debian()))?;
    let patch = build.strip_prefix(line)?.strip_prefix('.')?;
    let number = patch.split('+').next()?;
    (!number.is_empty() && number.bytes().all(|c| c.is_ascii_digit())).then_some(build)
}

/// dpkg's order of two versions (`[EPOCH:]UPSTREAM[-REVISION]`).
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    let split = |v: &str| -> (u64, String, String) {
        let (epoch, rest) = match v.split_once(':') {
            Some((e, r)) if e.bytes().all(|c| c.is_ascii_digit()) => (e.parse().unwrap_or(0), r),
            _ => (0, v),
        };
        let (upstream, revision) = rest.rsplit_once('-').unwrap_or((rest, ""));
        (epoch, upstream.to_owned(), revision.to_owned())
    };
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb).then_with(|| compare_part(&ua, &ub)).then_with(|| compare_part(&ra, &rb))
}

/// dpkg's `verrevcmp`: non-digit runs by character (`~` before everything, even the end;
/// letters before other characters), digit runs by value.
fn compare_part(a: &str, b: &str) -> Ordering {
    let order = |c: Option<&u8>| -> i32 {
        match c {
            None => 0,
            Some(b'~') => -1,
            Some(c) if c.is_ascii_digit() => 0,
            Some(c) if c.is_ascii_alphabetic() => i32::from(*c),
            Some(c) => i32::from(*c) + 256,
        }
    };
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        while a.get(i).is_some_and(|c| !c.is_ascii_digit()) || b.get(j).is_some_and(|c| !c.is_ascii_digit()) {
            let (ac, bc) = (order(a.get(i)), order(b.get(j)));
            if ac != bc {
                return ac.cmp(&bc);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first_diff = Ordering::Equal;
        while let (Some(x), Some(y)) = (a.get(i).filter(|c| c.is_ascii_digit()), b.get(j).filter(|c| c.is_ascii_digit())) {
            if first_diff == Ordering::Equal {
                first_diff = x.cmp(y);
            }
            i += 1;
            j += 1;
        }
        if a.get(i).is_some_and(u8::is_ascii_digit) {
            return Ordering::Greater;
        }
        if b.get(j).is_some_and(u8::is_ascii_digit) {
            return Ordering::Less;
        }
        if first_diff != Ordering::Equal {
            return first_diff;
        }
    }
    Ordering::Equal
}

/// The archive entry of the machine's own apt sources: its URI and the keyring it is signed
/// with, if it names one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Archive {
    pub uri: String,
    pub signed_by: Option<String>,
}

/// The first `deb` entry of these sources files (one-line `.list` or deb822 `.sources`) that
/// serves the suite `codename`: the machine's Debian archive mirror.
pub(crate) fn archive_in(files: &[(PathBuf, String)], codename: &str) -> Option<Archive> {
    for (path, text) in files {
        let found = if path.extension().is_some_and(|e| e == "sources") {
            deb822_archive(text, codename)
        } else {
            one_line_archive(text, codename)
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

fn one_line_archive(text: &str, codename: &str) -> Option<Archive> {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line.strip_prefix("deb ").or_else(|| line.strip_prefix("deb\t")) else { continue };
        let rest = rest.trim_start();
        let (options, rest) = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']').map_or(("", ""), |(o, r)| (o, r)),
            None => ("", rest),
        };
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else { continue };
        if suite == codename {
            let signed_by = options.split_whitespace().find_map(|o| o.strip_prefix("signed-by=")).map(str::to_owned);
            return Some(Archive { uri: uri.trim_end_matches('/').to_owned(), signed_by });
        }
    }
    None
}

fn deb822_archive(text: &str, codename: &str) -> Option<Archive> {
    let mut stanza: Vec<(String, String)> = Vec::new();
    let lines = text.lines().chain(std::iter::once(""));
    for line in lines {
        if line.trim().is_empty() {
            let field = |name: &str| stanza.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
            let enabled = field("Enabled").is_none_or(|v| !v.eq_ignore_ascii_case("no"));
            let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
            let serves = field("Suites").is_some_and(|s| s.split_whitespace().any(|s| s == codename));
            if let (true, true, true, Some(uri)) = (enabled, is_deb, serves, field("URIs").and_then(|u| u.split_whitespace().next())) {
                // A keyring given inline (an armored key) is not a file to name.
                let signed_by = field("Signed-By").map(str::trim).filter(|s| s.starts_with('/')).map(str::to_owned);
                return Some(Archive { uri: uri.trim_end_matches('/').to_owned(), signed_by });
            }
            stanza.clear();
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            // A continuation line (an inline key): kept out of the field's first line.
        } else if let Some((k, v)) = line.split_once(':') {
            stanza.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    None
}

/// The private configuration's sources list: the archive's [`SUITES`], main only.
pub(crate) fn sources_list(archive: &Archive) -> String {
    let archs: Vec<&str> = [Arch::X86_64, Arch::Arm64].iter().map(|a| a.debian()).collect();
    let mut options = format!("arch={}", archs.join(","));
    if let Some(k) = &archive.signed_by {
        options += &format!(" signed-by={k}");
    }
    SUITES.iter().map(|s| format!("deb [{options}] {} {s} main\n", archive.uri)).collect()
}

/// The machine's Debian archive, read from its own apt sources.
pub(crate) fn host_archive() -> Result<Archive> {
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let codename = os
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|c| c.trim_matches('"').to_owned())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow!("/etc/os-release names no VERSION_CODENAME: the guests' kernels come from a Debian archive"))?;
    let mut files = Vec::new();
    let main = PathBuf::from("/etc/apt/sources.list");
    if let Ok(text) = std::fs::read_to_string(&main) {
        files.push((main, text));
    }
    let mut parts: Vec<PathBuf> =
        std::fs::read_dir("/etc/apt/sources.list.d").map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    parts.sort();
    for p in parts.into_iter().filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources")) {
        if let Ok(text) = std::fs::read_to_string(&p) {
            files.push((p, text));
        }
    }
    archive_in(&files, &codename).ok_or_else(|| {
        anyhow!(
            "no entry of /etc/apt/sources.list or /etc/apt/sources.list.d serves {codename}: add your Debian archive mirror there \
             (the guests' other kernels are fetched from its {} suites)",
            SUITES.join(", ")
        )
    })
}

/// The `-o` options that make apt-get and apt-cache read the private configuration, its lists
/// fetched first when missing or stale (once per run).
pub(crate) fn private_options() -> Result<Vec<String>> {
    static FRESH: Mutex<bool> = Mutex::new(false);
    let mut fresh = FRESH.lock().map_err(|_| anyhow!("the private apt lists' lock is poisoned"))?;
    if !*fresh {
        update_lists(false)?;
        *fresh = true;
    }
    Ok(options())
}

fn options() -> Vec<String> {
    let dir = Path::new(APT_DIR);
    let archs: Vec<&str> = [Arch::X86_64, Arch::Arm64].iter().map(|a| a.debian()).collect();
    let mut o = Vec::new();
    for (k, v) in [
        ("Dir::Etc::sourcelist", dir.join("sources.list").display().to_string()),
        ("Dir::Etc::sourceparts", "-".to_owned()),
        ("Dir::State::Lists", dir.join("lists").display().to_string()),
        ("Dir::State::status", dir.join("status").display().to_string()),
        ("Dir::Cache", dir.join("cache").display().to_string()),
        // A binary cache of the lists (in Dir::Cache), so each apt-cache call after the first
        // takes milliseconds, not seconds; the machine's apt configuration may turn it off.
        ("Dir::Cache::pkgcache", "pkgcache.bin".to_owned()),
        ("Dir::Cache::srcpkgcache", String::new()),
        // This machine's architecture (x86_64: the guests' only host), and the arm64 guests'.
        ("APT::Architecture", Arch::X86_64.debian().to_owned()),
        ("APT::Architectures", archs.join(",")),
        // Only the package lists: no translations, no AppStream metadata.
        ("Acquire::Languages", "none".to_owned()),
        ("Acquire::IndexTargets::deb::DEP-11::DefaultEnabled", "false".to_owned()),
        ("Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled", "false".to_owned()),
        ("Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled", "false".to_owned()),
        ("Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled", "false".to_owned()),
    ] {
        o.push("-o".to_owned());
        o.push(format!("{k}={v}"));
    }
    o
}

/// Writes the private configuration and fetches its lists when they are missing, stale, made
/// for other sources, or `force`d (a download failed).
pub(crate) fn update_lists(force: bool) -> Result<()> {
    let dir = Path::new(APT_DIR);
    let lists = dir.join("lists");
    std::fs::create_dir_all(lists.join("partial")).with_context(|| format!("creating {} (run as root)", lists.display()))?;
    std::fs::create_dir_all(dir.join("cache/archives/partial"))?;
    let status = dir.join("status");
    if !status.exists() {
        std::fs::write(&status, "")?;
    }
    let sources = dir.join("sources.list");
    let want = sources_list(&host_archive()?);
    let changed = std::fs::read_to_string(&sources).ok().as_deref() != Some(want.as_str());
    if changed {
        std::fs::write(&sources, &want)?;
    }
    let stamp = lists.join(".execprof-updated");
    let age = std::fs::metadata(&stamp).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
    if !(force || changed || age.is_none_or(|a| a > LISTS_MAX_AGE)) {
        return Ok(());
    }
    eprintln!("xtask: fetching the package lists of {} into {} (again after a day)", SUITES.join(", "), lists.display());
    run(Command::new("apt-get").args(options()).args(["update", "-qq"]))
        .with_context(|| format!("fetching the package lists of {} (apt's configuration: {sources:?})", SUITES.join(", ")))?;
    std::fs::write(&stamp, "")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_select_their_kernel_and_no_label_the_defaults() {
        let labels = |only| select(only).unwrap().into_iter().map(|(k, line)| (k.label, line)).collect::<Vec<_>>();
        assert_eq!(labels(None), [("6.1", None), ("6.12", None)]);
        for l in ["5.10", "6.1", "6.12", "6.18", "newest"] {
            assert_eq!(labels(Some(l)), [(l, None)]);
        }
        // A line number that is no fixed label must be the newest line's.
        assert_eq!(labels(Some("7.3")), [("newest", Some("7.3".to_owned()))]);
        for bad in ["7", "6.x", "latest", "", "6.1.0", ".3"] {
            let e = select(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("give --kernel one of 5.10, 6.1, 6.12, 6.18, newest"), "{bad}: {e}");
        }
    }

    #[test]
    fn packages_are_named_for_each_architecture() {
        assert_eq!(for_arch(Arch::X86_64, "linux-image-cloud-amd64"), "linux-image-cloud-amd64");
        assert_eq!(for_arch(Arch::Arm64, "linux-image-cloud-amd64"), "linux-image-cloud-arm64:arm64");
        assert_eq!(for_arch(Arch::Arm64, "linux-image-6.12-cloud-amd64"), "linux-image-6.12-cloud-arm64:arm64");
    }

    /// `apt-cache madison linux-image-cloud-amd64` in the private configuration, 2026-12.
    const MADISON: &str = "linux-image-cloud-amd64 | 7.3.4-1~bpo13+1 | http://mirror/debian trixie-backports/main amd64 Packages\n\
        linux-image-cloud-amd64 |   7.2.13-1 | http://mirror/debian sid/main amd64 Packages\n\
        linux-image-cloud-amd64 | 6.12.117-1 | http://mirror/debian trixie/main amd64 Packages\n\
        linux-image-cloud-amd64 | 5.10.223-1 | http://mirror/debian bullseye/main amd64 Packages\n";

    #[test]
    fn madison_lines_give_each_suites_version() {
        let m = parse_madison(MADISON);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1], Madison { package: "linux-image-cloud-amd64".into(), version: "7.2.13-1".into(), suite: "sid".into() });
        assert_eq!(m[3].suite, "bullseye");
    }

    #[test]
    fn the_newest_line_is_the_highest_stable_version_of_its_suites() {
        let mut m = parse_madison(MADISON);
        assert_eq!(newest_stable(&m, &["trixie-backports", "sid"]).map(|m| m.version.as_str()), Some("7.3.4-1~bpo13+1"));
        // sid ahead of backports; a release candidate never counts.
        m.push(Madison { package: "p".into(), version: "7.4.1-1".into(), suite: "sid".into() });
        m.push(Madison { package: "p".into(), version: "7.5~rc3-1~exp1".into(), suite: "sid".into() });
        assert_eq!(newest_stable(&m, &["trixie-backports", "sid"]).map(|m| m.version.as_str()), Some("7.4.1-1"));
        assert_eq!(newest_stable(&m, &["experimental"]), None);
        assert_eq!(kernel_line("7.3.4-1~bpo13+1").as_deref(), Some("7.3"));
        assert_eq!(kernel_line("5.10.223-1").as_deref(), Some("5.10"));
        assert_eq!(kernel_line("7.4~rc3-1~exp1").as_deref(), Some("7.4"));
        assert_eq!(kernel_line("1:2.3-1").as_deref(), Some("2.3"));
        assert_eq!(kernel_line("7-1"), None);
    }

    #[test]
    fn versions_compare_as_dpkg_does() {
        use Ordering::*;
        for (a, b, want) in [
            ("7.3.4-1~bpo13+1", "7.2.13-1", Greater),
            ("6.18.15-1~bpo13+1", "6.18.9-1~bpo13+1", Greater),
            ("7.4~rc3-1", "7.4-1", Less),
            ("7.3.4-1~bpo13+1", "7.3.4-1", Less),
            ("1:1.0", "2.0", Greater),
            ("1.0-1", "1.0-1", Equal),
            ("1.0a", "1.0", Greater),
            ("1.0+b1", "1.0", Greater),
            ("1.01", "1.1", Equal),
            ("1.10", "1.9", Greater),
        ] {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn a_lines_builds_are_its_cloud_packages_of_the_architecture() {
        let line = |n| line_build(n, "6.18", Arch::X86_64);
        assert_eq!(line("linux-image-6.18.15+deb13-cloud-amd64"), Some("6.18.15+deb13"));
        assert_eq!(line("linux-image-6.18.5+deb13-cloud-amd64"), Some("6.18.5+deb13"));
        for other in [
            "linux-image-6.18.15+deb13-amd64",
            "linux-image-6.18.15+deb13-cloud-amd64-dbg",
            "linux-image-6.18.15+deb13-cloud-amd64-unsigned",
            "linux-image-6.18.15+deb13-cloud-arm64",
            "linux-image-6.180.1+deb13-cloud-amd64",
            "linux-image-6.1.0-57-cloud-amd64",
        ] {
            assert_eq!(line(other), None, "{other}");
        }
        assert_eq!(line_build("linux-image-6.18.15+deb13-cloud-arm64", "6.18", Arch::Arm64), Some("6.18.15+deb13"));
    }

    /// `apt-cache depends` of a 7.x kernel: a metapackage over the split packages.
    #[test]
    fn depends_names_real_packages_only() {
        let text = "linux-image-7.3.4+deb13-cloud-arm64:arm64\n  PreDepends: <linux-base:arm64>\n    linux-base\n \
            |Depends: <dracut:arm64>\n  Depends: linux-base-7.3.4+deb13-cloud-arm64:arm64\n  \
            Depends: linux-binary-7.3.4+deb13-cloud-arm64:arm64\n  Depends: linux-modules-7.3.4+deb13-cloud-arm64:arm64\n  \
            Depends: <linux-image-virtual>\n";
        assert_eq!(depends(text, "linux-binary-"), ["linux-binary-7.3.4+deb13-cloud-arm64:arm64"]);
        assert_eq!(depends(text, "linux-modules-"), ["linux-modules-7.3.4+deb13-cloud-arm64:arm64"]);
        assert!(depends(text, "linux-image-").is_empty());
        assert_eq!(
            depends("linux-image-cloud-amd64\n  Depends: linux-image-5.10.0-32-cloud-amd64\n", "linux-image-"),
            ["linux-image-5.10.0-32-cloud-amd64"]
        );
    }

    #[test]
    fn the_archive_is_the_entry_serving_the_machines_suite() {
        let deb822 = "Types: deb\n# http://snapshot/archive/debian/20250520T000000Z\nURIs: http://mirror.example/debian/\n\
            Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
            Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        let security_first = "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n";
        let files = [(PathBuf::from("a.sources"), security_first.to_owned()), (PathBuf::from("debian.sources"), deb822.to_owned())];
        assert_eq!(
            archive_in(&files, "bookworm"),
            Some(Archive {
                uri: "http://mirror.example/debian".into(),
                signed_by: Some("/usr/share/keyrings/debian-archive-keyring.gpg".into())
            })
        );
        let disabled = "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n";
        assert_eq!(archive_in(&[(PathBuf::from("x.sources"), disabled.into())], "bookworm"), None);
        let one_line = "# comment\ndeb-src http://src.example/debian bookworm main\n\
            deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n";
        assert_eq!(
            archive_in(&[(PathBuf::from("sources.list"), one_line.into())], "bookworm"),
            Some(Archive { uri: "http://mirror.example/debian".into(), signed_by: Some("/k.gpg".into()) })
        );
        assert_eq!(
            archive_in(&[(PathBuf::from("sources.list"), "deb http://m.example/debian bookworm main\n".into())], "bookworm"),
            Some(Archive { uri: "http://m.example/debian".into(), signed_by: None })
        );
        assert_eq!(archive_in(&[(PathBuf::from("sources.list"), one_line.into())], "trixie"), None);
    }

    #[test]
    fn the_private_sources_name_every_suite_for_both_architectures() {
        let list = sources_list(&Archive { uri: "http://m.example/debian".into(), signed_by: Some("/k.gpg".into()) });
        assert_eq!(
            list,
            "deb [arch=amd64,arm64 signed-by=/k.gpg] http://m.example/debian bullseye main\n\
             deb [arch=amd64,arm64 signed-by=/k.gpg] http://m.example/debian trixie main\n\
             deb [arch=amd64,arm64 signed-by=/k.gpg] http://m.example/debian trixie-backports main\n\
             deb [arch=amd64,arm64 signed-by=/k.gpg] http://m.example/debian sid main\n"
        );
    }

    #[test]
    fn the_private_configuration_never_reads_the_machines_sources_or_state() {
        let o = options().join(" ");
        for want in [
            "Dir::Etc::sourcelist=/var/cache/execprof/apt/sources.list",
            "Dir::Etc::sourceparts=-",
            "Dir::State::Lists=/var/cache/execprof/apt/lists",
            "Dir::State::status=/var/cache/execprof/apt/status",
            "Dir::Cache=/var/cache/execprof/apt/cache",
            "APT::Architectures=amd64,arm64",
        ] {
            assert!(o.contains(want), "{want} in {o}");
        }
    }
}
