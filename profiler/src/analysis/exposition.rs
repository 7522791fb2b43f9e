//! The agent's figures as metrics keep them: the kernel's deltas folded per label set
//! (outcome, program, and the cgroup's systemd unit, container and pod), with every label
//! bounded. Pure: fed the same deltas as the agent's totals, tested without root; rendered by
//! `render::metrics`.
//!
//! Counters must only grow for Prometheus's `rate()`: so a program that gets a label of its
//! own keeps it for the agent's life (a program moved out of `other` would make `other` fall,
//! which Prometheus reads as a reset and counts again). Label sets that stop changing are
//! dropped after an idle time, as a container that is gone stops reporting.
use std::{
    collections::{BTreeMap, HashSet},
    time::{Duration, Instant},
};

use regex::Regex;

use super::{
    aggregates::{Call, MissCounts, OTHER, SeriesKey, Totals},
    containers::{ContainerDirectory, ContainerInfo},
};

/// Names parsed from a cgroup's path: a systemd unit, a container id, a Kubernetes pod uid
/// (empty when the path holds none).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupNames {
    /// The innermost `NAME.service`, else the innermost `NAME.scope` that is not a
    /// container's (`session-3.scope`).
    pub unit: String,
    /// A container id: docker (`docker-ID.scope`, `/docker/ID`), containerd
    /// (`cri-containerd-ID.scope`), CRI-O (`crio-ID.scope`, `crio-ID`), podman
    /// (`libpod-ID.scope`, `libpod-ID`), or a Kubernetes cgroupfs leaf under its pod.
    pub container: String,
    /// A Kubernetes pod uid (`kubepods-…-podUID.slice`, `/kubepods/…/podUID`), with dashes.
    pub pod: String,
}

/// Container runtimes' scope prefixes (systemd cgroup driver).
const CONTAINER_SCOPES: [&str; 4] = ["docker-", "cri-containerd-", "crio-", "libpod-"];

impl CgroupNames {
    /// Parses a cgroup path under the cgroup2 mount (`/system.slice/cron.service`).
    pub fn parse(path: &str) -> Self {
        Self::parse_nested(path).0
    }

    /// The container ids in a cgroup path, the outermost first: more than one for nested
    /// containers (`/docker/ID/kubepods/…/podUID/ID2`, a kind node's pods).
    pub fn container_ids(path: &str) -> Vec<String> {
        Self::parse_nested(path).1
    }

    /// [`CgroupNames::parse`] and [`CgroupNames::container_ids`] in one pass.
    pub fn parse_nested(path: &str) -> (Self, Vec<String>) {
        let mut names = Self::default();
        let mut ids = Vec::new();
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let mut container = None;
            if let Some(scope) = part.strip_suffix(".scope") {
                if let Some(id) = CONTAINER_SCOPES.iter().find_map(|p| scope.strip_prefix(p)) {
                    container = Some(id);
                } else {
                    names.unit = (*part).to_owned();
                }
            } else if let Some(id) = CONTAINER_SCOPES.iter().find_map(|p| part.strip_prefix(p)).filter(|id| is_container_id(id)) {
                // cgroupfs driver: podman's /libpod_parent/libpod-ID, CRI-O's crio-ID.
                container = Some(id);
            } else if part.ends_with(".service") {
                names.unit = (*part).to_owned();
            } else if let Some(uid) = pod_uid(part) {
                names.pod = uid;
                // cgroupfs driver: /kubepods/burstable/podUID/CONTAINER
                container = parts.get(i + 1).filter(|l| is_container_id(l)).copied();
            } else if i > 0 && parts[i - 1] == "docker" && is_container_id(part) {
                container = Some(part);
            }
            if let Some(id) = container {
                names.container = id.to_owned();
                if ids.last() != Some(&names.container) {
                    ids.push(names.container.clone());
                }
            }
        }
        (names, ids)
    }
}

/// A pod uid from `kubepods-burstable-pod1234_5678.slice` or `pod1234-5678`.
fn pod_uid(part: &str) -> Option<String> {
    let stem = part.strip_suffix(".slice").unwrap_or(part);
    let pos = stem.rfind("pod")?;
    if pos > 0 && !stem[..pos].ends_with('-') {
        return None;
    }
    let uid = &stem[pos + 3..];
    let ok = uid.len() >= 32 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
    ok.then(|| uid.replace('_', "-"))
}

/// A container id: 64 hexadecimal digits.
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Which programs get a `program` label of their own: those a pattern of the allow-list
/// matches, and the first `max_first_seen` others in the order they are first seen; the rest
/// are `other`. A program once labelled stays labelled.
#[derive(Debug)]
pub struct ProgramLabels {
    allow: Vec<Regex>,
    max_first_seen: usize,
    labelled: HashSet<String>,
    /// Programs seen that were not given a label (counted, bounded by the set they would be).
    refused: u64,
}

impl ProgramLabels {
    /// Labels what `allow` matches (whole paths) and the first `max_first_seen` others.
    pub fn new(allow: Vec<Regex>, max_first_seen: usize) -> Self {
        Self { allow, max_first_seen, labelled: HashSet::new(), refused: 0 }
    }

    /// The label value for `program`.
    pub fn label(&mut self, program: &str) -> String {
        if program == OTHER || self.labelled.contains(program) {
            return program.to_owned();
        }
        let allowed = self.allow.iter().any(|r| r.is_match(program));
        let first_seen = self.labelled.len() < self.max_first_seen;
        if allowed || first_seen {
            self.labelled.insert(program.to_owned());
            return program.to_owned();
        }
        self.refused += 1;
        OTHER.to_owned()
    }

    /// Programs with a label of their own.
    pub fn labelled(&self) -> usize {
        self.labelled.len()
    }
}

/// The labels of one series of exec or fork figures.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricLabels {
    /// Exec attempt or fork-family call.
    pub call: Call,
    /// The outcome's name (`success`, `enoent`, `abandoned`).
    pub outcome: String,
    /// The calling program's path, or `other`.
    pub program: String,
    /// Names from the caller's cgroup.
    pub cgroup: CgroupNames,
    /// What a container runtime says of its container (empty where none named it).
    pub named: ContainerInfo,
}

/// A label set's totals and when they last changed.
#[derive(Clone, Debug)]
pub struct Labelled<T> {
    /// Since the agent started (or since this label set came back after being dropped).
    pub totals: T,
    changed: Instant,
}

/// The metrics' figures: totals per label set, per missed directory, and per outcome and
/// phase of the kernel-stack samples.
#[derive(Debug)]
pub struct Exposition {
    programs: ProgramLabels,
    /// Exec and fork figures per label set.
    pub series: BTreeMap<MetricLabels, Labelled<Totals>>,
    /// ENOENT attempts per missed directory.
    pub misses: BTreeMap<String, Labelled<MissCounts>>,
    max_series: usize,
    idle: Duration,
    /// Calls whose label set did not fit (`max_series`): counted with their cgroup's names
    /// left out.
    pub folded: u64,
    /// Label sets dropped after `idle` without a change.
    pub dropped: u64,
    /// Kernel-stack samples inside exec attempts per (outcome, phase).
    pub phase_samples: BTreeMap<(String, String), u64>,
    /// What the container runtimes said of the containers seen (the agent asks them before a
    /// container's first figures are added).
    pub containers: ContainerDirectory,
}

impl Exposition {
    /// Holds at most `max_series` label sets (past it a new one loses its cgroup's names)
    /// and drops one unchanged for `idle`.
    pub fn new(programs: ProgramLabels, max_series: usize, idle: Duration) -> Self {
        Self {
            programs,
            series: BTreeMap::new(),
            misses: BTreeMap::new(),
            max_series,
            idle,
            folded: 0,
            dropped: 0,
            phase_samples: BTreeMap::new(),
            containers: ContainerDirectory::new(max_series),
        }
    }

    /// Adds one series' delta, read at `now`.
    pub fn add(&mut self, key: &SeriesKey, delta: &Totals, now: Instant) {
        if delta.is_empty() {
            return;
        }
        // The innermost container a runtime named (a nested one may be known to none).
        let (mut cgroup, ids) = CgroupNames::parse_nested(&key.cgroup);
        let named = ids.into_iter().rev().find_map(|id| Some((self.containers.get(&id)?.clone(), id)));
        let named = match named {
            Some((info, id)) => {
                cgroup.container = id;
                info
            }
            None => ContainerInfo::default(),
        };
        let mut labels =
            MetricLabels { call: key.call, outcome: key.outcome.clone(), program: self.programs.label(&key.program), cgroup, named };
        if !self.series.contains_key(&labels) && self.series.len() >= self.max_series {
            self.folded += delta.count;
            labels.cgroup = CgroupNames::default();
            labels.named = ContainerInfo::default();
            labels.program = OTHER.to_owned();
        }
        let entry = self.series.entry(labels).or_insert_with(|| Labelled { totals: Totals::default(), changed: now });
        entry.totals.add(delta);
        entry.changed = now;
    }

    /// Adds misses in a directory.
    pub fn add_misses(&mut self, directory: &str, counts: &MissCounts, now: Instant) {
        if !self.misses.contains_key(directory) && self.misses.len() >= self.max_series {
            self.folded += counts.misses;
            return;
        }
        let entry = self.misses.entry(directory.to_owned()).or_insert_with(|| Labelled { totals: MissCounts::default(), changed: now });
        entry.totals.add(counts);
        entry.changed = now;
    }

    /// Adds `count` kernel-stack samples of exec attempts ending in `outcome`, their stack
    /// in `phase` (named once per distinct stack: [`StackNames`](super::profile_window::StackNames)).
    pub fn add_samples(&mut self, outcome: &str, phase: &str, count: u64) {
        *self.phase_samples.entry((outcome.to_owned(), phase.to_owned())).or_default() += count;
    }

    /// Drops the label sets that have not changed for the idle time (after they were
    /// exposed that long: a scraper saw their last values).
    pub fn age(&mut self, now: Instant) {
        let idle = self.idle;
        let before = self.series.len() + self.misses.len();
        self.series.retain(|_, l| now.duration_since(l.changed) < idle);
        self.misses.retain(|_, l| now.duration_since(l.changed) < idle);
        self.dropped += (before - self.series.len() - self.misses.len()) as u64;
    }

    /// Programs with a label of their own, and programs refused one.
    pub fn program_labels(&self) -> (usize, u64) {
        (self.programs.labelled(), self.programs.refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::aggregates::Call;

    #[test]
    fn cgroup_paths_name_units_containers_and_pods() {
        let id = "0123456789abcdef".repeat(4);
        let uid = "8a1b2c3d-0000-4e5f-9a8b-0123456789ab";
        let uid_ = uid.replace('-', "_");
        let cases = [
            ("/system.slice/cron.service", ("cron.service", "", "")),
            ("/user.slice/user-1000.slice/session-3.scope", ("session-3.scope", "", "")),
            (&format!("/system.slice/docker-{id}.scope") as &str, ("", id.as_str(), "")),
            (&format!("/docker/{id}"), ("", &id, "")),
            (
                &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{id}.scope"),
                ("", &id, uid),
            ),
            (&format!("/kubepods/burstable/pod{uid}/{id}"), ("", &id, uid)),
            (&format!("/machine.slice/libpod-{id}.scope/container"), ("", &id, "")),
            (&format!("/libpod_parent/libpod-{id}"), ("", &id, "")),
            (&format!("/kubepods/besteffort/pod{uid}/crio-{id}"), ("", &id, uid)),
            ("/libpod_parent/libpod-conmon", ("", "", "")),
            ("/", ("", "", "")),
            ("unknown_cgroup_id:42", ("", "", "")),
            ("/execprof-agent-known-12", ("", "", "")),
        ];
        for (path, (unit, container, pod)) in cases {
            let n = CgroupNames::parse(path);
            assert_eq!((n.unit.as_str(), n.container.as_str(), n.pod.as_str()), (unit, container, pod), "{path}");
        }
    }

    fn key(cgroup: &str, program: &str, outcome: &str) -> SeriesKey {
        SeriesKey { cgroup: cgroup.into(), program: program.into(), call: Call::Exec, outcome: outcome.into(), compat: false }
    }

    fn delta(count: u64) -> Totals {
        Totals { count, timed: count, sum_ns: 1000 * count, ..Totals::default() }
    }

    #[test]
    fn containers_a_runtime_named_carry_their_names() {
        let (named, unnamed) = ("a".repeat(64), "b".repeat(64));
        let mut e = Exposition::new(ProgramLabels::new(Vec::new(), 10), 100, Duration::from_secs(60));
        let info = ContainerInfo { name: "web".into(), image: "localhost/web:1".into(), pod: "web-7".into(), namespace: "shop".into() };
        e.containers.insert(&named, Some(info.clone()));
        e.containers.insert(&unnamed, None);
        let now = Instant::now();
        e.add(&key(&format!("/libpod_parent/libpod-{named}"), "/bin/t", "enoent"), &delta(3), now);
        e.add(&key(&format!("/libpod_parent/libpod-{unnamed}"), "/bin/t", "enoent"), &delta(4), now);
        let by_id = |id: &str| e.series.iter().find(|(l, _)| l.cgroup.container == id).map(|(l, t)| (l.named.clone(), t.totals.count));
        assert_eq!(by_id(&named), Some((info.clone(), 3)));
        assert_eq!(by_id(&unnamed), Some((ContainerInfo::default(), 4)));
        // A container inside a named one that no runtime the agent reaches knows: the outer's.
        let nested = format!("/libpod_parent/libpod-{named}/kubepods/besteffort/pod8a1b2c3d-0000-4e5f-9a8b-0123456789ab/{unnamed}");
        assert_eq!(CgroupNames::container_ids(&nested), [named.clone(), unnamed.clone()]);
        e.add(&key(&nested, "/bin/q", "enoent"), &delta(5), now);
        let (labels, _) = e.series.iter().find(|(l, _)| l.program == "/bin/q").unwrap();
        assert_eq!((labels.cgroup.container.as_str(), &labels.named), (named.as_str(), &info));
        assert_eq!(labels.cgroup.pod, "8a1b2c3d-0000-4e5f-9a8b-0123456789ab");
        // Once the inner one is named, it is the inner one's.
        let inner = ContainerInfo { name: "app".into(), ..ContainerInfo::default() };
        e.containers.insert(&unnamed, Some(inner.clone()));
        e.add(&key(&nested, "/bin/r", "enoent"), &delta(6), now);
        let (labels, _) = e.series.iter().find(|(l, _)| l.program == "/bin/r").unwrap();
        assert_eq!((labels.cgroup.container.as_str(), &labels.named), (unnamed.as_str(), &inner));
    }

    #[test]
    fn programs_past_the_first_ones_are_other_and_a_label_once_given_stays() {
        let allow = vec![Regex::new("^/usr/bin/make$").unwrap()];
        let mut e = Exposition::new(ProgramLabels::new(allow, 2), 100, Duration::from_secs(60));
        let now = Instant::now();
        for p in ["/bin/sh", "/usr/bin/gcc", "/usr/bin/as", "/usr/bin/make", "/bin/sh"] {
            e.add(&key("/", p, "success"), &delta(1), now);
        }
        let programs: Vec<(&str, u64)> = e.series.iter().map(|(l, t)| (l.program.as_str(), t.totals.count)).collect();
        assert_eq!(programs, [("/bin/sh", 2), ("/usr/bin/gcc", 1), ("/usr/bin/make", 1), ("other", 1)]);
        assert_eq!(e.program_labels(), (3, 1));
    }

    #[test]
    fn a_full_exposition_folds_new_label_sets_and_counts_them() {
        let mut e = Exposition::new(ProgramLabels::new(Vec::new(), 10), 2, Duration::from_secs(60));
        let now = Instant::now();
        e.add(&key("/a.service", "/bin/sh", "success"), &delta(3), now);
        e.add(&key("/b.service", "/bin/sh", "success"), &delta(4), now);
        e.add(&key("/c.service", "/bin/sh", "enoent"), &delta(5), now);
        assert_eq!(e.folded, 5);
        let total: u64 = e.series.values().map(|l| l.totals.count).sum();
        assert_eq!(total, 12, "every call is still in some label set");
    }

    #[test]
    fn label_sets_that_stop_changing_are_dropped_after_the_idle_time() {
        let mut e = Exposition::new(ProgramLabels::new(Vec::new(), 10), 100, Duration::from_secs(60));
        let t0 = Instant::now();
        e.add(&key("/system.slice/gone.service", "/bin/sh", "success"), &delta(1), t0);
        e.add(&key("/", "/bin/sh", "success"), &delta(1), t0);
        e.add_misses("/usr/local/bin", &MissCounts { misses: 2, ..MissCounts::default() }, t0);
        e.add(&key("/", "/bin/sh", "success"), &delta(1), t0 + Duration::from_secs(50));
        e.age(t0 + Duration::from_secs(70));
        assert_eq!(e.series.len(), 1);
        assert!(e.misses.is_empty());
        assert_eq!(e.dropped, 1 + 1);
    }
}
