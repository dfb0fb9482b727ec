#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (the `fuzz` preset: clang, coverage + ASan + UBSan on
# the library too) and runs each for FUZZ_SECONDS (default 60) from the seed corpus in
# tests/fuzz/corpus/<target>. New inputs go to a scratch corpus, crashes to build/fuzz/crashes/;
# exits non-zero on the first target that crashes, leaks or hangs (with the input that did it).
#
# usage: tests/fuzz/run.sh [target ...]
#        (default: verbs_wire config store shm_key inproc_key ucx_wire mailbox)
# env:   FUZZ_SECONDS, FUZZ_JOBS (parallel workers per target, default 1)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
command -v clang++ >/dev/null || { echo "fuzz: clang++ missing (apt-get install clang)" >&2; exit 2; }
secs=${FUZZ_SECONDS:-60}
targets=("$@")
all=(verbs_wire config store shm_key inproc_key ucx_wire mailbox)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
crashes=$here/build/fuzz/crashes
mkdir -p "$crashes"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for t in "${targets[@]}"; do
  bin=$here/build/fuzz/tests/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz: no target '$t' (have: ${all[*]})" >&2; exit 2; }
  mkdir -p "$scratch/$t"
  extra=()
  # The store's server thread frees a connection's buffers after the input that opened it has
  # returned: per-input leak checks would blame those on the input.
  [[ $t == store ]] && extra+=(-detect_leaks=0)
  echo "fuzz: $t for ${secs}s"
  if ! "$bin" "$scratch/$t" "tests/fuzz/corpus/$t" -max_total_time="$secs" -max_len=8192 \
      -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$crashes/$t-" \
      "${extra[@]}" >"$scratch/$t.log" 2>&1; then
    tail -40 "$scratch/$t.log"
    echo "fuzz: $t FAILED; the input is in $crashes/ (reproduce: $bin <file>)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added|cov:" "$scratch/$t.log" | tail -3
done
echo "fuzz: PASSED (${targets[*]}, ${secs}s each)"
