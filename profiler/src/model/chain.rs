//! The built-in exec chain's shape, as plain data: what a run asked the chain to do (steps,
//! PATH misses, environment and argument sizes). Written into every recording's metadata;
//! `launch::workload` turns it into a command.

/// The shape of one built-in exec chain: how many steps, and what each step's exec carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainSpec {
    /// Successful execs in the chain (chain steps).
    pub steps: u32,
    /// PATH directories searched (and missed, ENOENT) before the one holding the program.
    pub misses: u32,
    /// execve by absolute path instead of the PATH search: no ENOENT at all.
    pub direct: bool,
    /// Extra environment variables (`x1=...`, as in the published "64 extra" runs).
    pub env_vars: u32,
    /// Bytes of each extra variable's value (0: the published `xN=N`).
    pub env_size: u32,
    /// Extra arguments after the step count, passed along unchanged.
    pub args: u32,
    /// Bytes of each extra argument.
    pub arg_size: u32,
    /// Look each PATH candidate up from user space before exec'ing it (Some(true)), or say
    /// so explicitly with the plain chain (Some(false)): both carry the same environment
    /// variable, so the two compare like with like. None: the published chain.
    #[serde(default)]
    pub lookup_first: Option<bool>,
}

impl ChainSpec {
    /// Steps when none are given.
    pub const DEFAULT_STEPS: u32 = 10_000;
    /// Missed PATH directories per step when none are given.
    pub const DEFAULT_MISSES: u32 = 6;

    /// A chain of `steps` steps, each missing `misses` PATH directories, with no extras.
    pub fn new(steps: u32, misses: u32) -> Self {
        Self { steps, misses, direct: false, env_vars: 0, env_size: 0, args: 0, arg_size: 8, lookup_first: None }
    }

    /// ENOENT attempts per step.
    pub fn misses_per_step(&self) -> u32 {
        if self.direct { 0 } else { self.misses }
    }

    /// One-line description for reports (`10000 steps, 6 missed PATH directories per step`).
    pub fn describe(&self) -> String {
        let mut d = format!("{} steps, ", self.steps);
        if self.direct {
            d.push_str("execve by absolute path (no PATH search)");
        } else {
            d.push_str(&format!("{} missed PATH directories per step", self.misses));
        }
        if self.env_vars > 0 {
            d.push_str(&format!(", {} extra env vars", self.env_vars));
            if self.env_size > 0 {
                d.push_str(&format!(" of {} bytes", self.env_size));
            }
        }
        if self.args > 0 {
            d.push_str(&format!(", {} extra args of {} bytes", self.args, self.arg_size));
        }
        if self.lookup_first == Some(true) {
            d.push_str(", each candidate looked up with access(2) before exec");
        }
        d
    }
}
