#!/usr/bin/env bash
# The runtime's kernel templates (templates/cuda/*.cuh) compile with NVRTC for sm_80
# and sm_90 without errors or warnings, with the representative instances of
# tests/gpu/instances.cu, in the order trainc writes them into a kernels_cuda.cu:
# prelude.cuh, common.cuh, the other templates by name, then the instance lines.
# Needs no GPU.
set -eu
cd "$(dirname "$0")/.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
d=build/tests/nvrtc_templates
rm -rf "$d"; mkdir -p "$d"
cc -std=gnu11 -O1 -I"$CUDA/include" tests/nvrtc_check.c -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" -lnvrtc -o "$d/nvrtc_check"
rest=$(ls templates/cuda/*.cuh | grep -v -e '/prelude\.cuh$' -e '/common\.cuh$' | LC_ALL=C sort)
cat templates/cuda/prelude.cuh templates/cuda/common.cuh $rest tests/gpu/instances.cu > "$d/templates.cu"
"$d/nvrtc_check" "$d/templates.cu" sm_80 sm_90
