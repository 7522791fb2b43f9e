#!/usr/bin/env python3
"""What tracing costs the traced workload: the built-in exec chain's own wall time, untraced
vs under `execprof run`, measured side by side (alternating rounds) in one invocation.

Both sides time the same span: from starting the chain process to reaping it. Untraced, this
script forks and execs the chain exactly as execprof's launcher does (argv[0] a bare name,
PATH the only environment variable, k empty miss directories before the chain's own).

Usage (as root, after `cargo build --release`):
    benches/overhead.py [--steps 20000] [--misses 6] [--rounds 7]
Prints per-round times and the ratio of medians (traced / untraced).
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile, time

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


def traced(steps, misses, workdir, extra):
    out = os.path.join(workdir, "run.json")
    p = subprocess.run([EXECPROF, "run", "--steps", str(steps), "--misses", str(misses), "--json", out] + extra,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if p.returncode != 0:
        sys.exit(f"execprof failed: {p.returncode}")
    with open(out) as f:
        report = json.load(f)
    lost = sum(n for _, n in report["losses"])
    if lost:
        sys.exit(f"execprof lost {lost} events; the measurement would be wrong")
    return report["command_wall_ns"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--misses", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--execprof-args", default="", help="extra `execprof run` options, e.g. '--sample-hz 0'")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: tracing needs CAP_BPF and CAP_PERFMON")
    chain = chain_binary()
    base, trace = [], []
    with tempfile.TemporaryDirectory(prefix="execprof-bench.") as work:
        untraced(chain, 100, a.misses, work)  # warm the page cache and dentries
        for r in range(a.rounds):
            # Alternate which side goes first so drift in the machine's load cancels.
            order = [("untraced", base), ("traced", trace)] if r % 2 == 0 else [("traced", trace), ("untraced", base)]
            for name, sink in order:
                ns = untraced(chain, a.steps, a.misses, work) if name == "untraced" else traced(a.steps, a.misses, work, a.execprof_args.split())
                sink.append(ns)
            print(f"round {r + 1}: untraced {base[-1] / 1e6:8.1f} ms   traced {trace[-1] / 1e6:8.1f} ms", flush=True)
    mb, mt = statistics.median(base), statistics.median(trace)
    per_step = lambda ns: ns / a.steps / 1e3
    print(f"\nchain: {a.steps} steps, {a.misses} misses per step, {a.rounds} rounds, execprof run {a.execprof_args}")
    print(f"untraced median {mb / 1e6:.1f} ms ({per_step(mb):.1f} µs/step), min {min(base) / 1e6:.1f} ms")
    print(f"traced   median {mt / 1e6:.1f} ms ({per_step(mt):.1f} µs/step), min {min(trace) / 1e6:.1f} ms")
    print(f"overhead: traced/untraced = {mt / mb:.3f} (medians), {min(trace) / min(base):.3f} (minima)")


if __name__ == "__main__":
    main()
