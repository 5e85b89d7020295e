#!/usr/bin/env bash
# Fine-tuning a Hugging Face image classifier with trainc, end to end, checking each
# step (examples/vit_finetune/README.md): a ViTForImageClassification folder with its
# image processor, import, the images as arrays, fine-tune, export, load the export in
# transformers and classify.
#
#   bash examples/vit_finetune/run.sh [OUT]   (OUT: runs/vit_finetune; from the repository root)
#
# TRAINC (build/trainc) and HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) may be set; SMOKE=1 trains 60 steps on 3,200 images instead of
# an epoch of 60,000. Needs data/fashion (make data). Exits 77 when HF_PYTHON has no
# transformers, nonzero when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/vit_finetune}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
HF="$HF_PYTHON examples/vit_finetune/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
rm -rf "$OUT/hf" "$M" "$OUT/run" "$OUT/hf_tuned"   # an earlier run's
if [ "${SMOKE:-}" = 1 ]; then TRAIN_N=3200 STEPS=(--set max_steps=60); else TRAIN_N=60000 STEPS=(); fi

step() { printf '\n== %s\n' "$*"; }
val_acc() { sed -n 's/.*"val_acc":\([0-9.e-]*\).*/\1/p' | tail -1; }

step "1. a Hugging Face model folder: a small random ViT and its image processor"
$HF make "$OUT/hf"

step "2. trainc import hf"
$TRAINC import hf "$OUT/hf" -o "$M"

step "3. the images as arrays where train.json looks for them"
$HF data data/fashion/train_x.npy data/fashion/train_y.npy "$M/data/train" $TRAIN_N
$HF data data/fashion/test_x.npy data/fashion/test_y.npy "$M/data/val" 2000

step "4. fine-tune on the CPU"
before=$($TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --eval \
         --quiet | val_acc)
$TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --out "$OUT/run" \
    --set epochs=1 --set optimizer.lr=1e-3 --set log_every=100 "${STEPS[@]}"
after=$(val_acc < "$OUT/run/metrics.jsonl")
echo "validation accuracy: $before before, $after after"
awk -v a="$before" -v b="$after" 'BEGIN { exit !(b > a + 0.2) }' ||
    { echo "FAIL: the accuracy did not rise by 0.2"; exit 1; }

step "5. trainc export hf"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_tuned"

step "6. transformers: from_pretrained and its image processor classify as trainc does"
$HF check "$OUT/hf_tuned" "$M/data/val_x.npy" "$M/data/val_y.npy" "$after"
echo "ok: fine-tuned, exported and loaded back ($OUT/hf_tuned)"
