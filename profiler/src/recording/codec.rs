//! The record codec: records to the two streams of a RECORDS frame and back, and the symbol table.

use super::MAX_INTERNED;
use super::varint::{Cursor, delta32, delta64, put_varint, undelta32, undelta64, unzigzag, zigzag};
use crate::{
    model::names::{Abi, Argv, Killed, Name, TracedSyscall},
    record::{Body, CallSums, Head, PathSum, Record},
};
use std::collections::HashMap;

/// Tag byte: kind in the low nibble, "head same as before" in bit 4, three kind-specific flags.
pub(super) mod tag {
    use profiler_common::{RECORD_KINDS, RecordKind};

    pub(crate) const KIND_MASK: u8 = 0x0f;
    pub(crate) const HEAD_SAME: u8 = 0x10;
    pub(crate) const B0: u8 = 0x20;
    pub(crate) const B1: u8 = 0x40;
    pub(crate) const B2: u8 = 0x80;
    pub(crate) const FLAGS: u8 = B0 | B1 | B2;

    /// The kinds' tags, from the one table of record kinds.
    pub(crate) use profiler_common::recording_tag::*;
    /// Not a record: clears the name table (B0) and/or the stack table (B1).
    pub(crate) const RESET: u8 = 15;

    // Every kind's tag fits the nibble and is not the reset's.
    const _: () = {
        let mut i = 0;
        while i < RECORD_KINDS.len() {
            assert!(RECORD_KINDS[i].tag & !KIND_MASK == 0 && RECORD_KINDS[i].tag != RESET);
            i += 1;
        }
    };

    /// The flags each kind may carry in a file of format `version` (None: no such kind).
    /// Anything else is corruption.
    pub(crate) fn allowed_flags_in(kind: u8, version: u32) -> Option<u8> {
        let all = allowed_flags(kind)?;
        // Version 3 added an enter's AT_EXECVE_CHECK bit and the new image's comm, version 4
        // the probed call sums' off-CPU times.
        Some(if version < 3 && matches!(kind, SYSCALL_ENTER | LOADED) {
            all & !B2
        } else if version < 4 && kind == CALL_SUMS {
            all & !B0
        } else {
            all
        })
    }

    /// The flags each kind may carry in the newest format (None: no such kind).
    pub(crate) fn allowed_flags(kind: u8) -> Option<u8> {
        Some(match kind {
            SYSCALL_ENTER => B0 | B1 | B2, // faults, syscall code byte, AT_EXECVE_CHECK (version 3)
            SYSCALL_EXIT => B0 | B1 | B2,  // faults, syscall code byte (with the kill bits), name
            NO_RETURN => B0,               // name
            LOADED => B0 | B1 | B2,        // name, old_pid spelled out, comm (version 3)
            TASK_NEW => B0 | B1 | B2,      // thread, child_tgid == tgid, child_tgid spelled out
            TASK_EXIT => B0,               // group_dead
            CALL_SUMS => B0,               // each entry's off-CPU time follows (version 4)
            SAMPLE | PROBED_CALL | OFF_CPU | MAIN => 0,
            ARGV => B0 | B1, // cut, unreadable
            ADOPTED => B0,   // ppid known
            RESET => B0 | B1,
            _ => return None,
        })
    }

    /// The kind's name (`Body::kind_name`'s words), for messages about records that did not decode.
    pub(crate) fn name(tag: u8) -> String {
        match RecordKind::of_tag(tag & KIND_MASK) {
            Some(k) => k.name.to_string(),
            None if tag & KIND_MASK == RESET => "table reset".to_string(),
            None => format!("unknown tag {tag:#04x}"),
        }
    }
}

/// Head byte, present when the tag lacks HEAD_SAME: which ids are spelled out after it.
mod head {
    pub(super) const PID: u8 = 0x01;
    pub(super) const TGID_MASK: u8 = 0x06;
    pub(super) const TGID_IS_PID: u8 = 0;
    pub(super) const TGID_IS_PREV: u8 = 1;
    pub(super) const TGID_EXPLICIT: u8 = 2;
    pub(super) const CPU: u8 = 0x08;
    pub(super) const ALL: u8 = PID | TGID_MASK | CPU;
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
pub(super) struct Streams {
    pub(super) times: Vec<u8>,
    pub(super) records: Vec<u8>,
}

impl Streams {
    pub(super) fn len(&self) -> usize {
        self.times.len() + self.records.len()
    }

    pub(super) fn clear(&mut self) {
        self.times.clear();
        self.records.clear();
    }

    pub(super) fn payload(&self, out: &mut Vec<u8>) {
        out.clear();
        put_varint(out, self.times.len() as u64);
        out.extend_from_slice(&self.times);
        out.extend_from_slice(&self.records);
    }
}

/// Record to bytes. Holds the delta bases and the interning tables of one file.
#[derive(Default)]
pub(super) struct Encoder {
    prev: Prev,
    names: HashMap<Name, u64>,
    stacks: HashMap<Vec<u64>, u64>,
}

impl Encoder {
    pub(super) fn encode(&mut self, r: &Record, out: &mut Streams) {
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
        *p = Prev { ts: h.ts_ns, pid: h.pid, tgid: h.tgid, cpu: h.cpu, faults: p.faults };
        if same { tag::HEAD_SAME } else { 0 }
    }

    fn put_body(&mut self, h: &Head, body: &Body, buf: &mut Vec<u8>) -> u8 {
        match body {
            Body::SyscallEnter { syscall, abi, faults, check } => {
                let mut t = tag::SYSCALL_ENTER | put_syscall(*syscall, *abi, None, false, buf);
                t |= self.put_faults(*faults, buf);
                if *check {
                    t |= tag::B2;
                }
                t
            }
            Body::SyscallExit { syscall, abi, ret, faults, name, killed, enter_lost } => {
                let mut t = tag::SYSCALL_EXIT | put_syscall(*syscall, *abi, *killed, *enter_lost, buf);
                put_varint(buf, zigzag(*ret));
                t |= self.put_faults(*faults, buf);
                t |= self.put_name(name.as_ref(), tag::B2, buf);
                t
            }
            Body::NoReturn { name } => tag::NO_RETURN | self.put_name(name.as_ref(), tag::B0, buf),
            Body::Loaded { old_pid, name, comm } => {
                let mut t = tag::LOADED;
                if *old_pid != h.pid {
                    t |= tag::B1;
                    put_varint(buf, delta32(*old_pid, h.pid));
                }
                t |= self.put_name(name.as_ref(), tag::B0, buf);
                // Interned with the names: a process tree's few comms cost a byte or two each.
                let comm = comm.as_ref().map(|c| Name { bytes: c.clone(), ..Name::default() });
                t | self.put_name(comm.as_ref(), tag::B2, buf)
            }
            Body::TaskNew { child_pid, child_tgid, thread } => {
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
            Body::CallSums(sums) => {
                // The count of calls not summed, of entries, then each entry: slot, parent
                // (0: the syscall, else its index + 1), calls, inclusive and self time, and
                // with B0 (any entry's calls were off-CPU) the off-CPU time.
                let off_cpu = sums.entries.iter().any(|e| e.off_cpu_ns > 0);
                put_varint(buf, u64::from(sums.unsummed));
                put_varint(buf, sums.entries.len() as u64);
                for e in &sums.entries {
                    put_varint(buf, u64::from(e.slot));
                    put_varint(buf, e.parent.map_or(0, |p| u64::from(p) + 1));
                    put_varint(buf, u64::from(e.calls));
                    put_varint(buf, e.inclusive_ns);
                    put_varint(buf, e.self_ns);
                    if off_cpu {
                        put_varint(buf, e.off_cpu_ns);
                    }
                }
                tag::CALL_SUMS | if off_cpu { tag::B0 } else { 0 }
            }
            Body::OffCpu { start_ns } => {
                put_varint(buf, delta64(h.ts_ns, *start_ns));
                tag::OFF_CPU
            }
            Body::Main => tag::MAIN,
            Body::Argv(a) => {
                // The count, then each argument's length and bytes (rarely repeated: not interned).
                put_varint(buf, a.args.len() as u64);
                for arg in &a.args {
                    put_varint(buf, arg.len() as u64);
                    buf.extend_from_slice(arg);
                }
                tag::ARGV | if a.cut { tag::B0 } else { 0 } | if a.unreadable { tag::B1 } else { 0 }
            }
            Body::Adopted { ppid, comm } => {
                // The parent's id (when known), then the comm's length and bytes.
                let mut t = tag::ADOPTED;
                if let Some(p) = ppid {
                    t |= tag::B0;
                    put_varint(buf, u64::from(*p));
                }
                put_varint(buf, comm.len() as u64);
                buf.extend_from_slice(comm);
                t
            }
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
        self.stacks.insert(frames.to_vec(), self.stacks.len() as u64);
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

/// The syscall code byte: the code in the low nibble, an exit's [`Killed`] in the high one.
/// Left out for a plain `execve` (the common case).
/// The syscall code byte: the code in bits 0-3, the kill bits in 4-5, the compat ABI in bit 6,
/// an exit whose enter was lost in bit 7. A native execve with none of those (nearly every
/// record) leaves it out.
fn put_syscall(s: TracedSyscall, abi: Abi, killed: Option<Killed>, enter_lost: bool, buf: &mut Vec<u8>) -> u8 {
    let kill_bits: u8 = match killed {
        None => 0,
        Some(Killed::BySignal) => 1,
        Some(Killed::ByOtherThreadsExec) => 2,
    };
    let abi_bit: u8 = if abi == Abi::Compat { SYSCALL_COMPAT } else { 0 };
    let lost_bit: u8 = if enter_lost { SYSCALL_ENTER_LOST } else { 0 };
    if s == TracedSyscall::Execve && kill_bits == 0 && abi_bit == 0 && lost_bit == 0 {
        return 0;
    }
    buf.push(s.code() as u8 | kill_bits << 4 | abi_bit | lost_bit);
    tag::B1
}

/// Bit 6 of the syscall code byte: the call ran in the compat ABI.
const SYSCALL_COMPAT: u8 = 0x40;
/// Bit 7: an exit whose enter record the kernel dropped.
const SYSCALL_ENTER_LOST: u8 = 0x80;

/// Bytes to records: the mirror of [`Encoder`], defensive about every byte.
pub(super) struct Decoder {
    prev: Prev,
    names: Vec<Name>,
    stacks: Vec<Vec<u64>>,
    /// The file's format version: what older formats lack is corruption in them.
    version: u32,
}

impl Default for Decoder {
    fn default() -> Self {
        Self { prev: Prev::default(), names: Vec::new(), stacks: Vec::new(), version: super::FORMAT_VERSION }
    }
}

impl Decoder {
    /// Reads a file of format `version` from here on.
    pub(super) fn set_version(&mut self, version: u32) {
        self.version = version;
    }

    /// Decodes the item whose tag was just read: a record, or None for a table reset.
    pub(super) fn decode(&mut self, t: u8, c: &mut Cursor, times: &mut Cursor) -> Result<Option<Record>, String> {
        let kind = t & tag::KIND_MASK;
        let flags = t & tag::FLAGS;
        let allowed = tag::allowed_flags_in(kind, self.version).ok_or_else(|| format!("unknown tag {t:#04x}"))?;
        if flags & !allowed != 0 {
            return Err(format!("unknown flag bits {:#04x} in tag {t:#04x}", flags & !allowed));
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
        let ts_ns = undelta64(p.ts, times.varint().map_err(|e| format!("time delta: {e}"))?);
        let pid = if hb & head::PID != 0 { undelta32(p.pid, c.varint()?, "pid")? } else { p.pid };
        let tgid = match (same, (hb & head::TGID_MASK) >> 1) {
            (true, _) => p.tgid,
            (false, head::TGID_IS_PID) => pid,
            (false, head::TGID_IS_PREV) => p.tgid,
            (false, head::TGID_EXPLICIT) => undelta32(pid, c.varint()?, "tgid")?,
            (false, _) => return Err(format!("bad head byte {hb:#04x}")),
        };
        let cpu = if hb & head::CPU != 0 { c.varint_u32("cpu")? } else { p.cpu };
        *p = Prev { ts: ts_ns, pid, tgid, cpu, faults: p.faults };
        Ok(Head { ts_ns, pid, tgid, cpu })
    }

    fn body(&mut self, kind: u8, f: u8, h: &Head, c: &mut Cursor) -> Result<Body, String> {
        Ok(match kind {
            tag::SYSCALL_ENTER => {
                let (syscall, abi, killed, enter_lost) = syscall(f & tag::B1 != 0, c)?;
                if killed.is_some() || enter_lost {
                    return Err("a syscall enter with exit-only bits".into());
                }
                Body::SyscallEnter { syscall, abi, faults: self.faults(f & tag::B0 != 0, c)?, check: f & tag::B2 != 0 }
            }
            tag::SYSCALL_EXIT => {
                let (syscall, abi, killed, enter_lost) = syscall(f & tag::B1 != 0, c)?;
                let ret = unzigzag(c.varint()?);
                let faults = self.faults(f & tag::B0 != 0, c)?;
                Body::SyscallExit { syscall, abi, ret, faults, name: self.name_if(f & tag::B2 != 0, c)?, killed, enter_lost }
            }
            tag::NO_RETURN => Body::NoReturn { name: self.name_if(f & tag::B0 != 0, c)? },
            tag::LOADED => {
                let old_pid = if f & tag::B1 != 0 { undelta32(h.pid, c.varint()?, "old pid")? } else { h.pid };
                let name = self.name_if(f & tag::B0 != 0, c)?;
                Body::Loaded { old_pid, name, comm: self.name_if(f & tag::B2 != 0, c)?.map(|n| n.bytes) }
            }
            tag::TASK_NEW => {
                let child_pid = undelta32(h.pid, c.varint()?, "child pid")?;
                let child_tgid = match (f & tag::B1 != 0, f & tag::B2 != 0) {
                    (false, false) => child_pid,
                    (true, false) => h.tgid,
                    (false, true) => undelta32(child_pid, c.varint()?, "child tgid")?,
                    (true, true) => return Err("contradictory child tgid flags".into()),
                };
                Body::TaskNew { child_pid, child_tgid, thread: f & tag::B0 != 0 }
            }
            tag::TASK_EXIT => Body::TaskExit { group_dead: f & tag::B0 != 0 },
            tag::SAMPLE => Body::Sample { frames: self.stack(c)? },
            tag::PROBED_CALL => {
                let enter_ns = h.ts_ns.wrapping_sub(unzigzag(c.varint()?) as u64);
                Body::ProbedCall { enter_ns, slot: c.varint_u32("probe slot")? }
            }
            tag::CALL_SUMS => {
                let unsummed = c.varint_u32("calls not summed")?;
                let n = c.varint()?;
                if n > profiler_common::call_sums::MAX_ENTRIES as u64 {
                    return Err(format!("{n} call paths, more than the kernel side keeps"));
                }
                let mut entries = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let slot = c.varint_u32("probe slot")?;
                    let parent = match c.varint()? {
                        0 => None,
                        p if p <= i => Some((p - 1) as u8),
                        p => return Err(format!("call path {i} under path {}, not an earlier one", p - 1)),
                    };
                    let calls = c.varint_u32("calls")?;
                    let (inclusive_ns, self_ns) = (c.varint()?, c.varint()?);
                    let off_cpu_ns = if f & tag::B0 != 0 { c.varint()? } else { 0 };
                    entries.push(PathSum { slot, parent, calls, inclusive_ns, self_ns, off_cpu_ns });
                }
                Body::CallSums(CallSums { entries, unsummed })
            }
            tag::OFF_CPU => Body::OffCpu { start_ns: h.ts_ns.wrapping_sub(unzigzag(c.varint()?) as u64) },
            tag::MAIN => Body::Main,
            tag::ARGV => {
                let n = c.varint()?;
                if n > profiler_common::limits::ARGV_MAX_ARGS as u64 {
                    return Err(format!("{n} arguments, more than the kernel side keeps"));
                }
                let mut args = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let len = c.varint()?;
                    args.push(c.take(len)?.to_vec());
                }
                Body::Argv(Argv { args, cut: f & tag::B0 != 0, unreadable: f & tag::B1 != 0 })
            }
            tag::ADOPTED => {
                let ppid = if f & tag::B0 != 0 { Some(c.varint_u32("parent id")?) } else { None };
                let len = c.varint()?;
                if len > profiler_common::limits::COMM_LEN as u64 {
                    return Err(format!("a comm of {len} bytes, more than the kernel's {}", profiler_common::limits::COMM_LEN));
                }
                Body::Adopted { ppid, comm: c.take(len)?.to_vec() }
            }
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
        let f = (undelta64(self.prev.faults.0, minor), undelta64(self.prev.faults.1, major));
        self.prev.faults = f;
        Ok(Some(f))
    }

    fn name_if(&mut self, present: bool, c: &mut Cursor) -> Result<Option<Name>, String> {
        if present { self.name(c).map(Some) } else { Ok(None) }
    }

    fn name(&mut self, c: &mut Cursor) -> Result<Name, String> {
        let v = c.varint()?;
        if v != 0 {
            let id = v - 1;
            let defined = self.names.len();
            return usize::try_from(id)
                .ok()
                .and_then(|i| self.names.get(i))
                .cloned()
                .ok_or_else(|| format!("name id {id} was never defined ({defined} names defined since the last table reset)"));
        }
        if self.names.len() >= MAX_INTERNED {
            return Err(format!("more than {MAX_INTERNED} names defined without a table reset"));
        }
        let flags = c.byte()?;
        if flags & !3 != 0 {
            return Err(format!("bad name flags {flags:#04x}"));
        }
        let len = c.varint()?;
        let name = Name { bytes: c.take(len)?.to_vec(), truncated: flags & 1 != 0, unreadable: flags & 2 != 0 };
        self.names.push(name.clone());
        Ok(name)
    }

    fn stack(&mut self, c: &mut Cursor) -> Result<Vec<u64>, String> {
        let v = c.varint()?;
        if v != 0 {
            let id = v - 1;
            let defined = self.stacks.len();
            return usize::try_from(id)
                .ok()
                .and_then(|i| self.stacks.get(i))
                .cloned()
                .ok_or_else(|| format!("stack id {id} was never defined ({defined} stacks defined since the last table reset)"));
        }
        if self.stacks.len() >= MAX_INTERNED {
            return Err(format!("more than {MAX_INTERNED} stacks defined without a table reset"));
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
pub(super) fn split_streams(raw: &[u8]) -> Result<(usize, usize), String> {
    let mut c = Cursor::new(raw);
    let len = c.varint()?;
    let start = c.pos;
    c.take(len)?;
    Ok((start, c.pos))
}

fn syscall(spelled_out: bool, c: &mut Cursor) -> Result<(TracedSyscall, Abi, Option<Killed>, bool), String> {
    if !spelled_out {
        return Ok((TracedSyscall::Execve, Abi::Native, None, false));
    }
    let byte = c.byte()?;
    let syscall = TracedSyscall::from_code(u32::from(byte & 0x0f)).ok_or_else(|| format!("bad syscall code {byte}"))?;
    let abi = if byte & SYSCALL_COMPAT != 0 { Abi::Compat } else { Abi::Native };
    let enter_lost = byte & SYSCALL_ENTER_LOST != 0;
    let killed = match (byte & !(SYSCALL_COMPAT | SYSCALL_ENTER_LOST)) >> 4 {
        0 => None,
        1 => Some(Killed::BySignal),
        2 => Some(Killed::ByOtherThreadsExec),
        _ => return Err(format!("bad kill bits in syscall code {byte:#04x}")),
    };
    Ok((syscall, abi, killed, enter_lost))
}

pub(super) fn encode_symbols(symbols: &[(u64, String)], buf: &mut Vec<u8>) {
    let mut prev = 0;
    for (addr, name) in symbols {
        put_varint(buf, delta64(*addr, prev));
        prev = *addr;
        put_varint(buf, name.len() as u64);
        buf.extend_from_slice(name.as_bytes());
    }
}

pub(super) fn decode_symbols(raw: &[u8], count: u64) -> Result<Vec<(u64, String)>, String> {
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
        return Err(format!("{} bytes follow the {count} symbols the header announces", c.remaining()));
    }
    Ok(out)
}
