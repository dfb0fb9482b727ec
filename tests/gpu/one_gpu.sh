#!/usr/bin/env bash
# The device check for ONE GPU (issue 19, deliverable 5): fits in 8 minutes on one H100/H200 with
# 16 cores and no internet, and reports as it goes, so a run cut short still says what it found.
#
#   1. builds only what it needs (Release, CUDA on, no torch/python), with GoogleTest from a
#      source tree when the image has no GoogleTest package (GTEST_SOURCE, build/googletest-src,
#      or /usr/src/googletest), and NCCL from the PyTorch wheel (nvidia.nccl) when it is not
#      beside the toolkit;
#   2. runs every CUDA test, the device ones repeated (--gtest_repeat) to expose races, and the
#      host-only check (a program passing host buffers creates no CUDA context) alone in its
#      process on the real driver;
#   3. compute-sanitizer (memcheck) on the reduction kernels;
#   4. the physical limits: pinned H2D, D2H and D2D copy bandwidth (bench/gpu_limits.cc);
#   5. eagercomm's device allreduce, 8 B .. 64 MiB: 2 processes on the one GPU, 4 in-process ranks,
#      and NCCL with one rank for reference (NCCL refuses two ranks on one GPU).
#
# It writes at most 7 files to OUT (default build/one_gpu/out), each as soon as its step ends:
# summary.json (rewritten after every step), build.log, tests.log, sanitizer.log, limits.json,
# bench.log, allreduce-2proc.json. The exit status is 0 when every step that ran passed.
#
# usage: tests/gpu/one_gpu.sh            env: OUT, BUILD (build/one_gpu), BUDGET_S (450),
#                                             GTEST_SOURCE, JOBS (nproc)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$here/build/one_gpu}
out=${OUT:-$build/out}
budget=${BUDGET_S:-450}
jobs=${JOBS:-$(nproc)}
mkdir -p "$build" "$out"
steps=$build/steps.jsonl
: >"$steps"
started=$SECONDS
failed=0

left() { echo $((budget - (SECONDS - started))); }
# step NAME OK SECONDS [JSON-OBJECT-OF-DETAILS]: records a step and rewrites summary.json.
step() {
  local details=${4:-"{}"}
  printf '{"step": "%s", "ok": %s, "seconds": %s, "details": %s}\n' "$1" "$2" "$3" "$details" \
    >>"$steps"
  [[ $2 == true ]] || failed=1
  python3 - "$steps" "$out/summary.json" "$((SECONDS - started))" <<'PY'
import json, sys
steps_path, out_path, elapsed = sys.argv[1:]
steps = []
for line in open(steps_path):
    try:
        steps.append(json.loads(line))
    except ValueError as e:
        steps.append({"step": "?", "ok": False, "details": {"unparsed": line.strip(), "error": str(e)}})
json.dump({"passed": all(s["ok"] for s in steps), "elapsed_s": int(elapsed), "steps": steps},
          open(out_path, "w"), indent=2)
PY
  echo "one_gpu: $1: $([[ $2 == true ]] && echo ok || echo FAILED) (${3}s, $(left)s of the budget left)"
}
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()[-3000:]))'; }

# ---- 0. the machine ----
t=$SECONDS
nvcc=$(command -v nvcc || true)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
  [[ -z $nvcc && -x $c ]] && nvcc=$c
done
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
  head -1)
if [[ -z $nvcc ]]; then
  step machine false $((SECONDS - t)) "{\"error\": \"no nvcc: install the CUDA toolkit\", \"gpu\": $(echo "$gpu_line" | json_str)}"
  exit 1
fi
export PATH=$(dirname "$nvcc"):$PATH
cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
sanitizer=$(command -v compute-sanitizer || ls "$cuda_root"/bin/compute-sanitizer 2>/dev/null || true)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step machine true $((SECONDS - t)) "{\"gpu\": $(echo "$gpu_line" | json_str), \"nvcc\": \"$nvcc\", \"compute_sanitizer\": \"${sanitizer:-none}\", \"cores\": $(nproc)}"

# ---- 1. build ----
t=$SECONDS
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DEAGERCOMM_WITH_CUDA=ON -DEAGERCOMM_WITH_TORCH=OFF
            -DEAGERCOMM_WITH_MPI=OFF -DEAGERCOMM_CCACHE=OFF)
have_gtest=0
for d in /usr/lib/x86_64-linux-gnu/cmake/GTest /usr/lib64/cmake/GTest /usr/lib/cmake/GTest \
         /usr/local/lib/cmake/GTest /usr/local/lib64/cmake/GTest; do
  [[ -f $d/GTestConfig.cmake ]] && have_gtest=1
done
gtest_note="the image's GoogleTest"
if ((!have_gtest)); then
  src=
  for c in "${GTEST_SOURCE:-}" "$here/build/googletest-src" /usr/src/googletest; do
    [[ -n $c && -f $c/CMakeLists.txt ]] && { src=$c; break; }
  done
  if [[ -z $src ]]; then
    step build false $((SECONDS - t)) '{"error": "no GoogleTest: no package and no source tree (set GTEST_SOURCE)"}'
    exit 1
  fi
  gtest_note="built from $src"
  { cmake -S "$src" -B "$build/gtest" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$build/gtest-install" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON &&
    cmake --build "$build/gtest" -j "$jobs" && cmake --install "$build/gtest"; } \
    >"$out/build.log" 2>&1 || {
    step build false $((SECONDS - t)) "{\"error\": \"GoogleTest from $src did not build (build.log)\"}"
    exit 1
  }
  cmake_args+=(-DCMAKE_PREFIX_PATH="$build/gtest-install")
fi
nccl_note="beside the toolkit"
if [[ ! -f $cuda_root/include/nccl.h && ! -f /usr/include/nccl.h ]]; then
  wheel=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null || true)
  lib=$(ls "$wheel"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -n $wheel && -f $wheel/include/nccl.h && -n $lib ]]; then
    cmake_args+=(-DEAGERCOMM_NCCL_INCLUDE_DIR="$wheel/include" -DEAGERCOMM_NCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    nccl_note="from the PyTorch wheel: $lib"
  else
    nccl_note="none found (no nccl.h beside the toolkit, no nvidia.nccl wheel)"
  fi
fi
targets=(cuda_reduce_test gpu_parts_test gpu_ipc_test gpu_ucx_test device_collectives_test
         cuda_driver_test host_only_context_test eagercomm-run eagercomm-bench gpu-limits)
{ cmake -S "$here" -B "$build/tree" "${generator[@]}" "${cmake_args[@]}" &&
  cmake --build "$build/tree" -j "$jobs" --target "${targets[@]}"; } >>"$out/build.log" 2>&1
rc=$?
nccl_built=$(grep -c "compare nccl with" "$out/build.log" || true)
step build $([[ $rc == 0 ]] && echo true || echo false) $((SECONDS - t)) \
  "{\"googletest\": \"$gtest_note\", \"nccl\": \"$nccl_note\", \"nccl_baseline_built\": $((nccl_built > 0 ? 1 : 0))}"
((rc == 0)) || exit 1
bin=$build/tree

# ---- 2. the CUDA tests ----
# test NAME REPEAT [ENV...]: runs tests/NAME, appends its output to tests.log, records a step.
run_test() {
  local name=$1 repeat=$2
  shift 2
  local t=$SECONDS limit=$(($(left) - 200))  # keep time for the sanitizer, limits and benchmarks
  ((limit < 30)) && limit=30
  echo "==== $name (repeat $repeat)" >>"$out/tests.log"
  env "$@" timeout "$limit" "$bin/tests/$name" --gtest_repeat="$repeat" >"$build/$name.log" 2>&1
  local rc=$?
  cat "$build/$name.log" >>"$out/tests.log"
  local passed skipped failed_n
  passed=$(grep -c '^\[       OK \]' "$build/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \] .*([0-9]* ms)' "$build/$name.log")
  failed_n=$(grep -c '^\[  FAILED  \] .*([0-9]* ms)' "$build/$name.log")
  step "test:$name" $([[ $rc == 0 ]] && echo true || echo false) $((SECONDS - t)) \
    "{\"rc\": $rc, \"repeat\": $repeat, \"ok\": $passed, \"skipped\": $skipped, \"failed\": $failed_n}"
}
: >"$out/tests.log"
run_test host_only_context_test 1    # first, alone: the real driver must see no context after it
run_test cuda_reduce_test 2
run_test device_collectives_test 3   # stream order, staging, partial posts of device buffers
run_test gpu_ipc_test 3
run_test gpu_parts_test 1
run_test gpu_ucx_test 1
run_test cuda_driver_test 1 EAGERCOMM_CUDA=1   # the stand-in driver's logic (no GPU needed)

# ---- 3. compute-sanitizer on the kernels ----
t=$SECONDS
if [[ -n $sanitizer ]]; then
  timeout 120 "$sanitizer" --tool memcheck --error-exitcode 99 \
    "$bin/tests/cuda_reduce_test" >"$out/sanitizer.log" 2>&1
  rc=$?
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/sanitizer.log" | tail -1 | grep -oE '[0-9]+$')
  step sanitizer $([[ $rc == 0 ]] && echo true || echo false) $((SECONDS - t)) \
    "{\"tool\": \"memcheck\", \"rc\": $rc, \"errors\": ${errors:-null}}"
else
  step sanitizer true 0 '{"skipped": "no compute-sanitizer in the toolkit"}'
fi

# ---- 4. physical limits ----
t=$SECONDS
timeout 60 "$bin/bench/gpu-limits" --bytes $((64 << 20)) --reps 20 >"$out/limits.json" 2>&1
rc=$?
step limits $([[ $rc == 0 ]] && echo true || echo false) $((SECONDS - t)) \
  "$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$out/limits.json" 2>/dev/null || echo '{"error": "no JSON"}')"

# ---- 5. device allreduce: 2 processes, 4 in-process ranks, NCCL with one rank ----
: >"$out/bench.log"
# bench NAME JSON CMD...: runs one benchmark, keeps its output, records the 64 MiB row.
bench() {
  local name=$1 json=$2
  shift 2
  local t=$SECONDS limit=$(($(left) - 10))
  if ((limit < 20)); then
    step "bench:$name" false 0 '{"error": "skipped: the budget is spent"}'
    return
  fi
  echo "==== $name: $*" >>"$out/bench.log"
  rm -f "$json"
  timeout "$limit" "$@" >>"$out/bench.log" 2>&1
  local rc=$?
  step "bench:$name" $([[ $rc == 0 && -f $json ]] && echo true || echo false) $((SECONDS - t)) \
    "$(python3 - "$json" "$out/limits.json" "$rc" <<'PY'
import json, os, sys
path, limits, rc = sys.argv[1:]
if not os.path.exists(path):
    print(json.dumps({"rc": int(rc), "error": "no JSON (bench.log)"}))
    sys.exit()
d = json.load(open(path))
row = d["rows"][-1]
P = d["ranks"]
res = {"rc": int(rc), "ranks": P, "bytes": row["bytes"]}
for lib, cell in row.items():
    if isinstance(cell, dict) and "time_us" in cell:
        res[lib + "_time_us"] = cell["time_us"]
if "out_of_place" in row:
    res["eagercomm_time_us"] = row["out_of_place"]["time_us"]
us = res.get("eagercomm_time_us")
if us:
    res["eagercomm_busbw_gbps"] = row["bytes"] / us / 1e3 * 2 * (P - 1) / P if P > 1 else None
    try:  # the on-device floor: read and write 2n at the measured D2D copy rate
        d2d = json.load(open(limits))["d2d_copy_gbps"]
        floor_us = 2 * row["bytes"] / (d2d * 1e3)
        res["floor_us"] = floor_us
        res["over_floor"] = us / floor_us
    except Exception:
        pass
print(json.dumps(res))
PY
)"
}
sizes=(-b 8 -e 64M -f 8 -n 10 -w 3)
bench 2proc "$out/allreduce-2proc.json" "$bin/tools/eagercomm-run" -n 2 "$bin/bench/eagercomm-bench" \
  --world env --device cuda "${sizes[@]}" --json "$out/allreduce-2proc.json"
bench inproc4 "$build/allreduce-inproc4.json" "$bin/bench/eagercomm-bench" --world threads \
  --ranks 4 --device cuda "${sizes[@]}" --json "$build/allreduce-inproc4.json"
if ((nccl_built > 0)); then
  bench nccl1 "$build/allreduce-nccl1.json" "$bin/tools/eagercomm-run" -n 1 \
    "$bin/bench/eagercomm-bench" --world env --device cuda "${sizes[@]}" --compare nccl \
    --json "$build/allreduce-nccl1.json"
else
  step bench:nccl1 true 0 "{\"skipped\": \"no NCCL: $nccl_note\"}"
fi

echo "one_gpu: done in $((SECONDS - started))s; $out/summary.json"
exit $failed
