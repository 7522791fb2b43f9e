//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`): struct layouts and function presence
//! (btf-rs), program loading and trampolines (aya). The file is several megabytes. btf-rs
//! reading it through a file seeks once per type (over 100,000 system calls, seconds under
//! emulation), and its cached backend builds a map of every type and name (a third of a
//! start's CPU time, most of ten seconds under TCG): so the file is read whole into an
//! anonymous memory file and btf-rs maps that, finding the few types execprof asks for by a
//! scan of their names. Nothing is kept: the agent must not hold the kernel's types.
use std::{cell::RefCell, io::Write as _, rc::Rc};

use anyhow::{Context as _, Result, anyhow};

pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's types for layouts and function lookups.
pub(crate) fn types() -> Result<btf_rs::Btf> {
    let bytes = std::fs::read(VMLINUX_BTF).map_err(|e| {
        anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })?;
    let copy = in_memory_file(&bytes).context("copying the kernel's BTF into memory (memfd_create)")?;
    btf_rs::Btf::from_file_with_backend(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&copy)), btf_rs::Backend::Mmap).map_err(
        |e| anyhow!("cannot parse the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"),
    )
}

/// `bytes` in an anonymous file (memfd), which btf-rs maps: its pages are freed with the map.
fn in_memory_file(bytes: &[u8]) -> std::io::Result<std::fs::File> {
    // SAFETY: memfd_create with a valid name; the descriptor is owned by the File below. The
    // raw call: glibc's wrapper is 2.27's, above the portable builds' floor.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, c"execprof-btf".as_ptr(), libc::MFD_CLOEXEC) } as libc::c_int;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor no one else owns.
    let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.write_all(bytes)?;
    Ok(file)
}

thread_local! {
    /// Inside [`sharing`]: the kernel's BTF for aya once parsed (None before the first use).
    static SHARED: RefCell<Option<Option<Rc<aya::Btf>>>> = const { RefCell::new(None) };
}

/// Runs `f` with the kernel's BTF for aya parsed at most once inside it (a run's boundaries
/// and its exact functions both attach by trampoline: one parse, about a tenth of a start),
/// and dropped when it returns: the agent, which runs long, never holds it.
pub(crate) fn sharing<T>(f: impl FnOnce() -> T) -> T {
    SHARED.with(|s| *s.borrow_mut() = Some(None));
    let out = f();
    SHARED.with(|s| *s.borrow_mut() = None);
    out
}

/// The kernel's BTF as aya takes it: for fentry/fexit programs.
pub(crate) fn aya() -> Result<Rc<aya::Btf>> {
    let parse =
        || aya::Btf::from_sys_fs().map(Rc::new).map_err(|e| anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} for loading ({e})"));
    SHARED.with(|s| match &mut *s.borrow_mut() {
        Some(Some(btf)) => Ok(btf.clone()),
        Some(slot) => Ok(slot.insert(parse()?).clone()),
        None => parse(),
    })
}
