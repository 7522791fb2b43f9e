//! execprof: where the kernel spends exec time. The library holds everything; `main` only
//! turns the command line into configuration and errors into exit codes.
//!
//! One folder per stage of the data path, imports pointing one way:
//! `cli → commands → source → pipeline → {analysis, report, render} → assemble → record →
//! model → profiler-common`, with `kernel` (what touches aya and the running kernel) and
//! `launch` (the traced command, the built-in chain) beside the sources. A recording
//! (`recording`) replays through the same `pipeline` as a live run. Without the `tracer`
//! feature the library is that pipeline alone, with no eBPF and no kernel access.
//!
//! Public: what the `execprof` binary, the integration tests and xtask use (the commands and
//! their configuration, the report model with the analysis it holds, recordings); the rest
//! is `pub(crate)`.
#![warn(unreachable_pub)]
#![warn(missing_docs)]
pub mod analysis;
pub(crate) mod assemble;
#[cfg(feature = "tracer")]
pub mod cli;
#[cfg(feature = "tracer")]
pub mod commands;
#[cfg(feature = "tracer")]
pub(crate) mod kernel;
#[cfg(feature = "tracer")]
pub(crate) mod launch;
pub mod model;
pub(crate) mod pipeline;
pub(crate) mod record;
pub mod recording;
pub mod render;
pub mod report;
#[cfg(feature = "tracer")]
pub(crate) mod serve;
pub mod source;
pub mod testing;
