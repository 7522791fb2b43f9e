//! Return probes with room for every task inside the function.
//!
//! A kretprobe holds one instance per task between a function's entry and its return, from a
//! pool of `maxactive` made when it is registered. A probe made by `perf_event_open` (the
//! kprobe PMU, what aya uses) cannot say how many: the kernel takes `num_possible_cpus()`
//! (non-preemptible kernels, Debian's 5.10) or `max(10, 2 × CPUs)`. An exec-path function
//! holds a task for the whole exec, asleep while the image is read, so a few execs at once use
//! the pool up and the kernel skips their returns: exact mode then sees entries without
//! returns. On 5.10 `do_execveat_common` is timed this way (fentry refuses its by-value
//! argument) and three concurrent execs in a two-CPU guest lost returns.
//!
//! So a return probe is made through tracefs's `kprobe_events`, whose syntax takes the pool's
//! size (`r4096:GROUP/EVENT SYMBOL`), and execprof's program is attached to that event's
//! perf event. The event is removed when the probe is dropped; events left by an execprof that
//! was killed are removed at the next start ([`remove_stale`]). tracefs's `kprobe_profile`
//! counts the returns the kernel still missed, which the run reports as a loss.

use std::{
    fs::OpenOptions,
    io::Write as _,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

/// The tracefs group execprof's return probes are made in.
pub(crate) const GROUP: &str = "execprof";

/// The most instances tracefs accepts (`KRETPROBE_MAXACTIVE_MAX`).
const KRETPROBE_MAXACTIVE_MAX: u32 = 4096;

/// Instances per possible CPU: 32 times the kernel's default on a non-preemptible kernel, so
/// a two-CPU machine has room for 128 tasks inside one function at once (64 bytes each, 8 KiB
/// per probed function), a 64-CPU one for 4,096.
const PER_CPU: u32 = 64;

/// The pool's size on a machine of `possible_cpus`.
pub(crate) fn max_active(possible_cpus: u32) -> u32 {
    possible_cpus.max(1).saturating_mul(PER_CPU).min(KRETPROBE_MAXACTIVE_MAX)
}

/// Where the probe goes: a function by name, or by address where the name is ambiguous.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target<'a> {
    Symbol(&'a str),
    Address(u64),
}

/// A return probe made through tracefs, with a BPF program attached; removed on drop.
#[derive(Debug)]
pub(crate) struct ReturnProbe {
    perf: Option<OwnedFd>,
    tracefs: PathBuf,
    event: String,
}

impl ReturnProbe {
    /// Makes the event `execprof/r<pid>_<slot>` on `target` with [`max_active`] instances and
    /// attaches `program` (a loaded kprobe program) to it.
    pub(crate) fn attach(tracefs: &Path, program: BorrowedFd<'_>, target: Target<'_>, slot: u32) -> Result<Self> {
        let event = event_name(std::process::id(), slot);
        let cpus = aya::util::nr_cpus().map_or(1, |n| n as u32);
        let definition = definition(&event, target, max_active(cpus));
        append(&tracefs.join("kprobe_events"), &definition)
            .with_context(|| format!("writing `{}` to {}/kprobe_events", definition.trim_end(), tracefs.display()))?;
        // From here the event exists: dropping `probe` removes it, whatever fails next.
        let mut probe = Self { perf: None, tracefs: tracefs.to_owned(), event };
        let id_file = tracefs.join("events").join(GROUP).join(&probe.event).join("id");
        let id: u64 = std::fs::read_to_string(&id_file)
            .with_context(|| format!("reading {}", id_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} does not hold a number", id_file.display()))?;
        let perf = open_tracepoint_event(id)?;
        ioctl(&perf, PERF_EVENT_IOC_SET_BPF, program.as_raw_fd() as libc::c_ulong).context("PERF_EVENT_IOC_SET_BPF")?;
        ioctl(&perf, PERF_EVENT_IOC_ENABLE, 0).context("PERF_EVENT_IOC_ENABLE")?;
        probe.perf = Some(perf);
        Ok(probe)
    }

    /// The returns the kernel missed so far (its pool was empty, or the probe was already
    /// running on that CPU), from tracefs's `kprobe_profile`; None where it cannot be read.
    pub(crate) fn missed(&self) -> Option<u64> {
        let profile = std::fs::read_to_string(self.tracefs.join("kprobe_profile")).ok()?;
        profile_misses(&profile, &self.event)
    }
}

impl Drop for ReturnProbe {
    fn drop(&mut self) {
        if let Some(perf) = self.perf.take() {
            let _ = ioctl(&perf, PERF_EVENT_IOC_DISABLE, 0);
            drop(perf);
        }
        if let Err(e) = append(&self.tracefs.join("kprobe_events"), &format!("-:{GROUP}/{}\n", self.event)) {
            log::warn!(
                "could not remove the return probe {GROUP}/{} ({e}); remove it with: echo '-:{GROUP}/{}' >> {}/kprobe_events",
                self.event,
                self.event,
                self.tracefs.display()
            );
        }
    }
}

/// Removes the return probes an execprof that no longer runs left in tracefs (killed before
/// it could remove them). Returns how many it removed.
pub(crate) fn remove_stale(tracefs: &Path) -> usize {
    let Ok(events) = std::fs::read_to_string(tracefs.join("kprobe_events")) else { return 0 };
    let stale: Vec<String> = stale_events(&events, |pid| Path::new(&format!("/proc/{pid}")).exists());
    stale
        .iter()
        .filter(|event| {
            let removed = append(&tracefs.join("kprobe_events"), &format!("-:{GROUP}/{event}\n"));
            if let Err(e) = &removed {
                log::debug!("could not remove the stale return probe {GROUP}/{event}: {e}");
            }
            removed.is_ok()
        })
        .count()
}

fn event_name(pid: u32, slot: u32) -> String {
    format!("r{pid}_{slot}")
}

/// The `kprobe_events` line that makes the probe.
fn definition(event: &str, target: Target<'_>, max_active: u32) -> String {
    match target {
        Target::Symbol(name) => format!("r{max_active}:{GROUP}/{event} {name}\n"),
        Target::Address(address) => format!("r{max_active}:{GROUP}/{event} {address:#x}\n"),
    }
}

/// The events of [`GROUP`] in `kprobe_events` whose process `alive` says is gone.
fn stale_events(kprobe_events: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    kprobe_events
        .lines()
        .filter_map(|line| {
            // "r4096:execprof/r1234_5 do_execveat_common"
            let (_, rest) = line.split_once(':')?;
            let (group_event, _) = rest.split_once(' ').unwrap_or((rest, ""));
            let event = group_event.strip_prefix(GROUP)?.strip_prefix('/')?;
            let pid: u32 = event.strip_prefix('r')?.split_once('_')?.0.parse().ok()?;
            (!alive(pid)).then(|| event.to_owned())
        })
        .collect()
}

/// The misses of `event` in `kprobe_profile` ("EVENT HITS MISSES" per line).
fn profile_misses(profile: &str, event: &str) -> Option<u64> {
    profile.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next()? == event).then_some(())?;
        let _hits = fields.next()?;
        fields.next()?.parse().ok()
    })
}

fn append(file: &Path, text: &str) -> std::io::Result<()> {
    OpenOptions::new().append(true).open(file)?.write_all(text.as_bytes())
}

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
const PERF_FLAG_FD_CLOEXEC: libc::c_long = 1 << 3;
const PERF_EVENT_IOC_ENABLE: libc::Ioctl = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::Ioctl = 0x2401;
/// `_IOW('$', 8, u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::Ioctl = 0x4004_2408;

/// `struct perf_event_attr` as far as `PERF_ATTR_SIZE_VER5` (what every kernel from 4.1
/// takes), zero but for the fields a tracepoint event for BPF needs.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

/// A perf event of tracepoint `id` on every task (CPU 0 names the event; a BPF program
/// attached to it runs wherever the tracepoint fires).
fn open_tracepoint_event(id: u64) -> Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: id,
        sample_period: 1,
        sample_type: PERF_SAMPLE_RAW,
        wakeup_events: 1,
        ..Default::default()
    };
    // Every task, named by CPU 0, no group: passed as the longs syscall(2) reads.
    let (pid, cpu, group): (libc::c_long, libc::c_long, libc::c_long) = (-1, 0, -1);
    // SAFETY: attr is a valid perf_event_attr of the size it declares; the other arguments
    // are plain integers.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, pid, cpu, group, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        bail!("perf_event_open of tracepoint {id}: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn ioctl(fd: &OwnedFd, request: libc::Ioctl, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: perf event ioctls on a perf event descriptor with an integer argument.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) } < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_say_the_pools_size() {
        assert_eq!(definition("r12_3", Target::Symbol("do_execveat_common"), 128), "r128:execprof/r12_3 do_execveat_common\n");
        assert_eq!(definition("r12_4", Target::Address(0xffff_ffff_8100_0000), 4096), "r4096:execprof/r12_4 0xffffffff81000000\n");
    }

    #[test]
    fn the_pool_grows_with_the_cpus_up_to_the_kernels_most() {
        assert_eq!(max_active(0), 64);
        assert_eq!(max_active(2), 128);
        assert_eq!(max_active(64), 4096);
        assert_eq!(max_active(1024), 4096);
    }

    #[test]
    fn stale_events_are_execprofs_of_dead_processes() {
        let events = "r4096:execprof/r12_3 do_execveat_common\n\
                      r4096:execprof/r99_0 bprm_execve\n\
                      r:kprobes/aya_12_r_x do_execveat_common\n\
                      p:execprof_other/r5_1 foo\n";
        assert_eq!(stale_events(events, |pid| pid == 99), vec!["r12_3".to_owned()]);
        assert!(stale_events("", |_| false).is_empty());
    }

    #[test]
    fn misses_are_read_from_the_profile() {
        let profile = "  r12_3                                          1500               7\n  r12_30   2 0\n";
        assert_eq!(profile_misses(profile, "r12_3"), Some(7));
        assert_eq!(profile_misses(profile, "r12_30"), Some(0));
        assert_eq!(profile_misses(profile, "r12_4"), None);
    }
}
