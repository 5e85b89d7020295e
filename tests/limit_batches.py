"""limit_train_batches (Lightning's Trainer argument): each epoch trains on the first N
batches of its order, N a count or int(f x the epoch's batches) for a fraction f < 1.

An MLP on 10 batches of 8 rows (shuffled), SGD at lr 0 (every step's loss is then its
batch's alone, whatever came before), one thread:
- limit 3, 2 epochs: 6 steps, epochs 0, 0, 0, 1, 1, 1; their losses the first three
  batches' of each epoch of the run without a limit (the same shuffled orders);
- limit 0.45 (int(4.5) = 4 batches) over 2 epochs: 8 steps; a cosine schedule's length is
  those 8 steps (its lr at step 8 the last of 8);
- validate.every_fraction 0.5 of a limited epoch of 4: a validation after batches 2 and 4;
- a resume that changes the limit is refused; so are 2.5 (not a whole count) and a
  fraction under one batch (0.05 of 10), with exit 1 and nothing written;
- limit_val_batches (data.val the same 80 rows, 10 batches): 3, and 0.45 (4 batches):
  each validation's loss the mean cross entropy of the first 24 and 32 rows under the
  run's weights (lr 0: the initial ones), computed here; with validate.batches too, and
  0.05, refused.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_log   # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "limit_batches")
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
    print("%s %s" % ("ok  " if cond else "FAIL", what))


def run(out, *sets, expect=0):
    args = [TRAINC, "run", "model.json", "train.json", "--threads", "1", "--quiet", "--out", out]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, cwd=OUT)
    if r.returncode != expect:
        print(r.stdout + r.stderr)
        raise SystemExit("trainc run %s: exit %d, expected %d" % (out, r.returncode, expect))
    return r


def steps(out):
    return run_log.steps(os.path.join(OUT, out))


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(2)
np.save(os.path.join(OUT, "x.npy"), rng.standard_normal((80, 6)).astype(np.float32))
np.save(os.path.join(OUT, "y.npy"), rng.integers(0, 3, size=80).astype(np.int32))
json.dump({"trainc": 1, "model": {
    "name": "limit", "inputs": {"x": {"shape": [6], "dtype": "f32"},
                                "y": {"shape": [], "dtype": "i32", "classes": 3}},
    "layers": [{"op": "linear", "out": 3}], "loss": {"op": "cross_entropy", "target": "y"}}},
    open(os.path.join(OUT, "model.json"), "w"))
json.dump({"trainc": 1, "train": {
    "data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "x.npy", "y": "y.npy"}},
    "batch_size": 8, "epochs": 2, "optimizer": {"type": "sgd", "lr": 0.0},
    "validate": {"every_epochs": 1}, "log_every": 1, "seed": 5}},
    open(os.path.join(OUT, "train.json"), "w"))

run("full")
full = steps("full")
run("three", "limit_train_batches=3")
three = steps("three")
want = [r["loss"] for r in full[0:3] + full[10:13]]
check([r["epoch"] for r in three] == [0, 0, 0, 1, 1, 1] and [r["loss"] for r in three] == want,
      "limit 3 over 2 epochs: 6 steps, 3 an epoch, the losses of each epoch's first 3 "
      "batches of the unlimited run, bit for bit")

run("frac", "limit_train_batches=0.45", "schedule.type=cosine", "optimizer.lr=0.1",
    "schedule.final_lr_frac=0.1")
frac = steps("frac")
last = 0.01 + 0.09 * (1 + math.cos(math.pi * 7 / 8)) / 2   # (step 8 of a cosine of 8)
check(len(frac) == 8 and [r["epoch"] for r in frac] == [0] * 4 + [1] * 4 and
      abs(frac[-1]["lr"] - last) < 1e-6 * last,
      "limit 0.45 of 10 batches: 4 an epoch, 8 steps, a cosine schedule 8 steps long (lr at "
      "step 8 %.6g, its last)" % frac[-1]["lr"])

run("vfrac", "limit_train_batches=4", "validate.every_fraction=0.5")
vals = [r["step"] for r in run_log.records(os.path.join(OUT, "vfrac")) if "val_loss" in r]
check(vals == [2, 4, 6, 8], "validate.every_fraction 0.5 of a limited epoch of 4: "
      "validations after steps %s" % vals)

run("cut", "limit_train_batches=3", "max_steps=2")
r = subprocess.run([TRAINC, "run", "model.json", "train.json", "--resume", "cut", "--quiet",
                    "--set", "limit_train_batches=4"], capture_output=True, text=True, cwd=OUT)
check(r.returncode == 1 and "limit_train_batches" in r.stderr,
      "a resume that changes limit_train_batches: refused (%s)" %
      (r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "exit %d" % r.returncode))
for value, text in (("2.5", "a count of batches (a whole number) or a fraction below 1"),
                    ("0.05", "0.05 of the epoch's 10 batches is less than one batch")):
    r = run("bad", "limit_train_batches=" + value, expect=1)
    check(text in r.stderr and not os.path.exists(os.path.join(OUT, "bad")),
          "limit_train_batches %s: refused, nothing written (%s)" %
          (value, r.stderr.strip().splitlines()[-1]))
import st_check   # noqa: E402
w = st_check.load(os.path.join(OUT, "full", "model.safetensors"))
x, y = np.load(os.path.join(OUT, "x.npy")).astype(np.float64), np.load(os.path.join(OUT, "y.npy"))
z = x @ w["0.weight"].astype(np.float64).T + w["0.bias"].astype(np.float64)
ce = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1) - z[np.arange(len(y)), y]
for value, rows in (("3", 24), ("0.45", 32)):
    run("val" + value, "limit_val_batches=" + value)
    got = [r["val_loss"] for r in run_log.records(os.path.join(OUT, "val" + value)) if "val_loss" in r]
    want = float(ce[:rows].mean())
    check(len(got) == 2 and all(abs(v - want) <= 1e-6 * want for v in got),
          "limit_val_batches %s: each validation over the first %d rows (%.6f, computed here %.6f)"
          % (value, rows, got[0] if got else float("nan"), want))
for sets, text in ((["limit_val_batches=3", "validate.batches=2"], "limit_val_batches and validate.batches"),
                   (["limit_val_batches=0.05"], "0.05 of the validation's 10 batches is less than one")):
    r = run("bad", *sets, expect=1)
    check(text in r.stderr and not os.path.exists(os.path.join(OUT, "bad")),
          "%s: refused, nothing written (%s)" % (" ".join(sets), r.stderr.strip().splitlines()[-1]))
print("limit_batches: %s" % ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
