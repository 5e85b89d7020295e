#!/usr/bin/env bash
# train.freeze on the fake GPU (tests/fake_gpu/: the generated CUDA code in the
# emulator): a tiny Llama with its embedding, its first block and its second block's
# second RMSNorm weight frozen (no backward below the second block), against the CPU:
#   - fp32: every loss and gradient norm within 1e-6 relative of the CPU's (the frozen
#     chunks of optim.cuh's table neither updated nor counted in the norm; the RMSNorm's
#     backward still writes its frozen weight's gradient beside dx);
#   - bf16-mixed: the first loss within 1e-3 of the CPU's fp32 one, the last within 2e-2
#     (tests/fake_gpu.sh's 16-bit rule);
#   - both: the frozen tensors come back bit for bit as the CPU's, which are the initial
#     ones (tests/torch_parity.py --freeze checks those against PyTorch).
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
