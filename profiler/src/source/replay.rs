//! A recording read back as a source: its run metadata first, then every record into the
//! pipeline as the live ring buffer would hand them over, then its end and symbol table. A bad
//! file is a [`code::BAD_RECORDING`] failure naming what is wrong and where; a file that
//! simply ends early (a run killed, a disk full) is read up to its last intact frame and
//! reported as cut, since everything before the cut was checked.
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
        names::escape_name,
    },
    pipeline::{Finished, Pipeline, RunPipeline, TraceOutput},
    recording::{Ending, ReadErrorKind, RecordingReader},
    render::TraceFormat,
    report::{RecordingCut, RecordingFacts, RunReport, Source},
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
/// `events`: `--events`' destination, if any; `argv`: with each attempt's arguments.
pub(crate) fn load(path: &Path, trace: (Option<&Path>, TraceFormat), events: Option<&Path>, argv: bool) -> Result<Loaded> {
    let replay = Replay::open(path)?;
    let meta = replay.meta().clone();
    if argv && !meta.argv_read {
        return Err(Failure::usage(format!(
            "--argv: {} was recorded without --argv, so it holds no arguments; record with `execprof run --argv --output FILE`",
            escape_name(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        ))
        .into());
    }
    let model = PhaseModel::builtin()?;
    let ctx = AnalysisContext {
        model: &model,
        sampled: meta.sample_hz > 0,
        exact: meta.exact_plan.as_ref(),
        preexisting: &meta.preexisting,
        launched: meta.launched(),
    };
    let trace = TraceOutput::create(trace.0, trace.1, &meta)?;
    let events = crate::pipeline::events_output(events, &meta, argv)?;
    let mut pipeline = RunPipeline::new(ctx, (trace, events), None, None);
    let replayed = replay.feed(&mut pipeline)?;
    let missing = replayed.end.missing_interpreters.clone();
    let finished = pipeline.finish(|_| replayed.symbols, |_| missing);
    Ok(Loaded { meta, end: replayed.end, finished, facts: replayed.facts })
}

/// A recording's report, as `execprof report` makes it (nothing written): how `diff`, and
/// xtask, read a run back.
pub fn report(path: &Path) -> Result<RunReport> {
    let started = Instant::now();
    let l = load(path, (None, TraceFormat::default()), None, false)?;
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

    /// Every record into `pipeline`, then the recording's end and symbols; for a recording cut
    /// short, the records of its intact frames and where it was cut.
    pub(crate) fn feed<S: EventSink>(mut self, pipeline: &mut Pipeline<S>) -> Result<Replayed> {
        let bad = |e: String| bad_recording(&self.path, e);
        let mut records = 0u64;
        let mut last_ns = None::<u64>;
        loop {
            match self.reader.next_record() {
                Ok(Some(r)) => {
                    records += 1;
                    last_ns = last_ns.max(Some(r.head.ts_ns));
                    pipeline.record(r);
                }
                Ok(None) => break,
                // The cut is taken up by finish_or_cut, which sees the same error.
                Err(e) if e.kind() == ReadErrorKind::Truncated => break,
                Err(e) => return Err(bad(e.to_string())),
            }
        }
        let mut facts = RecordingFacts { path: self.path.display().to_string(), bytes: self.bytes, records, cut: None };
        let (end, symbols) = match self.reader.finish_or_cut().map_err(|e| bad(e.to_string()))? {
            Ending::Whole(trailer) => {
                let end: RunEnd = serde_json::from_value(trailer.end)
                    .map_err(|e| bad(format!("its end record does not read as this execprof's ({e})")))?;
                (end, trailer.symbols)
            }
            Ending::Cut(cut) => {
                let covered_ns = last_ns.map(|t| t.saturating_sub(self.meta.started_mono_ns));
                facts.cut = Some(RecordingCut {
                    at_byte: cut.intact_bytes,
                    covered_ns,
                    symbols: cut.symbols.is_some(),
                    detail: cut.error.to_string(),
                });
                (RunEnd::cut(covered_ns.unwrap_or(0)), cut.symbols.unwrap_or_default())
            }
        };
        Ok(Replayed { end, symbols: SymbolTable(symbols.into_iter().collect()), facts })
    }
}

fn bad_recording(path: &Path, e: String) -> anyhow::Error {
    Failure::new(code::BAD_RECORDING, format!("{}: {e}", path.display())).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::outcome::Outcome,
        model::meta::{ExitStatus, KernelInfo, LossCounters, MachineFacts, Mode},
        record::Body,
        recording::{RecordingWriter, synthetic_chain},
    };

    const STEPS: u32 = 12;
    const MISSES: u32 = 3;
    const STEPS_PER_FRAME: u32 = 4;

    fn meta(started_mono_ns: u64) -> RunMeta {
        RunMeta {
            execprof_version: "0.0.0".into(),
            command: vec!["chain".into()],
            command_hex: vec![],
            program: "/x/chain".into(),
            chain: None,
            kernel: KernelInfo { release: "6.18.0".into(), machine: "x86_64".into(), btf: true, lockdown: None },
            machine: MachineFacts::default(),
            mode: Mode::new(None, 1000, None, (crate::model::meta::Boundaries::RawTracepoints, None)),
            sample_hz: 1000,
            exact_plan: None,
            ring_bytes: 8 << 20,
            warnings: vec![],
            startup_note: None,
            started_unix_s: 0,
            started_mono_ns,
            repeats: 1,
            scope: Default::default(),
            preexisting: vec![],
            argv_read: false,
        }
    }

    /// A synthetic chain of STEPS steps of MISSES misses and a success, a RECORDS frame
    /// closed after every STEPS_PER_FRAME steps; returns the file and where its frames end
    /// (META first, then each RECORDS frame of whole steps, then SYMBOLS and END), and the
    /// time of the last record of each frame of steps.
    fn recording() -> (Vec<u8>, Vec<u64>, Vec<u64>) {
        let records = synthetic_chain(STEPS, MISSES, 7);
        let start = records.iter().map(|r| r.head.ts_ns).min().unwrap();
        let mut out = Vec::new();
        let mut w = RecordingWriter::new(&mut out, &serde_json::to_value(meta(start)).unwrap()).unwrap();
        let (mut ends, mut times, mut last) = (vec![w.stats().bytes], vec![], 0);
        let mut steps = 0;
        for r in &records {
            w.push(r).unwrap();
            last = last.max(r.head.ts_ns - start);
            if r.body == Body::Main {
                steps += 1;
                if steps % STEPS_PER_FRAME == 0 {
                    w.flush_frame().unwrap();
                    ends.push(w.stats().bytes);
                    times.push(last);
                }
            }
        }
        let stats =
            w.finish(&[(0xffff_ffff_8100_0000, "do_execveat_common".into())], &serde_json::to_value(end(last + 1)).unwrap()).unwrap();
        assert_eq!(stats.bytes, out.len() as u64);
        (out, ends, times)
    }

    /// The end of a run that exited 0 after `command_wall_ns`.
    fn end(command_wall_ns: u64) -> RunEnd {
        RunEnd {
            exit_status: ExitStatus::Code(0),
            command_wall_ns,
            command_cpu_ns: 0,
            kernel_losses: LossCounters::zero(),
            undecodable_records: 0,
            first_decode_error: None,
            partial: None,
            program_costs: vec![],
            missing_interpreters: vec![],
        }
    }

    fn report_of(bytes: &[u8]) -> Result<RunReport> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.execprof");
        std::fs::write(&path, bytes).unwrap();
        report(&path)
    }

    fn count(r: &RunReport, o: Outcome) -> u64 {
        r.analysis.outcomes.iter().find(|s| s.outcome == o).map_or(0, |s| s.count)
    }

    #[test]
    fn the_whole_recording_is_complete() {
        let (bytes, _, _) = recording();
        let r = report_of(&bytes).unwrap();
        assert_eq!((r.analysis.attempts, count(&r, Outcome::Enoent), count(&r, Outcome::Success)), (48, 36, 12));
        assert!(r.complete && r.recording_cut().is_none());
        assert_eq!(r.exit_status, ExitStatus::Code(0));
    }

    /// Cut anywhere inside a frame of steps or right at its end, the report holds exactly the
    /// steps of the frames before: STEPS_PER_FRAME × (MISSES + 1) attempts a frame.
    #[test]
    fn a_cut_recording_reports_the_steps_of_its_intact_frames() {
        let (bytes, ends, times) = recording();
        let per_frame = u64::from(STEPS_PER_FRAME);
        for (whole, span) in ends.windows(2).enumerate() {
            let (start, end) = (span[0], span[1]);
            for cut in [start, start + 1, start + 28, start + 29, (start + end) / 2, end - 1] {
                let r = report_of(&bytes[..cut as usize]).unwrap_or_else(|e| panic!("cut at {cut}: {e:#}"));
                let steps = whole as u64 * per_frame;
                let got = (r.analysis.attempts, count(&r, Outcome::Enoent), count(&r, Outcome::Success));
                assert_eq!(got, (steps * u64::from(MISSES + 1), steps * u64::from(MISSES), steps), "cut at byte {cut}");
                let c = r.recording_cut().unwrap_or_else(|| panic!("cut at {cut}: not marked as cut"));
                assert_eq!(c.at_byte, start, "cut at byte {cut}: the intact prefix ends with frame {whole}");
                assert_eq!(c.covered_ns, whole.checked_sub(1).map(|i| times[i]), "cut at byte {cut}");
                assert!(!c.symbols);
                assert!(!r.complete, "cut at byte {cut}");
                assert_eq!(r.exit_status, ExitStatus::Unknown);
                let text = crate::report::render(&r);
                let head = format!("RECORDING CUT at byte {start} of {cut} (");
                assert!(text.starts_with(&head), "cut at byte {cut}: {}", text.lines().next().unwrap_or(""));
            }
            // Cut right at the frame's end: every step of it is in.
            let r = report_of(&bytes[..end as usize]).unwrap();
            assert_eq!(r.analysis.attempts, (whole as u64 + 1) * per_frame * u64::from(MISSES + 1), "cut at the end {end}");
            assert_eq!(r.recording_cut().map(|c| c.at_byte), Some(end));
        }
    }

    /// A command line that is not UTF-8 comes back from a recording byte for byte, and its
    /// header is shell-quoted from those bytes.
    #[test]
    fn argv_bytes_round_trip_through_a_recording() {
        let argv: [&[u8]; 3] = [b"/bin/sh", b"-c", b"a\xff\nb"];
        let mut m = meta(0);
        (m.command, m.command_hex) = RunMeta::command_fields(&argv);
        let mut out = Vec::new();
        let w = RecordingWriter::new(&mut out, &serde_json::to_value(&m).unwrap()).unwrap();
        w.finish(&[], &serde_json::to_value(end(1)).unwrap()).unwrap();
        let r = report_of(&out).unwrap();
        assert_eq!(r.meta.argv(), argv.map(<[u8]>::to_vec));
        let text = crate::report::render(&r);
        assert!(text.contains("\ncommand   /bin/sh -c $'a\\xff\\x0ab'\n"), "{text}");
    }

    /// In SYMBOLS or END, every record is in; past SYMBOLS, its names are too.
    #[test]
    fn a_cut_in_the_trailer_keeps_every_record() {
        let (bytes, ends, _) = recording();
        let symbols_start = *ends.last().unwrap();
        for cut in [symbols_start + 3, bytes.len() as u64 - 1] {
            let r = report_of(&bytes[..cut as usize]).unwrap();
            assert_eq!(r.analysis.attempts, 48, "cut at {cut}");
            let c = r.recording_cut().unwrap();
            assert_eq!(c.symbols, cut == bytes.len() as u64 - 1, "cut at {cut}: the symbols came before it");
            assert!(!r.complete);
        }
    }

    /// A cut in the file's header or its META frame leaves nothing to report: refused, with
    /// the reader's message.
    #[test]
    fn a_cut_before_the_records_is_still_refused() {
        let (bytes, ends, _) = recording();
        for (cut, says) in [
            (0, "the file is empty: nothing was ever recorded into it"),
            (5, "the file ends inside its 12-byte header"),
            (12, "the file ends right after its header, before the META frame"),
            (ends[0] - 1, "the file ends inside its META frame #0"),
        ] {
            let e = report_of(&bytes[..cut as usize]).map(|_| ()).expect_err("refused");
            let f = e.downcast_ref::<Failure>().expect("a Failure");
            assert_eq!(f.code, code::BAD_RECORDING);
            assert!(f.message.contains(says), "cut at {cut}: {}", f.message);
        }
    }

    /// Damage is never taken for a cut: a flipped byte in an intact frame of a cut file, or
    /// anywhere in a whole one, is refused.
    #[test]
    fn a_flipped_byte_is_an_error_not_a_shorter_recording() {
        let (bytes, ends, _) = recording();
        let cut = (ends[2] + ends[3]) / 2;
        for at in (0..ends[2]).step_by(7).chain([ends[1] - 1, ends[2] - 1]) {
            let mut b = bytes[..cut as usize].to_vec();
            b[at as usize] ^= 0x10;
            let e = report_of(&b).map(|_| ()).expect_err(&format!("byte {at} flipped in a cut file"));
            assert_eq!(e.downcast_ref::<Failure>().map(|f| f.code), Some(code::BAD_RECORDING), "byte {at}: {e:#}");
        }
        for at in (0..bytes.len()).step_by(5) {
            let mut b = bytes.clone();
            b[at] ^= 0x01;
            let e = report_of(&b).map(|_| ()).expect_err(&format!("byte {at} flipped in a whole file"));
            assert_eq!(e.downcast_ref::<Failure>().map(|f| f.code), Some(code::BAD_RECORDING), "byte {at}: {e:#}");
        }
    }
}
