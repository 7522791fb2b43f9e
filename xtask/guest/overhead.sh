#!/bin/busybox sh
# The init of `cargo xtask overhead`'s guest (the lab's 6.12 under -icount shift=0, where a
# guest nanosecond is one instruction): ROUNDS rounds, each side once per round in a rotating
# order, of
# - the built-in chain (STEPS steps, 6 misses) untraced (`execprof bench chain`), under
#   execprof (default: exact+sampled in this kernel; sampled only; exact only; the boundaries
#   alone with fentry/fexit, raw tracepoints and per-syscall events), and under the peers
#   (`perf record -g -F 999`, `perf trace -e execve`, a bpftrace script with three probes);
#   The always-on side: the chain untraced while `execprof agent --all` counts the whole
#   machine (default, sampling at 99 Hz; and without samples), beside a bpftrace script that
#   builds the same per-(comm, outcome) latency histograms with fentry/fexit (kfunc/kretfunc)
#   on the same functions;
# - the getpid loop (/getpid GETPID_CALLS) untraced and beside each tracer watching a
#   sleeping process (execprof with each boundary mechanism, perf trace, bpftrace), or the
#   whole machine (the agent, the histogram script);
# - a loop of failed execve calls (/enoent ENOENT_CALLS: a missing name in an existing
#   directory) untraced and under `execprof run` (the boundaries alone with fentry/fexit and
#   with raw tracepoints; the default), under the agent and under the histogram script: what
#   the tracer adds to one failed attempt;
# then, once each, exact mode, the boundaries alone and the agent with the BPF run-time
# statistics on (the budget per hook). The peers run in a chroot of this machine's userland (USERLAND_DEV,
# read-only, with /proc, /sys, /dev, a /tmp and the lab directory /run mounted inside), the
# chain at the same path as outside. Writes each run's JSON (or a loop's ns per call) to the
# results disk as rN-SIDE.json / rN-SIDE.txt / budget-SIDE.json, and result.env: kernel=,
# rc_rN-SIDE= and rc_budget-SIDE= per run, finished=yes last.
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
$B mount -t tracefs tracefs /sys/kernel/tracing
# The chain's directories, on ext4 as on a real machine, at /run both here and in the chroot.
$B mkdir -p /run && $B mount -t ext4 "$LAB_DEV" /run && export TMPDIR=/run
chain="--steps $STEPS --misses 6"
$B mkdir -p /run/enoent
# The peers' world: this machine's userland, read-only, with what a tool needs mounted in it.
U=/u
$B mkdir -p $U
if ! $B mount -t ext4 -o ro "$USERLAND_DEV" $U; then
  echo "overhead guest: cannot mount the userland $USERLAND_DEV"
  $B reboot -f
fi
$B mount -t proc proc $U/proc
$B mount -t sysfs sys $U/sys
$B mount -t tracefs tracefs $U/sys/kernel/tracing
$B mount -t devtmpfs dev $U/dev
$B mount -t tmpfs tmp $U/tmp
$B mount -o bind /run $U/run
$B cp /execprof $U/tmp/execprof
in_userland() { HOME=/tmp PATH=/usr/bin:/bin $B chroot $U "$@"; }
# bpftrace's script: the same three probes as benches/overhead.py's, and a BEGIN that says
# they are attached (bpftrace runs BEGIN after attaching every other probe).
BT='BEGIN { printf("attached\n"); }
tracepoint:syscalls:sys_enter_execve { @start[tid] = nsecs; }
tracepoint:syscalls:sys_exit_execve /@start[tid]/ { @lat[args->ret] = hist(nsecs - @start[tid]); delete(@start[tid]); }
tracepoint:sched:sched_process_exec { @execs = count(); }'

# The always-on peer: per-(comm, outcome) exec latency histograms and per-comm fork-family
# histograms, with fentry/fexit on the functions execprof's fentry boundaries use.
BT_HIST='BEGIN { printf("attached\n"); }
kfunc:__x64_sys_execve { @start[tid] = nsecs; }
kfunc:__x64_sys_execveat { @start[tid] = nsecs; }
kfunc:kernel_clone { @start[tid] = nsecs; }
kretfunc:__x64_sys_execve /@start[tid]/ { @exec[comm, retval] = hist(nsecs - @start[tid]); delete(@start[tid]); }
kretfunc:__x64_sys_execveat /@start[tid]/ { @exec[comm, retval] = hist(nsecs - @start[tid]); delete(@start[tid]); }
kretfunc:kernel_clone /@start[tid]/ { @fork[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }'
# The same six hooks with empty bodies: what the trampolines' dispatch into two BPF programs
# costs per call, the floor under any fentry/fexit tracer that times these calls.
BT_EMPTY='BEGIN { printf("attached\n"); }
kfunc:__x64_sys_execve { }
kfunc:__x64_sys_execveat { }
kfunc:kernel_clone { }
kretfunc:__x64_sys_execve { }
kretfunc:__x64_sys_execveat { }
kretfunc:kernel_clone { }'

# Starts a system-wide bpftrace with the script $1 (default: the three probes); returns once
# its probes are attached.
bpftrace_start() {
  in_userland bpftrace -B line -e "${1:-$BT}" > $U/tmp/bpftrace.out 2>&1 &
  bpftrace=$!
  while ! $B grep -q attached $U/tmp/bpftrace.out; do
    if ! $B kill -0 $bpftrace 2> /dev/null; then
      echo "overhead guest: bpftrace did not start:"; $B cat $U/tmp/bpftrace.out
      return 1
    fi
    $B usleep 10000
  done
}
# $bpftrace is the chroot's shell: the signal goes to bpftrace itself.
bpftrace_stop() {
  $B killall -INT bpftrace
  wait $bpftrace
}
# Starts `execprof agent --all` with the options given; returns once it counts.
agent_start() {
  $B rm -f /tmp/agent.err
  /execprof agent --all "$@" > /tmp/agent.out 2> /tmp/agent.err &
  agent=$!
  while ! $B grep -q "agent counting" /tmp/agent.err; do
    if ! $B kill -0 $agent 2> /dev/null; then
      echo "overhead guest: the agent did not start:"; $B cat /tmp/agent.err
      return 1
    fi
    $B usleep 10000
  done
}
agent_stop() {
  $B kill -TERM $agent
  wait $agent
}
# Runs "$@" while the agent (options $AGENT_OPTS) counts the whole machine.
under_agent() {
  agent_start $AGENT_OPTS || return 1
  "$@"; rc=$?
  agent_stop || return 1
  return $rc
}
# Runs "$@" while bpftrace runs the script $1 machine-wide.
under_bpftrace() {
  script=$1; shift
  [ -n "$script" ] || { echo "overhead guest: no bpftrace script to run"; return 1; }
  bpftrace_start "$script" || return 1
  "$@"; rc=$?
  bpftrace_stop
  return $rc
}
# Empty kfunc/kretfunc programs on the boundaries and on every function execprof's exact mode
# probes on this kernel (its own plan, read from a report, once): the floor of any tracer that
# times each of those calls with fentry/fexit.
empty_exact_script() {
  if [ ! -e /tmp/empty-exact.bt ]; then
    /execprof run --mode exact --sample-hz 0 --json /tmp/plan.json -- $B true > /dev/null 2>&1 || return 1
    { echo "$BT_EMPTY"
      for f in $($B sed -n 's/.*"raw_name": "\([^"]*\)".*/\1/p' /tmp/plan.json); do
        echo "kfunc:$f { }"; echo "kretfunc:$f { }"
      done; } > /tmp/empty-exact.bt
  fi
  $B cat /tmp/empty-exact.bt
}
# A profile side's reports of /tmp/profile.data: by command, object and symbol; by command and
# object; and the symbols of command $1 alone, as shares of the whole guest.
profile_reports() {
  in_userland perf report -i /tmp/profile.data --stdio --no-children --sort comm,dso,sym --percent-limit 0.25 > $R/$tag.txt 2> /dev/null || return 1
  in_userland perf report -i /tmp/profile.data --stdio --no-children --sort comm,dso > $R/$tag.dso.txt 2> /dev/null || return 1
  in_userland perf report -i /tmp/profile.data --stdio --no-children --comms $1 --sort dso,sym --percent-limit 0.05 > $R/$tag.execprof.txt 2> /dev/null
}

# Runs "$@" (a getpid loop) while execprof, or a peer, watches a sleeping process elsewhere.
beside() {
  watcher=$1; shift
  $B rm -f /tmp/ready $U/tmp/ready
  case $watcher in
    fentry | tracepoint | syscall-events)
      /execprof run --sample-hz 0 --boundaries $watcher -- /bin/sh -c "$B touch /tmp/ready; exec $B sleep 100000" > /dev/null 2>&1 &
      tracer=$!
      ready=/tmp/ready ;;
    perf-trace)
      in_userland perf trace -e execve -o /tmp/perf-trace.txt -- /bin/sh -c "touch /tmp/ready; exec sleep 100000" > /dev/null 2>&1 &
      tracer=$!
      ready=$U/tmp/ready ;;
    bpftrace)
      bpftrace_start || return 1
      "$@"; rc=$?
      bpftrace_stop
      return $rc ;;
    agent) AGENT_OPTS= under_agent "$@"; return $? ;;
    bpftrace-hist) under_bpftrace "$BT_HIST" "$@"; return $? ;;
  esac
  while [ ! -e $ready ]; do $B usleep 10000; done
  "$@"; rc=$?
  case $watcher in
    # perf trace ends with the userland's `sleep` it runs (the chroot's shell is $tracer).
    perf-trace) $B killall sleep ;;
    *) $B kill -INT $tracer ;;
  esac
  wait $tracer
  return $rc
}

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
    # Where the guest's instructions go while execprof traces the chain (default mode, the
    # boundaries alone): a machine-wide perf profile (cpu-clock at 4999 Hz: under icount a
    # sample every 200,000 instructions) of the chain's run only, not execprof's set-up or its
    # report: perf starts disabled and the traced command (a shell running the bench chain,
    # 10× the steps) switches it on and off through perf's control fifo. Everything runs in the
    # chroot, so perf finds the binaries; the report by command and object, then by symbol.
    # Once each, after the rounds.
    profile-default | profile-bare)
      opts=; [ $tag = profile-bare ] && opts="--mode sampled --sample-hz 1"
      $B rm -f $U/tmp/perf.ctl; $B mkfifo $U/tmp/perf.ctl
      in_userland perf record -q -a -F 4999 -D -1 --control fifo:/tmp/perf.ctl -o /tmp/profile.data -- \
        /tmp/execprof run $opts --json /tmp/$tag.json -- \
        /bin/sh -c "echo enable > /tmp/perf.ctl; /tmp/execprof bench chain --steps $((STEPS * 10)) --misses 6 --rounds 1 > /dev/null; echo disable > /tmp/perf.ctl" \
        > /dev/null 2>&1 || return 1
      $B cp $U/tmp/$tag.json $R/
      # execprof's own share, symbol by symbol.
      profile_reports execprof ;;
    # Where a failed exec's instructions go while the agent counts the whole machine, or
    # while execprof run (the boundaries alone) traces the loop: the failed-attempt loop (10×
    # the calls) profiled machine-wide, the tracer started first.
    profile-agent | profile-enoent-bare)
      $B cp /enoent $U/tmp/enoent
      $B cp /execprof $U/tmp/execprof
      loop="/tmp/enoent $((ENOENT_CALLS * 10)) /tmp/missing /tmp/enoent.txt"
      if [ $tag = profile-agent ]; then
        agent_start --sample-hz 0 || return 1
        in_userland perf record -q -a -F 4999 -o /tmp/profile.data -- $loop > /dev/null 2>&1
        rc=$?
        agent_stop || return 1
      else
        $B rm -f $U/tmp/perf.ctl; $B mkfifo $U/tmp/perf.ctl
        in_userland perf record -q -a -F 4999 -D -1 --control fifo:/tmp/perf.ctl -o /tmp/profile.data -- \
          /tmp/execprof run --mode sampled --sample-hz 1 -- \
          /bin/sh -c "echo enable > /tmp/perf.ctl; $loop; echo disable > /tmp/perf.ctl" > /dev/null 2>&1
        rc=$?
      fi
      [ $rc = 0 ] || return $rc
      profile_reports enoent ;;
    # The peers, on the same chain: perf and perf trace run it as their command (in the
    # chroot, from the same lab directory), bpftrace watches the whole machine while it runs.
    perf-record)
      in_userland perf record -q -g -F 999 -o /tmp/perf.data -- /tmp/execprof bench chain $chain --rounds 1 --json /tmp/$r-$tag.json > /dev/null 2>&1 \
        && $B cp $U/tmp/$r-$tag.json $R/ ;;
    perf-trace)
      in_userland perf trace -e execve -o /tmp/perf-trace.txt -- /tmp/execprof bench chain $chain --rounds 1 --json /tmp/$r-$tag.json > /dev/null 2>&1 \
        && $B cp $U/tmp/$r-$tag.json $R/ ;;
    bpftrace)
      bpftrace_start || return 1
      /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1; rc=$?
      bpftrace_stop
      return $rc ;;
    # The always-on agent counting the whole machine while the chain runs untraced; its own
    # report beside the chain's JSON.
    agent) AGENT_OPTS="--json $R/$r-$tag.agent.json" under_agent /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    agent-bare) AGENT_OPTS="--sample-hz 0 --json $R/$r-$tag.agent.json" under_agent /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    bpftrace-hist) under_bpftrace "$BT_HIST" /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    bpftrace-empty) under_bpftrace "$BT_EMPTY" /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    bpftrace-empty-exact) under_bpftrace "$(empty_exact_script)" /execprof bench chain $chain --rounds 1 --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    budget-agent) AGENT_OPTS="--sample-hz 0 --probe-costs --json $R/$tag.agent.json" under_agent /execprof bench chain $chain --rounds 1 --json $R/$tag.json > /dev/null 2>&1 ;;
    bare-syscall-events) /execprof run $chain --mode sampled --sample-hz 1 --boundaries syscall-events --json $R/$r-$tag.json > /dev/null 2>&1 ;;
    getpid-untraced) /getpid $GETPID_CALLS > $R/$r-$tag.txt ;;
    getpid-*) beside ${tag#getpid-} /getpid $GETPID_CALLS > $R/$r-$tag.txt ;;
    # Failed attempts, one after another: what each costs untraced and traced.
    enoent-untraced) /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt ;;
    enoent-bare) /execprof run --mode sampled --sample-hz 1 --json $R/$r-$tag.json -- /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
    enoent-bare-tracepoint) /execprof run --mode sampled --sample-hz 1 --boundaries tracepoint --json $R/$r-$tag.json -- /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
    enoent-default) /execprof run --json $R/$r-$tag.json -- /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
    enoent-agent) AGENT_OPTS="--json $R/$r-$tag.json" under_agent /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
    enoent-bpftrace-hist) under_bpftrace "$BT_HIST" /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
    enoent-bpftrace-empty) under_bpftrace "$BT_EMPTY" /enoent $ENOENT_CALLS /run/enoent/missing $R/$r-$tag.txt > /dev/null 2>&1 ;;
  esac
}

# The sides (SIDES) and budget sides (BUDGETS) cargo xtask overhead chose.
sides=$SIDES
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
for tag in $BUDGETS; do
  side $tag
  echo "rc_$tag=$?" >> $R/result.env
  echo "overhead guest: $tag done"
done
echo "finished=yes" >> $R/result.env
$B sync
$B umount $R
# No ACPI in this kernel: power-off halts. A reboot ends QEMU (-no-reboot).
$B reboot -f
