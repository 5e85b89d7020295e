#!/usr/bin/env bash
# fp16-mixed's dynamic loss scaling (torch.amp.GradScaler's rule), on the CPU:
#  1. a scale that never overflows changes nothing: gradients are scaled and unscaled by
#     powers of two, so the weights are bit-identical to fp32's, while the scale grows
#     every loss_scale.growth_interval steps;
#  2. a scale that overflows the gradients skips the update (weights untouched) and
#     halves the scale until the gradients are finite, then training goes on;
#  3. the scaler's state is part of the checkpoint: a run resumed half-way ends
#     bit-identical to the uninterrupted one.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/scaler
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/mlp_fashion.json -o "$d/mlp" 2>/dev/null
S=(--set data.val=null --set log_every=1 --threads 1 --quiet)
F16=(--set precision=fp16-mixed)

# 1. no overflow: fp16-mixed == fp32 bit for bit, the scale grows 1024 -> 65536
"$d/mlp" --out "$d/fp32" "${S[@]}" --set max_steps=30 2>/dev/null
"$d/mlp" --out "$d/f16" "${S[@]}" "${F16[@]}" --set max_steps=30 --set loss_scale.init=1024 \
    --set loss_scale.growth_interval=5 2>/dev/null
cmp "$d/fp32/model.safetensors" "$d/f16/model.safetensors"
$PY - "$d/f16/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"loss_scale"' in l]
assert len(r) == 30, len(r)
for x in r:   # doubled after every 5 finite steps
    want = 1024 * 2 ** (x["step"] // 5)
    assert x["loss_scale"] == want and x["skipped_steps"] == 0, (x, want)
print("scale", r[0]["loss_scale"], "->", r[-1]["loss_scale"])
PY
echo "ok   no overflow: bit-identical to fp32, scale grows every growth_interval steps"
# ... but never past fp32's range (GradScaler's scale is an fp32 tensor, grown only to
# a finite value): from 2^126, growing every step, it stops at 2^127 and nothing is skipped
"$d/mlp" --out "$d/top" "${S[@]}" "${F16[@]}" --set max_steps=6 --set loss_scale.init=8.507059173023462e37 \
    --set loss_scale.growth_interval=1 2>/dev/null
$PY - "$d/top/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"loss_scale"' in l]
assert len(r) == 6 and r[-1]["skipped_steps"] == 0, r   # (records print 9 digits)
assert all(abs(x["loss_scale"] / 2.0 ** 127 - 1) < 1e-8 for x in r), [x["loss_scale"] for x in r]
PY
echo "ok   the scale grows to 2^127 at most, as GradScaler's fp32 one"

# 2. overflow: the first steps are skipped and the weights stay as they were
"$d/mlp" --out "$d/w0" "${S[@]}" --set max_steps=1 2>/dev/null
"$d/mlp" --out "$d/skip1" "${S[@]}" "${F16[@]}" --set max_steps=1 --set loss_scale.init=1e40 \
    --init "$d/w0/model.safetensors" 2>/dev/null
cmp "$d/w0/model.safetensors" "$d/skip1/model.safetensors"
"$d/mlp" --out "$d/skip" "${S[@]}" "${F16[@]}" --set max_steps=40 --set loss_scale.init=1e40 \
    --init "$d/w0/model.safetensors" 2>/dev/null
$PY - "$d/skip/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"loss_scale"' in l]
k = r[-1]["skipped_steps"]
assert r[0]["skipped_steps"] == 1 and 1 <= k < 40, (r[0], k)
for x in r:   # halved once per skipped step (growth_interval 2000 is not reached)
    assert x["loss_scale"] == 1e40 * 0.5 ** x["skipped_steps"], x
first, last = sum(x["loss"] for x in r[:k + 3]) / (k + 3), sum(x["loss"] for x in r[-5:]) / 5
assert last < first, (first, last)   # training goes on after the skips
print(f"{k} steps skipped, scale {r[-1]['loss_scale']:.3g}; loss {first:.3f} -> {last:.3f}")
PY
tail -n 1 "$d/skip/metrics.jsonl" | grep -q '"reason":"max_steps"'
echo "ok   overflow: updates skipped (weights unchanged), scale halved, training goes on"

# 3. the scaler's state survives a checkpoint
C=(--set loss_scale.init=1e40 --set loss_scale.growth_interval=3 --set checkpoint.every_steps=10)
"$d/mlp" --out "$d/full" "${S[@]}" "${F16[@]}" "${C[@]}" --set max_steps=24 2>/dev/null
"$d/mlp" --out "$d/half" "${S[@]}" "${F16[@]}" "${C[@]}" --set max_steps=10 2>/dev/null
"$d/mlp" --resume "$d/half" "${S[@]}" "${F16[@]}" "${C[@]}" --set max_steps=24 2>/dev/null
cmp "$d/full/model.safetensors" "$d/half/model.safetensors"
diff <(grep -o '"loss_scale":[^,]*,"skipped_steps":[0-9]*' "$d/full/metrics.jsonl") \
     <(grep -o '"loss_scale":[^,]*,"skipped_steps":[0-9]*' "$d/half/metrics.jsonl")
echo "ok   resumed at step 10: same scale history, bit-identical weights"
