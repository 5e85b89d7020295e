"""conv_transpose2d and leaky_relu against PyTorch (Debian torch, CPU, fp32), step by step.

A tiny generator-like stack on random f32 [4, 4, 4] inputs (no op reshapes a vector to
[C, H, W], so the input is one already): nn.ConvTranspose2d stride 2 (4x4 -> 8x8),
LeakyReLU 0.2, a residual block (Conv2d 3x3 and LeakyReLU 0.1: the next layer's input
gradient, turned from the GEMM's layout, is stored for the skip and read beside the
conv's output by the LeakyReLU's backward in one fused loop, whose storage cannot then
be shared), a second ConvTranspose2d with output_padding and no bias (8x8 -> 16x16),
LeakyReLU at its default slope, a strided Conv2d (16x16 -> 4x4), flatten and a linear
head; cross entropy. The same initial weights (written here, loaded with --init), the
same batches in order, SGD with momentum, threads 1: every step's loss within 1e-5
relative, the final weights within 1e-5. With recompute full the same bits; on the fake
GPU of tests/fake_gpu.sh (the CUDA im2col, col2im and layout kernels emulated) every
loss within 1e-6 of the CPU's, and built for bf16-mixed within 5e-3 of them.

Then the initialization: a run from the spec's own init (PyTorch's default for
nn.ConvTranspose2d: weight and bias uniform in +-1/sqrt(out k k), since its fan_in is
weight.size(1) k k) must have every conv_transpose2d tensor inside that bound and
spread over it (its largest magnitude above 0.9 of the bound; a weight's standard
deviation within 15% of bound / sqrt(3)).
"""
import json, math, os, subprocess, sys
from collections import OrderedDict
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "convt_parity")
STEPS, B, C = 6, 8, 5
torch.set_num_threads(1)

LAYERS = [
    {"op": "conv_transpose2d", "out": 6, "kernel": 4, "stride": 2, "padding": 1},
    {"op": "leaky_relu", "negative_slope": 0.2},
    {"op": "residual", "name": "res", "body": [{"op": "conv2d", "out": 6, "kernel": 3, "padding": 1},
                                {"op": "leaky_relu", "negative_slope": 0.1}]},
    {"op": "conv_transpose2d", "out": 3, "kernel": 3, "stride": 2, "padding": 1,
     "output_padding": 1, "bias": False},
    {"op": "leaky_relu"},
    {"op": "conv2d", "out": 4, "kernel": 4, "stride": 4},
    {"op": "flatten"},
    {"op": "linear", "out": C},
]

class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)

def torch_model():
    # the names are the spec's: an unnamed layer's index, the residual's name
    layers = [nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
              Residual(nn.Conv2d(6, 6, 3, padding=1), nn.LeakyReLU(0.1)),
              nn.ConvTranspose2d(6, 3, 3, stride=2, padding=1, output_padding=1, bias=False),
              nn.LeakyReLU(), nn.Conv2d(3, 4, 4, stride=4), nn.Flatten(), nn.Linear(64, C)]
    return nn.Sequential(OrderedDict((l.get("name", str(k)), m) for k, (l, m) in
                                     enumerate(zip(LAYERS, layers))))

def write_spec():
    spec = {"trainc": 1,
            "model": {"name": "convt_parity",
                      "inputs": {"x": {"shape": [4, 4, 4], "dtype": "f32"},
                                 "y": {"shape": [], "dtype": "i32", "classes": C}},
                      "layers": LAYERS, "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}},
                      "batch_size": B, "epochs": 1, "max_steps": STEPS, "log_every": 1,
                      "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
                      "schedule": {"type": "constant"},
                      "loader": {"shuffle": False, "workers": 0}}}
    path = os.path.join(OUT, "spec.json")
    json.dump(spec, open(path, "w"), indent=1)
    return spec, path

def parity(spec, path, X, Y):
    torch.manual_seed(0)
    model = torch_model()
    init = os.path.join(OUT, "init.safetensors")
    st_check.save(init, {n: t.detach().numpy().astype(np.float32) for n, t in model.state_dict().items()})
    run = os.path.join(OUT, "run")
    subprocess.run([TRAINC, "run", path, "--init", init, "--out", run, "--threads", "1", "--quiet"],
                   check=True)
    ours = run_log.losses(run)
    assert len(ours) == STEPS, len(ours)
    o = spec["train"]["optimizer"]
    opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], foreach=False)
    ref = []
    for step in range(STEPS):
        xb = torch.from_numpy(X[step * B:(step + 1) * B])
        yb = torch.from_numpy(Y[step * B:(step + 1) * B]).long()
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
    w = st_check.load(os.path.join(run, "model.safetensors"))
    wd = max(float(np.max(np.abs(w[n] - t.numpy()))) for n, t in model.state_dict().items())
    ok = max(rel) <= 1e-5 and wd <= 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} parity: loss step 1 {ours[0]:.6f} vs {ref[0]:.6f}, step {STEPS} "
          f"{ours[-1]:.6f} vs {ref[-1]:.6f}; worst relative difference {max(rel):.1e}, weights {wd:.1e} "
          f"(tolerances 1e-5, 1e-5)")
    return ok

def same_elsewhere(path):
    """recompute full: trainc run's bits; the fake GPU: within 1e-6 of the CPU"""
    common = ["--init", os.path.join(OUT, "init.safetensors"), "--threads", "1", "--quiet"]
    cpu, full = run_log.losses(os.path.join(OUT, "run")), os.path.join(OUT, "full")
    subprocess.run([TRAINC, "run", path, "--out", full, "--set", "recompute=full"] + common, check=True)
    ok = run_log.losses(full) == cpu
    print(f"{'ok  ' if ok else 'FAIL'} recompute full: the losses of recompute none, bit for bit")
    lib, both, gpu = (os.path.join(OUT, n) for n in ("lib", "trainer_both", "gpu"))
    subprocess.run(["bash", os.path.join(ROOT, "tests", "fake_gpu", "build.sh"), lib], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=lib, TRAINC_CACHE_DIR=os.path.join(OUT, "cache"))
    # the kernels compiled by the fake NVRTC at build time, for the fake's 9.0
    subprocess.run([TRAINC, "build", path, "-o", both, "--device", "both", "--arch", "sm_90a"], check=True, env=env)
    subprocess.run([both, "--device", "cuda", "--out", gpu] + common, check=True, env=env)
    g = run_log.losses(gpu)
    worst = max(abs(a - b) / abs(a) for a, b in zip(cpu, g)) if len(g) == len(cpu) else math.inf
    print(f"{'ok  ' if worst <= 1e-6 else 'FAIL'} fake GPU: {len(g)} losses within {worst:.1e} of the CPU's")
    spec = json.load(open(path))
    spec["train"]["precision"] = "bf16-mixed"
    path16, both16, gpu16 = (os.path.join(OUT, n) for n in ("spec_bf16.json", "trainer_bf16", "gpu_bf16"))
    json.dump(spec, open(path16, "w"), indent=1)
    subprocess.run([TRAINC, "build", path16, "-o", both16, "--device", "both", "--arch", "sm_90a"], check=True, env=env)
    subprocess.run([both16, "--device", "cuda", "--out", gpu16] + common, check=True, env=env)
    g16 = run_log.losses(gpu16)
    w16 = max(abs(a - b) / abs(a) for a, b in zip(cpu, g16)) if len(g16) == len(cpu) else math.inf
    print(f"{'ok  ' if w16 <= 5e-3 else 'FAIL'} fake GPU, bf16-mixed: {len(g16)} losses within {w16:.1e} of the CPU's fp32")
    return ok and worst <= 1e-6 and w16 <= 5e-3

def init_check(path):
    run = os.path.join(OUT, "init_run")
    subprocess.run([TRAINC, "run", path, "--out", run, "--threads", "1", "--quiet",
                    "--set", "optimizer.lr=0", "--set", "optimizer.momentum=0", "--set", "max_steps=1"],
                   check=True)
    w = st_check.load(os.path.join(run, "model.safetensors"))
    ok = True
    for name, out, k in (("0.weight", 6, 4), ("0.bias", 6, 4), ("3.weight", 3, 3)):
        t, bound = w[name].astype(np.float64), 1 / math.sqrt(out * k * k)
        amax, std = float(np.abs(t).max()), float(t.std())
        spread = t.size < 100 or abs(std / (bound / math.sqrt(3)) - 1) < 0.15   # a bias: too few
        good = amax <= bound and amax > 0.9 * bound and spread
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} init {name} {list(t.shape)}: max |w| {amax:.4f}, std {std:.4f} "
              f"(bound {bound:.4f}, uniform std {bound / math.sqrt(3):.4f})")
    return ok

os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(3)
X = rng.standard_normal((STEPS * B, 4, 4, 4)).astype(np.float32)
Y = rng.integers(0, C, size=(STEPS * B,)).astype(np.int32)
np.save(os.path.join(OUT, "x.npy"), X)
np.save(os.path.join(OUT, "y.npy"), Y)
spec, path = write_spec()
sys.exit(0 if all([parity(spec, path, X, Y), same_elsewhere(path), init_check(path)]) else 1)
