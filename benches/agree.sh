#!/usr/bin/env bash
# Counts agree with a peer on the same window: a fresh cgroup v2 directory runs stress-ng's exec
# stressor (every fork/exec method, as nobody) while execprof traces it with --cgroup and a
# bpftrace script counts the same cgroup's execve/execveat returns by value on the raw
# sys_exit tracepoint (its own, independent filter: bpftrace's `cgroup` builtin). Both are
# attached before the workload starts and stopped after it ends. Prints both tables.
#
#   sudo benches/agree.sh [--execprof PATH] [OPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
ops=3000
while [ $# -gt 0 ]; do
  case "$1" in
    --execprof) exe=$2; shift 2 ;;
    *) ops=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "agree.sh: run as root" >&2; exit 2; }
root=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
[ -n "$root" ] || { echo "agree.sh: no cgroup2 hierarchy mounted" >&2; exit 2; }
work=$(mktemp -d)
mkdir -m 1777 "$work/tmp"
cg="$root/execprof-agree-$$"
mkdir "$cg"
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rmdir "$cg" 2>/dev/null || true; rm -rf "$work"' EXIT

BPFTRACE_MAP_KEYS_MAX=100000 bpftrace -e "
tracepoint:raw_syscalls:sys_exit /cgroup == cgroupid(\"$cg\") && (args->id == 59 || args->id == 322)/ { @ret[args->ret] = count(); }
tracepoint:raw_syscalls:sys_exit /cgroup == cgroupid(\"$cg\") && (args->id == 56 || args->id == 57 || args->id == 58 || args->id == 435) && args->ret != 0/ { @forks = count(); }
" >"$work/bpftrace.out" 2>&1 &
bt=$!
for _ in $(seq 300); do grep -q Attaching "$work/bpftrace.out" && break; sleep 0.1; done
"$exe" run --sample-hz 0 --cgroup "$cg" --json "$work/execprof.json" >/dev/null 2>"$work/execprof.err" &
ep=$!
for _ in $(seq 300); do grep -q '^execprof: tracing' "$work/execprof.err" && break; sleep 0.1; done
sh -c "echo \$\$ > $cg/cgroup.procs; cd $work/tmp && exec setpriv --reuid=65534 --regid=65534 --clear-groups stress-ng --exec 2 --exec-ops $ops --exec-method all --quiet" || true
sleep 1
kill -INT "$ep"; wait "$ep" || true
kill -INT "$bt"; wait "$bt" || true
python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
errnos = {-2: "enoent", -13: "eacces", -8: "enoexec"}
bt = {}
forks = 0
for line in open(f"{w}/bpftrace.out"):
    m = re.match(r"@ret\[(-?\d+)\]: (\d+)", line)
    if m:
        r, n = int(m[1]), int(m[2])
        k = "success" if r == 0 else errnos.get(r, f"errno {-r}")
        bt[k] = bt.get(k, 0) + n
    m = re.match(r"@forks: (\d+)", line)
    if m:
        forks = int(m[1])
r = json.load(open(f"{w}/execprof.json"))
a = r["analysis"]
ep = {o["outcome"]: o["count"] for o in a["outcomes"] if o["count"]}
other = {f"errno {e}": n for o in a["outcomes"] if o["outcome"] in ("other", "abandoned") for e, n in o.get("errnos", [])}
ep.pop("other", None); ep.pop("abandoned", None); ep.update({k: ep.get(k, 0) + v for k, v in other.items()})
print("| outcome | execprof --cgroup | bpftrace (cgroup filter) |")
print("|---|---|---|")
for k in sorted(set(bt) | set(ep)):
    print(f"| {k} | {ep.get(k, 0)} | {bt.get(k, 0)} |")
print(f"| fork-family calls | {sum(f['count'] for f in a['fork_calls'])} | {forks} |")
print(f"\nexecprof: complete {r['complete']}, not seen whole {r['attempts_affected']}, from non-leader threads {a['from_non_leader_threads']}")
PY
