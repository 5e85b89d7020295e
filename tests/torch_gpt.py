"""specs/gpt_char.json's model in PyTorch (Debian python3-torch, CPU), with trainc's
parameter names: for tests/gpt_parity.py (loss parity) and bench/gpt_cpu.py (speed).
Attention is written out (masked softmax), as torch 1.13 has no fused causal kernel."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def dims(spec):
    """V, D, T, L, H, FF, max_len of a gpt_char-shaped spec"""
    emb, pos, rep = spec["model"]["layers"][0], spec["model"]["layers"][1], spec["model"]["layers"][2]
    return (emb["vocab"], emb["dim"], spec["model"]["inputs"]["x"]["shape"][0], rep["count"],
            rep["body"][0]["body"][1]["heads"], rep["body"][1]["body"][1]["out"], pos["max_len"])


def gpt(spec):
    """the model, with GPT-2's init (normal 0.02, the residual projections scaled)"""
    V, D, T, L, H, FF, max_len = dims(spec)

    class Attn(nn.Module):
        def __init__(s):
            super().__init__()
            s.qkv, s.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(s, x):
            b, t, _ = x.shape
            q, k, v = s.qkv(x).split(D, dim=2)
            q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
            att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return s.proj(y.transpose(1, 2).contiguous().view(b, t, D))

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln_1, s.attn, s.ln_2 = nn.LayerNorm(D), Attn(), nn.LayerNorm(D)
            s.fc, s.proj = nn.Linear(D, FF), nn.Linear(FF, D)

        def forward(s, x):
            x = x + s.attn(s.ln_1(x))
            return x + s.proj(F.gelu(s.fc(s.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(V, D), nn.Embedding(max_len, D)
            s.h = nn.ModuleList([Block() for _ in range(L)])
            s.ln_f = nn.LayerNorm(D)

        def forward(s, idx):
            x = s.wte(idx) + s.wpe.weight[: idx.shape[1]]
            for b in s.h:
                x = b(x)
            return s.ln_f(x) @ s.wte.weight.t()

    model = GPT()
    for n, p in model.named_parameters():
        if n.endswith(".weight") and p.dim() == 2:
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02)
        elif n.endswith(".bias"):
            nn.init.zeros_(p)
    return model
