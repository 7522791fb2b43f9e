//! The fast-path verdict: from one recording, what a double lookup (look the name up before
//! anything is allocated; fail there when it is missing) would save per failed attempt and
//! cost per successful exec, and the net per chain step.
//!
//! Each sampled kernel stack of an exec attempt falls into one part ([`OpenPart::of`]),
//! looking from the syscall down: the name copy (`getname*`, `strncpy_from_user`); inside the
//! program's own open (`do_open_execat` under `alloc_bprm`, not the interpreter's): the path
//! walk (`link_path_walk`, the last component's lookup and below), the struct file's
//! allocation and release (`alloc_empty_file`, `init_file`, `security_file_alloc`, memcg slab
//! charging under them, `fput`/`__fput*` and the free of an unopened file) and the rest of the
//! open; the bprm's own allocation and release; execprof's probes; the rest.
//!
//! The estimate: a failed attempt under a double lookup copies the name and walks the path
//! as now, then returns: it saves the struct file, the bprm and the rest of the open. A
//! successful exec walks the path twice: it adds one path walk of the program (the name is
//! copied once). Shares are Wilson 95% intervals of the outcome's samples × its measured
//! mean; the net combines the parts' intervals in quadrature (an approximation: parts of one
//! outcome are not independent).
use serde::Serialize;

use super::stats::{Interval, wilson};

/// Where in the exec path a sampled stack was, for the fast-path verdict (JSON: snake_case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenPart {
    /// Copying the program's name from user space (`getname*`, `strncpy_from_user`).
    NameCopy,
    /// The path walk of the program's own open (`link_path_walk`, the last component's lookup).
    PathWalk,
    /// Allocating and releasing the struct file of the program's open, memcg charging included.
    FileAllocFree,
    /// The rest of the program's own open (`do_filp_open`, 7.3: `do_file_open`; `path_openat`).
    OpenRest,
    /// Allocating and freeing the bprm and its mm.
    BprmAllocFree,
    /// execprof's own probes.
    Tracer,
    /// Everything else: syscall entry, mm, arguments, the binary's loading.
    Rest,
}

impl OpenPart {
    /// Every part, in the order the verdict's tables list them.
    pub const ALL: [OpenPart; 7] = [
        OpenPart::NameCopy,
        OpenPart::PathWalk,
        OpenPart::FileAllocFree,
        OpenPart::OpenRest,
        OpenPart::BprmAllocFree,
        OpenPart::Tracer,
        OpenPart::Rest,
    ];

    /// Human-readable name of the part, with the kernel functions it stands for.
    pub fn label(self) -> &'static str {
        match self {
            OpenPart::NameCopy => "name copy (getname, strncpy_from_user)",
            OpenPart::PathWalk => "path walk (link_path_walk and below)",
            OpenPart::FileAllocFree => "struct file alloc + release (memcg charge incl.)",
            OpenPart::OpenRest => "rest of the open (do_filp_open, path_openat)",
            OpenPart::BprmAllocFree => "bprm and its mm: alloc + free",
            OpenPart::Tracer => "execprof's probes",
            OpenPart::Rest => "syscall, mm, arguments, binary, the rest",
        }
    }

    /// The part of a sampled stack (leaf first, kernel names with suffixes). `tracer`: the
    /// phase model put the sample in execprof's own probes.
    pub fn of<S: AsRef<str>>(leaf_first: &[S], tracer: bool) -> OpenPart {
        if tracer {
            return OpenPart::Tracer;
        }
        let root_first: Vec<&str> = leaf_first.iter().rev().map(|f| base(f.as_ref())).collect();
        if root_first.iter().any(|f| f.starts_with("getname") || *f == "strncpy_from_user") && !root_first.contains(&"do_open_execat") {
            return OpenPart::NameCopy;
        }
        // The program's own open: do_open_execat reached from alloc_bprm (6.8+) or from
        // do_execveat_common/bprm_execve before it, never from load_elf_binary (the interpreter).
        if let Some(i) = root_first.iter().position(|f| *f == "do_open_execat") {
            if root_first[..i].iter().any(|f| matches!(*f, "load_elf_binary" | "open_exec" | "search_binary_handler")) {
                return OpenPart::Rest;
            }
            let below = &root_first[i + 1..];
            let file = below.iter().enumerate().any(|(j, f)| {
                FILE_FRAMES.contains(f)
                    || f.starts_with("__fput")
                    || f.starts_with("fput")
                    // An unopened file freed straight from path_openat (file_free inlined).
                    || (*f == "kmem_cache_free" && j > 0 && below[j - 1] == "path_openat")
            });
            if file {
                return OpenPart::FileAllocFree;
            }
            if below.iter().any(|f| WALK_FRAMES.contains(f)) {
                return OpenPart::PathWalk;
            }
            return OpenPart::OpenRest;
        }
        if root_first.iter().any(|f| matches!(*f, "alloc_bprm" | "free_bprm")) {
            return OpenPart::BprmAllocFree;
        }
        OpenPart::Rest
    }
}

/// The struct file's own allocation and release.
const FILE_FRAMES: &[&str] = &[
    "alloc_empty_file",
    "__alloc_file",
    "init_file",
    "security_file_alloc",
    "file_free",
    "file_free_rcu",
    "security_file_free",
    "____fput",
    "delayed_fput",
];

/// The path walk: every component but the last, then the last one's lookup.
const WALK_FRAMES: &[&str] = &[
    "link_path_walk",
    "path_init",
    "walk_component",
    "lookup_fast",
    "lookup_slow",
    "__lookup_slow",
    "open_last_lookups",
    "lookup_open",
    "complete_walk",
    "terminate_walk",
    "step_into",
    "handle_dots",
    "path_lookupat",
    "filename_lookup",
];

/// A kernel name without its compiler suffix (`link_path_walk.part.0`).
fn base(name: &str) -> &str {
    name.split_once('.').map_or(name, |(b, _)| b)
}

/// One part's time per attempt of an outcome.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct PartTime {
    /// The part.
    pub part: OpenPart,
    /// The part's human-readable label ([`OpenPart::label`]).
    pub label: String,
    /// Samples of the outcome in this part.
    pub samples: u64,
    /// Time in this part per attempt of the outcome, in ns, with its 95% interval.
    pub per_attempt: Interval,
    /// Under a double lookup: saved (failed attempts) or paid again (successes).
    pub changes: bool,
}

/// Samples of one outcome per part, as the stacks are attributed.
#[derive(Clone, Debug, Default)]
pub struct PartTally {
    counts: std::collections::BTreeMap<OpenPart, u64>,
}

impl PartTally {
    /// Counts `n` samples in `part`.
    pub fn add(&mut self, part: OpenPart, n: u64) {
        *self.counts.entry(part).or_default() += n;
    }

    /// Per attempt: Wilson share of the outcome's samples × its mean.
    pub fn finish(&self, total: u64, mean_ns: f64, changes: &dyn Fn(OpenPart) -> bool) -> Vec<PartTime> {
        OpenPart::ALL
            .iter()
            .map(|&part| {
                let k = self.counts.get(&part).copied().unwrap_or(0);
                let (lo, hi) = wilson(k, total);
                let share = if total == 0 { 0.0 } else { k as f64 / total as f64 };
                PartTime {
                    part,
                    label: part.label().to_owned(),
                    samples: k,
                    per_attempt: Interval { value: share * mean_ns, low: lo * mean_ns, high: hi * mean_ns },
                    changes: changes(part),
                }
            })
            .collect()
    }
}

/// What a double lookup saves in a failed attempt.
pub fn saved_by_double_lookup(p: OpenPart) -> bool {
    matches!(p, OpenPart::FileAllocFree | OpenPart::OpenRest | OpenPart::BprmAllocFree)
}

/// What a double lookup pays twice in a successful exec.
pub fn repeated_by_double_lookup(p: OpenPart) -> bool {
    p == OpenPart::PathWalk
}

/// The fast-path verdict: what a double lookup would save per failed attempt, add per
/// successful exec, and the net per chain step.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FastPathVerdict {
    /// Failed PATH lookups (ENOENT) and successful execs measured.
    pub failed_attempts: u64,
    /// Successful execs measured.
    pub successes: u64,
    /// Samples taken in the failed attempts.
    pub failed_samples: u64,
    /// Samples taken in the successful execs.
    pub success_samples: u64,
    /// Failed attempts per successful exec: per chain step in the chain.
    pub failed_per_success: f64,
    /// Mean latency of a failed attempt, in ns.
    pub failed_mean_ns: f64,
    /// Mean latency of a successful exec, in ns.
    pub success_mean_ns: f64,
    /// Time per failed attempt in each part, every part listed.
    pub failed_parts: Vec<PartTime>,
    /// Time per successful exec in each part, every part listed.
    pub success_parts: Vec<PartTime>,
    /// Saved per failed attempt.
    pub saved_per_failure: Interval,
    /// Added per successful exec (a second walk).
    pub added_per_success: Interval,
    /// Per successful exec with its failed attempts (a chain step): added − failures × saved.
    /// Negative: the double lookup would be faster.
    pub net_per_success: Interval,
}

fn sum(parts: &[PartTime], pick: &dyn Fn(OpenPart) -> bool) -> Interval {
    let chosen: Vec<&PartTime> = parts.iter().filter(|p| pick(p.part)).collect();
    let value = chosen.iter().map(|p| p.per_attempt.value).sum();
    let se = chosen.iter().map(|p| p.per_attempt.standard_error().powi(2)).sum::<f64>().sqrt();
    Interval::normal(value, se)
}

impl FastPathVerdict {
    /// `failed`/`success`: (attempts, samples, mean ns, part tally).
    pub fn new(failed: (u64, u64, f64, &PartTally), success: (u64, u64, f64, &PartTally)) -> Option<Self> {
        let (failed_attempts, failed_samples, failed_mean_ns, ft) = failed;
        let (successes, success_samples, success_mean_ns, st) = success;
        if failed_attempts == 0 || successes == 0 || failed_samples == 0 || success_samples == 0 {
            return None;
        }
        let failed_parts = ft.finish(failed_samples, failed_mean_ns, &saved_by_double_lookup);
        let success_parts = st.finish(success_samples, success_mean_ns, &repeated_by_double_lookup);
        let saved_per_failure = sum(&failed_parts, &saved_by_double_lookup);
        let added_per_success = sum(&success_parts, &repeated_by_double_lookup);
        let failed_per_success = failed_attempts as f64 / successes as f64;
        let saved = saved_per_failure.scaled(failed_per_success);
        let net_per_success =
            Interval::normal(added_per_success.value - saved.value, added_per_success.standard_error().hypot(saved.standard_error()));
        Some(Self {
            failed_attempts,
            successes,
            failed_samples,
            success_samples,
            failed_per_success,
            failed_mean_ns,
            success_mean_ns,
            failed_parts,
            success_parts,
            saved_per_failure,
            added_per_success,
            net_per_success,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(stack_root_first: &[&str]) -> OpenPart {
        let leaf_first: Vec<&str> = stack_root_first.iter().rev().copied().collect();
        OpenPart::of(&leaf_first, false)
    }

    #[test]
    fn stacks_fall_into_the_open_paths_parts() {
        let open = ["__x64_sys_execve", "do_execveat_common.isra.0", "alloc_bprm", "do_open_execat", "do_filp_open", "path_openat"];
        fn with<'a>(open: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
            [open, tail].concat()
        }
        let with = |tail: &[&'static str]| with(&open, tail);
        assert_eq!(part(&with(&["link_path_walk.part.0", "inode_permission"])), OpenPart::PathWalk);
        assert_eq!(part(&with(&["lookup_fast", "__d_lookup_rcu"])), OpenPart::PathWalk);
        assert_eq!(part(&with(&["alloc_empty_file", "kmem_cache_alloc_noprof", "__memcg_slab_post_alloc_hook"])), OpenPart::FileAllocFree);
        assert_eq!(part(&with(&["kmem_cache_free", "__memcg_slab_free_hook"])), OpenPart::FileAllocFree);
        assert_eq!(part(&with(&["__fput_deferred", "security_file_free"])), OpenPart::FileAllocFree);
        assert_eq!(part(&with(&[])), OpenPart::OpenRest);
        assert_eq!(
            part(&["__x64_sys_execve", "do_execveat_common.isra.0", "getname_flags.part.0", "strncpy_from_user"]),
            OpenPart::NameCopy
        );
        assert_eq!(part(&["__x64_sys_execve", "do_execveat_common.isra.0", "alloc_bprm", "kmalloc_trace"]), OpenPart::BprmAllocFree);
        assert_eq!(part(&["__x64_sys_execve", "do_execveat_common.isra.0", "free_bprm"]), OpenPart::BprmAllocFree);
        // The interpreter's open is not the program's lookup.
        let interp = [
            "__x64_sys_execve",
            "bprm_execve",
            "load_elf_binary",
            "open_exec",
            "do_open_execat",
            "do_filp_open",
            "path_openat",
            "link_path_walk",
        ];
        assert_eq!(part(&interp), OpenPart::Rest);
        assert_eq!(OpenPart::of(&["bpf_ringbuf_output", "do_open_execat"], true), OpenPart::Tracer);
    }

    #[test]
    fn the_verdict_weighs_savings_by_failures_per_success() {
        let mut f = PartTally::default();
        f.add(OpenPart::NameCopy, 10);
        f.add(OpenPart::PathWalk, 40);
        f.add(OpenPart::FileAllocFree, 30);
        f.add(OpenPart::Rest, 20);
        let mut s = PartTally::default();
        s.add(OpenPart::PathWalk, 5);
        s.add(OpenPart::Rest, 95);
        // 6 failures per success, failures 1 µs, successes 40 µs.
        let v = FastPathVerdict::new((600, 100, 1_000.0, &f), (100, 100, 40_000.0, &s)).unwrap();
        assert_eq!(v.failed_per_success, 6.0);
        assert!((v.saved_per_failure.value - 300.0).abs() < 1e-9);
        assert!((v.added_per_success.value - 2_000.0).abs() < 1e-9);
        assert!((v.net_per_success.value - (2_000.0 - 1_800.0)).abs() < 1e-9);
        assert!(v.net_per_success.low < v.net_per_success.value && v.net_per_success.high > v.net_per_success.value);
        assert!(FastPathVerdict::new((0, 0, 0.0, &f), (100, 100, 1.0, &s)).is_none());
    }
}
