"""RMSNorm, the gated linear unit and squared_relu against PyTorch (Debian torch, CPU,
fp32), step by step.

glu_parity.py [VARIANT...]   (default: all of silu, gelu_tanh, relu, squared_relu)

A tiny model on random f32 sequences, a Llama block's MLP half: a linear to d, then
x + down(glu(up(rmsnorm(x)))) with up of 2h outputs (the gate rows, then the up rows)
and no biases, a final rmsnorm and a head; the squared_relu variant has an MLP of
linear h, squared_relu, linear d in place of the glu (as Nemotron's). Torch 1.13 has no
nn.RMSNorm: tests/llama_torch.py's rmsnorm is HF LlamaRMSNorm's formula (in fp32:
x * rsqrt(mean(x^2) + eps) * weight). The same initial weights (loaded with --init),
the same batches in order, AdamW with warmup, cosine decay and gradient clipping
(llama_torch.py's run_trainc and train_torch), threads 1: every step's loss within 1e-5 relative, the final weights within
1e-4 (as torch_parity.py's MLP: AdamW turns float rounding in a near-zero gradient into
a step of its own size, 1.4e-5 here at worst).
"""
import os, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt   # the RMSNorm, the glu's activations, the training loop, the run
import st_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, B, T, D, H, C = 12, 8, 5, 16, 24, 7
EPS, EPS_F = 1e-6, 1e-3   # the block's norm at the default, the final one given
torch.set_num_threads(1)

class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
    def forward(self, x):
        return lt.rmsnorm(x, self.weight, self.eps)

class Model(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.inp = nn.Linear(8, D)
        self.norm = RMSNorm(D, EPS)
        self.up = nn.Linear(D, 2 * H if variant != "squared_relu" else H, bias=False)
        self.down = nn.Linear(H, D, bias=False)
        self.norm_f = RMSNorm(D, EPS_F)
        self.head = nn.Linear(D, C)
        with torch.no_grad():   # weights away from ones, so their gradients matter
            for n in (self.norm, self.norm_f):
                n.weight.add_(0.2 * torch.randn(D))
    def forward(self, x):
        x = self.inp(x)
        u = self.up(self.norm(x))
        if self.variant == "squared_relu":
            m = F.relu(u).pow(2)
        else:
            m = lt.GLU_ACTS[self.variant](u[..., :H]) * u[..., H:]
        x = x + self.down(m)
        return self.head(self.norm_f(x))
    def names(self):   # torch's state-dict names -> the spec's
        return {"inp.weight": "inp.weight", "inp.bias": "inp.bias", "norm.weight": "blk.norm.weight",
                "up.weight": "blk.up.weight", "down.weight": "blk.down.weight",
                "norm_f.weight": "norm_f.weight", "head.weight": "head.weight", "head.bias": "head.bias"}

def spec_for(variant, out):
    mlp = ([{"op": "linear", "name": "up", "out": 2 * H, "bias": False}, {"op": "glu", "act": variant}]
           if variant != "squared_relu" else
           [{"op": "linear", "name": "up", "out": H, "bias": False}, {"op": "squared_relu"}])
    return {"trainc": 1,
            "model": {"name": "glu_parity_" + variant,
                      "inputs": {"x": {"shape": [T, 8], "dtype": "f32"},
                                 "y": {"shape": [T], "dtype": "i32", "classes": C}},
                      "layers": [{"op": "linear", "name": "inp", "out": D},
                                 {"op": "residual", "name": "blk", "body": [{"op": "rmsnorm", "name": "norm"}] + mlp +
                                  [{"op": "linear", "name": "down", "out": D, "bias": False}]},
                                 {"op": "rmsnorm", "name": "norm_f", "eps": EPS_F},
                                 {"op": "linear", "name": "head", "out": C}],
                      "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}},
                      "batch_size": B, "epochs": 1, "max_steps": STEPS, "log_every": 1,
                      "optimizer": {"type": "adamw", "lr": 1e-2, "betas": [0.9, 0.95],
                                    "weight_decay": 0.1, "eps": 1e-8},
                      "schedule": {"type": "cosine", "warmup_steps": 3, "final_lr_frac": 0.1},
                      "grad_clip": 0.5, "loader": {"shuffle": False, "workers": 0}}}

def run(variant):
    out = os.path.join(ROOT, "build", "tests", "glu_parity", variant)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((STEPS * B, T, 8)).astype(np.float32)
    Y = rng.integers(0, C, size=(STEPS * B, T)).astype(np.int32)
    np.save(os.path.join(out, "x.npy"), X)
    np.save(os.path.join(out, "y.npy"), Y)
    spec = spec_for(variant, out)
    torch.manual_seed(0)
    model = Model(variant)
    names = model.names()
    ours = lt.run_trainc(spec, {names[n]: t for n, t in model.state_dict().items()}, out)
    assert len(ours) == STEPS, len(ours)
    ref = lt.train_torch(model, list(model.parameters()), spec["train"], torch.from_numpy(X),
                         torch.from_numpy(Y).long(), C)
    rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
    w = st_check.load(os.path.join(out, "run", "model.safetensors"))
    wd = max(float(np.max(np.abs(w[names[n]] - t.numpy()))) for n, t in model.state_dict().items())
    ok = max(rel) <= 1e-5 and wd <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} {variant}: loss step 1 {ours[0]:.6f} vs {ref[0]:.6f}, step {STEPS} "
          f"{ours[-1]:.6f} vs {ref[-1]:.6f}; worst relative difference {max(rel):.1e}, weights {wd:.1e} "
          f"(tolerances 1e-5, 1e-4)")
    return ok

variants = sys.argv[1:] or ["silu", "gelu_tanh", "relu", "squared_relu"]
sys.exit(0 if all([run(v) for v in variants]) else 1)
