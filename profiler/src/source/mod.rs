//! Where records come from: the live ring buffer (`live`, with the tracer) and a recording
//! read back (`replay`). Both hand records to the same pipeline.
#[cfg(feature = "tracer")]
pub(crate) mod live;
pub mod replay;
