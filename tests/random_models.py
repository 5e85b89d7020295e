"""Random models against PyTorch (Debian python3-torch, CPU): a differential test of
the compiler's passes (fusion, the memory plan, recomputation) on layer combinations
specs/ does not have.

random_models.py [N [SEED]] [--fake-gpu=K] [--odd]   (default 30 models, seed 1, no GPU)

Each model is drawn from a small grammar over SPEC.md's ops: images (conv2d, pools,
a residual around a shape-keeping conv, flatten, linear), vectors (linear, the five
activations, layernorm, dropout, residuals and repeats (one in another), u8 input
with scale and shift) and sequences (embedding, pos_embedding, repeated pre-norm
attention blocks, causal or not, in about 3 of 5 with some of attention's Llama-family
options (kv_heads, bias false, rope with or without llama3 or longrope scaling, whole or
partial, qk_norm, a window, a scale), a tied or untied classifier; or f32 [T, d] input with an MSE target). Then,
from a generator of its own (so the draws above, and every model of a seed but these
swaps, stay as they were), a layernorm may become an rmsnorm, and an activation after a norm
and a linear a glu (the linear's outputs doubled: gate, then up) or a squared_relu;
from a third, an activation a leaky_relu and a shape-keeping conv2d a conv_transpose2d;
from a fourth, a layernorm may lose its bias, or its weight and bias; from a fifth, the
attention blocks may run their branches in parallel (GPT-NeoX's and Phi's forms: a
residual with a shortcut); from a sixth, an attention's qk_norm may be "all_heads"
(OLMo 2's, with its eps); from a seventh, a sequence model's MLP (its two linears and
the activation between them) may become a mixture of experts (`moe`: 2 to 4 experts,
top 1 to all, renormalized or not, a shared expert gated or not in half of them); from
an eighth, one model in four freezes some of its parameters (`freeze`, never all:
PyTorch's requires_grad_(False), the optimizer and the clipped norm without them); from
a ninth, an image model takes a ResNet's ops (a batchnorm after a conv, with its momentum,
eps or affine off; a conv2d's groups, depthwise or not; a residual whose body changes the
channels beside a projection shortcut, a 1x1 conv2d and a batchnorm), a vector model a
batchnorm after a linear (BatchNorm1d), and a cross entropy of any model label smoothing
(1 in 4); from a tenth, an image model (1 in 3) becomes a vision transformer's form:
`tokens` for its flatten, then learned positions, a pre-norm attention block over all
the tokens and `token_mean` (else a flatten), each in half of them; from an eleventh,
half of those take a class token (`cls_token`) before the tokens, which `first_token`
reads alone in 2 of 3 of them (from a fourteenth, a `token_mean` in four of the others
becomes `last_token`, and a `first_token` in three `cls_mean`; from a seventeenth, half
of those with a class token take 1 to 3 `register_tokens` after it and the positions);
from a twelfth, an image model in four scales and shifts
its input by channel (`scale` and `shift` lists); from a thirteenth, a max pool in three
pads its input; from a fifteenth, a residual around a conv in three becomes ConvNeXt's
block (a depthwise conv2d, `tokens`, layernorm, an MLP, `layer_scale`, `untokens`; in
half of them ConvNeXt V2's `grn` in the MLP instead of `layer_scale`). Batchnorm's running statistics start away from
the defaults (from --init) and are checked after the steps, num_batches_tracked exactly;
validation uses them.
The loss is cross entropy or MSE; the optimizer SGD (momentum,
Nesterov, weight decay) or AdamW; accumulate 1 or 2 (with 3 or 4 batches an epoch, a
step may have one); drop_last on or off (14 rows in batches of 4: the last has 2);
grad_clip off or tight enough to clip (from a sixteenth, 2 in 5 of those by value, some
elements past the bound); recompute none, selective or full; 1 or 2
threads. PyTorch runs the same spec through a small interpreter of
SPEC.md's semantics, from the same initial weights (random, written by this script
and loaded with --init, so the parameter names and shapes are checked too) on the
same batches. Every step's loss and gradient norm must agree within 1e-4 relative,
the validation after the last step (6 rows: batches of 4 and 2) too, its accuracy
but for near ties, and the final weights within 1e-4 of their scale. A token model with
a decode program then samples T tokens with --sample's key/value cache, each token's
logits checked against the window's pass (TRAINC_KV_CACHE=check). Every fifth model also runs under all
three recompute policies, which must give the same numbers bit for bit, and every fifth
from the third on is stopped after its first step (a checkpoint there) and resumed with
--resume: the straight run's records and model.safetensors byte for byte. Dropout is at
p 0, which PyTorch follows, but in about one model in seven at p 0.25: its masks are
trainc's own, so such a model is compared only with itself under the
three policies (the masks made again alike) and on the fake GPU. With
RANDOM_MODELS_ASAN=TRAINC every third model also goes through that sanitized trainc
(check, plan, emit) and a sanitized build of its trainer. With
--fake-gpu=K the first K are also built with --device both, their kernels compiled
for sm_90a by the fake NVRTC (and by real NVRTC's fast compile, tests/nvrtc_check.c,
which must take them without a warning), and trained on the fake GPU (tests/fake_gpu/:
the generated CUDA kernels run in the emulator): fp32 within 1e-5 of the CPU's
records, and every other one in bf16-mixed (one in four of the rest in fp16-mixed, with
loss scaling) within 5e-2 (losses) and 1e-1 (gradient norms) of them; a token model
with a decode program samples with its key/value cache on the fake GPU too (fp32, under
the same check as on the CPU). With --odd the widths, sequence lengths, heads and
vocabularies are drawn from sizes at the GPU kernels' edges instead (widths 1, 2, 5,
33, 100, 129: no whole 16-byte vectors; T 1, 2, 17, 65: partial attention tiles; heads
8 to 72 wide, 16 and 72 on the 16-bit tensor-core kernels; vocabularies of 2, 257
and 1031: logits rows padded; 33 conv channels, 257 classes).
"""
import json, math, os, re, struct, subprocess, sys, zlib
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_ref
import llama_torch   # its longrope attention factor
import st_check   # safetensors read and written by hand
import run_log   # a run's metrics.jsonl: one train record a step (log_every 1)
import random_runs   # the cases' loop, a trainc run, the resume check, the fake GPU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
args = [a for a in sys.argv[1:] if not a.startswith("--fake-gpu=") and a != "--odd"]
# --odd: sizes at the kernels' edges (above)
ODD = "--odd" in sys.argv[1:]
ODD_WIDTHS = [1, 2, 5, 33, 100, 129]
N_MODELS = int(args[0]) if len(args) > 0 else 30
SEED = int(args[1]) if len(args) > 1 else 1
OUT = os.path.join(ROOT, "build", "tests", "random_models", "seed%d%s" % (SEED, "_odd" if ODD else ""))
# --fake-gpu=K: the first K models also built with --device both and trained on the
# fake GPU (tests/fake_gpu/: the generated CUDA kernels in the emulator), in fp32
# against the CPU run, and every other one in bf16-mixed too
FAKE_GPU = max([int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("--fake-gpu=")] + [0])
FAKE_LIB = os.environ.get("FAKE_GPU_LIB") or os.path.join(OUT, "fake_lib")   # (run_all.sh's shared build)
NVRTC_CHECK = os.path.join(OUT, "nvrtc_check")
# RANDOM_MODELS_ASAN=TRAINC (trainc built with AddressSanitizer + UBSan, as make test's
# asan/build makes it): every third model also goes through its check, plan and emit
# (emit's bytes the same as the plain trainc's), and is built with the sanitizers
# (TRAINC_CFLAGS) into a trainer whose run must give the JIT run's records
ASAN = os.environ.get("RANDOM_MODELS_ASAN")
SAN = "-fsanitize=address,undefined -fno-sanitize-recover=undefined"
ROWS, B = 14, 4
VAL_ROWS = 6          # validation: a batch of 4, then one of 2
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)   # the reference in double: its rounding is not in the way

ACTS = ["relu", "gelu", "silu", "tanh", "sigmoid"]


def act(r):
    a = {"op": ACTS[r.integers(len(ACTS))]}
    if a["op"] == "gelu" and r.random() < 0.5:
        a["approximate"] = "tanh"
    return a


def image_model(r):
    C, H = int(r.integers(1, 4)), int(r.integers(6, 9))
    layers, shape = [], [C, H, H]
    for _ in range(int(r.integers(1, 3))):
        k = int(r.integers(1, min(3, shape[1]) + 1))   # <= the input, padded or not
        p = int(r.integers(0, min(k, 2)))
        s = 2 if shape[1] >= 6 and r.random() < 0.3 else 1
        out = int(r.choice([1, 3, 7, 33])) if ODD else int(r.integers(2, 6))
        conv = {"op": "conv2d", "out": out, "kernel": k, "padding": p}
        if s != 1:
            conv["stride"] = s
        if r.random() < 0.3:
            conv["bias"] = False
        layers += [conv, act(r)]
        if r.random() < 0.15:
            layers.append({"op": "dropout", "p": 0.25})
        hw = (shape[1] + 2 * p - k) // s + 1
        shape = [out, hw, hw]
        if r.random() < 0.4:   # a residual around a conv that keeps the shape
            body = [{"op": "conv2d", "out": out, "kernel": 3, "padding": 1}, act(r)]
            # named: unnamed, its conv would be "0" like the first layer (an error)
            layers.append({"op": "residual", "name": "res%d" % len(layers), "body": body})
        if shape[1] >= 4 and r.random() < 0.6:
            pk = 3 if r.random() < 0.25 else 2
            ps = pk if r.random() < 0.6 else 1
            pool = {"op": "maxpool2d" if r.random() < 0.5 else "avgpool2d", "kernel": pk}
            if ps != pk:
                pool["stride"] = ps
            layers.append(pool)
            hw = (shape[1] - pk) // ps + 1
            shape = [out, hw, hw]
    layers.append({"op": "flatten"})
    if r.random() < 0.5:
        layers += [{"op": "linear", "out": int(r.integers(4, 12))}, act(r)]
    x = {"shape": [C, H, H], "dtype": "f32"}
    return x, layers, None


def vector_model(r):
    D = int(r.choice(ODD_WIDTHS)) if ODD else int(r.integers(3, 12))
    x = {"shape": [D], "dtype": "f32"}
    if r.random() < 0.3:
        x = {"shape": [D], "dtype": "u8", "scale": 1.0 / 255, "shift": -0.5}
    layers, d = [], D
    for _ in range(int(r.integers(1, 4))):
        c = r.random()
        if c < 0.35:
            d = int(r.choice(ODD_WIDTHS)) if ODD else int(r.integers(3, 12))
            lin = {"op": "linear", "out": d}
            if r.random() < 0.2:
                lin["bias"] = False
            layers += [lin, act(r)]
        elif c < 0.5:
            ln = {"op": "layernorm"}
            if r.random() < 0.3:
                ln["eps"] = 1e-3
            layers.append(ln)
        elif c < 0.6:
            # p 0 mostly (PyTorch can follow it); p 0.25 in one model of four or so: its
            # masks are trainc's own, so only the devices and policies are compared
            layers.append({"op": "dropout", "p": 0.25 if r.random() < 0.5 else 0.0})
        else:
            body = [{"op": "linear", "out": d}, act(r), {"op": "linear", "out": d}]
            if r.random() < 0.5:
                body.insert(0, {"op": "layernorm", "name": "ln"})
                body[1]["name"], body[3]["name"] = "fc", "proj"
            block = {"op": "residual", "body": body}
            if r.random() < 0.5:
                rep = {"op": "repeat", "count": int(r.integers(2, 4)), "body": [block]}
                if r.random() < 0.3:   # a repeat in a repeat, the inner one unnamed
                    rep = {"op": "repeat", "count": 2, "body": [rep, {"op": "layernorm"}]}
                rep["name"] = "h%d" % len(layers)
                layers.append(rep)
            else:
                block["name"] = "r%d" % len(layers)
                layers.append(block)
    return x, layers, None


def attention_options(att, T, d, heads, causal, V, tokens):
    """Attention's Llama-family options, drawn for about 3 models in 5 from a generator of
    their own (seeded by the model's shape), so the other draws, and the models without
    options, stay what they were."""
    o = np.random.default_rng(zlib.crc32(json.dumps([T, d, heads, causal, V, tokens, ODD]).encode()))
    if o.random() < 0.4:
        return
    hd = d // heads
    if heads > 1 and o.random() < 0.5:
        att["kv_heads"] = int(o.choice([k for k in range(1, heads) if heads % k == 0]))
    if o.random() < 0.4:
        att["bias"] = False
    if hd % 2 == 0 and o.random() < 0.5:
        att["rope"] = {"theta": float(o.choice([10000.0, 500000.0]))}
        if o.random() < 0.5:
            att["rope"]["scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": int(o.choice([2, 4, 16]))}
    if o.random() < 0.4:
        att["qk_norm"] = True
    if causal and o.random() < 0.4:
        att["window"] = int(o.integers(1, T + 1))
    if o.random() < 0.3:   # drawn last: the draws before stay what they were
        att["scale"] = float(o.choice([0.3, 1.0]))
    if att.get("rope") and "scaling" not in att["rope"] and o.random() < 0.3:   # after them all
        n = hd // 2   # longrope: its divisors, the long ones past the original context
        att["rope"]["scaling"] = {
            "rope_type": "longrope", "short_factor": [float(x) for x in 1 + o.random(n)],
            "long_factor": [float(x) for x in 1 + 8 * o.random(n)],
            "factor": float(o.choice([1.0, 4.0])),
            "original_max_position_embeddings": int(o.choice([2, 16]))}
    rope = att.get("rope")
    if rope and hd >= 4 and "longrope" not in str(rope) and o.random() < 0.3:   # after longrope
        rope["dims"] = int(o.choice(range(2, hd, 2)))   # a partial rope


def sequence_model(r):
    T, d = int(r.integers(3, 9)), int(r.choice([4, 6, 8]))
    heads = int(r.choice([h for h in (1, 2, 4) if d % h == 0]))
    V = int(r.integers(5, 12))
    if ODD:
        T, heads = int(r.choice([1, 2, 17, 65])), int(r.choice([1, 2]))
        d, V = heads * int(r.choice([8, 16, 24, 40, 72])), int(r.choice([2, 257, 1031]))
    tokens = r.random() < 0.7
    layers = []
    if tokens:
        x = {"shape": [T], "dtype": "i32"}
        layers.append({"op": "embedding", "name": "wte", "vocab": V, "dim": d, "input": "x"})
        if r.random() < 0.7:
            layers.append({"op": "pos_embedding", "name": "wpe", "max_len": T + int(r.integers(0, 3))})
    else:
        x = {"shape": [T, d], "dtype": "f32"}
    causal = bool(r.random() < 0.7)
    att = {"op": "attention", "name": "attn", "heads": heads}
    if not causal or r.random() < 0.3:
        att["causal"] = causal
    attention_options(att, T, d, heads, causal, V, tokens)
    block = [{"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"}, att]},
             {"op": "residual", "body": [{"op": "layernorm", "name": "ln_2"},
                                         {"op": "linear", "name": "fc", "out": 2 * d}, act(r),
                                         {"op": "linear", "name": "proj", "out": d}]}]
    layers.append({"op": "repeat", "name": "h", "count": int(r.integers(1, 3)), "body": block})
    layers.append({"op": "layernorm", "name": "ln_f"})
    if tokens and r.random() < 0.5:
        layers.append({"op": "linear", "name": "head", "tie": "wte", "bias": False})
        return x, layers, ("ce", V, [T])
    if tokens or r.random() < 0.5:
        layers.append({"op": "linear", "name": "head", "out": V})
        return x, layers, ("ce", V, [T])
    k = int(r.integers(1, 4))
    layers.append({"op": "linear", "name": "head", "out": k})
    return x, layers, ("mse", k, [T, k])


GLU_ACTS = ["silu", "gelu", "gelu_tanh", "sigmoid", "relu"]


def llama_swaps(r2, layers):
    """rmsnorm for layernorm (1 in 3), glu (1 in 4) or squared_relu (1 in 10) for an
    activation right after a norm and a linear of its own width (both quadratic in
    their input: unnormalized, repeated residual blocks of them diverge at SGD's rate),
    in place, through containers."""
    for k, l in enumerate(layers):
        if "body" in l:
            llama_swaps(r2, l["body"])
        elif l["op"] == "layernorm" and r2.random() < 1 / 3:
            l["op"] = "rmsnorm"
        elif l["op"] in ACTS and k > 1 and layers[k - 1]["op"] == "linear" and "out" in layers[k - 1] \
                and layers[k - 2]["op"] in ("layernorm", "rmsnorm"):
            c = r2.random()
            if c < 0.25:
                layers[k - 1]["out"] *= 2
                layers[k] = {"op": "glu"}
                if r2.random() < 0.7:
                    layers[k]["act"] = GLU_ACTS[r2.integers(len(GLU_ACTS))]
            elif c < 0.35:
                layers[k] = {"op": "squared_relu"}


def bare_norms(r3, layers):
    """A layernorm without its bias (1 in 10) or without weight and bias (1 in 10), in
    place, through containers."""
    for l in layers:
        if "body" in l:
            bare_norms(r3, l["body"])
        elif l["op"] == "layernorm" and r3.random() < 0.2:
            l[["bias", "affine"][int(r3.integers(2))]] = False


def block_forms(r4, layers):
    """A sequence model's blocks in parallel (1 in 3): GPT-NeoX's, the MLP's residual
    with the attention's as its shortcut; or (1 in 6) off one norm, Phi's: the norm,
    then a residual of the MLP with the attention as its shortcut."""
    for l in layers:
        b = l.get("body", [])
        if l["op"] != "repeat" or len(b) != 2 or b[0]["body"][-1]["op"] != "attention":
            continue
        c = r4.random()
        if c < 1 / 3:
            l["body"] = [dict(b[1], shortcut=[b[0]])]
        elif c < 1 / 2:
            mlp = {"op": "residual", "body": b[1]["body"][1:], "shortcut": [b[0]["body"][1]]}
            l["body"] = [{"op": "residual", "body": [b[0]["body"][0], mlp]}]


def all_heads_norms(r5, layers):
    """An attention's qk_norm made OLMo 2's (1 in 3 of those with one): one RMSNorm over
    all of q's heads and one over all of k's, half of them with eps 1e-5, in place,
    through containers."""
    for l in layers:
        if "body" in l or "shortcut" in l:
            all_heads_norms(r5, l.get("body", []) + l.get("shortcut", []))
        elif l["op"] == "attention" and l.get("qk_norm") and r5.random() < 1 / 3:
            l["qk_norm"] = "all_heads"
            if r5.random() < 0.5:
                l["eps"] = 1e-5


def moe_swaps(r6, layers):
    """A block's MLP (fc, its activation, proj) made a mixture of experts (1 in 3): 2 to
    4 experts of 3, 5 or 8 hidden, each token's top 1 to all of them, renormalized or
    not, a glu activation of its own in half of them, a shared expert 2 or 4 wide (gated
    or not) in half; in place, through containers."""
    for l in layers:
        for inner in ("body", "shortcut"):
            if inner in l:
                moe_swaps(r6, l[inner])
    for k in range(len(layers) - 2):
        if layers[k].get("name") == "fc" and layers[k + 2].get("name") == "proj" and r6.random() < 1 / 3:
            E = int(r6.integers(2, 5))
            moe = {"op": "moe", "name": "moe", "experts": E, "top_k": int(r6.integers(1, E + 1)),
                   "hidden": int(r6.choice([3, 5, 8]))}
            if r6.random() < 0.5:
                moe["norm_topk"] = False
            if r6.random() < 0.5:
                moe["act"] = GLU_ACTS[r6.integers(len(GLU_ACTS))]
            if r6.random() < 0.5:
                moe["shared"] = int(r6.choice([2, 4]))
                moe["shared_gate"] = bool(r6.random() < 0.5)
            layers[k:k + 3] = [moe]
            return


def gan_swaps(r2, layers):
    """A DCGAN's ops, in place, through containers: leaky_relu (1 in 5, half of them at
    slope 0.2) for an activation; conv_transpose2d (1 in 3) for a conv2d of stride 1
    that keeps the shape (kernel 2 padding + 1: the transposed one keeps it too)."""
    for k, l in enumerate(layers):
        if "body" in l:
            gan_swaps(r2, l["body"])
        elif l["op"] in ACTS and r2.random() < 0.2:
            layers[k] = {"op": "leaky_relu"}
            if r2.random() < 0.5:
                layers[k]["negative_slope"] = 0.2
        elif l["op"] == "conv2d" and l.get("stride", 1) == 1 and l["kernel"] == 2 * l.get("padding", 0) + 1 \
                and r2.random() < 1 / 3:
            l["op"] = "conv_transpose2d"


def cnn_swaps(r9, layers, C):
    """A ResNet's ops in an image model, in place, through residuals (a ninth generator's,
    from a model's input channels C; returns the channels after the layers): a batchnorm
    after a conv (1 in 3: momentum 0.3 or the default, eps 1e-3 or the default, without
    affine 1 in 5); a conv2d's groups (1 in 3 of those whose channels share a divisor:
    depthwise where out equals in, 1 in 2 of those); a residual's body made to change the
    channels with a projection shortcut (1 in 3: a 1x1 conv2d, a batchnorm after it in
    half)."""
    out = []
    for l in layers:
        out.append(l)
        if l["op"] == "flatten":
            out += layers[len(out):]
            break
        if l["op"] == "residual":
            cin = C
            if r9.random() < 1 / 3:
                cn = cin + int(r9.integers(1, 4))
                l["body"][0]["out"] = cn
                l["shortcut"] = [{"op": "conv2d", "out": cn, "kernel": 1}]
                if r9.random() < 0.5:
                    l["shortcut"].append({"op": "batchnorm"})
            C = cnn_swaps(r9, l["body"], cin)
        elif l["op"] in ("conv2d", "conv_transpose2d"):
            if l["op"] == "conv2d":
                divs = [g for g in range(2, min(C, l["out"]) + 1) if C % g == 0 and l["out"] % g == 0]
                if divs and r9.random() < 1 / 3:
                    depthwise = C == l["out"] and r9.random() < 0.5
                    l["groups"] = C if depthwise else int(r9.choice(divs))
            C = l["out"]
            if r9.random() < 1 / 3:
                bn = {"op": "batchnorm"}
                if r9.random() < 0.5:
                    bn["momentum"] = 0.3
                if r9.random() < 0.5:
                    bn["eps"] = 1e-3
                if r9.random() < 0.2:
                    bn["affine"] = False
                out.append(bn)
    layers[:] = out
    return C


def vector_batchnorms(r9, layers):
    """BatchNorm1d over a vector model's features: a batchnorm after a top-level linear (1
    in 4, its momentum 0.3 in half), in place (the ninth generator's)."""
    out = []
    for l in layers:
        out.append(l)
        if l["op"] == "linear" and r9.random() < 0.25:
            out.append({"op": "batchnorm", "momentum": 0.3} if r9.random() < 0.5 else {"op": "batchnorm"})
    layers[:] = out


def side_after(layers, H):
    """the side of an image model's maps after LAYERS from images of side H (a residual
    keeps it)"""
    for l in layers:
        kk, st, pad = l.get("kernel", 1), l.get("stride", l.get("kernel", 1) if "pool" in l["op"] else 1), \
            l.get("padding", 0)
        if l["op"] == "conv_transpose2d":
            H = (H - 1) * st - 2 * pad + kk + l.get("output_padding", 0)
        elif l["op"] in ("conv2d", "maxpool2d", "avgpool2d"):
            H = (H + 2 * pad - kk) // st + 1
    return H


def convnext_swaps(r15, layers, H):
    """A fifteenth generator's: a residual around a shape-keeping conv without a shortcut
    (1 in 3, in place) becomes ConvNeXt's block: a depthwise conv2d, `tokens`, a
    layernorm, a linear to twice the channels, gelu, a linear back, `layer_scale`,
    `untokens` to the map's height; in half of them ConvNeXt V2's: a `grn` after the gelu
    and no layer_scale"""
    for k, l in enumerate(layers):
        if l["op"] == "flatten":
            return
        if l["op"] != "residual" or "shortcut" in l or r15.random() >= 1 / 3:
            continue
        C = l["body"][0]["out"]
        v2 = r15.random() < 0.5
        l["body"] = [{"op": "conv2d", "out": C, "kernel": 3, "padding": 1, "groups": C},
                     {"op": "tokens"}, {"op": "layernorm", "eps": 1e-6},
                     {"op": "linear", "out": 2 * C}, {"op": "gelu"}] + \
            ([{"op": "grn"}] if v2 else []) + [{"op": "linear", "out": C}] + \
            ([] if v2 else [{"op": "layer_scale", "init_value": 0.5}]) + \
            [{"op": "untokens", "height": side_after(layers[:k], H)}]


def vit_swaps(r10, r11, r14, r17, layers, C, H):
    """A vision transformer's ops in an image model (a tenth generator's, 1 in 3, in place,
    given the channels C at its flatten (cnn_swaps') and the input's side H): its flatten becomes `tokens` (each position a token of
    its channels), then in turn, each in half of them, learned positions (max_len past
    the tokens 1 in 2), a pre-norm attention block over all the tokens (heads 1, or 2
    where the channels are even) and `token_mean` (else a flatten of the tokens).
    An eleventh's (r11), in half of those: a class token before the tokens (before the
    positions, which count it), read alone by `first_token` in 2 of 3 of them. A
    fourteenth's (r14): a `token_mean` in four becomes `last_token` (the last token's row
    alone), and a `first_token` in three `cls_mean` (the class token beside the others'
    mean). A seventeenth's (r17), in half of those with a class token: 1 to 3 registers
    after it and the positions (`register_tokens`, DINOv2 with registers')."""
    if r10.random() >= 1 / 3:
        return
    cls = r11.random() < 0.5
    k = next(k for k, l in enumerate(layers) if l["op"] == "flatten")
    H = side_after(layers[:k], H)
    vit = [{"op": "tokens"}] + ([{"op": "cls_token", "name": "cls%d" % k}] if cls else [])
    if r10.random() < 0.5:
        vit.append({"op": "pos_embedding", "max_len": H * H + cls + (2 if r10.random() < 0.5 else 0)})
    if r10.random() < 0.5:
        heads = 2 if C % 2 == 0 and r10.random() < 0.5 else 1
        vit.append({"op": "residual", "name": "vit%d" % k,
                    "body": [{"op": "layernorm"}, {"op": "attention", "heads": heads, "causal": False}]})
    vit.append({"op": "token_mean"} if r10.random() < 0.5 else {"op": "flatten"})
    if cls and r17.random() < 0.5:
        at = 3 if vit[2]["op"] == "pos_embedding" else 2
        vit.insert(at, {"op": "register_tokens", "count": int(r17.integers(1, 4)), "name": "reg%d" % k})
    if cls and r11.random() < 2 / 3:   # (1 in 3 of them DINOv2's head: cls_mean)
        vit[-1] = {"op": "cls_mean"} if r14.random() < 1 / 3 else {"op": "first_token"}
    elif vit[-1]["op"] == "token_mean" and r14.random() < 1 / 4:
        vit[-1] = {"op": "last_token"}
    layers[k:k + 1] = vit


def pool_padding(r13, layers):
    """a thirteenth generator's: a max pool (1 in 3) pads its input by up to half its kernel
    (a ResNet's stem: 3, stride 2, padding 1)"""
    for l in layers:
        if l["op"] == "maxpool2d" and r13.random() < 1 / 3:
            l["padding"] = int(r13.integers(1, l["kernel"] // 2 + 1))


def pixels_by_channel(r12, x):
    """a twelfth generator's: an image model (1 in 4) scales and shifts its input by
    channel (the input's scale and shift as lists, ImageNet's normalization's form; on
    its f32 images, so that the data drawn stay as they were)"""
    if r12.random() >= 0.25:
        return
    C = x["shape"][0]
    x.update(scale=[float(v) for v in r12.uniform(0.8, 1.25, C)],
             shift=[float(v) for v in r12.uniform(-0.2, 0.2, C)])


def freeze_draw(r8, names):
    """an eighth generator's: in one model in four, some of its parameters (never all)
    for train.freeze, by name; else none"""
    if len(names) < 2 or r8.random() >= 0.25:
        return []
    k = int(r8.integers(1, len(names)))
    return sorted(str(n) for n in r8.choice(names, size=k, replace=False))


def draw(r, i):
    kind = ["image", "vector", "sequence"][i % 3]
    x, layers, loss = {"image": image_model, "vector": vector_model, "sequence": sequence_model}[kind](r)
    llama_swaps(np.random.default_rng([SEED, i]), layers)
    gan_swaps(np.random.default_rng([SEED, i, 2]), layers)
    bare_norms(np.random.default_rng([SEED, i, 3]), layers)
    block_forms(np.random.default_rng([SEED, i, 4]), layers)
    all_heads_norms(np.random.default_rng([SEED, i, 5]), layers)
    moe_swaps(np.random.default_rng([SEED, i, 6]), layers)
    r9 = np.random.default_rng([SEED, i, 9])
    if kind == "image":
        pool_padding(np.random.default_rng([SEED, i, 13]), layers)
        pixels_by_channel(np.random.default_rng([SEED, i, 12]), x)
        C = cnn_swaps(r9, layers, x["shape"][0])
        convnext_swaps(np.random.default_rng([SEED, i, 15]), layers, x["shape"][1])
        vit_swaps(np.random.default_rng([SEED, i, 10]), np.random.default_rng([SEED, i, 11]),
                  np.random.default_rng([SEED, i, 14]), np.random.default_rng([SEED, i, 17]), layers,
                  C, x["shape"][1])
    elif kind == "vector":
        vector_batchnorms(r9, layers)
    if loss is None:
        k = int(r.choice([2, 3, 257])) if ODD else int(r.integers(2, 7))
        if r.random() < 0.6:
            loss = ("ce", k, [])
        else:
            loss = ("mse", k, [k])
        layers.append({"op": "linear", "out": k})
    lk, k, tshape = loss
    y = {"shape": tshape, "dtype": "i32", "classes": k} if lk == "ce" else {"shape": tshape, "dtype": "f32"}
    model = {"name": "rnd%d" % i, "inputs": {"x": x, "y": y}, "layers": layers,
             "loss": {"op": "cross_entropy" if lk == "ce" else "mse", "target": "y"}}
    if lk == "ce" and r9.random() < 0.25:
        model["loss"]["label_smoothing"] = float(r9.choice([0.1, 0.3]))
    if r.random() < 0.5:
        opt = {"type": "sgd", "lr": 0.05}
        if r.random() < 0.6:
            opt["momentum"] = 0.9
            if r.random() < 0.4:
                opt["nesterov"] = True
        if r.random() < 0.5:
            opt["weight_decay"] = 0.01
    else:
        # eps 1e-3: AdamW divides by |g| + eps, so at eps 1e-8 a gradient that is rounding
        # noise on both sides (a cancellation) would move a weight by the whole lr
        opt = {"type": "adamw", "lr": 0.01, "eps": 1e-3, "weight_decay": 0.05}
    train = {"data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "xv.npy", "y": "yv.npy"}},
             "validate": {"every_epochs": 1}, "batch_size": B, "epochs": 1,
             "optimizer": opt, "schedule": {"type": "constant"},
             "accumulate": int(r.choice([1, 2])), "recompute": str(r.choice(["none", "selective", "full"])),
             "loader": {"shuffle": False, "workers": 0, "drop_last": bool(r.random() < 0.5)},
             "log_every": 1, "seed": 5}
    if r.random() < 0.5:
        train["grad_clip"] = 0.1
        if np.random.default_rng([SEED, i, 16]).random() < 0.4:   # clip_grad_value_
            train["grad_clip"], train["grad_clip_algorithm"] = 0.005, "value"
    return kind, {"trainc": 1, "model": model, "train": train}


# ---- the reference: SPEC.md's semantics, parameters created as they are first used ----

def reference(model, P, xin, S=None, mode="init"):
    """The model's output for xin. Batchnorm's running statistics are S's (made on first
    use, away from the defaults: the trainer reads them from --init): mode "train"
    normalizes with the batch's statistics and updates them, "eval" uses them, "init"
    (the first pass, which makes the parameters) normalizes as "train" and leaves them."""
    def running(name, C):
        if name + ".running_mean" not in S:
            g = np.random.default_rng(zlib.crc32((name + ".running").encode()))
            for k, v in (("running_mean", g.uniform(-0.2, 0.2, C)), ("running_var", g.uniform(0.5, 1.5, C))):
                S[name + "." + k] = torch.tensor(v.astype(np.float32).astype(np.float64))
            S[name + ".num_batches_tracked"] = torch.tensor(3, dtype=torch.int64)
        return S[name + ".running_mean"], S[name + ".running_var"]

    def param(name, shape, kind):
        if name not in P:
            g = np.random.default_rng(zlib.crc32(name.encode()))
            if kind == "w":
                v = g.standard_normal(shape) / math.sqrt(max(1, int(np.prod(shape[1:]))))
            elif kind == "ew":   # an expert's weight: [E, out, in]
                v = g.standard_normal(shape) / math.sqrt(shape[-1])
            elif kind == "emb":
                v = g.standard_normal(shape) * 0.5
            elif kind == "lnw":
                v = 1.0 + 0.1 * g.standard_normal(shape)
            else:
                v = 0.1 * g.standard_normal(shape)
            # the values the trainer will hold: float32, read back as doubles
            P[name] = torch.tensor(v.astype(np.float32).astype(np.float64), requires_grad=True)
        return P[name]

    def run(layers, x, prefix):
        for i, l in enumerate(layers):
            op = l["op"]
            pfx = prefix + (l.get("name") or str(i))
            if op == "linear":
                if "tie" in l:
                    w = P[l["tie"] + ".weight"]
                else:
                    w = param(pfx + ".weight", (l["out"], x.shape[-1]), "w")
                x = x @ w.t()
                if l.get("bias", "tie" not in l):
                    x = x + param(pfx + ".bias", (w.shape[0],), "b")
            elif op == "conv2d":
                k, g = l["kernel"], l.get("groups", 1)
                w = param(pfx + ".weight", (l["out"], x.shape[1] // g, k, k), "w")
                b = param(pfx + ".bias", (l["out"],), "b") if l.get("bias", True) else None
                x = F.conv2d(x, w, b, l.get("stride", 1), l.get("padding", 0), 1, g)
            elif op == "conv_transpose2d":
                k = l["kernel"]
                w = param(pfx + ".weight", (x.shape[1], l["out"], k, k), "w")
                b = param(pfx + ".bias", (l["out"],), "b") if l.get("bias", True) else None
                x = F.conv_transpose2d(x, w, b, l.get("stride", 1), l.get("padding", 0),
                                       l.get("output_padding", 0))
            elif op == "batchnorm":   # the channel is axis 1 of [B, C, ...]
                C = x.shape[1]
                aff = l.get("affine", True)
                w = param(pfx + ".weight", (C,), "lnw") if aff else None
                b = param(pfx + ".bias", (C,), "b") if aff else None
                rm, rv = running(pfx, C)
                if mode == "init":
                    rm, rv = rm.clone(), rv.clone()
                elif mode == "train":
                    S[pfx + ".num_batches_tracked"] += 1
                x = F.batch_norm(x, rm, rv, w, b, mode != "eval", l.get("momentum", 0.1), l.get("eps", 1e-5))
            elif op == "leaky_relu":
                x = F.leaky_relu(x, l.get("negative_slope", 0.01))
            elif op in ("maxpool2d", "avgpool2d"):
                f = F.max_pool2d if op == "maxpool2d" else F.avg_pool2d
                x = f(x, l["kernel"], l.get("stride", l["kernel"]), l.get("padding", 0))
            elif op == "flatten":
                x = x.flatten(1)
            elif op == "tokens":   # [B, C, H, W] or [B, C, L] -> [B, HW, C]
                x = x.flatten(2).transpose(1, 2)
            elif op == "token_mean":
                x = x.mean(1)
            elif op == "untokens":   # [B, HW, C] -> [B, C, H, W]
                x = x.transpose(1, 2).reshape(x.shape[0], x.shape[2], l["height"], -1)
            elif op == "layer_scale":
                x = x * param(pfx + ".weight", (x.shape[-1],), "lnw")
            elif op == "grn":   # [B, T, C]: each channel's norm over the rows
                w, b = param(pfx + ".weight", (x.shape[-1],), "lnw"), param(pfx + ".bias", (x.shape[-1],), "b")
                g = x.norm(dim=1, keepdim=True)
                x = w * (x * (g / (g.mean(dim=-1, keepdim=True) + 1e-6))) + b + x
            elif op == "cls_token":   # [B, T, d] -> [B, T + 1, d]
                w = param(pfx + ".weight", (x.shape[-1],), "emb")
                x = torch.cat([w.expand(x.shape[0], 1, -1), x], 1)
            elif op == "register_tokens":   # [B, T, d] -> [B, T + count, d], after the first
                w = param(pfx + ".weight", (l["count"], x.shape[-1]), "emb")
                x = torch.cat([x[:, :1], w.expand(x.shape[0], -1, -1), x[:, 1:]], 1)
            elif op == "first_token":
                x = x[:, 0]
            elif op == "cls_mean":   # the first row, then the others' mean
                x = torch.cat([x[:, 0], x[:, 1:].mean(1)], 1)
            elif op == "last_token":   # each of `segments` equal runs' last row
                k = l.get("segments", 1)
                x = x[:, x.shape[1] // k - 1::x.shape[1] // k] if k > 1 else x[:, -1]
            elif op == "relu":
                x = F.relu(x)
            elif op == "gelu":
                x = F.gelu(x, approximate=l.get("approximate", "none"))
            elif op == "silu":
                x = F.silu(x)
            elif op == "tanh":
                x = torch.tanh(x)
            elif op == "sigmoid":
                x = torch.sigmoid(x)
            elif op == "squared_relu":
                x = F.relu(x) ** 2
            elif op == "glu":
                x = glu(x, l.get("act", "silu"))
            elif op == "moe":
                x = llama_torch.moe(l, x, param, pfx)
            elif op == "dropout":
                pass   # p 0; a model with p > 0 is not compared with this reference
            elif op == "layernorm":   # bias false: the weight alone; affine false: neither
                d = x.shape[-1]
                aff = l.get("affine", True)
                w = param(pfx + ".weight", (d,), "lnw") if aff else None
                b = param(pfx + ".bias", (d,), "b") if aff and l.get("bias", True) else None
                x = F.layer_norm(x, (d,), w, b, l.get("eps", 1e-5))
            elif op == "rmsnorm":
                d = x.shape[-1]
                w = param(pfx + ".weight", (d,), "lnw")
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + l.get("eps", 1e-6)) * w
            elif op == "embedding":
                x = param(pfx + ".weight", (l["vocab"], l["dim"]), "emb")[xin.long()]
            elif op == "pos_embedding":
                w = param(pfx + ".weight", (l["max_len"], x.shape[-1]), "emb")
                x = x + w[: x.shape[1]]
            elif op == "attention" and set(l) & {"kv_heads", "bias", "rope", "qk_norm", "window",
                                                 "scale"}:
                x = attention_with_options(l, x, pfx, param)
            elif op == "attention":
                b_, t, d = x.shape
                H = l["heads"]
                wq = param(pfx + ".qkv.weight", (3 * d, d), "w")
                bq = param(pfx + ".qkv.bias", (3 * d,), "b")
                q, k, v = (x @ wq.t() + bq).split(d, dim=2)
                q, k, v = (z.reshape(b_, t, H, d // H).transpose(1, 2) for z in (q, k, v))
                s = (q @ k.transpose(-2, -1)) / math.sqrt(d // H)
                if l.get("causal", True):
                    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
                y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b_, t, d)
                x = y @ param(pfx + ".proj.weight", (d, d), "w").t() + param(pfx + ".proj.bias", (d,), "b")
            elif op == "residual":   # x, or shortcut(x), plus body(x)
                inner = pfx + "." if "name" in l else prefix
                base = run(l["shortcut"], x, inner + "shortcut.") if "shortcut" in l else x
                x = base + run(l["body"], x, inner)
            elif op == "repeat":
                for it in range(l["count"]):
                    x = run(l["body"], x, ("%s.%d." % (pfx, it)) if "name" in l else "%s%d." % (prefix, it))
            else:
                raise SystemExit("random_models: op " + op)
        return x

    return run(model["layers"], xin, "")


def glu(x, a):
    h = x.shape[-1] // 2
    g = F.gelu(x[..., :h], approximate="tanh") if a == "gelu_tanh" else \
        {"silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid, "relu": F.relu}[a](x[..., :h])
    return g * x[..., h:]


def attention_with_options(l, x, pfx, param):
    """attention with kv_heads, bias, rope, qk_norm, window or scale: tests/attention_ref.py's
    core, written from SPEC.md, between the qkv and output projections."""
    b_, t, d = x.shape
    H = l["heads"]
    KV, hd, bias = l.get("kv_heads", H), d // H, l.get("bias", True)
    wq = param(pfx + ".qkv.weight", ((H + 2 * KV) * hd, d), "w")
    qkv = x @ wq.t() + (param(pfx + ".qkv.bias", ((H + 2 * KV) * hd,), "b") if bias else 0)
    qn = kn = None
    if l.get("qk_norm") == "all_heads":   # SPEC: over all of q's heads, all of k's, before rope
        eps = l.get("eps", 1e-6)
        cols = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        qkv = torch.cat([llama_torch.rmsnorm(cols[0], param(pfx + ".q_norm.weight", (H * hd,), "lnw"), eps),
                         llama_torch.rmsnorm(cols[1], param(pfx + ".k_norm.weight", (KV * hd,), "lnw"), eps),
                         cols[2]], dim=-1)
    elif l.get("qk_norm"):
        qn = param(pfx + ".q_norm.weight", (hd,), "lnw")
        kn = param(pfx + ".k_norm.weight", (hd,), "lnw")
    rope = (l["rope"]["theta"], l["rope"].get("scaling")) if l.get("rope") else None
    scale = l.get("scale", 1.0 / hd ** 0.5)
    sc = rope[1] if rope else None
    if sc and sc["rope_type"] == "longrope":   # SPEC: the list T picks; cos and sin times A
        O = sc["original_max_position_embeddings"]
        rope = (rope[0], {"longrope": sc["long_factor"] if t > O else sc["short_factor"],
                          "amp": llama_torch.longrope_attention_factor(sc)})
    if rope and l["rope"].get("dims"):   # a partial rope: attention_ref's "dims"
        rope = (rope[0], dict(rope[1] or {}, dims=l["rope"]["dims"]))
    _, y = attention_ref.attention(qkv, b_, t, d, H, KV, l.get("causal", True), l.get("window") or 0,
                                   qn, kn, rope, scale)
    y = y @ param(pfx + ".proj.weight", (d, d), "w").t()
    return y + param(pfx + ".proj.bias", (d,), "b") if bias else y


def loss_of(model, out, y):
    if model["loss"]["op"] == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.long().reshape(-1),
                               label_smoothing=model["loss"].get("label_smoothing", 0.0))
    return F.mse_loss(out, y)


def input_batch(spec, x):
    xs = spec["model"]["inputs"]["x"]
    t = torch.tensor(x.astype(np.float64))
    if "scale" in xs or "shift" in xs:   # the trainer's conversion: x * scale + shift, in float32
        # (each a number, or a list of one a channel: the first axis after the batch's)
        ch = lambda v: np.float32(v).reshape((-1,) + (1,) * (x.ndim - 2)) if isinstance(v, list) \
            else np.float32(v)
        t = torch.tensor((x.astype(np.float32) * ch(xs.get("scale", 1.0)) + ch(xs.get("shift", 0.0))).astype(np.float64))
    if xs["dtype"] == "i32":
        t = torch.tensor(x)
    return t


def compare_steps(who, got, ref, ref_who, tol):
    """each step's loss and gradient norm of `got` against `ref` (lists of records),
    within tol[what] relative (floor 1e-3): the problems found"""
    problems = []
    if len(got) != len(ref):
        problems.append("%s: %d steps, %s %d" % (who, len(got), ref_who, len(ref)))
    for st, (g, c) in enumerate(zip(got, ref)):
        for what in ("loss", "grad_norm"):
            if g[what] is None or abs(g[what] - c[what]) > tol[what] * max(abs(c[what]), 1e-3):
                problems.append("%s: step %d %s %s, %s %.8g" % (who, st + 1, what, g[what], ref_who, c[what]))
    return problems


def trainc(spec_path, out, init, threads, recompute=None):
    random_runs.train(TRAINC, spec_path, out, init, threads, recompute)
    return run_log.steps(out)


def cache_check(d, spec_path, threads, cmd=None, env=None):
    """A token model with a decode program (compiler/decode.c: causal attention, every
    layer position by position): --sample under TRAINC_KV_CACHE=check, T tokens from the
    trained weights after a one-id prompt; the cache serves all T, and each must have the
    window's logits within 1e-5 of the largest. Returns (problems, whether it had the program).
    cmd, env: a trainer on the fake GPU's (fake_gpu), else `trainc run`."""
    src = os.path.join(d, "src")
    subprocess.run([TRAINC, "emit", spec_path, "-o", src], check=True, capture_output=True)
    if "static void decode(rt_exec *e)" not in open(os.path.join(src, "host.c")).read():
        return [], False
    T = json.load(open(spec_path))["model"]["inputs"]["x"]["shape"][0]
    p = subprocess.run((cmd or [TRAINC, "run", spec_path]) + ["--eval", "--init", os.path.join(d, "run", "model.safetensors"),
                        "--sample", str(T), "--quiet", "--threads", str(threads)],
                       env=dict(env or os.environ, TRAINC_KV_CACHE="check"), capture_output=True, text=True)
    m = re.search(r"key/value cache check: (\d+) tokens, the largest difference (\S+) of", p.stderr)
    if p.returncode != 0 or not m:
        return ["--sample with the cache check: exit %d: %s" % (p.returncode, p.stderr[-2000:])], True
    n, worst = int(m.group(1)), float(m.group(2))
    if n != T or not worst < 1e-5:
        return ["the key/value cache: %d tokens served (want %d), logits within %g of the window's"
                % (n, T, worst)], True
    return [], True


def sanitized(d, spec_path, init, threads, ours):
    """the compiler and a trainer under the sanitizers (RANDOM_MODELS_ASAN)"""
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:exitcode=86", UBSAN_OPTIONS="exitcode=86")
    problems = []
    for cmd in (["check", spec_path], ["plan", spec_path, "--json"], ["plan", spec_path, "--ranks", "2"],
                ["emit", spec_path, "-o", os.path.join(d, "emit_asan")]):
        p = subprocess.run([ASAN] + cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0 or "runtime error" in p.stderr or "Sanitizer" in p.stderr:
            problems.append("sanitized trainc %s: exit %d\n%s" % (cmd[0], p.returncode, p.stderr[-2000:]))
    subprocess.run([TRAINC, "emit", spec_path, "-o", os.path.join(d, "emit")], check=True, capture_output=True)
    for f in sorted(os.listdir(os.path.join(d, "emit"))):
        a = open(os.path.join(d, "emit", f), "rb").read()
        if not os.path.exists(os.path.join(d, "emit_asan", f)) or open(os.path.join(d, "emit_asan", f), "rb").read() != a:
            problems.append("emit: %s differs under the sanitizers" % f)
    exe = os.path.join(d, "trainer_asan")
    p = subprocess.run([TRAINC, "build", spec_path, "-o", exe], capture_output=True, text=True,
                       env=dict(env, TRAINC_CFLAGS=SAN))
    if p.returncode != 0:
        return problems + ["trainc build with the sanitizers: exit %d\n%s" % (p.returncode, p.stderr[-2000:])]
    out = os.path.join(d, "asan_run")
    p = subprocess.run([exe, "--init", init, "--out", out, "--quiet", "--threads", str(threads)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0 or "runtime error" in p.stderr:
        return problems + ["the sanitized trainer: exit %d\n%s" % (p.returncode, p.stderr[-3000:])]
    return problems + compare_steps("the sanitized trainer", run_log.steps(out), ours, "the JIT run",
                                    {"loss": 1e-5, "grad_norm": 1e-5})


def real_nvrtc(d, spec_path, precision):
    """the model's kernels in `precision` compiled by real NVRTC for sm_90a (its fast
    compile): problems"""
    src = os.path.join(d, "emit_" + precision)
    p = subprocess.run([TRAINC, "emit", spec_path, "-o", src, "--set", "precision=" + precision],
                       capture_output=True, text=True)
    if p.returncode == 0:
        p = subprocess.run([NVRTC_CHECK, "--fast", "-I", os.path.join(ROOT, "templates", "cuda"),
                            os.path.join(src, "kernels_cuda.cu"), "sm_90a"], capture_output=True, text=True)
    return [] if p.returncode == 0 else \
        ["the kernels (%s) with real NVRTC:\n%s" % (precision, (p.stdout + p.stderr)[-3000:])]


def fake_gpu(d, spec_path, init, threads, ours, precision, cached):
    """the model built for both devices, trained on the fake GPU in `precision`: its
    records against the CPU's fp32 ones (fp32: 1e-5 relative, the order of the
    kernels' sums; bf16-mixed: 5e-2 and 1e-1, the rounding of the activations); in fp32
    a model with a decode program (cached) samples with its cache there too"""
    problems = real_nvrtc(d, spec_path, precision)
    if problems:
        return problems
    env = random_runs.fake_env(FAKE_LIB, os.path.join(OUT, "cache"))
    # the fake NVRTC compiles them at build time, for what NVRTC compiles on the fake's 9.0
    exe = os.path.join(d, "trainer_" + precision)
    p = subprocess.run([TRAINC, "build", spec_path, "--device", "both", "--arch", "sm_90a",
                        "--set", "precision=" + precision, "-o", exe], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return ["trainc build --device both (%s) failed:\n%s" % (precision, p.stderr[-3000:])]
    out = os.path.join(d, "gpu_" + precision)
    # fp16-mixed: a loss scale of 1024, not 65536, so that no step of these small models
    # overflows and is skipped (the CPU's fp32 run skips none)
    sets = ["--set", "loss_scale.init=1024"] if precision == "fp16-mixed" else []
    p = subprocess.run([exe, "--device", "cuda", "--init", init, "--out", out, "--quiet", "--threads", str(threads)]
                       + sets, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return ["on the fake GPU (%s): exit %d\n%s" % (precision, p.returncode, p.stderr[-3000:])]
    recs = run_log.records(out)
    if recs[0].get("device") != "cuda":
        return ["on the fake GPU: the start record says %s" % recs[0].get("device")]
    # bf16: losses within 5e-2 (the weights drift apart over the steps: 3.1% in a
    # validation after 2 AdamW steps), the gradient norm within 1e-1 (gradients flow back
    # through bf16 activations and are stored in bf16: 2.2% and 5.3% measured in a CNN of 9
    # layers with tanh and silu and in a transformer; a wrong kernel is off by far more)
    tol = {"loss": 1e-5, "grad_norm": 1e-5} if precision == "fp32" else {"loss": 5e-2, "grad_norm": 1e-1}
    problems = compare_steps("fake GPU " + precision, run_log.steps(out), ours, "the CPU", tol)
    gv = [x for x in recs if "val_loss" in x]
    cv = [x for x in run_log.records(os.path.join(d, "run")) if "val_loss" in x]
    if len(gv) != len(cv) or any(abs(a["val_loss"] - b["val_loss"]) > tol["loss"] * max(abs(b["val_loss"]), 1e-3)
                                 for a, b in zip(gv, cv)):
        problems.append("fake GPU %s: validation %s, the CPU %s" % (precision, [x["val_loss"] for x in gv],
                                                                     [x["val_loss"] for x in cv]))
    if cached and precision == "fp32" and not problems:
        more, _ = cache_check(d, spec_path, threads, [exe, "--device", "cuda"], env)
        problems += ["on the fake GPU: " + x for x in more]
    return problems


def one(i, r):
    kind, spec = draw(r, i)
    d = os.path.join(OUT, "m%02d" % i)
    os.makedirs(d, exist_ok=True)
    xs, ys = spec["model"]["inputs"]["x"], spec["model"]["inputs"]["y"]

    def rows(n):
        if xs["dtype"] == "u8":
            x = r.integers(0, 256, size=(n,) + tuple(xs["shape"])).astype(np.uint8)
        elif xs["dtype"] == "i32":
            x = r.integers(0, spec["model"]["layers"][0]["vocab"], size=(n,) + tuple(xs["shape"])).astype(np.int32)
        else:
            x = r.standard_normal((n,) + tuple(xs["shape"])).astype(np.float32)
        if ys["dtype"] == "i32":
            y = r.integers(0, ys["classes"], size=(n,) + tuple(ys["shape"])).astype(np.int32)
        else:
            y = r.standard_normal((n,) + tuple(ys["shape"])).astype(np.float32)
        return x, y

    x, y = rows(ROWS)
    xv, yv = rows(VAL_ROWS)
    for name, a in (("x", x), ("y", y), ("xv", xv), ("yv", yv)):
        np.save(os.path.join(d, name + ".npy"), a)
    spec_path = os.path.join(d, "spec.json")
    json.dump(spec, open(spec_path, "w"), indent=1)

    # the parameters: made by a first forward pass, in the order of first use
    P, S = {}, {}
    reference(spec["model"], P, input_batch(spec, x[:B]), S)
    frozen = freeze_draw(np.random.default_rng([SEED, i, 7]), list(P))
    if frozen:
        spec["train"]["freeze"] = frozen
        json.dump(spec, open(spec_path, "w"), indent=1)
        for n in frozen:
            P[n].requires_grad_(False)
    init = os.path.join(d, "init.safetensors")
    st_check.save(init, dict({n: t.detach().numpy().astype(np.float32) for n, t in P.items()},
                             **{n: t.numpy().astype(np.int64 if t.dtype == torch.int64 else np.float32)
                                for n, t in S.items()}))
    threads = int(r.integers(1, 3))
    ours = trainc(spec_path, os.path.join(d, "run"), init, threads)

    t, opt = spec["train"], spec["train"]["optimizer"]
    dropout = '"p": 0.25' in json.dumps(spec)
    problems = [] if dropout else against_torch(spec, P, S, x, y, xv, yv, ours, d)

    # recomputation never changes the numbers (dropout: the masks made again alike)
    if i % 5 == 0 or dropout:
        base = None
        for pol in ("none", "selective", "full"):
            o2 = os.path.join(d, "rc_" + pol)
            recs = trainc(spec_path, o2, init, threads, pol)
            nums = [(x["loss"], x["grad_norm"]) for x in recs]
            wb = open(os.path.join(o2, "model.safetensors"), "rb").read()
            if base is None:
                base = (nums, wb)
            elif (nums, wb) != base:
                problems.append("recompute %s: numbers or weights differ from none's" % pol)
    resume = i % 5 == 2 and len(ours) > 1 and not problems
    if resume:
        problems += random_runs.resumed(TRAINC, d, spec_path, init, threads)
    cached = False
    if spec["model"]["loss"]["op"] == "cross_entropy" and xs["dtype"] == "i32" and not problems:
        more, cached = cache_check(d, spec_path, threads)
        problems += more
    if ASAN and i % 3 == 0 and not problems:
        problems += sanitized(d, spec_path, init, threads, ours)
    if i < FAKE_GPU and not problems:
        problems += fake_gpu(d, spec_path, init, threads, ours, "fp32", cached)
        if i % 2 == 1:
            problems += fake_gpu(d, spec_path, init, threads, ours, "bf16-mixed", cached)
        if i % 4 == 2:
            problems += fake_gpu(d, spec_path, init, threads, ours, "fp16-mixed", cached)
    desc = "%s%s%s%s, %d layers, %s, %s, accumulate %d, recompute %s%s%s%s, %d thread%s%s" % (
        "on the fake GPU too (%s): " % ("fp32, bf16-mixed" if i % 2 else "fp32, fp16-mixed" if i % 4 == 2 else "fp32")
        if i < FAKE_GPU else "",
        "under the sanitizers too: " if ASAN and i % 3 == 0 else "",
        "dropout 0.25 (not against PyTorch): " if dropout else "",
        kind + resnet_ops(spec["model"]), len(spec["model"]["layers"]), spec["model"]["loss"]["op"], opt["type"], t["accumulate"],
        t["recompute"], ", clipped by value" if t.get("grad_clip_algorithm") == "value"
        else ", clipped" if "grad_clip" in t else "",
        "" if t["loader"]["drop_last"] else ", a short last batch",
        ", %d of %d parameters frozen" % (len(frozen), len(P)) if frozen else "", threads,
        "s" if threads > 1 else "", ", sampled with the key/value cache" + (" (on the fake GPU too)" if i < FAKE_GPU else "")
        if cached else "")
    return desc + (", resumed after step 1" if resume else ""), len(ours), problems


def resnet_ops(model):
    """the ninth generator's ops a model has, for its line: ' (batchnorm, groups, ...)'"""
    j = json.dumps(model)
    have = [w for w, k in (("batchnorm", '"batchnorm"'), ("groups", '"groups"'),
                           ("a projection shortcut", '"shortcut": [{"op": "conv2d"'), ("label smoothing", '"label_smoothing"'),
                           ("a ConvNeXt block", '"untokens"'), ("grn", '"grn"'),
                           ("registers", '"register_tokens"'))
            if k in j]
    return " (%s)" % ", ".join(have) if have else ""


def against_torch(spec, P, S, x, y, xv, yv, ours, d):
    """the reference's training on the same batches, optimizer and clipping, then its
    validation, weights and batchnorm's statistics (S), against trainc's"""
    t, opt = spec["train"], spec["train"]["optimizer"]
    ys = spec["model"]["inputs"]["y"]
    params = [p for p in P.values() if p.requires_grad]   # (train.freeze: the rest)
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    if opt["type"] == "sgd":
        o = torch.optim.SGD([{"params": decay, "weight_decay": opt.get("weight_decay", 0.0)},
                             {"params": rest, "weight_decay": 0.0}], lr=opt["lr"],
                            momentum=opt.get("momentum", 0.0), nesterov=opt.get("nesterov", False), foreach=False)
    else:
        o = torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]},
                               {"params": rest, "weight_decay": 0.0}], lr=opt["lr"], eps=opt["eps"], foreach=False)
    acc = t["accumulate"]
    batches = ROWS // B if t["loader"]["drop_last"] else (ROWS + B - 1) // B
    ref, b, at_bound = [], 0, []   # (clipping by value: the share of elements past it a step)
    while b < batches:
        k = min(acc, batches - b)
        o.zero_grad()
        total = 0.0
        # the step's samples: the update is that of one batch of them all (SPEC.md), so
        # each batch's mean loss weighs its rows (the last is short without drop_last);
        # the record's loss is the mean of the batches' means
        window = min((b + k) * B, ROWS) - b * B
        for j in range(k):
            sl = slice((b + j) * B, min((b + j + 1) * B, ROWS))
            out = reference(spec["model"], P, input_batch(spec, x[sl]), S, "train")
            l = loss_of(spec["model"], out, torch.tensor(y[sl].astype(np.float64) if ys["dtype"] == "f32" else y[sl]))
            (l * ((sl.stop - sl.start) / window)).backward()
            total += l.item() / k
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params if p.grad is not None))
        if t.get("grad_clip_algorithm") == "value":
            g = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
            at_bound.append(float((g.abs() > t["grad_clip"]).double().mean()))
            torch.nn.utils.clip_grad_value_(params, t["grad_clip"])
        elif "grad_clip" in t:
            torch.nn.utils.clip_grad_norm_(params, t["grad_clip"])
        o.step()
        ref.append({"loss": total, "grad_norm": norm})
        b += k

    problems = compare_steps("trainc", ours, ref, "the reference", {"loss": 1e-4, "grad_norm": 1e-4})
    if at_bound and max(at_bound) == 0:   # (else the test proves nothing of it)
        problems.append("clipping by value at %g: no element past it" % t["grad_clip"])
    # validation after the last step: the mean over all 6 rows' terms, and the accuracy
    with torch.no_grad():
        out = reference(spec["model"], P, input_batch(spec, xv), S, "eval")
        tv = torch.tensor(yv.astype(np.float64) if ys["dtype"] == "f32" else yv)
        if spec["model"]["loss"]["op"] == "cross_entropy":
            logits = out.reshape(-1, out.shape[-1])
            val_loss = loss_of(spec["model"], out, tv).item()
            top2 = torch.topk(logits, 2, dim=1).values
            ties = int(((top2[:, 0] - top2[:, 1]) < 1e-4).sum())
            val_acc = float((logits.argmax(1) == tv.long().reshape(-1)).double().mean())
            n_terms = logits.shape[0]
        else:
            val_loss, val_acc = F.mse_loss(out, tv).item(), None
    vrec = [x for x in run_log.records(os.path.join(d, "run")) if "val_loss" in x]
    if len(vrec) != 1:
        problems.append("%d validation records, not 1" % len(vrec))
    else:
        v = vrec[0]
        if abs(v["val_loss"] - val_loss) > 1e-4 * max(abs(val_loss), 1e-3):
            problems.append("val_loss %.8g, the reference %.8g" % (v["val_loss"], val_loss))
        if val_acc is not None and abs(v["val_acc"] - val_acc) * n_terms > ties + 1e-6:
            problems.append("val_acc %.6g, the reference %.6g (%d near ties)" % (v["val_acc"], val_acc, ties))
    w = st_check.load(os.path.join(d, "run", "model.safetensors"))
    if sorted(w) != sorted(list(P) + list(S)):
        problems.append("weights named %s, the reference %s" % (sorted(w), sorted(list(P) + list(S))))
    else:
        for n, p in list(P.items()) + list(S.items()):
            e = p.detach().numpy()
            if e.dtype == np.int64:   # num_batches_tracked: every training batch once
                if int(w[n]) != int(e):
                    problems.append("%s is %d, the reference %d" % (n, int(w[n]), int(e)))
                continue
            dif = float(np.max(np.abs(w[n] - e))) if e.size else 0.0
            if dif > 1e-4 * max(1.0, float(np.max(np.abs(e)))):
                problems.append("%s differs by %.3g" % (n, dif))

    return problems


def main():
    os.makedirs(OUT, exist_ok=True)
    if FAKE_GPU:
        random_runs.fake_lib_ready(FAKE_LIB)
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        subprocess.run(["cc", "-std=gnu11", "-O1", "-I" + cuda + "/include", "tests/nvrtc_check.c", "-L" + cuda + "/lib64",
                        "-Wl,-rpath," + cuda + "/lib64", "-lnvrtc", "-o", NVRTC_CHECK], check=True, cwd=ROOT)
    failed = random_runs.run_cases(N_MODELS, one, np.random.default_rng(SEED), OUT, "m", "model")
    print("random models: %d passed, %d failed (seed %d)" % (N_MODELS - failed, failed, SEED))
    sys.exit(1 if failed else 0)

main()
