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

/// The linker of the chain when cross-built, where the build's own cannot link it.
const CHAIN_LINKER_ENV: &str = "EXECPROF_CHAIN_LINKER";

/// The architectures `workload/chain.rs` has an entry point and syscalls for.
const SUPPORTED_ARCHS: &[&str] = &["x86_64", "aarch64"];

/// Flags for a freestanding, static, stripped Linux executable with
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

    // The workload's _start and syscalls are per-architecture assembly; it is built for the
    // target, the machine that runs the profiler and its workloads (cross-built with the
    // target's linker, which cargo hands build scripts as RUSTC_LINKER).
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !SUPPORTED_ARCHS.contains(&arch.as_str()) || os != "linux" {
        bail!("the exec-chain workload supports {} Linux targets, not {arch} {os}", SUPPORTED_ARCHS.join(" and "));
    }
    let target = std::env::var("TARGET").context("TARGET is not set (not running under cargo?)")?;
    let host = std::env::var("HOST").context("HOST is not set (not running under cargo?)")?;
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo:rerun-if-env-changed={CHAIN_LINKER_ENV}");

    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let out = out_dir.join(CHAIN_EXE);

    let mut cmd = Command::new(&rustc);
    if target != host {
        cmd.args(["--target", &target]);
        // The chain links no libc: a linker that insists on one for the target (Zig's, for
        // the portable builds, refuses a static glibc program) is replaced by the one named here.
        if let Some(linker) = std::env::var_os(CHAIN_LINKER_ENV).or_else(|| std::env::var_os("RUSTC_LINKER")) {
            let mut arg = OsString::from("linker=");
            arg.push(linker);
            cmd.arg("-C").arg(arg);
        }
    }
    let output = cmd.args(RUSTC_FLAGS).arg("-o").arg(&out).arg(&src).output().with_context(|| format!("failed to run {rustc:?}"))?;
    if !output.status.success() {
        bail!("compiling {} with {:?} failed ({}):\n{}", src.display(), rustc, output.status, String::from_utf8_lossy(&output.stderr));
    }
    Ok(out)
}
