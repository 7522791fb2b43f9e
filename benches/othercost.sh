#!/usr/bin/env bash
# What execprof's hooks cost the rest of the system: per-run time of each program
# (kernel.bpf_stats_enabled, read with bpftool) while execprof traces `sleep` and an untraced
# pipe ping-pong between two processes (a read and a write syscall and a context switch per
# message, ~90,000 a second) runs beside it. Every run measured is an untraced one.
#
# Usage (as root, after `cargo build --release`; needs bpftool):
#     benches/othercost.sh [EXECPROF ...]     (several builds are measured one after another)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: tracing needs CAP_BPF and CAP_PERFMON" >&2; exit 2; }
command -v bpftool >/dev/null || { echo "bpftool is missing: apt-get install bpftool" >&2; exit 2; }
[ $# -gt 0 ] || set -- target/release/execprof

was=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled="$was"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

pingpong='
import os, sys, time
r1, w1 = os.pipe(); r2, w2 = os.pipe()
end = time.time() + float(sys.argv[1])
if os.fork() == 0:
    while os.read(r1, 1):
        os.write(w2, b"x")
    os._exit(0)
while time.time() < end:
    os.write(w1, b"x"); os.read(r2, 1)
os.close(w1)
'
snapshot() {
    bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") in ("sys_enter", "sys_exit", "sched_switch") and "run_cnt" in p:
        print(p["name"], p["run_time_ns"], p["run_cnt"])' | sort
}

for execprof in "$@"; do
    [ -x "$execprof" ] || { echo "$execprof is not built: run cargo build --release" >&2; exit 2; }
    "$execprof" run --sample-hz 0 -- sleep 10 >/dev/null 2>&1 &
    tracer=$!
    sleep 2
    python3 -c "$pingpong" 7 &
    sleep 1
    a=$(snapshot); sleep 5; b=$(snapshot)
    echo "$execprof:"
    join <(echo "$a") <(echo "$b") | awk '{ dc = $5 - $3; if (dc > 0) printf "  %-14s %10d runs %8.1f ns per run\n", $1, dc, ($4 - $2) / dc }'
    wait
done
