//! What differs per architecture: syscall numbers (native and compat ABI), where the saved
//! registers keep a call's number and arguments, and how a compat (32-bit) call is told. One
//! module per `bpf_target_arch` (aya-build sets it to the architecture the profiler is built
//! for), each with the same items.
#[cfg(bpf_target_arch = "aarch64")]
mod aarch64;
#[cfg(bpf_target_arch = "x86_64")]
mod x86_64;

#[cfg(bpf_target_arch = "aarch64")]
pub use aarch64::*;
#[cfg(bpf_target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64")))]
compile_error!("execprof's eBPF programs support bpf_target_arch x86_64 and aarch64 (aya-build sets it from the target)");
