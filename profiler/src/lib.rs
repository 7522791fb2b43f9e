//! execprof: where the kernel spends exec time. The library holds everything; `main` only
//! turns the command line into configuration and errors into exit codes.
//!
//! One folder per stage of the data path, imports pointing one way:
//! `cli → commands → source → pipeline → {analysis, report, render} → assemble → record →
//! model → profiler-common`, with `kernel` (what touches aya and the running kernel) and
//! `launch` (the traced command, the built-in chain) beside the sources. A recording
//! (`recording`) replays through the same `pipeline` as a live run. Without the `tracer`
//! feature the library is that pipeline alone, with no eBPF and no kernel access.
pub mod analysis;
pub mod assemble;
#[cfg(feature = "tracer")]
pub mod cli;
#[cfg(feature = "tracer")]
pub mod commands;
#[cfg(feature = "tracer")]
pub mod kernel;
pub mod launch;
pub mod model;
pub mod pipeline;
pub mod record;
pub mod recording;
pub mod render;
pub mod report;
#[cfg(feature = "tracer")]
pub mod source;
pub mod testing;
