//! `execprof doctor`: what this machine allows, found by trying each mechanism (load, attach,
//! make it fire), not by reading the kernel config; the exec-path functions this kernel has,
//! under which names; and the plan `run` follows here.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf,
    maps::Array,
    programs::{
        FEntry, FExit, KProbe, PerfEvent, RawTracePoint, TracePoint, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::UProbeScope,
    },
};
use profiler_common::doctor as slot;
use serde::Serialize;

use crate::{
    analysis::phases::PhaseModel,
    kernel::ksyms::{KernelSymbols, ProbePresence, VmlinuxBtf},
    kernel::layout::TaskLayout,
    kernel::privileges,
    kernel::probes::{self, RUN_PROBES},
    kernel::tracer::{self, TracerOptions},
    model::meta::KernelInfo,
};

/// The exec-path function the kernel-function mechanisms are tried on.
const TRY_FUNCTION: &str = "do_open_execat";

/// One thing `doctor` tried, and how it went.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Check {
    /// What was tried (a mechanism, or a probe `run` attaches).
    pub name: String,
    /// Whether it worked.
    pub ok: bool,
    /// What happened: what it attached to, or the error.
    pub detail: String,
}

/// What `doctor` found: what this machine lets execprof attach, and what `run` would do here.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// The kernel `doctor` ran on.
    pub kernel: KernelInfo,
    /// Capabilities execprof lacks (CAP_BPF, CAP_PERFMON); empty when it has them all.
    pub missing_capabilities: Vec<&'static str>,
    /// Each attach mechanism (tracepoints, sampling, kprobes, fentry, uprobes), tried and triggered.
    pub mechanisms: Vec<Check>,
    /// Each probe `run` attaches, tried; empty when the mechanisms could not be tried.
    pub run_probes: Vec<Check>,
    /// The phase model's exec-path functions: whether this kernel has them, and how they can be probed.
    pub functions: Vec<ProbePresence>,
    /// Why the function list could not be made, when it could not.
    pub functions_error: Option<String>,
    /// What `run` would do here, one sentence per aspect.
    pub plan: Vec<String>,
}

/// `execprof doctor`: tries every mechanism, prints the findings and writes them to `json` if given.
pub fn doctor(json: Option<&Path>) -> Result<()> {
    let missing = privileges::missing(privileges::effective_caps());
    if missing.is_empty() {
        crate::kernel::facts::ensure_securityfs();
    }
    let kernel = KernelInfo::current();
    // kallsyms is read once: the kprobe tries need a raw name, the function table all of them.
    let symbols = KernelSymbols::load();
    let (mechanisms, run_probes) = if missing.is_empty() {
        try_everything(symbols.as_ref().ok())
    } else {
        let why = format!("not tried: needs {} (run `sudo execprof doctor`)", missing.join(" and "));
        (vec![Check { name: "all mechanisms".into(), ok: false, detail: why }], vec![])
    };
    let (functions, functions_error) = match symbols.and_then(|s| exec_functions(&s)) {
        Ok(f) => (f, None),
        Err(e) => (vec![], Some(format!("{e:#}"))),
    };
    let plan = plan(&mechanisms, &run_probes);
    let report = DoctorReport { kernel, missing_capabilities: missing, mechanisms, run_probes, functions, functions_error, plan };
    print!("{}", render(&report));
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn exec_functions(syms: &KernelSymbols) -> Result<Vec<ProbePresence>> {
    let model = PhaseModel::builtin()?;
    let btf = VmlinuxBtf::load()?;
    // The model names both architectures' syscall entries; each kernel has only its own.
    let foreign = if cfg!(target_arch = "aarch64") { "__x64_" } else { "__arm64_" };
    Ok(syms.probe_presence(&model, &btf).into_iter().filter(|p| !p.function.starts_with(foreign)).collect())
}

fn try_everything(symbols: Option<&KernelSymbols>) -> (Vec<Check>, Vec<Check>) {
    let layout = match TaskLayout::from_running_kernel() {
        Ok(l) => l,
        Err(e) => return (vec![Check { name: "BTF struct offsets".into(), ok: false, detail: format!("{e:#}") }], vec![]),
    };
    let opts = TracerOptions {
        ring_bytes: 1 << 20,
        verbose: false,
        scope: crate::kernel::scope::KernelScope::tree(),
        argv: false,
        boundaries: Default::default(),
        attached_scope: false,
        agent: None,
        call_sums: false,
    };
    let mut ebpf = match tracer::load_object(&layout, &opts) {
        Ok(e) => e,
        Err(e) => return (vec![Check { name: "load eBPF object".into(), ok: false, detail: format!("{e:#}") }], vec![]),
    };
    let run_probes = RUN_PROBES
        .iter()
        .map(|spec| {
            let r = probes::attach_one(&mut ebpf, spec);
            Check {
                name: spec.attach.describe(),
                ok: r.is_ok(),
                detail: match r {
                    Ok(()) => {
                        if spec.required {
                            "attached (required)".into()
                        } else {
                            "attached".into()
                        }
                    }
                    Err(e) if spec.required => format!("FAILED (required): {e:#}"),
                    Err(e) => format!("failed: {e:#}; {}", spec.lost),
                },
            }
        })
        .collect();
    // The run probes stay attached but see nothing: the traced set is empty.
    let kernel_fn = symbols.and_then(|s| s.resolve(TRY_FUNCTION).into_iter().find(|f| !f.is_cold).map(|f| f.raw_name));
    let mechanisms = vec![
        bpf_features(layout.bpf_features),
        mechanism(&mut ebpf, "tracepoint", slot::TRACEPOINT, try_tracepoint, trigger_syscall),
        mechanism(&mut ebpf, "raw tracepoint", slot::RAW_TRACEPOINT, try_raw_tracepoint, trigger_syscall),
        mechanism(&mut ebpf, "perf_event sampling", slot::PERF_EVENT, try_perf_event, trigger_busy),
        kernel_stacks(&ebpf),
        mechanism(&mut ebpf, "kprobe", slot::KPROBE, |e| try_kprobe(e, "doctor_kprobe", kernel_fn.as_deref()), trigger_exec),
        mechanism(&mut ebpf, "kretprobe", slot::KRETPROBE, |e| try_kprobe(e, "doctor_kretprobe", kernel_fn.as_deref()), trigger_exec),
        mechanism(&mut ebpf, "fentry", slot::FENTRY, |e| try_fentry(e, false), trigger_exec),
        mechanism(&mut ebpf, "fexit", slot::FEXIT, |e| try_fentry(e, true), trigger_exec),
        mechanism(&mut ebpf, "uprobe", slot::UPROBE, try_uprobe, trigger_uprobe),
    ];
    (mechanisms, run_probes)
}

fn hits(ebpf: &Ebpf, index: u32) -> u64 {
    ebpf.map(slot::MAP_HITS).and_then(|m| Array::<_, u64>::try_from(m).ok()).and_then(|a| a.get(&index, 0).ok()).unwrap_or(0)
}

fn mechanism(ebpf: &mut Ebpf, name: &str, index: u32, attach: impl FnOnce(&mut Ebpf) -> Result<String>, trigger: fn()) -> Check {
    match attach(ebpf) {
        Err(e) => Check { name: name.into(), ok: false, detail: format!("{e:#}") },
        Ok(target) => {
            trigger();
            let n = hits(ebpf, index);
            Check {
                name: name.into(),
                ok: n > 0,
                detail: if n > 0 {
                    format!("attached to {target}, fired {n} times")
                } else {
                    format!("attached to {target} but never fired")
                },
            }
        }
    }
}

/// What the kernel's BPF lacks, and what runs instead: nothing is lost for it.
fn bpf_features(features: u64) -> Check {
    let missing = crate::kernel::features::missing(features);
    Check {
        name: "BPF features".into(),
        ok: missing.is_empty(),
        detail: if missing.is_empty() {
            "compare-and-exchange, bpf_get_current_task_btf, bpf_task_pt_regs".into()
        } else {
            format!("{}; nothing is lost for it", missing.join("; "))
        },
    }
}

fn kernel_stacks(ebpf: &Ebpf) -> Check {
    let n = hits(ebpf, slot::KERNEL_STACK);
    Check {
        name: "kernel stacks in samples".into(),
        ok: n > 0,
        detail: if n > 0 { format!("{n} samples carried a kernel stack") } else { "no sample carried a kernel stack".into() },
    }
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing"))?;
    Ok(p.try_into()?)
}

fn try_tracepoint(ebpf: &mut Ebpf) -> Result<String> {
    let p: &mut TracePoint = program(ebpf, "doctor_tracepoint")?;
    p.load()?;
    p.attach("syscalls", "sys_enter_getppid")?;
    Ok("syscalls:sys_enter_getppid".into())
}

fn try_raw_tracepoint(ebpf: &mut Ebpf) -> Result<String> {
    let p: &mut RawTracePoint = program(ebpf, "doctor_raw_tracepoint")?;
    p.load()?;
    p.attach("sys_enter")?;
    Ok("sys_enter".into())
}

fn try_perf_event(ebpf: &mut Ebpf) -> Result<String> {
    let p: &mut PerfEvent = program(ebpf, "doctor_perf_event")?;
    p.load()?;
    p.attach(
        PerfEventConfig::Software(SoftwareEvent::CpuClock),
        PerfEventScope::CallingProcess { cpu: None },
        SamplePolicy::Frequency(1000),
        false,
    )?;
    Ok("software cpu-clock at 1000 Hz".into())
}

fn try_kprobe(ebpf: &mut Ebpf, prog: &str, function: Option<&str>) -> Result<String> {
    let function = function.ok_or_else(|| anyhow!("{TRY_FUNCTION} not found in /proc/kallsyms"))?;
    let p: &mut KProbe = program(ebpf, prog)?;
    p.load()?;
    p.attach(function, 0)?;
    Ok(function.to_owned())
}

fn try_fentry(ebpf: &mut Ebpf, exit: bool) -> Result<String> {
    let btf = crate::kernel::vmlinux::aya()?;
    if exit {
        let p: &mut FExit = program(ebpf, "doctor_fexit")?;
        p.load(TRY_FUNCTION, &btf)?;
        p.attach()?;
    } else {
        let p: &mut FEntry = program(ebpf, "doctor_fentry")?;
        p.load(TRY_FUNCTION, &btf)?;
        p.attach()?;
    }
    Ok(TRY_FUNCTION.to_owned())
}

/// The uprobe target: a function in execprof's own binary.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn execprof_doctor_uprobe_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(31))
}

fn try_uprobe(ebpf: &mut Ebpf) -> Result<String> {
    let p: &mut UProbe = program(ebpf, "doctor_uprobe")?;
    p.load()?;
    let exe = std::fs::read_link("/proc/self/exe").context("finding execprof's own binary")?;
    // By its offset in the file, found from where it is mapped: no symbol table needed, so a
    // stripped binary, or one whose linker exports no chosen symbol, is probed the same.
    let maps = std::fs::read_to_string("/proc/self/maps").context("reading /proc/self/maps")?;
    let offset = file_offset(&maps, execprof_doctor_uprobe_target as *const () as u64)
        .context("execprof_doctor_uprobe_target is in no file mapping of /proc/self/maps")?;
    p.attach(offset, &exe, UProbeScope::CallingProcess)?;
    Ok(format!("execprof_doctor_uprobe_target in {} (file offset {offset:#x})", exe.display()))
}

/// The file offset of the code at `addr`, from `/proc/PID/maps`'s text: the mapping that holds
/// it (`START-END PERMS OFFSET DEV INODE PATH`) gives `addr - START + OFFSET`.
fn file_offset(maps: &str, addr: u64) -> Option<u64> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        let offset = u64::from_str_radix(fields.nth(1)?, 16).ok()?;
        (start..end).contains(&addr).then(|| addr - start + offset)
    })
}

fn trigger_syscall() {
    for _ in 0..3 {
        // SAFETY: plain syscall.
        unsafe { libc::getppid() };
    }
}

fn trigger_exec() {
    let _ = std::process::Command::new("/bin/true").status();
}

fn trigger_uprobe() {
    for i in 0..3 {
        execprof_doctor_uprobe_target(i);
    }
}

/// Spends ~100 ms on CPU, much of it in the kernel, so cpu-clock samples land with stacks.
fn trigger_busy() {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        let _ = std::fs::read("/proc/self/stat");
    }
}

fn check_ok(checks: &[Check], name: &str) -> bool {
    checks.iter().any(|c| c.name == name && c.ok)
}

fn plan(mechanisms: &[Check], run_probes: &[Check]) -> Vec<String> {
    let mut plan = Vec::new();
    if run_probes.is_empty() {
        plan.push("run: unknown until the probes can be tried (run as root)".into());
        return plan;
    }
    let attached: Vec<&str> = run_probes.iter().filter(|c| c.ok).map(|c| c.name.as_str()).collect();
    let failed_required = run_probes.iter().any(|c| !c.ok && c.detail.contains("required"));
    if failed_required {
        plan.push("run: CANNOT RUN here: a required probe failed (see above)".into());
    } else {
        plan.push(format!("run: exact times at exec boundaries from {}", attached.join(", ")));
    }
    let exact = if check_ok(mechanisms, "fentry") && check_ok(mechanisms, "fexit") {
        Some("fentry/fexit (kprobes for functions without BTF or with suffixed names)")
    } else if check_ok(mechanisms, "kprobe") && check_ok(mechanisms, "kretprobe") {
        Some("kprobes/kretprobes")
    } else {
        None
    };
    let sampled = check_ok(mechanisms, "perf_event sampling") && check_ok(mechanisms, "kernel stacks in samples");
    let kprobes = check_ok(mechanisms, "kprobe") && check_ok(mechanisms, "kretprobe");
    plan.push(match (kprobes, exact, sampled) {
        (true, _, true) => "per-function times: --mode auto runs exact mode (kprobe/kretprobe on the exec-path functions below) plus sampling".into(),
        (true, _, false) => "per-function times: --mode auto runs exact mode (kprobe/kretprobe on the exec-path functions below)".into(),
        (false, Some(how), _) => format!(
            "per-function times: the kernel allows {how}, but execprof's exact mode uses kprobes, which are missing: --mode auto runs sampled mode"
        ),
        (false, None, true) => "per-function times: --mode auto runs sampled mode (no kprobes, no fentry/fexit here): cpu-clock samples with kernel stacks".into(),
        (false, None, false) => "per-function times: not possible here (no kprobes, fentry or sampling with kernel stacks); run with --sample-hz 0".into(),
    });
    plan
}

/// The findings as the terminal shows them.
pub fn render(r: &DoctorReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "kernel       {} ({})", r.kernel.release, r.kernel.machine);
    let _ = writeln!(
        o,
        "BTF          {}",
        if r.kernel.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no: execprof needs CONFIG_DEBUG_INFO_BTF" }
    );
    let _ = writeln!(o, "lockdown     {}", r.kernel.lockdown.as_deref().unwrap_or("unknown (securityfs not mounted; run doctor as root)"));
    let _ = writeln!(
        o,
        "privileges   {}",
        if r.missing_capabilities.is_empty() {
            "CAP_BPF + CAP_PERFMON present".to_owned()
        } else {
            format!("missing {}: run with sudo", r.missing_capabilities.join(", "))
        }
    );
    let _ = writeln!(o, "\nAttach mechanisms (tried: load, attach, fire)");
    for c in &r.mechanisms {
        let _ = writeln!(o, "  {:<26} {:<3} {}", c.name, if c.ok { "yes" } else { "no" }, c.detail);
    }
    if !r.run_probes.is_empty() {
        let _ = writeln!(o, "\nProbes `run` attaches");
        for c in &r.run_probes {
            let _ = writeln!(o, "  {:<44} {}", c.name, c.detail);
        }
    }
    let _ = writeln!(o, "\nExec-path functions in this kernel");
    if let Some(e) = &r.functions_error {
        let _ = writeln!(o, "  could not read them: {e}");
    }
    // Whether a function could take fentry is moot where the kernel refuses fentry itself.
    let fentry_allowed = check_ok(&r.mechanisms, "fentry");
    for f in &r.functions {
        let _ = writeln!(o, "  {:<24} {:<10} {}", f.function, f.phase.as_deref().unwrap_or("-"), f.presence.describe(fentry_allowed));
    }
    let _ = writeln!(o, "\nPlan");
    for p in &r.plan {
        let _ = writeln!(o, "  {p}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_functions_file_offset_comes_from_the_mapping_that_holds_it() {
        let maps = "5555d0000000-5555d0100000 r--p 00000000 08:01 42 /usr/bin/execprof\n\
                    5555d0100000-5555d0900000 r-xp 00100000 08:01 42 /usr/bin/execprof\n\
                    7ffd1000000-7ffd1021000 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(file_offset(maps, 0x5555_d012_3450), Some(0x12_3450));
        assert_eq!(file_offset(maps, 0x5555_d000_0010), Some(0x10));
        assert_eq!(file_offset(maps, 0x1000), None);
        // This process's own function, as doctor finds it.
        let own = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(file_offset(&own, execprof_doctor_uprobe_target as *const () as u64).is_some());
    }
}
