"""PyTorch's side of the attention benchmark (bench/gpu_attention.sh runs it beside
tests/gpu/bench_attn.c on the same device).

The shapes and the FLOP count of bench_attn.c: d = 2048 (32 heads of 64, 16 of 128),
B = 16384 / T, T 1024, 2048 and 4096, causal and full, bf16 (--fp16: fp16). Each
backend of F.scaled_dot_product_attention that this torch can force (flash, cuDNN,
memory-efficient) is timed alone: the forward, and the backward alone (the gradient of
the output through torch.autograd.grad, the forward outside the timed region), with
CUDA events over ITERS calls after 3. Inputs are [B, H, T, hd] views of one packed
[B, T, 3, H, hd] tensor, as a model's QKV projection produces them (and as trainc's
kernels read qkv). A backend that refuses a shape gives a row with "error".

Then the Llama-family rows of bench_attn.c (llama3_1b's, llama_124m's and a global
layer of Gemma 3 1B's attention: grouped-query heads, rope, causal): rope applied to q and k as Hugging Face's Llama does
(rotate_half with cos and sin tables made beforehand, in the timed region, forward and
backward), then SDPA with enable_gqa where this torch has it, else k and v repeated to
every query head (Hugging Face's repeat_kv, also timed).

Then a layer of Gemma 2 2B's (the scores soft-capped at 50, which SDPA cannot do): rope,
then flex_attention compiled with the cap as its score_mod and a causal block mask
(torch 2.5 on; "flex"), and the eager attention Gemma 2's modeling code runs ("eager":
repeat_kv, the scores in fp32, / cap, tanh, * cap, the mask, softmax).

usage: gpu_attention_torch.py [--fp16] [--iters N] [--tiny]
prints one JSON line a (backend, shape).
"""
import contextlib, json, sys
import torch
import torch.nn.functional as F

ARGS = sys.argv[1:]
DT = torch.float16 if "--fp16" in ARGS else torch.bfloat16
ITERS = int(ARGS[ARGS.index("--iters") + 1]) if "--iters" in ARGS else 20
TINY = "--tiny" in ARGS
DEV = "cuda" if torch.cuda.is_available() and not TINY else "cpu"


def math_sdpa(q, k, v, is_causal):
    """attention written out, for a dry run where this torch has no SDPA (1.13)"""
    s = (q @ k.transpose(-1, -2)).float() / q.shape[-1] ** 0.5
    if is_causal:
        T = q.shape[-2]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1).to(q.dtype) @ v)


SDPA = getattr(F, "scaled_dot_product_attention", math_sdpa)


def backends():
    """(name, context manager factory) for each backend this torch can force"""
    out = []
    try:   # torch >= 2.3
        from torch.nn.attention import sdpa_kernel, SDPBackend
        for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
            if hasattr(SDPBackend, name):
                out.append((name.split("_")[0].lower(), lambda b=getattr(SDPBackend, name): sdpa_kernel([b])))
    except ImportError:   # older: the boolean switches
        k = torch.backends.cuda.sdp_kernel
        out.append(("flash", lambda: k(enable_flash=True, enable_math=False, enable_mem_efficient=False)))
        out.append(("efficient", lambda: k(enable_flash=False, enable_math=False, enable_mem_efficient=True)))
    if DEV == "cpu":
        out = [("math", lambda: __import__("contextlib").nullcontext())]
    return out


def timed(fn):
    """ms per call of fn over ITERS calls after 3 warm-ups"""
    for _ in range(3):
        fn()
    if DEV == "cpu":
        import time
        t = time.perf_counter()
        for _ in range(ITERS):
            fn()
        return (time.perf_counter() - t) * 1e3 / ITERS
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(ITERS):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / ITERS


def time_row(row, ctx, fwd, inputs, dy, flop):
    """row with fwd's time and the backward's alone (the gradient of its output dy through
    torch.autograd.grad to inputs) under the backend ctx, and their TFLOP/s (the backward
    2.5 times flop); a backend's refusal as "error" """
    try:
        with ctx():
            fwd_ms = timed(fwd)
            y = fwd()
            bwd_ms = timed(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
    except RuntimeError as e:
        row["error"] = str(e).splitlines()[0][:200]
        return row
    row.update(fwd_ms=round(fwd_ms, 4), bwd_ms=round(bwd_ms, 4),
               fwd_tflops=round(flop / fwd_ms * 1e-9, 2), bwd_tflops=round(2.5 * flop / bwd_ms * 1e-9, 2))
    return row


def shape_row(name, ctx, T, hd, causal):
    d, tokens = 2048, 128 if TINY else 16384
    H, B = d // hd, tokens // T
    row = {"impl": "torch", "backend": name, "dtype": "fp16" if DT == torch.float16 else "bf16",
           "B": B, "T": T, "H": H, "hd": hd, "causal": causal, "iters": ITERS,
           "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu"}
    g = torch.Generator(device=DEV).manual_seed(T)
    qkv = (torch.rand(B, T, 3, H, hd, device=DEV, generator=g) * 2 - 1).to(DT)
    q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    dy = (torch.rand(B, H, T, hd, device=DEV, generator=g) * 2 - 1).to(DT)
    flop = 4.0 * B * H * T * T * hd * (0.5 if causal else 1.0)
    return time_row(row, ctx, lambda: SDPA(q, k, v, is_causal=causal), (q, k, v), dy, flop)


GQA = (("llama3_1b", 2048, 32, 8, 64, 500000.0), ("llama_124m", 1024, 12, 4, 64, 10000.0),
       ("gemma3_1b", 2048, 4, 1, 256, 1000000.0))


def rope_tables(T, hd, theta):
    """cos, sin [T, hd] as Hugging Face's rotary embedding makes them (llama3's scaling
    changes the frequencies, not the work: left out)"""
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=DEV, dtype=torch.float32) / hd)
    ang = torch.outer(torch.arange(T, device=DEV, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), -1)
    return emb.cos().to(DT), emb.sin().to(DT)


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin


def gqa_attention(q, k, v, G):
    try:
        return SDPA(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:   # no enable_gqa in this torch: repeat_kv
        return SDPA(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), is_causal=True)


def gqa_row(name, ctx, shape, attn=gqa_attention, extra=None, seed=7):
    """a row of the Llama-family shape: rope on q and k, then attn(q, k, v, G) (SDPA with
    GQA, or a capped implementation, whose keys extra adds to the row)"""
    label, T, H, KV, hd, theta = shape
    T = 64 if TINY else T
    B = (128 if TINY else 16384) // T
    row = {"impl": "torch", "backend": name, "shape": label, "dtype": "fp16" if DT == torch.float16 else "bf16",
           "B": B, "T": T, "H": H, "KV": KV, "hd": hd, "causal": True, "rope_theta": theta,
           "iters": ITERS, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", **(extra or {})}
    g = torch.Generator(device=DEV).manual_seed(T + seed)
    qkv = (torch.rand(B, T, H + 2 * KV, hd, device=DEV, generator=g) * 2 - 1).to(DT)
    q, k, v = (x.transpose(1, 2).detach().requires_grad_() for x in qkv.split((H, KV, KV), 2))
    dy = (torch.rand(B, H, T, hd, device=DEV, generator=g) * 2 - 1).to(DT)
    cos, sin = rope_tables(T, hd, theta)
    flop = 4.0 * B * H * T * T * hd * 0.5
    fwd = lambda: attn(rope(q, cos, sin), rope(k, cos, sin), v, H // KV)
    return time_row(row, ctx, fwd, (q, k, v), dy, flop)


CAPPED = (("gemma2_2b", 2048, 8, 4, 256, 10000.0, 50.0),)


def capped_eager(q, k, v, G, cap):
    """Gemma 2's eager attention: repeat_kv, scores scaled, soft-capped, masked"""
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    s = torch.tanh(s / cap) * cap
    T = q.shape[-2]
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1).to(q.dtype) @ v


def capped_impls(T, cap):
    """(name, attention(q, k, v, G)): flex_attention compiled with the cap as its score_mod
    where this torch has it, and the eager one"""
    out = [("eager", lambda q, k, v, G: capped_eager(q, k, v, G, cap))]
    try:   # torch >= 2.5
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    except ImportError:
        return out
    flex = torch.compile(flex_attention)
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, T, T, device=DEV)
    softcap = lambda score, b, h, qi, ki: cap * torch.tanh(score / cap)
    return [("flex", lambda q, k, v, G: flex(q, k, v, score_mod=softcap, block_mask=mask,
                                             enable_gqa=True))] + out


def capped_rows(shape):
    """a row a capped implementation: gqa_row's, its attention capped"""
    cap, T = shape[6], 64 if TINY else shape[1]
    return [gqa_row(name, contextlib.nullcontext, shape[:6], attn, {"softcap": cap}, seed=9)
            for name, attn in capped_impls(T, cap)]


def main():
    Ts = (64,) if TINY else (1024, 2048, 4096)
    for T in Ts:
        for hd in (64, 128):
            for causal in (True, False):
                for name, ctx in backends():
                    print(json.dumps(shape_row(name, ctx, T, hd, causal)), flush=True)
    for shape in GQA:
        for name, ctx in backends():
            print(json.dumps(gqa_row(name, ctx, shape)), flush=True)
    for shape in CAPPED:
        for row in capped_rows(shape):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
