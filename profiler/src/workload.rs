//! The built-in exec-chain workload: Linus's benchmark, re-executing itself N times, each step
//! searching a PATH whose first `misses` directories do not hold it (one ENOENT each).
//! The executable (a ~9 KB static program without libc start-up, built by build.rs) is
//! embedded in execprof and unpacked into a private temporary directory per run.
use std::{ffi::OsString, os::unix::fs::PermissionsExt as _, path::PathBuf};

use anyhow::{Context as _, Result};

use crate::launch::Command;

static CHAIN_EXE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/execprof-chain"));
pub const CHAIN_NAME: &str = "execprof-chain";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ChainSpec {
    pub steps: u32,
    /// PATH directories searched (and missed, ENOENT) before the one holding the program.
    pub misses: u32,
}

impl ChainSpec {
    pub const DEFAULT_STEPS: u32 = 10_000;
    pub const DEFAULT_MISSES: u32 = 6;
}

/// The unpacked workload; the directory is removed when this is dropped.
pub struct ChainWorkload {
    dir: tempfile::TempDir,
    pub spec: ChainSpec,
}

impl ChainWorkload {
    pub fn prepare(spec: ChainSpec) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("execprof-chain.").tempdir().context("creating a temporary directory for the built-in workload")?;
        for i in 1..=spec.misses {
            std::fs::create_dir(dir.path().join(format!("miss{i}")))?;
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin)?;
        let exe = bin.join(CHAIN_NAME);
        std::fs::write(&exe, CHAIN_EXE).with_context(|| format!("writing {}", exe.display()))?;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self { dir, spec })
    }

    pub fn program(&self) -> PathBuf {
        self.dir.path().join("bin").join(CHAIN_NAME)
    }

    /// The PATH the chain searches: the empty miss directories, then its own.
    pub fn path_var(&self) -> OsString {
        let mut dirs: Vec<PathBuf> = (1..=self.spec.misses).map(|i| self.dir.path().join(format!("miss{i}"))).collect();
        dirs.push(self.dir.path().join("bin"));
        std::env::join_paths(dirs).expect("temporary paths contain no ':'")
    }

    /// Launched by absolute path with argv[0] a bare name, so every step after the launch
    /// does the PATH search (`execvpe` semantics), with PATH as the whole environment
    /// (`env -i PATH=... t N`, as in the published runs).
    pub fn command(&self) -> Command {
        Command {
            program: self.program(),
            argv: vec![CHAIN_NAME.into(), self.spec.steps.to_string().into()],
            env: Some(vec![("PATH".into(), self.path_var())]),
        }
    }
}
