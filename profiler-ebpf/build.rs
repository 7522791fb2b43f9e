/// Rebuild the eBPF object when the linker changes: building it depends on the `bpf-linker`
/// binary, which cargo cannot express as a dependency. `bpf_target_arch` is set by aya-build
/// (the architecture the profiler is built for) and selects `src/arch/`.
fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"aarch64\", \"arm\", \"loongarch64\", \"mips\", \"powerpc64\", \"riscv64\", \"s390x\", \"x86_64\"))"
    );
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
