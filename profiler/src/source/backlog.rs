//! A live run's records go through the pipeline on a thread of their own, at the lowest
//! priority (`SCHED_IDLE`), so that decoding, assembling and analysing them does not take CPU time from the
//! traced command: the event loop only copies ring buffer items into batches and hands them
//! over. Where a CPU is free the worker keeps up as before; where the command keeps every CPU
//! busy (one vCPU, `cargo xtask overhead`), the worker waits for it, and the batches it has not
//! taken yet are what the report waits for at the end. Nothing is dropped: the batches are in
//! memory, and above [`BOOST_BYTES`] of them the worker gets its normal priority back until
//! it has caught up, so memory stays bounded and the records are analysed as they were before.
//!
//! A batch is a buffer of [`BATCH_BYTES`] filled until the next item would not fit: it never
//! grows, as growing copies what it holds (under icount a `rep movsb` counts every byte: the
//! copies of batches that doubled were ~5,000 instructions per chain step). The worker hands
//! emptied buffers back for reuse ([`POOL_BUFFERS`] at most). None are
//! allocated ahead: 16 MiB of buffers made ready before the command started cost the chain
//! ~6,000 more instructions a step in the lab's 1 GiB guest (`cargo xtask overhead`, the
//! boundaries alone: 230,983 against 224,120), in its own page allocations.
//!
//! The event loop never waits for the worker while the command runs (but in [`Backlog::alive`],
//! which boosts it first): a `SCHED_IDLE` thread preempted while holding a lock keeps it for as
//! long as the command keeps the CPU, and the ring buffer fills meanwhile. So nothing is
//! locked between them, and the worker never frees the event loop's memory, whose allocator
//! arena's lock it would take (4 runs side by side on 2 CPUs lost up to 35,921 records that
//! way): the buffers go back through a channel, the pipeline is built on the worker, and both
//! channels are bounded ones, whose slots are allocated once (an unbounded one allocates
//! blocks on one side that the other frees). When the worker is [`MESSAGES`] behind, the
//! event loop boosts it and then waits, as it did when it analysed the records itself. What
//! is left, they share: the process's memory map, whose lock a page fault of the event loop
//! may wait for while the worker, preempted inside `mmap`, holds it. A watchdog thread sees the
//! event loop stop turning ([`STALL`]) and gives the worker execprof's own priority back, so it
//! gets the CPU, finishes and lets go (without it, 1 in 16 such runs still lost records).
//!
//! The order of the records is the ring buffer's: one channel, one consumer. Whatever the event
//! loop needs from the pipeline goes through it in the same order ([`Backlog::alive`] waits for
//! every batch sent before it), or is published by the worker ([`Backlog::attempts`]).
use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering},
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread::{Scope, ScopedJoinHandle},
};

use crate::pipeline::RunPipeline;

/// Batches waiting above this many bytes give the worker its normal priority back.
pub(crate) const BOOST_BYTES: usize = 64 << 20;
/// The event loop turns at least every 10 ms (its poll timer); this long without a turn while
/// the worker is at `SCHED_IDLE`, the watchdog boosts the worker.
const STALL: std::time::Duration = std::time::Duration::from_millis(30);
/// Messages the event loop can send ahead of the worker.
const MESSAGES: usize = 4096;
/// A batch's buffer (a larger item gets a buffer of its own).
const BATCH_BYTES: usize = 256 << 10;
/// Emptied batch buffers kept for reuse, at most, and the largest one kept.
const POOL_BUFFERS: usize = 16;
const POOL_BUFFER_BYTES: usize = 4 << 20;

/// What the event loop sends the worker, in the ring buffer's order.
enum Message {
    /// Ring buffer items, each as its length (u32, native order) and its bytes.
    Items(Vec<u8>),
    /// Close the recording's current frame (once a second).
    Checkpoint,
    /// The processes alive as the records so far tell, once every batch before is in.
    Alive(SyncSender<Vec<u32>>),
}

/// What the worker publishes for the event loop.
#[derive(Default)]
struct Shared {
    /// Bytes of batches sent and not yet fed to the pipeline.
    waiting: AtomicUsize,
    /// Exec attempts completed so far (for the progress line).
    attempts: AtomicU64,
    /// The worker's thread id, once it runs (0 before).
    tid: AtomicI32,
    /// Why the recording stopped, once it has.
    recorder_error: OnceLock<String>,
    /// The worker is at execprof's own priority (boosted), not at `SCHED_IDLE`.
    boosted: AtomicBool,
    /// Turns of the event loop (the watchdog's heartbeat), and the end of the run.
    turns: AtomicU64,
    done: AtomicBool,
    /// execprof's own nice value, which the worker gets back when boosted.
    normal_nice: i32,
}

/// Appends `item` to `batch`: its length, then its bytes.
fn put(batch: &mut Vec<u8>, item: &[u8]) {
    batch.extend_from_slice(&(item.len() as u32).to_ne_bytes());
    batch.extend_from_slice(item);
}

/// The items of a batch, in the order they were put in it ([`Backlog::item`]).
fn items(batch: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = batch;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let (item, tail) = tail.split_at(u32::from_ne_bytes(*len) as usize);
        rest = tail;
        Some(item)
    })
}

/// The run pipeline on its worker thread, and the event loop's end of it.
pub(crate) struct Backlog<'scope, 'env> {
    tx: SyncSender<Message>,
    shared: Arc<Shared>,
    worker: ScopedJoinHandle<'scope, RunPipeline<'env>>,
    watchdog: ScopedJoinHandle<'scope, ()>,
    /// Ends the watchdog when the backlog is dropped without [`Backlog::finish`] (a command
    /// that could not start): the scope it runs in waits for it.
    _stop: StopWatch,
    /// The batch being filled: each item as its length (u32, native order) and its bytes.
    batch: Vec<u8>,
    /// Buffers the worker is done with, and those kept for the next batches.
    returned: Receiver<Vec<u8>>,
    pool: Vec<Vec<u8>>,
}

impl<'scope, 'env> Backlog<'scope, 'env> {
    /// Starts the worker in `scope`, with the pipeline `make` builds there.
    pub(crate) fn start(
        scope: &'scope Scope<'scope, 'env>,
        make: impl FnOnce() -> RunPipeline<'env> + Send + 'scope,
    ) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(MESSAGES);
        let (give_back, returned) = sync_channel(2 * POOL_BUFFERS);
        let shared = Arc::new(Shared { normal_nice: nice_of(0), ..Shared::default() });
        let worker = {
            let shared = Arc::clone(&shared);
            // Named for `top` and perf (a thread's name is its comm: 15 bytes at most).
            std::thread::Builder::new()
                .name("execprof-worker".to_owned())
                .spawn_scoped(scope, move || work(make(), &rx, &give_back, &shared))
        };
        let watchdog = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name("execprof-watch".to_owned()).spawn_scoped(scope, move || watch(&shared))
        };
        let _stop = StopWatch(Arc::clone(&shared));
        Ok(Self { tx, shared, worker: worker?, watchdog: watchdog?, _stop, batch: Vec::new(), returned, pool: Vec::new() })
    }

    /// A ring buffer item, copied into the batch being filled.
    pub(crate) fn item(&mut self, item: &[u8]) {
        let need = 4 + item.len();
        if self.batch.capacity() - self.batch.len() < need {
            self.flush();
            let reused = self.pool.pop().filter(|b| b.capacity() >= need);
            self.batch = reused.unwrap_or_else(|| Vec::with_capacity(BATCH_BYTES.max(need)));
        }
        put(&mut self.batch, item);
    }

    /// Hands the batch being filled to the worker; a turn of the event loop.
    pub(crate) fn flush(&mut self) {
        self.shared.turns.fetch_add(1, Ordering::Relaxed);
        self.take_returns();
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let waiting = self.shared.waiting.fetch_add(batch.len(), Ordering::Relaxed) + batch.len();
        self.send(Message::Items(batch));
        // Memory stays bounded: far behind, the worker runs at execprof's own priority until
        // it has caught up to a quarter of the bound.
        if waiting > BOOST_BYTES {
            boost(&self.shared, true);
        } else if self.shared.boosted.load(Ordering::Relaxed) && waiting < BOOST_BYTES / 4 {
            boost(&self.shared, false);
        }
    }

    /// Closes the recording's current frame once the worker gets there.
    pub(crate) fn checkpoint(&mut self) {
        self.flush();
        self.send(Message::Checkpoint);
    }

    /// The processes alive as every record sent so far tells: waits for the worker, at
    /// execprof's own priority, to take every batch sent before.
    pub(crate) fn alive(&mut self) -> Vec<u32> {
        self.flush();
        boost(&self.shared, true);
        let (reply, answer) = sync_channel(1);
        self.send(Message::Alive(reply));
        answer.recv().unwrap_or_default()
    }

    /// Exec attempts completed as far as the worker has got.
    pub(crate) fn attempts(&self) -> u64 {
        self.shared.attempts.load(Ordering::Relaxed)
    }

    /// Bytes of records handed over and not yet analysed.
    pub(crate) fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Why the recording stopped, once the worker has seen it stop.
    pub(crate) fn recorder_error(&self) -> Option<&str> {
        self.shared.recorder_error.get().map(String::as_str)
    }

    /// The worker takes what is left at execprof's own priority; the pipeline comes back.
    pub(crate) fn finish(mut self) -> RunPipeline<'env> {
        self.flush();
        boost(&self.shared, true);
        let Self { tx, worker, watchdog, _stop, .. } = self;
        drop(_stop);
        let _ = watchdog.join();
        drop(tx);
        match worker.join() {
            Ok(pipeline) => pipeline,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The worker's returned buffers: kept for reuse up to the pool's size, freed here
    /// otherwise.
    fn take_returns(&mut self) {
        while let Ok(b) = self.returned.try_recv() {
            if self.pool.len() < POOL_BUFFERS && b.capacity() <= POOL_BUFFER_BYTES {
                self.pool.push(b);
            }
        }
    }

    fn send(&self, message: Message) {
        // The worker ends only when the sender is dropped, or by a panic, which `finish`
        // passes on: a send to a worker gone is dropped.
        match self.tx.try_send(message) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(message)) => {
                // MESSAGES behind: the worker at execprof's own priority, and the event loop
                // waits for a slot.
                boost(&self.shared, true);
                let _ = self.tx.send(message);
            }
        }
    }
}

/// Tells the watchdog to end, when dropped.
struct StopWatch(Arc<Shared>);

impl Drop for StopWatch {
    fn drop(&mut self) {
        self.0.done.store(true, Ordering::Relaxed);
    }
}

/// The worker at execprof's own priority (`on`) or at the lowest one.
fn boost(shared: &Shared, on: bool) {
    if on == shared.boosted.load(Ordering::Relaxed) {
        return;
    }
    let tid = shared.tid.load(Ordering::Acquire);
    let priority = if on { Priority::Normal(shared.normal_nice) } else { Priority::Idle };
    if tid != 0 && set_priority(tid, priority) {
        shared.boosted.store(on, Ordering::Relaxed);
    }
}

/// The watchdog: every 10 ms, whether the event loop has turned within [`STALL`]; if not,
/// the worker gets execprof's own priority back (the event loop lowers it again once it turns
/// and the worker has caught up). It allocates nothing and touches no new memory.
fn watch(shared: &Shared) {
    block_stop_signals();
    let tick = std::time::Duration::from_millis(10);
    let (mut last, mut since) = (shared.turns.load(Ordering::Relaxed), std::time::Instant::now());
    while !shared.done.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let turns = shared.turns.load(Ordering::Relaxed);
        if turns != last {
            (last, since) = (turns, std::time::Instant::now());
        } else if since.elapsed() >= STALL {
            boost(shared, true);
        }
    }
}

/// The worker: every batch through the pipeline, in order; each buffer back to the event loop.
fn work<'env>(
    mut pipeline: RunPipeline<'env>,
    rx: &Receiver<Message>,
    give_back: &SyncSender<Vec<u8>>,
    shared: &Shared,
) -> RunPipeline<'env> {
    // SAFETY: plain syscall (the raw call: glibc's wrapper is 2.30's, above the portable
    // builds' floor).
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
    set_priority(tid, Priority::Idle);
    block_stop_signals();
    shared.tid.store(tid, Ordering::Release);
    let mut recording_failed = false;
    for message in rx {
        match message {
            Message::Items(mut batch) => {
                for item in items(&batch) {
                    pipeline.item(item);
                }
                shared.waiting.fetch_sub(batch.len(), Ordering::Relaxed);
                shared.attempts.store(pipeline.attempts(), Ordering::Relaxed);
                batch.clear();
                // A full channel (the event loop has not taken the last ones back yet): freed
                // here, rarely.
                let _ = give_back.try_send(batch);
            }
            Message::Checkpoint => pipeline.checkpoint(),
            Message::Alive(reply) => {
                let _ = reply.send(pipeline.alive());
            }
        }
        if !recording_failed && let Some(e) = pipeline.recorder_error() {
            recording_failed = true;
            let _ = shared.recorder_error.set(e.to_owned());
        }
    }
    pipeline
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in the threads it starts
/// after), and returns their set. They are for the event loop while the command runs, and for
/// the thread that ends execprof while the report is made
/// (`live::exit_on_signal_while_reporting`): never for the worker or the watchdog.
pub(crate) fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: a sigset_t filled by sigemptyset/sigaddset, for this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The nice value of thread `tid` (0: the calling one).
fn nice_of(tid: i32) -> i32 {
    // SAFETY: plain syscall; -1 is also a valid nice value, so errno is what tells a failure,
    // and a failure reads as the default, 0.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if *libc::__errno_location() != 0 { 0 } else { n }
    }
}

/// A scheduling class and priority for the worker.
#[derive(Clone, Copy)]
enum Priority {
    /// `SCHED_IDLE`: it runs when nothing else on its CPU wants to, and never preempts.
    Idle,
    /// `SCHED_OTHER` at this nice value.
    Normal(i32),
}

/// Puts thread `tid` in `priority`; false when the kernel refuses (leaving `SCHED_IDLE`
/// takes CAP_SYS_NICE, which execprof run as root has).
fn set_priority(tid: i32, priority: Priority) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscalls with a valid sched_param.
    unsafe {
        match priority {
            Priority::Idle => libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) == 0,
            Priority::Normal(nice) => {
                libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) == 0
                    && libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{
        RecordHeader, SyscallEnterRecord, SyscallExitRecord, TaskNewRecord, WireRecord, limits::FILENAME_CAP, traced_syscall,
    };

    use super::*;
    use crate::analysis::{AnalysisContext, phases::PhaseModel};

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: test-only view of a padding-free repr(C) record.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn header<R: WireRecord>(ts_ns: u64, pid: u32) -> RecordHeader {
        RecordHeader { kind: R::KIND, cpu: 0, ts_ns, pid, tgid: pid }
    }

    /// A failed exec attempt of `pid` at `ts_ns` (its enter and exit, as one item).
    fn failed_attempt(ts_ns: u64, pid: u32) -> Vec<u8> {
        let enter = SyscallEnterRecord {
            header: header::<SyscallEnterRecord>(ts_ns, pid),
            min_flt: 0,
            maj_flt: 0,
            syscall: traced_syscall::EXECVE,
            flags: 0,
        };
        let mut filename = [0; FILENAME_CAP];
        filename[..7].copy_from_slice(b"/nosuch");
        let exit = SyscallExitRecord {
            header: header::<SyscallExitRecord>(ts_ns + 1_000, pid),
            ret: -2,
            min_flt: 0,
            maj_flt: 0,
            syscall: traced_syscall::EXECVE,
            flags: 0,
            filename_len: 7,
            dirfd: -100,
            filename,
        };
        [bytes_of(&enter), bytes_of(&exit)].concat()
    }

    /// A backlog dropped without `finish` (the command could not start) ends its threads, so
    /// the scope they run in ends too.
    #[test]
    fn a_backlog_dropped_unfinished_ends_its_threads() {
        let model = PhaseModel::builtin().unwrap();
        let ctx = AnalysisContext { model: &model, sampled: false, exact: None, preexisting: &[], launched: true };
        std::thread::scope(|s| {
            let mut backlog = Backlog::start(s, || RunPipeline::new(ctx, (None, None), None, Some(100))).unwrap();
            backlog.item(&failed_attempt(1_000_000, 100));
            drop(backlog);
        });
    }

    /// The worker takes the batches in order, answers `alive` after every batch sent before
    /// it, and hands back a pipeline that has seen every record.
    #[test]
    fn the_worker_sees_every_batch_in_order() {
        let model = PhaseModel::builtin().unwrap();
        let ctx = AnalysisContext { model: &model, sampled: false, exact: None, preexisting: &[], launched: true };
        let pipeline = std::thread::scope(|s| {
            let mut backlog = Backlog::start(s, || RunPipeline::new(ctx, (None, None), None, Some(100))).unwrap();
            for i in 0..1_000 {
                backlog.item(&failed_attempt(1_000_000 + i * 10_000, 100));
            }
            let child =
                TaskNewRecord { header: header::<TaskNewRecord>(20_000_000, 100), child_pid: 101, child_tgid: 101, flags: 0, _reserved: 0 };
            backlog.item(&bytes_of(&child));
            let mut alive = backlog.alive();
            alive.sort_unstable();
            assert_eq!(alive, vec![100, 101], "alive is answered after the batch before it");
            assert_eq!(backlog.attempts(), 1_000);
            backlog.item(&failed_attempt(30_000_000, 101));
            backlog.finish()
        });
        assert_eq!(pipeline.attempts(), 1_001);
    }

    #[test]
    fn a_batch_gives_back_its_items_in_order() {
        let mut b = Vec::new();
        for item in [&b"first"[..], b"", &[7u8; 300]] {
            put(&mut b, item);
        }
        let got: Vec<&[u8]> = items(&b).collect();
        assert_eq!(got, vec![&b"first"[..], b"", &[7u8; 300]]);
        assert_eq!(items(&[]).count(), 0);
    }
}
