//! `execprof bench`: the classic exec benchmarks, run without tracing and timed by
//! execprof's own clock, as the mailing-list threads ran them (plus rounds, so the spread
//! between runs is visible instead of one number).
use std::time::Instant;

use anyhow::{Result, bail};

use crate::{
    launch::SuspendedChild,
    report::human_ns,
    workload::{ChainSpec, ChainWorkload},
};

/// One round: wall time from release to reap, and the children's CPU time (getrusage).
#[derive(Clone, Copy, Debug)]
pub struct ChainRound {
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
}

fn children_cpu_ns() -> (u64, u64) {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

pub fn run_chain_once(workload: &ChainWorkload) -> Result<ChainRound> {
    let before = children_cpu_ns();
    let child = SuspendedChild::spawn(&workload.command())?;
    let started = Instant::now();
    let status = match child.release() {
        Ok(running) => running.wait()?,
        Err((running, failure)) => {
            running.wait()?;
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

pub fn chain(spec: ChainSpec, rounds: u32) -> Result<()> {
    if rounds == 0 {
        return Err(crate::exit::Failure::usage("--rounds must be at least 1").into());
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
    println!("  spread: wall {}–{} ({:+.1}% around the median)", human_ns(lo as f64), human_ns(hi as f64), 100.0 * (hi - lo) as f64 / (2.0 * w.max(1) as f64));
    println!("  (user and system time come from getrusage(RUSAGE_CHILDREN): the kernel's tick-sampled accounting)");
    Ok(())
}

pub fn spawn(args: &crate::cli::BenchSpawnArgs) -> Result<()> {
    use crate::spawn::{self, MemoryShape, Method};
    if args.iterations == 0 {
        return Err(crate::exit::Failure::usage("--iterations must be at least 1").into());
    }
    let methods: Vec<Method> = if args.methods.is_empty() { Method::ALL.to_vec() } else { args.methods.clone() };
    // The child is the built-in chain binary in its "stamp" role: no libc start-up, so its
    // first instruction reads the clock.
    let child = ChainWorkload::prepare(ChainSpec::new(0, 0))?;
    let shape = MemoryShape { bytes: args.mem, fragment: args.fragment, dirty: args.dirty };
    let report = spawn::run(&methods, shape, args.iterations, &child)?;
    print!("{}", spawn::render(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n").map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}
