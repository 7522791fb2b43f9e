//! Streaming exporters written as events arrive, and `top`'s frame.
pub(crate) mod events;
#[cfg(feature = "tracer")]
pub(crate) mod metrics;
pub(crate) mod perfetto;
#[cfg(feature = "tracer")]
pub(crate) mod pprof;
#[cfg(feature = "tracer")]
pub(crate) mod top;
