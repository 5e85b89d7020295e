"""PyTorch's side of the GPT-2 124M GPU benchmark (bench/gpu_gpt2.sh runs it there).

GPT-2 small as specs/gpt2_124m.json describes it (12 blocks, d 768, 12 heads, T 1024,
vocab 50257, tied head, tanh GELU), trained with AdamW (fused) on random tokens, in
fp32 or with bf16 autocast, with or without torch.utils.checkpoint around each block.
Attention is F.scaled_dot_product_attention (flash attention on the GPU).

usage: gpu_gpt2_torch.py BATCH [--bf16] [--ckpt] [--compile] [--steps N]
prints one JSON line: tokens/s (after 3 warm-up steps), peak memory (and the device's
total and what it holds outside PyTorch's allocator), or "oom".
"""
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint as cp

V, T, D, H, L = 50257, 1024, 768, 12, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.fc_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = self.qkv(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, ckpt):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.ckpt = ckpt

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = cp.checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.ln_f(x) @ self.wte.weight.T


def run(B, bf16, ckpt, compiled, steps):
    torch.manual_seed(0)
    m = GPT(ckpt).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(m) if compiled else m
    x = torch.randint(0, V, (B, T), device="cuda")
    y = torch.randint(0, V, (B, T), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    t0 = None
    for s in range(steps):
        if s == 3:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(fwd(x).float().view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    torch.cuda.synchronize()
    return (steps - 3) * B * T / (time.perf_counter() - t0), torch.cuda.max_memory_allocated()


if __name__ == "__main__":
    a = sys.argv[1:]
    B = int(next(x for x in a if x.isdigit()))
    steps = int(a[a.index("--steps") + 1]) if "--steps" in a else 10
    bf16, ckpt, compiled = "--bf16" in a, "--ckpt" in a, "--compile" in a
    rec = {"impl": "torch" + ("+compile" if compiled else "") + ("+bf16" if bf16 else "+fp32") +
           ("+checkpoint" if ckpt else ""), "batch": B}
    try:
        tps, peak = run(B, bf16, ckpt, compiled, steps)
        free, total = torch.cuda.mem_get_info()
        # what the device holds besides PyTorch's allocator (the context, cuBLAS's own):
        # bench/gpu_gpt2.sh predicts the largest batch from two small ones with it
        rec.update(tokens_per_s=round(tps, 1), peak_bytes=peak, total_bytes=total,
                   other_bytes=total - free - torch.cuda.memory_reserved(),
                   device=torch.cuda.get_device_name())
    except torch.OutOfMemoryError:
        rec["oom"] = True
    print(json.dumps(rec), flush=True)
