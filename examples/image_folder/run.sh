#!/usr/bin/env bash
# Fine-tuning a Hugging Face image classifier on a folder of image files, end to end,
# checking each step (examples/image_folder/README.md): a ConvNextV2ForImageClassification
# folder, import, data images (PNG files, a folder a class), fine-tune, export, and
# transformers' image-classification pipeline labels the files as trainc does.
#
#   bash examples/image_folder/run.sh [OUT]   (OUT: runs/image_folder; from the repository root)
#
# TRAINC (build/trainc) and HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) may be set; SMOKE=1 trains 60 steps on 3,200 images instead of
# 3 epochs of 20,000. Needs data/fashion (make data). Exits 77 when HF_PYTHON has no
# transformers, nonzero when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/image_folder}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
HF="$HF_PYTHON examples/image_folder/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
rm -rf "$OUT/hf" "$OUT/images" "$M" "$OUT/run" "$OUT/hf_tuned" "$OUT/predict"
if [ "${SMOKE:-}" = 1 ]; then TRAIN_N=3200 RUN=(--set max_steps=60); else TRAIN_N=20000 RUN=(--set epochs=3); fi

step() { printf '\n== %s\n' "$*"; }
val_acc() { sed -n 's/.*"val_acc":\([0-9.e-]*\).*/\1/p' | tail -1; }

step "1. a Hugging Face model folder: a small random ConvNeXt V2 and its image processor"
$HF make "$OUT/hf"

step "2. a folder of images, a subfolder a class (Fashion-MNIST as PNG files)"
$HF images data/fashion/train_x.npy data/fashion/train_y.npy "$OUT/images/train" $TRAIN_N
$HF images data/fashion/test_x.npy data/fashion/test_y.npy "$OUT/images/validation" 500

step "3. trainc import hf"
$TRAINC import hf "$OUT/hf" -o "$M"

step "4. trainc data images: read, converted to RGB, resized and cropped to 32x32 as the image processor does"
$TRAINC data images "$OUT/images/train" "$M/data" --val "$OUT/images/validation" \
    --model "$M/model.json"

step "5. fine-tune on the CPU"
before=$($TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --eval \
         --quiet | val_acc)
$TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --out "$OUT/run" \
    --set optimizer.lr=2e-3 --set log_every=50 "${RUN[@]}"
after=$(val_acc < "$OUT/run/metrics.jsonl")
echo "validation accuracy: $before before, $after after"
awk -v a="$before" -v b="$after" 'BEGIN { exit !(b > a + 0.2) }' ||
    { echo "FAIL: the accuracy did not rise by 0.2"; exit 1; }

step "6. trainc export hf, and trainc's predictions on the validation images"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_tuned"
$TRAINC run "$M/model.json" "$M/train.json" --init "$OUT/run/model.safetensors" \
    --predict "$M/data/val_x.npy" --out "$OUT/predict" --quiet

step "7. transformers' image-classification pipeline on the same files"
$HF check "$OUT/hf_tuned" "$OUT/images/validation" "$OUT/predict/predictions.npy"
echo "ok: fine-tuned from image files, exported and read back ($OUT/hf_tuned)"
