//! Facts about the running kernel that the report header and `doctor` print.
use crate::model::meta::{KernelInfo, MachineFacts};

impl KernelInfo {
    /// Facts about the kernel execprof runs on (uname, BTF, lockdown).
    pub fn current() -> Self {
        // SAFETY: utsname is plain data filled by the kernel.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        unsafe { libc::uname(&mut uts) };
        let field = |f: &[libc::c_char]| {
            let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c.to_ne_bytes()[0]).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Self {
            release: field(&uts.release),
            machine: field(&uts.machine),
            btf: std::path::Path::new(crate::kernel::vmlinux::VMLINUX_BTF).exists(),
            lockdown: std::fs::read_to_string("/sys/kernel/security/lockdown").ok().and_then(|s| active_lockdown(&s)),
        }
    }
}

impl MachineFacts {
    /// This machine's, read from /proc and /sys; what cannot be read stays empty or false.
    pub fn current() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
            .unwrap_or_default();
        let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count() as u32;
        let memcg = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
            || std::fs::read_to_string("/proc/cgroups")
                .is_ok_and(|c| c.lines().any(|l| l.starts_with("memory") && l.trim_end().ends_with('1')));
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|c| c.lines().find_map(|l| l.strip_prefix("0::").map(str::to_owned)))
            .unwrap_or_default();
        Self {
            cpu_model,
            cpus,
            kprobes: std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists(),
            sched_prepare_exec: false,
            memcg,
            cgroup,
        }
    }
}

/// The highest process id plus one (`/proc/sys/kernel/pid_max`).
pub(crate) fn pid_max() -> anyhow::Result<u32> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string("/proc/sys/kernel/pid_max").context("reading /proc/sys/kernel/pid_max")?;
    text.trim().parse().with_context(|| format!("/proc/sys/kernel/pid_max holds {text:?}, not a number"))
}

/// Mounts a kernel pseudo filesystem (tracefs, securityfs) at its standard place.
pub(crate) fn mount_pseudo_fs(fstype: &std::ffi::CStr, target: &std::ffi::CStr) -> anyhow::Result<()> {
    // SAFETY: valid C strings; no data argument.
    let r = unsafe { libc::mount(c"nodev".as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if r != 0 {
        anyhow::bail!(
            "{} is not mounted and mounting it failed ({}); mount it with `mount -t {} nodev {}` and run again",
            fstype.to_string_lossy(),
            std::io::Error::last_os_error(),
            fstype.to_string_lossy(),
            target.to_string_lossy()
        );
    }
    log::debug!("mounted {} at {}", fstype.to_string_lossy(), target.to_string_lossy());
    Ok(())
}

/// The lockdown mode lives in securityfs, which some systems do not mount; `doctor` mounts it
/// (as root) so it can say which mode is active.
pub(crate) fn ensure_securityfs() {
    if !std::path::Path::new("/sys/kernel/security/lockdown").exists()
        && let Err(e) = mount_pseudo_fs(c"securityfs", c"/sys/kernel/security")
    {
        log::debug!("{e:#}");
    }
}

/// The number after `key:` in a `/proc/PID/fdinfo/FD` text (`recursion_misses:\t3`); None when
/// the kernel does not print that field.
pub(crate) fn fdinfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
}

/// The lockdown file lists all modes with the active one in brackets.
fn active_lockdown(s: &str) -> Option<String> {
    let start = s.find('[')?;
    let end = s[start..].find(']')?;
    Some(s[start + 1..start + end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lockdown_and_version() {
        assert_eq!(active_lockdown("none [integrity] confidentiality\n").as_deref(), Some("integrity"));
        assert_eq!(active_lockdown("none integrity"), None);
        let k = KernelInfo { release: "6.18.44-fc-v669".into(), machine: "x86_64".into(), btf: true, lockdown: None };
        assert_eq!(k.version(), Some((6, 18)));
    }

    #[test]
    fn reads_a_program_fdinfo_field() {
        let text = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nrun_cnt:\t0\nrecursion_misses:\t17\nverified_insns:\t412\n";
        assert_eq!(fdinfo_field(text, "recursion_misses"), Some(17));
        assert_eq!(fdinfo_field(text, "run_cnt"), Some(0));
        // 5.10 prints no such field; a prefix of another key is not it.
        assert_eq!(fdinfo_field("prog_type:\t26\n", "recursion_misses"), None);
        assert_eq!(fdinfo_field(text, "recursion"), None);
    }
}
