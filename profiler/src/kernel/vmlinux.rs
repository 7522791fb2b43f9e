//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`), read once per process and parsed at
//! most once per reader: struct layouts and function presence (btf-rs), program loading and
//! trampolines (aya). The file is several megabytes: btf-rs reading it through a file seeks
//! once per type (over 100,000 system calls), and every extra parse costs a noticeable share
//! of a run's start-up (seconds under emulation).
use std::sync::OnceLock;

use anyhow::{Result, anyhow};

pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The file's bytes, or why they could not be read.
fn bytes() -> Result<&'static [u8]> {
    static BYTES: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(VMLINUX_BTF).map_err(|e| e.to_string())).as_deref().map_err(|e| {
        anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })
}

/// The kernel's types for layouts and function lookups.
pub(crate) fn types() -> Result<&'static btf_rs::Btf> {
    static TYPES: OnceLock<Result<btf_rs::Btf, String>> = OnceLock::new();
    let bytes = bytes()?;
    TYPES.get_or_init(|| btf_rs::Btf::from_bytes(bytes).map_err(|e| e.to_string())).as_ref().map_err(|e| {
        anyhow!("cannot parse the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })
}

/// The kernel's BTF as aya takes it: for fentry/fexit programs and for the loader.
pub(crate) fn aya() -> Result<&'static aya::Btf> {
    static AYA: OnceLock<Result<aya::Btf, String>> = OnceLock::new();
    let bytes = bytes()?;
    AYA.get_or_init(|| aya::Btf::parse(bytes, aya::Endianness::default()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| anyhow!("cannot parse the kernel's BTF at {VMLINUX_BTF} for loading ({e})"))
}
