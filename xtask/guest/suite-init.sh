#!/bin/busybox sh
# The init of `cargo xtask vm-suite`'s guest: mounts the root file system the tests run in
# (the repository's files over this machine's userland, writes in a tmpfs), and runs
# suite.sh in it with the results disk at /results (an empty ext4 image the host reads back
# after QEMU exits). result.env gets kernel= and note= lines here, test_rc_N= lines from
# suite.sh, and finished=yes as the last line.
# /guest.env (written by xtask) sets USERLAND_DEV, REPO_DEV and RESULTS_DEV.
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
. /guest.env

# Notes for the host: kept until the results disk is mounted, then written as they come.
notes=""
note() {
  echo "vm-suite guest: $*"
  if [ -f /results/result.env ]; then echo "note=$*" >> /results/result.env; else notes="${notes}note=$*
"; fi
}
# virtio and overlay, where the kernel has them as modules (xtask numbered them in load
# order).
for m in /modules/*.ko; do
  [ -f "$m" ] || continue
  $B insmod "$m" || note "insmod $m failed"
done
# Loopback up: the agent's metrics endpoint is tested on 127.0.0.1.
$B ifconfig lo 127.0.0.1 up || $B ip link set lo up || note "no loopback"
R=/results
$B mkdir -p /userland /repo /rw /newroot $R
if ! $B mount -t ext4 "$RESULTS_DEV" $R; then
  echo "vm-suite guest: cannot mount the results disk $RESULTS_DEV"
  $B poweroff -f
fi
echo "kernel=$($B uname -r)" > $R/result.env
printf '%s' "$notes" >> $R/result.env
$B mkdir -p $R/tests
# On disk now, and after each binary (suite.sh): a guest whose kernel crashes still tells
# which binaries finished, so only the others run again.
$B sync

$B mount -t ext4 -o ro "$USERLAND_DEV" /userland || note "no userland disk"
$B mount -t ext4 -o ro "$REPO_DEV" /repo || note "no repository disk"
$B mount -t tmpfs -o size=3g rw /rw
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/repo:/userland,upperdir=/rw/upper,workdir=/rw/work /newroot || note "overlay failed"
$B mount -t proc proc /newroot/proc
$B mount -t sysfs sys /newroot/sys
# tracefs, as systemd mounts it on a Debian machine (the per-syscall events are found there).
$B mount -t tracefs tracefs /newroot/sys/kernel/tracing || note "no tracefs"
$B mount -t devtmpfs dev /newroot/dev
$B mkdir -p /newroot$R
$B mount -o bind $R /newroot$R
$B cp /suite.sh /suite-tests /guest.env /newroot/
$B chroot /newroot /bin/sh /suite.sh
echo "finished=yes" >> $R/result.env

$B umount /newroot$R
$B sync
$B umount $R
$B poweroff -f
