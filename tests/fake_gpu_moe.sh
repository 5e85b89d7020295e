#!/usr/bin/env bash
# The mixture of experts on the fake GPU (tests/fake_gpu/: the generated CUDA code and
# templates/cuda/moe.cuh in the emulator), whole training runs of a tiny Llama whose
# MLPs are `moe` layers (4 experts, top 2, with the load-balancing loss and a gated
# shared expert, Qwen2-MoE's; OLMo 2's qk_norm over all heads too), against the CPU:
#   - fp32: every loss and gradient norm within 1e-5 relative of the CPU's (the routing,
#     the groups' GEMMs and the weighted sums are the CPU's arithmetic; the sums' order
#     differs);
#   - recompute selective and full on the GPU: records and weights bit-identical to none
#     (a replayed routing takes the same rows);
#   - bf16-mixed and fp16-mixed: the first loss within 1e-3 of the CPU's fp32 one, the
#     final within 2e-2 (tests/fake_gpu.sh's 16-bit rule).
# Each kernel's own check against its CPU twin is tests/gpu/check_ops.c's t_moe.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu_moe
lib=
. tests/fake_gpu/env.sh   # gpu, fbuild

judge() { "$PY" tests/fake_gpu/judge.py "$@"; }   # KIND CPU GPU (close, same, 16)

t=$d/llama_moe
"$PY" tests/llama_tiny.py "$t.json" --moe-aux --moe-shared --all-heads-norm --T 32
O=(--set max_steps=10 --set log_every=1 --set loader.shuffle=false --set batch_size=4 --set data.val=null
   --threads 1 --quiet)
for v in none selective full; do
    fbuild "$t.json" --set recompute=$v -o "$t.$v" 2>"$t.$v.build.log"
    gpu "$t.$v" --device cuda "${O[@]}" --out "$t.$v.gpu" 2>"$t.$v.gpu.log"
done
"$t.none" --device cpu "${O[@]}" --out "$t.cpu" 2>"$t.cpu.log"
r=$(judge close "$t.cpu" "$t.none.gpu")   # (not inside echo: its failure must stop us)
echo "ok   llama_moe fp32 --device cuda vs cpu: $r"
for v in selective full; do
    r=$(judge same "$t.none.gpu" "$t.$v.gpu")
    echo "ok   llama_moe recompute $v on the GPU: $r"
done
for p in bf16 fp16; do
    fbuild "$t.json" --set precision=$p-mixed -o "$t.$p" 2>"$t.$p.build.log"
    gpu "$t.$p" --device cuda "${O[@]}" --out "$t.$p.gpu" 2>"$t.$p.gpu.log"
    r=$(judge 16 "$t.cpu" "$t.$p.gpu")
    echo "ok   llama_moe $p-mixed on the GPU: $r"
done
