#!/usr/bin/env bash
# tests/fake_gpu/build.sh LIBDIR: builds the fake GPU's libraries into LIBDIR (for
# LD_LIBRARY_PATH): libcuda.so.1, libnvrtc.so.13, libcublasLt.so.13 and libnccl.so.2
# (fake_gpu.h says what each is). Run from the repository's root.
set -eu
lib=$1
mkdir -p "$lib"
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
F=(-std=gnu11 -O2 -g -Wall -Wextra -Wno-unused-parameter -Werror -fPIC -shared -I"$CUDA_INC")
cc "${F[@]}" tests/fake_gpu/fake_cuda.c -Wl,-soname,libcuda.so.1 -o "$lib/libcuda.so.1" -ldl -lpthread
# the emulator's machine (tests/gpu/emu/emu_fibers.cc), compiled once: the fake NVRTC
# links it into every module, with the flags it compiles the kernels with
g++ -std=c++17 -O2 -fPIC -ffp-contract=off -fno-math-errno -fno-strict-aliasing \
    -fsanitize=alignment,bounds -fno-sanitize-recover=alignment,bounds -w -Itests/gpu/emu \
    -c tests/gpu/emu/emu_fibers.cc -o "$lib/emu_fibers.o"
cc "${F[@]}" -DFAKE_EMU_DIR="\"$PWD/tests/gpu/emu\"" -DFAKE_EMU_OBJ="\"$(cd "$lib" && pwd)/emu_fibers.o\"" \
    tests/fake_gpu/fake_nvrtc.c -Wl,-soname,libnvrtc.so.13 -o "$lib/libnvrtc.so.13"
cc "${F[@]}" -ffp-contract=off -Iruntime tests/fake_gpu/fake_cublaslt.c -Wl,-soname,libcublasLt.so.13 -o "$lib/libcublasLt.so.13" \
    -lopenblas -ldl
cc "${F[@]}" tests/fake_gpu/fake_nccl.c -Wl,-soname,libnccl.so.2 -o "$lib/libnccl.so.2" -ldl
