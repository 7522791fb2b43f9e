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

/// `--argv`: an exec attempt's arguments as its caller passed them, each without its NUL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Argv {
    /// The arguments read, `argv[0]` first.
    pub args: Vec<Vec<u8>>,
    /// More arguments or bytes than the kernel side keeps (`limits::ARGV_CAP`,
    /// `ARGV_MAX_ARGS`, `ARG_CAP`), or one argument was cut.
    pub cut: bool,
    /// The argument array, or one of its strings, was not in memory: `args` is what was read
    /// before it.
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

/// The syscall ABI a call ran in (JSON: `native`, `compat`). On x86_64 the compat ABI is
/// ia32: a 32-bit program's syscalls, with their own numbers (execve is 11 there, and 59 is
/// `oldolduname`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Abi {
    /// The architecture's own (x86_64: 64-bit).
    #[default]
    Native,
    /// The 32-bit compat ABI (x86_64: ia32).
    Compat,
}

impl Abi {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Abi::Native => "64-bit",
            Abi::Compat => "32-bit",
        }
    }

    /// Whether it is the native ABI (serde's `skip_serializing_if`).
    pub fn is_native(&self) -> bool {
        *self == Abi::Native
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
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    push_hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                c => out.push(c),
            }
        }
        push_hex(&mut out, chunk.invalid());
    }
    out
}

/// Bytes as `\\xHH` escapes, for what must not reach a terminal as it is.
fn push_hex(out: &mut String, bytes: &[u8]) {
    use std::fmt::Write as _;
    for b in bytes {
        let _ = write!(out, "\\x{b:02x}");
    }
}

/// One argument as a shell reads it back: as is when it holds only characters no shell
/// treats specially, in single quotes when it is printable text, and in `$'...'` with `\xHH`
/// escapes when it holds control characters or bytes that are not UTF-8, so that a name can
/// neither forge a line nor drive the terminal, and pasting the command runs the same argv.
pub fn shell_quote(arg: &[u8]) -> String {
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
                            push_hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        c => out.push(c),
                    }
                }
                push_hex(&mut out, chunk.invalid());
            }
            out.push('\'');
            out
        }
    }
}

/// A command line as a shell reads it back (each argument [`shell_quote`]d).
pub fn shell_command<A: AsRef<[u8]>>(args: &[A]) -> String {
    args.iter().map(|a| shell_quote(a.as_ref())).collect::<Vec<_>>().join(" ")
}

/// Bytes kept exactly in JSON, as a string of lowercase hex digits (two a byte: `ff0a` for
/// 0xff and a newline), for what JSON text cannot hold (bytes that are not UTF-8).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HexBytes(pub Vec<u8>);

impl Serialize for HexBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use std::fmt::Write as _;
        let mut hex = String::with_capacity(self.0.len() * 2);
        for b in &self.0 {
            let _ = write!(hex, "{b:02x}");
        }
        s.serialize_str(&hex)
    }
}

impl<'de> serde::Deserialize<'de> for HexBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let digit = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
        let bytes: Option<Vec<u8>> = text
            .as_bytes()
            .chunks(2)
            .map(|pair| match pair {
                [hi, lo] => Some((digit(*hi)? << 4) | digit(*lo)?),
                _ => None,
            })
            .collect();
        bytes.map(HexBytes).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not hex bytes (two hex digits a byte)")))
    }
}

/// A message for the terminal: control characters other than newline and tab shown as
/// `\xHH`, so that a name inside it cannot drive the terminal.
pub fn terminal_safe(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            push_hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes());
        } else {
            out.push(c);
        }
    }
    out
}

/// Linux errno names by number (the same on x86_64 and arm64), and the kernel-internal codes
/// a traced syscall can return to a dying thread (512 and up).
const ERRNO_NAMES: &[(i64, &str)] = &[
    (1, "EPERM"),
    (2, "ENOENT"),
    (3, "ESRCH"),
    (4, "EINTR"),
    (5, "EIO"),
    (6, "ENXIO"),
    (7, "E2BIG"),
    (8, "ENOEXEC"),
    (9, "EBADF"),
    (10, "ECHILD"),
    (11, "EAGAIN"),
    (12, "ENOMEM"),
    (13, "EACCES"),
    (14, "EFAULT"),
    (15, "ENOTBLK"),
    (16, "EBUSY"),
    (17, "EEXIST"),
    (18, "EXDEV"),
    (19, "ENODEV"),
    (20, "ENOTDIR"),
    (21, "EISDIR"),
    (22, "EINVAL"),
    (23, "ENFILE"),
    (24, "EMFILE"),
    (25, "ENOTTY"),
    (26, "ETXTBSY"),
    (27, "EFBIG"),
    (28, "ENOSPC"),
    (29, "ESPIPE"),
    (30, "EROFS"),
    (31, "EMLINK"),
    (32, "EPIPE"),
    (33, "EDOM"),
    (34, "ERANGE"),
    (35, "EDEADLK"),
    (36, "ENAMETOOLONG"),
    (37, "ENOLCK"),
    (38, "ENOSYS"),
    (39, "ENOTEMPTY"),
    (40, "ELOOP"),
    (42, "ENOMSG"),
    (43, "EIDRM"),
    (44, "ECHRNG"),
    (45, "EL2NSYNC"),
    (46, "EL3HLT"),
    (47, "EL3RST"),
    (48, "ELNRNG"),
    (49, "EUNATCH"),
    (50, "ENOCSI"),
    (51, "EL2HLT"),
    (52, "EBADE"),
    (53, "EBADR"),
    (54, "EXFULL"),
    (55, "ENOANO"),
    (56, "EBADRQC"),
    (57, "EBADSLT"),
    (59, "EBFONT"),
    (60, "ENOSTR"),
    (61, "ENODATA"),
    (62, "ETIME"),
    (63, "ENOSR"),
    (64, "ENONET"),
    (65, "ENOPKG"),
    (66, "EREMOTE"),
    (67, "ENOLINK"),
    (68, "EADV"),
    (69, "ESRMNT"),
    (70, "ECOMM"),
    (71, "EPROTO"),
    (72, "EMULTIHOP"),
    (73, "EDOTDOT"),
    (74, "EBADMSG"),
    (75, "EOVERFLOW"),
    (76, "ENOTUNIQ"),
    (77, "EBADFD"),
    (78, "EREMCHG"),
    (79, "ELIBACC"),
    (80, "ELIBBAD"),
    (81, "ELIBSCN"),
    (82, "ELIBMAX"),
    (83, "ELIBEXEC"),
    (84, "EILSEQ"),
    (85, "ERESTART"),
    (86, "ESTRPIPE"),
    (87, "EUSERS"),
    (88, "ENOTSOCK"),
    (89, "EDESTADDRREQ"),
    (90, "EMSGSIZE"),
    (91, "EPROTOTYPE"),
    (92, "ENOPROTOOPT"),
    (93, "EPROTONOSUPPORT"),
    (94, "ESOCKTNOSUPPORT"),
    (95, "EOPNOTSUPP"),
    (96, "EPFNOSUPPORT"),
    (97, "EAFNOSUPPORT"),
    (98, "EADDRINUSE"),
    (99, "EADDRNOTAVAIL"),
    (100, "ENETDOWN"),
    (101, "ENETUNREACH"),
    (102, "ENETRESET"),
    (103, "ECONNABORTED"),
    (104, "ECONNRESET"),
    (105, "ENOBUFS"),
    (106, "EISCONN"),
    (107, "ENOTCONN"),
    (108, "ESHUTDOWN"),
    (109, "ETOOMANYREFS"),
    (110, "ETIMEDOUT"),
    (111, "ECONNREFUSED"),
    (112, "EHOSTDOWN"),
    (113, "EHOSTUNREACH"),
    (114, "EALREADY"),
    (115, "EINPROGRESS"),
    (116, "ESTALE"),
    (117, "EUCLEAN"),
    (118, "ENOTNAM"),
    (119, "ENAVAIL"),
    (120, "EISNAM"),
    (121, "EREMOTEIO"),
    (122, "EDQUOT"),
    (123, "ENOMEDIUM"),
    (124, "EMEDIUMTYPE"),
    (125, "ECANCELED"),
    (126, "ENOKEY"),
    (127, "EKEYEXPIRED"),
    (128, "EKEYREVOKED"),
    (129, "EKEYREJECTED"),
    (130, "EOWNERDEAD"),
    (131, "ENOTRECOVERABLE"),
    (132, "ERFKILL"),
    (133, "EHWPOISON"),
    (512, "ERESTARTSYS"),
    (513, "ERESTARTNOINTR"),
    (514, "ERESTARTNOHAND"),
    (515, "ENOIOCTLCMD"),
    (516, "ERESTART_RESTARTBLOCK"),
    (517, "EPROBE_DEFER"),
    (518, "EOPENSTALE"),
    (519, "ENOPARAM"),
    (521, "EBADHANDLE"),
    (524, "ENOTSUPP"),
];

/// An errno's symbolic name (`EBADF`, not "errno 9"); an unknown number as `errno N`.
/// Takes the errno positive or as a syscall returns it (negative).
pub fn errno_name(e: i64) -> String {
    let n = e.abs();
    ERRNO_NAMES.iter().find(|(x, _)| *x == n).map_or_else(|| format!("errno {n}"), |(_, name)| (*name).to_owned())
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
        assert_eq!(shell_command(&["sh", "-c", "echo $HOME"]), "sh -c 'echo $HOME'");
        // Nothing printed can carry a newline or an escape byte.
        for arg in [&b"a\nb"[..], b"\x1b]0;title\x07", b"\r"] {
            let q = shell_quote(arg);
            assert!(!q.bytes().any(|b| b.is_ascii_control()), "{q:?}");
        }
    }

    #[test]
    fn errnos_have_their_symbolic_names() {
        assert_eq!(errno_name(9), "EBADF");
        assert_eq!(errno_name(-2), "ENOENT");
        assert_eq!(errno_name(7), "E2BIG");
        assert_eq!(errno_name(513), "ERESTARTNOINTR");
        assert_eq!(errno_name(4000), "errno 4000");
        assert_eq!(errno_name(i64::from(libc::ELIBBAD)), "ELIBBAD");
    }

    #[test]
    fn terminal_safe_keeps_lines_and_escapes_control_bytes() {
        assert_eq!(terminal_safe("a\nb\tc"), "a\nb\tc");
        assert_eq!(terminal_safe("x\x1b[2Jy\r"), "x\\x1b[2Jy\\x0d");
    }
}
