#!/usr/bin/env bash
# FP8 on the fake GPU (tests/fake_gpu/), where fp8-mixed's runtime path is tested
# without a GPU:
#   - the emulator's cuda_fp8.h (tests/gpu/emu/), which the emulated kernels and the
#     fake cuBLASLt take FP8 from: known codes, narrowing against a nearest-value
#     oracle, the structs (tests/fake_gpu/fp8_emu_check.cc); and bit for bit against the
#     CUDA toolkit's own cuda_fp8.h where that compiles for the host (fp8_toolkit.cc);
#   - a kernel that includes <cuda_fp8.h> (tests/fake_gpu/fp8_kernel.cu): real NVRTC
#     compiles it for sm_89 and sm_90 given the toolkit's include folder (where the
#     toolkit is installed), the fake NVRTC for the emulator, and its run through the
#     fake driver gives the host's codes;
#   - the fake cuBLASLt's FP8 GEMMs against a double reference, and what it refuses
#     (tests/fake_gpu/fp8_lt_check.c says which);
#   - TRAINC_FAKE_CC: the compute capability the fake device reports (9.0 unless set;
#     8.0, 8.9, 12.1), a malformed value refused by cuInit; and the fake NVRTC's modules
#     load only where a real cubin of their architecture would run.
set -eu
cd "$(dirname "$0")/.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
d=build/tests/fake_fp8
rm -rf "$d"; mkdir -p "$d"
. tests/fake_gpu/libs.sh   # gpu
W="-O2 -g -Wall -Wextra -Werror -ffp-contract=off"

tk=()
if g++ -std=c++17 -O2 -I"$CUDA/include" -c tests/fake_gpu/fp8_toolkit.cc -o "$d/fp8_toolkit.o" \
       2>"$d/fp8_toolkit.log"; then
    tk=(-DFP8_TOOLKIT "$d/fp8_toolkit.o")
else
    echo "skip the CUDA toolkit's cuda_fp8.h does not compile here ($d/fp8_toolkit.log)"
fi
g++ -std=c++17 $W -Itests/gpu/emu tests/fake_gpu/fp8_emu_check.cc "${tk[@]}" -o "$d/fp8_emu_check"
"$d/fp8_emu_check"

if [ -f "$CUDA/include/cuda_fp8.h" ] && ls "$CUDA"/lib64/libnvrtc.so* >/dev/null 2>&1; then
    cc -std=gnu11 -O1 -I"$CUDA/include" tests/nvrtc_check.c -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" \
        -lnvrtc -o "$d/nvrtc_check"
    "$d/nvrtc_check" -I "$CUDA/include" tests/fake_gpu/fp8_kernel.cu sm_89 sm_90
else
    echo "skip real NVRTC on fp8_kernel.cu (no CUDA toolkit at $CUDA)"
fi

cc -std=gnu11 $W -I"$CUDA/include" -Iruntime tests/fake_gpu/fp8_lt_check.c -L"$lib" \
    -l:libcublasLt.so.13 -l:libnvrtc.so.13 -ldl -lm -o "$d/fp8_lt_check"
cc=$(gpu "$d/fp8_lt_check" --cc)
[ "$cc" = 9.0 ] || { echo "FAIL the fake device reports $cc, not 9.0, by default"; exit 1; }
for v in 8.0 8.9 12.1; do
    cc=$(TRAINC_FAKE_CC=$v gpu "$d/fp8_lt_check" --cc)
    [ "$cc" = "$v" ] || { echo "FAIL TRAINC_FAKE_CC=$v: the fake device reports $cc"; exit 1; }
done
for v in 8 8.10 9.0a x.y; do
    if TRAINC_FAKE_CC=$v gpu "$d/fp8_lt_check" --cc >/dev/null 2>"$d/cc_bad.log"; then
        echo "FAIL TRAINC_FAKE_CC=$v accepted"; exit 1
    fi
done
echo "ok   TRAINC_FAKE_CC: 9.0 unless set, 8.0, 8.9 and 12.1 reported, 8, 8.10, 9.0a, x.y refused"
# the driver loads a module where a real cubin of its architecture runs
for a in sm_80 sm_89 sm_90a sm_120a; do
    gpu "$d/fp8_lt_check" --compile $a tests/fake_gpu/fp8_kernel.cu "$d/$a.img"
done
for t in "8.0 sm_80 0" "8.0 sm_89 3" "8.9 sm_80 0" "8.9 sm_89 0" "9.0 sm_89 3" "9.0 sm_90a 0" "10.0 sm_90a 3" \
         "12.0 sm_120a 0" "12.1 sm_120a 3"; do
    set -- $t
    rc=0; TRAINC_FAKE_CC=$1 gpu "$d/fp8_lt_check" --load "$d/$2.img" 2>>"$d/load.log" || rc=$?
    [ $rc = $3 ] || { echo "FAIL a module for $2 on compute capability $1: exit $rc, not $3"; exit 1; }
done
echo "ok   modules load where their architecture runs: sm_80 on 8.0 and 8.9, sm_89 on 8.9 (not 8.0 or 9.0), sm_90a on 9.0 (not 10.0), sm_120a on 12.0 (not 12.1)"
TRAINC_FAKE_CC=8.9 gpu "$d/fp8_lt_check" tests/fake_gpu/fp8_kernel.cu 2>"$d/fp8_lt_check.log"
# --probe (bench/gpu_fp8.sh runs it on a GPU): the runtime's FP8 GEMMs and their variants
# at GPT-2's QKV shapes / 16, each D checked; the fake takes all but the fp32 bias
gpu "$d/fp8_lt_check" --probe 16 >"$d/probe.txt" 2>"$d/probe.log" || { cat "$d/probe.txt"; echo "FAIL --probe: exit 1"; exit 1; }
n=$(grep -c "heuristic ok, call ok$" "$d/probe.txt")
refused=$(grep "heuristic NOT_SUPPORTED" "$d/probe.txt" | sed 's/ \[.*//')
[ "$n" = 14 ] && [ "$refused" = "probe fwd + BIAS, fp32 bias" ] ||
    { cat "$d/probe.txt"; echo "FAIL --probe: $n of 15 cases ran, refused: $refused"; exit 1; }
echo "ok   --probe: 14 of its 15 GEMMs run and check, the fp32 bias refused"
