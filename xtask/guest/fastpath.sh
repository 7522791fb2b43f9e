#!/bin/busybox sh
# The init of `cargo xtask fastpath`'s guest (the patched 6.12): runs the built-in chain under
# each lookup strategy of fs.exec_lookup, single and double interleaved by `execprof run
# --repeat --vs` with a setup command per side, none on its own; in exact+sampled mode, then
# sampled alone. The runs write to /tmp (as the lab always measured them), copied at the end
# onto the results disk (an empty ext4 image the host reads back after QEMU exits): the
# recordings (TAG-VARIANT.execprof), execprof's output (TAG-RUN.txt), and result.env: facts about the guest (kernel=, exec_lookup=, lsm=, fs=,
# tmpdir=, clock=, cgroup=), each run's exit code (probe_rc=, probe_repeat_rc=, rc_TAG-RUN=),
# then finished=yes as the last line.
# /guest.env (written by xtask) sets STEPS, REPEAT, SAMPLE_HZ, WORKLOADS (tags; empty: the
# smoke probes only), EXTRA_<tag> (the workload's chain options), LAB_DEV (the ext4 disk the
# chain's directories go on) and RESULTS_DEV. The `direct` workload (no misses) runs exact
# mode only, without sampling: its question is instructions per function.
B=/bin/busybox
export PATH=/bin
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
$B mount -t tmpfs tmp /tmp
. /guest.env
$B mount -t cgroup2 none /sys/fs/cgroup

R=/results
$B mkdir -p $R
if ! $B mount -t ext4 "$RESULTS_DEV" $R; then
  echo "fastpath guest: cannot mount the results disk $RESULTS_DEV"
  $B reboot -f
fi
fact() {
  echo "fastpath guest: $1=$2"
  echo "$1=$2" >> $R/result.env
}
: > $R/result.env
fact kernel "$($B uname -r)"
fact exec_lookup "$($B cat /proc/sys/fs/exec_lookup)"
# Emulated perf interrupts are slow: without this the kernel would lower
# perf_event_max_sample_rate during a run, and the next run's --sample-hz would be refused.
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
$B mount -t securityfs none /sys/kernel/security
fact lsm "$($B cat /sys/kernel/security/lsm)"
# The chain's directories (execprof makes them under $TMPDIR) on the lab's ext4 disk.
$B mkdir -p /lab && $B mount -t ext4 "$LAB_DEV" /lab && export TMPDIR=/lab
fact fs "$($B stat -f -c %T /lab)"
fact tmpdir "$TMPDIR"
clock() {
  echo "$($B cat /sys/devices/system/clocksource/clocksource0/current_clocksource) $($B grep -m1 '.resolution' /proc/timer_list)"
}
fact clock "$(clock)"

/execprof run --steps 20 > /tmp/probe.txt 2>&1
fact probe_rc $?
/execprof run --steps 20 --repeat 1 -o /tmp/probe.execprof > /tmp/probe-repeat.txt 2>&1
fact probe_repeat_rc $?

run="/execprof run --sample-hz $SAMPLE_HZ"
single="--setup 'echo 0 > /proc/sys/fs/exec_lookup'"
double="--vs '' --vs-setup 'echo 1 > /proc/sys/fs/exec_lookup'"
for tag in $WORKLOADS; do
  eval "extra=\$EXTRA_$tag"
  if [ "$tag" = memcg ]; then
    # A child memory cgroup: struct file allocations are charged to it.
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control
    $B mkdir /sys/fs/cgroup/lab
    echo $$ > /sys/fs/cgroup/lab/cgroup.procs
    fact cgroup "$($B cat /proc/self/cgroup)"
  fi
  # Exact and sampled together (auto), then sampled alone: without the exact probes' cost
  # inside every probed call, the samples' shares are the kernel's own. The direct chain's
  # question is instructions per function: exact alone, no sampling interrupt in any of them.
  [ "$tag" = direct ] && run="/execprof run --sample-hz 0"
  eval "$run --mode auto --steps $STEPS $extra --repeat $REPEAT $single $double -o /tmp/$tag-single.execprof --vs-output /tmp/$tag-double.execprof" > /tmp/$tag-ab.txt 2>&1
  fact "rc_$tag-ab" $?
  if [ "$tag" != direct ]; then
    eval "$run --mode sampled --steps $STEPS $extra --repeat $REPEAT $single $double -o /tmp/$tag-sampled-single.execprof --vs-output /tmp/$tag-sampled-double.execprof" > /tmp/$tag-sampled-ab.txt 2>&1
    fact "rc_$tag-sampled-ab" $?
  fi
  eval "$run --mode auto --steps $STEPS $extra --repeat $REPEAT --setup 'echo 2 > /proc/sys/fs/exec_lookup' -o /tmp/$tag-none.execprof" > /tmp/$tag-none.txt 2>&1
  fact "rc_$tag-none" $?
  # Back to the root cgroup for the workloads after memcg.
  [ "$tag" = memcg ] && echo $$ > /sys/fs/cgroup/cgroup.procs
done
echo 0 > /proc/sys/fs/exec_lookup
fact clock_end "$(clock)"
# For humans reading console.log.
$B dmesg | $B grep -i 'clocksource\|unstable\|hrtimer\|high.res'
$B cp /tmp/*.execprof /tmp/*.txt $R/
echo "finished=yes" >> $R/result.env

$B sync
$B umount $R
# No ACPI in this kernel: power-off halts. A reboot ends QEMU (-no-reboot).
$B reboot -f
