#!/usr/bin/env bash
# Soak: `execprof run --all` for SECONDS (default 600) while stress-ng's exec stressor churns
# (every fork/exec method, as nobody: stress-ng will not exec as root), sampling execprof's
# resident set every 10 s. Prints the RSS curve's first, peak and last values, the attempts,
# the records lost, and the recording's bytes per attempt: memory must stay flat (exited tasks
# leave every table) and nothing be lost at the default ring.
#
#   sudo benches/soak.sh [--execprof PATH] [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe="$here/../target/release/execprof"
secs=600
while [ $# -gt 0 ]; do
  case "$1" in
    --execprof) exe=$2; shift 2 ;;
    *) secs=$1; shift ;;
  esac
done
[ -x "$exe" ] || { echo "soak.sh: $exe is not built; run cargo build --release" >&2; exit 1; }
command -v stress-ng >/dev/null || { echo "soak.sh: stress-ng missing; apt-get install stress-ng" >&2; exit 1; }
work=$(mktemp -d)
chmod 755 "$work"
mkdir -m 1777 "$work/tmp"
trap 'rm -rf "$work"' EXIT

"$exe" run --all --duration "$secs" --output "$work/soak.execprof" --json "$work/soak.json" >"$work/report.txt" 2>"$work/stderr" &
ep=$!
# Tracing has begun once execprof says so.
for _ in $(seq 600); do grep -q '^execprof: tracing' "$work/stderr" && break; sleep 0.1; done
(cd "$work/tmp" && setpriv --reuid=65534 --regid=65534 --clear-groups stress-ng --exec 2 --exec-method all --timeout "$((secs - 5))s" --quiet) &
sp=$!
: >"$work/rss"
while kill -0 "$ep" 2>/dev/null; do
  ps -o rss= -p "$ep" >>"$work/rss" 2>/dev/null || true
  sleep 10
done
wait "$ep" || { echo "soak.sh: execprof failed:" >&2; cat "$work/stderr" >&2; exit 1; }
wait "$sp" || true
python3 - "$work" <<'PY'
import json, os, sys
w = sys.argv[1]
rss = [int(x) for x in open(f"{w}/rss").read().split()]
r = json.load(open(f"{w}/soak.json"))
a = r["analysis"]
lost = sum(n for name, n in r["losses"] if name.startswith("ring buffer full"))
size = os.path.getsize(f"{w}/soak.execprof")
forks = sum(f["count"] for f in a["fork_calls"])
print("| seconds | exec attempts | fork calls | RSS first / peak / last | ring losses | not seen whole | recording | bytes/attempt |")
print("|---|---|---|---|---|---|---|---|")
print(f"| {r['command_wall_ns'] / 1e9:.0f} | {a['attempts']} | {forks} | {rss[0] // 1024} / {max(rss) // 1024} / {rss[-1] // 1024} MB "
      f"| {lost} | {r['attempts_affected']} | {size // 1024} KiB | {size / max(a['attempts'], 1):.1f} |")
print("RSS every 10 s (MB):", " ".join(str(x // 1024) for x in rss))
PY
