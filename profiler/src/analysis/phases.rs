//! The exec phase model: which phase of `execve` a kernel function's time
//! belongs to, and how a whole sampled stack is attributed to one phase.
//!
//! The model is data (`profiler/data/phases.txt`, documented at its top) so the
//! function lists can follow kernel changes without code changes.  This module
//! only parses it and applies the classification rule.
//!
//! # Stack classification rule
//!
//! Frames are given leaf first (innermost call first).
//!
//! 1. If any frame is an `async` frame (interrupt/softirq entry, the scheduler,
//!    tracing overhead), the sample is `other`.  The leaf always lies inside
//!    the code that async frame entered, so at that instant the CPU was doing
//!    interrupt or scheduler work that merely stole time from exec; charging
//!    it to the interrupted phase would inflate that phase with noise that
//!    depends on the machine's load, not on exec.
//! 2. Otherwise the innermost *strong* phase frame wins.  Page-fault frames
//!    (`fault`) and unlisted frames are transparent: a fault taken while
//!    copying argv is argument-copying cost because exec caused it and waits
//!    for it.  Innermost wins because the deeper frame is the more specific
//!    statement of what the code is doing (`mmput` under `begin_new_exec` is
//!    tearing down the old mm, not building the new image).
//! 3. Otherwise the innermost *weak* phase frame wins.  Weak entries are generic
//!    helpers (e.g. `vm_area_alloc`) that the exec path reaches from several
//!    phases; letting them win over a strong caller would misattribute, e.g.,
//!    ELF mmap work to the bprm setup phase.
//! 4. Otherwise `other`.

use std::collections::{HashMap, HashSet};

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// The shipped phase model.  Kept as a text file so the lists are reviewable
/// and editable without touching Rust.
pub const BUILTIN_PHASES_TXT: &str = include_str!("../../data/phases.txt");

/// Name of the mandatory fallback phase.
pub const OTHER_PHASE: &str = "other";
/// The phase that tracing-overhead (`overhead`) frames are charged to.
pub const TRACER_PHASE: &str = "tracer";

/// Directive keywords; phase ids may not collide with them or lines would be
/// ambiguous.
const KEYWORDS: &[&str] = &["phase", "probe", "async", "fault", "overhead", "wrapper"];

/// Compiler-generated suffix kinds that are followed by a number
/// (`.isra.0`, `.constprop.3`, `.part.1`, `.cold.2`, `.llvm.123456`, ...).
const NUMBERED_SUFFIXES: &[&str] = &["isra", "constprop", "part", "cold", "llvm", "lto_priv"];

/// Compiler-generated suffixes without a number.
const BARE_SUFFIXES: &[&str] = &["cold", "localalias"];

/// Strips compiler-generated suffixes from a kernel symbol name, repeatedly.
///
/// GCC/LLVM clone functions when they specialise or split them, and the
/// clone's name depends on the kernel build (`copy_strings.isra.0` on one
/// kernel, `copy_strings` on another).  The phase model speaks about source
/// functions, so every lookup goes through this canonical form.
///
/// Only known suffix shapes are removed; other dotted names (assembler labels
/// like `.slowpath`) are returned unchanged, and a name is never stripped to
/// an empty string.
pub fn strip_suffix(raw: &str) -> &str {
    let mut name = raw;
    while let Some(shorter) = strip_one_suffix(name) {
        name = shorter;
    }
    name
}

fn strip_one_suffix(name: &str) -> Option<&str> {
    let (head, last) = name.rsplit_once('.')?;
    if head.is_empty() {
        return None;
    }
    if BARE_SUFFIXES.contains(&last) {
        return Some(head);
    }
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        let (base, kind) = head.rsplit_once('.')?;
        if !base.is_empty() && NUMBERED_SUFFIXES.contains(&kind) {
            return Some(base);
        }
    }
    None
}

/// Index of a phase in exec order (0 = first phase).  A small copyable handle
/// so per-sample classification and per-phase counters avoid strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct PhaseId(u8);

impl PhaseId {
    /// Position in exec order; usable directly as an index into
    /// [`PhaseModel::phases`] or into a per-phase counter array.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// One declared phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Phase {
    /// Position in exec order.
    pub id: PhaseId,
    /// Short identifier used in the data file and machine-readable output.
    pub name: String,
    /// Sort key from the data file; phases are exposed sorted by it.
    pub order: i64,
    /// Human-readable label for reports.
    pub label: String,
}

/// What a single frame says about attribution; see the module docs for how
/// the classes combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass {
    /// The function belongs to a phase; `weak` helpers only decide when no
    /// strong frame is on the stack.
    Phase {
        /// The phase the function is listed under.
        phase: PhaseId,
        /// Listed as a weak helper (generic code that decides only without a strong frame).
        weak: bool,
    },
    /// Interrupt/scheduler/tracing work: the whole sample is `other`.
    Async,
    /// Fault handling: transparent, charged to the phase that faulted.
    Fault,
    /// The profiler's own probes (BPF programs and the maps they touch): the sample goes to
    /// the `tracer` phase, so tracing overhead is shown as such instead of inflating a phase.
    Overhead,
    /// Tracing code that calls the traced function (an fentry/fexit trampoline, a kretprobe
    /// return trampoline): overhead when the sample is in it or in other overhead it called,
    /// transparent when the traced function's own body runs beneath it.
    Wrapper,
    /// Not in the model: transparent.
    Unknown,
}

/// Why a stack got its phase; lets reports and tests show which frame decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributionReason {
    /// A tracing-overhead frame at this index sent the sample to `tracer`.
    Overhead {
        /// Index of the deciding frame in the stack (leaf first).
        frame: usize,
    },
    /// An async frame at this index forced `other`.
    Async {
        /// Index of the deciding frame in the stack (leaf first).
        frame: usize,
    },
    /// The innermost strong phase frame at this index decided.
    Strong {
        /// Index of the deciding frame in the stack (leaf first).
        frame: usize,
    },
    /// No strong frame; the innermost weak frame at this index decided.
    Weak {
        /// Index of the deciding frame in the stack (leaf first).
        frame: usize,
    },
    /// Nothing in the stack maps to a phase.
    Fallback,
}

/// Result of [`PhaseModel::attribute`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// The phase the sample goes to.
    pub phase: PhaseId,
    /// Which frame decided, and why.
    pub reason: AttributionReason,
}

#[derive(Clone, Copy, Debug)]
struct FunctionEntry {
    phase: PhaseId,
    weak: bool,
}

/// Exact names and trailing-`*` prefixes of one frame category.
#[derive(Clone, Debug, Default)]
struct NameSet {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl NameSet {
    fn matches(&self, name: &str) -> bool {
        self.exact.contains(name) || self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    fn insert(&mut self, pattern: &str) {
        match pattern.strip_suffix('*') {
            Some(prefix) => self.prefixes.push(prefix.to_string()),
            None => {
                self.exact.insert(pattern.to_string());
            }
        }
    }
}

/// A parsed phase model.  Immutable after parsing; cheap to query per frame.
#[derive(Clone, Debug)]
pub struct PhaseModel {
    phases: Vec<Phase>,
    other: PhaseId,
    functions: HashMap<String, FunctionEntry>,
    /// Function names per phase in file order, for listings.
    by_phase: Vec<Vec<String>>,
    probes: Vec<String>,
    async_frames: NameSet,
    fault_frames: NameSet,
    overhead_frames: NameSet,
    wrapper_frames: NameSet,
    /// The phase tracing-overhead frames go to (declared when `overhead` lines exist).
    tracer: Option<PhaseId>,
}

impl PhaseModel {
    /// Parses the model shipped in `profiler/data/phases.txt`.
    pub fn builtin() -> Result<PhaseModel> {
        Self::parse(BUILTIN_PHASES_TXT).context("built-in phase model (profiler/data/phases.txt)")
    }

    /// Parses a phase model in the format documented at the top of
    /// `phases.txt`.  Errors name the offending line because the file is
    /// meant to be edited by hand.
    pub fn parse(text: &str) -> Result<PhaseModel> {
        let mut builder = Builder::default();
        for (index, raw_line) in text.lines().enumerate() {
            let line_no = index + 1;
            builder.line(line_no, raw_line).with_context(|| format!("line {line_no}: {}", raw_line.trim()))?;
        }
        builder.finish()
    }

    /// All phases in exec order.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// The phase with this id.
    pub fn phase(&self, id: PhaseId) -> &Phase {
        &self.phases[id.index()]
    }

    /// The id of the phase named `name` (its short identifier), if declared.
    pub fn phase_by_name(&self, name: &str) -> Option<PhaseId> {
        self.phases.iter().find(|p| p.name == name).map(|p| p.id)
    }

    /// The phase of execprof's own probes, when the model declares it.
    pub fn tracer(&self) -> Option<PhaseId> {
        self.tracer
    }

    /// The fallback phase (`other`): where samples go that no frame maps to a phase.
    pub fn other(&self) -> PhaseId {
        self.other
    }

    /// Canonical names of the functions listed for `phase`, in file order.
    pub fn functions_of(&self, phase: PhaseId) -> &[String] {
        &self.by_phase[phase.index()]
    }

    /// Canonical names of the exact-mode probe candidates, in file order.
    pub fn probe_candidates(&self) -> &[String] {
        &self.probes
    }

    /// The phase a single function belongs to (weak entries included), after
    /// suffix stripping.  For exact mode, where each probed function's self
    /// time is charged to its own phase.  `None` for unlisted functions and
    /// for async/fault frames.
    pub fn phase_of(&self, function_raw_name: &str) -> Option<PhaseId> {
        self.functions.get(strip_suffix(function_raw_name)).map(|e| e.phase)
    }

    /// What one frame contributes to stack attribution.
    pub fn frame_class(&self, function_raw_name: &str) -> FrameClass {
        let name = strip_suffix(function_raw_name);
        if let Some(entry) = self.functions.get(name) {
            FrameClass::Phase { phase: entry.phase, weak: entry.weak }
        } else if self.wrapper_frames.matches(name) {
            // Before overhead: a wrapper may also match a broader overhead pattern.
            FrameClass::Wrapper
        } else if self.overhead_frames.matches(name) {
            FrameClass::Overhead
        } else if self.async_frames.matches(name) {
            FrameClass::Async
        } else if self.fault_frames.matches(name) {
            FrameClass::Fault
        } else {
            FrameClass::Unknown
        }
    }

    /// Attributes a sampled kernel stack (symbol names, leaf first, no
    /// offsets) to one phase using the rule in the module docs.
    pub fn classify_stack<S: AsRef<str>>(&self, frames: &[S]) -> PhaseId {
        self.attribute(frames).phase
    }

    /// The leafmost frame that makes a sample tracing overhead: an overhead frame, or a wrapper
    /// that is the leaf or sits directly under overhead (the trampoline's own work). A wrapper
    /// with a traced function's body beneath it is just a caller: under fexit every sample in
    /// the traced function has the trampoline on its stack.
    fn first_overhead<S: AsRef<str>>(&self, frames: &[S]) -> Option<usize> {
        let classes: Vec<FrameClass> = frames.iter().map(|f| self.frame_class(f.as_ref())).collect();
        classes.iter().enumerate().position(|(i, c)| match c {
            FrameClass::Overhead => true,
            FrameClass::Wrapper => i == 0 || matches!(classes[i - 1], FrameClass::Overhead | FrameClass::Wrapper),
            _ => false,
        })
    }

    /// Like [`classify_stack`](Self::classify_stack) but also says which
    /// frame decided, so reports can explain surprising attributions.
    pub fn attribute<S: AsRef<str>>(&self, frames: &[S]) -> Attribution {
        let mut strong = None;
        let mut weak = None;
        if let Some(tracer) = self.tracer
            && let Some(frame) = self.first_overhead(frames)
        {
            return Attribution { phase: tracer, reason: AttributionReason::Overhead { frame } };
        }
        for (index, frame) in frames.iter().enumerate() {
            match self.frame_class(frame.as_ref()) {
                FrameClass::Async => return Attribution { phase: self.other, reason: AttributionReason::Async { frame: index } },
                FrameClass::Phase { phase, weak: false } => {
                    strong.get_or_insert((index, phase));
                }
                FrameClass::Phase { phase, weak: true } => {
                    weak.get_or_insert((index, phase));
                }
                FrameClass::Fault | FrameClass::Unknown | FrameClass::Overhead | FrameClass::Wrapper => {}
            }
        }
        match (strong, weak) {
            (Some((frame, phase)), _) => Attribution { phase, reason: AttributionReason::Strong { frame } },
            (None, Some((frame, phase))) => Attribution { phase, reason: AttributionReason::Weak { frame } },
            (None, None) => Attribution { phase: self.other, reason: AttributionReason::Fallback },
        }
    }
}

/// Parser state.  Phases are referenced by declaration index while parsing
/// and renumbered into exec order at the end.
#[derive(Default)]
struct Builder {
    /// (name, order, label, declaring line)
    phases: Vec<(String, i64, String, usize)>,
    /// canonical function -> (declaration index, weak, line)
    functions: HashMap<String, (usize, bool, usize)>,
    function_order: Vec<String>,
    probes: Vec<String>,
    probe_lines: HashMap<String, usize>,
    async_frames: NameSet,
    fault_frames: NameSet,
    overhead_frames: NameSet,
    wrapper_frames: NameSet,
    pattern_lines: HashMap<String, usize>,
}

impl Builder {
    fn line(&mut self, line_no: usize, raw_line: &str) -> Result<()> {
        let line = strip_comment(raw_line).trim();
        if line.is_empty() {
            return Ok(());
        }
        let (keyword, rest) = split_token(line);
        match keyword {
            "phase" => self.phase_decl(line_no, rest),
            "probe" => {
                let name = single_function(rest, false)?;
                if let Some(prev) = self.probe_lines.insert(name.to_string(), line_no) {
                    bail!("probe candidate `{name}` already listed on line {prev}");
                }
                self.probes.push(name.to_string());
                Ok(())
            }
            "async" | "fault" | "overhead" | "wrapper" => self.frame_pattern(line_no, keyword, rest),
            phase_name => self.function_entry(line_no, phase_name, rest),
        }
    }

    fn phase_decl(&mut self, line_no: usize, rest: &str) -> Result<()> {
        let (name, rest) = split_token(rest);
        let (order, rest) = split_token(rest);
        if name.is_empty() || order.is_empty() || rest.is_empty() {
            bail!("expected `phase <phase-id> <order> \"<label>\"`");
        }
        check_identifier(name)?;
        if KEYWORDS.contains(&name) {
            bail!("phase id `{name}` is a reserved keyword");
        }
        let order: i64 = order.parse().with_context(|| format!("phase order `{order}` is not an integer"))?;
        let label = rest
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .filter(|l| !l.contains('"'))
            .context("phase label must be one double-quoted string")?;
        if label.trim().is_empty() {
            bail!("phase label is empty");
        }
        if let Some((_, _, _, prev)) = self.phases.iter().find(|p| p.0 == name) {
            bail!("phase `{name}` already declared on line {prev}");
        }
        if let Some((other, _, _, prev)) = self.phases.iter().find(|p| p.1 == order) {
            bail!("phase order {order} already used by `{other}` on line {prev}");
        }
        self.phases.push((name.to_string(), order, label.to_string(), line_no));
        Ok(())
    }

    fn function_entry(&mut self, line_no: usize, phase_name: &str, rest: &str) -> Result<()> {
        let Some(phase_index) = self.phases.iter().position(|p| p.0 == phase_name) else {
            bail!(
                "unknown phase or keyword `{phase_name}` (declare phases with `phase` before \
                 listing their functions)"
            );
        };
        if phase_name == OTHER_PHASE {
            bail!("`{OTHER_PHASE}` is the fallback and cannot list functions (use `async`/`fault`)");
        }
        let (name, flags) = split_token(rest);
        if name.is_empty() {
            bail!("expected `<phase-id> <function> [weak]`");
        }
        check_function(name, false)?;
        let weak = match flags {
            "" => false,
            "weak" => true,
            other => bail!("unexpected `{other}` after function name (only `weak` is allowed)"),
        };
        if let Some((prev_phase, _, prev_line)) = self.functions.get(name) {
            bail!(
                "function `{name}` already listed in phase `{}` on line {prev_line}; a function \
                 belongs to exactly one phase",
                self.phases[*prev_phase].0
            );
        }
        if let Some(kind) = self.frame_kind_of(name) {
            bail!("function `{name}` is also a `{kind}` frame; it cannot belong to a phase too");
        }
        self.functions.insert(name.to_string(), (phase_index, weak, line_no));
        self.function_order.push(name.to_string());
        Ok(())
    }

    fn frame_pattern(&mut self, line_no: usize, keyword: &str, rest: &str) -> Result<()> {
        let pattern = single_function(rest, true)?;
        if let Some(prev) = self.pattern_lines.get(pattern) {
            bail!("`{pattern}` already listed on line {prev}");
        }
        if let Some(prefix) = pattern.strip_suffix('*') {
            if let Some(f) = self.function_order.iter().find(|f| f.starts_with(prefix)) {
                bail!("`{pattern}` would also match phase function `{f}`");
            }
        } else if let Some((phase, _, prev)) = self.functions.get(pattern) {
            bail!(
                "`{pattern}` is listed in phase `{}` on line {prev}; it cannot also be a \
                 `{keyword}` frame",
                self.phases[*phase].0
            );
        }
        let set = match keyword {
            "async" => &mut self.async_frames,
            "overhead" => &mut self.overhead_frames,
            "wrapper" => &mut self.wrapper_frames,
            _ => &mut self.fault_frames,
        };
        set.insert(pattern);
        self.pattern_lines.insert(pattern.to_string(), line_no);
        Ok(())
    }

    /// Whether a phase function is shadowed by an async/fault entry; such
    /// overlaps would make attribution depend on lookup order.
    fn frame_kind_of(&self, name: &str) -> Option<&'static str> {
        if self.async_frames.matches(name) {
            Some("async")
        } else if self.overhead_frames.matches(name) {
            Some("overhead")
        } else if self.wrapper_frames.matches(name) {
            Some("wrapper")
        } else if self.fault_frames.matches(name) {
            Some("fault")
        } else {
            None
        }
    }

    fn finish(self) -> Result<PhaseModel> {
        if self.phases.is_empty() {
            bail!("no phases declared");
        }
        if !self.phases.iter().any(|p| p.0 == OTHER_PHASE) {
            bail!("the fallback phase `{OTHER_PHASE}` must be declared");
        }
        if self.phases.len() > usize::from(u8::MAX) {
            bail!("too many phases ({})", self.phases.len());
        }
        // Renumber from declaration order to exec order.
        let mut decl_indices: Vec<usize> = (0..self.phases.len()).collect();
        decl_indices.sort_by_key(|&i| self.phases[i].1);
        let mut remap = vec![PhaseId(0); self.phases.len()];
        let mut phases = Vec::with_capacity(self.phases.len());
        for (exec_index, &decl) in decl_indices.iter().enumerate() {
            // Bounded by the u8::MAX check above.
            let id = PhaseId(exec_index as u8);
            remap[decl] = id;
            let (name, order, label, _) = &self.phases[decl];
            phases.push(Phase { id, name: name.clone(), order: *order, label: label.clone() });
        }
        let other = phases.iter().find(|p| p.name == OTHER_PHASE).map(|p| p.id).context("fallback phase vanished")?;
        let mut by_phase = vec![Vec::new(); phases.len()];
        let mut functions = HashMap::with_capacity(self.functions.len());
        for name in &self.function_order {
            let (decl, weak, _) = self.functions[name];
            let phase = remap[decl];
            by_phase[phase.index()].push(name.clone());
            functions.insert(name.clone(), FunctionEntry { phase, weak });
        }
        let tracer = phases.iter().find(|p| p.name == TRACER_PHASE).map(|p| p.id);
        let listed = |set: &NameSet| !set.exact.is_empty() || !set.prefixes.is_empty();
        if tracer.is_none() && (listed(&self.overhead_frames) || listed(&self.wrapper_frames)) {
            bail!("`overhead` or `wrapper` frames are listed but the phase `{TRACER_PHASE}` is not declared");
        }
        Ok(PhaseModel {
            phases,
            other,
            tracer,
            overhead_frames: self.overhead_frames,
            wrapper_frames: self.wrapper_frames,
            functions,
            by_phase,
            probes: self.probes,
            async_frames: self.async_frames,
            fault_frames: self.fault_frames,
        })
    }
}

/// Removes a `#` comment.  Labels are quoted, so a `#` inside quotes is text.
fn strip_comment(line: &str) -> &str {
    let mut in_quotes = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            '#' if !in_quotes => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Splits off the first whitespace-separated token; the rest is trimmed.
fn split_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    }
}

fn single_function(rest: &str, allow_prefix: bool) -> Result<&str> {
    let (name, extra) = split_token(rest);
    if name.is_empty() {
        bail!("missing function name");
    }
    if !extra.is_empty() {
        bail!("unexpected `{extra}` after function name");
    }
    check_function(name, allow_prefix)?;
    Ok(name)
}

fn check_identifier(name: &str) -> Result<()> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        bail!("invalid phase id `{name}` (use lowercase letters, digits and `_`)");
    }
    Ok(())
}

/// Function names must be canonical so that the model and suffix stripping
/// agree; a suffixed name in the file would never match anything.
fn check_function(name: &str, allow_prefix: bool) -> Result<()> {
    let base = match name.strip_suffix('*') {
        Some(prefix) if allow_prefix => prefix,
        Some(_) => bail!("`{name}`: prefix patterns are only allowed in `async`/`fault` lines"),
        None => name,
    };
    if base.is_empty() || !base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
        bail!("invalid function name `{name}`");
    }
    if strip_suffix(base) != base {
        bail!("`{name}` has a compiler suffix; list the canonical name `{}`", strip_suffix(base));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"
# test model
phase lookup 10 "path lookup"   # trailing comment
phase args 30 "argv copy # not a comment"
phase bprm_mm 20 "bprm"
phase new_image 70 "new image"
phase old_mm 60 "old mm"
phase other 90 "other"

lookup do_open_execat
lookup do_filp_open
bprm_mm alloc_bprm
bprm_mm vm_area_alloc weak
args copy_strings
args do_execveat_common weak
old_mm mmput
old_mm tlb_finish_mmu weak
new_image begin_new_exec
new_image setup_arg_pages
new_image elf_load

probe do_execveat_common
probe __x64_sys_execve

async asm_sysvec_*
async __schedule
async irq_exit_rcu
fault asm_exc_page_fault
fault exc_page_fault
fault handle_mm_fault
"#;

    fn mini() -> PhaseModel {
        PhaseModel::parse(MINI).expect("mini model parses")
    }

    fn id(m: &PhaseModel, name: &str) -> PhaseId {
        m.phase_by_name(name).unwrap_or_else(|| panic!("no phase {name}"))
    }

    fn err_text(text: &str) -> String {
        format!("{:#}", PhaseModel::parse(text).expect_err("parse should fail"))
    }

    #[test]
    fn strip_suffix_cases() {
        let cases = [
            ("do_execveat_common.isra.0", "do_execveat_common"),
            ("do_execveat_common.isra.0.cold", "do_execveat_common"),
            ("copy_strings.isra.0", "copy_strings"),
            ("count.constprop.0.isra.0", "count"),
            ("foo.constprop.0.isra.0.cold", "foo"),
            ("foo.part.3", "foo"),
            ("foo.part.0.constprop.1", "foo"),
            ("load_elf_binary.cold", "load_elf_binary"),
            ("foo.cold.12", "foo"),
            ("foo.llvm.9876543210123", "foo"),
            ("foo.lto_priv.0", "foo"),
            ("foo.localalias", "foo"),
            ("plain", "plain"),
            // Unknown dotted names are not compiler clones: keep them.
            (".slowpath", ".slowpath"),
            (".E_copy", ".E_copy"),
            ("foo.bar", "foo.bar"),
            ("foo.isra", "foo.isra"),
            ("foo.isra.x", "foo.isra.x"),
            ("foo.12", "foo.12"),
            // Never strip to nothing.
            (".cold", ".cold"),
            (".isra.0", ".isra.0"),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(strip_suffix(raw), want, "strip_suffix({raw:?})");
        }
    }

    #[test]
    fn phases_are_exposed_in_exec_order_regardless_of_declaration_order() {
        let m = mini();
        let names: Vec<&str> = m.phases().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["lookup", "bprm_mm", "args", "old_mm", "new_image", "other"]);
        for (i, p) in m.phases().iter().enumerate() {
            assert_eq!(p.id.index(), i);
            assert_eq!(m.phase(p.id), p);
        }
        assert_eq!(m.phase(id(&m, "args")).label, "argv copy # not a comment");
        assert_eq!(m.other(), id(&m, "other"));
        assert_eq!(m.functions_of(id(&m, "new_image")), ["begin_new_exec", "setup_arg_pages", "elf_load"]);
        assert!(m.functions_of(m.other()).is_empty());
        assert_eq!(m.probe_candidates(), ["do_execveat_common", "__x64_sys_execve"]);
    }

    #[test]
    fn phase_of_strips_suffixes() {
        let m = mini();
        assert_eq!(m.phase_of("copy_strings.isra.0"), Some(id(&m, "args")));
        assert_eq!(m.phase_of("do_execveat_common.isra.0.cold"), Some(id(&m, "args")));
        assert_eq!(m.phase_of("vm_area_alloc"), Some(id(&m, "bprm_mm")), "weak entries still have a phase");
        assert_eq!(m.phase_of("__x64_sys_execve"), None, "probe-only, no phase");
        assert_eq!(m.phase_of("asm_exc_page_fault"), None);
        assert_eq!(m.phase_of("memcpy"), None);
    }

    #[test]
    fn frame_classes() {
        let m = mini();
        assert_eq!(m.frame_class("asm_sysvec_apic_timer_interrupt"), FrameClass::Async);
        assert_eq!(m.frame_class("__schedule"), FrameClass::Async);
        assert_eq!(m.frame_class("handle_mm_fault"), FrameClass::Fault);
        assert_eq!(m.frame_class("memset_orig"), FrameClass::Unknown);
        assert_eq!(m.frame_class("tlb_finish_mmu"), FrameClass::Phase { phase: id(&m, "old_mm"), weak: true });
    }

    #[test]
    fn innermost_strong_frame_wins() {
        let m = mini();
        // mmput under begin_new_exec: tearing down the old mm, not new image.
        let stack =
            ["unmap_page_range", "exit_mmap", "mmput", "begin_new_exec", "load_elf_binary", "bprm_execve", "do_execveat_common.isra.0"];
        let a = m.attribute(&stack);
        assert_eq!(a.phase, id(&m, "old_mm"));
        assert_eq!(a.reason, AttributionReason::Strong { frame: 2 });
        // Unknown frames above a strong frame are transparent.
        assert_eq!(m.classify_stack(&["memcpy", "copy_strings.isra.0", "do_execveat_common.isra.0"]), id(&m, "args"));
    }

    #[test]
    fn page_fault_while_copying_args_is_args() {
        let m = mini();
        let stack = [
            "clear_page_erms",
            "do_anonymous_page",
            "handle_mm_fault",
            "do_user_addr_fault",
            "exc_page_fault",
            "asm_exc_page_fault",
            "strnlen_user",
            "copy_strings.isra.0",
            "do_execveat_common.isra.0",
            "__x64_sys_execve",
        ];
        let a = m.attribute(&stack);
        assert_eq!(a.phase, id(&m, "args"));
        assert_eq!(a.reason, AttributionReason::Strong { frame: 7 });
    }

    #[test]
    fn interrupt_during_exec_is_other() {
        let m = mini();
        let stack = [
            "run_timer_softirq",
            "handle_softirqs",
            "irq_exit_rcu",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
            "copy_strings.isra.0",
            "do_execveat_common.isra.0",
        ];
        let a = m.attribute(&stack);
        assert_eq!(a.phase, m.other());
        assert_eq!(a.reason, AttributionReason::Async { frame: 2 });
    }

    #[test]
    fn exec_looking_frames_inside_an_interrupt_are_still_other() {
        // An IRQ handler that happens to call a phase function (here the weak
        // tlb_finish_mmu) is still interrupt work.
        let m = mini();
        let stack = ["tlb_finish_mmu", "some_irq_work", "asm_sysvec_irq_work", "setup_arg_pages", "load_elf_binary"];
        assert_eq!(m.classify_stack(&stack), m.other());
    }

    #[test]
    fn scheduler_is_other_even_under_a_fault() {
        let m = mini();
        let stack = [
            "__schedule",
            "schedule",
            "io_schedule",
            "folio_wait_bit",
            "filemap_fault",
            "handle_mm_fault",
            "asm_exc_page_fault",
            "copy_strings",
        ];
        assert_eq!(m.classify_stack(&stack), m.other());
    }

    #[test]
    fn weak_helper_yields_to_strong_caller() {
        let m = mini();
        // vm_area_alloc is listed under bprm_mm, but here it is ELF mapping.
        let stack = ["kmem_cache_alloc", "vm_area_alloc", "mmap_region", "do_mmap", "vm_mmap", "elf_load", "load_elf_binary"];
        let a = m.attribute(&stack);
        assert_eq!(a.phase, id(&m, "new_image"));
        assert_eq!(a.reason, AttributionReason::Strong { frame: 5 });
        // ...and under the bprm setup it is bprm_mm.
        assert_eq!(m.classify_stack(&["vm_area_alloc", "alloc_bprm", "do_execveat_common"]), id(&m, "bprm_mm"));
        // tlb_finish_mmu during stack relocation belongs to new_image.
        assert_eq!(m.classify_stack(&["tlb_finish_mmu", "relocate_vma_down", "setup_arg_pages"]), id(&m, "new_image"));
    }

    #[test]
    fn weak_frames_decide_when_no_strong_frame() {
        let m = mini();
        // Innermost weak wins: vm_area_alloc (bprm_mm) over do_execveat_common (args).
        let a = m.attribute(&["vm_area_alloc", "mystery", "do_execveat_common.isra.0"]);
        assert_eq!(a.phase, id(&m, "bprm_mm"));
        assert_eq!(a.reason, AttributionReason::Weak { frame: 0 });
        // do_execveat_common's own time (inlined count()) is args.
        assert_eq!(m.classify_stack(&["do_execveat_common.isra.0", "__x64_sys_execve"]), id(&m, "args"));
    }

    #[test]
    fn nothing_known_falls_back_to_other() {
        let m = mini();
        let a = m.attribute(&["foo", "bar", "__x64_sys_execve"]);
        assert_eq!(a.phase, m.other());
        assert_eq!(a.reason, AttributionReason::Fallback);
        assert_eq!(m.classify_stack::<&str>(&[]), m.other());
        // A user-space fault after exec has no exec frame.
        assert_eq!(m.classify_stack(&["filemap_map_pages", "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault"]), m.other());
    }

    #[test]
    fn classify_accepts_owned_strings() {
        let m = mini();
        let frames: Vec<String> = vec!["copy_strings.isra.0".into(), "do_execveat_common".into()];
        assert_eq!(m.classify_stack(&frames), id(&m, "args"));
    }

    #[test]
    fn parse_errors_carry_line_numbers() {
        let cases: &[(&str, &str)] = &[
            ("phase other 1 \"o\"\nfoo bar\n", "line 2:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\n\n# c\na x\nb y\n", "line 6:"),
            ("phase other 1 \"o\"\nphase a 1 \"a\"\n", "line 2: phase a 1"),
            ("phase other 1 \"o\"\nphase other 2 \"again\"\n", "line 2:"),
            ("phase other 1 \"o\"\nphase a x \"a\"\n", "line 2:"),
            ("phase other 1 \"o\"\nphase a 2 unquoted\n", "line 2:"),
            ("phase other 1 \"o\"\nphase Bad 2 \"a\"\n", "line 2:"),
            ("phase other 1 \"o\"\nphase probe 2 \"a\"\n", "line 2:"),
            ("phase other 1 \"o\"\nother do_thing\n", "line 2:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\na copy_strings.isra.0\n", "line 3:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\na f strong\n", "line 3:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\na f*\n", "line 3:"),
            ("phase other 1 \"o\"\nprobe f\nprobe f\n", "line 3:"),
            ("phase other 1 \"o\"\nprobe f g\n", "line 2:"),
            ("phase other 1 \"o\"\nasync\n", "line 2:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\nasync sched*\na schedule\n", "line 4:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\na schedule\nasync sched*\n", "line 4:"),
            ("phase other 1 \"o\"\nphase a 2 \"a\"\na f\nfault f\n", "line 4:"),
            ("a f\nphase a 2 \"a\"\n", "line 1:"),
        ];
        for (text, want) in cases {
            let msg = err_text(text);
            assert!(msg.starts_with(want), "for {text:?}: got {msg:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn duplicate_function_reports_both_lines() {
        let msg = err_text("phase other 9 \"o\"\nphase a 1 \"a\"\nphase b 2 \"b\"\na f\n\nb f.isra.0\nb f\n");
        // The suffixed spelling is rejected first (line 6), then with it fixed
        // the duplicate is reported with the original line.
        assert!(msg.starts_with("line 6:"), "{msg}");
        let msg = err_text("phase other 9 \"o\"\nphase a 1 \"a\"\nphase b 2 \"b\"\na f\n\nb f\n");
        assert!(msg.starts_with("line 6:") && msg.contains("line 4"), "{msg}");
    }

    #[test]
    fn missing_other_is_an_error() {
        let msg = err_text("phase a 1 \"a\"\na f\n");
        assert!(msg.contains("`other`"), "{msg}");
        assert!(err_text("# nothing\n").contains("no phases"));
    }

    #[test]
    fn the_profilers_own_frames_go_to_tracer_wherever_they_are() {
        let m = PhaseModel::builtin().unwrap();
        let tracer = m.phase_by_name("tracer").unwrap();
        // A map update in the sys_enter program, called from the syscall entry.
        let stack = ["htab_map_update_elem", "bpf_prog_0123_sys_enter", "bpf_trace_run2", "syscall_trace_enter", "do_syscall_64"];
        assert_eq!(m.classify_stack(&stack), tracer);
        // Even under an exec-path frame: the probe's time is not the phase's.
        assert_eq!(m.classify_stack(&["bpf_ringbuf_reserve", "bpf_prog_1_x", "do_open_execat"]), tracer);
        let a = m.attribute(&["bpf_ringbuf_reserve", "do_open_execat"]);
        assert_eq!(a.reason, AttributionReason::Overhead { frame: 0 });
    }

    #[test]
    fn a_trampoline_is_tracer_only_when_the_sample_is_in_it() {
        let m = PhaseModel::builtin().unwrap();
        let (tracer, lookup, bprm_mm) =
            (m.phase_by_name("tracer").unwrap(), m.phase_by_name("lookup").unwrap(), m.phase_by_name("bprm_mm").unwrap());
        // fexit on do_open_execat: its body runs under the trampoline, which alloc_bprm called.
        let body = ["link_path_walk", "path_openat", "do_filp_open", "do_open_execat", "bpf_trampoline_6442494788", "alloc_bprm"];
        assert_eq!(m.classify_stack(&body), lookup);
        // In the trampoline itself, or in the programs and helpers it runs: tracer.
        assert_eq!(m.classify_stack(&["bpf_trampoline_6442494788", "alloc_bprm"]), tracer);
        assert_eq!(m.classify_stack(&["__bpf_prog_enter_recur", "bpf_trampoline_1", "mm_alloc", "alloc_bprm"]), tracer);
        assert_eq!(m.classify_stack(&["migrate_disable", "__bpf_prog_enter_recur", "bpf_trampoline_1", "alloc_bprm"]), tracer);
        // Two trampolines nested (fexit on mm_alloc inside fexit on alloc_bprm).
        let nested = ["pgd_alloc", "mm_init", "mm_alloc", "bpf_trampoline_2", "alloc_bprm", "bpf_trampoline_1", "do_execveat_common"];
        assert_eq!(m.classify_stack(&nested), bprm_mm);
    }

    /// arm64's frames: IRQ entry (EL1 and EL0) is async, a fault taken in the kernel is
    /// transparent, a kprobe's BRK path is the tracer's, and the syscall entry
    /// `__arm64_sys_execve` is a probe candidate with no phase, as `__x64_sys_execve` is.
    #[test]
    fn arm64_entry_frames_classify_like_their_x86_counterparts() {
        let m = PhaseModel::builtin().unwrap();
        let (tracer, args) = (m.phase_by_name("tracer").unwrap(), m.phase_by_name("args").unwrap());
        let irq = [
            "gic_handle_irq",
            "call_on_irq_stack",
            "do_interrupt_handler",
            "el1_interrupt",
            "el1h_64_irq_handler",
            "el1h_64_irq",
            "copy_strings",
        ];
        assert_eq!(m.classify_stack(&irq), m.other());
        let fault = [
            "clear_page",
            "do_anonymous_page",
            "handle_mm_fault",
            "do_page_fault",
            "do_translation_fault",
            "do_mem_abort",
            "el1_abort",
            "el1h_64_sync_handler",
            "el1h_64_sync",
            "copy_strings.isra.0",
            "do_execveat_common.isra.0",
            "__arm64_sys_execve",
        ];
        assert_eq!(m.classify_stack(&fault), args);
        let brk = [
            "kprobe_breakpoint_handler",
            "call_break_hook",
            "brk_handler",
            "el1_dbg",
            "el1h_64_sync_handler",
            "el1h_64_sync",
            "copy_strings",
        ];
        assert_eq!(m.classify_stack(&brk), tracer);
        assert_eq!(m.phase_of("__arm64_sys_execve"), None);
        assert!(m.probe_candidates().iter().any(|p| p == "__arm64_sys_execveat"));
    }

    #[test]
    fn mm_set_up_is_exec_under_mm_alloc_and_fork_under_dup_mm() {
        let m = PhaseModel::builtin().unwrap();
        let bprm_mm = m.phase_by_name("bprm_mm").unwrap();
        let fork_mm = m.phase_by_name("fork_mm").unwrap();
        assert_eq!(m.classify_stack(&["pgd_alloc", "mm_init", "mm_alloc", "alloc_bprm"]), bprm_mm);
        assert_eq!(m.classify_stack(&["pgd_alloc", "mm_init", "dup_mm", "copy_process"]), fork_mm);
        assert_eq!(m.classify_stack(&["copy_pte_range", "copy_page_range", "dup_mmap", "dup_mm", "copy_process"]), fork_mm);
    }

    #[test]
    fn overhead_lines_need_the_tracer_phase() {
        let err = PhaseModel::parse("phase other 9 \"o\"\noverhead bpf_prog_*\n").unwrap_err();
        assert!(format!("{err:#}").contains("`tracer` is not declared"), "{err:#}");
    }

    #[test]
    fn builtin_model_is_consistent() {
        let m = PhaseModel::builtin().expect("shipped phases.txt parses");
        let names: Vec<&str> = m.phases().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["lookup", "bprm_mm", "args", "creds", "binfmt", "old_mm", "new_image", "cleanup", "fork_mm", "fork_task", "tracer", "other"]
        );
        assert!(m.functions_of(m.other()).is_empty());

        // Every listed function appears in exactly one phase.  The parser
        // already rejects duplicates; this re-checks from the text so a parser
        // regression cannot hide one.
        let mut seen: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in BUILTIN_PHASES_TXT.lines() {
            let line = strip_comment(line).trim();
            let mut tokens = line.split_whitespace();
            let (Some(first), Some(func)) = (tokens.next(), tokens.next()) else {
                continue;
            };
            if KEYWORDS.contains(&first) {
                continue;
            }
            seen.entry(func).or_default().push(first);
        }
        assert!(seen.len() > 50, "expected a substantial model, got {}", seen.len());
        for (func, phases) in &seen {
            assert_eq!(phases.len(), 1, "{func} listed in {phases:?}");
            assert_eq!(m.phase_of(func), m.phase_by_name(phases[0]), "{func}");
        }
        let listed: usize = m.phases().iter().map(|p| m.functions_of(p.id).len()).sum();
        assert_eq!(listed, seen.len());

        // Spot-check the brief's phase assignments.
        for (func, phase) in [
            ("do_open_execat", "lookup"),
            ("link_path_walk", "lookup"),
            ("getname_flags", "lookup"),
            ("alloc_bprm", "bprm_mm"),
            ("__bprm_mm_init", "bprm_mm"),
            ("mm_alloc", "bprm_mm"),
            ("copy_strings", "args"),
            ("bprm_stack_limits", "args"),
            ("count", "args"),
            ("prepare_bprm_creds", "creds"),
            ("security_bprm_check", "creds"),
            ("bprm_execve", "binfmt"),
            ("search_binary_handler", "binfmt"),
            ("load_elf_binary", "binfmt"),
            ("exec_mmap", "old_mm"),
            ("exit_mmap", "old_mm"),
            ("de_thread", "old_mm"),
            ("begin_new_exec", "new_image"),
            ("setup_arg_pages", "new_image"),
            ("finalize_exec", "new_image"),
            ("free_bprm", "cleanup"),
            ("do_close_execat", "cleanup"),
        ] {
            assert_eq!(m.phase_of(func), m.phase_by_name(phase), "{func}");
        }

        let probes: HashSet<&str> = m.probe_candidates().iter().map(String::as_str).collect();
        for p in [
            "__x64_sys_execve",
            "__x64_sys_execveat",
            "do_execveat_common",
            "alloc_bprm",
            "do_open_execat",
            "bprm_mm_init",
            "mm_alloc",
            "copy_strings",
            "copy_string_kernel",
            "bprm_stack_limits",
            "bprm_execve",
            "exec_binprm",
            "search_binary_handler",
            "load_elf_binary",
            "begin_new_exec",
            "exec_mmap",
            "mmput",
            "setup_new_exec",
            "setup_arg_pages",
            "finalize_exec",
            "free_bprm",
        ] {
            assert!(probes.contains(p), "probe candidate {p} missing");
        }
        // Every candidate gets a probe slot even with load_elf_binary present twice and
        // the syscall entries skipped (two per architecture: x86_64's and arm64's).
        assert!(probes.len() - 4 < profiler_common::limits::MAX_PROBED as usize, "{} candidates", probes.len());

        // Shipped rule sanity on realistic 6.18 stacks.
        let args = m.phase_by_name("args").unwrap();
        assert_eq!(
            m.classify_stack(&[
                "rep_movs_alternative",
                "handle_mm_fault",
                "exc_page_fault",
                "asm_exc_page_fault",
                "copy_strings.isra.0",
                "do_execveat_common.isra.0",
                "__x64_sys_execve",
                "x64_sys_call",
                "do_syscall_64",
                "entry_SYSCALL_64_after_hwframe"
            ]),
            args
        );
        assert_eq!(
            m.classify_stack(&[
                "native_flush_tlb_one_user",
                "flush_tlb_func",
                "__sysvec_call_function_single",
                "sysvec_call_function_single",
                "asm_sysvec_call_function_single",
                "copy_strings.isra.0",
                "do_execveat_common.isra.0"
            ]),
            m.other()
        );
        assert_eq!(
            m.classify_stack(&[
                "lookup_fast",
                "walk_component",
                "link_path_walk",
                "path_openat",
                "do_filp_open",
                "do_open_execat",
                "open_exec",
                "load_elf_binary",
                "bprm_execve"
            ]),
            m.phase_by_name("lookup").unwrap(),
            "interpreter lookup counts as lookup"
        );
    }
}
