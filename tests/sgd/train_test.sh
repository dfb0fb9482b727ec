#!/usr/bin/env bash
# eagercomm-train end to end: a short training on a 2,000-image Fashion-MNIST subset lowers the
# loss and beats chance on the test set in every mode (wide margins), and bad input (a missing
# or corrupt data set, an unknown model or mode) gives a clear error.
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
for mode in sync solo majority quorum:1; do
  "$run" -n 2 "$train" --model cnn --mode "$mode" --epochs 2 --train-limit 2000 \
    --test-limit 1000 --batch 32 --lr 0.05 --imbalance 1:5 --log-every 0 \
    --json "$work/$mode.json" >"$work/$mode.log" 2>&1 || fail "$mode: $(cat "$work/$mode.log")"
  grep -q "momentum 0.9 (eager modes 0.7)" "$work/$mode.log" \
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
print(f"ok: {sys.argv[2]}: accuracy {acc:.3f}, loss {loss:.3f}, fresh {report['fresh_fraction']:.2f}")
PY
done
# The eager momentum: the default never exceeds --momentum; an explicit one is taken as given.
for args in "--momentum 0.5:momentum 0.5 (eager modes 0.5)" \
  "--momentum 0.95 --eager-momentum 0.6:momentum 0.95 (eager modes 0.6)"; do
  # shellcheck disable=SC2086
  "$run" -n 2 "$train" --model cnn --mode solo --epochs 1 --train-limit 256 --test-limit 256 \
    --batch 32 --log-every 0 ${args%%:*} >"$work/m.log" 2>&1 || fail "${args%%:*}: $(cat "$work/m.log")"
  grep -qF "${args#*:}" "$work/m.log" || fail "${args%%:*}: header $(grep momentum "$work/m.log")"
  echo "ok: ${args%%:*} -> ${args#*:}"
done
