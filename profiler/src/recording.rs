//! Recording files: the records of one traced run, as they came, so that `execprof report FILE`
//! can replay them through the same pipeline as a live run, without root.
//!
//! # Layout (format version 1)
//!
//! ```text
//! file    = magic "EXECPROF" (8 bytes) | format version (u32 LE) | frame*
//! frame   = kind (u8) | seq (u32 LE) | count (u64 LE) | raw_len (u32 LE) | stored_len (u32 LE)
//!           | payload_crc (u32 LE) | header_crc (u32 LE) | payload (stored_len bytes)
//! frames  = META RECORDS* SYMBOLS END
//! ```
//!
//! * `seq` numbers the frames 0, 1, 2, ... so that a lost, duplicated or reordered frame is
//!   detected even though each frame is intact on its own.
//! * `count` is 0 for META, the number of records for RECORDS, the number of symbols for
//!   SYMBOLS, and the total number of records of the file for END.
//! * `payload` is one zstd frame that decompresses to exactly `raw_len` bytes; `payload_crc` is
//!   the CRC-32 of the stored (compressed) bytes, `header_crc` the CRC-32 of the 25 header bytes
//!   before it. The header has its own checksum so that a damaged length field is reported as
//!   damage rather than as a file that ends too early. With the magic and the version checked
//!   exactly, every byte of a file is covered by a check.
//! * META and END hold JSON (`serde_json::Value`), SYMBOLS a table of (address, name).
//!
//! # Records inside a RECORDS frame
//!
//! The payload holds two streams: `varint(len) | time deltas | record stream`. Each record puts
//! its time (zigzag LEB128 delta against the previous record's, since times may step back) in
//! the first and everything else in the second: a tag byte (low nibble: kind; bit 4: "same pid,
//! tgid and cpu as the previous record"; bits 5-7: kind-specific flags), an optional head byte
//! saying which ids are spelled out, the ids that changed (deltas), and the body. Fault counters
//! are deltas against the previous record that had them. File names and sample stacks are
//! interned: the first use defines the next id (`0` then the value; a stack's frames as deltas),
//! later uses write `id + 1`. The tables are bounded: when one reaches [`MAX_INTERNED`] entries
//! the writer emits a reset item and both sides clear it. All this state persists across the
//! frames of a file, so frames are decoded in order: the format trades random access, which a
//! report does not need, for size.
//!
//! Measured on a synthetic 100,000-step exec chain (700,000 attempts plus 1 kHz samples): 5.7
//! bytes per exec attempt; encoding ~10 M attempts/s, decoding ~5.6 M attempts/s on one core
//! (`cargo run --release --example throughput`).

use crate::record::{Body, Head, Name, Record, TracedSyscall};
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The version this code writes and the only one it reads. Bump it for any change of layout.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"EXECPROF";
const FILE_HEADER_LEN: usize = MAGIC.len() + 4;
const FRAME_HEADER_LEN: usize = 29;
/// A RECORDS frame is closed once its raw encoding reaches this size: large enough for the
/// compressor to find the repetitions, small enough to bound memory and the loss when killed.
const FRAME_TARGET_RAW: usize = 1 << 20;
/// No frame may be larger than this, raw or stored: a reader never allocates more on the word of
/// a length field.
const MAX_FRAME_RAW: u32 = 64 << 20;
const MAX_FRAME_STORED: u32 = MAX_FRAME_RAW + (1 << 20);
/// zstd level 1. Measured on the synthetic 100,000-step chain (700,000 attempts, 26 frames),
/// bytes per attempt / compression / decompression in M attempts/s, one core:
/// zstd 1: 5.69 / 40 / 97; zstd 3: 5.64 / 34 / 100; deflate (miniz_oxide) 1: 6.41 / 20 / 30,
/// deflate 6: 5.59 / 2.7 / 36; lz4_flex: 7.17 / 105 / 320. With the time deltas in their own
/// stream the zstd levels compress alike, so the fastest wins; lz4 costs 27% more bytes, and
/// compression is not the bottleneck (record encoding is, at ~10 M attempts/s).
const ZSTD_LEVEL: i32 = 1;
/// Bound of each interning table (names, stacks), on both sides.
pub const MAX_INTERNED: usize = 1 << 14;
/// Versions above this are not "newer", they are damage.
const MAX_PLAUSIBLE_VERSION: u32 = 0xffff;
const KILLED: &str = "a recording cut short like this was probably written by a run that was \
                      killed; the records before this point are intact";

// ---------------------------------------------------------------------------------------------
// Frames

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameKind {
    Meta,
    Records,
    Symbols,
    End,
}

impl FrameKind {
    const ALL: [FrameKind; 4] = [
        FrameKind::Meta,
        FrameKind::Records,
        FrameKind::Symbols,
        FrameKind::End,
    ];

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
struct FrameHeader {
    kind: FrameKind,
    seq: u32,
    count: u64,
    raw_len: u32,
    stored_len: u32,
    payload_crc: u32,
}

impl FrameHeader {
    fn to_bytes(self) -> [u8; FRAME_HEADER_LEN] {
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
    fn parse(b: &[u8; FRAME_HEADER_LEN]) -> Result<Self, String> {
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
            return Err(format!(
                "frame header checksum mismatch (stored {header_crc:#010x}, computed {computed:#010x})"
            ));
        }
        let kind =
            FrameKind::from_byte(kind).ok_or_else(|| format!("unknown frame kind {kind:#04x}"))?;
        if raw_len > MAX_FRAME_RAW || stored_len > MAX_FRAME_STORED {
            return Err(format!(
                "{kind} frame claims {raw_len} bytes ({stored_len} stored), more than a recording \
                 frame may hold ({MAX_FRAME_RAW})"
            ));
        }
        Ok(FrameHeader {
            kind,
            seq,
            count,
            raw_len,
            stored_len,
            payload_crc,
        })
    }
}

/// The compressor of frame payloads, with its context and output buffer kept between frames.
struct Packer {
    zstd: zstd::bulk::Compressor<'static>,
    stored: Vec<u8>,
}

impl Packer {
    fn new() -> io::Result<Self> {
        Ok(Packer {
            zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
            stored: Vec::new(),
        })
    }

    fn pack(&mut self, raw: &[u8]) -> io::Result<&[u8]> {
        self.stored.clear();
        self.stored.reserve(zstd::compress_bound(raw.len()));
        self.zstd.compress_to_buffer(raw, &mut self.stored)?;
        Ok(&self.stored)
    }
}

/// The decompressor, which refuses any payload that does not decompress to exactly `raw_len`.
struct Unpacker {
    zstd: zstd::bulk::Decompressor<'static>,
}

impl Unpacker {
    fn new() -> io::Result<Self> {
        Ok(Unpacker {
            zstd: zstd::bulk::Decompressor::new()?,
        })
    }

    fn unpack(&mut self, stored: &[u8], raw_len: u32, raw: &mut Vec<u8>) -> Result<(), String> {
        raw.clear();
        // raw_len is capped by FrameHeader::parse, so this reservation is bounded.
        raw.reserve(raw_len as usize);
        self.zstd
            .decompress_to_buffer(stored, raw)
            .map_err(|e| format!("the payload does not decompress ({e})"))?;
        if raw.len() != raw_len as usize {
            return Err(format!(
                "the payload decompresses to {} bytes, its header says {raw_len}",
                raw.len()
            ));
        }
        Ok(())
    }
}

/// The output side of a writer: frames out, bytes counted.
struct FrameSink<W: Write> {
    out: W,
    packer: Packer,
    next_seq: u32,
    bytes: u64,
}

impl<W: Write> FrameSink<W> {
    fn write(&mut self, kind: FrameKind, count: u64, raw: &[u8]) -> io::Result<()> {
        let too_big = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {kind} frame of {} bytes exceeds the limit of {MAX_FRAME_RAW}",
                    raw.len()
                ),
            )
        };
        let raw_len = u32::try_from(raw.len())
            .ok()
            .filter(|&n| n <= MAX_FRAME_RAW)
            .ok_or_else(too_big)?;
        let stored = self.packer.pack(raw)?;
        let stored_len = u32::try_from(stored.len()).map_err(|_| too_big())?;
        let header = FrameHeader {
            kind,
            seq: self.next_seq,
            count,
            raw_len,
            stored_len,
            payload_crc: crc32fast::hash(stored),
        };
        self.out.write_all(&header.to_bytes())?;
        self.out.write_all(stored)?;
        self.bytes += (FRAME_HEADER_LEN + stored.len()) as u64;
        self.next_seq = self
            .next_seq
            .checked_add(1)
            .ok_or_else(|| io::Error::other("a recording cannot hold more than 2^32 frames"))?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Varints and deltas

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Wrapping delta: exact for any pair of u64, small when `new` is near `old` on either side.
fn delta64(new: u64, old: u64) -> u64 {
    zigzag(new.wrapping_sub(old) as i64)
}

fn undelta64(old: u64, z: u64) -> u64 {
    old.wrapping_add(unzigzag(z) as u64)
}

fn delta32(new: u32, old: u32) -> u64 {
    zigzag(i64::from(new) - i64::from(old))
}

fn undelta32(old: u32, z: u64, what: &str) -> Result<u32, String> {
    i64::from(old)
        .checked_add(unzigzag(z))
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("the {what} delta leaves the range of a u32"))
}

/// A bounds-checked reader over untrusted bytes: every access can fail, none can panic.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or("the data ends in the middle of an item")?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], String> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| format!("a length of {len} bytes runs past the end of the data"))?;
        self.pos += n;
        Ok(rest.split_at(n).0)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self.take(N as u64)?;
        bytes.try_into().map_err(|_| "short read".to_string())
    }

    fn u32_le(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64_le(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            if i == 9 && b > 1 {
                return Err("bad varint (more than 64 bits)".into());
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("bad varint (longer than 10 bytes)".into())
    }

    fn varint_u32(&mut self, what: &str) -> Result<u32, String> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| format!("the {what} {v} does not fit in a u32"))
    }
}

// ---------------------------------------------------------------------------------------------
// Record codec

/// Tag byte: kind in the low nibble, "head same as before" in bit 4, three kind-specific flags.
mod tag {
    pub const KIND_MASK: u8 = 0x0f;
    pub const HEAD_SAME: u8 = 0x10;
    pub const B0: u8 = 0x20;
    pub const B1: u8 = 0x40;
    pub const B2: u8 = 0x80;
    pub const FLAGS: u8 = B0 | B1 | B2;

    pub const ENTER: u8 = 0;
    pub const EXIT: u8 = 1;
    pub const NO_RETURN: u8 = 2;
    pub const LOADED: u8 = 3;
    pub const TASK_NEW: u8 = 4;
    pub const TASK_EXIT: u8 = 5;
    pub const SAMPLE: u8 = 6;
    pub const PROBED_CALL: u8 = 7;
    pub const OFF_CPU: u8 = 8;
    pub const MAIN: u8 = 9;
    /// Not a record: clears the name table (B0) and/or the stack table (B1).
    pub const RESET: u8 = 15;

    /// The flags each kind may carry (None: no such kind). Anything else is corruption.
    pub fn allowed_flags(kind: u8) -> Option<u8> {
        Some(match kind {
            ENTER => B0 | B1,         // faults, syscall code byte
            EXIT => B0 | B1 | B2,     // faults, syscall code byte, name
            NO_RETURN => B0,          // name
            LOADED => B0 | B1,        // name, old_pid spelled out
            TASK_NEW => B0 | B1 | B2, // thread, child_tgid == tgid, child_tgid spelled out
            TASK_EXIT => B0,          // group_dead
            SAMPLE | PROBED_CALL | OFF_CPU | MAIN => 0,
            RESET => B0 | B1,
            _ => return None,
        })
    }

    /// The same words as `Body::kind_name`, for messages about records that did not decode.
    pub fn name(tag: u8) -> String {
        const NAMES: [&str; 10] = [
            "syscall enter",
            "syscall exit",
            "point of no return",
            "new image",
            "task new",
            "task exit",
            "sample",
            "probed call",
            "off-CPU",
            "main",
        ];
        match NAMES.get(usize::from(tag & KIND_MASK)) {
            Some(name) => (*name).to_string(),
            None if tag & KIND_MASK == RESET => "table reset".to_string(),
            None => format!("unknown tag {tag:#04x}"),
        }
    }
}

/// Head byte, present when the tag lacks HEAD_SAME: which ids are spelled out after it.
mod head {
    pub const PID: u8 = 0x01;
    pub const TGID_MASK: u8 = 0x06;
    pub const TGID_IS_PID: u8 = 0;
    pub const TGID_IS_PREV: u8 = 1;
    pub const TGID_EXPLICIT: u8 = 2;
    pub const CPU: u8 = 0x08;
    pub const ALL: u8 = PID | TGID_MASK | CPU;
}

/// What the previous record left behind: the bases of all deltas.
#[derive(Default)]
struct Prev {
    ts: u64,
    pid: u32,
    tgid: u32,
    cpu: u32,
    faults: (u64, u64),
}

/// The two streams of a RECORDS frame. Time deltas are the noisy part of a record (nanosecond
/// jitter); kept apart, the rest (tags, ids, names, faults) repeats in long runs the compressor
/// matches whole, and the deltas alone code tighter: 5.7 instead of 7.2 bytes per exec attempt
/// on the chain. Payload: `varint(times.len()) | times | records`.
#[derive(Default)]
pub(crate) struct Streams {
    pub(crate) times: Vec<u8>,
    pub(crate) records: Vec<u8>,
}

impl Streams {
    pub(crate) fn len(&self) -> usize {
        self.times.len() + self.records.len()
    }

    pub(crate) fn clear(&mut self) {
        self.times.clear();
        self.records.clear();
    }

    pub(crate) fn payload(&self, out: &mut Vec<u8>) {
        out.clear();
        put_varint(out, self.times.len() as u64);
        out.extend_from_slice(&self.times);
        out.extend_from_slice(&self.records);
    }
}

/// Record to bytes. Holds the delta bases and the interning tables of one file.
#[derive(Default)]
pub(crate) struct Encoder {
    prev: Prev,
    names: HashMap<Name, u64>,
    stacks: HashMap<Vec<u64>, u64>,
}

impl Encoder {
    pub(crate) fn encode(&mut self, r: &Record, out: &mut Streams) {
        let buf = &mut out.records;
        let tag_at = buf.len();
        buf.push(0); // patched below, once the body has chosen its flags
        let head_bits = self.put_head(&r.head, buf, &mut out.times);
        let body_bits = self.put_body(&r.head, &r.body, buf);
        if let Some(t) = buf.get_mut(tag_at) {
            *t = head_bits | body_bits;
        }
        self.reset_full_tables(buf);
    }

    fn put_head(&mut self, h: &Head, buf: &mut Vec<u8>, times: &mut Vec<u8>) -> u8 {
        let p = &mut self.prev;
        let same = h.pid == p.pid && h.tgid == p.tgid && h.cpu == p.cpu;
        let mut hb = 0;
        if !same {
            let tgid_mode = if h.tgid == h.pid {
                head::TGID_IS_PID
            } else if h.tgid == p.tgid {
                head::TGID_IS_PREV
            } else {
                head::TGID_EXPLICIT
            };
            hb = tgid_mode << 1;
            if h.pid != p.pid {
                hb |= head::PID;
            }
            if h.cpu != p.cpu {
                hb |= head::CPU;
            }
            buf.push(hb);
        }
        put_varint(times, delta64(h.ts_ns, p.ts));
        if hb & head::PID != 0 {
            put_varint(buf, delta32(h.pid, p.pid));
        }
        if (hb & head::TGID_MASK) >> 1 == head::TGID_EXPLICIT {
            put_varint(buf, delta32(h.tgid, h.pid));
        }
        if hb & head::CPU != 0 {
            put_varint(buf, u64::from(h.cpu));
        }
        *p = Prev {
            ts: h.ts_ns,
            pid: h.pid,
            tgid: h.tgid,
            cpu: h.cpu,
            faults: p.faults,
        };
        if same { tag::HEAD_SAME } else { 0 }
    }

    fn put_body(&mut self, h: &Head, body: &Body, buf: &mut Vec<u8>) -> u8 {
        match body {
            Body::SyscallEnter { syscall, faults } => {
                let mut t = tag::ENTER | put_syscall(*syscall, buf);
                t |= self.put_faults(*faults, buf);
                t
            }
            Body::SyscallExit {
                syscall,
                ret,
                faults,
                name,
            } => {
                let mut t = tag::EXIT | put_syscall(*syscall, buf);
                put_varint(buf, zigzag(*ret));
                t |= self.put_faults(*faults, buf);
                t |= self.put_name(name.as_ref(), tag::B2, buf);
                t
            }
            Body::NoReturn { name } => tag::NO_RETURN | self.put_name(name.as_ref(), tag::B0, buf),
            Body::Loaded { old_pid, name } => {
                let mut t = tag::LOADED;
                if *old_pid != h.pid {
                    t |= tag::B1;
                    put_varint(buf, delta32(*old_pid, h.pid));
                }
                t | self.put_name(name.as_ref(), tag::B0, buf)
            }
            Body::TaskNew {
                child_pid,
                child_tgid,
                thread,
            } => {
                let mut t = tag::TASK_NEW;
                if *thread {
                    t |= tag::B0;
                }
                put_varint(buf, delta32(*child_pid, h.pid));
                // A new process is its own group leader; a new thread joins its parent's group.
                if child_tgid != child_pid {
                    if *child_tgid == h.tgid {
                        t |= tag::B1;
                    } else {
                        t |= tag::B2;
                        put_varint(buf, delta32(*child_tgid, *child_pid));
                    }
                }
                t
            }
            Body::TaskExit { group_dead } => tag::TASK_EXIT | if *group_dead { tag::B0 } else { 0 },
            Body::Sample { frames } => {
                self.put_stack(frames, buf);
                tag::SAMPLE
            }
            Body::ProbedCall { enter_ns, slot } => {
                put_varint(buf, delta64(h.ts_ns, *enter_ns));
                put_varint(buf, u64::from(*slot));
                tag::PROBED_CALL
            }
            Body::OffCpu { start_ns } => {
                put_varint(buf, delta64(h.ts_ns, *start_ns));
                tag::OFF_CPU
            }
            Body::Main => tag::MAIN,
        }
    }

    /// Faults: `zigzag(minor delta) << 1` when the major counter did not move (nearly always),
    /// else `1` followed by both zigzag deltas.
    fn put_faults(&mut self, faults: Option<(u64, u64)>, buf: &mut Vec<u8>) -> u8 {
        let Some(f) = faults else { return 0 };
        let minor = delta64(f.0, self.prev.faults.0);
        let major = delta64(f.1, self.prev.faults.1);
        if major == 0 && minor >> 63 == 0 {
            put_varint(buf, minor << 1);
        } else {
            put_varint(buf, 1);
            put_varint(buf, minor);
            put_varint(buf, major);
        }
        self.prev.faults = f;
        tag::B0
    }

    fn put_name(&mut self, name: Option<&Name>, flag: u8, buf: &mut Vec<u8>) -> u8 {
        let Some(name) = name else { return 0 };
        if let Some(&id) = self.names.get(name) {
            put_varint(buf, id + 1);
        } else {
            put_varint(buf, 0);
            buf.push(u8::from(name.truncated) | u8::from(name.unreadable) << 1);
            put_varint(buf, name.bytes.len() as u64);
            buf.extend_from_slice(&name.bytes);
            self.names.insert(name.clone(), self.names.len() as u64);
        }
        flag
    }

    fn put_stack(&mut self, frames: &[u64], buf: &mut Vec<u8>) {
        if let Some(&id) = self.stacks.get(frames) {
            put_varint(buf, id + 1);
            return;
        }
        put_varint(buf, 0);
        put_varint(buf, frames.len() as u64);
        let mut prev = 0;
        for &f in frames {
            put_varint(buf, delta64(f, prev));
            prev = f;
        }
        self.stacks
            .insert(frames.to_vec(), self.stacks.len() as u64);
    }

    /// Keeps the tables bounded: a full table is cleared on both sides by a RESET item.
    fn reset_full_tables(&mut self, buf: &mut Vec<u8>) {
        let mut bits = 0;
        if self.names.len() >= MAX_INTERNED {
            self.names.clear();
            bits |= tag::B0;
        }
        if self.stacks.len() >= MAX_INTERNED {
            self.stacks.clear();
            bits |= tag::B1;
        }
        if bits != 0 {
            buf.push(tag::RESET | bits);
        }
    }
}

fn put_syscall(s: TracedSyscall, buf: &mut Vec<u8>) -> u8 {
    if s == TracedSyscall::Execve {
        return 0;
    }
    buf.push(s.code() as u8);
    tag::B1
}

/// Bytes to records: the mirror of [`Encoder`], defensive about every byte.
#[derive(Default)]
pub(crate) struct Decoder {
    prev: Prev,
    names: Vec<Name>,
    stacks: Vec<Vec<u64>>,
}

impl Decoder {
    /// Decodes the item whose tag was just read: a record, or None for a table reset.
    fn decode(
        &mut self,
        t: u8,
        c: &mut Cursor,
        times: &mut Cursor,
    ) -> Result<Option<Record>, String> {
        let kind = t & tag::KIND_MASK;
        let flags = t & tag::FLAGS;
        let allowed = tag::allowed_flags(kind).ok_or_else(|| format!("unknown tag {t:#04x}"))?;
        if flags & !allowed != 0 {
            return Err(format!(
                "unknown flag bits {:#04x} in tag {t:#04x}",
                flags & !allowed
            ));
        }
        if kind == tag::RESET {
            return self.reset(t).map(|()| None);
        }
        let head = self.head(t & tag::HEAD_SAME != 0, c, times)?;
        let body = self.body(kind, flags, &head, c)?;
        Ok(Some(Record { head, body }))
    }

    fn reset(&mut self, t: u8) -> Result<(), String> {
        if t & tag::HEAD_SAME != 0 {
            return Err(format!("bad table reset tag {t:#04x}"));
        }
        if t & tag::B0 != 0 {
            self.names.clear();
        }
        if t & tag::B1 != 0 {
            self.stacks.clear();
        }
        Ok(())
    }

    fn head(&mut self, same: bool, c: &mut Cursor, times: &mut Cursor) -> Result<Head, String> {
        let hb = if same { 0 } else { c.byte()? };
        if hb & !head::ALL != 0 {
            return Err(format!("bad head byte {hb:#04x}"));
        }
        let p = &mut self.prev;
        let ts_ns = undelta64(
            p.ts,
            times.varint().map_err(|e| format!("time delta: {e}"))?,
        );
        let pid = if hb & head::PID != 0 {
            undelta32(p.pid, c.varint()?, "pid")?
        } else {
            p.pid
        };
        let tgid = match (same, (hb & head::TGID_MASK) >> 1) {
            (true, _) => p.tgid,
            (false, head::TGID_IS_PID) => pid,
            (false, head::TGID_IS_PREV) => p.tgid,
            (false, head::TGID_EXPLICIT) => undelta32(pid, c.varint()?, "tgid")?,
            (false, _) => return Err(format!("bad head byte {hb:#04x}")),
        };
        let cpu = if hb & head::CPU != 0 {
            c.varint_u32("cpu")?
        } else {
            p.cpu
        };
        *p = Prev {
            ts: ts_ns,
            pid,
            tgid,
            cpu,
            faults: p.faults,
        };
        Ok(Head {
            ts_ns,
            pid,
            tgid,
            cpu,
        })
    }

    fn body(&mut self, kind: u8, f: u8, h: &Head, c: &mut Cursor) -> Result<Body, String> {
        Ok(match kind {
            tag::ENTER => {
                let syscall = syscall(f & tag::B1 != 0, c)?;
                Body::SyscallEnter {
                    syscall,
                    faults: self.faults(f & tag::B0 != 0, c)?,
                }
            }
            tag::EXIT => {
                let syscall = syscall(f & tag::B1 != 0, c)?;
                let ret = unzigzag(c.varint()?);
                let faults = self.faults(f & tag::B0 != 0, c)?;
                Body::SyscallExit {
                    syscall,
                    ret,
                    faults,
                    name: self.name_if(f & tag::B2 != 0, c)?,
                }
            }
            tag::NO_RETURN => Body::NoReturn {
                name: self.name_if(f & tag::B0 != 0, c)?,
            },
            tag::LOADED => {
                let old_pid = if f & tag::B1 != 0 {
                    undelta32(h.pid, c.varint()?, "old pid")?
                } else {
                    h.pid
                };
                Body::Loaded {
                    old_pid,
                    name: self.name_if(f & tag::B0 != 0, c)?,
                }
            }
            tag::TASK_NEW => {
                let child_pid = undelta32(h.pid, c.varint()?, "child pid")?;
                let child_tgid = match (f & tag::B1 != 0, f & tag::B2 != 0) {
                    (false, false) => child_pid,
                    (true, false) => h.tgid,
                    (false, true) => undelta32(child_pid, c.varint()?, "child tgid")?,
                    (true, true) => return Err("contradictory child tgid flags".into()),
                };
                Body::TaskNew {
                    child_pid,
                    child_tgid,
                    thread: f & tag::B0 != 0,
                }
            }
            tag::TASK_EXIT => Body::TaskExit {
                group_dead: f & tag::B0 != 0,
            },
            tag::SAMPLE => Body::Sample {
                frames: self.stack(c)?,
            },
            tag::PROBED_CALL => {
                let enter_ns = h.ts_ns.wrapping_sub(unzigzag(c.varint()?) as u64);
                Body::ProbedCall {
                    enter_ns,
                    slot: c.varint_u32("probe slot")?,
                }
            }
            tag::OFF_CPU => Body::OffCpu {
                start_ns: h.ts_ns.wrapping_sub(unzigzag(c.varint()?) as u64),
            },
            tag::MAIN => Body::Main,
            _ => return Err(format!("unknown record kind {kind}")),
        })
    }

    fn faults(&mut self, present: bool, c: &mut Cursor) -> Result<Option<(u64, u64)>, String> {
        if !present {
            return Ok(None);
        }
        let v = c.varint()?;
        let (minor, major) = match v {
            1 => (c.varint()?, c.varint()?),
            v if v & 1 == 0 => (v >> 1, 0),
            v => return Err(format!("bad fault counter encoding {v}")),
        };
        let f = (
            undelta64(self.prev.faults.0, minor),
            undelta64(self.prev.faults.1, major),
        );
        self.prev.faults = f;
        Ok(Some(f))
    }

    fn name_if(&mut self, present: bool, c: &mut Cursor) -> Result<Option<Name>, String> {
        if present {
            self.name(c).map(Some)
        } else {
            Ok(None)
        }
    }

    fn name(&mut self, c: &mut Cursor) -> Result<Name, String> {
        let v = c.varint()?;
        if v != 0 {
            let id = v - 1;
            let defined = self.names.len();
            return usize::try_from(id).ok().and_then(|i| self.names.get(i)).cloned().ok_or_else(|| {
                format!("name id {id} was never defined ({defined} names defined since the last table reset)")
            });
        }
        if self.names.len() >= MAX_INTERNED {
            return Err(format!(
                "more than {MAX_INTERNED} names defined without a table reset"
            ));
        }
        let flags = c.byte()?;
        if flags & !3 != 0 {
            return Err(format!("bad name flags {flags:#04x}"));
        }
        let len = c.varint()?;
        let name = Name {
            bytes: c.take(len)?.to_vec(),
            truncated: flags & 1 != 0,
            unreadable: flags & 2 != 0,
        };
        self.names.push(name.clone());
        Ok(name)
    }

    fn stack(&mut self, c: &mut Cursor) -> Result<Vec<u64>, String> {
        let v = c.varint()?;
        if v != 0 {
            let id = v - 1;
            let defined = self.stacks.len();
            return usize::try_from(id).ok().and_then(|i| self.stacks.get(i)).cloned().ok_or_else(|| {
                format!("stack id {id} was never defined ({defined} stacks defined since the last table reset)")
            });
        }
        if self.stacks.len() >= MAX_INTERNED {
            return Err(format!(
                "more than {MAX_INTERNED} stacks defined without a table reset"
            ));
        }
        let n = c.varint()?;
        // Every frame takes at least one byte: a count beyond the data left is a lie.
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= c.remaining())
            .ok_or_else(|| format!("a stack of {n} frames runs past the end of the data"))?;
        let mut frames = Vec::with_capacity(n);
        let mut prev = 0;
        for _ in 0..n {
            prev = undelta64(prev, c.varint()?);
            frames.push(prev);
        }
        self.stacks.push(frames.clone());
        Ok(frames)
    }
}

/// Where the time stream of a RECORDS payload lies: `(start, end)`; the record stream follows.
fn split_streams(raw: &[u8]) -> Result<(usize, usize), String> {
    let mut c = Cursor::new(raw);
    let len = c.varint()?;
    let start = c.pos;
    c.take(len)?;
    Ok((start, c.pos))
}

fn syscall(spelled_out: bool, c: &mut Cursor) -> Result<TracedSyscall, String> {
    if !spelled_out {
        return Ok(TracedSyscall::Execve);
    }
    let code = c.byte()?;
    TracedSyscall::from_code(u32::from(code)).ok_or_else(|| format!("bad syscall code {code}"))
}

fn encode_symbols(symbols: &[(u64, String)], buf: &mut Vec<u8>) {
    let mut prev = 0;
    for (addr, name) in symbols {
        put_varint(buf, delta64(*addr, prev));
        prev = *addr;
        put_varint(buf, name.len() as u64);
        buf.extend_from_slice(name.as_bytes());
    }
}

fn decode_symbols(raw: &[u8], count: u64) -> Result<Vec<(u64, String)>, String> {
    let mut c = Cursor::new(raw);
    // Each symbol takes at least two bytes, so this bounds the reservation by the data.
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(raw.len() / 2));
    let mut prev = 0;
    for i in 0..count {
        let symbol = |c: &mut Cursor| -> Result<(u64, String), String> {
            let addr = undelta64(prev, c.varint()?);
            let len = c.varint()?;
            let name = std::str::from_utf8(c.take(len)?).map_err(|_| "its name is not UTF-8")?;
            Ok((addr, name.to_string()))
        };
        let (addr, name) = symbol(&mut c).map_err(|e| format!("symbol #{i}: {e}"))?;
        prev = addr;
        out.push((addr, name));
    }
    if !c.is_empty() {
        return Err(format!(
            "{} bytes follow the {count} symbols the header announces",
            c.remaining()
        ));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Writer

/// What a finished recording holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Bytes written to the output, headers included.
    pub bytes: u64,
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
        let mut sink = FrameSink {
            out,
            packer: Packer::new()?,
            next_seq: 0,
            bytes: FILE_HEADER_LEN as u64,
        };
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
    pub fn finish(
        mut self,
        symbols: &[(u64, String)],
        end: &serde_json::Value,
    ) -> io::Result<WriteStats> {
        self.usable()?;
        self.close_frame()?;
        let mut raw = Vec::new();
        encode_symbols(symbols, &mut raw);
        self.sink
            .write(FrameKind::Symbols, symbols.len() as u64, &raw)?;
        self.sink
            .write(FrameKind::End, self.records, &serde_json::to_vec(end)?)?;
        self.sink.out.flush()?;
        Ok(self.stats())
    }

    /// Totals so far (bytes counts only closed frames).
    pub fn stats(&self) -> WriteStats {
        WriteStats {
            bytes: self.sink.bytes,
            records: self.records,
        }
    }

    fn close_frame(&mut self) -> io::Result<()> {
        if self.frame_records == 0 {
            return Ok(());
        }
        self.streams.payload(&mut self.payload);
        self.sink
            .write(FrameKind::Records, self.frame_records, &self.payload)?;
        self.streams.clear();
        self.frame_records = 0;
        Ok(())
    }

    fn usable(&self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(
                "an earlier write to this recording failed",
            ));
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

// ---------------------------------------------------------------------------------------------
// Errors

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
    fn new(kind: ReadErrorKind, offset: u64, detail: impl Into<String>) -> Self {
        ReadError {
            kind,
            offset,
            detail: detail.into(),
            source: None,
        }
    }

    fn corrupt(offset: u64, detail: impl Into<String>) -> Self {
        Self::new(ReadErrorKind::Corrupted, offset, detail)
    }

    fn truncated(offset: u64, detail: impl Into<String>) -> Self {
        Self::new(ReadErrorKind::Truncated, offset, detail)
    }

    fn io(offset: u64, e: io::Error) -> Self {
        ReadError {
            source: Some(Arc::new(e)),
            ..Self::new(ReadErrorKind::Io, offset, "read failed")
        }
    }

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

// ---------------------------------------------------------------------------------------------
// Reader

/// SYMBOLS and END: what follows the records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trailer {
    pub symbols: Vec<(u64, String)>,
    pub end: serde_json::Value,
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
        let placeholder = FrameHeader {
            kind: FrameKind::Meta,
            seq: 0,
            count: 0,
            raw_len: 0,
            stored_len: 0,
            payload_crc: 0,
        };
        let mut reader = RecordingReader {
            input,
            offset: 0,
            meta: serde_json::Value::Null,
            decoder: Decoder::default(),
            unpacker,
            stored: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            times_pos: 0,
            times_end: 0,
            frame: FrameAt {
                header: placeholder,
                start: FILE_HEADER_LEN as u64,
            },
            frame_records: 0,
            records: 0,
            next_seq: 0,
            phase: Phase::Records,
        };
        reader.read_file_header()?;
        reader.read_meta()?;
        Ok(reader)
    }

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

    /// After next_record returned None: SYMBOLS and END, and checks nothing follows END. Called
    /// earlier, it decodes (and checks) the remaining records first.
    pub fn finish(mut self) -> Result<Trailer, ReadError> {
        while self.next_record()?.is_some() {}
        let symbols = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Trailer(symbols) => symbols,
            Phase::Failed(e) => return Err(e),
            Phase::Records | Phase::Done => Vec::new(),
        };
        let Some(end) = self.read_frame()? else {
            return Err(ReadError::truncated(
                self.offset,
                format!(
                    "the file ends after its {}, without an END frame; {KILLED}",
                    self.frame.name()
                ),
            ));
        };
        if end.header.kind != FrameKind::End {
            return Err(ReadError::corrupt(
                end.start,
                format!("{} where the END frame belongs", end.name()),
            ));
        }
        if end.header.count != self.records {
            return Err(ReadError::corrupt(
                end.start,
                format!(
                    "{} says the recording holds {} records, {} were read",
                    end.name(),
                    end.header.count,
                    self.records
                ),
            ));
        }
        let end_json = self.parse_json(&end)?;
        let mut probe = [0u8; 1];
        if self.read_up_to(&mut probe)? != 0 {
            return Err(ReadError::corrupt(
                self.offset.saturating_sub(1),
                format!(
                    "unexpected bytes after the {} (a recording ends with its END frame)",
                    end.name()
                ),
            ));
        }
        Ok(Trailer {
            symbols,
            end: end_json,
        })
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
                format!(
                    "the file starts with \"{}\", a recording with \"{}\"",
                    magic.escape_ascii(),
                    MAGIC.escape_ascii()
                ),
            ));
        }
        if got < FILE_HEADER_LEN {
            let what = if got == 0 {
                "the file is empty"
            } else {
                "the file ends inside its 12-byte header"
            };
            return Err(ReadError::truncated(
                got as u64,
                format!("{what}; {KILLED}"),
            ));
        }
        let mut c = Cursor::new(header.split_at(MAGIC.len()).1);
        let version = c
            .u32_le()
            .map_err(|e| ReadError::corrupt(MAGIC.len() as u64, e))?;
        let at = MAGIC.len() as u64;
        match version {
            FORMAT_VERSION => Ok(()),
            v if v > FORMAT_VERSION && v <= MAX_PLAUSIBLE_VERSION => Err(ReadError::new(
                ReadErrorKind::NewerVersion,
                at,
                format!(
                    "written by a newer execprof: format version {v}, this execprof reads \
                     {FORMAT_VERSION}; upgrade execprof"
                ),
            )),
            v => Err(ReadError::corrupt(
                at,
                format!("format version {v} does not exist (this execprof reads {FORMAT_VERSION})"),
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
            return Err(ReadError::corrupt(
                frame.start,
                format!("{} where the META frame belongs", frame.name()),
            ));
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
        let mut c = Cursor {
            buf: &self.raw,
            pos: at,
        };
        let mut times = Cursor {
            buf: self.raw.get(..self.times_end).unwrap_or_default(),
            pos: self.times_pos,
        };
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
                format!(
                    "{} holds {} records, its header says {}",
                    done.name(),
                    self.frame_records,
                    done.header.count
                ),
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
                format!(
                    "the file ends after its {}, without SYMBOLS and END frames; {KILLED}",
                    done.name()
                ),
            ));
        };
        self.frame = frame;
        self.frame_records = 0;
        match frame.header.kind {
            FrameKind::Records => {
                let (start, end) = split_streams(&self.raw).map_err(|e| {
                    ReadError::corrupt(frame.start, format!("{}: time stream: {e}", frame.name()))
                })?;
                (self.times_pos, self.times_end, self.pos) = (start, end, end);
                Ok(())
            }
            FrameKind::Symbols => {
                let symbols = decode_symbols(&self.raw, frame.header.count).map_err(|e| {
                    ReadError::corrupt(frame.start, format!("{}: {e}", frame.name()))
                })?;
                self.raw.clear();
                self.phase = Phase::Trailer(symbols);
                Ok(())
            }
            FrameKind::Meta | FrameKind::End => Err(ReadError::corrupt(
                frame.start,
                format!(
                    "{} where a RECORDS or the SYMBOLS frame belongs",
                    frame.name()
                ),
            )),
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
        let header = FrameHeader::parse(&bytes)
            .map_err(|e| ReadError::corrupt(start, format!("frame #{index}: {e}")))?;
        let frame = FrameAt { header, start };
        if header.seq != index {
            return Err(ReadError::corrupt(
                start,
                format!(
                    "frame #{index} is a {} frame numbered #{} (frames were lost, duplicated or reordered)",
                    header.kind, header.seq
                ),
            ));
        }
        self.read_payload(&frame)?;
        self.unpacker
            .unpack(&self.stored, header.raw_len, &mut self.raw)
            .map_err(|e| ReadError::corrupt(start, format!("{}: {e}", frame.name())))?;
        self.pos = self.raw.len(); // nothing to decode until a RECORDS frame sets up its streams
        self.next_seq = index
            .checked_add(1)
            .ok_or_else(|| ReadError::corrupt(start, "more than 2^32 frames"))?;
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
        serde_json::from_slice(&self.raw).map_err(|e| {
            ReadError::corrupt(frame.start, format!("{}: invalid JSON: {e}", frame.name()))
        })
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

// ---------------------------------------------------------------------------------------------
// Synthetic load and damage checks: public so that benchmarks, and the profiler on its own real
// recordings, can use them.

/// xorshift64: reproducible noise for generators and mutation tests, without a dependency.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-ish in 0..n (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform-ish in lo..=hi.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// A synthetic exec-chain stream, as execprof sees Linus's benchmark: per step, `misses` failed
/// execve (ENOENT, 1-2 µs each, back to back, names cycling through the PATH candidates), then
/// one success (enter, point of no return, new image, exit, main). Fault counters creep up,
/// the CPU sometimes changes at exec, and 1 kHz samples of a dozen recurring kernel stacks arrive
/// a little late, so time steps back. `steps * (misses + 1)` exec attempts.
pub fn synthetic_chain(steps: u32, misses: u32, seed: u64) -> Vec<Record> {
    let mut g = ChainGen::new(seed);
    let dir = format!("/tmp/execprof-chain-{:04x}", g.rng.below(0x1_0000));
    let names: Vec<Name> = (0..=misses)
        .map(|i| Name {
            bytes: format!("{dir}/m{i}/execprof-chain").into_bytes(),
            ..Name::default()
        })
        .collect();
    let (miss_names, hit) = names.split_at(misses as usize);
    let hit = hit.first().cloned().unwrap_or_default();
    for _ in 0..steps {
        for name in miss_names {
            g.failed_attempt(name);
        }
        g.successful_attempt(&hit);
    }
    g.out
}

struct ChainGen {
    rng: XorShift,
    out: Vec<Record>,
    head: Head,
    faults: (u64, u64),
    next_sample: u64,
    late_sample: Option<u64>,
    stacks: Vec<Vec<u64>>,
}

impl ChainGen {
    fn new(seed: u64) -> Self {
        let mut rng = XorShift::new(seed);
        let pid = rng.range(1_000, 4_000_000) as u32;
        let ts_ns = rng.range(1 << 40, 1 << 42);
        let stacks = (0..12)
            .map(|_| {
                let depth = rng.range(8, 40);
                (0..depth)
                    .map(|_| 0xffff_ffff_8100_0000 + rng.below(0x0100_0000))
                    .collect()
            })
            .collect();
        ChainGen {
            rng,
            out: Vec::new(),
            head: Head {
                ts_ns,
                pid,
                tgid: pid,
                cpu: 1,
            },
            faults: (90, 0),
            next_sample: ts_ns + 1_000_000,
            late_sample: None,
            stacks,
        }
    }

    fn emit(&mut self, body: Body) {
        self.out.push(Record {
            head: self.head,
            body,
        });
        if let Some(ts_ns) = self.late_sample.take() {
            // Skewed: a few stacks dominate, as in a real profile.
            let i = self
                .rng
                .index(self.stacks.len())
                .min(self.rng.index(self.stacks.len()));
            let frames = self.stacks.get(i).cloned().unwrap_or_default();
            self.out.push(Record {
                head: Head { ts_ns, ..self.head },
                body: Body::Sample { frames },
            });
        }
    }

    fn advance(&mut self, lo: u64, hi: u64) {
        self.head.ts_ns += self.rng.range(lo, hi);
        if self.head.ts_ns >= self.next_sample {
            self.late_sample = Some(self.next_sample);
            self.next_sample += self.rng.range(995_000, 1_005_000);
        }
    }

    fn creep_faults(&mut self) {
        if self.rng.below(8) == 0 {
            self.faults.0 += self.rng.range(1, 3);
        }
    }

    fn enter(&mut self) {
        self.creep_faults();
        self.emit(Body::SyscallEnter {
            syscall: TracedSyscall::Execve,
            faults: Some(self.faults),
        });
    }

    fn failed_attempt(&mut self, name: &Name) {
        self.enter();
        self.advance(1_000, 2_000);
        self.creep_faults();
        let faults = Some(self.faults);
        self.emit(Body::SyscallExit {
            syscall: TracedSyscall::Execve,
            ret: -2,
            faults,
            name: Some(name.clone()),
        });
        self.advance(150, 600);
    }

    fn successful_attempt(&mut self, name: &Name) {
        self.enter();
        self.advance(15_000, 40_000);
        self.emit(Body::NoReturn {
            name: Some(name.clone()),
        });
        self.advance(3_000, 10_000);
        if self.rng.below(3) == 0 {
            self.head.cpu ^= 1;
        }
        self.faults.0 += self.rng.range(30, 200);
        if self.rng.below(50) == 0 {
            self.faults.1 += 1;
        }
        self.emit(Body::Loaded {
            old_pid: self.head.pid,
            name: Some(name.clone()),
        });
        self.advance(1_000, 3_000);
        let faults = Some(self.faults);
        self.emit(Body::SyscallExit {
            syscall: TracedSyscall::Execve,
            ret: 0,
            faults,
            name: None,
        });
        self.advance(80_000, 300_000);
        self.emit(Body::Main);
        self.advance(2_000, 10_000);
    }
}

/// Checks the reader against damage to `bytes` (a recording, complete or cut short) for `dur`,
/// reproducibly from `seed`. Two families of cases:
///
/// * raw damage: byte flips, insertions, deletions, truncations, splices of chunks, frames
///   duplicated, deleted, swapped or overwritten. Reading must not panic and must fail with a
///   message that names a byte offset; only a mutation that happened to give back the same bytes
///   may read, and then exactly as the original.
/// * forged damage (one case in four): the frames are rebuilt with valid checksums around a
///   damaged payload or header field, to reach the record decoder behind the checksums. Reading
///   must not panic, and an error must name a byte offset; a forged file may read.
///
/// Returns the number of cases run, or a description of the first failing case.
pub fn check_mutations(bytes: &[u8], dur: Duration, seed: u64) -> Result<u64, String> {
    let original = read_outcome(bytes);
    let codec = Packer::new().and_then(|p| Ok((p, Unpacker::new()?)));
    let (mut packer, mut unpacker) = codec.map_err(|e| format!("cannot set up zstd: {e}"))?;
    let mut rng = XorShift::new(seed);
    let deadline = Instant::now().checked_add(dur);
    let mut cases = 0u64;
    while deadline.is_none_or(|d| Instant::now() < d) {
        let forgery = match cases % 4 {
            3 => forge(bytes, &mut unpacker, &mut packer, &mut rng)
                .map_err(|e| format!("cannot forge: {e}"))?,
            _ => None,
        };
        let forged = forgery.is_some();
        let (mutated, what) = forgery.unwrap_or_else(|| mutate(bytes, &mut rng));
        let fail =
            |problem: String| format!("mutation case {cases} (seed {seed}; {what}): {problem}");
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| read_outcome(&mutated)))
            .map_err(|_| fail("the reader panicked".into()))?;
        if let Err(msg) = &outcome
            && !msg.contains("at byte ")
        {
            return Err(fail(format!("the error names no byte offset: {msg}")));
        }
        if mutated == bytes {
            if outcome != original || (outcome.is_ok() && !same_reading(bytes, &mutated)) {
                return Err(fail("the unchanged recording read differently".into()));
            }
        } else if !forged && outcome.is_ok() {
            return Err(fail("the damaged recording was read without error".into()));
        }
        cases += 1;
    }
    Ok(cases)
}

/// Reads a whole recording without keeping its records: their count, or the error message.
fn read_outcome(bytes: &[u8]) -> Result<u64, String> {
    let read = || -> Result<u64, ReadError> {
        let mut reader = RecordingReader::new(bytes)?;
        while reader.next_record()?.is_some() {}
        let n = reader.records_read();
        reader.finish()?;
        Ok(n)
    };
    read().map_err(|e| e.to_string())
}

/// Whether two recordings read the same, record by record (in step, so nothing is kept).
fn same_reading(a: &[u8], b: &[u8]) -> bool {
    let compare = || -> Result<bool, ReadError> {
        let (mut ra, mut rb) = (RecordingReader::new(a)?, RecordingReader::new(b)?);
        if ra.meta() != rb.meta() {
            return Ok(false);
        }
        loop {
            let (x, y) = (ra.next_record()?, rb.next_record()?);
            if x != y {
                return Ok(false);
            }
            if x.is_none() {
                return Ok(ra.finish()? == rb.finish()?);
            }
        }
    };
    compare().unwrap_or(false)
}

/// Where the frames of a (possibly damaged) recording lie, as their headers say.
fn frame_spans(b: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while let Some(h) = b.get(at..at + FRAME_HEADER_LEN) {
        let stored = h
            .get(17..21)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .unwrap_or(0);
        let end = at + FRAME_HEADER_LEN + stored as usize;
        if end > b.len() {
            break;
        }
        spans.push(at..end);
        at = end;
    }
    spans
}

fn mutate(bytes: &[u8], rng: &mut XorShift) -> (Vec<u8>, String) {
    let mut b = bytes.to_vec();
    let what: Vec<String> = (0..rng.range(1, 2))
        .map(|_| mutate_once(&mut b, rng))
        .collect();
    (b, what.join(", then "))
}

fn mutate_once(b: &mut Vec<u8>, rng: &mut XorShift) -> String {
    let spans = frame_spans(b);
    if spans.len() >= 2 && rng.below(3) == 0 {
        return mutate_frames(b, &spans, rng);
    }
    damage_bytes(b, rng)
}

/// Byte-level damage, also used on decompressed payloads when forging.
fn damage_bytes(b: &mut Vec<u8>, rng: &mut XorShift) -> String {
    let len = b.len();
    match rng.below(5) {
        0 if len > 0 => {
            let flips: Vec<(usize, u8)> = (0..rng.range(1, 8))
                .map(|_| (rng.index(len), rng.range(1, 255) as u8))
                .collect();
            for &(at, x) in &flips {
                if let Some(v) = b.get_mut(at) {
                    *v ^= x;
                }
            }
            format!("xor {flips:?}")
        }
        1 if len > 0 => {
            let at = rng.index(len);
            let n = rng.range(1, 64.min(len - at) as u64) as usize;
            b.drain(at..at + n);
            format!("{n} bytes deleted at {at}")
        }
        2 if len > 0 => {
            let at = rng.index(len);
            b.truncate(at);
            let n = rng.below(2) * rng.range(1, 32);
            let garbage = rng.bytes(n as usize);
            b.extend_from_slice(&garbage);
            format!("cut at {at}, {} random bytes appended", garbage.len())
        }
        3 if len > 0 => {
            let from = rng.index(len);
            let n = rng.range(1, 256.min(len - from) as u64) as usize;
            let chunk = b.get(from..from + n).unwrap_or_default().to_vec();
            let to = rng.index(len + 1);
            b.splice(to..to, chunk);
            format!("{n} bytes from {from} copied to {to}")
        }
        _ => {
            let at = rng.index(len + 1);
            let n = rng.range(1, 16) as usize;
            b.splice(at..at, rng.bytes(n));
            format!("{n} random bytes inserted at {at}")
        }
    }
}

fn mutate_frames(b: &mut Vec<u8>, spans: &[Range<usize>], rng: &mut XorShift) -> String {
    let (first, last) = match (spans.first(), spans.last()) {
        (Some(f), Some(l)) => (f.start, l.end),
        _ => return "no frames".into(),
    };
    let mut order = spans.to_vec();
    let (i, j) = (rng.index(spans.len()), rng.index(spans.len()));
    let what = match rng.below(4) {
        0 => {
            order.insert(j, order.get(i).cloned().unwrap_or_default());
            format!("frame #{i} copied before frame #{j}")
        }
        1 => {
            order.remove(i);
            format!("frame #{i} deleted")
        }
        2 => {
            order.swap(i, j);
            format!("frames #{i} and #{j} swapped")
        }
        _ => {
            if let (Some(src), Some(dst)) = (spans.get(j), order.get_mut(i)) {
                *dst = src.clone();
            }
            format!("frame #{i} overwritten by frame #{j}")
        }
    };
    let mut out = b.get(..first).unwrap_or_default().to_vec();
    for r in order {
        out.extend_from_slice(b.get(r).unwrap_or_default());
    }
    out.extend_from_slice(b.get(last..).unwrap_or_default());
    *b = out;
    what
}

/// Appends a frame around `raw` with valid lengths and checksums (`header.raw_len` is kept, so
/// that a forgery can make it lie).
fn build_frame(
    header: FrameHeader,
    raw: &[u8],
    packer: &mut Packer,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let stored = packer.pack(raw)?;
    let header = FrameHeader {
        stored_len: u32::try_from(stored.len()).map_err(io::Error::other)?,
        payload_crc: crc32fast::hash(stored),
        ..header
    };
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(stored);
    Ok(())
}

/// `bytes` with one of its frames rebuilt, checksums valid, around a damaged payload or header
/// field; None when the frame picked does not check out in the first place. Only that frame is
/// decompressed, so this stays cheap on large recordings.
fn forge(
    bytes: &[u8],
    unpacker: &mut Unpacker,
    packer: &mut Packer,
    rng: &mut XorShift,
) -> io::Result<Option<(Vec<u8>, String)>> {
    let spans = frame_spans(bytes);
    let i = rng.index(spans.len());
    let Some(span) = spans.get(i) else {
        return Ok(None);
    };
    let frame = bytes.get(span.clone()).unwrap_or_default();
    let (head, payload) = frame.split_at(FRAME_HEADER_LEN.min(frame.len()));
    let Some(mut header) = <[u8; FRAME_HEADER_LEN]>::try_from(head)
        .ok()
        .and_then(|h| FrameHeader::parse(&h).ok())
    else {
        return Ok(None);
    };
    let mut raw = Vec::new();
    if unpacker.unpack(payload, header.raw_len, &mut raw).is_err() {
        return Ok(None);
    }
    let what = match rng.below(6) {
        0..=2 => {
            let damage = damage_bytes(&mut raw, rng);
            header.raw_len = raw.len() as u32;
            format!("{damage} in the payload of frame #{i}")
        }
        3 => {
            header.count = header.count.wrapping_add(rng.range(1, 3)).wrapping_sub(2);
            format!("count of frame #{i} set to {}", header.count)
        }
        4 => {
            header.kind = FrameKind::ALL
                .get(rng.index(4))
                .copied()
                .unwrap_or(FrameKind::End);
            format!("frame #{i} relabelled {}", header.kind)
        }
        _ => {
            header.raw_len = rng.below(u64::from(header.raw_len) * 2 + 2) as u32;
            format!("raw length of frame #{i} set to {}", header.raw_len)
        }
    };
    let mut out = bytes.get(..span.start).unwrap_or_default().to_vec();
    build_frame(header, &raw, packer, &mut out)?;
    out.extend_from_slice(bytes.get(span.end..).unwrap_or_default());
    Ok(Some((out, format!("forged: {what}"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn name(bytes: &[u8], truncated: bool, unreadable: bool) -> Name {
        Name {
            bytes: bytes.to_vec(),
            truncated,
            unreadable,
        }
    }

    fn rec(ts_ns: u64, pid: u32, tgid: u32, cpu: u32, body: Body) -> Record {
        Record {
            head: Head {
                ts_ns,
                pid,
                tgid,
                cpu,
            },
            body,
        }
    }

    /// Writes `records`, closing a frame every `flush_every` records.
    fn write(records: &[Record], flush_every: usize, symbols: &[(u64, String)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w =
            RecordingWriter::new(&mut out, &json!({"argv": ["chain", "100000"], "v": 1})).unwrap();
        for (i, r) in records.iter().enumerate() {
            w.push(r).unwrap();
            if (i + 1) % flush_every == 0 {
                w.flush_frame().unwrap();
            }
        }
        let stats = w
            .finish(symbols, &json!({"lost": 0, "records": records.len()}))
            .unwrap();
        assert_eq!(stats.records, records.len() as u64);
        assert_eq!(stats.bytes, out.len() as u64);
        out
    }

    fn read_all(bytes: &[u8]) -> Result<(serde_json::Value, Vec<Record>, Trailer), ReadError> {
        let mut reader = RecordingReader::new(bytes)?;
        let mut records = Vec::new();
        while let Some(r) = reader.next_record()? {
            records.push(r);
        }
        assert_eq!(reader.next_record()?, None, "None is sticky");
        let meta = reader.meta().clone();
        Ok((meta, records, reader.finish()?))
    }

    fn edge_records() -> Vec<Record> {
        use Body::*;
        use TracedSyscall::*;
        let long = vec![b'x'; 255];
        let deep: Vec<u64> = (0..64)
            .map(|i| 0xffff_ffff_8100_0000u64.wrapping_add(i * 0x1234_5678_9abc))
            .collect();
        vec![
            rec(0, 0, 0, 0, Main),
            rec(
                u64::MAX,
                u32::MAX,
                u32::MAX,
                u32::MAX,
                SyscallEnter {
                    syscall: Execve,
                    faults: None,
                },
            ),
            rec(
                3,
                7,
                7,
                0,
                SyscallEnter {
                    syscall: Execveat,
                    faults: Some((u64::MAX, u64::MAX)),
                },
            ),
            rec(
                2,
                7,
                7,
                0,
                SyscallEnter {
                    syscall: Clone,
                    faults: Some((0, 0)),
                },
            ), // steps back
            rec(
                5,
                8,
                7,
                1,
                SyscallEnter {
                    syscall: Clone3,
                    faults: Some((1 << 63, 5)),
                },
            ),
            rec(
                5,
                8,
                7,
                1,
                SyscallEnter {
                    syscall: Fork,
                    faults: Some(((1 << 63) - 1, 4)),
                },
            ),
            rec(
                6,
                9,
                1,
                1,
                SyscallEnter {
                    syscall: Vfork,
                    faults: Some((3, 4)),
                },
            ),
            rec(
                7,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Execve,
                    ret: -2,
                    faults: Some((2, 4)),
                    name: Some(name(b"/bin/a", false, false)),
                },
            ),
            rec(
                8,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Execveat,
                    ret: i64::MIN,
                    faults: None,
                    name: Some(name(b"\xff\xfe\x00bad utf8", true, false)),
                },
            ),
            rec(
                9,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Fork,
                    ret: i64::MAX,
                    faults: None,
                    name: None,
                },
            ),
            rec(
                10,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Vfork,
                    ret: 0,
                    faults: Some((u64::MAX, 0)),
                    name: Some(name(b"", false, true)),
                },
            ),
            rec(
                11,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Execve,
                    ret: -13,
                    faults: Some((0, u64::MAX)),
                    name: Some(name(b"/bin/a", true, true)),
                },
            ),
            rec(
                12,
                9,
                1,
                1,
                SyscallExit {
                    syscall: Execve,
                    ret: -2,
                    faults: Some((1, 1)),
                    name: Some(name(b"/bin/a", false, false)),
                },
            ),
            rec(13, 9, 1, 1, NoReturn { name: None }),
            rec(
                14,
                9,
                1,
                1,
                NoReturn {
                    name: Some(name(&long, true, false)),
                },
            ),
            rec(
                15,
                1,
                1,
                1,
                Loaded {
                    old_pid: 9,
                    name: Some(name(&long, true, false)),
                },
            ),
            rec(
                16,
                1,
                1,
                1,
                Loaded {
                    old_pid: 1,
                    name: None,
                },
            ),
            rec(
                17,
                1,
                1,
                2,
                Loaded {
                    old_pid: u32::MAX,
                    name: Some(name(b"\x80", false, false)),
                },
            ),
            rec(
                18,
                1,
                1,
                2,
                TaskNew {
                    child_pid: 2,
                    child_tgid: 2,
                    thread: false,
                },
            ),
            rec(
                19,
                1,
                1,
                2,
                TaskNew {
                    child_pid: 3,
                    child_tgid: 1,
                    thread: true,
                },
            ),
            rec(
                20,
                1,
                1,
                2,
                TaskNew {
                    child_pid: 0,
                    child_tgid: u32::MAX,
                    thread: true,
                },
            ),
            rec(
                21,
                1,
                1,
                2,
                TaskNew {
                    child_pid: u32::MAX,
                    child_tgid: 0,
                    thread: false,
                },
            ),
            rec(22, 3, 1, 2, TaskExit { group_dead: false }),
            rec(23, 1, 1, 2, TaskExit { group_dead: true }),
            rec(24, 1, 1, 2, Sample { frames: vec![] }),
            rec(
                25,
                1,
                1,
                2,
                Sample {
                    frames: deep.clone(),
                },
            ),
            rec(
                24,
                1,
                1,
                2,
                Sample {
                    frames: vec![u64::MAX, 0, u64::MAX],
                },
            ),
            rec(26, 1, 1, 2, Sample { frames: deep }),
            rec(27, 1, 1, 2, Sample { frames: vec![] }),
            rec(
                28,
                1,
                1,
                2,
                ProbedCall {
                    enter_ns: 20,
                    slot: 31,
                },
            ),
            rec(
                29,
                1,
                1,
                2,
                ProbedCall {
                    enter_ns: u64::MAX,
                    slot: u32::MAX,
                },
            ),
            rec(30, 1, 1, 2, OffCpu { start_ns: 0 }),
            rec(u64::MAX, 1, 1, 2, OffCpu { start_ns: 31 }),
            rec(0, 1, 1, 2, OffCpu { start_ns: u64::MAX }),
            rec(1, 2, 2, 0, Main),
            rec(1, 2, 2, 0, Main),
        ]
    }

    fn symbols() -> Vec<(u64, String)> {
        vec![
            (0xffff_ffff_8100_0000, "do_execveat_common".into()),
            (0, String::new()),
            (u64::MAX, "ünïcode".into()),
        ]
    }

    /// ~300 records with samples, in several frames: the subject of the damage tests.
    fn small_recording() -> Vec<u8> {
        let records = synthetic_chain(17, 6, 3);
        assert!((280..=340).contains(&records.len()), "{}", records.len());
        assert!(
            records
                .iter()
                .any(|r| matches!(r.body, Body::Sample { .. }))
        );
        let bytes = write(&records, 50, &symbols());
        assert!(frame_spans(&bytes).len() >= 8, "several frames");
        bytes
    }

    #[test]
    fn round_trip_every_variant_with_edge_values() {
        let records = edge_records();
        for flush_every in [1, 3, 7, usize::MAX] {
            let bytes = write(&records, flush_every, &symbols());
            let (meta, back, trailer) = read_all(&bytes).unwrap();
            assert_eq!(meta, json!({"argv": ["chain", "100000"], "v": 1}));
            assert_eq!(back, records);
            assert_eq!(
                trailer,
                Trailer {
                    symbols: symbols(),
                    end: json!({"lost": 0, "records": records.len()})
                }
            );
        }
        let spans = frame_spans(&write(&records, 7, &[])).len();
        assert_eq!(
            spans,
            1 + records.len().div_ceil(7) + 2,
            "META, RECORDS frames, SYMBOLS, END"
        );
    }

    #[test]
    fn round_trip_across_interning_table_resets() {
        let n = 2 * MAX_INTERNED + 100;
        let records: Vec<Record> = (0..n)
            .flat_map(|i| {
                let unique = name(format!("/tmp/cc{i}.o").as_bytes(), false, false);
                let common = name(b"/usr/bin/cc", false, false);
                let body = Body::SyscallExit {
                    syscall: TracedSyscall::Execve,
                    ret: -2,
                    faults: None,
                    name: Some(unique),
                };
                [
                    rec(i as u64, 5, 5, 0, body),
                    rec(i as u64, 5, 5, 0, Body::NoReturn { name: Some(common) }),
                    rec(
                        i as u64,
                        5,
                        5,
                        0,
                        Body::Sample {
                            frames: vec![i as u64, 1, 2],
                        },
                    ),
                    rec(i as u64, 5, 5, 0, Body::Sample { frames: vec![7, 8] }),
                ]
            })
            .collect();
        let (_, back, _) = read_all(&write(&records, 10_000, &[])).unwrap();
        assert!(back == records, "records differ after table resets");
    }

    #[test]
    fn kind_names_match_body_kind_name() {
        let mut seen = 0;
        for r in edge_records() {
            let mut streams = Streams::default();
            Encoder::default().encode(&r, &mut streams);
            let t = streams.records[0];
            assert_eq!(tag::name(t), r.body.kind_name());
            seen |= 1 << (t & tag::KIND_MASK);
        }
        assert_eq!(seen, 0x3ff, "every kind covered");
    }

    /// Bytes per exec attempt of a recording of the chain, frames closed once per simulated
    /// second as the live event loop does.
    fn chain_bytes_per_attempt(steps: u32, misses: u32) -> (f64, Vec<u8>, Vec<Record>) {
        let records = synthetic_chain(steps, misses, 42);
        let mut out = Vec::new();
        let mut w = RecordingWriter::new(&mut out, &json!({"workload": "chain"})).unwrap();
        let mut second = records[0].head.ts_ns / 1_000_000_000;
        for r in &records {
            w.push(r).unwrap();
            if r.head.ts_ns / 1_000_000_000 > second {
                second = r.head.ts_ns / 1_000_000_000;
                w.flush_frame().unwrap();
            }
        }
        w.finish(&symbols(), &json!({})).unwrap();
        let attempts = f64::from(steps * (misses + 1));
        (out.len() as f64 / attempts, out, records)
    }

    #[test]
    fn chain_costs_at_most_16_bytes_per_attempt() {
        let (per_attempt, bytes, records) = chain_bytes_per_attempt(20_000, 6);
        println!(
            "chain 20000 steps x 6 misses: {} records, {} bytes, {per_attempt:.2} bytes per attempt",
            records.len(),
            bytes.len()
        );
        assert!(per_attempt <= 16.0, "{per_attempt:.2} bytes per attempt");
        let (_, back, _) = read_all(&bytes).unwrap();
        assert!(back == records);
    }

    #[test]
    fn every_truncation_is_an_error_with_an_offset() {
        let bytes = small_recording();
        read_all(&bytes).unwrap();
        for cut in 0..bytes.len() {
            let msg = match read_all(&bytes[..cut]) {
                Ok(_) => panic!("cut at {cut} of {} read fine", bytes.len()),
                Err(e) => e.to_string(),
            };
            assert!(msg.contains("truncated at byte "), "cut at {cut}: {msg}");
            assert!(msg.contains("killed"), "cut at {cut}: {msg}");
        }
    }

    #[test]
    fn every_byte_flip_is_an_error_with_an_offset() {
        let bytes = small_recording();
        for x in [0xff, 0x01] {
            for at in 0..bytes.len() {
                let mut damaged = bytes.clone();
                damaged[at] ^= x;
                let msg = match read_all(&damaged) {
                    Ok(_) => panic!("xor {x:#x} at {at} read fine"),
                    Err(e) => e.to_string(),
                };
                assert!(msg.contains("at byte "), "xor {x:#x} at {at}: {msg}");
            }
        }
    }

    #[test]
    fn random_mutations_never_panic_and_never_pass() {
        let bytes = small_recording();
        let cases = check_mutations(&bytes, Duration::from_secs(2), 0x5eed).unwrap();
        println!("{cases} mutation cases");
        assert!(cases >= 100, "only {cases} cases in 2 s");
    }

    #[test]
    fn check_mutations_reports_damage_that_reads_fine() {
        // The original carries one byte of trailing garbage, which the reader rejects; removing
        // it is a mutation that reads fine, and the check must call that out.
        let mut bytes = write(&[], 1, &[]);
        bytes.push(0);
        assert!(
            read_outcome(&bytes)
                .unwrap_err()
                .contains("unexpected bytes after the END frame")
        );
        let found = (0..100)
            .find_map(|seed| check_mutations(&bytes, Duration::from_millis(50), seed).err());
        assert!(
            found
                .as_ref()
                .is_some_and(|e| e.contains("read without error")),
            "{found:?}"
        );
    }

    #[test]
    fn future_version_bad_magic_and_empty_file_messages() {
        let mut bytes = small_recording();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let e = read_all(&bytes).unwrap_err();
        assert_eq!(e.kind(), ReadErrorKind::NewerVersion);
        assert_eq!(
            e.to_string(),
            "written by a newer execprof: format version 2, this execprof reads 1; upgrade execprof \
             (format version field at byte 8)"
        );
        bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
        let e = read_all(&bytes).unwrap_err().to_string();
        assert!(
            e.contains("corrupted recording at byte 8: format version 0 does not exist"),
            "{e}"
        );

        let e = read_all(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00").unwrap_err();
        assert_eq!(e.kind(), ReadErrorKind::NotARecording);
        assert_eq!(
            e.to_string(),
            "not an execprof recording (at byte 0): the file starts with \"\\x7fELF\\x02\\x01\\x01\\x00\", \
             a recording with \"EXECPROF\""
        );
        assert!(
            read_all(b"{\"json\"")
                .unwrap_err()
                .to_string()
                .starts_with("not an execprof recording")
        );
        let e = read_all(b"").unwrap_err();
        assert_eq!(e.kind(), ReadErrorKind::Truncated);
        assert!(
            e.to_string()
                .starts_with("truncated at byte 0: the file is empty"),
            "{e}"
        );
    }

    /// A recording made of the given RECORDS payloads (count, raw), with valid checksums.
    fn forged_file(payloads: &[(u64, &[u8])]) -> Vec<u8> {
        let mut frames = vec![(FrameKind::Meta, 0, b"{}".to_vec())];
        for (count, raw) in payloads {
            frames.push((FrameKind::Records, *count, raw.to_vec()));
        }
        let total = payloads.iter().map(|p| p.0).sum();
        frames.push((FrameKind::Symbols, 0, vec![]));
        frames.push((FrameKind::End, total, b"{}".to_vec()));
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let mut packer = Packer::new().unwrap();
        for (seq, (kind, count, raw)) in frames.into_iter().enumerate() {
            let h = FrameHeader {
                raw_len: raw.len() as u32,
                ..header(kind, seq as u32, count)
            };
            build_frame(h, &raw, &mut packer, &mut out).unwrap();
        }
        out
    }

    fn header(kind: FrameKind, seq: u32, count: u64) -> FrameHeader {
        FrameHeader {
            kind,
            seq,
            count,
            raw_len: 0,
            stored_len: 0,
            payload_crc: 0,
        }
    }

    /// A RECORDS payload from its two streams.
    fn payload(times: &[u8], records: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Streams {
            times: times.to_vec(),
            records: records.to_vec(),
        }
        .payload(&mut out);
        out
    }

    #[test]
    fn bad_records_are_reported_with_frame_record_index_and_kind() {
        let mut good = Streams::default();
        Encoder::default().encode(&rec(100, 5, 5, 0, Body::Main), &mut good);
        let (gt, gr) = (&good.times[..], &good.records[..]);
        let bad_name = [tag::EXIT | tag::B2 | tag::HEAD_SAME, 3, 10];
        let file = forged_file(&[
            (1, &payload(gt, gr)),
            (
                3,
                &payload(&[gt, gt, &[2]].concat(), &[gr, gr, &bad_name].concat()),
            ),
        ]);
        let e = read_all(&file).unwrap_err();
        let at = frame_spans(&file)[2].start;
        assert_eq!(e.kind(), ReadErrorKind::Corrupted);
        assert_eq!(
            e.to_string(),
            format!(
                "corrupted recording at byte {at}: RECORDS frame #2 (starting at byte {at}), record #2 \
                 (syscall exit) at byte {} of the frame's record stream: name id 9 was never defined \
                 (0 names defined since the last table reset)",
                2 * gr.len()
            )
        );
        let same = tag::HEAD_SAME;
        let cases: [(&[u8], &[u8], &str); 11] = [
            (
                &[0],
                &[0x0c],
                "record #0 (unknown tag 0x0c) at byte 0 of the frame's record stream: unknown tag 0x0c",
            ),
            (
                &[0],
                &[tag::ENTER | tag::B1 | same, 9],
                "record #0 (syscall enter) at byte 0 of the frame's record stream: bad syscall code 9",
            ),
            (
                &[0x80],
                &[tag::ENTER | same],
                "(syscall enter) at byte 0 of the frame's record stream: time delta: the data ends in the middle of an item",
            ),
            (
                &[],
                &[tag::ENTER | same],
                "(syscall enter) at byte 0 of the frame's record stream: time delta: the data ends",
            ),
            (
                &[0],
                &[tag::ENTER, 0x80],
                "(syscall enter) at byte 0 of the frame's record stream: bad head byte 0x80",
            ),
            (
                &[0],
                &[tag::SAMPLE, 0, 100],
                "(sample) at byte 0 of the frame's record stream: stack id 99 was never defined",
            ),
            (
                &[0],
                &[tag::MAIN | tag::B0],
                "(main) at byte 0 of the frame's record stream: unknown flag bits 0x20",
            ),
            (
                &[0],
                &[tag::SAMPLE | same, 0, 100],
                "(sample) at byte 0 of the frame's record stream: a stack of 100 frames runs past",
            ),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
                &[tag::MAIN | same],
                "(main) at byte 0 of the frame's record stream: time delta: bad varint",
            ),
            (
                &[0],
                &[tag::TASK_NEW | tag::B1 | tag::B2 | same, 0],
                "(task new) at byte 0 of the frame's record stream: contradictory",
            ),
            (
                &[0, 0],
                &[tag::MAIN | same],
                "RECORDS frame #1: 1 bytes of time deltas are left over after its last record",
            ),
        ];
        for (times, records, want) in cases {
            let e = read_all(&forged_file(&[(1, &payload(times, records))]))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("RECORDS frame #1") && e.contains(want),
                "{e}\nwanted: {want}"
            );
        }
        let e = read_all(&forged_file(&[(2, &payload(gt, gr))]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("RECORDS frame #1 holds 1 records, its header says 2"),
            "{e}"
        );
        let e = read_all(&forged_file(&[(0, &[5, 1])]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("RECORDS frame #1: time stream: a length of 5 bytes runs past the end"),
            "{e}"
        );
    }

    #[test]
    fn a_killed_run_leaves_a_readable_prefix() {
        let records = synthetic_chain(10, 6, 9);
        let mut out = Vec::new();
        let mut w = RecordingWriter::new(&mut out, &json!(null)).unwrap();
        for r in &records {
            w.push(r).unwrap();
        }
        w.flush_frame().unwrap();
        w.push(&records[0]).unwrap(); // pending in memory when the run is killed
        drop(w);
        let mut reader = RecordingReader::new(&out[..]).unwrap();
        let mut back = Vec::new();
        let e = loop {
            match reader.next_record() {
                Ok(Some(r)) => back.push(r),
                Ok(None) => panic!("no error"),
                Err(e) => break e,
            }
        };
        assert_eq!(back, records);
        assert_eq!(e.kind(), ReadErrorKind::Truncated);
        assert_eq!(
            e.to_string(),
            format!(
                "truncated at byte {}: the file ends after its RECORDS frame #1, without SYMBOLS and END \
                 frames; {KILLED}",
                out.len()
            )
        );
        assert_eq!(
            reader.next_record().unwrap_err().to_string(),
            e.to_string(),
            "errors stick"
        );
    }

    #[test]
    fn finish_checks_the_trailer_even_when_records_were_not_drained() {
        let bytes = write(&edge_records(), 4, &symbols());
        let reader = RecordingReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.finish().unwrap().symbols, symbols());
        let mut extra = bytes.clone();
        extra.push(0);
        let e = read_all(&extra).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "corrupted recording at byte {}: unexpected bytes after the END frame #{} (a recording ends with its END frame)",
                bytes.len(),
                frame_spans(&bytes).len() - 1
            )
        );
    }

    #[test]
    fn writer_refuses_to_continue_after_an_io_error() {
        struct Fails(usize);
        impl Write for Fails {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(io::Error::other("disk full"));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = RecordingWriter::new(Fails(70), &json!({})).unwrap();
        w.push(&edge_records()[5]).unwrap();
        assert!(
            w.flush_frame()
                .unwrap_err()
                .to_string()
                .contains("disk full")
        );
        assert!(
            w.push(&edge_records()[5])
                .unwrap_err()
                .to_string()
                .contains("earlier write")
        );
    }
}
