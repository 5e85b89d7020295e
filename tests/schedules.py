"""The learning-rate schedules against torch.optim.lr_scheduler (not trainc's formula).

A linear classifier (6 -> 3) on 96 random rows, SGD with momentum 0.9 (the lr then
weighs into every later step too), 12 optimizer steps, shuffle off, threads 1, the
same --init weights on both sides. For each schedule the lr in every step's record of
metrics.jsonl must be the one torch's scheduler gives that step (1e-6 relative), every
step's loss within 1e-5 and the final weights within 1e-5 of PyTorch's:

  step                    StepLR(step_size=every_steps, gamma)
  step, accumulate 2      the same, counted in optimizer steps (2 batches a step)
  step, warmup 2          SequentialLR(LinearLR(1/2 -> 1 over 1 step), StepLR) at 2
  linear                  LinearLR(1 -> final_lr_frac over max_steps)
  linear, frac 0          LinearLR(1 -> 0)
  linear, warmup 3        SequentialLR(LinearLR(1/3 -> 1 over 2 steps), LinearLR(1 -> f over 9)) at 3
  cosine                  CosineAnnealingLR(T_max=max_steps, eta_min=lr * final_lr_frac)
  constant, warmup 4      SequentialLR(LinearLR(1/4 -> 1 over 3 steps), ConstantLR(factor 1)) at 4
  wsd                     LambdaLR of transformers' get_wsd_schedule factor: 1, then the last
                          decay_frac x max_steps steps (0.25: 3) down to final_lr_frac, linearly
  wsd, warmup 2, cosine   the same after the warmup, decay_frac 0.5 (6 steps), cosine
  wsd, 1-sqrt             decay_frac's default 0.2 (2 steps), 1 - sqrt(p) to 0

trainc's warmup is lr * (s + 1) / W at step s < W, and the schedule then runs from
0 over the remaining steps: torch's LinearLR from 1/W to 1 over W - 1 steps, then the
schedule, which SequentialLR starts at W.
"""
import json, math, os, subprocess, sys, warnings
import numpy as np
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler as S
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

warnings.filterwarnings("ignore")   # SequentialLR's step(0) deprecation note
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "schedules")
os.makedirs(OUT, exist_ok=True)
N, B, LR, MOM, IN, C = 12, 4, 0.1, 0.9, 6, 3
torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(5)
X = rng.standard_normal((96, IN)).astype(np.float32)
Y = rng.integers(0, C, 96).astype(np.int32)
np.save(os.path.join(OUT, "x.npy"), X)
np.save(os.path.join(OUT, "y.npy"), Y)
init = {"0.weight": (0.5 * rng.standard_normal((C, IN))).astype(np.float32),
        "0.bias": (0.1 * rng.standard_normal(C)).astype(np.float32)}
init_path = os.path.join(OUT, "init.safetensors")
st_check.save(init_path, init)
spec = {"trainc": 1,
        "model": {"name": "schedules",
                  "inputs": {"x": {"shape": [IN], "dtype": "f32"}, "y": {"shape": [], "dtype": "i32", "classes": C}},
                  "layers": [{"op": "linear", "out": C}],
                  "loss": {"op": "cross_entropy", "target": "y"}},
        "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "batch_size": B, "max_steps": N,
                  "log_every": 1, "checkpoint": None,
                  "optimizer": {"type": "sgd", "lr": LR, "momentum": MOM},
                  "loader": {"shuffle": False, "workers": 0}}}
spec_path = os.path.join(OUT, "spec.json")
with open(spec_path, "w") as f:
    json.dump(spec, f)

def warm_then(w, then):
    """trainc's warmup of w steps, then the scheduler `then(opt)`."""
    return lambda o: S.SequentialLR(o, [S.LinearLR(o, 1 / w, 1.0, total_iters=w - 1), then(o)], milestones=[w])

def wsd(D, f, shape, start=0):
    """transformers' get_wsd_schedule factor (num_decay_steps D, min_lr_ratio f, decay_type
    shape, the stable phase up to step N - D) of the step `start` + the scheduler's own"""
    def factor(s):
        s += start
        if s < N - D:
            return 1.0
        p = (s - (N - D)) / D
        return f + (1 - f) * {"linear": 1 - p, "cosine": 0.5 * (1 + math.cos(math.pi * p)),
                              "1-sqrt": 1 - math.sqrt(p)}[shape]
    return factor

cases = [   # (name, --set options, torch scheduler, accumulate)
    ("step", ["schedule.type=step", "schedule.every_steps=3", "schedule.gamma=0.5"],
     lambda o: S.StepLR(o, step_size=3, gamma=0.5), 1),
    ("step_accumulate2", ["schedule.type=step", "schedule.every_steps=5", "schedule.gamma=0.3", "accumulate=2"],
     lambda o: S.StepLR(o, step_size=5, gamma=0.3), 2),
    ("step_warmup", ["schedule.type=step", "schedule.every_steps=4", "schedule.gamma=0.5", "schedule.warmup_steps=2"],
     warm_then(2, lambda o: S.StepLR(o, step_size=4, gamma=0.5)), 1),
    ("linear", ["schedule.type=linear", "schedule.final_lr_frac=0.1"],
     lambda o: S.LinearLR(o, 1.0, 0.1, total_iters=N), 1),
    ("linear_to_0", ["schedule.type=linear"], lambda o: S.LinearLR(o, 1.0, 0.0, total_iters=N), 1),
    ("linear_warmup", ["schedule.type=linear", "schedule.final_lr_frac=0.2", "schedule.warmup_steps=3"],
     warm_then(3, lambda o: S.LinearLR(o, 1.0, 0.2, total_iters=N - 3)), 1),
    ("cosine", ["schedule.type=cosine", "schedule.final_lr_frac=0.05"],
     lambda o: S.CosineAnnealingLR(o, T_max=N, eta_min=LR * 0.05), 1),
    ("constant_warmup", ["schedule.warmup_steps=4"], warm_then(4, lambda o: S.ConstantLR(o, factor=1.0, total_iters=0)), 1),
    ("wsd", ["schedule.type=wsd", "schedule.decay_frac=0.25", "schedule.final_lr_frac=0.1"],
     lambda o: S.LambdaLR(o, wsd(3, 0.1, "linear")), 1),
    ("wsd_warmup_cosine", ["schedule.type=wsd", "schedule.warmup_steps=2", "schedule.decay_frac=0.5",
                           "schedule.decay_shape=cosine", "schedule.final_lr_frac=0.2"],
     warm_then(2, lambda o: S.LambdaLR(o, wsd(6, 0.2, "cosine", 2))), 1),
    ("wsd_1-sqrt", ["schedule.type=wsd", "schedule.decay_shape=1-sqrt"],
     lambda o: S.LambdaLR(o, wsd(2, 0.0, "1-sqrt")), 1),
]

def torch_run(make_sched, acc):
    w = torch.tensor(init["0.weight"].astype(np.float64), requires_grad=True)
    b = torch.tensor(init["0.bias"].astype(np.float64), requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=LR, momentum=MOM)
    sched = make_sched(opt)
    lrs, losses = [], []
    for s in range(N):
        rows = slice(s * acc * B, (s + 1) * acc * B)
        loss = F.cross_entropy(torch.from_numpy(X[rows].astype(np.float64)) @ w.T + b,
                               torch.from_numpy(Y[rows].astype(np.int64)))
        opt.zero_grad()
        loss.backward()
        lrs.append(opt.param_groups[0]["lr"])
        losses.append(loss.item())
        opt.step()
        sched.step()
    return lrs, losses, {"0.weight": w.detach().numpy(), "0.bias": b.detach().numpy()}

failed = []
for name, sets, make_sched, acc in cases:
    out = os.path.join(OUT, name)
    cmd = [TRAINC, "run", spec_path, "--init", init_path, "--out", out, "--threads", "1", "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{name}: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    steps = run_log.steps(out)
    lrs, losses, weights = torch_run(make_sched, acc)
    ours_lr = [r["lr"] for r in steps]
    final = st_check.load(os.path.join(out, "model.safetensors"))
    lr_err = max(abs(a - b) / b if b else abs(a) for a, b in zip(ours_lr, lrs)) if len(steps) == N else np.inf
    loss_err = max(abs(a["loss"] - b) / b for a, b in zip(steps, losses)) if len(steps) == N else np.inf
    w_err = max(float(np.abs(final[k] - weights[k]).max()) for k in weights)
    ok = lr_err <= 1e-6 and loss_err <= 1e-5 and w_err <= 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} {name}: lr {lr_err:.1e}, loss {loss_err:.1e}, weights {w_err:.1e} from PyTorch's")
    if not ok:
        print("     trainc lr ", " ".join(f"{v:.6g}" for v in ours_lr))
        print("     PyTorch lr", " ".join(f"{v:.6g}" for v in lrs))
        failed.append(name)
print(f"schedules: {len(cases) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
