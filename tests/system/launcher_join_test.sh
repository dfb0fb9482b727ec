#!/usr/bin/env bash
# eagercomm-run and ranks that do not join (issue 16, defects 9 and 11):
#   - a rank that exits 0 before joining, while the others join: reported at once by name and
#     exit status, the job ends with exit 1 (before: the others waited for their timeout);
#   - a program that never uses the store may still exit 0 on some ranks early (no failure);
#   - --timeout counts from the launch, not from when every rank was started, and a job that
#     could not start says why (which ranks joined, which wait, which never began);
#   - an eagercomm log line repeated by many ranks is printed a few times, then counted; a
#     program's own identical lines are all printed.
# Margins are wide: the checks are about what happens, never about how fast.
# usage: tests/system/launcher_join_test.sh <build-dir>
set -euo pipefail
build=${1:?usage: launcher_join_test.sh <build-dir>}
run=$build/tools/eagercomm-run
bench=$build/bench/eagercomm-bench
for b in "$run" "$bench"; do [ -x "$b" ] || { echo "FAIL: $b not built" >&2; exit 1; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/system/launcher_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/launcher_lib.sh"  # launch, show, fail
# The ranks' own bootstrap timeout is far away: only the launcher can end these jobs early.
export EAGERCOMM_TIMEOUT=600s
short=(-b 8 -e 8 -n 2 -w 1)

# ---- a rank that exits 0 before joining ----
launch -n 3 --transport shm --timeout 120s sh -c \
  'if [ "$RANK" = 1 ]; then exit 0; fi; exec "$0" "$@"' "$bench" "${short[@]}"
[ $rc -eq 1 ] || { show; fail "early exit: launcher exited $rc, expected 1 (124: the others waited)"; }
grep -q "eagercomm-run: rank 1 (pid [0-9]*) exited with code 0 before joining the job" "$tmp/err" \
  || { show; fail "early exit: no line naming rank 1"; }
# The ranks that joined were told (from the store), not just stopped.
grep -q "rank 1 failed to join: it exited with code 0 before joining" "$tmp/err" \
  || { show; fail "early exit: the waiting ranks did not name rank 1"; }
echo "launcher_join_test: a rank that exited 0 before joining ended the job (exit 1)"

# ... a program that never joins may end some ranks early: not a failure.
launch -n 3 sh -c 'if [ "$RANK" = 1 ]; then exit 0; fi; sleep 2'
[ $rc -eq 0 ] || { show; fail "plain program: exit $rc, expected 0"; }
grep -q "before joining" "$tmp/err" && { show; fail "plain program: reported as not joining"; }

# ---- --timeout counts from the launch ----
# 300 ranks cannot all be started within 1 ms; before, the deadline started after the last.
launch -n 300 --timeout 1ms sleep 1000
[ $rc -eq 124 ] || { show; fail "timeout at start: exit $rc, expected 124"; }
grep -q "timed out after 1ms" "$tmp/err" || { show; fail "timeout at start: not reported"; }
started=$(sed -n 's/.*could not start: \([0-9]*\) of 300 ranks had been started.*/\1/p' "$tmp/err")
[ -n "$started" ] && [ "$started" -lt 300 ] \
  || { show; fail "timeout at start: no line saying how many of the 300 ranks were started"; }
echo "launcher_join_test: --timeout 1ms stopped the start after $started of 300 ranks"

# ---- a job that could not start says why ----
# Rank 2 never begins to join; ranks 0 and 1 wait for it in the bootstrap.
launch -n 3 --transport shm --timeout 40s sh -c \
  'if [ "$RANK" = 2 ]; then exec sleep 1000; fi; exec "$0" "$@"' "$bench" "${short[@]}"
[ $rc -eq 124 ] || { show; fail "no start: exit $rc, expected 124"; }
grep -q "the job could not start within 40s: 0 of 3 ranks joined it; waiting for the others: 0, 1; not begun to join: 2" "$tmp/err" \
  || { show; fail "no start: no line saying which ranks joined, wait, and never began"; }
echo "launcher_join_test: a job that could not start said why"

# ---- repeated log lines are summarised, a program's own lines are not ----
launch -n 4 sh -c 'for i in 1 2 3; do
  echo "host:$$:$$ [$RANK] WARN boot: store at 127.0.0.1:1 did not answer a cancelled wait" >&2
done; echo same'
[ $rc -eq 0 ] || { show; fail "repeats: exit $rc"; }
shown=$(grep -c "WARN boot: store at 127.0.0.1:1 did not answer" "$tmp/err" || true)
# Three shown as they are, plus the summary line that quotes the message once.
[ "$shown" -eq 4 ] || { show; fail "repeats: $shown copies of the warning printed, expected 3 and a summary"; }
grep -q "eagercomm-run: ... 9 more log line(s) like this from [0-9]* rank(s), not shown: WARN boot: store at 127.0.0.1:1" "$tmp/err" \
  || { show; fail "repeats: no summary line"; }
[ "$(grep -c "\] same$" "$tmp/out")" -eq 4 ] || { show; fail "repeats: a program's own lines were dropped"; }
echo "launcher_join_test: 12 identical warnings printed as 3 and a summary"

echo "launcher_join_test: PASSED"
