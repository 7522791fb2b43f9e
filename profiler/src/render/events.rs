//! `--events`: one line per exec attempt, in the order attempts finished, like `execsnoop -x`
//! but with each attempt's latency: time since the trace began (at the attempt's exit), pid,
//! ppid, the calling program's comm, the outcome (symbolic errno), the latency and the file
//! name. Every name is escaped; columns are separated by spaces and the file name comes last,
//! so a line splits into its fields on the first six runs of spaces. With `--argv` the file
//! name and then the arguments (`argv[0]` first) follow as shell words, quoted so that a shell
//! reads them back as they were (a cut list ends in `…`, one the kernel could not read
//! whole in `?`, a lost record is `[arguments lost]`).
use std::{collections::HashMap, io::Write};

use crate::{
    assemble::events::{Event, ExecAttempt},
    model::{
        meta::ProcessName,
        names::{Argv, errno_name, escape_name, shell_quote},
    },
    report::human_ns,
};

/// Writes the lines as the events arrive.
pub(crate) struct EventLines<W: Write> {
    out: W,
    /// Time zero: the trace's start, CLOCK_MONOTONIC ns.
    start_ns: u64,
    /// Each traced process's parent, as far as the events and the process table tell.
    ppid: HashMap<u32, u32>,
    /// Each process's comm now (what exec makes of the file name it ran).
    comm: HashMap<u32, Vec<u8>>,
    /// `--argv`: the arguments follow the file name.
    argv: bool,
    /// The first write error, after which nothing more is written.
    pub(crate) error: Option<std::io::Error>,
}

impl<W: Write> EventLines<W> {
    /// Lines to `out`, timed from `start_ns`, with `preexisting` naming the processes that ran
    /// before the trace; `argv`: with each attempt's arguments.
    pub(crate) fn new(out: W, start_ns: u64, preexisting: &[ProcessName], argv: bool) -> Self {
        let mut lines = Self {
            out,
            start_ns,
            ppid: preexisting.iter().map(|p| (p.tgid, p.ppid)).collect(),
            comm: preexisting.iter().map(|p| (p.tgid, p.comm.clone())).collect(),
            argv,
            error: None,
        };
        lines.write(format_args!(
            "{:>12} {:>7} {:>7} {:<16} {:<8} {:>9}  {}\n",
            "TIME(s)",
            "PID",
            "PPID",
            "COMM",
            "OUTCOME",
            "LATENCY",
            if argv { "FILE ARGV" } else { "FILE" }
        ));
        lines
    }

    fn write(&mut self, args: std::fmt::Arguments<'_>) {
        if self.error.is_none()
            && let Err(e) = self.out.write_fmt(args)
        {
            self.error = Some(e);
        }
    }

    /// Takes the next event (only exec attempts and the process tree's changes matter).
    pub(crate) fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(a) => self.exec(a),
            Event::TaskNew(t) if !t.thread => {
                self.ppid.insert(t.child_tgid, t.parent_tgid);
                if let Some(c) = self.comm.get(&t.parent_tgid).cloned() {
                    self.comm.insert(t.child_tgid, c);
                }
            }
            Event::TaskExit(x) if x.group_dead => {
                self.ppid.remove(&x.tgid);
                self.comm.remove(&x.tgid);
            }
            // Named by the kernel when it joined (a process already named keeps its name).
            Event::Adopted(a) => {
                if let Some(ppid) = a.ppid {
                    self.ppid.entry(a.tgid).or_insert(ppid);
                }
                self.comm.entry(a.tgid).or_insert_with(|| a.comm.clone());
            }
            _ => {}
        }
    }

    fn exec(&mut self, a: &ExecAttempt) {
        let t = a.exit_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        let ppid = self.ppid.get(&a.tgid).map_or_else(|| "?".to_owned(), u32::to_string);
        let comm = self.comm.get(&a.tgid).map_or_else(|| "?".to_owned(), |c| escape_name(c));
        let outcome = match (a.check, a.ret) {
            (true, 0) => "checked".to_owned(),
            (true, r) => format!("check:{}", errno_name(r)),
            (false, 0) => "ok".to_owned(),
            (false, r) => errno_name(r),
        };
        let file =
            if self.argv { format!("{} {}", shell_quote(&a.name.bytes), argv_words(a.argv.as_ref())) } else { escape_name(&a.name.bytes) };
        let latency = human_ns(a.duration_ns() as f64);
        self.write(format_args!("{t:>12.6} {:>7} {ppid:>7} {comm:<16} {outcome:<8} {latency:>9}  {file}\n", a.pid));
        if a.executed() {
            // The process runs the new file now: its comm is the kernel's where it was seen,
            // else the basename cut to 15 bytes (an fexecve's from 6.14 on is the file's name).
            let comm = a.comm.clone().unwrap_or_else(|| {
                let base = a.name.bytes.rsplit(|&b| b == b'/').next().unwrap_or(&a.name.bytes);
                base[..base.len().min(15)].to_vec()
            });
            self.comm.insert(a.tgid, comm);
        }
    }

    /// Flushes and hands back the writer.
    pub(crate) fn finish(mut self) -> std::io::Result<W> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The arguments as shell words (`argv[0]` first), with the marks of what is missing.
fn argv_words(argv: Option<&Argv>) -> String {
    let Some(a) = argv else { return "[arguments lost]".to_owned() };
    let mut words: Vec<String> = a.args.iter().map(|arg| shell_quote(arg)).collect();
    if a.unreadable {
        words.push("?".to_owned());
    } else if a.cut {
        words.push("…".to_owned());
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::attempt, assemble::events::TaskNew};

    /// A process from the table forks a child that fails once (a name with a newline) and
    /// execs /bin/true: the lines name the child's parent, its inherited comm, the errno by
    /// name, and after the exec the new comm.
    #[test]
    fn one_line_per_attempt_with_ppid_comm_errno_and_latency() {
        let table = [ProcessName { tgid: 10, ppid: 1, exe: b"/usr/bin/make".to_vec(), comm: b"make".to_vec() }];
        let mut lines = EventLines::new(Vec::new(), 1_000_000_000, &table, false);
        lines.event(&Event::TaskNew(TaskNew { ts_ns: 0, parent_pid: 10, parent_tgid: 10, child_pid: 11, child_tgid: 11, thread: false }));
        let mut miss = attempt(11, 1_500_000_000, 1_500_002_500, -2, None);
        miss.name.bytes = b"/m/x\ny".to_vec();
        lines.event(&Event::Exec(miss));
        let mut ok = attempt(11, 1_600_000_000, 1_600_300_000, 0, None);
        ok.name.bytes = b"/bin/true".to_vec();
        lines.event(&Event::Exec(ok));
        lines.event(&Event::Exec(attempt(11, 1_700_000_000, 1_700_001_000, -13, None)));
        let text = String::from_utf8(lines.finish().unwrap()).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(rows[0].trim_start().starts_with("TIME(s)"));
        assert_eq!(rows[1], "    0.500003      11      10 make             ENOENT     2.50 µs  /m/x\\x0ay");
        assert_eq!(rows[2], "    0.600300      11      10 make             ok          300 µs  /bin/true");
        assert!(rows[3].contains(" true ") && rows[3].contains("EACCES"), "{}", rows[3]);
    }

    /// `--cgroup` with a process that moved in after attach: its line names the parent and
    /// comm the kernel saw when it adopted it, and a process whose adoption was lost shows `?`.
    #[test]
    fn an_adopted_process_has_its_parent_and_comm() {
        let mut lines = EventLines::new(Vec::new(), 0, &[], false);
        lines.event(&crate::analysis::test_support::adopted(20, Some(15), "bash", 100));
        let mut ok = attempt(20, 1_000, 2_000, 0, None);
        ok.name.bytes = b"/usr/bin/true".to_vec();
        lines.event(&Event::Exec(ok));
        lines.event(&Event::Exec(attempt(21, 3_000, 4_000, -2, None)));
        let text = String::from_utf8(lines.finish().unwrap()).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[1], "    0.000002      20      15 bash             ok         1.00 µs  /usr/bin/true");
        assert!(rows[2].starts_with("    0.000004      21       ? ?                ENOENT"), "{}", rows[2]);
    }

    /// With --argv: the file and the arguments as shell words, hostile bytes quoted, and the
    /// marks of a cut list, an unreadable one and a lost record.
    #[test]
    fn argv_lines_are_shell_words_with_their_marks() {
        let mut lines = EventLines::new(Vec::new(), 0, &[], true);
        let mut a = attempt(7, 1_000, 2_000, -2, None);
        a.name.bytes = b"/bin/my prog".to_vec();
        a.argv =
            Some(Argv { args: vec![b"my prog".to_vec(), b"-x".to_vec(), b"a\nb".to_vec(), Vec::new()], cut: false, unreadable: false });
        lines.event(&Event::Exec(a.clone()));
        a.argv = Some(Argv { args: vec![b"x".to_vec()], cut: true, unreadable: false });
        lines.event(&Event::Exec(a.clone()));
        a.argv = Some(Argv { args: vec![], cut: false, unreadable: true });
        lines.event(&Event::Exec(a.clone()));
        a.argv = None;
        lines.event(&Event::Exec(a));
        let text = String::from_utf8(lines.finish().unwrap()).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert!(rows[0].ends_with("  FILE ARGV"), "{}", rows[0]);
        assert!(rows[1].ends_with("  '/bin/my prog' 'my prog' -x $'a\\x0ab' ''"), "{}", rows[1]);
        assert!(rows[2].ends_with("  '/bin/my prog' x …"), "{}", rows[2]);
        assert!(rows[3].ends_with("  '/bin/my prog' ?"), "{}", rows[3]);
        assert!(rows[4].ends_with("  '/bin/my prog' [arguments lost]"), "{}", rows[4]);
    }
}
