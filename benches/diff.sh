#!/usr/bin/env bash
# Comparisons at the seed's scale: `execprof run --repeat R --vs '--misses 1'` on the built-in
# chain of N steps (A: 6 PATH misses per step, B: 1), then `execprof diff` of the two merged
# recordings timed on its own: wall time, peak RSS, recording sizes, attempts compared.
#
#   sudo benches/diff.sh [--execprof PATH] [N] [R]      (defaults: 100000 steps, 3 runs a side)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
if [ "${1:-}" = --execprof ]; then exe=$2; shift 2; fi
n=${1:-100000}
r=${2:-3}
[ -x "$exe" ] || { echo "diff.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)
"$exe" run --steps "$n" --repeat "$r" --vs '--misses 1' --vs-output "$work/b.execprof" -o "$work/a.execprof" >"$work/ab.txt" 2>"$work/ab.err" \
  || { cat "$work/ab.err" >&2; exit 1; }
ab=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
/usr/bin/time -f "%e %M" -o "$work/time" "$exe" diff "$work/a.execprof" "$work/b.execprof" --json "$work/d.json" >"$work/d.txt"
read -r wall rss <"$work/time"
attempts=$(python3 -c "import json,sys; d=json.load(open('$work/d.json')); print(d['a']['attempts'] + d['b']['attempts'])")
echo "| steps × runs a side | A/B run (all $((2 * r)) traced runs) | recordings | attempts compared | diff wall | diff peak RSS |"
echo "|---|---|---|---|---|---|"
echo "| $n × $r | ${ab} s | $(( $(stat -c %s "$work/a.execprof") / 1024 )) + $(( $(stat -c %s "$work/b.execprof") / 1024 )) KiB | $attempts | ${wall} s | $((rss / 1024)) MB |"
