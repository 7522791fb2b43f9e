//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`): struct layouts and function presence
//! (btf-rs), program loading and trampolines (aya). The file is several megabytes: btf-rs
//! reading it through a file seeks once per type (over 100,000 system calls, seconds under
//! emulation), so it is read into memory whole and parsed from there. Nothing is kept: the
//! parsed types take tens of megabytes the long-running agent must not hold.
use anyhow::{Result, anyhow};

pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's types for layouts and function lookups.
pub(crate) fn types() -> Result<btf_rs::Btf> {
    let bytes = std::fs::read(VMLINUX_BTF).map_err(|e| {
        anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })?;
    btf_rs::Btf::from_bytes(&bytes).map_err(|e| {
        anyhow!("cannot parse the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })
}

/// The kernel's BTF as aya takes it: for fentry/fexit programs.
pub(crate) fn aya() -> Result<aya::Btf> {
    aya::Btf::from_sys_fs().map_err(|e| anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} for loading ({e})"))
}
