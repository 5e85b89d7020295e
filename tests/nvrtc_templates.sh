#!/usr/bin/env bash
# The runtime's kernel templates (templates/cuda/*.cuh) compile with NVRTC for sm_80
# and sm_90 without errors or warnings, with the representative instances of
# tests/gpu/instances.cu, in the order trainc writes them into a kernels_cuda.cu:
# prelude.cuh, common.cuh, the other templates by name, then the instance lines;
# with fp32 activations, and with bf16-mixed's and fp16-mixed's 16-bit ones (where
# attention takes the tensor cores; fp16's not for sm_90, which tests/nvrtc.sh covers),
# the 16-bit ones for sm_90a too (sm90.cuh's primitives, sm90_attention.cuh's forward
# and sm90_attention_bwd.cuh's backward exist only there); fp8.cuh (fp8-mixed's casts)
# for sm_89 and sm_90 too, and all of them as fp8-mixed's (bf16 and RT_FP8) for sm_80,
# sm_89 and sm_90a. Then, where the toolkit has
# nvcc, a generated kernels_cuda.cu (gpt_char's) compiled by nvcc -c for sm_80, and
# ptxas's account of the tensor-core attention kernels (bf16, sm_80, sm_90 and sm_90a,
# where the Hopper forward rt_attention_fwd90_* and backward rt_attention_bwd90_* join
# them): at most 16 bytes of register spills a kernel (the
# key-side backward at heads 128 wide uses 254-255 of the 255 registers a thread may
# have; spilling its accumulators would cost more than the tensor cores win; ptxas
# gives the forward at heads 80 wide 128 registers and a 4-byte spill on sm_90).
# Needs no GPU.
set -eu
cd "$(dirname "$0")/.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
d=build/tests/nvrtc_templates
rm -rf "$d"; mkdir -p "$d"
cc -std=gnu11 -O1 -I"$CUDA/include" tests/nvrtc_check.c -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" -lnvrtc -o "$d/nvrtc_check"
rest=$(ls templates/cuda/*.cuh | grep -v -e '/prelude\.cuh$' -e '/common\.cuh$' | LC_ALL=C sort)
for v in fp32 bf16 fp16; do
    { case $v in bf16) echo "#define RT_ACT_BF16 1";; fp16) echo "#define RT_ACT_F16 1";; esac
      cat templates/cuda/prelude.cuh templates/cuda/common.cuh $rest tests/gpu/instances.cu; } > "$d/templates_$v.cu"
    # fp16 for sm_90 is bf16's text with another type, and tests/nvrtc.sh compiles every
    # spec's fp16-mixed kernels (these templates with their instances) for sm_90
    case $v in fp32) archs="sm_80 sm_90";; bf16) archs="sm_80 sm_90 sm_90a";; fp16) archs="sm_80 sm_90a";; esac
    "$d/nvrtc_check" "$d/templates_$v.cu" $archs
done
# fp8-mixed's casts (fp8.cuh, bf16 operands) for the GPUs with FP8 tensor cores too
{ echo "#define RT_ACT_BF16 1"
  cat templates/cuda/prelude.cuh templates/cuda/common.cuh templates/cuda/fp8.cuh; } > "$d/fp8_bf16.cu"
"$d/nvrtc_check" "$d/fp8_bf16.cu" sm_89 sm_90
# and every template as fp8-mixed's kernels_cuda.cu has them (RT_FP8: the producers'
# instances that fold their outputs' maxima), for sm_80 (compiled, refused at run time),
# sm_89 and sm_90a
{ echo "#define RT_ACT_BF16 1"; echo "#define RT_FP8 1"
  cat templates/cuda/prelude.cuh templates/cuda/common.cuh $rest tests/gpu/instances.cu; } > "$d/templates_fp8.cu"
"$d/nvrtc_check" "$d/templates_fp8.cu" sm_80 sm_89 sm_90a
if [ -x "$CUDA/bin/nvcc" ]; then
    # a generated kernels_cuda.cu compiles with nvcc too, given templates/cuda/ (as the
    # README says): the prelude takes the C library's integer types there, not its own
    "$CUDA/bin/nvcc" -arch=sm_80 -I templates/cuda -c generated/gpt_char/kernels_cuda.cu \
        -o "$d/gpt_char_kernels.o"
    echo "ok   nvcc -arch=sm_80 -c generated/gpt_char/kernels_cuda.cu"
    { echo "#define RT_ACT_BF16 1"
      cat templates/cuda/prelude.cuh templates/cuda/common.cuh templates/cuda/attention.cuh \
          templates/cuda/sm90.cuh templates/cuda/sm90_attention.cuh templates/cuda/sm90_attention_bwd.cuh
      grep '^RT_ATTENTION' tests/gpu/instances.cu; } > "$d/attention_bf16.cu"
    for a in sm_80 sm_90 sm_90a; do
        "$CUDA/bin/nvcc" -std=c++17 -arch=$a -cubin -Xptxas -v "$d/attention_bf16.cu" \
            -o "$d/attention_$a.cubin" 2>"$d/ptxas_$a.log"
        # one line a kernel: its name, then ptxas's spill and register lines
        grep -E "Compiling entry|spill|Used" "$d/ptxas_$a.log" | paste - - - |
            sed -E "s/.*entry function '([a-z0-9_]*)'.*stack frame, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\1 \2 \3/" \
            > "$d/regs_$a.txt"
        n=$(wc -l < "$d/regs_$a.txt")
        [ "$n" -ge 6 ] || { echo "FAIL ptxas $a: $n attention kernels read from the log"; exit 1; }
        if awk '$2 > 16 {bad = 1; print "FAIL ptxas " a ": " $1 " spills " $2 " bytes"} END {exit bad}' a=$a "$d/regs_$a.txt"; then
            echo "ok   ptxas $a: $n attention kernels (bf16), spills at most $(awk '{print $2}' "$d/regs_$a.txt" | sort -n | tail -1) bytes, registers $(awk '{print $3}' "$d/regs_$a.txt" | sort -n | sed -n '1p;$p' | paste -sd- -)"
        else
            exit 1
        fi
    done
else
    echo "skip nvcc -c of a generated kernels_cuda.cu and ptxas's spills: no $CUDA/bin/nvcc"
fi
