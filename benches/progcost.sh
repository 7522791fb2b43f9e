#!/usr/bin/env bash
# What each of execprof's eBPF programs costs per run, from the kernel's own accounting
# (kernel.bpf_stats_enabled): run time and run count of every loaded program, sampled twice
# while `execprof run` traces the built-in chain, and the difference divided out.
#
# Usage (as root, after `cargo build --release`; needs bpftool):
#     benches/progcost.sh [EXECPROF] [-- extra `execprof run` options]
# e.g. benches/progcost.sh target/release/execprof -- --sample-hz 0
#
# The stats cost a clock read per run themselves, so absolute figures are a little high;
# compare programs, or builds, within one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
execprof=${1:-target/release/execprof}
shift || true
[ "${1:-}" = "--" ] && shift
[ "$(id -u)" = 0 ] || { echo "run as root: tracing needs CAP_BPF and CAP_PERFMON" >&2; exit 2; }
command -v bpftool >/dev/null || { echo "bpftool is missing: apt-get install bpftool" >&2; exit 2; }
[ -x "$execprof" ] || { echo "$execprof is not built: run cargo build --release" >&2; exit 2; }

was=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
"$execprof" run --steps 2000000 "$@" >/dev/null 2>&1 &
runner=$!
cleanup() {
    kill -INT "$runner" 2>/dev/null || true
    wait "$runner" 2>/dev/null || true
    sysctl -qw kernel.bpf_stats_enabled="$was"
}
trap cleanup EXIT

# name run_time_ns run_cnt of every loaded program (run only while execprof traces: the
# table below lists the ones that ran, which on a quiet machine are execprof's).
snapshot() {
    bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if "run_cnt" in p and "name" in p:
        print(p["name"], p["run_time_ns"], p["run_cnt"])
' | sort
}

sleep 3
a=$(snapshot)
sleep 5
b=$(snapshot)
printf '%-22s %10s %12s %12s\n' program runs "ns per run" "ms in total"
join <(echo "$a") <(echo "$b") | awk '{ dt = $4 - $2; dc = $5 - $3; if (dc > 0) printf "%-22s %10d %12.1f %12.1f\n", $1, dc, dt / dc, dt / 1e6 }'
