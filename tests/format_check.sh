#!/usr/bin/env bash
# The format check of `make check` (issue 20): every C, C++ and CUDA file of the source folders,
# capi/ and python/ included, must read as clang-format (with the repository's .clang-format)
# writes it. Names each file that drifts and how many places; `make format` fixes them.
#
# usage: tests/format_check.sh [CLANG_FORMAT]      (default: clang-format on PATH)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cf=${1:-clang-format}
if ! command -v "$cf" >/dev/null; then
  echo "format_check: '$cf' not found (deploy/install-deps.sh installs clang-format)" >&2
  exit 2
fi
folders=(runtime transport collectives sgd capi python tools bench tests)
mapfile -d '' files < <(find "${folders[@]}" -type f \( -name '*.h' -o -name '*.cc' -o \
  -name '*.c' -o -name '*.cu' \) -print0 | sort -z)
((${#files[@]} > 100)) || {
  echo "format_check: only ${#files[@]} files found under ${folders[*]}: wrong directory?" >&2
  exit 2
}
# One clang-format per batch of files rather than per file: starting it 340 times took most of
# the check's time, and under a loaded `make check` that ran past the test's limit.
declare -A places=()
while IFS= read -r f; do
  places[$f]=$((${places[$f]:-0} + 1))
done < <(printf '%s\0' "${files[@]}" | xargs -0 -n 64 "$cf" --dry-run 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p')
drift=0
for f in "${files[@]}"; do
  n=${places[$f]:-0}
  if ((n > 0)); then
    echo "format_check: $f: $n place(s) differ from clang-format"
    drift=$((drift + 1))
  fi
done
if ((drift > 0)); then
  echo "format_check: $drift of ${#files[@]} files drift from .clang-format ($("$cf" --version |
    head -1)); run 'make format'" >&2
  exit 1
fi
echo "format_check: all ${#files[@]} files match .clang-format"
