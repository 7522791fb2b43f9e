//! Builds what the `execprof` binary embeds: the eBPF object (through aya-build, with the
//! toolchain that has matching `core` sources) and the built-in exec-chain workload.
use std::{env, path::PathBuf};

use anyhow::{Context as _, anyhow};

#[path = "build_support/chain.rs"]
mod chain;

/// The rustup toolchain that builds the eBPF crate; `cargo xtask setup` links Debian's
/// rustc-web under this name. Overridable for machines whose nightly has rust-src.
const EBPF_TOOLCHAIN_ENV: &str = "EXECPROF_EBPF_TOOLCHAIN";

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    chain::build_chain(&out_dir).context("building the built-in exec-chain workload")?;

    // Without the `tracer` feature (xtask reading reports) nothing loads eBPF: build none.
    if env::var_os("CARGO_FEATURE_TRACER").is_none() {
        return Ok(());
    }
    #[cfg(feature = "tracer")]
    proto_types().context("compiling proto/pprof.proto and proto/perfetto_trace.proto")?;
    println!("cargo:rerun-if-env-changed={EBPF_TOOLCHAIN_ENV}");
    let toolchain = env::var(EBPF_TOOLCHAIN_ENV).unwrap_or_else(|_| "rustc-web".to_owned());
    // aya-build passes -Z build-std=core only for nightly or RUSTC_BOOTSTRAP=1; the inner
    // cargo inherits this process's environment.
    if env::var_os("RUSTC_BOOTSTRAP").is_none() {
        // SAFETY: build scripts are single-threaded at this point.
        unsafe { env::set_var("RUSTC_BOOTSTRAP", "1") };
    }
    let manifest_dir = env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?;
    let ebpf_dir = PathBuf::from(manifest_dir).join("../profiler-ebpf");
    let ebpf_dir = ebpf_dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {ebpf_dir:?}"))?;
    let package = aya_build::Package { name: "profiler-ebpf", root_dir: ebpf_dir, ..Default::default() };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
        .with_context(|| format!("building the eBPF programs with toolchain `{toolchain}` failed; run `cargo xtask setup` first"))
}

/// prost's Rust types for pprof's profile format (`render::pprof`) and Perfetto's trace format
/// (`render::perfetto`), compiled by protox: no protoc needed.
#[cfg(feature = "tracer")]
fn proto_types() -> anyhow::Result<()> {
    println!("cargo:rerun-if-changed=proto/pprof.proto");
    println!("cargo:rerun-if-changed=proto/perfetto_trace.proto");
    let descriptors = protox::compile(["proto/pprof.proto", "proto/perfetto_trace.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
