"""gpt_char (specs/gpt_char.json: 4 blocks, d 128, T 128, vocab 256) on the CPU, trainc
vs PyTorch (Debian python3-torch) in one run (make bench): tokens/s at batch 16 over
steps WARM+1 .. STEPS, AdamW, gradient clipping, windows from the same token shards.
trainc: a built trainer on all cores (recompute none); PyTorch: the same model
(tests/torch_gpt.py, attention written out: torch 1.13 has no fused causal kernel)
with 1 and with 2 threads, the better counting."""
import json, os, subprocess, sys, time
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import torch_gpt

TRAINC = os.path.join(ROOT, "build", "trainc")
OUT = os.path.join(ROOT, "build", "bench")
os.makedirs(OUT, exist_ok=True)
STEPS, WARM, B = int(os.environ.get("BENCH_STEPS", 40)), 10, 16
spec = json.load(open(os.path.join(ROOT, "specs", "gpt_char.json")))
V, D, T, L, H, FF, _ = torch_gpt.dims(spec)


def trainc_tps():
    exe = os.path.join(OUT, "gpt_char")
    subprocess.run([TRAINC, "build", "specs/gpt_char.json", "-o", exe], check=True, cwd=ROOT,
                   stderr=subprocess.DEVNULL)
    out = os.path.join(OUT, "gpt_char.run")
    subprocess.run([exe, "--out", out, "--quiet", "--set", f"max_steps={STEPS}", "--set", "log_every=1",
                    "--set", "data.val=null", "--set", "checkpoint=null", "--set", f"batch_size={B}"], check=True, cwd=ROOT,
                   stderr=subprocess.DEVNULL)
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))
             if '"loss"' in l and '"event"' not in l]
    return (STEPS - WARM) * B * T / (steps[-1]["time_s"] - steps[WARM - 1]["time_s"])


def torch_tps(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_gpt.gpt(spec)
    tr = spec["train"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    o = tr["optimizer"]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=o["lr"], betas=tuple(o["betas"]))
    d = os.path.join(ROOT, "data", "text")
    shard = sorted(f for f in os.listdir(d) if f.startswith("train_"))[0]
    raw = open(os.path.join(d, shard), "rb").read()
    n = int(np.frombuffer(raw[:1024], dtype="<i4")[2])
    tokens = torch.from_numpy(np.frombuffer(raw[1024:1024 + 2 * n], dtype="<u2").astype(np.int64))
    rng = np.random.default_rng(0)
    t0 = None
    for s in range(STEPS):
        if s == WARM:
            t0 = time.perf_counter()
        at = rng.integers(0, n - T - 1, B)
        xs = torch.stack([tokens[a:a + T] for a in at])
        ys = torch.stack([tokens[a + 1:a + T + 1] for a in at])
        opt.zero_grad()
        loss = F.cross_entropy(model(xs).view(-1, V), ys.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
        opt.step()
    return (STEPS - WARM) * B * T / (time.perf_counter() - t0)


ours = trainc_tps()
t1, t2 = torch_tps(1), torch_tps(2)
print(f"gpt_char, batch {B}, T {T}, {STEPS} steps ({WARM} warm-up), AdamW, {os.cpu_count()} cores: "
      f"trainc {ours:.0f} tokens/s, PyTorch {t1:.0f} (1 thread) / {t2:.0f} (2 threads): "
      f"{ours / max(t1, t2):.2f}x")
