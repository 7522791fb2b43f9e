//! Round trips, kind names, and the size of the chain.

use super::*;
use crate::recording::codec::{Encoder, Streams, tag};
use crate::recording::damage::frame_spans;

#[test]
fn round_trip_every_variant_with_edge_values() {
    let records = edge_records();
    for flush_every in [1, 3, 7, usize::MAX] {
        let bytes = write(&records, flush_every, &symbols());
        let (meta, back, trailer) = read_all(&bytes).unwrap();
        assert_eq!(meta, json!({"argv": ["chain", "100000"], "v": 1}));
        assert_eq!(back, records);
        assert_eq!(trailer, Trailer { symbols: symbols(), end: json!({"lost": 0, "records": records.len()}) });
    }
    let spans = frame_spans(&write(&records, 7, &[])).len();
    assert_eq!(spans, 1 + records.len().div_ceil(7) + 2, "META, RECORDS frames, SYMBOLS, END");
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
                abi: crate::model::names::Abi::Native,
                ret: -2,
                faults: None,
                name: Some(unique),
                killed: None,
                enter_lost: false,
            };
            [
                rec(i as u64, 5, 5, 0, body),
                rec(i as u64, 5, 5, 0, Body::NoReturn { name: Some(common) }),
                rec(i as u64, 5, 5, 0, Body::Sample { frames: vec![i as u64, 1, 2] }),
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
    assert_eq!(seen, (1 << profiler_common::RECORD_KINDS.len()) - 1, "every kind covered");
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
    println!("chain 20000 steps x 6 misses: {} records, {} bytes, {per_attempt:.2} bytes per attempt", records.len(), bytes.len());
    assert!(per_attempt <= 16.0, "{per_attempt:.2} bytes per attempt");
    let (_, back, _) = read_all(&bytes).unwrap();
    assert!(back == records);
}

#[test]
fn every_kind_is_written_under_its_table_tag() {
    let mut seen: Vec<&str> = Vec::new();
    for r in edge_records() {
        let mut streams = Streams::default();
        Encoder::default().encode(&r, &mut streams);
        let k = profiler_common::RecordKind::of_kind(r.body.kind()).unwrap();
        assert_eq!(streams.records[0] & tag::KIND_MASK, k.tag, "{}", k.constant);
        assert_eq!(profiler_common::RecordKind::of_tag(k.tag), Some(k));
        seen.push(k.constant);
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), profiler_common::RECORD_KINDS.len(), "every kind covered: {seen:?}");
}
