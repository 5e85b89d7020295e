"""PyTorch's side of the Llama GPU benchmark (bench/gpu_llama.sh runs it there).

The two Llama shapes of specs/llama_124m.json and specs/llama3_1b.json, written as
PyTorch users write them at their strongest (../BENCHMARKING.md: the same model, the
same work): RMSNorm, rotary positions (llama3 scaling for the 1B), grouped-query
attention through F.scaled_dot_product_attention (flash; enable_gqa where this torch
has it, else the K/V heads expanded as HF's repeat_kv does), SwiGLU, no biases; bf16
autocast, fused AdamW, gradient clipping; the vocabulary padded as trainc pads it on a
GPU (a multiple of 128 rows); the loss inside the step, the head and cross-entropy in
chunks of rows recomputed in the backward (the logits of a 128k vocabulary never whole).
With --compile the whole step's forward and loss go through torch.compile. With --data
GLOB the batches are llm.c shards' windows in trainc's order (bench/trainc_data.py),
pinned and copied without a wait, as trainc reads the same shards; else one random
batch drawn on the GPU.

usage: gpu_llama_torch.py MODEL BATCH [--compile] [--ckpt] [--steps N] [--data GLOB]
       MODEL: 124m or 1b
prints one JSON line: tokens/s (after 3 warm-up steps), peak memory
(torch.cuda.max_memory_allocated, the device's total and what it holds outside
PyTorch's allocator), or "oom".
"""
import json, math, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint as cp
from trainc_data import Windows, batches, to_device

CONFIGS = {
    # vocab, d, layers, heads, kv heads, ffn, T, theta, llama3 scaling, tied, eps
    "124m": dict(V=50257, D=768, L=12, H=12, KV=4, F=2048, T=1024, theta=1e4, scaling=None,
                 tied=False, eps=1e-6),
    "1b": dict(V=128256, D=2048, L=16, H=32, KV=8, F=8192, T=2048, theta=5e5,
               scaling=dict(factor=32.0, low=1.0, high=4.0, orig=8192), tied=True, eps=1e-5),
}


def rope_freqs(c):
    hd = c["D"] // c["H"]
    inv = 1.0 / c["theta"] ** (torch.arange(0, hd, 2).double() / hd)
    s = c["scaling"]
    if s:   # HF's llama3 rope_scaling: long wavelengths slowed by factor, short kept
        lo_wl, hi_wl = s["orig"] / s["low"], s["orig"] / s["high"]
        wl = 2 * math.pi / inv
        smooth = (s["orig"] / wl - s["low"]) / (s["high"] - s["low"])
        mid = (1 - smooth) * inv / s["factor"] + smooth * inv
        inv = torch.where(wl > lo_wl, inv / s["factor"], torch.where(wl < hi_wl, inv, mid))
    ang = torch.outer(torch.arange(c["T"]).double(), inv)
    return torch.cos(ang).float(), torch.sin(ang).float()


def rotate(x, cos, sin):   # x [B, heads, T, hd]: "rotate half", dims i and i + hd/2
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


HAS_GQA = "enable_gqa" in (getattr(F, "scaled_dot_product_attention", None).__doc__ or "")


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c, hd = c, c["D"] // c["H"]
        self.n1, self.n2 = RMSNorm(c["D"], c["eps"]), RMSNorm(c["D"], c["eps"])
        self.qkv = nn.Linear(c["D"], (c["H"] + 2 * c["KV"]) * hd, bias=False)
        self.proj = nn.Linear(c["D"], c["D"], bias=False)
        self.gate_up = nn.Linear(c["D"], 2 * c["F"], bias=False)
        self.down = nn.Linear(c["F"], c["D"], bias=False)

    def forward(self, x, cos, sin):
        c, (B, T, D) = self.c, x.shape
        H, KV, hd = c["H"], c["KV"], D // c["H"]
        q, k, v = self.qkv(self.n1(x)).split([H * hd, KV * hd, KV * hd], dim=2)
        q = rotate(q.view(B, T, H, hd).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, KV, hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if HAS_GQA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, c, ckpt):
        super().__init__()
        self.c, self.ckpt = c, ckpt
        self.Vp = (c["V"] + 127) // 128 * 128
        self.emb = nn.Embedding(self.Vp, c["D"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["L"]))
        self.norm = RMSNorm(c["D"], c["eps"])
        self.head = None if c["tied"] else nn.Linear(c["D"], self.Vp, bias=False)
        cos, sin = rope_freqs(c)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def hidden(self, idx):
        x = self.emb(idx)
        for b in self.h:
            x = cp.checkpoint(b, x, self.cos, self.sin, use_reentrant=False) if self.ckpt else b(x, self.cos, self.sin)
        return self.norm(x)


def chunk_loss(h, w, y, V):   # one chunk's logits, recomputed in the backward
    logits = (h @ w.T).float()[:, :V]
    return F.cross_entropy(logits, y, reduction="sum")


def loss_fn(m, x, y, chunk=8192):
    h = m.hidden(x).flatten(0, 1)
    w = m.emb.weight if m.head is None else m.head.weight
    y = y.flatten()
    tot = 0.0
    for i in range(0, h.shape[0], chunk):
        tot = tot + cp.checkpoint(chunk_loss, h[i:i + chunk], w, y[i:i + chunk], m.c["V"], use_reentrant=False)
    return tot / h.shape[0]


def run(name, B, compiled, ckpt, steps, data):
    c = CONFIGS[name]
    torch.manual_seed(0)
    m = Llama(c, ckpt).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_loss = torch.compile(loss_fn) if compiled else loss_fn
    x = torch.randint(0, c["V"], (B, c["T"]), device="cuda")
    y = torch.randint(0, c["V"], (B, c["T"]), device="cuda")
    feed = batches(Windows(data, c["T"]), B, 1337) if data else None
    torch.cuda.reset_peak_memory_stats()
    t0 = None
    for s in range(steps):
        if s == 3:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if feed:
            x, y = to_device(*next(feed), "cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_loss(m, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    torch.cuda.synchronize()
    n = sum(p.numel() for p in m.parameters())
    return (steps - 3) * B * c["T"] / (time.perf_counter() - t0), torch.cuda.max_memory_allocated(), n


if __name__ == "__main__":
    a = sys.argv[1:]
    name, B = a[0], int(a[1])
    steps = int(a[a.index("--steps") + 1]) if "--steps" in a else 10
    compiled, ckpt = "--compile" in a, "--ckpt" in a
    data = a[a.index("--data") + 1] if "--data" in a else None
    rec = {"impl": "torch" + ("+compile" if compiled else "") + "+bf16" + ("+checkpoint" if ckpt else ""),
           "model": name, "batch": B, "sdpa_gqa": HAS_GQA, "data": data}
    try:
        tps, peak, n = run(name, B, compiled, ckpt, steps, data)
        free, total = torch.cuda.mem_get_info()
        rec.update(tokens_per_s=round(tps, 1), peak_bytes=peak, total_bytes=total, params_padded=n,
                   other_bytes=total - free - torch.cuda.memory_reserved(),
                   device=torch.cuda.get_device_name(), torch=torch.__version__)
    except torch.OutOfMemoryError:
        rec["oom"] = True
    print(json.dumps(rec), flush=True)
