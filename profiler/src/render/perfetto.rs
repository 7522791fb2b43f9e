//! Perfetto's own trace format (`--trace`): a `perfetto.protos.Trace`, written a packet at a
//! time as events arrive. A track per process and per thread (in exact mode also a child track
//! per thread for the probed kernel functions, whose calls cross the exec's parts). On a thread's
//! track: a slice per exec attempt named by its outcome and file (`exec ENOENT /usr/bin/cc`),
//! its page faults as arguments, its part after the point of no return nested inside (the rest
//! is the part before); fork-family calls with their return; off-CPU slices; instants for new
//! tasks, `main` and adoptions. The gaps between a thread's slices are its user-space time.
//!
//! Compact as Perfetto's own SDK writes it: every string (slice names, argument names and
//! values) is interned once per sequence, and a packet's timestamp counts nanoseconds from the
//! previous packet's on an incremental clock (`DELTA_CLOCK`), two or three bytes. A packet
//! earlier than the one before it (an exec's begin, written at its end after the off-CPU
//! slices inside it; another thread's longer call) says its time on the absolute clock
//! instead. Times are relative to the command's release. Memory follows the live threads and
//! at most `MAX_INTERNED` strings: past that the sequence's interned state is cleared and the
//! strings written again as they recur.
use std::{
    cmp::Reverse,
    collections::HashMap,
    io::{self, Write},
};

use prost::Message as _;

use crate::{
    analysis::outcome::Outcome,
    assemble::events::{Event, EventSink, ExecAttempt},
    model::{meta::ExactPlan, names::escape_name},
};

/// prost's types for `proto/perfetto_trace.proto` (the subset of Perfetto's trace format
/// execprof writes).
#[allow(clippy::all, missing_docs, unreachable_pub, dead_code)]
pub(crate) mod proto {
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
}

use proto::{
    ClockSnapshot, DebugAnnotation, DebugAnnotationName, EventName, InternedData, InternedString, ProcessDescriptor, ThreadDescriptor,
    TracePacket, TracePacketDefaults, TrackDescriptor, TrackEvent, clock_snapshot::Clock, debug_annotation, trace_packet, track_descriptor,
    track_event,
};

/// The one packet sequence this writer writes.
const SEQUENCE: u32 = 1;
/// Perfetto's builtin BOOTTIME clock, the trace's own: here, nanoseconds since the release.
const ABSOLUTE_CLOCK: u32 = 6;
/// A sequence-scoped clock (64..=127) whose timestamps are deltas from the previous packet's.
const DELTA_CLOCK: u32 = 64;
/// `TracePacket.SequenceFlags`.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
/// Interned strings kept before the sequence's incremental state is cleared.
const MAX_INTERNED: usize = 1 << 16;
/// Every packet's sequence.
const ON_SEQUENCE: Option<trace_packet::OptionalTrustedPacketSequenceId> =
    Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(SEQUENCE));
/// `Trace.packet`'s key: field 1, length-delimited.
const PACKET_KEY: u8 = 0x0a;

/// Strings interned on the sequence, each kind with its own ids (from 1).
#[derive(Default)]
struct Interned {
    names: HashMap<String, u64>,
    keys: HashMap<&'static str, u64>,
    values: HashMap<Vec<u8>, u64>,
}

impl Interned {
    fn len(&self) -> usize {
        self.names.len() + self.keys.len() + self.values.len()
    }

    fn name(&mut self, name: &str, new: &mut InternedData) -> u64 {
        if let Some(&iid) = self.names.get(name) {
            return iid;
        }
        let iid = self.names.len() as u64 + 1;
        self.names.insert(name.to_owned(), iid);
        new.event_names.push(EventName { iid: Some(iid), name: Some(name.to_owned()) });
        iid
    }

    fn key(&mut self, key: &'static str, new: &mut InternedData) -> u64 {
        let next = self.keys.len() as u64 + 1;
        *self.keys.entry(key).or_insert_with(|| {
            new.debug_annotation_names.push(DebugAnnotationName { iid: Some(next), name: Some(key.to_owned()) });
            next
        })
    }

    fn value(&mut self, value: &str, new: &mut InternedData) -> u64 {
        if let Some(&iid) = self.values.get(value.as_bytes()) {
            return iid;
        }
        let iid = self.values.len() as u64 + 1;
        self.values.insert(value.as_bytes().to_vec(), iid);
        new.debug_annotation_string_values.push(InternedString { iid: Some(iid), str: Some(value.as_bytes().to_vec()) });
        iid
    }
}

/// An argument of a slice or instant.
enum Arg {
    Int(&'static str, i64),
    /// Interned: file names and comms repeat.
    Str(&'static str, String),
}

/// One track event before it is written.
struct Mark {
    ts: u64,
    track: u64,
    kind: MarkKind,
    /// Orders marks at the same time: see [`Mark::order`].
    order: (u8, Reverse<u64>),
}

enum MarkKind {
    Begin { name: String, args: Vec<Arg> },
    End { args: Vec<Arg> },
    Instant { name: String, args: Vec<Arg> },
}

impl Mark {
    /// The begin and end of a slice from `span.0` to `span.1`. At one instant ends of earlier
    /// slices come first (the inner one first), then begins (the outer one first), then the ends
    /// of slices that took no time: nesting stays right whatever order the parts were listed in.
    fn slice(track: u64, span: (u64, u64), name: String, args: (Vec<Arg>, Vec<Arg>)) -> [Mark; 2] {
        let (start, end) = (span.0, span.1.max(span.0));
        let end_class = if end == start { 2 } else { 0 };
        [
            Mark { ts: start, track, kind: MarkKind::Begin { name, args: args.0 }, order: (1, Reverse(end)) },
            Mark { ts: end, track, kind: MarkKind::End { args: args.1 }, order: (end_class, Reverse(start)) },
        ]
    }

    fn instant(track: u64, ts: u64, name: String, args: Vec<Arg>) -> Mark {
        Mark { ts, track, kind: MarkKind::Instant { name, args }, order: (1, Reverse(ts)) }
    }
}

/// The tracks of one thread.
#[derive(Clone, Copy)]
struct ThreadTracks {
    thread: u64,
    /// The probed functions' child track, once it has a call.
    functions: Option<u64>,
}

pub(crate) struct PerfettoWriter<W: Write> {
    out: W,
    t0: u64,
    plan: Option<ExactPlan>,
    interned: Interned,
    /// Live processes' and threads' tracks.
    processes: HashMap<u32, u64>,
    threads: HashMap<(u32, u32), ThreadTracks>,
    next_uuid: u64,
    /// The delta clock's time: the last packet written on it.
    clock_ns: u64,
    /// Whether the sequence has begun (its first packet clears its incremental state).
    begun: bool,
    buf: Vec<u8>,
    /// Interned strings kept before the state is cleared (`MAX_INTERNED`; smaller in tests).
    max_interned: usize,
    /// The first write error; later events are dropped and `finish` returns it.
    error: Option<io::Error>,
}

impl<W: Write> PerfettoWriter<W> {
    /// `t0`: the records' clock at time zero of the trace.
    pub(crate) fn new(out: W, t0: u64, plan: Option<ExactPlan>) -> Self {
        Self {
            out,
            t0,
            plan,
            interned: Interned::default(),
            processes: HashMap::new(),
            threads: HashMap::new(),
            next_uuid: 1,
            clock_ns: 0,
            begun: false,
            buf: Vec::with_capacity(256),
            max_interned: MAX_INTERNED,
            error: None,
        }
    }

    fn write_packet(&mut self, packet: &TracePacket) {
        if self.error.is_some() {
            return;
        }
        self.buf.clear();
        self.buf.push(PACKET_KEY);
        packet.encode_length_delimited(&mut self.buf).expect("a Vec grows");
        if let Err(e) = self.out.write_all(&self.buf) {
            self.error = Some(e);
        }
    }

    /// Starts the sequence again: its interned strings forgotten, the delta clock set to the
    /// last packet's time, every later packet's timestamp on it by default.
    fn clear_incremental_state(&mut self) {
        self.interned = Interned::default();
        let clock = |clock_id, is_incremental| Clock {
            clock_id: Some(clock_id),
            timestamp: Some(self.clock_ns),
            is_incremental,
            unit_multiplier_ns: None,
        };
        let packet = TracePacket {
            optional_trusted_packet_sequence_id: ON_SEQUENCE,
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: (!self.begun).then_some(true),
            trace_packet_defaults: Some(TracePacketDefaults { timestamp_clock_id: Some(DELTA_CLOCK) }),
            data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
                clocks: vec![clock(ABSOLUTE_CLOCK, None), clock(DELTA_CLOCK, Some(true))],
            })),
            ..Default::default()
        };
        self.write_packet(&packet);
        self.begun = true;
    }

    fn new_uuid(&mut self) -> u64 {
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        uuid
    }

    fn descriptor(&mut self, d: TrackDescriptor) {
        if !self.begun {
            self.clear_incremental_state();
        }
        let packet = TracePacket {
            optional_trusted_packet_sequence_id: ON_SEQUENCE,
            data: Some(trace_packet::Data::TrackDescriptor(d)),
            ..Default::default()
        };
        self.write_packet(&packet);
    }

    /// The track of thread `tid` of process `tgid`, described on first use.
    fn thread_track(&mut self, tgid: u32, tid: u32) -> u64 {
        if let Some(t) = self.threads.get(&(tgid, tid)) {
            return t.thread;
        }
        let process = match self.processes.get(&tgid) {
            Some(&uuid) => uuid,
            None => {
                let uuid = self.new_uuid();
                self.processes.insert(tgid, uuid);
                self.descriptor(TrackDescriptor {
                    uuid: Some(uuid),
                    process: Some(ProcessDescriptor { pid: Some(tgid as i32), ..Default::default() }),
                    ..Default::default()
                });
                uuid
            }
        };
        let uuid = self.new_uuid();
        self.threads.insert((tgid, tid), ThreadTracks { thread: uuid, functions: None });
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(process),
            thread: Some(ThreadDescriptor { pid: Some(tgid as i32), tid: Some(i64::from(tid)), thread_name: None }),
            ..Default::default()
        });
        uuid
    }

    /// The child track of thread `tid` for its probed kernel functions.
    fn functions_track(&mut self, tgid: u32, tid: u32) -> u64 {
        let thread = self.thread_track(tgid, tid);
        if let Some(uuid) = self.threads.get(&(tgid, tid)).and_then(|t| t.functions) {
            return uuid;
        }
        let uuid = self.new_uuid();
        if let Some(t) = self.threads.get_mut(&(tgid, tid)) {
            t.functions = Some(uuid);
        }
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(thread),
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name("kernel functions".to_owned())),
            ..Default::default()
        });
        uuid
    }

    fn args(&mut self, args: Vec<Arg>, new: &mut InternedData) -> Vec<DebugAnnotation> {
        args.into_iter()
            .map(|a| {
                let (key, value) = match a {
                    Arg::Int(k, v) => (k, debug_annotation::Value::IntValue(v)),
                    Arg::Str(k, s) => (k, debug_annotation::Value::StringValueIid(self.interned.value(&s, new))),
                };
                DebugAnnotation { name_field: Some(debug_annotation::NameField::NameIid(self.interned.key(key, new))), value: Some(value) }
            })
            .collect()
    }

    /// Writes `marks` in time order, each a packet.
    fn write_marks(&mut self, mut marks: Vec<Mark>) {
        marks.sort_by_key(|m| (m.ts, m.order));
        for m in marks {
            self.write_mark(m);
        }
    }

    fn write_mark(&mut self, m: Mark) {
        if !self.begun || self.interned.len() >= self.max_interned {
            self.clear_incremental_state();
        }
        let mut new = InternedData::default();
        let (kind, name, args) = match m.kind {
            MarkKind::Begin { name, args } => (track_event::Type::SliceBegin, Some(name), args),
            MarkKind::End { args } => (track_event::Type::SliceEnd, None, args),
            MarkKind::Instant { name, args } => (track_event::Type::Instant, Some(name), args),
        };
        let event = TrackEvent {
            category_iids: Vec::new(),
            name_field: name.map(|n| track_event::NameField::NameIid(self.interned.name(&n, &mut new))),
            r#type: Some(kind as i32),
            track_uuid: Some(m.track),
            debug_annotations: self.args(args, &mut new),
        };
        let ts = m.ts.saturating_sub(self.t0);
        // Deltas on the sequence's clock; a packet earlier than the last says its absolute time.
        let (timestamp, clock) = if ts >= self.clock_ns {
            let delta = ts - self.clock_ns;
            self.clock_ns = ts;
            (delta, None)
        } else {
            (ts, Some(ABSOLUTE_CLOCK))
        };
        let has_new =
            !(new.event_names.is_empty() && new.debug_annotation_names.is_empty() && new.debug_annotation_string_values.is_empty());
        let packet = TracePacket {
            timestamp: Some(timestamp),
            timestamp_clock_id: clock,
            optional_trusted_packet_sequence_id: ON_SEQUENCE,
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            interned_data: has_new.then_some(new),
            data: Some(trace_packet::Data::TrackEvent(event)),
            ..Default::default()
        };
        self.write_packet(&packet);
    }

    fn exec(&mut self, a: &ExecAttempt) {
        let (pid, tid) = (a.tgid, a.exit_pid);
        let track = self.thread_track(pid, tid);
        let mut marks = Vec::with_capacity(4);
        let outcome = Outcome::of_attempt(a);
        let mut begin_args = Vec::new();
        if matches!(outcome, Outcome::Other | Outcome::CheckFailed) {
            begin_args.push(Arg::Int("ret", a.ret));
        }
        let mut end_args = Vec::new();
        if let Some(n) = a.minor_faults.filter(|n| *n > 0) {
            end_args.push(Arg::Int("minor_faults", n as i64));
        }
        if let Some(n) = a.major_faults.filter(|n| *n > 0) {
            end_args.push(Arg::Int("major_faults", n as i64));
        }
        let name = format!("exec {} {}", outcome.label(), escape_name(&a.name.bytes));
        marks.extend(Mark::slice(track, (a.enter_ns, a.exit_ns), name, (begin_args, end_args)));
        if let Some(p) = a.prepare_ns {
            marks.extend(Mark::slice(track, (p, a.exit_ns), "after point of no return".to_owned(), (Vec::new(), Vec::new())));
        }
        for c in &a.inside.probed {
            let name =
                self.plan.as_ref().and_then(|p| p.function_of(c.slot)).map_or_else(|| format!("slot {}", c.slot), |f| f.function.clone());
            let functions = self.functions_track(pid, c.pid);
            marks.extend(Mark::slice(functions, (c.enter_ns, c.exit_ns), name, (Vec::new(), Vec::new())));
        }
        self.write_marks(marks);
    }

    /// Flushes; returns the first write error.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> EventSink for PerfettoWriter<W> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(a) => self.exec(a),
            Event::TaskNew(f) => {
                let track = self.thread_track(f.parent_tgid, f.parent_pid);
                let (name, args) = if f.thread {
                    ("clone (thread)", vec![Arg::Int("child_tid", i64::from(f.child_pid))])
                } else {
                    ("fork", vec![Arg::Int("child_pid", i64::from(f.child_tgid))])
                };
                self.write_marks(vec![Mark::instant(track, f.ts_ns, name.to_owned(), args)]);
            }
            Event::ForkCall(s) => {
                let track = self.thread_track(s.tgid, s.pid);
                let mut end_args = vec![Arg::Int("ret", s.ret)];
                if let Some(n) = s.minor_faults.filter(|n| *n > 0) {
                    end_args.push(Arg::Int("minor_faults", n as i64));
                }
                let marks = Mark::slice(track, (s.enter_ns, s.exit_ns), s.syscall.label().to_owned(), (Vec::new(), end_args));
                self.write_marks(marks.into());
            }
            Event::OffCpu(o) => {
                let track = self.thread_track(o.tgid, o.pid);
                let marks = Mark::slice(track, (o.start_ns, o.end_ns), "off-CPU".to_owned(), (Vec::new(), Vec::new()));
                self.write_marks(marks.into());
            }
            Event::Main(m) => {
                let track = self.thread_track(m.tgid, m.pid);
                self.write_marks(vec![Mark::instant(track, m.ts_ns, "main".to_owned(), Vec::new())]);
            }
            Event::TaskExit(x) => {
                // A pid used again is another thread: it gets new tracks.
                self.threads.remove(&(x.tgid, x.pid));
                if x.group_dead {
                    self.processes.remove(&x.tgid);
                    self.threads.retain(|(tgid, _), _| *tgid != x.tgid);
                }
            }
            Event::Adopted(a) => {
                let track = self.thread_track(a.tgid, a.pid);
                let mut args = vec![Arg::Str("comm", escape_name(&a.comm))];
                if let Some(p) = a.ppid {
                    args.push(Arg::Int("ppid", i64::from(p)));
                }
                self.write_marks(vec![Mark::instant(track, a.ts_ns, "adopted (moved into the cgroup)".to_owned(), args)]);
            }
            Event::OrphanSample(_) | Event::SampleBeforeEnter(_) | Event::OrphanProbedCall(_) | Event::OrphanCallSums(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::{
        analysis::test_support::attempt,
        assemble::events::{OffCpu, ProbedCall, TaskExit},
        model::meta::ProbedFunction,
    };

    /// A track event as a trace processor reads it: time through the sequence's clocks, names
    /// through its interned data.
    #[derive(Debug)]
    struct Read {
        ts: u64,
        track: u64,
        kind: i32,
        name: Option<String>,
        args: Vec<(String, String)>,
        absolute: bool,
    }

    /// The packets, and their track events read.
    fn read(bytes: &[u8]) -> (Vec<TracePacket>, Vec<Read>) {
        let trace = proto::Trace::decode(bytes).expect("a Trace");
        let (mut names, mut keys, mut values) = (HashMap::new(), HashMap::new(), HashMap::new());
        let (mut default_clock, mut delta_clock) = (ABSOLUTE_CLOCK, None::<u64>);
        let mut out = Vec::new();
        for p in &trace.packet {
            assert_eq!(p.optional_trusted_packet_sequence_id, ON_SEQUENCE);
            if p.sequence_flags == Some(SEQ_INCREMENTAL_STATE_CLEARED) {
                (names, keys, values) = (HashMap::new(), HashMap::new(), HashMap::new());
            }
            if let Some(d) = &p.trace_packet_defaults {
                default_clock = d.timestamp_clock_id.unwrap();
            }
            if let Some(d) = &p.interned_data {
                names.extend(d.event_names.iter().map(|e| (e.iid.unwrap(), e.name.clone().unwrap())));
                keys.extend(d.debug_annotation_names.iter().map(|e| (e.iid.unwrap(), e.name.clone().unwrap())));
                values.extend(
                    d.debug_annotation_string_values.iter().map(|e| (e.iid.unwrap(), String::from_utf8(e.str.clone().unwrap()).unwrap())),
                );
            }
            let event = match &p.data {
                Some(trace_packet::Data::ClockSnapshot(c)) => {
                    let at = |id| c.clocks.iter().find(|k| k.clock_id == Some(id)).unwrap();
                    assert_eq!(at(ABSOLUTE_CLOCK).timestamp, at(DELTA_CLOCK).timestamp, "one time domain");
                    assert_eq!(at(DELTA_CLOCK).is_incremental, Some(true));
                    delta_clock = at(DELTA_CLOCK).timestamp;
                    continue;
                }
                Some(trace_packet::Data::TrackEvent(e)) => e,
                _ => continue,
            };
            assert_eq!(p.sequence_flags, Some(SEQ_NEEDS_INCREMENTAL_STATE));
            let clock = p.timestamp_clock_id.unwrap_or(default_clock);
            let ts = if clock == DELTA_CLOCK {
                let t = delta_clock.expect("a snapshot before") + p.timestamp.unwrap();
                delta_clock = Some(t);
                t
            } else {
                p.timestamp.unwrap()
            };
            let name = event.name_field.as_ref().map(|n| match n {
                track_event::NameField::NameIid(iid) => names[iid].clone(),
                track_event::NameField::Name(s) => s.clone(),
            });
            let args = event
                .debug_annotations
                .iter()
                .map(|a| {
                    let Some(debug_annotation::NameField::NameIid(k)) = a.name_field else { panic!("names interned") };
                    let v = match a.value.as_ref().unwrap() {
                        debug_annotation::Value::IntValue(v) => v.to_string(),
                        debug_annotation::Value::StringValueIid(iid) => values[iid].clone(),
                        v => panic!("{v:?}"),
                    };
                    (keys[&k].clone(), v)
                })
                .collect();
            out.push(Read {
                ts,
                track: event.track_uuid.unwrap(),
                kind: event.r#type.unwrap(),
                name,
                args,
                absolute: clock == ABSOLUTE_CLOCK,
            });
        }
        (trace.packet, out)
    }

    /// Each track's slices as (name, start, end), rebuilt as a trace processor does: sorted by
    /// time (file order among equals), begins and ends replayed as a stack.
    fn slices(events: &[Read]) -> Vec<(u64, String, u64, u64)> {
        let mut order: Vec<&Read> = events.iter().collect();
        order.sort_by_key(|e| e.ts);
        let mut stacks: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
        let mut out = Vec::new();
        for e in order {
            let stack = stacks.entry(e.track).or_default();
            match track_event::Type::try_from(e.kind).unwrap() {
                track_event::Type::SliceBegin => stack.push((e.name.clone().unwrap(), e.ts)),
                track_event::Type::SliceEnd => {
                    let (name, start) = stack.pop().expect("an open slice");
                    out.push((e.track, name, start, e.ts));
                }
                _ => {}
            }
        }
        assert!(stacks.values().all(Vec::is_empty), "every slice ends");
        out.sort();
        out
    }

    fn write(events: &[Event], plan: Option<ExactPlan>, max_interned: usize) -> Vec<u8> {
        let mut w = PerfettoWriter::new(Vec::new(), 1_000, plan);
        w.max_interned = max_interned;
        events.iter().for_each(|e| w.event(e));
        w.finish().unwrap()
    }

    #[test]
    fn exec_slices_carry_outcome_file_faults_and_their_late_part() {
        let mut ok = attempt(7, 10_000, 50_000, 0, Some(3));
        ok.prepare_ns = Some(30_000);
        ok.name.bytes = b"/bin/t\x1b".to_vec();
        let events = [
            Event::Exec(attempt(7, 2_000, 4_000, -2, None)),
            // Off-CPU inside the successful exec: it arrives first.
            Event::OffCpu(OffCpu { pid: 7, tgid: 7, start_ns: 12_000, end_ns: 20_000 }),
            Event::Exec(ok),
        ];
        let (packets, read) = read(&write(&events, None, MAX_INTERNED));
        let first = &packets[0];
        assert_eq!((first.sequence_flags, first.first_packet_on_sequence), (Some(SEQ_INCREMENTAL_STATE_CLEARED), Some(true)));
        assert_eq!(first.trace_packet_defaults.as_ref().unwrap().timestamp_clock_id, Some(DELTA_CLOCK));
        let track = read[0].track;
        assert_eq!(
            slices(&read),
            vec![
                (track, "after point of no return".to_owned(), 29_000, 49_000),
                (track, "exec ENOENT /x".to_owned(), 1_000, 3_000),
                (track, "exec success /bin/t\\x1b".to_owned(), 9_000, 49_000),
                (track, "off-CPU".to_owned(), 11_000, 19_000),
            ],
            "relative to the release, the escaped name"
        );
        let begin = read.iter().find(|e| e.name.as_deref().is_some_and(|n| n.starts_with("exec success"))).unwrap();
        assert!(begin.absolute, "earlier than the off-CPU slice written before it: on the absolute clock");
        assert!(read.iter().filter(|e| e.ts >= 19_000).all(|e| !e.absolute), "later ones are deltas");
        let end = read.iter().rfind(|e| e.kind == track_event::Type::SliceEnd as i32).unwrap();
        assert_eq!(end.args, vec![("minor_faults".to_owned(), "3".to_owned())]);
        // One thread track under one process track, described before their events.
        let tracks: Vec<&TrackDescriptor> = packets
            .iter()
            .filter_map(|p| if let Some(trace_packet::Data::TrackDescriptor(d)) = &p.data { Some(d) } else { None })
            .collect();
        assert_eq!(tracks.len(), 2);
        assert_eq!(tracks[1].thread.as_ref().unwrap().tid, Some(7));
        assert_eq!(tracks[1].parent_uuid, tracks[0].uuid);
    }

    #[test]
    fn probed_functions_nest_on_their_own_track_whatever_order_they_come_in() {
        let f = |slot, name: &str| ProbedFunction {
            slot,
            function: name.to_owned(),
            raw_name: name.to_owned(),
            address: 0,
            by_address: false,
            mechanism: Default::default(),
        };
        let plan = ExactPlan { functions: vec![f(0, "do_execveat_common"), f(1, "do_open_execat")], absent: vec![], over_capacity: vec![] };
        let mut a = attempt(7, 10_000, 90_000, 0, None);
        a.prepare_ns = Some(40_000);
        // Inner calls exit first, so come first; both begin at the same instant; the outer one
        // crosses the point of no return.
        a.inside.probed = vec![
            ProbedCall { pid: 7, enter_ns: 10_000, exit_ns: 20_000, slot: 1, off_cpu_ns: 0 },
            ProbedCall { pid: 7, enter_ns: 10_000, exit_ns: 80_000, slot: 0, off_cpu_ns: 0 },
        ];
        let (_, read) = read(&write(&[Event::Exec(a)], Some(plan), MAX_INTERNED));
        let all = slices(&read);
        let functions: Vec<_> = all.iter().filter(|s| !s.1.starts_with("exec") && !s.1.starts_with("after")).collect();
        assert_eq!(functions.len(), 2);
        assert_ne!(functions[0].0, all.iter().find(|s| s.1.starts_with("exec")).unwrap().0, "not the thread's track");
        let span = |name: &str| functions.iter().find(|s| s.1 == name).map(|s| (s.2, s.3)).unwrap();
        assert_eq!(span("do_execveat_common"), (9_000, 79_000));
        assert_eq!(span("do_open_execat"), (9_000, 19_000));
    }

    #[test]
    fn too_many_strings_clear_the_sequence_and_names_still_read_right() {
        let events: Vec<Event> = (0..40u64)
            .map(|i| {
                let mut a = attempt(7, 10_000 + i * 1_000, 10_500 + i * 1_000, -2, None);
                a.name.bytes = format!("/d{}/t", i % 20).into_bytes();
                Event::Exec(a)
            })
            .collect();
        let (packets, read) = read(&write(&events, None, 8));
        let clears = packets.iter().filter(|p| p.sequence_flags == Some(SEQ_INCREMENTAL_STATE_CLEARED)).count();
        assert!(clears >= 40 / 8, "{clears} clears");
        let mut s = slices(&read);
        s.sort_by_key(|s| s.2);
        assert_eq!(s.len(), 40);
        for (i, (_, name, start, _)) in s.iter().enumerate() {
            assert_eq!((name.as_str(), *start), (format!("exec ENOENT /d{}/t", i % 20).as_str(), 9_000 + i as u64 * 1_000));
        }
    }

    #[test]
    fn an_exited_process_s_tracks_are_forgotten_and_its_pid_used_again_gets_new_ones() {
        let events = [
            Event::Exec(attempt(7, 2_000, 3_000, -2, None)),
            Event::TaskExit(TaskExit { ts_ns: 4_000, pid: 7, tgid: 7, group_dead: true }),
            Event::Exec(attempt(7, 5_000, 6_000, -2, None)),
        ];
        let mut w = PerfettoWriter::new(Vec::new(), 0, None);
        events.iter().for_each(|e| w.event(e));
        assert_eq!((w.processes.len(), w.threads.len()), (1, 1), "only the live process");
        let (_, read) = read(&w.finish().unwrap());
        assert_ne!(read[0].track, read[2].track);
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
        let mut w = PerfettoWriter::new(Full, 0, None);
        w.event(&Event::Exec(attempt(7, 1, 2, 0, None)));
        assert_eq!(w.finish().err().unwrap().kind(), io::ErrorKind::StorageFull);
    }
}
