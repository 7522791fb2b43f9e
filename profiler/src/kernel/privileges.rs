//! Whether this process may trace: checked before anything is spawned, so a missing
//! privilege is one clear message instead of a half-started run.
use crate::model::failure::{Failure, code};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability bits of this process, from /proc/self/status.
pub(crate) fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| parse_cap_eff(&s)).unwrap_or(0)
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

/// The capabilities tracing needs that `caps` lacks (empty: allowed). CAP_SYS_ADMIN covers both.
pub(crate) fn missing(caps: u64) -> Vec<&'static str> {
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if !has(CAP_BPF) {
        out.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        out.push("CAP_PERFMON");
    }
    out
}

pub(crate) fn require_tracing_privileges(what: &str) -> Result<(), Failure> {
    let missing = missing(effective_caps());
    if missing.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        code::NO_PRIVILEGE,
        format!(
            "{what} needs CAP_BPF and CAP_PERFMON (or root), and this process lacks {}; run it as root: sudo execprof {what}",
            missing.join(" and ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }

    #[test]
    fn names_what_is_missing() {
        assert!(missing(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert_eq!(missing(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }
}
