//! The reader: frames in, records out, every byte checked.

use super::codec::{Decoder, decode_symbols, split_streams, tag};
use super::error::{ReadError, ReadErrorKind};
use super::frame::{FrameHeader, FrameKind, Unpacker};
use super::varint::Cursor;
use super::{FILE_HEADER_LEN, FORMAT_VERSION, FRAME_HEADER_LEN, KILLED, MAGIC, MAX_PLAUSIBLE_VERSION, OLDEST_READ_VERSION};
use crate::record::Record;
use std::io::{self, Read};

/// SYMBOLS and END: what follows the records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trailer {
    /// The run's symbol table: (kernel address, name) pairs, in address order.
    pub symbols: Vec<(u64, String)>,
    /// The END frame's JSON: how the run ended (a [`crate::model::meta::RunEnd`]).
    pub end: serde_json::Value,
}

/// How a recording ends, as [`RecordingReader::finish_or_cut`] finds it.
#[derive(Clone, Debug)]
pub enum Ending {
    /// Its SYMBOLS and END frames, every byte checked, nothing after them.
    Whole(Trailer),
    /// The file ends early (the run was killed, or its disk filled up): every frame before the
    /// cut was intact and has been read.
    Cut(Cut),
}

/// Where and how a recording ends early. Only a file that simply stops is a cut: damage (a
/// checksum that fails, a frame out of sequence) is an error, never a shorter recording.
#[derive(Clone, Debug)]
pub struct Cut {
    /// Bytes up to the end of the last intact frame: what was read. The file may hold a few
    /// more, the part of a frame that was being written.
    pub intact_bytes: u64,
    /// The run's symbol table, when the SYMBOLS frame came before the cut.
    pub symbols: Option<Vec<(u64, String)>>,
    /// The reader's account of where the file ends (a [`ReadErrorKind::Truncated`] error).
    pub error: ReadError,
}

/// The frame being read, for messages.
#[derive(Clone, Copy)]
struct FrameAt {
    header: FrameHeader,
    start: u64,
}

impl FrameAt {
    fn name(&self) -> String {
        format!("{} frame #{}", self.header.kind, self.header.seq)
    }
}

enum Phase {
    Records,
    Trailer(Vec<(u64, String)>),
    Done,
    Failed(ReadError),
}

/// Reads a recording as a stream: one decompressed frame in memory at a time. The first error
/// sticks: every later call returns it again.
pub struct RecordingReader<R: Read> {
    input: R,
    offset: u64,
    /// Where the last frame read whole ends.
    intact: u64,
    meta: serde_json::Value,
    decoder: Decoder,
    unpacker: Unpacker,
    stored: Vec<u8>,
    /// The decompressed payload of the current frame. For RECORDS: the time deltas at
    /// `times_pos..times_end`, the record stream at `pos..` (which starts at `times_end`).
    raw: Vec<u8>,
    pos: usize,
    times_pos: usize,
    times_end: usize,
    frame: FrameAt,
    frame_records: u64,
    records: u64,
    next_seq: u32,
    phase: Phase,
}

impl<R: Read> RecordingReader<R> {
    /// Reads the magic, the format version and the META frame.
    pub fn new(input: R) -> Result<Self, ReadError> {
        let unpacker = Unpacker::new().map_err(|e| ReadError::io(0, e))?;
        let placeholder = FrameHeader { kind: FrameKind::Meta, seq: 0, count: 0, raw_len: 0, stored_len: 0, payload_crc: 0 };
        let mut reader = RecordingReader {
            input,
            offset: 0,
            intact: FILE_HEADER_LEN as u64,
            meta: serde_json::Value::Null,
            decoder: Decoder::default(),
            unpacker,
            stored: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            times_pos: 0,
            times_end: 0,
            frame: FrameAt { header: placeholder, start: FILE_HEADER_LEN as u64 },
            frame_records: 0,
            records: 0,
            next_seq: 0,
            phase: Phase::Records,
        };
        reader.read_file_header()?;
        reader.read_meta()?;
        Ok(reader)
    }

    /// The META frame's JSON: the run's metadata (a [`crate::model::meta::RunMeta`]).
    pub fn meta(&self) -> &serde_json::Value {
        &self.meta
    }

    /// Records decoded so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    /// The next record, or Ok(None) once the records end (SYMBOLS reached).
    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        let res = self.next_record_inner();
        if let Err(e) = &res {
            self.phase = Phase::Failed(e.clone());
        }
        res
    }

    /// Bytes of the file up to the end of the last frame read whole (checked and decompressed).
    pub fn intact_bytes(&self) -> u64 {
        self.intact
    }

    /// After next_record returned None: SYMBOLS and END, and checks nothing follows END. Called
    /// earlier, it decodes (and checks) the remaining records first. A file that ends early is
    /// an error here; [`RecordingReader::finish_or_cut`] takes it as a cut instead.
    pub fn finish(self) -> Result<Trailer, ReadError> {
        match self.finish_or_cut()? {
            Ending::Whole(trailer) => Ok(trailer),
            Ending::Cut(cut) => Err(cut.error),
        }
    }

    /// Like [`RecordingReader::finish`], but a file that simply ends early (after its META
    /// frame: `new` refuses one cut before) is a [`Cut`] rather than an error, so that the
    /// records of its intact frames can be reported. A caller whose `next_record` returned a
    /// [`ReadErrorKind::Truncated`] error gets the cut here. Damage is an error either way.
    pub fn finish_or_cut(mut self) -> Result<Ending, ReadError> {
        let cut = |intact_bytes: u64, symbols: Option<Vec<(u64, String)>>, error: ReadError| match error.kind() {
            ReadErrorKind::Truncated => Ok(Ending::Cut(Cut { intact_bytes, symbols, error })),
            _ => Err(error),
        };
        loop {
            match self.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return cut(self.intact, None, e),
            }
        }
        let symbols = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Trailer(symbols) => symbols,
            Phase::Failed(e) => return cut(self.intact, None, e),
            Phase::Records | Phase::Done => Vec::new(),
        };
        match self.read_end() {
            Ok(end) => Ok(Ending::Whole(Trailer { symbols, end })),
            Err(e) => cut(self.intact, Some(symbols), e),
        }
    }

    /// The END frame, and nothing after it.
    fn read_end(&mut self) -> Result<serde_json::Value, ReadError> {
        let Some(end) = self.read_frame()? else {
            return Err(ReadError::truncated(
                self.offset,
                format!("the file ends after its {}, without an END frame; {KILLED}", self.frame.name()),
            ));
        };
        if end.header.kind != FrameKind::End {
            return Err(ReadError::corrupt(end.start, format!("{} where the END frame belongs", end.name())));
        }
        if end.header.count != self.records {
            return Err(ReadError::corrupt(
                end.start,
                format!("{} says the recording holds {} records, {} were read", end.name(), end.header.count, self.records),
            ));
        }
        let end_json = self.parse_json(&end)?;
        let mut probe = [0u8; 1];
        if self.read_up_to(&mut probe)? != 0 {
            return Err(ReadError::corrupt(
                self.offset.saturating_sub(1),
                format!("unexpected bytes after the {} (a recording ends with its END frame)", end.name()),
            ));
        }
        Ok(end_json)
    }

    fn read_file_header(&mut self) -> Result<(), ReadError> {
        let mut header = [0u8; FILE_HEADER_LEN];
        let got = self.read_up_to(&mut header)?;
        let present = header.split_at(got).0;
        let magic = present.get(..MAGIC.len()).unwrap_or(present);
        if !MAGIC.starts_with(magic) {
            return Err(ReadError::new(
                ReadErrorKind::NotARecording,
                0,
                format!("the file starts with \"{}\", a recording with \"{}\"", magic.escape_ascii(), MAGIC.escape_ascii()),
            ));
        }
        if got == 0 {
            return Err(ReadError::truncated(
                0,
                "the file is empty: nothing was ever recorded into it (a run killed before it started, or the wrong file)",
            ));
        }
        if got < FILE_HEADER_LEN {
            return Err(ReadError::truncated(got as u64, format!("the file ends inside its 12-byte header; {KILLED}")));
        }
        let mut c = Cursor::new(header.split_at(MAGIC.len()).1);
        let version = c.u32_le().map_err(|e| ReadError::corrupt(MAGIC.len() as u64, e))?;
        let at = MAGIC.len() as u64;
        match version {
            OLDEST_READ_VERSION..=FORMAT_VERSION => {
                self.decoder.set_version(version);
                Ok(())
            }
            v if v > FORMAT_VERSION && v <= MAX_PLAUSIBLE_VERSION => Err(ReadError::new(
                ReadErrorKind::NewerVersion,
                at,
                format!(
                    "written by a newer execprof: format version {v}, this execprof reads \
                     {OLDEST_READ_VERSION} to {FORMAT_VERSION}; upgrade execprof"
                ),
            )),
            v => Err(ReadError::corrupt(
                at,
                format!("format version {v} does not exist (this execprof reads {OLDEST_READ_VERSION} to {FORMAT_VERSION})"),
            )),
        }
    }

    fn read_meta(&mut self) -> Result<(), ReadError> {
        let Some(frame) = self.read_frame()? else {
            return Err(ReadError::truncated(
                self.offset,
                format!("the file ends right after its header, before the META frame; {KILLED}"),
            ));
        };
        if frame.header.kind != FrameKind::Meta || frame.header.count != 0 {
            return Err(ReadError::corrupt(frame.start, format!("{} where the META frame belongs", frame.name())));
        }
        self.meta = self.parse_json(&frame)?;
        self.frame = frame;
        self.raw.clear();
        Ok(())
    }

    fn next_record_inner(&mut self) -> Result<Option<Record>, ReadError> {
        loop {
            match &self.phase {
                Phase::Records => {}
                Phase::Failed(e) => return Err(e.clone()),
                Phase::Trailer(_) | Phase::Done => return Ok(None),
            }
            if self.pos < self.raw.len() {
                if let Some(record) = self.decode_one()? {
                    return Ok(Some(record));
                }
            } else {
                self.next_frame()?;
            }
        }
    }

    fn decode_one(&mut self) -> Result<Option<Record>, ReadError> {
        let at = self.pos;
        let mut c = Cursor { buf: &self.raw, pos: at };
        let mut times = Cursor { buf: self.raw.get(..self.times_end).unwrap_or_default(), pos: self.times_pos };
        let t = c.byte().map_err(|e| self.record_error(at, 0, &e))?;
        match self.decoder.decode(t, &mut c, &mut times) {
            Ok(item) => {
                self.pos = c.pos;
                self.times_pos = times.pos;
                if item.is_some() {
                    self.frame_records += 1;
                    self.records += 1;
                }
                Ok(item)
            }
            Err(e) => Err(self.record_error(at, t, &e)),
        }
    }

    fn record_error(&self, at: usize, t: u8, what: &str) -> ReadError {
        ReadError::corrupt(
            self.frame.start,
            format!(
                "{} (starting at byte {}), record #{} ({}) at byte {} of the frame's record stream: \
                 {what}",
                self.frame.name(),
                self.frame.start,
                self.frame_records,
                tag::name(t),
                at.saturating_sub(self.times_end),
            ),
        )
    }

    /// The current RECORDS frame is used up: checks its count, reads the next frame.
    fn next_frame(&mut self) -> Result<(), ReadError> {
        let done = self.frame;
        if done.header.kind == FrameKind::Records && self.frame_records != done.header.count {
            return Err(ReadError::corrupt(
                done.start,
                format!("{} holds {} records, its header says {}", done.name(), self.frame_records, done.header.count),
            ));
        }
        if done.header.kind == FrameKind::Records && self.times_pos != self.times_end {
            return Err(ReadError::corrupt(
                done.start,
                format!(
                    "{}: {} bytes of time deltas are left over after its last record",
                    done.name(),
                    self.times_end.saturating_sub(self.times_pos)
                ),
            ));
        }
        let Some(frame) = self.read_frame()? else {
            return Err(ReadError::truncated(
                self.offset,
                format!("the file ends after its {}, without SYMBOLS and END frames; {KILLED}", done.name()),
            ));
        };
        self.frame = frame;
        self.frame_records = 0;
        match frame.header.kind {
            FrameKind::Records => {
                let (start, end) =
                    split_streams(&self.raw).map_err(|e| ReadError::corrupt(frame.start, format!("{}: time stream: {e}", frame.name())))?;
                (self.times_pos, self.times_end, self.pos) = (start, end, end);
                Ok(())
            }
            FrameKind::Symbols => {
                let symbols = decode_symbols(&self.raw, frame.header.count)
                    .map_err(|e| ReadError::corrupt(frame.start, format!("{}: {e}", frame.name())))?;
                self.raw.clear();
                self.phase = Phase::Trailer(symbols);
                Ok(())
            }
            FrameKind::Meta | FrameKind::End => {
                Err(ReadError::corrupt(frame.start, format!("{} where a RECORDS or the SYMBOLS frame belongs", frame.name())))
            }
        }
    }

    /// Reads the next frame, checked and decompressed into `self.raw`; None when the input ends
    /// exactly before it.
    fn read_frame(&mut self) -> Result<Option<FrameAt>, ReadError> {
        let start = self.offset;
        let index = self.next_seq;
        let mut bytes = [0u8; FRAME_HEADER_LEN];
        let got = self.read_up_to(&mut bytes)?;
        if got == 0 {
            return Ok(None);
        }
        if got < FRAME_HEADER_LEN {
            return Err(ReadError::truncated(
                self.offset,
                format!(
                    "the file ends inside the header of frame #{index}, which starts at byte {start} \
                     ({got} of {FRAME_HEADER_LEN} bytes present); {KILLED}"
                ),
            ));
        }
        let header = FrameHeader::parse(&bytes).map_err(|e| ReadError::corrupt(start, format!("frame #{index}: {e}")))?;
        let frame = FrameAt { header, start };
        if header.seq != index {
            return Err(ReadError::corrupt(
                start,
                format!("frame #{index} is a {} frame numbered #{} (frames were lost, duplicated or reordered)", header.kind, header.seq),
            ));
        }
        self.read_payload(&frame)?;
        self.unpacker
            .unpack(&self.stored, header.raw_len, &mut self.raw)
            .map_err(|e| ReadError::corrupt(start, format!("{}: {e}", frame.name())))?;
        self.pos = self.raw.len(); // nothing to decode until a RECORDS frame sets up its streams
        self.intact = self.offset;
        self.next_seq = index.checked_add(1).ok_or_else(|| ReadError::corrupt(start, "more than 2^32 frames"))?;
        Ok(Some(frame))
    }

    fn read_payload(&mut self, frame: &FrameAt) -> Result<(), ReadError> {
        let want = u64::from(frame.header.stored_len);
        self.stored.clear();
        // Grows with the data actually present, so a lying length cannot make us allocate.
        let got = self.input.by_ref().take(want).read_to_end(&mut self.stored);
        let got = got.map_err(|e| ReadError::io(self.offset + self.stored.len() as u64, e))? as u64;
        self.offset += got;
        if got < want {
            return Err(ReadError::truncated(
                self.offset,
                format!(
                    "the file ends inside its {}, which starts at byte {} and needs {want} payload \
                     bytes, {got} present; {KILLED}",
                    frame.name(),
                    frame.start
                ),
            ));
        }
        let crc = crc32fast::hash(&self.stored);
        if crc != frame.header.payload_crc {
            return Err(ReadError::corrupt(
                frame.start + FRAME_HEADER_LEN as u64,
                format!(
                    "{} (starting at byte {}): payload checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                    frame.name(),
                    frame.start,
                    frame.header.payload_crc
                ),
            ));
        }
        Ok(())
    }

    fn parse_json(&self, frame: &FrameAt) -> Result<serde_json::Value, ReadError> {
        serde_json::from_slice(&self.raw).map_err(|e| ReadError::corrupt(frame.start, format!("{}: invalid JSON: {e}", frame.name())))
    }

    /// Reads until `buf` is full or the input ends; returns how many bytes were read.
    fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, ReadError> {
        let mut n = 0;
        while let Some(rest) = buf.get_mut(n..).filter(|r| !r.is_empty()) {
            match self.input.read(rest) {
                Ok(0) => break,
                Ok(k) => n += k.min(rest.len()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::io(self.offset + n as u64, e)),
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}
