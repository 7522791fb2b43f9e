//! Every example output in README.md and docs/*.md is the program's current output.
//!
//! An output block is a fenced block without a language (```` ``` ````, or ```` ```text ````).
//! Each one carries, on the line before its fence, what checks it:
//!
//! - `<!-- check: exact -->`: the block is `$ execprof …` command lines (and any shell
//!   command that prepares their input or cuts their output), each followed by its output. The commands run here, without root, in a directory holding the recordings of
//!   `profiler/tests/fixtures`, and their output (standard error, then standard output) must be
//!   the block's, byte for byte but for the time a report took to make. `EXECPROF_BLESS=1
//!   cargo test -p profiler --test docs` writes the current outputs into the files instead.
//! - `<!-- check: skeleton -->` (or `<!-- check: skeleton, beside: SHELL COMMAND -->`): the
//!   commands trace live work, so their numbers differ from run to run; as root, each runs
//!   (with `sudo ` dropped, and SHELL COMMAND running meanwhile in the background) and its
//!   output must have the block's section headers and row names, in order (see [`skeleton`]).
//!   A line `…` in the block stands for any lines the example leaves out.
//! - `<!-- not checked: WHY -->`: an illustration that no test can repeat (another machine's
//!   run, a guest's kernel, a third-party tool's output), saying why.
//!
//! A block with none of these fails [`every_output_block_is_checked_or_says_why_not`], so no
//! example goes unchecked by accident. The root test is `#[ignore = "needs root"]`; `cargo
//! xtask ci` runs it on the host (the binary is in `HOST_ONLY_BINARIES`: what it checks is
//! execprof's text, the same on every kernel).
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// Fails the test, saying why, unless running as root.
macro_rules! require_root {
    () => {
        assert!(unsafe { libc::geteuid() } == 0, "this test traces with BPF and needs root (CAP_BPF + CAP_PERFMON): run it with sudo");
    };
}

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// How a block is checked: the marker before its fence.
#[derive(Clone, Debug, PartialEq)]
enum Check {
    Exact,
    Skeleton { beside: Option<String> },
    NotChecked,
    Missing,
}

/// A fenced output block of a Markdown file.
#[derive(Debug)]
struct Block {
    file: PathBuf,
    /// 1-based line of the opening fence.
    line: usize,
    check: Check,
    /// The fence's indentation, removed from each line of `text`.
    indent: usize,
    /// The block's lines, without the indentation.
    text: String,
    /// Byte range of the block's lines in the file.
    range: std::ops::Range<usize>,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file.strip_prefix(ROOT).unwrap_or(&self.file).display(), self.line)
    }
}

/// README.md and every docs/*.md.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut out = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// Languages whose blocks are input (commands to type, files to write), not output.
const INPUT_LANGUAGES: &[&str] = &["sh", "toml", "yaml", "json", "ini", "c", "rust", "python", "promql"];

fn parse_marker(line: &str) -> Option<Check> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    if let Some(why) = inner.strip_prefix("not checked:") {
        assert!(!why.trim().is_empty(), "`not checked:` says why");
        return Some(Check::NotChecked);
    }
    let how = inner.strip_prefix("check:")?.trim();
    if how == "exact" {
        return Some(Check::Exact);
    }
    let rest = how.strip_prefix("skeleton")?.trim();
    if rest.is_empty() {
        return Some(Check::Skeleton { beside: None });
    }
    let beside = rest.strip_prefix(',')?.trim().strip_prefix("beside:")?.trim();
    Some(Check::Skeleton { beside: Some(beside.to_owned()) })
}

/// The output blocks of one page.
fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut lines = Vec::new();
    let mut at = 0;
    for l in text.split_inclusive('\n') {
        lines.push((at, l));
        at += l.len();
    }
    let mut i = 0;
    while i < lines.len() {
        let (_, l) = lines[i];
        let t = l.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            let indent = l.len() - t.len();
            let info = info.trim();
            // The closing fence: the same indentation, nothing after the backticks.
            let close = (i + 1..lines.len()).find(|&j| {
                let c = lines[j].1;
                c.trim() == "```" && c.len() - c.trim_start().len() == indent
            });
            let close = close.unwrap_or_else(|| panic!("{}:{}: a fence without its end", file.display(), i + 1));
            if info.is_empty() || info == "text" {
                let marker = (0..i).rev().map(|j| lines[j].1).find(|l| !l.trim().is_empty());
                let check = marker.and_then(parse_marker).unwrap_or(Check::Missing);
                let start = lines.get(i + 1).map_or(text.len(), |x| x.0);
                let end = lines[close].0;
                let body: String = text[start..end]
                    .lines()
                    .map(|l| if l.len() >= indent && l[..indent].trim().is_empty() { &l[indent..] } else { l.trim_start() })
                    .map(|l| format!("{l}\n"))
                    .collect();
                out.push(Block { file: file.to_owned(), line: i + 1, check, indent, text: body, range: start..end });
            } else {
                assert!(
                    INPUT_LANGUAGES.contains(&info),
                    "{}:{}: a block in `{info}`: output blocks have no language",
                    file.display(),
                    i + 1
                );
            }
            i = close + 1;
        } else {
            i += 1;
        }
    }
    out
}

fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|p| blocks(p)).collect()
}

/// A block's commands, each with the output the block shows for it.
fn commands(block: &Block) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.text.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push((cmd.to_owned(), String::new()));
        } else {
            let last = out.last_mut().unwrap_or_else(|| panic!("{}: a checked block starts with `$ execprof …`", block.at()));
            last.1.push_str(line);
            last.1.push('\n');
        }
    }
    out
}

/// The directory of the binary under test, for PATH: the blocks' commands say `execprof`.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_execprof")).parent().unwrap().to_owned()
}

fn path_env() -> String {
    format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs one command line of a block in `dir` with `sh`, standard error first, then standard output.
fn run(cmd: &str, dir: &Path) -> String {
    let cmd = cmd.strip_prefix("sudo ").unwrap_or(cmd);
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("PATH", path_env())
        .env_remove("COLUMNS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    text
}

/// What varies between runs of a deterministic command: the time a report took to make.
fn normalize(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix("report    ").and_then(|r| r.rfind(" in ").map(|i| (r, i))) {
            Some((r, i)) if r[i + 4..].ends_with(" ms") || r[i + 4..].ends_with(" µs") || r[i + 4..].ends_with(" s") => {
                format!("report    {} in …", &r[..i])
            }
            _ => l.to_owned(),
        })
        .map(|l| l.trim_end().to_owned() + "\n")
        .collect()
}

/// A temporary directory holding the test fixtures' recordings, as the exact blocks name them.
fn fixtures_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    dir
}

/// Each output block says how it is checked, and the checked ones name the commands they show.
#[test]
fn every_output_block_is_checked_or_says_why_not() {
    let blocks = all_blocks();
    assert!(blocks.len() > 20, "found the examples: {}", blocks.len());
    let missing: Vec<String> = blocks.iter().filter(|b| b.check == Check::Missing).map(Block::at).collect();
    assert!(
        missing.is_empty(),
        "output blocks without `<!-- check: exact -->`, `<!-- check: skeleton -->` or `<!-- not checked: WHY -->` on the line before: {missing:?}"
    );
    for b in blocks.iter().filter(|b| matches!(b.check, Check::Exact | Check::Skeleton { .. })) {
        let cmds = commands(b);
        assert!(
            cmds.iter().any(|(c, _)| c.strip_prefix("sudo ").unwrap_or(c).starts_with("execprof ")),
            "{}: a checked block runs execprof",
            b.at()
        );
        for (cmd, _) in cmds {
            if b.check == Check::Exact {
                assert!(!cmd.starts_with("sudo "), "{}: an exact block needs no root: `{cmd}`", b.at());
            }
        }
    }
    // Each command's reference is its --help, where the docs say it is.
    let exact: Vec<String> = blocks.iter().filter(|b| b.check == Check::Exact).flat_map(|b| commands(b).into_iter().map(|c| c.0)).collect();
    for cmd in ["run", "report", "diff", "agent", "top", "doctor", "bench spawn", "bench chain", "completions"] {
        let want = format!("execprof {cmd} --help");
        assert!(exact.contains(&want), "no page has `$ {want}` checked exactly");
    }
}

/// The exact blocks (`--help`, reports and diffs of the fixtures' recordings) are what the
/// program prints now. With `EXECPROF_BLESS=1`, writes what it prints into the pages instead.
#[test]
fn the_deterministic_examples_are_the_current_output() {
    let bless = std::env::var_os("EXECPROF_BLESS").is_some_and(|v| v == "1");
    let dir = fixtures_dir();
    let mut drifted = Vec::new();
    for page in pages() {
        let mut text = std::fs::read_to_string(&page).unwrap();
        let mut edits = Vec::new();
        for b in blocks(&page).into_iter().filter(|b| b.check == Check::Exact) {
            let mut fresh = String::new();
            let mut same = true;
            for (cmd, want) in commands(&b) {
                let got = run(&cmd, dir.path());
                same &= normalize(&got) == normalize(&want);
                if normalize(&got) != normalize(&want) && !bless {
                    drifted.push(format!("{}: `$ {cmd}` prints now:\n{got}\n(the page has:\n{want})", b.at()));
                }
                fresh.push_str(&format!("$ {cmd}\n"));
                fresh.push_str(&got);
                if !got.is_empty() && !got.ends_with('\n') {
                    fresh.push('\n');
                }
            }
            if !same {
                let pad = " ".repeat(b.indent);
                let body: String =
                    fresh.lines().map(str::trim_end).map(|l| if l.is_empty() { "\n".to_owned() } else { format!("{pad}{l}\n") }).collect();
                edits.push((b.range.clone(), body));
            }
        }
        if bless && !edits.is_empty() {
            for (range, body) in edits.into_iter().rev() {
                text.replace_range(range, &body);
            }
            std::fs::write(&page, text).unwrap();
        }
    }
    assert!(
        drifted.is_empty(),
        "examples have drifted from the program's output (EXECPROF_BLESS=1 rewrites them):\n{}",
        drifted.join("\n")
    );
}

/// The live examples (a traced run, `--all`'s who pays, `top --once`, the agent's report) have
/// the sections and rows the program prints now.
#[test]
#[ignore = "needs root"]
fn the_live_examples_have_the_current_shape() {
    require_root!();
    let split = execprof::testing::kernel_version() >= (6, 10);
    let mut drifted = Vec::new();
    let mut checked = 0;
    for b in all_blocks() {
        let Check::Skeleton { beside } = &b.check else { continue };
        let dir = tempfile::tempdir().unwrap();
        let mut background = beside.as_ref().map(|cmd| {
            Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap()
        });
        for (cmd, want) in commands(&b) {
            let got = run(&cmd, dir.path());
            let (want_s, got_s) = (skeleton(&want, split), skeleton(&got, split));
            if !matches_with_gaps(&want_s, &got_s) {
                drifted.push(format!(
                    "{}: `$ {cmd}`: the block's skeleton {want_s:#?}\nis not the output's {got_s:#?}\n(output:\n{got})",
                    b.at()
                ));
            }
            checked += 1;
        }
        if let Some(child) = background.as_mut() {
            // The whole group: the shell and what it started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
    assert!(checked >= 3, "found the live examples: {checked}");
    assert!(drifted.is_empty(), "live examples have drifted from the program's output: regenerate them\n{}", drifted.join("\n\n"));
}

use std::os::unix::process::CommandExt as _;

/// Whether `got` is `want` where each `…` of `want` stands for any run of lines (none included).
fn matches_with_gaps(want: &[String], got: &[String]) -> bool {
    let segments: Vec<&[String]> = want.split(|l| l == "…").collect();
    let mut at = 0;
    for (i, seg) in segments.iter().enumerate() {
        let first = i == 0;
        let last = i == segments.len() - 1;
        if seg.is_empty() {
            if last && !first {
                return true;
            }
            continue;
        }
        let found = if first {
            (got.len() >= seg.len() && got[..seg.len()] == **seg).then_some(0)
        } else {
            (at..=got.len().saturating_sub(seg.len())).find(|&s| got[s..].starts_with(seg))
        };
        let Some(s) = found else { return false };
        at = s + seg.len();
        if last && at != got.len() {
            // The last segment must end the output: look for a later place it fits.
            return (s + 1..=got.len().saturating_sub(seg.len())).any(|s| got[s..] == **seg);
        }
    }
    true
}

/// Section headers and row names of an output, in order: each line up to its first digit or
/// run of two spaces. Left out: messages on standard error (`execprof: …`) and attach
/// warnings, the sampled sections and a diff's lines (their functions and order depend on the
/// samples), the eBPF programs
/// table (which programs ran depends on the run), rows named by a path or `other` (which
/// programs and directories a live scope saw depends on the machine) and, where `split` is false (a kernel
/// before 6.10, without `sched_prepare_exec`), the successful-exec split and its chain rows.
/// A line `…` is kept as `…`: a gap.
fn skeleton(text: &str, split: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with("Where the kernel time goes")
            || line.starts_with("Where the time went")
            || (!split && line.starts_with("Successful execs around"))
        {
            skipping = true;
            continue;
        }
        if line.starts_with("execprof: ") {
            continue;
        }
        if line.starts_with("execprof's own eBPF programs") {
            skipping = true;
            continue;
        }
        if skipping && !line.starts_with(' ') {
            skipping = false;
        }
        if skipping || line.starts_with("(per-phase and per-function sections") || line.starts_with("Successful execs are not split") {
            continue;
        }
        let t = line.trim_start();
        if t == "…" {
            out.push("…".to_owned());
            continue;
        }
        if line.starts_with("warning   ") || (!split && (t.starts_with("before the point of no return") || t.starts_with("after it"))) {
            continue;
        }
        // Run-dependent notes: a latency that came out multimodal (run's note, diff's
        // warning), records a live scope lost (processes caught mid-call when tracing began),
        // windows of different lengths.
        if t.starts_with("MULTIMODAL")
            || t.starts_with("INCOMPLETE")
            || t.starts_with("warning: the traced windows differ")
            || (t.starts_with("warning: ") && t.contains(" is multimodal ("))
        {
            continue;
        }
        let end = t.char_indices().find(|&(i, c)| c.is_ascii_digit() || (i > 0 && t[i..].starts_with("  "))).map_or(t.len(), |(i, _)| i);
        let label = t[..end].trim();
        // Rows named by a path or `other` (the series folded together): which programs and
        // directories a live scope saw depends on the machine.
        if label.is_empty() || label.starts_with('/') || label.starts_with('…') || label == "other" {
            continue;
        }
        out.push(label.to_owned());
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation but `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every link from one page of the manual to another (or to a file of the repository) names a
/// file that is there and, after `#`, a heading of that page.
#[test]
fn every_link_between_pages_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.contains("://") || target.contains(' ') {
                continue;
            }
            let (file, frag) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if !frag.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let linked = std::fs::read_to_string(&path).unwrap();
                let mut fenced = false;
                let found = linked.lines().any(|l| {
                    if l.trim_start().starts_with("```") {
                        fenced = !fenced;
                    }
                    !fenced && l.starts_with('#') && anchor(l.trim_start_matches('#')) == frag
                });
                if !found {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn gaps_stand_for_any_lines() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(matches_with_gaps(&v(&["a", "b"]), &v(&["a", "b"])));
    assert!(!matches_with_gaps(&v(&["a", "b"]), &v(&["a", "x", "b"])));
    assert!(matches_with_gaps(&v(&["a", "…", "b"]), &v(&["a", "x", "y", "b"])));
    assert!(matches_with_gaps(&v(&["a", "…", "b"]), &v(&["a", "b"])));
    assert!(matches_with_gaps(&v(&["a", "…"]), &v(&["a", "b", "c"])));
    assert!(!matches_with_gaps(&v(&["a", "…", "c"]), &v(&["a", "b", "c", "d"])));
    assert!(matches_with_gaps(&v(&["…", "c"]), &v(&["a", "c", "b", "c"])));
    assert!(!matches_with_gaps(&v(&["a", "…", "b", "…", "c"]), &v(&["a", "c", "b"])));
}
