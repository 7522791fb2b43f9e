//! Minimal programs `execprof doctor` loads and attaches to learn, by trying, which attach
//! mechanisms this kernel allows. Each counts its hits, so "attached" is backed by "fired".
use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe, map, perf_event, raw_tracepoint, tracepoint, uprobe},
    maps::{Array, StackTrace},
    programs::{
        FEntryContext, FExitContext, PerfEventContext, ProbeContext, RawTracePointContext, RetProbeContext, TracePointContext,
        tracing::StackIdContext as _,
    },
};
use profiler_common::doctor as slot;

#[map]
static DOCTOR_HITS: Array<u64> = Array::with_max_entries(slot::COUNT, 0);

#[map]
static DOCTOR_STACKS: StackTrace = StackTrace::with_max_entries(64, 0);

#[inline(always)]
fn hit(index: u32) {
    if let Some(p) = DOCTOR_HITS.get_ptr_mut(index) {
        // Racy across CPUs, which is fine: the doctor only asks "did it fire at all".
        unsafe { *p += 1 };
    }
}

#[tracepoint]
pub fn doctor_tracepoint(_ctx: TracePointContext) -> u32 {
    hit(slot::TRACEPOINT);
    0
}

#[raw_tracepoint]
pub fn doctor_raw_tracepoint(_ctx: RawTracePointContext) -> u32 {
    hit(slot::RAW_TRACEPOINT);
    0
}

#[kprobe]
pub fn doctor_kprobe(_ctx: ProbeContext) -> u32 {
    hit(slot::KPROBE);
    0
}

#[kretprobe]
pub fn doctor_kretprobe(_ctx: RetProbeContext) -> u32 {
    hit(slot::KRETPROBE);
    0
}

#[fentry]
pub fn doctor_fentry(_ctx: FEntryContext) -> u32 {
    hit(slot::FENTRY);
    0
}

#[fexit]
pub fn doctor_fexit(_ctx: FExitContext) -> u32 {
    hit(slot::FEXIT);
    0
}

#[uprobe]
pub fn doctor_uprobe(_ctx: ProbeContext) -> u32 {
    hit(slot::UPROBE);
    0
}

/// Counts a sample only when a kernel stack was captured: sampling without stacks would not
/// serve per-function attribution.
#[perf_event]
pub fn doctor_perf_event(ctx: PerfEventContext) -> u32 {
    hit(slot::PERF_EVENT);
    if ctx.get_stackid(&DOCTOR_STACKS, 0).is_ok() {
        hit(slot::KERNEL_STACK);
    }
    0
}
