#!/usr/bin/env bash
# `make demo`, the project's main job: 4 local ranks train the Fashion-MNIST CNN with eager SGD in
# sync, solo, majority and adaptive mode under injected imbalance (each step one rank, drawn by a
# shared PRNG, sleeps 40 ms), over three seeds, evaluating twice an epoch, then print one
# side-by-side table (time to sync's accuracy, accuracy at equal epochs and at equal time, with
# their spread over the seeds) and draw test accuracy against wall-clock time. Sync trains 2
# epochs; the eager modes up to 4, stopping at the first evaluation past 2 epochs that reaches the
# seed's sync accuracy, so time to accuracy is measured, not cut off at equal epochs. This is the
# cnn-1x40 setup of sgd/matrix.sh (sgd/EXPERIMENTS.md) without quorum(3); 4 minutes on 2 cores.
#
# usage: sgd/demo.sh [BUILD_DIR]   (default build/default); extra eagercomm-train options in
#        EC_DEMO_ARGS (not EAGERCOMM_*: the ranks warn about unknown EAGERCOMM_ variables).
#        Writes BUILD_DIR/demo/{train.json,curve.csv,accuracy.png}.
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
"$build/tools/eagercomm-run" -n 4 "$train" --model cnn --mode sync,solo,majority,adaptive \
  --epochs 2 --eager-epochs 4 --stop-at-target --train-limit 12000 --test-limit 5000 \
  --batch 32 --lr 0.05 --imbalance 1:40 --log-every 0 --seeds 1,2,3 --evals-per-epoch 2 \
  --json "$out/train.json" \
  --curve "$out/curve.csv" ${EC_DEMO_ARGS:-}
# Debian's interpreter, which sees Debian's python3-matplotlib (a pyenv or venv python may not).
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" "$here/plot_training.py" "$out/curve.csv" "$out/accuracy.png" \
  --title "eager-SGD, Fashion-MNIST CNN, 4 ranks, one rank 40 ms late per step, 3 seeds"
