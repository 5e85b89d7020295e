#!/usr/bin/env bash
# llm.c's GPT-2 trainers for the GPU benchmarks' comparison (bench/llmc.sh runs them;
# tests/gpu/pack.sh carries them from LLMC_BIN), built here with nvcc (no GPU needed):
# train_gpt2cu_cudnn (USE_CUDNN=1: llm.c at its fastest, as ../shared/BENCHMARKING.md
# asks) and train_gpt2cu (without cuDNN, the extra row), and build_flags.txt saying how.
# The trainers are llm.c's, built from a checkout given here; trainc ships none of its
# code.
#
#   LLMC_SRC=DIR FRONTEND_SRC=DIR [CUDNN_HOME=DIR] [ARCH=90] bash bench/llmc_build.sh OUT
#
# LLMC_SRC: a checkout of karpathy/llm.c (f1e2ace is what bench/RESULTS.md measured;
# LLMC_COMMIT and FRONTEND_COMMIT name the commits where the trees have no .git);
# FRONTEND_SRC: NVIDIA's cudnn-frontend (3929da2: v1.9.0 does not compile against CUDA
# 13's headers); CUDNN_HOME: a cuDNN with include/ and lib/ (default: the CUDA
# toolkit's). Build against a cuDNN no newer than the one the device's PyTorch ships
# (its libcudnn.so.9 is what the binaries load there, bench/llmc.sh; 9.10.2.21's
# headers built the binaries measured on 2026-12-04): a newer one's headers may turn on
# frontend paths an older library refuses. PyPI has it:
#   pip download --no-deps nvidia-cudnn-cu12==9.10.2.21 -d /tmp/cudnn && unzip the
#   wheel; CUDNN_HOME=<it>/nvidia/cudnn
# One change to llm.c: CUDA 13's cudaMemAdvise takes a cudaMemLocation where CUDA 12's
# took a device number (its managed-memory fallback, llmc/cuda_utils.cuh).
set -eu
OUT=${1:?usage: LLMC_SRC=DIR FRONTEND_SRC=DIR bash bench/llmc_build.sh OUT}
: "${LLMC_SRC:?LLMC_SRC: a checkout of karpathy/llm.c}"
: "${FRONTEND_SRC:?FRONTEND_SRC: a checkout of NVIDIA/cudnn-frontend}"
CUDA=${CUDA_HOME:-/usr/local/cuda}
CUDNN_HOME=${CUDNN_HOME:-$CUDA}
ARCH=${ARCH:-90}
NVCC=$CUDA/bin/nvcc
for f in "$LLMC_SRC/train_gpt2.cu" "$LLMC_SRC/llmc/cudnn_att.cpp" "$FRONTEND_SRC/include/cudnn_frontend.h" \
         "$CUDNN_HOME/include/cudnn.h" "$NVCC"; do
    [ -e "$f" ] || { echo "llmc_build.sh: $f: not found" >&2; exit 1; }
done
so=$(ls "$CUDNN_HOME"/lib64/libcudnn.so* "$CUDNN_HOME"/lib/libcudnn.so* 2>/dev/null | head -n 1)
[ -n "$so" ] || { echo "llmc_build.sh: no libcudnn.so* in $CUDNN_HOME/lib64 or lib" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$LLMC_SRC"/. "$src"
mkdir "$src/cudnn_lib"   # (a wheel's lib has libcudnn.so.9 alone: -lcudnn needs the name)
ln -s "$so" "$src/cudnn_lib/libcudnn.so"
sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$src/llmc/cuda_utils.cuh"
grep -q cudaMemLocationTypeHost "$src/llmc/cuda_utils.cuh" ||
    { echo "llmc_build.sh: llmc/cuda_utils.cuh: its cudaMemAdvise call not found" >&2; exit 1; }
rev() {   # rev DIR [FALLBACK]: the checkout's commit (a tree without git: FALLBACK, e.g. LLMC_COMMIT)
    git -C "$1" rev-parse --short HEAD 2>/dev/null || echo "${2:-(commit unknown)}"
}
# llm.c's Makefile's flags (NVML left out: the toolkit here has no nvml.h, and llm.c
# then reports no power or clock figures)
flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3
       "--generate-code=arch=compute_$ARCH,code=[compute_$ARCH,sm_$ARCH]")
cd "$src"
"$NVCC" "${flags[@]}" -DENABLE_CUDNN -I"$FRONTEND_SRC/include" -I"$CUDNN_HOME/include" \
    -c llmc/cudnn_att.cpp -o cudnn_att.o
"$NVCC" "${flags[@]}" -DENABLE_CUDNN train_gpt2.cu cudnn_att.o -I"$FRONTEND_SRC/include" \
    -I"$CUDNN_HOME/include" -L"$src/cudnn_lib" -L"$CUDA/lib64/stubs" -lcublas -lcublasLt -lcudnn \
    -lnvrtc -lcuda -o "$OUT/train_gpt2cu_cudnn"
"$NVCC" "${flags[@]}" train_gpt2.cu -lcublas -lcublasLt -o "$OUT/train_gpt2cu"
{
    echo "llm.c $(rev "$LLMC_SRC" "${LLMC_COMMIT:-}"), cudnn-frontend $(rev "$FRONTEND_SRC" "${FRONTEND_COMMIT:-}"), cuDNN headers $(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v = v (v ? "." : "") $3} END {print v}' "$CUDNN_HOME"/include/cudnn_version.h), $("$NVCC" --version | tail -n 2 | head -n 1)"
    echo "change: llmc/cuda_utils.cuh's cudaMemAdvise takes cudaMemLocation{cudaMemLocationTypeHost, 0} (CUDA 13)"
    echo "train_gpt2cu_cudnn: nvcc ${flags[*]} -DENABLE_CUDNN (cudnn_att.cpp, train_gpt2.cu) -lcublas -lcublasLt -lcudnn -lnvrtc -lcuda (cudnn-frontend compiles kernels with NVRTC)"
    echo "train_gpt2cu: nvcc ${flags[*]} train_gpt2.cu -lcublas -lcublasLt"
} >"$OUT/build_flags.txt"
ls -la "$OUT"
