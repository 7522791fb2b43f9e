//! For tests that run on this machine and inside emulated guest kernels alike.

/// How many times slower than this machine the tests run: `EXECPROF_TEST_SLOWDOWN`, which
/// `cargo xtask vm-suite` sets for guests under QEMU's TCG (about 30×); 1 elsewhere. Tests
/// scale their few wall-clock limits by it, never their known answers.
pub fn slowdown() -> u32 {
    std::env::var("EXECPROF_TEST_SLOWDOWN").ok().and_then(|v| v.parse().ok()).filter(|&n| n >= 1).unwrap_or(1)
}

/// The running kernel's (major, minor).
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = release.trim().split(['.', '-']).map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Whether this kernel should attach fentry/fexit (BPF trampolines): the guests' stock Debian
/// kernels do (x86_64 from long before 6.1, arm64 from 6.4), this machine's 6.18 refuses them.
pub fn fentry_expected() -> bool {
    slowdown() > 1 && (cfg!(target_arch = "x86_64") || kernel_version() >= (6, 4))
}

/// Whether this kernel has `AT_EXECVE_CHECK` (Linux 6.14+), found by trying it: a check of
/// /bin/true returns 0 and executes nothing; a kernel without the flag refuses it with EINVAL.
pub fn kernel_has_execve_check() -> bool {
    const AT_EXECVE_CHECK: libc::c_int = 0x10000;
    let fd = unsafe { libc::open(c"/bin/true".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open /bin/true: {}", std::io::Error::last_os_error());
    let argv = [c"true".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let r =
        unsafe { libc::syscall(libc::SYS_execveat, fd, c"".as_ptr(), argv.as_ptr(), envp.as_ptr(), libc::AT_EMPTY_PATH | AT_EXECVE_CHECK) };
    let err = std::io::Error::last_os_error();
    unsafe { libc::close(fd) };
    match r {
        0 => true,
        _ if err.raw_os_error() == Some(libc::EINVAL) => false,
        _ => panic!("AT_EXECVE_CHECK of /bin/true failed otherwise than EINVAL: {err}"),
    }
}
