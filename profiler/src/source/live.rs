//! The live event loop, on one current-thread tokio runtime: it waits at once on the ring
//! buffer (its fd, and a 10 ms timer because records are submitted without wake-ups), on the
//! traced command (a pidfd), on SIGINT/SIGTERM/SIGHUP, and on a one-second ticker for
//! progress and recording checkpoints. Every ring buffer item is copied out as it arrives and
//! handed to the pipeline's worker thread ([`super::backlog`]).
//!
//! Signals: the first SIGINT, SIGTERM or SIGHUP stops the launched tree (the signal is passed
//! on to every traced process, then SIGKILL after half a second), drains what is left and
//! ends the loop, so a partial report is still made; a second one ends the loop at once. In a
//! running-system scope (`--pid`, `--cgroup`, `--all`) the traced processes are not ours: a
//! signal (or `--duration`) ends the trace, and is passed on to the window command only.
use std::{
    io::IsTerminal as _,
    os::fd::{FromRawFd as _, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use crate::{
    assemble::events::EventSink,
    kernel::tracer::{EbpfLog, Tracer},
    launch::child::RunningChild,
    model::meta::{ExitStatus, TraceEnd},
    pipeline::Pipeline,
    source::backlog::Backlog,
};

/// Records are submitted without wake-ups (see the eBPF side), so the reader also wakes on a
/// timer: at 10 ms and ~200k records/s the ring buffer holds far more than one period needs.
const POLL: Duration = Duration::from_millis(10);
/// After the first signal, how long the tree gets to end on its own before SIGKILL.
const GRACE: Duration = Duration::from_millis(500);

/// How the traced command's run ended.
pub(crate) struct LiveEnd {
    pub status: ExitStatus,
    pub command_wall_ns: u64,
    /// Set when a signal cut the run short: which.
    pub partial: Option<String>,
}

/// Progress on standard error: on a terminal always, elsewhere when asked.
pub(crate) struct Progress {
    enabled: bool,
    terminal: bool,
    shown: bool,
    started: Instant,
    last: (Instant, u64),
}

impl Progress {
    pub(crate) fn new(requested: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let now = Instant::now();
        Self { enabled: requested || terminal, terminal, shown: false, started: now, last: (now, 0) }
    }

    /// About once a second: elapsed time, attempts analysed and their rate, processes alive,
    /// losses, and the records waiting for the analysis (`waiting`, bytes) when there are any.
    fn tick(&mut self, attempts: u64, alive: usize, lost: u64, waiting: usize) {
        let now = Instant::now();
        let elapsed = now - self.started;
        let rate = (attempts - self.last.1) as f64 / (now - self.last.0).as_secs_f64().max(1e-3);
        self.last = (now, attempts);
        if !self.enabled || elapsed < Duration::from_secs(2) {
            return;
        }
        let mut line = format!(
            "execprof: {:.0} s, {} exec attempts ({}/s), {alive} process(es) alive, {lost} records lost",
            elapsed.as_secs_f64(),
            group(attempts),
            group(rate as u64)
        );
        if waiting >= 1 << 20 {
            line.push_str(&format!(", {} MiB of records waiting for the analysis", waiting >> 20));
        }
        if self.terminal {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown && self.terminal {
            eprint!("\r\x1b[K");
        }
        self.shown = false;
    }
}

/// 1234567 → "1,234,567".
pub(crate) fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Everything the ring buffer holds now, into the pipeline (on this thread).
pub(crate) fn drain<S: EventSink>(ring: &mut RingBuf<MapData>, pipeline: &mut Pipeline<S>) {
    while let Some(item) = ring.next() {
        pipeline.item(&item);
    }
}

/// Everything the ring buffer holds now, copied out and handed to the pipeline's worker.
fn hand_over(ring: &mut RingBuf<MapData>, backlog: &mut Backlog<'_, '_>) {
    while let Some(item) = ring.next() {
        backlog.item(&item);
    }
    backlog.flush();
}

/// Registers an fd-backed object with the event loop.
pub(crate) fn watch<T: std::os::fd::AsRawFd>(inner: T) -> std::io::Result<AsyncFd<T>> {
    // SAFETY: every `T` used here (the ring buffer's map, an OwnedFd) owns its fd, keeps it
    // open and returns the same one for as long as it lives.
    unsafe { AsyncFd::register_with_interest(inner, tokio::io::Interest::READABLE) }.map_err(std::io::Error::from)
}

fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: plain syscall; a returned fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("pidfd_open on the traced command (Linux 5.3+)");
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn kill_all(pids: &[u32], sig: i32) {
    for &p in pids {
        // SAFETY: plain syscall; a process that is gone gives ESRCH, which is fine.
        unsafe { libc::kill(p as i32, sig) };
    }
}

/// What the loop reads from the kernel besides the command.
pub(crate) struct Feeds {
    pub ring: RingBuf<MapData>,
    /// The eBPF side's log (`-v`).
    pub logger: Option<EbpfLog>,
    /// Holds the kernel's BPF run-time statistics on until the traced tree is gone (`--probe-costs`).
    /// They are switched on before the command runs and off after it: switching them flips a
    /// static key, i.e. patches kernel text, which under QEMU/TCG crashed a 6.12 guest when
    /// done while the chain ran at full speed.
    pub run_stats: Option<std::os::fd::OwnedFd>,
}

/// What ends a live run, and who gets the signals execprof receives.
pub(crate) struct Watch {
    /// The command execprof started, if any: the launched tree's root, or the window command
    /// of a running-system scope (`--all -- sleep 10`).
    pub child: Option<RunningChild>,
    /// The launched tree: a signal is passed on to every traced process, and the run waits for
    /// the last of them. Otherwise traced processes are never signalled: they are not ours.
    pub launched: bool,
    /// `--pid`: the run ends when no traced process is left.
    pub until_scope_gone: bool,
    /// `--duration`: the run ends this long after it began.
    pub duration: Option<Duration>,
}

/// Runs until what `watch` waits for is over, or a signal stops it; hands every record to
/// the pipeline's worker (`pipeline`).
pub(crate) async fn trace(
    tracer: &Tracer,
    feeds: Feeds,
    pipeline: &mut Backlog<'_, '_>,
    watch: Watch,
    released: Instant,
    progress: &mut Progress,
) -> Result<LiveEnd> {
    let Feeds { ring, logger, run_stats } = feeds;
    let Watch { mut child, launched, until_scope_gone, duration } = watch;
    let mut ring = self::watch(ring).context("watching the ring buffer")?;
    let mut logger = logger.map(self::watch).transpose().context("watching the eBPF side's log")?;
    let pidfd = match &child {
        Some(c) => Some(self::watch(pidfd_open(c.pid())?).context("watching the traced command")?),
        None => None,
    };
    let (mut sigint, mut sigterm, mut sighup) =
        (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?, signal(SignalKind::hangup())?);
    let mut poll = interval(POLL);
    poll.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut second = interval(Duration::from_secs(1));
    second.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let deadline = duration.map(|d| tokio::time::Instant::from_std(released + d));

    let mut status: Option<(ExitStatus, u64)> = None;
    let mut stop: Option<(&'static str, Instant)> = None;
    let mut traced_end: Option<TraceEnd> = None;
    let mut recording_failure_said = false;
    let mut waiting_announced = false;
    loop {
        let signal_name = tokio::select! {
            r = ring.readable_mut() => {
                let mut guard = r.context("waiting on the ring buffer")?;
                hand_over(guard.get_inner_mut(), pipeline);
                guard.clear_ready();
                None
            }
            _ = poll.tick() => {
                hand_over(ring.get_mut(), pipeline);
                None
            }
            r = async { pidfd.as_ref().expect("guarded by the select condition").readable().await }, if pidfd.is_some() && status.is_none() => {
                let mut guard = r.context("waiting on the traced command")?;
                if let Some(s) = child.as_mut().expect("a pidfd has its child").try_wait()? {
                    status = Some((s, released.elapsed().as_nanos() as u64));
                } else {
                    guard.clear_ready();
                }
                None
            }
            r = async { logger.as_mut().expect("guarded by the select condition").readable_mut().await }, if logger.is_some() => {
                let mut guard = r.context("waiting on the eBPF side's log")?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
                None
            }
            _ = async { tokio::time::sleep_until(deadline.expect("guarded by the select condition")).await }, if deadline.is_some() && stop.is_none() => {
                Some("--duration")
            }
            _ = sigint.recv() => Some("SIGINT"),
            _ = sigterm.recv() => Some("SIGTERM"),
            _ = sighup.recv() => Some("SIGHUP"),
            _ = second.tick() => {
                pipeline.checkpoint();
                progress.tick(pipeline.attempts(), tracer.traced_alive(), tracer.ring_full_so_far(), pipeline.waiting());
                None
            }
        };
        // Said when it happens, not only at the end: the run goes on without it.
        say_recording_failure(pipeline, progress, &mut recording_failure_said);
        if let Some(name) = signal_name {
            if stop.is_some() {
                // A second signal: stop waiting for anything.
                kill_all(&signalled(pipeline, child.as_ref(), launched), libc::SIGKILL);
                hand_over(ring.get_mut(), pipeline);
                break;
            }
            let sig = match name {
                "SIGTERM" => libc::SIGTERM,
                "SIGHUP" => libc::SIGHUP,
                _ => libc::SIGINT,
            };
            traced_end = Some(if name == "--duration" { TraceEnd::Duration } else { TraceEnd::Signal });
            kill_all(&signalled(pipeline, child.as_ref(), launched), sig);
            stop = Some((name, Instant::now()));
        }
        if let Some((_, at)) = stop {
            let waited = at.elapsed();
            if waited > GRACE {
                kill_all(&signalled(pipeline, child.as_ref(), launched), libc::SIGKILL);
            }
            if status.is_none()
                && let Some(c) = child.as_mut()
                && let Some(s) = c.try_wait()?
            {
                status = Some((s, released.elapsed().as_nanos() as u64));
            }
            // Running processes are not waited for: only the window command, if any.
            if !launched && (child.is_none() || status.is_some()) {
                break;
            }
            if waited > 2 * GRACE {
                break;
            }
        }
        if launched && status.is_some() {
            if tracer.traced_alive() == 0 {
                break;
            }
            if !waiting_announced && stop.is_none() && released.elapsed().as_nanos() as u64 > status.map_or(0, |s| s.1) + 1_000_000_000 {
                progress.clear();
                eprintln!(
                    "execprof: the command exited; waiting for {} traced descendant process(es) to finish (Ctrl-C to stop them)",
                    tracer.traced_alive()
                );
                waiting_announced = true;
            }
        }
        if !launched && child.is_some() && status.is_some() {
            // The window command ended: so does the window.
            break;
        }
        if until_scope_gone && stop.is_none() && tracer.traced_alive() == 0 {
            traced_end = Some(TraceEnd::AllExited);
            break;
        }
    }
    drop(run_stats);
    // The last records of the tree are in the buffer already; then the enters of exec
    // attempts still in flight, which the kernel side holds until their next record.
    hand_over(ring.get_mut(), pipeline);
    for enter in tracer.held_enters()? {
        pipeline.item(crate::record::enter_bytes(&enter));
    }
    pipeline.flush();
    say_recording_failure(pipeline, progress, &mut recording_failure_said);
    if let Some(l) = &mut logger {
        l.get_mut().flush();
    }
    progress.clear();
    let (status, command_wall_ns) = match (status, child.as_mut()) {
        (Some(s), _) => s,
        // Only after a second signal: the command was SIGKILLed a moment ago.
        (None, Some(c)) => (c.wait_blocking()?, released.elapsed().as_nanos() as u64),
        (None, None) => (ExitStatus::Traced(traced_end.unwrap_or(TraceEnd::Signal)), released.elapsed().as_nanos() as u64),
    };
    // Stopping the launched tree cuts its run short; ending a running-system trace with
    // Ctrl-C or --duration is how such a trace ends.
    let partial = if launched { stop.map(|(name, _)| format!("interrupted by {name}")) } else { None };
    Ok(LiveEnd { status, command_wall_ns, partial })
}

/// The processes a signal to execprof is passed on to: in the launched tree, the command and
/// every process the records say is alive; otherwise only the window command.
fn signalled(pipeline: &mut Backlog<'_, '_>, child: Option<&RunningChild>, launched: bool) -> Vec<u32> {
    let mut pids = if launched { pipeline.alive() } else { Vec::new() };
    pids.extend(child.map(|c| c.pid() as u32));
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// While the report is being made, a signal ends execprof at once (the traced tree is gone
/// already), saying so on one line and removing `cleanup` (the built-in chain's directory).
/// The signals are blocked in this thread, and so in every thread started after it, and
/// taken by a thread of their own, where removing files is safe.
pub(crate) fn exit_on_signal_while_reporting(cleanup: Vec<std::path::PathBuf>) {
    let set = super::backlog::block_stop_signals();
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: a filled sigset_t, and a place for the signal's number.
        unsafe { libc::sigwait(&set, &mut sig) };
        eprintln!("\nexecprof: interrupted while making the report; exiting without it");
        for dir in &cleanup {
            let _ = std::fs::remove_dir_all(dir);
        }
        // SAFETY: ends the process at once, as meant: the report is not to be made.
        unsafe { libc::_exit(128 + sig) };
    });
}

/// Says "analysing …" if making the report takes longer than a second.
pub(crate) struct SlowNotice(Option<std::sync::mpsc::Sender<()>>);

impl SlowNotice {
    pub(crate) fn start(what: String) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(1)) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                eprintln!("execprof: {what}");
            }
        });
        Self(Some(tx))
    }
}

impl Drop for SlowNotice {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// Warns, once, that the recording stopped (a full disk): tracing and the report go on.
fn say_recording_failure(pipeline: &Backlog<'_, '_>, progress: &mut Progress, said: &mut bool) {
    if !*said && let Some(e) = pipeline.recorder_error() {
        progress.clear();
        eprintln!("execprof: warning: {e}; tracing goes on, and the report will be marked incomplete");
        *said = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_digits() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(7_000_002), "7,000,002");
    }
}
