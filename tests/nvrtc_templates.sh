#!/usr/bin/env bash
# The runtime's kernel templates (templates/cuda/*.cuh) compile with NVRTC without errors
# or warnings, with the representative instances of tests/gpu/instances.cu, in the order
# trainc writes them into a kernels_cuda.cu: prelude.cuh, common.cuh, the other
# templates by name, then the instance lines; with fp32 activations, with bf16-mixed's
# and fp16-mixed's 16-bit ones (where attention takes the tensor cores), and as
# fp8-mixed's (bf16 and RT_FP8: the producers' instances that fold their outputs'
# maxima); fp8.cuh (fp8-mixed's casts) alone for sm_89 and sm_90 too. For sm_80, sm_90
# and sm_90a (sm90.cuh's primitives, sm90_attention.cuh's forward and
# sm90_attention_bwd.cuh's backward exist only there; fp8-mixed's for sm_89 too). NVRTC's
# full optimization, what a trainer compiles, where registers are at stake: bf16 for
# sm_80 (A100) and sm_90a (H100), the tensor-core attention's; the rest with its fast
# compile (nvrtc_check --fast: the front end and ptxas whole, little optimization; a
# full compile of fp32 took 40 s more for nothing a fast one misses, 2026-12-01).
# ptxas's account of those two bf16 compiles (-Xptxas -v) bounds the tensor-core
# attention kernels' register spills at 16 bytes a kernel, the Hopper forward
# rt_attention_fwd90_* and backward rt_attention_bwd90_* among them on sm_90a (the
# key-side backward at heads 128 wide uses 254-255 of the 255 registers a thread may
# have; spilling its accumulators would cost more than the tensor cores win). Heads 256
# wide (Gemma's; the Llama-family kernels, _2048_256_) are bounded at 512 bytes: their
# backward keeps dY's or V's fragments in shared memory and walks the key side twice,
# yet 128 accumulators and 64 fragment registers a thread leave ptxas short, and
# qk_norm's backward over rows 256 wide (two rows, their gradients and the weight's:
# 320 values a thread) spills once a tile (2026-12-01: 308 and 320 bytes on sm_80, 308
# and 316 on sm_90a). The packed rows' kernels (_pk_: the model's positions) are bounded
# at 64: ptxas gives their query-side backward at heads 64 wide 128 registers where the
# others get 168, and it spills 32 to 52 bytes (2026-12-04; not yet timed on a GPU); their
# sm_90a instances spill nothing (2026-12-05). The Hopper forwards start at exactly 168
# registers, which their setmaxnreg split of the register file needs. Then,
# where the toolkit has nvcc, a generated kernels_cuda.cu (gpt_char's) compiled by
# nvcc -c for sm_80. Needs no GPU.
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
done
"$d/nvrtc_check" --fast "$d/templates_fp32.cu" sm_80 sm_90 sm_90a
"$d/nvrtc_check" --ptxas-log "$d/ptxas" "$d/templates_bf16.cu" sm_80 sm_90a
"$d/nvrtc_check" --fast "$d/templates_bf16.cu" sm_90
"$d/nvrtc_check" --fast "$d/templates_fp16.cu" sm_80 sm_90 sm_90a
# fp8-mixed's casts (fp8.cuh, bf16 operands) for the GPUs with FP8 tensor cores
{ echo "#define RT_ACT_BF16 1"
  cat templates/cuda/prelude.cuh templates/cuda/common.cuh templates/cuda/fp8.cuh; } > "$d/fp8_bf16.cu"
"$d/nvrtc_check" "$d/fp8_bf16.cu" sm_89 sm_90
# and every template as fp8-mixed's kernels_cuda.cu has them, for sm_80 (compiled,
# refused at run time), sm_89 and sm_90a
{ echo "#define RT_ACT_BF16 1"; echo "#define RT_FP8 1"
  cat templates/cuda/prelude.cuh templates/cuda/common.cuh $rest tests/gpu/instances.cu; } > "$d/templates_fp8.cu"
"$d/nvrtc_check" --fast "$d/templates_fp8.cu" sm_80 sm_89 sm_90a
# the attention kernels' spills: one line a kernel, its name, spill stores and registers
for a in sm_80 sm_90a; do
    awk -v q="'" '
        /Compiling entry function/ { split($0, w, q); name = w[2]; spill = "" }
        /bytes spill stores/ && name != "" { for (i = 3; i <= NF; i++) if ($i == "spill" && $(i + 1) == "stores,") spill = $(i - 2) }
        /Used [0-9]+ registers/ && name != "" {
            for (i = 1; i < NF; i++) if ($i == "Used") regs = $(i + 1)
            if (name ~ /^rt_attention/) print name, spill, regs
            name = ""
        }' "$d/ptxas_$a.log" > "$d/regs_$a.txt"
    n=$(wc -l < "$d/regs_$a.txt")
    [ "$n" -ge 30 ] || { echo "FAIL ptxas $a: $n attention kernels read from the log"; exit 1; }
    if awk '$2 == "" || $2 > ($1 ~ /_256_[01]$/ ? 512 : $1 ~ /_pk_/ ? 64 : 16) {bad = 1; print "FAIL ptxas " a ": " $1 " spills " $2 " bytes"} END {exit bad}' a=$a "$d/regs_$a.txt"; then
        echo "ok   ptxas $a: $n attention kernels (bf16), spills at most $(grep -v '_256_[01] ' "$d/regs_$a.txt" | awk '{print $2}' | sort -n | tail -1) bytes (heads 256 wide: $(grep '_256_[01] ' "$d/regs_$a.txt" | awk '{print $2}' | sort -n | paste -sd, -)), registers $(awk '{print $3}' "$d/regs_$a.txt" | sort -n | sed -n '1p;$p' | paste -sd- -)"
    else
        exit 1
    fi
done
# the Hopper forwards hand registers from the producer's warpgroup to the consumers'
# (setmaxnreg: 128 x 40 + 256 x 232 = 384 x 168): a kernel that starts with fewer than
# 168 would leave setmaxnreg.inc waiting for good, a hang no emulator shows (heads 64 and
# 128: other widths' instances are empty, never launched)
bad=$(awk '$1 ~ /fwd90_[0-9]+_(64|128)_/ && $3 != 168 {print $1 " " $3}' "$d/regs_sm_90a.txt")
n=$(grep -E -c 'fwd90_[0-9]+_(64|128)_' "$d/regs_sm_90a.txt" || true)
[ -z "$bad" ] && [ "$n" -ge 3 ] || { echo "FAIL ptxas sm_90a: the Hopper forwards (of $n) not at 168 registers: $bad"; exit 1; }
echo "ok   ptxas sm_90a: $n Hopper forwards at 168 registers, what their setmaxnreg split needs"
if [ -x "$CUDA/bin/nvcc" ]; then
    # a generated kernels_cuda.cu compiles with nvcc too, given templates/cuda/ (as the
    # README says): the prelude takes the C library's integer types there, not its own
    "$CUDA/bin/nvcc" -arch=sm_80 -I templates/cuda -c generated/gpt_char/kernels_cuda.cu \
        -o "$d/gpt_char_kernels.o"
    echo "ok   nvcc -arch=sm_80 -c generated/gpt_char/kernels_cuda.cu"
else
    echo "skip nvcc -c of a generated kernels_cuda.cu: no $CUDA/bin/nvcc"
fi
