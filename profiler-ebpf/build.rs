/// Rebuild the eBPF object when the linker changes: building it depends on the `bpf-linker`
/// binary, which cargo cannot express as a dependency.
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
