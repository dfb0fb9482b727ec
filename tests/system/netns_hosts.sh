# shellcheck shell=bash
# Sourced by tests/system/multihost_test.sh and tests/system/link_down_test.sh: three "hosts" on one machine.
# Network namespaces (each rank also runs in its own IPC namespace, so no shared memory can pass
# between them) joined by veth pairs to a private bridge in a fourth namespace, addresses
# 198.18.0.1-3/24 (RFC 2544 benchmarking range). Rank r runs in host r with torchrun's
# variables, rank 0 serving the bootstrap store, and eagercomm over UCX with UCX_TLS=tcp.
#
# The sourcing script sets `build` (the build directory) and `test_name` (for messages), then
#   netns_hosts_up       checks what is needed (exits 77, ctest's "skipped", with the reason when
#                        namespaces can't be made: not root, no ip(8), no netns support, UCX not
#                        built) and makes the hosts; removes everything again at exit
#   start_job CMD...     starts CMD as ranks 0-2, one per host, with EAGERCOMM_TIMEOUT (default
#                        60s); pids[] holds their process ids, "$tmp/out-<rank>" their output
#   finish_job           waits for them; their exit codes in codes[]
#   run_job CMD...       both
#   job_shm_objects      lists what the last job has in /dev/shm
# Defined here: skip, fail (the sourcing script may redefine fail to print more), sw (the switch
# namespace), hosts[], switch_port <rank> (the bridge-side end of that host's veth link), tmp.

# shellcheck disable=SC2154  # build and test_name come from the sourcing script
skip() { echo "$test_name: SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Names unique to this run: concurrent runs (ctest -j) and leftovers of killed runs don't clash.
# Interface names stay under 15 characters.
id=$(printf '%04x' $(($$ % 65536)))
sw="ecsw-$id"
hosts=("ech0-$id" "ech1-$id" "ech2-$id")
tmp=$(mktemp -d)
pids=()
codes=()
ports=()
port=$((20000 + $$ % 20000))

switch_port() { echo "ec$id-s$1"; }

netns_hosts_cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The "hosts" share this machine's /dev/shm, but a killed rank's peers are on other hosts and
  # never reap its liveness beacon (on real hosts it would sit in that host's /dev/shm; without
  # eagercomm-run nothing removes it): remove what this run's jobs left.
  for p in "${ports[@]}"; do rm -f /dev/shm/eagercomm-torchrun-198_18_0_1-"$p"-*; done
  for p in "${hosts[@]}" "$sw"; do ip netns del "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap netns_hosts_cleanup EXIT
trap 'exit 130' INT TERM

netns_hosts_up() {
  local i h
  [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
  command -v ip >/dev/null || skip "ip(8) not installed (apt-get install iproute2)"
  command -v unshare >/dev/null || skip "unshare(1) not installed (util-linux)"
  "$build/tools/eagercomm-info" 2>/dev/null | grep -E "^# +ucx +compiled=yes available=yes" \
    >/dev/null || skip "the ucx transport is not built or not available here (see eagercomm-info)"
  ip netns add "$sw" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
  ip -n "$sw" link add br0 type bridge || fail "bridge in $sw"
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  for i in 0 1 2; do
    h=${hosts[$i]}
    ip netns add "$h" || fail "netns $h"
    # One end is the host's eth0, the other a bridge port in the switch namespace.
    ip link add "ec$id-h$i" type veth peer name "$(switch_port $i)" 2>"$tmp/err" \
      || skip "cannot create veth pairs: $(cat "$tmp/err")"
    ip link set "ec$id-h$i" netns "$h"
    ip link set "$(switch_port $i)" netns "$sw"
    ip -n "$h" link set "ec$id-h$i" name eth0
    ip -n "$h" addr add "198.18.0.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n "$sw" link set "$(switch_port $i)" master br0
    ip -n "$sw" link set "$(switch_port $i)" up
  done
}

start_job() {
  local i
  pids=()
  port=$((port + 2))
  ports+=("$port")
  for i in 0 1 2; do
    # unshare --ipc: a host of its own for POSIX shared memory too (and for transport "auto").
    # ip netns exec, unshare and env all exec: pids[] are the ranks' own process ids.
    ip netns exec "${hosts[$i]}" unshare --ipc env RANK=$i WORLD_SIZE=3 LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 MASTER_ADDR=198.18.0.1 MASTER_PORT=$port EAGERCOMM_TRANSPORT=ucx \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 EAGERCOMM_TIMEOUT="${EAGERCOMM_TIMEOUT:-60s}" \
      "$@" >"$tmp/out-$i" 2>&1 &
    pids+=($!)
  done
}

finish_job() {
  local i
  codes=()
  for i in 0 1 2; do
    wait "${pids[$i]}" 2>/dev/null
    codes+=($?)
  done
  pids=()
}

run_job() {
  start_job "$@"
  finish_job
}

# The job's objects: its id is torchrun-<MASTER_ADDR>-<MASTER_PORT>, dots made underscores.
job_shm_objects() {
  local f
  for f in /dev/shm/eagercomm-torchrun-198_18_0_1-"$port"-*; do
    [ -e "$f" ] && echo "${f#/dev/shm/}"
  done
  return 0
}
