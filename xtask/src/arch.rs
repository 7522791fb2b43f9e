//! The guests' architectures: their Debian and Rust names, QEMU and console.
/// A guest's architecture: the host's (x86_64, KVM-less TCG as ever) or arm64 under
/// `qemu-system-aarch64 -M virt` (TCG), with Debian's arm64 packages fetched as `NAME:arm64`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64", alias = "amd64")]
    X86_64,
    #[value(name = "arm64", alias = "aarch64")]
    Arm64,
}

impl Arch {
    /// Debian's name of the architecture.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The Rust target triple of this architecture's Linux with glibc (the host's too).
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// A Debian package of this architecture: the host's by its name, a foreign one as `NAME:ARCH`.
    pub fn package(self, name: &str) -> String {
        match self {
            Arch::X86_64 => name.to_owned(),
            _ => format!("{name}:{}", self.debian()),
        }
    }

    /// A guest's name in messages: its kernel's label, after the architecture where that is
    /// not the host's (`6.1`, `arm64 6.1`).
    pub fn guest_name(self, label: &str) -> String {
        match self {
            Arch::X86_64 => label.to_owned(),
            _ => format!("{} {label}", self.debian()),
        }
    }

    /// `uname -m` in the guest.
    pub fn machine_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// binutils' objcopy for this architecture's binaries (the host's knows only its own).
    pub(crate) fn objcopy(self) -> &'static str {
        match self {
            Arch::X86_64 => "objcopy",
            Arch::Arm64 => "aarch64-linux-gnu-objcopy",
        }
    }

    /// The QEMU system emulator.
    pub fn qemu(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }

    /// The machine: x86_64's default PC; arm64's `virt` board, whose `-kernel` boots a Linux
    /// Image directly (no firmware) and whose PCI host bridge carries the virtio disks.
    pub(crate) fn machine(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &[],
            Arch::Arm64 => &["-M", "virt"],
        }
    }

    /// The emulated CPU: everything TCG implements. On arm64 with pointer authentication's
    /// implementation-defined hash instead of QARMA5, which TCG spends most of its time
    /// emulating otherwise (Debian's arm64 kernels sign every return address); the kernel
    /// uses whichever algorithm the CPU has.
    pub(crate) fn cpu(self) -> &'static str {
        match self {
            Arch::X86_64 => "max",
            Arch::Arm64 => "max,pauth-impdef=on",
        }
    }

    /// The serial console's device: the PC's 8250, the virt board's PL011.
    pub(crate) fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }
}
