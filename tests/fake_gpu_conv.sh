#!/usr/bin/env bash
# conv2d's kernels without im2col's columns (templates/cuda/conv.cuh's rt_conv_direct_*
# and rt_conv_igemm_dx, the tensor cores' rt_conv_igemm_*_tc in 16 bits, chosen by
# runtime/cuda_ops.c's shape rules) in whole training
# runs on the fake GPU (tests/fake_gpu/: the generated CUDA code in an emulator, GEMMs in
# OpenBLAS), against the CPU's im2col + GEMM + col2im:
#   - cnn_fashion in fp32 under the default rules (its first layer direct, forward and
#     weight gradient; the second's input gradient stays a GEMM and col2im: 16 channels
#     would leave half the implicit GEMM's 32-channel tile idle), with every kernel on
#     wherever it applies (TRAINC_CONV_KERNELS=all: the implicit GEMM too) and with all
#     off (=0): each kernel's launches counted in the trace (none with =0), and every
#     loss, gradient norm and validation number within tests/fake_gpu.sh's CNN
#     tolerance of the CPU's (1e-5 relative for 8 steps, then 1e-3: max-pool's choices
#     amplify the GEMMs' other summation order);
#   - a checkpoint after 6 steps and --resume to 12 under =all: records and weights
#     bit-identical to the uninterrupted run (the kernels' sums have a fixed order);
#   - cnn_fashion in bf16-mixed and fp16-mixed under =all (the second layer's forward,
#     weight and input gradients on the tensor cores: rt_conv_igemm_*_tc), and in
#     bf16-mixed under the default rules (columns that small stay GEMMs): the first
#     loss within 1e-3 of the CPU's fp32 one, the last within 2e-2 (tests/fake_gpu.sh's
#     16-bit rule);
#   - resnet_fashion_cpu (batchnorm, stride-2 stages, 1x1 projections) in fp32 under the
#     default rules: the stem direct, the 32-channel stride-1 convolution's input
#     gradient an implicit GEMM, the 64-channel one's a GEMM and col2im; within 1e-4 of
#     the CPU for 6 steps.
# A kernel that computes a wrong value fails the comparisons with the CPU; one that
# stops being chosen fails the launch counts.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/fake_gpu_conv
lib=
. tests/fake_gpu/env.sh   # gpu, fbuild

# compare KIND A B [TOL [LATE_TOL FROM]]: "close": the numbers of runs A and B within TOL
# relative (from step FROM on LATE_TOL); "same": records less times and the weights
# equal; "first_last": the first loss within TOL, the last within LATE_TOL
compare() {
    "$PY" - "$@" <<'PY'
import json, sys
kind, a, b = sys.argv[1:4]
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
late_tol = float(sys.argv[5]) if len(sys.argv) > 5 else tol
late_from = int(sys.argv[6]) if len(sys.argv) > 6 else 1 << 62
recs = lambda run: [json.loads(l) for l in open(run + "/metrics.jsonl")]
ra, rb = recs(a), recs(b)
assert [r for r in rb if r.get("event") == "start"][-1]["device"] == "cuda"
KEYS = ("loss", "grad_norm", "val_loss", "val_acc")
num = lambda rs: [(r["step"], k, r[k]) for r in rs if "step" in r and "event" not in r for k in KEYS if k in r]
na, nb = num(ra), num(rb)
assert [x[:2] for x in na] == [x[:2] for x in nb], "different records:\n%s\n%s" % (na, nb)
rel = lambda x, y: abs(x - y) / max(abs(x), 1e-6)
if kind == "close":
    worst = max((rel(x[2], y[2]) / (tol if x[0] < late_from else late_tol), rel(x[2], y[2]), x[:2])
                for x, y in zip(na, nb))
    assert worst[0] <= 1, "relative difference %.3g at step %d (%s)" % (worst[1], *worst[2])
    print("%d numbers, largest relative difference %.2g (step %d, %s)" % (len(na), worst[1], *worst[2]))
elif kind == "first_last":
    la = [x[2] for x in na if x[1] == "loss"]
    lb = [x[2] for x in nb if x[1] == "loss"]
    f, l = rel(la[0], lb[0]), rel(la[-1], lb[-1])
    assert f <= tol and l <= late_tol, "first loss %.3g, last %.3g apart" % (f, l)
    print("first loss within %.1e, last within %.1e" % (f, l))
else:
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("time_s", "samples_per_s")}
                        for r in rs if "event" not in r]
    assert strip(ra) == strip(rb), "the records differ"
    assert open(a + "/model.safetensors", "rb").read() == open(b + "/model.safetensors", "rb").read(), \
        "the weights differ"
    print("%d records and the weights bit-identical" % len(strip(ra)))
PY
}
# launches LOG: how many times each of the kernels ran, "fwd/dw/igemm/col2im/tc": the
# direct forward and weight gradient, the CUDA cores' implicit-GEMM input gradient,
# col2im, and the tensor cores' forward, weight gradient and input gradient (16-bit)
KS="rt_conv_direct_fwd rt_conv_direct_dw_part rt_conv_igemm_dx rt_col2im rt_conv_igemm_fwd_tc
    rt_conv_igemm_dw_tc rt_conv_igemm_dx_tc"
launches() {
    local n=()
    for k in $KS; do
        n+=("$(grep -c "run $k\b" "$1" || true)")
    done
    (IFS=/; echo "${n[*]}")
}
want() {   # want NAME GOT WANTED
    [ "$2" = "$3" ] || { echo "FAIL: $1: kernel launches fwd/dw/igemm/col2im/tc $2, want $3"; exit 1; }
}

m=cnn_fashion
fbuild specs/$m.json -o "$d/$m" 2>"$d/$m.build.log"
O=(--set max_steps=12 --set log_every=1 --set loader.shuffle=false --threads 1 --set batch_size=32
   --set validate.every_steps=12 --set validate.batches=1 --quiet)
"$d/$m" --device cpu "${O[@]}" --out "$d/$m.cpu" >/dev/null 2>&1
# 12 steps and a validation batch: 13 forward passes, 12 backward
for mode in rules all 0; do
    e=(); [ $mode = rules ] || e=(TRAINC_CONV_KERNELS=$mode)
    env "${e[@]}" TRAINC_FAKE_GPU_TRACE=1 LD_LIBRARY_PATH="$lib" "$d/$m" --device cuda "${O[@]}" \
        --out "$d/$m.$mode" 2>"$d/$m.$mode.log"
    n=$(launches "$d/$m.$mode.log")
    case $mode in
        rules) want "$m, default rules" "$n" 13/12/0/12/0/0/0 ;;
        all) want "$m, TRAINC_CONV_KERNELS=all" "$n" 13/12/12/0/0/0/0 ;;
        0) want "$m, TRAINC_CONV_KERNELS=0" "$n" 0/0/0/12/0/0/0 ;;
    esac
    r=$(compare close "$d/$m.cpu" "$d/$m.$mode" 1e-5 1e-3 9)
    echo "ok   $m fp32, conv kernels $mode (launches fwd/dw/igemm/col2im/tc $n) vs the CPU: $r"
done

# a checkpoint at step 6, then --resume to 12: the uninterrupted run's bits
export TRAINC_CONV_KERNELS=all
gpu "$d/$m" --device cuda "${O[@]}" --set max_steps=6 --set checkpoint.every_steps=6 \
    --out "$d/$m.resumed" 2>/dev/null
gpu "$d/$m" --device cuda "${O[@]}" --set checkpoint.every_steps=6 --resume "$d/$m.resumed" 2>/dev/null
r=$(compare same "$d/$m.all" "$d/$m.resumed")
echo "ok   $m fp32, conv kernels all: --resume from step 6: $r"

# (4 steps at batch 16: the emulated tensor cores are slow)
O16=(--set max_steps=4 --set log_every=1 --set loader.shuffle=false --threads 1 --set batch_size=16
     --set validate.every_steps=4 --set validate.batches=1 --quiet)
"$d/$m" --device cpu "${O16[@]}" --out "$d/$m.cpu16" >/dev/null 2>&1
for p in bf16 fp16; do
    fbuild specs/$m.json --set precision=$p-mixed \
        -o "$d/$m.$p" 2>"$d/$m.$p.build.log"
    TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m.$p" --device cuda "${O16[@]}" --out "$d/$m.$p.gpu" 2>"$d/$m.$p.log"
    n=$(launches "$d/$m.$p.log")
    # the second layer's three products on the tensor cores
    want "$m $p-mixed, TRAINC_CONV_KERNELS=all" "$n" 5/4/0/0/5/4/4
    r=$(compare first_last "$d/$m.cpu16" "$d/$m.$p.gpu" 1e-3 2e-2)
    echo "ok   $m $p-mixed, conv kernels all (launches $n), vs the CPU's fp32: $r"
done
unset TRAINC_CONV_KERNELS
# bf16 under the default rules: at batch 32 the second layer's columns (1.8 MB) stay in
# the L2 cache, so its products stay GEMMs (cuda_ops.c's conv_tc_pays)
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m.bf16" --device cuda "${O[@]}" --out "$d/$m.bf16.rules" 2>"$d/$m.bf16.rules.log"
n=$(launches "$d/$m.bf16.rules.log")
want "$m bf16-mixed, default rules" "$n" 13/12/0/12/0/0/0
r=$(compare first_last "$d/$m.cpu" "$d/$m.bf16.rules" 1e-3 2e-2)
echo "ok   $m bf16-mixed, default rules (launches $n), vs the CPU's fp32: $r"

m=resnet_fashion_cpu
fbuild specs/$m.json -o "$d/$m" 2>"$d/$m.build.log"
O=(--set max_steps=6 --set log_every=1 --set loader.shuffle=false --threads 1 --set batch_size=16
   --set data.val=null --quiet)
"$d/$m" --device cpu "${O[@]}" --out "$d/$m.cpu" >/dev/null 2>&1
TRAINC_FAKE_GPU_TRACE=1 gpu "$d/$m" --device cuda "${O[@]}" --out "$d/$m.gpu" 2>"$d/$m.gpu.log"
# 6 steps: the stem and the two 1x1 projections direct (C*k*k <= 32: 3 a step), the
# 32-channel stride-1 convolution's input gradient an implicit GEMM, col2im for the
# 64-channel one and the four strided ones (5 a step)
n=$(launches "$d/$m.gpu.log")
want "$m, default rules" "$n" 18/18/6/30/0/0/0
r=$(compare close "$d/$m.cpu" "$d/$m.gpu" 1e-4)
echo "ok   $m fp32, default rules (launches fwd/dw/igemm/col2im/tc $n) vs the CPU: $r"
