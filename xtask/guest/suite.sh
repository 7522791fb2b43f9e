# Runs every test binary of the suite, as `cargo test` would: in its package's directory,
# root tests included, one test thread. Runs in the guest's test root (this machine's
# userland, so /bin/sh here is the host's shell, not busybox). /suite-tests lists the
# binaries, one `EXECUTABLE DIRECTORY` a line; binary N (from 0) writes its exit code as
# test_rc_N= to /results/result.env and its output to /results/tests/N.log (and the console).
# /guest.env sets INSTA_ROOT (insta finds the snapshots from the workspace root, which it asks
# cargo for otherwise) and SLOWDOWN (TCG's slowdown, by which the tests scale their few
# wall-clock limits), and TEST_FILTER (empty: every test; else only the tests whose names
# contain one of its words, as `cargo test FILTER...`: split here on purpose), and HOST_ONLY
# (`--skip NAME` for each test left to the host: see HOST_ONLY_TESTS in xtask/src/suite.rs).
# Each test's seconds are in its line (libtest's --report-time, unlocked by RUSTC_BOOTSTRAP for
# the test binary only): the CI log names the slowest tests of each guest from them.
. /guest.env
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root CI=true INSTA_UPDATE=no
export INSTA_WORKSPACE_ROOT="$INSTA_ROOT" EXECPROF_TEST_SLOWDOWN="$SLOWDOWN"
i=0
while read -r exe dir; do
  echo "vm-suite guest: test binary $i: $exe"
  { cd "$dir" && RUSTC_BOOTSTRAP=1 "$exe" --include-ignored --test-threads=1 -Zunstable-options --report-time $HOST_ONLY $TEST_FILTER < /dev/null; echo "test_rc_$i=$?" >> /results/result.env; } 2>&1 \
    | tee /results/tests/$i.log
  sync
  i=$((i + 1))
done < /suite-tests
