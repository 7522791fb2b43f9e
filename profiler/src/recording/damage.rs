//! Synthetic load and damage checks: public so that benchmarks, and the profiler on its own real
//! recordings, can use them.

use super::error::ReadError;
use super::frame::{FrameHeader, FrameKind, Packer, Unpacker};
use super::reader::RecordingReader;
use super::{FILE_HEADER_LEN, FRAME_HEADER_LEN};
use crate::{
    model::names::{Abi, Name, TracedSyscall},
    record::{Body, Head, Record},
};
use std::io;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

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
    let names: Vec<Name> =
        (0..=misses).map(|i| Name { bytes: format!("{dir}/m{i}/execprof-chain").into_bytes(), ..Name::default() }).collect();
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
                (0..depth).map(|_| 0xffff_ffff_8100_0000 + rng.below(0x0100_0000)).collect()
            })
            .collect();
        ChainGen {
            rng,
            out: Vec::new(),
            head: Head { ts_ns, pid, tgid: pid, cpu: 1 },
            faults: (90, 0),
            next_sample: ts_ns + 1_000_000,
            late_sample: None,
            stacks,
        }
    }

    fn emit(&mut self, body: Body) {
        self.out.push(Record { head: self.head, body });
        if let Some(ts_ns) = self.late_sample.take() {
            // Skewed: a few stacks dominate, as in a real profile.
            let i = self.rng.index(self.stacks.len()).min(self.rng.index(self.stacks.len()));
            let frames = self.stacks.get(i).cloned().unwrap_or_default();
            self.out.push(Record { head: Head { ts_ns, ..self.head }, body: Body::Sample { frames } });
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
        self.emit(Body::SyscallEnter { syscall: TracedSyscall::Execve, abi: Abi::Native, faults: Some(self.faults), check: false });
    }

    fn failed_attempt(&mut self, name: &Name) {
        self.enter();
        self.advance(1_000, 2_000);
        self.creep_faults();
        let faults = Some(self.faults);
        self.emit(Body::SyscallExit {
            syscall: TracedSyscall::Execve,
            abi: Abi::Native,
            ret: -2,
            faults,
            name: Some(name.clone()),
            killed: None,
            enter_lost: false,
        });
        self.advance(150, 600);
    }

    fn successful_attempt(&mut self, name: &Name) {
        self.enter();
        self.advance(15_000, 40_000);
        self.emit(Body::NoReturn { name: Some(name.clone()) });
        self.advance(3_000, 10_000);
        if self.rng.below(3) == 0 {
            self.head.cpu ^= 1;
        }
        self.faults.0 += self.rng.range(30, 200);
        if self.rng.below(50) == 0 {
            self.faults.1 += 1;
        }
        self.emit(Body::Loaded { old_pid: self.head.pid, name: Some(name.clone()), comm: Some(b"execprof-chain".to_vec()) });
        self.advance(1_000, 3_000);
        let faults = Some(self.faults);
        self.emit(Body::SyscallExit {
            syscall: TracedSyscall::Execve,
            abi: Abi::Native,
            ret: 0,
            faults,
            name: None,
            killed: None,
            enter_lost: false,
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
            3 => forge(bytes, &mut unpacker, &mut packer, &mut rng).map_err(|e| format!("cannot forge: {e}"))?,
            _ => None,
        };
        let forged = forgery.is_some();
        let (mutated, what) = forgery.unwrap_or_else(|| mutate(bytes, &mut rng));
        let fail = |problem: String| format!("mutation case {cases} (seed {seed}; {what}): {problem}");
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| read_outcome(&mutated))).map_err(|_| fail("the reader panicked".into()))?;
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
pub(super) fn read_outcome(bytes: &[u8]) -> Result<u64, String> {
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
pub(super) fn frame_spans(b: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while let Some(h) = b.get(at..at + FRAME_HEADER_LEN) {
        let stored = h.get(17..21).and_then(|s| s.try_into().ok()).map(u32::from_le_bytes).unwrap_or(0);
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
    let what: Vec<String> = (0..rng.range(1, 2)).map(|_| mutate_once(&mut b, rng)).collect();
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
            let flips: Vec<(usize, u8)> = (0..rng.range(1, 8)).map(|_| (rng.index(len), rng.range(1, 255) as u8)).collect();
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
pub(super) fn build_frame(header: FrameHeader, raw: &[u8], packer: &mut Packer, out: &mut Vec<u8>) -> io::Result<()> {
    let stored = packer.pack(raw)?;
    let header =
        FrameHeader { stored_len: u32::try_from(stored.len()).map_err(io::Error::other)?, payload_crc: crc32fast::hash(stored), ..header };
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(stored);
    Ok(())
}

/// `bytes` with one of its frames rebuilt, checksums valid, around a damaged payload or header
/// field; None when the frame picked does not check out in the first place. Only that frame is
/// decompressed, so this stays cheap on large recordings.
fn forge(bytes: &[u8], unpacker: &mut Unpacker, packer: &mut Packer, rng: &mut XorShift) -> io::Result<Option<(Vec<u8>, String)>> {
    let spans = frame_spans(bytes);
    let i = rng.index(spans.len());
    let Some(span) = spans.get(i) else {
        return Ok(None);
    };
    let frame = bytes.get(span.clone()).unwrap_or_default();
    let (head, payload) = frame.split_at(FRAME_HEADER_LEN.min(frame.len()));
    let Some(mut header) = <[u8; FRAME_HEADER_LEN]>::try_from(head).ok().and_then(|h| FrameHeader::parse(&h).ok()) else {
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
            header.kind = FrameKind::ALL.get(rng.index(4)).copied().unwrap_or(FrameKind::End);
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
