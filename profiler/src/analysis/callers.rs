//! Who pays for exec: exec attempts and fork-family calls by the program that made them
//! ([`super::identity`]), with what they cost in the kernel. Keyed by program, not by process:
//! a thousand short-lived `sh` processes are one row, and the tally outlives them.
use foldhash::HashMap;

use serde::{Deserialize, Serialize};

use super::{
    identity::{Identity, Program, ProgramId},
    outcome::Outcome,
};
use crate::assemble::events::{ExecAttempt, ForkCall};

/// At most this many calling programs are kept in the JSON (the report prints fewer).
pub const MAX_CALLERS: usize = 1000;

/// At most this many starting programs are listed per calling program.
pub const MAX_STARTED_BY: usize = 10;

/// Exec attempts and fork-family calls made by one program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerSummary {
    /// The program that made them.
    pub program: Program,
    /// The programs that started it (see [`StartedBy`]), most calls first (at most
    /// [`MAX_STARTED_BY`]).
    pub started_by: Vec<StartedBy>,
    /// Starting programs beyond [`MAX_STARTED_BY`], not listed.
    pub started_by_not_listed: u64,
    /// Exec attempts it made (all outcomes).
    pub attempts: u64,
    /// Of those, successful.
    pub successes: u64,
    /// Failed with ENOENT.
    pub enoent: u64,
    /// Failed with EACCES.
    pub eacces: u64,
    /// Failed with ENOEXEC.
    pub enoexec: u64,
    /// Failed with any other errno.
    pub other: u64,
    /// Killed mid-exec ([`Outcome::Abandoned`]).
    pub abandoned: u64,
    /// `AT_EXECVE_CHECK` checks, passed or failed ([`Outcome::Checked`],
    /// [`Outcome::CheckFailed`]): counted in `attempts`, in no exec outcome.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checks: u64,
    /// Kernel time in its checks, in ns.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub check_ns: u64,
    /// Kernel time in its failed attempts (abandoned ones included), in ns.
    pub failed_ns: u64,
    /// Kernel time in its successful attempts, in ns.
    pub success_ns: u64,
    /// Fork-family calls it made.
    pub fork_calls: u64,
    /// Kernel time in them, in ns.
    pub fork_ns: u64,
}

impl CallerSummary {
    /// Kernel time in its exec attempts (checks included): what the table is sorted by.
    pub fn exec_ns(&self) -> u64 {
        self.failed_ns + self.success_ns + self.check_ns
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A program that started a calling program, and how many of the caller's calls (exec
/// attempts and fork-family calls) came from processes it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedBy {
    /// The program that exec'd the caller (for a forked child's first exec: the parent's
    /// program), or for a process that existed before tracing its parent process's program;
    /// None when there is none to name (the kernel's roots, execprof's own child).
    pub program: Option<Program>,
    /// Calls made by processes it started.
    pub calls: u64,
}

#[derive(Clone, Debug, Default)]
struct CallerTally {
    /// By position in [`Outcome::ALL`].
    outcomes: [u64; Outcome::ALL.len()],
    failed_ns: u64,
    success_ns: u64,
    check_ns: u64,
    fork_calls: u64,
    fork_ns: u64,
    started_by: HashMap<Option<ProgramId>, u64>,
}

/// Every calling program's tally, folded as calls arrive.
#[derive(Clone, Debug, Default)]
pub(crate) struct Callers {
    by: HashMap<ProgramId, CallerTally>,
}

impl Callers {
    /// An exec attempt made by `caller` (its identity before the attempt).
    pub(crate) fn attempt(&mut self, caller: Identity, a: &ExecAttempt) {
        let t = self.tally(caller);
        let outcome = Outcome::of_attempt(a);
        let i = Outcome::ALL.iter().position(|&o| o == outcome).expect("an exec outcome");
        t.outcomes[i] += 1;
        if outcome == Outcome::Success {
            t.success_ns += a.duration_ns();
        } else if outcome.is_check() {
            t.check_ns += a.duration_ns();
        } else {
            t.failed_ns += a.duration_ns();
        }
    }

    /// A fork-family call made by `caller`.
    pub(crate) fn fork_call(&mut self, caller: Identity, f: &ForkCall) {
        let t = self.tally(caller);
        t.fork_calls += 1;
        t.fork_ns += f.duration_ns();
    }

    fn tally(&mut self, caller: Identity) -> &mut CallerTally {
        let t = self.by.entry(caller.program).or_default();
        *t.started_by.entry(caller.started_by).or_default() += 1;
        t
    }

    /// The callers, most exec kernel time first (then most fork-family calls, then by
    /// name), at most [`MAX_CALLERS`]; and how many more there were. `programs` names the
    /// program ids.
    pub(crate) fn finish(self, programs: &[Program]) -> (Vec<CallerSummary>, u64) {
        let name = |id: ProgramId| programs[id as usize].clone();
        let mut list: Vec<CallerSummary> = self
            .by
            .into_iter()
            .map(|(program, t)| {
                let mut started_by: Vec<StartedBy> =
                    t.started_by.into_iter().map(|(p, calls)| StartedBy { program: p.map(name), calls }).collect();
                started_by.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.program.cmp(&b.program)));
                let started_by_not_listed = started_by.len().saturating_sub(MAX_STARTED_BY) as u64;
                started_by.truncate(MAX_STARTED_BY);
                let [successes, enoent, eacces, enoexec, other, abandoned, checked, check_failed] = t.outcomes;
                CallerSummary {
                    program: name(program),
                    started_by,
                    started_by_not_listed,
                    attempts: t.outcomes.iter().sum(),
                    successes,
                    enoent,
                    eacces,
                    enoexec,
                    other,
                    abandoned,
                    checks: checked + check_failed,
                    check_ns: t.check_ns,
                    failed_ns: t.failed_ns,
                    success_ns: t.success_ns,
                    fork_calls: t.fork_calls,
                    fork_ns: t.fork_ns,
                }
            })
            .collect();
        list.sort_by(|a, b| b.exec_ns().cmp(&a.exec_ns()).then(b.fork_calls.cmp(&a.fork_calls)).then_with(|| a.program.cmp(&b.program)));
        let not_listed = list.len().saturating_sub(MAX_CALLERS) as u64;
        list.truncate(MAX_CALLERS);
        (list, not_listed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        AnalysisContext, Analyzer,
        attribution::SymbolTable,
        phases::PhaseModel,
        test_support::{adopted, analyse_from, analyse_scope, exec, exit, fork, process, who_pays},
    };
    use crate::assemble::events::{Event, EventSink as _};

    fn exe(path: &str) -> Program {
        Program::Exe { exe: path.into(), comm: None }
    }

    fn by(program: Option<Program>, calls: u64) -> StartedBy {
        StartedBy { program, calls }
    }

    /// Each attempt is charged to the program that made it: make's children are make until
    /// they exec, so make pays for their searches; cron pays for its children's failures.
    #[test]
    fn attempts_are_charged_to_the_program_that_made_them() {
        let (table, events) = who_pays();
        let a = analyse_from(&table, &events);
        let rows: Vec<String> = a
            .callers
            .iter()
            .map(|c| {
                format!(
                    "{}: {} attempts, {} ok, {} ENOENT, {} ns failed, {} ns ok, {} forks, {} ns forking",
                    c.program, c.attempts, c.successes, c.enoent, c.failed_ns, c.success_ns, c.fork_calls, c.fork_ns
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                "/usr/bin/make: 33 attempts, 10 ok, 23 ENOENT, 28600 ns failed, 600000 ns ok, 11 forks, 275000 ns forking",
                "/usr/bin/bash: 1 attempts, 1 ok, 0 ENOENT, 0 ns failed, 200000 ns ok, 1 forks, 30000 ns forking",
                "pid 777 (unknown program): 1 attempts, 1 ok, 0 ENOENT, 0 ns failed, 50000 ns ok, 0 forks, 0 ns forking",
                "/usr/sbin/cron: 3 attempts, 0 ok, 3 ENOENT, 6000 ns failed, 0 ns ok, 3 forks, 60000 ns forking",
            ]
        );
        assert_eq!(a.callers[0].started_by, vec![by(Some(exe("/usr/bin/bash")), 44)]);
        assert_eq!(a.callers[1].started_by, vec![by(Some(exe("/usr/lib/systemd/systemd")), 2)]);
        assert_eq!(a.callers[2].started_by, vec![by(None, 1)]);
        assert_eq!(a.callers_not_listed, 0);
        assert!(a.callers.iter().all(|c| c.attempts == c.successes + c.enoent + c.eacces + c.enoexec + c.other + c.abandoned + c.checks));
    }

    /// In a launched tree the launch exec is the launcher's; an exec chain's later images are
    /// started by the earlier ones, in one process.
    #[test]
    fn a_launched_chain_is_one_program_started_by_the_launcher_and_itself() {
        let mut events = vec![exec(100, "/t/bin/chain", 0, 0, 40_000)];
        for step in 1..=3u64 {
            events.push(exec(100, "/t/m1/chain", -2, step * 100_000, 1_000));
            events.push(exec(100, "/t/bin/chain", 0, step * 100_000 + 10_000, 40_000));
        }
        let a = analyse_from(&[], &events);
        let names: Vec<String> = a.callers.iter().map(|c| c.program.to_string()).collect();
        assert_eq!(names, ["/t/bin/chain", "execprof (launching the command)"]);
        assert_eq!((a.callers[0].attempts, a.callers[0].enoent), (6, 3));
        assert_eq!(a.callers[0].started_by, vec![by(Some(exe("/t/bin/chain")), 4), by(Some(Program::Launcher), 2)]);
        assert_eq!(a.callers[1].started_by, vec![by(None, 1)]);
    }

    /// A process that exits leaves the identity table; what it paid stays with its program,
    /// and a process that later takes its pid without a start seen is not taken for it.
    #[test]
    fn an_exit_drops_the_identity_and_keeps_the_aggregates() {
        let model = PhaseModel::builtin().unwrap();
        let table = [process(300, 1, "/usr/bin/bash", "bash")];
        let mut an = Analyzer::new(AnalysisContext { model: &model, sampled: false, exact: None, preexisting: &table, launched: false });
        let mut events: Vec<Event> = fork(300, 301, 0, 10).into();
        events.push(exec(301, "/usr/bin/make", 0, 100, 1_000));
        events.push(exec(301, "/usr/bin/cc", -13, 2_000, 500));
        events.iter().for_each(|e| an.event(e));
        assert_eq!(an.identities.alive(), 2);
        an.event(&exit(301, 301, true));
        assert_eq!(an.identities.alive(), 1, "the exited process left the table");
        an.event(&exec(301, "/usr/bin/cc", -13, 5_000, 700));
        let a = an.finish(&SymbolTable::default());
        let row = |name: &str| a.callers.iter().find(|c| c.program.to_string() == name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!((row("/usr/bin/make").eacces, row("/usr/bin/make").failed_ns), (1, 500), "kept after the exit");
        assert_eq!(row("pid 301 (unknown program)").eacces, 1, "a pid seen again without a start is unknown");
        assert_eq!(row("/usr/bin/bash").successes, 1);
    }

    /// `--cgroup` on a cgroup empty at attach (so no process table): a shell moves itself in
    /// and execs (`echo $$ > cgroup.procs; exec true`), as container runtimes and systemd do.
    /// Its exec is charged to the shell the kernel named when it adopted it, started by its
    /// parent outside the cgroup; what the exec'd program does is its own. A process whose
    /// adoption record was lost is unknown by its pid, never execprof's launcher: nothing was
    /// launched.
    #[test]
    fn a_process_that_moves_into_the_cgroup_is_its_own_program() {
        let mut events = vec![adopted(500, Some(40), "bash", 0), exec(500, "/usr/bin/true", 0, 10, 300_000)];
        events.extend(fork(500, 501, 400_000, 20_000));
        events.push(exec(600, "/usr/bin/env", 0, 500_000, 100_000));
        let a = analyse_scope(&[], false, &events);
        let row = |name: &str| a.callers.iter().find(|c| c.program.to_string() == name).unwrap_or_else(|| panic!("no {name}: {a:#?}"));
        assert!(a.callers.iter().all(|c| c.program != Program::Launcher), "{:?}", a.callers);
        let bash = row("[bash]");
        assert_eq!(bash.program, Program::Exe { exe: String::new(), comm: Some("bash".into()) });
        assert_eq!((bash.attempts, bash.successes, bash.success_ns), (1, 1, 300_000));
        assert_eq!(bash.started_by, vec![by(Some(Program::Unknown { pid: 40 }), 1)]);
        let t = row("/usr/bin/true");
        assert_eq!((t.attempts, t.fork_calls), (0, 1));
        assert_eq!(t.started_by, vec![by(Some(Program::Exe { exe: String::new(), comm: Some("bash".into()) }), 1)]);
        assert_eq!(row("pid 600 (unknown program)").successes, 1);
        // The same events in a launched tree: the unannounced process is the launcher.
        let launched = analyse_scope(&[], true, &events[4..]);
        assert_eq!(launched.callers[0].program, Program::Launcher);
    }

    /// An adoption names only a process not named yet: one also read into the table at attach
    /// keeps the table's name (its exe), and a second adoption of it changes nothing.
    #[test]
    fn an_adoption_does_not_rename_a_process_already_named() {
        let table = [process(70, 1, "/usr/bin/make", "make")];
        let events = [adopted(70, Some(1), "make", 0), adopted(71, None, "sh", 5), adopted(71, Some(9), "other", 6)];
        let mut events = events.to_vec();
        events.push(exec(70, "/x/cc", -2, 10, 1_000));
        events.push(exec(71, "/x/cc", -2, 20, 1_000));
        let a = analyse_scope(&table, false, &events);
        let names: Vec<(String, Vec<StartedBy>)> = a.callers.iter().map(|c| (c.program.to_string(), c.started_by.clone())).collect();
        let make = ("/usr/bin/make".to_owned(), vec![by(Some(Program::Unknown { pid: 1 }), 1)]);
        assert_eq!(names, [("[sh]".to_owned(), vec![by(None, 1)]), make]);
    }

    #[test]
    fn the_list_is_capped_and_says_how_many_more() {
        let mut events = Vec::new();
        for i in 0..(MAX_CALLERS as u32 + 5) {
            let pid = 1_000 + i;
            events.push(exec(pid, &format!("/bin/p{i}"), 0, u64::from(i) * 100, 10));
            events.push(exec(pid, "/bin/x", -2, u64::from(i) * 100 + 50, 10 + u64::from(i)));
        }
        // Launched: each process makes its first attempt as the launcher (one program).
        let a = analyse_from(&[], &events);
        assert_eq!((a.callers.len(), a.callers_not_listed), (MAX_CALLERS, 6));
        assert_eq!(a.callers[0].program, Program::Launcher, "1005 launch execs: most exec time first");
        assert_eq!(a.callers[1].program.to_string(), format!("/bin/p{}", MAX_CALLERS + 4));
    }
}
