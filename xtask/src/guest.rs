//! What the guests and the host share, as files: the guests' init scripts (checked in under
//! `xtask/guest/`), the small configuration written beside them into the initramfs
//! (`/guest.env`, sourced by the script), and the results disk, an empty ext4 image the guest
//! writes its recordings, reports and `result.env` onto and the host reads back after QEMU
//! exits (debugfs, no mounting). QEMU exits 0 even when it is killed, so the host decides
//! from `result.env` alone, and says so when it is missing or unfinished.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{cpio::Cpio, run};

/// vm-test's init.
pub(crate) const VM_TEST_INIT: &str = include_str!("../guest/vm-test.sh");
/// vm-suite's init, and the script it runs inside the test root.
pub(crate) const SUITE_INIT: &str = include_str!("../guest/suite-init.sh");
pub(crate) const SUITE_SCRIPT: &str = include_str!("../guest/suite.sh");
/// `cargo xtask lab`'s init: one kernel's boot, the workload's exact and sampled passes.
pub(crate) const LAB_INIT: &str = include_str!("../guest/lab.sh");
/// `cargo xtask overhead`'s init.
pub(crate) const OVERHEAD_INIT: &str = include_str!("../guest/overhead.sh");

/// The guest's `/guest.env`: shell variable assignments, each value single-quoted.
#[derive(Default)]
pub(crate) struct GuestEnv(String);

impl GuestEnv {
    pub(crate) fn set(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        let value = value.to_string().replace('\'', r"'\''");
        let _ = writeln!(self.0, "{name}='{value}'");
        self
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The name a guest gives the `n`th virtio disk (0: vda).
pub(crate) fn virtio_disk(n: usize) -> String {
    format!("/dev/vd{}", char::from(b'a' + n as u8))
}

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

/// The modules of [`MODULES`] this kernel package has (in `lib/modules` or, Debian's 7.x
/// `linux-modules-…`, `usr/lib/modules`; `.ko` or `.ko.xz`), uncompressed (busybox's insmod
/// takes plain objects), numbered in an order that loads each after the modules it depends on.
pub(crate) fn modules(pkg_dir: &Path, cpio: &mut Cpio) -> Result<()> {
    let root = pkg_dir.join("root");
    let base = crate::vm::module_trees(&root)
        .into_iter()
        .map(|t| t.join("kernel"))
        .find(|k| k.is_dir())
        .ok_or_else(|| anyhow!("no modules in {} (neither lib/modules/*/kernel nor usr/lib/modules/*/kernel)", root.display()))?;
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

/// The writable disk a guest leaves its results on.
pub(crate) struct ResultsDisk {
    pub image: PathBuf,
}

impl ResultsDisk {
    /// An empty ext4 image of `mib` MiB. No journal: what the guest wrote and synced is on the
    /// image as it is, and debugfs (which replays no journal) reads it even after a guest that
    /// never unmounted.
    pub(crate) fn create(image: PathBuf, mib: u64) -> Result<Self> {
        let _ = std::fs::remove_file(&image);
        std::fs::File::create(&image)?.set_len(mib << 20)?;
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-O", "^has_journal"]).arg(&image))
            .context("making the results disk (is e2fsprogs installed? `cargo xtask setup` installs it)")?;
        Ok(Self { image })
    }

    /// Copies the disk's files into `dir` (emptied first) and reads its `result.env`.
    pub(crate) fn read_back(&self, dir: &Path, console: &Path) -> Result<GuestResult> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        let out = Command::new("debugfs")
            .arg("-R")
            .arg(format!("rdump / {}", dir.display()))
            .arg(&self.image)
            .output()
            .context("running debugfs (e2fsprogs)")?;
        if !out.status.success() {
            bail!("debugfs could not read the results disk {}: {}", self.image.display(), String::from_utf8_lossy(&out.stderr));
        }
        GuestResult::read(dir, console)
    }
}

/// The guest's `result.env`: `key=value` lines, the last one `finished=yes` when the guest's
/// script ran to its end.
pub(crate) struct GuestResult {
    /// Where the results disk's files were copied.
    pub dir: PathBuf,
    values: Vec<(String, String)>,
}

impl GuestResult {
    fn read(dir: &Path, console: &Path) -> Result<Self> {
        let path = dir.join("result.env");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow!(
                "the guest left no result file ({}: {e}): it did not get as far as its first step (kernel panic, no results \
                 disk, or stopped at the time limit); see the console in {}",
                path.display(),
                console.display()
            )
        })?;
        Ok(Self { dir: dir.to_owned(), values: parse_env(&text) })
    }

    /// The last value given to `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.values.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value given to `key`, in order.
    pub(crate) fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.values.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `key` as an exit code (None: never written, or not a number).
    pub(crate) fn code(&self, key: &str) -> Option<i32> {
        self.get(key)?.parse().ok()
    }

    /// The guest's script reached its end.
    pub(crate) fn finished(&self) -> bool {
        self.get("finished") == Some("yes")
    }
}

fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_owned(), v.trim_end_matches('\r').to_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_env_quotes_for_the_shell() {
        let env = GuestEnv::default().set("STEPS", 200).set("ROOT", "/a b/it's");
        assert_eq!(std::str::from_utf8(env.as_bytes()).unwrap(), "STEPS='200'\nROOT='/a b/it'\\''s'\n");
    }

    #[test]
    fn result_file_keeps_repeated_keys_and_the_last_value() {
        let r = GuestResult {
            dir: PathBuf::new(),
            values: parse_env("kernel=6.12.1\nnote=a\nnote=b=c\ntest_rc_0=101\nbroken line\nfinished=yes\n"),
        };
        assert_eq!(r.get("kernel"), Some("6.12.1"));
        assert_eq!(r.all("note").collect::<Vec<_>>(), ["a", "b=c"]);
        assert_eq!(r.code("test_rc_0"), Some(101));
        assert_eq!(r.code("test_rc_1"), None);
        assert!(r.finished());
    }

    #[test]
    fn disks_are_named_in_drive_order() {
        assert_eq!(virtio_disk(0), "/dev/vda");
        assert_eq!(virtio_disk(2), "/dev/vdc");
    }
}
