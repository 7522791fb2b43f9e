//! The legacy trace (`--trace-format json`: Chrome trace-event JSON, which Perfetto loads on a
//! best-effort basis), written as events arrive: one track per
//! thread, a slice per exec attempt with its parts nested inside (before/after the point of no
//! return; probed kernel functions in exact mode), fork-family call slices, user-space slices
//! between a chain's execs, off-CPU slices, instant events for new tasks, `main` and each
//! attempt's page faults. Times are relative to the command's release, in microseconds as the
//! format wants (fractions keep nanoseconds). Memory follows the threads seen, not the run.
use std::{
    collections::{BTreeSet, HashMap},
    io::{self, Write},
};

use serde_json::{Value, json};

use crate::{
    analysis::outcome::Outcome,
    assemble::events::{Event, EventSink, ExecAttempt},
    model::meta::ExactPlan,
    model::names::escape_name,
};

pub(crate) struct ChromeTraceWriter<W: Write> {
    out: W,
    t0: u64,
    plan: Option<ExactPlan>,
    wrote_any: bool,
    threads: BTreeSet<(u32, u32)>,
    /// Per process: when its last successful exec returned, until its next attempt.
    after_success: HashMap<u32, u64>,
    /// The first write error; later events are dropped and `finish` returns it.
    error: Option<io::Error>,
}

impl<W: Write> ChromeTraceWriter<W> {
    /// `t0`: the records' clock at time zero of the trace.
    pub(crate) fn new(mut out: W, t0: u64, plan: Option<ExactPlan>) -> Self {
        let error = out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n").err();
        Self { out, t0, plan, wrote_any: false, threads: BTreeSet::new(), after_success: HashMap::new(), error }
    }

    fn us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.t0) as f64 / 1000.0
    }

    fn emit(&mut self, v: Value) {
        if self.error.is_some() {
            return;
        }
        let sep: &[u8] = if self.wrote_any { b",\n" } else { b"" };
        self.wrote_any = true;
        let r = self.out.write_all(sep).and_then(|()| serde_json::to_writer(&mut self.out, &v).map_err(io::Error::from));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// A complete slice from `span.0` to `span.1` on thread `track` (pid, tid).
    fn slice(&mut self, name: &str, cat: &str, span: (u64, u64), track: (u32, u32), args: Option<Value>) {
        let ((start, end), (pid, tid)) = (span, track);
        let mut v = json!({"name": name, "cat": cat, "ph": "X", "ts": self.us(start), "dur": end.saturating_sub(start) as f64 / 1000.0, "pid": pid, "tid": tid});
        if let Some(a) = args {
            v["args"] = a;
        }
        self.emit(v);
    }

    fn instant(&mut self, name: &str, cat: &str, ts: u64, pid: u32, tid: u32, args: Option<Value>) {
        let mut v = json!({"name": name, "cat": cat, "ph": "i", "s": "t", "ts": self.us(ts), "pid": pid, "tid": tid});
        if let Some(a) = args {
            v["args"] = a;
        }
        self.emit(v);
    }

    fn exec(&mut self, a: &ExecAttempt) {
        let (pid, tid) = (a.tgid, a.exit_pid);
        self.threads.insert((pid, tid));
        if let Some(t) = self.after_success.remove(&a.tgid)
            && a.enter_ns > t
        {
            self.slice("user space", "user", (t, a.enter_ns), (pid, a.pid), None);
        }
        if a.executed() {
            self.after_success.insert(a.tgid, a.exit_ns);
        }
        let args =
            json!({ "filename": escape_name(&a.name.bytes), "ret": a.ret, "minor_faults": a.minor_faults, "major_faults": a.major_faults });
        self.slice(&format!("exec {}", Outcome::of_attempt(a).label()), "exec", (a.enter_ns, a.exit_ns), (pid, tid), Some(args));
        if let Some(p) = a.prepare_ns {
            self.slice("before point of no return", "exec.part", (a.enter_ns, p), (pid, tid), None);
            self.slice("after point of no return", "exec.part", (p, a.exit_ns), (pid, tid), None);
        }
        for c in &a.inside.probed {
            let name =
                self.plan.as_ref().and_then(|p| p.function_of(c.slot)).map_or_else(|| format!("slot {}", c.slot), |f| f.function.clone());
            self.slice(&name, "function", (c.enter_ns, c.exit_ns), (pid, c.pid), None);
        }
        if let Some(n) = a.minor_faults.filter(|n| *n > 0) {
            self.instant(&format!("{n} page faults"), "faults", a.exit_ns, pid, tid, Some(json!({"minor": n, "major": a.major_faults})));
        }
    }

    /// Closes the JSON (thread names last) and flushes; returns the first write error.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        for (tgid, tid) in std::mem::take(&mut self.threads) {
            self.emit(json!({"name": "thread_name", "ph": "M", "pid": tgid, "tid": tid, "args": {"name": format!("tid {tid}")}}));
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> EventSink for ChromeTraceWriter<W> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(a) => self.exec(a),
            Event::TaskNew(f) => {
                self.threads.insert((f.parent_tgid, f.parent_pid));
                let name = if f.thread { "clone (thread)" } else { "fork" };
                let args = json!({"child_pid": f.child_pid, "child_tgid": f.child_tgid});
                self.instant(name, "fork", f.ts_ns, f.parent_tgid, f.parent_pid, Some(args));
            }
            Event::ForkCall(s) => {
                self.threads.insert((s.tgid, s.pid));
                let args = json!({"ret": s.ret, "minor_faults": s.minor_faults});
                self.slice(s.syscall.label(), "fork-call", (s.enter_ns, s.exit_ns), (s.tgid, s.pid), Some(args));
            }
            Event::OffCpu(o) => self.slice("off-CPU", "offcpu", (o.start_ns, o.end_ns), (o.tgid, o.pid), None),
            Event::Main(m) => self.instant("main", "main", m.ts_ns, m.tgid, m.pid, None),
            Event::TaskExit(x) => {
                if x.group_dead {
                    self.after_success.remove(&x.tgid);
                }
            }
            Event::Adopted(a) => {
                self.threads.insert((a.tgid, a.pid));
                let args = json!({"ppid": a.ppid, "comm": escape_name(&a.comm)});
                self.instant("adopted (moved into the cgroup)", "fork", a.ts_ns, a.tgid, a.pid, Some(args));
            }
            Event::OrphanSample(_) | Event::SampleBeforeEnter(_) | Event::OrphanProbedCall(_) | Event::OrphanCallSums(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::attempt, assemble::events::TaskNew};

    #[test]
    fn one_exec_slice_per_attempt_with_parts_faults_and_user_gaps() {
        let mut ok = attempt(7, 1_000, 41_000, 0, Some(3));
        ok.prepare_ns = Some(11_000);
        let events = [
            Event::TaskNew(TaskNew { ts_ns: 500, parent_pid: 6, parent_tgid: 6, child_pid: 7, child_tgid: 7, thread: false }),
            Event::Exec(ok),
            Event::Exec(attempt(7, 50_000, 51_500, -2, Some(0))),
            Event::Exec(attempt(7, 52_000, 90_000, 0, Some(2))),
        ];
        let mut w = ChromeTraceWriter::new(Vec::new(), 500, None);
        events.iter().for_each(|e| w.event(e));
        let bytes = w.finish().unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let count = |cat: &str| evs.iter().filter(|e| e["cat"] == cat).count();
        assert_eq!(count("exec"), 3);
        assert_eq!(count("exec.part"), 2);
        assert_eq!(count("fork"), 1);
        assert_eq!(count("faults"), 2, "attempts with faults get an instant each");
        assert_eq!(count("user"), 1, "one gap after the first successful exec");
        let first = evs.iter().find(|e| e["cat"] == "exec").unwrap();
        assert_eq!(first["ts"], 0.5, "relative to the release, in µs");
        assert_eq!(first["dur"], 40.0);
        assert_eq!(evs.iter().filter(|e| e["ph"] == "M").count(), 2, "threads 6 and 7 named");
    }

    #[test]
    fn a_write_error_is_returned_at_the_end() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = ChromeTraceWriter::new(Full, 0, None);
        w.event(&Event::Exec(attempt(7, 1, 2, 0, None)));
        assert_eq!(w.finish().err().unwrap().kind(), io::ErrorKind::StorageFull);
    }
}
