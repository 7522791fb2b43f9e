//! Decoded records: the domain types everything after collection works on. Decoding is the
//! only place that knows the wire layout; a record of unknown kind or size is an error that
//! names it, never a silent skip.
use anyhow::{Result, bail};
use profiler_common::{CallRecord, ExecRecord, ExitRecord, ForkRecord, MarkRecord, RecordHeader, SampleRecord, exec_flags, exec_syscall, exit_flags, fork_flags, kind};
use serde::{Deserialize, Serialize};

/// One `execve`/`execveat` attempt. Times are CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecAttempt {
    /// Thread id at syscall enter.
    pub pid: u32,
    /// Thread id at syscall exit (differs from `pid` when a non-leader thread exec'd).
    pub exit_pid: u32,
    pub tgid: u32,
    pub cpu: u32,
    pub syscall: Syscall,
    pub filename: String,
    pub filename_truncated: bool,
    pub filename_unreadable: bool,
    pub enter_ns: u64,
    /// Point of no return (`sched_prepare_exec`), when reached and observable.
    pub prepare_ns: Option<u64>,
    /// New image in place (`sched_process_exec`), when reached.
    pub loaded_ns: Option<u64>,
    pub exit_ns: u64,
    /// 0 or -errno.
    pub ret: i64,
    /// Page faults taken by the thread during the attempt; None when not countable here.
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Syscall {
    Execve,
    Execveat,
}

impl ExecAttempt {
    pub fn duration_ns(&self) -> u64 {
        self.exit_ns.saturating_sub(self.enter_ns)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fork {
    pub ts_ns: u64,
    pub parent_pid: u32,
    pub parent_tgid: u32,
    pub child_pid: u32,
    pub child_tgid: u32,
    pub thread: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub ts_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    /// The process's last thread: the process is gone.
    pub group_dead: bool,
}

/// A cpu-clock sample inside an exec attempt, tied to it by (tgid, attempt enter time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub ts_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    pub attempt_enter_ns: u64,
    /// Kernel return addresses, innermost first; empty when the stack was unreadable.
    pub frames: Vec<u64>,
}

/// A fork-family syscall (clone, clone3, fork, vfork) of the traced tree, timed like an exec
/// attempt: spawn cost beside exec cost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnCall {
    pub pid: u32,
    pub tgid: u32,
    pub syscall: SpawnSyscall,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// The child's id, or -errno.
    pub ret: i64,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpawnSyscall {
    Clone,
    Clone3,
    Fork,
    Vfork,
}

impl SpawnSyscall {
    pub fn label(self) -> &'static str {
        match self {
            SpawnSyscall::Clone => "clone",
            SpawnSyscall::Clone3 => "clone3",
            SpawnSyscall::Fork => "fork",
            SpawnSyscall::Vfork => "vfork",
        }
    }
}

impl SpawnCall {
    pub fn duration_ns(&self) -> u64 {
        self.exit_ns.saturating_sub(self.enter_ns)
    }
}

/// Exact mode: one call of a probed kernel function inside an exec attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub pid: u32,
    pub tgid: u32,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// Enter time of the attempt it ran in (0: could not be tied to one).
    pub attempt_enter_ns: u64,
    /// Probe slot; the exact-mode plan says which function is there.
    pub slot: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    Exec(ExecAttempt),
    Fork(Fork),
    Exit(Exit),
    Sample(Sample),
    Call(Call),
    Spawn(SpawnCall),
    /// A traced thread was off-CPU from `start_ns` to `end_ns`.
    OffCpu { pid: u32, tgid: u32, start_ns: u64, end_ns: u64 },
    /// A traced process entered `main` of the launched program.
    Main { pid: u32, tgid: u32, ts_ns: u64 },
}

/// Reads a `#[repr(C)]` record from the front of `bytes` (ring buffer items are 8-byte
/// aligned, but a copy avoids relying on it).
fn read<T: Copy>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < size_of::<T>() {
        bail!("record of {} bytes is shorter than {} ({} bytes)", bytes.len(), std::any::type_name::<T>(), size_of::<T>());
    }
    // SAFETY: length checked; T is a plain-old-data record from profiler-common.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

pub fn decode(bytes: &[u8]) -> Result<Event> {
    let header: RecordHeader = read(bytes)?;
    match header.kind {
        kind::EXEC => {
            let r = read::<ExecRecord>(bytes)?;
            Ok(match spawn_syscall(r.syscall) {
                Some(syscall) => Event::Spawn(decode_spawn(&r, syscall)),
                None => Event::Exec(decode_exec(&r)),
            })
        }
        kind::FORK => {
            let r: ForkRecord = read(bytes)?;
            Ok(Event::Fork(Fork {
                ts_ns: r.header.ts_ns,
                parent_pid: r.header.pid,
                parent_tgid: r.header.tgid,
                child_pid: r.child_pid,
                child_tgid: r.child_tgid,
                thread: r.flags & fork_flags::THREAD != 0,
            }))
        }
        kind::EXIT => {
            let r: ExitRecord = read(bytes)?;
            Ok(Event::Exit(Exit {
                ts_ns: r.header.ts_ns,
                pid: r.header.pid,
                tgid: r.header.tgid,
                group_dead: r.flags & exit_flags::GROUP_DEAD != 0,
            }))
        }
        kind::SAMPLE => {
            let r: SampleRecord = read(bytes)?;
            let n = (r.nr_frames as usize).min(r.frames.len());
            Ok(Event::Sample(Sample {
                ts_ns: r.header.ts_ns,
                pid: r.header.pid,
                tgid: r.header.tgid,
                attempt_enter_ns: r.attempt_enter_ns,
                frames: r.frames[..n].to_vec(),
            }))
        }
        kind::CALL => {
            let r: CallRecord = read(bytes)?;
            Ok(Event::Call(Call {
                pid: r.header.pid,
                tgid: r.header.tgid,
                enter_ns: r.enter_ns,
                exit_ns: r.header.ts_ns,
                attempt_enter_ns: r.attempt_enter_ns,
                slot: r.slot,
            }))
        }
        kind::OFF_CPU => {
            let r: MarkRecord = read(bytes)?;
            Ok(Event::OffCpu { pid: r.header.pid, tgid: r.header.tgid, start_ns: r.value, end_ns: r.header.ts_ns })
        }
        kind::MAIN => {
            let r: MarkRecord = read(bytes)?;
            Ok(Event::Main { pid: r.header.pid, tgid: r.header.tgid, ts_ns: r.header.ts_ns })
        }
        other => bail!("unknown record kind {other} ({} bytes): the eBPF object and execprof disagree", bytes.len()),
    }
}

fn spawn_syscall(s: u32) -> Option<SpawnSyscall> {
    Some(match s {
        exec_syscall::CLONE => SpawnSyscall::Clone,
        exec_syscall::CLONE3 => SpawnSyscall::Clone3,
        exec_syscall::FORK => SpawnSyscall::Fork,
        exec_syscall::VFORK => SpawnSyscall::Vfork,
        _ => return None,
    })
}

fn decode_spawn(r: &ExecRecord, syscall: SpawnSyscall) -> SpawnCall {
    let faults_ok = r.flags & exec_flags::FAULTS_UNAVAILABLE == 0;
    SpawnCall {
        pid: r.enter_pid,
        tgid: r.header.tgid,
        syscall,
        enter_ns: r.enter_ns,
        exit_ns: r.header.ts_ns,
        ret: r.ret,
        minor_faults: faults_ok.then_some(r.min_flt),
        major_faults: faults_ok.then_some(r.maj_flt),
    }
}

fn decode_exec(r: &ExecRecord) -> ExecAttempt {
    let len = (r.filename_len as usize).min(r.filename.len());
    let nonzero = |t: u64| (t != 0).then_some(t);
    let faults_ok = r.flags & exec_flags::FAULTS_UNAVAILABLE == 0;
    ExecAttempt {
        pid: r.enter_pid,
        exit_pid: r.header.pid,
        tgid: r.header.tgid,
        cpu: r.header.cpu,
        syscall: if r.syscall == exec_syscall::EXECVEAT { Syscall::Execveat } else { Syscall::Execve },
        filename: String::from_utf8_lossy(&r.filename[..len]).into_owned(),
        filename_truncated: r.flags & exec_flags::FILENAME_TRUNCATED != 0,
        filename_unreadable: r.flags & exec_flags::FILENAME_UNREADABLE != 0,
        enter_ns: r.enter_ns,
        prepare_ns: nonzero(r.prepare_ns),
        loaded_ns: nonzero(r.loaded_ns),
        exit_ns: r.header.ts_ns,
        ret: r.ret,
        minor_faults: faults_ok.then_some(r.min_flt),
        major_faults: faults_ok.then_some(r.maj_flt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: test-only view of a padding-free repr(C) record.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn decodes_exec_record() {
        let mut r = ExecRecord::zeroed();
        r.header = RecordHeader { kind: kind::EXEC, cpu: 1, ts_ns: 5_000, pid: 10, tgid: 10 };
        r.enter_ns = 1_000;
        r.prepare_ns = 3_000;
        r.loaded_ns = 4_000;
        r.ret = 0;
        r.min_flt = 7;
        r.enter_pid = 11;
        r.syscall = exec_syscall::EXECVEAT;
        r.flags = exec_flags::FILENAME_TRUNCATED;
        r.filename[..5].copy_from_slice(b"/bin/");
        r.filename_len = 5;
        let Event::Exec(e) = decode(&bytes_of(&r)).unwrap() else { panic!("not an exec") };
        assert_eq!((e.pid, e.exit_pid, e.tgid), (11, 10, 10));
        assert_eq!(e.filename, "/bin/");
        assert!(e.filename_truncated && !e.filename_unreadable);
        assert_eq!((e.prepare_ns, e.loaded_ns), (Some(3_000), Some(4_000)));
        assert_eq!(e.duration_ns(), 4_000);
        assert_eq!((e.minor_faults, e.major_faults), (Some(7), Some(0)));
        assert_eq!(e.syscall, Syscall::Execveat);
    }

    #[test]
    fn failed_exec_has_no_phase_times_and_missing_faults_are_none() {
        let mut r = ExecRecord::zeroed();
        r.header.ts_ns = 2;
        r.ret = -2;
        r.flags = exec_flags::FAULTS_UNAVAILABLE;
        let Event::Exec(e) = decode(&bytes_of(&r)).unwrap() else { panic!() };
        assert_eq!((e.prepare_ns, e.loaded_ns, e.minor_faults), (None, None, None));
        assert_eq!(e.ret, -2);
    }

    #[test]
    fn decodes_fork_and_exit() {
        let f = ForkRecord { header: RecordHeader { kind: kind::FORK, cpu: 0, ts_ns: 9, pid: 1, tgid: 1 }, child_pid: 2, child_tgid: 2, flags: 0, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&f)).unwrap(), Event::Fork(Fork { ts_ns: 9, parent_pid: 1, parent_tgid: 1, child_pid: 2, child_tgid: 2, thread: false }));
        let x = ExitRecord { header: RecordHeader { kind: kind::EXIT, cpu: 0, ts_ns: 10, pid: 2, tgid: 2 }, flags: exit_flags::GROUP_DEAD, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&x)).unwrap(), Event::Exit(Exit { ts_ns: 10, pid: 2, tgid: 2, group_dead: true }));
    }

    #[test]
    fn decodes_sample_frames_up_to_nr_frames() {
        let mut r = SampleRecord {
            header: RecordHeader { kind: kind::SAMPLE, cpu: 0, ts_ns: 50, pid: 3, tgid: 3 },
            attempt_enter_ns: 40,
            nr_frames: 2,
            _reserved: 0,
            frames: [0; profiler_common::limits::MAX_FRAMES],
        };
        r.frames[0] = 0xffff_ffff_8100_0010;
        r.frames[1] = 0xffff_ffff_8100_0020;
        r.frames[2] = 0xdead;
        let Event::Sample(s) = decode(&bytes_of(&r)).unwrap() else { panic!() };
        assert_eq!(s.frames, vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]);
        assert_eq!((s.attempt_enter_ns, s.tgid), (40, 3));
    }

    #[test]
    fn fork_family_records_decode_as_spawns() {
        let mut r = ExecRecord::zeroed();
        r.header = RecordHeader { kind: kind::EXEC, cpu: 0, ts_ns: 900, pid: 5, tgid: 5 };
        r.enter_ns = 100;
        r.ret = 77;
        r.enter_pid = 5;
        r.syscall = exec_syscall::CLONE3;
        let Event::Spawn(s) = decode(&bytes_of(&r)).unwrap() else { panic!("not a spawn") };
        assert_eq!((s.syscall, s.ret, s.duration_ns()), (SpawnSyscall::Clone3, 77, 800));
    }

    #[test]
    fn decodes_calls() {
        let r = CallRecord { header: RecordHeader { kind: kind::CALL, cpu: 1, ts_ns: 90, pid: 4, tgid: 4 }, enter_ns: 70, attempt_enter_ns: 60, slot: 3, _reserved: 0 };
        let Event::Call(c) = decode(&bytes_of(&r)).unwrap() else { panic!() };
        assert_eq!(c, Call { pid: 4, tgid: 4, enter_ns: 70, exit_ns: 90, attempt_enter_ns: 60, slot: 3 });
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(decode(&[0u8; 4]).is_err());
        let mut h = RecordHeader { kind: 99, ..Default::default() };
        let err = decode(&bytes_of(&h)).unwrap_err().to_string();
        assert!(err.contains("unknown record kind 99"), "{err}");
        h.kind = kind::EXEC;
        assert!(decode(&bytes_of(&h)).unwrap_err().to_string().contains("shorter"));
    }
}
