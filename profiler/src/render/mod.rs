//! Streaming exporters written as events arrive.
pub(crate) mod perfetto;
