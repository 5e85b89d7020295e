#!/usr/bin/env bash
# The attention kernels alone against PyTorch's SDPA, in one run on the GPU machine after
# tests/gpu/pack.sh, with build/devpack.tar.xz copied there:
#
#   bash bench/gpu_attention.sh        rows in $OUT/attention.jsonl, the table in
#                                      $OUT/summary.txt (bench/attention_table.py)
#   ROUNDS=3 ITERS=20 bash bench/gpu_attention.sh     (the defaults)
#   TINY=1 ROUNDS=1 FAKE_GPU_LIB=... DEVPACK_DIR=... bash bench/gpu_attention.sh
#                                      a dry run here on tests/fake_gpu (T 64 only)
#
# trainc: tests/gpu/bench_attn.c (the pack's ship/bench_attn; the kernels the runtime
# picks for this GPU, and with TRAINC_ATT_SM90=0 the sm_80 ones where the runtime has
# Hopper kernels); PyTorch: bench/gpu_attention_torch.py, every SDPA backend this torch
# can force (flash, cuDNN, memory-efficient). Same shapes (d 2048, 16k tokens a call; T
# 1024, 2048, 4096; head dims 64 and 128; causal and full), same FLOP count (forward
# 4 B H T^2 hd, halved when causal; backward 2.5 times it), bf16, ROUNDS alternating
# rounds (../BENCHMARKING.md). Then the Llama-family attention at llama3_1b's,
# llama_124m's and Gemma 3 1B's shapes (grouped-query heads, rope, causal; Gemma's heads
# 256 wide, the sm_80 kernels alone): trainc both ways (do the
# sm_90a kernels with their qk_norm/rope pass beat the sm_80 ones that fuse it?) and
# PyTorch's rope then SDPA with enable_gqa, each backend; and Gemma 2 2B's (its scores
# soft-capped at 50: trainc's CAP kernels, PyTorch's compiled flex_attention with the
# cap as its score_mod and Gemma 2's eager attention, SDPA having no cap).
# Under tests/gpu/measure.sh, PART_LIMIT bounds the script (no round starts with under
# 60 s left).
set -u
ROOT=$(pwd)
T0=$(date +%s)
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-${TINY:+1}}; ITERS=${ITERS:-20}
X=(${TINY:+--tiny})
. bench/gpu_env.sh
RES=$OUT/attention.jsonl
: >"$RES"
left() { echo $((${PART_LIMIT:-100000} - ($(date +%s) - T0))); }
tag() {   # tag ROUND [KEY=VALUE]: each JSON line of stdin with the round (and one more key)
    python3 -c '
import json, sys
for l in sys.stdin:
    if l.startswith("{"):
        r = json.loads(l); r["round"] = int(sys.argv[1])
        if len(sys.argv) > 2:
            k, v = sys.argv[2].split("=", 1); r[k] = v
        print(json.dumps(r), flush=True)' "$@"
}
for round in $(seq 1 "$ROUNDS"); do
    [ "$(left)" -lt 60 ] && { echo "{\"skipped\":\"round $round: $(left) s left of the part's limit\"}" >>"$RES"; break; }
    "$S/bench_attn" "${X[@]}" --iters "$ITERS" "$D/templates/cuda" 2>>"$OUT/attention.log" | tag "$round" >>"$RES"
    TRAINC_ATT_SM90=0 "$S/bench_attn" "${X[@]}" --iters "$ITERS" "$D/templates/cuda" 2>>"$OUT/attention.log" |
        tag "$round" env=TRAINC_ATT_SM90=0 >>"$RES"
    python3 "$ROOT/bench/gpu_attention_torch.py" "${X[@]}" --iters "$ITERS" 2>>"$OUT/attention.log" | tag "$round" >>"$RES"
done
python3 "$ROOT/bench/attention_table.py" "$RES" | tee -a "$OUT/summary.txt"
