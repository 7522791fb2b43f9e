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
    commit();
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
    share_ebpf_target_dir(&out_dir).context("sharing the eBPF build's target directory")?;
    let package = aya_build::Package { name: "profiler-ebpf", root_dir: ebpf_dir, ..Default::default() };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
        .with_context(|| format!("building the eBPF programs with toolchain `{toolchain}` failed; run `cargo xtask setup` first"))
}

/// aya-build builds the eBPF crate (with `core` from source: about a minute) in
/// `OUT_DIR/aya-build/target/`, and every variant of this package's build script has its own
/// `OUT_DIR`: clippy, doc, build and test each built it again (five minutes of a CI run). That
/// directory is made a link to one per target architecture under the workspace's target
/// directory (`target/ebpf/ARCH`, found by its `CACHEDIR.TAG`), so the eBPF build is shared and
/// only rebuilds what changed; the inner cargo locks it while two builds run at once. Where no
/// target directory is found the build stays in `OUT_DIR`.
fn share_ebpf_target_dir(out_dir: &std::path::Path) -> anyhow::Result<()> {
    let Some(target_dir) = out_dir.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file()) else { return Ok(()) };
    let arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    let shared = target_dir.join("ebpf").join(arch);
    std::fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;
    let parent = out_dir.join("aya-build");
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let link = parent.join("target");
    match std::fs::read_link(&link) {
        Ok(to) if to == shared => return Ok(()),
        Ok(_) => std::fs::remove_file(&link)?,
        // An unshared build from before: replaced by the link.
        Err(_) if link.is_dir() => std::fs::remove_dir_all(&link)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(&shared, &link).with_context(|| format!("linking {} to {}", link.display(), shared.display()))
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

/// `EXECPROF_COMMIT`, what `execprof --version` names after the version: the commit built
/// (12 hex digits, `-dirty` with uncommitted changes), or `unknown commit` outside a git
/// checkout (a source tarball). Rebuilt when HEAD or the branch it names moves.
fn commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            format!("commit {hash}{}", if dirty { "-dirty" } else { "" })
        }
        None => "unknown commit".to_owned(),
    };
    println!("cargo:rustc-env=EXECPROF_COMMIT={commit}");
    // Only files that exist: cargo runs the script every time for a missing one.
    let watch = |path: PathBuf| {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    };
    if let (Some(dir), Some(common)) = (git(&["rev-parse", "--absolute-git-dir"]), git(&["rev-parse", "--git-common-dir"])) {
        let dir = PathBuf::from(dir);
        watch(dir.join("HEAD"));
        watch(dir.join("index"));
        let common = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(common);
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(common.join(branch));
        }
        watch(common.join("packed-refs"));
    }
}
