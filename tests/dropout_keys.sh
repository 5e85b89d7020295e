#!/usr/bin/env bash
# Dropout masks come from rt_uniform(rng_key ^ KEY, element), KEY a hash of the layer:
# its spec path, and inside a `repeat` its iteration too. The iterations of a repeat
# share their spec path; with one key they drew the same mask at the same element in
# the same step (a fault until db8f45f). Here: a repeat of 3 blocks with a dropout
# each, plus one outside; the generated kernels must carry 4 different keys, the one
# outside FNV-1a of its path (unchanged from before).
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/dropout_keys
rm -rf "$d"; mkdir -p "$d"
cat >"$d/spec.json" <<'JSON'
{"trainc": 1,
 "model": {"name": "drop_repeat",
   "inputs": {"x": {"shape": [16], "dtype": "f32"}, "y": {"shape": [], "dtype": "i32", "classes": 4}},
   "layers": [
     {"op": "linear", "out": 32},
     {"op": "dropout", "p": 0.1},
     {"op": "repeat", "count": 3, "name": "h", "body": [
       {"op": "linear", "out": 32}, {"op": "relu"}, {"op": "dropout", "p": 0.2}]},
     {"op": "linear", "out": 4}],
   "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "max_steps": 1}}
JSON
"$TRAINC" emit "$d/spec.json" -o "$d/emit" >/dev/null
$PY - "$d/emit/kernels_cpu.c" <<'PY'
import re, sys
src = open(sys.argv[1]).read().split("---- validation")[0]   # training's kernels
keys = sorted(set(re.findall(r"rng_key \^ 0x([0-9a-f]{16})ull", src)))
assert len(keys) == 4, keys
h = 1469598103934665603
for ch in b"$.model.layers[1]":
    h = ((h ^ ch) * 1099511628211) % 2**64
assert "%016x" % h in keys, ("%016x" % h, keys)
print("ok   4 dropout layers (3 in a repeat), 4 mask keys; outside the repeat FNV-1a of its path")
PY
