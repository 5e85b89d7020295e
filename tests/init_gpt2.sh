#!/usr/bin/env bash
# "init": "gpt2" (SPEC.md section 2): normal 0.02, biases 0, and a residual branch's
# output projection at 0.02 / sqrt(number of residual branches). The output projection
# is the branch's last layer with parameters, when it is a linear or an attention (its
# proj): a dropout after it (nanoGPT's resid_dropout) does not hide it (it once did,
# and such a proj kept 0.02). The stds are read from the parameter table of the
# emitted host.c. The dropouts and the gelu are unnamed, as in nanoGPT: the first
# branch's dropout and the second's gelu are both h.N.2, which is no clash (they have
# no parameters).
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/init_gpt2
rm -rf "$d"; mkdir -p "$d"
# 2 blocks of 2 branches, and a third kind of branch whose last layer with parameters
# is a layernorm (nothing to scale there): 6 residual branches, 0.02 / sqrt(6)
cat >"$d/spec.json" <<'JSON'
{"trainc": 1,
 "model": {"name": "gpt2_init", "init": "gpt2",
   "inputs": {"x": {"shape": [8], "dtype": "i32"}, "y": {"shape": [8], "dtype": "i32", "classes": 64}},
   "layers": [
     {"op": "embedding", "name": "wte", "vocab": 64, "dim": 32, "input": "x"},
     {"op": "repeat", "name": "h", "count": 2, "body": [
       {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"},
                                   {"op": "attention", "name": "attn", "heads": 4},
                                   {"op": "dropout", "p": 0.1}]},
       {"op": "residual", "body": [{"op": "layernorm", "name": "ln_2"},
                                   {"op": "linear", "name": "fc", "out": 128}, {"op": "gelu"},
                                   {"op": "linear", "name": "proj", "out": 32},
                                   {"op": "dropout", "p": 0.1}]},
       {"op": "residual", "name": "r", "body": [{"op": "linear", "name": "fc", "out": 32},
                                                {"op": "layernorm", "name": "ln"},
                                                {"op": "relu"}]}]},
     {"op": "linear", "name": "head", "out": 64}],
   "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "max_steps": 1}}
JSON
"$TRAINC" emit "$d/spec.json" -o "$d/emit" >/dev/null
$PY - "$d/emit/host.c" <<'PY'
import math, re, sys
rows = re.findall(r'\{"([^"]+)", \d, \{[^}]*\}, \d+, \d+, (RT_INIT_\w+), ([-0-9.e]+)f\}',
                  open(sys.argv[1]).read())
init = {name: (kind, float(a)) for name, kind, a in rows}
assert len(init) == 35, len(init)
scaled = 0.02 / math.sqrt(6)
for name, (kind, a) in init.items():
    if name.endswith(".bias"):
        want = ("RT_INIT_CONST", 0.0)
    elif ".ln" in name:
        want = ("RT_INIT_CONST", 1.0)
    elif name.endswith("attn.proj.weight") or name.endswith(".proj.weight"):
        want = ("RT_INIT_NORMAL", scaled)
    else:
        want = ("RT_INIT_NORMAL", 0.02)
    assert kind == want[0] and abs(a - want[1]) < 1e-7 * max(1, want[1]), (name, kind, a, want)
print("ok   gpt2 init: 4 output projections (before a dropout) at 0.02/sqrt(6), "
      "the rest at 0.02, biases 0")
PY
