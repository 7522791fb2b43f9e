//! Byte offsets of the kernel struct fields the eBPF side reads, found in the running kernel's
//! BTF. Rust eBPF has no CO-RE relocations, so user space does the relocation: the offsets are
//! written into the eBPF object's globals before it is loaded.
use anyhow::{Context as _, Result, anyhow, bail};
use btf_rs::{Btf, Type};

pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Offsets (bytes) inside `struct task_struct`, `struct signal_struct`, `struct linux_binprm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TaskLayout {
    pub pid: u64,
    pub tgid: u64,
    /// `task_struct.real_parent` (an adopted process's parent, `--cgroup`).
    #[serde(default)]
    pub real_parent: u64,
    pub min_flt: u64,
    pub maj_flt: u64,
    pub signal: u64,
    pub signal_live: u64,
    /// `linux_binprm.filename`.
    pub bprm_filename: u64,
    /// `task_struct.pending.signal`: 0 when not found (kills are then not told apart).
    pub pending_signal: u64,
    /// `signal_struct.group_exec_task` (5.17+; `group_exit_task` before): 0 when not found.
    pub group_exec_task: u64,
    /// `task_struct.thread_info.status` (x86, whose `TS_COMPAT` bit marks an ia32 syscall):
    /// 0 when not found (no ia32 emulation: every syscall is then 64-bit).
    #[serde(default)]
    pub thread_status: u64,
}

impl TaskLayout {
    pub(crate) fn from_running_kernel() -> Result<Self> {
        let btf = Btf::from_file(VMLINUX_BTF).map_err(|e| {
            anyhow!("cannot read the kernel's BTF at {VMLINUX_BTF} ({e}); execprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
        })?;
        Self::from_btf(&btf)
    }

    pub(crate) fn from_btf(btf: &Btf) -> Result<Self> {
        let task = |field| member_offset(btf, "task_struct", field);
        Ok(Self {
            pid: task("pid")?,
            tgid: task("tgid")?,
            real_parent: task("real_parent")?,
            min_flt: task("min_flt")?,
            maj_flt: task("maj_flt")?,
            signal: task("signal")?,
            signal_live: member_offset(btf, "signal_struct", "live")?,
            bprm_filename: member_offset(btf, "linux_binprm", "filename")?,
            pending_signal: task("pending").and_then(|p| Ok(p + member_offset(btf, "sigpending", "signal")?)).unwrap_or(0),
            group_exec_task: member_offset(btf, "signal_struct", "group_exec_task")
                .or_else(|_| member_offset(btf, "signal_struct", "group_exit_task"))
                .unwrap_or(0),
            thread_status: task("thread_info").and_then(|t| Ok(t + member_offset(btf, "thread_info", "status")?)).unwrap_or(0),
        })
    }
}

/// Byte offset of `field` in `struct name`, looking through anonymous struct/union members
/// (randomized or grouped layouts nest fields in them).
pub(crate) fn member_offset(btf: &Btf, name: &str, field: &str) -> Result<u64> {
    let types = btf.resolve_types_by_name(name).with_context(|| format!("struct {name} is not in the kernel's BTF"))?;
    for ty in types {
        if let Type::Struct(s) = ty
            && let Some(bits) = find_in(btf, &s, field)?
        {
            if bits % 8 != 0 {
                bail!("{name}.{field} is a bit field; execprof cannot read it");
            }
            return Ok(u64::from(bits / 8));
        }
    }
    bail!("field {name}.{field} is not in this kernel's BTF; this kernel's layout is not supported")
}

fn find_in(btf: &Btf, s: &btf_rs::Struct, field: &str) -> Result<Option<u32>> {
    for m in &s.members {
        let member_name = btf.resolve_name(m).unwrap_or_default();
        if member_name == field {
            return Ok(Some(m.bit_offset()));
        }
        if member_name.is_empty() {
            let inner = btf.resolve_chained_type(m).map_err(|e| anyhow!("BTF: {e}"))?;
            if let Type::Struct(inner) | Type::Union(inner) = inner
                && let Some(bits) = find_in(btf, &inner, field)?
            {
                return Ok(Some(m.bit_offset() + bits));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's BTF (every kernel execprof runs on has it): the offsets must be
    /// plausible and distinct.
    #[test]
    fn finds_task_fields_in_running_kernel() {
        let btf = Btf::from_file(VMLINUX_BTF).unwrap_or_else(|e| panic!("no kernel BTF at {VMLINUX_BTF}: {e}"));
        let layout = TaskLayout::from_btf(&btf).expect("task_struct fields");
        assert!(layout.pid > 0 && layout.tgid == layout.pid + 4, "{layout:?}");
        assert!(layout.min_flt > 0 && layout.maj_flt == layout.min_flt + 8, "{layout:?}");
        assert!(layout.signal > 0 && layout.real_parent > 0);
        assert!(layout.bprm_filename > 0);
        assert!(layout.pending_signal > 0 && layout.group_exec_task > 0, "{layout:?}");
        // x86_64: flags, syscall_work, then status.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(layout.thread_status, 16, "{layout:?}");
        assert!(member_offset(&btf, "task_struct", "no_such_field").is_err());
    }
}
