//! The rest of a traced process's timeline: when its threads are off-CPU (sched_switch),
//! and when an exec'd image reaches `main` (a uprobe user space attaches to the launched
//! program), so a chain step can be split into kernel, loader/start-up, user and off-CPU.
use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{map, raw_tracepoint, uprobe},
    maps::HashMap,
    programs::{ProbeContext, RawTracePointContext},
};
use profiler_common::{MainRecord, OffCpuRecord, RecordHeader, WireRecord, counter, limits};

use crate::{maps, task};

const TASK_DEAD: u32 = 0x80;

/// Switch-out time of each traced thread currently off-CPU.
#[map]
static OFF_CPU_SINCE: HashMap<u32, u64> = HashMap::with_max_entries(limits::MAX_OFF_CPU, 0);

#[inline(always)]
fn header<R: WireRecord>(pid: u32, tgid: u32, ts_ns: u64) -> RecordHeader {
    RecordHeader { kind: R::KIND, cpu: unsafe { bpf_get_smp_processor_id() }, ts_ns, pid, tgid }
}

/// `sched_switch(preempt, prev, next)` (and `prev_state` from 5.18, which this does not read:
/// a kernel refuses to attach a program that reads past its tracepoint's arguments; the
/// state is read from `prev`). Runs for every switch in the system, so
/// it decides from the flag array first and touches the clock and the map only for traced
/// threads (`benches/othercost.sh`: an untraced switch cost 310–355 ns with a clock read and
/// a hash lookup for every `next`, 160–165 ns now).
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> u32 {
    let next: u64 = ctx.arg(2);
    // `prev` is still the current task here.
    let (prev_pid, prev_tgid) = task::current_ids();
    // A dying thread's last switch (TASK_DEAD) starts no off-CPU interval.
    let prev_traced = maps::is_traced(prev_tgid) && task::state(ctx.arg(1)) & TASK_DEAD == 0;
    let next_traced = task::ids(next).filter(|&(_, tgid)| maps::is_traced(tgid));
    if !prev_traced && next_traced.is_none() {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if prev_traced && OFF_CPU_SINCE.insert(&prev_pid, &now, BPF_ANY as u64).is_err() {
        maps::count(counter::OFF_CPU_FULL);
    }
    if let Some((pid, tgid)) = next_traced {
        if let Some(&since) = unsafe { OFF_CPU_SINCE.get(&pid) } {
            let _ = OFF_CPU_SINCE.remove(&pid);
            crate::attempt::ran_again(next, now.saturating_sub(since));
            maps::send(&OffCpuRecord { header: header::<OffCpuRecord>(pid, tgid, now), start_ns: since });
        }
    }
    0
}

/// Entry of `main` in the launched program.
#[uprobe]
pub fn main_entry(_ctx: ProbeContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if maps::is_traced(tgid) {
        maps::send(&MainRecord { header: header::<MainRecord>(pid, tgid, unsafe { bpf_ktime_get_ns() }), _reserved: 0 });
    }
    0
}
