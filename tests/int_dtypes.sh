#!/usr/bin/env bash
# Integer inputs of every dtype SPEC.md lists (u8, u16, i32) as class targets and as an
# embedding's ids: the loader widens u8 and u16 to the i32 the kernels read, so a run on
# u8 or u16 files gives exactly the numbers of the same run on i32 files (every record
# and the final weights, bit for bit): a token model (embedding ids and [T] targets,
# shuffled, a short last batch, accumulate 2, validation) and a classifier (scalar
# targets). The GPU path of the same (the widened batches uploaded, and gathered on
# the device with loader.on_gpu): tests/fake_gpu.sh. Also: a target of one value a
# sample reads a [N] file and a [N, 1] one alike.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/int_dtypes
rm -rf "$d"; mkdir -p "$d"
$PY - "$d" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(3)
N, T = 23, 6
ids = rng.integers(0, 200, (N, T))            # the embedding's vocab is 200
nxt = rng.integers(0, 250, (N, T))            # 250 classes: past u8's 255 would not fit
lab = rng.integers(0, 7, N)
feat = rng.standard_normal((N, 5)).astype(np.float32)
np.save(f"{d}/feat.npy", feat)
for dt, t in (("u8", np.uint8), ("u16", np.uint16), ("i32", np.int32)):
    np.save(f"{d}/ids_{dt}.npy", ids.astype(t))
    np.save(f"{d}/next_{dt}.npy", nxt.astype(t))
    np.save(f"{d}/lab_{dt}.npy", lab.astype(t))
def spec(name, xdt, ydt):
    return {"trainc": 1, "model": {"name": "tok", "inputs": {
                "x": {"shape": [T], "dtype": xdt}, "y": {"shape": [T], "dtype": ydt, "classes": 250}},
            "layers": [{"op": "embedding", "name": "wte", "vocab": 200, "dim": 8, "input": "x"},
                       {"op": "pos_embedding", "max_len": T}, {"op": "gelu"}, {"op": "linear", "out": 250}],
            "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": f"ids_{xdt}.npy", "y": f"next_{ydt}.npy"},
                               "val": {"x": f"ids_{xdt}.npy", "y": f"next_{ydt}.npy"}},
                      "batch_size": 4, "accumulate": 2, "epochs": 3, "log_every": 1,
                      "optimizer": {"type": "adamw", "lr": 0.01}, "loader": {"drop_last": False},
                      "validate": {"every_steps": 2}}}
for xdt, ydt in (("i32", "i32"), ("u8", "u8"), ("u16", "u16"), ("u8", "u16"), ("u16", "i32")):
    json.dump(spec("tok", xdt, ydt), open(f"{d}/tok_{xdt}_{ydt}.json", "w"))
for dt in ("i32", "u8", "u16"):
    json.dump({"trainc": 1, "model": {"name": "cls", "inputs": {
                   "x": {"shape": [5], "dtype": "f32"}, "y": {"shape": [], "dtype": dt, "classes": 7}},
               "layers": [{"op": "linear", "out": 16}, {"op": "relu"}, {"op": "linear", "out": 7}],
               "loss": {"op": "cross_entropy", "target": "y"}},
               "train": {"data": {"train": {"x": "feat.npy", "y": f"lab_{dt}.npy"},
                                  "val": {"x": "feat.npy", "y": f"lab_{dt}.npy"}},
                         "batch_size": 5, "epochs": 4, "log_every": 1, "optimizer": {"type": "sgd", "lr": 0.1},
                         "early_stopping": {"monitor": "val_acc", "mode": "max", "patience": 50}}},
              open(f"{d}/cls_{dt}.json", "w"))
PY
same() {   # same RUN_A RUN_B: every record (less times and rates) and the weights equal
    "$PY" - "$@" <<'PY'
import json, sys
a, b = sys.argv[1:3]
def recs(run):
    return [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s", "spec_hash")}
            for l in open(run + "/metrics.jsonl")]
ra, rb = recs(a), recs(b)
assert ra == rb, "the records differ:\n%s\n%s" % (ra, rb)
assert open(a + "/model.safetensors", "rb").read() == open(b + "/model.safetensors", "rb").read(), "weights differ"
n = sum(1 for r in ra if "loss" in r or "val_loss" in r)
assert n >= 8, ra
print("%d records and the weights bit-identical" % n)
PY
}
O=(--quiet --threads 2)
"$TRAINC" run "$d/tok_i32_i32.json" --out "$d/tok_i32_i32" "${O[@]}" 2>/dev/null
for v in u8_u8 u16_u16 u8_u16 u16_i32; do
    "$TRAINC" run "$d/tok_$v.json" --out "$d/tok_$v" "${O[@]}" 2>/dev/null
    r=$(same "$d/tok_i32_i32" "$d/tok_$v")
    echo "ok   token model, ids and targets ${v/_/ and }: $r"
done
# a built trainer reads its files alike (the generated inputs table: dtype u8, widen 1)
"$TRAINC" build "$d/tok_u8_u8.json" -o "$d/tok_u8" 2>/dev/null
"$TRAINC" emit "$d/tok_u8_u8.json" -o "$d/tok_u8.src" >/dev/null
grep -q '{"x", RT_U8, 1, {6}, 6, 0, 200, 1}' "$d/tok_u8.src/host.c" &&
    grep -q '{"y", RT_U8, 1, {6}, 6, 250, 0, 1}' "$d/tok_u8.src/host.c" ||
    { echo "FAIL: the inputs table of tok_u8_u8:"; grep -A3 'rt_input inputs' "$d/tok_u8.src/host.c"; exit 1; }
"$d/tok_u8" --out "$d/tok_u8_built" "${O[@]}" 2>/dev/null
r=$(same "$d/tok_i32_i32" "$d/tok_u8_built")
echo "ok   token model, u8, built: $r"
"$TRAINC" run "$d/cls_i32.json" --out "$d/cls_i32" "${O[@]}" 2>/dev/null
for v in u8 u16; do
    "$TRAINC" run "$d/cls_$v.json" --out "$d/cls_$v" "${O[@]}" 2>/dev/null
    r=$(same "$d/cls_i32" "$d/cls_$v")
    echo "ok   classifier, $v labels: $r"
done

# one value a sample however the file's rows are shaped: an mse target of shape [1] from
# a [N] file, and a scalar one from [N, 1], train as the [N, 1] / [N] files do
$PY - "$d" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
y = np.random.default_rng(4).standard_normal(23).astype(np.float32)
np.save(f"{d}/y_n.npy", y)
np.save(f"{d}/y_n1.npy", y[:, None])
for name, shape, yf in (("reg_1_n", [1], "y_n.npy"), ("reg_1_n1", [1], "y_n1.npy")):
    json.dump({"trainc": 1,
               "model": {"name": "reg", "inputs": {"x": {"shape": [5], "dtype": "f32"},
                                                  "y": {"shape": shape, "dtype": "f32"}},
                         "layers": [{"op": "linear", "out": 8}, {"op": "tanh"}, {"op": "linear", "out": 1}],
                         "loss": {"op": "mse", "target": "y"}},
               "train": {"data": {"train": {"x": "feat.npy", "y": yf}}, "batch_size": 4,
                         "optimizer": {"type": "sgd", "lr": 0.1}, "loader": {"shuffle": False},
                         "epochs": 2, "log_every": 1, "seed": 5}},
              open(f"{d}/{name}.json", "w"))
PY
for v in reg_1_n reg_1_n1; do "$TRAINC" run "$d/$v.json" --out "$d/$v" --threads 1 --quiet 2>/dev/null; done
r=$(same "$d/reg_1_n1" "$d/reg_1_n")
echo "ok   mse target [1] from a [N] file: $r"
# and a scalar class target from a [N, 1] file: the [N] file's run
$PY - "$d" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
np.save(f"{d}/lab_col.npy", np.load(f"{d}/lab_i32.npy")[:, None])
s = json.load(open(f"{d}/cls_i32.json"))
s["train"]["data"] = {k: {"x": "feat.npy", "y": "lab_col.npy"} for k in ("train", "val")}
json.dump(s, open(f"{d}/cls_col.json", "w"))
PY
"$TRAINC" run "$d/cls_col.json" --out "$d/cls_col" "${O[@]}" 2>/dev/null
r=$(same "$d/cls_i32" "$d/cls_col")
echo "ok   class target [] from a [N, 1] file: $r"
