#!/usr/bin/env bash
# The CNN benchmark, in one run on the GPU machine, after tests/gpu/pack.sh (which builds
# resnet_fashion and resnet_fashion_bf16, cnn_fashion and cnn_fashion_bf16) with
# build/devpack.tar.xz copied there:
#
#   bash bench/gpu_resnet.sh            results in $OUT/resnet.jsonl, the table in
#                                       $OUT/summary.txt (bench/resnet_table.py)
#   RESNET_WHAT=speed bash bench/gpu_resnet.sh   the samples/s rows only (tta: time to 94%)
#   TTA_CAP_X=0 TTA_MAX=900 bash bench/gpu_resnet.sh   PyTorch's whole time to 94%
#   SMOKE=1 bash bench/gpu_resnet.sh    here, without a GPU: the plumbing (below)
#
# In the same run, on the same device and Fashion-MNIST (the pack's .npy files):
#   1. time to 94.0% test accuracy (TARGET) with specs/resnet_fashion.json's recipe
#      (batch 128, SGD Nesterov, warm-up and cosine over 30 epochs, crop and flip on
#      the device, label smoothing 0.1; fp32, as the spec says), once each
#      (TTA_ROUNDS): trainc's built trainer (early_stopping on val_acc with
#      stopping_threshold just under TARGET: it ends at the first validation at or
#      above it), then bench/gpu_resnet_torch.py eager and torch.compile (fullgraph,
#      mode TORCH_MODE, default max-autotune: its CUDA graphs included). The figure:
#      wall clock from launch to exit, so the process's start, trainc's NVRTC kernels
#      and PyTorch's imports and compilation are in it (trainc build's C compilation
#      ran on the build machine, in tests/gpu/pack.sh: a few seconds, not counted). PyTorch eager captures its
#      whole step as one CUDA graph after 3 steps (--graph; TTA_GRAPH=0: plain eager),
#      the strongest eager at batch 128's small step. Each side starts from an empty
#      kernel cache (trainc's TRAINC_CACHE_DIR, Inductor's and Triton's). Both validate
#      on the 10,000 test images after each epoch, in eval mode. PyTorch's runs stop
#      at TTA_CAP_X (default 2.2) times trainc's time, when trainc reached TARGET: not
#      reached by then is a ratio above that, which answers the 2x goal in less time;
#      TTA_CAP_X=0 lets them run their course, up to TTA_MAX seconds (default 240).
#   2. samples/s, ROUNDS (3) alternating runs of trainc, eager and torch.compile (round
#      by round over the rows, so a budget cut leaves every row its first runs), each
#      WARM (20) steps then STEPS (100) timed, total samples over the total time with
#      the device synchronized at both clock reads (trainc: between its records at
#      steps WARM and WARM + STEPS, which wait for the device): cnn_fashion at 4096 in
#      fp32 first (the row that stood at 0.87x torch.compile), then resnet_fashion at
#      4096 and 512, fp32 and bf16-mixed. The same recipe on both sides (the spec's
#      optimizer, augmentation and loss; no validation); PyTorch eager with --graph at
#      batches up to GRAPH_MAX_BATCH (512, the smaller batch). Then trainc's
#      resnet_fashion_bf16 once at each batch with TRAINC_CONV_KERNELS=0 (im2col and
#      GEMMs, not the tensor cores' implicit-GEMM forward the rules pick): kind
#      "speed_ab", printed beside the default's median.
# Budget: with PART_LIMIT (seconds, as tests/gpu/measure.sh passes its part's limit) a
# run starts only with MIN_LEFT (20) seconds left before it, and is stopped at it, so the
# table is printed in time; what is cut is the last of the list above.
#
# SMOKE=1: the same script on this machine's CPU, to exercise everything but the
# device: the trainers built here (build/trainc build, CPU) into build/resnet_smoke,
# PyTorch on the CPU (its compile lines say so when it has no torch.compile), the
# first 512 training and 256 test images, batches 16 and 32 for 512 and 4096,
# WARM 2 and STEPS 4 (multiples of the trainer's log_every, set to the same), time to
# TARGET 0.15 at batch 32 over at most 2 epochs. With Debian's PyTorch 1.13 (no
# torch.compile: those lines are error records) about 2 minutes on 2 cores; with a
# PyTorch 2 in a virtual environment, compile lines included, 6 to 11 (shared cores):
#   SMOKE=1 PYTHON=/usr/bin/python3 bash bench/gpu_resnet.sh
#   SMOKE=1 PYTHON=/path/to/venv/bin/python3 bash bench/gpu_resnet.sh
set -u
ROOT=$(pwd)
PY=${PYTHON:-python3}
T_BEGIN=$(date +%s)
LIMIT=${PART_LIMIT:-0}
MIN_LEFT=${MIN_LEFT:-20}
WHAT=${RESNET_WHAT:-all}   # all | tta | speed (not WHAT: bench/gpu_llama.sh reads that)
ROUNDS=${ROUNDS:-3}
TTA_ROUNDS=${TTA_ROUNDS:-1}
TTA_CAP_X=${TTA_CAP_X:-2.2}
TTA_MAX=${TTA_MAX:-240}
TORCH_MODE=${TORCH_MODE:-max-autotune}
TTA_GRAPH=${TTA_GRAPH:-1}          # PyTorch eager's time to accuracy with --graph (0: plain)
if [ "${SMOKE:-0}" = 1 ]; then
    OUT=${OUT:-$ROOT/build/resnet_smoke/out}
    D=$ROOT/build/resnet_smoke
    S=$D/ship
    DEV=cpu
    SMALL=16 LARGE=32 WARM=${WARM:-2} STEPS=${STEPS:-4} LOG=2
    TARGET=${TARGET:-0.15}
    TTA_SETS=(--set epochs=2 --set batch_size=32)
    TTA_B=(32)
    TTA_TORCH=(--epochs 2)
    THREADS=(--threads 1)
    TORCH_THREADS=(--threads 1)
    DATA=$D/data
    mkdir -p "$S" "$DATA" "$OUT"
    fresh() { [ "$1" -nt "$2" ] && [ "$1" -nt build/trainc ]; }   # built after the spec and trainc
    for spec in resnet_fashion cnn_fashion; do   # CPU trainers (bf16-mixed runs fp32 there)
        fresh "$S/$spec" specs/$spec.json || build/trainc build specs/$spec.json -o "$S/$spec" || exit 1
        fresh "$S/${spec}_bf16" specs/$spec.json || build/trainc build specs/$spec.json \
            --set precision=bf16-mixed -o "$S/${spec}_bf16" || exit 1
    done
    "$PY" - "$DATA" <<'PY'
import numpy as np, sys
for part, n in (("train", 512), ("test", 256)):
    for v in "xy":
        np.save(f"{sys.argv[1]}/{part}_{v}.npy", np.array(np.load(f"data/fashion/{part}_{v}.npy", mmap_mode="r")[:n]))
PY
    COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
    DEVICE_NAME="cpu (smoke)"
else
    . bench/gpu_env.sh
    DEV=cuda
    SMALL=512 LARGE=4096 WARM=${WARM:-20} STEPS=${STEPS:-100} LOG=10
    TARGET=${TARGET:-0.94}
    TTA_SETS=() TTA_B=() TTA_TORCH=() THREADS=() TORCH_THREADS=()
    DATA=$D/data/fashion
    COMMIT=$(cat "$D/commit" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo "?")
    DEVICE_NAME=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi
GRAPH_MAX_BATCH=${GRAPH_MAX_BATCH:-$SMALL}   # eager's samples/s runs with --graph up to this batch
RES=$OUT/resnet.jsonl
ERR=$OUT/resnet.err
: >"$RES"
: >"$ERR"
DX=(--set data.train.x=$DATA/train_x.npy --set data.train.y=$DATA/train_y.npy
    --set data.val.x=$DATA/test_x.npy --set data.val.y=$DATA/test_y.npy)

left() {   # seconds left of PART_LIMIT (a large number without one)
    if [ "$LIMIT" -gt 0 ]; then echo $((LIMIT - ($(date +%s) - T_BEGIN))); else echo 1000000; fi
}
budget() { # budget WHAT: may a run start? (else a skip record)
    local l; l=$(left)
    [ "$l" -ge "$MIN_LEFT" ] && return 0
    echo "{\"kind\":\"skip\",\"what\":\"$1\",\"left_s\":$l}"
    return 1
}
capped() { # capped CMD...: CMD under timeout at what is left of the budget (timeout's
           # 0 would mean none: at least 1)
    local l; l=$(($(left) - 5))
    timeout -k 5 $((l > 0 ? l : 1)) "$@"
}
torch_run() {   # torch_run SPEC ARGS...: one JSON line from gpu_resnet_torch.py, wall_s added
    local spec=$1 t0 line rc; shift
    t0=$(date +%s.%N)
    line=$(capped "$PY" "$ROOT/bench/gpu_resnet_torch.py" "specs/$spec.json" "$@" --device "$DEV" \
        --data "$DATA" --t0 "$t0" ${TORCH_THREADS[@]+"${TORCH_THREADS[@]}"} 2>>"$ERR" | tail -1)
    rc=${PIPESTATUS[0]}
    "$PY" - "$t0" "$(date +%s.%N)" "$rc" "$spec" "$line" "$*" <<'PY'
import json, sys
t0, t1, rc, spec, line, args = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
try:
    r = json.loads(line)
except ValueError:
    r = {"impl": "compile" if "--compile" in args else "eager", "model": spec, "error": f"exit {rc}", "args": args}
r["side"] = "torch"
r["wall_s"] = round(t1 - t0, 3)
print(json.dumps(r))
PY
}
trainc_run() {  # trainc_run KIND TRAINER PRECISION ARGS...: the trainer (built for
                # PRECISION), then its JSON line
    local kind=$1 exe=$2 prec=$3 o=$D/r.$2.$RANDOM t0 rc; shift 3
    t0=$(date +%s.%N)
    capped "$S/$exe" --device "$DEV" --out "$o" "${DX[@]}" --set checkpoint=null --quiet \
        ${THREADS[@]+"${THREADS[@]}"} "$@" >"$o.log" 2>&1
    rc=$?
    cat "$o.log" >>"$ERR"
    "$PY" - "$kind" "$exe" "$o/metrics.jsonl" "$t0" "$(date +%s.%N)" "$rc" "$WARM" "$TARGET" "$DEVICE_NAME" "$prec" <<'PY'
import json, os, sys
kind, exe, path = sys.argv[1], sys.argv[2], sys.argv[3]
t0, t1, rc, warm, target = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
# precision: the trainer's (a CPU runs bf16-mixed in fp32: ran_precision says so)
r = {"side": "trainc", "impl": "trainc", "trainer": exe, "kind": kind, "precision": sys.argv[10],
     "wall_s": round(t1 - t0, 3), "device": sys.argv[9]}
if os.environ.get("AB_ENV"):   # an A/B run's setting (speed_ab)
    r["env"] = os.environ["AB_ENV"]
try:
    recs = [json.loads(l) for l in open(path)]
    start, end = recs[0], recs[-1]
    r.update(model=start["model"], ran_precision=start.get("precision"), batch=start.get("batch_size"))
    if kind == "tta":
        vals = [x for x in recs if "val_acc" in x]
        r.update(target=target, reached=bool(vals) and vals[-1]["val_acc"] >= target - 1e-9,
                 val_acc=vals[-1]["val_acc"] if vals else None, steps=end.get("step"),
                 end=end.get("reason"), curve=[[x.get("epoch", 0) + 1, x["step"], x["val_acc"], None] for x in vals])
        r["reached_s"] = r["wall_s"] if r["reached"] else None
    else:
        train = [x for x in recs if "samples_per_s" in x]
        a = next(x for x in train if x["step"] == warm)
        b = train[-1]
        r.update(steps=b["step"] - a["step"],
                 samples_per_s=round((b["step"] - a["step"]) * r["batch"] / (b["time_s"] - a["time_s"]), 1),
                 device_bytes=start.get("device_bytes"),
                 arena_params_bytes=(start.get("device_arena_bytes") or 0) + (start.get("device_pool_bytes") or 0))
    if rc:
        r["exit"] = rc
except (OSError, ValueError, StopIteration, KeyError, IndexError, ZeroDivisionError) as e:
    r.update(error=f"exit {rc}: {e!r}")
print(json.dumps(r))
PY
}

tta() {   # time to TARGET: trainc, then PyTorch eager and compiled, each from cold caches
    local i cap t l g c
    for ((i = 0; i < TTA_ROUNDS; i++)); do
        budget "tta trainc" || return
        t=$(TRAINC_CACHE_DIR=$D/cache.tta.$i.$RANDOM trainc_run tta resnet_fashion fp32 \
            --set log_every=100 --set early_stopping.monitor=val_acc --set early_stopping.mode=max \
            --set "early_stopping.stopping_threshold=$("$PY" -c "print($TARGET - 0.5 / 10000)")" \
            --set early_stopping.patience=100000 ${TTA_SETS[@]+"${TTA_SETS[@]}"})
        echo "$t"
        cap=$(echo "$t" | "$PY" -c "
import json, sys
r = json.loads(sys.stdin.read()); x, m = float('$TTA_CAP_X'), float('$TTA_MAX')
print(int(min(m, x * r['wall_s'])) + 1 if x > 0 and r.get('reached') else int(m))")
        cap=${cap:-$TTA_MAX}
        g=""; [ "$TTA_GRAPH" = 1 ] && g=--graph
        for c in "$g" --compile; do
            budget "tta torch${c:+ $c}" || return
            l=$(($(left) - 10))   # stop by itself, with its record, before the budget's end
            [ "$l" -lt "$cap" ] && cap=$l
            TORCHINDUCTOR_CACHE_DIR=$D/inductor.tta.$i.$RANDOM TRITON_CACHE_DIR=$D/triton.tta.$i.$RANDOM \
                torch_run resnet_fashion tta ${TTA_B[@]+"${TTA_B[@]}"} --target "$TARGET" --max-time "$cap" $c --mode "$TORCH_MODE" \
                ${TTA_TORCH[@]+"${TTA_TORCH[@]}"}
        done
    done
}
speed_once() {  # speed_once SPEC TRAINER PRECISION BATCH: one run of each side
    local spec=$1 exe=$2 prec=$3 b=$4
    budget "speed $exe $b trainc" || return 1
    trainc_run speed "$exe" "$prec" --set batch_size="$b" --set max_steps=$((WARM + STEPS)) --set epochs=100000 \
        --set log_every=$LOG --set data.val=null
    budget "speed $exe $b eager" || return 1
    local g=""; [ "$b" -le "$GRAPH_MAX_BATCH" ] && g=--graph
    torch_run "$spec" speed "$b" --precision "$prec" --warm "$WARM" --steps "$STEPS" $g
    budget "speed $exe $b compile" || return 1
    torch_run "$spec" speed "$b" --precision "$prec" --warm "$WARM" --steps "$STEPS" --compile --mode "$TORCH_MODE"
}
speed() {       # ROUNDS rounds over the rows, so a budget cut leaves every row its first runs
    local i
    for ((i = 0; i < ROUNDS; i++)); do
        speed_once cnn_fashion cnn_fashion fp32 "$LARGE" &&
            speed_once resnet_fashion resnet_fashion fp32 "$LARGE" &&
            speed_once resnet_fashion resnet_fashion_bf16 bf16-mixed "$LARGE" &&
            speed_once resnet_fashion resnet_fashion fp32 "$SMALL" &&
            speed_once resnet_fashion resnet_fashion_bf16 bf16-mixed "$SMALL" || return
    done
    speed_ab
}
speed_ab() {    # trainc's bf16-mixed ResNet with the convolutions as im2col and GEMMs
                # (TRAINC_CONV_KERNELS=0) beside the default rules' tensor-core implicit
                # GEMM forward: one run at each batch, kind "speed_ab"
    local b
    for b in "$LARGE" "$SMALL"; do
        budget "speed_ab resnet_fashion_bf16 $b" || return 1
        TRAINC_CONV_KERNELS=0 AB_ENV=TRAINC_CONV_KERNELS=0 trainc_run speed_ab resnet_fashion_bf16 bf16-mixed \
            --set batch_size="$b" --set max_steps=$((WARM + STEPS)) --set epochs=100000 \
            --set log_every=$LOG --set data.val=null
    done
}

{
    echo "{\"kind\":\"meta\",\"date\":\"$(date -u +%F)\",\"commit\":\"$COMMIT\",\"device\":\"$DEVICE_NAME\",\"target\":$TARGET,\"warm\":$WARM,\"steps\":$STEPS,\"rounds\":$ROUNDS,\"torch_mode\":\"$TORCH_MODE\",\"smoke\":${SMOKE:-0}}"
    [ "$WHAT" != speed ] && tta
    [ "$WHAT" != tta ] && speed
} 2>>"$ERR" | tee -a "$RES"
"$PY" "$ROOT/bench/resnet_table.py" "$RES" | tee "$OUT/summary.txt"
