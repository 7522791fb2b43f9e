//! Kernel stack symbolization with blazesym, reading the running kernel's kallsyms.
use anyhow::{Context as _, Result};
use blazesym::{
    MaybeDefault,
    symbolize::{
        Input, Symbolizer as Blazesym,
        source::{Kernel, Source},
    },
};

use crate::{analysis::attribution::Symbolizer, kernel::ksyms::KernelSymbols};

pub(crate) enum KernelSymbolizer {
    /// blazesym, reading `/proc/kallsyms` as it needs.
    Blazesym { inner: Box<Blazesym>, source: Source<'static> },
    /// `/proc/kallsyms` read once, for a process about to lose the privilege to read its
    /// addresses (`agent --user`): modules loaded later are not in it.
    Snapshot(KernelSymbols),
}

impl KernelSymbolizer {
    /// Uses `/proc/kallsyms` only: its names carry the compiler suffixes (`.isra.0`) the
    /// report shows, and it needs no vmlinux image on disk.
    pub(crate) fn new() -> Self {
        let kernel = Kernel { kallsyms: MaybeDefault::Default, vmlinux: MaybeDefault::None, debug_syms: false, ..Kernel::default() };
        Self::Blazesym { inner: Box::new(Blazesym::new()), source: Source::Kernel(kernel) }
    }

    /// The kernel's text symbols as they are now (needs root to see their addresses).
    pub(crate) fn snapshot() -> Result<Self> {
        Ok(Self::Snapshot(KernelSymbols::load()?))
    }

    fn try_symbolize(&self, addrs: &[u64]) -> Result<Vec<Option<String>>> {
        match self {
            Self::Blazesym { inner, source } => {
                let out = inner.symbolize(source, Input::AbsAddr(addrs)).context("symbolizing kernel addresses from /proc/kallsyms")?;
                Ok(out.iter().map(|s| s.as_sym().map(|sym| sym.name.to_string())).collect())
            }
            Self::Snapshot(ksyms) => Ok(Symbolizer::symbolize(ksyms, addrs)),
        }
    }
}

impl Default for KernelSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer for KernelSymbolizer {
    fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
        match self.try_symbolize(addrs) {
            Ok(names) => names,
            Err(e) => {
                // Every address then shows as unknown in the report, which says how many.
                log::warn!("{e:#}");
                vec![None; addrs.len()]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against this machine's kallsyms, blazesym and execprof's own kallsyms reader agree.
    #[test]
    #[ignore = "needs root"]
    fn agrees_with_kallsyms_reader() {
        let ksyms = crate::kernel::ksyms::KernelSymbols::load().expect("/proc/kallsyms with addresses (needs root)");
        let addrs: Vec<u64> = ["do_open_execat", "alloc_bprm", "bprm_execve"]
            .iter()
            .flat_map(|n| ksyms.resolve(n))
            .filter(|f| !f.is_cold)
            .map(|f| f.address + 4)
            .collect();
        assert!(!addrs.is_empty());
        let ours = Symbolizer::symbolize(&ksyms, &addrs);
        let blaze = KernelSymbolizer::new().symbolize(&addrs);
        assert_eq!(ours, blaze);
    }
}
