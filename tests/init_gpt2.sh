#!/usr/bin/env bash
# "init": "gpt2" (SPEC.md section 2): normal 0.02, biases 0, and a residual branch's
# output projection at 0.02 / sqrt(2 * number of blocks), a block an iteration of a
# top-level repeat or another top-level layer, counted where it holds a residual
# branch (GPT-2: 12 blocks of two branches, 0.02 / sqrt(24)). The output projection
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
# is a layernorm (nothing to scale there): 2 blocks, 0.02 / sqrt(4) (whatever the
# number of branches a block)
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
rows = re.findall(r'\{"([^"]+)", \d, \{[^}]*\}, \d+, \d+, (RT_INIT_\w+), ([-0-9.e]+)f[,}]',
                  open(sys.argv[1]).read())
init = {name: (kind, float(a)) for name, kind, a in rows}
assert len(init) == 35, len(init)
scaled = 0.02 / math.sqrt(4)
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
print("ok   gpt2 init: 4 output projections (before a dropout) at 0.02/sqrt(2 x 2 blocks), "
      "the rest at 0.02, biases 0")
PY
# one branch a block (3 iterations: 0.02 / sqrt(6)); and without a repeat, each
# top-level layer holding a branch is a block (2 of them, and a layer holding none:
# 0.02 / sqrt(4))
stds() {   # stds SPEC: "name=std" of each normal init in the emitted parameter table
    "$TRAINC" emit "$1" -o "$1.emit" >/dev/null
    $PY -c "
import re, sys
for n, k, a in re.findall(r'\{\"([^\"]+)\", \d, \{[^}]*\}, \d+, \d+, (RT_INIT_\w+), ([-0-9.e]+)f[,}]', open(sys.argv[1]).read()):
    print(n, float(a))" "$1.emit/host.c"
}
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def spec(layers):
    return {"trainc": 1, "model": {"name": "g", "init": "gpt2",
            "inputs": {"x": {"shape": [8], "dtype": "i32"}, "y": {"shape": [8], "dtype": "i32", "classes": 16}},
            "layers": [{"op": "embedding", "name": "wte", "vocab": 16, "dim": 16, "input": "x"}] + layers +
                      [{"op": "linear", "name": "head", "out": 16}],
            "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "max_steps": 1}}
branch = lambda n: {"op": "residual", "name": n, "body": [{"op": "layernorm", "name": "ln"},
                                                          {"op": "attention", "name": "attn", "heads": 2}]}
json.dump(spec([{"op": "repeat", "name": "h", "count": 3, "body": [branch("b")]}]), open(d + "/one.json", "w"))
json.dump(spec([branch("a"), {"op": "linear", "name": "mid", "out": 16}, branch("b")]), open(d + "/flat.json", "w"))
PY
for m in one:6 flat:4; do
    stds "$d/${m%:*}.json" > "$d/${m%:*}.stds"
    $PY - "$d/${m%:*}.stds" "${m#*:}" <<'PY'
import math, sys
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
proj = [float(a) for name, a in rows if name.endswith("attn.proj.weight")]
assert proj and all(abs(a - 0.02 / math.sqrt(n)) < 1e-9 for a in proj), (proj, n)
assert all(abs(float(a) - 0.02) < 1e-9 for name, a in rows
           if name.endswith(".weight") and "proj" not in name and ".ln." not in name), rows
print(f"ok   gpt2 init: {len(proj)} output projections at 0.02/sqrt({n}) ({sys.argv[1].split('/')[-1].split('.')[0]})")
PY
done
