#!/usr/bin/env bash
# `trainc run` (libtcc, in memory) and `trainc build` (system cc) give identical losses
# with threads=1: same spec, same seed, shuffle and dropout on.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
out=build/tests/jit_vs_build
rm -rf "$out"; mkdir -p "$out"
for spec in mlp_fashion cnn_fashion; do
    sets=(--set max_steps=30 --set log_every=1 --set data.val=null --threads 1 --quiet)
    "$TRAINC" build specs/$spec.json -o "$out/$spec"
    "$out/$spec" --out "$out/$spec.aot" "${sets[@]}"
    "$TRAINC" run specs/$spec.json --out "$out/$spec.jit" "${sets[@]}"
    ${PYTHON:-/usr/bin/python3} - "$out/$spec.aot/metrics.jsonl" "$out/$spec.jit/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l and '"event"' not in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l and '"event"' not in l]
assert len(a) == 30 and a == b, (len(a), len(b), [(x, y) for x, y in zip(a, b) if x != y][:3])
print("identical:", len(a), "steps, last loss", a[-1])
PY
    cmp "$out/$spec.aot/model.safetensors" "$out/$spec.jit/model.safetensors"
    echo "ok $spec"
done
