#!/usr/bin/env bash
# `make check`: three stages, each configured with every optional part required
# (EAGERCOMM_REQUIRE_ALL=ON: a missing dependency is a configure error naming its package, never
# a smaller suite), checked by tests/suite_guard.sh against the committed lists of parts and
# tests, built, and tested:
#   default  RelWithDebInfo, every test
#   tsan     ThreadSanitizer, the tests labelled concurrency
#   asan     AddressSanitizer + UBSan, the tests labelled memory
# At the end it prints each stage's build time, test time and test count.
#
# usage: tests/check.sh [stage...]     (default: all three)
# env:   WERROR=ON|OFF (OFF), JOBS (nproc), CMAKE, CTEST
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

werror=${WERROR:-OFF}
jobs=${JOBS:-$(nproc)}
cmake=${CMAKE:-cmake}
ctest=${CTEST:-ctest}
stages=("$@")
((${#stages[@]})) || stages=(default tsan asan)

summary=()
started=$SECONDS
fail() {
  echo "check: FAILED in the $1 stage: $2" >&2
  printf '%s\n' "${summary[@]}" >&2
  exit 1
}

for stage in "${stages[@]}"; do
  echo "==== check: $stage stage"
  t0=$SECONDS
  "$cmake" --preset "$stage" -DEAGERCOMM_WERROR="$werror" -DEAGERCOMM_REQUIRE_ALL=ON ||
    fail "$stage" "configuration (a missing part names its package above)"
  echo "==== check: $stage features: $(tr '\n' ' ' <"build/$stage/eagercomm-features.txt")"
  # The sanitizer stages build only the programs their tests run (tests/CMakeLists.txt).
  target=()
  [[ $stage == tsan ]] && target=(--target check_concurrency)
  [[ $stage == asan ]] && target=(--target check_memory)
  "$cmake" --build --preset "$stage" -j "$jobs" "${target[@]}" || fail "$stage" "build"
  t1=$SECONDS
  tests/suite_guard.sh "$stage" || fail "$stage" "the suite shrank or changed (see above)"
  log=build/$stage/check-ctest.log
  # Two at a time in every stage (the sanitizer stages too: serial, TSan alone took ~570 s of a
  # 1,500 s CI run); the longest start first (COST in tests/CMakeLists.txt).
  "$ctest" --preset "$stage" -j 2 --output-on-failure 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  t2=$SECONDS
  counts=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)
  summary+=("$(printf '  %-8s build %4ds  tests %4ds  %s' "$stage" $((t1 - t0)) $((t2 - t1)) \
    "${counts:-no ctest summary}")")
  ((rc == 0)) || fail "$stage" "tests"
done

echo "check: PASSED in $((SECONDS - started))s (WERROR=$werror); per stage:"
printf '%s\n' "${summary[@]}"
