//! Streaming exporters written as events arrive.
pub(crate) mod events;
pub(crate) mod perfetto;
