#!/usr/bin/env bash
# precision fp8-mixed without a GPU:
#   - the plan: gpt_char's linear GEMMs are rt_gemm*_fp8 calls, the classifier's (the
#     tied head) plain; each linear layer's two backward GEMMs marked to share dy's cast
#     (rt_fp8_dy_pair); trainc check counts them; bf16-mixed's plan otherwise, with
#     scratch for the FP8 copies (per row, dy in both layouts, and the largest marked
#     weight's);
#   - the CPU: fp32, said once, records bit-identical to bf16-mixed's CPU run;
#   - the fake GPU (tests/fake_gpu/, compute capability 9.0): mlp_fashion trained in
#     fp8-mixed, its losses within 2% of bf16-mixed's on the same fake GPU, and not
#     equal to them (the FP8 GEMMs ran), its casts a step one fewer than its FP8 GEMMs'
#     operands (the pair's dy cast once); with TRAINC_FAKE_CC=8.0 the trainer refuses
#     (exit 1, naming the capability, before compiling its kernels), and runs on 8.9;
#     gpt_char with no maximum pass either (attention's backward folds its dqkv's); a
#     GAN of linear layers trains in fp8-mixed as in bf16-mixed (within 2%).
# The casts' kernels and the FP8 GEMMs against their C twins are check_ops's (run by
# tests/fake_gpu_ops.sh).
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fp8_mixed
rm -rf "$d"; mkdir -p "$d/lib"

"$TRAINC" emit specs/gpt_char.json --set precision=fp8-mixed -o "$d/emit8" >/dev/null
"$TRAINC" emit specs/gpt_char.json --set precision=bf16-mixed -o "$d/emit16" >/dev/null
n8=$(grep -c 'rt_gemm[a-z_]*_fp8(' "$d/emit8/host.c")
# 4 blocks x 4 linears: 3 GEMMs each in training, and the forward's once more in evaluate()
[ "$n8" -eq 64 ] || { echo "FAIL: gpt_char fp8-mixed: $n8 FP8 GEMM calls in host.c, want 64"; exit 1; }
grep -q 'rt_gemm(e, 0, 1, e->B \* 128, [0-9]*, 128, 1.0f, layernorm_ln_f' "$d/emit8/host.c" ||
    { echo "FAIL: gpt_char fp8-mixed: the classifier's GEMM is not a plain rt_gemm"; exit 1; }
grep -q '\.fp8 = 1' "$d/emit8/host.c" || { echo "FAIL: rt_model.fp8 not set"; exit 1; }
# each of the 16 linear layers' backward pairs (dx and dW, one on dy) shares dy's cast
np=$(grep -c 'rt_fp8_dy_pair(e, ' "$d/emit8/host.c")
[ "$np" -eq 16 ] || { echo "FAIL: gpt_char fp8-mixed: $np backward pairs marked, want 16"; exit 1; }
grep -A2 'rt_fp8_dy_pair(e, d_linear_h_3_fc);' "$d/emit8/host.c" | grep -q 'rt_gemm_fp8(e, 0, 0, e->B \* 128, 128, 512, 1.0f, d_linear_h_3_fc,' ||
    { echo "FAIL: gpt_char fp8-mixed: fc's pair not marked before its first GEMM"; exit 1; }
# the same plan: host.c differs only where the calls are marked and the model says so
"$PY" - "$d" <<'PY' || { echo "FAIL: fp8-mixed's host.c differs from bf16-mixed's beyond the marked calls"; exit 1; }
import re, sys
d = sys.argv[1]
def norm(p):
    s = open(p).read()
    s = re.sub(r"\n \*\n \* fp8-mixed: .*?_fp8\.", "", s, flags=re.S)   # the header's note
    s = re.sub(r"\n *rt_fp8_dy_pair\(e, \w+\);", "", s)
    # the amax slots: reset as a pass starts, named before a GEMM, a fused kernel's argument
    s = re.sub(r"\n *rt_fp8_amax_reset\(e, \d+, \d+\); /\*[^*]*\*/", "", s)
    s = re.sub(r"\n *rt_fp8_amax_use\(e, -?\d+, -?\d+, -?\d+\);", "", s)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r",(\d+),(\(void\*\[\]\)\{[^}]*),&\(unsigned\*\)\{rt_fp8_amax_slot\(e,\d+\)\}\}",
               lambda m: ",%d,%s}" % (int(m.group(1)) - 1, m.group(2)), s)
    s = s.replace("_fp8(", "(").replace(".fp8=1,", "")
    s = re.sub(r'"precision=(fp8|bf16)-mixed",', "", s)
    s = re.sub(r"\.(gpu_scratch_row_bytes|fp8_weight_bytes|fp8_amax_slots)=[0-9]+,", "", s)   # (below)
    return re.sub(r'(spec_hash|model_hash)="[0-9a-f]*"', "", s)
assert norm(d + "/emit8/host.c") == norm(d + "/emit16/host.c")
# scratch a row for the FP8 copies: the largest, dW of fc (or proj): dy in both layouts
# and x^T (T 128 x (2 x 512 + 128) bytes); attention's 2048 under bf16-mixed
scratch = lambda p: int(re.search(r"\.gpu_scratch_row_bytes = ([0-9]+)", open(p).read()).group(1))
assert scratch(d + "/emit8/host.c") == 128 * 1152 and scratch(d + "/emit16/host.c") == 2048
# and beyond the rows, the largest weight a marked GEMM casts: fc's and proj's 512 x 128
assert re.search(r"\.fp8_weight_bytes = 65536,", open(d + "/emit8/host.c").read())
PY
"$TRAINC" check specs/gpt_char.json --set precision=fp8-mixed | grep -q "fp8-mixed    48 of 51 GEMMs in FP8" ||
    { echo "FAIL: trainc check does not count the FP8 GEMMs"; exit 1; }
echo "ok   gpt_char fp8-mixed: 48 of 51 GEMMs marked (the tied head's not), 16 backward pairs, bf16-mixed's plan"

O=(--set max_steps=6 --set log_every=1 --set loader.shuffle=false --threads 1 --set batch_size=2
   --set validate.every_steps=3 --set validate.batches=2 --device cpu --quiet)
for p in bf16-mixed fp8-mixed; do
    "$TRAINC" run specs/gpt_char.json --set precision=$p "${O[@]}" --out "$d/cpu_$p" 2>"$d/cpu_$p.log"
done
[ "$(grep -c 'the CPU stores and computes in fp32 (the spec asks for fp8-mixed)' "$d/cpu_fp8-mixed.log")" = 1 ] ||
    { echo "FAIL: the CPU's note for fp8-mixed, once:"; cat "$d/cpu_fp8-mixed.log"; exit 1; }
"$PY" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def recs(p):
    return [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s", "tokens_per_s", "spec_hash")}
            for l in open("%s/cpu_%s/metrics.jsonl" % (d, p)) if '"event"' not in l]
a, b = recs("bf16-mixed"), recs("fp8-mixed")
assert a == b and len(a) >= 6, (a, b)
PY
echo "ok   gpt_char fp8-mixed on the CPU: fp32, said once, bf16-mixed's records bit for bit"

. tests/fake_gpu/libs.sh   # gpu
G=(--set max_steps=12 --set log_every=1 --set loader.shuffle=false --threads 1
   --set validate.every_steps=6 --set validate.batches=2 --device cuda --quiet)
for p in bf16-mixed fp8-mixed; do
    "$TRAINC" build specs/mlp_fashion.json --set precision=$p --device cuda --arch sm_90 \
        -o "$d/mlp_$p" 2>"$d/mlp_$p.build.log"
    gpu "$d/mlp_$p" "${G[@]}" --out "$d/gpu_$p" 2>"$d/gpu_$p.log" ||
        { echo "FAIL: mlp_fashion $p on the fake GPU:"; cat "$d/gpu_$p.log"; exit 1; }
done
"$PY" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def recs(p):
    return [json.loads(l) for l in open("%s/gpu_%s/metrics.jsonl" % (d, p))]
a, b = recs("bf16-mixed"), recs("fp8-mixed")
assert a[0]["precision"] == "bf16-mixed" and b[0]["precision"] == "fp8-mixed", (a[0], b[0])
la = [(r["step"], r["loss"]) for r in a if "loss" in r and "event" not in r]
lb = [(r["step"], r["loss"]) for r in b if "loss" in r and "event" not in r]
assert [s for s, _ in la] == [s for s, _ in lb] and len(la) == 12, (la, lb)
worst = max(abs(x - y) / abs(x) for (_, x), (_, y) in zip(la, lb))
assert 0 < worst <= 2e-2, "fp8-mixed's losses against bf16-mixed's: largest relative difference %g" % worst
print("ok   mlp_fashion fp8-mixed on the fake GPU: 12 losses within %.2g of bf16-mixed's (not equal: FP8 ran)" % worst)
PY
# FAST_ACCUM: a cuBLASLt that takes FP8 only with it (the fake's TRAINC_FAKE_FP8_FAST_ONLY)
# gets the GEMMs asked again with it, said once; TRAINC_FP8_FAST_ACCUM=1 asks with it
# first. The fake's sums do not change with it: the same records as above, bit for bit
# (where the retry is missing, the GEMMs fall back to bf16 and the records differ).
TRAINC_FAKE_FP8_FAST_ONLY=1 gpu "$d/mlp_fp8-mixed" "${G[@]}" --out "$d/gpu_fast_only" 2>"$d/gpu_fast_only.log" ||
    { echo "FAIL: mlp_fashion fp8-mixed, FP8 only with FAST_ACCUM:"; cat "$d/gpu_fast_only.log"; exit 1; }
grep -q "in FP8 only with fast accumulation (FAST_ACCUM" "$d/gpu_fast_only.log" ||
    { echo "FAIL: no note of the GEMMs asked again with FAST_ACCUM:"; cat "$d/gpu_fast_only.log"; exit 1; }
TRAINC_FP8_FAST_ACCUM=1 TRAINC_FAKE_FP8_FAST_ONLY=1 gpu "$d/mlp_fp8-mixed" "${G[@]}" --out "$d/gpu_fast" 2>"$d/gpu_fast.log" ||
    { echo "FAIL: mlp_fashion fp8-mixed, TRAINC_FP8_FAST_ACCUM=1:"; cat "$d/gpu_fast.log"; exit 1; }
! grep -q "fast accumulation\|runs in bf16" "$d/gpu_fast.log" ||
    { echo "FAIL: TRAINC_FP8_FAST_ACCUM=1 said a note:"; cat "$d/gpu_fast.log"; exit 1; }
"$PY" - "$d" <<'PY' || { echo "FAIL: fp8-mixed with FAST_ACCUM gives other records on the fake GPU"; exit 1; }
import json, sys
d = sys.argv[1]
recs = lambda o: [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s")}
                  for l in open("%s/%s/metrics.jsonl" % (d, o)) if '"event"' not in l]
base = recs("gpu_fp8-mixed")
assert len(base) >= 12 and recs("gpu_fast_only") == base and recs("gpu_fast") == base
PY
echo "ok   fp8-mixed on a cuBLASLt that takes FP8 only with FAST_ACCUM: asked again with it (said), TRAINC_FP8_FAST_ACCUM=1 first; the same records"
# casts a step, from runs of 2 and 3 steps (the fake GPU counts launches): 5 FP8 GEMMs
# (2 forward, dW of the first layer, dx and dW of the second), 10 operands, 9 casts:
# the second layer's dy is cast once, in both layouts, for its two backward GEMMs. No
# maximum pass (up to commit 17d76fd one a cast, 9): the weights' maxima come from the
# optimizer, the input's and the relu gradients' from the fused kernels that write
# them, the first layer's output's from rt_bias_act. TRAINC_FP8_AMAX_PASS=1 takes the
# passes again: the same records bit for bit (a producer's wrong maximum changes a
# scale, so the losses).
for n in 2 3 3p; do
    TRAINC_FP8_AMAX_PASS=$([ $n = 3p ] && echo 1 || echo 0) TRAINC_FAKE_GPU_PROFILE=1 gpu "$d/mlp_fp8-mixed" "${G[@]}" \
        --set max_steps=${n%p} --set validate.every_steps=null --out "$d/prof$n" 2>"$d/prof$n.log" ||
        { echo "FAIL: mlp_fashion fp8-mixed, $n steps:"; cat "$d/prof$n.log"; exit 1; }
done
launches() { awk -v k=$1 '$1 == k {n = $2} END {print n + 0}' "$2"; }
for kc in "rt_fp8_cast 9" "rt_fp8_amax 0"; do
    set -- $kc
    c2=$(launches $1 "$d/prof2.log"); c3=$(launches $1 "$d/prof3.log")
    [ $((c3 - c2)) -eq $2 ] || { echo "FAIL: mlp_fashion fp8-mixed: $1 launched $((c3 - c2)) times a step, want $2"; exit 1; }
done
# in all, none (the validation's forward folds too), and with the passes 3 x 9 and the
# final validation's 8 (2 batches, 2 GEMMs of 2 operands)
[ "$(launches rt_fp8_amax "$d/prof3.log")" -eq 0 ] && [ "$(launches rt_fp8_amax "$d/prof3p.log")" -eq 35 ] ||
    { echo "FAIL: maximum passes in 3 steps and a validation: $(launches rt_fp8_amax "$d/prof3.log"), want 0; with TRAINC_FP8_AMAX_PASS=1 $(launches rt_fp8_amax "$d/prof3p.log"), want 35"; exit 1; }
"$PY" - "$d" <<'PY' || { echo "FAIL: mlp_fashion fp8-mixed: the producers' maxima give other records than the passes'"; exit 1; }
import json, sys
d = sys.argv[1]
def recs(p):
    return [{k: v for k, v in json.loads(l).items() if not k.endswith("_s") and k != "samples_per_s"}
            for l in open("%s/%s/metrics.jsonl" % (d, p)) if '"event"' not in l]
a, b = recs("prof3"), recs("prof3p")
assert a == b and len(a) == 4, (a, b)   # 3 steps and the validation
PY
echo "ok   mlp_fashion fp8-mixed on the fake GPU: 9 casts a step for 5 FP8 GEMMs (the pair's dy cast once), no maximum pass (the producers fold them), the passes' records bit for bit"
# gpt_char (attention, layernorm, GELU, the tied head in bf16): no maximum pass either,
# attention's backward folding the qkv projection's dy into its slot from its two
# kernels (a pass each layer and step before); with the passes the same records bit
# for bit
"$TRAINC" build specs/gpt_char.json --set precision=fp8-mixed --device cuda --arch sm_90 \
    -o "$d/gpt_fp8" 2>"$d/gpt_fp8.build.log"
for n in f p; do
    TRAINC_FP8_AMAX_PASS=$([ $n = p ] && echo 1 || echo 0) TRAINC_FAKE_GPU_PROFILE=1 gpu "$d/gpt_fp8" \
        --set max_steps=2 --set batch_size=2 --set log_every=1 --set data.val=null --threads 1 \
        --quiet --device cuda --out "$d/gpt_$n" 2>"$d/gpt_$n.log" ||
        { echo "FAIL: gpt_char fp8-mixed on the fake GPU:"; cat "$d/gpt_$n.log"; exit 1; }
done
[ "$(launches rt_fp8_amax "$d/gpt_f.log")" -eq 0 ] && [ "$(launches rt_fp8_amax "$d/gpt_p.log")" -gt 0 ] ||
    { echo "FAIL: gpt_char fp8-mixed: $(launches rt_fp8_amax "$d/gpt_f.log") maximum passes in 2 steps, want 0 ($(launches rt_fp8_amax "$d/gpt_p.log") with TRAINC_FP8_AMAX_PASS=1)"; exit 1; }
"$PY" - "$d" <<'PY' || { echo "FAIL: gpt_char fp8-mixed: the producers' maxima give other records than the passes'"; exit 1; }
import json, sys
d = sys.argv[1]
def recs(p):
    return [{k: v for k, v in json.loads(l).items() if not k.endswith("_s") and k != "samples_per_s"}
            for l in open("%s/%s/metrics.jsonl" % (d, p)) if '"event"' not in l]
a, b = recs("gpt_f"), recs("gpt_p")
assert a == b and len(a) == 2, (a, b)
PY
echo "ok   gpt_char fp8-mixed on the fake GPU: no maximum pass (attention's backward folds dqkv's), the passes' records bit for bit"
set +e
TRAINC_FAKE_CC=8.0 gpu "$d/mlp_fp8-mixed" "${G[@]}" --out "$d/cc80" 2>"$d/cc80.log"
rc=$?
set -e
[ $rc = 1 ] && grep -q "precision fp8-mixed: the GPU is .*compute capability 8.0, without FP8 tensor cores" "$d/cc80.log" ||
    { echo "FAIL: fp8-mixed on a GPU of compute capability 8.0: exit $rc, want 1 with the reason:"; cat "$d/cc80.log"; exit 1; }
[ ! -e "$d/cc80" ] || { echo "FAIL: the refused run made its output folder"; exit 1; }
! grep -q "compiled the kernels" "$d/cc80.log" || { echo "FAIL: refused after compiling its kernels"; exit 1; }
TRAINC_FAKE_CC=8.9 gpu "$d/mlp_fp8-mixed" "${G[@]}" --set max_steps=2 --out "$d/cc89" 2>"$d/cc89.log" ||
    { echo "FAIL: fp8-mixed on a GPU of compute capability 8.9:"; cat "$d/cc89.log"; exit 1; }
echo "ok   fp8-mixed refused on compute capability 8.0 (exit 1, said), trained on 8.9"

# a GAN of linear layers: both networks' GEMMs in FP8 but the discriminator's last (one
# logit: not a multiple of 16, bf16, said), its losses within 2% of bf16-mixed's
"$PY" -c "import numpy as np; np.save('$d/x64.npy', np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8))"
cat >"$d/gan.json" <<'JSON'
{"trainc": 1,
 "model": {"name": "mlp_gan",
  "inputs": {"x": {"shape": [64], "dtype": "u8", "scale": 0.00784313725490196, "shift": -1}},
  "gan": {"latent": {"shape": [16]},
   "generator": [{"op": "linear", "out": 32}, {"op": "relu"}, {"op": "linear", "out": 64}, {"op": "tanh"}],
   "discriminator": [{"op": "linear", "out": 32}, {"op": "leaky_relu", "negative_slope": 0.2},
                     {"op": "linear", "out": 1}],
   "loss": "bce"}},
 "train": {"data": {"train": {"x": "x64.npy"}}, "batch_size": 16, "max_steps": 4,
  "optimizer": {"type": "adamw", "lr": 0.001, "betas": [0.5, 0.999]},
  "checkpoint": null, "log_every": 1, "loader": {"shuffle": false, "workers": 0}}}
JSON
for p in bf16-mixed fp8-mixed; do
    "$TRAINC" build "$d/gan.json" --set precision=$p --device cuda --arch sm_90 -o "$d/gan_$p" 2>/dev/null
    gpu "$d/gan_$p" --out "$d/gan_run_$p" --threads 1 --quiet 2>"$d/gan_$p.log" ||
        { echo "FAIL: the GAN in $p on the fake GPU:"; cat "$d/gan_$p.log"; exit 1; }
done
grep -q "fp8-mixed: a 16 x 1 x 32 linear GEMM runs in bf16" "$d/gan_fp8-mixed.log" ||
    { echo "FAIL: the GAN's one-logit GEMM was not said to run in bf16:"; cat "$d/gan_fp8-mixed.log"; exit 1; }
"$PY" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def recs(p):
    return [(r["d_loss"], r["g_loss"]) for r in map(json.loads, open("%s/gan_run_%s/metrics.jsonl" % (d, p)))
            if "event" not in r]
a, b = recs("bf16-mixed"), recs("fp8-mixed")
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
assert 0 < worst <= 2e-2, worst
print("ok   a GAN of linear layers in fp8-mixed on the fake GPU: d_loss and g_loss within %.2g of bf16-mixed's" % worst)
PY
