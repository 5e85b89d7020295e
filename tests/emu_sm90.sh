#!/usr/bin/env bash
# The emulator's twins of the Hopper instructions (tests/gpu/emu/emu_sm90.inc: wgmma,
# mbarrier, TMA, named barriers) against plain products on the host, and the mistakes
# they must make visible (tests/gpu/emu/sm90_check.cc says which). Seconds; no GPU.
set -eu
cd "$(dirname "$0")/.."
d=build/tests/emu_sm90
rm -rf "$d"; mkdir -p "$d"
{ echo "#define RT_ACT_BF16 1"
  cat templates/cuda/prelude.cuh templates/cuda/common.cuh templates/cuda/sm90.cuh \
      tests/gpu/emu/sm90_check_kernels.cuh; } | sed 's/extern "C"//' > "$d/kernels.inc"
printf 'K(sm90_check_mma)\nK(sm90_check_box)\nK(sm90_check_bad)\n' > "$d/kernels_list.inc"
CFLAGS="-O1 -g -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno -fno-strict-aliasing"
g++ -std=c++17 $CFLAGS -D__CUDA_ARCH_FEAT_SM90_ALL=1 -Wno-unused-function -Wno-unknown-pragmas -Wno-psabi \
    -I"$d" -Itests/gpu/emu -c tests/gpu/emu/emu_kernels.cc -o "$d/emu_kernels.o"
g++ -std=c++17 $CFLAGS -Wno-psabi -Itests/gpu/emu -c tests/gpu/emu/emu_fibers.cc -o "$d/emu_fibers.o"
g++ -std=c++17 $CFLAGS -Itests/gpu/emu tests/gpu/emu/sm90_check.cc "$d/emu_kernels.o" "$d/emu_fibers.o" -o "$d/sm90_check"
"$d/sm90_check"
