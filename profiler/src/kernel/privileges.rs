//! Whether this process may trace: checked before anything is spawned, so a missing
//! privilege is one clear message instead of a half-started run. And, for the agent, giving
//! privileges up once its programs are attached: root (`agent --user`), or the capabilities
//! a non-root agent was started with (the packaged unit's).
use crate::model::failure::{Failure, code};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability bits of this process, from /proc/self/status.
pub(crate) fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| parse_cap_eff(&s)).unwrap_or(0)
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    parse_caps(status, "CapEff:")
}

/// One capability set (`CapEff:`, `CapPrm:`, `CapAmb:`...) of a /proc status text.
fn parse_caps(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    u64::from_str_radix(line[key.len()..].trim(), 16).ok()
}

/// `kernel.perf_event_paranoid`, when it can be read.
fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
}

/// Why a process with `caps` may not open perf events at `paranoid`, if it may not. Above 2
/// (Debian's kernels default to 3: CONFIG_SECURITY_PERF_EVENTS_RESTRICT) the kernel lets only
/// CAP_SYS_ADMIN call perf_event_open at all: CAP_PERFMON is not enough there.
fn perf_events_refused(caps: u64, paranoid: Option<i32>) -> Option<i32> {
    paranoid.filter(|&p| p > 2 && caps & (1u64 << CAP_SYS_ADMIN) == 0)
}

/// Checked before anything is loaded when `what` samples kernel stacks (perf events).
pub(crate) fn require_perf_events(what: &str) -> Result<(), Failure> {
    match perf_events_refused(effective_caps(), perf_event_paranoid()) {
        None => Ok(()),
        Some(level) => Err(Failure::new(
            code::NO_PRIVILEGE,
            format!(
                "{what} samples kernel stacks with perf events, and this kernel's kernel.perf_event_paranoid is {level} \
                 (Debian's default): only CAP_SYS_ADMIN may open perf events there, which this process lacks; \
                 run it as root, grant it CAP_SYS_ADMIN (the packaged unit does), set `sysctl kernel.perf_event_paranoid=2`, \
                 or count without kernel stacks: --sample-hz 0"
            ),
        )),
    }
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

/// The user a process switches to once it no longer needs root (`agent --user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// As given: a name, or a numeric uid.
    pub name: String,
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

impl RunAs {
    /// `spec` (a user name or a numeric uid) from the password database.
    pub(crate) fn lookup(spec: &str) -> Result<RunAs, Failure> {
        let unknown =
            || Failure::usage(format!("--user {spec:?}: no such user here; give a user name or uid from /etc/passwd (e.g. nobody)"));
        let c_name = std::ffi::CString::new(spec).map_err(|_| unknown())?;
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf: Vec<libc::c_char> = vec![0; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `found` points into `pwd` or is null.
        let rc = match spec.parse::<u32>() {
            Ok(uid) => unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) },
            Err(_) => unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) },
        };
        if rc != 0 || found.is_null() {
            return Err(unknown());
        }
        if pwd.pw_uid == 0 {
            return Err(Failure::usage(format!("--user {spec:?} is root: name the unprivileged user the agent should run as")));
        }
        Ok(RunAs { name: spec.to_owned(), uid: pwd.pw_uid, gid: pwd.pw_gid })
    }
}

/// What the process kept after [`drop_privileges`] or [`drop_capabilities`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// No capability at all.
    Nothing,
    /// This one capability (CAP_BPF, or CAP_SYS_ADMIN where the process had no CAP_BPF): the
    /// kernel checks it on every bpf() call (older kernels, with
    /// `kernel.unprivileged_bpf_disabled` set; not 6.1 or later), the reads of the agent's maps included.
    ForBpf(&'static str),
}

impl Kept {
    /// As the agent's start-up line says it.
    pub(crate) fn describe(self) -> String {
        match self {
            Kept::Nothing => "no capabilities".to_owned(),
            Kept::ForBpf(cap) => {
                format!("only {cap}: this kernel checks it on every bpf() call (kernel.unprivileged_bpf_disabled is set)")
            }
        }
    }
}

/// `capset(2)`'s header and data (version 3: two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The capability sets of `caps` (a 64-bit mask) for `capset(2)`.
fn cap_data(effective: u64, permitted: u64) -> [CapData; 2] {
    let word = |mask: u64, i: usize| (mask >> (32 * i)) as u32;
    [0, 1].map(|i| CapData { effective: word(effective, i), permitted: word(permitted, i), inheritable: 0 })
}

fn capset(effective: u64, permitted: u64) -> std::io::Result<()> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = cap_data(effective, permitted);
    // SAFETY: the header and two data words are what version 3 reads.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The last system call, `what`, failed.
fn failed(what: &str) -> Failure {
    Failure::new(code::ERROR, format!("giving up root: {what} failed: {}", std::io::Error::last_os_error()))
}

fn check(what: &str, rc: libc::c_int) -> Result<(), Failure> {
    if rc != 0 {
        return Err(failed(what));
    }
    Ok(())
}

/// Switches this process to `user` (its uid, primary group, no supplementary groups) and
/// drops every capability, the bounding set's too, with no way back (`no_new_privs`). Open
/// file descriptors stay: the BPF programs, maps and perf events, the listening socket.
/// `bpf_works` says whether a bpf() call on one of them still succeeds: where it does not
/// without CAP_BPF, that one is kept. Capabilities belong to threads: the process must have
/// only this one.
pub(crate) fn drop_privileges(user: &RunAs, bpf_works: impl Fn() -> bool) -> Result<Kept, Failure> {
    single_threaded()?;
    let permitted = own_caps("CapPrm:");
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40);
    // SAFETY: plain system calls on this process.
    unsafe {
        check("prctl(PR_SET_KEEPCAPS)", libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0))?;
        for cap in 0..=last_cap {
            // EINVAL: a capability this kernel does not know.
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(failed("prctl(PR_CAPBSET_DROP)"));
            }
        }
        check("setgroups", libc::setgroups(0, std::ptr::null()))?;
        check("setresgid", libc::setresgid(user.gid, user.gid, user.gid))?;
        check("setresuid", libc::setresuid(user.uid, user.uid, user.uid))?;
        check("prctl(PR_SET_KEEPCAPS)", libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0))?;
    }
    let kept = give_up_capabilities(permitted, bpf_works)?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if uids(&status) != Some([user.uid; 4]) {
        return Err(Failure::new(
            code::ERROR,
            "giving up root: /proc/self/status does not show the user just set; this is a bug: report it",
        ));
    }
    Ok(kept)
}

/// Gives up every capability of a non-root process once its programs are attached: the
/// packaged unit grants CAP_SYS_ADMIN (Debian's kernels open perf events for nothing less)
/// and the others to load and attach, and none is needed to read the maps afterwards. The
/// uid stays; the ambient and inheritable sets are cleared, `no_new_privs` set. The bounding
/// set stays as it was (dropping from it needs CAP_SETPCAP): with nothing permitted and no
/// new privileges, nothing can come back. `bpf_works` as for [`drop_privileges`].
pub(crate) fn drop_capabilities(bpf_works: impl Fn() -> bool) -> Result<Kept, Failure> {
    single_threaded()?;
    give_up_capabilities(own_caps("CapPrm:"), bpf_works)
}

/// One capability set of this process.
fn own_caps(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| parse_caps(&s, key)).unwrap_or(0)
}

/// Capabilities belong to threads: giving them up needs a process of one.
fn single_threaded() -> Result<(), Failure> {
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    if threads != 1 {
        return Err(Failure::new(
            code::ERROR,
            format!("giving up privileges needs a single thread, and execprof has {threads}; this is a bug: report it"),
        ));
    }
    Ok(())
}

/// The capability bpf() may need kept, of those `permitted` had: CAP_BPF, else CAP_SYS_ADMIN.
fn bpf_capability(permitted: u64) -> Option<(&'static str, u64)> {
    [("CAP_BPF", CAP_BPF), ("CAP_SYS_ADMIN", CAP_SYS_ADMIN)].into_iter().map(|(n, b)| (n, 1u64 << b)).find(|(_, m)| permitted & m != 0)
}

/// Clears the ambient set, sets `no_new_privs`, and leaves the process no capability (or the
/// one bpf() needs, where it needs one), checked against /proc/self/status.
fn give_up_capabilities(permitted: u64, bpf_works: impl Fn() -> bool) -> Result<Kept, Failure> {
    // SAFETY: plain system calls on this process.
    unsafe {
        check("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))?;
        check("prctl(PR_SET_NO_NEW_PRIVS)", libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    }
    let capset_failed = |e: std::io::Error| Failure::new(code::ERROR, format!("giving up capabilities: capset failed: {e}"));
    let candidate = bpf_capability(permitted);
    // That capability permitted but not effective: does the kernel still let bpf() through?
    capset(0, candidate.map_or(0, |(_, m)| m)).map_err(capset_failed)?;
    let (kept, mask) = if bpf_works() {
        capset(0, 0).map_err(capset_failed)?;
        (Kept::Nothing, 0)
    } else {
        let Some((name, mask)) = candidate.filter(|&(_, m)| capset(m, m).is_ok() && bpf_works()) else {
            return Err(Failure::new(
                code::ERROR,
                "giving up privileges: this kernel lets the agent read its own BPF maps only with CAP_BPF, \
                 which it cannot keep; run it as root without --user",
            ));
        };
        (Kept::ForBpf(name), mask)
    };
    // What the kernel now says of this process.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let sets = ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:"].map(|k| parse_caps(&status, k));
    if sets != [Some(mask), Some(mask), Some(0), Some(0)] {
        return Err(Failure::new(
            code::ERROR,
            "giving up privileges: /proc/self/status does not show the capabilities just set; this is a bug: report it",
        ));
    }
    Ok(kept)
}

/// This process's real, effective, saved and filesystem uids, from /proc/self/status.
pub(crate) fn uids(status: &str) -> Option<[u32; 4]> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let ids: Vec<u32> = line["Uid:".len()..].split_whitespace().filter_map(|t| t.parse().ok()).collect();
    ids.try_into().ok()
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
    fn capability_masks_split_into_capsets_two_words() {
        let data = cap_data(1 << CAP_BPF, (1 << CAP_BPF) | (1 << CAP_SYS_ADMIN));
        assert_eq!((data[0].effective, data[0].permitted), (0, 1 << CAP_SYS_ADMIN));
        assert_eq!((data[1].effective, data[1].permitted), (1 << (CAP_BPF - 32), 1 << (CAP_BPF - 32)));
        assert!(data.iter().all(|d| d.inheritable == 0));
    }

    #[test]
    fn reads_the_uids() {
        assert_eq!(uids("Name:\tx\nUid:\t65534\t65534\t65534\t65534\nGid:\t0\n"), Some([65534; 4]));
        assert_eq!(uids("Uid:\t0\t0\n"), None);
    }

    #[test]
    fn users_are_found_by_name_or_uid_and_root_is_refused() {
        let nobody = RunAs::lookup("nobody").unwrap();
        assert_eq!(RunAs::lookup(&nobody.uid.to_string()).unwrap().uid, nobody.uid);
        assert!(RunAs::lookup("root").unwrap_err().to_string().contains("is root"));
        assert!(RunAs::lookup("execprof-no-such-user").unwrap_err().to_string().contains("no such user"));
    }

    #[test]
    fn reads_each_capability_set() {
        let status = "CapInh:\t0000000000000000\nCapPrm:\t0000008000200000\nCapAmb:\t0000000000000001\n";
        assert_eq!(parse_caps(status, "CapPrm:"), Some((1 << CAP_BPF) | (1 << CAP_SYS_ADMIN)));
        assert_eq!(parse_caps(status, "CapAmb:"), Some(1));
        assert_eq!(parse_caps(status, "CapEff:"), None);
    }

    #[test]
    fn bpf_keeps_cap_bpf_else_cap_sys_admin() {
        assert_eq!(bpf_capability((1 << CAP_BPF) | (1 << CAP_SYS_ADMIN)), Some(("CAP_BPF", 1 << CAP_BPF)));
        assert_eq!(bpf_capability(1 << CAP_SYS_ADMIN), Some(("CAP_SYS_ADMIN", 1 << CAP_SYS_ADMIN)));
        assert_eq!(bpf_capability(1 << CAP_PERFMON), None);
    }

    #[test]
    fn perf_events_need_cap_sys_admin_only_above_paranoid_2() {
        let perfmon = 1 << CAP_PERFMON;
        assert_eq!(perf_events_refused(perfmon, Some(3)), Some(3));
        assert_eq!(perf_events_refused(perfmon | (1 << CAP_SYS_ADMIN), Some(3)), None);
        assert_eq!(perf_events_refused(perfmon, Some(2)), None);
        assert_eq!(perf_events_refused(0, None), None);
    }

    #[test]
    fn names_what_is_missing() {
        assert!(missing(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert_eq!(missing(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }
}
