#!/usr/bin/env bash
# A Llama-3.2-1B-shaped Hugging Face checkpoint fine-tuned on the GPU, the whole path of
# examples/finetune/ at full size, in one run on the GPU machine after tests/gpu/pack.sh
# (with build/devpack.tar.xz copied there):
#
#   bash bench/gpu_hf.sh          rows in $OUT/hf.jsonl, a summary in $OUT/summary.txt
#   STEPS=30 B=8 bash bench/gpu_hf.sh      (the defaults)
#
# 1. bench/hf_llama1b.py makes the checkpoint (random weights, bf16, transformers' names)
#    beside the pack's tokenizer.json (Llama-3-style, trained on Debian's prose);
# 2. the pack's trainc: `import hf` (--seq-len 2048), checked to give the model.json the
#    pack's trainer llama1b_ft was built from; `data text` tokenizes the pack's text;
# 3. llama1b_ft fine-tunes STEPS steps at batch B in bf16-mixed from the imported
#    init.safetensors: tokens/s over the steps after 5 (bench/trainc_record.py), the
#    command in the row, and its closing validation over every validation window;
# 4. `trainc export hf`, and bench/hf_llama1b.py check: transformers' from_pretrained and
#    its loss on the same windows within 1% of trainc's (bf16 on both sides) where the
#    device has transformers; the export's names and shapes against its config.json
#    where it has not (the row says which).
# Under tests/gpu/measure.sh, PART_LIMIT bounds the script.
# A dry run here: TINY=1 DEVICE=cpu with a DEVPACK_DIR whose llama1b_ft and
# data/hf1b/model.json were made from `hf_llama1b.py make --tiny` (T 64).
set -u
ROOT=$(pwd)
STEPS=${STEPS:-30}
B=${B:-8}
DEVICE=${DEVICE:-cuda}
SEQ=2048; MAKE=()
[ -n "${TINY:-}" ] && { SEQ=64; MAKE=(--tiny); }
. bench/gpu_env.sh
RES=$OUT/hf.jsonl
LOG=$OUT/hf.log
: >"$RES"
H=$D/data/hf1b
TR=$S/trainc
W=$D/hf1b.work
row() { echo "$1" | tee -a "$RES"; }
fail() { row "{\"label\":\"hf1b\",\"error\":\"$1\"}"; echo "FAIL hf1b: $1" >>"$OUT/summary.txt"; exit 1; }
[ -f "$H/model.json" ] && [ -x "$S/llama1b_ft" ] && [ -x "$TR" ] ||
    { row '{"label":"hf1b","skipped":"the pack has no data/hf1b, trainc or llama1b_ft"}'; exit 0; }
rm -rf "$W"; mkdir -p "$W"
t=$(date +%s)
python3 "$ROOT/bench/hf_llama1b.py" make "$W/hf" "$H/tokenizer.json" "${MAKE[@]}" >>"$LOG" 2>&1 || fail "making the checkpoint"
"$TR" import hf "$W/hf" -o "$W/llama1b_ft" --seq-len "$SEQ" >>"$LOG" 2>&1 || fail "trainc import hf"
cmp -s "$W/llama1b_ft/model.json" "$H/model.json" || fail "the import's model.json differs from the trainer's"
"$TR" data text "$H/text.txt" "$W/llama1b_ft/data" --tokenizer "$W/hf/tokenizer.json" >>"$LOG" 2>&1 ||
    fail "trainc data text"
row "{\"label\":\"hf1b_prepare\",\"seconds\":$(($(date +%s) - t))}"
DATA=(--set "data.train.tokens=$W/llama1b_ft/data/train_*.bin" --set "data.val.tokens=$W/llama1b_ft/data/val_*.bin")
CMD=("$S/llama1b_ft" --device "$DEVICE" --init "$W/llama1b_ft/init.safetensors" "${DATA[@]}" --set batch_size="$B"
     --set max_steps="$STEPS" --set schedule.warmup_steps=5 --set log_every=1 --set checkpoint=null
     --set validate.every_steps=null --set validate.batches=null --quiet --out "$W/run")
"${CMD[@]}" >>"$LOG" 2>&1 || fail "fine-tuning (exit $?)"
python3 "$ROOT/bench/trainc_record.py" "$W/run/metrics.jsonl" "$B" "$SEQ" 5 hf1b_finetune \
    command="llama1b_ft --device $DEVICE --init init.safetensors --set batch_size=$B --set max_steps=$STEPS" | tee -a "$RES"
# the run's closing validation, over every validation window (validate.batches null):
# the loss --eval of model.safetensors gives, without running it again
loss=$(python3 -c 'import json, sys; print([r for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r][-1]["val_loss"])' \
       "$W/run/metrics.jsonl" 2>>"$LOG")
[ -n "$loss" ] || fail "the fine-tuned weights' validation loss"
"$TR" export hf "$H/model.json" "$H/train.json" --weights "$W/run/model.safetensors" -o "$W/hf_tuned" \
    --tokenizer "$W/hf/tokenizer.json" >>"$LOG" 2>&1 || fail "trainc export hf"
python3 "$ROOT/bench/hf_llama1b.py" check "$W/hf_tuned" "$W/llama1b_ft/data/val_000000.bin" "$loss" "$SEQ" 2>>"$LOG" |
    tee -a "$RES"
ok=${PIPESTATUS[0]}
echo "hf1b: $(tail -n 1 "$RES")" >>"$OUT/summary.txt"
rm -rf "$W"
exit "$ok"
