//! Where records come from: the live ring buffer (`live`, with the tracer) and a recording
//! read back (`replay`), and the agent's in-kernel aggregates read on an interval
//! (`aggregates`, naming programs through the mount table of the process that ran them:
//! `mounts`, and containers through their runtimes' APIs: `runtimes`). Both hand records to the same pipeline.
#[cfg(feature = "tracer")]
pub(crate) mod aggregates;
#[cfg(feature = "tracer")]
pub(crate) mod backlog;
#[cfg(feature = "tracer")]
pub(crate) mod live;
#[cfg(feature = "tracer")]
mod mounts;
pub mod replay;
#[cfg(feature = "tracer")]
pub(crate) mod runtimes;
