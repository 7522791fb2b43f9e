//! Streaming exporters written as events arrive.
pub mod perfetto;
