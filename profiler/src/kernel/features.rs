//! What the running kernel's BPF allows, found by trying rather than by its version (a
//! distribution backports features into old releases): each helper by loading a program that
//! calls it (aya's probe), atomic instructions with fetch by loading a tiny program that uses
//! one. The eBPF programs branch on the result (`profiler_common::kernel_features`).
use aya::{
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported},
};
use profiler_common::kernel_features::{ANCESTOR_CGROUP_ID, CURRENT_TASK_BTF, FETCH_ATOMICS, TASK_PT_REGS};

/// The bits of `profiler_common::kernel_features` this kernel has.
pub(crate) fn probe() -> u64 {
    // The raw tracepoints call them; fentry programs, which cannot be probed alone, have the
    // same tracing helpers.
    let has = |helper| {
        is_helper_supported(ProgramType::RawTracePoint, helper).unwrap_or_else(|e| {
            log::debug!("probing {helper:?}: {e}");
            false
        })
    };
    let mut features = 0;
    if has(BpfHelper::BPF_FUNC_get_current_task_btf) {
        features |= CURRENT_TASK_BTF;
        // Its argument is a BTF-typed task: only of use with the typed current task.
        if has(BpfHelper::BPF_FUNC_task_pt_regs) {
            features |= TASK_PT_REGS;
        }
    }
    if has(BpfHelper::BPF_FUNC_get_current_ancestor_cgroup_id) {
        features |= ANCESTOR_CGROUP_ID;
    }
    if loads_compare_exchange() {
        features |= FETCH_ATOMICS;
    }
    features & mask()
}

/// `EXECPROF_BPF_FEATURES`, a mask of the features to use (hex, e.g. `0` for none): runs an
/// old kernel's paths on a new one, as the root tests do.
fn mask() -> u64 {
    std::env::var("EXECPROF_BPF_FEATURES").ok().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()).unwrap_or(u64::MAX)
}

/// The eBPF object as a kernel without atomics with fetch takes it. Such a kernel refuses an
/// object that has one anywhere, even in a branch it would never run: it checks every
/// instruction's reserved fields before following the branches ("BPF_STX uses reserved
/// fields"). Each such instruction (only in the branches that `FETCH_ATOMICS` selects) becomes
/// a plain atomic add of the same operands, which those kernels know; relocations refer to
/// instructions by offset, and no offset moves.
pub(crate) fn without_fetch_atomics(elf: &[u8]) -> anyhow::Result<AlignedObject> {
    let mut out = AlignedObject::new(elf);
    let found = fetch_atomics(elf)?;
    for &at in &found {
        out.bytes_mut()[at + 4..at + 8].fill(0);
    }
    log::debug!("{} atomic instructions with fetch rewritten as plain adds for this kernel", found.len());
    Ok(out)
}

/// The offsets in `elf` of its code's atomic instructions with fetch.
fn fetch_atomics(elf: &[u8]) -> anyhow::Result<Vec<usize>> {
    use object::{Object as _, ObjectSection as _, SectionKind};
    const BPF_STX: u8 = 0x03;
    const BPF_ATOMIC: u8 = 0xc0;
    const BPF_FETCH: u8 = 0x01;
    let file = object::File::parse(elf).map_err(|e| anyhow::anyhow!("parsing execprof's eBPF object: {e}"))?;
    let mut found = Vec::new();
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let Some((start, size)) = section.file_range() else { continue };
        let (start, size) = (start as usize, size as usize);
        // struct bpf_insn: code, registers, off (2 bytes), imm (4, little-endian).
        for (i, insn) in elf[start..start + size].chunks_exact(8).enumerate() {
            if insn[0] & 0x07 == BPF_STX && insn[0] & 0xe0 == BPF_ATOMIC && insn[4] & BPF_FETCH != 0 {
                found.push(start + i * 8);
            }
        }
    }
    Ok(found)
}

/// An object file's bytes, aligned as `aya::include_bytes_aligned!` aligns the built-in one.
pub(crate) struct AlignedObject {
    chunks: Vec<Chunk>,
    len: usize,
}

#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Chunk([u8; 32]);

impl AlignedObject {
    fn new(bytes: &[u8]) -> Self {
        let mut out = Self { chunks: vec![Chunk([0; 32]); bytes.len().div_ceil(32)], len: bytes.len() };
        out.bytes_mut().copy_from_slice(bytes);
        out
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the chunks hold at least `len` initialised bytes; u8 has no alignment.
        unsafe { std::slice::from_raw_parts_mut(self.chunks.as_mut_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.chunks.as_ptr().cast::<u8>(), self.len) }
    }
}

/// What execprof cannot run without that this kernel lacks, one phrase each (empty: all
/// there). A probe that cannot tell (no privilege for `bpf()`) counts as present: the load
/// then says what it needs. `EXECPROF_KERNEL_LACKS` (comma-separated: `btf`, `ringbuf`,
/// `raw_tracepoint`, `probe_read_kernel`) pretends some are missing, for the tests.
pub(crate) fn required_missing() -> Vec<&'static str> {
    let pretend = std::env::var("EXECPROF_KERNEL_LACKS").unwrap_or_default();
    let lacks = |name: &str, present: &dyn Fn() -> bool| pretend.split(',').any(|p| p.trim() == name) || !present();
    let mut out = Vec::new();
    if lacks("btf", &|| std::path::Path::new(crate::kernel::vmlinux::VMLINUX_BTF).exists()) {
        out.push("kernel BTF at /sys/kernel/btf/vmlinux (a kernel built with CONFIG_DEBUG_INFO_BTF, Linux 5.4+)");
    }
    if lacks("ringbuf", &|| aya::sys::is_map_supported(aya::maps::MapType::RingBuf).unwrap_or(true)) {
        out.push("the BPF ring buffer (Linux 5.8)");
    }
    if lacks("raw_tracepoint", &|| aya::sys::is_program_supported(ProgramType::RawTracePoint).unwrap_or(true)) {
        out.push("raw tracepoint programs (Linux 4.17)");
    }
    if lacks("probe_read_kernel", &|| {
        is_helper_supported(ProgramType::RawTracePoint, BpfHelper::BPF_FUNC_probe_read_kernel).unwrap_or(true)
    }) {
        out.push("bpf_probe_read_kernel (Linux 5.5)");
    }
    out
}

/// Refuses a kernel older than execprof supports with one message naming all it lacks.
pub(crate) fn refuse_unsupported() -> anyhow::Result<()> {
    let missing = required_missing();
    if missing.is_empty() {
        return Ok(());
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    anyhow::bail!("{}", refusal(release.trim(), &missing))
}

fn refusal(release: &str, missing: &[&str]) -> String {
    format!(
        "this kernel ({}) lacks what execprof needs: {}. execprof runs on Linux 5.10 and later built with BTF (Debian 11 and newer): boot such a kernel, or read a recording made on one with `execprof report`",
        if release.is_empty() { "release unknown" } else { release },
        missing.join("; ")
    )
}

/// What a run does without `features`' missing bits, one phrase each (empty: nothing missing).
pub(crate) fn missing(features: u64) -> Vec<&'static str> {
    let mut out = Vec::new();
    if features & FETCH_ATOMICS == 0 {
        out.push("no BPF compare-and-exchange (Linux 5.12): exec attempts claim their cells through a hash map");
    }
    if features & CURRENT_TASK_BTF == 0 {
        out.push("no bpf_get_current_task_btf (5.11): the task is read with a helper call per field");
    }
    if features & TASK_PT_REGS == 0 {
        out.push("no bpf_task_pt_regs (5.15): a task's registers are found at the top of its kernel stack");
    }
    if features & ANCESTOR_CGROUP_ID == 0 {
        out.push("no bpf_get_current_ancestor_cgroup_id for tracing (5.14): --cgroup reads the task's cgroup through its pointers");
    }
    out
}

/// Whether the verifier takes a 64-bit compare-and-exchange (on the stack of a socket filter,
/// the simplest program it checks). Kernels before 5.12 refuse it: "BPF_XADD uses reserved
/// fields".
fn loads_compare_exchange() -> bool {
    // struct bpf_insn: code, dst_reg:4 | src_reg:4, off, imm.
    const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
        (code as u64) | (((dst | (src << 4)) as u64) << 8) | ((off as u16 as u64) << 16) | ((imm as u32 as u64) << 32)
    }
    const R0: u8 = 0;
    const R1: u8 = 1;
    const FP: u8 = 10;
    let program: [u64; 6] = [
        insn(0x7a, FP, 0, -8, 0),     // *(u64 *)(r10 - 8) = 0
        insn(0xb7, R0, 0, 0, 0),      // r0 = 0
        insn(0xb7, R1, 0, 0, 1),      // r1 = 1
        insn(0xdb, FP, R1, -8, 0xf1), // r0 = cmpxchg_64(r10 - 8, r0, r1)
        insn(0xb7, R0, 0, 0, 0),      // r0 = 0
        insn(0x95, 0, 0, 0, 0),       // exit
    ];
    let license = c"GPL";
    // The head of `union bpf_attr` for BPF_PROG_LOAD, the rest zero.
    #[repr(C)]
    #[derive(Default)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        _rest: [u64; 12],
    }
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: program.len() as u32,
        insns: program.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: the attribute points at live memory for the call's duration.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const ProgLoad, std::mem::size_of::<ProgLoad>()) };
    if fd < 0 {
        log::debug!("the kernel refuses BPF compare-and-exchange: {}", std::io::Error::last_os_error());
        return false;
    }
    // SAFETY: a descriptor this call owns.
    unsafe { libc::close(fd as i32) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal is one message: the kernel, all it lacks, what to do.
    #[test]
    fn an_old_kernel_is_refused_in_one_message_naming_all_it_lacks() {
        let m = refusal("4.19.0-27-amd64", &["the BPF ring buffer (Linux 5.8)", "bpf_probe_read_kernel (Linux 5.5)"]);
        assert_eq!(
            m,
            "this kernel (4.19.0-27-amd64) lacks what execprof needs: the BPF ring buffer (Linux 5.8); bpf_probe_read_kernel (Linux 5.5). \
             execprof runs on Linux 5.10 and later built with BTF (Debian 11 and newer): boot such a kernel, or read a recording made on one with `execprof report`"
        );
        assert!(refusal("", &["x"]).starts_with("this kernel (release unknown)"));
    }

    /// execprof's own object: its compare-and-exchanges (the attempt cells' claim and release)
    /// become plain adds, and nothing else changes.
    #[test]
    fn only_the_atomics_with_fetch_are_rewritten() {
        let elf = crate::kernel::tracer::ebpf_object();
        let before = fetch_atomics(elf).unwrap();
        let out = without_fetch_atomics(elf).unwrap();
        assert!(!before.is_empty());
        assert_eq!(out.bytes().len(), elf.len());
        assert_eq!(out.bytes().as_ptr() as usize % 32, 0);
        assert!(fetch_atomics(out.bytes()).unwrap().is_empty());
        // Only the immediate's one byte (0xf1, BPF_CMPXCHG) of each such instruction changes.
        let changed: Vec<usize> = elf.iter().zip(out.bytes()).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
        assert_eq!(changed, before.iter().map(|at| at + 4).collect::<Vec<_>>());
    }

    #[test]
    fn a_missing_feature_is_named_with_what_runs_instead() {
        assert!(missing(FETCH_ATOMICS | CURRENT_TASK_BTF | TASK_PT_REGS | ANCESTOR_CGROUP_ID).is_empty());
        let all = missing(0);
        assert_eq!(all.len(), 4);
        assert!(all[0].contains("5.12") && all[1].contains("5.11") && all[2].contains("5.15") && all[3].contains("5.14"), "{all:?}");
        assert_eq!(
            missing(FETCH_ATOMICS | CURRENT_TASK_BTF | ANCESTOR_CGROUP_ID),
            ["no bpf_task_pt_regs (5.15): a task's registers are found at the top of its kernel stack"]
        );
    }

    /// Every kernel has the first two; the version-bound ones are there from their version on
    /// (the distribution kernels this runs on do not backport them).
    #[test]
    #[ignore = "needs root"]
    fn each_feature_is_found_where_the_kernel_has_it() {
        let version = crate::model::meta::KernelInfo::current().version().expect("a kernel version");
        let features = probe();
        assert_eq!(features & FETCH_ATOMICS != 0, version >= (5, 12), "{features:#x} on {version:?}");
        assert_eq!(features & CURRENT_TASK_BTF != 0, version >= (5, 11), "{features:#x} on {version:?}");
        assert_eq!(features & TASK_PT_REGS != 0, version >= (5, 15), "{features:#x} on {version:?}");
        assert_eq!(features & ANCESTOR_CGROUP_ID != 0, version >= (5, 14), "{features:#x} on {version:?}");
    }
}
