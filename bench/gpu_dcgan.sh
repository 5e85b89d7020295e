#!/usr/bin/env bash
# The DCGAN benchmark (specs/dcgan_fashion.json), in one run on the GPU machine, after
# tests/gpu/pack.sh (which builds dcgan_fashion, fp32, and dcgan_fashion_bf16,
# bf16-mixed) with build/devpack.tar.xz copied there:
#
#   bash bench/gpu_dcgan.sh                   results in $OUT/dcgan.jsonl and a table
#   BATCHES=128 PRECS=bf16 bash bench/gpu_dcgan.sh     one batch, one precision
#   ROWS="eager compile" ROUNDS=1 bash bench/gpu_dcgan.sh     fewer PyTorch rows
#   BUDGET=560 bash tests/gpu/measure.sh dcgan=540     the whole run as a measure.sh part
#   SMOKE=1 bash bench/gpu_dcgan.sh           the plumbing on this CPU, no GPU (below)
#
# Samples/s of trainc against the same model and step in PyTorch (docs/spec.md, "GANs":
# z drawn, D on the real batch and on G(z) detached, D's update, G through the updated D,
# G's update; AdamW as the spec; the Fashion-MNIST images as the real batches) at batch
# 128 and 1024 (BATCHES), in fp32 and bf16-mixed (PRECS: PyTorch's bf16 rows under
# bf16 autocast), ROUNDS alternating runs (default 3) of: trainc, then PyTorch's ROWS
# (bench/gpu_dcgan_torch.py says what each does):
#   eager       channels_last, cudnn.benchmark, fused AdamW
#   compile     torch.compile of G and D, mode max-autotune (COMPILE_MODE), fullgraph
#   graph       eager with the whole step captured in one CUDA graph (capturable AdamW)
#   lightning   PyTorch Lightning's manual-optimization GAN loop (its docs' example)
# and, where ROWS names them, compile+graph (compiled max-autotune-no-cudagraphs inside
# the whole-step capture) and compile:MODE (torch.compile in another mode, e.g.
# compile:default or compile:max-autotune-no-cudagraphs: BENCHMARKING.md's best of). Each run: WARM steps (default 20, compilation
# and autotuning included), then STEPS timed steps (default 200): samples over the wall
# time of the timed steps, the device synchronized at both clock reads (trainc: the
# records at steps WARM and WARM + STEPS, log_every 10). The rounds go round by round
# over every batch and precision, so a run cut short loses rounds, not a batch.
# torch.compile's caches live in /tmp/dcgan-inductor: a later round's compile finds
# the first one's kernels and autotuning (compile time is reported apart, warm_s).
#
# Before the rounds: trainc's --profile at the first batch in fp32, and again with
# TRAINC_CONV_KERNELS=0 (PROFILE=0: neither). In the first round, at the first batch and
# precision, trainc once more with a wait every step (TRAINC_STEP_WAIT=1: its own row).
#
# DEADLINE (seconds; tests/gpu/measure.sh's part limit less 15 by default): no run
# starts after it and none runs past it, so the table is printed before the part's
# limit. Each record, one JSON line in $OUT/dcgan.jsonl, has its label (dcgan_bB), the
# round, the implementation and samples_per_s, or "skipped" / "error" with why.
# bench/dcgan_table.py prints the table and bench/RESULTS.md's rows from it.
#
# SMOKE=1 (not in make test; about a minute on 2 cores): the same script on this CPU:
# the trainers built here by build/trainc for --device cpu (the CPU computes bf16-mixed
# in fp32 and says so), PyTorch on the CPU, batches 8 and 16, 2 rounds of 4 timed steps
# after 2; where this torch has no torch.compile, no GPU for the graph rows, or no
# Lightning, those rows are recorded as skipped. Results under $OUT (default
# /tmp/dcgan-smoke): the plumbing, not figures.
set -u
ROOT=$(pwd)
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
    OUT=${OUT:-/tmp/dcgan-smoke}
    mkdir -p "$OUT"
    S=$OUT/trainers
    mkdir -p "$S"
    TRAINC=${TRAINC:-build/trainc}
    for p in fp32 bf16; do
        "$TRAINC" build specs/dcgan_fashion.json --device cpu --set precision=$p$([ $p = bf16 ] && echo -mixed) \
            -o "$S/dcgan_fashion$([ $p = bf16 ] && echo _bf16)" >>"$OUT/build.log" 2>&1 ||
            { echo "gpu_dcgan.sh: trainc build failed (see $OUT/build.log)"; exit 1; }
    done
    DATA=${DATA:-$ROOT/data/fashion/train_x.npy}
    DEV=cpu
    BATCHES=${BATCHES:-8 16}
    ROUNDS=${ROUNDS:-2}
    STEPS=${STEPS:-4}
    WARM=${WARM:-2}
    LOG_EVERY=1
    TRAINC_CPU=(--threads 1)
    export OMP_NUM_THREADS=1
else
    . bench/gpu_env.sh
    DATA=${DATA:-$D/data/fashion/train_x.npy}
    DEV=cuda
    BATCHES=${BATCHES:-128 1024}
    ROUNDS=${ROUNDS:-3}
    STEPS=${STEPS:-200}
    WARM=${WARM:-20}
    LOG_EVERY=10
    TRAINC_CPU=()
fi
PRECS=${PRECS:-fp32 bf16}
ROWS=${ROWS-eager compile graph lightning}   # (empty: trainc alone)
COMPILE_MODE=${COMPILE_MODE:-max-autotune}
RUN_LIMIT=${RUN_LIMIT:-300}   # one process's limit (the first compile's autotuning included)
[ -n "${PART_LIMIT:-}" ] && DEADLINE=${DEADLINE:-$((PART_LIMIT - 15))}
DEADLINE=${DEADLINE:-0}       # 0: none
export TORCHINDUCTOR_CACHE_DIR=/tmp/dcgan-inductor TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
RES=$OUT/dcgan.jsonl
ERR=$OUT/dcgan.err   # the scripts' own errors; each run's output in $OUT/runs/
: >"$RES"
: >"$ERR"
T0=$(date +%s)
SKIP=" "   # rows recorded as skipped (no Lightning, no torch.compile): not run again

left() {           # seconds a run may take: RUN_LIMIT, or less near DEADLINE (0: none left)
    local l=$RUN_LIMIT
    if [ "$DEADLINE" -gt 0 ]; then
        local d=$((DEADLINE - ($(date +%s) - T0)))
        [ $d -lt $l ] && l=$d
        [ $l -lt 5 ] && l=0
    fi
    echo $l
}
trainc_run() {     # trainc_run B PREC ROUND [VAR=VALUE]: one JSON line (VAR=VALUE: in the
                   # trainer's environment, and its impl "trainc+PREC VAR=VALUE")
    local b=$1 p=$2 r=$3 env=${4:-} exe=dcgan_fashion lim
    [ "$p" = bf16 ] && exe=dcgan_fashion_bf16
    local o=$OUT/runs/trainc.$b.$p.$r${env:+.$env}
    lim=$(left)
    [ "$lim" -gt 0 ] || { echo "{\"impl\":\"trainc+$p${env:+ $env}\",\"label\":\"dcgan_b$b\",\"batch\":$b,\"precision\":\"$p\",\"round\":$r,\"skipped\":\"past the deadline\"}"; return; }
    rm -rf "$o"
    timeout -k 5 "$lim" env ${env:+"$env"} "$S/$exe" --device "$DEV" --out "$o" "${TRAINC_CPU[@]}" \
        --set "data.train.x=$DATA" --set batch_size="$b" --set max_steps=$((WARM + STEPS)) \
        --set epochs=100000 --set log_every=$LOG_EVERY --set checkpoint=null --quiet >"$o.log" 2>&1
    "$PY" - "$o/metrics.jsonl" "$o.log" "$b" "$p" "$r" "$WARM" "$exe" "$env" <<'PY'
import json, sys
path, log, b, p, r, warm, exe, env = sys.argv[1:]
b, r, warm = int(b), int(r), int(warm)
rec = {"impl": "trainc+" + p + (" " + env if env else ""), "label": f"dcgan_b{b}", "batch": b,
       "precision": p, "round": r, "trainer": exe}
try:
    rows = [json.loads(l) for l in open(path)]
    start = rows[0]
    train = [x for x in rows if "d_loss" in x]
    r0 = next(x for x in train if x["step"] >= warm)
    r1 = train[-1]
    if r1["step"] <= r0["step"]:
        raise ValueError(f"no timed steps after step {r0['step']}")
    rec.update(samples_per_s=round((r1["step"] - r0["step"]) * b / (r1["time_s"] - r0["time_s"]), 1),
               steps=r1["step"] - r0["step"], warm_s=r0["time_s"], first_record=[train[0]["step"], train[0]["time_s"]],
               built_precision=start.get("precision"), device=start.get("device"),
               device_bytes=start.get("device_bytes"), d_loss=r1["d_loss"], g_loss=r1["g_loss"])
except Exception as e:   # the trainer's last words: why it did not train
    tail = [l.strip() for l in open(log) if l.strip()][-2:]
    rec["error"] = f"trainer: {' | '.join(tail)}; {e!r}"[:500]
print(json.dumps(rec))
PY
}
torch_run() {      # torch_run B PREC ROUND ROW: one JSON line (ROW compile:MODE: that mode)
    local b=$1 p=$2 r=$3 row=$4 m=${4%%:*} cm=$COMPILE_MODE lim line rc
    case $row in compile:*) cm=${row#compile:} ;; esac
    [ "$m" = compile ] && row=compile && [ "$cm" != max-autotune ] && row=compile:$cm
    case $SKIP in *" $row+$p "*) return ;; esac
    local tag="{\"label\":\"dcgan_b$b\",\"round\":$r"
    lim=$(left)
    if [ "$lim" -le 0 ]; then
        line="{\"impl\":\"torch+$row+$p\",\"batch\":$b,\"precision\":\"$p\",\"skipped\":\"past the deadline\"}"
    else
        local o=$OUT/runs/torch.$row.$b.$p.$r
        timeout -k 5 "$lim" "$PY" "$ROOT/bench/gpu_dcgan_torch.py" "$b" --mode "$m" \
            $([ "$p" = bf16 ] && echo --bf16) --steps "$STEPS" --warm "$WARM" --device "$DEV" \
            --data "$DATA" --compile-mode "$cm" >"$o.out" 2>"$o.log"
        rc=$?
        line=$(tail -n 1 "$o.out")
        case $line in
        '{'*) ;;
        *) line="{\"impl\":\"torch+$row+$p\",\"batch\":$b,\"precision\":\"$p\",\"error\":\"exit $rc without a record (124: its limit of $lim s; see runs/torch.$row.$b.$p.$r.log)\"}" ;;
        esac
    fi
    case $line in *'"skipped": "'*'installed'* | *'"skipped": "'*'no torch.compile'* | *'"skipped": "CUDA graphs'*) SKIP="$SKIP$row+$p " ;; esac
    echo "$tag, ${line#\{}"
}

mkdir -p "$OUT/runs"
# the run's record: date, device and driver, commit, the settings (bench/RESULTS.md's
# columns); the commit from git where the tree has it, else COMMIT
if [ "$DEV" = cuda ]; then
    dev=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
else
    dev="CPU: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
fi
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "${COMMIT:-?}")
"$PY" -c 'import json, sys; print(json.dumps({"event": "run", "date": sys.argv[1], "device": sys.argv[2],
    "commit": sys.argv[3], "settings": sys.argv[4]}))' "$(date -u +%F)" "$dev" "$commit" \
    "SMOKE=$SMOKE BATCHES=\"$BATCHES\" PRECS=\"$PRECS\" ROWS=\"$ROWS\" ROUNDS=$ROUNDS STEPS=$STEPS WARM=$WARM COMPILE_MODE=$COMPILE_MODE" |
    tee -a "$RES"
# first, where trainc's step goes: --profile of 30 steps at the first batch in fp32
# (instruction by instruction, GPU events; PROFILE=0: not), the table in
# $OUT/dcgan_profile.txt and its JSON in $OUT/dcgan_profile.json; then the same with
# the convolutions as im2col, GEMMs and col2im alone (TRAINC_CONV_KERNELS=0:
# dcgan_profile.conv0.*), what the direct and implicit-GEMM kernels gain or lose. The
# first also says what cuBLASLt chose for each GEMM (TRAINC_GEMM_PLANS=1: its lines
# in dcgan_profile.txt): whether the weight gradients' GEMMs, a few tiles over K =
# B * 49, split K to fill the GPU
profile() {   # profile TAG [ENV...]
    local tag=$1 pb=${BATCHES%% *}
    shift
    timeout -k 5 60 env "$@" "$S/dcgan_fashion" --device "$DEV" --out "$OUT/runs/profile$tag" \
        "${TRAINC_CPU[@]}" --set "data.train.x=$DATA" --set batch_size="$pb" --set max_steps=30 \
        --set epochs=100000 --set log_every=10 --set checkpoint=null --quiet --profile \
        >"$OUT/dcgan_profile$tag.txt" 2>&1
    cp "$OUT/runs/profile$tag/profile.json" "$OUT/dcgan_profile$tag.json" 2>/dev/null
    grep -v "^trainc: gemm plan" "$OUT/dcgan_profile$tag.txt" | head -n 30
}
if [ "${PROFILE:-1}" = 1 ] && [ "$(left)" -gt 40 ]; then
    profile "" TRAINC_GEMM_PLANS=1
    [ "$(left)" -gt 40 ] && profile .conv0 TRAINC_CONV_KERNELS=0
fi
{
    for ((r = 1; r <= ROUNDS; r++)); do
        for b in $BATCHES; do
            for p in $PRECS; do
                trainc_run "$b" "$p" "$r"
                # once, at the first batch in fp32: a wait every step (as before
                # e9263dd), what steps without a wait are worth
                [ "$r" = 1 ] && [ "$b" = "${BATCHES%% *}" ] && [ "$p" = "${PRECS%% *}" ] &&
                    trainc_run "$b" "$p" "$r" TRAINC_STEP_WAIT=1
                for m in $ROWS; do
                    torch_run "$b" "$p" "$r" "$m"
                done
            done
        done
    done
} 2>>"$ERR" | tee -a "$RES"
"$PY" "$ROOT/bench/dcgan_table.py" "$RES" | tee "$OUT/summary.txt"
