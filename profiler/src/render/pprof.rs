//! pprof profiles: the kernel stacks sampled inside exec attempts as a gzipped
//! `profile.proto` (package `perftools.profiles`), what `go tool pprof`, Parca and Grafana
//! Pyroscope read. Two sample types, `samples` (count) and `exec_time` (nanoseconds of measured
//! exec-attempt time the samples stand for: an outcome's samples share its attempts' summed
//! latency), the second the default; string labels per sample (`outcome`, `phase`, and what the
//! caller adds). Kernel frames carry names only (kallsyms has no lines), one location per
//! function. The message types come from `proto/pprof.proto` through prost.
use std::{collections::HashMap, io::Write as _};

use anyhow::{Context as _, Result};
use prost::Message as _;

use crate::analysis::{attribution::SampledAttribution, exposition::CgroupNames, outcome::Outcome, profile_window::WindowProfile};

/// prost's types for `proto/pprof.proto`.
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub(crate) mod proto {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// The one mapping's file name: the kernel, named as perf names it.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// A profile being built: interned strings, one function and location per kernel symbol.
pub(crate) struct ProfileBuilder {
    profile: proto::Profile,
    strings: HashMap<String, i64>,
    locations: HashMap<String, u64>,
}

impl ProfileBuilder {
    /// An empty profile sampled at `hz` (the period: 1/hz seconds of CPU time per sample),
    /// covering `duration_ns` from `time_ns` (nanoseconds since the epoch; 0: unknown).
    pub(crate) fn new(hz: u64, time_ns: i64, duration_ns: i64) -> Self {
        let mut b = Self { profile: proto::Profile::default(), strings: HashMap::new(), locations: HashMap::new() };
        b.profile.string_table.push(String::new());
        b.strings.insert(String::new(), 0);
        // One mapping, the kernel's, as perf names it: readers want a main binary.
        let kernel = b.string(KERNEL_MAPPING);
        b.profile.mapping.push(proto::Mapping { id: 1, filename: kernel, has_functions: true, ..Default::default() });
        let samples = b.value_type("samples", "count");
        let time = b.value_type("exec_time", "nanoseconds");
        b.profile.sample_type = vec![samples, time];
        b.profile.default_sample_type = b.string("exec_time");
        b.profile.period_type = Some(b.value_type("cpu", "nanoseconds"));
        b.profile.period = 1_000_000_000u64.checked_div(hz).unwrap_or(0) as i64;
        b.profile.time_nanos = time_ns;
        b.profile.duration_nanos = duration_ns;
        let comment =
            b.string("execprof: kernel stacks sampled inside exec attempts; exec_time is measured attempt time shared by samples");
        b.profile.comment.push(comment);
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType { r#type: self.string(kind), unit: self.string(unit) }
    }

    /// The location of a kernel function (ids from 1; its function has the same id).
    fn location(&mut self, function: &str) -> u64 {
        if let Some(&id) = self.locations.get(function) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        let name = self.string(function);
        self.profile.function.push(proto::Function { id, name, system_name: name, ..Default::default() });
        self.profile.location.push(proto::Location {
            id,
            mapping_id: 1,
            line: vec![proto::Line { function_id: id, line: 0 }],
            ..Default::default()
        });
        self.locations.insert(function.to_owned(), id);
        id
    }

    /// One stack: `frames` outermost first, `samples` taken there standing for `exec_ns` of
    /// attempt time, with string `labels` (each key once).
    pub(crate) fn add<'a>(
        &mut self,
        frames: impl DoubleEndedIterator<Item = &'a str>,
        samples: u64,
        exec_ns: i64,
        labels: &[(&str, &str)],
    ) {
        let location_id = frames.rev().map(|f| self.location(f)).collect();
        let label = labels.iter().map(|(k, v)| proto::Label { key: self.string(k), str: self.string(v), ..Default::default() }).collect();
        self.profile.sample.push(proto::Sample { location_id, value: vec![samples as i64, exec_ns], label });
    }

    /// The profile, encoded and gzipped as pprof files are.
    pub(crate) fn gzipped(&self) -> Result<Vec<u8>> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&self.profile.encode_to_vec()).context("compressing the profile")?;
        gz.finish().context("compressing the profile")
    }

    #[cfg(test)]
    fn profile(&self) -> &proto::Profile {
        &self.profile
    }
}

/// The name a profile's `outcome` label gives an outcome: the JSON's (`enoent`), or a fork
/// call's syscall (`clone`).
pub(crate) fn outcome_label(o: Outcome) -> &'static str {
    match o {
        Outcome::Fork(s) => s.label(),
        o => o.key().unwrap_or("other"),
    }
}

/// A run's or a recording's sampled stacks as a profile: per outcome and calling program,
/// each folded stack (`phase;outermost;...;innermost`) with the outcome, the program and the
/// phase as labels, the outcome's measured attempt time shared by its samples.
pub(crate) fn from_sampled(sampled: &SampledAttribution, hz: u64, time_ns: i64, duration_ns: i64) -> ProfileBuilder {
    let mut b = ProfileBuilder::new(hz, time_ns, duration_ns);
    for oc in sampled.outcomes.iter().filter(|o| o.samples > 0) {
        let ns_per_sample = oc.attempts as f64 * oc.mean_ns / oc.samples as f64;
        let outcome = outcome_label(oc.outcome);
        // The stacks by program where the samples name their callers (a run's, a
        // recording's), else by outcome alone.
        let by_program: Vec<(&str, &str, u64)> = sampled
            .by_program
            .iter()
            .filter(|p| p.outcome == oc.outcome)
            .map(|p| (p.folded.as_str(), p.program.as_str(), p.samples))
            .collect();
        let stacks: Vec<(&str, Option<&str>, u64)> = if by_program.is_empty() {
            oc.folded.iter().map(|(stack, n)| (stack.as_str(), None, *n)).collect()
        } else {
            by_program.into_iter().map(|(stack, program, n)| (stack, Some(program), n)).collect()
        };
        for (stack, program, n) in stacks {
            let mut parts = stack.split(';');
            let phase = parts.next().unwrap_or_default();
            let frames: Vec<&str> = parts.collect();
            let mut labels = vec![("outcome", outcome)];
            labels.extend(program.map(|p| ("program", p)));
            labels.push(("phase", phase));
            b.add(frames.into_iter(), n, (n as f64 * ns_per_sample).round() as i64, &labels);
        }
    }
    b
}

/// The agent's last N seconds of exec samples as a profile: each stack with its series'
/// labels (`outcome`, `program`, and `unit`, `container`, `pod` where the cgroup's path names
/// them) and its phase, its series' measured attempt time shared by its samples.
pub(crate) fn from_window(window: &WindowProfile, hz: u64, time_ns: i64) -> ProfileBuilder {
    let mut b = ProfileBuilder::new(hz, time_ns, window.covered.as_nanos() as i64);
    for s in &window.stacks {
        let cgroup = CgroupNames::parse(&s.series.cgroup);
        let mut labels =
            vec![("outcome", s.series.outcome.as_str()), ("program", s.series.program.as_str()), ("phase", s.stack.phase.as_str())];
        // The ids: `container` and `pod` are names in the metrics, which the runtimes give.
        for (key, value) in [("unit", &cgroup.unit), ("container_id", &cgroup.container), ("pod_uid", &cgroup.pod)] {
            if !value.is_empty() {
                labels.push((key, value.as_str()));
            }
        }
        b.add(s.stack.frames.iter().map(String::as_str), s.samples, s.exec_ns as i64, &labels);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(b: &ProfileBuilder) -> proto::Profile {
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&b.gzipped().unwrap()[..]), &mut raw).unwrap();
        proto::Profile::decode(&raw[..]).unwrap()
    }

    #[test]
    fn stacks_become_leaf_first_locations_with_interned_names_and_labels() {
        let mut b = ProfileBuilder::new(999, 0, 0);
        b.add(["do_execveat_common", "do_open_execat", "path_openat"].into_iter(), 3, 300, &[("outcome", "enoent"), ("phase", "lookup")]);
        b.add(["do_execveat_common", "bprm_execve"].into_iter(), 1, 100, &[("outcome", "success"), ("phase", "binfmt")]);
        let p = decoded(&b);
        assert_eq!(&p, b.profile(), "gzip and protobuf round-trip");
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(
            p.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect::<Vec<_>>(),
            [("samples", "count"), ("exec_time", "nanoseconds")]
        );
        assert_eq!(s(p.default_sample_type), "exec_time");
        assert_eq!((p.mapping.len(), s(p.mapping[0].filename)), (1, KERNEL_MAPPING));
        assert!(p.location.iter().all(|l| l.mapping_id == 1));
        assert_eq!(p.period, 1_001_001);
        assert_eq!(p.location.len(), 4, "do_execveat_common once");
        let name = |loc: u64| {
            let l = p.location.iter().find(|l| l.id == loc).unwrap();
            s(p.function.iter().find(|f| f.id == l.line[0].function_id).unwrap().name)
        };
        let first: Vec<&str> = p.sample[0].location_id.iter().map(|&l| name(l)).collect();
        assert_eq!(first, ["path_openat", "do_open_execat", "do_execveat_common"], "leaf first");
        assert_eq!(p.sample[0].value, [3, 300]);
        let labels: Vec<(&str, &str)> = p.sample[1].label.iter().map(|l| (s(l.key), s(l.str))).collect();
        assert_eq!(labels, [("outcome", "success"), ("phase", "binfmt")]);
        let distinct: std::collections::HashSet<&String> = p.string_table.iter().collect();
        assert_eq!(distinct.len(), p.string_table.len(), "each string once");
    }

    #[test]
    fn outcomes_are_labelled_by_their_json_names() {
        assert_eq!(outcome_label(Outcome::Enoent), "enoent");
        assert_eq!(outcome_label(Outcome::Success), "success");
        assert_eq!(outcome_label(Outcome::Fork(crate::model::names::ForkSyscall::Clone3)), "clone3");
    }
}
