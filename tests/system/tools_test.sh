#!/usr/bin/env bash
# The command-line tools: eagercomm-info lists every variable and rejects bad values by name;
# eagercomm-bench runs, checks its results, writes valid JSON, and rejects bad flags clearly;
# eagercomm-sim likewise.
# usage: tests/system/tools_test.sh <build-dir>
set -euo pipefail
build=${1:?usage: tools_test.sh <build-dir>}
info=$build/tools/eagercomm-info
bench=$build/bench/eagercomm-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# rdma-core is loaded at run time, never linked (transport/verbs/verbs_api.h): the library loads on
# hosts without it.
lib=$build/libeagercomm.so
if readelf -d "$lib" | grep NEEDED | grep -E 'libibverbs|librdmacm'; then
  fail "libeagercomm.so links rdma-core (it must dlopen it)"
fi
if nm -D --undefined-only "$lib" | grep -E ' (ibv|rdma)_[a-z_]+'; then
  fail "libeagercomm.so has undefined rdma-core symbols (a call not through the VerbsApi table)"
fi

"$info" >"$tmp/info.txt" || fail "eagercomm-info exited $?"
for var in TRANSPORT LOG_LEVEL LOG_SUBSYS LOG_FILE TIMEOUT SPIN PROGRESS_THREAD SLOT_BYTES SLOTS \
    ALLREDUCE_ALGO RD_MAX_BYTES DIRECT_MIN_BYTES BCAST_ALGO CHAIN_MIN_BYTES DIRECT; do
  grep -q "^EAGERCOMM_$var=" "$tmp/info.txt" || fail "eagercomm-info does not list EAGERCOMM_$var"
done
grep -q "inproc  compiled=yes available=yes" "$tmp/info.txt" || fail "inproc not listed as available"
if grep -q "verbs   compiled=yes" "$tmp/info.txt"; then
  EAGERCOMM_VERBS_EMULATE=1 "$info" 2>/dev/null | grep "verbs   compiled=yes available=yes" |
    grep -q "emulated RDMA device" || fail "EAGERCOMM_VERBS_EMULATE=1: verbs not listed as available (emulated)"
fi
EAGERCOMM_SLOT_BYTES=1M "$info" -c | grep -A1 '^EAGERCOMM_SLOT_BYTES=1MiB' | grep -q 'source: environment' \
  || fail "eagercomm-info does not say where a value came from"

# The resources a rank holds for its peers, from the configuration: at 1024 ranks 1023 verbs
# store-path connections, 19 data peers (r +- 2^k) with 4 (neighbours) or 2 slots of 64 KiB, 4 x 1 KiB for
# the 1004 others: 6.5 MiB of mailbox, 13.1 MiB where writes are staged.
EAGERCOMM_SLOTS=4 EAGERCOMM_SLOT_BYTES=64K "$info" -c >"$tmp/res.txt"
grep -Eq '^# +1024 +1023 +19 +6\.5 +13\.1$' "$tmp/res.txt" \
  || fail "eagercomm-info's resources per rank: $(grep -A8 '^# resources' "$tmp/res.txt")"
"$info" -c | grep -Eq '^# +8 +7 +5 +7\.0 +14\.0$' \
  || fail "eagercomm-info's resources per rank with the default 8 x 256 KiB slots"

if EAGERCOMM_SLOTS=1 EAGERCOMM_TRANSPORT=tcp "$info" >"$tmp/out" 2>"$tmp/err"; then
  fail "eagercomm-info accepted bad values"
fi
grep -q "EAGERCOMM_SLOTS" "$tmp/err" || fail "bad EAGERCOMM_SLOTS not named: $(cat "$tmp/err")"
grep -q "auto|inproc|shm|ucx|verbs" "$tmp/err" || fail "accepted transports not listed: $(cat "$tmp/err")"
EAGERCOMM_TIMEUOT=5s "$info" -c 2>"$tmp/err" >/dev/null || fail "an unknown variable must only warn"
grep -q "EAGERCOMM_TIMEOUT" "$tmp/err" || fail "no did-you-mean hint: $(cat "$tmp/err")"

"$bench" --ranks 3 -b 8 -e 64K -f 16 -n 3 -w 1 --json "$tmp/r.json" >"$tmp/bench.txt" \
  || fail "eagercomm-bench exited $?"
grep -q "Out of bounds values : 0 OK" "$tmp/bench.txt" || fail "bench footer missing"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['ranks']==3 and [r['bytes'] for r in d['rows']]==[8,128,2048,32768], d" \
  "$tmp/r.json" || fail "bench JSON invalid"
for c in broadcast allgather barrier; do
  "$bench" --ranks 3 --coll $c -b 8 -e 4K -f 64 -n 2 -w 1 -d f16 >/dev/null || fail "bench --coll $c"
done
set +e
"$bench" -b 8x 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "bad size: exit $rc, expected 2"
grep -q -- "-b" "$tmp/err" || fail "bad size error does not name the flag: $(cat "$tmp/err")"
# -b 0 once looped for ever (0 times -f stays 0): a clear error at once, in every mode.
for mode in "" "--imbalance" "--p2p"; do
  set +e
  # shellcheck disable=SC2086  # an empty mode is no argument
  timeout 30 "$bench" $mode -b 0 -e 1K 2>"$tmp/err" >/dev/null; rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q -- "-b 0" "$tmp/err" ||
    fail "eagercomm-bench $mode -b 0: exit $rc (124: it hung), $(cat "$tmp/err")"
done
set +e
"$bench" -e 0 2>"$tmp/err" >/dev/null; rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "-e 0" "$tmp/err" || fail "eagercomm-bench -e 0: exit $rc"
set +e
"$bench" --coll gather 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "allreduce|broadcast" "$tmp/err" || fail "unknown collective not rejected clearly"
# --device: cuda says why it cannot run on a machine without a GPU; unknown devices are refused
# naming the accepted ones; --compare nccl wants GPU buffers.
if "$info" -t 2>/dev/null | grep -A1 "^# GPUs" | grep -q "none:"; then
  set +e
  "$bench" --ranks 2 --device cuda -b 8 -e 64 -n 1 -w 0 >/dev/null 2>"$tmp/err"; rc=$?
  set -e
  [ $rc -ne 0 ] && grep -q -- "--device cuda: no GPU here" "$tmp/err" \
    || fail "--device cuda without a GPU: exit $rc, $(cat "$tmp/err")"
fi
set +e
"$bench" --device bogus 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "host|cuda" "$tmp/err" || fail "bad --device not rejected: $(cat "$tmp/err")"
set +e
"$bench" --compare nccl 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--device cuda" "$tmp/err" || fail "--compare nccl without --device cuda"
# Imbalance mode: every mode runs, the JSON has a row per (delay, mode), the plot script draws.
"$bench" --imbalance --ranks 3 -b 64K -e 64K --delay-ms 0,3 -n 6 -w 1 --json "$tmp/imb.json" \
  >"$tmp/imb.txt" || fail "eagercomm-bench --imbalance exited $?"
grep -q "quorum(1)" "$tmp/imb.txt" || fail "imbalance table lacks the quorum row: $(cat "$tmp/imb.txt")"
python3 - "$tmp/imb.json" <<'PY' || fail "imbalance JSON invalid"
import json, sys
d = json.load(open(sys.argv[1]))
modes = [(r["delay_ms"], r["mode"]) for r in d["rows"]]
assert modes == [(0, "full"), (0, "solo"), (0, "majority"), (0, "quorum(1)"),
                 (3, "full"), (3, "solo"), (3, "majority"), (3, "quorum(1)")], modes
full = [r for r in d["rows"] if r["mode"] == "full" and r["delay_ms"] == 3][0]
assert full["fast_median_ms"] >= 3.0, full  # the straggler's delay reaches everybody
assert full["fast_mean_ms"] >= 3.0, full
assert all(r["fast_mean_ms"] > 0 and r["vs_full_mean"] > 0 for r in d["rows"]), d["rows"]
PY
set +e
"$bench" --imbalance --pattern zigzag 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "fixed|random|linear|exp" "$tmp/err" || fail "bad --pattern not rejected"
# --compute-ms: every rank's step includes it; the slow ranks' mean is in the JSON.
"$bench" --imbalance --ranks 2 -b 8K -e 8K --delay-ms 2 --compute-ms 3 --modes full -n 4 -w 1 \
  --json "$tmp/imbc.json" >"$tmp/imbc.txt" || fail "eagercomm-bench --compute-ms exited $?"
grep -q "compute 3 ms" "$tmp/imbc.txt" || fail "no compute in the header: $(cat "$tmp/imbc.txt")"
python3 - "$tmp/imbc.json" <<'PY' || fail "--compute-ms JSON: $(cat "$tmp/imbc.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["compute_ms"] == 3, d
full = d["rows"][0]
assert full["fast_mean_ms"] >= 5.0 and full["slow_mean_ms"] >= 5.0, full
PY
set +e
"$bench" --imbalance --compute-ms -1 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--compute-ms: '-1'" "$tmp/err" || fail "bad --compute-ms: $(cat "$tmp/err")"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/../../bench/plot_imbalance.py" "$tmp/imb.png" "$tmp/imb.json" \
    >/dev/null || fail "plot_imbalance.py failed"
  [ -s "$tmp/imb.png" ] || fail "plot_imbalance.py wrote no PNG"
else
  echo "tools_test: matplotlib missing, plot_imbalance.py not run (apt-get install python3-matplotlib)"
fi
# eagercomm-sim: the real collectives on a simulated network; values checked, JSON valid, the
# closed-form ratios present; partial rounds with a straggler; bad flags named.
sim=$build/sim/eagercomm-sim
"$sim" --ranks 2,5 --bytes 8,4K,300K --json "$tmp/sim.json" >"$tmp/sim.txt" \
  || fail "eagercomm-sim failed: $(cat "$tmp/sim.txt")"
python3 - "$tmp/sim.json" <<'PY' || fail "eagercomm-sim's JSON: $(cat "$tmp/sim.json")"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 6, rows
for r in rows:
    assert r["checked"] and r["wrong"] == 0, r
    assert r["model_us"] > 0 and r["ratio"] > 0 and r["first_us"] > 0, r
    assert r["algo"] in ("rd", "ring"), r
PY
# Vectors above --elide: timed, not copied, reduced or checked; the same virtual time as the
# run that copies (each a fresh world: a world's earlier calls shift the next one's timing).
"$sim" --ranks 5 --bytes 300K --json "$tmp/simc.json" >"$tmp/simc.txt" \
  || fail "eagercomm-sim failed: $(cat "$tmp/simc.txt")"
"$sim" --ranks 5 --bytes 300K --elide 100K --json "$tmp/sime.json" >"$tmp/sime.txt" \
  || fail "eagercomm-sim --elide failed: $(cat "$tmp/sime.txt")"
python3 - "$tmp/simc.json" "$tmp/sime.json" <<'PY' || fail "eagercomm-sim --elide: $(cat "$tmp/sime.txt")"
import json, sys
[copied], [elided] = (json.load(open(f)) for f in sys.argv[1:])
assert copied["checked"] and copied["wrong"] == 0 and not elided["checked"], (copied, elided)
assert copied["first_us"] == elided["first_us"] and copied["mean_us"] == elided["mean_us"], (copied, elided)
PY
"$sim" --modes solo,sync --ranks 4 --stragglers 1 --steps 6 --result-depth 8 \
  --json "$tmp/simp.json" >"$tmp/simp.txt" || fail "eagercomm-sim --modes failed: $(cat "$tmp/simp.txt")"
grep -Eq '^ +4 +4096 +solo +1 ' "$tmp/simp.txt" || fail "no solo row: $(cat "$tmp/simp.txt")"
grep -Eq '^ +4 +4096 +sync +1 ' "$tmp/simp.txt" || fail "no sync row: $(cat "$tmp/simp.txt")"
if "$sim" --ranks 0 >"$tmp/out" 2>"$tmp/err"; then fail "eagercomm-sim accepted --ranks 0"; fi
grep -q -- "--ranks" "$tmp/err" || fail "bad --ranks not named: $(cat "$tmp/err")"
if "$sim" --modes solo,fast >"$tmp/out" 2>"$tmp/err"; then fail "eagercomm-sim accepted a mode"; fi
grep -q -- "--modes" "$tmp/err" || fail "bad --modes not named: $(cat "$tmp/err")"
if "$sim" --link edr >"$tmp/out" 2>"$tmp/err"; then fail "eagercomm-sim accepted --link edr"; fi
grep -q "hdr, ndr" "$tmp/err" || fail "the link presets not listed: $(cat "$tmp/err")"
# The schedule explorer: a range of seeds, a summary naming the range; a replayed seed shows its
# case; bad ranges refused.
"$sim" --explore 7:30 >"$tmp/explore.txt" 2>&1 || fail "eagercomm-sim --explore failed: $(cat "$tmp/explore.txt")"
grep -q '^# explored seeds 7 \.\. 36: 0 broke an invariant' "$tmp/explore.txt" \
  || fail "no explorer summary: $(cat "$tmp/explore.txt")"
"$sim" --explore 9 -v >"$tmp/explore.txt" 2>&1 || fail "eagercomm-sim --explore 9 failed"
grep -q '^seed 9: .* ranks, ' "$tmp/explore.txt" || fail "seed 9's case not shown: $(cat "$tmp/explore.txt")"
for bad in x 5:0 5:x; do
  if "$sim" --explore "$bad" >"$tmp/out" 2>"$tmp/err"; then fail "eagercomm-sim accepted --explore $bad"; fi
  grep -q 'SEED\[:COUNT\]' "$tmp/err" || fail "--explore $bad: $(cat "$tmp/err")"
done
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/../../sim/plot_sim.py" "$tmp/sim.png" "$tmp/sim.json" \
    "$tmp/simp.json" >/dev/null || fail "plot_sim.py failed"
  [ -s "$tmp/sim.png" ] || fail "plot_sim.py wrote no PNG"
fi

echo "tools_test: OK"
