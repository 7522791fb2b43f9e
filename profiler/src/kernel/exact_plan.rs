//! Which exec-path functions exact mode probes on this kernel, and in which slot: resolved
//! at run time from kallsyms (suffixed names such as `copy_strings.isra.0` included; a
//! function present under several addresses, like `load_elf_binary`, gets one slot per
//! address, since attaching by its ambiguous name fails).
use crate::{
    analysis::phases::PhaseModel,
    kernel::ksyms::{FunctionPresence, KernelSymbols},
    model::meta::{ExactPlan, Mechanism, ProbedFunction},
};

/// Functions not probed although they are candidates: the syscall entries span the whole
/// attempt, which the syscall tracepoints already time exactly. Both architectures' names
/// (each kernel has only its own), so a phase model naming either is planned alike.
const SKIP: &[&str] = &["__x64_sys_execve", "__x64_sys_execveat", "__arm64_sys_execve", "__arm64_sys_execveat"];

impl ExactPlan {
    /// The plan for this kernel: the phase model's probe candidates found in kallsyms, one slot per
    /// address, at most `max_slots` slots (the rest listed as over capacity).
    pub fn resolve(model: &PhaseModel, symbols: &KernelSymbols, max_slots: u32) -> Self {
        let mut plan = ExactPlan::default();
        for name in model.probe_candidates() {
            if SKIP.contains(&name.as_str()) {
                continue;
            }
            let presence = symbols.presence(name, &crate::kernel::ksyms::NoBtf);
            let targets = presence.attach_targets();
            if targets.is_empty() {
                plan.absent.push(name.clone());
                continue;
            }
            let by_address = matches!(presence, FunctionPresence::Ambiguous { .. });
            for t in targets {
                let slot = plan.functions.len() as u32;
                if slot >= max_slots {
                    plan.over_capacity.push(name.clone());
                    break;
                }
                plan.functions.push(ProbedFunction {
                    slot,
                    function: name.clone(),
                    raw_name: t.raw_name.clone(),
                    address: t.address,
                    by_address,
                    mechanism: Mechanism::default(),
                });
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 t do_open_execat
ffffffff81100100 t alloc_bprm
ffffffff81100200 t copy_strings.isra.0
ffffffff81100300 t do_execveat_common.isra.0
ffffffff81100400 t do_execveat_common.isra.0.cold
ffffffff81100500 t load_elf_binary
ffffffff81100600 t load_elf_binary
ffffffff81100700 T __x64_sys_execve
ffffffff81100800 T bprm_execve
";

    /// Either architecture's syscall entry functions are skipped, found or not: an arm64
    /// kernel's `__arm64_sys_execve` is not probed, and x86_64's names are not "absent" there.
    #[test]
    fn syscall_entries_of_both_architectures_are_skipped() {
        let model = PhaseModel::parse(
            "phase args 30 \"argv copy\"\nphase other 90 \"other\"\nargs do_execveat_common\nprobe __x64_sys_execve\nprobe __arm64_sys_execve\nprobe __arm64_sys_execveat\nprobe do_execveat_common\n",
        )
        .unwrap();
        let syms = KernelSymbols::from_kallsyms_text(
            "ffff800080300000 T __arm64_sys_execve\nffff800080300100 T __arm64_sys_execveat\nffff800080300200 t do_execveat_common.isra.0\n",
        )
        .unwrap();
        let plan = ExactPlan::resolve(&model, &syms, 32);
        let names: Vec<&str> = plan.functions.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["do_execveat_common"]);
        assert!(plan.absent.is_empty(), "{:?}", plan.absent);
    }

    #[test]
    fn resolves_suffixed_ambiguous_and_absent_functions() {
        let model = PhaseModel::builtin().unwrap();
        let syms = KernelSymbols::from_kallsyms_text(KALLSYMS).unwrap();
        let plan = ExactPlan::resolve(&model, &syms, 32);
        let names: Vec<(&str, &str, bool)> =
            plan.functions.iter().map(|f| (f.function.as_str(), f.raw_name.as_str(), f.by_address)).collect();
        assert!(names.contains(&("copy_strings", "copy_strings.isra.0", false)));
        assert!(names.contains(&("do_execveat_common", "do_execveat_common.isra.0", false)));
        assert_eq!(names.iter().filter(|n| n.0 == "load_elf_binary" && n.2).count(), 2, "one slot per address");
        assert!(!names.iter().any(|n| n.0 == "__x64_sys_execve"));
        assert!(plan.absent.contains(&"bprm_mm_init".to_owned()));
        for (i, f) in plan.functions.iter().enumerate() {
            assert_eq!(f.slot as usize, i);
        }
        let small = ExactPlan::resolve(&model, &syms, 2);
        assert_eq!(small.functions.len(), 2);
        assert!(!small.over_capacity.is_empty());
    }
}
