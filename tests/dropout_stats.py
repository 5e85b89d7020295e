"""Dropout against its definition and against PyTorch, with trainc's masks read back.

The model: ids -> embedding [V, d] -> dropout(p) -> linear head -> cross entropy, on
a data set whose every (row, position) holds an id of its own (V = rows x T). The
gradient of embedding row `id` is then mask[row, t, :] * dy[row, t, :] / (1 - p) for
that one position alone, so one SGD step (lr 64, a power of two: the update is exact
to the rounding of w - 64 g) shows every element's mask: a dropped element's row entry
keeps its value bit for bit, a kept one moves. Two steps over two batches of distinct
ids show the masks of both steps.

For p in 0.1, 0.5 and 0.8:
- the kept fraction of each step's B x T x d = 4096 elements is within 5 standard
  deviations of Binomial(4096, 1 - p) (dropping with p / 2 is 10 to 64 of them away;
  keeping with p instead of 1 - p, 96 and 170 at p 0.8 and 0.1), rows (a
  position's d features) and columns (a feature over the B x T positions) are not
  all alike (a mask drawn per feature or per position), and the two steps' masks
  differ (a key that does not change with the step);
- PyTorch (float64) trains the same two steps with those masks, scaled by 1 / (1 - p):
  each step's loss within 1e-5 relative and each tensor's change over the two steps
  within 1e-4 of its size (a scale of 1 / p, or none, or a backward that drew another
  mask, is off by 10% and more);
- `--eval` on the same rows is the loss without dropout (identity in evaluation, no
  (1 - p) factor), within 1e-5.
"""
import json, os, subprocess, sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "dropout_stats")
os.makedirs(OUT, exist_ok=True)
B, T, D, C, LR, STEPS = 8, 16, 32, 8, 1.0, 2
V = STEPS * B * T
torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(3)

x = np.arange(V, dtype=np.int32).reshape(STEPS * B, T)
y = rng.integers(0, C, size=(STEPS * B, T)).astype(np.int32)
np.save(os.path.join(OUT, "x.npy"), x)
np.save(os.path.join(OUT, "y.npy"), y)
init = {"wte.weight": rng.standard_normal((V, D)).astype(np.float32),
        "head.weight": (0.5 * rng.standard_normal((C, D))).astype(np.float32),
        "head.bias": (0.1 * rng.standard_normal(C)).astype(np.float32)}
init_path = os.path.join(OUT, "init.safetensors")
st_check.save(init_path, init)

failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)

def spec_for(p):
    spec = {"trainc": 1,
            "model": {"name": "dropout_stats",
                      "inputs": {"x": {"shape": [T], "dtype": "i32"},
                                 "y": {"shape": [T], "dtype": "i32", "classes": C}},
                      "layers": [{"op": "embedding", "name": "wte", "vocab": V, "dim": D, "input": "x"},
                                 {"op": "dropout", "p": p},
                                 {"op": "linear", "name": "head", "out": C}],
                      "loss": {"op": "cross_entropy", "target": "y"}},
            "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "x.npy", "y": "y.npy"}},
                      "batch_size": B, "max_steps": STEPS, "log_every": 1, "checkpoint": None,
                      "optimizer": {"type": "sgd", "lr": LR},
                      "loader": {"shuffle": False, "workers": 0}}}
    path = os.path.join(OUT, f"p{p}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path

def trainc(*args):
    p = subprocess.run([TRAINC, "run", *args, "--threads", "1", "--quiet"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"trainc run {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout

def torch_steps(p, masks):
    """The two SGD steps in float64 with trainc's masks; (losses, final weights)."""
    w = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in init.items()}
    losses = []
    for s in range(STEPS):
        xb = torch.from_numpy(x[s * B:(s + 1) * B].astype(np.int64))
        yb = torch.from_numpy(y[s * B:(s + 1) * B].astype(np.int64))
        h = w["wte.weight"][xb] * torch.from_numpy(masks[s]) / (1 - p)
        loss = F.cross_entropy((h @ w["head.weight"].T + w["head.bias"]).reshape(-1, C), yb.reshape(-1))
        for t in w.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in w.values():
                t -= LR * t.grad
        losses.append(loss.item())
    return losses, {k: t.detach().numpy() for k, t in w.items()}

def eval_loss_no_dropout():
    h = torch.from_numpy(init["wte.weight"].astype(np.float64))[torch.from_numpy(x.astype(np.int64))]
    logits = h @ torch.from_numpy(init["head.weight"].astype(np.float64)).T + torch.from_numpy(init["head.bias"].astype(np.float64))
    return F.cross_entropy(logits.reshape(-1, C), torch.from_numpy(y.astype(np.int64)).reshape(-1)).item()

for p in (0.1, 0.5, 0.8):
    spec = spec_for(p)
    run = os.path.join(OUT, f"run_p{p}")
    trainc(spec, "--init", init_path, "--out", run)
    ours_loss = run_log.losses(run)
    final = st_check.load(os.path.join(run, "model.safetensors"))
    # every id is in one step's batch: its row moved where the mask kept it
    kept = (final["wte.weight"] != init["wte.weight"]).reshape(STEPS, B, T, D)
    n = B * T * D
    sd = np.sqrt(n * p * (1 - p))
    for s in range(STEPS):
        k = int(kept[s].sum())
        check(abs(k - n * (1 - p)) <= 5 * sd,
              f"p {p} step {s + 1}: {k} of {n} kept, expected {n * (1 - p):.0f} +- {5 * sd:.0f} (5 sd)")
        rows = kept[s].reshape(-1, D)
        check(len({r.tobytes() for r in rows}) > 1 and len({c.tobytes() for c in rows.T}) > 1,
              f"p {p} step {s + 1}: the masks differ between positions and between features")
    check((kept[0] != kept[1]).any(), f"p {p}: step 2's mask is not step 1's")
    ref_loss, ref_w = torch_steps(p, kept.astype(np.float64))
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours_loss, ref_loss))
    check(len(ours_loss) == STEPS and worst <= 1e-5,
          f"p {p}: losses {ours_loss} vs PyTorch's with these masks {ref_loss}: worst {worst:.1e} (tol 1e-5)")
    for name in init:
        ours_d = init[name].astype(np.float64) - final[name]
        ref_d = init[name].astype(np.float64) - ref_w[name]
        err = np.abs(ours_d - ref_d).max() / np.abs(ref_d).max()
        check(err <= 1e-4, f"p {p}: {name}'s change within {err:.1e} of PyTorch's (tol 1e-4)")
    if p == 0.5:
        out = trainc(spec, "--init", init_path, "--eval")
        ev = json.loads(out.strip().splitlines()[-1])
        ref = eval_loss_no_dropout()
        check(abs(ev["val_loss"] - ref) <= 1e-5 * abs(ref),
              f"p {p}: --eval's loss {ev['val_loss']:.7f} is the loss without dropout {ref:.7f}")

print(f"dropout_stats: {len(failures)} failed")
sys.exit(1 if failures else 0)
