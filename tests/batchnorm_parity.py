"""batchnorm's parity with PyTorch (Debian python3-torch, CPU, fp32).

batchnorm_parity.py [--accumulate] [--recompute POLICY]

A small CNN with batchnorm after a conv (BatchNorm2d, non-default momentum and eps, a
conv without bias) and after a linear layer (BatchNorm1d), trained with SGD (momentum,
weight decay on the matrices) from the same weights (written by torch, loaded with
--init), on the same batches (shuffle off), threads 1 on both sides. Checked: every
step's loss within 1e-4 relative, the running statistics and num_batches_tracked of
the final model.safetensors within 1e-4, and the validation loss (eval mode: the
running statistics) within 1e-4. --accumulate 2: each micro-batch normalizes with its
own statistics and updates the running ones, as PyTorch's loop over micro-batches.
"""
import json, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
ACC = 2 if "--accumulate" in sys.argv else 1
RECOMPUTE = sys.argv[sys.argv.index("--recompute") + 1] if "--recompute" in sys.argv else "none"
OUT = os.path.join(ROOT, "build", "tests", f"bn_parity_a{ACC}_{RECOMPUTE}")
os.makedirs(OUT, exist_ok=True)
STEPS, B, NVAL, LR, MOM, WD = int(os.environ.get('BN_STEPS', 12)), 32, 256, float(os.environ.get('BN_LR', 0.01)), 0.5, 1e-4
torch.set_num_threads(1)
torch.manual_seed(0)

data = os.path.join(ROOT, "data", "fashion")
X = np.load(os.path.join(data, "train_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(data, "train_y.npy"), mmap_mode="r")
np.save(os.path.join(OUT, "val_x.npy"), np.array(np.load(os.path.join(data, "test_x.npy"), mmap_mode="r")[:NVAL]))
np.save(os.path.join(OUT, "val_y.npy"), np.array(np.load(os.path.join(data, "test_y.npy"), mmap_mode="r")[:NVAL]))
spec = {
    "trainc": 1,
    "model": {
        "name": "bn_parity",
        "inputs": {"x": {"shape": [1, 28, 28], "dtype": "u8", "scale": 1 / 255},
                   "y": {"shape": [], "dtype": "i32", "classes": 10}},
        "layers": [
            {"op": "conv2d", "out": 8, "kernel": 3, "padding": 1, "bias": False},
            {"op": "batchnorm", "momentum": 0.3, "eps": 1e-3},
            {"op": "relu"},
            {"op": "maxpool2d", "kernel": 2},
            {"op": "flatten"},
            {"op": "linear", "out": 32},
            {"op": "batchnorm", "momentum": 0.05},
            {"op": "relu"},
            {"op": "linear", "out": 10}],
        "loss": {"op": "cross_entropy", "target": "y"}},
    "train": {
        "data": {"train": {"x": os.path.join(data, "train_x.npy"), "y": os.path.join(data, "train_y.npy")},
                 "val": {"x": os.path.join(OUT, "val_x.npy"), "y": os.path.join(OUT, "val_y.npy")}},
        "batch_size": B, "max_steps": STEPS, "accumulate": ACC, "recompute": RECOMPUTE,
        "optimizer": {"type": "sgd", "lr": LR, "momentum": MOM, "weight_decay": WD},
        "loader": {"shuffle": False}, "log_every": 1, "seed": 3}}
spec_path = os.path.join(OUT, "spec.json")
json.dump(spec, open(spec_path, "w"), indent=1)

model = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8, eps=1e-3, momentum=0.3),
                      nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 14 * 14, 32),
                      nn.BatchNorm1d(32, momentum=0.05), nn.ReLU(), nn.Linear(32, 10))
with torch.no_grad():   # statistics and affine parameters away from their defaults
    for i in (1, 6):
        model[i].running_mean.uniform_(-0.2, 0.2)
        model[i].running_var.uniform_(0.5, 1.5)
        model[i].num_batches_tracked.fill_(5)
        model[i].weight.uniform_(0.5, 1.5)
        model[i].bias.uniform_(-0.2, 0.2)
init_path = os.path.join(OUT, "init.safetensors")
st_check.save(init_path, {n: t.detach().numpy() for n, t in model.state_dict().items()})

run = os.path.join(OUT, "run")
subprocess.run([TRAINC, "run", spec_path, "--init", init_path, "--out", run, "--threads", "1",
                "--quiet"], check=True)
recs = run_log.records(run)
ours = run_log.losses(run)
our_val = [r["val_loss"] for r in recs if "val_loss" in r and "event" not in r]
assert len(ours) == STEPS, len(ours)

decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.SGD([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                      lr=LR, momentum=MOM, foreach=False)
ref, row = [], 0
model.train()
for step in range(STEPS):
    opt.zero_grad()
    total = 0.0
    for _ in range(ACC):
        xb = torch.from_numpy(np.array(X[row:row + B])).float() * torch.tensor(np.float32(1 / 255))
        yb = torch.from_numpy(np.array(Y[row:row + B])).long()
        row += B
        loss = F.cross_entropy(model(xb), yb)
        (loss / ACC).backward()
        total += loss.item()
    opt.step()
    ref.append(total / ACC)
model.eval()
with torch.no_grad():
    vx = torch.from_numpy(np.load(os.path.join(OUT, "val_x.npy"))).float() * torch.tensor(np.float32(1 / 255))
    vy = torch.from_numpy(np.load(os.path.join(OUT, "val_y.npy"))).long()
    ref_val = F.cross_entropy(model(vx), vy).item()

ok = True
rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
print(f"batchnorm parity (accumulate {ACC}, recompute {RECOMPUTE}): step 1 loss {ours[0]:.6f} vs "
      f"{ref[0]:.6f}, step {STEPS} {ours[-1]:.6f} vs {ref[-1]:.6f}; worst relative difference {max(rel):.2e}")
if max(rel) > 1e-4:
    ok = False
    print("  losses:", list(zip(ours, ref)))
vrel = abs(our_val[-1] - ref_val) / abs(ref_val)
print(f"  eval-mode validation loss {our_val[-1]:.6f} vs {ref_val:.6f} (relative {vrel:.2e})")
ok &= vrel <= 1e-4
w = st_check.load(os.path.join(run, "model.safetensors"))
for name, t in model.state_dict().items():
    if "running" in name or "num_batches" in name:
        a, b = w[name].astype(np.float64), t.numpy().astype(np.float64)
        d = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0)))
        print(f"  {name:24s} max |ours - torch| / max(|torch|, 1) = {d:.2e}")
        ok &= d <= 1e-4 and w[name].dtype == t.numpy().dtype
sys.exit(0 if ok else 1)
