#!/bin/busybox sh
# The init of `cargo xtask overhead`'s guest (the lab's 6.12 under -icount shift=0, where a
# guest nanosecond is one instruction): ROUNDS rounds, each side once per round in a rotating
# order, of the built-in chain (STEPS steps, 6 misses) untraced (`execprof bench chain`) and
# under execprof (default: exact+sampled in this kernel; sampled only; exact only; the
# boundaries alone, fentry/fexit and raw tracepoints),
# and of the getpid loop (/getpid GETPID_CALLS) untraced and beside execprof tracing a
# sleeping process, with fentry/fexit and with raw tracepoint boundaries; then, once each,
# exact mode and the boundaries alone with the BPF run-time statistics on (the budget per
# hook). Writes each run's JSON (or the loop's ns per call) to the results disk as
# rN-SIDE.json / rN-SIDE.txt / budget-SIDE.json, and result.env: kernel=, rc_rN-SIDE= and
# rc_budget-SIDE= per run, finished=yes last.
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
  echo "overhead guest: cannot mount the results disk $RESULTS_DEV"
  $B reboot -f
fi
echo "kernel=$($B uname -r)" > $R/result.env
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
$B mkdir -p /lab && $B mount -t ext4 "$LAB_DEV" /lab && export TMPDIR=/lab
chain="--steps $STEPS --misses 6"

side() {
  tag=$1
  case $tag in
    untraced) /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    default) /execprof run $chain --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    sampled) /execprof run $chain --mode sampled --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    exact) /execprof run $chain --mode exact --sample-hz 0 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    # The boundaries alone: no exact mode, and sampling at 1 Hz (execprof has no mode without
    # either on a kernel that allows exact mode; a run this short takes no sample or one).
    bare) /execprof run $chain --mode sampled --sample-hz 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    bare-tracepoint) /execprof run $chain --mode sampled --sample-hz 1 --boundaries tracepoint --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    # The budget, hook by hook: the kernel's BPF run-time statistics (--probe-costs), whose
    # nanoseconds are instructions here. Once each, after the rounds: they are deterministic.
    budget-exact) /execprof run $chain --mode exact --sample-hz 0 --probe-costs --json $R/$tag.json > /dev/null 2>&1 ;;
    budget-bare) /execprof run $chain --mode sampled --sample-hz 1 --probe-costs --json $R/$tag.json > /dev/null 2>&1 ;;
    budget-bare-tracepoint) /execprof run $chain --mode sampled --sample-hz 1 --boundaries tracepoint --probe-costs --json $R/$tag.json > /dev/null 2>&1 ;;
    getpid-untraced) /getpid $GETPID_CALLS > $R/$r-$tag.txt ;;
    getpid-fentry | getpid-tracepoint)
      $B rm -f /tmp/ready
      /execprof run --sample-hz 0 --boundaries ${tag#getpid-} -- /bin/sh -c "$B touch /tmp/ready; exec $B sleep 100000" > /dev/null 2>&1 &
      tracer=$!
      while [ ! -e /tmp/ready ]; do $B usleep 10000; done
      /getpid $GETPID_CALLS > $R/$r-$tag.txt
      rc=$?
      $B kill -INT $tracer
      wait $tracer
      return $rc ;;
  esac
}

sides="untraced default sampled exact bare bare-tracepoint getpid-untraced getpid-fentry getpid-tracepoint"
n=$(echo $sides | $B wc -w)
/execprof bench chain --steps 20 --misses 6 --rounds 1 > /dev/null 2>&1  # warm the caches
i=1
while [ $i -le $ROUNDS ]; do
  r=r$i
  # Rotate the order by one side per round.
  order=$(echo $sides $sides | $B cut -d' ' -f$(( (i - 1) % n + 1 ))-$(( (i - 1) % n + n )))
  for tag in $order; do
    side $tag
    echo "rc_$r-$tag=$?" >> $R/result.env
    echo "overhead guest: round $i $tag done"
  done
  i=$((i + 1))
done
for tag in budget-exact budget-bare budget-bare-tracepoint; do
  side $tag
  echo "rc_$tag=$?" >> $R/result.env
  echo "overhead guest: $tag done"
done
echo "finished=yes" >> $R/result.env
$B sync
$B umount $R
# No ACPI in this kernel: power-off halts. A reboot ends QEMU (-no-reboot).
$B reboot -f
