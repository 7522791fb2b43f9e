//! The fixed set of exit codes and the one error type that carries a code to `main`.
//! Library code returns errors; only `main` turns them into an exit.
use std::{ffi::OsStr, fmt, os::unix::ffi::OsStrExt as _, path::Path};

use crate::model::names::shell_quote;

/// Exit codes execprof itself uses (the traced command's own non-zero status passes through).
pub mod code {
    /// Tracing failed (kernel refused, I/O error, ...).
    pub const ERROR: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// Not allowed to trace: CAP_BPF/CAP_PERFMON (or root) missing.
    pub const NO_PRIVILEGE: i32 = 3;
    /// The kernel lacks something execprof cannot do without.
    pub const UNSUPPORTED_KERNEL: i32 = 4;
    /// A recording cannot be read (corrupted, from a newer execprof, or cut before its run
    /// metadata ends). One cut later (a run killed, a disk full) is not an error: `report`
    /// reads it up to the cut and exits 0, the report marked incomplete (`complete: false`),
    /// as it is for lost records.
    pub const BAD_RECORDING: i32 = 5;
    /// The command exists but cannot be executed (as a shell).
    pub const NOT_EXECUTABLE: i32 = 126;
    /// The command was not found (as a shell).
    pub const NOT_FOUND: i32 = 127;
}

/// An error with the exit code it deserves and a message that says what to do next.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (one of [`code`]).
    pub code: i32,
    /// What went wrong and what to do next, shown to the user as is.
    pub message: String,
}

impl Failure {
    /// A failure with this exit code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    /// A bad command line ([`code::USAGE`]).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(code::USAGE, message)
    }
    /// The command `name` was not found ([`code::NOT_FOUND`], as a shell).
    pub fn not_found(name: &OsStr) -> Self {
        Self::new(code::NOT_FOUND, format!("{}: command not found; check the name or give its full path", shell_quote(name.as_bytes())))
    }
    /// The file at `path` exists but cannot be executed, for reason `why` ([`code::NOT_EXECUTABLE`]).
    pub fn not_executable(path: &Path, why: &str) -> Self {
        Self::new(
            code::NOT_EXECUTABLE,
            format!("{}: cannot execute ({why}); check its permissions (chmod +x) and format", shell_quote(path.as_os_str().as_bytes())),
        )
    }
}

impl Failure {
    /// The file at `path` is there but exec said ENOENT, because its interpreter or dynamic
    /// loader is missing (`why` names it) ([`code::NOT_EXECUTABLE`]).
    pub fn missing_interpreter(path: &Path, why: &str) -> Self {
        Self::new(
            code::NOT_EXECUTABLE,
            format!(
                "{}: cannot execute ({why}): the file is there, what it needs to run is not; install it or fix the path the file names",
                shell_quote(path.as_os_str().as_bytes())
            ),
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}
