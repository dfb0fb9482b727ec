#!/usr/bin/env bash
# eagercomm-run end to end: prefixed output, the job variables in every rank, the job's store
# and token, a failing rank's exit code with the others stopped, signal forwarding, --timeout,
# bad usage, a missing program, and removal of the job's leftover shared-memory segments.
# usage: tests/system/launcher_test.sh <build-dir>
set -euo pipefail
build=${1:?usage: launcher_test.sh <build-dir>}
run=$build/tools/eagercomm-run
[ -x "$run" ] || { echo "FAIL: $run not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/system/launcher_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/launcher_lib.sh"  # launch, show, fail
# True while any pid listed in the files $tmp/pid-* is alive.
any_alive() {
  local f
  for f in "$tmp"/pid-*; do
    [ -e "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then return 0; fi
  done
  return 1
}

# ---- output: prefixed per rank, stderr to stderr, partial last lines flushed ----
launch -n 3 sh -c 'echo "out-$RANK"; echo "err-$RANK" >&2; printf "tail-$RANK"'
[ $rc -eq 0 ] || { show; fail "a clean job exited $rc"; }
for r in 0 1 2; do
  grep -qx "\[$r\] out-$r" "$tmp/out" || { show; fail "no prefixed stdout line of rank $r"; }
  grep -qx "\[$r\] tail-$r" "$tmp/out" || { show; fail "partial line of rank $r not flushed"; }
  grep -qx "\[$r\] err-$r" "$tmp/err" || { show; fail "no prefixed stderr line of rank $r"; }
done
[ "$(wc -l <"$tmp/out")" -eq 6 ] || { show; fail "unexpected stdout lines"; }
launch --no-prefix -n 2 sh -c 'echo "plain-$RANK"'
[ $rc -eq 0 ] && grep -qx "plain-1" "$tmp/out" || { show; fail "--no-prefix"; }

# ---- the job variables in every rank ----
launch -n 3 --transport inproc -- sh -c 'echo "$EAGERCOMM_RANK $EAGERCOMM_SIZE $EAGERCOMM_LOCAL_RANK \
$EAGERCOMM_LOCAL_SIZE $EAGERCOMM_MASTER_ADDR $EAGERCOMM_MASTER_PORT $EAGERCOMM_JOB_ID \
$EAGERCOMM_JOB_TOKEN $EAGERCOMM_TRANSPORT $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE \
$MASTER_ADDR $MASTER_PORT"'
[ $rc -eq 0 ] || { show; fail "environment job exited $rc"; }
python3 - "$tmp/out" <<'PY' || { show; fail "job variables wrong"; }
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.fullmatch(r"\[(\d+)\] (.*)\n", line)
    assert m, line
    rows[int(m.group(1))] = m.group(2).split(" ")
assert sorted(rows) == [0, 1, 2], rows
shared = set()
for r, v in rows.items():
    (erank, esize, elrank, elsize, eaddr, eport, job, token, transport,
     trank, tlrank, tsize, tlsize, taddr, tport) = v
    assert erank == trank == elrank == tlrank == str(r), v
    assert esize == elsize == tsize == tlsize == "3", v
    assert eaddr == taddr == "127.0.0.1", v
    assert eport.isdigit() and tport.isdigit() and eport != tport, "store and torch ports: %s" % v
    assert re.fullmatch(r"run-[0-9a-f]{12}", job), job
    assert re.fullmatch(r"[0-9a-f]{32}", token), token
    assert transport == "inproc", v
    shared.add((eport, tport, job, token))
assert len(shared) == 1, "ranks disagree on the job: %s" % shared
PY
launch -n 1 sh -c 'echo "transport=${EAGERCOMM_TRANSPORT-unset}"'
grep -qx "\[0\] transport=unset" "$tmp/out" || { show; fail "EAGERCOMM_TRANSPORT set without --transport"; }
# Two jobs get different ids and tokens.
launch -n 1 sh -c 'echo "$EAGERCOMM_JOB_ID $EAGERCOMM_JOB_TOKEN"'
first=$(cat "$tmp/out")
launch -n 1 sh -c 'echo "$EAGERCOMM_JOB_ID $EAGERCOMM_JOB_TOKEN"'
[ "$first" != "$(cat "$tmp/out")" ] || fail "two jobs share an id and token: $first"

# ---- the store is up while the job runs and wants the job's token ----
launch -n 2 python3 -c '
import os, socket, struct
port = int(os.environ["EAGERCOMM_MASTER_PORT"])
def hello(token):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = bytes([1]) + struct.pack("<IHHI", 0x54534345, 1, 0, len(token)) + token
    s.sendall(struct.pack("<I", len(body)) + body)
    n = struct.unpack("<I", s.recv(4, socket.MSG_WAITALL))[0]
    return s.recv(n, socket.MSG_WAITALL)[7]  # type, magic, version, then the result
print("hello", hello(os.environ["EAGERCOMM_JOB_TOKEN"].encode()), hello(b"not-the-token"))
'
[ $rc -eq 0 ] || { show; fail "store check exited $rc"; }
for r in 0 1; do
  grep -qx "\[$r\] hello 0 1" "$tmp/out" || { show; fail "store: token accepted 0 / refused 1 expected"; }
done

# ---- a failing rank: its exit code, the others stopped, one line naming it ----
SECONDS=0
launch -n 3 sh -c 'echo $$ >'"$tmp"'/pid-$RANK; if [ "$RANK" = 1 ]; then sleep 0.5; exit 7; fi; exec sleep 1000'
[ $rc -eq 7 ] || { show; fail "failing rank: launcher exited $rc, expected 7"; }
[ $SECONDS -lt 60 ] || fail "the other ranks were not stopped promptly (${SECONDS}s)"
grep -q "rank 1 (pid [0-9]*) exited with code 7" "$tmp/err" || { show; fail "no line naming the failed rank"; }
[ "$(grep -c "exited with code\|killed by" "$tmp/err")" -eq 1 ] || { show; fail "more than one failure line"; }
sleep 0.2
if any_alive; then fail "a rank sleeping 1000 s is still alive"; fi
rm -f "$tmp"/pid-*
# The others get --stop-delay to end by themselves (then their own exit codes do not count) ...
launch -n 2 --stop-delay 30s sh -c 'if [ "$RANK" = 1 ]; then exit 5; fi; sleep 0.5; echo "done-$RANK"; exit 9'
[ $rc -eq 5 ] && grep -q "\[0\] done-0" "$tmp/out" || { show; fail "--stop-delay: rank 0 did not finish by itself, or exit $rc != 5"; }
# ... and with --stop-delay 0 they are stopped at once.
SECONDS=0
launch -n 2 --stop-delay 0 sh -c 'if [ "$RANK" = 1 ]; then exit 5; fi; sleep 20; echo "done-$RANK"'
[ $rc -eq 5 ] && [ $SECONDS -lt 15 ] && ! grep -q "done-0" "$tmp/out" || { show; fail "--stop-delay 0 did not stop rank 0 at once"; }
# ... killed by a signal: 128 + signal. A rank that ignores SIGTERM is killed after the grace.
launch -n 2 sh -c 'echo $$ >'"$tmp"'/pid-$RANK; if [ "$RANK" = 0 ]; then sleep 0.3; kill -9 $$; fi; trap "" TERM; sleep 1000'
[ $rc -eq 137 ] || { show; fail "killed rank: launcher exited $rc, expected 137"; }
grep -q "rank 0 (pid [0-9]*) was killed by signal 9 (SIGKILL)" "$tmp/err" || { show; fail "kill not reported"; }
if any_alive; then fail "a rank ignoring SIGTERM survived the job"; fi
rm -f "$tmp"/pid-*

# ---- SIGTERM to the launcher reaches every rank ----
"$run" -n 3 sh -c 'trap "echo term-$RANK; exit 0" TERM; echo $$ >'"$tmp"'/pid-$RANK; echo ready; sleep 1000 & wait' \
  >"$tmp/out" 2>"$tmp/err" &
launcher=$!
for _ in $(seq 1 300); do
  [ "$(grep -c ready "$tmp/out" || true)" -eq 3 ] && break
  sleep 0.1
done
[ "$(grep -c ready "$tmp/out" || true)" -eq 3 ] || { kill -KILL $launcher; show; fail "ranks did not start"; }
kill -TERM $launcher
set +e
wait $launcher
rc=$?
set -e
[ $rc -eq 143 ] || { show; fail "after SIGTERM the launcher exited $rc, expected 143"; }
for r in 0 1 2; do
  grep -qx "\[$r\] term-$r" "$tmp/out" || { show; fail "rank $r did not get SIGTERM"; }
done
if any_alive; then fail "a rank survived the forwarded SIGTERM"; fi
rm -f "$tmp"/pid-*

# ---- --timeout ----
SECONDS=0
launch -n 2 --timeout 1s sleep 1000
[ $rc -eq 124 ] || { show; fail "--timeout: exit $rc, expected 124"; }
[ $SECONDS -lt 60 ] || fail "--timeout took ${SECONDS}s"
grep -q "timed out after 1s" "$tmp/err" || { show; fail "timeout not reported"; }
launch -n 1 --timeout=30s true
[ $rc -eq 0 ] || { show; fail "a job within its timeout exited $rc"; }

# ---- programs that cannot run ----
launch -n 2 /nonexistent/program
[ $rc -eq 127 ] && grep -q "/nonexistent/program" "$tmp/err" || { show; fail "missing program: exit $rc"; }
launch -n 2 no-such-program-eagercomm
[ $rc -eq 127 ] && grep -q "no-such-program-eagercomm': command not found" "$tmp/err" \
  || { show; fail "program not in PATH: exit $rc"; }
printf 'not a program\n' >"$tmp/data.txt"
launch -n 1 "$tmp/data.txt"
[ $rc -eq 127 ] && grep -q "not executable" "$tmp/err" || { show; fail "non-executable file: exit $rc"; }

# ---- bad usage: exit 2 with a message ----
expect_usage() {
  local what=$1 pattern=$2
  shift 2
  launch "$@"
  [ $rc -eq 2 ] || { show; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$tmp/err" || { show; fail "$what: message lacks '$pattern'"; }
}
expect_usage "-n 0" "-n '0'" -n 0 true
expect_usage "-n x" "-n 'x'" -n x true
expect_usage "no -n" "-n N" true
expect_usage "no program" "no program" -n 2
expect_usage "no program after --" "no program" -n 2 --
expect_usage "unknown flag" "unknown option '--frobnicate'" --frobnicate -n 2 true
expect_usage "bad transport" "auto|inproc|shm|ucx|verbs" -n 2 --transport tcp true
expect_usage "bad timeout" "--timeout" -n 2 --timeout soon true
expect_usage "bad stop delay" "--stop-delay" -n 2 --stop-delay later true
launch --help
[ $rc -eq 0 ] && grep -q "usage: eagercomm-run" "$tmp/out" || fail "--help"

# ---- leftover shared memory of the job is removed at exit, also after a failure ----
launch -n 2 sh -c 'touch "/dev/shm/eagercomm-$EAGERCOMM_JOB_ID-x$RANK"; echo "$EAGERCOMM_JOB_ID"'
job=$(sed -n 's/^\[0\] //p' "$tmp/out")
[ -n "$job" ] || { show; fail "no job id printed"; }
if ls /dev/shm | grep -q "^eagercomm-$job-"; then fail "segments of $job left in /dev/shm"; fi
touch /dev/shm/eagercomm-not-this-job-x
launch -n 2 sh -c 'touch "/dev/shm/eagercomm-$EAGERCOMM_JOB_ID-y$RANK"; echo "$EAGERCOMM_JOB_ID"; exit 3'
job=$(sed -n 's/^\[0\] //p' "$tmp/out")
[ $rc -eq 3 ] || { show; fail "exit $rc, expected 3"; }
if ls /dev/shm | grep -q "^eagercomm-$job-"; then fail "segments of failed job $job left"; fi
[ -e /dev/shm/eagercomm-not-this-job-x ] || fail "another job's segment was removed"
rm -f /dev/shm/eagercomm-not-this-job-x

echo "launcher_test: PASSED"
