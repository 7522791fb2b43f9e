//! Where records come from: the live ring buffer (`live`). A recording is read back by
//! `crate::recording` and fed to the same pipeline.
pub(crate) mod live;
