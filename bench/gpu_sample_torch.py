"""PyTorch's side of bench/gpu_sample.sh: greedy generation from bench/gpu_llama_torch.py's
Llama (the same shapes, random weights, in bf16) with a static key/value cache, as
gpt-fast writes it at its strongest: each layer's cache [1, KV, T, hd] allocated once,
the prompt in one pass, then each token one position through the blocks, written into
the caches at its position and attending to all T cached positions under a mask (one
shape for every token). With --compile the one-token step goes through
torch.compile(mode="reduce-overhead", fullgraph=True): CUDA graphs, one launch a token.
With --batch B, B sequences from the same prompt at once (a batch row each, as trainc's
--num-samples B).

usage: gpu_sample_torch.py MODEL PROMPT N [--compile] [--batch B] [--device cpu]
       MODEL: 124m or 1b; PROMPT ids (random), then N new ones
prints one JSON line: tokens (B N), seconds (the prompt's pass and the N tokens, after a
warm-up generation of the same length), tokens_per_s.
"""
import json, math, sys, time
import torch, torch.nn.functional as F
from gpu_llama_torch import CONFIGS, Llama, rotate


def attend(q, k, v, mask):   # q [B, H, t, hd]; k, v [B, KV, T, hd]; mask [t, T]
    H, KV = q.shape[1], k.shape[1]
    if H != KV:
        k, v = (x.repeat_interleave(H // KV, dim=1) for x in (k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])   # (torch before 2.0)
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def step(m, kc, vc, idx, pos):
    """the ids idx [B, t] at positions pos [t] through the model, their keys and values
    into the caches: the logits of the last"""
    c, x = m.c, m.emb(idx)
    B, t, D = x.shape
    H, KV, hd = c["H"], c["KV"], D // c["H"]
    cos, sin = m.cos[pos], m.sin[pos]
    mask = torch.arange(c["T"], device=idx.device)[None, :] <= pos[:, None]
    for i, b in enumerate(m.h):
        q, k, v = b.qkv(b.n1(x)).split([H * hd, KV * hd, KV * hd], dim=2)
        q = rotate(q.view(B, t, H, hd).transpose(1, 2), cos, sin)
        kc[i][:, :, pos] = rotate(k.view(B, t, KV, hd).transpose(1, 2), cos, sin)
        vc[i][:, :, pos] = v.view(B, t, KV, hd).transpose(1, 2)
        y = attend(q, kc[i], vc[i], mask)
        x = x + b.proj(y.transpose(1, 2).reshape(B, t, D))
        g, u = b.gate_up(b.n2(x)).chunk(2, dim=-1)
        x = x + b.down(F.silu(g) * u)
    w = m.emb.weight if m.head is None else m.head.weight
    return (m.norm(x[:, -1]) @ w.T)[..., :c["V"]]


def generate(m, one, prompt, n):
    """greedy: the prompt's pass, then n - 1 one-token steps (one); the n ids"""
    c, dev = m.c, prompt.device
    hd = c["D"] // c["H"]
    kc = [torch.zeros(prompt.shape[0], c["KV"], c["T"], hd, dtype=m.emb.weight.dtype, device=dev)
          for _ in m.h]
    vc = [torch.zeros_like(x) for x in kc]
    p = prompt.shape[1]
    nxt = step(m, kc, vc, prompt, torch.arange(p, device=dev)).argmax(-1, keepdim=True)
    out = [nxt]
    for i in range(n - 1):
        nxt = one(m, kc, vc, nxt, torch.tensor([p + i], device=dev)).argmax(-1, keepdim=True)
        out.append(nxt.clone())
    return torch.cat(out, dim=1)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name, p, n = args[0], int(args[1]), int(args[2])
    dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
    if "--device" in sys.argv:
        args.remove(dev)
    B = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 1
    if "--batch" in sys.argv:
        args.remove(str(B))
    torch.manual_seed(0)
    m = Llama(CONFIGS[name], False).to(dev).to(torch.bfloat16 if dev == "cuda" else torch.float32).eval()
    one = torch.compile(step, mode="reduce-overhead", fullgraph=True) if "--compile" in sys.argv else step
    prompt = torch.randint(0, CONFIGS[name]["V"], (1, p), device=dev).repeat(B, 1)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with torch.no_grad():
        generate(m, one, prompt, n)   # warm-up (and the compile)
        sync()
        t0 = time.perf_counter()
        ids = generate(m, one, prompt, n)
        sync()
        dt = time.perf_counter() - t0
    impl = "pytorch " + ("compile" if "--compile" in sys.argv else "eager") + (" x%d" % B if B > 1 else "")
    print(json.dumps({"impl": impl, "tokens": ids.numel(), "seconds": round(dt, 4),
                      "tokens_per_s": round(ids.numel() / dt, 2)}))


if __name__ == "__main__":
    main()
