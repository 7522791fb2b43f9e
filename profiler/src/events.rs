//! Decoded records, and the domain events everything after collection works on. Decoding is
//! the only place that knows the wire layout; a record of unknown kind or size is an error
//! that names it, never a silent skip. `assemble` turns records into events.
use anyhow::{Result, bail};
use profiler_common::{CallRecord, EnterRecord, ExecRecord, ExitRecord, ForkRecord, MarkRecord, PathRecord, RecordHeader, SampleRecord, exec_flags, exec_syscall, exit_flags, fork_flags, kind};
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

/// A file name as a record carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Name {
    pub text: String,
    pub truncated: bool,
    pub unreadable: bool,
}

/// One decoded record. Exec attempts and fork-family calls arrive in pieces (enter, point of
/// no return, new image, exit) that `assemble` joins per thread; the rest are whole events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Enter {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        call: CallKind,
        faults: Option<(u64, u64)>,
    },
    /// The syscall returned; `name` is the caller's copy (failed execs only).
    Exit {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        call: CallKind,
        ret: i64,
        faults: Option<(u64, u64)>,
        name: Option<Name>,
    },
    /// `sched_prepare_exec`, with the kernel's copy of the name when read there.
    NoReturn {
        ts_ns: u64,
        pid: u32,
        name: Option<Name>,
    },
    /// `sched_process_exec`: `old_pid` is the thread's id before the exec.
    Loaded {
        ts_ns: u64,
        pid: u32,
        old_pid: u32,
        name: Option<Name>,
    },
    /// A sample inside an exec attempt of thread `pid`, not yet tied to the attempt.
    Sample {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        frames: Vec<u64>,
    },
    /// An exact-mode call inside an exec attempt of thread `pid`, not yet tied to it.
    Call {
        pid: u32,
        tgid: u32,
        enter_ns: u64,
        exit_ns: u64,
        slot: u32,
    },
    /// Records that are whole events already (fork, exit, off-CPU, main).
    Event(Event),
}

/// Which syscall an enter/exit pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    Exec(Syscall),
    Spawn(SpawnSyscall),
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

pub fn decode(bytes: &[u8]) -> Result<Record> {
    let header: RecordHeader = read(bytes)?;
    let h = header;
    Ok(match header.kind {
        kind::ENTER => {
            let r: EnterRecord = read(bytes)?;
            Record::Enter {
                ts_ns: h.ts_ns,
                pid: h.pid,
                tgid: h.tgid,
                call: call_kind(r.syscall)?,
                faults: faults(r.flags, r.min_flt, r.maj_flt),
            }
        }
        kind::EXEC => {
            let r: ExecRecord = read(bytes)?;
            let call = call_kind(r.syscall)?;
            let failed_exec = matches!(call, CallKind::Exec(_)) && r.ret != 0;
            Record::Exit {
                ts_ns: h.ts_ns,
                pid: h.pid,
                tgid: h.tgid,
                cpu: h.cpu,
                call,
                ret: r.ret,
                faults: faults(r.flags, r.min_flt, r.maj_flt),
                name: failed_exec.then(|| name(&r.filename, r.filename_len, r.flags)),
            }
        }
        kind::NO_RETURN | kind::LOADED => {
            let r: PathRecord = read(bytes)?;
            let name = (r.filename_len > 0).then(|| name(&r.filename, r.filename_len, r.flags));
            if header.kind == kind::NO_RETURN {
                Record::NoReturn { ts_ns: h.ts_ns, pid: h.pid, name }
            } else {
                Record::Loaded { ts_ns: h.ts_ns, pid: h.pid, old_pid: r.old_pid, name }
            }
        }
        kind::FORK => {
            let r: ForkRecord = read(bytes)?;
            Record::Event(Event::Fork(Fork {
                ts_ns: h.ts_ns,
                parent_pid: h.pid,
                parent_tgid: h.tgid,
                child_pid: r.child_pid,
                child_tgid: r.child_tgid,
                thread: r.flags & fork_flags::THREAD != 0,
            }))
        }
        kind::EXIT => {
            let r: ExitRecord = read(bytes)?;
            Record::Event(Event::Exit(Exit {
                ts_ns: h.ts_ns,
                pid: h.pid,
                tgid: h.tgid,
                group_dead: r.flags & exit_flags::GROUP_DEAD != 0,
            }))
        }
        kind::SAMPLE => {
            let r: SampleRecord = read(bytes)?;
            let n = (r.nr_frames as usize).min(r.frames.len());
            Record::Sample { ts_ns: h.ts_ns, pid: h.pid, tgid: h.tgid, frames: r.frames[..n].to_vec() }
        }
        kind::CALL => {
            let r: CallRecord = read(bytes)?;
            Record::Call { pid: h.pid, tgid: h.tgid, enter_ns: r.enter_ns, exit_ns: h.ts_ns, slot: r.slot }
        }
        kind::OFF_CPU => {
            let r: MarkRecord = read(bytes)?;
            Record::Event(Event::OffCpu { pid: h.pid, tgid: h.tgid, start_ns: r.value, end_ns: h.ts_ns })
        }
        kind::MAIN => Record::Event(Event::Main { pid: h.pid, tgid: h.tgid, ts_ns: read::<MarkRecord>(bytes)?.header.ts_ns }),
        other => bail!("unknown record kind {other} ({} bytes): the eBPF object and execprof disagree", bytes.len()),
    })
}

fn call_kind(s: u32) -> Result<CallKind> {
    Ok(match s {
        exec_syscall::EXECVE => CallKind::Exec(Syscall::Execve),
        exec_syscall::EXECVEAT => CallKind::Exec(Syscall::Execveat),
        exec_syscall::CLONE => CallKind::Spawn(SpawnSyscall::Clone),
        exec_syscall::CLONE3 => CallKind::Spawn(SpawnSyscall::Clone3),
        exec_syscall::FORK => CallKind::Spawn(SpawnSyscall::Fork),
        exec_syscall::VFORK => CallKind::Spawn(SpawnSyscall::Vfork),
        other => {
            bail!("unknown syscall code {other} in a record: the eBPF object and execprof disagree")
        }
    })
}

fn faults(flags: u32, min_flt: u64, maj_flt: u64) -> Option<(u64, u64)> {
    (flags & exec_flags::FAULTS_UNAVAILABLE == 0).then_some((min_flt, maj_flt))
}

fn name(bytes: &[u8], len: u32, flags: u32) -> Name {
    let len = (len as usize).min(bytes.len());
    Name {
        text: String::from_utf8_lossy(&bytes[..len]).into_owned(),
        truncated: flags & exec_flags::FILENAME_TRUNCATED != 0,
        unreadable: flags & exec_flags::FILENAME_UNREADABLE != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::limits::{FILENAME_CAP, MAX_FRAMES};

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: test-only view of a padding-free repr(C) record.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn header(kind: u32, ts_ns: u64, pid: u32, tgid: u32) -> RecordHeader {
        RecordHeader { kind, cpu: 1, ts_ns, pid, tgid }
    }

    fn exit_record(ret: i64, syscall: u32, flags: u32, name: &[u8]) -> ExecRecord {
        let mut filename = [0; FILENAME_CAP];
        filename[..name.len()].copy_from_slice(name);
        ExecRecord {
            header: header(kind::EXEC, 5_000, 10, 10),
            ret,
            min_flt: 9,
            maj_flt: 1,
            syscall,
            flags,
            filename_len: name.len() as u32,
            _reserved: 0,
            filename,
        }
    }

    #[test]
    fn decodes_enter_records() {
        let r = EnterRecord {
            header: header(kind::ENTER, 1_000, 11, 10),
            min_flt: 7,
            maj_flt: 0,
            syscall: exec_syscall::EXECVEAT,
            flags: 0,
        };
        let want =
            Record::Enter { ts_ns: 1_000, pid: 11, tgid: 10, call: CallKind::Exec(Syscall::Execveat), faults: Some((7, 0)) };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), want);
        let r = EnterRecord { flags: exec_flags::FAULTS_UNAVAILABLE, syscall: exec_syscall::VFORK, ..r };
        assert!(matches!(
            decode(&bytes_of(&r)).unwrap(),
            Record::Enter { faults: None, call: CallKind::Spawn(SpawnSyscall::Vfork), .. }
        ));
    }

    #[test]
    fn failed_exec_exit_carries_the_callers_name_and_a_success_none() {
        let r = exit_record(-2, exec_syscall::EXECVE, exec_flags::FILENAME_TRUNCATED, b"/bin/");
        let Record::Exit { name: Some(n), ret: -2, faults: Some((9, 1)), .. } = decode(&bytes_of(&r)).unwrap() else { panic!() };
        assert_eq!(n, Name { text: "/bin/".into(), truncated: true, unreadable: false });
        let ok = exit_record(0, exec_syscall::EXECVE, 0, b"");
        assert!(matches!(decode(&bytes_of(&ok)).unwrap(), Record::Exit { name: None, ret: 0, .. }));
        let spawn = exit_record(77, exec_syscall::CLONE3, 0, b"");
        assert!(matches!(
            decode(&bytes_of(&spawn)).unwrap(),
            Record::Exit { name: None, call: CallKind::Spawn(SpawnSyscall::Clone3), .. }
        ));
    }

    #[test]
    fn decodes_path_records() {
        let mut filename = [0; FILENAME_CAP];
        filename[..4].copy_from_slice(b"/t/x");
        let r = PathRecord {
            header: header(kind::LOADED, 3_000, 10, 10),
            old_pid: 12,
            flags: 0,
            filename_len: 4,
            _reserved: 0,
            filename,
        };
        let want =
            Record::Loaded { ts_ns: 3_000, pid: 10, old_pid: 12, name: Some(Name { text: "/t/x".into(), ..Name::default() }) };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), want);
        let r = PathRecord { header: header(kind::NO_RETURN, 2_000, 10, 10), filename_len: 0, ..r };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), Record::NoReturn { ts_ns: 2_000, pid: 10, name: None });
    }

    #[test]
    fn decodes_fork_and_exit() {
        let f = ForkRecord { header: header(kind::FORK, 9, 1, 1), child_pid: 2, child_tgid: 2, flags: 0, _reserved: 0 };
        assert_eq!(
            decode(&bytes_of(&f)).unwrap(),
            Record::Event(Event::Fork(Fork {
                ts_ns: 9,
                parent_pid: 1,
                parent_tgid: 1,
                child_pid: 2,
                child_tgid: 2,
                thread: false
            }))
        );
        let x = ExitRecord { header: header(kind::EXIT, 10, 2, 2), flags: exit_flags::GROUP_DEAD, _reserved: 0 };
        assert_eq!(
            decode(&bytes_of(&x)).unwrap(),
            Record::Event(Event::Exit(Exit { ts_ns: 10, pid: 2, tgid: 2, group_dead: true }))
        );
    }

    #[test]
    fn decodes_sample_frames_up_to_nr_frames() {
        let mut r = SampleRecord { header: header(kind::SAMPLE, 50, 3, 3), nr_frames: 2, _reserved: 0, frames: [0; MAX_FRAMES] };
        r.frames[0] = 0xffff_ffff_8100_0010;
        r.frames[1] = 0xffff_ffff_8100_0020;
        r.frames[2] = 0xdead;
        let Record::Sample { frames, tgid: 3, .. } = decode(&bytes_of(&r)).unwrap() else { panic!() };
        assert_eq!(frames, vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]);
    }

    #[test]
    fn decodes_calls() {
        let r = CallRecord { header: header(kind::CALL, 90, 4, 4), enter_ns: 70, slot: 3, _reserved: 0 };
        assert_eq!(decode(&bytes_of(&r)).unwrap(), Record::Call { pid: 4, tgid: 4, enter_ns: 70, exit_ns: 90, slot: 3 });
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(decode(&[0u8; 4]).is_err());
        let mut h = RecordHeader { kind: 99, ..Default::default() };
        let err = decode(&bytes_of(&h)).unwrap_err().to_string();
        assert!(err.contains("unknown record kind 99"), "{err}");
        h.kind = kind::EXEC;
        assert!(decode(&bytes_of(&h)).unwrap_err().to_string().contains("shorter"));
        let bad = EnterRecord { header: header(kind::ENTER, 1, 1, 1), min_flt: 0, maj_flt: 0, syscall: 42, flags: 0 };
        assert!(decode(&bytes_of(&bad)).unwrap_err().to_string().contains("unknown syscall code 42"));
    }
}
