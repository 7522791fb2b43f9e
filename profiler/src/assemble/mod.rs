//! Joins the kernel's per-boundary records into exec attempts and fork-family calls.
//!
//! The kernel side keeps no state between a syscall's enter and exit (that is the cheapest
//! way to trace, see `profiler-ebpf/src/syscalls.rs`): it sends an enter record, for execs
//! that get that far a point-of-no-return and a new-image record, and an exit record. All
//! go through one ring buffer, which hands them over in the order they were reserved, so a
//! thread's records arrive in the order they happened and are joined here by thread id.
//! Each call gets an id; samples and probed calls taken on its thread while it is open are
//! kept with it and leave with it. Pieces that cannot be joined are counted, never guessed at.
//! Memory follows the calls open at once, not the length of the run.
pub(crate) mod events;
use foldhash::HashMap;

use crate::{
    assemble::events::{
        Adopted, CallId, Event, EventSink, ExecAttempt, ForkCall, Inside, MainEntry, OffCpu, ProbedCall, Sample, TaskExit, TaskNew,
    },
    model::{
        meta::Unjoined,
        names::{Abi, Argv, Family, Killed, Name, TracedSyscall},
    },
    record::{Body, CallSums, Head, Record},
};

/// An exec or fork-family call between its enter and exit records.
#[derive(Clone, Debug)]
struct Open {
    id: CallId,
    syscall: TracedSyscall,
    /// The ABI the call was made in.
    abi: Abi,
    enter_pid: u32,
    enter_ns: u64,
    faults: Option<(u64, u64)>,
    prepare_ns: Option<u64>,
    loaded_ns: Option<u64>,
    /// The kernel's copy of the name, from the point of no return or the new image.
    name: Option<Name>,
    /// `--argv`: the arguments it was called with.
    argv: Option<Argv>,
    /// An `AT_EXECVE_CHECK` check.
    check: bool,
    /// The comm the exec set, from the new image's record.
    comm: Option<Vec<u8>>,
    inside: Inside,
}

#[derive(Default)]
pub(crate) struct Assembler {
    open: HashMap<u32, Open>,
    /// Per thread, samples taken while no call was open, held until the thread's next
    /// record says what they were: the enter probe's own work just before a call's first
    /// timestamp (it marks the thread as in a call before it reads the clock), or orphans.
    pending: HashMap<u32, Vec<Sample>>,
    /// `--argv`: per thread, the arguments sent just before its next exec's enter.
    argv: HashMap<u32, Argv>,
    next_id: CallId,
    unjoined: Unjoined,
}

impl Assembler {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes the next record; hands what it completes to `out`. Each kind has its handler,
    /// named after it (`kind::NO_RETURN` → `no_return`), so one name greps across the crates.
    pub(crate) fn push(&mut self, record: Record, out: &mut impl EventSink) {
        let h = record.head;
        if matches!(record.body, Body::SyscallEnter { .. })
            && let Some(samples) = self.pending.remove(&h.pid)
        {
            self.push(record, out);
            self.before_enter(h, samples, out);
            return;
        }
        if !matches!(record.body, Body::Sample { .. })
            && let Some(samples) = self.pending.remove(&h.pid)
        {
            for s in samples {
                out.event(&Event::OrphanSample(s));
            }
        }
        // Arguments belong to the thread's very next record, its exec's enter: anything else
        // means that enter was dropped (and counted), and they go with it.
        if !self.argv.is_empty() && !matches!(record.body, Body::SyscallEnter { .. } | Body::Sample { .. }) {
            self.argv.remove(&h.pid);
        }
        match record.body {
            Body::SyscallEnter { syscall, abi, faults, check } => self.syscall_enter(h, (syscall, abi, check), faults, out),
            Body::SyscallExit { syscall, abi, ret, faults, name, killed, enter_lost } => {
                self.syscall_exit(h, syscall, abi, Exit { ret, faults, name, killed, enter_lost }, out);
            }
            Body::NoReturn { name } => self.no_return(h, name),
            Body::Loaded { old_pid, name, comm } => self.loaded(h, old_pid, (name, comm), out),
            Body::TaskNew { child_pid, child_tgid, thread } => self.task_new(h, child_pid, child_tgid, thread, out),
            Body::TaskExit { group_dead } => self.task_exit(h, group_dead, out),
            Body::Sample { frames } => self.sample(h, frames),
            Body::ProbedCall { enter_ns, slot } => self.probed_call(h, enter_ns, slot, out),
            Body::CallSums(sums) => self.call_sums(h, sums, out),
            Body::OffCpu { start_ns } => self.off_cpu(h, start_ns, out),
            Body::Main => self.main(h, out),
            Body::Argv(argv) => self.argv(h, argv),
            Body::Adopted { ppid, comm } => self.adopted(h, ppid, comm, out),
        }
    }

    /// Samples that arrived just before the enter record of the call now open on the thread:
    /// the enter probe marks the thread as in a call before it reads the clock and sends the
    /// record, and a timer interrupt in between is that probe's own work. Taken before the
    /// clock read, a sample is outside the measured time; after it (an interrupt in a VM can
    /// take microseconds to read its own clock), inside the call.
    fn before_enter(&mut self, h: Head, samples: Vec<Sample>, out: &mut impl EventSink) {
        for s in samples {
            match self.open.get_mut(&h.pid) {
                Some(o) if s.ts_ns >= o.enter_ns => o.inside.samples.push(s),
                _ => out.event(&Event::SampleBeforeEnter(s)),
            }
        }
    }

    fn syscall_enter(
        &mut self,
        h: Head,
        (syscall, abi, check): (TracedSyscall, Abi, bool),
        faults: Option<(u64, u64)>,
        out: &mut impl EventSink,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        let fresh = Open {
            id,
            syscall,
            abi,
            enter_pid: h.pid,
            enter_ns: h.ts_ns,
            faults,
            prepare_ns: None,
            loaded_ns: None,
            name: None,
            argv: self.argv.remove(&h.pid),
            check,
            comm: None,
            inside: Inside::default(),
        };
        if let Some(stale) = self.open.insert(h.pid, fresh) {
            self.unjoined.enter_without_exit += 1;
            orphan_inside(stale.inside, out);
        }
    }

    fn syscall_exit(&mut self, h: Head, syscall: TracedSyscall, abi: Abi, exit: Exit, out: &mut impl EventSink) {
        match self.open.remove(&h.pid) {
            Some(o) if !exit.enter_lost && own_exit(&o, syscall, abi, exit.ret) => out.event(&joined(o, h, exit)),
            Some(o) => {
                self.unjoined.enter_without_exit += 1;
                self.unjoined.exit_without_enter += 1;
                orphan_inside(o.inside, out);
            }
            None => self.unjoined.exit_without_enter += 1,
        }
    }

    fn no_return(&mut self, h: Head, name: Option<Name>) {
        if let Some(o) = self.open.get_mut(&h.pid) {
            o.prepare_ns = Some(h.ts_ns);
            o.name = name.or(o.name.take());
        }
    }

    /// An exec from a non-leader thread continues under the leader's id.
    fn loaded(&mut self, h: Head, old_pid: u32, (name, comm): (Option<Name>, Option<Vec<u8>>), out: &mut impl EventSink) {
        if let Some(mut o) = self.open.remove(&old_pid) {
            o.loaded_ns = Some(h.ts_ns);
            o.name = name.or(o.name.take());
            o.comm = comm;
            if let Some(stale) = self.open.insert(h.pid, o) {
                self.unjoined.enter_without_exit += 1;
                orphan_inside(stale.inside, out);
            }
        }
    }

    fn task_new(&self, h: Head, child_pid: u32, child_tgid: u32, thread: bool, out: &mut impl EventSink) {
        out.event(&Event::TaskNew(TaskNew { ts_ns: h.ts_ns, parent_pid: h.pid, parent_tgid: h.tgid, child_pid, child_tgid, thread }));
    }

    fn adopted(&self, h: Head, ppid: Option<u32>, comm: Vec<u8>, out: &mut impl EventSink) {
        out.event(&Event::Adopted(Adopted { ts_ns: h.ts_ns, pid: h.pid, tgid: h.tgid, ppid, comm }));
    }

    fn task_exit(&mut self, h: Head, group_dead: bool, out: &mut impl EventSink) {
        if let Some(o) = self.open.remove(&h.pid) {
            self.unjoined.abandoned += 1;
            orphan_inside(o.inside, out);
        }
        out.event(&Event::TaskExit(TaskExit { ts_ns: h.ts_ns, pid: h.pid, tgid: h.tgid, group_dead }));
    }

    fn sample(&mut self, h: Head, frames: Vec<u64>) {
        let sample = Sample { ts_ns: h.ts_ns, pid: h.pid, frames };
        match self.open.get_mut(&h.pid) {
            Some(o) => o.inside.samples.push(sample),
            None => self.pending.entry(h.pid).or_default().push(sample),
        }
    }

    fn probed_call(&mut self, h: Head, enter_ns: u64, slot: u32, out: &mut impl EventSink) {
        let mut call = ProbedCall { pid: h.pid, enter_ns, exit_ns: h.ts_ns, slot, off_cpu_ns: 0 };
        match self.open.get_mut(&h.pid) {
            Some(o) => {
                // The thread's off-CPU intervals inside the call came before its return.
                call.off_cpu_ns = o.inside.off_cpu.iter().map(|&(start, end)| overlap((start, end), (enter_ns, h.ts_ns))).sum();
                o.inside.probed.push(call);
            }
            None => out.event(&Event::OrphanProbedCall(call)),
        }
    }

    fn call_sums(&mut self, h: Head, sums: CallSums, out: &mut impl EventSink) {
        match self.open.get_mut(&h.pid) {
            // One per attempt; a second (never sent) would replace the first, so it is an orphan.
            Some(o) if o.inside.sums.is_none() => o.inside.sums = Some(sums),
            _ => out.event(&Event::OrphanCallSums(sums)),
        }
    }

    fn off_cpu(&mut self, h: Head, start_ns: u64, out: &mut impl EventSink) {
        if let Some(o) = self.open.get_mut(&h.pid) {
            // The part after the call's enter (a thread switched out just before it runs again
            // inside it).
            o.inside.off_cpu.push((start_ns.max(o.enter_ns), h.ts_ns));
        }
        out.event(&Event::OffCpu(OffCpu { pid: h.pid, tgid: h.tgid, start_ns, end_ns: h.ts_ns }));
    }

    fn argv(&mut self, h: Head, argv: Argv) {
        self.argv.insert(h.pid, argv);
    }

    fn main(&self, h: Head, out: &mut impl EventSink) {
        out.event(&Event::Main(MainEntry { pid: h.pid, tgid: h.tgid, ts_ns: h.ts_ns }));
    }

    /// Ends the stream: calls still open are counted, and what was taken inside them is
    /// handed on as orphans.
    pub(crate) fn finish(mut self, out: &mut impl EventSink) -> Unjoined {
        self.unjoined.enter_without_exit += self.open.len() as u64;
        let mut pending: Vec<(u32, Vec<Sample>)> = self.pending.drain().collect();
        pending.sort_by_key(|(pid, _)| *pid);
        for s in pending.into_iter().flat_map(|(_, v)| v) {
            out.event(&Event::OrphanSample(s));
        }
        let mut open: Vec<Open> = self.open.drain().map(|(_, o)| o).collect();
        open.sort_by_key(|o| o.id);
        for o in open {
            orphan_inside(o.inside, out);
        }
        self.unjoined
    }
}

/// How long the intervals `a` and `b` (start, end) share.
fn overlap(a: (u64, u64), b: (u64, u64)) -> u64 {
    a.1.min(b.1).saturating_sub(a.0.max(b.0))
}

fn orphan_inside(inside: Inside, out: &mut impl EventSink) {
    for s in inside.samples {
        out.event(&Event::OrphanSample(s));
    }
    for c in inside.probed {
        out.event(&Event::OrphanProbedCall(c));
    }
    if let Some(sums) = inside.sums {
        out.event(&Event::OrphanCallSums(sums));
    }
}

/// Whether an exit closes the call entered. Execs match as a family: after a successful
/// `execveat` the kernel reports the exit with `execve`'s number (seen on 6.18), so the
/// enter's syscall is the one that counts.
/// Whether an exit is the open call's own. A successful exec returns from `execve` in the new
/// image's ABI whatever it was called as (the kernel rewrites the syscall number, so an
/// `execveat`, or an ia32 program exec'ing a 64-bit one, exits as 64-bit `execve`); anything
/// else returns from the syscall and ABI it entered.
fn own_exit(o: &Open, syscall: TracedSyscall, abi: Abi, ret: i64) -> bool {
    if o.syscall.is_exec() && syscall.is_exec() && ret == 0 {
        return true;
    }
    o.syscall == syscall && o.abi == abi
}

/// What a syscall exit record says beyond its head.
struct Exit {
    ret: i64,
    faults: Option<(u64, u64)>,
    name: Option<Name>,
    killed: Option<Killed>,
    /// The kernel dropped this call's enter: whatever is open on the thread is an older call.
    enter_lost: bool,
}

fn joined(o: Open, h: Head, exit: Exit) -> Event {
    let Exit { ret, faults, name: exit_name, killed, .. } = exit;
    let delta = o.faults.zip(faults).map(|((min0, maj0), (min1, maj1))| (min1.wrapping_sub(min0), maj1.wrapping_sub(maj0)));
    let syscall = match o.syscall.family() {
        Family::Exec(syscall) => syscall,
        Family::Fork(syscall) => {
            return Event::ForkCall(ForkCall {
                id: o.id,
                pid: o.enter_pid,
                tgid: h.tgid,
                syscall,
                abi: o.abi,
                enter_ns: o.enter_ns,
                exit_ns: h.ts_ns,
                ret,
                minor_faults: delta.map(|d| d.0),
                major_faults: delta.map(|d| d.1),
                inside: o.inside,
            });
        }
    };
    // The kernel's copy when the exec got that far (past the point of no return the
    // caller's copy is gone), else the caller's, read at exit.
    let name = o.name.or(exit_name).unwrap_or(Name { unreadable: true, ..Name::default() });
    Event::Exec(ExecAttempt {
        id: o.id,
        pid: o.enter_pid,
        exit_pid: h.pid,
        tgid: h.tgid,
        cpu: h.cpu,
        syscall,
        abi: o.abi,
        name,
        enter_ns: o.enter_ns,
        prepare_ns: o.prepare_ns,
        loaded_ns: o.loaded_ns,
        exit_ns: h.ts_ns,
        ret,
        killed,
        minor_faults: delta.map(|d| d.0),
        major_faults: delta.map(|d| d.1),
        argv: o.argv,
        check: o.check,
        comm: o.comm,
        inside: o.inside,
    })
}

/// Joins a whole stream (tests and offline use).
#[cfg(test)]
pub(crate) fn assemble(records: impl IntoIterator<Item = Record>) -> (Vec<Event>, Unjoined) {
    let mut a = Assembler::new();
    let mut out = Vec::new();
    for r in records {
        a.push(r, &mut out);
    }
    let unjoined = a.finish(&mut out);
    (out, unjoined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::names::ExecSyscall;

    const EXECVE: TracedSyscall = TracedSyscall::Execve;

    fn rec(ts_ns: u64, pid: u32, body: Body) -> Record {
        Record { head: Head { ts_ns, pid, tgid: 100, cpu: 1 }, body }
    }

    fn enter(ts_ns: u64, pid: u32, syscall: TracedSyscall, faults: (u64, u64)) -> Record {
        rec(ts_ns, pid, Body::SyscallEnter { syscall, abi: Abi::Native, faults: Some(faults), check: false })
    }

    fn exit(ts_ns: u64, pid: u32, syscall: TracedSyscall, ret: i64, faults: (u64, u64), name: Option<&str>) -> Record {
        rec(
            ts_ns,
            pid,
            Body::SyscallExit { syscall, abi: Abi::Native, ret, faults: Some(faults), name: named(name), killed: None, enter_lost: false },
        )
    }

    fn named(n: Option<&str>) -> Option<Name> {
        n.map(|n| Name { bytes: n.as_bytes().to_vec(), ..Name::default() })
    }

    fn task_exit(ts_ns: u64, pid: u32, group_dead: bool) -> Record {
        rec(ts_ns, pid, Body::TaskExit { group_dead })
    }

    fn execs(events: &[Event]) -> Vec<&ExecAttempt> {
        events.iter().filter_map(|e| if let Event::Exec(a) = e { Some(a) } else { None }).collect()
    }

    fn only_exec(events: &[Event]) -> &ExecAttempt {
        match execs(events)[..] {
            [e] => e,
            _ => panic!("expected one exec, got {events:?}"),
        }
    }

    #[test]
    fn failed_attempt_takes_the_callers_name_and_fault_difference() {
        let (events, unjoined) = assemble([enter(1_000, 100, EXECVE, (10, 2)), exit(2_500, 100, EXECVE, -2, (13, 2), Some("/m1/t"))]);
        let e = only_exec(&events);
        assert_eq!((e.enter_ns, e.exit_ns, e.ret, e.duration_ns()), (1_000, 2_500, -2, 1_500));
        assert_eq!((e.minor_faults, e.major_faults), (Some(3), Some(0)));
        assert_eq!((e.name.bytes.as_slice(), e.prepare_ns, e.loaded_ns), (&b"/m1/t"[..], None, None));
        assert_eq!(unjoined, Unjoined::default());
    }

    #[test]
    fn success_takes_phase_times_and_the_kernels_name() {
        let (events, _) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            rec(2_000, 100, Body::NoReturn { name: named(Some("/bin/t")) }),
            rec(3_000, 100, Body::Loaded { old_pid: 100, name: None, comm: None }),
            exit(4_000, 100, EXECVE, 0, (5, 0), None),
        ]);
        let e = only_exec(&events);
        assert_eq!((e.prepare_ns, e.loaded_ns, e.exit_ns), (Some(2_000), Some(3_000), 4_000));
        assert_eq!(e.name.bytes, b"/bin/t");
        assert_eq!(e.minor_faults, Some(5));
    }

    /// Arguments join the thread's next enter; another thread's records in between do not
    /// matter, but any other record of the thread means its enter was dropped: they go too.
    #[test]
    fn arguments_join_the_threads_next_exec_enter_only() {
        let argv = |a: &str| rec(900, 100, Body::Argv(Argv { args: vec![a.as_bytes().to_vec()], ..Argv::default() }));
        let (events, _) = assemble([
            argv("first"),
            enter(950, 101, EXECVE, (0, 0)),
            enter(1_000, 100, EXECVE, (0, 0)),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("/a")),
            exit(2_100, 101, EXECVE, -2, (0, 0), Some("/b")),
            argv("dropped enter"),
            rec(2_500, 100, Body::TaskNew { child_pid: 7, child_tgid: 7, thread: false }),
            enter(3_000, 100, EXECVE, (0, 0)),
            exit(4_000, 100, EXECVE, -2, (0, 0), Some("/c")),
        ]);
        let got: Vec<(&[u8], Option<&Argv>)> = execs(&events).iter().map(|e| (e.name.bytes.as_slice(), e.argv.as_ref())).collect();
        let first = Argv { args: vec![b"first".to_vec()], ..Argv::default() };
        assert_eq!(got, vec![(&b"/a"[..], Some(&first)), (&b"/b"[..], None), (&b"/c"[..], None)]);
    }

    /// arm64 before 5.19 (5.15.y before the fix): a successful exec never reaches `sys_exit`
    /// with its number (the kernel cleared it when it started the new image), so the kernel
    /// side sends no exit and the call stays open. It is never an exec of any outcome: it is
    /// counted as not seen whole, at the thread's next call or at its exit.
    #[test]
    fn a_success_whose_exit_never_comes_is_counted_not_seen_whole() {
        let loaded = |ts_ns| rec(ts_ns, 100, Body::Loaded { old_pid: 100, name: named(Some("/bin/t")), comm: None });
        let (events, unjoined) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            loaded(3_000),
            enter(5_000, 100, EXECVE, (0, 0)),
            exit(6_000, 100, EXECVE, -2, (0, 0), Some("/m1/t")),
            enter(7_000, 100, EXECVE, (0, 0)),
            loaded(8_000),
            task_exit(9_000, 100, true),
        ]);
        assert_eq!(only_exec(&events).ret, -2, "only the failed attempt is an exec");
        assert_eq!(unjoined, Unjoined { abandoned: 1, exit_without_enter: 0, enter_without_exit: 1 });
    }

    #[test]
    fn exec_from_a_non_leader_thread_moves_to_the_leaders_id() {
        let (events, unjoined) = assemble([
            enter(1_000, 101, EXECVE, (0, 0)),
            task_exit(1_500, 100, false),
            rec(3_000, 100, Body::Loaded { old_pid: 101, name: named(Some("/bin/t")), comm: None }),
            exit(4_000, 100, EXECVE, 0, (0, 0), None),
        ]);
        let e = only_exec(&events);
        assert_eq!((e.pid, e.exit_pid, e.name.bytes.as_slice()), (101, 100, &b"/bin/t"[..]));
        assert_eq!(unjoined, Unjoined::default(), "the leader had no call open");
    }

    #[test]
    fn failure_past_the_point_of_no_return_keeps_the_kernels_name() {
        let (events, _) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            rec(2_000, 100, Body::NoReturn { name: named(Some("/bin/t")) }),
            exit(4_000, 100, EXECVE, -12, (0, 0), Some("garbage from the new mm")),
        ]);
        assert_eq!(only_exec(&events).name.bytes, b"/bin/t");
    }

    fn in_abi(mut r: Record, abi: Abi) -> Record {
        match &mut r.body {
            Body::SyscallEnter { abi: a, .. } | Body::SyscallExit { abi: a, .. } => *a = abi,
            _ => {}
        }
        r
    }

    /// A 32-bit caller's attempts pair in its ABI; a successful exec returns from 64-bit
    /// `execve` when the new image is 64-bit (and from `execve` after an `execveat`); a failed
    /// call or a fork never changes ABI, so an exit in the other one is not its own.
    #[test]
    fn an_enter_pairs_only_with_its_own_exit_across_abis() {
        let compat = Abi::Compat;
        let execveat = TracedSyscall::Execveat;
        let (events, unjoined) = assemble([
            in_abi(enter(1_000, 100, EXECVE, (0, 0)), compat),
            in_abi(exit(2_000, 100, EXECVE, -2, (0, 0), Some("/m/t")), compat),
            in_abi(enter(3_000, 100, execveat, (0, 0)), compat),
            exit(9_000, 100, EXECVE, 0, (0, 0), None),
        ]);
        let attempts = execs(&events);
        assert_eq!(attempts.len(), 2, "{events:?}");
        assert!(attempts.iter().all(|a| a.abi == compat), "the caller's ABI: {attempts:?}");
        assert_eq!((attempts[1].syscall, attempts[1].duration_ns()), (ExecSyscall::Execveat, 6_000));
        assert_eq!(unjoined, Unjoined::default());

        let fork = TracedSyscall::Fork;
        let (events, unjoined) = assemble([
            in_abi(enter(1_000, 100, EXECVE, (0, 0)), compat),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("/m/t")),
            in_abi(enter(3_000, 100, fork, (0, 0)), compat),
            exit(4_000, 100, fork, 101, (0, 0), None),
        ]);
        assert!(events.iter().all(|e| !matches!(e, Event::Exec(_) | Event::ForkCall(_))), "{events:?}");
        assert_eq!((unjoined.enter_without_exit, unjoined.exit_without_enter), (2, 2));
    }

    /// Attempt A's exit and attempt B's enter were dropped: B's exit, flagged by the kernel,
    /// must not join A's enter into one attempt spanning both.
    #[test]
    fn an_exit_whose_enter_was_dropped_never_joins_an_older_call() {
        let b_exit = {
            let mut r = exit(4_000, 100, EXECVE, -2, (0, 0), Some("/m/b"));
            if let Body::SyscallExit { enter_lost, .. } = &mut r.body {
                *enter_lost = true;
            }
            r
        };
        let (events, unjoined) = assemble([enter(1_000, 100, EXECVE, (0, 0)), b_exit]);
        assert!(execs(&events).is_empty(), "{events:?}");
        assert_eq!((unjoined.enter_without_exit, unjoined.exit_without_enter), (1, 1));
    }

    #[test]
    fn fork_calls_join_like_execs() {
        let clone3 = TracedSyscall::Clone3;
        let (events, _) = assemble([enter(100, 100, clone3, (1, 0)), exit(900, 100, clone3, 77, (4, 0), None)]);
        let [Event::ForkCall(s)] = &events[..] else { panic!("{events:?}") };
        assert_eq!((s.syscall, s.ret, s.duration_ns(), s.minor_faults), (crate::model::names::ForkSyscall::Clone3, 77, 800, Some(3)));
    }

    #[test]
    fn samples_and_probed_calls_travel_with_the_call_open_on_their_thread() {
        let (events, _) = assemble([
            rec(500, 100, Body::Sample { frames: vec![1] }),
            enter(1_000, 100, EXECVE, (0, 0)),
            rec(1_100, 100, Body::Sample { frames: vec![2] }),
            rec(1_150, 101, Body::Sample { frames: vec![3] }),
            rec(1_300, 100, Body::ProbedCall { enter_ns: 1_200, slot: 4 }),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
            enter(3_000, 100, EXECVE, (0, 0)),
            rec(3_100, 100, Body::Sample { frames: vec![4] }),
            exit(4_000, 100, EXECVE, -2, (0, 0), Some("x")),
        ]);
        let outside: Vec<&[u64]> = events
            .iter()
            .filter_map(|e| match e {
                Event::OrphanSample(s) | Event::SampleBeforeEnter(s) => Some(s.frames.as_slice()),
                _ => None,
            })
            .collect();
        assert_eq!(outside, vec![&[1][..], &[3][..]]);
        let attempts = execs(&events);
        assert_eq!(attempts.len(), 2);
        assert_eq!((attempts[0].id, attempts[1].id), (0, 1), "ids in enter order");
        assert_eq!(attempts[0].inside.samples.iter().map(|s| s.frames[0]).collect::<Vec<_>>(), vec![2]);
        assert_eq!(attempts[0].inside.probed, vec![ProbedCall { pid: 100, enter_ns: 1_200, exit_ns: 1_300, slot: 4, off_cpu_ns: 0 }]);
        assert_eq!(attempts[1].inside.samples.iter().map(|s| s.frames[0]).collect::<Vec<_>>(), vec![4]);
    }

    /// The thread's off-CPU intervals inside an attempt go with it (from its enter on), and a
    /// probed call's return takes the part of them inside the call.
    #[test]
    fn off_cpu_time_inside_an_attempt_and_its_probed_calls() {
        let off = |end, start_ns| rec(end, 100, Body::OffCpu { start_ns });
        let (events, _) = assemble([
            off(800, 700), // before the attempt: not its own
            enter(1_000, 100, EXECVE, (0, 0)),
            off(1_050, 900), // switched out before the enter, back inside: 50 of it
            off(1_400, 1_300),
            rec(1_500, 100, Body::ProbedCall { enter_ns: 1_200, slot: 4 }), // 100 off-CPU
            rec(1_650, 101, Body::OffCpu { start_ns: 1_600 }),              // another thread's
            off(1_700, 1_600),
            rec(1_800, 100, Body::ProbedCall { enter_ns: 1_750, slot: 5 }), // none
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
        ]);
        let attempts = execs(&events);
        assert_eq!(attempts[0].inside.off_cpu, vec![(1_000, 1_050), (1_300, 1_400), (1_600, 1_700)]);
        assert_eq!(attempts[0].inside.off_cpu_ns(), 250);
        let off_cpu: Vec<u64> = attempts[0].inside.probed.iter().map(|c| c.off_cpu_ns).collect();
        assert_eq!(off_cpu, vec![100, 0]);
        assert_eq!(events.iter().filter(|e| matches!(e, Event::OffCpu(_))).count(), 5, "each interval is still an event");
    }

    #[test]
    fn an_attempts_call_sums_go_with_it_and_any_others_are_orphans() {
        let sums = |slot| CallSums {
            entries: vec![crate::record::PathSum { slot, parent: None, calls: 1, inclusive_ns: 50, self_ns: 50, off_cpu_ns: 0 }],
            unsummed: 0,
        };
        let (events, _) = assemble([
            rec(500, 100, Body::CallSums(sums(1))), // no call open on the thread
            enter(1_000, 100, EXECVE, (0, 0)),
            rec(1_900, 100, Body::CallSums(sums(2))),
            rec(1_950, 100, Body::CallSums(sums(3))), // a second for one attempt: never sent
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
        ]);
        let orphans: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                Event::OrphanCallSums(s) => Some(s.entries[0].slot),
                _ => None,
            })
            .collect();
        assert_eq!(orphans, vec![1, 3]);
        assert_eq!(execs(&events)[0].inside.sums, Some(sums(2)));
    }

    #[test]
    fn a_sample_just_before_an_enter_is_the_enter_probes_own() {
        let (events, _) = assemble([
            rec(900, 100, Body::Sample { frames: vec![1] }),
            rec(1_010, 100, Body::Sample { frames: vec![3] }), // after the clock read: inside
            enter(1_000, 100, EXECVE, (0, 0)),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
            rec(2_500, 100, Body::Sample { frames: vec![2] }),
            rec(2_600, 100, Body::TaskExit { group_dead: true }),
        ]);
        let kinds: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::SampleBeforeEnter(_) => Some("before enter"),
                Event::OrphanSample(_) => Some("orphan"),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, vec!["before enter", "orphan"]);
        let attempt = events.iter().find_map(|e| if let Event::Exec(a) = e { Some(a) } else { None }).unwrap();
        assert_eq!(attempt.inside.samples.iter().map(|s| s.frames[0]).collect::<Vec<_>>(), vec![3]);
    }

    /// A held enter reaches user space with the attempt's exit, after the samples taken
    /// inside the attempt: they are placed by their time, as if the enter had come first.
    #[test]
    fn samples_of_an_attempt_whose_enter_was_held_are_inside_it() {
        let (events, unjoined) = assemble([
            rec(900, 100, Body::Sample { frames: vec![1] }),
            rec(1_500, 100, Body::Sample { frames: vec![2] }),
            rec(1_900, 100, Body::Sample { frames: vec![3] }),
            enter(1_000, 100, EXECVE, (0, 0)),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
        ]);
        assert_eq!(unjoined, Unjoined::default());
        assert_eq!(only_exec(&events).inside.samples.iter().map(|s| s.frames[0]).collect::<Vec<_>>(), vec![2, 3]);
        assert!(
            matches!(events.iter().find(|e| matches!(e, Event::SampleBeforeEnter(_))), Some(Event::SampleBeforeEnter(s)) if s.frames == [1])
        );
    }

    #[test]
    fn two_threads_entering_in_the_same_nanosecond_stay_apart() {
        let (events, _) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            enter(1_000, 101, EXECVE, (0, 0)),
            rec(1_100, 101, Body::Sample { frames: vec![7] }),
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("a")),
            exit(2_000, 101, EXECVE, -2, (0, 0), Some("b")),
        ]);
        let a = execs(&events);
        assert_ne!(a[0].id, a[1].id);
        assert!(a[0].inside.samples.is_empty());
        assert_eq!(a[1].inside.samples.len(), 1);
    }

    #[test]
    fn pieces_that_cannot_be_joined_are_counted_and_their_samples_orphaned() {
        let (events, unjoined) = assemble([
            exit(10, 100, EXECVE, -2, (0, 0), Some("x")), // tracing began mid-call
            enter(20, 100, EXECVE, (0, 0)),
            rec(25, 100, Body::Sample { frames: vec![1] }),
            enter(30, 100, EXECVE, (0, 0)), // the first one's exit was lost
            rec(35, 100, Body::Sample { frames: vec![2] }),
            task_exit(40, 100, true), // killed mid-exec
            enter(50, 102, EXECVE, (0, 0)),
            rec(55, 102, Body::Sample { frames: vec![3] }), // still open at the end
        ]);
        assert!(execs(&events).is_empty());
        let orphans = events.iter().filter(|e| matches!(e, Event::OrphanSample(_))).count();
        assert_eq!(orphans, 3);
        assert_eq!(unjoined, Unjoined { abandoned: 1, exit_without_enter: 1, enter_without_exit: 2 });
    }

    #[test]
    fn a_successful_execveat_may_exit_as_execve() {
        let execveat = TracedSyscall::Execveat;
        let (events, unjoined) = assemble([enter(20, 100, execveat, (0, 0)), exit(30, 100, EXECVE, 0, (0, 0), None)]);
        assert_eq!(only_exec(&events).syscall, crate::model::names::ExecSyscall::Execveat);
        assert_eq!(unjoined, Unjoined::default());
    }

    #[test]
    fn an_exit_of_another_syscall_does_not_close_an_exec() {
        let (events, unjoined) = assemble([enter(20, 100, EXECVE, (0, 0)), exit(30, 100, TracedSyscall::Clone, 5, (0, 0), None)]);
        assert!(events.is_empty());
        assert_eq!(unjoined, Unjoined { abandoned: 0, exit_without_enter: 1, enter_without_exit: 1 });
    }
}
