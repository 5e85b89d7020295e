#!/usr/bin/env bash
# Learning from preferences with trainc, end to end, checking each step
# (examples/preferences/README.md): a Qwen2 folder with its tokenizer; a reward model
# (import with one score, preference pairs as rows, train, export, transformers scores
# the raw text as trainc does); then the language model itself by direct preference
# optimization (import for dpo, the same pairs, the reference's log-probabilities,
# train, export, transformers ranks the pairs as trainc does); then by ORPO (no
# reference: fine-tuning and preference in one loss).
#
#   bash examples/preferences/run.sh [OUT]   (OUT: runs/preferences; from the repository root)
#
# TRAINC (build/trainc) and HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) may be set. Exits 77 when HF_PYTHON has no transformers, nonzero
# when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/preferences}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
HF="$HF_PYTHON examples/preferences/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
P=$OUT/dpo     # the dpo import's folder
Q=$OUT/orpo    # the orpo import's folder
rm -rf "$OUT/hf" "$M" "$OUT/run" "$OUT/hf_rm" "$OUT/prefs" "$P" "$OUT/dpo_run" \
    "$OUT/hf_dpo" "$Q" "$OUT/orpo_run" "$OUT/hf_orpo"   # an earlier run's

step() { printf '\n== %s\n' "$*"; }
val_acc() { sed -n 's/.*"val_acc":\([0-9.e-]*\).*/\1/p' | tail -1; }
# train DIR RUN WHAT MIN --set ...: DIR's model from its import into RUN, WHAT's share of
# the validation pairs before and after (into $after); exits 1 unless over MIN
train() {
    local dir=$1 run=$2 what=$3 min=$4 before
    shift 4
    before=$($TRAINC run "$dir/model.json" "$dir/train.json" --init "$dir/init.safetensors" \
             --eval --quiet | val_acc)
    $TRAINC run "$dir/model.json" "$dir/train.json" --init "$dir/init.safetensors" --out "$run" "$@"
    after=$(val_acc < "$run/metrics.jsonl")
    echo "$what (validation): $before before, $after after"
    awk -v a="$after" -v m="$min" 'BEGIN { exit !(a > m) }' || { echo "FAIL: not over $min of the pairs"; exit 1; }
}

step "1. a Hugging Face model folder: a small random Qwen2 language model and its tokenizer"
$HF make "$OUT/hf"

step "2. trainc import hf --task reward: one score, read at each text's last token"
$TRAINC import hf "$OUT/hf" -o "$M" --seq-len 32 --task reward

step "3. the preferences: a chosen and a rejected answer a line, as rows of two texts"
$HF data "$OUT/prefs"
$TRAINC data pairs "$OUT/prefs/train.jsonl" "$M/data" --val "$OUT/prefs/val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$M/model.json"

step "4. train on the CPU"
train "$M" "$OUT/run" "pairs ranked right" 0.9 --set epochs=6 --set optimizer.lr=1e-3 \
    --set log_every=25

step "5. trainc export hf, with the tokenizer (its padding id as pad_token_id)"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_rm" --tokenizer "$OUT/hf/tokenizer.json"

step "6. trainc's rewards of the validation pairs, and transformers' from the raw text"
$TRAINC run "$M/model.json" "$M/train.json" --init "$OUT/run/model.safetensors" \
    --predict "$M/data/val_x.npy" --out "$OUT/run/predicted"
$HF check "$OUT/hf_rm" "$OUT/prefs/val.jsonl" "$after" "$OUT/run/predicted/predictions.npy" 32

step "7. trainc import hf --task dpo: the language model itself, over the same pairs"
$TRAINC import hf "$OUT/hf" -o "$P" --seq-len 32 --task dpo
$TRAINC data pairs "$OUT/prefs/train.jsonl" "$P/data" --val "$OUT/prefs/val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$P/model.json" --eos '<|endoftext|>'

step "8. the reference model's log-probabilities (the model as imported), once"
$TRAINC run "$P/model.json" "$P/train.json" --init "$P/init.safetensors" --reference

step "9. dpo on the CPU"
$TRAINC run "$P/model.json" "$P/train.json" --init "$P/init.safetensors" --out "$OUT/dpo_run" \
    --set epochs=1 --set optimizer.lr=1e-3 --set log_every=25
ranked=$(val_acc < "$OUT/dpo_run/metrics.jsonl")
echo "pairs whose chosen answer gained more than the rejected one (validation): $ranked"
awk -v a="$ranked" 'BEGIN { exit !(a > 0.8) }' || { echo "FAIL: not over 0.8 of the pairs"; exit 1; }

step "10. trainc export hf; transformers ranks the raw pairs as trainc does"
$TRAINC export hf "$P/model.json" "$P/train.json" --weights "$OUT/dpo_run/model.safetensors" \
    -o "$OUT/hf_dpo" --tokenizer "$OUT/hf/tokenizer.json"
$HF check_dpo "$OUT/hf_dpo" "$OUT/hf" "$OUT/prefs/val.jsonl" "$ranked" 32

step "11. trainc import hf --task orpo: no reference; t, the chosen text's next ids"
$TRAINC import hf "$OUT/hf" -o "$Q" --seq-len 32 --task orpo
$TRAINC data pairs "$OUT/prefs/train.jsonl" "$Q/data" --val "$OUT/prefs/val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$Q/model.json" --eos '<|endoftext|>'

step "12. orpo on the CPU; trainc export hf; transformers ranks the raw pairs as trainc does"
train "$Q" "$OUT/orpo_run" "pairs whose chosen answer is the likelier per token" 0.7 \
    --set epochs=3 --set optimizer.lr=2e-3 --set log_every=50
$TRAINC export hf "$Q/model.json" "$Q/train.json" --weights "$OUT/orpo_run/model.safetensors" \
    -o "$OUT/hf_orpo" --tokenizer "$OUT/hf/tokenizer.json"
$HF check_orpo "$OUT/hf_orpo" "$OUT/prefs/val.jsonl" "$after" 32
echo "ok: a reward model and language models trained by dpo and orpo, exported and loaded back ($OUT/hf_rm, $OUT/hf_dpo, $OUT/hf_orpo)"
