//! The error of a reader: its kind, the byte offset, and where in the file it happened.

use std::fmt;
use std::io;
use std::sync::Arc;

/// What kind of problem a [`ReadError`] reports, for callers that treat them differently (a
/// report may keep the records read before a truncation, with a warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// The file does not start with the magic.
    NotARecording,
    /// Written by a newer execprof, in a format this one does not know.
    NewerVersion,
    /// The file ends early: inside a frame, or before its END frame.
    Truncated,
    /// A check failed: the file was damaged, or not written by execprof.
    Corrupted,
    /// The input could not be read.
    Io,
}

/// A recording that cannot be read, and where: the message always names the byte offset in the
/// file and, past the header, the frame (kind and index) and the record (index and kind).
#[derive(Clone, Debug)]
pub struct ReadError {
    kind: ReadErrorKind,
    offset: u64,
    detail: String,
    source: Option<Arc<io::Error>>,
}

impl ReadError {
    pub(super) fn new(kind: ReadErrorKind, offset: u64, detail: impl Into<String>) -> Self {
        ReadError { kind, offset, detail: detail.into(), source: None }
    }

    pub(super) fn corrupt(offset: u64, detail: impl Into<String>) -> Self {
        Self::new(ReadErrorKind::Corrupted, offset, detail)
    }

    pub(super) fn truncated(offset: u64, detail: impl Into<String>) -> Self {
        Self::new(ReadErrorKind::Truncated, offset, detail)
    }

    pub(super) fn io(offset: u64, e: io::Error) -> Self {
        ReadError { source: Some(Arc::new(e)), ..Self::new(ReadErrorKind::Io, offset, "read failed") }
    }

    /// What kind of damage or failure this is.
    pub fn kind(&self) -> ReadErrorKind {
        self.kind
    }

    /// Byte offset in the file the message refers to.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (offset, detail) = (self.offset, &self.detail);
        match self.kind {
            ReadErrorKind::NotARecording => {
                write!(f, "not an execprof recording (at byte {offset}): {detail}")
            }
            ReadErrorKind::NewerVersion => {
                write!(f, "{detail} (format version field at byte {offset})")
            }
            ReadErrorKind::Truncated => write!(f, "truncated at byte {offset}: {detail}"),
            ReadErrorKind::Corrupted => write!(f, "corrupted recording at byte {offset}: {detail}"),
            ReadErrorKind::Io => match &self.source {
                Some(e) => write!(f, "I/O error at byte {offset} of the recording: {e}"),
                None => write!(f, "I/O error at byte {offset} of the recording: {detail}"),
            },
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}
