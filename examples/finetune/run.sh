#!/usr/bin/env bash
# Fine-tuning a Hugging Face model with trainc, end to end, checking each step
# (examples/finetune/README.md): a model folder and its tokenizer, import, tokenize a
# text, fine-tune, sample text, export, load the export in transformers and generate; then
# LoRA adapters alone, exported as PEFT's files, loaded by PEFT over the model and merged
# into it by import hf --adapter; then
# instruction tuning on prompt-completion pairs, the completions alone learned, one a row
# and packed several a row, each kept to itself (the model's positions).
#
#   bash examples/finetune/run.sh [OUT]      (OUT: runs/finetune; from the repository root)
#
# TRAINC (build/trainc), HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) and TEXT (the text to fine-tune on; GPL-3's) may be set.
# Exits 77 when HF_PYTHON has no transformers, nonzero when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/finetune}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
PROMPT="This License"
HF="$HF_PYTHON examples/finetune/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
rm -rf "$OUT/hf" "$M" "$OUT/run" "$OUT/hf_tuned" "$OUT/lora" "$OUT/hf_lora" "$OUT/sft" \
    "$OUT/sft_packed"   # an earlier run's

step() { printf '\n== %s\n' "$*"; }
val_loss() { sed -n 's/^{"event":"eval","val_loss":\([^,]*\),.*/\1/p'; }
# fell A B BY WHAT: loss B is below A - BY, else FAIL: WHAT did not fall (by BY)
fell() {
    awk -v a="$1" -v b="$2" -v by="$3" 'BEGIN { exit !(b < a - by) }' ||
        { echo "FAIL: $4 did not fall$([ "$3" = 0 ] || echo " by $3")"; exit 1; }
}

step "1. a Hugging Face model folder: tokenizer.json and a tiny random Llama"
$HF make "$OUT/hf"

step "2. trainc import hf"
$TRAINC import hf "$OUT/hf" -o "$M"

step "3. tokenize $TEXT with its tokenizer.json"
$TRAINC data text "$TEXT" "$M/data" --tokenizer "$OUT/hf/tokenizer.json"

step "4. fine-tune 60 steps on the CPU"
EVAL=(--eval --set validate.batches=null)   # every validation window, as hf.py reads them
TUNE=(--set max_steps=60 --set optimizer.lr=1e-2 --set schedule.warmup_steps=5)   # each run's
before=$($TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" "${EVAL[@]}" \
         --quiet | val_loss)
$TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --out "$OUT/run" \
    "${TUNE[@]}" --set validate.every_steps=20 --set log_every=5
first=$(sed -n 's/.*"step":5,.*"loss":\([^,]*\),.*/\1/p' "$OUT/run/metrics.jsonl")
last=$(sed -n 's/.*"step":60,.*"loss":\([^,]*\),.*/\1/p' "$OUT/run/metrics.jsonl")
echo "training loss: $first at step 5, $last at step 60"
fell "$first" "$last" 0.5 "the training loss"

step "5. sample text from the fine-tuned weights (and their validation loss)"
sample=$($TRAINC run "$M/model.json" "$M/train.json" --init "$OUT/run/model.safetensors" \
         "${EVAL[@]}" --sample 40 --temperature 0.7 --prompt "$PROMPT" \
         --tokenizer "$OUT/hf/tokenizer.json" --quiet)
after=$(printf '%s\n' "$sample" | val_loss)
printf '%s' "$PROMPT"; printf '%s\n' "$sample" | sed 1d
echo "validation loss: $before before fine-tuning, $after after"
fell "$before" "$after" 0 "the validation loss"
[ "$(printf '%s\n' "$sample" | sed 1d | tr -d ' \n')" ] || { echo "FAIL: no text sampled"; exit 1; }

step "6. trainc export hf"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_tuned" --tokenizer "$OUT/hf/tokenizer.json"

step "7. transformers: from_pretrained, the same loss, generate"
$HF check "$OUT/hf_tuned" "$M/data/val_000000.bin" "$after" "$PROMPT"
echo "ok: fine-tuned, exported and loaded back ($OUT/hf_tuned)"

step "8. LoRA instead: adapters of rank 8 alone, exported as PEFT's files"
LORA=(--set lora.rank=8 --set lora.alpha=16)
$TRAINC run "$M/model.json" "$M/train.json" "${LORA[@]}" --init "$M/init.safetensors" \
    --out "$OUT/lora" "${TUNE[@]}" --set validate.every_steps=60 --set log_every=20
after_lora=$($TRAINC run "$M/model.json" "$M/train.json" "${LORA[@]}" \
             --init "$OUT/lora/model.safetensors" "${EVAL[@]}" --quiet | val_loss)
echo "validation loss: $before before, $after_lora after LoRA ($after after training every weight)"
fell "$before" "$after_lora" 0 "the validation loss"
$TRAINC export hf "$M/model.json" "$M/train.json" "${LORA[@]}" --adapter \
    --weights "$OUT/lora/model.safetensors" -o "$OUT/hf_lora"
$HF peft "$OUT/hf" "$OUT/hf_lora" "$M/data/val_000000.bin" "$after_lora" "$PROMPT"
echo "ok: LoRA adapters trained, exported and loaded by PEFT over the model ($OUT/hf_lora)"
# and an adapter folder (PEFT's files, here the export's) merged into the model at import
$TRAINC import hf "$OUT/hf" --adapter "$OUT/hf_lora" -o "$OUT/merged"
merged=$($TRAINC run "$OUT/merged/model.json" "$M/train.json" --init "$OUT/merged/init.safetensors" \
         "${EVAL[@]}" --quiet | val_loss)
awk -v a="$after_lora" -v b="$merged" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }' ||
    { echo "FAIL: the merged import's validation loss $merged is not the LoRA run's $after_lora"; exit 1; }
echo "ok: import hf --adapter merged them into the model: validation loss $merged ($OUT/merged)"

step "9. instruction tuning: prompt-completion pairs, the completions alone learned"
$HF sft "$TEXT" "$OUT/sft.jsonl"
$TRAINC data sft "$OUT/sft.jsonl" "$M/sft" --tokenizer "$OUT/hf/tokenizer.json" --seq-len 64 \
    --eos "<|end_of_text|>"
SFT=(--set data.train.tokens=null --set "data.train.x=$M/sft/train_x.npy" --set "data.train.y=$M/sft/train_y.npy"
     --set data.val.tokens=null --set "data.val.x=$M/sft/val_x.npy" --set "data.val.y=$M/sft/val_y.npy")
sft_before=$($TRAINC run "$M/model.json" "$M/train.json" "${SFT[@]}" --init "$M/init.safetensors" \
             "${EVAL[@]}" --quiet | val_loss)
$TRAINC run "$M/model.json" "$M/train.json" "${SFT[@]}" --init "$M/init.safetensors" \
    --out "$OUT/sft" "${TUNE[@]}" --set validate.every_steps=60 --set log_every=20
sft_after=$(sed -n 's/.*"val_loss":\([^,]*\),.*/\1/p' "$OUT/sft/metrics.jsonl" | tail -1)
echo "validation loss on the completions: $sft_before before, $sft_after after"
fell "$sft_before" "$sft_after" 0.5 "the completions' validation loss"
SFT_PROMPT="Continue: you may not propagate"
sample=$($TRAINC run "$M/model.json" "$M/train.json" "${SFT[@]}" --init "$OUT/sft/model.safetensors" \
         "${EVAL[@]}" --sample 30 --temperature 0.7 --top-p 0.9 --prompt "$SFT_PROMPT" \
         --tokenizer "$OUT/hf/tokenizer.json" --stop "<|end_of_text|>" --quiet)
printf '%s' "$SFT_PROMPT"; printf '%s\n' "$sample" | sed 1d
echo "ok: instruction-tuned on $(wc -l < "$OUT/sft.jsonl") prompt-completion pairs ($OUT/sft)"

step "10. packing: several pairs a row, each one's attention its own (the model's positions)"
$TRAINC data sft "$OUT/sft.jsonl" "$M/sft_packed" --tokenizer "$OUT/hf/tokenizer.json" --seq-len 64 \
    --eos "<|end_of_text|>" --pack
# the imported model with an input of each token's position in its pair (docs/spec.md),
# and its training spec with the packed arrays as data
P=$M/sft_packed
$HF_PYTHON - "$M" "$P" <<'PY'
import json, os, sys
m_dir, p = sys.argv[1:3]
spec = json.load(open(os.path.join(m_dir, "model.json")))
m = spec["model"] if "model" in spec else spec
m["inputs"]["pos"] = {"shape": m["inputs"]["x"]["shape"], "dtype": "i32"}
m["positions"] = "pos"
json.dump(spec, open(os.path.join(m_dir, "model_packed.json"), "w"), indent=1)
train = json.load(open(os.path.join(m_dir, "train.json")))
t = train["train"] if "train" in train else train
t["data"] = {part: {k: os.path.abspath(os.path.join(p, "%s_%s.npy" % (part, k)))
                    for k in ("x", "y", "pos")} for part in ("train", "val")}
json.dump(train, open(os.path.join(m_dir, "train_packed.json"), "w"), indent=1)
PY
$TRAINC run "$M/model_packed.json" "$M/train_packed.json" --init "$M/init.safetensors" \
    --out "$OUT/sft_packed" "${TUNE[@]}" --set validate.every_steps=60 --set log_every=20
# the packed run's weights on the unpacked validation rows (one pair a row), as step 9's
packed_after=$($TRAINC run "$M/model.json" "$M/train.json" "${SFT[@]}" \
               --init "$OUT/sft_packed/model.safetensors" "${EVAL[@]}" --quiet | val_loss)
echo "validation loss on the completions, one pair a row: $sft_before before, $packed_after after the packed run"
fell "$sft_before" "$packed_after" 0.5 "the packed run's validation loss"
echo "ok: packed several pairs a row, each kept to itself ($OUT/sft_packed)"
