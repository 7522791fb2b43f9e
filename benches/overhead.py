#!/usr/bin/env python3
"""What tracing costs the traced workload: the built-in exec chain's own wall time, untraced
vs under `execprof run`, measured side by side (alternating rounds) in one invocation.

Both sides time the same span: from starting the chain process to reaping it. Untraced, this
script forks and execs the chain exactly as execprof's launcher does (argv[0] a bare name,
PATH the only environment variable, k empty miss directories before the chain's own).

Usage (as root, after `cargo build --release`):
    benches/overhead.py [--steps 20000] [--misses 6] [--rounds 7] [--execprof PATH ...]
Prints per-round times, the ratio of medians (traced / untraced), and the median of the
per-round ratios (each traced run against the untraced run of its own round, which cancels
the machine's slow drift) with a bootstrap 95% interval. Several `--execprof` binaries (say,
before and after a change) are measured side by side in the same rounds.
"""
import argparse, glob, json, os, random, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXECPROF = os.path.join(ROOT, "target", "release", "execprof")


def chain_binary():
    found = glob.glob(os.path.join(ROOT, "target", "release", "build", "profiler-*", "out", "execprof-chain"))
    if not found:
        sys.exit("no built chain: run `cargo build --release` first")
    return max(found, key=os.path.getmtime)


def untraced(chain, steps, misses, workdir):
    dirs = [os.path.join(workdir, f"miss{i}") for i in range(1, misses + 1)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    exe = os.path.join(bindir, "execprof-chain")
    if not os.path.exists(exe):
        with open(chain, "rb") as src, open(exe, "wb") as dst:
            dst.write(src.read())
        os.chmod(exe, 0o755)
    env = {"PATH": ":".join(dirs + [bindir])}
    t0 = time.perf_counter_ns()
    p = subprocess.run(["execprof-chain", str(steps)], executable=exe, env=env)
    t1 = time.perf_counter_ns()
    if p.returncode != 0:
        sys.exit(f"untraced chain failed: {p.returncode}")
    return t1 - t0


def traced(execprof, steps, misses, workdir, extra):
    out = os.path.join(workdir, "run.json")
    p = subprocess.run([execprof, "run", "--steps", str(steps), "--misses", str(misses), "--json", out] + extra,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if p.returncode != 0:
        sys.exit(f"execprof failed: {p.returncode}")
    with open(out) as f:
        report = json.load(f)
    lost = sum(n for _, n in report["losses"])
    if lost:
        sys.exit(f"execprof lost {lost} events; the measurement would be wrong")
    return report["command_wall_ns"]


def paired_ratio(base, trace, seed=1):
    """Median of per-round ratios and its bootstrap 95% interval."""
    ratios = [t / b for b, t in zip(base, trace)]
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), boots[int(0.025 * len(boots))], boots[int(0.975 * len(boots)) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--misses", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--execprof-args", default="", help="extra `execprof run` options, e.g. '--sample-hz 0'")
    ap.add_argument("--execprof", action="append", help="execprof binary to measure (repeatable; default: this tree's release build)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: tracing needs CAP_BPF and CAP_PERFMON")
    binaries = a.execprof or [EXECPROF]
    for b in binaries:
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is not an executable: run `cargo build --release` or pass --execprof PATH")
    chain = chain_binary()
    base, trace = [], {b: [] for b in binaries}
    sides = ["untraced"] + binaries
    with tempfile.TemporaryDirectory(prefix="execprof-bench.") as work:
        untraced(chain, 100, a.misses, work)  # warm the page cache and dentries
        for r in range(a.rounds):
            # Rotate which side goes first so drift in the machine's load cancels.
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            times = {}
            for side in order:
                if side == "untraced":
                    times[side] = untraced(chain, a.steps, a.misses, work)
                else:
                    times[side] = traced(side, a.steps, a.misses, work, a.execprof_args.split())
            base.append(times["untraced"])
            for b in binaries:
                trace[b].append(times[b])
            print(f"round {r + 1}: " + "   ".join(f"{'untraced' if s == 'untraced' else os.path.basename(s)} {times[s] / 1e6:8.1f} ms" for s in sides), flush=True)
    mb = statistics.median(base)
    per_step = lambda ns: ns / a.steps / 1e3
    print(f"\nchain: {a.steps} steps, {a.misses} misses per step, {a.rounds} rounds, execprof run {a.execprof_args}")
    print(f"untraced median {mb / 1e6:.1f} ms ({per_step(mb):.1f} µs/step), min {min(base) / 1e6:.1f} ms")
    for b in binaries:
        mt = statistics.median(trace[b])
        med, lo, hi = paired_ratio(base, trace[b])
        print(f"{b}:")
        print(f"  traced median {mt / 1e6:.1f} ms ({per_step(mt):.1f} µs/step), min {min(trace[b]) / 1e6:.1f} ms")
        print(f"  overhead: traced/untraced = {mt / mb:.3f} (medians), {min(trace[b]) / min(base):.3f} (minima), "
              f"{med:.3f} [95% CI {lo:.3f}-{hi:.3f}] (median of per-round ratios)")


if __name__ == "__main__":
    main()
