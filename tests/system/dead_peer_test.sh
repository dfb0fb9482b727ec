#!/usr/bin/env bash
# A rank SIGKILLed in the middle of an allreduce (tests/system/dead_peer_main.cc), on every
# multi-process transport built: each surviving rank gets kPeerFailed naming the dead rank long
# before EAGERCOMM_TIMEOUT, eagercomm-run exits with the killed rank's code (137), and no
# shared-memory object of the job is left in /dev/shm. Also over 2 ranks (nobody left to tell
# the survivor but the kernel) and with the launcher told to stop the others at once.
# usage: tests/system/dead_peer_test.sh <build-dir>
set -uo pipefail
build=${1:?usage: dead_peer_test.sh <build-dir>}
run=$build/tools/eagercomm-run
prog=$build/tests/dead_peer_main
[ -x "$run" ] && [ -x "$prog" ] || { echo "FAIL: $run or $prog not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; echo "--- stdout:"; cat "$tmp/out"; echo "--- stderr:"; cat "$tmp/err"; exit 1; }

transports=(shm)
"$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +ucx +compiled=yes available=yes" >/dev/null \
  && transports+=(ucx)

# The timeout is far above what detection needs (~0.1 s): an error that only comes from the
# timeout fails the check on "seconds" below.
export EAGERCOMM_TIMEOUT=60s
# 4096 floats go through the mailbox; on shm, 16 floats go through the small boxes, whose
# waiters do not hear the transport (they must still notice the death).
cases=()
for transport in "${transports[@]}"; do cases+=("$transport 4096"); done
cases+=("shm 16")
for c in "${cases[@]}"; do
  read -r transport count <<<"$c"
  for n in 2 4; do
    start=$(date +%s)
    "$run" -n "$n" --transport "$transport" --stop-delay 30s -- \
      sh -c '[ "$EAGERCOMM_RANK" = 0 ] && echo "JOB=$EAGERCOMM_JOB_ID"; exec "$0" "$1"' "$prog" "$count" \
      >"$tmp/out" 2>"$tmp/err"
    rc=$?
    took=$(($(date +%s) - start))
    victim=$((n - 1))
    [ $rc -eq 137 ] || fail "$transport n=$n: launcher exited $rc, expected 137 (rank $victim SIGKILLed)"
    grep -q "rank $victim (pid [0-9]*) was killed by signal 9 (SIGKILL)" "$tmp/err" \
      || fail "$transport n=$n: the launcher did not report the killed rank"
    for ((r = 0; r < victim; r++)); do
      line=$(grep "^\[$r\] DETECTED " "$tmp/out") || fail "$transport n=$n: rank $r did not report the failure"
      case $line in
        *"code=peer failed"*"rank $victim"*) ;;
        *) fail "$transport n=$n: rank $r: wrong error: $line" ;;
      esac
      # The transport's cause travels with the error (Transport::peer_error), not only "lost".
      if [[ $count == 4096 && $line != *"process is gone"* ]]; then
        fail "$transport n=$n: rank $r: the error does not say why rank $victim was lost: $line"
      fi
      secs=$(sed -n 's/.* seconds=\([0-9.]*\) .*/\1/p' <<<"$line")
      awk -v s="$secs" 'BEGIN { exit !(s < 20) }' \
        || fail "$transport n=$n: rank $r took $secs s to notice (timeout 60 s)"
    done
    job=$(sed -n 's/^\[0\] JOB=//p' "$tmp/out")
    [ -n "$job" ] || fail "no job id printed"
    left=$(ls /dev/shm | grep -c "^eagercomm-$job-")
    [ "$left" -eq 0 ] || fail "$transport n=$n: $left objects of job $job left in /dev/shm"
    echo "dead_peer_test: $transport n=$n count=$count: survivors named rank $victim; launcher exit 137 after ${took}s; /dev/shm clean"
  done
done

# With --stop-delay 0 the launcher stops the survivors at once (torchrun's behaviour).
"$run" -n 3 --transport shm --stop-delay 0 -- "$prog" 4096 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 137 ] || fail "--stop-delay 0: launcher exited $rc"
echo "dead_peer_test: OK"
