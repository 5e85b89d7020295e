#!/usr/bin/env bash
# GPT-2 124M at B=16 (or $B), T=1024, bf16-mixed: trainc against the strongest PyTorch
# and llm.c configurations, by ../shared/BENCHMARKING.md, in one run on the GPU machine
# after tests/gpu/pack.sh, with build/devpack.tar.xz copied there:
#
#   bash bench/gpu_gpt2_b16.sh          results in $OUT/gpt2_b16.jsonl, the table in
#                                       $OUT/summary.txt (bench/gpt2_table.py)
#   B=64 bash bench/gpu_gpt2_b16.sh     the same at batch 64 ($OUT/gpt2_b64.jsonl)
#   ROUNDS=3 WARM=10 TIMED=100          the defaults: 3 alternating rounds, each run
#                                       WARM untimed steps then TIMED timed ones
#   MODES="default max-autotune-no-cudagraphs"   PyTorch's compile modes, a row each
#                                       (MODES=best: the faster mode of an earlier
#                                       table, BEST_FROM=that run's jsonl)
#   LLMC=0                              without llm.c; LLMC_EXTRA=0 without its
#                                       no-cuDNN row
#   EXTRAS=1                            after the rounds, once each: trainc without
#                                       cuBLASLt's epilogues, with the classifier's three
#                                       passes, with the vocabulary unpadded; PyTorch
#                                       eager; nanoGPT's softmax over all 50304 columns;
#                                       trainc's --profile
#
# In the same run, on the same device, in this order:
#   - the device's bf16 matrix rate (PyTorch bf16 GEMMs of 8192^3, the best of 20:
#     MFU's measured denominator; the datasheet's 989 TFLOP/s, as llm.c reports, the
#     other)
#   - trainc's start-up: the whole process's wall time from launch to the end of
#     step 1 (gpt2_124m_none, one step)
#   - each of MODES compiled once, 2 steps (round "prewarm"): the cold compile time,
#     and the inductor cache the rounds then start from
#   - ROUNDS rounds of, alternately: trainc (gpt2_124m_none from the pack: recompute
#     none, bf16-mixed, the vocabulary padded to 50304); PyTorch with torch.compile in
#     each of MODES (bench/gpu_gpt2_torch.py: model and loss compiled whole with
#     fullgraph=True, the vocabulary padded to 50304 and the loss over the first 50257
#     columns as trainc's and llm.c's classifiers, SDPA flash, fused AdamW, bf16
#     autocast; its compile time and first step recorded apart); llm.c's
#     train_gpt2cu_cudnn (USE_CUDNN=1, -r 0; bench/llmc.sh)
#   - llm.c without cuDNN, once (an extra row, labelled)
# Each run: tokens over the wall time of the timed steps, the device synchronized at
# both clock reads (trainc: its records at steps WARM and WARM + TIMED, written after
# the host waited for those steps; PyTorch: torch.cuda.synchronize at both reads;
# llm.c: its own CUDA-event step times, summed). Same random-token shards (llm.c's
# format) for trainc, llm.c and PyTorch (gpu_gpt2_torch.py --data: trainc's windows in
# its order, each batch pinned and copied without a wait); PyTorch once more on one
# batch drawn on the GPU (an extra row, "one batch": what reading the data costs it).
# MFU = tokens/s x FLOPs per token / rate, FLOPs per token = 6 N + 6 L C T with N the
# parameters less the position table (what `trainc check` reports: 798.6 MFLOPs),
# L = 12 layers, C = 768, T = 1024 (llm.c's count).
#
# Under tests/gpu/measure.sh, PART_LIMIT (seconds) bounds the whole script: each run is
# given what is left less 20 s (timeout), no run starts with under 30 s left, and the
# table is printed in any case.
set -u
ROOT=$(pwd)
T0=$(date +%s)
B=${B:-16}
ROUNDS=${ROUNDS:-3}
WARM=${WARM:-10}
TIMED=${TIMED:-100}
MODES=${MODES:-default max-autotune-no-cudagraphs}
. bench/gpu_env.sh
. bench/llmc.sh
RES=$OUT/gpt2_b$B.jsonl
ERR=$OUT/gpt2_b$B.err
: >"$RES"
gpt2_shards
# PyTorch's compiled kernels and autotuning results kept between its runs (the first
# run's compile is the cold one; its later runs' compile_s shows the cache's)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor-cache}

left() {      # seconds this script may still spend (a large number without PART_LIMIT)
    echo $((${PART_LIMIT:-100000} - ($(date +%s) - T0) - 20))
}
limited() {   # limited CMD...: CMD under what is left, or a skipped row when too little
    local l
    l=$(left)
    if [ "$l" -lt 30 ]; then
        echo "{\"skipped\":\"$l s left of the part's limit\",\"run\":\"$*\"}"
        return 0
    fi
    timeout -k 5 "$l" "$@"
}
tag() {       # tag ROUND [RUN]: the JSON line on stdin with the batch's label and the
              # round; an error row naming RUN when the run printed none
    python3 -c "
import json, sys
t = sys.stdin.read().strip().splitlines()
r = json.loads(t[-1]) if t and t[-1].startswith('{') else {'run': sys.argv[1], 'error': 'no record (see $(basename "$ERR"))'}
r.setdefault('label', 'b$B'); r['round'] = '$1'; print(json.dumps(r))" "${2:-?}"
}

trainc_run() {   # trainc_run ROUND TRAINER [ENV...]: one timed run, one JSON line
    local round=$1 exe=$2 o=$D/b$B.$2.$RANDOM; shift 2
    [ -x "$S/$exe" ] || { echo "{\"impl\":\"trainc\",\"trainer\":\"$exe\",\"skipped\":\"not in the pack\"}" | tag "$round"; return; }
    [ "$(left)" -lt 30 ] && { limited "$exe" | tag "$round"; return; }
    limited env "$@" "$S/$exe" --device cuda --set "data.train.tokens=$D/data/gpt2/train_*.bin" \
        --set data.val=null --set validate.every_steps=null --set validate.batches=null \
        --set checkpoint=null --set log_every=10 --set batch_size="$B" --set max_steps=$((WARM + TIMED)) \
        --quiet --out "$o" >"$o.log" 2>&1
    python3 "$ROOT/bench/trainc_record.py" "$o/metrics.jsonl" "$B" 1024 "$WARM" "b$B" \
        trainer="$exe" round="$round" ${1+env="$*"}
}
trainc_startup() {   # the whole process, launch to the end of step 1
    local o=$D/b$B.startup t
    t=$(date +%s.%N)
    "$S/gpt2_124m_none" --device cuda --set "data.train.tokens=$D/data/gpt2/train_*.bin" \
        --set data.val=null --set validate.every_steps=null --set validate.batches=null \
        --set checkpoint=null --set batch_size="$B" --set max_steps=1 --quiet --out "$o" >"$o.log" 2>&1
    python3 -c "import json; print(json.dumps({'impl': 'trainc+bf16-mixed', 'label': 'b$B', 'trainer': 'gpt2_124m_none',
        'startup_to_step1_s': round($(date +%s.%N) - $t, 3), 'kernel_cache': '$TRAINC_CACHE_DIR'}))"
}
torch_run() {    # torch_run ROUND [one] ARGS...: bench/gpu_gpt2_torch.py on the shards
                 # (one: on one batch drawn on the GPU), one JSON line
    local round=$1 data=(--data "$D/data/gpt2/train_*.bin"); shift
    [ "${1:-}" = one ] && { data=(); shift; }
    limited python3 "$ROOT/bench/gpu_gpt2_torch.py" "$B" --bf16 --warm "$WARM" --steps $((WARM + TIMED)) \
        "${data[@]}" "$@" 2>>"$ERR" | tag "$round" "gpu_gpt2_torch.py $*"
}
best_mode() {    # the compile mode with the higher median tokens/s in $BEST_FROM
    python3 - "${BEST_FROM:-}" <<'PY'
import json, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError:
    rows = []
by = {}
for r in rows:
    if r.get("impl", "").startswith("torch+compile") and r.get("tokens_per_s"):
        by.setdefault(r.get("mode") or "default", []).append(r["tokens_per_s"])
print(max(by, key=lambda m: statistics.median(by[m])) if by else "default")
PY
}
[ "$MODES" = best ] && MODES=$(best_mode)

{
    bf16_rate 2>>"$ERR"
    echo "{\"impl\":\"run\",\"label\":\"b$B\",\"batch\":$B,\"rounds\":$ROUNDS,\"warm\":$WARM,\"timed\":$TIMED,\"modes\":\"$MODES\",\"commit\":\"$(cat "$D/commit" 2>/dev/null)\",\"driver\":\"$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)\",\"llmc_build\":$(python3 -c 'import json, sys; print(json.dumps(open(sys.argv[1]).read()))' "$LLMC_DIR/build_flags.txt" 2>/dev/null || echo null)}"
    trainc_startup
    # each compile mode once before the rounds, 2 steps: its cold compile (and
    # max-autotune's autotuning) recorded apart, and the rounds then start from the
    # cache like a user's second run; a prewarm cut by the limit leaves what it had
    # tuned in the cache for the rounds
    for m in $MODES; do
        limited python3 "$ROOT/bench/gpu_gpt2_torch.py" "$B" --bf16 --warm 1 --steps 2 --compile --mode "$m" \
            --data "$D/data/gpt2/train_*.bin" 2>>"$ERR" | tag prewarm "gpu_gpt2_torch.py --compile --mode $m (prewarm)"
    done
    for ((r = 1; r <= ROUNDS; r++)); do
        trainc_run $r gpt2_124m_none
        for m in $MODES; do
            torch_run $r --compile --mode "$m"
        done
        [ "${LLMC:-1}" != 0 ] && llmc_run cudnn "$B" $((WARM + TIMED)) "$WARM" "b$B" | tag $r
    done
    [ "${LLMC:-1}" != 0 ] && [ "${LLMC_EXTRA:-1}" != 0 ] && llmc_run nocudnn "$B" $((WARM + TIMED)) "$WARM" "b$B" | tag extra
    # PyTorch's first mode on one batch drawn on the GPU (the baseline before 2026-12-04):
    # what reading the shards costs it
    torch_run extra one --compile --mode "${MODES%% *}"
    # the head and loss over the whole logits (TRAINC_HEAD_CHUNKS=1): what the chunked
    # head (a quarter of each sample's rows at a time, its weight gradient added four
    # times) costs or saves in time; its memory is the plan's
    trainc_run extra gpt2_124m_whole
    # the sm_80 attention kernels on Hopper (TRAINC_ATT_SM90=0): what the sm_90a kernels
    # (wgmma, TMA) gain or lose; 2026-12-04's 475k tokens/s with them against 2026-11-27's
    # 500k with the sm_80 ones, before the Hopper kernels existed
    trainc_run extra gpt2_124m_none TRAINC_ATT_SM90=0
    if [ "${EXTRAS:-0}" = 1 ]; then
        # cuBLASLt's epilogues (bias, GELU, residual; backward DGELU and BGRADB) off: the
        # GEMMs, then epilogue.cuh's kernels
        trainc_run extra gpt2_124m_none TRAINC_GEMM_EPILOGUE=0
        # the classifier's three passes over each row (built with TRAINC_CE_REGS=0)
        trainc_run extra gpt2_124m_ce3
        # the logits' rows 50257 apart, the head's GEMMs over 50257 rows (TRAINC_PAD_LOGITS=0)
        trainc_run extra gpt2_124m_nopad
        torch_run extra
        torch_run extra --compile --pad full
        torch_run extra --compile --pad none
        # where a step's GPU time goes, by instruction (10 steps after 2 warm-up ones)
        limited "$S/gpt2_124m_none" --device cuda --set "data.train.tokens=$D/data/gpt2/train_*.bin" \
            --set data.val=null --set validate.every_steps=null --set validate.batches=null \
            --set checkpoint=null --set batch_size="$B" --set max_steps=12 --profile --quiet \
            --out "$D/b$B.profile" >"$OUT/gpt2_b$B.profile.log" 2>&1
        cp "$D/b$B.profile/profile.json" "$OUT/gpt2_b$B.profile.json" 2>/dev/null
    fi
} 2>>"$ERR" | tee "$RES"
python3 "$ROOT/bench/gpt2_table.py" "$RES" | tee "$OUT/summary.txt"
