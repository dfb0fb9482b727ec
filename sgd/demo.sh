#!/usr/bin/env bash
# `make demo`, the project's main job: 4 local ranks train the Fashion-MNIST CNN with eager SGD in
# sync, solo and majority mode under injected imbalance (each step one rank, drawn by a shared
# PRNG, sleeps 40 ms), for the same number of epochs, then print one side-by-side table and
# draw test accuracy against wall-clock time.
#
# usage: sgd/demo.sh [BUILD_DIR]   (default build/default); extra eagercomm-train options in
#        EAGERCOMM_DEMO_ARGS. Writes BUILD_DIR/demo/{train.json,curve.csv,accuracy.png}.
set -euo pipefail
build=${1:-build/default}
here=$(cd "$(dirname "$0")" && pwd)
train=$build/sgd/train/eagercomm-train
if [[ ! -x $train ]]; then
  echo "demo: $train was not built: it needs LibTorch (apt-get install libtorch-dev," \
    "then reconfigure)" >&2
  exit 1
fi
out=$build/demo
mkdir -p "$out"
# shellcheck disable=SC2086
"$build/tools/eagercomm-run" -n 4 "$train" --model cnn --mode sync,solo,majority --epochs 6 \
  --train-limit 15000 --test-limit 5000 --batch 32 --lr 0.05 --imbalance 1:40 --log-every 0 \
  --seed 1 --json "$out/train.json" --curve "$out/curve.csv" ${EAGERCOMM_DEMO_ARGS:-}
# Debian's interpreter, which sees Debian's python3-matplotlib (a pyenv or venv python may not).
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" "$here/plot_training.py" "$out/curve.csv" "$out/accuracy.png" \
  --title "eager-SGD, Fashion-MNIST CNN, 4 ranks, one rank 40 ms late per step"
