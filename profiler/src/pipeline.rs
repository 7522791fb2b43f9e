//! The one way data flows, for a live run and for a recording alike:
//! `ring buffer item → decode → record → (recorder) → assembler → sink`. A live run feeds it
//! ring buffer items as they arrive; `execprof report` feeds it the records of a recording;
//! `bench spawn --kernel` feeds it with a sink of its own. The driver is generic over its
//! sink; [`RunSinks`] (the analyzer and the trace writer) is the one `run` and `report` use.
//! A record that cannot be decoded is counted, never dropped silently. Nothing here touches
//! the kernel, so a replay needs no privileges.
// Ring buffer items, checkpoints and the tree's liveness are the live source's (with the
// tracer); without it the replay uses the rest.
#![cfg_attr(not(feature = "tracer"), allow(dead_code))]
use std::{
    collections::HashSet,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use crate::{
    analysis::{Analysis, AnalysisContext, Analyzer, attribution::SymbolTable},
    assemble::Assembler,
    assemble::events::{Event, EventSink},
    model::meta::{MissingInterpreter, RunMeta, Unjoined},
    record::{self, Record},
    recording::{RecordingWriter, WriteStats},
    render::{TraceFormat, chrome_trace::ChromeTraceWriter, events::EventLines},
};

/// An output file written as the run goes on, remembered with its path so an error can name it.
pub(crate) struct OutputFile<T> {
    pub path: PathBuf,
    pub writer: T,
}

pub(crate) type Recorder = OutputFile<RecordingWriter<BufWriter<File>>>;
pub(crate) type TraceOutput = OutputFile<TraceWriter<BufWriter<File>>>;
/// `--trace`'s writer, in the format asked for.
pub(crate) enum TraceWriter<W: std::io::Write> {
    #[cfg(feature = "tracer")]
    Perfetto(Box<crate::render::perfetto::PerfettoWriter<W>>),
    Json(ChromeTraceWriter<W>),
}

impl<W: std::io::Write> TraceWriter<W> {
    /// Ends the file; returns the first write error.
    pub(crate) fn finish(self) -> std::io::Result<W> {
        match self {
            #[cfg(feature = "tracer")]
            Self::Perfetto(w) => w.finish(),
            Self::Json(w) => w.finish(),
        }
    }
}

impl<W: std::io::Write> EventSink for TraceWriter<W> {
    fn event(&mut self, event: &Event) {
        match self {
            #[cfg(feature = "tracer")]
            Self::Perfetto(w) => w.event(event),
            Self::Json(w) => w.event(event),
        }
    }
}

/// `--events`: a file, or standard output (path `-`).
pub(crate) type EventsOutput = OutputFile<EventLines<Box<dyn std::io::Write + Send>>>;

/// Where a run's assembled events go: the analysis and the Perfetto trace.
pub(crate) struct RunSinks<'a> {
    analyzer: Analyzer<'a>,
    trace: Option<TraceOutput>,
    events: Option<EventsOutput>,
    /// Processes of the traced tree alive, as the events tell (for stopping the tree).
    alive: HashSet<u32>,
    attempts: u64,
}

impl EventSink for RunSinks<'_> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(_) => self.attempts += 1,
            Event::TaskNew(t) if !t.thread => {
                self.alive.insert(t.child_tgid);
            }
            Event::Adopted(a) => {
                self.alive.insert(a.tgid);
            }
            Event::TaskExit(x) if x.group_dead => {
                self.alive.remove(&x.tgid);
            }
            _ => {}
        }
        self.analyzer.event(event);
        if let Some(t) = &mut self.trace {
            t.writer.event(event);
        }
        if let Some(e) = &mut self.events {
            e.writer.event(event);
        }
    }
}

pub(crate) struct Pipeline<S> {
    assembler: Assembler,
    sink: S,
    recorder: Option<Recorder>,
    /// The first error writing the recording; recording stops there, the rest goes on.
    recorder_error: Option<String>,
    undecodable: u64,
    first_decode_error: Option<String>,
}

/// The pipeline `run` and `report` drive.
pub(crate) type RunPipeline<'a> = Pipeline<RunSinks<'a>>;

/// What any pipeline leaves when its stream ends.
pub(crate) struct Drained<S> {
    pub sink: S,
    pub unjoined: Unjoined,
    /// Ring buffer items that could not be decoded, and the first one's error.
    pub undecodable: u64,
    pub first_decode_error: Option<String>,
    /// Still open: the caller writes the run's end into it.
    pub recorder: Option<Recorder>,
    pub recorder_error: Option<String>,
}

/// What a finished run pipeline hands back.
pub(crate) struct Finished {
    pub analysis: Analysis,
    pub unjoined: Unjoined,
    /// Names of every address in the run's stacks (what a recording keeps).
    pub symbols: SymbolTable,
    pub undecodable: u64,
    pub first_decode_error: Option<String>,
    /// Still open: the caller writes the run's end into it.
    pub recorder: Option<Recorder>,
    /// Why an output could not be written, naming it (the others still were).
    pub output_errors: Vec<String>,
    /// Why the recording stopped before the run ended (a full disk, an I/O error): the run's
    /// figures are whole, its recording is not.
    pub(crate) recording_error: Option<String>,
    /// The ENOENT names found to exist, and why they failed (for the run's end).
    pub(crate) missing_interpreters: Vec<MissingInterpreter>,
}

impl<S: EventSink> Pipeline<S> {
    pub(crate) fn with_sink(sink: S, recorder: Option<Recorder>) -> Self {
        Self { assembler: Assembler::new(), sink, recorder, recorder_error: None, undecodable: 0, first_decode_error: None }
    }

    /// One ring buffer item, as the kernel sent it: one record, or a held exec enter and the
    /// record it came in front of ([`record::split_item`]).
    pub(crate) fn item(&mut self, bytes: &[u8]) {
        let (first, next) = record::split_item(bytes);
        self.decoded(first);
        if let Some(next) = next {
            self.decoded(next);
        }
    }

    fn decoded(&mut self, bytes: &[u8]) {
        match record::decode(bytes) {
            Ok(r) => self.record(r),
            Err(e) => {
                self.undecodable += 1;
                self.first_decode_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }

    pub(crate) fn record(&mut self, r: Record) {
        if let Some(rec) = &mut self.recorder
            && let Err(e) = rec.writer.push(&r)
        {
            self.stop_recording(e);
        }
        self.assembler.push(r, &mut self.sink);
    }

    fn stop_recording(&mut self, e: std::io::Error) {
        if let Some(rec) = self.recorder.take() {
            self.recorder_error = Some(format!("writing the recording {} failed: {e}; it is incomplete", rec.path.display()));
        }
    }

    /// Why recording stopped, once it has (tracing goes on without it).
    pub(crate) fn recorder_error(&self) -> Option<&str> {
        self.recorder_error.as_deref()
    }

    /// Closes the recording's current frame, so that what was recorded so far survives if
    /// execprof is killed. The live loop calls it about once a second.
    pub(crate) fn checkpoint(&mut self) {
        if let Some(rec) = &mut self.recorder
            && let Err(e) = rec.writer.flush_frame()
        {
            self.stop_recording(e);
        }
    }

    /// Ends the stream: calls still open are counted as unjoined.
    pub(crate) fn drain(mut self) -> Drained<S> {
        let unjoined = self.assembler.finish(&mut self.sink);
        Drained {
            sink: self.sink,
            unjoined,
            undecodable: self.undecodable,
            first_decode_error: self.first_decode_error,
            recorder: self.recorder,
            recorder_error: self.recorder_error,
        }
    }
}

impl<'a> RunPipeline<'a> {
    /// `launched`: the process the run starts (alive until its exit arrives).
    pub(crate) fn new(
        ctx: AnalysisContext<'a>,
        outputs: (Option<TraceOutput>, Option<EventsOutput>),
        recorder: Option<Recorder>,
        launched: Option<u32>,
    ) -> Self {
        let (trace, events) = outputs;
        let sinks = RunSinks { analyzer: Analyzer::new(ctx), trace, events, alive: launched.into_iter().collect(), attempts: 0 };
        Self::with_sink(sinks, recorder)
    }

    /// Exec attempts completed so far.
    pub(crate) fn attempts(&self) -> u64 {
        self.sink.attempts
    }

    /// Traced processes alive, as far as the records tell.
    pub(crate) fn alive(&self) -> Vec<u32> {
        self.sink.alive.iter().copied().collect()
    }

    /// Ends the stream and the analysis. `symbols` names the stacks' addresses (from the
    /// kernel live, from the recording in a replay).
    /// `missing_interpreters` says which of the names that failed with ENOENT exist (live: by
    /// looking; in a replay: what the recording says).
    pub(crate) fn finish(
        self,
        symbols: impl FnOnce(&[u64]) -> SymbolTable,
        missing_interpreters: impl FnOnce(&[Vec<u8>]) -> Vec<MissingInterpreter>,
    ) -> Finished {
        let mut d = self.drain();
        let table = symbols(&d.sink.analyzer.stack_addresses());
        let missing = missing_interpreters(&d.sink.analyzer.enoent_names());
        d.sink.analyzer.set_missing_interpreters(missing.clone());
        let recording_error = d.recorder_error.clone();
        let mut output_errors: Vec<String> = d.recorder_error.into_iter().collect();
        if let Some(t) = d.sink.trace
            && let Err(e) = t.writer.finish().and_then(|mut w| w.flush())
        {
            output_errors.push(format!("writing the trace {} failed: {e}", t.path.display()));
        }
        if let Some(e) = d.sink.events
            && let Err(err) = e.writer.finish()
        {
            output_errors.push(format!("writing the events to {} failed: {err}", e.path.display()));
        }
        Finished {
            analysis: d.sink.analyzer.finish(&table),
            unjoined: d.unjoined,
            symbols: table,
            undecodable: d.undecodable,
            first_decode_error: d.first_decode_error,
            recorder: d.recorder,
            output_errors,
            recording_error,
            missing_interpreters: missing,
        }
    }
}

/// `--events`' lines to `path` (`-`: standard output), when asked for.
/// `argv`: with each attempt's arguments (`--argv`).
pub(crate) fn events_output(path: Option<&Path>, meta: &RunMeta, argv: bool) -> anyhow::Result<Option<EventsOutput>> {
    use anyhow::Context as _;
    let Some(path) = path else { return Ok(None) };
    let out: Box<dyn std::io::Write + Send> = if path == Path::new("-") {
        Box::new(std::io::stdout())
    } else {
        Box::new(BufWriter::new(File::create(path).with_context(|| format!("creating the events file {}", path.display()))?))
    };
    let shown = if path == Path::new("-") { PathBuf::from("standard output") } else { path.to_owned() };
    Ok(Some(OutputFile { path: shown, writer: EventLines::new(out, meta.started_mono_ns, &meta.preexisting, argv) }))
}

impl TraceOutput {
    /// The trace file at `path` in `format`, when one was asked for.
    pub(crate) fn create(path: Option<&Path>, format: TraceFormat, meta: &RunMeta) -> anyhow::Result<Option<Self>> {
        use anyhow::Context as _;
        let Some(path) = path else { return Ok(None) };
        let file = File::create(path).with_context(|| format!("creating the trace {}", path.display()))?;
        let out = BufWriter::with_capacity(1 << 20, file);
        let (t0, plan) = (meta.started_mono_ns, meta.exact_plan.clone());
        let writer = match format {
            #[cfg(feature = "tracer")]
            TraceFormat::Perfetto => TraceWriter::Perfetto(Box::new(crate::render::perfetto::PerfettoWriter::new(out, t0, plan))),
            #[cfg(not(feature = "tracer"))]
            TraceFormat::Perfetto => anyhow::bail!("Perfetto's protobuf trace needs execprof built with its `tracer` feature"),
            TraceFormat::Json => TraceWriter::Json(ChromeTraceWriter::new(out, t0, plan)),
        };
        Ok(Some(OutputFile { path: path.to_owned(), writer }))
    }
}

impl Recorder {
    /// Writes the symbol table and the run's end; returns the recording's size.
    pub(crate) fn close(self, symbols: &SymbolTable, end: &serde_json::Value) -> Result<WriteStats, String> {
        self.writer
            .finish(&symbols.entries(), end)
            .map_err(|e| format!("writing the recording {} failed: {e}; it is incomplete", self.path.display()))
    }
}
