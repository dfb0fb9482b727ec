#!/usr/bin/env bash
# The eager-SGD matrix of sgd/EXPERIMENTS.md: eagercomm-train over models, imbalance patterns and
# staleness rules, every mode, several seeds; one JSON report per setup, then one markdown table
# (sgd/matrix_summary.py) with time to sync's accuracy, accuracy at equal epochs and at equal
# time, each as mean [min, max] over the seeds.
#
# usage: sgd/matrix.sh [BUILD_DIR] [OUT_DIR]        (default build/default, BUILD_DIR/matrix)
#   EC_MATRIX_SETUPS  setups to run, one per line: NAME|MODEL|IMBALANCE|EXTRA ARGS
#                            (IMBALANCE: none, K:D or linear:D); default: the list below
#   EC_MATRIX_ARGS    arguments every setup gets [the defaults below]
#   EC_MATRIX_SEEDS   [1,2,3]   EC_MATRIX_MODES [sync,solo,majority,quorum:3,adaptive]
#   EC_MATRIX_RANKS   [4]
# A setup whose JSON exists already is skipped (rerun by deleting it), so an interrupted matrix
# resumes.
set -euo pipefail
build=${1:-build/default}
out=${2:-$build/matrix}
here=$(cd "$(dirname "$0")" && pwd)
train=$build/sgd/train/eagercomm-train
run=$build/tools/eagercomm-run
[[ -x $train && -x $run ]] || { echo "matrix: build eagercomm-train and eagercomm-run first" >&2; exit 1; }
seeds=${EC_MATRIX_SEEDS:-1,2,3}
modes=${EC_MATRIX_MODES:-sync,solo,majority,quorum:3,adaptive}
ranks=${EC_MATRIX_RANKS:-4}
# Eager modes may train twice sync's epochs so that time to sync's accuracy is measured even when
# they need longer; they stop at the first evaluation past sync's epochs that reaches it.
common=${EC_MATRIX_ARGS:---epochs 2 --eager-epochs 4 --stop-at-target --batch 32 --lr 0.05 \
--evals-per-epoch 2 --log-every 0}
default_setups="cnn-none|cnn|none|--train-limit 12000 --test-limit 5000
cnn-1x40|cnn|1:40|--train-limit 12000 --test-limit 5000
cnn-1x100|cnn|1:100|--train-limit 12000 --test-limit 5000
cnn-2x100|cnn|2:100|--train-limit 12000 --test-limit 5000
cnn-linear10|cnn|linear:10|--train-limit 12000 --test-limit 5000
cnn-1x100-rule-none|cnn|1:100|--train-limit 12000 --test-limit 5000 --staleness none
lstm-inherent|lstm|none|--train-limit 4096 --test-limit 1024
resnet20-1x200|resnet20|1:200|--train-limit 8000 --test-limit 2000"
setups=${EC_MATRIX_SETUPS:-$default_setups}
mkdir -p "$out"
while IFS='|' read -r name model imbalance extra; do
  [[ -z $name ]] && continue
  json=$out/$name.json
  if [[ -s $json ]]; then echo "matrix: $name done already ($json)"; continue; fi
  imb=()
  [[ $imbalance != none ]] && imb=(--imbalance "$imbalance")
  echo "matrix: $name: $model, imbalance $imbalance, $extra" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$run" -n "$ranks" "$train" --model "$model" --mode "$modes" --seeds "$seeds" "${imb[@]}" $common \
    $extra --json "$json.part" --curve "$out/$name.csv" > "$out/$name.txt" 2>&1 ||
    { echo "matrix: $name failed (see $out/$name.txt)" >&2; rm -f "$json.part"; exit 1; }
  mv "$json.part" "$json"
  echo "matrix: $name took $(( $(date +%s) - start )) s" >&2
done <<< "$setups"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" "$here/matrix_summary.py" "$out"/*.json
