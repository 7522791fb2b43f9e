//! The one way data flows, for a live run and for a recording alike:
//! `record → (recorder) → assembler → analyzer + trace writer`. A live run feeds it ring
//! buffer items as they arrive; `execprof report` feeds it the records of a recording. Nothing
//! here touches the kernel, so a replay needs no privileges.
use std::{
    collections::HashSet,
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
};

use crate::{
    analysis::{Analysis, AnalysisContext, Analyzer, attribution::SymbolTable},
    assemble::events::{Event, EventSink},
    assemble::{Assembler, Unjoined},
    record::{self, Record},
    recording::{RecordingWriter, WriteStats},
    render::perfetto::TraceWriter,
};

/// An output file written as the run goes on, remembered with its path so an error can name it.
pub struct OutputFile<T> {
    pub path: PathBuf,
    pub writer: T,
}

pub type Recorder = OutputFile<RecordingWriter<BufWriter<File>>>;
pub type TraceOutput = OutputFile<TraceWriter<BufWriter<File>>>;

/// Where assembled events go.
struct Sinks<'a> {
    analyzer: Analyzer<'a>,
    trace: Option<TraceOutput>,
    /// Processes of the traced tree alive, as the events tell (for stopping the tree).
    alive: HashSet<u32>,
    attempts: u64,
}

impl EventSink for Sinks<'_> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Exec(_) => self.attempts += 1,
            Event::TaskNew(t) if !t.thread => {
                self.alive.insert(t.child_tgid);
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
    }
}

pub struct Pipeline<'a> {
    assembler: Assembler,
    sinks: Sinks<'a>,
    recorder: Option<Recorder>,
    /// The first error writing the recording; recording stops there, the rest goes on.
    recorder_error: Option<String>,
    undecodable: u64,
    first_decode_error: Option<String>,
}

/// What a finished pipeline hands back.
pub struct Finished {
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
}

impl<'a> Pipeline<'a> {
    /// `launched`: the process the run starts (alive until its exit arrives).
    pub fn new(ctx: AnalysisContext<'a>, trace: Option<TraceOutput>, recorder: Option<Recorder>, launched: Option<u32>) -> Self {
        Self {
            assembler: Assembler::new(),
            sinks: Sinks { analyzer: Analyzer::new(ctx), trace, alive: launched.into_iter().collect(), attempts: 0 },
            recorder,
            recorder_error: None,
            undecodable: 0,
            first_decode_error: None,
        }
    }

    /// One ring buffer item, as the kernel sent it.
    pub fn item(&mut self, bytes: &[u8]) {
        match record::decode(bytes) {
            Ok(r) => self.record(r),
            Err(e) => {
                self.undecodable += 1;
                self.first_decode_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }

    pub fn record(&mut self, r: Record) {
        if let Some(rec) = &mut self.recorder
            && let Err(e) = rec.writer.push(&r)
        {
            self.stop_recording(e);
        }
        self.assembler.push(r, &mut self.sinks);
    }

    fn stop_recording(&mut self, e: std::io::Error) {
        if let Some(rec) = self.recorder.take() {
            self.recorder_error = Some(format!("writing the recording {} failed: {e}; it is incomplete", rec.path.display()));
        }
    }

    /// Closes the recording's current frame and flushes the trace, so that what was recorded
    /// so far survives if execprof is killed. The live loop calls it about once a second.
    pub fn checkpoint(&mut self) {
        if let Some(rec) = &mut self.recorder
            && let Err(e) = rec.writer.flush_frame()
        {
            self.stop_recording(e);
        }
    }

    /// Exec attempts completed so far.
    pub fn attempts(&self) -> u64 {
        self.sinks.attempts
    }

    /// Traced processes alive, as far as the records tell.
    pub fn alive(&self) -> Vec<u32> {
        self.sinks.alive.iter().copied().collect()
    }

    /// Ends the stream. `symbols` names the stacks' addresses (from the kernel live, from the
    /// recording in a replay).
    pub fn finish(mut self, symbols: impl FnOnce(&[u64]) -> SymbolTable) -> Finished {
        let unjoined = self.assembler.finish(&mut self.sinks);
        let table = symbols(&self.sinks.analyzer.stack_addresses());
        let mut output_errors: Vec<String> = self.recorder_error.into_iter().collect();
        if let Some(t) = self.sinks.trace
            && let Err(e) = t.writer.finish().and_then(|mut w| w.flush())
        {
            output_errors.push(format!("writing the trace {} failed: {e}", t.path.display()));
        }
        Finished {
            analysis: self.sinks.analyzer.finish(&table),
            unjoined,
            symbols: table,
            undecodable: self.undecodable,
            first_decode_error: self.first_decode_error,
            recorder: self.recorder,
            output_errors,
        }
    }
}

impl Recorder {
    /// Writes the symbol table and the run's end; returns the recording's size.
    pub fn close(self, symbols: &SymbolTable, end: &serde_json::Value) -> Result<WriteStats, String> {
        self.writer
            .finish(&symbols.entries(), end)
            .map_err(|e| format!("writing the recording {} failed: {e}; it is incomplete", self.path.display()))
    }
}
