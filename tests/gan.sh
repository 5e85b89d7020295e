#!/usr/bin/env bash
# The gan model form end to end on a tiny convolutional GAN (drawn latent vectors,
# batchnorm in both networks, conv_transpose2d, accumulate 2): two runs are the same
# bits; a run cut at a checkpoint and resumed ends with the same records and weights
# as the whole run; --sample writes samples.npy [N, 1, 8, 8] and a PNG grid of the
# generator in evaluation mode (and --eval --sample the same from the saved weights,
# nothing else written); loss.svg draws d_loss and g_loss; what a GAN refuses
# exits 1 naming it; --gradcheck passes for both networks; train.freeze keeps its
# tensors and resumes bit for bit; recompute selective, full and auto replay layers of
# both networks and give the bits of none (on 2 ranks too); on the fake GPU (tests/fake_gpu.sh) the same records and samples
# as the CPU in fp32 (within 1e-5), close in bf16-mixed and fp16-mixed (a loss scale a
# network, skipping and halving apart), a resume bit for bit, each turn a CUDA graph
# from the second step on with the bits of none, the same under the fake's stream orders,
# steps without a wait the records and weights of a wait every step, 2 ranks on fake GPUs
# the records of 2 CPU ranks; with
# 2 MPI ranks of batch 4 an MLP GAN reading z from the data is 1 rank of batch 8 (each
# network's gradients reduced on the last micro-batch of accumulate 2).
# (tests/gan_parity.py checks the numbers against PyTorch.)
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/gan
rm -rf "$d"; mkdir -p "$d"
$PY - "$d" <<'PY'
import numpy as np, sys
np.save(sys.argv[1] + "/x.npy", np.random.default_rng(0).integers(0, 256, (48, 1, 8, 8), dtype=np.uint8))
PY
cat >"$d/tiny.json" <<'JSON'
{"trainc": 1,
 "model": {"name": "tiny_gan",
  "inputs": {"x": {"shape": [1, 8, 8], "dtype": "u8", "scale": 0.00784313725490196, "shift": -1}},
  "gan": {"latent": {"shape": [6, 1, 1]},
   "generator": [{"op": "conv_transpose2d", "out": 8, "kernel": 4, "bias": false}, {"op": "batchnorm"},
                 {"op": "relu"}, {"op": "conv_transpose2d", "out": 1, "kernel": 4, "stride": 2, "padding": 1},
                 {"op": "tanh"}],
   "discriminator": [{"op": "conv2d", "out": 8, "kernel": 4, "stride": 2, "padding": 1},
                     {"op": "batchnorm"}, {"op": "leaky_relu", "negative_slope": 0.2},
                     {"op": "flatten"}, {"op": "linear", "out": 1}],
   "loss": "bce"}},
 "train": {"data": {"train": {"x": "x.npy"}}, "batch_size": 4, "accumulate": 2, "max_steps": 6,
  "optimizer": {"type": "adamw", "lr": 0.001, "betas": [0.5, 0.999], "weight_decay": 0},
  "optimizer_d": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
  "schedule": {"type": "cosine", "warmup_steps": 2}, "grad_clip": 1.0,
  "checkpoint": {"every_steps": 3, "keep": 2}, "log_every": 1,
  "loader": {"shuffle": true, "workers": 0}}}
JSON
q=(--threads 1 --quiet)
records() {  # a run's train records, clock fields left out
    $PY - "$1/metrics.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "event" not in r:
        assert "d_loss" in r and "g_loss" in r and "loss" not in r, r
        print({k: v for k, v in r.items() if k not in ("time_s", "samples_per_s")})
PY
}
"$TRAINC" build "$d/tiny.json" -o "$d/t" 2>/dev/null
"$d/t" --out "$d/a" "${q[@]}" --sample 10 2>/dev/null
"$d/t" --out "$d/b" "${q[@]}" 2>/dev/null
cmp "$d/a/model.safetensors" "$d/b/model.safetensors" || { echo "FAIL two runs differ"; exit 1; }
[ "$(records "$d/a" | wc -l)" = 6 ] || { echo "FAIL records"; records "$d/a"; exit 1; }
echo "ok   two runs: the same weights; 6 records with d_loss and g_loss"

# the whole run's folder with its last checkpoint gone: resumed from step 3's
cp -r "$d/a" "$d/cut"
rm -rf "$d/cut/checkpoints/step_00000006" "$d/cut/samples."*
"$d/t" --resume "$d/cut" "${q[@]}" 2>/dev/null
cmp "$d/a/model.safetensors" "$d/cut/model.safetensors" || { echo "FAIL resumed weights differ"; exit 1; }
[ "$(records "$d/a")" = "$(records "$d/cut")" ] || { echo "FAIL resumed records differ"; exit 1; }
echo "ok   cut at step 3 and resumed: the same records and weights as the whole run"

# --sample: the generator's samples; --eval --sample from the weights alone
"$d/t" --eval --init "$d/a/model.safetensors" --out "$d/ev" "${q[@]}" --sample 10 >/dev/null 2>&1
$PY - "$d" <<'PY'
import numpy as np, sys, zlib, struct
d = sys.argv[1]
a = np.load(d + "/a/samples.npy")
assert a.shape == (10, 1, 8, 8) and a.dtype == np.float32, (a.shape, a.dtype)
assert np.all(np.abs(a) <= 1) and a.std() > 0, "tanh outputs expected"
png = open(d + "/a/samples.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n"
w, h = struct.unpack(">II", png[16:24])
assert (w, h) == (8 * 10 + 2, 2 * 10 + 2), (w, h)   # 8 a row, 2 rows of 8 x 8, padding 2
ev = np.load(d + "/ev/samples.npy")
assert np.array_equal(a, ev), "--eval --sample from the final weights differs"
PY
[ ! -e "$d/ev/metrics.jsonl" ] || { echo "FAIL --eval wrote records"; exit 1; }
# the samples are the generator's last layer's output: its bias raised by 0.5 moves each
# sample s to tanh(atanh(s) + 0.5) (a sample read before the bias and tanh would not move)
$PY - "$d" <<'PY'
import sys
sys.path.insert(0, "tests")
import st_check
w = st_check.load(sys.argv[1] + "/a/model.safetensors")
w["generator.3.bias"] = w["generator.3.bias"] + 0.5
st_check.save(sys.argv[1] + "/bias.safetensors", w)
PY
"$d/t" --eval --init "$d/bias.safetensors" --out "$d/ev_bias" "${q[@]}" --sample 10 >/dev/null 2>&1
$PY - "$d" <<'PY'
import numpy as np, sys
d = sys.argv[1]
s0, s1 = np.load(d + "/ev/samples.npy"), np.load(d + "/ev_bias/samples.npy")
want = np.tanh(np.arctanh(s0.astype(np.float64)) + 0.5)
assert np.abs(s1 - want).max() < 1e-5, np.abs(s1 - want).max()
PY
grep -q "g_loss" "$d/a/loss.svg" || { echo "FAIL loss.svg has no g_loss"; exit 1; }
echo "ok   --sample 10: samples.npy [10, 1, 8, 8] and an 82 x 22 PNG grid; --eval --sample the same; the last bias + 0.5 moves them to tanh(atanh(s) + 0.5)"

refuse() {  # name, what the message must say, trainer or spec arguments...
    local name=$1 want=$2; shift 2
    if "$@" >"$d/$name.out" 2>"$d/$name.err"; then echo "FAIL $name: exit 0"; exit 1; fi
    grep -q -- "$want" "$d/$name.err" || { echo "FAIL $name: $(cat "$d/$name.err")"; exit 1; }
}
refuse val "a GAN has no validation" "$TRAINC" check "$d/tiny.json" --set data.val.x="$d/x.npy"
refuse es "early_stopping" "$TRAINC" check "$d/tiny.json" --set early_stopping.patience=2
refuse zero "ddp strategy" "$TRAINC" check "$d/tiny.json" --set distributed.strategy=zero1
refuse muon "optimizers are adamw or sgd" "$TRAINC" check "$d/tiny.json" --set optimizer.type=muon
refuse muon_t "optimizers are adamw or sgd" "$d/t" --out "$d/mu" "${q[@]}" --set optimizer.type=muon
refuse lrfind "a GAN has two" "$d/t" --out "$d/lf" "${q[@]}" --lr-find
refuse num_samples "a GAN's --sample N draws N samples" "$d/t" --out "$d/ns" "${q[@]}" --sample 4 --num-samples 2
refuse export "no Hugging Face architecture" "$TRAINC" export hf "$d/tiny.json" --weights \
    "$d/a/model.safetensors" -o "$d/hf"
sed 's/"gan": {/"layers": [{"op": "flatten"}], "gan": {/' "$d/tiny.json" >"$d/both.json"
refuse both 'a model with "gan" has no "layers"' "$TRAINC" check "$d/both.json"
[ ! -e "$d/hf" ] && [ ! -e "$d/ns" ] && [ ! -e "$d/mu" ] ||
    { echo "FAIL export wrote $d/hf, --num-samples $d/ns or muon $d/mu"; exit 1; }
echo "ok   refused: data.val, early_stopping, zero1, optimizer muon (spec and trainer), --lr-find, --num-samples, layers beside gan, export hf"

# recomputation (compiler/recompute.c): each policy replays layers of both networks in
# their backward phases (G's too, in G's backward after D's update) and ends with run
# a's bits; auto under a budget only a plan with full blocks fits (48.039 MiB: none's
# total is 48.0425, selective's 48.0398, full's 48.0381)
for pol in selective full auto; do
    "$TRAINC" emit "$d/tiny.json" --set recompute=$pol --set memory_budget_mb=48.039 -o "$d/re_$pol" >/dev/null
    "$TRAINC" build "$d/tiny.json" --set recompute=$pol --set memory_budget_mb=48.039 -o "$d/tr_$pol" 2>/dev/null
    "$d/tr_$pol" --out "$d/r_$pol" "${q[@]}" 2>/dev/null
    cmp "$d/a/model.safetensors" "$d/r_$pol/model.safetensors" || { echo "FAIL recompute $pol: other weights"; exit 1; }
    [ "$(records "$d/a")" = "$(records "$d/r_$pol")" ] || { echo "FAIL recompute $pol: other records"; exit 1; }
    $PY - "$d/re_$pol/host.c" "$pol" <<'PY' || { echo "FAIL recompute $pol: the replays"; exit 1; }
import re, sys
src, pol = open(sys.argv[1]).read(), sys.argv[2]
fns = dict(re.findall(r"static void (\w+)\(rt_exec \*e[^)]*\)\n\{(.*?)\n\}", src, re.S))
def replayed(fn):  # the networks whose instructions fn replays
    ats = ["".join(re.findall(r'"([^"]*)"', a)) for a in re.findall(r"RT_AT\(\d+, ((?:\s*\"[^\"]*\")+)\)", fns[fn])]
    return sorted({re.match(r"\$\.model\.gan\.(\w+)", a).group(1) for a in ats if a.endswith("(recomputed)")})
for fn in ("forward", "forward_g"):
    assert "(recomputed)" not in fns[fn], fn
d_bwd, g_bwd = replayed("backward"), replayed("backward_g")
# D's backward replays D's layers; G's replays the generator's batchnorm (before D's
# update or after: G's parameters are the same) and D's third pass
assert d_bwd == ["discriminator"] and g_bwd == ["discriminator", "generator"], (pol, d_bwd, g_bwd)
PY
done
grep -q "recompute *selective (chosen by auto)" <("$TRAINC" plan "$d/tiny.json" --set recompute=auto --set memory_budget_mb=48.039) ||
    { echo "FAIL recompute auto's plan"; exit 1; }
echo "ok   recompute selective, full and auto (blocks in full): layers of both networks replayed in their backward phases; run a's records and weights bit for bit"

# --gradcheck (runtime/mode_gradcheck.c): the discriminator's tensors against d_loss, the
# generator's against g_loss, each by central differences, on one batch and one drawn
# z; bce and hinge
sed 's/"loss": "bce"/"loss": "hinge"/' "$d/tiny.json" >"$d/hinge.json"
for s in tiny hinge; do
    "$TRAINC" run "$d/$s.json" --gradcheck --threads 1 >"$d/gc_$s.log" 2>&1 ||
        { echo "FAIL --gradcheck of the $s GAN:"; cat "$d/gc_$s.log"; exit 1; }
    [ "$(grep -c '^gradcheck .* ok$' "$d/gc_$s.log")" = 11 ] && grep -q "^gradcheck: ok" "$d/gc_$s.log" ||
        { echo "FAIL --gradcheck of the $s GAN:"; cat "$d/gc_$s.log"; exit 1; }
done
echo "ok   --gradcheck: the 11 tensors of both networks, bce and hinge"

# train.freeze (FreezeD's fine-tuning: the discriminator's first layer, its logit
# weight, the generator's first weight), from run a's weights: the frozen tensors as a
# left them, bit for bit, every other one trained; cut at step 3 and resumed, the
# whole run's bits (parity against PyTorch: tests/gan_parity.py's freeze case)
FZ='freeze=discriminator.0.*,discriminator.4.weight,generator.0.weight'
"$TRAINC" build "$d/tiny.json" --set "$FZ" -o "$d/tf" 2>/dev/null
"$d/tf" --out "$d/f" "${q[@]}" --init "$d/a/model.safetensors" --sample 10 2>/dev/null
cp -r "$d/f" "$d/f_cut"
rm -rf "$d/f_cut/checkpoints/step_00000006" "$d/f_cut/samples."*
"$d/tf" --resume "$d/f_cut" "${q[@]}" 2>/dev/null
cmp "$d/f/model.safetensors" "$d/f_cut/model.safetensors" || { echo "FAIL freeze: the resumed weights differ"; exit 1; }
$PY - "$d" <<'PY' || { echo "FAIL freeze"; exit 1; }
import sys, numpy as np
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
a, f = st_check.load(d + "/a/model.safetensors"), st_check.load(d + "/f/model.safetensors")
frozen = ["discriminator.0.weight", "discriminator.0.bias", "discriminator.4.weight", "generator.0.weight"]
assert sorted(a) == sorted(f)
moved = [k for k in frozen if not np.array_equal(a[k], f[k])]
params = [k for k in a if "running" not in k and "num_batches" not in k]
still = [k for k in params if k not in frozen and np.array_equal(a[k], f[k])]
assert not moved and not still, (moved, still)
print("ok   freeze of 4 tensors: as the run they started from left them, bit for bit, the other %d trained; "
      "cut at step 3 and resumed, the same bits" % (len(params) - 4))
PY
# a whole network frozen: the other trains alone, the frozen one's gradient norm 0
for z in generator discriminator; do
    "$TRAINC" run "$d/tiny.json" --set "freeze=$z.*" --out "$d/fz_$z" "${q[@]}" --init "$d/a/model.safetensors" 2>/dev/null
done
$PY - "$d" <<'PY' || { echo "FAIL a whole network frozen"; exit 1; }
import json, sys, numpy as np
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
a = st_check.load(d + "/a/model.safetensors")
for z, other in (("generator", "discriminator"), ("discriminator", "generator")):
    w = st_check.load("%s/fz_%s/model.safetensors" % (d, z))
    recs = [json.loads(l) for l in open("%s/fz_%s/metrics.jsonl" % (d, z)) if '"d_loss"' in l]
    same = lambda k: np.array_equal(a[k], w[k])
    trained = [k for k in a if "running" not in k and "num_batches" not in k]
    assert all(same(k) for k in trained if k.startswith(z)), z
    # (the other's weights: discriminator.0's bias sits before a batchnorm, its gradient 0)
    assert not any(same(k) for k in trained if k.startswith(other) and k.endswith(".weight")), z
    assert len(recs) == 6 and all(r["grad_norm_" + z[0]] == 0 and r["grad_norm_" + other[0]] > 0 for r in recs), z
print("ok   a whole network frozen (each in turn): it stays as it started, its gradient norm 0; the other's weights train")
PY

# 2 ranks x batch 4 = 1 rank x batch 8: an MLP GAN whose z is a data input (so both
# read the same z), no batchnorm (each rank normalizes its own batch), accumulate 2
if command -v mpirun >/dev/null; then
    $PY - "$d" <<'PY'
import numpy as np, sys
np.save(sys.argv[1] + "/z.npy", np.random.default_rng(1).standard_normal((48, 6)).astype(np.float32))
PY
    cat >"$d/mlp.json" <<'JSON'
{"trainc": 1,
 "model": {"name": "mlp_gan",
  "inputs": {"x": {"shape": [64], "dtype": "u8", "scale": 0.00784313725490196, "shift": -1},
             "z": {"shape": [6], "dtype": "f32"}},
  "gan": {"latent": {"shape": [6], "input": "z"},
   "generator": [{"op": "linear", "out": 32}, {"op": "relu"}, {"op": "linear", "out": 64}, {"op": "tanh"}],
   "discriminator": [{"op": "linear", "out": 32}, {"op": "leaky_relu", "negative_slope": 0.2},
                     {"op": "linear", "out": 1}],
   "loss": "hinge"}},
 "train": {"data": {"train": {"x": "x64.npy", "z": "z.npy"}}, "batch_size": 8, "accumulate": 2,
  "max_steps": 3, "optimizer": {"type": "adamw", "lr": 0.001, "betas": [0.5, 0.999]},
  "grad_clip": 0.5, "checkpoint": null, "log_every": 1, "loader": {"shuffle": true, "workers": 0}}}
JSON
    $PY -c "import numpy as np; np.save('$d/x64.npy', np.load('$d/x.npy').reshape(48, 64))"
    # and with train.freeze (the discriminator's first weight, the generator's last bias):
    # each network's trained range reduced
    "$TRAINC" build "$d/mlp.json" -o "$d/tm" 2>/dev/null
    "$TRAINC" build "$d/mlp.json" --set 'freeze=discriminator.0.weight,generator.2.bias' -o "$d/tmf" 2>/dev/null
    for t in tm tmf; do
        "$d/$t" --out "$d/one_$t" "${q[@]}" 2>/dev/null
        mpirun --oversubscribe --allow-run-as-root -np 2 "$d/$t" --out "$d/two_$t" "${q[@]}" \
            --set batch_size=4 >"$d/two.log" 2>&1 || { echo "FAIL 2 ranks ($t)"; cat "$d/two.log"; exit 1; }
    done
    # and recompute full on the 2 ranks (the gradients' hooks among the replays): the bits
    # of none
    "$TRAINC" build "$d/mlp.json" --set recompute=full -o "$d/tmr" 2>/dev/null
    mpirun --oversubscribe --allow-run-as-root -np 2 "$d/tmr" --out "$d/two_tmr" "${q[@]}" \
        --set batch_size=4 >"$d/two.log" 2>&1 || { echo "FAIL 2 ranks (recompute full)"; cat "$d/two.log"; exit 1; }
    cmp "$d/two_tm/model.safetensors" "$d/two_tmr/model.safetensors" ||
        { echo "FAIL 2 ranks: recompute full's weights differ from none's"; exit 1; }
    echo "ok   2 ranks, recompute full: none's weights bit for bit"
    $PY - "$d" <<'PY'
import json, sys, numpy as np
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
def recs(run):
    return np.array([(r["d_loss"], r["g_loss"]) for r in map(json.loads, open("%s/%s/metrics.jsonl" % (d, run)))
                     if "event" not in r])
for t in ("tm", "tmf"):
    a, b = recs("one_" + t), recs("two_" + t)
    assert a.shape == b.shape == (3, 2), (a.shape, b.shape)
    worst = float(np.max(np.abs(a - b) / np.abs(a)))
    wa, wb = st_check.load(d + "/one_%s/model.safetensors" % t), st_check.load(d + "/two_%s/model.safetensors" % t)
    assert sorted(wa) == sorted(wb)
    ww = max(float(np.max(np.abs(wa[k] - wb[k]))) for k in wa)
    assert worst <= 1e-5 and ww <= 1e-5, (t, worst, ww)
    print("ok   2 ranks x batch 4 = 1 rank x batch 8%s: losses within %.2g, weights within %.2g"
          % (", two tensors frozen" if t == "tmf" else "", worst, ww))
PY
else
    echo "skip the 2-rank part: no mpirun"
fi

# the GPU path on the fake GPU: fp32 against the CPU's run a, bf16-mixed close to it,
# a resume from step 3's checkpoint the same bits as the whole GPU run
if [ -e "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ]; then
    . tests/fake_gpu/libs.sh   # gpu, fbuild
    for p in fp32 bf16-mixed fp16-mixed; do
        fbuild "$d/tiny.json" --set precision=$p -o "$d/tg_$p" 2>/dev/null
        gpu "$d/tg_$p" --device cuda --out "$d/g_$p" "${q[@]}" --sample 10 2>/dev/null
    done
    # each turn a CUDA graph from the second step on (6 steps x 2 micro-batches x 2
    # turns, the first step's 4 run as usual): the bits of a run without graphs
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/tg_fp32" --device cuda --out "$d/g_graph" "${q[@]}" 2>"$d/g_graph.log"
    TRAINC_CUDA_GRAPH=0 gpu "$d/tg_fp32" --device cuda --out "$d/g_nograph" "${q[@]}" 2>/dev/null
    [ "$(grep -c "launch graph" "$d/g_graph.log")" = 20 ] ||
        { echo "FAIL $(grep -c "launch graph" "$d/g_graph.log") turns as graphs, want 20"; exit 1; }
    cmp "$d/g_graph/model.safetensors" "$d/g_nograph/model.safetensors" ||
        { echo "FAIL the GPU's weights differ without graphs"; exit 1; }
    echo "ok   fake GPU: 20 of 24 turns as CUDA graphs, the bits of none"
    # recompute full on the GPU (the replays inside both turns' graphs): the bits of none
    for p in fp32 bf16-mixed; do
        fbuild "$d/tiny.json" --set precision=$p --set recompute=full -o "$d/tgr_$p" 2>/dev/null
        gpu "$d/tgr_$p" --device cuda --out "$d/gr_$p" "${q[@]}" 2>/dev/null
        cmp "$d/g_$p/model.safetensors" "$d/gr_$p/model.safetensors" ||
            { echo "FAIL the GPU's weights differ under recompute full ($p)"; exit 1; }
    done
    echo "ok   fake GPU: recompute full in fp32 and bf16-mixed, the bits of none"
    # --profile on the GPU: the four functions' instructions timed by events (no graphs),
    # the same bits as the run with graphs
    # (and TRAINC_GEMM_PLANS=1: a line for each GEMM plan, what cuBLASLt chose, the
    # fake's one algorithm; none without it)
    TRAINC_GEMM_PLANS=1 gpu "$d/tg_fp32" --device cuda --out "$d/g_prof" "${q[@]}" --profile 2>"$d/g_prof.log"
    cmp "$d/g_graph/model.safetensors" "$d/g_prof/model.safetensors" ||
        { echo "FAIL the GPU's weights differ under --profile"; exit 1; }
    plan_re='^trainc: gemm plan [0-9]+ x [0-9]+ x [0-9]+( A\^T)?( B\^T)?( \(K slices\))?, fp32 -> fp32(, [a-z+]+)?: algo 0, tile 0, stages 0, split K 1 \(reduction 0\), waves 1\.00, workspace 0$'
    n_plans=$(grep -c "gemm plan" "$d/g_prof.log" || true)
    [ "$n_plans" -ge 4 ] && [ "$(grep -cE "$plan_re" "$d/g_prof.log")" = "$n_plans" ] &&
        ! grep -q "gemm plan" "$d/g_graph.log" ||
        { echo "FAIL TRAINC_GEMM_PLANS=1's lines:"; grep "gemm plan" "$d/g_prof.log" | head; exit 1; }
    "$TRAINC" emit "$d/tiny.json" -o "$d/tg_emit" >/dev/null
    $PY - "$d/g_prof/profile.json" "$d/tg_emit/plan.json" <<'PY' || { echo "FAIL the GAN's GPU profile"; exit 1; }
import json, sys
prof, plan = (json.load(open(f)) for f in sys.argv[1:])
got = sorted(i["index"] for i in prof["instructions"] if i["index"] is not None)
assert prof["device"] == "cuda" and prof["steps"] == 4 and got == sorted(i["index"] for i in plan["instructions"])
# each instruction twice a step (2 micro-batches), the optimizer's entry twice (two networks)
assert all(i["calls_per_step"] == 2 for i in prof["instructions"]), prof
PY
    echo "ok   fake GPU: --profile times every instruction of the GAN's four functions, the bits of the graphs' run; $n_plans GEMM plans said"
    # the queued step under the fake's other orders of the streams: the same bits
    for sch in sync lazy; do
        TRAINC_FAKE_GPU_SCHEDULE=$sch gpu "$d/tg_fp32" --device cuda --out "$d/g_$sch" "${q[@]}" 2>/dev/null
        cmp "$d/g_fp32/model.safetensors" "$d/g_$sch/model.safetensors" ||
            { echo "FAIL the GPU's weights differ under schedule $sch"; exit 1; }
    done
    # steps without a wait (step.c's): with records every 5 steps the host waits only
    # where a step needs its numbers (a record, an epoch's end, a checkpoint, the end),
    # and gets the records, checkpoints and weights of a wait every step
    # (TRAINC_STEP_WAIT=1); a stop on the clock between waits ends as there (the
    # pending steps taken, the end record's step)
    L=(--set log_every=5 --set max_steps=16 --set checkpoint.every_steps=8 --set loader.workers=2)
    for w in 0 1; do
        TRAINC_FAKE_GPU_TRACE=1 TRAINC_STEP_WAIT=$w gpu "$d/tg_fp32" --device cuda --out "$d/g_lazy$w" "${q[@]}" "${L[@]}" \
            2>"$d/g_lazy$w.log"
    done
    w0=$(grep -c "host waits for stream 1 " "$d/g_lazy0.log" || true)
    w1=$(grep -c "host waits for stream 1 " "$d/g_lazy1.log" || true)
    # (steps 2-4, 7, 9, 11, 13 and 14 need none: not 1, the first, nor a record's, an
    # epoch's end at 6 and 12, the checkpoint's, the last)
    [ "$w0" = $((w1 - 8)) ] || { echo "FAIL steps without a wait: the host waited $w0 times, $w1 with a wait every step"; exit 1; }
    [ "$(records "$d/g_lazy0")" = "$(records "$d/g_lazy1")" ] &&
        cmp -s "$d/g_lazy0/model.safetensors" "$d/g_lazy1/model.safetensors" &&
        cmp -s "$d/g_lazy0/checkpoints/step_00000008/model.safetensors" \
            "$d/g_lazy1/checkpoints/step_00000008/model.safetensors" ||
        { echo "FAIL the GAN's steps without a wait: other records or weights"; exit 1; }
    echo "ok   fake GPU: 16 steps waiting only where a step needs it ($w0 host waits, $w1 with one every step), the same records, checkpoints and weights"
    # 2 ranks, each on a fake GPU of its own (a wait every step there, the norms read
    # from the step's copies): the records of 2 ranks on the CPU, norms too
    if command -v mpirun >/dev/null; then
        for dev in cpu cuda; do
            TRAINC_FAKE_GPU_COUNT=2 gpu mpirun --oversubscribe --allow-run-as-root -np 2 -x LD_LIBRARY_PATH \
                -x TRAINC_FAKE_GPU_COUNT -x TRAINC_CACHE_DIR "$d/tg_fp32" --device $dev --out "$d/g2r_$dev" \
                "${q[@]}" --set batch_size=2 >"$d/g2r.log" 2>&1 || { echo "FAIL 2 ranks on the $dev"; cat "$d/g2r.log"; exit 1; }
        done
        $PY - "$d" <<'PY' || { echo "FAIL 2 ranks on fake GPUs against the CPU's"; exit 1; }
import json, sys, numpy as np
d = sys.argv[1]
recs = lambda run: np.array([(r["d_loss"], r["g_loss"], r["grad_norm_d"], r["grad_norm_g"])
                             for r in map(json.loads, open("%s/%s/metrics.jsonl" % (d, run))) if "d_loss" in r])
a, g = recs("g2r_cpu"), recs("g2r_cuda")
assert a.shape == g.shape == (6, 4), (a.shape, g.shape)
w = float(np.max(np.abs(g - a) / np.abs(a)))
assert w <= 1e-5, w
print("ok   fake GPU, 2 ranks: d_loss, g_loss and both gradient norms within %.2g of 2 CPU ranks'" % w)
PY
    fi
    # fp16-mixed from a loss scale so large that every update overflows: each network
    # skips its update and halves its own scale, every step
    gpu "$d/tg_fp16-mixed" --device cuda --out "$d/g_skip" "${q[@]}" --set loss_scale.init=1e30 2>/dev/null
    cp -r "$d/g_fp32" "$d/g_cut"
    rm -rf "$d/g_cut/checkpoints/step_00000006" "$d/g_cut/samples."*
    gpu "$d/tg_fp32" --device cuda --resume "$d/g_cut" "${q[@]}" 2>/dev/null
    cmp "$d/g_fp32/model.safetensors" "$d/g_cut/model.safetensors" ||
        { echo "FAIL the GPU's resumed weights differ"; exit 1; }
    $PY - "$d" <<'PY'
import json, sys, numpy as np
d = sys.argv[1]
def recs(run):
    rs = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (d, run))]
    assert [r for r in rs if r.get("event") == "start"][-1]["device"] == ("cpu" if run == "a" else "cuda")
    return [(r["d_loss"], r["g_loss"], r["grad_norm_d"], r["grad_norm_g"]) for r in rs if "event" not in r]
a = np.array(recs("a"))
for run, tol in (("g_fp32", 1e-5), ("g_bf16-mixed", 2e-2), ("g_fp16-mixed", 2e-2), ("g_cut", 1e-5)):
    g = np.array(recs(run))
    assert g.shape == a.shape, (run, g.shape)
    # (each network's gradient norm too, in fp32)
    cols = 4 if tol < 1e-3 else 2
    worst = float(np.max(np.abs(g - a)[:, :cols] / np.abs(a)[:, :cols]))
    assert worst <= tol, "%s: d_loss/g_loss %.2g from the CPU's (tolerance %g)" % (run, worst, tol)
    if run != "g_cut":
        s = np.abs(np.load("%s/%s/samples.npy" % (d, run)) - np.load(d + "/a/samples.npy")).max()
        assert s <= 10 * tol, "%s: samples %.2g from the CPU's" % (run, s)
    print("ok   fake GPU %s: d_loss and g_loss%s within %.2g of the CPU's%s" % (run,
          " and both gradient norms" if cols == 4 else "", worst,
          "" if run == "g_cut" else ", samples too"))
skip = [json.loads(l) for l in open(d + "/g_skip/metrics.jsonl") if '"d_loss"' in l]
for r in skip:
    k = r["step"]
    assert r["skipped_steps_d"] == r["skipped_steps_g"] == k, r
    assert r["loss_scale_d"] == r["loss_scale_g"] == 1e30 / 2 ** k, r
fp16 = [json.loads(l) for l in open(d + "/g_fp16-mixed/metrics.jsonl") if '"d_loss"' in l]
assert all(r["skipped_steps_d"] == r["skipped_steps_g"] == 0 and r["loss_scale_d"] == 65536 for r in fp16)
print("ok   fake GPU fp16-mixed: no step skipped at 65536; from 1e30 each network skips and halves its scale")
PY
    echo "ok   fake GPU: resumed from step 3, the whole run's weights"
    # train.freeze on the GPU: fp32 the CPU's run within 1e-5, bf16-mixed (the frozen
    # logit weight in 16 bits alone) within 2e-2
    for p in fp32 bf16-mixed; do
        fbuild "$d/tiny.json" --set "$FZ" --set precision=$p -o "$d/tgf_$p" 2>/dev/null
        gpu "$d/tgf_$p" --device cuda --out "$d/gf_$p" "${q[@]}" --init "$d/a/model.safetensors" 2>/dev/null
    done
    $PY - "$d" <<'PY' || { echo "FAIL freeze on the fake GPU"; exit 1; }
import json, sys, numpy as np
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
recs = lambda run: np.array([(r["d_loss"], r["g_loss"]) for r in map(json.loads, open("%s/%s/metrics.jsonl" % (d, run)))
                             if "event" not in r])
c = recs("f")
a, f = st_check.load(d + "/a/model.safetensors"), st_check.load(d + "/gf_fp32/model.safetensors")
for run, tol in (("gf_fp32", 1e-5), ("gf_bf16-mixed", 2e-2)):
    w = float(np.max(np.abs(recs(run) - c) / np.abs(c)))
    assert recs(run).shape == c.shape and w <= tol, (run, w)
for k in ("discriminator.0.weight", "discriminator.4.weight", "generator.0.weight"):
    assert np.array_equal(a[k], f[k]), k
print("ok   fake GPU freeze: fp32 and bf16-mixed track the CPU's freeze run, the frozen tensors unmoved")
PY
else
    echo "skip the fake GPU part: no CUDA headers"
fi
echo "gan: all ok"
