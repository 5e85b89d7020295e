#!/usr/bin/env bash
# GPT-2 124M at B=16, T=1024, bf16-mixed, in one run
# on the GPU machine, after tests/gpu/pack.sh, with build/devpack.tar.xz copied there:
#
#   bash bench/gpu_gpt2_b16.sh          results in $OUT/gpt2_b16.jsonl and a table
#   STEPS=30 B=16 bash bench/gpu_gpt2_b16.sh
#   LLMC=0 bash bench/gpu_gpt2_b16.sh   without llm.c (its build takes a minute or two)
#
# Measures, on the same device in the same run, on the same random-token shards
# (llm.c's format):
#   - the device's bf16 matrix rate: PyTorch bf16 GEMMs of 8192^3, the best of 20
#     (MFU's denominator: what this device really does, not the datasheet)
#   - trainc (gpt2_124m_none from the pack, recompute none, bf16-mixed): tokens/s
#     (the records' mean after 5 warm-up steps), the bytes trainc allocated and the
#     device's used memory after step 1; again with TRAINC_GEMM_EPILOGUE=0, with
#     gpt2_124m_ce3 (the classifier reading each row three times), and with
#     the vocabulary unpadded (gpt2_124m_nopad: the logits' rows 50257 apart instead of
#     50304, the head's GEMMs over 50257 rows instead of 50304); and
#     its --profile (GPU time by instruction)
#   - PyTorch eager and torch.compile, bf16 autocast, F.scaled_dot_product_attention
#     (flash), fused AdamW, the same model and batch (bench/gpu_gpt2_torch.py): tokens/s
#     and torch.cuda.max_memory_allocated
#   - llm.c's train_gpt2cu, built here with nvcc from its public source when the pack
#     has it (pack.sh takes it from LLMC_DIR or the library's mirror; random init "-e
#     d12", no cuDNN): tokens/s from its log
# MFU = tokens/s x FLOPs per token / bf16 rate, FLOPs per token = 6 N + 6 L C T with N
# the parameters less the position table (what `trainc check` reports: 798.6 MFLOPs),
# L = 12 layers, C = 768, T = 1024 (causal attention: half of 12 L C T).
set -u
ROOT=$(pwd)
B=${B:-16}
STEPS=${STEPS:-25}
. bench/gpu_env.sh
RES=$OUT/gpt2_b16.jsonl
: >"$RES"
gpt2_shards

# the bf16 matrix rate
bf16_rate >>"$RES" 2>>"$OUT/gpt2_b16.err"

# trainc, with cuBLASLt's epilogues (bias, GELU, residual; backward DGELU and BGRADB)
# and without them (TRAINC_GEMM_EPILOGUE=0: the GEMMs, then epilogue.cuh's kernels), to
# see what the epilogues are worth on this device
trainc_b16() {   # trainc_b16 LABEL TRAINER [ENV...]
    local label=$1 exe=$2; shift 2
    local o=$D/b16.trainc.$label
    rm -rf "$o"
    env "$@" "$S/$exe" --device cuda --set "data.train.tokens=$D/data/gpt2/train_*.bin" \
        --set data.val=null --set validate.every_steps=null --set validate.batches=null \
        --set checkpoint=null --set log_every=1 --set batch_size="$B" --set max_steps="$STEPS" \
        --quiet --out "$o" >"$OUT/gpt2_b16.trainc.$label.log" 2>&1
    python3 - "$o/metrics.jsonl" "$B" "$label" >>"$RES" <<'PY'
import json, sys
try:
    r = [json.loads(l) for l in open(sys.argv[1])]
    t = [x["tokens_per_s"] for x in r if "tokens_per_s" in x][5:]
    s = r[0]; m = [x for x in r if x.get("event") == "device_memory"]
    print(json.dumps({"impl": "trainc+" + s.get("precision", "?") + " (" + sys.argv[3] + ")",
                      "batch": int(sys.argv[2]), "tokens_per_s": sum(t) / len(t),
                      "device_bytes": s.get("device_bytes"),
                      "used_bytes": m[0]["used_bytes"] if m else None,
                      "context_bytes": m[0].get("context_bytes") if m else None}))
except Exception as e:
    print(json.dumps({"impl": "trainc (" + sys.argv[3] + ")", "error": repr(e)}))
PY
}
trainc_b16 epilogues gpt2_124m_none
trainc_b16 no-epilogues gpt2_124m_none TRAINC_GEMM_EPILOGUE=0
# and with the classifier's three passes over each row (gpt2_124m_ce3, built with
# TRAINC_CE_REGS=0 by pack.sh: the kernel as it was) instead of the row held in
# registers (loss.cuh), to see what reading the logits once is worth
[ -x "$S/gpt2_124m_ce3" ] && trainc_b16 ce-three-passes gpt2_124m_ce3
# and with the vocabulary unpadded (logits' rows 50257 apart, not 50304, the head's
# GEMMs over 50257 rows: built with TRAINC_PAD_LOGITS=0 by pack.sh), to see what the
# padded vocabulary is worth
[ -x "$S/gpt2_124m_nopad" ] && trainc_b16 vocab-unpadded gpt2_124m_nopad
# where a step's GPU time goes, by instruction (--profile: events between them; 10
# steps after 2 warm-up ones): $OUT/gpt2_b16.profile.json and the table in its log
"$S/gpt2_124m_none" --device cuda --set "data.train.tokens=$D/data/gpt2/train_*.bin" \
    --set data.val=null --set validate.every_steps=null --set validate.batches=null \
    --set checkpoint=null --set batch_size="$B" --set max_steps=12 --profile --quiet --out "$D/b16.profile" >"$OUT/gpt2_b16.profile.log" 2>&1
cp "$D/b16.profile/profile.json" "$OUT/gpt2_b16.profile.json" 2>/dev/null

# PyTorch, eager and compiled
python3 "$ROOT/bench/gpu_gpt2_torch.py" "$B" --bf16 --steps "$STEPS" >>"$RES" 2>>"$OUT/gpt2_b16.err"
python3 "$ROOT/bench/gpu_gpt2_torch.py" "$B" --bf16 --compile --steps "$STEPS" >>"$RES" 2>>"$OUT/gpt2_b16.err"

# llm.c, when the pack has its source
if [ "${LLMC:-1}" != 0 ] && [ -d "$D/llm.c" ] && { [ -x "$D/llm.c/train_gpt2cu" ] || command -v nvcc >/dev/null; }; then
    # CUDA 13's cudaMemAdvise takes a cudaMemLocation, not a device number (the one
    # line of llm.c's source that CUDA 13's nvcc refuses)
    # (tests/gpu/pack.sh builds it where it packs, when that machine has nvcc)
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
        "$D/llm.c/llmc/cuda_utils.cuh"
    { [ -x "$D/llm.c/train_gpt2cu" ] ||
      ( cd "$D/llm.c" && make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 >"$OUT/llmc.build.log" 2>&1 ); } &&
    ( cd "$D/llm.c" && ./train_gpt2cu -i "$D/data/gpt2/train_*.bin" -j "$D/data/gpt2/val_*.bin" -e d12 \
        -b "$B" -t 1024 -x "$STEPS" -v 100000 -s 100000 -h 0 -l 6e-4 -c 0.1 >"$OUT/llmc.log" 2>&1 )
    python3 - "$OUT/llmc.log" "$B" >>"$RES" <<'PY'
import json, re, sys
t = [float(m.group(1)) for m in re.finditer(r"\| (\d+) tok/s", open(sys.argv[1]).read())]
# llm.c's tok/s is a bias-corrected moving average; take the last, after its warm-up
print(json.dumps({"impl": "llm.c train_gpt2cu (no cuDNN)", "batch": int(sys.argv[2]),
                  "tokens_per_s": t[-1] if t else None, "steps_logged": len(t)}))
PY
else
    echo '{"impl": "llm.c", "skipped": "LLMC=0, no llm.c source in the pack, or no nvcc"}' >>"$RES"
fi

python3 - "$RES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = next((r["flops_per_s"] for r in rows if "flops_per_s" in r), None)
fpt = 6 * (124439808 - 1024 * 768) + 6 * 12 * 768 * 1024
comp = next((r for r in rows if r["impl"].startswith("torch+compile") and "tokens_per_s" in r), None)
eager = next((r for r in rows if r["impl"].startswith("torch+bf16") and "tokens_per_s" in r), None)
print("bf16 matrix rate: %s" % ("%.0f TFLOP/s" % (peak / 1e12) if peak else "?"))
for r in rows:
    if "tokens_per_s" not in r or r["tokens_per_s"] is None:
        continue
    tps = r["tokens_per_s"]
    mfu = tps * fpt / peak if peak else float("nan")
    vs = ("%.2fx torch.compile" % (tps / comp["tokens_per_s"])) if comp else ""
    mem = r.get("device_bytes") or r.get("peak_bytes")
    mvs = ""
    if r["impl"].startswith("trainc") and eager and eager.get("peak_bytes") and mem:
        mvs = ", memory %.2fx PyTorch eager's peak" % (mem / eager["peak_bytes"])
    if r.get("context_bytes") is not None and r.get("used_bytes") and mem:
        # README's claim: used - context <= 1.05 x allocated
        mvs += ", (used - context) / allocated %.3f" % ((r["used_bytes"] - r["context_bytes"]) / mem)
    print("%-32s %10.0f tok/s  MFU %5.1f%%  %s%s" % (r["impl"], tps, 100 * mfu, vs, mvs))
PY
