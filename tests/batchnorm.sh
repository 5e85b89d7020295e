#!/usr/bin/env bash
# batchnorm's running statistics through a run's life, on a conv + BatchNorm2d + linear
# + BatchNorm1d CNN (tests/batchnorm_parity.py checks the numbers against PyTorch):
#   - recomputation: selective and full give the same per-step losses and a
#     bit-identical model.safetensors (running statistics included) as none, so a
#     replayed batchnorm does not update them a second time;
#   - resume: a run stopped by SIGTERM and resumed gives the uninterrupted run's records
#     and model.safetensors, bit for bit (the statistics come back from the checkpoint);
#   - --eval of the final weights gives the run's last validation loss (the running
#     statistics come back from model.safetensors);
#   - 2 ranks under mpirun, sync false: the running statistics saved are rank 0's (at lr
#     0, those of one rank trained on rank 0's rows alone, bit for bit), and both ranks
#     validate with them (the last validation loss is --eval's of the saved weights);
#   - 2 ranks, sync true: 2 ranks x B match 1 rank x 2B step by step (losses within 1e-5
#     relative) and in the running statistics (1e-5);
#   - on the fake GPU (tests/fake_gpu/): --device cuda matches --device cpu (1e-5, the
#     running statistics too), a GPU resume is bit for bit, bf16-mixed runs close to fp32;
#   - 2 fake GPUs under mpirun, sync true: 2 GPUs x B match 1 GPU x 2B (1e-5, the running
#     statistics too): the statistics summed over NCCL inside the pass.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
d=$(pwd)/build/tests/batchnorm
rm -rf "$d"; mkdir -p "$d"
$PY - "$d" "$PWD/data/fashion" <<'PY'
import json, sys
import numpy as np
d, data = sys.argv[1], sys.argv[2]
x, y = np.load(data + "/train_x.npy", mmap_mode="r"), np.load(data + "/train_y.npy", mmap_mode="r")
np.save(d + "/x.npy", np.array(x[:2048])); np.save(d + "/y.npy", np.array(y[:2048]))
np.save(d + "/x_even.npy", np.array(x[:2048:2])); np.save(d + "/y_even.npy", np.array(y[:2048:2]))
tx, ty = np.load(data + "/test_x.npy", mmap_mode="r"), np.load(data + "/test_y.npy", mmap_mode="r")
np.save(d + "/vx.npy", np.array(tx[:256])); np.save(d + "/vy.npy", np.array(ty[:256]))
for sync in (False, True):
    spec = {"trainc": 1,
            "model": {"name": "bn_cnn",
                      "inputs": {"x": {"shape": [1, 28, 28], "dtype": "u8", "scale": 1 / 255},
                                 "y": {"shape": [], "dtype": "i32", "classes": 10}},
                      "layers": [{"op": "conv2d", "out": 8, "kernel": 3, "padding": 1, "bias": False},
                                 {"op": "batchnorm", "momentum": 0.2, "sync": sync}, {"op": "relu"},
                                 {"op": "maxpool2d", "kernel": 2}, {"op": "flatten"},
                                 {"op": "linear", "out": 32}, {"op": "batchnorm", "eps": 1e-4, "sync": sync},
                                 {"op": "relu"}, {"op": "linear", "out": 10}],
                      "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": d + "/x.npy", "y": d + "/y.npy"},
                               "val": {"x": d + "/vx.npy", "y": d + "/vy.npy"}},
                      "batch_size": 32, "epochs": 3,
                      "optimizer": {"type": "sgd", "lr": 0.02, "momentum": 0.9, "weight_decay": 1e-4},
                      "validate": {"every_steps": 40}, "log_every": 1, "seed": 5}}
    json.dump(spec, open(f"{d}/bn{'_sync' if sync else ''}.json", "w"), indent=1)
PY
"$TRAINC" build "$d/bn.json" -o "$d/trainer" 2>/dev/null
"$TRAINC" build "$d/bn_sync.json" -o "$d/trainer_sync" 2>/dev/null
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
# same_batch ONE TWO: ONE (1 rank x 2B) and TWO (2 ranks x B, sync) log the same 12 losses
# within 1e-5 relative and save the same running statistics within 1e-5 (their counts
# equal)
same_batch() {
    $PY - "$1" "$2" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import numpy as np, st_check
def losses(p): return [json.loads(l)["loss"] for l in open(p + "/metrics.jsonl") if '"loss"' in l and '"event"' not in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
wa, wb = (st_check.load(p + "/model.safetensors") for p in sys.argv[1:3])
stat = max(float(np.max(np.abs(wa[k].astype(np.float64) - wb[k]))) for k in wa if "running" in k)
assert all((wa[k] == wb[k]).all() for k in wa if "num_batches" in k)
print(f"worst loss difference {worst:.1e}, running statistics {stat:.1e}")
assert worst <= 1e-5 and stat <= 1e-5, (worst, stat)
PY
}

for pol in none selective full; do
    "$TRAINC" run "$d/bn.json" --out "$d/rc.$pol" --set recompute=$pol --set max_steps=20 --threads 1 \
        --quiet 2>/dev/null
done
for pol in selective full; do
    cmp "$d/rc.none/model.safetensors" "$d/rc.$pol/model.safetensors"
    diff <(losses "$d/rc.none") <(losses "$d/rc.$pol")
done
echo "ok   recompute selective and full: bit-identical to none (running statistics included)"
# the plan counts the state as the trainer allocates it
"$TRAINC" plan "$d/bn.json" --json > "$d/plan.json"
$PY - "$d/rc.none/metrics.jsonl" "$d/plan.json" <<'PY'
import json, sys
start, plan = json.loads(open(sys.argv[1]).readline()), json.load(open(sys.argv[2]))
assert start["state_bytes"] == plan["state_bytes"] == 512, (start.get("state_bytes"), plan.get("state_bytes"))
PY
echo "ok   the plan's state_bytes are the start record's"

S=(--threads 1 --quiet --set max_steps=120 --set checkpoint.every_steps=25)
"$d/trainer" --out "$d/ref" "${S[@]}"
"$d/trainer" --out "$d/cut" "${S[@]}" &
pid=$!
wait_for $pid "the interrupted run's step 60" logged "$d/cut/metrics.jsonl" 60
n=$(grep -c '"loss"' "$d/cut/metrics.jsonl")
kill -TERM $pid 2>/dev/null || true
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || [ $rc -eq 0 ] || { echo "FAIL resume: the interrupted run exited $rc"; exit 1; }
"$d/trainer" --resume "$d/cut" "${S[@]}"
$PY - "$d/ref/metrics.jsonl" "$d/cut/metrics.jsonl" <<'PY'
import json, sys
def recs(p):
    return [{k: r[k] for k in ("step", "loss", "val_loss", "val_acc") if k in r}
            for r in map(json.loads, open(p)) if "event" not in r]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, next(((x, y) for x, y in zip(a, b) if x != y), (len(a), len(b)))
PY
cmp "$d/ref/model.safetensors" "$d/cut/model.safetensors"
echo "ok   resume after SIGTERM at step ~$n: the same records and weights, bit for bit"

last=$(grep -o '"val_loss":[^,]*' "$d/ref/metrics.jsonl" | tail -n 1 | cut -d: -f2)
ev=$("$d/trainer" --eval --init "$d/ref/model.safetensors" --threads 1 --quiet | tail -n 1)
$PY - "$last" "$ev" <<'PY'
import json, sys
want, got = float(sys.argv[1]), json.loads(sys.argv[2])["val_loss"]
assert abs(want - got) <= 1e-6 * abs(want), (want, got)
PY
echo "ok   --eval of model.safetensors: the run's last validation loss ($last)"

# sync false: rank 0's statistics. At lr 0 the weights stay, so rank 0's running
# statistics are those of one rank fed rank 0's rows (0, 2, 4, ...: shuffle off)
Z=(--threads 1 --quiet --set optimizer.lr=0 --set loader.shuffle=false --set max_steps=10
   --set data.val=null --set validate.every_steps=null --set batch_size=16)
"${MPIRUN[@]}" "$d/trainer" --out "$d/r2" "${Z[@]}"
"$d/trainer" --out "$d/r0" "${Z[@]}" --set data.train.x="$d/x_even.npy" --set data.train.y="$d/y_even.npy"
cmp "$d/r2/model.safetensors" "$d/r0/model.safetensors"
# and every rank validates with rank 0's (validation is sharded over the ranks): the
# 2-rank run's last validation loss is that of its saved weights on one rank
"${MPIRUN[@]}" "$d/trainer" --out "$d/v2" --threads 1 --quiet --set max_steps=40
last=$(grep -o '"val_loss":[^,]*' "$d/v2/metrics.jsonl" | tail -n 1 | cut -d: -f2)
ev=$("$d/trainer" --eval --init "$d/v2/model.safetensors" --threads 1 --quiet | tail -n 1)
$PY - "$last" "$ev" <<'PY'
import json, sys
want, got = float(sys.argv[1]), json.loads(sys.argv[2])["val_loss"]
assert abs(want - got) <= 1e-6 * abs(want), (want, got)
PY
echo "ok   2 ranks, sync false: the running statistics saved and validated with are rank 0's"

# sync true: the statistics of the whole batch over both ranks
Y=(--threads 1 --quiet --set loader.shuffle=false --set max_steps=12 --set data.val=null
   --set validate.every_steps=null)
"${MPIRUN[@]}" "$d/trainer_sync" --out "$d/s2" "${Y[@]}" --set batch_size=16
"$d/trainer_sync" --out "$d/s1" "${Y[@]}" --set batch_size=32
same_batch "$d/s1" "$d/s2"
echo "ok   2 ranks x 16 with sync = 1 rank x 32"

# the GPU path on the fake GPU (tests/fake_gpu/: the kernels of batchnorm.cuh in the CPU
# emulator): --device cuda against --device cpu, the running statistics too; a resume
# on the GPU bit for bit; bf16-mixed (16-bit activations) against the CPU's fp32
. tests/fake_gpu/libs.sh >/dev/null   # gpu, fbuild
fbuild "$d/bn.json" -o "$d/gpu_trainer" 2>/dev/null
fbuild "$d/bn.json" --set precision=bf16-mixed -o "$d/gpu_bf16" 2>/dev/null
G=(--threads 1 --quiet --set max_steps=12 --set validate.every_steps=6 --set checkpoint.every_steps=6)
"$d/gpu_trainer" --device cpu --out "$d/g.cpu" "${G[@]}"
gpu "$d/gpu_trainer" --device cuda --out "$d/g.gpu" "${G[@]}"
gpu "$d/gpu_trainer" --device cuda --out "$d/g.cut" "${G[@]}" --set max_steps=6
gpu "$d/gpu_trainer" --resume "$d/g.cut" "${G[@]}"
gpu "$d/gpu_bf16" --device cuda --out "$d/g.bf16" "${G[@]}"
cmp "$d/g.gpu/model.safetensors" "$d/g.cut/model.safetensors"
$PY - "$d/g.cpu" "$d/g.gpu" "$d/g.bf16" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import numpy as np, st_check
def nums(p):
    return [r[k] for r in map(json.loads, open(p + "/metrics.jsonl")) if "event" not in r
            for k in ("loss", "val_loss") if k in r]
a, b, h = (nums(p) for p in sys.argv[1:4])
assert len(a) == len(b) == len(h) == 14, (len(a), len(b), len(h))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
wa, wb = (st_check.load(p + "/model.safetensors") for p in sys.argv[1:3])
stat = max(float(np.max(np.abs(wa[k].astype(np.float64) - wb[k]))) for k in wa if "running" in k)
assert all((wa[k] == wb[k]).all() for k in wa if "num_batches" in k)
assert worst <= 1e-5 and stat <= 1e-5, (worst, stat)
first, last = abs(h[0] - a[0]) / a[0], abs(h[-1] - a[-1]) / a[-1]
assert first <= 1e-3 and last <= 2e-2, (first, last)
print(f"cuda vs cpu: worst loss difference {worst:.1e}, running statistics {stat:.1e}; "
      f"bf16-mixed: first loss {first:.1e}, last validation {last:.1e}")
PY
echo "ok   fake GPU: --device cuda = cpu (running statistics too), resume bit for bit, bf16-mixed"

# sync true on two fake GPUs (one a rank; the fake NCCL sums the statistics in doubles
# inside the pass): 2 GPUs x 16 match 1 GPU x 32 step by step, the running statistics too
fbuild "$d/bn_sync.json" -o "$d/gpu_sync" 2>/dev/null
GPUS=(mpirun --oversubscribe --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x TRAINC_FAKE_GPU_COUNT
      -x TRAINC_CACHE_DIR -x OMPI_MCA_btl_vader_single_copy_mechanism)
TRAINC_FAKE_GPU_COUNT=2 gpu "${GPUS[@]}" "$d/gpu_sync" --device cuda --out "$d/gs2" "${Y[@]}" --set batch_size=16
gpu "$d/gpu_sync" --device cuda --out "$d/gs1" "${Y[@]}" --set batch_size=32
same_batch "$d/gs1" "$d/gs2"
echo "ok   fake GPUs: 2 GPUs x 16 with sync = 1 GPU x 32 (SyncBatchNorm's sums over NCCL)"
