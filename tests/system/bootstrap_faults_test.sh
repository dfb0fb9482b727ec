#!/usr/bin/env bash
# Bootstrap faults end to end, with real processes and the TCP store (torchrun's variables):
# a rank that never joins, ranks started with different world sizes, an unreachable store, and
# a rank with the wrong job token. Each must fail with an error that says what is wrong, and
# well before a hang could be mistaken for it (EAGERCOMM_TIMEOUT=2s, checked at < 30 s).
# usage: tests/system/bootstrap_faults_test.sh <build-dir>
set -uo pipefail
build=${1:?usage: bootstrap_faults_test.sh <build-dir>}
prog=$build/tests/dead_peer_main  # any from_env program: it prints from_env's error
[ -x "$prog" ] || { echo "FAIL: $prog not built" >&2; exit 1; }
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.out; do echo "--- $f:"; tail -n 5 "$f"; done; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A MASTER_PORT for torchrun's variables: our store listens on MASTER_PORT + 1, so that is the
# port that must be free (the kernel just handed it out and took it back).
torchrun_port() { echo $(($(free_port) - 1)); }
export EAGERCOMM_TIMEOUT=2s EAGERCOMM_TRANSPORT=shm

# start NAME RANK WORLD [VAR=VALUE...]: one rank in the background, output in $tmp/NAME-RANK.out
start() {
  local name=$1 rank=$2 world=$3
  shift 3
  env RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$world \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" "$prog" 64 >"$tmp/$name-$rank.out" 2>&1 &
  pids+=($!)
}
# expect_failure NAME RANK TEXT [INDEX]: the rank (started as the INDEX-th, default RANK-th)
# exited non-zero saying TEXT (an extended regex).
expect_failure() {
  local name=$1 rank=$2 text=$3 i=${4:-$2}
  wait "${pids[$i]}"
  local rc=$?
  [ $rc -ne 0 ] || fail "$name: rank $rank succeeded"
  grep -qE -- "$text" "$tmp/$name-$rank.out" || fail "$name: rank $rank did not say '$text'"
}
finish() {
  local took=$(($(date +%s) - t0))
  [ $took -lt 30 ] || fail "$1 took ${took}s"
  pids=()
  echo "bootstrap_faults_test: $1: ok (${took}s)"
}

# ---- a rank that never joins: the others name it ----
port=$(torchrun_port); t0=$(date +%s)
start missing 0 3
start missing 1 3
expect_failure missing 0 "never joined: 2"
# Rank 1 may instead lose the store, which rank 0 serves and takes along when it gives up: an
# orderly close, or a reset when rank 0 exited with rank 1's last request unread.
expect_failure missing 1 "never joined: 2|store at 127.0.0.1:[0-9]+ (closed|reset) the connection"
finish "a rank that never joins"

# ---- different world sizes ----
port=$(torchrun_port); t0=$(date +%s)
start sizes 0 2
start sizes 1 3
expect_failure sizes 0 "world size"
expect_failure sizes 1 "world size|store at 127.0.0.1:[0-9]+ (closed|reset) the connection"
finish "different world sizes"

# ---- the store is not there ----
port=$(torchrun_port); t0=$(date +%s)
start nostore 1 2
expect_failure nostore 1 "store at 127.0.0.1:$((port + 1)) not reachable" 0
finish "store unreachable"

# ---- a rank with the wrong job token is refused ----
port=$(torchrun_port); t0=$(date +%s)
good=0123456789abcdef0123456789abcdef
bad=fedcba9876543210fedcba9876543210
start token 0 2 EAGERCOMM_JOB_TOKEN=$good
start token 1 2 EAGERCOMM_JOB_TOKEN=$bad
expect_failure token 0 "never joined: 1"
expect_failure token 1 "token"
grep -qi "token" "$tmp/token-0.out" || fail "the store did not log the refused connection"
finish "wrong job token"
echo "bootstrap_faults_test: OK"
