#!/usr/bin/env bash
# Packs what the GPU checks need into build/devpack.tar.xz, here (no GPU needed): the
# device machine has the NVIDIA driver, the CUDA toolkit and PyTorch, but none of our
# Debian libraries (cJSON, OpenBLAS, Open MPI) and no trainc, so the trainers travel
# as one --bundle (their libraries in lib/), as a user would ship them. cuBLASLt and
# NVRTC are left out of the pack (620 MiB) and taken
# from the device's toolkit: tests/gpu/run.sh points LD_LIBRARY_PATH at them.
#
#   bash tests/gpu/pack.sh        then, with build/devpack.tar.xz copied to the GPU machine,
#                                 tests/gpu/run.sh or tests/gpu/measure.sh there
set -eu
cd "$(dirname "$0")/../.."
TRAINC=${TRAINC:-build/trainc}
ARCH=${ARCH:-sm_90}
P=build/devpack
rm -rf "$P" build/devpack.tar.xz; mkdir -p "$P"
make -s all test-gpu-build
for spec in mlp_fashion cnn_fashion gpt_char; do
    "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --bundle "$P/ship" -o $spec 2>>"$P/build.log"
    for p in bf16 fp16; do
        [ $spec = gpt_char ] && [ $p = fp16 ] && continue
        "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --set precision=$p-mixed \
            --bundle "$P/ship" -o ${spec}_$p 2>>"$P/build.log"
    done
done
for policy in none selective full; do   # bench/gpu_gpt2.sh: the policy is compiled in (bf16-mixed)
    "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" --set recompute=$policy \
        --bundle "$P/ship" -o gpt2_124m_$policy 2>>"$P/build.log"
done
# bench/gpu_gpt2_b16.sh: the logits' rows 50257 apart instead of 50304, for the A/B
TRAINC_PAD_LOGITS=0 "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" \
    --bundle "$P/ship" -o gpt2_124m_nopad 2>>"$P/build.log"
# bench/gpu_gpt2_b16.sh: the cross-entropy's three passes (the kernel before the row
# was kept in registers), for the A/B
TRAINC_CE_REGS=0 "$TRAINC" build specs/gpt2_124m.json --device both --arch "$ARCH" \
    --bundle "$P/ship" -o gpt2_124m_ce3 2>>"$P/build.log"
# the memory goal, auto at twice the batch PyTorch fits (bench/gpu_gpt2.sh runs
# gpt2_124m_autoN when N is that): on an H200, 2 x 188 (PyTorch with checkpointing,
# bench/RESULTS.md, 2026-11-27, fc5d978) in what trainc none used at its largest batch; on an
# H100, 2 x 105 (PyTorch's 77 there, scaled as on the H200: a guess until measured)
for bm in 376:142500 210:80500; do   # batch:budget; the plan's choice beside each trainer
    A=(specs/gpt2_124m.json --set batch_size=${bm%:*} --set memory_budget_mb=${bm#*:} --set recompute=auto)
    "$TRAINC" build "${A[@]}" --device both --arch "$ARCH" --bundle "$P/ship" -o gpt2_124m_auto${bm%:*} 2>>"$P/build.log"
    "$TRAINC" plan "${A[@]}" | grep -A1 "^  recompute  " | tr -s ' \n' ' ' >"$P/ship/gpt2_124m_auto${bm%:*}.plan"
done
# bench/gpu_llama.sh: the Llama benchmark's trainers (bf16-mixed, as the specs say), and
# llama3_1b with recompute auto planned at twice the batches PyTorch might fit (its
# largest is measured there: 2 x 8 .. 2 x 20 in an H200's 142500 MiB)
if [ -f specs/llama_124m.json ] && [ -f specs/llama3_1b.json ]; then
    for spec in llama_124m llama3_1b; do
        "$TRAINC" build specs/$spec.json --device both --arch "$ARCH" --bundle "$P/ship" -o $spec 2>>"$P/build.log"
    done
    for b in 16 20 24 28 32 36 40; do
        "$TRAINC" build specs/llama3_1b.json --set batch_size=$b --set memory_budget_mb=142500 --set recompute=auto \
            --device both --arch "$ARCH" --bundle "$P/ship" -o llama3_1b_auto$b 2>>"$P/build.log"
    done
fi
# bench/gpu_resnet.sh: the ResNet as its spec says (fp32) and in bf16-mixed (cnn_fashion's
# two are above)
"$TRAINC" build specs/resnet_fashion.json --device both --arch "$ARCH" --bundle "$P/ship" -o resnet_fashion 2>>"$P/build.log"
"$TRAINC" build specs/resnet_fashion.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o resnet_fashion_bf16 2>>"$P/build.log"
# bench/gpu_dcgan.sh: the DCGAN in fp32 and bf16-mixed
"$TRAINC" build specs/dcgan_fashion.json --device both --arch "$ARCH" --bundle "$P/ship" -o dcgan_fashion 2>>"$P/build.log"
"$TRAINC" build specs/dcgan_fashion.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o dcgan_fashion_bf16 2>>"$P/build.log"
"$TRAINC" build bench/wide_mlp.json --device both --arch "$ARCH" --bundle "$P/ship" -o wide_mlp 2>>"$P/build.log"
"$TRAINC" build bench/wide_mlp.json --device both --arch "$ARCH" --set precision=bf16-mixed \
    --bundle "$P/ship" -o wide_mlp_bf16 2>>"$P/build.log"
cp build/tests/gpu/check_ops "$P/ship/"
patchelf --set-rpath '$ORIGIN/lib' "$P/ship/check_ops"
rm -f "$P"/ship/lib/libcublasLt* "$P"/ship/lib/libnvrtc* "$P"/ship/lib/libnccl*
mkdir -p "$P/data/fashion" "$P/data/text" "$P/templates"
cp data/fashion/*.npy "$P/data/fashion/"
cp data/text/*.bin "$P/data/text/"
cp -r templates/cuda "$P/templates/"
# llm.c's source, for bench/gpu_gpt2_b16.sh to build there with nvcc (a comparison, not
# part of trainc): from LLMC_DIR, or the library's mirror of karpathy/llm.c when present
LLMC=${LLMC_DIR:-/work/.mirror/karpathy+llm.c/repo}
if [ -d "$LLMC/.git" ] || [ -f "$LLMC/HEAD" ]; then
    mkdir -p "$P/llm.c" && git -C "$LLMC" archive HEAD | tar -x -C "$P/llm.c"
elif [ -f "$LLMC/train_gpt2.cu" ]; then
    cp -r "$LLMC" "$P/llm.c"
fi
# and built here when this machine has nvcc (seconds; the device then only runs it):
# CUDA 13's cudaMemAdvise takes a cudaMemLocation, not a device number (the one line of
# llm.c's source that CUDA 13's nvcc refuses), and without a GPU there is no NVML
# library to link (its GPU-utilisation printout, off); sm_90 cubin + PTX
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ -f "$P/llm.c/train_gpt2.cu" ] && [ -x "$NVCC" ]; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
        "$P/llm.c/llmc/cuda_utils.cuh"
    sed -i 's/^#if __has_include(<nvml.h>)$/#if 0/' "$P/llm.c/llmc/mfu.h"
    ( cd "$P/llm.c" && "$NVCC" --threads=0 -t=0 --use_fast_math -std=c++17 -O3 \
        --generate-code "arch=compute_${ARCH#sm_},code=[compute_${ARCH#sm_},$ARCH]" -DENABLE_BF16 \
        train_gpt2.cu -lcublas -lcublasLt -o train_gpt2cu ) >>"$P/build.log" 2>&1 ||
        echo "pack.sh: llm.c's train_gpt2cu did not build here (see $P/build.log); the device will try"
fi
# the commit the pack was built from, for the benchmarks' records (the device's copy of
# the tree may have no git history); -dirty when the tree had changes
c=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || c=$c-dirty
printf %s "$c" >"$P/commit"
tar -C build -cJf build/devpack.tar.xz devpack
ls -la build/devpack.tar.xz
