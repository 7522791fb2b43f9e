//! Frames: the frame header, the payload packer and unpacker, and the frame sink of a writer.

use super::varint::Cursor;
use super::{FRAME_HEADER_LEN, MAX_FRAME_RAW, MAX_FRAME_STORED, ZSTD_LEVEL};
use std::fmt;
use std::io::{self, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FrameKind {
    Meta,
    Records,
    Symbols,
    End,
}

impl FrameKind {
    pub(super) const ALL: [FrameKind; 4] = [FrameKind::Meta, FrameKind::Records, FrameKind::Symbols, FrameKind::End];

    fn byte(self) -> u8 {
        match self {
            FrameKind::Meta => 1,
            FrameKind::Records => 2,
            FrameKind::Symbols => 3,
            FrameKind::End => 4,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.byte() == b)
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameKind::Meta => "META",
            FrameKind::Records => "RECORDS",
            FrameKind::Symbols => "SYMBOLS",
            FrameKind::End => "END",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FrameHeader {
    pub(super) kind: FrameKind,
    pub(super) seq: u32,
    pub(super) count: u64,
    pub(super) raw_len: u32,
    pub(super) stored_len: u32,
    pub(super) payload_crc: u32,
}

impl FrameHeader {
    pub(super) fn to_bytes(self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = Vec::with_capacity(FRAME_HEADER_LEN);
        b.push(self.kind.byte());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.raw_len.to_le_bytes());
        b.extend_from_slice(&self.stored_len.to_le_bytes());
        b.extend_from_slice(&self.payload_crc.to_le_bytes());
        b.extend_from_slice(&crc32fast::hash(&b).to_le_bytes());
        let mut out = [0; FRAME_HEADER_LEN];
        out.copy_from_slice(&b);
        out
    }

    /// Parses a header read from a file: the checksum first (so that damage to a length is
    /// reported as damage, not as a short file), then the kind and the length caps.
    pub(super) fn parse(b: &[u8; FRAME_HEADER_LEN]) -> Result<Self, String> {
        let (covered, _) = b.split_at(FRAME_HEADER_LEN - 4);
        let mut c = Cursor::new(b);
        let kind = c.byte()?;
        let seq = c.u32_le()?;
        let count = c.u64_le()?;
        let raw_len = c.u32_le()?;
        let stored_len = c.u32_le()?;
        let payload_crc = c.u32_le()?;
        let header_crc = c.u32_le()?;
        let computed = crc32fast::hash(covered);
        if computed != header_crc {
            return Err(format!("frame header checksum mismatch (stored {header_crc:#010x}, computed {computed:#010x})"));
        }
        let kind = FrameKind::from_byte(kind).ok_or_else(|| format!("unknown frame kind {kind:#04x}"))?;
        if raw_len > MAX_FRAME_RAW || stored_len > MAX_FRAME_STORED {
            return Err(format!(
                "{kind} frame claims {raw_len} bytes ({stored_len} stored), more than a recording \
                 frame may hold ({MAX_FRAME_RAW})"
            ));
        }
        Ok(FrameHeader { kind, seq, count, raw_len, stored_len, payload_crc })
    }
}

/// The compressor of frame payloads, with its context and output buffer kept between frames.
pub(super) struct Packer {
    zstd: zstd::bulk::Compressor<'static>,
    stored: Vec<u8>,
}

impl Packer {
    pub(super) fn new() -> io::Result<Self> {
        Ok(Packer { zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL)?, stored: Vec::new() })
    }

    pub(super) fn pack(&mut self, raw: &[u8]) -> io::Result<&[u8]> {
        self.stored.clear();
        self.stored.reserve(zstd::compress_bound(raw.len()));
        self.zstd.compress_to_buffer(raw, &mut self.stored)?;
        Ok(&self.stored)
    }
}

/// The decompressor, which refuses any payload that does not decompress to exactly `raw_len`.
pub(super) struct Unpacker {
    zstd: zstd::bulk::Decompressor<'static>,
}

impl Unpacker {
    pub(super) fn new() -> io::Result<Self> {
        Ok(Unpacker { zstd: zstd::bulk::Decompressor::new()? })
    }

    pub(super) fn unpack(&mut self, stored: &[u8], raw_len: u32, raw: &mut Vec<u8>) -> Result<(), String> {
        raw.clear();
        // raw_len is capped by FrameHeader::parse, so this reservation is bounded.
        raw.reserve(raw_len as usize);
        self.zstd.decompress_to_buffer(stored, raw).map_err(|e| format!("the payload does not decompress ({e})"))?;
        if raw.len() != raw_len as usize {
            return Err(format!("the payload decompresses to {} bytes, its header says {raw_len}", raw.len()));
        }
        Ok(())
    }
}

/// The output side of a writer: frames out, bytes counted.
pub(super) struct FrameSink<W: Write> {
    pub(super) out: W,
    pub(super) packer: Packer,
    pub(super) next_seq: u32,
    pub(super) bytes: u64,
}

impl<W: Write> FrameSink<W> {
    pub(super) fn write(&mut self, kind: FrameKind, count: u64, raw: &[u8]) -> io::Result<()> {
        let too_big = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a {kind} frame of {} bytes exceeds the limit of {MAX_FRAME_RAW}", raw.len()),
            )
        };
        let raw_len = u32::try_from(raw.len()).ok().filter(|&n| n <= MAX_FRAME_RAW).ok_or_else(too_big)?;
        let stored = self.packer.pack(raw)?;
        let stored_len = u32::try_from(stored.len()).map_err(|_| too_big())?;
        let header = FrameHeader { kind, seq: self.next_seq, count, raw_len, stored_len, payload_crc: crc32fast::hash(stored) };
        self.out.write_all(&header.to_bytes())?;
        self.out.write_all(stored)?;
        self.bytes += (FRAME_HEADER_LEN + stored.len()) as u64;
        self.next_seq = self.next_seq.checked_add(1).ok_or_else(|| io::Error::other("a recording cannot hold more than 2^32 frames"))?;
        Ok(())
    }
}
