//! execprof: where the kernel spends exec time. The library holds everything; `main` only
//! turns the command line into configuration and errors into exit codes.
//!
//! One folder per stage of the data path, imports pointing one way:
//! `cli → commands → source → pipeline → {analysis, report, render} → assemble → record →
//! model → profiler-common`, with `kernel` (what touches aya and the running kernel) and
//! `launch` (the traced command, the built-in chain) beside the sources. A recording
//! (`recording`) replays through the same `pipeline` as a live run.
pub mod analysis;
pub mod assemble;
pub mod cli;
pub mod commands;
pub mod kernel;
pub mod launch;
pub mod model;
pub mod pipeline;
pub mod record;
pub mod recording;
pub mod render;
pub mod report;
pub mod source;
pub mod testing;
