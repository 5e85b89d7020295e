#!/usr/bin/env bash
# The CUDA host side without a GPU: trainc build --device cuda|both compiles the
# kernels with NVRTC into embedded cubins + PTX and links; the trainers then behave as
# SPEC.md says where there is no GPU (exit 2 "no CUDA device found" for cuda, the CPU
# for both), --device is checked against what the trainer was built for, and
# --bundle writes a folder whose executable finds its libraries in its own lib/.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
d=build/tests/cuda_host
rm -rf "$d"; mkdir -p "$d"
S=(--set max_steps=3 --set data.val=null --threads 1 --quiet)
expect() {   # expect CODE PATTERN COMMAND...: exit status and a line of stderr
    local code=$1 pat=$2; shift 2
    set +e; "$@" >"$d/out" 2>"$d/err"; local rc=$?; set -e
    if [ $rc -ne "$code" ] || ! grep -q "$pat" "$d/err"; then
        echo "FAIL: $* exited $rc (want $code) with:"; cat "$d/err"; exit 1
    fi
}

# --device cuda: embedded kernels for the default architectures
"$TRAINC" build specs/mlp_fashion.json --device cuda -o "$d/mlp_cuda" 2>"$d/build.log"
grep -q "compiled the CUDA kernels for sm_80,sm_86,sm_89,sm_90" "$d/build.log"
for a in sm_80 sm_86 sm_89 sm_90; do strings "$d/mlp_cuda" | grep -qx "$a" || { echo "no $a cubin"; exit 1; }; done
grep -q "extern \"C\" __global__ void k0(" <(strings "$d/mlp_cuda")   # the source, for NVRTC
grep -q "^.target sm_80" <(strings "$d/mlp_cuda")                      # the PTX
echo "ok   build --device cuda: cubins for 4 architectures, PTX and source embedded"

# no GPU here: a clear exit 2, nothing written
expect 2 "no CUDA device found" "$d/mlp_cuda" --out "$d/run_cuda" "${S[@]}"
grep -q "hint:" "$d/err"
[ ! -e "$d/run_cuda" ] || { echo "FAIL: output folder written"; exit 1; }
expect 1 "built for CUDA only" "$d/mlp_cuda" --device cpu --out "$d/run_cuda" "${S[@]}"
echo "ok   --device cuda trainer without a GPU: exit 2, no CUDA device found, hint"

# --device both: the CPU when there is no GPU; --device cuda then asks for one
"$TRAINC" build specs/cnn_fashion.json --device both --arch sm_90 -o "$d/cnn_both" 2>/dev/null
"$d/cnn_both" --out "$d/run_both" "${S[@]}" 2>"$d/err"
grep -q "no GPU" "$d/err"
grep -q '"device":"cpu"' "$d/run_both/metrics.jsonl"
expect 2 "no CUDA device found" "$d/cnn_both" --device cuda --out "$d/run_both2" "${S[@]}"
echo "ok   --device both without a GPU: trains on the CPU; --device cuda exits 2"

# the toolkit's stub libcuda first on the library path: said so (not "lacks cuInit"),
# the same exit 2 for cuda and the CPU for both
stub=$(ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/stubs/libcuda.so /usr/local/cuda*/lib64/stubs/libcuda.so \
           /usr/local/cuda*/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -n 1)
if [ -n "$stub" ]; then
    mkdir -p "$d/stub" && cp "$stub" "$d/stub/libcuda.so.1"
    expect 2 "/stub/libcuda.so.1, is the CUDA toolkit's stub (CUDA_ERROR_STUB_LIBRARY)" \
        env LD_LIBRARY_PATH="$d/stub" "$d/cnn_both" --device cuda --out "$d/run_stub" "${S[@]}"
    grep -q "put the driver's libcuda.so.1 first on the library path" "$d/err"
    [ ! -e "$d/run_stub" ] || { echo "FAIL: output folder written"; exit 1; }
    expect 0 "no GPU (the libcuda.so.1 found first, .*stub" \
        env LD_LIBRARY_PATH="$d/stub" "$d/cnn_both" --out "$d/run_stub" "${S[@]}"
    echo "ok   the toolkit's stub libcuda.so.1 first: named, exit 2 for cuda, the CPU for both"
else
    echo "skip the stub libcuda test: no lib64/stubs/libcuda.so in the CUDA toolkit"
fi

# a CPU-only trainer refuses --device cuda (exit 1: the input asks for what is not built)
"$TRAINC" build specs/mlp_fashion.json -o "$d/mlp_cpu" 2>/dev/null
expect 1 "built for the CPU only" "$d/mlp_cpu" --device cuda --out "$d/run_cpu" "${S[@]}"
# trainc run compiles for both and behaves as --device both
expect 2 "no CUDA device found" "$TRAINC" run specs/mlp_fashion.json --device cuda --out "$d/run_jit" "${S[@]}"
echo "ok   --device checked against the build; trainc run --device cuda exits 2"

# a bad --arch is bad input
expect 1 "not an architecture" "$TRAINC" build specs/mlp_fashion.json --device cuda --arch sm_9x -o "$d/x"
[ ! -e "$d/x" ]
# older than the kernels' sm_80, or one NVRTC does not know: bad input too, not "a bug"
expect 1 "need sm_80 or newer" "$TRAINC" build specs/mlp_fashion.json --device cuda --arch sm_90,sm_75 -o "$d/x"
[ ! -e "$d/x" ]
expect 1 "cannot compile for sm_99; it can for sm_75, sm_80" "$TRAINC" build specs/mlp_fashion.json --device cuda --arch sm_99 -o "$d/x"
[ ! -e "$d/x" ]
echo "ok   --arch checked (form, sm_80 and later, NVRTC's list)"

# attention heads wider than the GPU kernels take (128): build --device cuda refuses
# with the reason, --device cpu builds
sed 's/"dim": 128/"dim": 256/; s/"out": 128}/"out": 256}/; s/"heads": 4/"heads": 1/' \
    specs/gpt_char.json > "$d/wide_heads.json"
expect 1 "attention heads 256 wide" "$TRAINC" build "$d/wide_heads.json" --device cuda -o "$d/w"
[ ! -e "$d/w" ]
"$TRAINC" check "$d/wide_heads.json" >/dev/null
echo "ok   heads wider than 128: build --device cuda refuses, the spec is fine for the CPU"

# --bundle: the executable and its libraries, found through $ORIGIN/lib
"$TRAINC" build specs/mlp_fashion.json --device both --arch sm_90 --bundle "$d/ship" 2>"$d/bundle.log"
exe="$d/ship/mlp_fashion"
readelf -d "$exe" | grep -q 'RPATH.*\$ORIGIN/lib'
for lib in libcjson libopenblas libmpi libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0 libnccl.so.2; do
    ls "$d/ship/lib/" | grep -q "^$lib" || { echo "FAIL: $lib not bundled"; ls "$d/ship/lib"; exit 1; }
done
# every library the executable needs resolves into the bundle, or is the C library's
env -u LD_LIBRARY_PATH ldd "$exe" | awk '/=>/ && $3 !~ /ship\/lib/ {print $1}' \
    | grep -v -E '^(linux-vdso|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux)' && { echo "FAIL: resolved outside the bundle"; exit 1; }
env -u LD_LIBRARY_PATH "$exe" --out "$d/run_ship" "${S[@]}" 2>/dev/null
grep -q '"event":"end"' "$d/run_ship/metrics.jsonl"
echo "ok   --bundle: $(ls "$d/ship/lib" | wc -l) libraries in lib/, RPATH \$ORIGIN/lib, runs"
rm -rf "$d/ship"   # cuBLASLt alone is half a gigabyte

# the libraries the device layer loads at run time resolve here, with the symbols it
# takes from them (NVRTC, NCCL, cuBLASLt: only resolved, as it is used on a GPU)
cat > "$d/libs.c" <<'C'
#include <stdio.h>
#include "rt_cuda.h"
int main(void)
{
    char why[512];
    int major = 0, minor = 0;
    if (rt_nvrtc_version(&major, &minor) != 0 || rt_nccl_load(why, sizeof why) != 0 ||
        rt_cu_blas_symbols(why, sizeof why) != 0) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    printf("NVRTC %d.%d, NCCL %d, cuBLASLt's functions\n", major, minor, rt_nccl_version());
    return 0;
}
C
cc -std=gnu11 -Iruntime -I"${CUDA_HOME:-/usr/local/cuda}/include" "$d/libs.c" build/librt.a \
    -lcjson -lopenblas -lz -lm -lpthread -ldl $(mpicc --showme:link) -o "$d/libs"
r=$("$d/libs")   # (not inside echo: its failure must stop us)
echo "ok   loadable: $r"
