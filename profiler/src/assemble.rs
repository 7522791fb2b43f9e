//! Joins the kernel's per-boundary records into exec attempts and fork-family calls.
//!
//! The kernel side keeps no state between a syscall's enter and exit (that is the cheapest
//! way to trace, see `profiler-ebpf/src/syscalls.rs`): it sends an enter record, for execs
//! that get that far a point-of-no-return and a new-image record, and an exit record. All
//! go through one ring buffer, which hands them over in the order they were reserved, so a
//! thread's records arrive in the order they happened and are joined here by thread id.
//! Samples and exact-mode calls are tied to the call (exec attempt or fork) open on their
//! thread when they arrive. Pieces that cannot be joined are counted, never guessed at.
use std::collections::HashMap;

use crate::events::{Call, CallKind, Event, ExecAttempt, Name, Record, Sample, SpawnCall};

/// What could not be joined, in the order the report lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unjoined {
    /// A thread exited inside an exec or fork call (no exit was ever seen).
    pub abandoned: u64,
    /// An exit without its enter (tracing started mid-call, or the enter record was lost).
    pub exit_without_enter: u64,
    /// An enter followed by another enter, or still open when tracing stopped.
    pub enter_without_exit: u64,
}

impl Unjoined {
    /// (name, count) pairs in the loss table's wording.
    pub fn as_losses(&self) -> [(&'static str, u64); 3] {
        [
            ("exec abandoned by exiting thread", self.abandoned),
            ("exec exit without enter", self.exit_without_enter),
            ("exec enter without exit", self.enter_without_exit),
        ]
    }
}

/// An exec or fork-family call between its enter and exit records.
#[derive(Clone, Debug)]
struct Open {
    call: CallKind,
    enter_pid: u32,
    enter_ns: u64,
    faults: Option<(u64, u64)>,
    prepare_ns: Option<u64>,
    loaded_ns: Option<u64>,
    /// The kernel's copy of the name, from the point of no return or the new image.
    name: Option<Name>,
}

#[derive(Default)]
pub struct Assembler {
    open: HashMap<u32, Open>,
    unjoined: Unjoined,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next record; appends what it completes to `out`.
    pub fn push(&mut self, record: Record, out: &mut Vec<Event>) {
        match record {
            Record::Enter { ts_ns, pid, call, faults, .. } => {
                let fresh = Open { call, enter_pid: pid, enter_ns: ts_ns, faults, prepare_ns: None, loaded_ns: None, name: None };
                if self.open.insert(pid, fresh).is_some() {
                    self.unjoined.enter_without_exit += 1;
                }
            }
            Record::NoReturn { ts_ns, pid, name } => {
                if let Some(o) = self.open.get_mut(&pid) {
                    o.prepare_ns = Some(ts_ns);
                    o.name = name.or(o.name.take());
                }
            }
            Record::Loaded { ts_ns, pid, old_pid, name } => {
                // An exec from a non-leader thread continues under the leader's id.
                if let Some(mut o) = self.open.remove(&old_pid) {
                    o.loaded_ns = Some(ts_ns);
                    o.name = name.or(o.name.take());
                    if self.open.insert(pid, o).is_some() {
                        self.unjoined.enter_without_exit += 1;
                    }
                }
            }
            Record::Exit { ts_ns, pid, tgid, cpu, call, ret, faults, name } => match self.open.remove(&pid) {
                Some(o) if same_syscall(o.call, call) => out.push(joined(o, ts_ns, pid, tgid, cpu, ret, faults, name)),
                Some(_) => {
                    self.unjoined.enter_without_exit += 1;
                    self.unjoined.exit_without_enter += 1;
                }
                None => self.unjoined.exit_without_enter += 1,
            },
            Record::Sample { ts_ns, pid, tgid, frames } => {
                let attempt_enter_ns = self.open_on(pid);
                out.push(Event::Sample(Sample { ts_ns, pid, tgid, attempt_enter_ns, frames }));
            }
            Record::Call { pid, tgid, enter_ns, exit_ns, slot } => {
                let attempt_enter_ns = self.open_on(pid);
                out.push(Event::Call(Call { pid, tgid, enter_ns, exit_ns, attempt_enter_ns, slot }));
            }
            Record::Event(event) => {
                if let Event::Exit(e) = &event
                    && self.open.remove(&e.pid).is_some()
                {
                    self.unjoined.abandoned += 1;
                }
                out.push(event);
            }
        }
    }

    /// Enter time of the call open on thread `pid`, or 0 (not tied; the analysis counts
    /// such samples and calls as unattributed).
    fn open_on(&self, pid: u32) -> u64 {
        self.open.get(&pid).map_or(0, |o| o.enter_ns)
    }

    /// Ends the stream: calls still open are counted.
    pub fn finish(mut self) -> Unjoined {
        self.unjoined.enter_without_exit += self.open.len() as u64;
        self.unjoined
    }
}

/// Whether an exit closes the call entered. Execs match as a family: after a successful
/// `execveat` the kernel reports the exit with `execve`'s number (seen on 6.18), so the
/// enter's syscall is the one that counts.
fn same_syscall(entered: CallKind, exited: CallKind) -> bool {
    match (entered, exited) {
        (CallKind::Exec(_), CallKind::Exec(_)) => true,
        (a, b) => a == b,
    }
}

#[allow(clippy::too_many_arguments)]
fn joined(
    o: Open,
    exit_ns: u64,
    exit_pid: u32,
    tgid: u32,
    cpu: u32,
    ret: i64,
    faults: Option<(u64, u64)>,
    exit_name: Option<Name>,
) -> Event {
    let delta = o.faults.zip(faults).map(|((min0, maj0), (min1, maj1))| (min1.wrapping_sub(min0), maj1.wrapping_sub(maj0)));
    match o.call {
        CallKind::Spawn(syscall) => Event::Spawn(SpawnCall {
            pid: o.enter_pid,
            tgid,
            syscall,
            enter_ns: o.enter_ns,
            exit_ns,
            ret,
            minor_faults: delta.map(|d| d.0),
            major_faults: delta.map(|d| d.1),
        }),
        CallKind::Exec(syscall) => {
            // The kernel's copy when the exec got that far (past the point of no return the
            // caller's copy is gone), else the caller's, read at exit.
            let name = o.name.or(exit_name).unwrap_or(Name { unreadable: true, ..Name::default() });
            Event::Exec(ExecAttempt {
                pid: o.enter_pid,
                exit_pid,
                tgid,
                cpu,
                syscall,
                filename: name.text,
                filename_truncated: name.truncated,
                filename_unreadable: name.unreadable,
                enter_ns: o.enter_ns,
                prepare_ns: o.prepare_ns,
                loaded_ns: o.loaded_ns,
                exit_ns,
                ret,
                minor_faults: delta.map(|d| d.0),
                major_faults: delta.map(|d| d.1),
            })
        }
    }
}

/// Joins a whole stream (tests and offline use).
pub fn assemble(records: impl IntoIterator<Item = Record>) -> (Vec<Event>, Unjoined) {
    let mut a = Assembler::new();
    let mut out = Vec::new();
    for r in records {
        a.push(r, &mut out);
    }
    (out, a.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Exit, SpawnSyscall, Syscall};

    const EXECVE: CallKind = CallKind::Exec(Syscall::Execve);

    fn enter(ts_ns: u64, pid: u32, call: CallKind, faults: (u64, u64)) -> Record {
        Record::Enter { ts_ns, pid, tgid: 100, call, faults: Some(faults) }
    }

    fn exit(ts_ns: u64, pid: u32, call: CallKind, ret: i64, faults: (u64, u64), name: Option<&str>) -> Record {
        let name = name.map(|n| Name { text: n.into(), ..Name::default() });
        Record::Exit { ts_ns, pid, tgid: 100, cpu: 1, call, ret, faults: Some(faults), name }
    }

    fn named(n: &str) -> Option<Name> {
        Some(Name { text: n.into(), ..Name::default() })
    }

    fn only_exec(events: &[Event]) -> &ExecAttempt {
        match events {
            [Event::Exec(e)] => e,
            other => panic!("expected one exec, got {other:?}"),
        }
    }

    #[test]
    fn failed_attempt_takes_the_callers_name_and_fault_difference() {
        let (events, unjoined) =
            assemble([enter(1_000, 100, EXECVE, (10, 2)), exit(2_500, 100, EXECVE, -2, (13, 2), Some("/m1/t"))]);
        let e = only_exec(&events);
        assert_eq!((e.enter_ns, e.exit_ns, e.ret, e.duration_ns()), (1_000, 2_500, -2, 1_500));
        assert_eq!((e.minor_faults, e.major_faults), (Some(3), Some(0)));
        assert_eq!((e.filename.as_str(), e.prepare_ns, e.loaded_ns), ("/m1/t", None, None));
        assert_eq!(unjoined, Unjoined::default());
    }

    #[test]
    fn success_takes_phase_times_and_the_kernels_name() {
        let (events, _) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            Record::NoReturn { ts_ns: 2_000, pid: 100, name: named("/bin/t") },
            Record::Loaded { ts_ns: 3_000, pid: 100, old_pid: 100, name: None },
            exit(4_000, 100, EXECVE, 0, (5, 0), None),
        ]);
        let e = only_exec(&events);
        assert_eq!((e.prepare_ns, e.loaded_ns, e.exit_ns), (Some(2_000), Some(3_000), 4_000));
        assert_eq!(e.filename, "/bin/t");
        assert_eq!(e.minor_faults, Some(5));
    }

    #[test]
    fn exec_from_a_non_leader_thread_moves_to_the_leaders_id() {
        let (events, unjoined) = assemble([
            enter(1_000, 101, EXECVE, (0, 0)),
            Record::Event(Event::Exit(Exit { ts_ns: 1_500, pid: 100, tgid: 100, group_dead: false })),
            Record::Loaded { ts_ns: 3_000, pid: 100, old_pid: 101, name: named("/bin/t") },
            exit(4_000, 100, EXECVE, 0, (0, 0), None),
        ]);
        let e = only_exec(&events[1..]);
        assert_eq!((e.pid, e.exit_pid, e.filename.as_str()), (101, 100, "/bin/t"));
        assert_eq!(unjoined, Unjoined::default(), "the leader had no call open");
    }

    #[test]
    fn failure_past_the_point_of_no_return_keeps_the_kernels_name() {
        let (events, _) = assemble([
            enter(1_000, 100, EXECVE, (0, 0)),
            Record::NoReturn { ts_ns: 2_000, pid: 100, name: named("/bin/t") },
            exit(4_000, 100, EXECVE, -12, (0, 0), Some("garbage from the new mm")),
        ]);
        assert_eq!(only_exec(&events).filename, "/bin/t");
    }

    #[test]
    fn spawns_join_like_execs() {
        let clone3 = CallKind::Spawn(SpawnSyscall::Clone3);
        let (events, _) = assemble([enter(100, 100, clone3, (1, 0)), exit(900, 100, clone3, 77, (4, 0), None)]);
        let [Event::Spawn(s)] = &events[..] else { panic!("{events:?}") };
        assert_eq!((s.syscall, s.ret, s.duration_ns(), s.minor_faults), (SpawnSyscall::Clone3, 77, 800, Some(3)));
    }

    #[test]
    fn samples_and_calls_are_tied_to_the_attempt_open_on_their_thread() {
        let (events, _) = assemble([
            Record::Sample { ts_ns: 500, pid: 100, tgid: 100, frames: vec![1] },
            enter(1_000, 100, EXECVE, (0, 0)),
            Record::Sample { ts_ns: 1_100, pid: 100, tgid: 100, frames: vec![2] },
            Record::Sample { ts_ns: 1_150, pid: 101, tgid: 100, frames: vec![3] },
            Record::Call { pid: 100, tgid: 100, enter_ns: 1_200, exit_ns: 1_300, slot: 4 },
            exit(2_000, 100, EXECVE, -2, (0, 0), Some("x")),
        ]);
        let tied: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Sample(s) => Some(s.attempt_enter_ns),
                Event::Call(c) => Some(c.attempt_enter_ns),
                _ => None,
            })
            .collect();
        assert_eq!(tied, vec![0, 1_000, 0, 1_000]);
    }

    #[test]
    fn pieces_that_cannot_be_joined_are_counted() {
        let (events, unjoined) = assemble([
            exit(10, 100, EXECVE, -2, (0, 0), Some("x")), // tracing began mid-call
            enter(20, 100, EXECVE, (0, 0)),
            enter(30, 100, EXECVE, (0, 0)), // the first one's exit was lost
            Record::Event(Event::Exit(Exit { ts_ns: 40, pid: 100, tgid: 100, group_dead: true })), // killed mid-exec
            enter(50, 102, EXECVE, (0, 0)), // still open at the end
        ]);
        assert_eq!(events.len(), 1, "only the thread exit is an event");
        assert_eq!(unjoined, Unjoined { abandoned: 1, exit_without_enter: 1, enter_without_exit: 2 });
    }

    #[test]
    fn a_successful_execveat_may_exit_as_execve() {
        let execveat = CallKind::Exec(Syscall::Execveat);
        let (events, unjoined) = assemble([enter(20, 100, execveat, (0, 0)), exit(30, 100, EXECVE, 0, (0, 0), None)]);
        assert_eq!(only_exec(&events).syscall, Syscall::Execveat);
        assert_eq!(unjoined, Unjoined::default());
    }

    #[test]
    fn an_exit_of_another_syscall_does_not_close_an_exec() {
        let (events, unjoined) =
            assemble([enter(20, 100, EXECVE, (0, 0)), exit(30, 100, CallKind::Spawn(SpawnSyscall::Clone), 5, (0, 0), None)]);
        assert!(events.is_empty());
        assert_eq!(unjoined, Unjoined { abandoned: 0, exit_without_enter: 1, enter_without_exit: 1 });
    }
}
