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
//! are deltas against the previous record that had them. A syscall record's code byte (present
//! for anything but a plain execve) holds the syscall in its low nibble and, for an exit, why a
//! failed exec's thread was dying in the high one (1: SIGKILL, 2: another thread's exec won).
//! File names and sample stacks are interned: the first use defines the next id (`0` then the value; a stack's frames as deltas),
//! later uses write `id + 1`. The tables are bounded: when one reaches [`MAX_INTERNED`] entries
//! the writer emits a reset item and both sides clear it. All this state persists across the
//! frames of a file, so frames are decoded in order: the format trades random access, which a
//! report does not need, for size.
//!
//! Measured on a synthetic 100,000-step exec chain (700,000 attempts plus 1 kHz samples): 5.7
//! bytes per exec attempt; encoding ~10 M attempts/s, decoding ~5.6 M attempts/s on one core
//! (`cargo run --release --example throughput`).

mod codec;
mod damage;
mod error;
mod frame;
mod reader;
#[cfg(test)]
mod tests;
mod varint;
mod writer;

pub use damage::{check_mutations, synthetic_chain};
pub use error::{ReadError, ReadErrorKind};
pub use reader::{Cut, Ending, RecordingReader, Trailer};
pub use writer::{RecordingWriter, WriteStats};

/// The version this code writes. Bump it for any change of layout. 2: the probed call sums
/// record (tag 12). 3: a syscall enter's tag bit 7 marks an `AT_EXECVE_CHECK` check. 4: the
/// probed call sums' tag bit 5 says each entry's off-CPU time follows.
pub const FORMAT_VERSION: u32 = 4;
/// The oldest version this code reads: version 1 is version 2 without probed call sums,
/// version 2 is version 3 without checks (the bit is never set in either), version 3 is
/// version 4 without the call sums' off-CPU times.
pub const OLDEST_READ_VERSION: u32 = 1;

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
/// Versions above this are not "newer", they are damage: formats are numbered 1, 2, 3 ..., so
/// a flipped bit in the version's upper bytes (256 and more) cannot pass for a newer execprof.
const MAX_PLAUSIBLE_VERSION: u32 = 64;
const KILLED: &str = "a recording cut short like this was written by a run that was killed, or \
                      whose disk filled up; the records before this point are intact";
