"""Step-by-step parity with PyTorch (Debian python3-torch, CPU, fp32) of a small
ResNet-style model: a stem conv without bias and a BatchNorm2d (momentum 0.3, eps 1e-3),
a residual block whose body is a strided conv, a depthwise conv (groups = channels) and
a 1x1 conv, all without bias and each followed by a batchnorm (momentum 0.2 / default /
eps 1e-4), and whose shortcut is a 1x1 projection with stride 2 and a batchnorm
(momentum 0.05); then average pooling and a linear head. The batchnorms start from
running statistics, num_batches_tracked and affine parameters away from the defaults.
Cross entropy with label smoothing 0.1; SGD with Nesterov momentum 0.9 and weight decay
5e-4 (rank >= 2 only, as trainc's), a constant learning rate of 0.003: at 0.01 the
training amplifies rounding (trainc's CPU and its own fake GPU part by 5e-6 at step 17
and by 2e-3 at step 27, agreeing to 3e-8 before), so no tolerance could tell a bug.

resnet_parity.py

PyTorch's model is built from the spec's layers by tests/spec_torch.py (as
bench/gpu_resnet_torch.py's), its state_dict under trainc's names. The same initial weights (written here, loaded with --init), the same batches (shuffle
off: batch b is rows b*B .. b*B+B-1 of Fashion-MNIST's training set), threads 1 on
both sides; validation on 256 test images every 10 steps. Checks, for `trainc run` and
for a trainer built by `trainc build` (which must agree with it bit for bit): every one
of the 30 steps' losses within 1e-4 relative of PyTorch's, the label-smoothed
validation losses (eval mode: the running statistics) within 1e-4 relative, the final
weights within 1e-4, the running statistics within 1e-4 (of max(|torch|, 1)) and
num_batches_tracked exactly. Also: recompute full gives the same bits as none (a
replayed batchnorm does not update the running statistics again); and the GPU path
(the batchnorm, grouped convolution and smoothed loss CUDA kernels, emulated on the
fake GPU of tests/fake_gpu.sh) gives every loss within 1e-6 of the CPU's.
"""
import json, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_torch   # the spec's model in torch
import st_check   # safetensors by hand
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "resnet_parity")
os.makedirs(OUT, exist_ok=True)
STEPS, B, LR, MOM, WD, LS, NVAL, VAL_EVERY = 30, 32, 0.003, 0.9, 5e-4, 0.1, 256, 10
GPU_TOL = 1e-6
torch.set_num_threads(1)
torch.manual_seed(0)

# the data: Fashion-MNIST, as the loader reads it (u8 scaled by 1/255)
X = np.load(os.path.join(ROOT, "data", "fashion", "train_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(ROOT, "data", "fashion", "train_y.npy"), mmap_mode="r")
VX = np.array(np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")[:NVAL])
VY = np.array(np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")[:NVAL])
np.save(os.path.join(OUT, "val_x.npy"), VX)
np.save(os.path.join(OUT, "val_y.npy"), VY)
SCALE = 1.0 / 255

conv = lambda out, k, **kw: dict({"op": "conv2d", "out": out, "kernel": k, "bias": False}, **kw)
bn = lambda **kw: dict({"op": "batchnorm"}, **kw)
spec = {
    "trainc": 1,
    "model": {
        "name": "resnet_parity",
        "inputs": {"x": {"shape": [1, 28, 28], "dtype": "u8", "scale": SCALE},
                   "y": {"shape": [], "dtype": "i32", "classes": 10}},
        "layers": [
            conv(8, 3, padding=1), bn(momentum=0.3, eps=1e-3), {"op": "relu"},
            {"op": "residual", "name": "b1",
             "body": [conv(16, 3, stride=2, padding=1), bn(momentum=0.2), {"op": "relu"},
                      conv(16, 3, padding=1, groups=16), bn(), {"op": "relu"},
                      conv(16, 1), bn(eps=1e-4)],
             "shortcut": [conv(16, 1, stride=2), bn(momentum=0.05)]},
            {"op": "relu"}, {"op": "avgpool2d", "kernel": 2}, {"op": "flatten"},
            {"op": "linear", "out": 10}],
        "loss": {"op": "cross_entropy", "target": "y", "label_smoothing": LS},
    },
    "train": {
        "data": {"train": {"x": os.path.join(ROOT, "data", "fashion", "train_x.npy"),
                           "y": os.path.join(ROOT, "data", "fashion", "train_y.npy")},
                 "val": {"x": os.path.join(OUT, "val_x.npy"), "y": os.path.join(OUT, "val_y.npy")}},
        "batch_size": B, "epochs": 1, "max_steps": STEPS, "log_every": 1,
        "loader": {"shuffle": False},
        "optimizer": {"type": "sgd", "lr": LR, "momentum": MOM, "nesterov": True, "weight_decay": WD},
        "validate": {"every_steps": VAL_EVERY},
    },
}
spec_path = os.path.join(OUT, "resnet_parity.json")
json.dump(spec, open(spec_path, "w"), indent=1)


# the same model in PyTorch, from the spec's layers: its state_dict has trainc's names
model = spec_torch.build(spec["model"]["layers"], spec["model"]["inputs"]["x"]["shape"])
with torch.no_grad():   # statistics and affine parameters away from their defaults
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.num_batches_tracked.fill_(5)
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.2, 0.2)
init_path = os.path.join(OUT, "init.safetensors")
st_check.save(init_path, {n: t.detach().numpy() for n, t in model.state_dict().items()})


def records(run_dir):
    train = run_log.losses(run_dir)
    val = [r["val_loss"] for r in run_log.records(run_dir) if "val_loss" in r]
    return train, val


common = ["--init", init_path, "--threads", "1", "--quiet"]
jit_dir, aot_dir = os.path.join(OUT, "run"), os.path.join(OUT, "aot")
subprocess.run([TRAINC, "run", spec_path, "--out", jit_dir] + common, check=True)
trainer = os.path.join(OUT, "trainer")
subprocess.run([TRAINC, "build", spec_path, "-o", trainer], check=True)
subprocess.run([trainer, "--out", aot_dir] + common, check=True)
ours, ours_val = records(jit_dir)
assert len(ours) == STEPS, len(ours)
assert records(aot_dir) == (ours, ours_val), "the built trainer differs from trainc run"
full_dir = os.path.join(OUT, "full")
subprocess.run([TRAINC, "run", spec_path, "--out", full_dir, "--set", "recompute=full"] + common, check=True)
assert records(full_dir) == (ours, ours_val), "recompute full differs from none"
with open(os.path.join(full_dir, "model.safetensors"), "rb") as f, \
        open(os.path.join(jit_dir, "model.safetensors"), "rb") as g:
    assert f.read() == g.read(), "recompute full: other weights"
print("ok   the built trainer, and trainc run with recompute full: the bits of trainc run")
lib, both, gpu_dir = os.path.join(OUT, "lib"), os.path.join(OUT, "trainer_both"), os.path.join(OUT, "gpu")
subprocess.run(["bash", os.path.join(ROOT, "tests", "fake_gpu", "build.sh"), lib], check=True)
env = dict(os.environ, LD_LIBRARY_PATH=lib, TRAINC_CACHE_DIR=os.path.join(OUT, "cache"))
# the kernels compiled by the fake NVRTC at build time, for the fake's 9.0
subprocess.run([TRAINC, "build", spec_path, "-o", both, "--device", "both", "--arch", "sm_90a"], check=True, env=env)
subprocess.run([both, "--device", "cuda", "--out", gpu_dir] + common, check=True, env=env)
gpu, gpu_val = records(gpu_dir)
worst = max(abs(a - b) / abs(a) for a, b in zip(ours + ours_val, gpu + gpu_val))
gpu_ok = len(gpu) == STEPS and len(gpu_val) == len(ours_val) and worst <= GPU_TOL
print(f"{'ok  ' if gpu_ok else 'FAIL'} fake GPU: the {len(gpu) + len(gpu_val)} losses within {worst:.1e} "
      f"of the CPU's (tolerance {GPU_TOL:.0e})")

# the reference
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.SGD([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                      lr=LR, momentum=MOM, nesterov=True, foreach=False)
vx = torch.from_numpy(VX).float() * torch.tensor(np.float32(SCALE))
vy = torch.from_numpy(VY).long()
ref, ref_val = [], []
for step in range(STEPS):
    xb = torch.from_numpy(np.array(X[step * B:(step + 1) * B])).float() * torch.tensor(np.float32(SCALE))
    yb = torch.from_numpy(np.array(Y[step * B:(step + 1) * B])).long()
    opt.zero_grad()
    loss = F.cross_entropy(model(xb), yb, label_smoothing=LS)
    loss.backward()
    opt.step()
    ref.append(loss.item())
    if (step + 1) % VAL_EVERY == 0:
        model.eval()
        with torch.no_grad():
            ref_val.append(F.cross_entropy(model(vx), vy, label_smoothing=LS).item())
        model.train()

ok = gpu_ok
rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
print(f"resnet parity: loss step 1 {ours[0]:.6f} vs {ref[0]:.6f}, step {STEPS} {ours[-1]:.6f} vs "
      f"{ref[-1]:.6f}; worst relative difference {max(rel):.2e} (tolerance 1e-4)")
if max(rel) > 1e-4:
    ok = False
    i = next(i for i in range(STEPS) if rel[i] > 1e-4)
    print(f"  step {i + 1}: {ours[i]:.7f} vs {ref[i]:.7f}")
if len(ours_val) != len(ref_val):
    ok = False
    print(f"  {len(ours_val)} validation losses, expected {len(ref_val)}")
for a, b in zip(ours_val, ref_val):
    print(f"  validation loss {a:.6f} vs {b:.6f} (relative {abs(a - b) / abs(b):.2e})")
    if abs(a - b) / abs(b) > 1e-4:
        ok = False
w = st_check.load(os.path.join(jit_dir, "model.safetensors"))
for name, t in model.state_dict().items():
    a, b = w[name], t.numpy()
    if a.dtype != b.dtype or a.shape != b.shape:
        ok = False
        print(f"  {name}: {a.dtype}{list(a.shape)}, torch {b.dtype}{list(b.shape)}")
        continue
    if "num_batches" in name:
        print(f"  {name:32s} {int(a)} vs {int(b)}")
        ok &= int(a) == int(b)
        continue
    # the running variances are O(1) and above: relative to max(|torch|, 1)
    d = float(np.max(np.abs(a.astype(np.float64) - b) / np.maximum(np.abs(b), 1.0)))
    print(f"  {name:32s} max |ours - torch| / max(|torch|, 1) = {d:.2e}")
    if d > 1e-4:
        ok = False
sys.exit(0 if ok else 1)
