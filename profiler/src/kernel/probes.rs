//! The one table of every hook execprof attaches for `run`, and the attach loop that turns an
//! optional hook's failure into a specific warning instead of an error.
use anyhow::{Context as _, Result, anyhow};
use aya::{Ebpf, programs::RawTracePoint};
use profiler_common::names;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attach {
    /// A raw tracepoint: TP_PROTO arguments, the cheapest hook per hit.
    RawTracepoint { name: &'static str },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct ProbeSpec {
    /// Program name in the eBPF object.
    pub program: &'static str,
    pub attach: Attach,
    /// A required probe that cannot attach stops the run; an optional one costs what `lost` says.
    pub required: bool,
    /// What the report lacks when this optional probe is missing.
    pub lost: &'static str,
    /// An exec and fork-family boundary: left out where fentry/fexit time them instead.
    pub boundary: bool,
}

impl Attach {
    pub(crate) fn describe(&self) -> String {
        match self {
            Attach::RawTracepoint { name } => format!("raw tracepoint {name}"),
        }
    }
}

pub(crate) const RUN_PROBES: &[ProbeSpec] = &[
    ProbeSpec {
        program: names::PROG_SYS_ENTER,
        attach: Attach::RawTracepoint { name: "sys_enter" },
        required: true,
        lost: "",
        boundary: true,
    },
    ProbeSpec {
        program: names::PROG_SYS_EXIT,
        attach: Attach::RawTracepoint { name: "sys_exit" },
        required: true,
        lost: "",
        boundary: true,
    },
    ProbeSpec {
        program: names::PROG_SCHED_PROCESS_FORK,
        attach: Attach::RawTracepoint { name: "sched_process_fork" },
        required: true,
        lost: "",
        boundary: false,
    },
    ProbeSpec {
        program: names::PROG_SCHED_PROCESS_EXIT,
        attach: Attach::RawTracepoint { name: "sched_process_exit" },
        required: true,
        lost: "",
        boundary: false,
    },
    ProbeSpec {
        program: names::PROG_SCHED_PROCESS_EXEC,
        attach: Attach::RawTracepoint { name: "sched_process_exec" },
        required: true,
        lost: "",
        boundary: false,
    },
    ProbeSpec {
        program: names::PROG_SCHED_SWITCH,
        attach: Attach::RawTracepoint { name: "sched_switch" },
        required: false,
        lost: "off-CPU time is not separated out of chain steps",
        boundary: false,
    },
    ProbeSpec {
        program: names::PROG_SCHED_PREPARE_EXEC,
        attach: Attach::RawTracepoint { name: "sched_prepare_exec" },
        required: false,
        lost: "successful execs are not split at the point of no return (sched_prepare_exec needs Linux 6.10+)",
        boundary: false,
    },
];

/// `execprof agent --all`: the boundaries alone (where fentry/fexit do not time the calls);
/// nothing runs at forks, exits or new images.
pub(crate) const AGENT_PROBES: &[ProbeSpec] = &[RUN_PROBES[0], RUN_PROBES[1]];

/// `execprof agent --pid` and `--cgroup`: the boundaries and the hooks that keep the set of
/// watched processes (a fork adds the child, the last thread's exit removes the process).
pub(crate) const AGENT_TREE_PROBES: &[ProbeSpec] = &[RUN_PROBES[0], RUN_PROBES[1], RUN_PROBES[2], RUN_PROBES[3]];

/// What attaching the table gave: the optional probes that failed, as readable warnings.
#[derive(Debug, Default)]
pub(crate) struct AttachOutcome {
    pub attached: Vec<&'static str>,
    pub warnings: Vec<String>,
}

/// `boundaries`: whether the syscall boundary hooks are among them (not with fentry/fexit).
pub(crate) fn attach_all(ebpf: &mut Ebpf, probes: &[ProbeSpec], boundaries: bool) -> Result<AttachOutcome> {
    let mut outcome = AttachOutcome::default();
    for spec in probes.iter().filter(|s| boundaries || !s.boundary) {
        match attach_one(ebpf, spec) {
            Ok(()) => outcome.attached.push(spec.program),
            Err(err) if !spec.required => {
                outcome.warnings.push(format!("{} not attached ({err:#}): {}", spec.attach.describe(), spec.lost));
            }
            Err(err) => {
                return Err(err.context(format!(
                    "required probe {} could not attach; this kernel lacks what execprof needs (see `execprof doctor`)",
                    spec.attach.describe()
                )));
            }
        }
    }
    Ok(outcome)
}

pub(crate) fn attach_one(ebpf: &mut Ebpf, spec: &ProbeSpec) -> Result<()> {
    let program = ebpf.program_mut(spec.program).ok_or_else(|| anyhow!("program {} missing from the eBPF object", spec.program))?;
    match spec.attach {
        Attach::RawTracepoint { name } => {
            let tp: &mut RawTracePoint = program.try_into()?;
            tp.load().with_context(|| format!("loading {}", spec.program))?;
            tp.attach(name)?;
        }
    }
    Ok(())
}
