#!/usr/bin/env bash
# Killing parts of an shm job with SIGKILL, as a user does (issue 16, defects 3 and 7):
#   1. a rank killed mid-run: the launcher exits 137 (not a crash of its own) and nothing of the
#      job is left in /dev/shm. Run without the UCX_MEM_* variables that ctest sets for
#      sanitizer builds: under TSan, UCX's memory hooks used to crash the launcher (SIGSEGV,
#      139) when its store thread exited, and that is the user's environment;
#   2. the launcher killed: its ranks die of the parent-death SIGTERM without cleanup and leave
#      their segments; the next job's launcher removes them (their liveness beacons are free),
#      and a job running meanwhile keeps every one of its own;
#   3. the same without a launcher (a job started by torchrun's variables): the next job's rank
#      0 removes them.
# usage: tests/system/launcher_kill_test.sh <build-dir>
set -euo pipefail
build=${1:?usage: launcher_kill_test.sh <build-dir>}
run=$build/tools/eagercomm-run
bench=$build/bench/eagercomm-bench
for b in "$run" "$bench"; do [ -x "$b" ] || { echo "FAIL: $b not built" >&2; exit 1; }; done
tmp=$(mktemp -d)
launchers=()  # background launchers and ranks this script started, stopped at exit
jobs_made=()  # job ids whose objects are removed at exit
cleanup() {
  local p j
  for p in "${launchers[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for j in "${jobs_made[@]}"; do rm -f /dev/shm/eagercomm-"$j"-*; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.err; do [ -e "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done; exit 1; }
# The bench runs until it is killed (sizes small, iterations many).
forever=(--transport shm "$bench" -b 4K -e 4K -n 100000000 -w 1)
# Waits (up to $2 s) for condition $1 (a command); false when it never held.
wait_for() {
  local cond=$1 limit=$2 i
  for ((i = 0; i < limit * 10; ++i)); do
    if eval "$cond"; then return 0; fi
    sleep 0.1
  done
  return 1
}
# The pid of rank $2 of launcher $1, and the job id, from the ranks' environment.
rank_pid() {
  local p
  for p in $(pgrep -P "$1" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "EAGERCOMM_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}
job_of() { tr '\0' '\n' <"/proc/$1/environ" | sed -n 's/^EAGERCOMM_JOB_ID=//p'; }
objects_of() { ls /dev/shm | grep -c "^eagercomm-$1-" || true; }
beacons_of() { ls /dev/shm | grep -c "^eagercomm-$1-.*-0-live$" || true; }
# Starts a 3-rank shm job in the background; sets $launcher, $job, $pids (its ranks).
start_job() {
  local name=$1 r p
  shift
  "$@" "$run" -n 3 "${forever[@]}" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  launcher=$!
  launchers+=("$launcher")
  wait_for '[ -n "$(rank_pid $launcher 2)" ]' 120 || fail "$name: ranks did not start"
  job=$(job_of "$(rank_pid "$launcher" 0)")
  jobs_made+=("$job")
  pids=()
  for r in 0 1 2; do
    p=$(rank_pid "$launcher" $r)
    pids+=("$p")
    launchers+=("$p")
  done
  # Every rank's transport is up once its beacon exists.
  wait_for '[ "$(beacons_of $job)" -eq 3 ]' 120 || fail "$name: job $job's transports did not come up"
}
# Segments of job $1 whose owner's beacon is gone: nothing could ever prove them dead.
orphans_of() {
  ls /dev/shm | python3 -c '
import re, sys
names = set(sys.stdin.read().split())
for n in sorted(names):
    m = re.fullmatch(r"(eagercomm-" + re.escape(sys.argv[1]) + r"-[0-9a-f]{16}-[0-9]+-)[0-9]+", n)
    if m and m.group(1) + "0-live" not in names:
        print(n)
' "$1"
}
all_gone() {
  local p
  for p in "$@"; do if kill -0 "$p" 2>/dev/null; then return 1; fi; done
  return 0
}

# ---- 1. a rank killed: exit 137, /dev/shm clean ----
start_job kill_rank env -u UCX_MEM_EVENTS -u UCX_MEM_MALLOC_HOOKS -u UCX_MEM_MMAP_HOOK_MODE
sleep 2
kill -KILL "${pids[1]}"
wait_for "! kill -0 $launcher 2>/dev/null" 120 || fail "kill_rank: the launcher did not end"
set +e
wait "$launcher"
rc=$?
set -e
[ $rc -eq 137 ] || fail "kill_rank: launcher exited $rc, expected 137 (139: it crashed)"
grep -q "rank 1 (pid ${pids[1]}) was killed by signal 9 (SIGKILL)" "$tmp/kill_rank.err" \
  || fail "kill_rank: the launcher did not name the killed rank"
[ "$(objects_of "$job")" -eq 0 ] || fail "kill_rank: objects of job $job left: $(ls /dev/shm | grep "^eagercomm-$job-")"
echo "launcher_kill_test: rank killed: exit 137, /dev/shm clean"

# ---- 2. the launcher killed: the next job's launcher reclaims, a live job keeps its own ----
start_job dead
dead_job=$job
dead_pids=("${pids[@]}")
kill -KILL "$launcher"
{ wait "$launcher"; } 2>/dev/null || true
wait_for 'all_gone "${dead_pids[@]}"' 120 || fail "dead: ranks outlived their launcher"
leaked=$(objects_of "$dead_job")
[ "$leaked" -gt 0 ] || fail "dead: the killed job left nothing (nothing to reclaim: the test proves nothing)"
# Ranks dying together may see each other die first; whoever removes a beacon removes its
# owner's segments too.
[ -z "$(orphans_of "$dead_job")" ] || fail "dead: segments without their beacon: $(orphans_of "$dead_job")"
start_job live
live_job=$job
live_launcher=$launcher
ls /dev/shm | grep "^eagercomm-$live_job-" | sort >"$tmp/live.before"
# Objects younger than 5 s are never reclaimed (transport/shm/shm_reclaim.h): wait that out.
sleep 6
set +e
"$run" -n 2 --transport shm "$bench" -b 8 -e 8 -n 2 >"$tmp/next.out" 2>"$tmp/next.err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "next: the job after the killed one exited $rc"
[ "$(objects_of "$dead_job")" -eq 0 ] || fail "next: $(objects_of "$dead_job") of $leaked objects of the dead job $dead_job left"
# Under ctest -j another job may have been the next one and reclaimed them first.
by="the next job"
grep -q "removed [0-9]* shared-memory object(s) .* dead rank(s) of earlier jobs" "$tmp/next.err" \
  || by="a concurrent job"
kill -0 "$live_launcher" 2>/dev/null || fail "live: the running job ended"
ls /dev/shm | grep "^eagercomm-$live_job-" | sort >"$tmp/live.after"
lost=$(comm -23 "$tmp/live.before" "$tmp/live.after")
[ -z "$lost" ] || fail "live: objects of the running job $live_job were removed: $lost"
echo "launcher_kill_test: launcher killed: $leaked objects left, reclaimed by $by; the live job kept its $(wc -l <"$tmp/live.before")"

# ---- 3. no launcher: the next job's rank 0 reclaims ----
# The live job ends normally (SIGTERM to its launcher): everything of it goes.
kill -TERM "$live_launcher"
wait_for "! kill -0 $live_launcher 2>/dev/null" 120 || fail "live: the launcher did not end on SIGTERM"
# A fresh job, killed while its objects are young: no concurrent job may take them before the
# check (objects younger than 5 s are never reclaimed).
start_job third
third_job=$job
third_pids=("${pids[@]}")
kill -KILL "$launcher"
{ wait "$launcher"; } 2>/dev/null || true
wait_for 'all_gone "${third_pids[@]}"' 120 || fail "third: ranks outlived their launcher"
leaked=$(objects_of "$third_job")
[ "$leaked" -gt 0 ] || fail "third: the killed job left nothing"
[ -z "$(orphans_of "$third_job")" ] || fail "third: segments without their beacon: $(orphans_of "$third_job")"
sleep 6
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
set +e
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  EAGERCOMM_TRANSPORT=shm "$bench" -b 8 -e 8 -n 2 >"$tmp/torchrun.out" 2>"$tmp/torchrun.err"
rc=$?
set -e
[ $rc -eq 0 ] || fail "torchrun: a one-rank job exited $rc"
[ "$(objects_of "$third_job")" -eq 0 ] || fail "torchrun: objects of the dead job $third_job left"
by="the next job's rank 0"
grep -q "shm: removed [0-9]* shared-memory objects .* dead ranks of earlier jobs" "$tmp/torchrun.err" \
  || by="a concurrent job"
rm -f /dev/shm/eagercomm-torchrun-127_0_0_1-"$port"-*
echo "launcher_kill_test: no launcher: $leaked objects reclaimed by $by"
echo "launcher_kill_test: PASSED"
