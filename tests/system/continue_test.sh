#!/usr/bin/env bash
# Continuing through a failure (issue 22, item 3): a partial allreduce with on_failure=continue
# in which one rank SIGKILLs itself at a point drawn from the seed (before or after a post, after
# taking results, at a random moment, during a flush, after it: tests/system/continue_main.cc),
# under eagercomm-run --keep-going. For every seed: the victim's death is the job's status (137),
# every survivor exits 0 having checked its own posts and the dead rank's prefix, and the
# survivors' results are identical (same rounds, same digest) and add up (their posts plus the
# dead rank's included posts make the posts count the results hold). Over shm also a rank that
# hangs (SIGSTOP), declared hung by the survivors. Nothing is left in /dev/shm.
# usage: tests/system/continue_test.sh <build-dir> [shm|ucx|verbs_emulated] [seeds]
set -uo pipefail
build=${1:?usage: continue_test.sh <build-dir> [shm|ucx|verbs_emulated] [seeds]}
transport=${2:-shm}
seeds=${3:-${EAGERCOMM_TEST_SEEDS:-6}}
run=$build/tools/eagercomm-run
prog=$build/tests/continue_main
[ -x "$run" ] && [ -x "$prog" ] || { echo "FAIL: $run or $prog not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export EAGERCOMM_TIMEOUT=${EAGERCOMM_TIMEOUT:-20s}
case $transport in
  shm) ;;
  ucx)
    "$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +ucx +compiled=yes available=yes" \
      >/dev/null || { echo "SKIP: ucx is not available here"; exit 0; } ;;
  verbs_emulated)
    export EAGERCOMM_VERBS_EMULATE=1 EAGERCOMM_IB_TIMEOUT=${EAGERCOMM_IB_TIMEOUT:-14}
    transport=verbs ;;
  *) echo "usage: continue_test.sh <build-dir> [shm|ucx|verbs_emulated] [seeds]" >&2; exit 2 ;;
esac
modes=(solo majority "quorum:3" sync "deadline:2ms" adaptive)
fails=0
jobs=()  # this script's jobs: their objects must all be gone from /dev/shm at the end
# check WHAT CODE [NEEDLE]: one run's output in $tmp against every invariant (NEEDLE: a line
# stderr must hold).
check() {
  local what=$1 code=$2 needle=${3:-} problem="" survivors posts line victim total
  jobs+=("$(sed -n 's/^JOB=//p' "$tmp/out")")
  survivors=$(grep -c '^SURVIVOR ' "$tmp/out")
  if [ "$code" -ne 137 ]; then
    problem="the job exited $code, expected 137 (the victim's SIGKILL)"
  elif [ "$survivors" -ne 3 ]; then
    problem="$survivors survivors reported, expected 3"
  elif [ "$(grep '^SURVIVOR ' "$tmp/out" | sed 's/^SURVIVOR rank=[0-9]* //' | sort -u | wc -l)" -ne 1 ]; then
    problem="the survivors' results differ"
  elif [ -n "$needle" ] && ! grep -q "$needle" "$tmp/err"; then
    problem="no '$needle' in the log"
  else
    posts=$(( $(grep "^POSTS " "$tmp/out" | sed "s/.*posts=//" | paste -sd+) ))
    line=$(grep -m1 '^SURVIVOR ' "$tmp/out")
    victim=$(sed 's/.*victim_posts=\([0-9]*\).*/\1/' <<<"$line")
    total=$(sed 's/.*posts_total=\([0-9]*\).*/\1/' <<<"$line")
    [ $((posts + victim)) -eq "$total" ] ||
      problem="the results hold $total posts, the survivors made $posts and the victim $victim"
  fi
  if [ -n "$problem" ]; then
    echo "FAIL: $what: $problem"
    echo "--- stdout:"; cat "$tmp/out"; echo "--- stderr:"; tail -n 30 "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $what: $(grep -m1 '^SURVIVOR ' "$tmp/out" | sed 's/^SURVIVOR rank=[0-9]* //')"
  fi
}
for ((s = 1; s <= seeds; s++)); do
  mode=${modes[$(( (s - 1) % ${#modes[@]} ))]}
  seed=$((7919 * s + 4))
  timeout 120 "$run" -n 4 --keep-going --transport "$transport" --no-prefix \
    "$prog" "$seed" "$mode" >"$tmp/out" 2>"$tmp/err"
  check "P=4 $transport mode $mode seed $seed" $?
done
# A rank that hangs (SIGSTOP) instead: the survivors declare it hung after EAGERCOMM_TIMEOUT
# (3 s here) and go on; a child of the victim SIGKILLs it 10 s after it stopped, ending the job.
if [ "$transport" = shm ]; then
  for mode in solo sync; do
    EAGERCOMM_TIMEOUT=3s timeout 120 "$run" -n 4 --keep-going --transport "$transport" \
      --no-prefix "$prog" 4242 "$mode" 30 hang >"$tmp/out" 2>"$tmp/err"
    check "P=4 $transport mode $mode seed 4242, the victim hangs" $? "not responding"
  done
fi
sleep 0.5
for job in "${jobs[@]}"; do
  [ -n "$job" ] || continue
  left=$(ls /dev/shm | grep -c "^eagercomm-$job-" || true)
  if [ "$left" -gt 0 ]; then
    echo "FAIL: $left objects of job $job left in /dev/shm"
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] && echo "continue_test: $seeds seeds over $transport passed"
exit $((fails > 0))
