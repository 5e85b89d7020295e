"""Random models against PyTorch (Debian python3-torch, CPU): a differential test of
the compiler's passes (fusion, the memory plan, recomputation) on layer combinations
specs/ does not have.

random_models.py [N [SEED]]   (default 30 models, seed 1)

Each model is drawn from a small grammar over SPEC.md's ops: images (conv2d, pools,
a residual around a shape-keeping conv, flatten, linear), vectors (linear, the five
activations, layernorm, dropout at p 0, residuals and repeats, named or not, u8 input
with scale and shift) and sequences (embedding, pos_embedding, repeated pre-norm
attention blocks, causal or not, a tied or untied classifier; or f32 [T, d] input
with an MSE target). The loss is cross entropy or MSE; the optimizer SGD (momentum,
Nesterov, weight decay) or AdamW; accumulate 1 or 2 (with 3 batches an epoch, the
second step then has one batch); grad_clip off or tight enough to clip; recompute
none, selective or full. PyTorch runs the same spec through a small interpreter of
SPEC.md's semantics, from the same initial weights (random, written by this script
and loaded with --init, so the parameter names and shapes are checked too) on the
same batches. Every step's loss and gradient norm must agree within 1e-4 relative,
the final weights within 1e-4 of their scale. Every fifth model also runs under all
three recompute policies, which must give the same numbers bit for bit.
"""
import json, math, os, struct, subprocess, sys, zlib
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "random_models")
N_MODELS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ROWS, B = 12, 4
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
        out = int(r.integers(2, 6))
        conv = {"op": "conv2d", "out": out, "kernel": k, "padding": p}
        if s != 1:
            conv["stride"] = s
        if r.random() < 0.3:
            conv["bias"] = False
        layers += [conv, act(r)]
        hw = (shape[1] + 2 * p - k) // s + 1
        shape = [out, hw, hw]
        if r.random() < 0.4:   # a residual around a conv that keeps the shape
            body = [{"op": "conv2d", "out": out, "kernel": 3, "padding": 1}, act(r)]
            # named: unnamed, its conv would be "0" like the first layer (an error)
            layers.append({"op": "residual", "name": "res%d" % len(layers), "body": body})
        if shape[1] >= 4 and r.random() < 0.6:
            pk = 2
            ps = 2 if r.random() < 0.6 else 1
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
    D = int(r.integers(3, 12))
    x = {"shape": [D], "dtype": "f32"}
    if r.random() < 0.3:
        x = {"shape": [D], "dtype": "u8", "scale": 1.0 / 255, "shift": -0.5}
    layers, d = [], D
    for _ in range(int(r.integers(1, 4))):
        c = r.random()
        if c < 0.35:
            d = int(r.integers(3, 12))
            lin = {"op": "linear", "out": d}
            if r.random() < 0.2:
                lin["bias"] = False
            layers += [lin, act(r)]
        elif c < 0.5:
            ln = {"op": "layernorm"}
            if r.random() < 0.3:
                ln["eps"] = 1e-3
            layers.append(ln)
        elif c < 0.55:
            layers.append({"op": "dropout", "p": 0.0})
        else:
            body = [{"op": "linear", "out": d}, act(r), {"op": "linear", "out": d}]
            if r.random() < 0.5:
                body.insert(0, {"op": "layernorm", "name": "ln"})
                body[1]["name"], body[3]["name"] = "fc", "proj"
            block = {"op": "residual", "body": body}
            if r.random() < 0.5:
                rep = {"op": "repeat", "count": int(r.integers(2, 4)), "body": [block]}
                rep["name"] = "h%d" % len(layers)
                layers.append(rep)
            else:
                block["name"] = "r%d" % len(layers)
                layers.append(block)
    return x, layers, None


def sequence_model(r):
    T, d = int(r.integers(3, 9)), int(r.choice([4, 6, 8]))
    heads = int(r.choice([h for h in (1, 2, 4) if d % h == 0]))
    V = int(r.integers(5, 12))
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


def draw(r, i):
    kind = ["image", "vector", "sequence"][i % 3]
    x, layers, loss = {"image": image_model, "vector": vector_model, "sequence": sequence_model}[kind](r)
    if loss is None:
        k = int(r.integers(2, 7))
        if r.random() < 0.6:
            loss = ("ce", k, [])
        else:
            loss = ("mse", k, [k])
        layers.append({"op": "linear", "out": k})
    lk, k, tshape = loss
    y = {"shape": tshape, "dtype": "i32", "classes": k} if lk == "ce" else {"shape": tshape, "dtype": "f32"}
    model = {"name": "rnd%d" % i, "inputs": {"x": x, "y": y}, "layers": layers,
             "loss": {"op": "cross_entropy" if lk == "ce" else "mse", "target": "y"}}
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
    train = {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "batch_size": B, "epochs": 1,
             "optimizer": opt, "schedule": {"type": "constant"},
             "accumulate": int(r.choice([1, 2])), "recompute": str(r.choice(["none", "selective", "full"])),
             "loader": {"shuffle": False, "workers": 0, "drop_last": True}, "log_every": 1, "seed": 5}
    if r.random() < 0.5:
        train["grad_clip"] = 0.1
    return kind, {"trainc": 1, "model": model, "train": train}


# ---- the reference: SPEC.md's semantics, parameters created as they are first used ----

def reference(model, P, xin):
    def param(name, shape, kind):
        if name not in P:
            g = np.random.default_rng(zlib.crc32(name.encode()))
            if kind == "w":
                v = g.standard_normal(shape) / math.sqrt(max(1, int(np.prod(shape[1:]))))
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
                k = l["kernel"]
                w = param(pfx + ".weight", (l["out"], x.shape[1], k, k), "w")
                b = param(pfx + ".bias", (l["out"],), "b") if l.get("bias", True) else None
                x = F.conv2d(x, w, b, l.get("stride", 1), l.get("padding", 0))
            elif op in ("maxpool2d", "avgpool2d"):
                f = F.max_pool2d if op == "maxpool2d" else F.avg_pool2d
                x = f(x, l["kernel"], l.get("stride", l["kernel"]))
            elif op == "flatten":
                x = x.flatten(1)
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
            elif op == "dropout":
                assert l["p"] == 0.0
            elif op == "layernorm":
                d = x.shape[-1]
                x = F.layer_norm(x, (d,), param(pfx + ".weight", (d,), "lnw"),
                                 param(pfx + ".bias", (d,), "b"), l.get("eps", 1e-5))
            elif op == "embedding":
                x = param(pfx + ".weight", (l["vocab"], l["dim"]), "emb")[xin.long()]
            elif op == "pos_embedding":
                w = param(pfx + ".weight", (l["max_len"], x.shape[-1]), "emb")
                x = x + w[: x.shape[1]]
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
            elif op == "residual":
                x = x + run(l["body"], x, pfx + "." if "name" in l else prefix)
            elif op == "repeat":
                for it in range(l["count"]):
                    x = run(l["body"], x, ("%s.%d." % (pfx, it)) if "name" in l else "%s%d." % (prefix, it))
            else:
                raise SystemExit("random_models: op " + op)
        return x

    return run(model["layers"], xin, "")


def loss_of(model, out, y):
    if model["loss"]["op"] == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.long().reshape(-1))
    return F.mse_loss(out, y)


def write_safetensors(path, P):
    header, off, blobs = {}, 0, []
    for name, t in P.items():
        a = t.detach().numpy().astype("<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(raw[8 + n + a: 8 + n + b], dtype="<f4").reshape(v["shape"])
    return out


def input_batch(spec, x):
    xs = spec["model"]["inputs"]["x"]
    t = torch.tensor(x.astype(np.float64))
    if xs["dtype"] == "u8":   # the trainer's conversion: x * scale + shift, in float32
        t = torch.tensor((x.astype(np.float32) * np.float32(xs["scale"]) + np.float32(xs["shift"])).astype(np.float64))
    if xs["dtype"] == "i32":
        t = torch.tensor(x)
    return t


def trainc(spec_path, out, init, recompute=None):
    cmd = [TRAINC, "run", spec_path, "--init", init, "--out", out, "--quiet", "--threads", "1"]
    if recompute:
        cmd += ["--set", "recompute=" + recompute]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("trainc run failed (exit %d):\n%s" % (p.returncode, p.stderr[-3000:]))
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    return [r for r in recs if "loss" in r and "event" not in r]


def one(i, r):
    kind, spec = draw(r, i)
    d = os.path.join(OUT, "m%02d" % i)
    os.makedirs(d, exist_ok=True)
    xs, ys = spec["model"]["inputs"]["x"], spec["model"]["inputs"]["y"]
    if xs["dtype"] == "u8":
        x = r.integers(0, 256, size=(ROWS,) + tuple(xs["shape"])).astype(np.uint8)
    elif xs["dtype"] == "i32":
        x = r.integers(0, spec["model"]["layers"][0]["vocab"], size=(ROWS,) + tuple(xs["shape"])).astype(np.int32)
    else:
        x = r.standard_normal((ROWS,) + tuple(xs["shape"])).astype(np.float32)
    if ys["dtype"] == "i32":
        y = r.integers(0, ys["classes"], size=(ROWS,) + tuple(ys["shape"])).astype(np.int32)
    else:
        y = r.standard_normal((ROWS,) + tuple(ys["shape"])).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    spec_path = os.path.join(d, "spec.json")
    json.dump(spec, open(spec_path, "w"), indent=1)

    # the parameters: made by a first forward pass, in the order of first use
    P = {}
    reference(spec["model"], P, input_batch(spec, x[:B]))
    names = set()
    for n in P:
        assert n not in names
        names.add(n)
    init = os.path.join(d, "init.safetensors")
    write_safetensors(init, P)
    ours = trainc(spec_path, os.path.join(d, "run"), init)

    # the reference's training: the same batches, optimizer and clipping
    t, opt = spec["train"], spec["train"]["optimizer"]
    params = list(P.values())
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    if opt["type"] == "sgd":
        o = torch.optim.SGD([{"params": decay, "weight_decay": opt.get("weight_decay", 0.0)},
                             {"params": rest, "weight_decay": 0.0}], lr=opt["lr"],
                            momentum=opt.get("momentum", 0.0), nesterov=opt.get("nesterov", False), foreach=False)
    else:
        o = torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]},
                               {"params": rest, "weight_decay": 0.0}], lr=opt["lr"], eps=opt["eps"], foreach=False)
    acc, batches = t["accumulate"], ROWS // B
    ref, b = [], 0
    while b < batches:
        k = min(acc, batches - b)
        o.zero_grad()
        total = 0.0
        for j in range(k):
            sl = slice((b + j) * B, (b + j + 1) * B)
            out = reference(spec["model"], P, input_batch(spec, x[sl]))
            l = loss_of(spec["model"], out, torch.tensor(y[sl].astype(np.float64) if ys["dtype"] == "f32" else y[sl]))
            (l / k).backward()
            total += l.item() / k
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params if p.grad is not None))
        if "grad_clip" in t:
            torch.nn.utils.clip_grad_norm_(params, t["grad_clip"])
        o.step()
        ref.append((total, norm))
        b += k

    problems = []
    if len(ours) != len(ref):
        problems.append("%d steps, the reference %d" % (len(ours), len(ref)))
    for s, (rec, (rl, rn)) in enumerate(zip(ours, ref)):
        for what, a, e in (("loss", rec["loss"], rl), ("grad_norm", rec["grad_norm"], rn)):
            if abs(a - e) > 1e-4 * max(abs(e), 1e-3):
                problems.append("step %d %s %.8g, the reference %.8g" % (s + 1, what, a, e))
    w = read_safetensors(os.path.join(d, "run", "model.safetensors"))
    if sorted(w) != sorted(P):
        problems.append("weights named %s, the reference %s" % (sorted(w), sorted(P)))
    else:
        for n, p in P.items():
            e = p.detach().numpy()
            dif = float(np.max(np.abs(w[n] - e))) if e.size else 0.0
            if dif > 1e-4 * max(1.0, float(np.max(np.abs(e)))):
                problems.append("%s differs by %.3g" % (n, dif))

    # recomputation never changes the numbers
    if i % 5 == 0:
        base = None
        for pol in ("none", "selective", "full"):
            o2 = os.path.join(d, "rc_" + pol)
            recs = trainc(spec_path, o2, init, pol)
            nums = [(x["loss"], x["grad_norm"]) for x in recs]
            wb = open(os.path.join(o2, "model.safetensors"), "rb").read()
            if base is None:
                base = (nums, wb)
            elif (nums, wb) != base:
                problems.append("recompute %s: numbers or weights differ from none's" % pol)
    desc = "%s, %d layers, %s, %s, accumulate %d, recompute %s%s" % (
        kind, len(spec["model"]["layers"]), spec["model"]["loss"]["op"], opt["type"], t["accumulate"],
        t["recompute"], ", clipped" if "grad_clip" in t else "")
    return desc, len(ref), problems


def main():
    os.makedirs(OUT, exist_ok=True)
    r = np.random.default_rng(SEED)
    failed = 0
    for i in range(N_MODELS):
        try:
            desc, steps, problems = one(i, r)
        except RuntimeError as e:
            desc, steps, problems = "model %d" % i, 0, [str(e)]
        if problems:
            failed += 1
            print("FAIL m%02d (%s): build/tests/random_models/m%02d/spec.json" % (i, desc, i))
            for p in problems[:8]:
                print("       " + p)
        else:
            print("ok   m%02d %s: %d steps" % (i, desc, steps))
    print("random models: %d passed, %d failed (seed %d)" % (N_MODELS - failed, failed, SEED))
    sys.exit(1 if failed else 0)


main()
