#!/usr/bin/env bash
# eagercomm-train end to end: a short training on a 2,000-image Fashion-MNIST subset lowers the
# loss and beats chance on the test set in every mode (wide margins), a tiny run over two seeds
# reports time to accuracy in the table, the JSON and the CSV, and bad input (a missing or
# corrupt data set, an unknown model or mode, bad seeds, evaluations, staleness rule or
# solo speedup) gives a clear error that names the option.
# usage: tests/sgd/train_test.sh BUILD_DIR
set -euo pipefail
build=$1
train=$build/sgd/train/eagercomm-train
run=$build/tools/eagercomm-run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Bad input first: cheap, and no data set needed.
expect_error() {  # expect_error NEEDLE CMD...
  local needle=$1
  shift
  if "$@" >"$work/out" 2>&1; then fail "'$*' succeeded"; fi
  grep -q -- "$needle" "$work/out" || fail "'$*' did not say '$needle': $(cat "$work/out")"
  echo "ok: '$*' -> $(grep -m1 -- "$needle" "$work/out")"
}
expect_error "models are cnn, resnet20 and lstm" "$train" --model nope
expect_error "modes are sync, solo, majority" "$train" --mode fast
expect_error "out of range" "$train" --epochs 0
expect_error "out of range" "$train" --eager-momentum 1
expect_error "unknown option '--bogus'" "$train" --bogus 1
expect_error "mode solo is listed twice" "$train" --mode solo,sync,solo
expect_error "\-\-seeds '': expected seeds" "$train" --seeds ''
expect_error "\-\-seeds '1,1': seed 1 is listed twice" "$train" --seeds 1,1
expect_error "\-\-seeds '1,x': 'x' is not a seed" "$train" --seeds 1,x
expect_error "\-\-seeds '1,,2': '' is not a seed" "$train" --seeds 1,,2
expect_error "\-\-seeds '-1': '-1' is not a seed" "$train" --seeds -1
expect_error "\-\-evals-per-epoch '0': out of range" "$train" --evals-per-epoch 0
expect_error "\-\-staleness 'foo': rules are none, momentum, rate and step" "$train" --staleness foo
expect_error "\-\-average '1': out of range" "$train" --average 1
expect_error "\-\-solo-speedup '0.5': out of range" "$train" --solo-speedup 0.5
expect_error "\-\-solo-speedup '11': out of range" "$train" --solo-speedup 11
expect_error "dataset-fashion-mnist" "$run" -n 2 "$train" --data "$work/none"
mkdir "$work/corrupt"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
  t10k-labels-idx1-ubyte; do
  head -c 100 /dev/urandom >"$work/corrupt/$f"
done
expect_error "train-images-idx3-ubyte" "$run" -n 2 "$train" --data "$work/corrupt"

if [[ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: the training part needs Debian's dataset-fashion-mnist package"
  exit 0
fi
for mode in sync solo majority quorum:1 deadline:auto; do
  "$run" -n 2 "$train" --model cnn --mode "$mode" --epochs 2 --train-limit 2000 \
    --test-limit 1000 --batch 32 --lr 0.05 --imbalance 1:5 --log-every 0 \
    --json "$work/$mode.json" >"$work/$mode.log" 2>&1 || fail "$mode: $(cat "$work/$mode.log")"
  grep -q "momentum 0.9 (eager modes 0.9)" "$work/$mode.log" \
    || fail "$mode: the header does not show the default eager momentum: $(head -3 "$work/$mode.log")"
  python3 - "$work/$mode.json" "$mode" <<'PY'
import json, math, sys
report = json.load(open(sys.argv[1]))["modes"][0]
curve = report["curve"]
acc, loss = report["accuracy"], report["loss"]
# Chance is 10% and the initial loss ln(10) = 2.30: wide margins, not tight numbers.
assert acc > 0.25, f"{sys.argv[2]}: test accuracy {acc} is near chance"
assert loss < 0.9 * math.log(10), f"{sys.argv[2]}: training loss {loss} did not go down"
assert report["rounds"] > 0 and 0 < report["fresh_fraction"] <= 1, report
late = report["lateness"]
assert [l["rank"] for l in late] == [0, 1], late
for l in late:
    assert l["rounds"] > 0 and l["posts"] > 0 and l["fresh"] <= l["posts"], late
    assert l["absent"] <= l["rounds"] and l["late"] <= l["rounds"], late
    assert 0 <= l["late_fraction"] <= 1 and l["late_seconds"] >= 0, late
print(f"ok: {sys.argv[2]}: accuracy {acc:.3f}, loss {loss:.3f}, fresh {report['fresh_fraction']:.2f}")
PY
done
# Time to accuracy over two seeds, evaluated twice an epoch: every run's curve starts at time 0,
# the table has one row per mode with the new columns, the JSON every run and a summary per mode.
"$run" -n 2 "$train" --model cnn --mode sync,solo --seeds 1,2 --evals-per-epoch 2 --epochs 1 \
  --train-limit 512 --test-limit 256 --batch 32 --imbalance 1:5 --log-every 0 \
  --json "$work/tta.json" --curve "$work/tta.csv" >"$work/tta.log" 2>&1 \
  || fail "seeds: $(cat "$work/tta.log")"
for needle in "# seeds 1,2; 2 evaluation(s) per epoch; staleness rule momentum; solo speedup 1.3" \
  "acc@T (%)" "to-sync-acc" "mom"; do
  grep -qF "$needle" "$work/tta.log" || fail "seeds: the table lacks '$needle': $(cat "$work/tta.log")"
done
# sync against itself: 1.00x per epoch and in time to its own final accuracy, over both seeds.
grep -qE "^(\[0\] )? +sync +[0-9.]+ +1\.00x .* 1\.00x \[1\.00,1\.00\]$" "$work/tta.log" \
  || fail "seeds: no sync row at 1.00x: $(cat "$work/tta.log")"
[[ $(grep -cE "^(\[0\] )? +(sync|solo) " "$work/tta.log") == 2 ]] \
  || fail "seeds: not one row per mode: $(cat "$work/tta.log")"
head -1 "$work/tta.csv" | grep -qx "mode,seed,epoch,step,seconds,accuracy,loss" \
  || fail "seeds: CSV header $(head -1 "$work/tta.csv")"
python3 - "$work/tta.json" "$work/tta.csv" <<'PY'
import csv, json, sys
report = json.load(open(sys.argv[1]))
assert report["seeds"] == [1, 2] and report["evals_per_epoch"] == 2, report
assert report["staleness"] == "momentum" and report["solo_speedup"] == 1.3, report
runs = report["modes"]
assert [(r["mode"], r["seed"]) for r in runs] == [("sync", 1), ("solo", 1), ("sync", 2),
                                                 ("solo", 2)], runs
for r in runs:
    curve = r["curve"]
    # Before training, then twice per epoch, the last at the epoch's end.
    assert len(curve) == 3, curve
    assert curve[0]["seconds"] == 0 and curve[0]["epoch"] == 0 and curve[0]["loss"] is None, curve
    assert 0 < curve[1]["epoch"] < 1 and curve[2]["epoch"] == 1, curve
    assert 0 < curve[1]["seconds"] < curve[2]["seconds"] == r["seconds"], curve
    assert curve[2]["accuracy"] == r["accuracy"], r
    assert 0 < r["mean_momentum"] <= 0.9, r
    sync = next(s for s in runs if s["mode"] == "sync" and s["seed"] == r["seed"])
    assert r["target_accuracy"] == sync["accuracy"], r
    assert r["equal_time"] == min(s["seconds"] for s in runs if s["seed"] == r["seed"]), r
    assert 0 <= r["accuracy_at_equal_time"] <= 1, r
    tta = r["time_to_sync_accuracy"]
    if r["mode"] == "sync":
        assert r["tta_speedup"] == 1 and r["epoch_speedup"] == 1 and 0 < tta <= r["seconds"], r
    elif tta is None:
        assert r["tta_speedup"] is None, r
    else:
        assert abs(r["tta_speedup"] - sync["time_to_sync_accuracy"] / tta) < 1e-3, r
summary = {m["mode"]: m for m in report["summary"]}
assert list(summary) == ["sync", "solo"], summary
for mode, m in summary.items():
    assert m["runs"] == 2 and m["seeds"] == [1, 2], m
    acc = m["accuracy"]
    mine = [r["accuracy"] for r in runs if r["mode"] == mode]
    close = lambda a, b: abs(a - b) < 1e-4
    assert close(acc["min"], min(mine)) and close(acc["max"], max(mine)), (acc, mine)
    assert close(acc["mean"], sum(mine) / 2) and acc["n"] == 2, (acc, mine)
    for key in ("seconds", "epoch_speedup", "accuracy_at_equal_time", "mean_momentum", "rounds"):
        assert m[key]["n"] == 2 and m[key]["min"] <= m[key]["mean"] <= m[key]["max"], (key, m)
    missed = sum(r["time_to_sync_accuracy"] is None for r in runs if r["mode"] == mode)
    for key in ("time_to_sync_accuracy", "tta_speedup"):
        assert m[key]["not_reached"] == missed and m[key]["n"] == 2 - missed, (key, m)
assert summary["sync"]["tta_speedup"]["mean"] == 1, summary["sync"]
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 12 and {r["seed"] for r in rows} == {"1", "2"}, rows
solo = summary["solo"]["tta_speedup"]
print(f"ok: 2 seeds: {len(runs)} runs; solo to sync accuracy: mean {solo['mean']}x, "
      f"{solo['not_reached']}/2 not reached")
PY
# The attribution plot from the same report (when matplotlib is there).
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/../../sgd/plot_lateness.py" "$work/tta.json" "$work/late.png" \
    >/dev/null || fail "plot_lateness.py failed"
  [[ -s $work/late.png ]] || fail "plot_lateness.py wrote no PNG"
fi

# The eager momentum: the default is --momentum (the staleness rule corrects it per round); an
# explicit one is taken as given. Without sync the comparisons are null, not "never reached".
for args in "--mode solo --momentum 0.5:momentum 0.5 (eager modes 0.5)" \
  "--mode adaptive --momentum 0.95 --eager-momentum 0.6 --staleness rate --solo-speedup 2:momentum 0.95 (eager modes 0.6)"; do
  # shellcheck disable=SC2086
  "$run" -n 2 "$train" --model cnn --epochs 1 --train-limit 256 --test-limit 256 --batch 32 \
    --log-every 0 --json "$work/m.json" ${args%%:*} >"$work/m.log" 2>&1 \
    || fail "${args%%:*}: $(cat "$work/m.log")"
  grep -qF "${args#*:}" "$work/m.log" || fail "${args%%:*}: header $(grep momentum "$work/m.log")"
  python3 - "$work/m.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
(m,) = report["summary"]
assert m["tta_speedup"] is None and m["time_to_sync_accuracy"] is None, m
assert m["epoch_speedup"] is None and report["modes"][0]["target_accuracy"] is None, report
PY
  echo "ok: ${args%%:*} -> ${args#*:}"
done
grep -qF "staleness rule rate; solo speedup 2" "$work/m.log" \
  || fail "--staleness rate --solo-speedup 2: header $(head -3 "$work/m.log")"

# The rule that keeps the total step, and evaluating the averaged parameters: named in the header
# and the report; the average (decay 0.5 over 8 rounds from the initial model) must evaluate to a
# trained model's accuracy too, not the initial one's.
"$run" -n 2 "$train" --model cnn --mode sync,solo --epochs 1 --train-limit 512 --test-limit 256 \
  --batch 32 --log-every 0 --staleness step --average 0.5 --json "$work/a.json" >"$work/a.log" 2>&1 \
  || fail "--staleness step --average 0.5: $(cat "$work/a.log")"
grep -qF "staleness rule step; solo speedup 1.3; parameters averaged for evaluation" "$work/a.log" \
  || fail "--staleness step --average 0.5: header $(head -4 "$work/a.log")"
python3 - "$work/a.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["staleness"] == "step" and report["average_decay"] == 0.5, report
for m in report["modes"]:
    assert m["accuracy"] > 0.3, m  # chance is 0.1; 8 steps reach 0.48-0.55 here
PY
echo "ok: --staleness step --average 0.5"

# Continuing through a failure: rank 2 of 3 SIGKILLs itself mid-training (--die-at); with
# --on-failure continue the survivors finish (the job's status is the death, 137), rank 0 of the
# survivors writes the report, and the accuracy is that of a trained model: sync above 0.5 (it
# ends at 0.69-0.73 here), solo above 0.2, twice chance (at this size solo ends at 0.45-0.62 after
# the death, but one fresh-clone CI run under load saw 0.29; the 1-point comparison with the
# undisturbed run over seeds is in sgd/EXPERIMENTS.md).
expect_error "\-\-on-failure 'maybe': expected fail or continue" "$train" --on-failure maybe
expect_error "\-\-die-at '3': expected R:S" "$train" --die-at 3
set +e
"$run" -n 3 --keep-going "$train" --model cnn --mode sync,solo --epochs 2 --train-limit 1536 \
  --test-limit 1000 --batch 32 --log-every 0 --on-failure continue --die-at 2:20 \
  --json "$work/cont.json" >"$work/cont.log" 2>&1
code=$?
set -e
[ "$code" -eq 137 ] || fail "--die-at: the job exited $code, expected 137: $(tail "$work/cont.log")"
grep -q "rank 2 dies before step 20" "$work/cont.log" || fail "--die-at: $(tail "$work/cont.log")"
# The survivors share the dead rank's samples of the rest of that epoch.
[ "$(grep -c "takes over [1-9][0-9]* samples of the rest of epoch 2" "$work/cont.log")" -eq 2 ] ||
  fail "--die-at: the survivors did not take over the dead rank's samples: $(grep -i "takes over" "$work/cont.log")"
python3 - "$work/cont.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for m in report["modes"]:
    least = 0.5 if m["mode"] == "sync" else 0.2
    assert m["accuracy"] > least, f"{m['mode']}: accuracy {m['accuracy']} after the failure"
    assert len(m["lateness"]) == 2, m["lateness"]  # the survivors' group
    assert 0 < m["fresh_fraction"] <= 1, m
print("ok: --die-at 2:20 --on-failure continue: " +
      ", ".join(f"{m['mode']} {m['accuracy']:.3f}" for m in report["modes"]))
PY
