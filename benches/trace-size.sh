#!/usr/bin/env bash
# What `execprof run --trace` costs at the seed's scale: `execprof run -- env -i
# PATH=<6 missing dirs>:<dir> t N` (the seed's t.c built by musl-gcc) for each N given (default
# 100000), once without a trace, once with Perfetto's protobuf trace (the default) and once with
# the legacy JSON (`--trace-format json`), side by side: the trace's size and bytes per exec
# attempt, execprof's wall time and peak RSS.
#
#   sudo benches/trace-size.sh [--execprof PATH] [N...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
steps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --execprof) exe=$2; shift 2 ;;
    *) steps+=("$1"); shift ;;
  esac
done
[ ${#steps[@]} -gt 0 ] || steps=(100000)
[ -x "$exe" ] || { echo "trace-size.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
command -v musl-gcc >/dev/null || { echo "trace-size.sh: musl-gcc missing; apt-get install musl-tools" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{m1,m2,m3,m4,m5,m6,bin}
musl-gcc -Wall -O3 -s -static -o "$work/bin/t" "$here/seed/t.c"
path="$work/m1:$work/m2:$work/m3:$work/m4:$work/m5:$work/m6:$work/bin"

echo "| steps | attempts | trace | size | bytes/attempt | execprof wall | peak RSS |"
echo "|---|---|---|---|---|---|---|"
for n in "${steps[@]}"; do
  for format in none perfetto json; do
    args=(run --json "$work/run.json")
    [ $format = none ] || args+=(--trace "$work/trace" --trace-format "$format")
    rm -f "$work/trace"
    /usr/bin/time -f "%e %M" -o "$work/time" "$exe" "${args[@]}" -- env -i PATH="$path" t "$n" >/dev/null 2>"$work/err" \
      || { cat "$work/err" >&2; exit 1; }
    read -r wall rss <"$work/time"
    attempts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["analysis"]["attempts"])' "$work/run.json")
    if [ $format = none ]; then
      echo "| $n | $attempts | none | - | - | ${wall} s | $((rss / 1024)) MB |"
    else
      bytes=$(stat -c %s "$work/trace")
      per=$(awk -v b="$bytes" -v a="$attempts" 'BEGIN { printf "%.1f", b / a }')
      mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
      echo "| $n | $attempts | $format | ${mb} MB | $per | ${wall} s | $((rss / 1024)) MB |"
    fi
  done
done
