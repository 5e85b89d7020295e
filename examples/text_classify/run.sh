#!/usr/bin/env bash
# Fine-tuning a Hugging Face text classifier with trainc, end to end, checking each step
# (examples/text_classify/README.md): a RoBERTa masked-LM folder with its tokenizer,
# import with a new classifier, text as padded rows, fine-tune, export, predict on text
# without labels, load the export in transformers and classify the raw text.
#
#   bash examples/text_classify/run.sh [OUT]   (OUT: runs/text_classify; from the repository root)
#
# TRAINC (build/trainc) and HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) may be set. Exits 77 when HF_PYTHON has no transformers, nonzero
# when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/text_classify}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
HF="$HF_PYTHON examples/text_classify/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
rm -rf "$OUT/hf" "$M" "$OUT/run" "$OUT/hf_tuned" "$OUT/text" "$OUT/new"   # an earlier run's

step() { printf '\n== %s\n' "$*"; }
val_acc() { sed -n 's/.*"val_acc":\([0-9.e-]*\).*/\1/p' | tail -1; }

step "1. a Hugging Face model folder: a small random RoBERTa masked LM and its tokenizer"
$HF make "$OUT/hf"

step "2. trainc import hf, with a new classifier for five licenses"
$TRAINC import hf "$OUT/hf" -o "$M" --seq-len 64 --labels Apache-2.0,Artistic,GPL-3,LGPL-3,MPL-2.0

step "3. the text: which license each line is from, as padded rows"
$HF data "$OUT/text"
$TRAINC data classify "$OUT/text/train.jsonl" "$M/data" --val "$OUT/text/val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$M/model.json"

step "4. fine-tune on the CPU"
before=$($TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --eval \
         --quiet | val_acc)
$TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --out "$OUT/run" \
    --set epochs=12 --set optimizer.lr=3e-3 --set log_every=50
after=$(val_acc < "$OUT/run/metrics.jsonl")
echo "validation accuracy: $before before, $after after"
awk -v a="$before" -v b="$after" 'BEGIN { exit !(b > a + 0.15) }' ||
    { echo "FAIL: the accuracy did not rise by 0.15"; exit 1; }

step "5. trainc export hf, with the tokenizer"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_tuned" --tokenizer "$OUT/hf/tokenizer.json"

step "6. text without labels: the rows to predict on, and trainc's classes for them"
$HF unlabeled "$OUT/text/val.jsonl" "$OUT/text/new.jsonl"
$TRAINC data classify "$OUT/text/new.jsonl" "$OUT/new" --unlabeled \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$M/model.json"
$TRAINC run "$M/model.json" "$M/train.json" --init "$OUT/run/model.safetensors" \
    --predict "$OUT/new/test_x.npy" --out "$OUT/new/predicted"

step "7. transformers: from_pretrained and the tokenizer classify the raw text as trainc does"
$HF check "$OUT/hf_tuned" "$OUT/text/val.jsonl" "$after" "$OUT/new/predicted/predictions.npy"
echo "ok: fine-tuned, exported and loaded back ($OUT/hf_tuned)"
