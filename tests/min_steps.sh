#!/usr/bin/env bash
# min_epochs, min_steps and validate.every_fraction end to end, on a tiny model whose
# learning rate is 0 (every validation ties the first: patience runs out at a known
# check). The exact step where a run ends with early stopping held or not held by
# min_epochs/min_steps; a threshold and a non-finite monitored value still stopping at
# once; a run held by min_steps stopped by SIGTERM (and one cut at max_steps) and
# resumed ending where the uninterrupted run does; the steps where every_fraction
# validates (Lightning's float val_check_interval: after the batches whose 1-based
# index in the epoch is a multiple of max(1, int(f x batches))); the same with 2 MPI
# ranks and on the fake GPU.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/min_steps
rm -rf "$d"; mkdir -p "$d"
# 40 training rows in batches of 4: an epoch is 10 steps; the validation set has a
# row of NaN in bad_x (a non-finite val_loss)
$PY - "$d" <<'PY'
import numpy as np, sys
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", r.random((40, 4), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", (r.random(40) < 0.5).astype(np.int32))
np.save(sys.argv[1] + "/vx.npy", r.random((8, 4), dtype=np.float32))
np.save(sys.argv[1] + "/vy.npy", (r.random(8) < 0.5).astype(np.int32))
bad = r.random((8, 4), dtype=np.float32); bad[3] = np.nan
np.save(sys.argv[1] + "/bad_x.npy", bad)
PY
cat >"$d/tiny.json" <<'JSON'
{
  "trainc": 1,
  "model": {
    "name": "tiny",
    "inputs": {"x": {"shape": [4], "dtype": "f32"}, "y": {"shape": [], "dtype": "i32", "classes": 2}},
    "layers": [{"op": "linear", "out": 2}],
    "loss": {"op": "cross_entropy", "target": "y"}
  },
  "train": {
    "data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "vx.npy", "y": "vy.npy"}},
    "batch_size": 4,
    "epochs": 8,
    "optimizer": {"type": "sgd", "lr": 0.0},
    "loader": {"workers": 0, "shuffle": false},
    "checkpoint": null,
    "seed": 1,
    "log_every": 1
  }
}
JSON
"$TRAINC" build "$d/tiny.json" -o "$d/t"
q=(--quiet --threads 1)
# "REASON STEP VALSTEPS": the end record and the steps of the validation records
ends() {
    $PY -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert r[-1]['event'] == 'end', r[-1]
print(r[-1]['reason'], r[-1]['step'], ','.join(str(x['step']) for x in r if 'val_loss' in x))" "$1/metrics.jsonl"
}
expect() {  # expect NAME WANT SETS...: a run with SETS ends as WANT says
    local name=$1 want=$2; shift 2
    "$d/t" --out "$d/$name" "${q[@]}" "$@" 2>"$d/$name.err" || true
    local got; got=$(ends "$d/$name")
    [ "$got" = "$want" ] || { echo "FAIL $name: '$got', want '$want'"; cat "$d/$name.err"; exit 1; }
    echo "ok   $name: $got"
}
ES=(--set validate.every_steps=2 --set early_stopping.patience=1)
# patience 1: the check at step 4 ties the one at step 2, the stop is asked there
expect es_only "early_stopping 4 2,4" "${ES[@]}"
# min_steps 7 binding: held at 4 and 6, ended after step 7 (with a last validation, as
# Lightning validates when a held stop comes free); 3 is already reached at step 4
expect min_steps_binding "early_stopping 7 2,4,6,7" "${ES[@]}" --set min_steps=7
grep -q "patience ran out earlier; held until min_steps reached" "$d/min_steps_binding.err" ||
    { echo "FAIL min_steps_binding: the message does not say why"; cat "$d/min_steps_binding.err"; exit 1; }
expect min_steps_not_binding "early_stopping 4 2,4" "${ES[@]}" --set min_steps=3
# min_epochs 2: two whole epochs (20 steps; the epoch ends at steps 10 and 20 validate
# by every_steps); min_epochs 1 with patience 6: asked at step 14, past the first epoch
expect min_epochs_binding "early_stopping 20 2,4,6,8,10,12,14,16,18,20" "${ES[@]}" --set min_epochs=2
expect min_epochs_not_binding "early_stopping 14 2,4,6,8,10,12,14" \
    --set validate.every_steps=2 --set early_stopping.patience=6 --set min_epochs=1
# both: min_epochs 1 (step 10) and min_steps 15: the later one
expect both_binding "early_stopping 15 2,4,6,8,10,12,14,15" "${ES[@]}" --set min_epochs=1 --set min_steps=15
# the limits still end a held run: epochs 1 before min_steps 15
expect held_then_epochs "epochs 10 2,4,6,8,10" "${ES[@]}" --set min_steps=15 --set epochs=1
# a threshold stops at once (step 2), min_steps or not
expect threshold_at_once "early_stopping 2 2" "${ES[@]}" --set min_steps=15 \
    --set early_stopping.stopping_threshold=1e9
# a non-finite monitored value stops at once: diverged at the first validation
expect nonfinite_at_once "diverged 2 2" "${ES[@]}" --set min_steps=15 --set "data.val.x=$d/bad_x.npy"
set +e
"$d/t" --out "$d/nf_rc" "${q[@]}" "${ES[@]}" --set min_steps=15 --set "data.val.x=$d/bad_x.npy" 2>/dev/null
rc=$?
set -e
[ $rc -eq 3 ] || { echo "FAIL nonfinite_at_once: exit $rc, want 3"; exit 1; }
# a non-finite training loss too: diverged after the step before it, exit 3
$PY - "$d" <<'PY'
import numpy as np, sys
x = np.load(sys.argv[1] + "/x.npy"); x[9] = np.inf   # in the third batch
np.save(sys.argv[1] + "/inf_x.npy", x)
PY
expect nonfinite_loss_at_once "diverged 2 2" "${ES[@]}" --set min_steps=15 --set "data.train.x=$d/inf_x.npy"

# resume keeps them and the stop asked for: validations every 4 steps, patience out at
# step 8, min_steps 10: the whole run ends at step 10; cut at max_steps 9 (the stop
# asked for is in the checkpoint, the next check at 12 is past the end) and resumed with
# max_steps null, it ends at 10 with the same records
"$d/t" --out "$d/whole_short" "${q[@]}" --set validate.every_steps=4 --set early_stopping.patience=1 \
    --set min_steps=10 2>/dev/null
[ "$(ends "$d/whole_short")" = "early_stopping 10 4,8,10" ] || { echo "FAIL whole_short: $(ends "$d/whole_short")"; exit 1; }
"$d/t" --out "$d/cut" "${q[@]}" --set validate.every_steps=4 --set early_stopping.patience=1 \
    --set min_steps=10 --set max_steps=9 --set checkpoint.every_steps=1000 2>/dev/null
[ "$(ends "$d/cut" | cut -d' ' -f1-2)" = "max_steps 9" ]
grep -Eq '"es_pending":[[:space:]]*"1"' "$d/cut/checkpoints/step_00000009/state.json" ||
    { echo "FAIL cut: the checkpoint does not keep the stop asked for"; exit 1; }
"$d/t" --resume "$d/cut" "${q[@]}" --set max_steps=null 2>"$d/cut.err"
same() {  # the records of two runs, clock fields left out
    $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def recs(p):
    drop = {"time_s", "samples_per_s"}
    return [{k: v for k, v in json.loads(l).items() if k not in drop} for l in open(p)
            if '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, next((x, y) for x, y in zip(a, b) if x != y) if len(a) == len(b) else (len(a), len(b))
PY
}
[ "$(ends "$d/cut")" = "$(ends "$d/whole_short")" ] && same "$d/whole_short" "$d/cut" ||
    { echo "FAIL resumed at max_steps: $(ends "$d/cut")"; cat "$d/cut.err"; exit 1; }
echo "ok   held by min_steps, cut at max_steps 9, resumed: ends at step 10 as the whole run"
# resumed with min_steps lowered to what is done: the held stop ends it at once
"$d/t" --out "$d/cut2" "${q[@]}" --set validate.every_steps=4 --set early_stopping.patience=1 \
    --set min_steps=10 --set max_steps=9 --set checkpoint.every_steps=1000 2>/dev/null
"$d/t" --resume "$d/cut2" "${q[@]}" --set max_steps=null --set min_steps=null 2>"$d/cut2.err"
[ "$(ends "$d/cut2")" = "early_stopping 9 4,8,9" ] && grep -q "early stopping ended this run at step 9" "$d/cut2.err" ||
    { echo "FAIL resumed with min_steps lowered: $(ends "$d/cut2")"; cat "$d/cut2.err"; exit 1; }
echo "ok   held, resumed with min_steps null: ends at once (step 9)"
# and a run held by min_steps 300 (patience out at step 4) stopped by SIGTERM, resumed
# with --resume alone: step 300 and the records of the uninterrupted run
LONG=("${ES[@]}" --set epochs=100 --set min_steps=300)
"$d/t" --out "$d/whole" "${q[@]}" "${LONG[@]}" 2>/dev/null
[ "$(ends "$d/whole" | cut -d' ' -f1-2)" = "early_stopping 300" ] || { echo "FAIL whole: $(ends "$d/whole")"; exit 1; }
"$d/t" --out "$d/sig" "${q[@]}" "${LONG[@]}" --set checkpoint.every_steps=1 2>/dev/null &
pid=$!
wait_for $pid "a step past the stop asked for" logged "$d/sig/metrics.jsonl" 6
kill -TERM $pid 2>/dev/null || true
wait $pid || true
n=$(ends "$d/sig" | cut -d' ' -f1-2)
case $n in interrupted*) n=${n#* } ;; *) echo "FAIL SIGTERM: the run ended before it ($n)"; exit 1 ;; esac
[ "$n" -lt 300 ]
"$d/t" --resume "$d/sig" "${q[@]}" 2>"$d/sig.err"
[ "$(ends "$d/sig")" = "$(ends "$d/whole")" ] && same "$d/whole" "$d/sig" ||
    { echo "FAIL SIGTERM at step $n, resumed: $(ends "$d/sig")"; cat "$d/sig.err"; exit 1; }
echo "ok   held by min_steps, SIGTERM at step $n, resumed: ends at step 300"

# every_fraction: the steps it validates at, 2 epochs of 10 batches (f 0.3: batches 3,
# 6, 9 of each epoch, not its end; the run's last step 20 validates as every run that
# ends between validations does)
F=(--set epochs=2 --set validate.every_epochs=null)
expect frac_025 "epochs 20 2,4,6,8,10,12,14,16,18,20" "${F[@]}" --set validate.every_fraction=0.25
expect frac_03 "epochs 20 3,6,9,13,16,19,20" "${F[@]}" --set validate.every_fraction=0.3
expect frac_1 "epochs 20 10,20" "${F[@]}" --set validate.every_fraction=1.0
expect frac_005 "epochs 20 $(seq -s, 1 20)" "${F[@]}" --set validate.every_fraction=0.05
# with accumulate 3 the steps take batches 1-3, 4-6, 7-9, 10: f 0.2 (every 2 batches)
# validates after the steps holding batches 2, 4, 6, 8, 10 of an epoch
expect frac_acc3 "epochs 8 1,2,3,4,5,6,7,8" "${F[@]}" --set validate.every_fraction=0.2 --set accumulate=3
# every_epochs 2 picks the epochs: the second only
expect frac_every2 "epochs 20 15,20" "${F[@]}" --set validate.every_fraction=0.5 --set validate.every_epochs=2

# 2 ranks over MPI (batch 2 a rank: the same 10 steps an epoch): every rank takes the
# same decisions, so the run ends and validates at the same steps
if command -v mpirun >/dev/null; then
    mpi_expect() {  # mpi_expect NAME WANT SETS...
        local name=$1 want=$2; shift 2
        timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 "$d/t" --out "$d/$name" \
            "${q[@]}" --set batch_size=2 "$@" 2>"$d/$name.err" || true
        local got; got=$(ends "$d/$name")
        grep -q '"ranks":2' "$d/$name/metrics.jsonl" && [ "$got" = "$want" ] ||
            { echo "FAIL $name: '$got', want '$want'"; cat "$d/$name.err"; exit 1; }
        echo "ok   $name: $got"
    }
    mpi_expect ddp_min_steps "early_stopping 7 2,4,6,7" "${ES[@]}" --set min_steps=7
    mpi_expect ddp_frac_03 "epochs 20 3,6,9,13,16,19,20" "${F[@]}" --set validate.every_fraction=0.3
else
    echo "skip the 2-rank part: no mpirun"
fi

# the GPU path on the fake GPU (tests/fake_gpu.sh), with log_every 1000 so that the
# steps between validations are queued without a wait (step.c's step_needs_wait): it
# validates and ends held runs at the same steps as the CPU
if [ -e "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ]; then
    . tests/fake_gpu/libs.sh   # gpu, fbuild
    fbuild "$d/tiny.json" -o "$d/tg" 2>"$d/tg.build.log"
    gpu_expect() {  # gpu_expect NAME WANT SETS...
        local name=$1 want=$2; shift 2
        gpu "$d/tg" --device cuda --out "$d/$name" "${q[@]}" --set log_every=1000 "$@" \
            2>"$d/$name.err" || true
        local got; got=$(ends "$d/$name")
        grep -q '"device":"cuda"' "$d/$name/metrics.jsonl" && [ "$got" = "$want" ] ||
            { echo "FAIL $name: '$got', want '$want'"; cat "$d/$name.err"; exit 1; }
        echo "ok   $name: $got"
    }
    gpu_expect gpu_frac_03 "epochs 20 3,6,9,13,16,19,20" "${F[@]}" --set validate.every_fraction=0.3
    gpu_expect gpu_min_steps "early_stopping 7 2,4,6,7" "${ES[@]}" --set min_steps=7
    gpu_expect gpu_both "early_stopping 15 2,4,6,8,10,12,14,15" "${ES[@]}" --set min_epochs=1 --set min_steps=15
else
    echo "skip the fake GPU part: no CUDA headers"
fi
echo "min_steps: all ok"
