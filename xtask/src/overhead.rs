//! `cargo xtask overhead`: what watching costs, in instructions. Boots the lab's base kernel
//! (Debian's 6.12 with the lab's config, unpatched, [`crate::kernel`]; it has BPF trampolines
//! and the per-syscall tracepoints) under QEMU with `-icount shift=0`, where the guest's clock
//! advances one nanosecond per instruction executed, so each figure is an instruction count,
//! the same from run to run and free of the host's noise. Inside (`xtask/guest/overhead.sh`), in rotating
//! rounds: the built-in chain (6 misses, as the seeds) untraced, under execprof (default,
//! which is exact mode plus sampling in this kernel; sampled only; exact only; the boundaries
//! alone, with fentry/fexit, raw tracepoints and per-syscall events) and under the peers
//! (`perf record -g`, `perf trace -e execve`, bpftrace with `benches/overhead.py`'s three
//! probes; run from this machine's userland, [`crate::userland::image`], in a chroot);
//! an untraced getpid loop (`benches/getpid.c`) alone and beside each tracer watching a
//! sleeping process; and a loop of failed execve calls (`benches/enoent.c`) untraced and
//! traced, whose difference is the tracer's share of a failed attempt. Prints instructions per
//! chain step, per unrelated syscall and per failed attempt, and their ratios to untraced.
//!
//! What icount cannot see: cache misses and memory latency (every instruction costs the same);
//! TCG also does not model the cost of a mispredicted branch or of the syscall instruction
//! itself. And it weighs bulk copies more than hardware does: QEMU 7.2 runs a `rep movs` or
//! `rep stos` one iteration per translation block, so each iteration counts (a `rep movsb`
//! of a page, as `clear_page_erms` runs, is 4,096 instructions here and about a hundred cycles on
//! a CPU with fast string operations).
use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context as _, Result, bail};
use execprof::{analysis::outcome::Outcome, model::meta::ProgramCost, report::RunReport};

use crate::{
    guest::{self, GuestEnv, ResultsDisk},
    vm::{cache_dir, fetch_package, initramfs_base},
};

/// Chain sides: the tag the guest writes, and what it is. The untraced side and the peers'
/// write the bench chain's own JSON; execprof's sides its report.
const CHAIN_SIDES: &[(&str, &str)] = &[
    ("untraced", "untraced (execprof bench chain)"),
    ("default", "execprof run (default here: exact + sampled at 999 Hz)"),
    ("sampled", "execprof run --mode sampled (999 Hz)"),
    ("exact", "execprof run --mode exact --sample-hz 0"),
    ("bare", "execprof run --mode sampled --sample-hz 1 (the boundaries alone: fentry/fexit)"),
    ("bare-tracepoint", "execprof run --mode sampled --sample-hz 1 --boundaries tracepoint"),
    ("bare-syscall-events", "execprof run --mode sampled --sample-hz 1 --boundaries syscall-events"),
    ("perf-record", "perf record -g -F 999"),
    ("perf-trace", "perf trace -e execve"),
    ("bpftrace", "bpftrace, 3 probes (syscalls:sys_enter/exit_execve, sched_process_exec)"),
    ("agent", "execprof agent --all (default here: fentry/fexit, sampled at 99 Hz)"),
    ("agent-bare", "execprof agent --all --sample-hz 0"),
    ("bpftrace-hist", "bpftrace: per-(comm, outcome) exec and per-comm fork histograms, kfunc/kretfunc"),
    ("bpftrace-empty", "bpftrace: the same kfunc/kretfunc with empty bodies (the trampolines' dispatch alone)"),
    ("bpftrace-empty-exact", "bpftrace: empty kfunc/kretfunc on those and on every function exact mode probes (its plan here)"),
];
/// Chain sides whose JSON is the bench chain's, not an execprof report.
const BENCH_JSON: &[&str] = &[
    "untraced",
    "perf-record",
    "perf-trace",
    "bpftrace",
    "agent",
    "agent-bare",
    "bpftrace-hist",
    "bpftrace-empty",
    "bpftrace-empty-exact",
];
/// Sides where `execprof agent` counted the whole machine; its report is `SIDE.agent.json`
/// beside the chain's JSON (the failed-attempt loop's is the side's own JSON).
const AGENT_SIDES: &[&str] = &["agent", "agent-bare", "enoent-agent"];
/// Budget sides: run once each with the BPF run-time statistics on (`--probe-costs`).
const BUDGET_SIDES: &[(&str, &str)] = &[
    ("budget-exact", "exact mode (--mode exact --sample-hz 0)"),
    ("budget-bare", "the boundaries alone, fentry/fexit"),
    ("budget-bare-tracepoint", "the boundaries alone, raw tracepoints"),
    ("budget-agent", "execprof agent --all --sample-hz 0 (fentry/fexit)"),
    ("profile-default", "where the guest's instructions go under execprof run (default mode): perf record -a"),
    ("profile-bare", "where the guest's instructions go under execprof run, the boundaries alone: perf record -a"),
    (
        "profile-agent",
        "where a failed exec's instructions go under execprof agent --all --sample-hz 0: perf record -a around the failed-attempt loop",
    ),
    (
        "profile-enoent-bare",
        "where a failed exec's instructions go under execprof run, the boundaries alone: perf record -a around the failed-attempt loop",
    ),
];
/// Lines of a profile side's symbol table printed (its whole table is in the results directory).
const PROFILE_LINES: usize = 45;
/// getpid sides.
const GETPID_SIDES: &[(&str, &str)] = &[
    ("getpid-untraced", "nothing traced"),
    ("getpid-fentry", "execprof tracing `sleep`, fentry/fexit boundaries"),
    ("getpid-tracepoint", "execprof tracing `sleep`, raw tracepoint boundaries"),
    ("getpid-syscall-events", "execprof tracing `sleep`, per-syscall event boundaries"),
    ("getpid-perf-trace", "perf trace -e execve tracing `sleep`"),
    ("getpid-bpftrace", "bpftrace's 3 probes, machine-wide"),
    ("getpid-agent", "execprof agent --all (default: fentry/fexit, 99 Hz samples)"),
    ("getpid-bpftrace-hist", "the bpftrace histogram script (kfunc/kretfunc), machine-wide"),
];
/// Failed-attempt loop sides: the loop untraced and under `execprof run`.
const ENOENT_SIDES: &[(&str, &str)] = &[
    ("enoent-untraced", "untraced"),
    ("enoent-bare", "execprof run --mode sampled --sample-hz 1 (the boundaries alone: fentry/fexit)"),
    ("enoent-bare-tracepoint", "execprof run --mode sampled --sample-hz 1 --boundaries tracepoint"),
    ("enoent-default", "execprof run (default here: exact + sampled at 999 Hz)"),
    ("enoent-agent", "execprof agent --all (default: fentry/fexit, 99 Hz samples)"),
    ("enoent-bpftrace-hist", "the bpftrace histogram script (kfunc/kretfunc)"),
    ("enoent-bpftrace-empty", "the same kfunc/kretfunc with empty bodies (the trampolines' dispatch alone)"),
];
/// What the peers need on this machine: the guest runs them from this machine's userland.
const PEER_PACKAGES: &[&str] = &["linux-perf", "bpftrace"];

/// How much each side runs.
pub struct Sizes {
    pub steps: u32,
    pub rounds: u32,
    pub getpid_calls: u32,
    pub enoent_calls: u32,
}

/// The untraced sides every other side is compared with: always run.
const BASELINES: &[&str] = &["untraced", "getpid-untraced", "enoent-untraced"];

/// `sides` without those `only` leaves out (an empty `only` keeps all).
fn chosen(sides: &'static [(&'static str, &'static str)], only: &[String]) -> Vec<(&'static str, &'static str)> {
    sides.iter().filter(|(tag, _)| only.is_empty() || BASELINES.contains(tag) || only.iter().any(|o| o == tag)).copied().collect()
}

pub fn overhead(sizes: Sizes, only: &[String]) -> Result<()> {
    let Sizes { steps, rounds, getpid_calls, enoent_calls } = sizes;
    let known: Vec<&str> = CHAIN_SIDES.iter().chain(GETPID_SIDES).chain(ENOENT_SIDES).chain(BUDGET_SIDES).map(|(t, _)| *t).collect();
    if let Some(bad) = only.iter().find(|o| !known.contains(&o.as_str())) {
        bail!("--only: no side {bad:?}; the sides are {}", known.join(", "));
    }
    let (chain_sides, getpid_sides, enoent_sides, budget_sides) =
        (chosen(CHAIN_SIDES, only), chosen(GETPID_SIDES, only), chosen(ENOENT_SIDES, only), chosen(BUDGET_SIDES, only));
    let tags = |v: &[(&str, &str)]| v.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(" ");
    crate::setup::apt_packages(PEER_PACKAGES)?;
    // The portable build: what ships, and what CI's host tests and guests ran.
    let execprof = crate::dist::portable_binary(crate::vm::Arch::X86_64)?.canonicalize()?;
    let work = cache_dir().join("overhead");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let getpid = work.join("getpid");
    crate::run(Command::new("gcc").args(["-O2", "-static", "-o"]).arg(&getpid).arg("benches/getpid.c"))
        .context("building benches/getpid.c statically (gcc and the static C library: `cargo xtask setup`)")?;
    let enoent = work.join("enoent");
    crate::run(Command::new("gcc").args(["-O2", "-static", "-o"]).arg(&enoent).arg("benches/enoent.c"))
        .context("building benches/enoent.c statically (gcc and the static C library: `cargo xtask setup`)")?;
    let userland = crate::userland::image(crate::vm::Arch::X86_64)?;
    let image = crate::kernel::lab_kernel()?;
    let busybox = fetch_package("busybox-static")?.join("root/bin/busybox");
    let results = ResultsDisk::create(work.join("results.img"), 256)?;
    let mut c = initramfs_base(&execprof, &busybox, guest::OVERHEAD_INIT)?;
    c.file("getpid", &std::fs::read(&getpid)?, 0o755);
    c.file("enoent", &std::fs::read(&enoent)?, 0o755);
    let env = GuestEnv::default()
        .set("STEPS", steps)
        .set("ROUNDS", rounds)
        .set("GETPID_CALLS", getpid_calls)
        .set("ENOENT_CALLS", enoent_calls)
        .set("SIDES", format!("{} {} {}", tags(&chain_sides), tags(&getpid_sides), tags(&enoent_sides)))
        .set("BUDGETS", tags(&budget_sides))
        .set("LAB_DEV", guest::virtio_disk(0))
        .set("USERLAND_DEV", guest::virtio_disk(1))
        .set("RESULTS_DEV", guest::virtio_disk(2));
    c.file("guest.env", env.as_bytes(), 0o644);
    let initrd = work.join("initramfs.cpio");
    std::fs::write(&initrd, c.finish())?;
    eprintln!(
        "xtask: overhead: {rounds} rounds of {} sides inside the lab kernel under -icount (TCG: minutes)",
        chain_sides.len() + getpid_sides.len() + enoent_sides.len()
    );
    crate::lab::boot_lab(&image, &initrd, &[userland], &results, &work, Duration::from_secs(3600))?;
    let console = work.join("console.log");
    let result = results.read_back(&work.join("results"), &console)?;
    if !result.finished() {
        bail!("the overhead guest did not finish; console in {}", console.display());
    }
    let dir = work.join("results");
    let mut failed = Vec::new();
    for r in 1..=rounds {
        for (tag, _) in chain_sides.iter().chain(&getpid_sides).chain(&enoent_sides) {
            if result.code(&format!("rc_r{r}-{tag}")) != Some(0) {
                failed.push(format!("r{r}-{tag}"));
            }
        }
    }
    for (tag, _) in &budget_sides {
        if result.code(&format!("rc_{tag}")) != Some(0) {
            failed.push((*tag).to_owned());
        }
    }
    if !failed.is_empty() {
        bail!("runs failed inside the guest: {} (console in {})", failed.join(", "), console.display());
    }
    println!(
        "overhead: kernel {} under QEMU/TCG -icount shift=0 (1 guest ns = 1 instruction); chain {steps} steps × 7 attempts, {rounds} rounds",
        result.get("kernel").unwrap_or_default()
    );
    // Per step: (the chain's own CPU time: its instructions, probes run in its context
    // included; its wall time, which on the guest's one vCPU also holds the tracer's user space).
    let per_step = |tag: &str, r: u32| -> Result<(f64, f64, Option<f64>)> {
        let path = dir.join(format!("r{r}-{tag}.json"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let (cpu, wall, enoent) = if BENCH_JSON.contains(&tag) {
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let round = &v["rounds"][0];
            let ns = |k: &str| round[k].as_u64().with_context(|| format!("bench chain JSON without rounds[0].{k}"));
            let enoent = if AGENT_SIDES.contains(&tag) { Some(enoent_mean(&dir.join(format!("r{r}-{tag}.agent.json")))?) } else { None };
            (ns("user_ns")? + ns("sys_ns")?, ns("wall_ns")?, enoent)
        } else {
            let report: RunReport = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
            if !report.complete {
                bail!("{} is incomplete: the figure would be wrong", path.display());
            }
            let enoent = report.analysis.outcomes.iter().find(|o| o.outcome == Outcome::Enoent).and_then(|o| o.latency).map(|l| l.mean_ns);
            (report.command_cpu_ns, report.command_wall_ns, enoent)
        };
        Ok((cpu as f64 / f64::from(steps), wall as f64 / f64::from(steps), enoent))
    };
    let getpid = |tag: &str, r: u32| -> Result<f64> {
        let path = dir.join(format!("r{r}-{tag}.txt"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        text.trim().parse().with_context(|| format!("{}: not a number: {text:?}", path.display()))
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let all = |f: &dyn Fn(&str, u32) -> Result<f64>, tag: &str| -> Result<Vec<f64>> { (1..=rounds).map(|r| f(tag, r)).collect() };
    let chain: Vec<Vec<(f64, f64, Option<f64>)>> =
        chain_sides.iter().map(|(tag, _)| (1..=rounds).map(|r| per_step(tag, r)).collect::<Result<Vec<_>>>()).collect::<Result<_>>()?;
    let (cpu0, wall0) = (median(chain[0].iter().map(|x| x.0).collect()), median(chain[0].iter().map(|x| x.1).collect()));
    println!(
        "\n| chain: side | instructions per step run by the chain (median) | per round | × untraced | wall per step, with the tracer's user space (one vCPU) | × untraced | failed attempt (ENOENT), mean as measured |\n|---|---|---|---|---|---|---|"
    );
    for ((_, what), v) in chain_sides.iter().zip(&chain) {
        let shown: Vec<String> = v.iter().map(|x| format!("{:.0}", x.0)).collect();
        let (cpu, wall) = (median(v.iter().map(|x| x.0).collect()), median(v.iter().map(|x| x.1).collect()));
        let enoent = v.iter().filter_map(|x| x.2).collect::<Vec<f64>>();
        let enoent = if enoent.is_empty() { "—".to_owned() } else { format!("{:.0}", median(enoent)) };
        println!("| {what} | {cpu:.0} | {} | {:.3} | {wall:.0} | {:.3} | {enoent} |", shown.join(", "), cpu / cpu0, wall / wall0);
    }
    let base = median(all(&getpid, "getpid-untraced")?);
    println!(
        "\n| getpid of an untraced process, beside | instructions per call (median) | per round | added | × untraced |\n|---|---|---|---|---|"
    );
    for (tag, what) in &getpid_sides {
        let v = all(&getpid, tag)?;
        let shown: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
        let m = median(v);
        println!("| {what} | {m:.1} | {} | {:+.1} | {:.3} |", shown.join(", "), m - base, m / base);
    }
    // The tracer's share of a failed attempt: instructions per failed execve in a loop of
    // them, untraced and traced; what tracing adds, as a share of the traced attempt.
    let base = median(all(&getpid, "enoent-untraced")?);
    println!(
        "\n| failed execve (ENOENT) in a loop, under | instructions per attempt (median) | per round | added by the tracer | tracer's share of the attempt | ENOENT as execprof measured it (mean) |\n|---|---|---|---|---|---|"
    );
    for (tag, what) in &enoent_sides {
        let v = all(&getpid, tag)?;
        let shown: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        let m = median(v);
        // Only execprof measures the attempt itself.
        let measured = if *tag == "enoent-untraced" || tag.contains("bpftrace") {
            "—".to_owned()
        } else {
            let means = (1..=rounds).map(|r| enoent_mean(&dir.join(format!("r{r}-{tag}.json")))).collect::<Result<Vec<f64>>>()?;
            format!("{:.0}", median(means))
        };
        println!("| {what} | {m:.0} | {} | {:+.0} | {:.1}% | {measured} |", shown.join(", "), m - base, 100.0 * (m - base) / m);
    }
    for (tag, what) in &budget_sides {
        if tag.starts_with("profile-") {
            print_profile(what, &dir, tag)?;
            continue;
        }
        if *tag == "budget-agent" {
            let (programs, attempts) = agent_costs(&dir.join(format!("{tag}.agent.json")))?;
            print_budget(what, &programs, attempts, steps);
            continue;
        }
        let path = dir.join(format!("{tag}.json"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let report: RunReport = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let Some(cost) = &report.probe_cost else {
            bail!("{what}: the run kept no BPF run-time statistics (--probe-costs), so there is no budget to show");
        };
        print_budget(what, &cost.programs, report.analysis.attempts, steps);
    }
    println!(
        "\nicount counts instructions, not time: cache misses, memory latency and branch mispredictions cost nothing here, and each iteration of a `rep movs`/`rep stos` counts (a byte copied by `rep movsb` is an instruction)."
    );
    Ok(())
}

/// A profile side's tables: by command and object, the top symbols, then execprof's own top
/// symbols, or the failed-attempt loop's for `profile-agent` and `profile-enoent-bare` (perf's
/// own report, its comment lines left out; under icount a sample's share is a share of
/// instructions).
fn print_profile(what: &str, dir: &Path, tag: &str) -> Result<()> {
    println!("\n{what} (samples' shares are instructions' shares):\n\n```");
    for (file, limit) in
        [(format!("{tag}.dso.txt"), usize::MAX), (format!("{tag}.txt"), PROFILE_LINES), (format!("{tag}.execprof.txt"), PROFILE_LINES)]
    {
        let path = dir.join(&file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
        if lines.is_empty() {
            bail!("{}: perf report printed no samples", path.display());
        }
        for l in lines.iter().take(limit) {
            println!("{}", l.trim_end());
        }
        println!();
    }
    println!("```\n(whole tables: {})", dir.display());
    Ok(())
}

/// The mean ENOENT latency in the execprof report at `path`: `run`'s or `agent`'s (whose
/// outcomes are errno names in lower case, `run`'s classes among them).
fn enoent_mean(path: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if v.get("series").is_some() {
        if v["complete"] != serde_json::Value::Bool(true) {
            bail!("{} is incomplete (the agent lost or folded calls): the figure would be wrong", path.display());
        }
        return v["analysis"]["outcomes"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["outcome"] == "enoent"))
            .and_then(|o| o["latency"]["mean_ns"].as_f64())
            .with_context(|| format!("{}: no failed attempt (ENOENT) counted", path.display()));
    }
    let report: RunReport = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if !report.complete {
        bail!("{} is incomplete: the figure would be wrong", path.display());
    }
    report
        .analysis
        .outcomes
        .iter()
        .find(|o| o.outcome == Outcome::Enoent)
        .and_then(|o| o.latency.as_ref())
        .map(|l| l.mean_ns)
        .with_context(|| format!("{}: no failed attempt (ENOENT) measured", path.display()))
}

/// The agent's programs' runs and run time (`--probe-costs`) and the exec attempts it counted.
fn agent_costs(path: &Path) -> Result<(Vec<ProgramCost>, u64)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if v["complete"] != serde_json::Value::Bool(true) {
        bail!("{} is incomplete (the agent lost or folded calls): the budget would be wrong", path.display());
    }
    let programs: Vec<ProgramCost> =
        serde_json::from_value(v["programs"].clone()).with_context(|| format!("{}: no program costs", path.display()))?;
    if programs.is_empty() {
        bail!("{}: the agent kept no BPF run-time statistics (--probe-costs), so there is no budget to show", path.display());
    }
    let attempts = v["analysis"]["attempts"].as_u64().with_context(|| format!("{}: no attempts count", path.display()))?;
    Ok((programs, attempts))
}

/// One side's instruction budget, hook by hook: each of execprof's programs' runs and
/// instructions (the kernel's BPF run-time statistics, whose nanoseconds are instructions
/// under icount: the program and the helpers it calls, and half a clock read of the
/// statistics' own; not the dispatch into it, which is the rest of the chain's added
/// instructions).
fn print_budget(what: &str, programs: &[ProgramCost], attempts: u64, steps: u32) {
    let attempts = attempts.max(1) as f64;
    println!("\n| budget: {what} | runs per step | instructions per run | per step | per exec attempt |\n|---|---|---|---|---|");
    let mut total = 0.0;
    for p in programs {
        let per_step = p.run_ns as f64 / f64::from(steps);
        total += p.run_ns as f64;
        println!(
            "| {} | {:.2} | {:.0} | {per_step:.0} | {:.0} |",
            p.program,
            p.runs as f64 / f64::from(steps),
            p.ns_per_run(),
            p.run_ns as f64 / attempts
        );
    }
    println!("| all programs | | | {:.0} | {:.0} |", total / f64::from(steps), total / attempts);
}
