//! Damage: truncations, flips, mutations, forged frames, killed runs, failing writers.

use super::*;
use crate::recording::codec::{Encoder, Streams, tag};
use crate::recording::damage::{build_frame, frame_spans, read_outcome};
use crate::recording::frame::{FrameHeader, FrameKind, Packer};
use std::io::{self, Write};
use std::time::Duration;

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
    let want = (100 / crate::testing::slowdown()).max(3) as u64;
    assert!(cases >= want, "only {cases} cases in 2 s");
}

#[test]
fn check_mutations_reports_damage_that_reads_fine() {
    // The original carries one byte of trailing garbage, which the reader rejects; removing
    // it is a mutation that reads fine, and the check must call that out.
    let mut bytes = write(&[], 1, &[]);
    bytes.push(0);
    assert!(read_outcome(&bytes).unwrap_err().contains("unexpected bytes after the END frame"));
    let found = (0..100).find_map(|seed| check_mutations(&bytes, Duration::from_millis(50), seed).err());
    assert!(found.as_ref().is_some_and(|e| e.contains("read without error")), "{found:?}");
}

#[test]
fn future_version_bad_magic_and_empty_file_messages() {
    let mut bytes = small_recording();
    bytes[8..12].copy_from_slice(&5u32.to_le_bytes());
    let e = read_all(&bytes).unwrap_err();
    assert_eq!(e.kind(), ReadErrorKind::NewerVersion);
    assert_eq!(
        e.to_string(),
        "written by a newer execprof: format version 5, this execprof reads 1 to 4; upgrade execprof \
         (format version field at byte 8)"
    );
    // Version 3's new bits (the new image's comm here) are damage in a version 2 file ...
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let e = read_all(&bytes).unwrap_err().to_string();
    assert!(e.contains("unknown flag bits 0x80"), "{e}");
    // ... and a file without them (versions 1 and 2 wrote none) reads as it was written.
    let mut records = synthetic_chain(17, 6, 3);
    for r in &mut records {
        if let Body::Loaded { comm, .. } = &mut r.body {
            *comm = None;
        }
    }
    let mut old = write(&records, 50, &[]);
    for version in [1u32, 2, 3] {
        old[8..12].copy_from_slice(&version.to_le_bytes());
        assert!(read_all(&old).is_ok(), "version {version}");
    }
    // Version 4's off-CPU times in probed call sums are damage in a version 3 file.
    let sums = crate::record::CallSums {
        entries: vec![crate::record::PathSum { slot: 1, parent: None, calls: 1, inclusive_ns: 9, self_ns: 9, off_cpu_ns: 4 }],
        unsummed: 0,
    };
    let head = crate::record::Head { ts_ns: 10, pid: 1, tgid: 1, cpu: 0 };
    let mut summed = write(&[crate::record::Record { head, body: Body::CallSums(sums) }], 50, &[]);
    assert!(read_all(&summed).is_ok());
    summed[8..12].copy_from_slice(&3u32.to_le_bytes());
    let e = read_all(&summed).unwrap_err().to_string();
    assert!(e.contains("unknown flag bits 0x20"), "{e}");
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    let e = read_all(&bytes).unwrap_err().to_string();
    assert!(e.contains("corrupted recording at byte 8: format version 0 does not exist"), "{e}");
    // A flipped bit in the version's second byte is damage, not a newer execprof.
    bytes[8..12].copy_from_slice(&(2u32 ^ 0x0400).to_le_bytes());
    let e = read_all(&bytes).unwrap_err();
    assert_eq!(e.kind(), ReadErrorKind::Corrupted, "{e}");

    let e = read_all(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00").unwrap_err();
    assert_eq!(e.kind(), ReadErrorKind::NotARecording);
    assert_eq!(
        e.to_string(),
        "not an execprof recording (at byte 0): the file starts with \"\\x7fELF\\x02\\x01\\x01\\x00\", \
         a recording with \"EXECPROF\""
    );
    assert!(read_all(b"{\"json\"").unwrap_err().to_string().starts_with("not an execprof recording"));
    let e = read_all(b"").unwrap_err();
    assert_eq!(e.kind(), ReadErrorKind::Truncated);
    assert!(e.to_string().starts_with("truncated at byte 0: the file is empty: nothing was ever recorded"), "{e}");
    assert!(!e.to_string().contains("intact"), "an empty file has no records to be intact: {e}");
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
        let h = FrameHeader { raw_len: raw.len() as u32, ..header(kind, seq as u32, count) };
        build_frame(h, &raw, &mut packer, &mut out).unwrap();
    }
    out
}

fn header(kind: FrameKind, seq: u32, count: u64) -> FrameHeader {
    FrameHeader { kind, seq, count, raw_len: 0, stored_len: 0, payload_crc: 0 }
}

/// A RECORDS payload from its two streams.
fn payload(times: &[u8], records: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Streams { times: times.to_vec(), records: records.to_vec() }.payload(&mut out);
    out
}

#[test]
fn bad_records_are_reported_with_frame_record_index_and_kind() {
    let mut good = Streams::default();
    Encoder::default().encode(&rec(100, 5, 5, 0, Body::Main), &mut good);
    let (gt, gr) = (&good.times[..], &good.records[..]);
    let bad_name = [tag::SYSCALL_EXIT | tag::B2 | tag::HEAD_SAME, 3, 10];
    let file = forged_file(&[(1, &payload(gt, gr)), (3, &payload(&[gt, gt, &[2]].concat(), &[gr, gr, &bad_name].concat()))]);
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
        (&[0], &[0x0d], "record #0 (unknown tag 0x0d) at byte 0 of the frame's record stream: unknown tag 0x0d"),
        (
            &[0],
            &[tag::SYSCALL_ENTER | tag::B1 | same, 9],
            "record #0 (syscall enter) at byte 0 of the frame's record stream: bad syscall code 9",
        ),
        (
            &[0x80],
            &[tag::SYSCALL_ENTER | same],
            "(syscall enter) at byte 0 of the frame's record stream: time delta: the data ends in the middle of an item",
        ),
        (&[], &[tag::SYSCALL_ENTER | same], "(syscall enter) at byte 0 of the frame's record stream: time delta: the data ends"),
        (&[0], &[tag::SYSCALL_ENTER, 0x80], "(syscall enter) at byte 0 of the frame's record stream: bad head byte 0x80"),
        (&[0], &[tag::SAMPLE, 0, 100], "(sample) at byte 0 of the frame's record stream: stack id 99 was never defined"),
        (&[0], &[tag::MAIN | tag::B0], "(main) at byte 0 of the frame's record stream: unknown flag bits 0x20"),
        (&[0], &[tag::SAMPLE | same, 0, 100], "(sample) at byte 0 of the frame's record stream: a stack of 100 frames runs past"),
        (
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[tag::MAIN | same],
            "(main) at byte 0 of the frame's record stream: time delta: bad varint",
        ),
        (&[0], &[tag::TASK_NEW | tag::B1 | tag::B2 | same, 0], "(task new) at byte 0 of the frame's record stream: contradictory"),
        (&[0, 0], &[tag::MAIN | same], "RECORDS frame #1: 1 bytes of time deltas are left over after its last record"),
    ];
    for (times, records, want) in cases {
        let e = read_all(&forged_file(&[(1, &payload(times, records))])).unwrap_err().to_string();
        assert!(e.contains("RECORDS frame #1") && e.contains(want), "{e}\nwanted: {want}");
    }
    let e = read_all(&forged_file(&[(2, &payload(gt, gr))])).unwrap_err().to_string();
    assert!(e.contains("RECORDS frame #1 holds 1 records, its header says 2"), "{e}");
    let e = read_all(&forged_file(&[(0, &[5, 1])])).unwrap_err().to_string();
    assert!(e.contains("RECORDS frame #1: time stream: a length of 5 bytes runs past the end"), "{e}");
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
    assert_eq!(reader.next_record().unwrap_err().to_string(), e.to_string(), "errors stick");
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
    assert!(w.flush_frame().unwrap_err().to_string().contains("disk full"));
    assert!(w.push(&edge_records()[5]).unwrap_err().to_string().contains("earlier write"));
}
