#!/usr/bin/env bash
# PromQL's answer next to execprof's own report, for one workload: `execprof agent` watches a
# fresh cgroup with its endpoint on a free loopback port; Debian's Prometheus (unpacked by
# `cargo xtask setup`, or installed) scrapes it every second twice: one server with native
# histograms on (it asks for protobuf), one without (it asks for OpenMetrics text: classic
# buckets); a shell in the cgroup makes N failing and M successful execs. Then PromQL's
# answers over each server's HTTP API, and the agent's report (on SIGTERM) for the same
# workload. Nothing listens beyond 127.0.0.1.
#
#   sudo benches/promql.sh [--execprof PATH] [N M]      (default 1000 500)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
if [ "${1:-}" = --execprof ]; then exe=$2; shift 2; fi
n=${1:-1000}
m=${2:-500}
[ -x "$exe" ] || { echo "promql.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
prom=/var/cache/execprof/unpacked/usr/bin/prometheus
[ -x "$prom" ] || prom=$(command -v prometheus) || { echo "promql.sh: no prometheus; run cargo xtask setup" >&2; exit 1; }
cgroot=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[ -n "$cgroot" ] || { echo "promql.sh: no cgroup2 mount" >&2; exit 1; }

work=$(mktemp -d)
cg="$cgroot/execprof-promql-$$"
mkdir "$cg"
agent=""
promp=()
cleanup() {
  for p in "${promp[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -z "$agent" ] || kill "$agent" 2>/dev/null || true
  wait 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ap=$(port)

"$exe" agent --cgroup "$cg" --listen "127.0.0.1:$ap" --interval 0.5 >"$work/agent.out" 2>"$work/agent.err" &
agent=$!
until grep -qs "agent counting" "$work/agent.err"; do
  kill -0 "$agent" 2>/dev/null || { cat "$work/agent.err" >&2; exit 1; }
  sleep 0.2
done

printf '%s\n' "global:" "  scrape_interval: 1s" "  scrape_timeout: 1s" "scrape_configs:" "  - job_name: execprof" \
  "    static_configs:" "      - targets: ['127.0.0.1:$ap']" >"$work/prometheus.yml"
# Two Prometheus servers on free ports: native (with native histograms) and classic.
declare -A pport
for kind in native classic; do
  pport[$kind]=$(port)
  feature=()
  [ $kind = native ] && feature=(--enable-feature=native-histograms)
  "$prom" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data-$kind" \
    --web.listen-address="127.0.0.1:${pport[$kind]}" "${feature[@]}" >/dev/null 2>"$work/prometheus-$kind.log" &
  promp+=($!)
done
for kind in native classic; do
  until curl -sf "http://127.0.0.1:${pport[$kind]}/-/ready" >/dev/null; do
    sleep 0.2
    [ $SECONDS -lt 300 ] || { cat "$work/prometheus-$kind.log" >&2; exit 1; }
  done
done

sh -c "echo \$\$ > $cg/cgroup.procs; i=0; while [ \$i -lt $n ]; do /nonexistent/execprof-promql 2>/dev/null; i=\$((i+1)); done; \
  i=0; while [ \$i -lt $m ]; do /bin/true; i=\$((i+1)); done" || true

# One instant query's single value on server $1 ("-" while it has none).
query() {
  curl -sf --get "http://127.0.0.1:${pport[$1]}/api/v1/query" --data-urlencode "query=$2" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "-")'
}
enoent='sum(execprof_exec_attempts_total{outcome="enoent"})'
success='sum(execprof_exec_attempts_total{outcome="success"})'
for _ in $(seq 120); do
  [ "$(query native "$enoent")" = "$n" ] && [ "$(query classic "$enoent")" = "$n" ] &&
    [ "$(query native "$success")" = "$m" ] && [ "$(query classic "$success")" = "$m" ] && break
  sleep 0.5
done

echo "Workload: a shell in a fresh cgroup, $n failing execs (/nonexistent/execprof-promql), $m of /bin/true"
echo
echo "| PromQL (Prometheus $("$prom" --version 2>&1 | awk 'NR == 1 { print $3 }')) | server | answer |"
echo "|---|---|---|"
for q in "$enoent" "$success" 'sum(execprof_fork_calls_total)' 'sum(execprof_path_misses_total{directory="/nonexistent"})' \
  'histogram_quantile(0.5, sum by (le) (execprof_exec_duration_seconds_bucket{outcome="success"}))' \
  'histogram_quantile(0.5, sum by (le) (execprof_exec_duration_seconds_bucket{outcome="enoent"}))'; do
  echo "| \`$q\` | classic | $(query classic "$q") |"
done
for q in "$enoent" 'histogram_quantile(0.5, sum(execprof_exec_duration_seconds{outcome="success"}))' \
  'histogram_quantile(0.5, sum(execprof_exec_duration_seconds{outcome="enoent"}))' \
  'histogram_count(sum(execprof_exec_duration_seconds{outcome="enoent"}))'; do
  echo "| \`$q\` | native | $(query native "$q") |"
done
kill -TERM "$agent"
wait "$agent" || true
agent=""
echo
echo "execprof agent's own report of the same workload (SIGTERM):"
echo
echo '```'
cat "$work/agent.out"
echo '```'
