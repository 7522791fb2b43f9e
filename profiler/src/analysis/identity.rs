//! Which program each traced process runs, so that an exec attempt or a fork-family call is
//! charged to the program that made it, in any scope: the processes that existed before
//! tracing began come from the run's [`ProcessName`] table, a process that moved into a
//! `--cgroup` scope later is named by the kernel when it is adopted (`Adopted`: its comm and
//! parent, read before its first traced call runs), a new process inherits its parent's
//! program (`TaskNew`) and keeps it until it execs, and a successful exec gives it the exec'd
//! file's name. An attempt is charged to its caller *before* the exec: the program that made
//! it, not the image it became.
//!
//! A process leaves the table when its last thread exits, so the table follows the processes
//! alive; programs are interned once each (by name, never by pid) and outlive their
//! processes, for the tallies keyed by them.
//!
//! A process never named by any of these (it began before tracing and is not in the table,
//! or the record of its start or adoption was lost) is `pid N (unknown program)` — except in
//! a launched tree: there every traced process descends from the launched one, and the one
//! process that appears without a `TaskNew` is execprof's own child before it exec'd the
//! command: [`Program::Launcher`] (one per run of a `--repeat` recording).
use foldhash::{HashMap, HashMapExt as _};

use serde::{Deserialize, Serialize};

use crate::{
    assemble::events::{Adopted, ExecAttempt, TaskNew},
    model::{meta::ProcessName, names::escape_name},
};

/// The kernel's `TASK_COMM_LEN` less its NUL: how much of a file name's basename exec keeps
/// as the process's comm.
const COMM_BYTES: usize = 15;

/// An interned program: an index into [`Identities`]' table.
pub(crate) type ProgramId = u32;

/// A program as the tables are keyed: exact bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ProgramKey {
    Exe { exe: Vec<u8>, comm: Vec<u8> },
    Launcher,
    Unknown(u32),
}

/// A program as the report names it (escaped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Program {
    /// An executable: the name it was exec'd by (for a process that existed before tracing,
    /// its `/proc/PID/exe`; empty when not known: unreadable, as for kernel threads, or a
    /// process adopted by `--cgroup`, which the kernel names by its comm alone).
    Exe {
        /// The file name, escaped ([`escape_name`]).
        exe: String,
        /// The comm, escaped, when it is not what exec makes of `exe` (its basename cut to 15
        /// bytes): a process that renamed itself, or whose exe link is not the name it was
        /// exec'd by.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comm: Option<String>,
    },
    /// execprof's own child before it exec'd the launched command (the launch exec).
    Launcher,
    /// A process whose program was never seen: it began before tracing and was not in the
    /// table of processes read at attach, or the record of its start was lost.
    Unknown {
        /// Its process id.
        pid: u32,
    },
}

impl std::fmt::Display for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Program::Exe { exe, comm } if exe.is_empty() => write!(f, "[{}]", comm.as_deref().unwrap_or("")),
            Program::Exe { exe, comm: Some(c) } => write!(f, "{exe} [{c}]"),
            Program::Exe { exe, comm: None } => f.write_str(exe),
            Program::Launcher => f.write_str("execprof (launching the command)"),
            Program::Unknown { pid } => write!(f, "pid {pid} (unknown program)"),
        }
    }
}

/// The comm exec gives a process that exec'd `name`: its basename, cut to 15 bytes. (Since
/// 6.14 an `execveat` of an fd with `AT_EMPTY_PATH` takes the file's dentry name instead of
/// `/dev/fd/N`'s `N`; the attempt does not carry it, so such a program shows the `N`.)
pub(crate) fn comm_of(name: &[u8]) -> &[u8] {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    &base[..base.len().min(COMM_BYTES)]
}

/// What a traced process runs now, and what ran before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The program it runs.
    pub(crate) program: ProgramId,
    /// The program that started it: the one that exec'd it (for a forked child's first exec,
    /// the parent's program), or for a process that existed before tracing its parent
    /// process's program; None when there is none to name (the kernel's roots, execprof's
    /// own child).
    pub(crate) started_by: Option<ProgramId>,
}

/// Every traced process's identity, and every program named so far.
pub(crate) struct Identities {
    /// execprof launched what it traces (no running process was attached to).
    launched_tree: bool,
    processes: HashMap<u32, Identity>,
    programs: Vec<ProgramKey>,
    ids: HashMap<ProgramKey, ProgramId>,
}

impl Identities {
    /// The identities of the processes that existed when tracing began; `launched_tree`:
    /// execprof launched what it traces (the table is then empty). An attached scope's table
    /// may be empty too (a `--cgroup` empty at attach): it is not a launched tree.
    pub(crate) fn new(preexisting: &[ProcessName], launched_tree: bool) -> Self {
        let mut ids = Self { launched_tree, processes: HashMap::new(), programs: Vec::new(), ids: HashMap::new() };
        let programs: HashMap<u32, ProgramId> =
            preexisting.iter().map(|p| (p.tgid, ids.intern(ProgramKey::Exe { exe: p.exe.clone(), comm: p.comm.clone() }))).collect();
        for p in preexisting {
            let started_by = match p.ppid {
                0 => None,
                ppid => Some(programs.get(&ppid).copied().unwrap_or_else(|| ids.intern(ProgramKey::Unknown(ppid)))),
            };
            ids.processes.insert(p.tgid, Identity { program: programs[&p.tgid], started_by });
        }
        ids
    }

    fn intern(&mut self, key: ProgramKey) -> ProgramId {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.programs.len() as ProgramId;
        self.programs.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    /// The identity of process `tgid` now (see the module documentation for a process never
    /// named).
    pub(crate) fn of(&mut self, tgid: u32) -> Identity {
        if let Some(&i) = self.processes.get(&tgid) {
            return i;
        }
        let program = self.intern(if self.launched_tree { ProgramKey::Launcher } else { ProgramKey::Unknown(tgid) });
        Identity { program, started_by: None }
    }

    /// A new process runs its parent's program (a new thread changes nothing).
    pub(crate) fn task_new(&mut self, t: &TaskNew) {
        if !t.thread {
            let parent = self.of(t.parent_tgid);
            self.processes.insert(t.child_tgid, parent);
        }
    }

    /// A process adopted by `--cgroup` runs what the kernel saw it run, named by its comm,
    /// started by its parent's program (as for a process of the table). One already named (a
    /// process also seeded from the table, or a second thread's adoption) keeps its name.
    pub(crate) fn adopted(&mut self, a: &Adopted) {
        if self.processes.contains_key(&a.tgid) {
            return;
        }
        let program = self.intern(ProgramKey::Exe { exe: Vec::new(), comm: a.comm.clone() });
        let started_by = a.ppid.map(|ppid| match self.processes.get(&ppid) {
            Some(parent) => parent.program,
            None => self.intern(ProgramKey::Unknown(ppid)),
        });
        self.processes.insert(a.tgid, Identity { program, started_by });
    }

    /// After a successful exec the process runs the exec'd file, started by what ran before
    /// (an `AT_EXECVE_CHECK` check that passed executed nothing: the process runs what it ran).
    /// Call it after charging the attempt to [`Identities::of`] the caller.
    pub(crate) fn exec(&mut self, a: &ExecAttempt) {
        if !a.executed() {
            return;
        }
        let before = self.of(a.tgid);
        let bytes = &a.name.bytes;
        // The kernel's own comm where it was seen: from Linux 6.14 an fexecve (`/dev/fd/N`)
        // takes the file's name, not the fd number the name's last part gives.
        let comm = a.comm.clone().unwrap_or_else(|| comm_of(bytes).to_vec());
        let program = self.intern(ProgramKey::Exe { exe: bytes.clone(), comm });
        self.processes.insert(a.tgid, Identity { program, started_by: Some(before.program) });
    }

    /// The process's last thread exited: it leaves the table (its programs stay).
    pub(crate) fn process_gone(&mut self, tgid: u32) {
        self.processes.remove(&tgid);
    }

    /// Whether `program` is execprof's own child before the launch exec.
    pub(crate) fn is_launcher(&self, program: ProgramId) -> bool {
        self.programs[program as usize] == ProgramKey::Launcher
    }

    /// Processes in the table.
    #[cfg(test)]
    pub(crate) fn alive(&self) -> usize {
        self.processes.len()
    }

    /// Every program named, by id, as the report names them.
    pub(crate) fn programs(&self) -> Vec<Program> {
        self.programs
            .iter()
            .map(|k| match k {
                ProgramKey::Exe { exe, comm } => Program::Exe {
                    exe: escape_name(exe),
                    comm: (comm.as_slice() != comm_of(exe) || exe.is_empty()).then(|| escape_name(comm)),
                },
                ProgramKey::Launcher => Program::Launcher,
                ProgramKey::Unknown(pid) => Program::Unknown { pid: *pid },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::attempt;

    fn exec(tgid: u32, name: &[u8], ret: i64) -> ExecAttempt {
        let mut a = attempt(tgid, 0, 10, ret, None);
        a.name.bytes = name.to_vec();
        a
    }

    fn fork(parent: u32, child: u32) -> TaskNew {
        TaskNew { ts_ns: 0, parent_pid: parent, parent_tgid: parent, child_pid: child, child_tgid: child, thread: false }
    }

    fn name(ids: &mut Identities, tgid: u32) -> (String, Option<String>) {
        let i = ids.of(tgid);
        let programs = ids.programs();
        (programs[i.program as usize].to_string(), i.started_by.map(|s| programs[s as usize].to_string()))
    }

    #[test]
    fn comm_is_the_basename_cut_as_the_kernel_cuts_it() {
        assert_eq!(comm_of(b"/usr/bin/ls"), b"ls");
        assert_eq!(comm_of(b"ls"), b"ls");
        assert_eq!(comm_of(b"/x/a-very-long-program-name"), b"a-very-long-pro");
        assert_eq!(comm_of(b"/dev/fd/3"), b"3");
    }

    /// A process from the table forks a child: the child is its parent's program until it
    /// execs, then the exec'd file, started by the parent's program.
    #[test]
    fn a_preexisting_process_forks_a_child_that_execs() {
        let table = [
            ProcessName { tgid: 1, ppid: 0, exe: b"/usr/lib/systemd/systemd".to_vec(), comm: b"systemd".to_vec() },
            ProcessName { tgid: 50, ppid: 1, exe: b"/usr/bin/bash".to_vec(), comm: b"bash".to_vec() },
            ProcessName { tgid: 60, ppid: 7, exe: b"/usr/bin/python3.11".to_vec(), comm: b"build.py".to_vec() },
            ProcessName { tgid: 2, ppid: 0, exe: vec![], comm: b"kthreadd".to_vec() },
        ];
        let mut ids = Identities::new(&table, false);
        assert_eq!(name(&mut ids, 50), ("/usr/bin/bash".into(), Some("/usr/lib/systemd/systemd".into())));
        assert_eq!(name(&mut ids, 1).1, None, "ppid 0: nothing to name");
        assert_eq!(name(&mut ids, 60), ("/usr/bin/python3.11 [build.py]".into(), Some("pid 7 (unknown program)".into())));
        assert_eq!(name(&mut ids, 2).0, "[kthreadd]");
        ids.task_new(&fork(50, 51));
        assert_eq!(name(&mut ids, 51).0, "/usr/bin/bash", "inherited until it execs");
        let failed = exec(51, b"/usr/local/bin/make", -2);
        ids.exec(&failed);
        assert_eq!(name(&mut ids, 51).0, "/usr/bin/bash", "a failed exec changes nothing");
        ids.exec(&exec(51, b"/usr/bin/make", 0));
        assert_eq!(name(&mut ids, 51), ("/usr/bin/make".into(), Some("/usr/bin/bash".into())));
        assert_eq!(name(&mut ids, 999).0, "pid 999 (unknown program)", "not in the table, never started");
    }

    #[test]
    fn in_a_launched_tree_the_unannounced_process_is_the_launcher() {
        let mut ids = Identities::new(&[], true);
        assert_eq!(name(&mut ids, 100), ("execprof (launching the command)".into(), None));
        ids.exec(&exec(100, b"/bin/sh", 0));
        ids.task_new(&fork(100, 101));
        ids.exec(&exec(101, b"/x/a-very-long-program-name", 0));
        assert_eq!(name(&mut ids, 101), ("/x/a-very-long-program-name".into(), Some("/bin/sh".into())));
        assert_eq!(name(&mut ids, 100).1.as_deref(), Some("execprof (launching the command)"));
    }

    /// A passed `AT_EXECVE_CHECK` check executes nothing: the caller stays what it was. An
    /// fexecve's program is its `/dev/fd/N` name with the comm the kernel set: from 6.14 the
    /// file's own name, before it the fd number (what the name says, so not shown).
    #[test]
    fn a_check_renames_nothing_and_an_fexecve_keeps_the_kernels_comm() {
        let mut ids = Identities::new(&[], true);
        ids.exec(&exec(100, b"/bin/sh", 0));
        let mut check = exec(100, b"/dev/fd/3", 0);
        check.check = true;
        ids.exec(&check);
        assert_eq!(name(&mut ids, 100).0, "/bin/sh");
        let mut fexecve = exec(100, b"/dev/fd/4", 0);
        fexecve.comm = Some(b"memfd:execprof-".to_vec());
        ids.exec(&fexecve);
        assert_eq!(name(&mut ids, 100), ("/dev/fd/4 [memfd:execprof-]".into(), Some("/bin/sh".into())));
        ids.task_new(&fork(100, 101));
        let mut before_6_14 = exec(101, b"/dev/fd/4", 0);
        before_6_14.comm = Some(b"4".to_vec());
        ids.exec(&before_6_14);
        assert_eq!(name(&mut ids, 101).0, "/dev/fd/4");
    }

    /// Identities leave with their processes; programs stay, interned once by name.
    #[test]
    fn exited_processes_leave_the_table_and_programs_stay() {
        let mut ids = Identities::new(&[], true);
        for child in 2..1002 {
            ids.task_new(&fork(1, child));
            ids.exec(&exec(child, b"/bin/true", 0));
            ids.process_gone(child);
        }
        assert_eq!(ids.alive(), 0);
        assert_eq!(ids.programs().len(), 2, "the launcher and /bin/true");
    }
}
