//! cpu-clock sampling with kernel stacks, kept only for traced threads inside an exec
//! attempt or fork-family call (user space ties each to its call): per-function attribution on kernels without kprobes or fentry.
use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, generated},
    macros::perf_event,
    programs::PerfEventContext,
};
use profiler_common::{RecordHeader, SampleRecord, WireRecord, counter, limits::MAX_FRAMES};

use crate::{maps, task};

#[perf_event]
pub fn sample_exec_stack(ctx: PerfEventContext) -> u32 {
    let (pid, tgid) = task::current_ids();
    if crate::aggregate::on() {
        crate::aggregate::sample(&ctx, pid, tgid);
        return 0;
    }
    if !maps::is_traced(tgid) || !maps::in_call(pid) {
        return 0;
    }
    let Some(mut entry) = maps::EVENTS.reserve::<SampleRecord>(0) else {
        maps::count(counter::RING_FULL);
        return 0;
    };
    // SAFETY: our reservation, sized for one SampleRecord.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    rec.header = RecordHeader {
        kind: SampleRecord::KIND,
        cpu: unsafe { bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid,
        tgid,
    };
    rec._reserved = 0;
    // Flags 0: kernel stack, no frames skipped. Returns bytes written.
    let n = unsafe { generated::bpf_get_stack(ctx.as_ptr(), rec.frames.as_mut_ptr().cast(), (MAX_FRAMES * 8) as u32, 0) };
    rec.nr_frames = if n > 0 { (n as u32) / 8 } else { 0 };
    entry.submit(maps::NO_WAKEUP);
    0
}
