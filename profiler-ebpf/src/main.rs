//! execprof's kernel side: exact timestamps at the exec path's tracepoint boundaries for the
//! traced process tree only. Tiny on purpose: filter first, send one small record per
//! boundary, keep no per-attempt state (user space joins the records), count every loss.
#![no_std]
#![no_main]
// Inline BPF assembly for the aggregates' atomic adds ([`aggregate`]).
#![feature(asm_experimental_arch)]

mod aggregate;
mod arch;
mod argv;
mod attempt;
mod boundaries;
mod doctor;
mod exact;
mod maps;
mod sampling;
mod sched;
mod syscall_events;
mod syscalls;
mod task;
mod timeline;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// The object's license, as the crate's (`MIT OR GPL-2.0-only`): one the kernel takes as
/// GPL-compatible, which the GPL-only helpers it calls (`bpf_probe_read_kernel`,
/// `bpf_get_stackid`) require.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
