"""llama_torch.py: a PyTorch reference of a trainc model spec, written from SPEC.md
section 2 for the Llama-family ops (rmsnorm, glu, squared_relu, attention with
kv_heads, bias, rope with llama3 scaling, qk_norm, window, scale and softcap) and the
ones they sit between (embedding, pos_embedding, linear with tie, layernorm, the activations,
residual, repeat, cross_entropy), with trainc's parameter names; and what
tests/llama_hf.py and tests/llama_ref.py share: the token windows, the training loop
(torch.optim.AdamW, decay on rank >= 2 only, warmup then cosine, gradient clipping:
SPEC section 3), the train spec and a trainc run.

The reference computes each op as Hugging Face's Llama does where HF has it (RMSNorm
in float32 as LlamaRMSNorm, rotate-half RoPE with HF's cos/sin tables, repeat_kv,
softmax over scores / sqrt(hd), q, k, v and the SwiGLU halves each from its own rows),
so that it reproduces LlamaForCausalLM bit for bit: llama_hf.py
checks that before it trusts it (--oracle-only runs only that check).
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_ref   # noqa: E402  (its RoPE frequencies and rotate_half)
import run_log         # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))


# ---- ops -------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis (HF LlamaRMSNorm, fp32)."""
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def yarn_inv_freq(sc, rd, theta):
    """YaRN's frequencies [rd/2] (SPEC's yarn scaling, as transformers'
    _compute_yarn_parameters): a ramp over the pairs, from the one that turns beta_fast
    times in the original context to the one that turns beta_slow times, blends each
    unscaled frequency into itself over the factor."""
    F_, O = sc["factor"], sc["original_max_position_embeddings"]
    fast, slow = sc.get("beta_fast", 32), sc.get("beta_slow", 1)
    corr = lambda rot: rd * math.log(O / (rot * 2 * math.pi)) / (2 * math.log(theta))
    lo, hi = max(math.floor(corr(fast)), 0), min(math.ceil(corr(slow)), rd - 1)
    hi = hi + 0.001 if lo == hi else hi
    p = theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd)
    keep = 1 - torch.clamp((torch.arange(rd // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    return 1.0 / (F_ * p) * (1 - keep) + 1.0 / p * keep


def rope_inv_freq(rope, hd, T):
    """Frequencies theta^(-2i/hd), i < hd/2 (HF LlamaRotaryEmbedding), with "scaling"
    {"rope_type": "llama3", ...} as transformers' _compute_llama3_parameters
    (attention_ref.py's), or {"rope_type": "linear", "factor": F}: divided by F, as
    transformers' _compute_linear_scaling_rope_parameters, or yarn's (yarn_inv_freq), or
    {"rope_type": "longrope", ...}:
    divided by long_factor past original_max_position_embeddings, else by short_factor
    (Phi3LongRoPEScaledRotaryEmbedding, at the context T). With "dims" rd, those of rd's
    pairs and 0 for the pairs j >= rd/2 (SPEC's partial rope: they keep their values)."""
    rd = rope.get("dims") or hd
    pad = torch.zeros((hd - rd) // 2)
    sc = rope.get("scaling")
    kind = sc.get("rope_type", sc.get("type")) if sc else None
    if kind == "linear":
        inv = attention_ref.inv_freq(rd, float(rope["theta"]), None) / sc["factor"]
    elif kind == "yarn":
        inv = yarn_inv_freq(sc, rd, float(rope["theta"]))
    elif kind == "longrope":
        f = sc["long_factor"] if T > sc["original_max_position_embeddings"] else sc["short_factor"]
        inv = attention_ref.inv_freq(rd, float(rope["theta"]), {"longrope": f})
    else:
        assert kind in (None, "llama3"), sc
        inv = attention_ref.inv_freq(rd, float(rope["theta"]), sc or None)
    return torch.cat((inv, pad))


def longrope_attention_factor(sc):
    """longrope's attention factor: given, or sqrt(1 + ln F / ln O) (1 for F up to 1)"""
    if "attention_factor" in sc:
        return sc["attention_factor"]
    F_, O = sc["factor"], sc["original_max_position_embeddings"]
    return 1.0 if F_ <= 1 else math.sqrt(1 + math.log(F_) / math.log(O))


def rope_tables(rope, hd, T):
    """cos, sin [1, 1, T, hd] for positions 0 .. T-1, built as HF 4.40 builds them
    (longrope's: times its attention factor on the rotated pairs, as Phi-3's)."""
    inv = rope_inv_freq(rope, hd, T)
    pos = torch.arange(T, dtype=torch.int64)[None, None, :].float()
    freqs = (inv[None, :, None].float() @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    sc = rope.get("scaling") or {}
    m = torch.ones(hd // 2)
    if sc.get("rope_type", sc.get("type")) == "longrope":
        m[:(rope.get("dims") or hd) // 2] = longrope_attention_factor(sc)
    if sc.get("rope_type", sc.get("type")) == "yarn":   # 0.1 ln F + 1 where not given
        m[:(rope.get("dims") or hd) // 2] = sc.get("attention_factor",
                                                   0.1 * math.log(sc["factor"]) + 1)
    m = m.repeat(2)
    return emb.cos()[:, None] * m, emb.sin()[:, None] * m


rotate_half = attention_ref.rotate_half


GLU_ACTS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
            "sigmoid": torch.sigmoid, "relu": F.relu}


class Params:
    """trainc's parameters by name. make=True creates each on first use (normal 0.02
    for weights, 1 + N(0, 0.1) for norm weights so that a misplaced one shows, small
    random biases), in the order a forward pass meets them; then it only hands them
    out, checking shapes."""

    def __init__(self, gen=None):
        self.t, self.gen, self.make = {}, gen, gen is not None

    def __call__(self, name, shape, kind):
        if name not in self.t:
            assert self.make, "no parameter " + name
            r = torch.randn(*shape, generator=self.gen)
            self.t[name] = r * 0.02 if kind == "w" else 1 + 0.1 * r if kind == "norm" else 0.02 * r
        assert tuple(self.t[name].shape) == tuple(shape), (name, self.t[name].shape, shape)
        return self.t[name]


# train.lora (trainc's extension) as PEFT computes it: None, or {"rank", "alpha",
# "adapts": weight name -> bool, "scale" where not alpha / rank (rsLoRA's alpha /
# sqrt(rank))}; an adapted weight W's output gains B(A(x)) * scale
LORA = None


def lora_delta(x, wname, rows, P):
    """The adapter's term for weight wname ([rows, x's width]) on input x, or None."""
    if LORA is None or not LORA["adapts"](wname):
        return None
    pre, r = wname[:-len(".weight")], LORA["rank"]
    a = P(pre + ".lora_A.weight", (r, x.shape[-1]), "w")
    b = P(pre + ".lora_B.weight", (rows, r), "w")
    return F.linear(F.linear(x, a), b) * LORA.get("scale", LORA["alpha"] / r)


def adapted(y, x, wname, P):
    """y = x W^T (+ b), plus lora's term where LORA adapts W."""
    d = lora_delta(x, wname, y.shape[-1], P)
    return y if d is None else y + d


def attention(h, l, P, name, it=None):
    """[B, T, d] -> [B, T, d] (SPEC's attention row; head_dim, trainc's extension, a head's
    width apart from d / heads; interleave, trainc's extension: iteration it of the
    innermost repeat, when (it + 1) % every == 0, takes interleave's window and rope)."""
    B, T, d = h.shape
    il = l.get("interleave")
    if il and (it + 1) % il["every"] == 0:
        l = dict(l, **{k: il[k] for k in ("window", "rope") if k in il})
    H = l["heads"]
    KV = l.get("kv_heads", H)
    hd, g = l.get("head_dim", d // H), H // KV
    bias = l.get("bias", True)
    rows = (H + 2 * KV) * hd
    w = P(name + ".qkv.weight", (rows, d), "w")
    b = P(name + ".qkv.bias", (rows,), "b") if bias else None
    # q, k and v each from its own rows, as HF's q_proj, k_proj and v_proj compute them
    # (the same numbers as one GEMM and a split, to the last bit as BLAS goes)
    q, k, v = (F.linear(h, wp, bp) for wp, bp in zip(w.split([H * hd, KV * hd, KV * hd]),
               b.split([H * hd, KV * hd, KV * hd]) if bias else (None,) * 3))
    dl = lora_delta(h, name + ".qkv.weight", rows, P)
    if dl is not None:   # one adapter over the fused rows (its parts share A)
        q, k, v = (t + dt for t, dt in zip((q, k, v), dl.split([H * hd, KV * hd, KV * hd], -1)))
    if l.get("qk_norm") == "all_heads":   # over all of q's heads, all of k's (OLMo 2)
        eps = l.get("eps", 1e-6)
        q = rmsnorm(q, P(name + ".q_norm.weight", (H * hd,), "norm"), eps)
        k = rmsnorm(k, P(name + ".k_norm.weight", (KV * hd,), "norm"), eps)
    q = q.view(B, T, H, hd).transpose(1, 2)
    k = k.view(B, T, KV, hd).transpose(1, 2)
    v = v.view(B, T, KV, hd).transpose(1, 2)
    if l.get("qk_norm") is True:   # over each head's hd, eps 1e-6, before RoPE (Qwen3)
        q = rmsnorm(q, P(name + ".q_norm.weight", (hd,), "norm"), 1e-6)
        k = rmsnorm(k, P(name + ".k_norm.weight", (hd,), "norm"), 1e-6)
    if l.get("rope"):
        cos, sin = rope_tables(l["rope"], hd, T)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
    # query head j reads key/value head j // g (HF's repeat_kv)
    k = k[:, :, None].expand(B, KV, g, T, hd).reshape(B, H, T, hd)
    v = v[:, :, None].expand(B, KV, g, T, hd).reshape(B, H, T, hd)
    s = torch.matmul(q, k.transpose(2, 3))
    # scale, trainc's extension: the scores' factor (Gemma 3 27B's query_pre_attn_scalar^-1/2)
    s = s * l["scale"] if "scale" in l else s / math.sqrt(hd)
    if l.get("softcap"):   # Gemma 2's, as its modeling code: s / cap, tanh, * cap
        s = torch.tanh(s / l["softcap"]) * l["softcap"]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    seen = torch.ones(T, T, dtype=torch.bool)
    if l.get("causal", True):
        seen &= j <= i
    if l.get("window"):   # the W most recent positions, itself included
        seen &= i - j < l["window"]
    s = s.masked_fill(~seen, torch.finfo(s.dtype).min)
    a = F.softmax(s, dim=-1, dtype=torch.float32)
    o = torch.matmul(a, v).transpose(1, 2).reshape(B, T, H * hd)
    return adapted(F.linear(o, P(name + ".proj.weight", (d, H * hd), "w"),
                            P(name + ".proj.bias", (d,), "b") if bias else None),
                   o, name + ".proj.weight", P)


def moe(l, h, P, name):
    """SPEC's moe over h [..., d]: each row's router softmax, its top k experts' glu MLPs
    weighted by their probabilities (over their sum with norm_topk), plus the shared
    expert's glu MLP where there is one."""
    d, E, k, hid = h.shape[-1], l["experts"], l["top_k"], l["hidden"]
    wr = P(name + ".router.weight", (E, d), "w")
    wu = P(name + ".experts.up.weight", (E, 2 * hid, d), "ew")
    wd = P(name + ".experts.down.weight", (E, d, hid), "ew")
    xs = h.reshape(-1, d)
    top = torch.topk(F.softmax(xs @ wr.t(), -1), k, -1)
    w = top.values / top.values.sum(-1, keepdim=True) if l.get("norm_topk", True) else top.values
    y = 0
    for j in range(k):
        e = top.indices[:, j]
        a, b = torch.einsum("nd,nod->no", xs, wu[e]).chunk(2, dim=-1)
        y = y + w[:, j:j + 1] * torch.einsum("nh,ndh->nd", GLU_ACTS[l.get("act", "silu")](a) * b,
                                             wd[e])
    S = l.get("shared", 0)
    if S:   # the shared expert, times the sigmoid of its up weight's last row with shared_gate
        gated = int(l.get("shared_gate", False))
        u = xs @ P(name + ".shared.up.weight", (2 * S + gated, d), "w").t()
        a, b = u[:, :2 * S].chunk(2, dim=-1)
        s = GLU_ACTS[l.get("act", "silu")](a) * b
        if gated:
            s = s * torch.sigmoid(u[:, 2 * S:])
        y = y + s @ P(name + ".shared.down.weight", (d, S), "w").t()
    return y.reshape(h.shape)


def layer_name(l, idx, prefix):
    return ".".join(prefix + [l.get("name", str(idx))])


def run_layers(layers, h, x, P, prefix, embeds, it=None):
    """The layers of a list applied in order to h; x the token ids; embeds: an
    embedding's name -> its weight (for a linear's tie); it: the innermost repeat's
    iteration."""
    for idx, l in enumerate(layers):
        glu_next = idx + 1 < len(layers) and layers[idx + 1]["op"] == "glu"
        op, name = l["op"], layer_name(l, idx, prefix)
        own = prefix + [l["name"]] if "name" in l else prefix   # containers' names
        if op == "embedding":
            w = P(name + ".weight", (l["vocab"], l["dim"]), "w")
            embeds[l.get("name", str(idx))] = w
            h = w[x]
        elif op == "pos_embedding":
            h = h + P(name + ".weight", (l["max_len"], h.shape[-1]), "w")[: h.shape[1]]
        elif op == "linear":
            if l.get("tie"):
                w = embeds[l["tie"]]
            else:
                w = P(name + ".weight", (l["out"], h.shape[-1]), "w")
            b = P(name + ".bias", (l["out"],), "b") if l.get("bias", True) else None
            x_in = h
            if glu_next:   # the gate rows and the up rows apart, as HF's gate_proj, up_proj
                h = torch.cat([F.linear(h, wp, bp) for wp, bp in
                               zip(w.chunk(2), b.chunk(2) if b is not None else (None, None))], dim=-1)
            else:
                h = F.linear(h, w, b)
            if not l.get("tie"):
                h = adapted(h, x_in, name + ".weight", P)
        elif op == "rmsnorm":
            h = rmsnorm(h, P(name + ".weight", (h.shape[-1],), "norm"), l.get("eps", 1e-6))
        elif op == "layernorm":   # bias false: the weight alone; affine false: neither
            d = h.shape[-1]
            aff = l.get("affine", True)
            w = P(name + ".weight", (d,), "norm") if aff else None
            b = P(name + ".bias", (d,), "b") if aff and l.get("bias", True) else None
            h = F.layer_norm(h, (d,), w, b, l.get("eps", 1e-5))
        elif op == "attention":
            h = attention(h, l, P, name, it)
        elif op == "glu":
            a, b = h.chunk(2, dim=-1)
            h = GLU_ACTS[l.get("act", "silu")](a) * b
        elif op == "moe":
            h = moe(l, h, P, name)
        elif op == "squared_relu":
            h = F.relu(h).square()
        elif op == "scale":   # the factor as a float, as torch's tensor * python float
            h = h * l["by"]
        elif op == "relu":
            h = F.relu(h)
        elif op == "tanh":
            h = torch.tanh(h)
        elif op == "silu":
            h = F.silu(h)
        elif op == "gelu":
            h = F.gelu(h, approximate=l.get("approximate", "none"))
        elif op == "residual":
            h = h + run_layers(l["body"], h, x, P, own, embeds, it)
        elif op == "repeat":
            for k in range(l["count"]):
                h = run_layers(l["body"], h, x, P, own + [str(k)], embeds, k)
        else:
            raise ValueError("llama_torch.py has no op " + op)
    return h


def logits(model, P, x):
    """The model spec's logits for token ids x [B, T]."""
    return run_layers(model["layers"], None, x, P, [], {})


def init_params(model, seed):
    """Fresh parameters for a model spec (a forward pass on one window makes them)."""
    P = Params(torch.Generator().manual_seed(seed))
    T = model["inputs"]["x"]["shape"][0]
    logits(model, P, torch.zeros(1, T, dtype=torch.int64))
    P.make = False
    return P


# ---- data, training, trainc ----------------------------------------------------------

def token_windows(T, n):
    """Windows 0 .. n-1 of data/text's first train shard (the order trainc reads them
    in with shuffle off): x [n, T], y [n, T] int64."""
    path = os.path.join(ROOT, "data", "text", "train_000000.bin")
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    assert hdr[0] == 20240520, "not a uint16 token shard: " + path
    tok = torch.from_numpy(np.frombuffer(raw[1024:1024 + 2 * int(hdr[2])], dtype="<u2").astype(np.int64))
    assert len(tok) >= n * T + 1, "data/text is too short"
    x = torch.stack([tok[w * T:w * T + T] for w in range(n)])
    y = torch.stack([tok[w * T + 1:w * T + T + 1] for w in range(n)])
    return x, y


def train_spec(steps, B, lr=1e-3, warmup=5):
    """The training half of the spec both sides follow (fp32, shuffle off)."""
    return {"data": {"train": {"tokens": os.path.join(ROOT, "data", "text", "train_*.bin")}},
            "batch_size": B, "max_steps": steps, "precision": "fp32",
            "optimizer": {"type": "adamw", "lr": lr, "betas": [0.9, 0.95], "eps": 1e-8,
                          "weight_decay": 0.1},
            "schedule": {"type": "cosine", "warmup_steps": warmup, "final_lr_frac": 0.1},
            "grad_clip": 1.0, "loader": {"shuffle": False}, "log_every": 1, "seed": 1}


def zeropower(u, eps, steps):
    """torch.optim.Muon's Newton-Schulz orthogonalization of a matrix, in fp32 (torch's
    runs in bf16): transposed when it has more rows than columns"""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = u.shape[0] > u.shape[1]
    X = u.T if tall else u
    X = X / X.norm().clamp(min=eps)
    for _ in range(steps):
        A = X @ X.T
        X = torch.addmm(X, torch.addmm(A, A, A, beta=b, alpha=c), X, beta=a)
    return X.T if tall else X


class Muon(torch.optim.Optimizer):
    """torch.optim.Muon (PyTorch 2.9) written from its source, for 2-D parameters: the
    momentum buffer lerped toward the gradient, Nesterov's look-ahead, the update
    orthogonalized (zeropower), lr scaled by the shape (adjust "original": sqrt(max(1,
    rows / cols)); "match_rms_adamw": 0.2 sqrt(max(rows, cols))), decoupled decay"""

    def __init__(self, params, lr, weight_decay, momentum, nesterov, eps, ns_steps, adjust):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, eps=eps, ns_steps=ns_steps,
                                      adjust=adjust))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - g["momentum"])
                u = p.grad.lerp(buf, g["momentum"]) if g["nesterov"] else buf
                u = zeropower(u, g["eps"], g["ns_steps"])
                rows, cols = p.shape
                ratio = (math.sqrt(max(1, rows / cols)) if g["adjust"] == "original"
                         else 0.2 * math.sqrt(max(rows, cols)))
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_(u, alpha=-g["lr"] * ratio)


def muon_optimizers(named, o):
    """Muon (optimizer o's keys, torch's defaults) for the 2-D parameters named in
    `named` ({name: tensor}) whose names end in a hidden projection's, AdamW
    (o["adamw"]'s keys, AdamW's defaults) for the rest"""
    hidden = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
              "gate_proj.weight", "up_proj.weight", "down_proj.weight")
    mu = [p for n, p in named.items() if n.endswith(hidden)]
    rest = [p for n, p in named.items() if not n.endswith(hidden)]
    aw = o.get("adamw", {})
    wd = aw.get("weight_decay", 0.01)
    return [Muon(mu, o["lr"], o.get("weight_decay", 0.1), o.get("momentum", 0.95),
                 o.get("nesterov", True), o.get("eps", 1e-7), o.get("ns_steps", 5),
                 o.get("adjust_lr", "original")),
            torch.optim.AdamW([{"params": [p for p in rest if p.dim() >= 2], "weight_decay": wd},
                               {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}],
                              lr=aw.get("lr", 1e-3), betas=tuple(aw.get("betas", (0.9, 0.999))),
                              eps=aw.get("eps", 1e-8), foreach=False)]


def train_torch(forward, params, tr, x, y, vocab, ls=0.0, opts=None):
    """Trains `params` (a list of tensors, each once) with forward(x) -> logits (or
    (logits, a loss term added to the cross-entropy)) as trainc trains by tr (its
    `accumulate` micro-batches a step, each one's mean loss over its targets not -100,
    F.cross_entropy's ignore_index, weighing 1 / accumulate; label smoothing ls), by
    AdamW or the optimizers `opts` (each scheduled alike); returns each step's loss
    (computed before the update: the micro-batches' mean)."""
    params = [p.requires_grad_() for p in params]
    o, sc = tr["optimizer"], tr["schedule"]
    opts = opts or [torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2],
                                        "weight_decay": o["weight_decay"]},
                                       {"params": [p for p in params if p.dim() < 2],
                                        "weight_decay": 0.0}],
                                      lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                      foreach=False)]
    steps, B, warm, final = tr["max_steps"], tr["batch_size"], sc["warmup_steps"], sc["final_lr_frac"]

    def lam(step):
        if step < warm:
            return (step + 1) / warm
        prog = min(max((step - warm) / max(steps - warm, 1), 0.0), 1.0)
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * prog))
    scheds = [torch.optim.lr_scheduler.LambdaLR(opt, lam) for opt in opts]
    losses, k = [], tr.get("accumulate", 1)
    for step in range(steps):
        for opt in opts:
            opt.zero_grad()
        total = 0.0
        for j in range(k):
            at = (step * k + j) * B
            xb, yb = x[at:at + B], y[at:at + B]
            out, extra = forward(xb), 0.0
            if isinstance(out, tuple):
                out, extra = out
            loss = F.cross_entropy(out.reshape(-1, vocab), yb.reshape(-1), label_smoothing=ls) + extra
            (loss / k if k > 1 else loss).backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(params, tr["grad_clip"])
        for opt, sched in zip(opts, scheds):
            opt.step()
            sched.step()
        losses.append(total / k)
    return losses


def run_trainc(spec, init, out):
    """Writes spec to OUT/spec.json and init ({name: tensor}) to OUT/init.safetensors,
    trains with `trainc run` on one thread, returns each step's loss."""
    import st_check
    os.makedirs(out, exist_ok=True)
    sp = os.path.join(out, "spec.json")
    json.dump(spec, open(sp, "w"), indent=1)
    ip = os.path.join(out, "init.safetensors")
    st_check.save(ip, {n: t.detach().numpy().astype(np.float32) for n, t in init.items()})
    run = os.path.join(out, "run")
    subprocess.run([TRAINC, "run", sp, "--init", ip, "--out", run, "--threads", "1", "--quiet"],
                   check=True)
    return run_log.losses(run)


def compare(what, ours, ref, tol):
    """Prints the worst relative difference of two loss lists; True when within tol."""
    assert len(ours) == len(ref), (what, len(ours), len(ref))
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
    ok = worst <= tol
    print("%s %s: %d steps, loss %.6f -> %.6f vs %.6f -> %.6f, worst relative difference %.1e"
          % ("ok  " if ok else "FAIL", what, len(ref), ours[0], ours[-1], ref[0], ref[-1], worst))
    if not ok:
        for i, (a, b) in enumerate(zip(ours, ref)):
            print("  step %d: %.7f vs %.7f  %.1e" % (i + 1, a, b, abs(a - b) / abs(b)))
    return ok
