#!/usr/bin/env bash
# The seed's scale: `execprof run -- env -i PATH=<6 missing dirs>:<dir> t N` for each N given
# (default 10000 100000 1000000), with the seed's t.c built by musl-gcc. For each run: the
# workload's own time (the report's "result ... after"), execprof's whole wall time (loading
# and attaching included), the time from the traced tree's end to the report, peak RSS, the recording's size, lost records; then
# the same recording replayed by `execprof report` (time, peak RSS) and whether the two
# reports agree but for the line that says how each was made.
#
#   sudo benches/scale.sh [--execprof PATH] [--no-record] [N...]
#
# --no-record measures a build without recordings (an older execprof) the same way.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
record=1
steps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --execprof) exe=$2; shift 2 ;;
    --no-record) record=0; shift ;;
    *) steps+=("$1"); shift ;;
  esac
done
[ ${#steps[@]} -gt 0 ] || steps=(10000 100000 1000000)
[ -x "$exe" ] || { echo "scale.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
command -v musl-gcc >/dev/null || { echo "scale.sh: musl-gcc missing; apt-get install musl-tools" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{m1,m2,m3,m4,m5,m6,bin}
musl-gcc -Wall -O3 -s -static -o "$work/bin/t" "$here/seed/t.c"
path="$work/m1:$work/m2:$work/m3:$work/m4:$work/m5:$work/m6:$work/bin"

# "2.34 s" / "870 ms" -> seconds
to_s() { awk -v v="$1" -v u="$2" 'BEGIN { f = (u == "s") ? 1 : (u == "ms") ? 1e-3 : (u == "µs") ? 1e-6 : 1e-9; printf "%.2f", v * f }'; }

echo "| steps | attempts | workload | execprof wall | report after tree end | peak RSS | recording | bytes/attempt | lost | replay | replay RSS | same report |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in "${steps[@]}"; do
  rec="$work/t$n.execprof"
  args=(run)
  [ $record = 1 ] && args+=(--output "$rec")
  /usr/bin/time -f "%e %M" -o "$work/time" "$exe" "${args[@]}" -- env -i PATH="$path" t "$n" >"$work/live.txt" 2>"$work/err" \
    || { cat "$work/err" >&2; exit 1; }
  read -r wall rss <"$work/time"
  read -r wv wu attempts < <(sed -n 's/^result .* after \([0-9.]*\) \([a-zµ]*\);.* \([0-9]*\) exec attempts$/\1 \2 \3/p' "$work/live.txt")
  workload=$(to_s "$wv" "$wu")
  # The report says when it was ready; an older execprof does not: then all but the workload.
  after=$(sed -n 's/^report    live, ready \([0-9]*\) ms after.*/\1/p' "$work/live.txt" | awk '{ printf "%.2f", $1 / 1000 }')
  [ -n "$after" ] || after="<$(awk -v a="$wall" -v b="$workload" 'BEGIN { printf "%.2f", a - b }')"
  lost=$(awk '/^Lost or unseen/ { on = 1; next } on && /^  / { s += $NF } END { print s + 0 }' "$work/live.txt")
  if [ $record = 1 ]; then
    bytes=$(stat -c %s "$rec")
    per=$(awk -v b="$bytes" -v a="$attempts" 'BEGIN { printf "%.1f", b / a }')
    /usr/bin/time -f "%e %M" -o "$work/rtime" "$exe" report "$rec" >"$work/replay.txt"
    read -r rwall rrss <"$work/rtime"
    same=no
    diff <(grep -v '^report ' "$work/live.txt") <(grep -v '^report ' "$work/replay.txt") >/dev/null && same=yes
    echo "| $n | $attempts | ${workload} s | ${wall} s | ${after} s | $((rss / 1024)) MB | $((bytes / 1024)) KiB | $per | $lost | ${rwall} s | $((rrss / 1024)) MB | $same |"
  else
    echo "| $n | $attempts | ${workload} s | ${wall} s | ${after} s | $((rss / 1024)) MB | - | - | $lost | - | - | - |"
  fi
done
