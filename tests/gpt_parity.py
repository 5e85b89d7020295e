"""gpt_char step by step against PyTorch (Debian python3-torch, CPU).

The same initial weights (written here from a torch model with trainc's parameter
names, loaded with --init), the same windows (shuffle off: batch b holds windows
b*B .. b*B+B-1 of the token shards), AdamW with the spec's settings, the warmup +
cosine schedule, gradient clipping; 50 steps, threads = 1 on both sides. Every
step's loss must agree within 1e-4 relative.
"""
import json, math, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "gpt_parity")
os.makedirs(OUT, exist_ok=True)
STEPS, B = 50, 8
# at the spec's lr (3e-3, tuned for batch 16) batches of 8 spike around step 20, and
# any rounding difference grows through a spike; 1e-3 trains smoothly
LR = 1e-3
torch.set_num_threads(1)
torch.manual_seed(0)
spec_path = os.path.join(ROOT, "specs", "gpt_char.json")
spec = json.load(open(spec_path))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt
import st_check   # safetensors by hand
import run_log
V, D, T, L, H, FF, _ = torch_gpt.dims(spec)
model = torch_gpt.gpt(spec)   # GPT-2's init, so the loss curve is a real one

init_path = os.path.join(OUT, "init.safetensors")
st_check.save(init_path, {n: t.detach().numpy().astype(np.float32) for n, t in model.named_parameters()})

data_dir = os.path.join(ROOT, "data", "text")
cmd = [TRAINC, "run", spec_path, "--init", init_path, "--out", os.path.join(OUT, "run"),
       "--threads", "1", "--quiet"]
for s in ["loader.shuffle=false", "log_every=1", f"max_steps={STEPS}", "data.val=null", f"batch_size={B}",
          f"optimizer.lr={LR}"]:
    cmd += ["--set", s]
subprocess.run(cmd, check=True)
ours = run_log.losses(os.path.join(OUT, "run"))
assert len(ours) == STEPS, len(ours)

raw = open(sorted(p for p in (os.path.join(data_dir, f) for f in os.listdir(data_dir)) if os.path.basename(p).startswith("train_"))[0], "rb").read()
hdr = np.frombuffer(raw[:1024], dtype="<i4")
assert hdr[0] == 20240520, "not a token shard"
tokens = torch.from_numpy(np.frombuffer(raw[1024:1024 + 2 * int(hdr[2])], dtype="<u2").astype(np.int64))

tr = spec["train"]
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
o = tr["optimizer"]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                         {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=tuple(o["betas"]), eps=o.get("eps", 1e-8), foreach=False)
warm, final = tr["schedule"]["warmup_steps"], tr["schedule"]["final_lr_frac"]
def lam(step):
    if step < warm: return (step + 1) / warm
    prog = min(max((step - warm) / max(STEPS - warm, 1), 0.0), 1.0)
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * prog))
sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
ref = []
for step in range(STEPS):
    xs = torch.stack([tokens[(step * B + i) * T:(step * B + i) * T + T] for i in range(B)])
    ys = torch.stack([tokens[(step * B + i) * T + 1:(step * B + i) * T + T + 1] for i in range(B)])
    opt.zero_grad()
    loss = F.cross_entropy(model(xs).view(-1, V), ys.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
    opt.step()
    sched.step()
    ref.append(loss.item())
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
print(f"gpt_char: loss step 1 {ours[0]:.6f} vs {ref[0]:.6f}, step {STEPS} {ours[-1]:.6f} vs {ref[-1]:.6f}; "
      f"worst relative difference {worst:.2e}")
if worst > 1e-4:
    for i, (a, b) in enumerate(zip(ours, ref)):
        print(f"  step {i + 1}: {a:.7f} vs {b:.7f}  {abs(a - b) / abs(b):.1e}")
sys.exit(0 if worst <= 1e-4 else 1)
