#!/usr/bin/env bash
# Three "hosts" on one machine: network namespaces (each also in its own IPC namespace, so no
# shared memory can pass between them) joined by veth pairs to a private bridge in a fourth
# namespace, addresses 198.18.0.1-3/24 (RFC 2544 benchmarking range). Rank r runs in host r with
# torchrun's variables, rank 0 serving the bootstrap store, and eagercomm over UCX with
# UCX_TLS=tcp: the multi-process collective tests must pass across the "hosts".
# usage: tests/multihost_test.sh <build-dir> [test program [args...]]
# Exits 77 (ctest: skipped) with the reason when namespaces can't be made (not root, no ip(8),
# no netns support, UCX not built).
set -uo pipefail
build=${1:?usage: multihost_test.sh <build-dir> [program [args...]]}
shift
if (($#)); then
  program=("$@")
else
  program=("$build/tests/mp_collectives_test")
fi
skip() { echo "multihost_test: SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "ip(8) not installed (apt-get install iproute2)"
command -v unshare >/dev/null || skip "unshare(1) not installed (util-linux)"
[ -x "${program[0]}" ] || fail "${program[0]} not built"
"$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +ucx +compiled=yes available=yes" >/dev/null \
  || skip "the ucx transport is not built or not available here (see eagercomm-info)"

# Names unique to this run: concurrent runs (ctest -j) and leftovers of killed runs don't clash.
# Interface names stay under 15 characters.
id=$(printf '%04x' $(($$ % 65536)))
sw="ecsw-$id"
hosts=("ech0-$id" "ech1-$id" "ech2-$id")
tmp=$(mktemp -d)
pids=()
ports=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The "hosts" share this machine's /dev/shm, but a killed rank's peers are on other hosts and
  # never reap its liveness beacon (on real hosts it would sit in that host's /dev/shm; without
  # eagercomm-run nothing removes it): remove what this run's jobs left.
  for p in "${ports[@]}"; do rm -f /dev/shm/eagercomm-torchrun-198_18_0_1-"$p"-*; done
  for h in "${hosts[@]}" "$sw"; do ip netns del "$h" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip -n "$sw" link add br0 type bridge || fail "bridge in $sw"
ip -n "$sw" link set br0 up
ip -n "$sw" link set lo up
for i in 0 1 2; do
  h=${hosts[$i]}
  ip netns add "$h" || fail "netns $h"
  # One end is the host's eth0, the other a bridge port in the switch namespace.
  ip link add "ec$id-h$i" type veth peer name "ec$id-s$i" 2>"$tmp/err" \
    || skip "cannot create veth pairs: $(cat "$tmp/err")"
  ip link set "ec$id-h$i" netns "$h"
  ip link set "ec$id-s$i" netns "$sw"
  ip -n "$h" link set "ec$id-h$i" name eth0
  ip -n "$h" addr add "198.18.0.$((i + 1))/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  ip -n "$sw" link set "ec$id-s$i" master br0
  ip -n "$sw" link set "ec$id-s$i" up
done

port=$((20000 + $$ % 20000))
echo "multihost_test: 3 hosts 198.18.0.1-3 (netns ${hosts[*]}), store 198.18.0.1:$((port + 1)), ucx over tcp"
# Runs "$@" as ranks 0-2, one per host; exit codes in codes[].
codes=()
run_job() {
  local i
  pids=()
  port=$((port + 2))
  ports+=("$port")
  for i in 0 1 2; do
    # unshare --ipc: a host of its own for POSIX shared memory too (and for transport "auto").
    ip netns exec "${hosts[$i]}" unshare --ipc env RANK=$i WORLD_SIZE=3 LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 MASTER_ADDR=198.18.0.1 MASTER_PORT=$port EAGERCOMM_TRANSPORT=ucx \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 EAGERCOMM_TIMEOUT=${EAGERCOMM_TIMEOUT:-60s} \
      "$@" >"$tmp/out-$i" 2>&1 &
    pids+=($!)
  done
  codes=()
  for i in 0 1 2; do
    wait "${pids[$i]}" 2>/dev/null
    codes+=($?)
  done
  pids=()
}

run_job "${program[@]}"
status=0
for i in 0 1 2; do
  if [ "${codes[$i]}" -ne 0 ]; then
    status=1
    echo "--- rank $i failed (exit ${codes[$i]}):"
    tail -n 40 "$tmp/out-$i"
  fi
done
((status)) && fail "the multi-host job failed"
tail -n 3 "$tmp/out-0"

# With the default program: a host's rank dies by SIGKILL mid-allreduce; the other hosts must
# name it (over TCP, UCX's peer-failure handling notices the connection loss).
if [ "${program[0]}" = "$build/tests/mp_collectives_test" ] && [ -x "$build/tests/dead_peer_main" ]; then
  run_job "$build/tests/dead_peer_main" 4096
  [ "${codes[2]}" -eq 137 ] || fail "dead peer: rank 2 exited ${codes[2]}, expected 137 (SIGKILL)"
  for i in 0 1; do
    grep -q "DETECTED rank=$i code=peer failed .*rank 2" "$tmp/out-$i" \
      || { tail -n 20 "$tmp/out-$i"; fail "dead peer: rank $i did not name rank 2 (exit ${codes[$i]})"; }
  done
  echo "multihost_test: a SIGKILLed rank on host 2 was named by hosts 0 and 1"
fi
echo "multihost_test: OK"
