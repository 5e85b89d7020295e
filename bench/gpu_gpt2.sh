#!/usr/bin/env bash
# GPT-2 124M on the GPU per recomputation policy, in one run on
# the GPU machine, after tests/gpu/pack.sh (which builds gpt2_124m_{none,selective,full})
# and with build/devpack.tar.xz copied there:
#
#   bash bench/gpu_gpt2.sh [trainc]     results under $OUT/gpt2.jsonl
#   POLICIES="none full" bash bench/gpu_gpt2.sh trainc    some policies only
#   BATCH=80 POLICIES=none bash bench/gpu_gpt2.sh trainc  tokens/s at batch 80, no search
#   BATCH=376 POLICIES=auto376 bash bench/gpu_gpt2.sh trainc  the pack's auto trainer
#                                        planned for batch 376 in an H200's 142500 MiB
#   KNOWN="none=200 selective=276 full=648" bash bench/gpu_gpt2.sh
#                      PyTorch's side and the goal's runs alone, trainc's largest batches
#                      taken from an earlier run on the same kind of device (not searched);
#                      TORCH_BATCH=77 does the same for PyTorch's without checkpointing,
#                      TORCH_CKPT_BATCH=188 for PyTorch's with torch.utils.checkpoint
#   GPT2_WHAT=goal GOAL_ROUNDS=2 KNOWN="none=358 selective=495 full=1162" TORCH_BATCH=138 TORCH_CKPT_BATCH=188 \
#     bash bench/gpu_gpt2.sh      the memory goal alone on an H200 (the batches measured
#                      there on 2026-11-27 at fc5d978):
#                      trainc none at PyTorch's batch and auto at twice PyTorch's larger
#                      one, no PyTorch timings (about a minute)
#
# For each policy: the largest batch whose trainer starts and runs 3 steps, and
# tokens/s there. The search starts from a prediction: at batches 8 and 24, the bytes
# trainc allocates (linear in the batch: the plan's arena bytes a row) and the device's
# used memory after the first step, then runs at the predicted batch and the one above, stepping on where they
# disagree with it (the plan is allocated at start, so a batch that does not fit fails
# at once with exit 2). Doubling from 1 (2026-11-26, 8efc72d) took 18 runs, 150 s, a policy.
# PyTorch's largest batch with and without torch.utils.checkpoint (predicted from its
# peaks at batches 2 and 4, then the same search) and tokens/s; then trainc none at PyTorch's
# batch, and the trainer recompute auto would take at twice PyTorch's batch (the memory
# goal: at least 0.95x none's tokens/s at PyTorch's batch). Random tokens in llm.c's shard format. The trainers are what
# specs/gpt2_124m.json asks for, bf16-mixed, and PyTorch runs with bf16 autocast
# (PREC=fp32 compares against fp32 PyTorch, for trainers built with
# --set precision=fp32); torch.compile is printed at PyTorch's batch for reference.
set -u
ROOT=$(pwd)
. bench/gpu_env.sh
gpt2_shards
# PyTorch's allocator grows its segments in place instead of leaving fragments between
# fixed-size ones: its largest batch as PyTorch's users search it (BENCHMARKING.md)
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
GX=(--set "data.train.tokens=$D/data/gpt2/train_*.bin" --set data.val=null --set validate.every_steps=null --set validate.batches=null
    --set checkpoint=null --set log_every=1 --quiet --device cuda)
WHAT=${1:-${GPT2_WHAT:-all}}   # all | trainc (its side alone) | goal (no PyTorch timings: below)
PROBES=${PROBES:-8 24}   # the two batches whose memory predicts trainc's largest

fits_trainc() {   # fits_trainc POLICY B: runs 3 steps? A failure other than the GPU's
                  # memory is not "does not fit": it is kept in $D/g.failed, and the
                  # search stops there (GPU time is too dear to search on an error)
    local log="$D/g.$1.$2.log"
    [ -e "$D/g.failed" ] && return 1
    "$S/gpt2_124m_$1" "${GX[@]}" --set batch_size=$2 --set max_steps=3 --out "$D/g.$1.$2" >"$log" 2>&1 && return 0
    grep -q "out of GPU memory" "$log" || { echo "gpt2_124m_$1 at batch $2:"; tail -n 5 "$log"; } >"$D/g.failed"
    return 1
}
TP=(--bf16); TL=bf16
[ "${PREC:-bf16}" = fp32 ] && TP=() && TL=fp32
fits_torch() {    # fits_torch B [--ckpt]
    python3 "$ROOT/bench/gpu_gpt2_torch.py" "$@" "${TP[@]}" --steps 4 | grep -qv '"oom"'
}
used_trainc() {   # used_trainc POLICY B: "allocated used total" bytes after the first step
    local o="$D/u.$1.$2"
    "$S/gpt2_124m_$1" "${GX[@]}" --set batch_size=$2 --set max_steps=2 --out "$o" >"$o.log" 2>&1
    python3 - "$o/metrics.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if '"device_memory"' in l][0]
print(m["allocated_bytes"], m["used_bytes"], m["total_bytes"])
PY
}
largest_trainc() {   # largest_trainc POLICY: what trainc allocates grows by the plan's bytes
                     # a batch row (and the input slots'), exactly, so two small batches
                     # give the slope, and the device's used memory at the second what is
                     # left; near() then checks the prediction and the batch above
    local a b pred p1=${PROBES% *} p2=${PROBES#* }
    a=($(used_trainc $1 $p1)) && b=($(used_trainc $1 $p2)) || { echo 0; return; }
    pred=$(python3 -c "a1, a2, u2, tot = $a, ${b[0]}, ${b[1]}, ${b[2]}; print($p2 + int((tot - u2) // max(1, (a2 - a1) / ($p2 - $p1))))")
    echo "{\"impl\":\"trainc\",\"recompute\":\"$1\",\"predicted_batch\":$pred}" >&3
    near "$pred" fits_trainc $1
}
largest_torch() {    # largest_torch [--ckpt]: the same from PyTorch's peaks at batches 2
                     # and 4 and what the device holds outside its allocator
    local pred
    pred=$(for b in 2 4; do python3 "$ROOT/bench/gpu_gpt2_torch.py" $b "$@" "${TP[@]}" --steps 4; done |
        python3 -c "
import json, sys
r = [json.loads(l) for l in sys.stdin]
p2, p4 = r[0]['peak_bytes'], r[1]['peak_bytes']
print(4 + int((r[1]['total_bytes'] - r[1]['other_bytes'] - p4) // max(1, (p4 - p2) / 2)))") || pred=1
    echo "{\"impl\":\"torch+$TL$([ $# -gt 0 ] && echo +checkpoint)\",\"predicted_batch\":$pred}" >&3
    near "$pred" fits_torch "$@"
}
speed_trainc() {  # speed_trainc POLICY B: one JSON line
    local o="$D/s.$1.$2"
    "$S/gpt2_124m_$1" "${GX[@]}" --set batch_size=$2 --set max_steps=12 --out "$o" >/dev/null 2>&1
    # tokens/s as BENCHMARKING.md times it: the tokens after step 3 over their wall time
    python3 "$ROOT/bench/trainc_record.py" "$o/metrics.jsonl" "$2" 1024 3 recompute recompute="$1"
}
{
    exec 3>&1   # the predictions' lines, from inside $(...)
    rm -f "$D/g.failed"
    declare -A LB   # each policy's largest batch
    for k in ${KNOWN:-}; do   # policy=batch: a largest batch measured before, kept
        LB[${k%%=*}]=${k#*=}
        echo "{\"impl\":\"trainc\",\"recompute\":\"${k%%=*}\",\"largest_batch\":${k#*=},\"known\":true}"
    done
    for p in ${POLICIES:-none selective full}; do
        [ -n "${LB[$p]:-}" ] && continue
        b=${BATCH:-$(largest_trainc $p)}
        if [ -e "$D/g.failed" ]; then
            echo "bench/gpu_gpt2.sh: a run failed for a reason other than memory:" >&2
            cat "$D/g.failed" >&2; cat "$D/g.failed" >"$OUT/gpt2.failed"
            exit 1
        fi
        LB[$p]=$b
        echo "{\"impl\":\"trainc\",\"recompute\":\"$p\",\"largest_batch\":$b}"
        [ "$b" -gt 0 ] && speed_trainc $p $b
    done
    [ "$WHAT" = trainc ] && exit 0
    tb=${TORCH_BATCH:-$(largest_torch)}   # TORCH_BATCH: PyTorch's, measured before
    echo "{\"impl\":\"torch+$TL\",\"largest_batch\":$tb}"
    [ "$WHAT" = goal ] || python3 "$ROOT/bench/gpu_gpt2_torch.py" $tb "${TP[@]}" --steps 12
    cb=${TORCH_CKPT_BATCH:-$(largest_torch --ckpt)}   # likewise, with checkpointing
    echo "{\"impl\":\"torch+$TL+checkpoint\",\"largest_batch\":$cb}"
    [ "$WHAT" = goal ] || python3 "$ROOT/bench/gpu_gpt2_torch.py" $cb --ckpt "${TP[@]}" --steps 12
    [ "$tb" -gt 0 ] && speed_trainc none $tb
    gr=${GOAL_ROUNDS:-1}   # goal: none at PyTorch's batch and auto at twice it, GOAL_ROUNDS
                           # times alternately (2: one noisy run does not decide the 5%)
    # the memory goal: recompute auto at twice the batch PyTorch fits (the larger of its
    # two, with and without checkpointing), against none's tokens/s at PyTorch's batch
    # (the line above). auto is planned at build time for a batch and a budget: the
    # pack's gpt2_124m_autoN trainers (tests/gpu/pack.sh) are planned for batch N in the
    # memory of the devices measured before. With one for this goal, it runs; else the
    # first of the three trainers whose largest batch holds the goal does (an upper
    # bound on auto's cost: auto can stop between two policies)
    g=$((2 * (cb > tb ? cb : tb)))
    if [ "$tb" -gt 0 ] && [ -x "$S/gpt2_124m_auto$g" ]; then
        echo "{\"impl\":\"trainc\",\"auto_at_batch\":$g,\"takes\":\"$(sed 's/^ *//; s/ *$//; s/"//g' "$S/gpt2_124m_auto$g.plan")\"}"
        speed_trainc auto$g $g
        for ((i = 1; i < gr; i++)); do speed_trainc none $tb; speed_trainc auto$g $g; done
    elif [ "$tb" -gt 0 ]; then
        for p in none selective full; do
            if [ "${LB[$p]:-0}" -ge $g ]; then
                echo "{\"impl\":\"trainc\",\"auto_at_batch\":$g,\"no_auto_trainer\":true,\"runs\":\"$p\"}"
                speed_trainc $p $g
                for ((i = 1; i < gr; i++)); do speed_trainc none $tb; speed_trainc $p $g; done
                break
            fi
        done
    fi
    [ "$WHAT" = goal ] || python3 "$ROOT/bench/gpu_gpt2_torch.py" $tb "${TP[@]}" --compile --steps 12
} 2>>"$OUT/gpt2.err" | tee "$OUT/gpt2.jsonl"
