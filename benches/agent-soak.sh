#!/usr/bin/env bash
# Soak of the always-on agent: `execprof agent --all` for SECONDS (default 1800) while
#  - stress-ng's exec stressor churns (every fork/exec method, as nobody: stress-ng will not
#    exec as root);
#  - cgroups come and go: a new cgroup every 0.2 s under one parent, a shell moved into it
#    makes three execs (one a PATH miss), the cgroup is removed;
#  - thousands of distinct programs exec: a new batch of 100 copies of dash every minute (the
#    last batch deleted), each running a command that is not in PATH (dash tries every PATH
#    directory: ENOENT attempts) and /bin/true;
# and a bpftrace script counts every exec attempt and fork-family call of the same window on
# the raw sys_exit tracepoint, independently. Both are attached before the workloads start and
# stopped together after they end. Every 30 s: the agent's resident set, its CPU time, and the
# entries of its kernel series map (bpftool). Prints one table for benches/README.md.
#
#   sudo benches/agent-soak.sh [--execprof PATH] [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
secs=1800
while [ $# -gt 0 ]; do
  case "$1" in
    --execprof) exe=$2; shift 2 ;;
    *) secs=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "agent-soak.sh: run as root" >&2; exit 2; }
[ -x "$exe" ] || { echo "agent-soak.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
for tool in stress-ng bpftrace bpftool dash; do
  command -v $tool >/dev/null || { echo "agent-soak.sh: $tool missing; apt-get install stress-ng bpftrace bpftool dash" >&2; exit 1; }
done
root=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
[ -n "$root" ] || { echo "agent-soak.sh: no cgroup2 hierarchy mounted" >&2; exit 2; }
work=$(mktemp -d)
chmod 755 "$work"
mkdir -m 1777 "$work/tmp"
cg="$root/execprof-soak-$$"
mkdir "$cg"
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  sleep 1
  for d in "$cg"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Waiting with the shell's builtins only: between the two tracers' attaching, nothing this
# script does may exec or fork, or one would count it and the other not.
mkfifo "$work/never"
exec 9<>"$work/never"
nap() { read -r -t 0.1 -u 9 _ || true; }
has() {
  local line
  [[ -e $2 ]] || return 1
  while IFS= read -r line; do [[ $line == *"$1"* ]] && return 0; done <"$2"
  return 1
}

# The independent count: execve/execveat returns (every attempt) and the fork-family calls'
# returns in the parent (not 0), machine-wide.
BPFTRACE_MAP_KEYS_MAX=100000 bpftrace -e '
tracepoint:raw_syscalls:sys_exit /args->id == 59 || args->id == 322/ { @execs = count(); if (args->ret == 0) { @succeeded = count(); } }
tracepoint:raw_syscalls:sys_exit /(args->id == 56 || args->id == 57 || args->id == 58 || args->id == 435) && args->ret != 0/ { @forks = count(); }
' >"$work/bpftrace.out" 2>&1 &
bt=$!
for ((i = 0; i < 300; i++)); do has Attaching "$work/bpftrace.out" && break; nap; done
has Attaching "$work/bpftrace.out" || { echo "agent-soak.sh: bpftrace did not start:" >&2; cat "$work/bpftrace.out" >&2; exit 1; }
# The agent's own start (one fork, one exec) is the one thing bpftrace counts and it cannot.
"$exe" agent --all --json "$work/agent.json" >"$work/agent.txt" 2>"$work/agent.err" &
ap=$!
for ((i = 0; i < 600; i++)); do has 'agent counting' "$work/agent.err" && break; nap; done
has 'agent counting' "$work/agent.err" || { echo "agent-soak.sh: the agent did not start:" >&2; cat "$work/agent.err" >&2; exit 1; }
map_id=$(bpftool -j map show | python3 -c '
import json, sys
ids = [m["id"] for m in json.load(sys.stdin) if m.get("name") == "AGGREGATES"]
print(max(ids))')
started=$(date +%s)
until=$((started + secs))

(cd "$work/tmp" && exec setpriv --reuid=65534 --regid=65534 --clear-groups stress-ng --exec 2 --exec-method all --timeout "${secs}s" --quiet) &
stress=$!
# cgroups come and go.
(
  i=0
  while [ "$(date +%s)" -lt $until ]; do
    d="$cg/c$i"
    mkdir "$d"
    sh -c "echo \$\$ > $d/cgroup.procs; /bin/true; /bin/true; execprof-soak-missing 2>/dev/null; true"
    rmdir "$d"
    i=$((i + 1))
    sleep 0.2
  done
  echo $i >"$work/cgroups"
) &
churn=$!
# Thousands of distinct programs: a new batch of dash copies every minute.
(
  b=0
  while [ "$(date +%s)" -lt $until ]; do
    mkdir -p "$work/progs/$b"
    for p in $(seq 100); do cp /usr/bin/dash "$work/progs/$b/sh$p"; done
    end=$(($(date +%s) + 60))
    while [ "$(date +%s)" -lt $end ] && [ "$(date +%s)" -lt $until ]; do
      for p in $(seq 100); do "$work/progs/$b/sh$p" -c 'execprof-soak-missing 2>/dev/null; /bin/true'; done
    done
    rm -rf "$work/progs/$b"
    b=$((b + 1))
  done
  echo $((b * 100)) >"$work/programs"
) &
progs=$!

: >"$work/samples"
while [ "$(date +%s)" -lt $until ]; do
  now=$(($(date +%s) - started))
  rss=$(ps -o rss= -p $ap)
  cpu=$(awk '{print $14 + $15}' /proc/$ap/stat)
  entries=$(bpftool -j map dump id "$map_id" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
  echo "$now $rss $cpu $entries" >>"$work/samples"
  sleep 30
done
wait $stress || true
wait $churn $progs
sleep 3
cpu_end=$(awk '{print $14 + $15}' /proc/$ap/stat)
kill -TERM $ap
kill -INT $bt
wait $ap || { echo "agent-soak.sh: the agent failed:" >&2; cat "$work/agent.err" >&2; exit 1; }
wait $bt || true
python3 - "$work" "$secs" "$cpu_end" "$(getconf CLK_TCK)" <<'PY'
import json, re, sys
w, secs, cpu_end, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
samples = [[int(x) for x in l.split()] for l in open(f"{w}/samples") if l.strip()]
rss = [s[1] for s in samples]
entries = [s[3] for s in samples]
bt = {m.group(1): int(m.group(2)) for m in re.finditer(r"@(\w+): (\d+)", open(f"{w}/bpftrace.out").read())}
r = json.load(open(f"{w}/agent.json"))
a = r["analysis"]
succeeded = sum(o["count"] for o in a["outcomes"] if o["outcome"] == "success")
programs = len({s["program"] for s in r["series"]})
cgroups = len({s["cgroup"] for s in r["series"]})
l = r["losses"]
print(f"agent --all for {r['duration_s']:.0f} s; {open(f'{w}/cgroups').read().strip()} cgroups made and removed, "
      f"{open(f'{w}/programs').read().strip()} program copies run")
print()
print("| | agent | bpftrace (raw sys_exit) | bpftrace − agent (1 is the agent's own start; more, other processes started while it attached) |")
print("|---|---|---|---|")
for what, mine, theirs in [("exec attempts", a["attempts"], bt.get("execs", 0)), ("of which succeeded", succeeded, bt.get("succeeded", 0)),
                           ("fork-family calls", a["fork_calls"]["count"], bt.get("forks", 0))]:
    print(f"| {what} | {mine} | {theirs} | {theirs - mine} |")
print()
print("| RSS first / peak / last | kernel series entries min / max (of max) | series removed (aged out) | distinct programs / cgroups in the totals | agent CPU | complete | losses |")
print("|---|---|---|---|---|---|---|")
cpu_s = cpu_end / hz
print(f"| {rss[0] / 1024:.1f} / {max(rss) / 1024:.1f} / {rss[-1] / 1024:.1f} MB | {min(entries)} / {max(entries)} ({r['capacities']['max_series']}) "
      f"| {r['capacities']['series_removed']} | {programs} / {cgroups} | {cpu_s:.1f} s ({100 * cpu_s / r['duration_s']:.2f}% of one CPU) "
      f"| {r['complete']} | {', '.join(f'{k} {v}' for k, v in l.items() if v) or 'none'} |")
print()
print("RSS (MB) every 30 s:", " ".join(f"{x / 1024:.1f}" for x in rss))
print("kernel series entries every 30 s:", " ".join(str(x) for x in entries))
PY
