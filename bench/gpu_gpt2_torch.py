"""PyTorch's side of the GPT-2 124M GPU benchmarks (bench/gpu_gpt2_b16.sh and
bench/gpu_gpt2.sh run it there), at its strongest by ../shared/BENCHMARKING.md.

GPT-2 small as specs/gpt2_124m.json describes it (12 blocks, d 768, 12 heads, T 1024,
vocab 50257, tied head, tanh GELU), trained with AdamW on random tokens, in fp32 or
with bf16 autocast, with or without torch.utils.checkpoint around each block:
  - the vocabulary padded to 50304 rows as trainc pads it on a GPU (and llm.c and
    nanoGPT do): the head's GEMMs run over 50304 rows; --pad slice (the default)
    takes the loss over the first 50257 columns of the logits, as trainc's and
    llm.c's classifiers do (the padding is never read, its gradient is 0); --pad full
    is nanoGPT's way (all 50304 columns in the softmax, the extra 47 never a target);
    --pad none is the unpadded 50257 (the old baseline, for the A/B)
  - the loss inside the compiled region: with --compile one function (model, head,
    cross-entropy, under autocast) goes through torch.compile(fullgraph=True), so
    inductor fuses the cross-entropy over bf16 logits; --mode picks the compile mode
  - attention: F.scaled_dot_product_attention, held to flash attention in bf16 (the
    other CUDA back ends switched off)
  - AdamW fused on CUDA (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on tensors of rank
    2 and more, as trainc's spec.md says), gradient clipping at 1.0
Timing: total tokens over the wall time of the timed steps (the steps after --warm),
the device synchronized at both clock reads; compile time apart (the first step's
time less a timed step's); the wall time from the process's launch to the end of
its first step.

usage: gpu_gpt2_torch.py BATCH [--bf16] [--ckpt] [--compile] [--mode MODE] [--steps N]
                         [--warm W] [--pad slice|full|none] [--device cuda|cpu] [--tiny]
                         [--data GLOB [--seed S]] [--init FILE] [--save-init FILE]
                         [--warmup W] [--curve FILE]
  --steps N  steps in all (default 10), the first W (default 3) untimed
  --mode     default | max-autotune-no-cudagraphs | max-autotune | reduce-overhead
  --tiny     2 blocks of d 64, 4 heads, T 64 (the plumbing on a CPU, no figure)
The recipe against trainc's (bench/gpu_gpt2_curve.sh), the same work step for step:
  --data GLOB      batches of llm.c token shards in trainc's order (the windows at
                   offsets 0, T, 2T, ... of each shard in sorted order, each epoch's
                   order runtime/data.c's seeded Fisher-Yates shuffle with --seed,
                   default 1337; whole batches), not one random batch
  --init FILE      the weights of a safetensors file under trainc's names
                   (specs/gpt2_124m.json's); --save-init FILE writes the initial ones so
  --warmup W       trainc's cosine schedule to 0 over --steps after W warm-up steps
                   (docs/spec.md), not a constant rate
  --curve FILE     each step's loss as a JSON line (a wait a step: not for timing)
prints one JSON line: tokens/s, compile and first-step times, peak memory
(max_memory_allocated and max_memory_reserved, the device's total, what it holds
outside PyTorch's allocator, the context before any tensor), or "oom"; with
--compile where this torch has no torch.compile, a line with "skipped".
"""
import argparse, json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint as cp
from trainc_data import Windows, batches, to_device
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import st_check   # (tests/st_check.py: safetensors by hand, numpy)

V, V_PAD = 50257, 50304
FULL = dict(T=1024, D=768, H=12, L=12)
TINY = dict(T=64, D=64, H=4, L=2)
OOM = getattr(torch, "OutOfMemoryError", getattr(torch.cuda, "OutOfMemoryError", RuntimeError))


def process_age():
    """Seconds since this process was launched (its start time in /proc), or None."""
    try:
        start = float(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        return float(open("/proc/uptime").read().split()[0]) - start / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]   # torch 1.x: the same arithmetic, unfused (CPU plumbing runs only)
    a = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    a = a.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return a.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        D = c["D"]
        self.c = c
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.fc_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        (B, T, D), H = x.shape, self.c["H"]
        q, k, v = self.qkv(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c, ckpt, rows):
        super().__init__()
        self.c, self.ckpt = c, ckpt
        self.wte, self.wpe = nn.Embedding(rows, c["D"]), nn.Embedding(c["T"], c["D"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["L"]))
        self.ln_f = nn.LayerNorm(c["D"])
        for mod in self.modules():   # GPT-2's init (nanoGPT's, trainc's "init": "gpt2")
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)

    def forward(self, idx):   # the logits [B, T, rows], rows the (padded) vocabulary
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = cp.checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.ln_f(x) @ self.wte.weight.T


def make_loss(m, bf16, dev, pad):
    """The step's forward and loss as one function (what --compile compiles whole)."""
    def loss_fn(x, y):
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
            logits = m(x)
            if pad == "slice":   # the padding's columns never read: trainc's and llm.c's
                logits = logits[..., :V]
            # under autocast cross_entropy runs in fp32; compiled, on the bf16 logits
            # without an fp32 copy of them
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return loss_fn


def sdpa_flash_only():
    """Leave flash attention the only CUDA back end of SDPA (bf16 runs; fp32 has none)."""
    for name in ("enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp"):
        f = getattr(torch.backends.cuda, name, None)
        if f:
            f(False)
    torch.backends.cuda.enable_flash_sdp(True)


def optimizer(m, dev):
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    kw = {"fused": True} if dev == "cuda" else {}
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), **kw)


# ---- trainc's weights (--init, --save-init) -------------------------------------


def trainc_names(m, c):
    """trainc's name of each tensor of GPT (specs/gpt2_124m.json's layers)"""
    names = {"wte.weight": "wte.weight", "wpe.weight": "wpe.weight",
             "ln_f.weight": "ln_f.weight", "ln_f.bias": "ln_f.bias"}
    ours = {"ln_1": "ln_1", "ln_2": "ln_2", "qkv": "attn.qkv", "proj": "attn.proj", "fc": "fc",
            "fc_proj": "proj"}
    for i in range(c["L"]):
        for a, b in ours.items():
            for w in ("weight", "bias"):
                names["h.%d.%s.%s" % (i, a, w)] = "h.%d.%s.%s" % (i, b, w)
    return names


def load_init(m, c, path):
    """--init: a safetensors file of F32 tensors under trainc's names (wte's first V
    rows; the padding rows stay 0)"""
    w = st_check.load(path)
    sd = m.state_dict()
    with torch.no_grad():
        for ours, theirs in trainc_names(m, c).items():
            t = torch.from_numpy(w[theirs])
            sd[ours].zero_()
            sd[ours][:t.shape[0]].copy_(t)


def save_init(m, c, path):
    """--save-init: the weights under trainc's names, wte's first V rows"""
    sd, out = m.state_dict(), {}
    for ours, theirs in sorted(trainc_names(m, c).items(), key=lambda kv: kv[1]):
        t = sd[ours][:V] if ours == "wte.weight" else sd[ours]
        out[theirs] = t.detach().float().cpu().numpy()
    st_check.save(path, out)


def rate(s, a):
    """--warmup: docs/spec.md's cosine schedule from 6e-4 to 0 over a.steps steps"""
    import math
    if s < a.warmup:
        return 6e-4 * (s + 1) / a.warmup
    p = (s - a.warmup) / max(1, a.steps - a.warmup)
    return 6e-4 * (1 + math.cos(math.pi * p)) / 2


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def run(a, c):
    dev, rows = a.device, (V if a.pad == "none" else V_PAD)
    torch.manual_seed(0)
    context = None
    if dev == "cuda":
        torch.cuda.init()
        torch.empty(1, device=dev)   # the context exists now: what it holds, before any tensor
        free, total = torch.cuda.mem_get_info()
        context = total - free
        if a.bf16:
            sdpa_flash_only()
    m = GPT(c, a.ckpt, rows).to(dev)
    if a.init:
        load_init(m, c, a.init)
    if a.save_init:
        save_init(m, c, a.save_init)
    opt = optimizer(m, dev)
    loss_fn = make_loss(m, a.bf16, dev, a.pad)
    if a.compile:
        loss_fn = torch.compile(loss_fn, fullgraph=True, mode=None if a.mode == "default" else a.mode)
    x = torch.randint(0, V, (a.batch, c["T"]), device=dev)
    y = torch.randint(0, V, (a.batch, c["T"]), device=dev)
    data = batches(Windows(a.data, c["T"]), a.batch, a.seed) if a.data else None
    curve = open(a.curve, "w") if a.curve else None
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step_s, first_wall, t0 = [], None, None
    for s in range(a.steps):
        if s == a.warm:
            sync(dev)
            t0 = time.perf_counter()
        ts = time.perf_counter() if s < a.warm else None
        if data:
            x, y = to_device(*next(data), dev)
        if a.warmup is not None:
            for g in opt.param_groups:
                g["lr"] = rate(s, a)
        loss = loss_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if curve:
            curve.write(json.dumps({"step": s + 1, "loss": loss.item()}) + "\n")
        if ts is not None:   # warm-up steps: each timed alone (compile is in the first)
            sync(dev)
            step_s.append(time.perf_counter() - ts)
            if s == 0:
                first_wall = process_age()
    sync(dev)
    timed = a.steps - a.warm
    wall = time.perf_counter() - t0
    rec = {"tokens_per_s": round(timed * a.batch * c["T"] / wall, 1), "timed_steps": timed,
           "timed_wall_s": round(wall, 4), "warm_step_s": [round(t, 4) for t in step_s],
           "compile_s": round(step_s[0] - wall / timed, 3) if a.compile else None,
           "first_step_wall_s": round(first_wall, 3) if first_wall is not None else None,
           "final_loss": round(loss.item(), 4)}
    if dev == "cuda":
        free, total = torch.cuda.mem_get_info()
        # what the device holds besides PyTorch's allocator (the context, cuBLAS's own):
        # bench/gpu_gpt2.sh predicts the largest batch from two small ones with it
        rec.update(peak_bytes=torch.cuda.max_memory_allocated(), reserved_bytes=torch.cuda.max_memory_reserved(),
                   total_bytes=total, other_bytes=total - free - torch.cuda.memory_reserved(),
                   used_bytes=total - free, context_bytes=context, device=torch.cuda.get_device_name())
    return rec


def parse(argv):
    p = argparse.ArgumentParser(description="PyTorch's GPT-2 124M step, timed")
    p.add_argument("batch", type=int)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--ckpt", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--mode", default="default",
                   choices=["default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--pad", default="slice", choices=["slice", "full", "none"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--data")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--init")
    p.add_argument("--save-init")
    p.add_argument("--warmup", type=int)
    p.add_argument("--curve")
    a = p.parse_args(argv)
    if not 1 <= a.warm < a.steps:
        p.error("--warm must be at least 1 and below --steps")
    return a


def label(a):
    s = "torch" + ("+compile" if a.compile else "") + ("+bf16" if a.bf16 else "+fp32") + ("+checkpoint" if a.ckpt else "")
    return s + (" (%s)" % a.mode if a.compile and a.mode != "default" else "")


def main(argv):
    a = parse(argv)
    c = TINY if a.tiny else FULL
    rec = {"impl": label(a), "batch": a.batch, "seq": c["T"], "layers": c["L"], "mode": a.mode if a.compile else None,
           "vocab_rows": V if a.pad == "none" else V_PAD, "pad": a.pad, "torch": torch.__version__,
           "data": a.data}
    if a.compile and not hasattr(torch, "compile"):
        print("gpu_gpt2_torch.py: torch %s has no torch.compile (PyTorch 2 or later has it); "
              "no compiled run" % torch.__version__, file=sys.stderr)
        rec["skipped"] = "torch %s has no torch.compile" % torch.__version__
    else:
        try:
            rec.update(run(a, c))
        except OOM:
            rec["oom"] = True
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
