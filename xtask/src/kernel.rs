//! The lab's guest kernels: a base kernel and one kernel per patch, each built once and cached
//! outside the clone under `/var/cache/execprof/kernels/`, so CI runs in fresh clones and later
//! lab runs reuse them.
//!
//! - The base is Debian's newest `linux-source` (7.3 today; `--linux-source 6.12` picks a line)
//!   configured from `make tinyconfig` plus `kernel/qemu.config`, or a tree of the user's own (`--kernel-src DIR`: copied, never
//!   changed; its own `.config`, when it has one, gets the lab's options merged in, and every
//!   option that changed is listed). Its key: the source's hash and the config fragment's.
//!   The base keeps its build tree, so a patched kernel rebuilds only what its patch touches.
//! - A patched kernel is built in a copy of the base's build tree with the patch applied by
//!   `patch -p1 --fuzz=0` (a hunk whose context does not match exactly is refused: with patch's
//!   default fuzz, a hunk of wrong context applied, and built, elsewhere in the file). Its key
//!   adds the patch's hash.
//!
//! Nothing half-built is cached: an image is published last (written, then renamed into
//! place), and a failed build's tree is removed, its log kept and named in the error.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{
    debian::{self, LinuxSource},
    vm::fetch_version,
};

/// Where the known patches are kept, one directory per source line (`kernel/patches/7.3/`).
pub const PATCHES: &str = "kernel/patches";
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
    "CONFIG_HIGH_RES_TIMERS",
    "CONFIG_SECURITY_APPARMOR",
    "CONFIG_SMP",
];

fn cache_root() -> PathBuf {
    PathBuf::from("/var/cache/execprof/kernels")
}

/// The first 16 hex digits of a SHA-256.
fn sha256_of(input: impl AsRef<[u8]>) -> Result<String> {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().context("running sha256sum")?;
    std::io::Write::write_all(child.stdin.as_mut().ok_or_else(|| anyhow!("sha256sum's stdin"))?, input.as_ref())?;
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().map(|h| h[..16].to_owned()).ok_or_else(|| anyhow!("sha256sum printed nothing"))
}

fn sha256_file(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().map(|h| h[..16].to_owned()).ok_or_else(|| anyhow!("sha256sum printed nothing for {}", path.display()))
}

/// Where the base kernel's source comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A Debian `linux-source-LINE` package: its tarball.
    Debian { tarball: PathBuf, source: LinuxSource },
    /// A kernel tree of the user's own (`--kernel-src DIR`).
    Tree { dir: PathBuf },
}

impl Source {
    /// Debian's `linux-source` of `line` ([`debian::NEWEST`] or a line such as `6.12`), its
    /// current build downloaded (never installed) if it is not cached yet.
    pub fn debian(line: &str) -> Result<Self> {
        let source = debian::linux_source(line)?;
        let pkg = fetch_version(source.apt, &source.package, &source.version)?;
        let tarball = std::fs::read_dir(pkg.join("root/usr/src"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with(".tar.xz"))
            .ok_or_else(|| anyhow!("{} {} holds no source tarball under usr/src", source.package, source.version))?;
        Ok(Source::Debian { tarball, source })
    }

    /// The kernel line (`7.3`): the package's, or the tree's Makefile's `VERSION.PATCHLEVEL`.
    pub fn line(&self) -> Result<String> {
        match self {
            Source::Debian { source, .. } => Ok(source.line.clone()),
            Source::Tree { dir } => {
                let makefile = std::fs::read_to_string(dir.join("Makefile"))?;
                let field = |name: &str| {
                    makefile.lines().find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix('=').map(|v| v.trim().to_owned()))
                };
                match (field("VERSION"), field("PATCHLEVEL")) {
                    (Some(v), Some(p)) => Ok(format!("{v}.{p}")),
                    _ => bail!("{}/Makefile names no VERSION and PATCHLEVEL", dir.display()),
                }
            }
        }
    }

    /// The directory of the known patches made against this source's line.
    pub fn patches(&self) -> Result<PathBuf> {
        let dir = Path::new(PATCHES).join(self.line()?);
        if !dir.is_dir() {
            bail!(
                "{} has no directory of known patches ({}): make kernel/patches/*/'s patches again against it there, or give --linux-source with a line that has one",
                self.describe(),
                dir.display()
            );
        }
        Ok(dir)
    }

    /// A tree of the user's own: refused, by name, unless it looks like a kernel tree.
    pub fn tree(dir: &Path) -> Result<Self> {
        let dir = dir.canonicalize().with_context(|| format!("--kernel-src {}: no such directory", dir.display()))?;
        for needed in ["Makefile", "Kconfig", "fs/exec.c", "arch/x86"] {
            if !dir.join(needed).exists() {
                bail!("--kernel-src {}: not a Linux kernel tree (no {needed} there); give the top of a kernel source tree", dir.display());
            }
        }
        Ok(Source::Tree { dir })
    }

    /// For messages: "Debian's linux-source-7.3 (7.3.4-1~bpo13+1)" or the tree's path.
    pub fn describe(&self) -> String {
        match self {
            Source::Debian { source, .. } => format!("Debian's {} ({})", source.package, source.version),
            Source::Tree { dir } => dir.display().to_string(),
        }
    }

    /// The source's hash: the tarball's contents, or a tree's file list with sizes and
    /// modification times (every edit changes one) and its `.config`.
    fn hash(&self) -> Result<String> {
        match self {
            Source::Debian { tarball, .. } => sha256_file(tarball),
            Source::Tree { dir } => {
                let out = Command::new("find")
                    .arg(dir)
                    .args(["-path", "*/.git", "-prune", "-o", "-type", "f", "-printf", "%P %s %T@\\n"])
                    .output()
                    .context("running find")?;
                let mut lines: Vec<&[u8]> = out.stdout.split(|&b| b == b'\n').collect();
                lines.sort_unstable();
                sha256_of(lines.join(&b'\n'))
            }
        }
    }
}

/// A built kernel: its image and the directory that keeps its config and description.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The bzImage.
    pub image: PathBuf,
    /// The cache directory: `bzImage`, `config`, `about` (what it was built from), `patch`.
    pub dir: PathBuf,
    /// The patch applied to the base, if any.
    pub patch: Option<PathBuf>,
}

impl Kernel {
    /// The base's build tree (kept; a patched kernel is built in a copy of it).
    fn build_tree(&self) -> PathBuf {
        self.dir.join("build")
    }

    /// What it was built from, for the results directory.
    pub fn about(&self) -> String {
        std::fs::read_to_string(self.dir.join("about")).unwrap_or_default()
    }
}

thread_local! {
    /// The niceness of this thread's kernel builds: 5, or 19 in the background.
    static NICENESS: std::cell::Cell<u8> = const { std::cell::Cell::new(5) };
}

/// This thread's kernel builds run at the lowest priority from now on: beside other work (CI
/// builds the lab's kernels while the host's tests run) they take only the cores it leaves idle.
pub fn build_in_background() {
    NICENESS.set(19);
}

fn make(build: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", &NICENESS.get().to_string(), "make"]).args(args).current_dir(build).stdin(Stdio::null());
    c
}

/// Runs `cmd`, its output going to `log` (appended); on failure, the error gives `what`, the
/// exit status and the log's last lines.
fn logged(cmd: &mut Command, log: &Path, what: &str) -> Result<()> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let status = cmd.stdout(file.try_clone()?).stderr(file).status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        bail!("{what} ({status}); {}\n  the whole log: {}", failure_lines(&text), log.display());
    }
    Ok(())
}

/// What a failed build's log says: its compiler errors (at most 6, as `make` printed them)
/// and its last line, else its last 12 lines.
fn failure_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines.iter().copied().filter(|l| l.contains(" error: ") || l.contains(": error: ")).take(6).collect();
    if errors.is_empty() {
        let tail = &lines[lines.len().saturating_sub(12)..];
        format!("its last lines:\n    {}", tail.join("\n    "))
    } else {
        format!("its errors:\n    {}\n  and its last line:\n    {}", errors.join("\n    "), lines.last().copied().unwrap_or_default())
    }
}

/// The lab's options merged into the build tree's `.config` (tinyconfig's for Debian's source;
/// the tree's own when it has one), then checked: an option `kernel/qemu.config` turns off that
/// stayed on is an error, an essential one lost is an error. Returns the options that changed
/// from the tree's own config (empty for tinyconfig).
fn configure(build: &Path, own_config: bool, log: &Path) -> Result<Vec<String>> {
    let fragment = Path::new(CONFIG).canonicalize()?;
    let before = if own_config {
        std::fs::read_to_string(build.join(".config"))?
    } else {
        logged(&mut make(build, &["tinyconfig"]), log, "make tinyconfig failed")?;
        String::new()
    };
    logged(
        Command::new("scripts/kconfig/merge_config.sh").args(["-m", ".config"]).arg(&fragment).current_dir(build).stdin(Stdio::null()),
        log,
        "merging kernel/qemu.config failed",
    )?;
    logged(&mut make(build, &["olddefconfig"]), log, "make olddefconfig failed")?;
    let got = std::fs::read_to_string(build.join(".config"))?;
    let wanted = std::fs::read_to_string(&fragment)?;
    let lost: Vec<&str> = wanted
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_suffix("=y"))
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
        bail!("the guest kernel config lost {essential_lost:?}, without which the lab cannot trace; fix {CONFIG} or the tree's .config");
    }
    Ok(if own_config { config_changes(&before, &got) } else { Vec::new() })
}

/// `CONFIG_X` → value (`y`, `m`, a string; `n` for "is not set") of a `.config`.
fn config_values(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            if let Some(opt) = l.strip_prefix("# ").and_then(|l| l.strip_suffix(" is not set")) {
                Some((opt.to_owned(), "n".to_owned()))
            } else {
                l.split_once('=').filter(|(k, _)| k.starts_with("CONFIG_")).map(|(k, v)| (k.to_owned(), v.to_owned()))
            }
        })
        .collect()
}

/// The options whose value differs between two `.config`s, as `CONFIG_X: a → b` (`n` for an
/// option not set or absent).
pub fn config_changes(before: &str, after: &str) -> Vec<String> {
    let (b, a) = (config_values(before), config_values(after));
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let n = "n".to_owned();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (b.get(k).unwrap_or(&n), a.get(k).unwrap_or(&n));
            (x != y).then(|| format!("{k}: {x} → {y}"))
        })
        .collect()
}

/// The changes to options `kernel/qemu.config` (its text `fragment`) names, and how many
/// others changed with them (selected or dropped by their dependencies).
fn lab_options_first<'c>(changes: &'c [String], fragment: &str) -> (Vec<&'c String>, usize) {
    let named: Vec<&String> = changes
        .iter()
        .filter(|c| {
            let opt = c.split(':').next().unwrap_or_default();
            fragment.lines().any(|l| l.starts_with(&format!("{opt}=")) || l == format!("# {opt} is not set"))
        })
        .collect();
    let others = changes.len() - named.len();
    (named, others)
}

/// Publishes `built` as `dir/bzImage` last: copied under a temporary name, then renamed.
fn publish(built: &Path, dir: &Path) -> Result<PathBuf> {
    let image = dir.join("bzImage");
    let tmp = dir.join("bzImage.partial");
    std::fs::copy(built, &tmp)?;
    std::fs::rename(&tmp, &image)?;
    Ok(image)
}

/// The base kernel of `source`, built if it is not cached yet (its build tree is kept).
pub fn base_kernel(source: &Source) -> Result<Kernel> {
    let config_hash = sha256_file(&Path::new(CONFIG).canonicalize()?)?;
    let dir = cache_root().join(format!("base-{}-{config_hash}", source.hash()?));
    let kernel = Kernel { image: dir.join("bzImage"), dir: dir.clone(), patch: None };
    if kernel.image.exists() && kernel.build_tree().join("vmlinux").exists() {
        eprintln!("xtask: base kernel cached: {}", kernel.image.display());
        return Ok(kernel);
    }
    let started = Instant::now();
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let build = kernel.build_tree();
    std::fs::create_dir_all(&build)?;
    let log = dir.join("build.log");
    eprintln!(
        "xtask: building the base kernel from {} in {} (once; cached by source and config; ~9 minutes on 2 cores)",
        source.describe(),
        build.display()
    );
    let result = (|| -> Result<Vec<String>> {
        let own_config = match source {
            Source::Debian { tarball, .. } => {
                logged(
                    Command::new("tar").arg("-xJf").arg(tarball).arg("-C").arg(&build).arg("--strip-components=1"),
                    &log,
                    "unpacking the source failed",
                )?;
                false
            }
            Source::Tree { dir: src } => {
                // The tree is copied, never changed: its objects stay its own.
                logged(Command::new("cp").arg("-a").arg(format!("{}/.", src.display())).arg(&build), &log, "copying the tree failed")?;
                logged(&mut make(&build, &["mrproper"]), &log, "make mrproper failed")?;
                let own = src.join(".config");
                if own.exists() {
                    std::fs::copy(&own, build.join(".config"))?;
                }
                own.exists()
            }
        };
        let changes = configure(&build, own_config, &log)?;
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
        logged(&mut make(&build, &["-j", &jobs, "bzImage"]), &log, "make bzImage failed")?;
        Ok(changes)
    })();
    let changes = match result {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&build);
            return Err(e.context(format!("the base kernel from {} does not build", source.describe())));
        }
    };
    if !changes.is_empty() {
        let fragment = std::fs::read_to_string(CONFIG)?;
        let (named, followed) = lab_options_first(&changes, &fragment);
        eprintln!(
            "xtask: the lab changed {} options of the tree's .config: {} it sets (kernel/qemu.config), {} that follow from them; all in {}",
            changes.len(),
            named.len(),
            followed,
            dir.join("about").display()
        );
        for c in &named {
            eprintln!("  {c}");
        }
    }
    std::fs::copy(build.join(".config"), dir.join("config"))?;
    let mut about =
        format!("base kernel\nsource: {}\nsource hash: {}\nconfig fragment: {CONFIG} ({config_hash})\n", source.describe(), source.hash()?);
    if !changes.is_empty() {
        about.push_str("options changed from the tree's own .config:\n");
        for c in &changes {
            about.push_str(&format!("  {c}\n"));
        }
    }
    std::fs::write(dir.join("about"), about)?;
    publish(&build.join("arch/x86/boot/bzImage"), &dir)?;
    eprintln!("xtask: base kernel built in {:.0} s: {}", started.elapsed().as_secs_f64(), kernel.image.display());
    Ok(kernel)
}

/// `base` with `patch` applied, built if it is not cached yet: in a copy of the base's build
/// tree, so only what the patch touches is rebuilt. A patch that does not apply exactly, or a
/// kernel that does not build, is an error naming the patch.
/// Where the kernel of `base` with `patch` is cached (and built).
pub fn patched_dir(base: &Kernel, patch: &Path) -> Result<PathBuf> {
    let base_key = base.dir.file_name().and_then(|n| n.to_str()).unwrap_or("base").trim_start_matches("base-").to_owned();
    Ok(cache_root().join(format!("patched-{base_key}-{}", sha256_file(patch)?)))
}

pub fn patched_kernel(base: &Kernel, source: &Source, patch: &Path) -> Result<Kernel> {
    let patch = patch.canonicalize().with_context(|| format!("--patch {}: no such file", patch.display()))?;
    let dir = patched_dir(base, &patch)?;
    let kernel = Kernel { image: dir.join("bzImage"), dir: dir.clone(), patch: Some(patch.clone()) };
    if kernel.image.exists() {
        eprintln!("xtask: kernel with {} cached: {}", patch.display(), kernel.image.display());
        return Ok(kernel);
    }
    // Does it apply? Checked on the base's tree before anything is copied.
    let dry = Command::new("patch")
        .args(["-p1", "--fuzz=0", "--dry-run", "--batch", "-i"])
        .arg(&patch)
        .current_dir(base.build_tree())
        .stdin(Stdio::null())
        .output()
        .context("running patch (is it installed?)")?;
    if !dry.status.success() {
        let said = String::from_utf8_lossy(&dry.stdout);
        let why: Vec<&str> = said
            .lines()
            .filter(|l| l.contains("FAILED") || l.contains("can't find") || l.contains("malformed") || l.contains("Only garbage"))
            .collect();
        bail!(
            "{} does not apply to {} (patch -p1 --fuzz=0 at the top of the tree): {}; make the patch against that tree (a hunk's context must match exactly)",
            patch.display(),
            source.describe(),
            if why.is_empty() { said.trim().to_owned() } else { why.join("; ") }
        );
    }
    let started = Instant::now();
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let build = dir.join("build");
    let log = dir.join("build.log");
    eprintln!("xtask: building the kernel with {} (a copy of the base's build tree; cached by the patch's hash)", patch.display());
    let result = (|| -> Result<()> {
        logged(Command::new("cp").arg("-a").arg(base.build_tree()).arg(&build), &log, "copying the base's build tree failed")?;
        logged(Command::new("patch").args(["-p1", "--fuzz=0", "--batch", "-i"]).arg(&patch).current_dir(&build), &log, "patch failed")?;
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
        logged(&mut make(&build, &["-j", &jobs, "bzImage"]), &log, "make bzImage")
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&build);
        return Err(anyhow!("the kernel with {} does not build: {e:#}", patch.display()));
    }
    std::fs::copy(build.join(".config"), dir.join("config"))?;
    std::fs::copy(&patch, dir.join("patch"))?;
    std::fs::write(
        dir.join("about"),
        format!("{}patch: {} ({})\n", base.about().replacen("base kernel", "patched kernel", 1), patch.display(), sha256_file(&patch)?),
    )?;
    let built = build.join("arch/x86/boot/bzImage");
    publish(&built, &dir)?;
    std::fs::remove_dir_all(&build)?;
    eprintln!("xtask: kernel with {} built in {:.0} s: {}", patch.display(), started.elapsed().as_secs_f64(), kernel.image.display());
    Ok(kernel)
}

/// The source line `cargo xtask overhead` measures on: the one its published figures
/// (benches/README.md) were measured on, so a rerun compares with them.
pub(crate) const OVERHEAD_LINE: &str = "6.12";

/// The kernel `cargo xtask overhead` boots: `EXECPROF_LAB_KERNEL` (a bzImage of your own),
/// else the lab's base kernel of [`OVERHEAD_LINE`] built here.
pub(crate) fn lab_kernel() -> Result<PathBuf> {
    match std::env::var_os("EXECPROF_LAB_KERNEL") {
        Some(path) => Ok(PathBuf::from(path)),
        None => Ok(base_kernel(&Source::debian(OVERHEAD_LINE)?)?.image),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_changes_lists_each_changed_option() {
        let before = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=\"x\"\nCONFIG_D=m\n";
        let after = "CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=\"y\"\n# CONFIG_D is not set\nCONFIG_E=y\n";
        assert_eq!(config_changes(before, after), ["CONFIG_B: n → y", "CONFIG_C: \"x\" → \"y\"", "CONFIG_D: m → n", "CONFIG_E: n → y"]);
        assert!(config_changes(before, before).is_empty());
    }

    #[test]
    fn a_failed_build_shows_its_compiler_errors_before_make_s_last_words() {
        let log = "  CC      fs/exec.o\nfs/exec.c:1:2: error: #error execprof lab: this patch does not build\n    1 | #error\nmake: *** [Makefile:236: __sub-make] Error 2\n";
        assert_eq!(
            failure_lines(log),
            "its errors:\n    fs/exec.c:1:2: error: #error execprof lab: this patch does not build\n  and its last line:\n    make: *** [Makefile:236: __sub-make] Error 2"
        );
        assert_eq!(failure_lines("a\n\nb\n"), "its last lines:\n    a\n    b");
    }

    #[test]
    fn the_lab_s_own_options_are_listed_first() {
        let changes = ["CONFIG_64BIT: n → y".to_owned(), "CONFIG_BPF_SYSCALL: n → y".to_owned(), "CONFIG_SLUB_TINY: y → n".to_owned()];
        let (named, others) = lab_options_first(&changes, "CONFIG_BPF_SYSCALL=y\n# CONFIG_SLUB_TINY is not set\n");
        assert_eq!(named, [&changes[1], &changes[2]]);
        assert_eq!(others, 1);
    }

    #[test]
    fn a_directory_that_is_not_a_kernel_tree_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("execprof-not-a-tree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Makefile"), "").unwrap();
        let e = Source::tree(&dir).unwrap_err().to_string();
        assert!(e.contains("not a Linux kernel tree (no Kconfig there)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        let e = Source::tree(Path::new("/nonexistent/linux")).unwrap_err().to_string();
        assert!(e.contains("no such directory"), "{e}");
    }
}
