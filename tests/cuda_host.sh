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
grep -q "compiled the CUDA kernels for sm_80,sm_86,sm_89,sm_90a" "$d/build.log"
for a in sm_80 sm_86 sm_89 sm_90a; do strings "$d/mlp_cuda" | grep -qx "$a" || { echo "no $a cubin"; exit 1; }; done
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
# the list offered is what trainc takes: sm_80 on, not NVRTC's sm_75
expect 1 "cannot compile for sm_99; it can for sm_80, sm_86" "$TRAINC" build specs/mlp_fashion.json --device cuda --arch sm_99 -o "$d/x"
! grep -q "sm_75" "$d/err" || { echo "FAIL: sm_75 offered"; cat "$d/err"; exit 1; }
[ ! -e "$d/x" ]
# a letter NVRTC does not take for that number (sm_80a; sm_90a it does) is bad input too,
# found before anything is written, with the lettered ones it takes
expect 1 "cannot compile for sm_80a; it can for sm_80, " "$TRAINC" build specs/mlp_fashion.json --device cuda --arch sm_90a,sm_80a -o "$d/x"
grep -q "sm_90a" "$d/err"
[ ! -e "$d/x" ]
expect 1 "an empty architecture in 'sm_80,'" "$TRAINC" build specs/mlp_fashion.json --arch sm_80, -o "$d/x"
echo "ok   --arch checked (form, sm_80 and later, NVRTC's list, lettered ones)"

# --arch without --device builds both (SPEC's synopsis); a repeated architecture is one cubin
"$TRAINC" build specs/mlp_fashion.json --arch sm_80,sm_80 -o "$d/mlp_arch" 2>"$d/arch.log"
grep -q "compiled the CUDA kernels for sm_80 (+ PTX)" "$d/arch.log"
grep -q "built $d/mlp_arch (both)" "$d/arch.log"
elfs=$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read().count(b"\x7fELF"))' "$d/mlp_arch")
[ "$elfs" = 2 ] || { echo "FAIL: $((elfs - 1)) cubins for sm_80,sm_80"; exit 1; }
"$d/mlp_arch" --out "$d/run_arch" "${S[@]}" 2>/dev/null
grep -q '"device":"cpu"' "$d/run_arch/metrics.jsonl"
echo "ok   --arch sm_80,sm_80 without --device: both, one sm_80 cubin, trains on the CPU here"

# attention heads wider than the GPU kernels take (128): build --device cuda refuses
# with the reason, --device cpu builds
sed 's/"dim": 128/"dim": 256/; s/"out": 128}/"out": 256}/; s/"heads": 4/"heads": 1/' \
    specs/gpt_char.json > "$d/wide_heads.json"
expect 1 "attention heads 256 wide" "$TRAINC" build "$d/wide_heads.json" --device cuda -o "$d/w"
[ ! -e "$d/w" ]
"$TRAINC" check "$d/wide_heads.json" >/dev/null
echo "ok   heads wider than 128: build --device cuda refuses, the spec is fine for the CPU"
# soft-capped attention scores (Gemma 2's): kernels of their own (RT_ATTENTION_EXT_CAP_*,
# NVRTC's for sm_80), and the CPU trains them
sed -e 's/"heads": 4/"heads": 4, "softcap": 30/' -e "s|\.\./data|$PWD/data|g" specs/gpt_char.json \
    > "$d/capped.json"
"$TRAINC" build "$d/capped.json" --device both --arch sm_80 -o "$d/c" 2>"$d/capped.log" ||
    { echo "FAIL: build of soft-capped attention"; cat "$d/capped.log"; exit 1; }
"$d/c" --out "$d/run_capped" "${S[@]}" 2>/dev/null
grep -q '"device":"cpu"' "$d/run_capped/metrics.jsonl"
echo "ok   soft-capped attention: built for the GPU (sm_80) and the CPU, trains on the CPU"

# --bundle: the executable and its libraries, found through $ORIGIN/lib; the folder's
# name has a quote, a space and a $(...) (ldd and patchelf run without a shell)
ship="$d/ship it's \$(touch pwned)"
"$TRAINC" build specs/mlp_fashion.json --device both --arch sm_90 --bundle "$ship" 2>"$d/bundle.log" ||
    { echo "FAIL: bundle"; cat "$d/bundle.log"; exit 1; }
[ ! -e pwned ] && [ ! -e "$d/pwned" ] || { echo "FAIL: the bundle's name ran through a shell"; exit 1; }
exe="$ship/mlp_fashion"
readelf -d "$exe" | grep -q 'RPATH.*\$ORIGIN/lib'
for lib in libcjson libopenblas libmpi libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0 libnccl.so.2 \
           libstdc++.so.6 libgcc_s.so.1; do
    ls "$ship/lib/" | grep -q "^$lib" || { echo "FAIL: $lib not bundled"; ls "$ship/lib"; exit 1; }
done
# glibc's own parts (and the driver's libcuda) come from the target system; all else from lib/
glibc='^(linux-vdso|ld-linux|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libanl|libnss_.*|libcuda)\.so'
resolved() {   # resolved FILE: "soname path" for each library ldd finds, "soname not" if not
    env -u LD_LIBRARY_PATH ${LIBS:+LD_LIBRARY_PATH="$LIBS"} ldd "$1" |
        sed -n 's/^[[:space:]]*\([^ ]*\) => \(.*\) (0x[0-9a-f]*)$/\1 \2/p; s/^[[:space:]]*\([^ ]*\) => not found$/\1 not/p'
}
outside() {   # outside FILE: what FILE resolves neither into the bundle nor to glibc
    resolved "$1" | while read -r name path; do
        case "$path" in "$shiplib/"*) continue;; esac
        echo "$name" | grep -qE "$glibc" || echo "$1: $name => $path"
    done
}
# the executable through its RPATH; each library under lib/ with only lib/ on the path
shiplib=$(cd "$ship/lib" && pwd -P)
LIBS= ; o=$(outside "$exe")
[ -z "$o" ] || { echo "FAIL: resolved outside the bundle: $o"; exit 1; }
LIBS="$shiplib"
for f in "$ship"/lib/*; do
    o=$(outside "$f")
    [ -z "$o" ] || { echo "FAIL: resolved outside the bundle: $o"; exit 1; }
done
env -u LD_LIBRARY_PATH "$exe" --out "$d/run_ship" "${S[@]}" 2>/dev/null
grep -q '"event":"end"' "$d/run_ship/metrics.jsonl"
echo "ok   --bundle: $(ls "$ship/lib" | wc -l) libraries in lib/, each resolving in lib/ or glibc, RPATH \$ORIGIN/lib, runs"
rm -rf "$ship"   # cuBLASLt alone is half a gigabyte

# a tool of the bundle's that fails (here an ldd that exits 1) is exit 2 naming it, not
# "built"; one that is missing too
mkdir -p "$d/fakebin"; printf '#!/bin/sh\necho "ldd: broken" >&2\nexit 1\n' > "$d/fakebin/ldd"; chmod +x "$d/fakebin/ldd"
expect 2 "build: --bundle: ldd failed on $d/ship2/mlp_fashion (exit 1" \
    env PATH="$d/fakebin:$PATH" "$TRAINC" build specs/mlp_fashion.json --bundle "$d/ship2"
! grep -q "built" "$d/err" || { echo "FAIL: claimed success"; cat "$d/err"; exit 1; }
for t in cc as ld; do ln -sf "$(command -v $t)" "$d/fakebin/$t"; done; rm "$d/fakebin/ldd"
expect 2 "build: --bundle needs ldd, which cannot be started" \
    env PATH="$d/fakebin" "$TRAINC" build specs/mlp_fashion.json --bundle "$d/ship3"
echo "ok   --bundle: ldd failing or missing: exit 2 naming it"

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
