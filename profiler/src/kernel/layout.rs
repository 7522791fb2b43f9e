//! Byte offsets of the kernel struct fields the eBPF side reads, found in the running kernel's
//! BTF. Rust eBPF has no CO-RE relocations, so user space does the relocation: the offsets are
//! written into the eBPF object's globals before it is loaded.
use anyhow::{Context as _, Result, anyhow, bail};
use btf_rs::{Btf, Type};

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
    /// `task_struct.stack`, and where the saved user registers sit above it: for kernels
    /// without `bpf_task_pt_regs` (`profiler_common::names::GLOBAL_PT_REGS_IN_STACK`).
    #[serde(default)]
    pub stack: u64,
    #[serde(default)]
    pub pt_regs_in_stack: u64,
    /// `task_struct.__state` (`state` before 5.14).
    #[serde(default)]
    pub state: u64,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.level`, `cgroup.ancestor_ids`: a
    /// task's cgroup-v2 ancestor where the kernel has no helper for it. `ancestor_ids` is 0
    /// where the kernel keeps pointers instead (6.1+, which all have the helper).
    #[serde(default)]
    pub cgroups: u64,
    #[serde(default)]
    pub css_set_dfl_cgrp: u64,
    #[serde(default)]
    pub cgroup_level: u64,
    #[serde(default)]
    pub cgroup_ancestor_ids: u64,
    /// What the kernel's BPF allows: bits of `profiler_common::kernel_features`
    /// ([`crate::kernel::features`]).
    #[serde(default)]
    pub bpf_features: u64,
}

impl TaskLayout {
    /// The running kernel's offsets, and what its BPF allows.
    pub(crate) fn from_running_kernel() -> Result<Self> {
        crate::kernel::features::refuse_unsupported()?;
        let btf = crate::kernel::vmlinux::types()?;
        Ok(Self { bpf_features: crate::kernel::features::probe(), ..Self::from_btf(&btf)? })
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
            stack: task("stack")?,
            pt_regs_in_stack: thread_size(kasan()).saturating_sub(struct_size(btf, "pt_regs")?),
            state: task("__state").or_else(|_| task("state"))?,
            cgroups: task("cgroups").unwrap_or(0),
            css_set_dfl_cgrp: member_offset(btf, "css_set", "dfl_cgrp").unwrap_or(0),
            cgroup_level: member_offset(btf, "cgroup", "level").unwrap_or(0),
            cgroup_ancestor_ids: member_offset(btf, "cgroup", "ancestor_ids").unwrap_or(0),
            bpf_features: 0,
        })
    }
}

/// The size of a task's kernel stack, `THREAD_SIZE`, on x86_64 and arm64: 16 KiB, twice that
/// with KASAN, and on arm64 at least a page. Its saved user registers are its top
/// `sizeof(struct pt_regs)` bytes (`task_pt_regs`; x86_64 pads nothing there before FRED,
/// 6.9, whose kernels have `bpf_task_pt_regs`).
fn thread_size(kasan: bool) -> u64 {
    let size = 16384 << u64::from(kasan);
    if cfg!(target_arch = "aarch64") { size.max(page_size()) } else { size }
}

fn page_size() -> u64 {
    // SAFETY: plain libc call.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Whether the running kernel was built with KASAN, from its configuration where the system
/// keeps one (`/boot/config-RELEASE`, `/proc/config.gz`); without either, as distributions
/// build them: no.
fn kasan() -> bool {
    let release = crate::model::meta::KernelInfo::current().release;
    let config = std::fs::read_to_string(format!("/boot/config-{release}")).ok().or_else(|| {
        use std::io::Read as _;
        let gz = std::fs::File::open("/proc/config.gz").ok()?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(gz).read_to_string(&mut text).ok()?;
        Some(text)
    });
    config.is_some_and(|c| c.lines().any(|l| l == "CONFIG_KASAN=y"))
}

/// `sizeof(struct name)` in the kernel's BTF.
fn struct_size(btf: &Btf, name: &str) -> Result<u64> {
    btf.resolve_types_by_name(name)
        .with_context(|| format!("struct {name} is not in the kernel's BTF"))?
        .into_iter()
        .find_map(|t| if let Type::Struct(s) = t { Some(s.size() as u64) } else { None })
        .ok_or_else(|| anyhow!("struct {name} is not in the kernel's BTF"))
}

/// Offsets of the agent's reads (`profiler_common::names::GLOBAL_TASK_MM` and on): the
/// caller's executable (`task->mm->exe_file->f_inode`: its inode number and device) and its
/// resident pages (the file, anon and shmem counters of `mm->rss_stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AgentLayout {
    pub task_mm: u64,
    pub mm_exe_file: u64,
    pub file_inode: u64,
    pub inode_ino: u64,
    pub inode_sb: u64,
    pub inode_generation: u64,
    pub sb_dev: u64,
    /// `[file, anon, shmem]` counters inside `mm_struct`; all 0 when not found (the agent
    /// then reports no parent sizes).
    pub rss: [u64; 3],
    /// `file.f_path.dentry`, `dentry.d_parent`, `dentry.d_name.name`: the program's path.
    pub file_dentry: u64,
    pub dentry_parent: u64,
    pub dentry_name: u64,
}

impl AgentLayout {
    pub(crate) fn from_running_kernel() -> Result<Self> {
        Self::from_btf(&crate::kernel::vmlinux::types()?)
    }

    pub(crate) fn from_btf(btf: &Btf) -> Result<Self> {
        Ok(Self {
            task_mm: member_offset(btf, "task_struct", "mm")?,
            mm_exe_file: member_offset(btf, "mm_struct", "exe_file")?,
            file_inode: member_offset(btf, "file", "f_inode")?,
            inode_ino: member_offset(btf, "inode", "i_ino")?,
            inode_sb: member_offset(btf, "inode", "i_sb")?,
            inode_generation: member_offset(btf, "inode", "i_generation")?,
            sb_dev: member_offset(btf, "super_block", "s_dev")?,
            rss: rss_counters(btf).unwrap_or_default(),
            file_dentry: member_offset(btf, "file", "f_path")? + member_offset(btf, "path", "dentry")?,
            dentry_parent: member_offset(btf, "dentry", "d_parent")?,
            dentry_name: member_offset(btf, "dentry", "d_name")? + member_offset(btf, "qstr", "name")?,
        })
    }
}

/// Where `mm_struct`'s resident-page counters MM_FILEPAGES (0), MM_ANONPAGES (1) and
/// MM_SHMEMPAGES (3) keep their value: before 6.2 `rss_stat` is a `struct mm_rss_stat` of
/// `atomic_long_t count[4]`; from 6.2 an array of `struct percpu_counter`, whose `count` is
/// the batched (approximate) total.
fn rss_counters(btf: &Btf) -> Result<[u64; 3]> {
    let base = member_offset(btf, "mm_struct", "rss_stat")?;
    let old_layout = btf.resolve_types_by_name("mm_rss_stat").is_ok_and(|t| t.iter().any(|t| matches!(t, Type::Struct(_))));
    let (size, count) = if old_layout {
        (8, member_offset(btf, "mm_rss_stat", "count")?)
    } else {
        (struct_size(btf, "percpu_counter")?, member_offset(btf, "percpu_counter", "count")?)
    };
    Ok([0u64, 1, 3].map(|i| base + i * size + count))
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
        let btf = crate::kernel::vmlinux::types().unwrap_or_else(|e| panic!("{e:#}"));
        let layout = TaskLayout::from_btf(&btf).expect("task_struct fields");
        assert!(layout.pid > 0 && layout.tgid == layout.pid + 4, "{layout:?}");
        assert!(layout.min_flt > 0 && layout.maj_flt == layout.min_flt + 8, "{layout:?}");
        assert!(layout.signal > 0 && layout.real_parent > 0);
        assert!(layout.bprm_filename > 0);
        assert!(layout.pending_signal > 0 && layout.group_exec_task > 0, "{layout:?}");
        // x86_64: flags, syscall_work (5.11+), then status.
        #[cfg(target_arch = "x86_64")]
        assert!([8, 16].contains(&layout.thread_status), "{layout:?}");
        assert!(layout.state > 0 && layout.state != layout.pid, "{layout:?}");
        // Every kernel has the path to a task's cgroup; the ids array only before 6.1.
        assert!(layout.cgroups > 0 && layout.css_set_dfl_cgrp > 0 && layout.cgroup_level > 0, "{layout:?}");
        let pointers = member_offset(&btf, "cgroup", "ancestors").is_ok();
        assert_eq!(layout.cgroup_ancestor_ids == 0, pointers, "{layout:?}");
        // x86_64's and arm64's `struct pt_regs` are 168 and 336 bytes, below a 16 KiB stack.
        assert!(layout.stack > 0 && (16384 - 400..16384 - 100).contains(&layout.pt_regs_in_stack), "{layout:?}");
        assert!(member_offset(&btf, "task_struct", "no_such_field").is_err());
    }

    #[test]
    fn finds_the_agents_fields_in_running_kernel() {
        let btf = crate::kernel::vmlinux::types().unwrap_or_else(|e| panic!("{e:#}"));
        let layout = AgentLayout::from_btf(&btf).expect("the agent's fields");
        assert!(layout.task_mm > 0 && layout.mm_exe_file > 0 && layout.file_inode > 0, "{layout:?}");
        assert!(layout.inode_ino > 0 && layout.inode_sb > 0, "{layout:?}");
        assert!(layout.file_dentry > 0 && layout.dentry_parent > 0 && layout.dentry_name > layout.dentry_parent, "{layout:?}");
        let [file, anon, shmem] = layout.rss;
        assert!(file > 0 && anon > file && shmem > anon, "{layout:?}");
    }
}
