# Shared by the launcher test scripts (sourced): `launch ARGS` runs $run with stdout and stderr
# in $tmp/out and $tmp/err and its exit code in $rc; `show` prints what it wrote (the last 40
# lines of each); `fail MESSAGE` ends the script. Needs $run and $tmp set.
fail() { echo "FAIL: $*" >&2; exit 1; }
launch() {
  set +e
  "$run" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  set -e
}
show() { echo "--- stdout:"; tail -n 40 "$tmp/out"; echo "--- stderr:"; tail -n 40 "$tmp/err"; }
