#!/usr/bin/env bash
# tests/gpu/check_ops.c without a GPU: the kernels of templates/cuda/ compiled for the
# CPU by tests/gpu/emu/ (each CUDA thread a fiber, blocks one after another), launched
# through runtime/cuda_ops.c exactly as on a GPU, against their CPU twins. It checks
# the kernels' logic (indexing, masking, barriers, shuffles, reduction order,
# in-place aliasing, cp.async's waits, and, through UBSan's alignment and bounds checks,
# loads and stores through pointers not aligned for their type, which a GPU faults on
# and x86 forgives, and indices past a shared tile's bounds), not the GPU's arithmetic
# or memory model (nor cuBLASLt's epilogues: CHECK_OPS_EMU leaves those checks to the
# fake GPU and a real one). For fp32 activations, bf16-mixed's bf16 ones and
# fp16-mixed's fp16 ones (--bf16, --fp16: attention at T 128 where the GPU takes T 1024,
# --short: the same tiles, a small part of the emulated time), and fp8-mixed's
# instances (bf16, RT_FP8: the maxima its producers fold, check_ops --fp8). The kernels
# are compiled as for sm_90a, so the 16-bit runs' attention at heads 64 and 128 is
# sm90_attention.cuh's and sm90_attention_bwd.cuh's (the emulator's wgmma, TMA and
# mbarriers: emu_sm90.h), the Llama-family options without qk_norm included; each run
# must launch them (EMU_COUNT). check_ops runs attention.cuh's tensor-core kernels on
# those shapes too (TRAINC_ATT_SM90=0: "attention_fwd80", ...).
#
# Usage: tests/gpu_emu.sh [fp32|bf16|fp16|fp8]... (default all four); EMU_SCHEDULE=greedy
# runs them under the emulator's other schedule (emu_fibers.cc). make test runs fp32
# here (in two shards at once), and all four under both schedules through the device layer on the fake GPU
# (tests/fake_gpu_ops.sh); this script, without the fake driver (its synchronous
# stand-in, tests/gpu/emu/emu_device.c; UBSan on the host side too), is the quicker
# loop while working on a kernel.
set -eu
cd "$(dirname "$0")/.."
variants=${*:-fp32 bf16 fp16 fp8}
for v in $variants; do
    case $v in fp32 | bf16 | fp16 | fp8) ;; *) echo "usage: tests/gpu_emu.sh [fp32|bf16|fp16|fp8]..."; exit 2 ;; esac
done
d=build/tests/gpu_emu
rm -rf "$d"; mkdir -p "$d"
rest=$(ls templates/cuda/*.cuh | grep -v -e '/prelude\.cuh$' -e '/common\.cuh$' | LC_ALL=C sort)
inst=$(grep -o '"RT_[A-Z_]*([0-9, ]*)"' tests/gpu/check_ops.c | tr -d '"' | awk '!seen[$0]++')   # (--fp8's list repeats some)
{ cat templates/cuda/prelude.cuh templates/cuda/common.cuh $rest; echo "$inst"; } |
    sed 's/extern "C"//' > "$d/kernels.inc"
# one K(name) per kernel: the generic ones (a definition's name at the start of a line),
# then the instances' names
{ grep -h -o '^rt_[a-z0-9_]*(' $rest templates/cuda/common.cuh | tr -d '(' | sort -u
  echo "$inst" | tr -d ' ' | sed -E \
    -e 's/^RT_LAYERNORM_FWD\(([0-9]+)\)/rt_layernorm_fwd_\1/' \
    -e 's/^RT_LAYERNORM_BWD\(([0-9]+)\)/rt_layernorm_bwd_\1/' \
    -e 's/^RT_RMSNORM_FWD\(([0-9]+)\)/rt_rmsnorm_fwd_\1/' \
    -e 's/^RT_RMSNORM_BWD\(([0-9]+)\)/rt_rmsnorm_bwd_\1/' \
    -e 's/^RT_CROSS_ENTROPY\(([0-9]+),([0-9]+)\)/rt_cross_entropy_\1_\2/' \
    -e 's/^RT_CROSS_ENTROPY_LS\(([0-9]+),([0-9]+)\)/rt_cross_entropy_ls_\1_\2/' \
    -e 's/^RT_ATTENTION_FWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_fwd_\1_\2_\3 rt_attention_fwd90_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_BWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_bwd_\1_\2_\3 rt_attention_bwd_kv_\1_\2_\3 rt_attention_bwd90_\1_\2_\3 rt_attention_bwd90_kv_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_FWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_fwd_\1_\2_\3 rt_attention_ext_fwd90_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_CAP_FWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_cap_fwd_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_CAP_BWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_cap_bwd_q_\1_\2_\3 rt_attention_ext_cap_bwd_kv_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_PK_FWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_pk_fwd_\1_\2_\3 rt_attention_ext_pk_fwd90_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_PK_BWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_pk_bwd_q_\1_\2_\3 rt_attention_ext_pk_bwd_kv_\1_\2_\3 rt_attention_ext_pk_bwd90_q_\1_\2_\3 rt_attention_ext_pk_bwd90_kv_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_CAP_PK_FWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_cap_pk_fwd_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_CAP_PK_BWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_cap_pk_bwd_q_\1_\2_\3 rt_attention_ext_cap_pk_bwd_kv_\1_\2_\3/' \
    -e 's/^RT_ATTENTION_EXT_BWD\(([0-9]+),([0-9]+),([0-9]+)\)/rt_attention_ext_bwd_q_\1_\2_\3 rt_attention_ext_bwd_kv_\1_\2_\3 rt_attention_ext_bwd90_q_\1_\2_\3 rt_attention_ext_bwd90_kv_\1_\2_\3/' \
    -e 's/^RT_DPO_ROWS\(([0-9]+),([0-9]+)\)/rt_dpo_rows_\1_\2/' \
    -e 's/^RT_EMBEDDING_FWD\(([0-9]+)\)/rt_embedding_fwd_\1/' \
    -e 's/^RT_EMBEDDING_BWD\(([0-9]+)\)/rt_embedding_bwd_\1/' | tr ' ' '\n'
} | sed 's/.*/K(&)/' > "$d/kernels_list.inc"
CFLAGS="-O2 -g -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno -fsanitize=alignment,bounds -fno-sanitize-recover=alignment,bounds"
# the kernels at -O1, as the fake NVRTC compiles them: for fp32, 21 s to compile and 20 to
# run where -O2 -g took 41 and 15 (2026-12-06)
KFLAGS="-O1 ${CFLAGS#-O2 -g }"
# three times: fp32 activations, bf16-mixed's bf16 ones (RT_ACT_BF16, check_ops --bf16)
# and fp16-mixed's fp16 ones (RT_ACT_F16, --fp16)
# the host side, the same for the four: check_ops itself, the device layer's ops and the
# emulator's stand-in for device_cuda.c, the CPU twins
mkdir -p "$d/host"
for f in tests/gpu/check_ops.c runtime/cuda_ops.c tests/gpu/emu/emu_device.c runtime/kernels.c \
         runtime/im2col.c runtime/pooling.c runtime/norms.c runtime/glu.c runtime/losses.c \
         runtime/conv.c runtime/conv_direct.c runtime/conv_grouped.c runtime/augment.c runtime/attention.c \
         runtime/batchnorm.c runtime/blas.c runtime/dist.c runtime/optim.c runtime/muon.c runtime/config.c runtime/util.c \
         runtime/moe.c runtime/cuda_moe.c; do
    cc -std=gnu11 $CFLAGS -DCHECK_OPS_EMU -Iruntime -I"${CUDA_HOME:-/usr/local/cuda}/include" \
        $(mpicc --showme:compile) -c "$f" -o "$d/host/$(basename "$f" .c).o"
done
# the emulator's machine (fibers, scheduler, instructions), the same for the four
g++ -std=c++17 $CFLAGS -fno-strict-aliasing -Wno-psabi -Itests/gpu/emu -c tests/gpu/emu/emu_fibers.cc \
    -o "$d/host/emu_fibers.o"
for v in $variants; do
    def=""; [ $v = bf16 ] && def="-DRT_ACT_BF16=1"; [ $v = fp16 ] && def="-DRT_ACT_F16=1"
    [ $v = fp8 ] && def="-DRT_ACT_BF16=1 -DRT_FP8=1"
    # the kernels of 16-bit activations alone (defined under RT_ACT_BF16 or RT_ACT_F16)
    # are not in the fp32 build's table
    mkdir -p "$d/$v"
    if [ $v = fp32 ]; then grep -v -x -e 'K(rt_conv_igemm_fwd_tc)' -e 'K(rt_conv_igemm_dx_tc)' \
        -e 'K(rt_conv_igemm_dw_tc)' "$d/kernels_list.inc"; else cat "$d/kernels_list.inc"; fi \
        > "$d/$v/kernels_list.inc"
    g++ -std=c++17 $KFLAGS $def -D__CUDA_ARCH_FEAT_SM90_ALL=1 -fno-strict-aliasing -Wno-unused-function -Wno-unknown-pragmas -Wno-psabi -I"$d/$v" -I"$d" -Itests/gpu/emu -c tests/gpu/emu/emu_kernels.cc \
        -o "$d/emu_kernels.$v.o"
    cc -std=gnu11 $CFLAGS "$d"/host/*.o "$d/emu_kernels.$v.o" -lstdc++ -lopenblas -lpthread -lm \
        $(mpicc --showme:link) -o "$d/check_ops.$v"
done
# a 16-bit run whose attention must include sm_90a's kernels (the plain forward; the
# Llama-family forward, rope pass and backward): their launch counts on stderr
# (K90: the kernels; fp8-mixed's run checks forwards only)
K90_ALL="rt_attention_fwd90 rt_attention_ext_fwd90 rt_attention_prep90 rt_attention_ext_bwd90_q rt_attention_ext_bwd90_kv
    rt_attention_ext_pk_fwd90 rt_attention_ext_pk_bwd90_q rt_attention_ext_pk_bwd90_kv"
run90() {
    local k90=${K90:-$K90_ALL}
    EMU_COUNT=$(echo $k90 | tr ' ' ,) "$@" 2>"$d/count.err" || { cat "$d/count.err"; exit 1; }
    cat "$d/count.err"
    for k in $k90; do
        grep -q "^emu: [1-9][0-9]* launches of $k\*" "$d/count.err" ||
            { echo "FAIL: $*: no launch of $k (sm_90a)"; exit 1; }
    done
}
# fp32 in two shards at once (check_ops --shard, as tests/gpu/run.sh runs it on a GPU):
# every place of the list run by exactly one of them
halves() {
    "$1" --shard 0/2 >"$d/shard0.log" 2>&1 & local p0=$!
    "$1" --shard 1/2 >"$d/shard1.log" 2>&1 & local p1=$!
    local st=0
    wait $p0 || st=1
    wait $p1 || st=1
    cat "$d/shard0.log" "$d/shard1.log"
    [ $st = 0 ] || exit 1
    tail -q -n 1 "$d/shard0.log" "$d/shard1.log" | sed -E 's/.*shard ([0-9]+)\/2: ([0-9]+) of ([0-9]+) checks.*/\1 \2 \3/' |
        awk 'NR == 1 {m = $3} {k += $2; same += $3 == m} END {if (NR != 2 || same != 2 || k != m) {print "FAIL: the shards do not split the checks"; exit 1}}'
}
for v in $variants; do
    case $v in
    fp32) halves "$d/check_ops.fp32" ;;
    bf16 | fp16) run90 "$d/check_ops.$v" --$v --short ;;
    fp8) K90="rt_attention_fwd90 rt_attention_ext_fwd90 rt_attention_prep90" run90 "$d/check_ops.fp8" --fp8 ;;
    esac
done
