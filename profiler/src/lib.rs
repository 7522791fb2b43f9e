//! execprof: where the kernel spends exec time. The library holds everything; `main` only
//! turns the command line into configuration and errors into exit codes.
//!
//! `CLI → config → launch + attach → ring buffer → decode (record) → assemble → analyse
//! (pure) → render/export`; a recording replays through the same `pipeline`.
pub mod analysis;
pub mod assemble;
pub mod bench;
pub mod cli;
pub mod diff;
pub mod doctor;
pub mod events;
pub mod exact_plan;
pub mod exit;
pub mod export;
pub mod kernel;
pub mod kernel_layout;
pub mod ksyms;
pub mod launch;
pub mod live;
pub mod meta;
pub mod perfetto;
pub mod phases;
pub mod pipeline;
pub mod privileges;
pub mod probes;
pub mod record;
pub mod recording;
pub mod repeat;
pub mod report;
pub mod run;
pub mod spawn;
pub mod symbolize;
pub mod testing;
pub mod tracer;
pub mod workload;
