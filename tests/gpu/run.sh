#!/usr/bin/env bash
# The GPU checks in one call, for any machine with an NVIDIA GPU and the CUDA toolkit (a GPU
# workstation, a cluster node, the device machine of a session): builds eagercomm with CUDA in
# BUILD (default build/gpu), runs the CUDA kernel tests (bit for bit against the CPU kernels),
# the GPU memory checks, device buffers through inproc and shm (CUDA IPC) and the device-free
# GPU/GPUDirect tests, prints eagercomm-info's GPU and RDMA lines, benchmarks the allreduce of GPU
# buffers against NCCL's on the same 2 processes (eagercomm-bench --device cuda --compare nccl,
# 8 B .. 64 MiB; its JSON goes to BUILD/gpu-allreduce.json) and writes a JSON summary to SUMMARY
# (default BUILD/gpu-summary.json).
#
# usage: tests/gpu/run.sh [BUILD] [SUMMARY]
# With 2+ GPUs each rank gets its own (CUDA_VISIBLE_DEVICES = its local rank); with one, both
# share GPU 0, which NCCL may refuse ("Duplicate GPU detected"): then eagercomm is benchmarked
# alone and the summary carries NCCL's error. A verbs transfer between GPU buffers (GPUDirect)
# needs two RDMA hosts: docs/RDMA_AND_GPU.md says how to check it by hand.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/gpu}
summary=${2:-$build/gpu-summary.json}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || { echo "gpu/run.sh: no nvcc (install the CUDA toolkit)" >&2; exit 2; }
export PATH=$(dirname "$nvcc"):$PATH
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader || echo "gpu/run.sh: nvidia-smi not found (continuing)"

cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEAGERCOMM_WITH_CUDA=ON \
  -DEAGERCOMM_WITH_TORCH=OFF >"$log/configure" 2>&1 || { cat "$log/configure"; exit 1; }
cmake --build "$build" --target cuda_reduce_test gpu_parts_test gpu_ucx_test gpu_ipc_test \
  device_collectives_test \
  verbs_connect_test verbs_wire_test verbs_device_test eagercomm-info eagercomm-run \
  eagercomm-bench \
  >"$log/build" 2>&1 || { tail -50 "$log/build"; exit 1; }

status=0
run_test() {  # name: runs the test, keeps its output, prints its last lines
  if "$build/tests/$1" >"$log/$1" 2>&1; then echo "gpu/run.sh: $1 passed"; else
    echo "gpu/run.sh: $1 FAILED"; status=1; fi
  grep -E "SKIPPED|FAILED|PASSED|bandwidth|no GPU" "$log/$1" | head -20
}
run_test cuda_reduce_test
run_test gpu_parts_test   # on a GPU: the helpers' GPU answers; GpuHelpers skips (says why)
run_test gpu_ucx_test     # UCS_MEMORY_TYPE_CUDA when this UCX has CUDA, else kNotSupported
run_test gpu_ipc_test     # device buffers between ranks: inproc, shm (CUDA IPC between processes)
run_test device_collectives_test  # allreduce/broadcast/allgather/partial posts of device buffers
run_test verbs_connect_test
run_test verbs_wire_test
run_test verbs_device_test  # on an RDMA host: device choice and GPUDirect method of this host
"$build/tools/eagercomm-info" -t | sed -n '/RDMA devices/,$p' | tee "$log/info"

bw=$(awk '/cuda_reduce_bandwidth_gbps/ {print $2}' "$log/cuda_reduce_test")
skipped=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)' "$log/cuda_reduce_test" || true)
# The allreduce of GPU buffers, eagercomm's (staged through pinned host memory) beside NCCL's.
bench_json=$build/gpu-allreduce.json
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
rank_gpu=()  # one GPU per rank when there are enough: NCCL wants distinct devices
if [[ ${gpus:-0} -ge 2 ]]; then
  rank_gpu=(bash -c 'CUDA_VISIBLE_DEVICES=$EAGERCOMM_LOCAL_RANK exec "$@"' rank_gpu)
fi
bench=("$build/tools/eagercomm-run" -n 2 "${rank_gpu[@]}" "$build/bench/eagercomm-bench"
       --device cuda -b 8 -e 64M -f 8 -n 20 -w 5 --json "$bench_json")
rm -f "$bench_json"
if "${bench[@]}" --compare nccl >"$log/bench" 2>&1; then
  echo "gpu/run.sh: eagercomm-bench --device cuda --compare nccl passed"
else
  echo "gpu/run.sh: eagercomm-bench --compare nccl FAILED; eagercomm alone:"; status=1
  cp "$log/bench" "$log/bench-nccl"
  "${bench[@]}" >"$log/bench" 2>&1 || echo "gpu/run.sh: eagercomm-bench --device cuda FAILED"
fi
tail -12 "$log/bench"
python3 - "$summary" "$status" "${bw:-}" "$skipped" "$bench_json" "$log/bench-nccl" \
    "$log/info" <<'PY'
import json, os, sys
path, status, bw, skipped, bench_json, nccl_log, info = sys.argv[1:]
lines = [l.strip("# \n") for l in open(info) if l.strip("# \n")]
gpu_allreduce = {"ranks": 2, "error": "eagercomm-bench wrote no JSON (see its output above)"}
if os.path.exists(bench_json):
    d = json.load(open(bench_json))
    row = d["rows"][-1]
    busbw = lambda us: row["bytes"] / us / 1e3 * 2 * (d["ranks"] - 1) / d["ranks"] if us else None
    if "eagercomm" in row:  # --compare: times in microseconds, one cell per library
        ec, nccl = row["eagercomm"], row.get("nccl")
    else:  # eagercomm alone: nccl-tests style row
        ec, nccl = {"time_us": row["out_of_place"]["time_us"]}, None
    gpu_allreduce = {
        "ranks": d["ranks"], "transport": d["transport"], "bytes": row["bytes"],
        "path": "staged through pinned host memory",
        "eagercomm_time_us": ec["time_us"], "eagercomm_busbw_gbps": busbw(ec["time_us"]),
        "nccl_time_us": nccl["time_us"] if nccl else None,
        "nccl_busbw_gbps": busbw(nccl["time_us"]) if nccl else None,
        "ratio_eagercomm_over_nccl": nccl["ratio"] if nccl else None,
    }
if os.path.exists(nccl_log):
    gpu_allreduce["nccl_error"] = open(nccl_log).read()[-2000:]
json.dump({
    "passed": status == "0",
    "cuda_tests_skipped": int(skipped),
    "cuda_reduce_bandwidth_gbps": float(bw) if bw else None,
    "gpu_allreduce_largest": gpu_allreduce,
    "eagercomm_info": lines,
}, open(path, "w"), indent=2)
print("gpu/run.sh: wrote", path)
PY
exit $status
