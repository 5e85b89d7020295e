#!/usr/bin/env bash
# GPT-2's training recipe, trainc's against PyTorch's, step for step (../BENCHMARKING.md:
# "a loss curve of trainc's recipe against PyTorch's at the benchmarked size, at least
# 1000 steps on real text, beside the speed figure"). Both start from the same weights
# (PyTorch's initialization, written under trainc's names: bench/gpu_gpt2_torch.py
# --save-init, trainc's --init), read the same batches in the same order (the pack's
# GPT-2 BPE shards of Debian's text; gpu_gpt2_torch.py --data follows runtime/data.c's
# seeded shuffle) and take the same schedule (cosine to 0 after WARMUP steps), AdamW
# (weight decay on tensors of rank 2 and more) and clipping at 1.0:
#   - trainc: the pack's gpt2_124m_none trainer (bf16-mixed: activations stored in bf16),
#     a record every step;
#   - PyTorch: gpu_gpt2_torch.py in bf16 autocast (eager unless TORCH_COMPILE=1), the
#     vocabulary padded as trainc pads it.
# Prints and appends to $OUT/curve.jsonl: each side's loss, the mean of the last 100
# steps and their ratio (the goal: within 1%), the worst relative difference over the
# first 10 steps (where the two runs are still the same run up to rounding) and over
# all; the curves are $OUT/curve.trainc.jsonl and $OUT/curve.torch.jsonl.
#
#   on the device:   STEPS=1000 B=16 bash bench/gpu_gpt2_curve.sh    (tests/gpu/measure.sh curve)
#   on a CPU:        TINY=1 bash bench/gpu_gpt2_curve.sh
# TINY=1: the same on this machine's CPU in fp32 with a GPT-2 of 2 blocks of d 64, 4 heads
# and T 64 (build/trainc run; STEPS 40, B 4, WARMUP 10 unless given) on data/text's byte
# shards: the two sides then run the same arithmetic but for the order of sums, so
# their losses agree within 1e-4 relative at every step, which it checks
# (tests/run_all.sh: parity/gpt2_recipe): the benchmark's PyTorch side trains trainc's
# recipe, not another.
set -uo pipefail
ROOT=$(pwd)
TINY=${TINY:-0}
if [ "$TINY" = 1 ]; then
    OUT=${OUT:-build/tests/gpt2_curve}
    STEPS=${STEPS:-40} B=${B:-4} WARMUP=${WARMUP:-10}
    rm -rf "$OUT"; mkdir -p "$OUT"
    TXT=${TXT:-data/text}   # (byte tokens: what make test has)
    PY=${PYTHON:-/usr/bin/python3}
else
    STEPS=${STEPS:-1000} B=${B:-16} WARMUP=${WARMUP:-100}
    . bench/gpu_env.sh
    TXT=$D/data/gpt2text
    PY=python3
fi
[ -f "$TXT/train_000000.bin" ] || { echo "gpu_gpt2_curve.sh: no GPT-2 text shards in $TXT (bench/text_shards.py makes them)"; exit 77; }
# the work folder: the weights (0.5 GB at GPT-2's size) stay out of $OUT, whose files
# come back from the device; its logs are copied there at the end
W=$OUT/curve
[ "$TINY" = 1 ] || W=$D/curve
rm -rf "$W"; mkdir -p "$W"
keep_logs() { for f in torch.err torch.json trainc.err; do cp "$W/$f" "$OUT/curve.$f" 2>/dev/null; done; }
trap keep_logs EXIT
TRAINC_ARGS=(--set "data.train.tokens=$TXT/train_*.bin" --set data.val=null --set validate.every_steps=null
             --set validate.batches=null --set checkpoint=null --set log_every=1 --set batch_size="$B"
             --set max_steps="$STEPS" --set schedule.warmup_steps="$WARMUP"
             --init "$W/init.safetensors" --out "$W/trainc" --quiet)
TORCH_ARGS=("$B" --steps "$STEPS" --warm 1 --data "$TXT/train_*.bin" --warmup "$WARMUP"
            --save-init "$W/init.safetensors" --curve "$OUT/curve.torch.jsonl")

# PyTorch first: its initial weights are the run's
if [ "$TINY" = 1 ]; then
    "$PY" bench/gpu_gpt2_torch.py "${TORCH_ARGS[@]}" --tiny --device cpu >"$W/torch.json" 2>"$W/torch.err" ||
        { echo "FAIL: gpu_gpt2_torch.py:"; tail -5 "$W/torch.err"; exit 1; }
    "$PY" - "$W/tiny.json" <<'PY'
import json, sys
s = json.load(open("specs/gpt2_124m.json"))
m = s["model"]
m["inputs"]["x"]["shape"] = m["inputs"]["y"]["shape"] = [64]
m["layers"][0]["dim"] = 64
m["layers"][1]["max_len"] = 64
rep = m["layers"][2]
rep["count"] = 2
rep["body"][0]["body"][1]["heads"] = 4
rep["body"][1]["body"][1]["out"] = 256
rep["body"][1]["body"][3]["out"] = 64
s["train"]["precision"] = "fp32"
json.dump(s, open(sys.argv[1], "w"), indent=1)
PY
    "${TRAINC:-build/trainc}" run "$W/tiny.json" --threads 2 "${TRAINC_ARGS[@]}" 2>"$W/trainc.err" ||
        { echo "FAIL: trainc:"; tail -5 "$W/trainc.err"; exit 1; }
else
    TC=()
    [ "${TORCH_COMPILE:-0}" = 1 ] && TC=(--compile)
    python3 bench/gpu_gpt2_torch.py "${TORCH_ARGS[@]}" --bf16 "${TC[@]}" >"$W/torch.json" 2>"$W/torch.err" ||
        { echo "FAIL: gpu_gpt2_torch.py:"; tail -5 "$W/torch.err"; exit 1; }
    "$S/gpt2_124m_none" --device cuda "${TRAINC_ARGS[@]}" 2>"$W/trainc.err" ||
        { echo "FAIL: trainc:"; tail -5 "$W/trainc.err"; exit 1; }
fi
grep '"step"' "$W/trainc/metrics.jsonl" | grep -v '"event"' > "$OUT/curve.trainc.jsonl"

"$PY" - "$OUT" "$TINY" "$STEPS" "$B" <<'PY' | tee -a "$OUT/curve.jsonl"
import json, sys
out, tiny, steps, B = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
L = lambda p: {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = L(out + "/curve.trainc.jsonl"), L(out + "/curve.torch.jsonl")
steps_both = sorted(set(a) & set(b))
rel = {s: abs(a[s] - b[s]) / abs(b[s]) for s in steps_both}
last = steps_both[-100:]
ma, mb = sum(a[s] for s in last) / len(last), sum(b[s] for s in last) / len(last)
rec = {"impl": "compare", "label": "gpt2_curve", "tiny": tiny, "steps": len(steps_both), "batch": B,
       "first_loss": [a.get(1), b.get(1)], "final_loss": [a.get(steps), b.get(steps)],
       "last100_mean": [round(ma, 5), round(mb, 5)], "last100_ratio": round(ma / mb, 5),
       "worst_rel_first10": max(rel[s] for s in steps_both[:10]), "worst_rel": max(rel.values())}
ok = len(steps_both) == steps and (rec["worst_rel"] <= 1e-4 if tiny else abs(ma / mb - 1) <= 0.01)
rec["goal_met"] = ok
print(json.dumps(rec))
sys.exit(0 if ok else 1)
PY
