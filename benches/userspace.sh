#!/usr/bin/env bash
# What execprof's own user space spends per exec attempt, for builds side by side: the seed's
# chain (`env -i PATH=<6 missing dirs>:<dir> t N`, t.c built by musl-gcc) traced by each
# build in turn (`run --mode sampled`, so this machine without exact mode runs every build
# the same way), with execprof's own CPU time (`perf stat -e task-clock --no-inherit`: the
# traced chain is not counted; loading, attaching and symbolizing are), then one recording of
# the first build replayed by each (`execprof report`: the decoder, assembler and aggregators
# alone), rounds interleaved. Prints a markdown table of medians.
#
#   sudo benches/userspace.sh [--steps N] [--rounds R] EXECPROF...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=100000 rounds=3 builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) builds+=("$1"); shift ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "userspace.sh: name one or more execprof builds (e.g. target/release/execprof)" >&2; exit 2; }
for b in "${builds[@]}"; do [ -x "$b" ] || { echo "userspace.sh: $b is not an executable; build it first" >&2; exit 1; }; done
command -v musl-gcc >/dev/null || { echo "userspace.sh: musl-gcc missing; apt-get install musl-tools" >&2; exit 1; }
command -v perf >/dev/null || { echo "userspace.sh: perf missing; apt-get install linux-perf" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{m1,m2,m3,m4,m5,m6,bin}
musl-gcc -Wall -O3 -s -static -o "$work/bin/t" "$here/seed/t.c"
path="$work/m1:$work/m2:$work/m3:$work/m4:$work/m5:$work/m6:$work/bin"
"${builds[0]}" run --mode sampled --output "$work/rec" -- env -i PATH="$path" t "$steps" >/dev/null 2>&1
attempts=$(( steps * 7 + 1 ))

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq "$rounds"); do
  for i in "${!builds[@]}"; do
    b=${builds[$i]}
    perf stat -e task-clock -x, --no-inherit -o "$work/stat" -- "$b" run --mode sampled -- env -i PATH="$path" t "$steps" >/dev/null 2>&1
    grep task-clock "$work/stat" | cut -d, -f1 >>"$work/live.$i"
    /usr/bin/time -f %e -o "$work/time" "$b" report "$work/rec" >/dev/null
    cat "$work/time" >>"$work/replay.$i"
  done
done
echo "| build | live: execprof's CPU (median of $rounds) | per attempt | replay of one recording | per attempt |"
echo "|---|---|---|---|---|"
for i in "${!builds[@]}"; do
  live=$(median <"$work/live.$i") replay=$(median <"$work/replay.$i")
  awk -v b="${builds[$i]}" -v l="$live" -v r="$replay" -v n="$attempts" \
    'BEGIN { printf "| %s | %.0f ms | %.2f µs | %.2f s | %.2f µs |\n", b, l, l * 1000 / n, r, r * 1e6 / n }'
done
