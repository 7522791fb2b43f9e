#!/bin/busybox sh
# The init of `cargo xtask vm-test`'s guest: runs the built-in chain under execprof (auto
# mode) and writes what the host checks onto the results disk, an empty ext4 image the host
# reads back after QEMU exits:
#   result.env   kernel=, execprof_rc=, note= lines, then finished=yes as the last line
#   run.json     execprof's JSON report
#   run.execprof the recording
#   report.txt   execprof's terminal report (also printed here, for console.log)
#   doctor.json  `execprof doctor --json`: what the kernel's BPF has (the support table's)
#   agent.json   the agent's JSON, of a `bench chain` of AGENT_STEPS steps it counted
#   agent.txt    what the agent printed
# /guest.env (written by xtask) sets STEPS, MISSES, AGENT_STEPS, SAMPLE_HZ and RESULTS_DEV.
B=/bin/busybox
export PATH=/bin
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
$B mount -t tmpfs tmp /tmp
. /guest.env

# virtio_blk and what it needs, where the kernel has them as modules (xtask numbered them
# in load order).
notes=""
for m in /modules/*.ko; do
  [ -f "$m" ] || continue
  $B insmod "$m" || { echo "vm-test guest: insmod $m failed"; notes="${notes}note=insmod $m failed
"; }
done
R=/results
$B mkdir -p $R
if ! $B mount -t ext4 "$RESULTS_DEV" $R; then
  echo "vm-test guest: cannot mount the results disk $RESULTS_DEV"
  $B poweroff -f
fi

echo "kernel=$($B uname -r)" > $R/result.env
printf '%s' "$notes" >> $R/result.env
/execprof run --mode auto --sample-hz "$SAMPLE_HZ" --steps "$STEPS" --misses "$MISSES" \
  --json $R/run.json --output $R/run.execprof > $R/report.txt 2>&1
echo "execprof_rc=$?" >> $R/result.env
$B cat $R/report.txt

/execprof doctor --json $R/doctor.json > $R/doctor.txt 2>&1
echo "doctor_rc=$?" >> $R/result.env

# The agent, every process, counting an untraced chain: its known answers on this kernel.
/execprof agent --all --sample-hz 0 --interval 0.5 --json $R/agent.json > $R/agent.txt 2>&1 &
agent=$!
waited=0
until $B grep -q "agent counting" $R/agent.txt || ! $B kill -0 $agent 2>/dev/null || [ $waited -ge 300 ]; do
  $B sleep 1
  waited=$((waited + 1))
done
/execprof bench chain --rounds 1 --steps "$AGENT_STEPS" --misses "$MISSES" > /dev/null 2>&1
echo "chain_rc=$?" >> $R/result.env
$B kill -TERM $agent 2>/dev/null
wait $agent
echo "agent_rc=$?" >> $R/result.env
$B cat $R/agent.txt
echo "finished=yes" >> $R/result.env

$B sync
$B umount $R
$B poweroff -f
