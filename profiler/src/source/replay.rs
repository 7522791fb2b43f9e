//! A recording read back as a source: its run metadata first, then every record into the
//! pipeline as the live ring buffer would hand them over, then its end and symbol table. A bad
//! file is a [`code::BAD_RECORDING`] failure naming what is wrong and where.
use std::{
    fs::File,
    io::BufReader,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::Result;

use crate::{
    analysis::{AnalysisContext, attribution::SymbolTable, phases::PhaseModel},
    assemble::events::EventSink,
    model::{
        failure::{Failure, code},
        meta::{RunEnd, RunMeta},
    },
    pipeline::{Finished, Pipeline, RunPipeline, TraceOutput},
    recording::RecordingReader,
    report::{RecordingFacts, RunReport, Source},
};

/// An open recording whose metadata has been read.
pub(crate) struct Replay {
    path: PathBuf,
    bytes: u64,
    reader: RecordingReader<BufReader<File>>,
    meta: RunMeta,
}

/// A recording read through the pipeline.
pub(crate) struct Loaded {
    pub(crate) meta: RunMeta,
    pub(crate) end: RunEnd,
    pub(crate) finished: Finished,
    pub(crate) facts: RecordingFacts,
}

/// Reads a recording through the same pipeline as a live run, writing a Perfetto trace to
/// `trace` if given.
pub(crate) fn load(path: &Path, trace: Option<&Path>) -> Result<Loaded> {
    let replay = Replay::open(path)?;
    let meta = replay.meta().clone();
    let model = PhaseModel::builtin()?;
    let ctx =
        AnalysisContext { model: &model, sampled: meta.sample_hz > 0, exact: meta.exact_plan.as_ref(), preexisting: &meta.preexisting };
    let trace = TraceOutput::create(trace, &meta)?;
    let mut pipeline = RunPipeline::new(ctx, trace, None, None);
    let replayed = replay.feed(&mut pipeline)?;
    let missing = replayed.end.missing_interpreters.clone();
    let finished = pipeline.finish(|_| replayed.symbols, |_| missing);
    Ok(Loaded { meta, end: replayed.end, finished, facts: replayed.facts })
}

/// A recording's report, as `execprof report` makes it (nothing written): how `diff`, and
/// xtask, read a run back.
pub fn report(path: &Path) -> Result<RunReport> {
    let started = Instant::now();
    let l = load(path, None)?;
    let source = Source::Replay { recording: l.facts, ready_ms: started.elapsed().as_millis() as u64 };
    Ok(RunReport::new(l.meta, l.end, l.finished.analysis, &l.finished.unjoined, source))
}

/// What the rest of a recording says once its records are in the pipeline.
pub(crate) struct Replayed {
    pub(crate) end: RunEnd,
    pub(crate) symbols: SymbolTable,
    pub(crate) facts: RecordingFacts,
}

impl Replay {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let bad = |e: String| bad_recording(path, e);
        let file = File::open(path).map_err(|e| bad(format!("cannot open it ({e})")))?;
        let bytes = file.metadata().map_or(0, |m| m.len());
        let reader = RecordingReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|e| bad(e.to_string()))?;
        let meta: RunMeta = serde_json::from_value(reader.meta().clone()).map_err(|e| {
            bad(format!(
                "its run metadata does not read as this execprof's ({e}); it was written by execprof {}",
                reader.meta()["execprof_version"]
            ))
        })?;
        Ok(Self { path: path.to_owned(), bytes, reader, meta })
    }

    /// The run's metadata, as written at its start.
    pub(crate) fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// Every record into `pipeline`, then the recording's end and symbols.
    pub(crate) fn feed<S: EventSink>(mut self, pipeline: &mut Pipeline<S>) -> Result<Replayed> {
        let bad = |e: String| bad_recording(&self.path, e);
        let mut records = 0u64;
        while let Some(r) = self.reader.next_record().map_err(|e| bad(e.to_string()))? {
            records += 1;
            pipeline.record(r);
        }
        let trailer = self.reader.finish().map_err(|e| bad(e.to_string()))?;
        let end: RunEnd =
            serde_json::from_value(trailer.end).map_err(|e| bad(format!("its end record does not read as this execprof's ({e})")))?;
        let facts = RecordingFacts { path: self.path.display().to_string(), bytes: self.bytes, records };
        Ok(Replayed { end, symbols: SymbolTable(trailer.symbols.into_iter().collect()), facts })
    }
}

fn bad_recording(path: &Path, e: String) -> anyhow::Error {
    Failure::new(code::BAD_RECORDING, format!("{}: {e}", path.display())).into()
}
