"""Finite-difference gradient checks, one small model per op and loss.

Each case is a tiny spec on random f32 data. The trainer's developer option
--gradcheck compares, for every parameter tensor, the analytic directional
derivative <grad, v> along a random unit direction v with the central difference
(L(w + h v) - L(w - h v)) / 2h, h = 1e-2. The kernels run in float32 (the loss is
summed in double), so the difference quotient carries an error of about
eps32 * |L| / h ~ 1e-5, and the truncation error is O(h^2 * |L'''|) ~ 1e-4: a
relative tolerance of 2e-2 (floor 1e-2) leaves a wide margin for those and still
catches any wrong rule (a missing factor or sign gives errors of order 1).
Ops without parameters are checked through the parameters upstream of them.
"""
import json, os, subprocess, sys
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "gradcheck")
os.makedirs(OUT, exist_ok=True)

rng = np.random.default_rng(7)

def data(name, shape, classes=None, target_shape=None, x_vocab=None):
    if x_vocab:
        x = rng.integers(0, x_vocab, size=(16,) + tuple(shape)).astype(np.int32)
    else:
        x = rng.standard_normal((16,) + tuple(shape)).astype(np.float32)
    np.save(os.path.join(OUT, name + "_x.npy"), x)
    if classes:
        y = rng.integers(0, classes, size=(16,) + tuple(target_shape or ())).astype(np.int32)
    else:
        y = rng.standard_normal((16,) + tuple(target_shape)).astype(np.float32)
    np.save(os.path.join(OUT, name + "_y.npy"), y)

def case(name, in_shape, layers, loss="cross_entropy", classes=4, target_shape=(), x_dtype="f32",
         x_vocab=None, init=None):
    data(name, in_shape, classes if loss == "cross_entropy" else None, target_shape, x_vocab)
    y = {"shape": list(target_shape), "dtype": "i32", "classes": classes} if loss == "cross_entropy" \
        else {"shape": list(target_shape), "dtype": "f32"}
    spec = {
        "trainc": 1,
        "model": {"name": "gc_" + name,
                  "inputs": {"x": {"shape": list(in_shape), "dtype": x_dtype}, "y": y},
                  "layers": layers,
                  "loss": {"op": loss, "target": "y"}},
        "train": {"data": {"train": {"x": name + "_x.npy", "y": name + "_y.npy"}},
                  "batch_size": 8, "epochs": 1, "loader": {"shuffle": False, "workers": 0}},
    }
    if init:
        spec["model"]["init"] = init
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return name, path

L = lambda n, **k: dict({"op": "linear", "out": n}, **k)
cases = [
    case("linear", [8], [L(6), L(4)]),
    case("linear_nobias", [8], [L(6, bias=False), L(4)]),
    case("relu", [8], [L(6), {"op": "relu"}, L(4)]),
    case("gelu", [8], [L(6), {"op": "gelu"}, L(4)]),
    case("gelu_tanh", [8], [L(6), {"op": "gelu", "approximate": "tanh"}, L(4)]),
    case("silu", [8], [L(6), {"op": "silu"}, L(4)]),
    case("tanh", [8], [L(6), {"op": "tanh"}, L(4)]),
    case("sigmoid", [8], [L(6), {"op": "sigmoid"}, L(4)]),
    case("dropout", [8], [L(6), {"op": "dropout", "p": 0.3}, L(4)]),
    case("layernorm", [8], [L(6), {"op": "layernorm"}, L(4)]),
    case("layernorm_rank2", [3, 8], [L(6), {"op": "layernorm", "eps": 1e-3}, {"op": "flatten"}, L(4)]),
    case("conv2d", [3, 7, 7], [{"op": "conv2d", "out": 4, "kernel": 3, "stride": 2, "padding": 1},
                               {"op": "conv2d", "out": 2, "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("conv2d_nobias", [2, 5, 5], [{"op": "conv2d", "out": 3, "kernel": 3, "bias": False},
                                      {"op": "tanh"}, {"op": "flatten"}, L(4)]),
    case("maxpool2d", [2, 6, 6], [{"op": "conv2d", "out": 3, "kernel": 3, "padding": 1},
                                  {"op": "maxpool2d", "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("maxpool2d_overlap", [2, 7, 7], [{"op": "conv2d", "out": 3, "kernel": 3},
                                          {"op": "maxpool2d", "kernel": 3, "stride": 2}, {"op": "flatten"}, L(4)]),
    case("avgpool2d", [2, 6, 6], [{"op": "conv2d", "out": 3, "kernel": 3, "padding": 1},
                                  {"op": "avgpool2d", "kernel": 2}, {"op": "flatten"}, L(4)]),
    case("flatten", [2, 3, 3], [{"op": "conv2d", "out": 2, "kernel": 1}, {"op": "flatten"}, L(4)]),
    case("cross_entropy_seq", [5, 8], [L(6), {"op": "relu"}, L(4)], target_shape=(5,)),
    case("mse", [8], [L(6), {"op": "sigmoid"}, L(3)], loss="mse", target_shape=(3,)),
]
# token models: x holds ids in [0, 7), y the next ids
E = lambda **k: dict({"op": "embedding", "name": "wte", "vocab": 7, "dim": 6, "input": "x"}, **k)
tok = lambda name, layers, **k: case(name, [5], layers, classes=7, target_shape=(5,), x_dtype="i32",
                                     x_vocab=7, **k)
cases += [
    tok("embedding", [E(), L(7)]),
    tok("pos_embedding", [E(), {"op": "pos_embedding", "max_len": 8}, L(7)]),
    tok("attention_causal", [E(), {"op": "attention", "heads": 2}, L(7)]),
    tok("attention_full", [E(), {"op": "attention", "heads": 3, "causal": False}, L(7)]),
    # named: unnamed, its tanh would be "2" like the head (an error, SPEC.md section 2)
    tok("residual", [E(), {"op": "residual", "name": "r", "body": [{"op": "layernorm"}, L(6), {"op": "tanh"}]}, L(7)]),
    tok("repeat", [E(), {"op": "repeat", "name": "h", "count": 2,
                         "body": [{"op": "residual", "body": [L(6, name="fc"), {"op": "gelu", "approximate": "tanh"}]}]}, L(7)]),
    tok("tie", [E(), {"op": "layernorm"}, {"op": "linear", "tie": "wte", "bias": False}]),
    tok("gpt_block", [E(), {"op": "pos_embedding", "name": "wpe", "max_len": 5},
                      {"op": "repeat", "name": "h", "count": 2, "body": [
                          {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"}, {"op": "attention", "name": "attn", "heads": 2}]},
                          {"op": "residual", "body": [{"op": "layernorm", "name": "ln_2"}, L(12, name="fc"),
                                                      {"op": "gelu", "approximate": "tanh"}, L(6, name="proj")]}]},
                      {"op": "layernorm", "name": "ln_f"}, {"op": "linear", "tie": "wte", "bias": False}], init="gpt2"),
]
# a vocabulary of 1030 (>= 1024, not a multiple of 64): the logits and their gradient
# are stored with rows 1088 apart (graph.c), which the head's GEMMs and the loss honour
cases.append(case("padded_vocab", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"}, {"op": "layernorm"},
    {"op": "linear", "tie": "wte", "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030))
# and the padded weight tied a second time, in the middle (its GEMMs over the true rows)
cases.append(case("padded_vocab_tied_twice", [5], [
    {"op": "embedding", "name": "wte", "vocab": 1030, "dim": 6, "input": "x"},
    {"op": "linear", "name": "mid", "tie": "wte", "bias": False}, {"op": "gelu"},
    {"op": "linear", "name": "down", "out": 6}, {"op": "layernorm"},
    {"op": "linear", "tie": "wte", "bias": False}], classes=1030, target_shape=(5,), x_dtype="i32",
    x_vocab=1030))

failed = 0
for name, path in cases:
    p = subprocess.run([TRAINC, "run", path, "--gradcheck", "--threads", "1"],
                       capture_output=True, text=True, timeout=120)
    ok = p.returncode == 0 and "gradcheck: ok" in p.stdout
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        failed += 1
        print(p.stdout + p.stderr)
print(f"gradcheck: {len(cases) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
