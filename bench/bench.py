"""trainc vs PyTorch training throughput on the CPU (make bench).

For specs/mlp_fashion.json and specs/cnn_fashion.json: a built trainer trains
STEPS steps at batch 128 on all cores; PyTorch trains the same model (same layers,
AdamW, same batch size, data already in memory as uint8 like ours) with 1 and with
2 threads, and the better of the two counts. Throughput is taken after WARM steps.
Also: `trainc run`'s wall time from start to the first finished step (compile with
libtcc included), the best of 3.
"""
import json, os, subprocess, sys, time
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, "build", "trainc")
OUT = os.path.join(ROOT, "build", "bench")
os.makedirs(OUT, exist_ok=True)
STEPS, WARM, B = int(os.environ.get("BENCH_STEPS", 200)), 20, 128
sys.path.insert(0, os.path.join(ROOT, "tests"))

def torch_model(layers, shape):
    mods = []
    for l in layers:
        op = l["op"]
        if op == "flatten": mods.append(nn.Flatten()); shape = [int(np.prod(shape))]
        elif op == "linear": mods.append(nn.Linear(shape[-1], l["out"])); shape[-1] = l["out"]
        elif op == "conv2d":
            k, p = l["kernel"], l.get("padding", 0)
            mods.append(nn.Conv2d(shape[0], l["out"], k, 1, p)); shape = [l["out"], shape[1] + 2 * p - k + 1, shape[2] + 2 * p - k + 1]
        elif op == "maxpool2d": mods.append(nn.MaxPool2d(l["kernel"])); shape = [shape[0], shape[1] // 2, shape[2] // 2]
        elif op == "relu": mods.append(nn.ReLU())
    return nn.Sequential(*mods)

def bench_torch(spec, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = torch_model(spec["model"]["layers"], list(spec["model"]["inputs"]["x"]["shape"]))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    X = torch.from_numpy(np.load(os.path.join(ROOT, "data/fashion/train_x.npy")))
    Y = torch.from_numpy(np.load(os.path.join(ROOT, "data/fashion/train_y.npy"))).long()
    n = X.shape[0] // B
    t0 = None
    for s in range(STEPS):
        if s == WARM: t0 = time.perf_counter()
        i = s % n
        xb = X[i * B:(i + 1) * B].float() * (1 / 255)
        opt.zero_grad()
        loss = F.cross_entropy(m(xb), Y[i * B:(i + 1) * B])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    return (STEPS - WARM) * B / (time.perf_counter() - t0)

def bench_trainc(name):
    exe = os.path.join(OUT, name)
    subprocess.run([TRAINC, "build", f"specs/{name}.json", "-o", exe], check=True, cwd=ROOT)
    out = os.path.join(OUT, name + ".run")
    subprocess.run([exe, "--out", out, "--quiet", "--set", f"max_steps={STEPS}", "--set", "log_every=1",
                    "--set", "data.val=null", "--set", "checkpoint=null", "--set", f"batch_size={B}"],
                   check=True, cwd=ROOT)
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    steps = [r for r in recs if "loss" in r and "event" not in r]
    t = steps[-1]["time_s"] - steps[WARM - 1]["time_s"]
    return (STEPS - WARM) * B / t

def jit_first_step(name):
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([TRAINC, "run", f"specs/{name}.json", "--out", os.path.join(OUT, "jit"), "--quiet",
                        "--set", "max_steps=1", "--set", "data.val=null", "--set", "loader.workers=0",
                        "--set", "checkpoint=null"],
                       check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t0)
    return best

print(f"CPU: {os.cpu_count()} cores, batch {B}, {STEPS} steps ({WARM} warm-up), AdamW")
print(f"{'model':14s} {'trainc':>12s} {'torch 1t':>12s} {'torch 2t':>12s} {'ratio':>7s}")
rows = []
for name in ["mlp_fashion", "cnn_fashion"]:
    spec = json.load(open(os.path.join(ROOT, "specs", name + ".json")))
    ours = bench_trainc(name)
    t1, t2 = bench_torch(spec, 1), bench_torch(spec, 2)
    ratio = ours / max(t1, t2)
    rows.append((name, ours, t1, t2, ratio))
    print(f"{name:14s} {ours:10.0f}/s {t1:10.0f}/s {t2:10.0f}/s {ratio:6.2f}x")
for name in ["mlp_fashion", "cnn_fashion"]:
    print(f"trainc run {name}: start to first finished step {jit_first_step(name):.3f} s (whole process, best of 3)")
