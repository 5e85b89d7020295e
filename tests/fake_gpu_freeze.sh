#!/usr/bin/env bash
# Fine-tuning's features on the fake GPU (tests/fake_gpu/: the generated CUDA code in the
# emulator): train.freeze, train.lora (below) and the loss's ignore_index (at the end).
# A tiny Llama with its embedding, its first block and its second block's second
# RMSNorm weight frozen (no backward below the second block), against the CPU:
#   - fp32: every loss and gradient norm within 1e-6 relative of the CPU's (the frozen
#     tensors, laid out last, outside optim.cuh's table; the RMSNorm's backward still
#     writes its frozen weight's gradient beside dx, into the sink nothing reads);
#   - bf16-mixed: the first loss within 1e-3 of the CPU's fp32 one, the last within 2e-2
#     (tests/fake_gpu.sh's 16-bit rule);
#   - both: the frozen tensors come back bit for bit as the CPU's, which are the initial
#     ones (tests/torch_parity.py --freeze checks those against PyTorch);
#   - the GPU keeps gradients and AdamW's state for the trained tensors alone (laid out
#     before the frozen ones), as the CPU does: the start records' grad_bytes are the
#     trained tensors' floats (each padded to 16), optimizer_bytes twice that.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu_freeze
lib=
. tests/fake_gpu/env.sh   # gpu, fbuild

FREEZE=wte.weight,h.0.*,h.1.ln_2.weight
# judge KIND CPU GPU: "close" every loss and grad_norm within 1e-6, "16" the first loss
# within 1e-3 and the last within 2e-2; then the frozen tensors equal the CPU's
judge() { "$PY" tests/fake_gpu/judge.py "$@" --close 1e-6 --frozen "$FREEZE"; }

t=$d/llama
"$PY" tests/llama_tiny.py "$t.json" --T 32
O=(--set max_steps=10 --set log_every=1 --set loader.shuffle=false --set batch_size=4 --set data.val=null
   --threads 1 --quiet)
for p in fp32 bf16-mixed; do
    fbuild "$t.json" --set precision=$p --set "freeze=$FREEZE" -o "$t.$p" 2>"$t.$p.build.log"
    gpu "$t.$p" --device cuda "${O[@]}" --out "$t.$p.gpu" 2>"$t.$p.gpu.log"
done
"$t.fp32" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(judge close "$t.cpu" "$t.fp32.gpu")   # (not inside echo: its failure must stop us)
echo "ok   freeze fp32 --device cuda vs cpu: $r"
r=$(judge 16 "$t.cpu" "$t.bf16-mixed.gpu")
echo "ok   freeze bf16-mixed on the GPU: $r"
"$PY" - "$t.cpu" "$t.fp32.gpu" "$t.bf16-mixed.gpu" "$FREEZE" <<'PY'
import fnmatch, json, sys
sys.path.insert(0, "tests")
import st_check
pats = sys.argv[4].split(",")
w = st_check.load(sys.argv[1] + "/model.safetensors")
trained = sum((a.size + 15) // 16 * 16 for n, a in w.items() if not any(fnmatch.fnmatch(n, p) for p in pats))
for run in sys.argv[1:4]:
    s = next(json.loads(l) for l in open(run + "/metrics.jsonl") if '"start"' in l)
    assert s["grad_bytes"] == 4 * trained and s["optimizer_bytes"] == 8 * trained, (run, s, trained)
    assert s["param_bytes"] > s["grad_bytes"], s
print(f"ok   gradients and AdamW's state of the {trained} trained floats alone, on the CPU and the GPU "
      f"(of {s['param_bytes'] // 4})")
PY

# train.lora on the GPU: adapters on every linear weight but the head's (their dropout,
# linear, scale and add nodes; everything else frozen), fp32, against the CPU as above
# (the dropout masks the same on both)
fbuild "$t.json" --set precision=fp32 --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 \
    -o "$t.lora" 2>"$t.lora.build.log"
gpu "$t.lora" --device cuda "${O[@]}" --out "$t.lora.gpu" 2>"$t.lora.gpu.log"
"$t.lora" --device cpu "${O[@]}" --out "$t.lora.cpu" 2>"$t.lora.cpu.log"
r=$("$PY" tests/fake_gpu/judge.py close "$t.lora.cpu" "$t.lora.gpu" --close 1e-6)
echo "ok   lora fp32 --device cuda vs cpu: $r"
# bf16-mixed: the frozen weights only GEMMs read are held in the 16-bit copy alone (no
# fp32 of theirs on the device: their addresses reserved, not backed, under the fake
# driver's granularity set to 64 KB); the run by the 16-bit bar against the CPU's fp32,
# bit for bit the run whose fp32 region is whole (a 4 MB granularity, which saves
# nothing: the pool's), and its pool smaller by the fp32 bytes not held
fbuild "$t.json" --set precision=bf16-mixed --set lora.rank=4 --set lora.alpha=8 \
    -o "$t.lora16" 2>"$t.lora16.build.log"
TRAINC_FAKE_GPU_GRAN_KB=64 gpu "$t.lora16" --device cuda "${O[@]}" --out "$t.lora16.gpu" 2>"$t.lora16.gpu.log"
TRAINC_FAKE_GPU_GRAN_KB=4096 gpu "$t.lora16" --device cuda "${O[@]}" --out "$t.lora16.whole" \
    2>"$t.lora16.whole.log"
"$t.lora16" --device cpu "${O[@]}" --out "$t.lora16.cpu" 2>"$t.lora16.cpu.log"
r=$("$PY" tests/fake_gpu/judge.py 16 "$t.lora16.cpu" "$t.lora16.gpu")
echo "ok   lora bf16-mixed on the GPU: $r"
cmp "$t.lora16.gpu/model.safetensors" "$t.lora16.whole/model.safetensors"
"$TRAINC" plan "$t.json" --json --set precision=bf16-mixed --set lora.rank=4 --set lora.alpha=8 \
    > "$t.lora16.plan.json"
"$PY" - "$t.lora16.gpu" "$t.lora16.whole" "$t.lora16.plan.json" <<'PY'
import json, sys
a, w = (next(json.loads(l) for l in open(r + "/metrics.jsonl") if '"start"' in l) for r in sys.argv[1:3])
plan = json.load(open(sys.argv[3]))
held, whole = plan["gpu_fp32_param_bytes"], a["param_bytes"]
up = lambda n, g: (n + g - 1) // g * g
saved = w["device_pool_bytes"] - a["device_pool_bytes"]
assert 0 < held < whole and saved == up(whole, 256) - up(held, 65536), (held, whole, saved)
print(f"ok   lora bf16-mixed: fp32 held for {held} of the {whole} parameter bytes (the frozen GEMM "
      f"weights in 16 bits alone): the pool {saved} bytes smaller, the weights bit for bit the "
      f"whole region's")
PY

# the loss's ignore_index (tests/ignore_parity.py's cases: a supervised fine-tune's
# masked prompts) on the GPU against the CPU: the device counts each micro-batch's
# targets (rt_ce_count) and the loss kernels read the scale from its statistics. sft
# (accumulate 2, a window wholly ignored) in fp32: the losses, gradient norms and the
# validation within 1e-6; head_ls (the chunked head: one count for all its chunks,
# label smoothing) in fp32 by the same bar and in bf16-mixed by the 16-bit rule
O2=(--set log_every=1 --threads 1 --quiet)
for c in sft head_ls; do
    "$PY" tests/ignore_parity.py --spec $c "$d/$c"
    fbuild "$d/$c/spec.json" -o "$d/$c/t" 2>"$d/$c/build.log"
    gpu "$d/$c/t" --device cuda "${O2[@]}" --out "$d/$c/gpu" 2>"$d/$c/gpu.log"
    "$d/$c/t" --device cpu "${O2[@]}" --out "$d/$c/cpu" 2>"$d/$c/cpu.log"
    r=$("$PY" tests/fake_gpu/judge.py close "$d/$c/cpu" "$d/$c/gpu" --close 1e-6)
    echo "ok   ignore_index $c fp32 --device cuda vs cpu: $r"
done
c=head_ls
fbuild "$d/$c/spec.json" --set precision=bf16-mixed -o "$d/$c/t16" 2>"$d/$c/build16.log"
gpu "$d/$c/t16" --device cuda "${O2[@]}" --out "$d/$c/gpu16" 2>"$d/$c/gpu16.log"
r=$("$PY" tests/fake_gpu/judge.py 16 "$d/$c/cpu" "$d/$c/gpu16")
echo "ok   ignore_index $c bf16-mixed on the GPU: $r"
