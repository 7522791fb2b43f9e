//! `execprof run --repeat N [--vs OPTIONS]`: every run traced on its own (a child `execprof
//! run` writing a recording), the sides interleaved A B B A A B … so that machine drift hits
//! both equally, each side's repeats merged into one recording ready for `execprof diff`,
//! and the spread between the repeats shown.
use std::{
    ffi::OsString,
    fs::File,
    io::{BufReader, BufWriter},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::Instant,
};

use anyhow::{Context as _, Result, anyhow};

use crate::{
    model::failure::{Failure, code},
    model::meta::{ExitStatus, LossCounters, RunEnd, RunMeta},
    recording::{RecordingReader, RecordingWriter},
    report::{RunReport, human_ns},
};

/// What `--repeat`, `--vs` and their companions asked for.
#[derive(Clone, Debug, Default)]
pub struct RepeatConfig {
    /// Runs per side (`--repeat`); None: one.
    pub repeats: Option<u32>,
    /// Side B's options (shell words), e.g. `--misses 1` or `-- ./t2 100000`.
    pub vs: Option<String>,
    /// Where side B's recording goes (`--vs-output`).
    pub vs_output: Option<PathBuf>,
    /// Shell command run before each of A's runs (`--setup`).
    pub setup: Option<String>,
    /// Shell command run before each of B's runs (`--vs-setup`).
    pub vs_setup: Option<String>,
    /// The options of `run` that belong to the whole repeated run (the CLI layer lists them
    /// from its own definitions): left out of each child run's command line.
    pub own: Vec<OwnOption>,
}

/// One option of the command line, as `--long`, `-s` and whether a value follows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnOption {
    /// The long form, with its dashes (`--repeat`).
    pub long: String,
    /// The short form, if it has one.
    pub short: Option<char>,
    /// Whether the option's value follows it as the next word.
    pub takes_value: bool,
}

/// One side of a repeated run: how each of its runs is started and where its runs are merged.
#[derive(Debug)]
pub struct Side {
    /// `A` or `B`.
    pub label: &'static str,
    /// `execprof` arguments for one run of this side (global options, `run`, its options).
    pub args: Vec<OsString>,
    /// Shell command run before each of the side's runs.
    pub setup: Option<String>,
    /// The recording the side's runs are merged into.
    pub output: PathBuf,
}

/// What a repeated run does: the sides, interleaved, each run `repeats` times.
#[derive(Debug)]
pub struct Plan {
    /// Runs per side.
    pub repeats: u32,
    /// One side (`A`), or two with `--vs` (`A`, `B`).
    pub sides: Vec<Side>,
    /// One side: the merged report's outputs. Two sides: --json and --folded of the diff.
    pub outputs: crate::commands::run::Outputs,
}

impl Plan {
    /// From execprof's own command line (`args` without the program name).
    pub fn new(
        args: &[OsString],
        r: &RepeatConfig,
        output: Option<&Path>,
        outputs: crate::commands::run::Outputs,
    ) -> Result<Self, Failure> {
        let repeats = r.repeats.unwrap_or(1);
        if !(1..=1000).contains(&repeats) {
            return Err(Failure::usage("--repeat must be between 1 and 1000"));
        }
        // Side B's companions without --vs first: that is the mistake, not a missing --output.
        if r.vs.is_none() && (r.vs_output.is_some() || r.vs_setup.is_some()) {
            return Err(Failure::usage("--vs-output and --vs-setup describe side B: give B's options with --vs '...'"));
        }
        let Some(output) = output else {
            return Err(Failure::usage("--repeat and --vs write one recording per side: give A's with --output FILE"));
        };
        let (head, command) = split_command(&strip_own(args, &r.own));
        let mut sides = vec![Side { label: "A", args: join(&head, &[], &command), setup: r.setup.clone(), output: output.to_owned() }];
        if let Some(vs) = &r.vs {
            let Some(vs_output) = &r.vs_output else {
                return Err(Failure::usage("--vs needs --vs-output FILE for side B's recording"));
            };
            let words = shell_words(vs).map_err(|e| Failure::usage(format!("--vs {vs:?}: {e}")))?;
            let (b_opts, b_command) = split_command(&words.iter().map(OsString::from).collect::<Vec<_>>());
            let command = if b_command.is_empty() { command.clone() } else { b_command };
            sides.push(Side { label: "B", args: join(&head, &b_opts, &command), setup: r.vs_setup.clone(), output: vs_output.clone() });
            if outputs.trace.is_some() || outputs.tree || outputs.fast_path {
                return Err(Failure::usage(
                    "with --vs, --json and --folded are the diff's; for a side's trace, tree or fast-path estimate run `execprof report FILE` on its recording",
                ));
            }
        }
        Ok(Self { repeats, sides, outputs })
    }
}

/// The command line without the options the repeated run keeps for itself.
fn strip_own(args: &[OsString], own: &[OwnOption]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--" {
            out.extend_from_slice(&args[i..]);
            break;
        }
        let name = a.split_once('=').map_or(a.as_ref(), |(n, _)| n);
        let matched = own.iter().find(|o| {
            name.strip_prefix("--") == Some(o.long.as_str()) || o.short.is_some_and(|c| name.len() == 2 && name == format!("-{c}"))
        });
        match matched {
            Some(o) if o.takes_value => i += if a.contains('=') { 1 } else { 2 },
            Some(_) => i += 1,
            None => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// (options, command after `--`).
fn split_command(args: &[OsString]) -> (Vec<OsString>, Vec<OsString>) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), Vec::new()),
    }
}

fn join(head: &[OsString], extra: &[OsString], command: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = head.iter().chain(extra).cloned().collect();
    if !command.is_empty() {
        v.push("--".into());
        v.extend_from_slice(command);
    }
    v
}

/// Words of a shell-like string: whitespace separates, single and double quotes group,
/// backslash escapes the next character.
pub fn shell_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err("a ' is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => cur.push(chars.next().ok_or("a \\ ends the string")?),
                        Some(x) => cur.push(x),
                        None => return Err("a \" is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next().ok_or("a \\ ends the string")?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// One traced run's figures, for the spread between repeats.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RepeatFigures {
    /// Which run of its side this was, from 1.
    pub repeat: u32,
    /// The traced command's wall time, in ns.
    pub wall_ns: u64,
    /// Exec attempts completed in the run.
    pub attempts: u64,
    /// Median chain step wall time (chains only).
    pub step_p50_ns: Option<f64>,
    /// (outcome, count, median ns, mean ns).
    pub outcomes: Vec<(String, u64, f64, f64)>,
}

/// A child run's figures, read back through its report's type.
fn figures(repeat: u32, json: &Path) -> Result<RepeatFigures> {
    let text = std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let report: RunReport = serde_json::from_str(&text).with_context(|| format!("{}: not an execprof report", json.display()))?;
    let a = &report.analysis;
    let outcomes = a
        .outcomes
        .iter()
        .filter(|o| o.count > 0)
        .map(|o| {
            let (p50, mean) = o.latency.as_ref().map_or((0.0, 0.0), |l| (l.p50_ns as f64, l.mean_ns));
            (o.outcome.key().unwrap_or("?").to_owned(), o.count, p50, mean)
        })
        .collect();
    Ok(RepeatFigures {
        repeat,
        wall_ns: report.command_wall_ns,
        attempts: a.attempts,
        step_p50_ns: a.chain.as_ref().map(|c| c.wall_ns.p50_ns as f64),
        outcomes,
    })
}

/// Runs the plan; prints each side's spread, then (two sides) the diff. Returns the exit code.
pub fn run(plan: Plan) -> Result<i32> {
    let exe = std::env::current_exe().context("finding execprof's own executable")?;
    let dir = tempfile::Builder::new().prefix("execprof-repeat.").tempdir().context("creating a temporary directory for the runs")?;
    // Ctrl-C reaches the child runs (same process group); this process waits for them and
    // stops after the current one, keeping what was recorded.
    // SAFETY: setting a signal disposition; children get the default back before exec.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let mut per_side: Vec<Vec<(PathBuf, RepeatFigures)>> = plan.sides.iter().map(|_| Vec::new()).collect();
    let mut interrupted = false;
    let started = Instant::now();
    'repeats: for i in 0..plan.repeats {
        // A B, B A, A B, …: the order alternates, so a trend between runs hits both sides.
        let order: Vec<usize> = if i % 2 == 0 { (0..plan.sides.len()).collect() } else { (0..plan.sides.len()).rev().collect() };
        for s in order {
            let side = &plan.sides[s];
            if let Some(setup) = &side.setup {
                let status = std::process::Command::new("sh").arg("-c").arg(setup).status().context("running the setup command with sh")?;
                if !status.success() {
                    return Err(Failure::new(
                        code::ERROR,
                        format!("side {}'s setup command `{setup}` failed ({status}); fix it and run again", side.label),
                    )
                    .into());
                }
            }
            let rec = dir.path().join(format!("{}-{}.execprof", side.label, i + 1));
            let json = dir.path().join(format!("{}-{}.json", side.label, i + 1));
            let run_started = Instant::now();
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(&side.args).arg("--output").arg(&rec).arg("--json").arg(&json).stdout(Stdio::null()).stderr(Stdio::piped());
            // SAFETY: only async-signal-safe calls between fork and exec.
            let child = unsafe {
                cmd.pre_exec(|| {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    Ok(())
                })
            };
            let out = child.spawn().and_then(|c| c.wait_with_output()).context("starting a traced run")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !json.exists() || !rec.exists() {
                return Err(Failure::new(
                    code::ERROR,
                    format!("side {} run {} failed ({}): {}", side.label, i + 1, out.status, stderr.trim()),
                )
                .into());
            }
            let f = figures(i + 1, &json)?;
            eprintln!(
                "execprof: repeat {}/{} side {}: {} exec attempts in {} ({} so far){}",
                i + 1,
                plan.repeats,
                side.label,
                f.attempts,
                human_ns(run_started.elapsed().as_nanos() as f64),
                human_ns(started.elapsed().as_nanos() as f64),
                if out.status.success() { String::new() } else { format!("; it ended {}", out.status) }
            );
            per_side[s].push((rec, f));
            // 130: the run was interrupted (Ctrl-C reached it) and reported what it had.
            if out.status.code() == Some(130) || out.status.code() == Some(143) {
                interrupted = true;
                break 'repeats;
            }
        }
    }
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    for (side, runs) in plan.sides.iter().zip(&per_side) {
        let inputs: Vec<&Path> = runs.iter().map(|(p, _)| p.as_path()).collect();
        merge(&inputs, &side.output).with_context(|| format!("merging side {}'s recordings into {}", side.label, side.output.display()))?;
        print!("{}", render_spread(side, runs.iter().map(|(_, f)| f)));
    }
    if interrupted {
        eprintln!("execprof: interrupted: the recordings hold the runs that finished");
    }
    let o = &plan.outputs;
    if plan.sides.len() == 2 {
        println!();
        crate::commands::run::diff(
            &plan.sides[0].output,
            &plan.sides[1].output,
            o.json.as_deref(),
            o.folded.as_deref(),
            &crate::report::diff::Shown::default(),
        )?;
    } else {
        println!();
        crate::commands::run::replay(&plan.sides[0].output, o)?;
    }
    Ok(if interrupted { 130 } else { 0 })
}

fn render_spread<'a>(side: &Side, runs: impl Iterator<Item = &'a RepeatFigures>) -> String {
    use std::fmt::Write as _;
    let runs: Vec<&RepeatFigures> = runs.collect();
    let mut o = String::new();
    let _ = writeln!(o, "\nSide {}: {} runs merged into {}", side.label, runs.len(), side.output.display());
    let args: Vec<String> = side.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let _ = writeln!(o, "  execprof {}{}", args.join(" "), side.setup.as_ref().map_or(String::new(), |s| format!("   (setup: {s})")));
    let mut names: Vec<&str> = Vec::new();
    for r in &runs {
        for (n, ..) in &r.outcomes {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    let _ = write!(o, "  {:<7} {:>10} {:>10} {:>11}", "run", "wall", "attempts", "step p50");
    for n in &names {
        let _ = write!(o, " {:>14}", format!("{n} p50"));
    }
    let _ = writeln!(o);
    for r in &runs {
        let _ = write!(
            o,
            "  {:<7} {:>10} {:>10} {:>11}",
            r.repeat,
            human_ns(r.wall_ns as f64),
            r.attempts,
            r.step_p50_ns.map_or("-".into(), human_ns)
        );
        for n in &names {
            let cell = r.outcomes.iter().find(|x| x.0 == *n).map_or("-".into(), |x| human_ns(x.2));
            let _ = write!(o, " {cell:>14}");
        }
        let _ = writeln!(o);
    }
    // Spread: (max − min) / median of each column, over the runs.
    let spread = |v: Vec<f64>| -> String {
        if v.len() < 2 {
            return "-".into();
        }
        let mut v = v;
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        if median == 0.0 { "-".into() } else { format!("±{:.1}%", 50.0 * (v[v.len() - 1] - v[0]) / median) }
    };
    let _ = write!(
        o,
        "  {:<7} {:>10} {:>10} {:>11}",
        "spread",
        spread(runs.iter().map(|r| r.wall_ns as f64).collect()),
        "",
        spread(runs.iter().filter_map(|r| r.step_p50_ns).collect())
    );
    for n in &names {
        let _ = write!(o, " {:>14}", spread(runs.iter().filter_map(|r| r.outcomes.iter().find(|x| x.0 == *n).map(|x| x.2)).collect()));
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "  (spread: half the range between runs, relative to their median)");
    o
}

/// Concatenates recordings of the same workload into one: META of the first (with the number
/// of runs), every record in order, the union of the symbols, END summed.
pub fn merge(inputs: &[&Path], output: &Path) -> Result<()> {
    let mut metas = Vec::new();
    let mut ends: Vec<RunEnd> = Vec::new();
    let mut symbols = std::collections::BTreeMap::new();
    let open = |p: &Path| -> Result<RecordingReader<BufReader<File>>> {
        let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        RecordingReader::new(BufReader::new(f)).map_err(|e| anyhow!("{}: {e}", p.display()))
    };
    let first = inputs.first().ok_or_else(|| anyhow!("no runs to merge"))?;
    let mut meta: RunMeta =
        serde_json::from_value(open(first)?.meta().clone()).with_context(|| format!("{}: its run metadata", first.display()))?;
    meta.repeats = inputs.len() as u32;
    let meta = serde_json::to_value(&meta)?;
    let out = File::create(output).with_context(|| format!("creating {}", output.display()))?;
    let mut writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, out), &meta)?;
    for p in inputs {
        let mut r = open(p)?;
        metas.push(r.meta().clone());
        while let Some(rec) = r.next_record().map_err(|e| anyhow!("{}: {e}", p.display()))? {
            writer.push(&rec)?;
        }
        let t = r.finish().map_err(|e| anyhow!("{}: {e}", p.display()))?;
        symbols.extend(t.symbols);
        ends.push(serde_json::from_value(t.end).with_context(|| format!("{}: its end record", p.display()))?);
    }
    for (p, m) in inputs.iter().zip(&metas) {
        serde_json::from_value::<RunMeta>(m.clone()).with_context(|| format!("{}: its run metadata", p.display()))?;
    }
    let end = merge_ends(&ends);
    let symbols: Vec<(u64, String)> = symbols.into_iter().collect();
    writer.finish(&symbols, &serde_json::to_value(end)?)?;
    Ok(())
}

fn merge_ends(ends: &[RunEnd]) -> RunEnd {
    let mut losses: Vec<(String, u64)> = Vec::new();
    for e in ends {
        for (name, n) in &e.kernel_losses.0 {
            match losses.iter_mut().find(|(x, _)| x == name) {
                Some(l) => l.1 += n,
                None => losses.push((name.clone(), *n)),
            }
        }
    }
    let mut costs: Vec<crate::model::meta::ProgramCost> = Vec::new();
    for e in ends {
        for c in &e.program_costs {
            match costs.iter_mut().find(|x| x.program == c.program) {
                Some(x) => {
                    x.runs += c.runs;
                    x.run_ns += c.run_ns;
                }
                None => costs.push(c.clone()),
            }
        }
    }
    RunEnd {
        // The first run that did not succeed says how the whole did; else the last.
        exit_status: ends.iter().map(|e| e.exit_status).find(|s| *s != ExitStatus::Code(0)).unwrap_or(ExitStatus::Code(0)),
        command_wall_ns: ends.iter().map(|e| e.command_wall_ns).sum(),
        command_cpu_ns: ends.iter().map(|e| e.command_cpu_ns).sum(),
        kernel_losses: LossCounters(losses),
        undecodable_records: ends.iter().map(|e| e.undecodable_records).sum(),
        first_decode_error: ends.iter().find_map(|e| e.first_decode_error.clone()),
        partial: ends.iter().find_map(|e| e.partial.clone()),
        program_costs: costs,
        missing_interpreters: {
            let mut all: Vec<crate::model::meta::MissingInterpreter> = Vec::new();
            for m in ends.iter().flat_map(|e| &e.missing_interpreters) {
                if !all.iter().any(|x| x.file == m.file) {
                    all.push(m.clone());
                }
            }
            all
        },
    }
}

/// `OsStr` helper for tests.
#[cfg(test)]
fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(|s| std::ffi::OsStr::new(s).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options the CLI layer names as the repeated run's own.
    fn own() -> Vec<OwnOption> {
        let o = |long: &str, short: Option<char>, takes_value: bool| OwnOption { long: long.into(), short, takes_value };
        let mut v: Vec<OwnOption> =
            ["repeat", "vs", "vs-output", "setup", "vs-setup", "json", "trace", "folded"].iter().map(|l| o(l, None, true)).collect();
        v.extend([o("output", Some('o'), true), o("tree", None, false), o("fast-path", None, false)]);
        v
    }

    fn outs() -> crate::commands::run::Outputs {
        crate::commands::run::Outputs {
            json: None,
            trace: None,
            trace_format: Default::default(),
            folded: None,
            pprof: None,
            tree: false,
            fast_path: false,
            events: None,
            argv: false,
        }
    }

    #[test]
    fn shell_words_split_like_a_shell() {
        assert_eq!(shell_words("--misses 1").unwrap(), ["--misses", "1"]);
        assert_eq!(shell_words(" -- ./t 'a b' \"c\\\"d\" e\\ f ").unwrap(), ["--", "./t", "a b", "c\"d", "e f"]);
        assert!(shell_words("'open").is_err());
    }

    #[test]
    fn sides_share_as_options_and_b_overrides() {
        let args = os(&["-v", "run", "--steps", "100", "--repeat", "3", "--vs=--misses 1", "--vs-output", "b.ep", "-o", "a.ep", "--tree"]);
        let r = RepeatConfig {
            repeats: Some(3),
            vs: Some("--misses 1".into()),
            vs_output: Some("b.ep".into()),
            setup: Some("true".into()),
            own: own(),
            ..Default::default()
        };
        let plan = Plan::new(&args, &r, Some(Path::new("a.ep")), outs()).unwrap();
        assert_eq!(plan.repeats, 3);
        assert_eq!(plan.sides[0].args, os(&["-v", "run", "--steps", "100"]));
        assert_eq!(plan.sides[1].args, os(&["-v", "run", "--steps", "100", "--misses", "1"]));
        assert_eq!(plan.sides[0].setup.as_deref(), Some("true"));
        // Another command for B; A's command stays A's.
        let args = os(&["run", "--repeat", "2", "--vs", "-- /bin/false", "--vs-output", "b", "-o", "a", "--", "/bin/true", "x"]);
        let r = RepeatConfig {
            repeats: Some(2),
            vs: Some("-- /bin/false".into()),
            vs_output: Some("b".into()),
            own: own(),
            ..Default::default()
        };
        let plan = Plan::new(&args, &r, Some(Path::new("a")), outs()).unwrap();
        assert_eq!(plan.sides[0].args, os(&["run", "--", "/bin/true", "x"]));
        assert_eq!(plan.sides[1].args, os(&["run", "--", "/bin/false"]));
    }

    #[test]
    fn missing_outputs_are_usage_errors() {
        let r = RepeatConfig { repeats: Some(2), own: own(), ..Default::default() };
        assert!(Plan::new(&os(&["run"]), &r, None, outs()).unwrap_err().message.contains("--output"));
        let r = RepeatConfig { vs: Some("--misses 1".into()), own: own(), ..Default::default() };
        assert!(Plan::new(&os(&["run"]), &r, Some(Path::new("a")), outs()).unwrap_err().message.contains("--vs-output"));
    }
}
