//! Build-script helper: compiles the built-in exec-chain workload
//! (`workload/chain.rs`, a no_std/no_main port of Linus Torvalds' exec
//! benchmark `t.c`) into a tiny static ELF with the host rustc.
//!
//! Used from `profiler/build.rs`:
//! ```ignore
//! #[path = "build_support/chain.rs"]
//! mod chain;
//! let exe = chain::build_chain(&out_dir)?;
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Workload source, relative to `CARGO_MANIFEST_DIR`.
const SOURCE: &str = "workload/chain.rs";
/// Name of the produced executable inside `out_dir`.
pub const CHAIN_EXE: &str = "execprof-chain";

/// Flags for a freestanding, static, stripped x86_64 Linux executable with
/// its own `_start` (the source provides memcpy/memset and friends).
const RUSTC_FLAGS: &[&str] = &[
    "--edition",
    "2021",
    "--crate-type",
    "bin",
    "-C",
    "opt-level=3",
    "-C",
    "panic=abort",
    "-C",
    "relocation-model=static",
    "-C",
    "target-feature=+crt-static",
    "-C",
    "link-arg=-nostartfiles",
    "-C",
    "link-arg=-static",
    "-C",
    "strip=symbols",
];

/// Compile `workload/chain.rs` into `out_dir/execprof-chain` and return its
/// path. On failure the error carries the compiler's stderr.
pub fn build_chain(out_dir: &Path) -> Result<PathBuf> {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR is not set (not running under cargo?)")?;
    let src = Path::new(&manifest_dir).join(SOURCE);
    println!("cargo:rerun-if-changed={}", src.display());

    // The workload's _start and syscalls are x86_64 Linux assembly and it is
    // built for the host, which is what runs the profiler's workloads.
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        bail!("the exec-chain workload only supports x86_64 Linux hosts");
    }

    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let out = out_dir.join(CHAIN_EXE);

    let output = Command::new(&rustc)
        .args(RUSTC_FLAGS)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .with_context(|| format!("failed to run {rustc:?}"))?;
    if !output.status.success() {
        bail!("compiling {} with {:?} failed ({}):\n{}", src.display(), rustc, output.status, String::from_utf8_lossy(&output.stderr));
    }
    Ok(out)
}
