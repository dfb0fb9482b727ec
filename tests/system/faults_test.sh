#!/usr/bin/env bash
# Fault injection over the multi-process transports (tests/system/fault_main.cc does the faults):
#   kill-partial    a rank SIGKILLed between solo partial-allreduce rounds
#   kill-bootstrap  a rank SIGKILLed while the job bootstraps
#   stop (long)     a rank SIGSTOPped for longer than EAGERCOMM_TIMEOUT, in sync and solo
#   stop (short)    a rank SIGSTOPped for less: both modes wait for it and finish correctly
#   hang (P = 8)    a rank SIGSTOPped while calls wait forever: its watchers (data partners)
#                   declare it hung and the verdict reaches the ranks that do not watch it
#   straggle        a live rank late by more than the timeout: the error lists it as not arrived
#   abort           Communicator::abort() from another thread unblocks the caller's wait
# Each failure case checks: the survivors' errors name the rank within 2x EAGERCOMM_TIMEOUT, the
# launcher exits non-zero, nothing is left in /dev/shm, nothing hangs (ctest's TIMEOUT).
# usage: tests/system/faults_test.sh <build-dir> [all|verbs_emulated]
#   all (default)   every case over shm (and ucx where available)
#   verbs_emulated  the kill and stop cases (both stop lengths) over the verbs transport on the
#                   emulated RDMA device (EAGERCOMM_VERBS_EMULATE=1): a killed rank's port stops
#                   answering (the survivors' writes end in RETRY_EXC), a stopped one's stops
#                   draining (only liveness or the timeout can name it)
set -uo pipefail
build=${1:?usage: faults_test.sh <build-dir> [all|verbs_emulated]}
variant=${2:-all}
run=$build/tools/eagercomm-run
prog=$build/tests/fault_main
[ -x "$run" ] && [ -x "$prog" ] || { echo "FAIL: $run or $prog not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- stdout:"; cat "$tmp/out"; echo "--- stderr:"; tail -n 40 "$tmp/err"; exit 1
}

case $variant in
  all)
    transports=(shm)
    "$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +ucx +compiled=yes available=yes" >/dev/null \
      && transports+=(ucx)
    short_transports=(shm)  # the stop shorter than the timeout
    ;;
  verbs_emulated)
    export EAGERCOMM_VERBS_EMULATE=1
    # 67 ms per ACK try (4.096 us x 2^14), 8 tries: a killed rank's port fails the survivors'
    # writes with RETRY_EXC after ~0.5 s, inside the 2 x EAGERCOMM_TIMEOUT bound. A NIC-like
    # default such as 18 (1.07 s, ~8.6 s in all) leaves a kill to the round's own timeout,
    # which reports it as silent, not failed.
    export EAGERCOMM_IB_TIMEOUT=${EAGERCOMM_IB_TIMEOUT:-14}
    "$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +verbs +compiled=yes available=yes" >/dev/null \
      || { echo "FAIL: verbs is not available on the emulated device (eagercomm-info):" >&2
           "$build/tools/eagercomm-info" 2>&1 | grep -E "^# +verbs" >&2; exit 1; }
    transports=(verbs)
    short_transports=(verbs)
    ;;
  *) echo "FAIL: unknown variant '$variant' (usage: faults_test.sh <build-dir> [all|verbs_emulated])" >&2
     exit 2 ;;
esac

n=3
victim=$((n - 1))

# Runs one job: <transport> <timeout> <fault_main args...>; sets rc, took, job.
job() {
  local transport=$1 timeout=$2
  shift 2
  local start
  start=$(date +%s.%N)
  # The launcher waits 60 s before stopping the others after a rank's exit: every detection
  # checked here is the survivors' own.
  EAGERCOMM_TIMEOUT=$timeout "$run" -n $n --transport "$transport" --stop-delay 60s -- \
    sh -c '[ "$EAGERCOMM_RANK" = 0 ] && echo "JOB=$EAGERCOMM_JOB_ID"; exec "$0" "$@"' "$prog" "$@" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  job=$(sed -n 's/^\[0\] JOB=//p' "$tmp/out")
}

shm_clean() {
  [ -n "$job" ] || return 0  # rank 0 never printed (killed before): nothing to look up
  local left
  left=$(ls /dev/shm | grep -c "^eagercomm-$job-")
  [ "$left" -eq 0 ] || fail "$1: $left objects of job $job left in /dev/shm"
}

# Every survivor (ranks below the victim) reported an error matching <code-regex> and
# <message-regex>, within <limit> seconds of its last success; named_after: the slowest's seconds.
survivors_detected() {
  local what=$1 code=$2 pattern=$3 limit=$4 r line secs
  named_after=0
  for ((r = 0; r < victim; r++)); do
    line=$(grep "^\[$r\] DETECTED " "$tmp/out") || fail "$what: rank $r reported no error"
    grep -Eq "code=($code) " <<<"$line" || fail "$what: rank $r: wrong code: $line"
    grep -Eq "$pattern" <<<"$line" || fail "$what: rank $r: message lacks /$pattern/: $line"
    secs=$(sed -n 's/.* seconds=\([0-9.]*\) .*/\1/p' <<<"$line")
    awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s < l) }' \
      || fail "$what: rank $r took $secs s to report (limit $limit s)"
    named_after=$(awk -v s="$secs" -v m="$named_after" 'BEGIN { print (s > m ? s : m) }')
  done
}

for transport in "${transports[@]}"; do
  # A rank SIGKILLed between partial rounds: liveness (shm) or the transport (ucx) notices.
  job "$transport" 3s kill-partial
  what="$transport kill-partial"
  [ $rc -eq 137 ] || fail "$what: launcher exited $rc, expected 137"
  survivors_detected "$what" "peer failed" "rank $victim" 6
  shm_clean "$what"
  echo "faults_test: $what: survivors named rank $victim within ${named_after}s; exit 137 after ${took}s"

  # A rank SIGKILLed during bootstrap: a timeout naming it, the transport failing to connect to
  # it (ucx: "cannot reach rank 2", an I/O error), or a peer failure after the join.
  job "$transport" 3s kill-bootstrap
  what="$transport kill-bootstrap"
  [ $rc -ne 0 ] || fail "$what: launcher exited 0"
  survivors_detected "$what" "peer failed|timeout|i/o error" "rank $victim|joined: $victim" 8
  shm_clean "$what"
  echo "faults_test: $what: survivors named rank $victim within ${named_after}s; exit $rc after ${took}s"

  # Stopped longer than the timeout: declared hung (or the call's timeout names it silent).
  for mode in sync solo; do
    job "$transport" 3s stop 9 "$mode" 200
    what="$transport stop 9s > timeout 3s, $mode"
    [ $rc -ne 0 ] || fail "$what: launcher exited 0"
    survivors_detected "$what" "peer failed|timeout" "rank $victim" 6
    shm_clean "$what"
    echo "faults_test: $what: survivors named rank $victim within ${named_after}s; exit $rc after ${took}s"
  done

  # A live straggler: the timeout's error lists it among the ranks that had not arrived. (Not in
  # the verbs_emulated run: a straggler's port answers, so it tells nothing of how a transport
  # finds a failed peer.)
  [ "$variant" = all ] || continue
  job "$transport" 2s straggle 5
  what="$transport straggle 5s > timeout 2s"
  [ $rc -ne 0 ] || fail "$what: launcher exited 0"
  survivors_detected "$what" "timeout" "had not started it: rank $victim \\(alive" 4
  shm_clean "$what"
  echo "faults_test: $what: survivors listed rank $victim as not arrived; exit $rc after ${took}s"
done

# Hung verdicts travel: at P = 8 only the victim's partners (data_partners(): r +- 2^k and the
# recursive-doubling partners; 0, 1, 3, 5, 6 for rank 7) watch it, and ranks 2 and 4 learn that
# it hung from the verdict the watchers pass on. Their calls would fail anyway (a failed
# collective's error reaches every rank), so the check is one more barrier a second later: a rank
# that marked rank 7 gone fails it at once with its own "rank 7 is not responding" (without the
# verdict, 2 and 4 get the others' "rank N stopped: ..." or a timeout instead).
if [ "$variant" = all ]; then
  n=8 victim=7
  job shm 3s hang 6 200
  what="shm P=8 hang 6s > timeout 3s"
  [ $rc -ne 0 ] || fail "$what: launcher exited $rc, expected non-zero"
  survivors_detected "$what" "peer failed" "rank 7 is not responding" 8
  for ((r = 0; r < victim; r++)); do
    grep "^\[$r\] AFTER " "$tmp/out" | grep -q "code=peer failed message=rank 7 is not responding" \
      || fail "$what: rank $r had not marked rank 7 gone: $(grep "^\[$r\] AFTER " "$tmp/out")"
  done
  told=$(grep -c "^\[[0-6]\] DETECTED .*told by rank" "$tmp/out")
  shm_clean "$what"
  echo "faults_test: $what: all 7 survivors marked rank 7 hung within ${named_after}s ($told reported a watcher's verdict)"
  n=3 victim=2
fi

# Stopped for less than the timeout: sync waits, solo goes on; results are checked. (On the
# emulated verbs device a stopped rank's port stops draining its inbound ring, and its peers'
# writes wait there without retries until it runs again; a NIC would place them and only the
# credits would wait. Either way nobody may call it lost.)
for transport in "${short_transports[@]}"; do
  for mode in sync solo; do
    job "$transport" 8s stop 1.5 "$mode" 30
    what="$transport stop 1.5s < timeout 8s, $mode"
    [ $rc -eq 0 ] || fail "$what: launcher exited $rc"
    for ((r = 0; r < n; r++)); do
      grep -q "^\[$r\] DONE rank=$r rounds=30" "$tmp/out" || fail "$what: rank $r did not finish"
    done
    shm_clean "$what"
    echo "faults_test: $what: every rank finished with correct results in ${took}s"
  done
done
[ "$variant" = all ] || { echo "faults_test: OK ($variant)"; exit 0; }

# abort() from a second thread of rank 0: its wait ends with the reason, the peer in the same
# allreduce hears the reason, the late rank finds rank 0 gone.
job shm 30s abort
what="shm abort"
[ $rc -ne 0 ] || fail "$what: launcher exited 0"
line=$(grep "^\[0\] DETECTED " "$tmp/out") || fail "$what: rank 0 reported nothing"
grep -q "code=aborted .*operator pressed stop" <<<"$line" || fail "$what: rank 0: $line"
secs=$(sed -n 's/.* seconds=\([0-9.]*\) .*/\1/p' <<<"$line")
awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "$what: rank 0 returned after $secs s"
line=$(grep "^\[1\] DETECTED " "$tmp/out") || fail "$what: rank 1 reported nothing"
grep -q "code=peer failed .*operator pressed stop" <<<"$line" || fail "$what: rank 1: $line"
line=$(grep "^\[$victim\] DETECTED " "$tmp/out") || fail "$what: rank $victim reported nothing"
grep -q "code=peer failed .*rank 0" <<<"$line" || fail "$what: rank $victim: $line"
shm_clean "$what"
echo "faults_test: $what: rank 0 returned in ${secs}s with the reason; peers told"
echo "faults_test: OK"
