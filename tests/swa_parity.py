"""train.swa's parity with PyTorch's swa_utils run as Lightning's StochasticWeightAveraging
callback runs them (Debian python3-torch, CPU, fp32).

swa_parity.py [--fake-gpu]

Two runs of 4 epochs of 8 batches (limit_train_batches) of Fashion-MNIST, shuffle off,
from the same weights (written by torch, loaded with --init), threads 1:

- cnn: a conv, batchnorm (non-default momentum and eps) and a linear head, SGD with
  momentum under a warm-up and cosine schedule; swa from epoch 2 (swa_start 1), lr
  annealed over 3 epochs by cosine (SWALR's recursion, last_epoch = max_epochs as the
  callback makes it). The reference: LambdaLR with trainc's formula a step until the
  first swa epoch, then SWALR stepped at each epoch's end; AveragedModel's
  update_parameters at each epoch's start from the first swa epoch on; at the end the
  average copied into the model and update_bn over the training batches (Lightning's
  extra epoch).
- mlp: no batchnorm, AdamW at a constant rate, swa from epoch_start 0.5 (epoch 2),
  annealing_epochs 0 (swa.lr at once), linear; then the same run stopped at step 10 (in
  an epoch, after a take) and at step 16 (an epoch's end, before the next take) and
  resumed: records and model.safetensors byte for byte; with ASAN_TRAINC (make test's
  build/asan/trainc) the run again under the sanitizers.

Checked: every step's loss and lr within 1e-4 relative, each epoch's validation and the
last one (on the average: "swa": true) within 1e-4, model.safetensors (the average,
batchnorm's running statistics recomputed, num_batches_tracked the batches of an
epoch) within 1e-4 of torch's; the cnn with `sync` batchnorm on 2 ranks x 16 rows (DDP over
MPI) within 1e-5 of the 1 rank x 32 run. --fake-gpu: the cnn run also on the fake GPU
(tests/fake_gpu/: FAKE_GPU_LIB, or its own build), its losses and validations within
1e-5 of the CPU's and its model.safetensors within 1e-5.
"""
import json, math, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "swa_parity")
os.makedirs(OUT, exist_ok=True)
E, NB, B, NVAL = 4, 8, 32, 256
torch.set_num_threads(1)
torch.manual_seed(0)
DATA = os.path.join(ROOT, "data", "fashion")
X = np.array(np.load(os.path.join(DATA, "train_x.npy"), mmap_mode="r")[:NB * B])
Y = np.array(np.load(os.path.join(DATA, "train_y.npy"), mmap_mode="r")[:NB * B])
np.save(os.path.join(OUT, "val_x.npy"), np.array(np.load(os.path.join(DATA, "test_x.npy"), mmap_mode="r")[:NVAL]))
np.save(os.path.join(OUT, "val_y.npy"), np.array(np.load(os.path.join(DATA, "test_y.npy"), mmap_mode="r")[:NVAL]))
SCALE = torch.tensor(np.float32(1 / 255))
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def batches():
    return [(torch.from_numpy(X[i * B:(i + 1) * B]).float() * SCALE, torch.from_numpy(Y[i * B:(i + 1) * B]).long())
            for i in range(NB)]


def val_loss(model):
    model.eval()
    with torch.no_grad():
        vx = torch.from_numpy(np.load(os.path.join(OUT, "val_x.npy"))).float() * SCALE
        vy = torch.from_numpy(np.load(os.path.join(OUT, "val_y.npy"))).long()
        v = F.cross_entropy(model(vx), vy).item()
    model.train()
    return v


def spec_of(name, layers, opt, schedule, swa):
    return {"trainc": 1,
            "model": {"name": name, "inputs": {"x": {"shape": [1, 28, 28], "dtype": "u8", "scale": 1 / 255},
                                               "y": {"shape": [], "dtype": "i32", "classes": 10}},
                      "layers": layers, "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": os.path.join(DATA, "train_x.npy"), "y": os.path.join(DATA, "train_y.npy")},
                               "val": {"x": os.path.join(OUT, "val_x.npy"), "y": os.path.join(OUT, "val_y.npy")}},
                      "batch_size": B, "epochs": E, "limit_train_batches": NB, "optimizer": opt,
                      "schedule": schedule, "swa": swa, "validate": {"every_epochs": 1},
                      "loader": {"shuffle": False}, "log_every": 1, "seed": 3}}


def lr_at(step, lr, warmup, total, final):   # runtime/optim.c's rt_lr_at, cosine
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    return lr * (final + (1 - final) * 0.5 * (1 + math.cos(math.pi * p)))


def reference(model, opt, lambda_lr, swa):
    """Lightning's loop with its callback: (losses, lrs, epoch validations, last validation)"""
    first = swa["first"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda_lr) if lambda_lr else None
    avg, swalr = AveragedModel(model), None
    losses, lrs, vals = [], [], []
    model.train()
    for epoch in range(E):
        if epoch == first:   # on_train_epoch_start: the scheduler swapped for SWALR
            for g in opt.param_groups:
                g["initial_lr"] = swa["lr"]
            swalr = SWALR(opt, swa_lr=swa["lr"], anneal_epochs=swa["anneal"], anneal_strategy=swa["strategy"],
                          last_epoch=E if swa["strategy"] == "cos" else -1)
        if epoch >= first:
            avg.update_parameters(model)
        for xb, yb in batches():
            lrs.append(opt.param_groups[0]["lr"])
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if epoch < first and sched:
                sched.step()
        vals.append(val_loss(model))
        if swalr:
            swalr.step()
    with torch.no_grad():   # transfer_weights, then the batchnorm epoch
        for p, q in zip(model.parameters(), avg.module.parameters()):
            p.copy_(q)
    update_bn([xb for xb, _ in batches()], model)
    return losses, lrs, vals, val_loss(model)


def decays(model):
    return [{"params": [p for p in model.parameters() if p.dim() >= 2]},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def run(spec, init, out, exe=None, env=None, extra=()):
    path = os.path.join(OUT, spec["model"]["name"] + ".json")
    json.dump(spec, open(path, "w"), indent=1)
    cmd = ([exe] if exe else [TRAINC, "run", path]) + ([] if "--resume" in extra else ["--init", init])
    subprocess.run(cmd + ["--out", out, "--threads", "1", "--quiet"] + list(extra),
                   check=True, env=env, capture_output=True, cwd=OUT)
    return path


def compare(name, out, model, ref):
    losses, lrs, vals, last = ref
    recs = run_log.records(out)
    steps = [r for r in recs if "loss" in r and "event" not in r]
    val_recs = [r for r in recs if "val_loss" in r and "event" not in r]
    worst = max(max(rel(r["loss"], a), rel(r["lr"], b)) for r, a, b in zip(steps, losses, lrs))
    if os.environ.get("PARITY_VERBOSE"):
        for r, a, b in zip(steps, losses, lrs):
            print("   ", r["step"], r["loss"], a, r["lr"], b)
    check(len(steps) == E * NB and worst <= 1e-4, "%s: %d steps' losses and learning rates, largest relative "
          "difference %.2g (1e-4)" % (name, len(steps), worst))
    tail = val_recs[-1] if val_recs else {}
    vw = max([rel(r["val_loss"], v) for r, v in zip(val_recs, vals)] + [rel(tail.get("val_loss", 0), last)])
    check(len(val_recs) == E + 1 and tail.get("swa") is True and "swa" not in val_recs[-2] and vw <= 1e-4,
          "%s: %d validations (the last on the average, \"swa\": true), largest relative difference %.2g (1e-4)"
          % (name, len(val_recs), vw))
    w = st_check.load(os.path.join(out, "model.safetensors"))
    sd = model.state_dict()
    worst, counts = 0.0, []
    for k, t in sd.items():
        if k.endswith("num_batches_tracked"):
            counts.append((int(w[k]), int(t)))
            continue
        a, b = w[k].astype(np.float64), t.numpy().astype(np.float64)
        worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))))
    check(worst <= 1e-4 and all(a == b == NB for a, b in counts),
          "%s: model.safetensors (the average%s) within %.2g of torch's (1e-4)%s"
          % (name, ", batchnorm's statistics recomputed" if counts else "", worst,
             ", num_batches_tracked %s" % counts[0][0] if counts else ""))
    return w


def cnn():
    model = nn.Sequential(nn.Conv2d(1, 6, 3, 1, 1, bias=False), nn.BatchNorm2d(6, eps=1e-3, momentum=0.3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 14 * 14, 10))
    layers = [{"op": "conv2d", "out": 6, "kernel": 3, "padding": 1, "bias": False},
              {"op": "batchnorm", "momentum": 0.3, "eps": 1e-3}, {"op": "relu"},
              {"op": "maxpool2d", "kernel": 2}, {"op": "flatten"}, {"op": "linear", "out": 10}]
    lr, warm, final = 0.01, 4, 0.1
    spec = spec_of("cnn", layers, {"type": "sgd", "lr": lr, "momentum": 0.5, "weight_decay": 1e-4},
                   {"type": "cosine", "warmup_steps": warm, "final_lr_frac": final},
                   {"lr": 0.003, "epoch_start": 2, "annealing_epochs": 3, "annealing_strategy": "cos"})
    init = os.path.join(OUT, "cnn_init.safetensors")
    st_check.save(init, {n: t.detach().numpy() for n, t in model.state_dict().items()})
    out = os.path.join(OUT, "cnn_run")
    path = run(spec, init, out)
    opt = torch.optim.SGD(decays(model), lr=lr, momentum=0.5, weight_decay=1e-4, foreach=False)
    ref = reference(model, opt, lambda s: lr_at(s, lr, warm, E * NB, final) / lr,
                    {"first": 1, "lr": 0.003, "anneal": 3, "strategy": "cos"})
    w = compare("cnn (batchnorm, SGD, warm-up and cosine, swa from epoch 2, cos over 3)", out, model, ref)
    if "--fake-gpu" in sys.argv:
        fake_gpu(path, init, out, w)
    ddp(spec, init, out, w)


def ddp(spec, init, one_out, one_w):
    """2 ranks x 16 rows (DDP over MPI, batchnorm with sync: the whole batch's statistics,
    in the statistics pass too) against 1 rank x 32: the same numbers"""
    spec = json.loads(json.dumps(spec))
    spec["model"]["name"] = "cnn_sync"
    spec["model"]["layers"][1]["sync"] = True
    path = os.path.join(OUT, "cnn_sync.json")
    json.dump(spec, open(path, "w"), indent=1)
    exe, out = os.path.join(OUT, "cnn_sync"), os.path.join(OUT, "cnn_ddp")
    subprocess.run([TRAINC, "build", path, "-o", exe], check=True, capture_output=True)
    subprocess.run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", exe, "--init", init,
                    "--threads", "1", "--quiet", "--out", out, "--set", "batch_size=%d" % (B // 2)],
                   check=True, capture_output=True, cwd=OUT)
    nums = lambda o: [(r.get("loss"), r.get("val_loss"), r.get("swa")) for r in run_log.records(o)
                      if "event" not in r]
    a, b = nums(out), nums(one_out)
    worst = max(rel(x, y) for p, q in zip(a, b) for x, y in zip(p[:2], q[:2]) if x is not None and y is not None)
    w = st_check.load(os.path.join(out, "model.safetensors"))
    ww = max(float(np.max(np.abs(w[k].astype(np.float64) - one_w[k].astype(np.float64)) /
                          np.maximum(np.abs(one_w[k].astype(np.float64)), 1.0))) for k in one_w)
    check(len(a) == len(b) and [p[2] for p in a] == [q[2] for q in b] and worst <= 1e-5 and ww <= 1e-5,
          "cnn with sync batchnorm, 2 ranks x %d rows (DDP): %d records within %.2g of 1 rank x %d's, "
          "model.safetensors within %.2g (1e-5)" % (B // 2, len(a), worst, B, ww))


def fake_gpu(path, init, cpu_out, cpu_w):
    import random_runs
    lib = os.environ.get("FAKE_GPU_LIB") or os.path.join(OUT, "lib")
    random_runs.fake_lib_ready(lib)
    env = random_runs.fake_env(lib, os.path.join(OUT, "cache"))
    exe = os.path.join(OUT, "cnn_both")
    subprocess.run([TRAINC, "build", path, "--device", "both", "--arch", "sm_90a", "-o", exe],
                   check=True, env=env, capture_output=True)
    out = os.path.join(OUT, "cnn_gpu")
    run(json.load(open(path)), init, out, exe=exe, env=env, extra=["--device", "cuda"])
    nums = lambda o: [(r.get("loss"), r.get("val_loss")) for r in run_log.records(o) if "event" not in r]
    g, c = nums(out), nums(cpu_out)
    worst = max(rel(a, b) for x, y in zip(g, c) for a, b in zip(x, y) if a is not None and b is not None)
    w = st_check.load(os.path.join(out, "model.safetensors"))
    ww = max(float(np.max(np.abs(w[k].astype(np.float64) - cpu_w[k].astype(np.float64)) /
                          np.maximum(np.abs(cpu_w[k].astype(np.float64)), 1.0))) for k in cpu_w)
    check(len(g) == len(c) and worst <= 1e-5 and ww <= 1e-5, "cnn on the fake GPU: %d records within %.2g of "
          "the CPU's, model.safetensors within %.2g (1e-5)" % (len(g), worst, ww))


def sanitized(spec, init, straight):
    """the mlp run again by the address- and UB-sanitized trainc (ASAN_TRAINC, make test's
    build/asan/trainc; none: skipped): AdamW's two parts, swa's average and best.safetensors
    in each checkpoint (its files' hashes once wrote past a buffer of four names); no
    report, the straight run's losses within 1e-6"""
    asan = os.environ.get("ASAN_TRAINC")
    if not asan:
        print("skip mlp under the sanitizers (no ASAN_TRAINC)")
        return
    out = os.path.join(OUT, "mlp_asan")
    path = os.path.join(OUT, "mlp.json")
    r = subprocess.run([os.path.join(ROOT, asan), "run", path, "--init", init, "--out", out, "--threads", "1",
                        "--quiet"], capture_output=True, text=True, cwd=OUT,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    a = [x["loss"] for x in run_log.steps(out)] if r.returncode == 0 else []
    b = [x["loss"] for x in run_log.steps(straight)]
    check(len(a) == len(b) and all(rel(x, y) <= 1e-6 for x, y in zip(a, b)),
          "mlp by the sanitized trainc (checkpoints of AdamW's parts, the average, best): no report, "
          "the losses%s" % ("" if r.returncode == 0 else ": exit %d %s" % (r.returncode, r.stderr[-300:])))


def mlp():
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    layers = [{"op": "flatten"}, {"op": "linear", "out": 32}, {"op": "relu"}, {"op": "linear", "out": 10}]
    spec = spec_of("mlp", layers, {"type": "adamw", "lr": 2e-3, "weight_decay": 0.01}, {"type": "constant"},
                   {"lr": 5e-4, "epoch_start": 0.5, "annealing_epochs": 0, "annealing_strategy": "linear"})
    init = os.path.join(OUT, "mlp_init.safetensors")
    st_check.save(init, {n: t.detach().numpy() for n, t in model.state_dict().items()})
    out = os.path.join(OUT, "mlp_run")
    run(spec, init, out)
    opt = torch.optim.AdamW(decays(model), lr=2e-3, weight_decay=0.01, foreach=False)
    ref = reference(model, opt, None, {"first": 1, "lr": 5e-4, "anneal": 0, "strategy": "linear"})
    compare("mlp (AdamW, swa from half the epochs, swa.lr at once)", out, model, ref)
    sanitized(spec, init, out)
    for stop in (10, 16):
        o = os.path.join(OUT, "mlp_stop%d" % stop)
        run(spec, init, o, extra=["--set", "max_steps=%d" % stop])
        run(spec, init, o, extra=["--resume", o, "--set", "max_steps=null"])
        same = all(open(os.path.join(o, f), "rb").read() == open(os.path.join(out, f), "rb").read()
                   for f in ("model.safetensors",))
        a = [json.dumps({k: v for k, v in r.items() if k not in ("time_s", "samples_per_s")}) for r in run_log.records(o)
             if "event" not in r]
        b = [json.dumps({k: v for k, v in r.items() if k not in ("time_s", "samples_per_s")}) for r in run_log.records(out)
             if "event" not in r]
        check(same and a == b, "mlp stopped at step %d and resumed: %d records and model.safetensors the straight "
              "run's" % (stop, len(a)))


cnn()
mlp()
sys.exit(1 if failed else 0)
