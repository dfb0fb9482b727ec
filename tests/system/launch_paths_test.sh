#!/usr/bin/env bash
# Every way to start a job reaches the same communicator: torchrun's variables, Slurm's
# variables (as srun sets them), mpirun with Communicator::from_env, mpirun with
# communicator_from_mpi (eagercomm-bench --compare mpi,gloo, its imbalance mode too), and
# eagercomm-bench --p2p under eagercomm-run. Plus the bench's clear errors when launched wrong.
# usage: tests/system/launch_paths_test.sh <build-dir>
set -uo pipefail
build=${1:?usage: launch_paths_test.sh <build-dir>}
mp=$build/tests/mp_collectives_test
bench=$build/bench/eagercomm-bench
run=$build/tools/eagercomm-run
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export EAGERCOMM_TIMEOUT=${EAGERCOMM_TIMEOUT:-60s}
quick=--gtest_filter='MultiProcess.BroadcastAllgatherBarrier:MultiProcess.SeveralInFlightAndBackToBack:MultiProcess.PartialAllreduceConservationAndReplicasEveryMode'
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A MASTER_PORT for torchrun's variables: our store listens on MASTER_PORT + 1, so that is the
# port that must be free (the kernel just handed it out and took it back).
torchrun_port() { echo $(($(free_port) - 1)); }

# Starts `n` copies of "$@" with the variables that `vars_of RANK` prints; waits for all.
start_ranks() {
  local name=$1 n=$2 r
  shift 2
  pids=()
  for ((r = 0; r < n; r++)); do
    env $(vars_of "$r") "$@" >"$tmp/$name-$r.out" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || { tail -n 30 "$tmp/$name-$r.out"; fail "$name: rank $r failed"; }
  done
  pids=()
}

# ---- torchrun's variables; rank 0 serves the store on MASTER_PORT + 1 ----
port=$(torchrun_port)
vars_of() { echo "RANK=$1 WORLD_SIZE=3 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
start_ranks torchrun 3 "$mp" "$quick"
grep -q "rank 2 of 3 on transport shm" "$tmp/torchrun-2.out" || fail "torchrun: not 3 ranks on shm"

# ---- Slurm's variables, as srun sets them on one node ----
port=$(free_port)
vars_of() {
  echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=$1 SLURM_NODEID=0 SLURM_JOB_ID=4242 \
SLURM_STEP_ID=0 SLURM_STEP_NODELIST=localhost SLURM_STEP_TASKS_PER_NODE=2 EAGERCOMM_MASTER_PORT=$port"
}
start_ranks slurm 2 "$mp" "$quick"
grep -q "rank 1 of 2 on transport shm" "$tmp/slurm-1.out" || fail "slurm: not 2 ranks on shm"

if ! command -v mpirun >/dev/null; then
  echo "launch_paths_test: mpirun not installed: the Open MPI paths are not tested (apt-get install openmpi-bin)"
  echo "launch_paths_test: OK (partial)"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -x EAGERCOMM_TIMEOUT)

# ---- mpirun + Communicator::from_env (Open MPI's variables, EAGERCOMM_MASTER_ADDR) ----
EAGERCOMM_MASTER_ADDR=127.0.0.1 EAGERCOMM_MASTER_PORT=$(free_port) \
  "${mpi[@]}" -x EAGERCOMM_MASTER_ADDR -x EAGERCOMM_MASTER_PORT -np 2 "$mp" "$quick" \
  >"$tmp/ompi.out" 2>&1 || { tail -n 30 "$tmp/ompi.out"; fail "mpirun + from_env failed"; }
grep -q "rank 1 of 2" "$tmp/ompi.out" || fail "mpirun + from_env: rank 1 missing"

# ---- mpirun + communicator_from_mpi: eagercomm-bench --compare ----
if "$bench" --compare mpi --world threads 2>"$tmp/err"; then fail "--compare accepted outside mpirun"; fi
grep -q "mpirun" "$tmp/err" || fail "--compare outside mpirun: unclear error: $(cat "$tmp/err")"
"${mpi[@]}" -np 3 "$bench" --compare mpi,gloo -b 8 -e 256K -f 32 -n 4 -w 1 --json "$tmp/cmp.json" \
  >"$tmp/cmp.out" 2>&1 || { cat "$tmp/cmp.out"; fail "bench --compare mpi,gloo failed"; }
if grep -q "built without" "$tmp/cmp.out"; then
  echo "launch_paths_test: eagercomm-bench built without MPI or Gloo: --compare not checked"
else
  grep -q "Out of bounds values : 0 OK" "$tmp/cmp.out" || { cat "$tmp/cmp.out"; fail "--compare results wrong"; }
  python3 - "$tmp/cmp.json" <<'PY' || fail "--compare JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ranks"] == 3 and d["libraries"] == ["eagercomm", "mpi", "gloo"], d
assert [r["bytes"] for r in d["rows"]] == [8, 256, 8192, 262144], d["rows"]
for r in d["rows"]:
    for lib in ("eagercomm", "mpi", "gloo"):
        assert r[lib]["time_us"] > 0 and r[lib]["wrong"] == 0, r
    assert abs(r["mpi"]["ratio"] - r["eagercomm"]["time_us"] / r["mpi"]["time_us"]) < 1e-2, r
PY
  "${mpi[@]}" -np 3 "$bench" --compare mpi --imbalance -b 4K -e 4K --delay-ms 3 -n 6 -w 1 \
    --modes full,solo >"$tmp/imb.out" 2>&1 || { cat "$tmp/imb.out"; fail "--compare --imbalance failed"; }
  grep -Eq "^ +3\.0 +4096 +mpi " "$tmp/imb.out" && grep -Eq "^ +3\.0 +4096 +solo " "$tmp/imb.out" \
    || { cat "$tmp/imb.out"; fail "--compare --imbalance rows missing"; }
fi

# ---- eagercomm-bench --p2p under the launcher; a bystander third rank ----
if "$bench" --p2p 2>"$tmp/err"; then fail "--p2p accepted a job of one rank"; fi
grep -q "needs 2 ranks" "$tmp/err" || fail "--p2p alone: unclear error: $(cat "$tmp/err")"
for t in shm ucx; do
  "$run" -n 3 --transport $t "$bench" --p2p -b 8 -e 64K -f 8 -n 50 --window 8 --json "$tmp/p2p.json" \
    >"$tmp/p2p.out" 2>&1 || { cat "$tmp/p2p.out"; fail "--p2p over $t failed"; }
  python3 - "$tmp/p2p.json" "$t" <<'PY' || fail "--p2p JSON over $t"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["transport"] == sys.argv[2] and d["ranks"] == 3, d
assert [r["bytes"] for r in d["rows"]] == [8, 64, 512, 4096, 32768], d["rows"]
assert all(r["latency_us"] > 0 and r["bandwidth_gbps"] > 0 for r in d["rows"]), d["rows"]
assert d["consume"] is False, d
PY
done
"$run" -n 2 --transport shm "$bench" --p2p --consume -b 8 -e 4K -f 8 -n 50 --window 8 \
  --json "$tmp/p2p.json" >"$tmp/p2p.out" 2>&1 || { cat "$tmp/p2p.out"; fail "--p2p --consume failed"; }
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["consume"] is True, d' \
  "$tmp/p2p.json" || fail "--p2p --consume: JSON does not say consume"
if "$bench" --consume 2>"$tmp/err"; then fail "--consume accepted without --p2p"; fi
grep -q "applies to --p2p only" "$tmp/err" || fail "--consume alone: unclear error: $(cat "$tmp/err")"
echo "launch_paths_test: OK"
