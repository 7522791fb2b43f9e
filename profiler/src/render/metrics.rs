//! The agent's metrics in the format the scraper asks for (`Accept`): OpenMetrics text,
//! Prometheus text 0.0.4, or Prometheus protobuf, whose histograms carry the native buckets
//! beside the classic ones. Encoded by prometheus-client from the agent's [`Exposition`] and
//! its own truth ([`OwnFigures`]): what it lost, how full its maps are, what its BPF
//! programs cost, its build.
//!
//! The latency buckets the kernel counts are schema-3 native buckets in seconds
//! ([`profiler_common::aggregate::bucket`]), so both histogram forms are exact: the native one
//! bucket for bucket, the classic one at every power of two of a second (each `le` a bound of
//! the kernel's buckets). Attempts past 16 s (the kernel's overflow bucket) are in the
//! classic `+Inf` bucket, and in the native bucket just above 16 s.
use std::{
    borrow::Cow,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use profiler_common::aggregate::{self, BUCKETS, NATIVE_FIRST_INDEX, NATIVE_SCHEMA};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _, NativeHistogram, NativeHistogramBuckets, NoLabelSet},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::{Registry, Unit},
};

use crate::{
    analysis::{
        aggregates::{Call, MissCounts, Totals},
        exposition::{Exposition, MetricLabels},
    },
    model::meta::ProgramCost,
};

/// The exposition formats, as negotiated from a scrape's `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`: the default.
    PrometheusText,
    /// Length-delimited `io.prometheus.client.MetricFamily`: the only one with native
    /// histograms.
    Protobuf,
}

impl Format {
    /// The format an `Accept` header prefers among those served (highest `q`, the header's
    /// order on a tie); Prometheus text when it names none of them.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let mut best: Option<(f32, Format)> = None;
        for range in accept.unwrap_or_default().split(',') {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or_default().to_ascii_lowercase();
            let (mut q, mut proto, mut delimited) = (1.0f32, false, false);
            for p in params {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "proto" => proto = v.trim() == "io.prometheus.client.MetricFamily",
                    "encoding" => delimited = v.trim() == "delimited",
                    _ => {}
                }
            }
            let format = match media.as_str() {
                "application/vnd.google.protobuf" if proto && delimited => Format::Protobuf,
                "application/openmetrics-text" => Format::OpenMetrics,
                "text/plain" | "text/*" | "*/*" => Format::PrometheusText,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
                best = Some((q, format));
            }
        }
        best.map_or(Format::PrometheusText, |(_, f)| f)
    }

    /// Its `Content-Type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::Protobuf => "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
        }
    }
}

/// The agent's own figures, refreshed on every read of the kernel's maps.
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnFigures {
    /// Calls or names lost or folded, by reason (the JSON report's `losses` names).
    pub losses: Vec<(&'static str, u64)>,
    /// Per map: entries in use and capacity.
    pub maps: Vec<(&'static str, u64, u64)>,
    /// Kernel entries removed after their last read, and label sets dropped when idle.
    pub removed: u64,
    /// The agent's BPF programs' runs and run time (the kernel's BPF statistics).
    pub programs: Vec<ProgramCost>,
    /// Whether the kernel's BPF statistics are on (else `programs` is empty).
    pub program_stats: bool,
    /// cpu-clock samples per second per CPU of the kernel stacks (0: none).
    pub sample_hz: u64,
    /// When the agent started counting.
    pub started: Option<SystemTime>,
    /// Reads of the kernel's maps so far.
    pub reads: u64,
    /// When the kernel's maps were last read (Unix time, s).
    pub last_read_unix_s: f64,
}

/// What a scrape encodes, shared between the agent's read loop and the endpoint.
#[derive(Debug)]
pub(crate) struct MetricsState {
    /// The figures per label set.
    pub exposition: Exposition,
    /// The agent's own.
    pub own: OwnFigures,
}

/// Encodes `state` in `format`.
pub(crate) fn encode(state: &Arc<Mutex<MetricsState>>, format: Format) -> Result<Vec<u8>, String> {
    let mut registry = Registry::with_prefix("execprof");
    registry.register_collector(Box::new(AgentCollector(state.clone())));
    match format {
        Format::OpenMetrics => {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).map_err(|e| e.to_string())?;
            Ok(out.into_bytes())
        }
        Format::PrometheusText => {
            let mut out = String::new();
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).map_err(|e| e.to_string())?;
            Ok(out.into_bytes())
        }
        Format::Protobuf => prometheus_client::encoding::prometheus_protobuf::encode_to_vec(&registry).map_err(|e| e.to_string()),
    }
}

#[derive(Debug)]
struct AgentCollector(Arc<Mutex<MetricsState>>);

impl Collector for AgentCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        encode_calls(&mut encoder, &state.exposition, state.own.started)?;
        encode_misses(&mut encoder, &state.exposition)?;
        encode_own(&mut encoder, &state.exposition, &state.own)
    }
}

/// A label set as prometheus-client takes it: the empty ones left out. `container` and `pod`
/// are names where a runtime gave them, else the id and uid; `container_id` and `pod_uid` are
/// always the cgroup path's.
fn labels(l: &MetricLabels) -> Vec<(&'static str, String)> {
    fn or<'a>(name: &'a String, id: &'a String) -> &'a String {
        if name.is_empty() { id } else { name }
    }
    [
        ("outcome", &l.outcome),
        ("program", &l.program),
        ("unit", &l.cgroup.unit),
        ("container", or(&l.named.name, &l.cgroup.container)),
        ("container_id", &l.cgroup.container),
        ("pod", or(&l.named.pod, &l.cgroup.pod)),
        ("pod_uid", &l.cgroup.pod),
        ("namespace", &l.named.namespace),
        ("image", &l.named.image),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k, v.clone()))
    .collect()
}

/// One counter family from `value` of each series of `call`.
fn counter_family<N: prometheus_client::encoding::EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    exposition: &Exposition,
    call: Call,
    (name, help, unit): (&str, &str, Option<Unit>),
    value: impl Fn(&Totals) -> N,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    for (l, t) in exposition.series.iter().filter(|(l, _)| l.call == call) {
        let set = labels(l);
        ConstCounter::new(value(&t.totals)).encode(metric.encode_family(&set)?)?;
    }
    Ok(())
}

fn encode_calls(encoder: &mut DescriptorEncoder, e: &Exposition, started: Option<SystemTime>) -> Result<(), std::fmt::Error> {
    let seconds = |ns: u64| ns as f64 / 1e9;
    for (call, what) in [(Call::Exec, "exec"), (Call::Fork, "fork")] {
        let (noun, calls) = match call {
            Call::Exec => ("exec attempts (execve, execveat)", "exec_attempts"),
            Call::Fork => ("fork-family calls (clone, clone3, fork, vfork) by the parent", "fork_calls"),
        };
        counter_family(
            encoder,
            e,
            call,
            (calls, &format!("Exact count of {noun}, per outcome (errno name) and calling program."), None),
            |t| t.count,
        )?;
        counter_family(
            encoder,
            e,
            call,
            (&format!("{what}_kernel"), &format!("Kernel time of the timed {noun}, from entry to return."), Some(Unit::Seconds)),
            |t| seconds(t.sum_ns),
        )?;
        counter_family(
            encoder,
            e,
            call,
            (&format!("{what}_untimed"), &format!("{noun} counted whose start was not seen: in the count, not in the latency."), None),
            |t| t.count - t.timed,
        )?;
        counter_family(
            encoder,
            e,
            call,
            (&format!("{what}_minor_page_faults"), &format!("Minor page faults taken inside the timed {noun}."), None),
            |t| t.min_flt,
        )?;
        counter_family(
            encoder,
            e,
            call,
            (&format!("{what}_major_page_faults"), &format!("Major page faults taken inside the timed {noun}."), None),
            |t| t.maj_flt,
        )?;
        let duration = format!("{what}_duration");
        let mut metric = encoder.encode_descriptor(
            &duration,
            &format!("Latency of the timed {noun}; native buckets are the kernel's own (schema 3)."),
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (l, t) in e.series.iter().filter(|(l, _)| l.call == call) {
            let set = labels(l);
            let h = HistogramParts::of(&t.totals.buckets);
            let native = NativeHistogram {
                schema: NATIVE_SCHEMA,
                zero_threshold: zero_threshold(),
                zero_count: t.totals.buckets[0],
                negative: NativeHistogramBuckets { spans: &[], deltas: &[] },
                positive: NativeHistogramBuckets { spans: &h.spans, deltas: &h.deltas },
                created: started,
            };
            metric.encode_family(&set)?.encode_histogram_with_native::<NoLabelSet>(
                seconds(t.totals.sum_ns),
                t.totals.timed,
                &h.classic,
                None,
                native,
            )?;
        }
    }
    let mut metric = encoder.encode_descriptor(
        "fork_parent_resident_pages",
        "Resident pages of the parent at each timed fork-family call, summed: divided by the calls, the parent's mean size.",
        None,
        MetricType::Counter,
    )?;
    for (l, t) in e.series.iter().filter(|(l, _)| l.call == Call::Fork) {
        ConstCounter::new(t.totals.rss_pages_sum).encode(metric.encode_family(&labels(l))?)?;
    }
    counter_family(
        encoder,
        e,
        Call::Exec,
        ("path_searches_found_after_misses", "Successful execs that ended a PATH search of at least one miss (ENOENT).", None),
        |t| t.searches,
    )?;
    counter_family(
        encoder,
        e,
        Call::Exec,
        ("path_search_misses", "The misses (ENOENT attempts) of those searches, counted under the exec that found the program.", None),
        |t| t.search_misses,
    )
}

/// The zero bucket's width: the kernel's first bound, 2^(-191/8) s (≈ 64.8 ns).
fn zero_threshold() -> f64 {
    aggregate::bucket_le_seconds(0)
}

/// A histogram's two forms from the kernel's buckets.
struct HistogramParts {
    /// `(le, count)` at each power of two of a second and `+Inf` (prometheus-client adds
    /// them up).
    classic: Vec<(f64, u64)>,
    /// Native positive spans `(offset, length)` and count deltas.
    spans: Vec<(i32, u32)>,
    deltas: Vec<i64>,
}

impl HistogramParts {
    fn of(buckets: &[u64]) -> Self {
        let mut classic = Vec::new();
        let mut pending = buckets[0];
        for (i, &n) in buckets.iter().enumerate().skip(1) {
            pending += n;
            let le = aggregate::bucket_le_seconds(i);
            // A whole power of two (the native index a multiple of 8), or +Inf.
            if (NATIVE_FIRST_INDEX + i as i32 - 1).rem_euclid(8) == 0 || le.is_infinite() {
                classic.push((le, pending));
                pending = 0;
            }
        }
        let (mut spans, mut deltas) = (Vec::<(i32, u32)>::new(), Vec::new());
        let (mut previous_count, mut previous_index) = (0i64, None::<i32>);
        for (i, &n) in buckets.iter().enumerate().skip(1).filter(|(_, n)| **n > 0) {
            let index = NATIVE_FIRST_INDEX + i as i32 - 1;
            match previous_index {
                Some(p) if index == p + 1 => spans.last_mut().expect("a span").1 += 1,
                Some(p) => spans.push((index - p - 1, 1)),
                None => spans.push((index, 1)),
            }
            deltas.push(n as i64 - previous_count);
            previous_count = n as i64;
            previous_index = Some(index);
        }
        debug_assert_eq!(buckets.len(), BUCKETS);
        Self { classic, spans, deltas }
    }
}

fn encode_misses(encoder: &mut DescriptorEncoder, e: &Exposition) -> Result<(), std::fmt::Error> {
    // Counts as integers, times (true) as seconds.
    type Family = (&'static str, &'static str, Option<Unit>, fn(&MissCounts) -> (u64, bool));
    let families: [Family; 4] = [
        ("path_misses", "ENOENT exec attempts for a name in this directory: PATH searching that missed.", None, |c| (c.misses, false)),
        ("path_miss_kernel", "Kernel time of those ENOENT attempts.", Some(Unit::Seconds), |c| (c.ns, true)),
        (
            "path_repeated_misses",
            "Of those, tries of a name the same search had tried already (the directory listed twice in PATH): pure waste.",
            None,
            |c| (c.repeated, false),
        ),
        ("path_repeated_miss_kernel", "Kernel time of the repeated misses.", Some(Unit::Seconds), |c| (c.repeated_ns, true)),
    ];
    for (name, help, unit, value) in families {
        let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (dir, c) in &e.misses {
            let labels = [("directory", dir.as_str())];
            match value(&c.totals) {
                (ns, true) => ConstCounter::new(ns as f64 / 1e9).encode(metric.encode_family(&labels)?)?,
                (n, false) => ConstCounter::new(n).encode(metric.encode_family(&labels)?)?,
            }
        }
    }
    Ok(())
}

fn encode_own(encoder: &mut DescriptorEncoder, e: &Exposition, own: &OwnFigures) -> Result<(), std::fmt::Error> {
    let mut metric =
        encoder.encode_descriptor("build", "The execprof version serving these metrics (always 1).", None, MetricType::Info)?;
    metric.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;

    let mut metric = encoder.encode_descriptor(
        "lost",
        "Calls, names or samples not counted where they belong, by reason; nonzero makes the figures incomplete (the agent's JSON report: losses; samples_* reasons: the profiles and phase figures only).",
        None,
        MetricType::Counter,
    )?;
    let folded_here = [("folded_in_metrics", e.folded)];
    for (reason, n) in own.losses.iter().chain(folded_here.iter()) {
        ConstCounter::new(*n).encode(metric.encode_family(&[("reason", *reason)])?)?;
    }

    for (name, help, index) in [
        ("map_entries", "Entries in use in each of the agent's maps.", 1),
        ("map_capacity", "Capacity of each of the agent's maps (a key past it is folded into other and counted in lost).", 2),
    ] {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for m in &own.maps {
            let value = if index == 1 { m.1 } else { m.2 };
            ConstGauge::new(value as i64).encode(metric.encode_family(&[("map", m.0)])?)?;
        }
    }
    let metric = encoder.encode_descriptor(
        "series_removed",
        "Kernel entries removed after their last read (idle, or their cgroup gone), and metric label sets dropped when idle.",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(own.removed + e.dropped).encode(metric)?;

    if own.program_stats {
        let mut metric = encoder.encode_descriptor(
            "bpf_program_runs",
            "Runs of each of the agent's BPF programs (the kernel's BPF statistics): the cost of watching.",
            None,
            MetricType::Counter,
        )?;
        for p in &own.programs {
            ConstCounter::new(p.runs).encode(metric.encode_family(&[("program", p.program.as_str())])?)?;
        }
        let mut metric = encoder.encode_descriptor(
            "bpf_program_run",
            "Run time of each of the agent's BPF programs (the kernel's BPF statistics).",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for p in &own.programs {
            ConstCounter::new(p.run_ns as f64 / 1e9).encode(metric.encode_family(&[("program", p.program.as_str())])?)?;
        }
    }

    let hertz = Unit::Other("hertz".into());
    let metric = encoder.encode_descriptor(
        "sample_rate",
        "cpu-clock samples per second per CPU of the kernel stacks inside exec attempts (0: none); phase seconds are samples over this rate.",
        Some(&hertz),
        MetricType::Gauge,
    )?;
    ConstGauge::new(own.sample_hz as i64).encode(metric)?;
    if own.sample_hz > 0 {
        let mut metric = encoder.encode_descriptor(
            "exec_phase_kernel",
            "Kernel time inside exec attempts per outcome and phase, estimated from cpu-clock samples (samples / sample rate).",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for ((outcome, phase), samples) in &e.phase_samples {
            let set: [(&str, Cow<'_, str>); 2] = [("outcome", outcome.into()), ("phase", phase.into())];
            ConstCounter::new(*samples as f64 / own.sample_hz as f64).encode(metric.encode_family(&set)?)?;
        }
    }

    let (labelled, refused) = e.program_labels();
    let metric = encoder.encode_descriptor(
        "programs_labelled",
        "Programs with a program label of their own (the allow-list and the first ones seen); the rest are program=\"other\".",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(labelled as i64).encode(metric)?;
    let metric = encoder.encode_descriptor(
        "programs_unlabelled",
        "Series of programs counted under program=\"other\" because the label's bound was reached.",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(refused).encode(metric)?;

    let metric = encoder.encode_descriptor("reads", "Reads of the kernel's maps.", None, MetricType::Counter)?;
    ConstCounter::new(own.reads).encode(metric)?;
    let metric = encoder.encode_descriptor(
        "last_read_timestamp",
        "When the kernel's maps were last read (Unix time).",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    ConstGauge::new(own.last_read_unix_s).encode(metric)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::analysis::{aggregates::SeriesKey, exposition::ProgramLabels};

    #[test]
    fn accept_headers_choose_the_format() {
        let prometheus_2_42_native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";
        let prometheus_2_42 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus_2_42_native)), Format::Protobuf);
        assert_eq!(Format::negotiate(Some(prometheus_2_42)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::PrometheusText);
        assert_eq!(Format::negotiate(Some("text/html")), Format::PrometheusText);
        assert_eq!(Format::negotiate(Some("application/vnd.google.protobuf;q=0.9,text/plain;q=0.5")), Format::PrometheusText);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0.2,text/plain;q=0.5")), Format::PrometheusText);
    }

    #[test]
    fn both_histogram_forms_hold_every_timed_call_in_its_bucket() {
        let mut buckets = vec![0u64; BUCKETS];
        // 3 calls under 65 ns, 5 at 1 s exactly, 2 at 1.5 ms, 1 past 16 s.
        buckets[0] = 3;
        buckets[aggregate::bucket(1_000_000_000)] = 5;
        buckets[aggregate::bucket(1_500_000)] = 2;
        buckets[BUCKETS - 1] = 1;
        let h = HistogramParts::of(&buckets);
        // Classic: le 1 s holds the 1 s calls (upper bounds are inclusive); +Inf the last.
        let at = |le: f64| h.classic.iter().find(|(b, _)| *b == le).map(|(_, n)| *n);
        assert_eq!(at(1.0), Some(5));
        assert_eq!(at(2f64.powi(-9)), Some(2), "1.5 ms ≤ 1.953 ms");
        assert_eq!(at(f64::INFINITY), Some(1));
        assert_eq!(h.classic.iter().map(|(_, n)| n).sum::<u64>(), 11, "the zero bucket's calls are in the first le");
        // Native: index 0 is (2^(-1/8), 1] s; 1.5 ms is in index -75: (2^(-76/8), 2^(-75/8)].
        let mut index = 0;
        let mut got = Vec::new();
        let mut count = 0i64;
        let mut deltas = h.deltas.iter();
        for &(offset, length) in &h.spans {
            index += offset;
            for _ in 0..length {
                count += deltas.next().unwrap();
                got.push((index, count));
                index += 1;
            }
        }
        assert_eq!(got, [(-75, 2), (0, 5), (33, 1)]);
        assert!(2f64.powf(-76.0 / 8.0) < 0.0015 && 0.0015 <= 2f64.powf(-75.0 / 8.0));
    }

    fn state() -> Arc<Mutex<MetricsState>> {
        let mut e = Exposition::new(ProgramLabels::new(Vec::new(), 10), 100, Duration::from_secs(60));
        let key = SeriesKey {
            cgroup: "/system.slice/cron.service".into(),
            program: "/usr/bin/make".into(),
            call: Call::Exec,
            outcome: "enoent".into(),
            compat: false,
        };
        let mut t = Totals { count: 7, timed: 7, sum_ns: 7_000_000, ..Totals::default() };
        t.buckets[aggregate::bucket(1_000_000)] = 7;
        e.add(&key, &t, Instant::now());
        e.add_misses("/usr/local/bin", &MissCounts { misses: 7, ns: 7_000_000, repeated: 0, repeated_ns: 0 }, Instant::now());
        let own = OwnFigures {
            losses: vec![("exec_folded_in_kernel", 0)],
            maps: vec![("series", 1, 4096)],
            sample_hz: 0,
            ..OwnFigures::default()
        };
        Arc::new(Mutex::new(MetricsState { exposition: e, own }))
    }

    /// docs/agent.md's table of metric families is every family the endpoint serves (with
    /// sampling and the BPF statistics on), and nothing else.
    #[test]
    fn the_docs_list_every_family() {
        let s = state();
        {
            let mut st = s.lock().unwrap();
            st.own.sample_hz = 99;
            st.own.program_stats = true;
        }
        let text = String::from_utf8(encode(&s, Format::PrometheusText).unwrap()).unwrap();
        let mut served: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agent.md")).unwrap();
        let mut listed: Vec<&str> =
            readme.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).filter(|n| n.starts_with("execprof_")).collect();
        served.sort_unstable();
        listed.sort_unstable();
        assert_eq!(served, listed, "docs/agent.md's metrics table has drifted from the endpoint's families");
    }

    #[test]
    fn the_text_formats_name_every_family_with_help_type_and_unit() {
        let text = String::from_utf8(encode(&state(), Format::OpenMetrics).unwrap()).unwrap();
        for want in [
            "# TYPE execprof_exec_attempts counter",
            "execprof_exec_attempts_total{outcome=\"enoent\",program=\"/usr/bin/make\",unit=\"cron.service\"} 7",
            "# UNIT execprof_exec_duration_seconds seconds",
            "execprof_exec_duration_seconds_bucket{le=\"0.0009765625\",outcome=\"enoent\",program=\"/usr/bin/make\",unit=\"cron.service\"} 0",
            "execprof_exec_duration_seconds_bucket{le=\"0.001953125\",outcome=\"enoent\",program=\"/usr/bin/make\",unit=\"cron.service\"} 7",
            "execprof_exec_duration_seconds_count{outcome=\"enoent\",program=\"/usr/bin/make\",unit=\"cron.service\"} 7",
            "execprof_path_misses_total{directory=\"/usr/local/bin\"} 7",
            "execprof_build_info{version=",
            "# EOF",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
        let text = String::from_utf8(encode(&state(), Format::PrometheusText).unwrap()).unwrap();
        assert!(text.contains("# TYPE execprof_exec_kernel_seconds_total counter\n"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
