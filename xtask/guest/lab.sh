#!/bin/busybox sh
# The init of `cargo xtask lab`'s guests: one boot of one kernel (the base or a patched one)
# runs the same workload twice: an exact pass (`--mode exact --sample-hz 0`: no sample lands
# inside a probed call and adds its cost to it) and a sampled pass (`--mode sampled`: no
# probe inside the parts being weighed). The runs write to /tmp; at the end the recordings
# (exact.execprof, sampled.execprof), execprof's output (exact.txt, sampled.txt), the kernel's
# log (dmesg.txt) and result.env go onto the results disk (an empty ext4 image the host reads
# back after QEMU exits). result.env: facts about the guest (kernel=, lsm=, fs=, tmpdir=,
# clock=, cgroup=), each pass's exit code (rc_exact=, rc_sampled=), then finished=yes as the
# last line.
# /guest.env (written by xtask) sets SAMPLE_HZ, RUN_OPTS (the workload's `execprof run`
# options), RUN_CMD (empty, or `-- COMMAND ...` already quoted for the shell), MEMCG (yes: the
# workload runs in a child memory cgroup), LAB_DEV (the ext4 disk the workload's files go on)
# and RESULTS_DEV.
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
  echo "lab guest: cannot mount the results disk $RESULTS_DEV"
  $B reboot -f
fi
fact() {
  echo "lab guest: $1=$2"
  echo "$1=$2" >> $R/result.env
}
: > $R/result.env
fact kernel "$($B uname -r)"
# Emulated perf interrupts are slow: without this the kernel would lower
# perf_event_max_sample_rate during a run, and the sampled pass's --sample-hz would be refused.
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
$B mount -t securityfs none /sys/kernel/security
fact lsm "$($B cat /sys/kernel/security/lsm)"
# The workload's files (the chain's directories: execprof makes them under $TMPDIR) on the
# lab's ext4 disk: negative dentries cached, as on a real machine, unlike tmpfs.
$B mkdir -p /lab && $B mount -t ext4 "$LAB_DEV" /lab && export TMPDIR=/lab
fact fs "$($B stat -f -c %T /lab)"
fact tmpdir "$TMPDIR"
clock() {
  echo "$($B cat /sys/devices/system/clocksource/clocksource0/current_clocksource) $($B grep -m1 '.resolution' /proc/timer_list)"
}
fact clock "$(clock)"
if [ "$MEMCG" = yes ]; then
  # A child memory cgroup: the exec's allocations (struct file, mm, pages) are charged to it.
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control
  $B mkdir /sys/fs/cgroup/lab
  echo $$ > /sys/fs/cgroup/lab/cgroup.procs
fi
fact cgroup "$($B cat /proc/self/cgroup)"

cd /lab
eval "/execprof run --mode exact --sample-hz 0 $RUN_OPTS -o /tmp/exact.execprof $RUN_CMD" > /tmp/exact.txt 2>&1
fact rc_exact $?
eval "/execprof run --mode sampled --sample-hz $SAMPLE_HZ $RUN_OPTS -o /tmp/sampled.execprof $RUN_CMD" > /tmp/sampled.txt 2>&1
fact rc_sampled $?
cd /
fact clock_end "$(clock)"
$B dmesg > /tmp/dmesg.txt
$B cp /tmp/*.execprof /tmp/*.txt $R/
echo "finished=yes" >> $R/result.env

$B sync
$B umount $R
# No ACPI in this kernel: power-off halts. A reboot ends QEMU (-no-reboot).
$B reboot -f
