//! Which processes a run traces: plain data, kept in the run's metadata so a report says it.
use serde::{Deserialize, Serialize};

/// Which processes a run traces (JSON: `{"kind": "launched"}`, `{"kind": "pids", "pids": […]}`,
/// `{"kind": "cgroup", "path": …}`, `{"kind": "all"}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Scope {
    /// The command execprof launched (or the built-in chain), and every process it forks.
    #[default]
    Launched,
    /// Running processes, their threads, their descendants at attach and every descendant born
    /// while tracing (`--pid`).
    Pids {
        /// The processes named on the command line.
        pids: Vec<u32>,
    },
    /// Every task in a cgroup v2 directory or below, including tasks that move in later
    /// (`--cgroup`).
    Cgroup {
        /// The directory, as found under the cgroup2 mount.
        path: String,
    },
    /// Every process on the machine (`--all`).
    All,
}

impl Scope {
    /// How the report's header names it.
    pub fn describe(&self) -> String {
        match self {
            Scope::Launched => "the launched command and its descendants".to_owned(),
            Scope::Pids { pids } => {
                let list: Vec<String> = pids.iter().map(u32::to_string).collect();
                format!("--pid {}: running process(es), their threads and descendants", list.join(","))
            }
            Scope::Cgroup { path } => {
                format!("--cgroup {}: every task in that cgroup or below", crate::model::names::escape_name(path.as_bytes()))
            }
            Scope::All => "--all: every process on the machine".to_owned(),
        }
    }

    /// True for the scopes that trace running processes rather than a command execprof starts.
    pub fn is_running_system(&self) -> bool {
        !matches!(self, Scope::Launched)
    }
}
