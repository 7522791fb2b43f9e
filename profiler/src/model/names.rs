//! The names every stage uses for what the kernel reports: a file name as the kernel sent it,
//! the traced syscalls and their families, and why a failed exec's thread was dying. Below
//! both the decoder (`record`) and the assembler's events, which each take them from here.
use profiler_common::traced_syscall;
use serde::Serialize;

/// A file name as the kernel sent it: raw bytes (not necessarily UTF-8), at most 255 bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Name {
    /// The bytes read, without the terminating NUL.
    pub bytes: Vec<u8>,
    /// The name was longer than the kernel side keeps (`limits::FILENAME_CAP`).
    pub truncated: bool,
    /// The kernel side could not read it (a fault reading user memory): `bytes` is empty.
    pub unreadable: bool,
}

/// Which traced syscall (codes from `profiler_common::traced_syscall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TracedSyscall {
    /// execve(2).
    Execve,
    /// execveat(2): a dirfd-relative name, or an fd with `AT_EMPTY_PATH`.
    Execveat,
    /// clone(2).
    Clone,
    /// clone3(2).
    Clone3,
    /// fork(2).
    Fork,
    /// vfork(2).
    Vfork,
}

impl TracedSyscall {
    /// Its code on the wire (`profiler_common::traced_syscall`).
    pub fn code(self) -> u32 {
        match self {
            TracedSyscall::Execve => traced_syscall::EXECVE,
            TracedSyscall::Execveat => traced_syscall::EXECVEAT,
            TracedSyscall::Clone => traced_syscall::CLONE,
            TracedSyscall::Clone3 => traced_syscall::CLONE3,
            TracedSyscall::Fork => traced_syscall::FORK,
            TracedSyscall::Vfork => traced_syscall::VFORK,
        }
    }

    /// The syscall a wire code names; None for a code this execprof does not know.
    pub fn from_code(c: u32) -> Option<Self> {
        Some(match c {
            traced_syscall::EXECVE => TracedSyscall::Execve,
            traced_syscall::EXECVEAT => TracedSyscall::Execveat,
            traced_syscall::CLONE => TracedSyscall::Clone,
            traced_syscall::CLONE3 => TracedSyscall::Clone3,
            traced_syscall::FORK => TracedSyscall::Fork,
            traced_syscall::VFORK => TracedSyscall::Vfork,
            _ => return None,
        })
    }

    /// Exec or fork family, with the syscall within it.
    pub fn family(self) -> Family {
        match self {
            TracedSyscall::Execve => Family::Exec(ExecSyscall::Execve),
            TracedSyscall::Execveat => Family::Exec(ExecSyscall::Execveat),
            TracedSyscall::Clone => Family::Fork(ForkSyscall::Clone),
            TracedSyscall::Clone3 => Family::Fork(ForkSyscall::Clone3),
            TracedSyscall::Fork => Family::Fork(ForkSyscall::Fork),
            TracedSyscall::Vfork => Family::Fork(ForkSyscall::Vfork),
        }
    }

    /// An exec attempt rather than a fork-family call.
    pub fn is_exec(self) -> bool {
        matches!(self.family(), Family::Exec(_))
    }
}

/// What the assembler makes of a traced syscall: an exec attempt or a fork-family call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// An exec attempt.
    Exec(ExecSyscall),
    /// A fork-family call (a process or thread created).
    Fork(ForkSyscall),
}

/// Why a failed exec's thread was dying when the call returned: it did not fail on its own,
/// whatever errno it returned (an argument copy cut short returns E2BIG or EFAULT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Killed {
    /// SIGKILL pending (the process was being killed).
    BySignal,
    /// Another thread of the process was exec'ing: its exec won and killed this thread.
    ByOtherThreadsExec,
}

/// Which exec syscall an attempt made (JSON: `execve`, `execveat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecSyscall {
    /// execve(2).
    Execve,
    /// execveat(2).
    Execveat,
}

/// Which fork-family syscall a call made (JSON: `clone`, `clone3`, `fork`, `vfork`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForkSyscall {
    /// clone(2).
    Clone,
    /// clone3(2).
    Clone3,
    /// fork(2).
    Fork,
    /// vfork(2).
    Vfork,
}

impl ForkSyscall {
    /// The syscall's name, as the report prints it.
    pub fn label(self) -> &'static str {
        match self {
            ForkSyscall::Clone => "clone",
            ForkSyscall::Clone3 => "clone3",
            ForkSyscall::Fork => "fork",
            ForkSyscall::Vfork => "vfork",
        }
    }
}

/// A name for the terminal: valid UTF-8 as it is, but control characters and bytes that are
/// not UTF-8 as `\xNN` (and a backslash as `\\`), so nothing reaches the terminal raw and two
/// different byte strings never print alike.
pub fn escape_name(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// One argument as a shell reads it back: as is when it holds only characters no shell
/// treats specially, in single quotes when it is printable text, and in `$'...'` with `\xHH`
/// escapes when it holds control characters or bytes that are not UTF-8, so that a name can
/// neither forge a line nor drive the terminal, and pasting the command runs the same argv.
pub fn shell_quote(arg: &[u8]) -> String {
    use std::fmt::Write as _;
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b);
    if !arg.is_empty() && arg.iter().all(|&b| plain(b)) {
        return String::from_utf8_lossy(arg).into_owned();
    }
    match std::str::from_utf8(arg) {
        Ok(text) if !text.chars().any(char::is_control) => format!("'{}'", text.replace('\'', "'\\''")),
        _ => {
            let mut out = String::from("$'");
            for chunk in arg.utf8_chunks() {
                for c in chunk.valid().chars() {
                    match c {
                        '\\' => out.push_str("\\\\"),
                        '\'' => out.push_str("\\'"),
                        c if c.is_control() => {
                            let mut buf = [0; 4];
                            for b in c.encode_utf8(&mut buf).bytes() {
                                let _ = write!(out, "\\x{b:02x}");
                            }
                        }
                        c => out.push(c),
                    }
                }
                for b in chunk.invalid() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
            out.push('\'');
            out
        }
    }
}

/// A command line as a shell reads it back (each argument [`shell_quote`]d).
pub fn shell_command(args: &[String]) -> String {
    args.iter().map(|a| shell_quote(a.as_bytes())).collect::<Vec<_>>().join(" ")
}

/// A message for the terminal: control characters other than newline and tab shown as
/// `\xHH`, so that a name inside it cannot drive the terminal.
pub fn terminal_safe(message: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "\\x{b:02x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_reads_back_as_the_same_argv() {
        assert_eq!(shell_quote(b"/bin/sh"), "/bin/sh");
        assert_eq!(shell_quote(b"a b"), "'a b'");
        assert_eq!(shell_quote(b"it's"), "'it'\\''s'");
        assert_eq!(shell_quote(b""), "''");
        assert_eq!(shell_quote(b"x\nFAKE\x1b[31m"), "$'x\\x0aFAKE\\x1b[31m'");
        assert_eq!(shell_quote(b"\xff'\\"), "$'\\xff\\'\\\\'");
        assert_eq!(shell_command(&["sh".into(), "-c".into(), "echo $HOME".into()]), "sh -c 'echo $HOME'");
        // Nothing printed can carry a newline or an escape byte.
        for arg in [&b"a\nb"[..], b"\x1b]0;title\x07", b"\r"] {
            let q = shell_quote(arg);
            assert!(!q.bytes().any(|b| b.is_ascii_control()), "{q:?}");
        }
    }

    #[test]
    fn terminal_safe_keeps_lines_and_escapes_control_bytes() {
        assert_eq!(terminal_safe("a\nb\tc"), "a\nb\tc");
        assert_eq!(terminal_safe("x\x1b[2Jy\r"), "x\\x1b[2Jy\\x0d");
    }
}
