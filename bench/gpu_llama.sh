#!/usr/bin/env bash
# The Llama benchmark, in one run on the GPU machine, after tests/gpu/pack.sh (which
# builds llama_124m, llama3_1b and llama3_1b_autoN, bf16-mixed) with
# build/devpack.tar.xz copied there:
#
#   bash bench/gpu_llama.sh              results in $OUT/llama.jsonl and a table
#   WHAT=124m bash bench/gpu_llama.sh    llama_124m at B=16 only (about 2 minutes)
#   TORCH_BATCH=14 bash bench/gpu_llama.sh   llama3_1b at a batch measured before
#                                        (PyTorch's largest not searched)
#
# In the same run, on the same device and random tokens (uint16 shards for the GPT-2
# vocabulary, uint32 for Llama 3's 128256):
#   - the device's bf16 matrix rate (bf16_rate: MFU's measured denominator; the
#     datasheet's 989 TFLOP/s dense bf16 is the other, as llm.c reports it)
#   - llama_124m at B=16, T=1024: trainc, PyTorch eager and torch.compile
#     (bench/gpu_llama_torch.py: SDPA with GQA, bf16 autocast, fused AdamW, the loss
#     inside the compiled step, chunked cross-entropy, the vocabulary padded as
#     trainc's), ROUNDS alternating runs of each (default 3)
#   - llama3_1b at T=2048: PyTorch's largest batch (predicted from its peaks at
#     batches 1 and 2, then searched), then trainc, eager and compiled at that batch,
#     ROUNDS alternating runs
#   - trainc with selective recomputation (llama3_1b_sel) at PyTorch's batch, twice
#   - the memory goal: trainc with recompute auto at twice PyTorch's batch (the pack's
#     llama3_1b_autoN planned for batch N), against trainc none at PyTorch's batch
# MFU = tokens/s x FLOPs per token / rate, FLOPs per token = 6 N + 6 L d T: N the
# parameters a token's GEMMs use (all but the input embedding's, the head's counted
# once; the tied 1B's table is its head), 6 L d T causal attention's (half of 12 L d T).
# Memory: trainc's allocated bytes against torch.cuda.max_memory_allocated.
set -u
ROOT=$(pwd)
. bench/gpu_env.sh
RES=$OUT/llama.jsonl
: >"$RES"
ERR=$OUT/llama.err
WHAT=${WHAT:-all}        # all | 124m
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
gpt2_shards
llama3_shards
bf16_rate >>"$RES" 2>>"$ERR"

trainc_llama() {   # trainc_llama TRAINER SHARDS B LABEL [TAG]: one JSON line (TAG: the
                   # trainer's name in it is "TRAINER TAG")
    local exe=$1 shards=$2 b=$3 label=$4 tag=${5:+ $5} o=$D/llama.$1.$3.$RANDOM T=1024
    case $exe in llama3_1b*) T=2048 ;; esac
    "$S/$exe" --device cuda --set "data.train.tokens=$D/data/$shards/train_*.bin" \
        --set data.val=null --set validate.every_steps=null --set validate.batches=null \
        --set checkpoint=null --set log_every=1 --set batch_size="$b" --set max_steps="$STEPS" \
        --quiet --out "$o" >"$o.log" 2>&1
    # tokens/s as BENCHMARKING.md times it: the tokens after step 5 over their wall time
    python3 "$ROOT/bench/trainc_record.py" "$o/metrics.jsonl" "$b" "$T" 5 "$label" trainer="$exe$tag"
}
torch_llama() {    # torch_llama MODEL SHARDS B LABEL [--compile]: on trainc's shards
    local model=$1 shards=$2 b=$3 label=$4; shift 4
    python3 "$ROOT/bench/gpu_llama_torch.py" "$model" "$b" --steps "$STEPS" \
        --data "$D/data/$shards/train_*.bin" "$@" 2>>"$ERR" |
        python3 -c "import json, sys; r = json.loads(sys.stdin.read()); r['label'] = '$label'; print(json.dumps(r))"
}
rounds() {         # rounds MODEL TRAINER SHARDS B LABEL: ROUNDS alternating runs of the three,
                   # and of trainc on attention.cuh's sm_80 kernels (TRAINC_ATT_SM90=0: the
                   # Hopper kernels' rope pass against the sm_80 ones' fused rope)
    local i
    for ((i = 0; i < ROUNDS; i++)); do
        trainc_llama "$2" "$3" "$4" "$5"
        TRAINC_ATT_SM90=0 trainc_llama "$2" "$3" "$4" "$5" "TRAINC_ATT_SM90=0"
        torch_llama "$1" "$3" "$4" "$5"
        torch_llama "$1" "$3" "$4" "$5" --compile
    done
}
fits_torch() {     # fits_torch B: PyTorch eager runs 4 steps of llama3_1b at batch B
    python3 "$ROOT/bench/gpu_llama_torch.py" 1b "$1" --steps 4 2>>"$ERR" | grep -qv '"oom"'
}
largest_torch() {  # from PyTorch's peaks at batches 1 and 2 and what the device holds
                   # outside its allocator, then near() from that prediction
    local pred
    pred=$(for b in 1 2; do python3 "$ROOT/bench/gpu_llama_torch.py" 1b $b --steps 4 2>>"$ERR"; done |
        python3 -c "
import json, sys
r = [json.loads(l) for l in sys.stdin]
p1, p2 = r[0]['peak_bytes'], r[1]['peak_bytes']
print(2 + int((r[1]['total_bytes'] - r[1]['other_bytes'] - p2) // max(1, p2 - p1)))") || pred=1
    echo "{\"impl\":\"torch+bf16\",\"model\":\"1b\",\"predicted_batch\":$pred}" >&3
    near "$pred" fits_torch
}

{
    exec 3>&1
    rounds 124m llama_124m gpt2 16 llama_124m_b16
    if [ "$WHAT" != 124m ]; then
        tb=${TORCH_BATCH:-$(largest_torch)}
        echo "{\"impl\":\"torch+bf16\",\"model\":\"1b\",\"largest_batch\":$tb}"
        if [ "$tb" -gt 0 ]; then
            rounds 1b llama3_1b llama3 "$tb" llama3_1b_torch_batch
            # selective recomputation at the same batch: its memory and what it costs
            for ((i = 0; i < 2; i++)); do
                trainc_llama llama3_1b_sel llama3 "$tb" llama3_1b_torch_batch
            done
            g=$((2 * tb))
            if [ -x "$S/llama3_1b_auto$g" ]; then
                for ((i = 0; i < 2; i++)); do
                    trainc_llama llama3_1b llama3 "$tb" goal_none_at_torch_batch
                    trainc_llama "llama3_1b_auto$g" llama3 "$g" goal_auto_at_twice
                done
            else
                echo "{\"impl\":\"trainc\",\"goal\":\"no llama3_1b_auto$g in the pack\",\"have\":\"$(cd "$S" && ls -d llama3_1b_auto* 2>/dev/null | tr '\n' ' ')\"}"
            fi
        fi
    fi
} 2>>"$ERR" | tee "$RES.tmp"
cat "$RES.tmp" >>"$RES"; rm -f "$RES.tmp"
python3 "$ROOT/bench/llama_table.py" "$RES" | tee "$OUT/summary.txt"
