#!/usr/bin/env bash
# One-sided write + notification of eagercomm's ucx transport against UCX's own ucx_perftest
# ucp_put_lat, on this host, alternating the two several times (noise hits both alike).
# usage: bench/compare_p2p.sh [build-dir] [size] [rounds]
# env: UCX_TLS etc. apply to both (default: UCX's choice, shared memory on one host);
#      CONSUME=1 makes eagercomm's receiver read each payload (eagercomm-bench --consume).
# Prints each round's mean one-way latencies and the ratio eagercomm / ucx_perftest.
set -euo pipefail
build=${1:-build/default}
size=${2:-8}
rounds=${3:-5}
iters=${ITERS:-20000}
run=$build/tools/eagercomm-run
bench=$build/bench/eagercomm-bench
command -v ucx_perftest >/dev/null || { echo "compare_p2p: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 2; }
[ -x "$bench" ] && [ -x "$run" ] || { echo "compare_p2p: build $build first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

perftest_us() {  # mean one-way latency of ucp_put_lat (its "average" column)
  local port=$((20000 + RANDOM % 20000))
  ucx_perftest -p $port -t ucp_put_lat -s "$size" -n "$iters" >"$tmp/server" 2>&1 &
  local server=$!
  local out=""
  for _ in $(seq 50); do
    sleep 0.1
    if out=$(ucx_perftest 127.0.0.1 -p $port -t ucp_put_lat -s "$size" -n "$iters" 2>&1); then break; fi
  done
  wait $server || true
  awk '/^Final:/ {print $4}' <<<"$out"
}

eagercomm_us() {  # mean one-way latency of eagercomm-bench --p2p over ucx
  # The JSON goes to a file and is read afterwards: a reader started on a pipe (python's
  # start-up, tens of ms of CPU) would run on one of the two cores during the timed loop.
  "$run" -n 2 --transport ucx --no-prefix "$bench" --p2p ${CONSUME:+--consume} -b "$size" -e "$size" \
    -n "$iters" -w 100 --json "$tmp/p2p.json" >/dev/null
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"][0]["latency_mean_us"])' \
    "$tmp/p2p.json"
}

printf "# ucx one-sided write + notification, %s B, %s iterations, %s rounds (mean one-way us)\n" \
  "$size" "$iters" "$rounds"
printf "#%6s %14s %14s %8s\n" round ucp_put_lat eagercomm ratio
ratios=()
for r in $(seq "$rounds"); do
  p=$(perftest_us)
  e=$(eagercomm_us)
  ratio=$(python3 -c "print(f'{$e / $p:.2f}')")
  ratios+=("$ratio")
  printf " %6s %14.3f %14.3f %8s\n" "$r" "$p" "$e" "$ratio"
done
python3 -c "import statistics,sys; print(f'# median ratio eagercomm / ucp_put_lat: {statistics.median(map(float, sys.argv[1:])):.2f}')" "${ratios[@]}"
