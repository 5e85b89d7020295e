"""train.ema against PyTorch (Debian python3-torch, CPU, fp32): the weights' exponential
moving average as torch.optim.swa_utils.AveragedModel's EMA takes it (its first take a
copy; then ema.lerp_(p, 1 - decay) after the chosen steps; written out here, as torch
1.13 has no get_ema_multi_avg_fn).

ema_parity.py [--fake-gpu]

An MLP with a layernorm from the same weights (written by torch, read with --init) on
the same batches (shuffle off), AdamW, 14 steps, one thread; ema {decay 0.8, every 2,
start_step 3}: takes after steps 5, 7, 9, ... Checked:
- every step's loss within 1e-5 relative of torch's;
- every validation (each 2 steps): before the first take on the weights, after it on
  the average (its record says "ema": true), within 1e-5 of torch's loss of the same
  weights; best.safetensors the average at the best validation;
- ema.safetensors: torch's average within 1e-6 (largest difference over the largest
  weight); `--eval --init` of it gives the last validation's loss bit for bit;
  model.safetensors the trained weights, not the average;
- stopped at step 8 (a checkpoint: ema.safetensors in it) and resumed: ema.safetensors,
  model.safetensors and the records of the run straight through, bit for bit;
- 2 ranks of 8 rows (DDP over MPI): ema.safetensors within 1e-6 of 1 rank of 16;
- refused with exit 1: ema with zero1; ema.decay 1.
(A GAN's average of both networks: tests/gan_parity.py's ema case.)
--fake-gpu: the same spec built for both devices (tests/fake_gpu/: the CUDA kernels on
an emulator), fp32: the fake GPU's ema.safetensors and validation losses within 1e-5 of
the CPU's; bf16-mixed: its validations within 5e-3 of the CPU's fp32.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_log      # noqa: E402
import spec_torch   # noqa: E402
import st_check     # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
FAKE = "--fake-gpu" in sys.argv
OUT = os.path.join(ROOT, "build", "tests", "ema_fake_gpu" if FAKE else "ema_parity")
N, NVAL, B, D, K, STEPS = 96, 40, 16, 12, 5, 14
EMA = {"decay": 0.8, "every": 2, "start_step": 3}
torch.set_num_threads(1)
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
    print("%s %s" % ("ok  " if cond else "FAIL", what))


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def run(*args, expect=0, env=None):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    if r.returncode != expect:
        print(r.stdout + r.stderr)
        raise SystemExit("%s: exit %d, expected %d" % (args[0], r.returncode, expect))
    return r


SPEC = {"trainc": 1, "model": {
    "name": "ema_mlp",
    "inputs": {"x": {"shape": [D], "dtype": "f32"},
               "y": {"shape": [], "dtype": "i32", "classes": K}},
    "layers": [{"op": "linear", "name": "fc1", "out": 24}, {"op": "relu"},
               {"op": "layernorm", "name": "norm"},
               {"op": "linear", "name": "fc2", "out": K}],
    "loss": {"op": "cross_entropy", "target": "y"}}}
TRAIN = {"trainc": 1, "train": {
    "data": {"train": {"x": "train_x.npy", "y": "train_y.npy"},
             "val": {"x": "val_x.npy", "y": "val_y.npy"}},
    "batch_size": B, "max_steps": STEPS, "precision": "fp32",
    "optimizer": {"type": "adamw", "lr": 0.02, "weight_decay": 0.0},
    "loader": {"shuffle": False}, "validate": {"every_steps": 2},
    "checkpoint": {"every_steps": 4}, "ema": EMA, "seed": 3, "log_every": 1}}


def data():
    rng = np.random.default_rng(1)   # (classes a linear map of x makes: learnable)
    x = rng.standard_normal((N + NVAL, D)).astype(np.float32)
    y = np.argmax(x @ rng.standard_normal((D, K)), axis=1).astype(np.int32)
    for name, a in (("train_x", x[:N]), ("train_y", y[:N]), ("val_x", x[N:]), ("val_y", y[N:])):
        np.save(os.path.join(OUT, name + ".npy"), a)
    return x, y


def torch_run(x, y):
    """torch's 14 steps: each step's loss, the validations (step, loss, on the average),
    the average at each validation and at the end, the trained weights"""
    torch.manual_seed(0)
    model = spec_torch.build(SPEC["model"]["layers"], [D])
    st_check.save(os.path.join(OUT, "init.safetensors"),
                  {k: v.detach().clone() for k, v in model.state_dict().items()})
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.0)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y).long()
    ema, losses, vals = None, [], []
    for n in range(1, STEPS + 1):
        b = (n - 1) % (N // B)
        loss = F.cross_entropy(model(xs[b * B:(b + 1) * B]), ys[b * B:(b + 1) * B])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        k = n - EMA["start_step"]
        if k > 0 and k % EMA["every"] == 0:   # AveragedModel.update_parameters
            with torch.no_grad():
                if ema is None:
                    ema = {name: p.detach().clone() for name, p in model.named_parameters()}
                else:
                    for name, p in model.named_parameters():
                        ema[name].lerp_(p.detach(), 1 - EMA["decay"])
        if n % 2 == 0:
            weights = ema if ema is not None else dict(model.named_parameters())
            vals.append((n, val_loss(model, weights, xs[N:], ys[N:]), ema is not None,
                         {k: v.detach().clone() for k, v in weights.items()}))
    return losses, vals, ema, {k: v.detach().clone() for k, v in model.named_parameters()}


def val_loss(model, weights, x, y):
    keep = {k: v.detach().clone() for k, v in model.named_parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name])
        loss = F.cross_entropy(model(x), y).item()
        for name, p in model.named_parameters():
            p.copy_(keep[name])
    return loss


def largest_diff(a, b):
    """the largest difference between a's and b's tensors over b's largest element"""
    a, b = ({k: np.asarray(v) for k, v in t.items()} for t in (a, b))
    return max(float(np.abs(a[k] - b[k]).max() / np.abs(b[k]).max()) for k in b)


def trained(out, *extra, env=None, exe=None):
    cmd = [exe, "--device", "cuda"] if exe else [TRAINC, "run", "model.json", "train.json"]
    r = run(*cmd, "--init", "init.safetensors", "--threads", 1, "--quiet", "--out", out, *extra,
            env=dict(env or os.environ, PWD=OUT))
    return r


def parity(x, y):
    losses, vals, ema, final = torch_run(x, y)
    os.chdir(OUT)
    trained("run")
    ours = run_log.losses("run")
    check(len(ours) == STEPS and max(rel(a, b) for a, b in zip(ours, losses)) <= 1e-5,
          "%d AdamW steps, every loss within 1e-5 of torch's" % STEPS)
    recs = [r for r in run_log.records("run") if "val_loss" in r]
    got = [(r["step"], r["val_loss"], r.get("ema", False)) for r in recs]
    want = [(n, v, e) for n, v, e, _ in vals]
    same = len(got) == len(want) and all(
        a[0] == b[0] and a[2] == b[2] and rel(a[1], b[1]) <= 1e-5 for a, b in zip(got, want))
    check(same, "%d validations: steps 2 and 4 on the weights, from step 6 on the average "
          "(\"ema\": true), each within 1e-5 of torch's loss of the same weights" % len(got))
    mine = st_check.load("run/ema.safetensors")
    d = largest_diff(mine, ema)
    check(d <= 1e-6, "ema.safetensors: torch's average after its %d takes within %.1e (1e-6)"
          % ((STEPS - EMA["start_step"]) // EMA["every"], d))
    model = st_check.load("run/model.safetensors")
    check(largest_diff(model, final) <= 1e-6 and largest_diff(model, ema) > 1e-3,
          "model.safetensors: the trained weights (within %.1e of torch's), not the average"
          % largest_diff(model, final))
    r = run(TRAINC, "run", "model.json", "train.json", "--init", "run/ema.safetensors", "--eval",
            "--threads", 1)
    ev = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]
    check(ev == recs[-1]["val_loss"], "--eval --init ema.safetensors: the last validation's "
          "loss on the average, bit for bit (%.9g)" % ev)
    best = min(range(len(want)), key=lambda i: want[i][1])
    d = largest_diff(st_check.load("run/best.safetensors"), vals[best][3])
    check(d <= 1e-6, "best.safetensors: the average at the best validation (step %d) within "
          "%.1e" % (want[best][0], d))


def resumed():
    trained("cut", "--set", "max_steps=8")
    ck = "cut/checkpoints/step_00000008"
    check(os.path.exists(ck + "/ema.safetensors"), "the checkpoint at step 8 holds ema.safetensors")
    run(TRAINC, "run", "model.json", "train.json", "--resume", "cut", "--threads", 1, "--quiet",
        "--set", "max_steps=%d" % STEPS)
    timing = ("time_s", "samples_per_s", "elapsed_s")
    strip = lambda rs: [{k: v for k, v in r.items() if k not in timing}
                        for r in rs if "event" not in r and "end" not in r]
    same = all(open("cut/%s" % f, "rb").read() == open("run/%s" % f, "rb").read()
               for f in ("ema.safetensors", "model.safetensors", "best.safetensors"))
    check(same and strip(run_log.records("cut")) == strip(run_log.records("run")),
          "stopped at step 8 and resumed: ema.safetensors, model.safetensors, best.safetensors "
          "and the records of the run straight through, bit for bit")


def ddp():
    """2 ranks of 8 rows a step (DDP, MPI): each rank's average is the one of 16 rows on one"""
    run(TRAINC, "build", "model.json", "train.json", "-o", "trainer_cpu")
    run("mpirun", "--oversubscribe", "--allow-run-as-root", "-np", 2, "./trainer_cpu", "--init",
        "init.safetensors", "--threads", 1, "--quiet", "--out", "ddp", "--set", "batch_size=8")
    d = largest_diff(st_check.load("ddp/ema.safetensors"), st_check.load("run/ema.safetensors"))
    v2 = [(r["val_loss"], r.get("ema")) for r in run_log.records("ddp") if "val_loss" in r]
    v1 = [(r["val_loss"], r.get("ema")) for r in run_log.records("run") if "val_loss" in r]
    check(d <= 1e-6 and len(v1) == len(v2) and all(a[1] == b[1] and rel(a[0], b[0]) <= 1e-6
                                                    for a, b in zip(v2, v1)),
          "2 ranks x 8 rows (DDP): ema.safetensors within %.1e of 1 rank x 16's, the same "
          "validations on the average" % d)


def refused():
    for what, sets, text in (
            ("ema with zero1", ["distributed.strategy=zero1"],
             "ema with distributed.strategy zero1 is not supported"),
            ("ema.decay 1", ["ema.decay=1"], "ema.decay")):
        r = subprocess.run([TRAINC, "run", "model.json", "train.json", "--out", "bad"] +
                           sum([["--set", s] for s in sets], []), capture_output=True, text=True)
        check(r.returncode == 1 and text in r.stderr and not os.path.exists("bad"),
              "refused: %s (%s)" % (what, r.stderr.strip().splitlines()[-1] if r.stderr.strip()
                                    else "exit %d" % r.returncode))


def fake_gpu(x, y):
    import random_runs
    torch_run(x, y)   # (init.safetensors)
    os.chdir(OUT)
    lib = os.environ.get("FAKE_GPU_LIB") or os.path.join(OUT, "lib")
    random_runs.fake_lib_ready(lib)
    env = random_runs.fake_env(lib, os.path.join(OUT, "cache"))
    run(TRAINC, "build", "model.json", "train.json", "--device", "both", "--arch", "sm_90a",
        "-o", "trainer", env=env)
    trained("gpu", env=env, exe="./trainer")
    run("./trainer", "--device", "cpu", "--init", "init.safetensors", "--threads", 1, "--quiet",
        "--out", "cpu", env=env)
    g, c = st_check.load("gpu/ema.safetensors"), st_check.load("cpu/ema.safetensors")
    vg = [r["val_loss"] for r in run_log.records("gpu") if "val_loss" in r]
    vc = [r["val_loss"] for r in run_log.records("cpu") if "val_loss" in r]
    check(largest_diff(g, c) <= 1e-5 and len(vg) == len(vc) and
          max(rel(a, b) for a, b in zip(vg, vc)) <= 1e-5,
          "fp32 on the fake GPU vs the CPU: ema.safetensors within %.1e, %d validations (the "
          "average's from step 6) within 1e-5" % (largest_diff(g, c), len(vg)))
    run(TRAINC, "build", "model.json", "train.json", "--device", "both", "--arch", "sm_90a",
        "--set", "precision=bf16-mixed", "-o", "trainer16", env=env)
    trained("gpu16", env=env, exe="./trainer16")
    v16 = [r["val_loss"] for r in run_log.records("gpu16") if "val_loss" in r]
    worst = max(rel(a, b) for a, b in zip(v16, vc))
    check(len(v16) == len(vc) and worst <= 5e-3, "bf16-mixed on the fake GPU (the 16-bit copy "
          "made anew for the average and back): its validations within %.1e (5e-3) of the "
          "CPU's fp32" % worst)


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
json.dump(SPEC, open(os.path.join(OUT, "model.json"), "w"))
json.dump(TRAIN, open(os.path.join(OUT, "train.json"), "w"))
x, y = data()
if FAKE:
    fake_gpu(x, y)
else:
    parity(x, y)
    resumed()
    ddp()
    refused()
print("ema_parity%s: %s" % (" --fake-gpu" if FAKE else "", "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
