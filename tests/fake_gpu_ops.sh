#!/usr/bin/env bash
# tests/gpu/check_ops (every kernel against its CPU twin, on odd and large shapes) on the
# fake GPU (tests/fake_gpu.sh says what it is): the kernels of templates/cuda/ in the
# emulator, launched through the real device layer (runtime/device_cuda.c, under the
# fake's lazy schedule: a missing wait between streams shows) and the GEMMs' cuBLASLt
# epilogues. It checks the kernels' logic (indexing, masking, barriers, shuffles,
# reduction order, in-place aliasing, cp.async's waits, and, through UBSan's alignment
# and bounds checks, loads and stores through pointers not aligned for their type, which
# a GPU faults on and x86 forgives, and indices past a shared tile's bounds), not the
# GPU's arithmetic or memory model.
#
# Four times: fp32 activations and bf16-mixed's 16-bit ones, every shape (--short:
# attention at T 128 where a GPU takes T 1024, the same tiles); fp16-mixed's, every
# kernel, attention on one shape a path (--lean: fp16's kernels are bf16's with
# another 16-bit type; every shape took 73 s more, 2026-12-06); fp8-mixed's instances
# (bf16, RT_FP8: the maxima its producers fold, --fp8). fp16 as real cuBLASLt
# takes a bias beside a 16-bit output (TRAINC_FAKE_LT_BIAS=as-d): the parameter's 16-bit
# copy, or, where a bias has none, the fallback kernel; bf16 where the fake takes an fp32
# bias. The fake device is compute capability 9.0, so the kernels are compiled for
# sm_90a and the 16-bit runs' attention at heads 64 and 128 is sm90_attention.cuh's and
# sm90_attention_bwd.cuh's (the emulator's wgmma, TMA through cuTensorMapEncodeTiled,
# mbarriers), the Llama-family options without qk_norm included: each run must launch
# them (fp8-mixed's, the forwards); check_ops runs attention.cuh's tensor-core kernels on
# those shapes too (TRAINC_ATT_SM90=0 inside it).
#
# Then fp32, bf16 and fp8 again under the emulator's other schedule (EMU_SCHEDULE=greedy:
# each warp runs from one __syncthreads to the next before the next warp starts, so a
# barrier missing between one warp's shared-memory writes, cp.async copies included,
# and another's reads shows), one attention shape a path (--lean); fp16's kernels are
# bf16's with another 16-bit type (the same barriers).
#
# Usage: tests/fake_gpu_ops.sh [LIBDIR] (LIBDIR: the fake libraries, already built
# there; else they are built). tests/gpu_emu.sh runs check_ops in the emulator without
# the fake driver: quicker to build by hand while working on a kernel.
set -eu
cd "$(dirname "$0")/.."
d=build/tests/fake_gpu_ops
lib=${1:-}
. tests/fake_gpu/env.sh   # gpu
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
cc -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -Werror -ffp-contract=off -fno-math-errno \
    -Iruntime -I"$CUDA_INC" tests/gpu/check_ops.c build/librt.a -lcjson -lopenblas -lz -lm -lpthread -ldl \
    $(mpicc --showme:link) -o "$d/check_ops"

K90="rt_attention_fwd90_ rt_attention_ext_fwd90_ rt_attention_prep90 rt_attention_ext_bwd90_q_ rt_attention_ext_bwd90_kv_
     rt_attention_ext_pk_fwd90_ rt_attention_ext_pk_bwd90_q_ rt_attention_ext_pk_bwd90_kv_"
K90_FWD="rt_attention_fwd90_ rt_attention_ext_fwd90_ rt_attention_prep90"
# run NAME ARGS...: check_ops ARGS on the fake GPU, its launches traced into NAME.log
run() {
    local name=$1; shift
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/check_ops" "$@" >"$d/$name.log" 2>&1 ||
        { echo "FAIL: check_ops $* on the fake GPU:"; grep -v "^ok" "$d/$name.log" | grep -v "^fake" | tail -40; exit 1; }
}
# launched NAME KERNEL_PREFIX...: each kernel was launched in NAME's run; says how often
launched() {
    local name=$1 k n counts=""; shift
    for k in "$@"; do
        n=$(grep -c "launch $k" "$d/$name.log" || true)
        [ "$n" -gt 0 ] || { echo "FAIL: $name: no launch of $k* (sm_90a)"; exit 1; }
        counts="$counts, $k* $n"
    done
    echo "${counts#, }"
}
summary() { grep -v '^fake' "$d/$1.log" | tail -1; }

run fp32
echo "ok   check_ops on the fake GPU: $(summary fp32)"
run bf16 --bf16 --short
echo "ok   check_ops --bf16 on the fake GPU: $(summary bf16); launched: $(launched bf16 $K90)"
TRAINC_FAKE_LT_BIAS=as-d run fp16 --fp16 --short --lean
grep -q "the bias is the parameter's 16-bit copy" "$d/fp16.log" ||
    { echo "FAIL: check_ops --fp16 (bias as-d) never took a bias's 16-bit copy"; exit 1; }
echo "ok   check_ops --lean --fp16 (bias as-d) on the fake GPU: $(summary fp16); launched: $(launched fp16 $K90)"
run fp8 --fp8
echo "ok   check_ops --fp8 on the fake GPU: $(summary fp8); launched: $(launched fp8 $K90_FWD)"

EMU_SCHEDULE=greedy run fp32.greedy --lean
echo "ok   check_ops --lean, EMU_SCHEDULE=greedy: $(summary fp32.greedy)"
EMU_SCHEDULE=greedy run bf16.greedy --lean --bf16 --short
echo "ok   check_ops --lean --bf16, EMU_SCHEDULE=greedy: $(summary bf16.greedy); launched: $(launched bf16.greedy $K90_FWD)"
EMU_SCHEDULE=greedy run fp8.greedy --lean --fp8
echo "ok   check_ops --lean --fp8, EMU_SCHEDULE=greedy: $(summary fp8.greedy)"
