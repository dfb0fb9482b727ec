#!/usr/bin/env bash
# The guard that keeps `make check` from shrinking silently: compares what a stage's build
# contains (<build>/eagercomm-features.txt, written at configure time) and the tests the stage
# runs (ctest --preset <stage> -N) with the lists in tests/suite/, which say what a fully
# equipped Debian 12 machine (deploy/install-deps.sh) must give. A part or a test that went
# missing fails the check, naming it; so does a new test that is not listed yet (add it with
# --update, and commit the list).
#
# usage: tests/suite_guard.sh <stage: default|tsan|asan> [--update]
#   run from the source tree's root after the stage's build was configured (make check does)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

stage=${1:?usage: tests/suite_guard.sh <default|tsan|asan> [--update]}
update=0
[[ ${2:-} == --update ]] && update=1
build=build/$stage
suite=tests/suite
[[ -f $build/eagercomm-features.txt ]] || {
  echo "suite_guard: $build/eagercomm-features.txt is missing: configure the $stage preset first" >&2
  exit 2
}

have_tests=$(mktemp)
trap 'rm -f "$have_tests"' EXIT
ctest --preset "$stage" -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p' |
  sort >"$have_tests"

if ((update)); then
  cp "$build/eagercomm-features.txt" "$suite/$stage.features"
  cp "$have_tests" "$suite/$stage.tests"
  echo "suite_guard: wrote $suite/$stage.features and $suite/$stage.tests ($(wc -l <"$have_tests") tests)"
  exit 0
fi

bad=0
if ! diff_out=$(diff "$suite/$stage.features" "$build/eagercomm-features.txt"); then
  echo "suite_guard: $stage build's parts differ from $suite/$stage.features (< expected, > built):"
  echo "$diff_out"
  bad=1
fi
missing=$(comm -23 "$suite/$stage.tests" "$have_tests")
extra=$(comm -13 "$suite/$stage.tests" "$have_tests")
if [[ -n $missing ]]; then
  echo "suite_guard: the $stage stage lost $(echo "$missing" | wc -l) test(s):" $missing
  bad=1
fi
if [[ -n $extra ]]; then
  echo "suite_guard: the $stage stage has test(s) not in $suite/$stage.tests:" $extra
  echo "  (new tests: run tests/suite_guard.sh $stage --update and commit the list)"
  bad=1
fi
if ((bad)); then
  echo "suite_guard: FAILED for the $stage stage" >&2
  exit 1
fi
echo "suite_guard: $stage stage complete: $(wc -l <"$have_tests") tests, parts:" \
  "$(tr '\n' ' ' <"$build/eagercomm-features.txt")"
