#!/usr/bin/env bash
# The partial-allreduce soak (issue #7): 4 processes over TRANSPORT (default shm) run ROUNDS
# (default 100000) posts each of solo and of majority allreduce with random delays, then check
# identical replicas and exact conservation (tests/system/soak_main.cc). ctest runs it with 2000 rounds,
# over shm and over verbs on the emulated device (EAGERCOMM_VERBS_EMULATE=1 in its environment).
# usage: tests/system/soak.sh [BUILD] [ROUNDS] [TRANSPORT]
set -euo pipefail
build=${1:-build/default}
rounds=${2:-100000}
transport=${3:-shm}
run=$build/tools/eagercomm-run
soak=$build/tests/soak_main
[[ -x $run && -x $soak ]] || { echo "soak: build $build first" >&2; exit 2; }
[[ $transport =~ ^(shm|ucx|verbs)$ ]] ||
  { echo "soak: transport '$transport' is not one of shm, ucx, verbs" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for mode in solo majority; do
  # Rank 0 names the job, so that only this job's segments are looked for afterwards (other
  # tests may run at the same time).
  "$run" -n 4 --transport "$transport" --no-prefix sh -c \
    '[ "$EAGERCOMM_RANK" = 0 ] && echo "JOB=$EAGERCOMM_JOB_ID"; exec "$0" "$@"' "$soak" \
    --rounds "$rounds" --mode "$mode" --seed 7 --max-delay-us 200 --delay-probability 0.3 \
    | tee "$out"
  job=$(sed -n 's/^JOB=//p' "$out")
  [[ -n $job ]] || { echo "soak: the job did not say its id" >&2; exit 1; }
  # Nothing left behind in /dev/shm by the job (the launcher removes its segments).
  if ls /dev/shm 2>/dev/null | grep -q "^eagercomm-$job-"; then
    echo "soak: segments of job $job left in /dev/shm: $(ls /dev/shm | grep "^eagercomm-$job-")" >&2
    exit 1
  fi
done
echo "soak: PASSED ($rounds rounds per mode, transport $transport)"
