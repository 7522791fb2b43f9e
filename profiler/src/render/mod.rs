//! Streaming exporters written as events arrive, and `top`'s frame.
pub(crate) mod chrome_trace;
pub(crate) mod events;
#[cfg(feature = "tracer")]
pub(crate) mod metrics;
#[cfg(feature = "tracer")]
pub(crate) mod perfetto;
#[cfg(feature = "tracer")]
pub(crate) mod pprof;
#[cfg(feature = "tracer")]
pub(crate) mod top;

/// `--trace`'s file format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Perfetto's own protobuf format (track descriptors, interned names): compact, what the
    /// Perfetto UI and trace processor read first.
    #[default]
    Perfetto,
    /// The legacy Chrome trace-event JSON, which Perfetto and chrome://tracing load on a
    /// best-effort basis: ~7 times the size, and a big run makes more than the UI loads.
    Json,
}
