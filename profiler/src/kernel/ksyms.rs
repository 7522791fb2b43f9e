//! Kernel text symbols from `/proc/kallsyms`: name resolution for attaching
//! probes, address lookup for symbolizing stacks, and the doctor's view of
//! which exec-path functions this kernel actually has.
//!
//! Exec-path function names vary between kernel builds (`copy_strings` vs
//! `copy_strings.isra.0`), some functions exist twice (`load_elf_binary` for
//! native and compat binfmt, both local), and some are inlined away entirely.
//! Everything here therefore matches on the canonical name from
//! [`phases::strip_suffix`] and reports all candidates with their addresses,
//! leaving the attach decision to the caller.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::analysis::phases::{self, PhaseModel};

/// Where the kernel exposes its symbol table.
pub(crate) const KALLSYMS_PATH: &str = "/proc/kallsyms";

/// kallsyms carries no symbol sizes, so a symbol is assumed to extend to the
/// next symbol of the same module.  The last symbol of vmlinux or of a module
/// has no such bound; beyond this distance an address is more likely to be in
/// unsymbolized memory than in that function, and is reported as unknown.
pub(crate) const MAX_TAIL_SYMBOL_SIZE: u64 = 64 * 1024;

#[derive(Clone, Debug)]
struct Symbol {
    address: u64,
    name: Box<str>,
    /// Index into `KernelSymbols::modules`; `None` for vmlinux.
    module: Option<u32>,
}

/// Text symbols (kallsyms types `t`, `T`, `w`, `W`) sorted by address.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    symbols: Vec<Symbol>,
    /// Module names, interned: thousands of symbols share a few modules.
    modules: Vec<String>,
}

/// One kernel symbol matching a canonical function name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ResolvedFunction {
    /// The name as the kernel spells it, e.g. `do_execveat_common.isra.0`.
    pub raw_name: String,
    pub address: u64,
    /// `None` for vmlinux, else the module name without brackets.
    pub module: Option<String>,
    /// A `.cold` fragment: the split-out unlikely path of the function.  It
    /// shows up in stacks but is not an entry point, so never attach to it.
    pub is_cold: bool,
}

/// Result of [`KernelSymbols::lookup_symbol`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolMatch<'a> {
    pub name: &'a str,
    pub module: Option<&'a str>,
    pub offset: u64,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<KernelSymbols> {
        Self::load_from(Path::new(KALLSYMS_PATH))
    }

    /// Reads a kallsyms-format file line by line; the file has >100k lines
    /// and we keep only text symbols, so it is never held in memory whole.
    pub fn load_from(path: &Path) -> Result<KernelSymbols> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        Self::from_reader(BufReader::new(file), &path.display().to_string())
    }

    /// Parses kallsyms text already in memory (tests, saved snapshots).
    pub fn from_kallsyms_text(text: &str) -> Result<KernelSymbols> {
        Self::from_reader(text.as_bytes(), "kallsyms text")
    }

    /// Parses kallsyms lines from any reader.  `source` names the input in
    /// error messages.
    pub fn from_reader<R: BufRead>(mut reader: R, source: &str) -> Result<KernelSymbols> {
        let mut out = KernelSymbols::default();
        let mut line = String::new();
        let mut line_no = 0usize;
        let mut total = 0usize;
        let mut any_nonzero = false;
        loop {
            line.clear();
            let n = reader.read_line(&mut line).with_context(|| format!("reading {source} (after line {line_no})"))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let trimmed = line.trim_end_matches(['\n', '\r']);
            if trimmed.trim().is_empty() {
                continue;
            }
            let parsed = parse_kallsyms_line(trimmed).with_context(|| format!("{source} line {line_no}: `{trimmed}`"))?;
            total += 1;
            any_nonzero |= parsed.address != 0;
            if !matches!(parsed.kind, 't' | 'T' | 'w' | 'W') {
                continue;
            }
            let module = parsed.module.map(|m| out.intern_module(m));
            out.symbols.push(Symbol { address: parsed.address, name: parsed.name.into(), module });
        }
        if total == 0 {
            bail!("{source}: no symbols");
        }
        if !any_nonzero {
            bail!(
                "{source}: all {total} symbol addresses are zero, so the kernel is hiding them \
                 (kernel.kptr_restrict); run as root/with CAP_SYSLOG, or set \
                 `sysctl kernel.kptr_restrict=0`"
            );
        }
        if out.symbols.is_empty() {
            bail!("{source}: no text symbols (types t/T/w/W)");
        }
        // kallsyms is address-sorted for vmlinux but modules may come in any
        // order; a stable sort keeps aliases in file order.
        out.symbols.sort_by_key(|s| s.address);
        Ok(out)
    }

    fn intern_module(&mut self, name: &str) -> u32 {
        match self.modules.iter().position(|m| m == name) {
            Some(i) => i as u32,
            None => {
                self.modules.push(name.to_string());
                (self.modules.len() - 1) as u32
            }
        }
    }

    fn module_name(&self, module: Option<u32>) -> Option<&str> {
        module.map(|i| self.modules[i as usize].as_str())
    }

    /// Number of text symbols kept.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// All symbols whose canonical name equals the canonical form of `name`,
    /// in address order, `.cold` fragments included and flagged.
    ///
    /// A linear scan: this runs for a few dozen names at attach/doctor time,
    /// which is cheaper than keeping a name index for 100k+ symbols alive. Only names that
    /// start with the wanted one and go on with a dot are canonicalized (a clone's suffix
    /// only ever follows the name): a byte comparison for the others.
    pub fn resolve(&self, name: &str) -> Vec<ResolvedFunction> {
        let wanted = phases::strip_suffix(name);
        let may_be = |raw: &str| raw.strip_prefix(wanted).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
        self.symbols
            .iter()
            .filter(|s| may_be(&s.name) && phases::strip_suffix(&s.name) == wanted)
            .map(|s| ResolvedFunction {
                raw_name: s.name.to_string(),
                address: s.address,
                module: self.module_name(s.module).map(str::to_string),
                is_cold: is_cold_name(&s.name),
            })
            .collect()
    }

    /// Symbolizes an address as `(raw name, offset)`; see
    /// [`lookup_symbol`](Self::lookup_symbol).
    pub fn lookup_addr(&self, addr: u64) -> Option<(&str, u64)> {
        self.lookup_symbol(addr).map(|m| (m.name, m.offset))
    }

    /// Symbolizes an address by binary search.
    ///
    /// Returns `None` below the first symbol and past
    /// [`MAX_TAIL_SYMBOL_SIZE`] after the last symbol of vmlinux or of a module,
    /// since kallsyms has no sizes to bound those.  When several symbols share
    /// an address (aliases such as `_text`/`_stext`), the first one in
    /// kallsyms order is returned, so output is deterministic.
    pub fn lookup_symbol(&self, addr: u64) -> Option<SymbolMatch<'_>> {
        let next = self.symbols.partition_point(|s| s.address <= addr);
        let last_le = next.checked_sub(1)?;
        let start = self.symbols[last_le].address;
        let first_alias = self.symbols[..=last_le].partition_point(|s| s.address < start);
        let sym = &self.symbols[first_alias];
        let offset = addr - start;
        let bounded_by_next = self.symbols.get(next).is_some_and(|n| n.module == sym.module);
        if !bounded_by_next && offset >= MAX_TAIL_SYMBOL_SIZE {
            return None;
        }
        Some(SymbolMatch { name: &sym.name, module: self.module_name(sym.module), offset })
    }

    /// Classifies one function for the doctor.
    pub fn presence(&self, name: &str, btf: &dyn BtfFunctions) -> FunctionPresence {
        let symbols = self.resolve(name);
        let entries = symbols.iter().filter(|s| !s.is_cold).count();
        if entries == 0 {
            return FunctionPresence::Absent;
        }
        let btf = btf.has_func(phases::strip_suffix(name));
        if entries == 1 { FunctionPresence::Present { symbols, btf } } else { FunctionPresence::Ambiguous { symbols, btf } }
    }

    /// Presence of every probe candidate of `model`, in the model's order.
    pub fn probe_presence(&self, model: &PhaseModel, btf: &dyn BtfFunctions) -> Vec<ProbePresence> {
        model
            .probe_candidates()
            .iter()
            .map(|function| ProbePresence {
                function: function.clone(),
                phase: model.phase_of(function).map(|p| model.phase(p).name.clone()),
                presence: self.presence(function, btf),
            })
            .collect()
    }
}

/// Whether a raw symbol name is (part of) a `.cold` fragment, e.g.
/// `foo.cold`, `foo.isra.0.cold`, `foo.cold.3`.
pub(crate) fn is_cold_name(raw: &str) -> bool {
    raw.split('.').skip(1).any(|part| part == "cold")
}

struct KallsymsLine<'a> {
    address: u64,
    kind: char,
    name: &'a str,
    module: Option<&'a str>,
}

/// `<hex address> <type> <name>[\t[<module>]]`
fn parse_kallsyms_line(line: &str) -> Result<KallsymsLine<'_>> {
    let mut fields = line.split_whitespace();
    let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
        bail!("expected `<address> <type> <name> [[module]]`");
    };
    let address = u64::from_str_radix(addr, 16).with_context(|| format!("bad address `{addr}`"))?;
    let mut kind_chars = kind.chars();
    let (Some(kind), None) = (kind_chars.next(), kind_chars.next()) else {
        bail!("bad symbol type `{kind}`");
    };
    let module = match fields.next() {
        None => None,
        Some(m) => Some(
            m.strip_prefix('[')
                .and_then(|m| m.strip_suffix(']'))
                .filter(|m| !m.is_empty())
                .with_context(|| format!("bad module field `{m}`"))?,
        ),
    };
    if let Some(extra) = fields.next() {
        bail!("unexpected field `{extra}`");
    }
    Ok(KallsymsLine { address, kind, name, module })
}

/// Whether kernel BTF describes a function.  A trait so tests and systems
/// without BTF don't need the real `/sys/kernel/btf/vmlinux`.
pub trait BtfFunctions {
    /// True if a BTF FUNC with exactly this name exists.
    fn has_func(&self, name: &str) -> bool;
}

/// Stand-in for kernels without BTF: nothing is an fentry target.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoBtf;

impl BtfFunctions for NoBtf {
    fn has_func(&self, _name: &str) -> bool {
        false
    }
}

/// The running kernel's BTF.
pub(crate) struct VmlinuxBtf {
    btf: btf_rs::Btf,
}

impl VmlinuxBtf {
    pub(crate) fn load() -> Result<VmlinuxBtf> {
        Ok(VmlinuxBtf { btf: crate::kernel::vmlinux::types()? })
    }
}

impl BtfFunctions for VmlinuxBtf {
    /// Lookup errors count as "no": btf-rs returns an empty list for unknown
    /// names, so an error means a malformed entry, which cannot be attached to
    /// either.
    fn has_func(&self, name: &str) -> bool {
        self.btf.resolve_types_by_name(name).map(|types| types.iter().any(|t| matches!(t, btf_rs::Type::Func(_)))).unwrap_or(false)
    }
}

/// What the doctor knows about one function on this kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FunctionPresence {
    /// Exactly one entry symbol (plus possibly `.cold` fragments).
    /// `btf`: a BTF FUNC of the canonical name exists.
    Present { symbols: Vec<ResolvedFunction>, btf: bool },
    /// Several entry symbols share the canonical name (e.g. native and compat
    /// `load_elf_binary`); attaching by name would pick one arbitrarily, so
    /// attach by address to each.
    Ambiguous { symbols: Vec<ResolvedFunction>, btf: bool },
    /// No entry symbol: inlined everywhere or not built.  A function whose
    /// only remnant is a `.cold` fragment counts as absent, since fragments
    /// are not attach targets.
    Absent,
}

impl FunctionPresence {
    /// Entry symbols a kprobe may attach to (by address); excludes `.cold`.
    pub fn attach_targets(&self) -> Vec<&ResolvedFunction> {
        match self {
            Self::Present { symbols, .. } | Self::Ambiguous { symbols, .. } => symbols.iter().filter(|s| !s.is_cold).collect(),
            Self::Absent => Vec::new(),
        }
    }

    /// Whether fentry/fexit can attach by name: the kernel resolves the BTF
    /// name through kallsyms, so it needs BTF, a single entry symbol, and
    /// that symbol spelled exactly like the BTF name (no `.isra.0` clone).
    pub fn fentry_attachable(&self) -> bool {
        match self {
            Self::Present { symbols, btf: true } => {
                symbols.iter().filter(|s| !s.is_cold).all(|s| phases::strip_suffix(&s.raw_name) == s.raw_name)
            }
            _ => false,
        }
    }

    /// One-line human description for the doctor table. `fentry_allowed`: whether this
    /// kernel lets fentry programs load at all (else no function can take one).
    pub fn describe(&self, fentry_allowed: bool) -> String {
        let targets = |symbols: &[ResolvedFunction]| {
            symbols
                .iter()
                .filter(|s| !s.is_cold)
                .map(|s| match &s.module {
                    Some(m) => format!("{}@{:#x}[{m}]", s.raw_name, s.address),
                    None => format!("{}@{:#x}", s.raw_name, s.address),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cold = |symbols: &[ResolvedFunction]| symbols.iter().filter(|s| s.is_cold).count();
        match self {
            Self::Present { symbols, btf } => format!(
                "present {} (btf: {}, cold parts: {}, fentry: {})",
                targets(symbols),
                if *btf { "yes" } else { "no" },
                cold(symbols),
                match (fentry_allowed, self.fentry_attachable()) {
                    (false, _) => "refused by this kernel",
                    (true, true) => "yes",
                    (true, false) => "no (kprobe)",
                },
            ),
            Self::Ambiguous { symbols, btf } => format!(
                "ambiguous, attach by address: {} (btf: {}, cold parts: {})",
                targets(symbols),
                if *btf { "yes" } else { "no" },
                cold(symbols),
            ),
            Self::Absent => "absent (inlined or not built)".to_string(),
        }
    }
}

/// One row of the doctor's probe table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProbePresence {
    pub function: String,
    /// Phase name from the model, if the function belongs to one.
    pub phase: Option<String>,
    pub presence: FunctionPresence,
}

impl crate::analysis::attribution::Symbolizer for KernelSymbols {
    fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
        addrs.iter().map(|&a| self.lookup_addr(a).map(|(name, _)| name.to_owned())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000000 T _stext
ffffffff81216c3c t do_execveat_common.isra.0.cold
ffffffff81217fc3 t load_elf_binary.cold
ffffffff8121807a t load_elf_binary.cold
ffffffff813554e0 T mmput
ffffffff81355f80 T mm_alloc
ffffffff81360000 D some_data
ffffffff816c6a50 T __pfx_copy_strings.isra.0
ffffffff816c6a60 t copy_strings.isra.0
ffffffff816c6e70 t do_execveat_common.isra.0
ffffffff816c71b0 T begin_new_exec
ffffffff816c8030 T __x64_sys_execve
ffffffff816c80f0 W __x64_sys_execveat
ffffffff81755520 t load_elf_binary
ffffffff817585d0 t load_elf_binary
ffffffff8220bb08 T _etext
ffffffffc0a01000 t ext4_file_open\t[ext4]
ffffffffc0a01200 T ext4_lookup\t[ext4]
ffffffffc0b00000 t mmput\t[fake_mod]
";

    fn syms() -> KernelSymbols {
        KernelSymbols::from_kallsyms_text(KALLSYMS).expect("fixture parses")
    }

    struct FakeBtf(HashSet<&'static str>);

    impl BtfFunctions for FakeBtf {
        fn has_func(&self, name: &str) -> bool {
            self.0.contains(name)
        }
    }

    fn fake_btf() -> FakeBtf {
        FakeBtf(["mm_alloc", "load_elf_binary", "begin_new_exec", "do_execveat_common"].into())
    }

    #[test]
    fn keeps_only_text_symbols_sorted() {
        let s = syms();
        assert_eq!(s.len(), 19, "D symbol dropped");
        assert!(s.symbols.windows(2).all(|w| w[0].address <= w[1].address));
        assert!(s.resolve("some_data").is_empty());
    }

    #[test]
    fn resolve_matches_canonical_names_and_flags_cold() {
        let s = syms();
        let r = s.resolve("do_execveat_common");
        assert_eq!(
            r,
            vec![
                ResolvedFunction {
                    raw_name: "do_execveat_common.isra.0.cold".into(),
                    address: 0xffffffff81216c3c,
                    module: None,
                    is_cold: true,
                },
                ResolvedFunction {
                    raw_name: "do_execveat_common.isra.0".into(),
                    address: 0xffffffff816c6e70,
                    module: None,
                    is_cold: false,
                },
            ]
        );
        // The query is canonicalized too.
        assert_eq!(s.resolve("do_execveat_common.isra.0"), r);
        // __pfx_ padding symbols are a different name.
        let cs = s.resolve("copy_strings");
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].raw_name, "copy_strings.isra.0");
        assert!(s.resolve("copy").is_empty(), "no prefix matching");
    }

    #[test]
    fn resolve_reports_modules() {
        let s = syms();
        let r = s.resolve("ext4_lookup");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].module.as_deref(), Some("ext4"));
        let m = s.resolve("mmput");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].module, None);
        assert_eq!(m[1].module.as_deref(), Some("fake_mod"));
    }

    #[test]
    fn presence_detects_ambiguity_and_absence() {
        let s = syms();
        let btf = fake_btf();

        match s.presence("load_elf_binary", &btf) {
            FunctionPresence::Ambiguous { symbols, btf } => {
                assert!(btf);
                assert_eq!(symbols.len(), 4);
                assert_eq!(symbols.iter().filter(|s| s.is_cold).count(), 2);
            }
            other => panic!("expected ambiguous, got {other:?}"),
        }
        let amb = s.presence("load_elf_binary", &btf);
        let targets: Vec<u64> = amb.attach_targets().iter().map(|t| t.address).collect();
        assert_eq!(targets, [0xffffffff81755520, 0xffffffff817585d0]);
        assert!(!amb.fentry_attachable());

        // One entry plus a cold fragment is Present, not Ambiguous.
        let p = s.presence("do_execveat_common", &btf);
        assert!(matches!(&p, FunctionPresence::Present { symbols, btf: true } if symbols.len() == 2));
        assert_eq!(p.attach_targets().len(), 1);
        assert!(!p.fentry_attachable(), "clone name differs from BTF name");

        let p = s.presence("mm_alloc", &btf);
        assert!(matches!(p, FunctionPresence::Present { btf: true, .. }));
        assert!(p.fentry_attachable());

        let p = s.presence("copy_strings", &btf);
        assert!(matches!(p, FunctionPresence::Present { btf: false, .. }));
        assert!(!p.fentry_attachable());

        assert_eq!(s.presence("exec_mmap", &btf), FunctionPresence::Absent);
        assert_eq!(s.presence("exec_mmap", &btf).describe(true), "absent (inlined or not built)");
        assert!(s.presence("exec_mmap", &btf).attach_targets().is_empty());

        // Same name in vmlinux and a module is ambiguous too.
        assert!(matches!(s.presence("mmput", &NoBtf), FunctionPresence::Ambiguous { btf: false, .. }));
    }

    #[test]
    fn cold_only_is_absent() {
        let s = KernelSymbols::from_kallsyms_text("ffffffff81000000 T _text\nffffffff81000100 t only_cold.cold\n").expect("parses");
        assert_eq!(s.resolve("only_cold").len(), 1);
        assert_eq!(s.presence("only_cold", &NoBtf), FunctionPresence::Absent);
    }

    #[test]
    fn cold_name_detection() {
        assert!(is_cold_name("foo.cold"));
        assert!(is_cold_name("foo.isra.0.cold"));
        assert!(is_cold_name("foo.cold.3"));
        assert!(!is_cold_name("foo.isra.0"));
        assert!(!is_cold_name("cold"));
        assert!(!is_cold_name("coldplug.isra.0"));
    }

    #[test]
    fn lookup_addr_boundaries() {
        let s = syms();
        // Below the first symbol.
        assert_eq!(s.lookup_addr(0xffffffff80ffffff), None);
        assert_eq!(s.lookup_addr(0), None);
        // Exactly at a symbol, and aliases resolve to the first in file order.
        assert_eq!(s.lookup_addr(0xffffffff81000000), Some(("_text", 0)));
        assert_eq!(s.lookup_addr(0xffffffff81000010), Some(("_text", 0x10)));
        // Last byte before the next symbol still belongs to the previous one.
        assert_eq!(s.lookup_addr(0xffffffff816c6e6f), Some(("copy_strings.isra.0", 0x40f)));
        assert_eq!(s.lookup_addr(0xffffffff816c6e70), Some(("do_execveat_common.isra.0", 0)));
        // Padding symbols are real ranges.
        assert_eq!(s.lookup_addr(0xffffffff816c6a5f), Some(("__pfx_copy_strings.isra.0", 0xf)));
        // Data symbols don't split text ranges.
        assert_eq!(s.lookup_addr(0xffffffff81360000), Some(("mm_alloc", 0xa080)));
        // The two load_elf_binary copies are distinguished by address.
        assert_eq!(s.lookup_addr(0xffffffff81755530), Some(("load_elf_binary", 0x10)));
        assert_eq!(s.lookup_addr(0xffffffff817585e0), Some(("load_elf_binary", 0x10)));
        // Module symbols carry their module.
        let m = s.lookup_symbol(0xffffffffc0a01204).expect("in ext4");
        assert_eq!(m, SymbolMatch { name: "ext4_lookup", module: Some("ext4"), offset: 4 });
    }

    #[test]
    fn lookup_addr_tail_of_a_module_is_bounded() {
        let s = syms();
        // _etext is the last vmlinux text symbol; the next one is in ext4.
        assert_eq!(s.lookup_addr(0xffffffff8220bb08 + 0x10), Some(("_etext", 0x10)));
        assert_eq!(s.lookup_addr(0xffffffff8220bb08 + MAX_TAIL_SYMBOL_SIZE), None);
        // ext4_lookup is ext4's last symbol; the next symbol belongs to
        // fake_mod, so it does not bound ext4_lookup and the tail cap applies.
        assert_eq!(s.lookup_addr(0xffffffffc0a01200 + MAX_TAIL_SYMBOL_SIZE - 1), Some(("ext4_lookup", MAX_TAIL_SYMBOL_SIZE - 1)));
        assert_eq!(s.lookup_addr(0xffffffffc0a01200 + MAX_TAIL_SYMBOL_SIZE), None);
        // Past the very last symbol.
        assert_eq!(s.lookup_addr(0xffffffffc0b00000 + 8), Some(("mmput", 8)));
        assert_eq!(s.lookup_addr(u64::MAX), None);
    }

    #[test]
    fn zero_addresses_mean_kptr_restrict() {
        let text = "0000000000000000 T _text\n0000000000000000 t do_execveat_common.isra.0\n";
        let msg = format!("{:#}", KernelSymbols::from_kallsyms_text(text).expect_err("must fail"));
        assert!(msg.contains("kptr_restrict"), "{msg}");
    }

    #[test]
    fn malformed_lines_report_line_numbers() {
        for (text, want) in [
            ("ffffffff81000000 T _text\nffffffff81000010 T\n", "line 2"),
            ("ffffffff81000000 T _text\n\nzzzz T foo\n", "line 3"),
            ("ffffffff81000000 TT _text\n", "line 1"),
            ("ffffffff81000000 t foo\text4\n", "line 1"),
            ("ffffffff81000000 t foo\t[ext4] junk\n", "line 1"),
        ] {
            let msg = format!("{:#}", KernelSymbols::from_kallsyms_text(text).expect_err("must fail"));
            assert!(msg.contains(want), "{text:?}: {msg}");
        }
        assert!(KernelSymbols::from_kallsyms_text("").is_err());
        let msg = format!("{:#}", KernelSymbols::from_kallsyms_text("ffffffff81000000 D data\n").expect_err("no text"));
        assert!(msg.contains("no text symbols"), "{msg}");
    }

    #[test]
    fn unsorted_input_is_sorted() {
        let s = KernelSymbols::from_kallsyms_text("ffffffffc0002000 t b\t[m2]\nffffffffc0001000 t a\t[m1]\nffffffff81000000 T _text\n")
            .expect("parses");
        assert_eq!(s.lookup_addr(0xffffffffc0001004), Some(("a", 4)));
        assert_eq!(s.lookup_symbol(0xffffffffc0002004).map(|m| m.module), Some(Some("m2")));
    }

    #[test]
    fn probe_presence_follows_model_order() {
        let model = PhaseModel::parse(
            "phase args 1 \"a\"\nphase binfmt 2 \"b\"\nphase other 9 \"o\"\n\
             args copy_strings\nbinfmt load_elf_binary\n\
             probe __x64_sys_execve\nprobe copy_strings\nprobe load_elf_binary\nprobe exec_mmap\n",
        )
        .expect("model parses");
        let rows = syms().probe_presence(&model, &fake_btf());
        let summary: Vec<(&str, Option<&str>, &str)> = rows
            .iter()
            .map(|r| {
                let status = match r.presence {
                    FunctionPresence::Present { .. } => "present",
                    FunctionPresence::Ambiguous { .. } => "ambiguous",
                    FunctionPresence::Absent => "absent",
                };
                (r.function.as_str(), r.phase.as_deref(), status)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("__x64_sys_execve", None, "present"),
                ("copy_strings", Some("args"), "present"),
                ("load_elf_binary", Some("binfmt"), "ambiguous"),
                ("exec_mmap", None, "absent"),
            ]
        );
    }

    #[test]
    fn presence_serializes_with_status_tag() {
        let v = serde_json::to_value(syms().presence("mm_alloc", &fake_btf())).expect("serializes");
        assert_eq!(v["status"], "present");
        assert_eq!(v["btf"], true);
        assert_eq!(v["symbols"][0]["raw_name"], "mm_alloc");
        let v = serde_json::to_value(FunctionPresence::Absent).expect("serializes");
        assert_eq!(v, serde_json::json!({"status": "absent"}));
    }
}
