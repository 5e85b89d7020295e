#!/usr/bin/env bash
# `trainc run` (libtcc, in memory) and `trainc build` (system cc) give identical losses
# with threads=1: same spec, same seed, shuffle and dropout on. The third spec, an MLP
# with a GELU (tanh) before a dropout, a tanh, a silu and a sigmoid, keeps them in
# generated loops, so trainc_rt.h's rt_tanhf and rt_expf are compiled by libtcc in one
# and by cc in the other (and vectorized in the runtime's GEMM epilogue in both).
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
out=build/tests/jit_vs_build
rm -rf "$out"; mkdir -p "$out"
${PYTHON:-/usr/bin/python3} - "$out/mlp_tanh.json" "$PWD/data/fashion" <<'PY'
import json, sys
spec = json.load(open("specs/mlp_fashion.json"))
spec["model"]["name"] = "mlp_tanh"
spec["model"]["layers"] = [{"op": "flatten"}, {"op": "linear", "out": 64}, {"op": "gelu", "approximate": "tanh"},
                           {"op": "dropout", "p": 0.1}, {"op": "linear", "out": 32}, {"op": "tanh"},
                           {"op": "linear", "out": 32}, {"op": "silu"}, {"op": "linear", "out": 16},
                           {"op": "sigmoid"}, {"op": "linear", "out": 10}]
for part, files in (("train", ("train_x", "train_y")), ("val", ("test_x", "test_y"))):
    spec["train"]["data"][part] = {"x": f"{sys.argv[2]}/{files[0]}.npy", "y": f"{sys.argv[2]}/{files[1]}.npy"}
json.dump(spec, open(sys.argv[1], "w"), indent=1)
PY
for spec in specs/mlp_fashion.json specs/cnn_fashion.json "$out/mlp_tanh.json"; do
    n=$(basename "$spec" .json)
    sets=(--set max_steps=30 --set log_every=1 --set data.val=null --threads 1 --quiet)
    "$TRAINC" build "$spec" -o "$out/$n"
    "$out/$n" --out "$out/$n.aot" "${sets[@]}"
    TRAINC_JIT_CC=0 "$TRAINC" run "$spec" --out "$out/$n.jit" "${sets[@]}"   # libtcc's own
    ${PYTHON:-/usr/bin/python3} - "$out/$n.aot/metrics.jsonl" "$out/$n.jit/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l and '"event"' not in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l and '"event"' not in l]
assert len(a) == 30 and a == b, (len(a), len(b), [(x, y) for x, y in zip(a, b) if x != y][:3])
print("identical:", len(a), "steps, last loss", a[-1])
PY
    cmp "$out/$n.aot/model.safetensors" "$out/$n.jit/model.safetensors"
    echo "ok $n"
done
