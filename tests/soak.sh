#!/usr/bin/env bash
# The partial-allreduce soak (issue #7): 4 processes over shm run ROUNDS (default 100000) posts
# each of solo and of majority allreduce with random delays, then check identical replicas and
# exact conservation (tests/soak_main.cc). ctest runs it with 2000 rounds.
# usage: tests/soak.sh [BUILD] [ROUNDS]
set -euo pipefail
build=${1:-build/default}
rounds=${2:-100000}
run=$build/tools/eagercomm-run
soak=$build/tests/soak_main
[[ -x $run && -x $soak ]] || { echo "soak: build $build first" >&2; exit 2; }
before=$(ls /dev/shm 2>/dev/null | grep "^eagercomm-" | sort || true)
for mode in solo majority; do
  "$run" -n 4 --transport shm --no-prefix "$soak" --rounds "$rounds" --mode "$mode" --seed 7 \
    --max-delay-us 200 --delay-probability 0.3
done
# Nothing left behind in /dev/shm by these jobs (the launcher removes its segments).
after=$(ls /dev/shm 2>/dev/null | grep "^eagercomm-" | sort || true)
left=$(comm -13 <(echo "$before") <(echo "$after"))
if [[ -n $left ]]; then
  echo "soak: segments left in /dev/shm: $(head -5 <<<"$left")" >&2
  exit 1
fi
echo "soak: PASSED ($rounds rounds per mode)"
