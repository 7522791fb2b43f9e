//! Tests of the recording codec: the shared fixtures here, the tests by topic in the submodules.

mod damage;
mod round_trip;

use super::damage::frame_spans;
use super::*;
use crate::{
    model::names::{self, Abi, Killed, Name, TracedSyscall},
    record::{Body, Head, Record},
};
use serde_json::json;

fn name(bytes: &[u8], truncated: bool, unreadable: bool) -> Name {
    Name { bytes: bytes.to_vec(), truncated, unreadable }
}

fn rec(ts_ns: u64, pid: u32, tgid: u32, cpu: u32, body: Body) -> Record {
    Record { head: Head { ts_ns, pid, tgid, cpu }, body }
}

/// Writes `records`, closing a frame every `flush_every` records.
fn write(records: &[Record], flush_every: usize, symbols: &[(u64, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = RecordingWriter::new(&mut out, &json!({"argv": ["chain", "100000"], "v": 1})).unwrap();
    for (i, r) in records.iter().enumerate() {
        w.push(r).unwrap();
        if (i + 1) % flush_every == 0 {
            w.flush_frame().unwrap();
        }
    }
    let stats = w.finish(symbols, &json!({"lost": 0, "records": records.len()})).unwrap();
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
    use Killed::*;
    use TracedSyscall::*;
    let long = vec![b'x'; 255];
    let deep: Vec<u64> = (0..64).map(|i| 0xffff_ffff_8100_0000u64.wrapping_add(i * 0x1234_5678_9abc)).collect();
    vec![
        rec(0, 0, 0, 0, Main),
        rec(u64::MAX, u32::MAX, u32::MAX, u32::MAX, SyscallEnter { syscall: Execve, abi: Abi::Native, faults: None, check: false }),
        rec(3, 7, 7, 0, SyscallEnter { syscall: Execveat, abi: Abi::Native, faults: Some((u64::MAX, u64::MAX)), check: true }),
        rec(2, 7, 7, 0, SyscallEnter { syscall: Clone, abi: Abi::Native, faults: Some((0, 0)), check: false }), // steps back
        rec(5, 8, 7, 1, SyscallEnter { syscall: Clone3, abi: Abi::Compat, faults: Some((1 << 63, 5)), check: false }),
        rec(5, 8, 7, 1, SyscallEnter { syscall: Fork, abi: Abi::Native, faults: Some(((1 << 63) - 1, 4)), check: false }),
        rec(6, 9, 1, 1, SyscallEnter { syscall: Vfork, abi: Abi::Compat, faults: Some((3, 4)), check: false }),
        rec(
            7,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execve,
                abi: Abi::Native,
                ret: -2,
                faults: Some((2, 4)),
                name: Some(name(b"/bin/a", false, false)),
                killed: None,
                enter_lost: false,
            },
        ),
        rec(
            8,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execveat,
                abi: Abi::Native,
                ret: i64::MIN,
                faults: None,
                name: Some(name(b"\xff\xfe\x00bad utf8", true, false)),
                killed: None,
                enter_lost: false,
            },
        ),
        rec(
            9,
            9,
            1,
            1,
            SyscallExit { syscall: Fork, abi: Abi::Native, ret: i64::MAX, faults: None, name: None, killed: None, enter_lost: true },
        ),
        rec(
            10,
            9,
            1,
            1,
            SyscallExit {
                syscall: Vfork,
                abi: Abi::Native,
                ret: 0,
                faults: Some((u64::MAX, 0)),
                name: Some(name(b"", false, true)),
                killed: None,
                enter_lost: false,
            },
        ),
        rec(
            11,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execve,
                abi: Abi::Compat,
                ret: -13,
                faults: Some((0, u64::MAX)),
                name: Some(name(b"/bin/a", true, true)),
                killed: None,
                enter_lost: false,
            },
        ),
        rec(
            12,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execve,
                abi: Abi::Native,
                ret: -2,
                faults: Some((1, 1)),
                name: Some(name(b"/bin/a", false, false)),
                killed: None,
                enter_lost: false,
            },
        ),
        rec(
            13,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execve,
                abi: Abi::Compat,
                ret: -7,
                faults: None,
                name: Some(name(b"/bin/a", false, false)),
                killed: Some(BySignal),
                enter_lost: false,
            },
        ),
        rec(
            14,
            9,
            1,
            1,
            SyscallExit {
                syscall: Execveat,
                abi: Abi::Native,
                ret: -513,
                faults: None,
                name: None,
                killed: Some(ByOtherThreadsExec),
                enter_lost: true,
            },
        ),
        rec(
            13,
            9,
            1,
            1,
            Body::Argv(names::Argv { args: vec![b"/bin/a".to_vec(), Vec::new(), vec![0xff, b'\n']], cut: true, unreadable: false }),
        ),
        rec(13, 9, 1, 1, Body::Argv(names::Argv { args: vec![], cut: false, unreadable: true })),
        rec(13, 9, 1, 1, NoReturn { name: None }),
        rec(14, 9, 1, 1, NoReturn { name: Some(name(&long, true, false)) }),
        rec(15, 1, 1, 1, Loaded { old_pid: 9, name: Some(name(&long, true, false)), comm: Some(b"memfd:x".to_vec()) }),
        rec(16, 1, 1, 1, Loaded { old_pid: 1, name: None, comm: None }),
        rec(17, 1, 1, 2, Loaded { old_pid: u32::MAX, name: Some(name(b"\x80", false, false)), comm: Some(Vec::new()) }),
        rec(18, 1, 1, 2, TaskNew { child_pid: 2, child_tgid: 2, thread: false }),
        rec(19, 1, 1, 2, TaskNew { child_pid: 3, child_tgid: 1, thread: true }),
        rec(20, 1, 1, 2, TaskNew { child_pid: 0, child_tgid: u32::MAX, thread: true }),
        rec(21, 1, 1, 2, TaskNew { child_pid: u32::MAX, child_tgid: 0, thread: false }),
        rec(22, 3, 1, 2, TaskExit { group_dead: false }),
        rec(23, 1, 1, 2, TaskExit { group_dead: true }),
        rec(24, 1, 1, 2, Sample { frames: vec![] }),
        rec(25, 1, 1, 2, Sample { frames: deep.clone() }),
        rec(24, 1, 1, 2, Sample { frames: vec![u64::MAX, 0, u64::MAX] }),
        rec(26, 1, 1, 2, Sample { frames: deep }),
        rec(27, 1, 1, 2, Sample { frames: vec![] }),
        rec(28, 1, 1, 2, ProbedCall { enter_ns: 20, slot: 31 }),
        rec(29, 1, 1, 2, ProbedCall { enter_ns: u64::MAX, slot: u32::MAX }),
        rec(29, 1, 1, 2, CallSums(crate::record::CallSums::default())),
        rec(
            29,
            1,
            1,
            2,
            CallSums(crate::record::CallSums {
                entries: vec![crate::record::PathSum { slot: 1, parent: None, calls: 2, inclusive_ns: 9, self_ns: 9, off_cpu_ns: 0 }],
                unsummed: 0,
            }),
        ),
        rec(
            30,
            1,
            1,
            2,
            CallSums(crate::record::CallSums {
                entries: vec![
                    crate::record::PathSum { slot: 3, parent: None, calls: 1, inclusive_ns: u64::MAX, self_ns: 0, off_cpu_ns: 0 },
                    crate::record::PathSum {
                        slot: 31,
                        parent: Some(0),
                        calls: u32::MAX,
                        inclusive_ns: 7,
                        self_ns: 7,
                        off_cpu_ns: u64::MAX,
                    },
                    crate::record::PathSum { slot: u32::MAX, parent: Some(1), calls: 0, inclusive_ns: 0, self_ns: u64::MAX, off_cpu_ns: 3 },
                ],
                unsummed: u32::MAX,
            }),
        ),
        rec(30, 1, 1, 2, OffCpu { start_ns: 0 }),
        rec(u64::MAX, 1, 1, 2, OffCpu { start_ns: 31 }),
        rec(0, 1, 1, 2, OffCpu { start_ns: u64::MAX }),
        rec(1, 2, 2, 0, Main),
        rec(1, 2, 2, 0, Main),
        rec(2, 5, 4, 0, Adopted { ppid: Some(1), comm: b"bash".to_vec() }),
        rec(2, 5, 4, 0, Adopted { ppid: None, comm: Vec::new() }),
        rec(3, 6, 6, 1, Adopted { ppid: Some(u32::MAX), comm: b"runc:[2:INIT]\xff\n\x00".to_vec() }),
    ]
}

fn symbols() -> Vec<(u64, String)> {
    vec![(0xffff_ffff_8100_0000, "do_execveat_common".into()), (0, String::new()), (u64::MAX, "ünïcode".into())]
}

/// ~300 records with samples, in several frames: the subject of the damage tests.
fn small_recording() -> Vec<u8> {
    let records = synthetic_chain(17, 6, 3);
    assert!((280..=340).contains(&records.len()), "{}", records.len());
    assert!(records.iter().any(|r| matches!(r.body, Body::Sample { .. })));
    let bytes = write(&records, 50, &symbols());
    assert!(frame_spans(&bytes).len() >= 8, "several frames");
    bytes
}
