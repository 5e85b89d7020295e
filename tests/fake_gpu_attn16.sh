#!/usr/bin/env bash
# Attention's Llama-family options on the tensor cores, without a GPU: attention.cuh's
# attention_ext_*_tc kernels (16-bit activations, heads a multiple of 16 wide) in the
# fake GPU's emulator (tests/fake_gpu.sh says what it is; emu.h emulates mma.sync,
# ldmatrix and cp.async). Tiny models, T 160 (three 64-row tiles, the last ragged), each
# trained in bf16-mixed and fp16-mixed on the GPU against its fp32 run on the CPU by
# fake_gpu.sh's bar for 16-bit activations (first loss within 1e-3 relative, the mean of
# the last steps' within 2e-2):
#   - g2: 4 heads on 2 key/value heads 32 wide, no biases, qk_norm, rope with llama3
#     scaling, a window of 40 (whole tiles skipped on both sides of the backward);
#   - g4: 3 heads on 1 key/value head 32 wide (head_dim: a core of 96 over d 128),
#     biases on q, k and v alone ("qkv"), rope without scaling;
#   - hd64: 2 heads on 1 key/value head 64 wide, qk_norm, no rope, a window of 100;
# and that the tensor-core grids ran (the key-side backward's 64 keys a block: 3 blocks
# along T where the CUDA-core kernel takes 5 at heads 32 wide, 10 at 64). The fake GPU
# is compute capability 9.0, where heads 64 wide take the sm_90a kernels: these runs set
# TRAINC_ATT_SM90=0 to keep attention.cuh's; then llama_hd64 (below) trains through the
# sm_90a ones, and over packed rows (the model's positions) through the packed instances
# (rt_attention_ext_pk_*): in bf16-mixed the sm_90a ones, then with TRAINC_ATT_SM90=0 the
# sm_80 tensor cores' (the two within 1e-3 of each other), and in fp32 the CUDA cores'
# (within 1e-5 of the CPU's losses; a mask that ignores the positions is 2.8e-3 off),
# and a GPT-2 over the same rows (pos_embedding adding each token's position's row) in
# fp32, and on token shards with loader.documents (positions from each newline).
# Usage: tests/fake_gpu_attn16.sh [LIBDIR] (LIBDIR: fake libraries already built there,
# as tests/fake_gpu.sh passes its own; else they are built).
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu_attn16
lib=${1:-}
. tests/fake_gpu/env.sh   # gpu, fbuild
"$PY" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
llama3 = {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
          "original_max_position_embeddings": 32}
cases = {
    "g2": {"heads": 4, "kv_heads": 2, "bias": False, "qk_norm": True, "window": 40,
           "rope": {"theta": 10000, "scaling": llama3}},
    "g4": {"heads": 3, "kv_heads": 1, "head_dim": 32, "bias": "qkv", "rope": {"theta": 10000}},
    "hd64": {"heads": 2, "kv_heads": 1, "qk_norm": True, "window": 100},
}
for name, att in cases.items():
    s = json.load(open("tests/vocab/tiny_vocab.json"))
    s["model"]["name"] = "attn16_" + name
    s["model"]["inputs"]["x"]["shape"] = s["model"]["inputs"]["y"]["shape"] = [160]
    s["model"]["inputs"]["y"]["classes"] = 256
    s["model"]["layers"] = [
        {"op": "embedding", "name": "wte", "vocab": 256, "dim": 128, "input": "x"},
        {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_1"},
                                    dict({"op": "attention", "name": "attn"}, **att)]},
        {"op": "rmsnorm", "name": "ln_f"},
        {"op": "linear", "name": "lm_head", "tie": "wte", "bias": False}]
    for k in ("train", "val"):
        s["train"]["data"][k]["tokens"] = "../../../data/text/%s_*.bin" % k
    json.dump(s, open("%s/%s.json" % (d, name), "w"), indent=1)
PY
close16() {
    "$PY" - "$1" "$2" "$3" <<'PY'
import json, sys
def recs(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl")]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
sb = [r for r in b if r.get("event") == "start"][-1]
assert sb["device"] == "cuda" and sb["precision"] == sys.argv[3], sb
la = [r["loss"] for r in a if "loss" in r and "event" not in r]
lb = [r["loss"] for r in b if "loss" in r and "event" not in r]
assert len(la) == len(lb) > 1, (len(la), len(lb))
k = max(1, len(la) // 10)
fa, fb = sum(la[-k:]) / k, sum(lb[-k:]) / k
first, last = abs(la[0] - lb[0]) / la[0], abs(fa - fb) / fa
assert first <= 1e-3, "first loss %g (cpu) vs %g (gpu): %.3g relative" % (la[0], lb[0], first)
assert last <= 2e-2, "final loss %g (cpu) vs %g (gpu): %.3g relative" % (fa, fb, last)
print("first loss within %.1e, final (mean of the last %d of %d steps) within %.1e of fp32" %
      (first, k, len(la), last))
PY
}
# within A B TOL: runs A and B logged as many steps (more than one), every loss of B
# within TOL relative of A's
within() {
    "$PY" - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(run):
    rs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    return [r["loss"] for r in rs if "loss" in r and "event" not in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(u - v) / u for u, v in zip(a, b))
assert len(a) == len(b) > 1 and worst <= float(sys.argv[3]), (a, b, worst)
PY
}
O=(--set max_steps=12 --set log_every=1 --set batch_size=2 --set loader.shuffle=false
   --set data.val=null --threads 1 --quiet)
for c in g2 g4 hd64; do
    hd=32; [ $c = hd64 ] && hd=64
    for p in bf16 fp16; do
        t=$d/$c.$p
        fbuild "$d/$c.json" --set precision=$p-mixed -o "$t" 2>"$t.build.log"
        TRAINC_ATT_SM90=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
        [ $p = bf16 ] && "$t" --device cpu "${O[@]}" --out "$d/$c.cpu" 2>"$d/$c.cpu.log"
        grep -q "run rt_attention_ext_bwd_kv_160_${hd}_1 grid 3,[0-9]*,2 " "$t.gpu.log" ||
            { echo "FAIL: $c $p-mixed: no tensor-core key-side backward (grid 3 along T) ran"; exit 1; }
        r=$(close16 "$d/$c.cpu" "$t.gpu" $p-mixed)
        echo "ok   attention $c $p-mixed on the tensor cores against fp32 on the CPU: $r"
    done
done

# the Llama-family options on the sm_90a kernels in training (qk_norm's and rope's pass,
# the GQA forward and backward with a window: sm90_attention*.cuh): llama_tiny with heads
# 64 wide, 2 query heads a key/value head, qk_norm, rope with llama3 scaling, a window of
# 40, in bf16-mixed against the fp32 trainer on the CPU; TRAINC_ATT_SM90=0 launches none
t=$d/llama_hd64
"$PY" - "$t.json" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import llama_tiny
s = llama_tiny.spec(T=100)
s["model"]["name"] = "llama_hd64"
emb, rep = s["model"]["layers"][0], s["model"]["layers"][1]
emb["dim"] = 128
rep["body"][0]["body"][1] = dict(llama_tiny.LLAMA_ATTENTION, op="attention", name="attn", heads=2, kv_heads=1)
rep["body"][1]["body"][3]["out"] = 128
json.dump(s, open(sys.argv[1], "w"), indent=1)
PY
t_hd64_spec=$t.json
O=(--set log_every=1 --set loader.shuffle=false --threads 1 --quiet --set max_steps=3 --set batch_size=2 --set data.val=null)
fbuild "$t.json" --set precision=bf16-mixed -o "$t" 2>"$t.build.log"
TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --out "$t.gpu" 2>"$t.gpu.log"
"$t" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(close16 "$t.cpu" "$t.gpu" bf16-mixed)
for k in rt_attention_prep90 rt_attention_ext_fwd90_ rt_attention_ext_bwd90_q_ rt_attention_ext_bwd90_kv_; do
    grep -q "launch $k" "$t.gpu.log" || { echo "FAIL: llama_hd64 bf16-mixed: no $k launch"; exit 1; }
done
TRAINC_ATT_SM90=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$t" --device cuda "${O[@]}" --set max_steps=1 --out "$t.sm80" 2>"$t.sm80.log"
! grep -q "launch rt_attention_ext_.*90_\|launch rt_attention_prep90" "$t.sm80.log" && grep -q "launch rt_attention_ext_bwd_kv_" "$t.sm80.log" ||
    { echo "FAIL: llama_hd64: TRAINC_ATT_SM90=0 still launched sm_90a kernels"; exit 1; }
echo "ok   llama_hd64 (GQA, qk_norm, rope, a window) bf16-mixed, the sm_90a attention: $r; TRAINC_ATT_SM90=0 takes the sm_80 kernels"

# packed rows (the model's positions: the mask cut at each sequence's start, rope by each
# token's position): llama_hd64 with an input pos over rows cut into sequences of 1 to 30
# tokens, bf16-mixed on the sm_90a kernels' packed instances and (TRAINC_ATT_SM90=0) on
# the sm_80 tensor cores', and fp32 on the CUDA cores, against the fp32 trainer on the CPU
t=$d/packed
"$PY" - "$t.json" "$d" "$t_hd64_spec" <<'PY'
import json, sys
import numpy as np
out, d, base = sys.argv[1:4]
s = json.load(open(base))
s["model"]["name"] = "packed_hd64"
T = s["model"]["inputs"]["x"]["shape"][0]
s["model"]["inputs"]["pos"] = {"shape": [T], "dtype": "i32"}
s["model"]["positions"] = "pos"
s["model"]["loss"]["ignore_index"] = -100
rng = np.random.default_rng(3)
x = rng.integers(0, 256, (16, T)).astype(np.int32)
y = rng.integers(0, 256, (16, T)).astype(np.int32)
pos = np.zeros((16, T), np.int32)
for r in range(16):
    t = 0
    while t < T:
        n = int(rng.integers(1, 31))
        pos[r, t:t + n] = np.arange(min(n, T - t))
        y[r, t - 1] = -100 if t else y[r, t - 1]
        t += n
files = {}
for k, a in (("x", x), ("y", y), ("pos", pos)):
    files[k] = "%s/packed_%s.npy" % (d, k)
    np.save(files[k], a)
s["train"]["data"] = {"train": {k: "../../../" + v for k, v in files.items()}}
json.dump(s, open(out, "w"), indent=1)
PY
for p in fp32 bf16; do
    fbuild "$t.json" --set precision=$p$([ $p = bf16 ] && echo -mixed) -o "$t.$p" 2>"$t.$p.build.log"
    TRAINC_FAKE_GPU_TRACE=1 gpu "$t.$p" --device cuda "${O[@]}" --out "$t.$p.gpu" 2>"$t.$p.gpu.log"
done
for k in rt_attention_prep90 rt_attention_ext_pk_fwd90_ rt_attention_ext_pk_bwd90_q_ rt_attention_ext_pk_bwd90_kv_; do
    grep -q "launch $k" "$t.bf16.gpu.log" || { echo "FAIL: packed bf16-mixed: no $k launch"; exit 1; }
done
! grep -q "launch rt_attention_ext_.*90_\|launch rt_attention_prep90" "$t.fp32.gpu.log" &&
    grep -q "launch rt_attention_ext_pk_bwd_kv_" "$t.fp32.gpu.log" ||
    { echo "FAIL: packed fp32: sm_90a kernels launched, or no packed rows' backward"; exit 1; }
TRAINC_ATT_SM90=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$t.bf16" --device cuda "${O[@]}" --out "$t.sm80" 2>"$t.sm80.log"
! grep -q "launch rt_attention_ext_.*90_\|launch rt_attention_prep90" "$t.sm80.log" &&
    grep -q "launch rt_attention_ext_pk_bwd_kv_" "$t.sm80.log" ||
    { echo "FAIL: packed: TRAINC_ATT_SM90=0 launched sm_90a kernels, or no packed backward"; exit 1; }
within "$t.bf16.gpu" "$t.sm80" 1e-3
"$t.fp32" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(close16 "$t.cpu" "$t.bf16.gpu" bf16-mixed)
within "$t.cpu" "$t.fp32.gpu" 1e-5
echo "ok   packed rows (positions), llama_hd64: fp32 on the GPU within 1e-5 of the CPU's losses; bf16-mixed on the sm_90a kernels: $r; on the sm_80 tensor cores within 1e-3 of those"
# the same rows through attention without a causal mask (an encoder's: each sequence sees
# itself whole, the mask from both sides of each seam; no window): the packed instances
# with CAUSAL 0, fp32 on the CUDA cores within 1e-5 of the CPU's losses, bf16-mixed on the
# sm_90a kernels by the 16-bit bar and on the sm_80 tensor cores within 1e-3 of those
b=$d/packed_bidir
"$PY" - "$t.json" "$b.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"]["name"] = "packed_bidir"
att = s["model"]["layers"][1]["body"][0]["body"][1]
att["causal"] = False
att.pop("window", None)
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
for p in fp32 bf16; do
    fbuild "$b.json" --set precision=$p$([ $p = bf16 ] && echo -mixed) -o "$b.$p" 2>"$b.$p.build.log"
    TRAINC_FAKE_GPU_TRACE=1 gpu "$b.$p" --device cuda "${O[@]}" --out "$b.$p.gpu" 2>"$b.$p.gpu.log"
done
grep -q "launch rt_attention_ext_pk_fwd90_100_64_0" "$b.bf16.gpu.log" &&
    grep -q "launch rt_attention_ext_pk_bwd_kv_100_64_0" "$b.fp32.gpu.log" ||
    { echo "FAIL: packed_bidir: no non-causal packed instances launched"; exit 1; }
TRAINC_ATT_SM90=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$b.bf16" --device cuda "${O[@]}" --out "$b.sm80" 2>"$b.sm80.log"
within "$b.bf16.gpu" "$b.sm80" 1e-3
"$b.fp32" --device cpu "${O[@]}" --out "$b.cpu" 2>"$b.cpu.log"
r=$(close16 "$b.cpu" "$b.bf16.gpu" bf16-mixed)
within "$b.cpu" "$b.fp32.gpu" 1e-5
echo "ok   packed rows without a causal mask (each sequence whole): fp32 on the GPU within 1e-5 of the CPU's losses; bf16-mixed on the sm_90a kernels: $r; on the sm_80 tensor cores within 1e-3 of those"
# --sample from those weights on the GPU, with the key/value cache (which reads no
# positions) and by the window's pass (TRAINC_KV_CACHE=0: positions 0 .. T - 1), prints
# what the CPU prints
S=(--eval --init "$t.cpu/model.safetensors" --sample 12 --sample-seed 3 --threads 1 --quiet)
gpu "$t.fp32" --device cuda "${S[@]}" --out "$t.sgpu" > "$t.sgpu.txt" 2>"$t.sgpu.log"
TRAINC_KV_CACHE=0 TRAINC_FAKE_GPU_TRACE=1 gpu "$t.fp32" --device cuda "${S[@]}" --out "$t.swin" \
    > "$t.swin.txt" 2>"$t.swin.log"
grep -q "launch rt_attention_ext_pk_fwd_" "$t.swin.log" ||
    { echo "FAIL: packed: the window's pass on the GPU launched no packed forward"; exit 1; }
"$t.fp32" --device cpu "${S[@]}" --out "$t.scpu" > "$t.scpu.txt" 2>"$t.scpu.log"
cmp -s "$t.sgpu.txt" "$t.scpu.txt" && cmp -s "$t.swin.txt" "$t.scpu.txt" && [ -s "$t.scpu.txt" ] ||
    { echo "FAIL: packed: --sample on the GPU differs from the CPU's"; exit 1; }
echo "ok   packed rows' model: --sample on the GPU (key/value cache, and the window's pass) prints the CPU's $(wc -c < "$t.scpu.txt") bytes"

# GPT-2's learned position rows over the same packed rows: pos_embedding adds each
# token's position's row (an embedding of the positions, its weight's gradient the
# embedding's backward) and GPT-2's attention takes the packed instances; fp32 on the GPU
# within 1e-5 of the CPU's losses
g=$d/packed_gpt2
"$PY" - "$t.json" "$g.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"]["name"] = "packed_gpt2"
T = s["model"]["inputs"]["x"]["shape"][0]
s["model"]["layers"] = [
    {"op": "embedding", "name": "wte", "vocab": 256, "dim": 64, "input": "x"},
    {"op": "pos_embedding", "name": "wpe", "max_len": T},
    {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"},
                                {"op": "attention", "name": "attn", "heads": 2}]},
    {"op": "layernorm", "name": "ln_f"},
    {"op": "linear", "name": "lm_head", "tie": "wte", "bias": False}]
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
fbuild "$g.json" --set precision=fp32 -o "$g" 2>"$g.build.log"
TRAINC_FAKE_GPU_TRACE=1 gpu "$g" --device cuda "${O[@]}" --out "$g.gpu" 2>"$g.gpu.log"
[ "$(grep -c "launch rt_embedding_bwd_64" "$g.gpu.log")" -ge 6 ] && grep -q "launch rt_attention_ext_pk_bwd_kv_" "$g.gpu.log" ||
    { echo "FAIL: packed gpt2: no positions' embedding backward, or no packed attention"; exit 1; }
"$g" --device cpu "${O[@]}" --out "$g.cpu" 2>"$g.cpu.log"
within "$g.cpu" "$g.gpu" 1e-5
echo "ok   packed rows, GPT-2's position rows (pos_embedding by each token's position) and attention: fp32 on the GPU within 1e-5 of the CPU's losses"
# the same trainer on token shards, a document beginning at each newline (loader.documents:
# the loader fills pos from each window): the GPU within 1e-5 of the CPU's losses
D=(--set data.train=null --set "data.train.tokens=$PWD/data/text/train_*.bin" --set loader.documents=10)
gpu "$g" --device cuda "${O[@]}" "${D[@]}" --out "$g.docs.gpu" 2>"$g.docs.gpu.log"
"$g" --device cpu "${O[@]}" "${D[@]}" --out "$g.docs.cpu" 2>"$g.docs.cpu.log"
within "$g.docs.cpu" "$g.docs.gpu" 1e-5
echo "ok   the same on token shards with loader.documents (positions from each newline): fp32 on the GPU within 1e-5 of the CPU's losses"
# its --sample begins the context anew at each document's first token, the key/value
# cache on the GPU serving every token (again from each restart): the CPU's text, and a prompt's last document
# alone the same. The token is 'f' here (loader.documents=102), which this little-trained
# model draws three times in 60 at temperature 0.2: restarts in the middle of the sample.
S=(--eval --init "$g.docs.cpu/model.safetensors" --sample 60 --sample-seed 3 --temperature 0.2
   --threads 1 "${D[@]}" --set loader.documents=102)
gpu "$g" --device cuda "${S[@]}" --prompt "Copyright of" --out "$g.sd" > "$g.sd.gpu.txt" 2>"$g.sd.gpu.log"
grep -q "(60 from the key/value cache" "$g.sd.gpu.log" ||   # (T 100: no window slides)
    { echo "FAIL: documents: the key/value cache did not serve each token after a restart"; exit 1; }
gpu "$g" --device cuda "${S[@]}" --prompt "f" --out "$g.sd" > "$g.sd.one.txt" 2>"$g.sd.one.log"
"$g" --device cpu "${S[@]}" --prompt "Copyright of" --out "$g.sd" > "$g.sd.cpu.txt" 2>"$g.sd.cpu.log"
cmp -s "$g.sd.gpu.txt" "$g.sd.cpu.txt" && cmp -s "$g.sd.one.txt" "$g.sd.cpu.txt" &&
    [ "$(tr -cd f < "$g.sd.cpu.txt" | wc -c)" -ge 2 ] ||
    { echo "FAIL: documents: --sample on the GPU differs from the CPU's, or from the last document's alone"; exit 1; }
echo "ok   its --sample with documents on the GPU (key/value cache): the CPU's $(wc -c < "$g.sd.cpu.txt") bytes, $(tr -cd f < "$g.sd.cpu.txt" | wc -c) restarts in them, each token from the cache, and the last document's alone"
