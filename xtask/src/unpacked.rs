//! Where set-up unpacks the packages it does not install (a tool that would remove one of the
//! user's packages, the arm64 cross-build's std), and how the other tasks find those tools:
//! read by set-up and by the tasks that run QEMU and binutils, so neither imports the other.
use std::path::{Path, PathBuf};

/// Where packages that could not be installed without removing another are unpacked.
pub(crate) const UNPACKED: &str = "/var/cache/execprof/unpacked";

/// A tool from the system's PATH, or from a package unpacked under [`UNPACKED`] (its
/// `usr/bin`, or `usr/sbin` for daemons such as `dockerd`).
pub(crate) fn tool(name: &str) -> PathBuf {
    let unpacked = ["usr/bin", "usr/sbin"].iter().map(|d| Path::new(UNPACKED).join(d).join(name)).find(|p| p.exists());
    match unpacked {
        Some(path) if !on_path(name) => path,
        _ => PathBuf::from(name),
    }
}

/// Where Debian's `seabios` and `qemu-system-data` keep the BIOS and option ROMs. The QEMU
/// unpacked under [`UNPACKED`] has no package links to them in its data directory, so it is
/// told where they are (`-L`; given any, QEMU searches only those).
const QEMU_FIRMWARE: &[&str] = &["/usr/share/qemu", "/usr/share/seabios"];

/// QEMU's arguments for finding its firmware: none for an installed QEMU.
pub(crate) fn qemu_firmware_args(qemu: &str) -> Vec<String> {
    if tool(qemu) == Path::new(qemu) {
        return Vec::new();
    }
    QEMU_FIRMWARE.iter().filter(|d| Path::new(d).is_dir()).flat_map(|d| ["-L".to_owned(), (*d).to_owned()]).collect()
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}
