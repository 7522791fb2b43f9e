#!/usr/bin/env bash
# The tax of watching on everyone else: the time of an untraced process's unrelated syscalls
# (a getpid loop, and a pipe ping-pong: a read, a write and a context switch per message)
# while each tracer runs, in interleaved rounds so that every tracer sees the same machine:
# none; execprof --all (its default boundaries: fentry/fexit where the kernel allows them, else
# the per-syscall events); execprof --all --boundaries tracepoint (the raw sys_enter/sys_exit
# tracepoints); execprof --pid on a sleeping process; execprof run -- sleep (a launched command,
# default boundaries and --boundaries syscall-events); execprof agent --all (in-kernel
# aggregates, without and with its default 99 Hz stack sampling); perf trace -e execve (system wide);
# bpftrace's execsnoop.bt (syscalls:sys_enter_execve*, system wide: the enter side alone);
# bpftrace-timed, a bpftrace script that times what the agent times (per-(comm, outcome)
# latency histograms of execve, execveat and the fork family on the per-syscall enter and exit
# events: the floor of any tracer that times a call with them). Prints ns per call per round,
# then the median of each and its ratio to no tracer.
#
#   sudo benches/tax.sh [--rounds N] [--execprof PATH] [--tracers none,agent,...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
rounds=5
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --execprof) exe=$2; shift 2 ;;
    --tracers) IFS=, read -r -a only <<<"$2"; shift 2 ;;
    *) echo "tax.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "tax.sh: run as root: the tracers need it" >&2; exit 2; }
[ -x "$exe" ] || { echo "tax.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
cat >"$work/loop.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[2]);
    if (argv[1][0] == 'g') {
        double t0 = now();
        for (long i = 0; i < n; i++) syscall(SYS_getpid);
        printf("%.1f\n", (now() - t0) / n);
        return 0;
    }
    int a[2], b[2]; char c = 'x';
    if (pipe(a) || pipe(b)) return 1;
    if (fork() == 0) {
        close(a[1]); close(b[0]);
        while (read(a[0], &c, 1) == 1) write(b[1], &c, 1);
        _exit(0);
    }
    close(a[0]); close(b[1]);
    double t0 = now();
    for (long i = 0; i < n; i++) { write(a[1], &c, 1); read(b[0], &c, 1); }
    printf("%.1f\n", (now() - t0) / n);
    close(a[1]);
    return 0;
}
C
gcc -O2 -o "$work/loop" "$work/loop.c"
sleep 3600 & sleeper=$!

# start TRACER: starts it in the background and waits until it is attached.
start() {
  case "$1" in
    none) tracer= ;;
    execprof-all) "$exe" run --sample-hz 0 --all --duration 3600 >/dev/null 2>"$work/err" & tracer=$!; wait_for 'execprof: tracing' ;;
    execprof-all-tracepoint) "$exe" run --sample-hz 0 --all --boundaries tracepoint --duration 3600 >/dev/null 2>"$work/err" & tracer=$!; wait_for 'execprof: tracing' ;;
    execprof-pid) "$exe" run --sample-hz 0 --pid "$sleeper" >/dev/null 2>"$work/err" & tracer=$!; wait_for 'execprof: tracing' ;;
    # `run -- CMD`: a launched command (a sleep), with the boundaries auto picks for it (here,
    # fentry refused: the raw tracepoints, which see its 32-bit descendants too), and with the
    # per-syscall events it can be asked for.
    execprof-cmd) rm -f "$work/ready"; "$exe" run --sample-hz 0 -- sh -c "touch $work/ready; exec sleep 3600" >/dev/null 2>"$work/err" & tracer=$!; wait_file ;;
    execprof-cmd-events) rm -f "$work/ready"; "$exe" run --sample-hz 0 --boundaries syscall-events -- sh -c "touch $work/ready; exec sleep 3600" >/dev/null 2>"$work/err" & tracer=$!; wait_file ;;
    agent) "$exe" agent --sample-hz 0 --duration 3600 >/dev/null 2>"$work/err" & tracer=$!; wait_for 'execprof: agent counting' ;;
    agent-sampled) "$exe" agent --duration 3600 >/dev/null 2>"$work/err" & tracer=$!; wait_for 'execprof: agent counting' ;;
    perf-trace) perf trace -e execve -a >/dev/null 2>"$work/err" & tracer=$!; sleep 2 ;;
    bpftrace) bpftrace /usr/sbin/execsnoop.bt >"$work/err" 2>&1 & tracer=$!; wait_for 'PID' ;;
    bpftrace-timed) bpftrace -e "$BT_TIMED" >"$work/err" 2>&1 & tracer=$!; wait_for 'attached' ;;
    *) echo "tax.sh: unknown tracer $1 (known: ${tracers[*]})" >&2; exit 2 ;;
  esac
}
wait_for() { for _ in $(seq 300); do grep -q "$1" "$work/err" 2>/dev/null && return; sleep 0.1; done; echo "tax.sh: tracer did not start: $(cat "$work/err")" >&2; exit 1; }
wait_file() { for _ in $(seq 300); do [ -e "$work/ready" ] && return; sleep 0.1; done; echo "tax.sh: the traced command did not start: $(cat "$work/err")" >&2; exit 1; }
stop() { [ -z "$tracer" ] || { kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true; }; }

tracers=(none execprof-all execprof-all-tracepoint execprof-pid execprof-cmd execprof-cmd-events agent agent-sampled perf-trace bpftrace bpftrace-timed)
# The agent's per-syscall events (profiler-common's SYSCALL_EVENTS), timed the way it times them.
calls=(execve execveat clone clone3)
[ "$(uname -m)" = aarch64 ] || calls+=(fork vfork)
BT_TIMED='BEGIN { printf("attached\n"); }'
for c in "${calls[@]}"; do
  BT_TIMED+="
tracepoint:syscalls:sys_enter_$c { @start[tid] = nsecs; }
tracepoint:syscalls:sys_exit_$c /@start[tid]/ { @t[comm, args->ret < 0 ? args->ret : 0] = hist(nsecs - @start[tid]); delete(@start[tid]); }"
done
[ ${#only[@]} -eq 0 ] || { [ "${only[0]}" = none ] || only=(none "${only[@]}"); tracers=("${only[@]}"); }
for r in $(seq "$rounds"); do
  for t in "${tracers[@]}"; do
    start "$t"
    g=$("$work/loop" g 2000000)
    p=$("$work/loop" p 200000)
    stop
    echo "$r $t $g $p" | tee -a "$work/results" >&2
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for _, t, g, p in rows:
    by.setdefault(t, ([], []))
    by[t][0].append(float(g)); by[t][1].append(float(p))
base = [statistics.median(v) for v in by["none"]]
print("| tracer | getpid ns/call (median) | × untraced | pipe ping-pong ns/message (median) | × untraced |")
print("|---|---|---|---|---|")
for t, (g, p) in by.items():
    mg, mp = statistics.median(g), statistics.median(p)
    print(f"| {t} | {mg:.0f} [{min(g):.0f}–{max(g):.0f}] | {mg / base[0]:.2f} | {mp:.0f} [{min(p):.0f}–{max(p):.0f}] | {mp / base[1]:.2f} |")
PY
