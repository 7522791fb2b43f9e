//! `--argv`: an exec attempt's arguments, read from the caller's memory at the syscall's enter
//! (where they are cheapest to read: the caller's pointers, before anything is copied) and sent
//! as one record just before the enter's. Capped: at most `ARGV_MAX_ARGS` arguments and
//! `ARGV_CAP` bytes, each argument cut at `ARG_CAP`; what is cut or unreadable is flagged.
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_user, bpf_probe_read_user_buf, generated};
use profiler_common::{
    ArgvRecord, RecordHeader, WireRecord, argv_flags, counter,
    limits::{ARG_CAP, ARGV_CAP, ARGV_MAX_ARGS},
};

use crate::{maps, task::global};

/// Non-zero with `--argv`. Set by the loader.
#[unsafe(no_mangle)]
static ARGV: u64 = 0;

#[inline(always)]
pub fn wanted() -> bool {
    global(&ARGV) != 0
}

/// Reads the `argv` array at `argv` (32-bit pointers for a compat caller) and sends it.
#[inline(always)]
pub fn send(argv: u64, compat: bool, pid: u32, tgid: u32) {
    let Some(mut entry) = maps::EVENTS.reserve::<ArgvRecord>(0) else {
        maps::count(counter::ARGV_DROPPED);
        return;
    };
    // SAFETY: the reservation is ours and sized for one ArgvRecord; the user side reads
    // `len` bytes of `bytes`, all written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = RecordHeader {
        kind: ArgvRecord::KIND,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid,
        tgid,
    };
    rec._reserved = 0;
    let (mut len, mut argc, mut flags) = (0usize, 0u32, 0u32);
    let width = if compat { 4 } else { 8 };
    for i in 0..=ARGV_MAX_ARGS {
        let Some(ptr) = pointer(argv + (i * width) as u64, compat) else {
            flags |= argv_flags::UNREADABLE;
            break;
        };
        if ptr == 0 {
            break;
        }
        if i == ARGV_MAX_ARGS || len >= ARGV_CAP {
            flags |= argv_flags::CUT;
            break;
        }
        // Masked, so the verifier sees each read inside `bytes` (len < ARGV_CAP already).
        let off = len & (ARGV_CAP - 1);
        let dst = unsafe { rec.bytes.as_mut_ptr().add(off) };
        let n = unsafe { generated::bpf_probe_read_user_str(dst.cast(), ARG_CAP as u32, ptr as *const _) };
        if n < 0 {
            flags |= argv_flags::UNREADABLE;
            break;
        }
        // n counts the NUL; on 6.1 and 6.12 an empty string gives 0 (nothing written).
        let n = if n == 0 {
            unsafe { *dst = 0 };
            1
        } else {
            n as usize
        };
        if n == ARG_CAP {
            let mut next = [0u8; 1];
            let fits = unsafe { bpf_probe_read_user_buf((ptr + ARG_CAP as u64 - 1) as *const u8, &mut next) }.is_ok() && next[0] == 0;
            if !fits {
                flags |= argv_flags::CUT;
            }
        }
        len = off + n;
        argc += 1;
    }
    rec.len = len as u32;
    rec.argc = argc;
    rec.flags = flags;
    entry.submit(maps::NO_WAKEUP);
}

#[inline(always)]
fn pointer(at: u64, compat: bool) -> Option<u64> {
    unsafe { if compat { bpf_probe_read_user(at as *const u32).ok().map(u64::from) } else { bpf_probe_read_user(at as *const u64).ok() } }
}
