#!/usr/bin/env python3
"""What tracing costs the traced workload: the built-in exec chain's own wall time, untraced
vs under `execprof run`, and under the tools people use instead (perf record, bpftrace),
measured side by side (alternating rounds) in one invocation.

Every side times the same span with the same launcher: execprof's own, from releasing the
suspended chain to its exit. Untraced and under the peers, that is `execprof bench chain
--rounds 1 --json` (perf runs it as its command; bpftrace traces system-wide while it runs);
traced, it is `execprof run`'s `command_wall_ns`.

Usage (as root, after `cargo build --release`):
    benches/overhead.py [--steps 20000] [--misses 6] [--rounds 7] [--execprof PATH ...]
                        [--execprof-args '...'] [--peers perf,perf-a,bpftrace] [--hz 999]
Prints per-round times, and for each side the median of the per-round ratios (each run
against the untraced run of its own round, which cancels the machine's slow drift) with a
bootstrap 95% interval. Several `--execprof` binaries (before and after a change) are
measured side by side in the same rounds.
"""
import argparse, json, os, random, shutil, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXECPROF = os.path.join(ROOT, "target", "release", "execprof")

# The same three probes a bpftrace user would write for this question.
BPFTRACE = """
tracepoint:syscalls:sys_enter_execve { @start[tid] = nsecs; }
tracepoint:syscalls:sys_exit_execve /@start[tid]/ { @lat[args->ret] = hist(nsecs - @start[tid]); delete(@start[tid]); }
tracepoint:sched:sched_process_exec { @execs = count(); }
"""


def bench_chain(prefix, steps, misses, workdir):
    """`execprof bench chain` once, under `prefix` (a profiler command, or nothing)."""
    out = os.path.join(workdir, "bench.json")
    cmd = prefix + [EXECPROF, "bench", "chain", "--steps", str(steps), "--misses", str(misses), "--rounds", "1", "--json", out]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.returncode}")
    with open(out) as f:
        return json.load(f)["rounds"][0]["wall_ns"]


def untraced(steps, misses, workdir):
    return bench_chain([], steps, misses, workdir)


def under_perf(system_wide, hz, steps, misses, workdir):
    data = os.path.join(workdir, "perf.data")
    prefix = ["perf", "record", "-q", "-g", "-F", str(hz), "-o", data] + (["-a"] if system_wide else []) + ["--"]
    return bench_chain(prefix, steps, misses, workdir)


def under_bpftrace(steps, misses, workdir):
    p = subprocess.Popen(["bpftrace", "-e", BPFTRACE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # Wait for the probes to be attached (a marker, not a fixed sleep).
    deadline = time.time() + 30
    for line in p.stdout:
        if line.startswith("Attaching"):
            break
        if time.time() > deadline:
            p.kill()
            sys.exit("bpftrace did not attach within 30 s")
    t = bench_chain([], steps, misses, workdir)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    return t


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
    ap.add_argument("--hz", type=int, default=999, help="sampling rate of the perf peers")
    ap.add_argument("--execprof-args", default="", help="extra `execprof run` options, e.g. '--sample-hz 0'")
    ap.add_argument("--execprof", action="append", help="execprof binary to measure (repeatable; default: this tree's release build)")
    ap.add_argument("--peers", default="", help="comma-separated: perf (perf record -g), perf-a (perf record -a -g), bpftrace")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: tracing needs CAP_BPF and CAP_PERFMON")
    binaries = a.execprof or [EXECPROF]
    for b in binaries + [EXECPROF]:
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is not an executable: run `cargo build --release` or pass --execprof PATH")
    peers = [p for p in a.peers.split(",") if p]
    for p in peers:
        tool = {"perf": "perf", "perf-a": "perf", "bpftrace": "bpftrace"}.get(p)
        if tool is None:
            sys.exit(f"unknown peer {p}: use perf, perf-a or bpftrace")
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed: apt-get install {'linux-perf' if tool == 'perf' else tool}")
    sides = ["untraced"] + binaries + peers
    times = {s: [] for s in sides}
    with tempfile.TemporaryDirectory(prefix="execprof-bench.") as work:
        untraced(100, a.misses, work)  # warm the page cache and dentries
        for r in range(a.rounds):
            # Rotate which side goes first so drift in the machine's load cancels.
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            row = {}
            for side in order:
                if side == "untraced":
                    row[side] = untraced(a.steps, a.misses, work)
                elif side in ("perf", "perf-a"):
                    row[side] = under_perf(side == "perf-a", a.hz, a.steps, a.misses, work)
                elif side == "bpftrace":
                    row[side] = under_bpftrace(a.steps, a.misses, work)
                else:
                    row[side] = traced(side, a.steps, a.misses, work, a.execprof_args.split())
            for s in sides:
                times[s].append(row[s])
            print(f"round {r + 1}: " + "   ".join(f"{label(s)} {row[s] / 1e6:8.1f} ms" for s in sides), flush=True)
    base = times["untraced"]
    mb = statistics.median(base)
    per_step = lambda ns: ns / a.steps / 1e3
    print(f"\nchain: {a.steps} steps, {a.misses} misses per step, {a.rounds} rounds; execprof run {a.execprof_args}; peers at {a.hz} Hz")
    print(f"untraced median {mb / 1e6:.1f} ms ({per_step(mb):.1f} µs/step), min {min(base) / 1e6:.1f} ms")
    for s in sides[1:]:
        mt = statistics.median(times[s])
        med, lo, hi = paired_ratio(base, times[s])
        print(f"{label(s)}: median {mt / 1e6:.1f} ms ({per_step(mt):.1f} µs/step); "
              f"traced/untraced {med:.3f} [95% CI {lo:.3f}-{hi:.3f}] (median of per-round ratios), {min(times[s]) / min(base):.3f} (minima)")


def label(side):
    return {"perf": "perf record -g", "perf-a": "perf record -a -g", "bpftrace": "bpftrace (3 probes)"}.get(side, os.path.basename(side))


if __name__ == "__main__":
    main()
