//! The names every stage uses for what the kernel reports: a file name as the kernel sent it,
//! the traced syscalls and their families, and why a failed exec's thread was dying. Below
//! both the decoder (`record`) and the assembler's events, which each take them from here.
use profiler_common::traced_syscall;
use serde::Serialize;

/// A file name as the kernel sent it: raw bytes (not necessarily UTF-8), at most 255 bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Name {
    pub bytes: Vec<u8>,
    pub truncated: bool,
    pub unreadable: bool,
}

/// Which traced syscall (codes from `profiler_common::traced_syscall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TracedSyscall {
    Execve,
    Execveat,
    Clone,
    Clone3,
    Fork,
    Vfork,
}

impl TracedSyscall {
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

    pub fn is_exec(self) -> bool {
        matches!(self.family(), Family::Exec(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Exec(ExecSyscall),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecSyscall {
    Execve,
    Execveat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForkSyscall {
    Clone,
    Clone3,
    Fork,
    Vfork,
}

impl ForkSyscall {
    pub fn label(self) -> &'static str {
        match self {
            ForkSyscall::Clone => "clone",
            ForkSyscall::Clone3 => "clone3",
            ForkSyscall::Fork => "fork",
            ForkSyscall::Vfork => "vfork",
        }
    }
}
