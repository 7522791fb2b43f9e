//! `execprof bench`: the classic exec benchmarks, run without tracing and timed by
//! execprof's own clock, as the mailing-list threads ran them (plus rounds, so the spread
//! between runs is visible instead of one number).
use std::time::Instant;

use anyhow::{Result, bail};

use crate::{
    assemble::events::{Event, EventSink, ForkCall},
    launch::child::SuspendedChild,
    launch::workload::ChainWorkload,
    model::chain::ChainSpec,
    pipeline::Pipeline,
    report::human_ns,
    source::live::drain,
};

/// One round: wall time from release to reap, and the children's CPU time (getrusage).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChainRound {
    /// Wall time of the round, from the chain's release to its reap, in ns.
    pub wall_ns: u64,
    /// User CPU time of the chain's processes in the round, in ns.
    pub user_ns: u64,
    /// System CPU time of the chain's processes in the round, in ns.
    pub sys_ns: u64,
}

use crate::launch::child::children_cpu_ns;

/// Runs the chain once, untraced, and times it.
pub fn run_chain_once(workload: &ChainWorkload) -> Result<ChainRound> {
    let before = children_cpu_ns();
    let child = SuspendedChild::spawn(&workload.command())?;
    let started = Instant::now();
    let status = match child.release() {
        Ok(mut running) => running.wait_blocking()?,
        Err((mut running, failure)) => {
            running.wait_blocking()?;
            return Err(failure.into());
        }
    };
    let wall_ns = started.elapsed().as_nanos() as u64;
    if status.shell_code() != 0 {
        bail!("the chain failed ({status}); run `execprof run` on it to see which exec failed");
    }
    let after = children_cpu_ns();
    Ok(ChainRound { wall_ns, user_ns: after.0 - before.0, sys_ns: after.1 - before.1 })
}

/// `json`: also write every round (the same span `run` reports as the command's wall time:
/// release of the suspended child to its exit, so benchmarks compare like with like).
pub fn chain(spec: ChainSpec, rounds: u32, json: Option<&std::path::Path>) -> Result<()> {
    if rounds == 0 {
        return Err(crate::model::failure::Failure::usage("--rounds must be at least 1").into());
    }
    if spec.lookup_first == Some(true) {
        return lookup_first(spec, rounds, json);
    }
    let workload = ChainWorkload::prepare(spec)?;
    println!("execprof bench chain (untraced): {}; {rounds} rounds", spec.describe());
    println!("  {:<7} {:>9} {:>10} {:>10} {:>10}", "round", "wall", "wall/step", "user/step", "sys/step");
    let per = |ns: u64| human_ns(ns as f64 / f64::from(spec.steps.max(1)));
    let mut all = Vec::new();
    for r in 1..=rounds {
        let x = run_chain_once(&workload)?;
        println!("  {:<7} {:>9} {:>10} {:>10} {:>10}", r, human_ns(x.wall_ns as f64), per(x.wall_ns), per(x.user_ns), per(x.sys_ns));
        all.push(x);
    }
    let median = |f: fn(&ChainRound) -> u64| {
        let mut v: Vec<u64> = all.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (w, u, s) = (median(|x| x.wall_ns), median(|x| x.user_ns), median(|x| x.sys_ns));
    println!("  {:<7} {:>9} {:>10} {:>10} {:>10}", "median", human_ns(w as f64), per(w), per(u), per(s));
    let (lo, hi) = (all.iter().map(|x| x.wall_ns).min().unwrap_or(0), all.iter().map(|x| x.wall_ns).max().unwrap_or(0));
    println!(
        "  spread: wall {}–{} ({:+.1}% around the median)",
        human_ns(lo as f64),
        human_ns(hi as f64),
        100.0 * (hi - lo) as f64 / (2.0 * w.max(1) as f64)
    );
    println!("  (user and system time come from getrusage(RUSAGE_CHILDREN): the kernel's tick-sampled accounting)");
    if let Some(path) = json {
        let v = serde_json::json!({ "spec": spec, "rounds": all });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n").map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Fork-family calls of one process, as the assembler completes them.
struct ForkCallsOf {
    tgid: u32,
    calls: Vec<ForkCall>,
}

impl EventSink for ForkCallsOf {
    fn event(&mut self, event: &Event) {
        if let Event::ForkCall(c) = event
            && c.tgid == self.tgid
        {
            self.calls.push(c.clone());
        }
    }
}

/// Runs `work` on a thread of its own while the ring buffer is drained into the fork calls
/// of this process (`bench spawn --kernel`).
fn with_own_fork_calls<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<(T, Vec<ForkCall>, u64)> {
    use crate::{
        kernel::layout::TaskLayout,
        kernel::probes::RUN_PROBES,
        kernel::tracer::{Tracer, TracerOptions},
    };
    crate::kernel::privileges::require_tracing_privileges("bench spawn --kernel")?;
    let layout = TaskLayout::from_running_kernel()?;
    let mut tracer = Tracer::load(
        &layout,
        RUN_PROBES,
        &TracerOptions {
            ring_bytes: 8 << 20,
            verbose: false,
            scope: crate::kernel::scope::KernelScope::tree(),
            argv: false,
            boundaries: Default::default(),
            attached_scope: false,
            agent: None,
            call_sums: false,
        },
    )?;
    tracer.trace_process(std::process::id())?;
    let ring = tracer.take_ring()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut pipeline = Pipeline::with_sink(ForkCallsOf { tgid: std::process::id(), calls: Vec::new() }, None);
    let result = runtime.block_on(async {
        let mut ring = crate::source::live::watch(ring)?;
        let mut task = tokio::task::spawn_blocking(work);
        let mut poll = tokio::time::interval(std::time::Duration::from_millis(10));
        loop {
            tokio::select! {
                done = &mut task => {
                    drain(ring.get_mut(), &mut pipeline);
                    break done.map_err(|e| anyhow::anyhow!("the benchmark thread failed: {e}"))?;
                }
                _ = poll.tick() => drain(ring.get_mut(), &mut pipeline),
            }
        }
    })?;
    let d = pipeline.drain();
    // What could not be decoded is lost like what the kernel dropped: counted, never skipped.
    let lost = tracer.losses()?.with_unjoined(&d.unjoined).total() + d.undecodable;
    Ok((result, d.sink.calls, lost))
}

/// Per method: the benchmark's own spawn-call time beside the kernel's syscall time for the
/// same calls (matched by time), and the difference (the C library's share and the return).
pub fn driver_vs_kernel(report: &crate::commands::spawn::SpawnReport, calls: &[ForkCall]) -> String {
    use std::fmt::Write as _;

    use crate::analysis::stats::Distribution;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nSpawn call: the benchmark's clock vs the kernel's (syscall enter to exit), medians; difference: median of the per-call differences"
    );
    let _ = writeln!(o, "  {:<22} {:>8} {:>12} {:>12} {:>12}  syscall", "method", "matched", "benchmark", "kernel", "difference");
    for m in &report.results {
        let mut driver = Vec::new();
        let mut kernel = Vec::new();
        let mut differences: Vec<i64> = Vec::new();
        let mut syscalls = std::collections::BTreeSet::new();
        for &(t0, t_ret) in &m.calls {
            // The spawn syscall the call made: inside the call's window; a C library may
            // make one spawn syscall per call.
            if let Some(k) = calls.iter().find(|c| c.enter_ns >= t0 && c.exit_ns <= t_ret) {
                driver.push(t_ret - t0);
                kernel.push(k.duration_ns());
                differences.push((t_ret - t0) as i64 - k.duration_ns() as i64);
                syscalls.insert(k.syscall.label());
            }
        }
        let (Some(d), Some(k)) = (Distribution::of(driver), Distribution::of(kernel)) else {
            let _ = writeln!(o, "  {:<22} {:>8}", m.method.label(), 0);
            continue;
        };
        // The median of the per-call differences, not the difference of the medians.
        differences.sort_unstable();
        let difference = differences[differences.len() / 2];
        let _ = writeln!(
            o,
            "  {:<22} {:>8} {:>12} {:>12} {:>12}  {}",
            m.method.label(),
            d.count,
            human_ns(d.p50_ns as f64),
            human_ns(k.p50_ns as f64),
            human_ns(difference as f64),
            syscalls.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    o
}

/// `execprof bench spawn`: what to run and how.
#[derive(Clone, Debug)]
pub struct SpawnConfig {
    /// Empty: all four.
    pub methods: Vec<crate::commands::spawn::Method>,
    /// Parent memory mapped first, and its shape (spawntime.c -n, -r, -d).
    pub mem: u64,
    /// Mapped as alternating read-only/read-write pages.
    pub fragment: bool,
    /// The writable pages touched first.
    pub dirty: bool,
    /// Spawns per method (at least 1).
    pub iterations: u32,
    /// Also write the results as JSON to this file.
    pub json: Option<std::path::PathBuf>,
    /// Also trace the spawn syscalls in the kernel.
    pub kernel: bool,
}

/// `execprof bench spawn`: times each method and prints (and optionally writes) the results.
pub fn spawn(args: &SpawnConfig) -> Result<()> {
    use crate::commands::spawn::{self, MemoryShape, Method};
    let methods: Vec<Method> = if args.methods.is_empty() { Method::ALL.to_vec() } else { args.methods.clone() };
    // The child is the built-in chain binary in its "stamp" role: no libc start-up, so its
    // first instruction reads the clock.
    let child = ChainWorkload::prepare(ChainSpec::new(0, 0))?;
    let shape = MemoryShape { bytes: args.mem, fragment: args.fragment, dirty: args.dirty };
    let iterations = args.iterations;
    let (report, kernel) = if args.kernel {
        let (methods, child) = (methods.clone(), child);
        let (report, calls, lost) = with_own_fork_calls(move || spawn::run(&methods, shape, iterations, &child))?;
        (report, Some((calls, lost)))
    } else {
        (spawn::run(&methods, shape, args.iterations, &child)?, None)
    };
    print!("{}", spawn::render(&report, kernel.is_some()));
    if let Some((calls, lost)) = kernel {
        print!("{}", driver_vs_kernel(&report, &calls));
        if lost > 0 {
            println!("  warning: {lost} kernel events were lost; the kernel column may miss calls");
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The median of `values` with a distribution-free 95% interval from order statistics (exact
/// binomial ranks); with fewer than 6 values no such interval exists and the range is given.
pub fn median_with_interval(values: &[f64]) -> (f64, f64, f64, &'static str) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (0.0, 0.0, 0.0, "no values");
    }
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    // Largest k with P(Binomial(n, ½) < k) ≤ 2.5%: [x(k), x(n+1-k)] covers the median ≥ 95%.
    let mut cdf = 0.0;
    let mut k = 0;
    let mut coeff = 1.0f64;
    for i in 0..n {
        // P(X = i) = C(n, i) / 2^n
        cdf += coeff / 2f64.powi(n as i32);
        if cdf > 0.025 {
            break;
        }
        k = i + 1;
        coeff = coeff * (n - i) as f64 / (i + 1) as f64;
    }
    if k == 0 {
        return (median, v[0], v[n - 1], "range (under 6 rounds: too few for a 95% interval)");
    }
    (median, v[k - 1], v[n - k], "95% order-statistic interval")
}

/// `bench chain --lookup-first`: the plain chain (A) and the lookup-first chain (B) in the same
/// rounds, alternating which goes first, so machine drift hits both.
fn lookup_first(spec: ChainSpec, rounds: u32, json: Option<&std::path::Path>) -> Result<()> {
    let sides = [ChainSpec { lookup_first: Some(false), ..spec }, ChainSpec { lookup_first: Some(true), ..spec }];
    let workloads = [ChainWorkload::prepare(sides[0])?, ChainWorkload::prepare(sides[1])?];
    println!("execprof bench chain (untraced): {}; {rounds} rounds of A and B, alternating which runs first", sides[0].describe());
    println!("  A: plain chain (execve each PATH candidate)");
    println!("  B: access(2) each candidate first, execve only the one that is there");
    println!("  {:<7} {:>10} {:>10} {:>10} {:>10} {:>11}", "round", "A wall/st", "B wall/st", "A sys/st", "B sys/st", "B−A wall/st");
    let steps = f64::from(spec.steps.max(1));
    let mut all: Vec<[ChainRound; 2]> = Vec::new();
    for r in 0..rounds {
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut got: [Option<ChainRound>; 2] = [None, None];
        for i in order {
            got[i] = Some(run_chain_once(&workloads[i])?);
        }
        let [Some(a), Some(b)] = got else { unreachable!("both sides ran") };
        let per = |ns: u64| human_ns(ns as f64 / steps);
        println!(
            "  {:<7} {:>10} {:>10} {:>10} {:>10} {:>11}",
            r + 1,
            per(a.wall_ns),
            per(b.wall_ns),
            per(a.sys_ns),
            per(b.sys_ns),
            human_ns((b.wall_ns as f64 - a.wall_ns as f64) / steps)
        );
        all.push([a, b]);
    }
    let per_step = |f: &dyn Fn(&[ChainRound; 2]) -> f64| all.iter().map(|r| f(r) / steps).collect::<Vec<f64>>();
    let (a_med, ..) = median_with_interval(&per_step(&|r| r[0].wall_ns as f64));
    let (b_med, ..) = median_with_interval(&per_step(&|r| r[1].wall_ns as f64));
    let (d, lo, hi, method) = median_with_interval(&per_step(&|r| r[1].wall_ns as f64 - r[0].wall_ns as f64));
    let (ds, slo, shi, _) = median_with_interval(&per_step(&|r| r[1].sys_ns as f64 - r[0].sys_ns as f64));
    println!("  median wall per step: A {}, B {}", human_ns(a_med), human_ns(b_med));
    println!(
        "  B − A per step, median of the rounds' paired differences: wall {} [{} … {}], system time {} [{} … {}] ({method})",
        human_ns(d),
        human_ns(lo),
        human_ns(hi),
        human_ns(ds),
        human_ns(slo),
        human_ns(shi)
    );
    let misses = spec.misses_per_step();
    println!(
        "  per step B pays {} access(2) calls ({} missing, 1 found) and skips {misses} failing execve(2) calls; compare with the kernel-side estimate of `execprof run --fast-path`",
        misses + 1,
        misses
    );
    if let Some(path) = json {
        let rounds_json: Vec<_> = all.iter().map(|[a, b]| serde_json::json!({ "a": a, "b": b })).collect();
        let v = serde_json::json!({
            "a": sides[0], "b": sides[1], "rounds": rounds_json,
            "b_minus_a_wall_ns_per_step": { "median": d, "low": lo, "high": hi, "method": method },
            "b_minus_a_sys_ns_per_step": { "median": ds, "low": slo, "high": shi, "method": method },
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n").map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median_with_interval;

    #[test]
    fn order_statistic_interval_of_a_median() {
        // n = 10: P(X ≤ 1) = 11/1024 ≤ 2.5%, P(X ≤ 2) = 56/1024 > 2.5% → [x(2), x(9)].
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(median_with_interval(&v), (5.5, 2.0, 9.0, "95% order-statistic interval"));
        let (m, lo, hi, method) = median_with_interval(&[3.0, 1.0, 2.0]);
        assert_eq!((m, lo, hi), (2.0, 1.0, 3.0));
        assert!(method.starts_with("range"));
    }
}
