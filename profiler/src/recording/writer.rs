//! The writer: records in, frames out.

use super::codec::{Encoder, Streams, encode_symbols};
use super::frame::{FrameKind, FrameSink, Packer};
use super::{FILE_HEADER_LEN, FORMAT_VERSION, FRAME_TARGET_RAW, MAGIC};
use crate::record::Record;
use std::io::{self, Write};

/// What a finished recording holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Bytes written to the output, headers included.
    pub bytes: u64,
    /// Records written.
    pub records: u64,
}

/// Writes a recording as records come. Memory: one frame of encoded records plus the bounded
/// interning tables. After an I/O error every call fails: the output can no longer be trusted.
pub struct RecordingWriter<W: Write> {
    sink: FrameSink<W>,
    encoder: Encoder,
    /// The open RECORDS frame, and how many records it holds.
    streams: Streams,
    frame_records: u64,
    /// Scratch for assembling a frame's payload.
    payload: Vec<u8>,
    records: u64,
    failed: bool,
}

impl<W: Write> RecordingWriter<W> {
    /// Writes the magic, the format version and the META frame.
    pub fn new(mut out: W, meta: &serde_json::Value) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        let mut sink = FrameSink { out, packer: Packer::new()?, next_seq: 0, bytes: FILE_HEADER_LEN as u64 };
        sink.write(FrameKind::Meta, 0, &serde_json::to_vec(meta)?)?;
        Ok(RecordingWriter {
            sink,
            encoder: Encoder::default(),
            streams: Streams::default(),
            frame_records: 0,
            payload: Vec::new(),
            records: 0,
            failed: false,
        })
    }

    /// Encodes one record into the open RECORDS frame, writing the frame out once it is full.
    pub fn push(&mut self, r: &Record) -> io::Result<()> {
        self.usable()?;
        self.encoder.encode(r, &mut self.streams);
        self.frame_records += 1;
        self.records += 1;
        if self.streams.len() >= FRAME_TARGET_RAW {
            let res = self.close_frame();
            return self.fail_on_err(res);
        }
        Ok(())
    }

    /// Closes the current RECORDS frame (if it holds any record) and flushes the output, so that
    /// everything pushed so far survives the process being killed.
    pub fn flush_frame(&mut self) -> io::Result<()> {
        self.usable()?;
        let res = self.close_frame().and_then(|()| self.sink.out.flush());
        self.fail_on_err(res)
    }

    /// Writes the last RECORDS frame, SYMBOLS and END; returns totals.
    pub fn finish(mut self, symbols: &[(u64, String)], end: &serde_json::Value) -> io::Result<WriteStats> {
        self.usable()?;
        self.close_frame()?;
        let mut raw = Vec::new();
        encode_symbols(symbols, &mut raw);
        self.sink.write(FrameKind::Symbols, symbols.len() as u64, &raw)?;
        self.sink.write(FrameKind::End, self.records, &serde_json::to_vec(end)?)?;
        self.sink.out.flush()?;
        Ok(self.stats())
    }

    /// Totals so far (bytes counts only closed frames).
    pub fn stats(&self) -> WriteStats {
        WriteStats { bytes: self.sink.bytes, records: self.records }
    }

    fn close_frame(&mut self) -> io::Result<()> {
        if self.frame_records == 0 {
            return Ok(());
        }
        self.streams.payload(&mut self.payload);
        self.sink.write(FrameKind::Records, self.frame_records, &self.payload)?;
        self.streams.clear();
        self.frame_records = 0;
        Ok(())
    }

    fn usable(&self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("an earlier write to this recording failed"));
        }
        Ok(())
    }

    fn fail_on_err<T>(&mut self, res: io::Result<T>) -> io::Result<T> {
        if res.is_err() {
            self.failed = true;
        }
        res
    }
}
