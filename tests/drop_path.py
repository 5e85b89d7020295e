"""A residual's drop_path (stochastic depth) against its definition, its masks read back.

The model: x [8] -> residual(drop_path p, body [linear 8]) -> mse against y [8], the
linear's weight and bias zero at first and an SGD rate of 1e-30 (they stay as good as
zero), batch 1: a step's output is x whether the sample's body is dropped or not, so its
gradient is (1 - m) * 0 + m / (1 - p) * 2 (x - y) / 8 x^T for its mask m: exactly zero
where the sample is dropped, and 1 / (1 - p) times the same run's at p 0 where kept.

For p 0.3, over 400 steps (samples):
- the steps whose gradient norm is zero are within 5 standard deviations of
  Binomial(400, p) (a mask drawn per element would zero almost none: p^8 of them;
  keeping with p instead of 1 - p is 80 away, 10 sd);
- each other step's gradient norm is the p 0 run's times 1 / (1 - p) within 1e-5 (no
  scale, or 1 / p, is off by 30% and more);
- `--eval` on the same rows gives the p 0 model's loss bit for bit (the identity in
  evaluation);
- a spec's drop_path of 1 or -0.1 exits 1 naming the key;
- "drop_path": [0, 0.5] on a residual in a repeat of 3: the iterations drop with 0, 0.25
  and 0.5 (the generated kernels' thresholds: none, then 0.25f and 0.5f); three numbers,
  or [first, last] outside a repeat, exit 1.
"""
import json, os, re, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check
import run_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "drop_path")
os.makedirs(OUT, exist_ok=True)
N, D, P = 400, 8, 0.3
rng = np.random.default_rng(5)
np.save(os.path.join(OUT, "x.npy"), rng.standard_normal((N, D)).astype(np.float32))
np.save(os.path.join(OUT, "y.npy"), rng.standard_normal((N, D)).astype(np.float32))
init = os.path.join(OUT, "init.safetensors")
st_check.save(init, {"block.fc.weight": np.zeros((D, D), np.float32),
                     "block.fc.bias": np.zeros(D, np.float32)})
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def spec_for(p):
    path = os.path.join(OUT, "p%s.json" % p)
    json.dump({"trainc": 1,
               "model": {"name": "drop_path",
                         "inputs": {"x": {"shape": [D], "dtype": "f32"},
                                    "y": {"shape": [D], "dtype": "f32"}},
                         "layers": [{"op": "residual", "name": "block", "drop_path": p,
                                     "body": [{"op": "linear", "name": "fc", "out": D}]}],
                         "loss": {"op": "mse", "target": "y"}},
               "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"},
                                  "val": {"x": "x.npy", "y": "y.npy"}},
                         "batch_size": 1, "epochs": 1, "log_every": 1, "checkpoint": None,
                         "optimizer": {"type": "sgd", "lr": 1e-30},
                         "loader": {"shuffle": False}}}, open(path, "w"))
    return path


def run(p, *more):
    r = subprocess.run([TRAINC, "run", spec_for(p), "--init", init, "--threads", "1", "--quiet",
                        *more], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("trainc run: exit %d\n%s" % (r.returncode, r.stderr))
    return r


norms = {}
for p in (P, 0.0):
    d = os.path.join(OUT, "run%s" % p)
    run(p, "--out", d)
    norms[p] = [r["grad_norm"] for r in run_log.steps(d)]
dropped = sum(g == 0 for g in norms[P])
sd = (N * P * (1 - P)) ** 0.5
check(len(norms[P]) == N and abs(dropped - N * P) <= 5 * sd,
      "drop_path %g: %d of %d samples dropped (a zero gradient), expected %.0f +- %.0f (5 sd)"
      % (P, dropped, N, N * P, 5 * sd))
ratios = [a / b for a, b in zip(norms[P], norms[0.0]) if a]
worst = max(abs(r * (1 - P) - 1) for r in ratios)
check(worst <= 1e-5, "the %d kept samples' gradients are 1 / (1 - p) times those without "
      "drop_path (worst %.1e)" % (len(ratios), worst))
ev = [json.loads(run(p, "--eval").stdout.strip().splitlines()[-1])["val_loss"] for p in (P, 0.0)]
check(ev[0] == ev[1], "--eval: %.9g with drop_path %g, %.9g without (the identity)"
      % (ev[0], P, ev[1]))
for bad in (1, -0.1):
    path = spec_for(bad)
    r = subprocess.run([TRAINC, "check", path], capture_output=True, text=True)
    check(r.returncode == 1 and "$.model.layers[0].drop_path: expected a number in [0, 1)"
          in r.stderr, "drop_path %g refused: %s" % (bad, r.stderr.strip()))
ramp = spec_for(0.0)
s = json.load(open(ramp))
s["model"]["layers"] = [{"op": "repeat", "name": "blocks", "count": 3, "body": [
    dict(s["model"]["layers"][0], drop_path=[0, 0.5])]}]
json.dump(s, open(ramp, "w"))
subprocess.run([TRAINC, "emit", ramp, "-o", os.path.join(OUT, "ramp")], check=True,
               capture_output=True)
code = open(os.path.join(OUT, "ramp", "kernels_cpu.c")).read()
fwd = re.findall(r"/\* k\d+: [^\n]*drop_path \(a sample", code)   # (training's, not ke's)
check("< 0.25f" in code and "< 0.5f" in code and "< 0.0f" not in code and len(fwd) == 2,
      "drop_path [0, 0.5] over a repeat of 3: two drop_path kernels, at 0.25 and 0.5 (the "
      "first iteration's 0: none)")
for what, value, layers, text in (
        ("three rates", [0.1, 0.2, 0.3], s["model"]["layers"], "or [first, last] of two"),
        ("[first, last] outside a repeat", [0, 0.5], s["model"]["layers"][0]["body"],
         "drop_path [first, last] rises over the iterations of the repeat")):
    t = json.loads(json.dumps(s))
    t["model"]["layers"] = json.loads(json.dumps(layers))
    (t["model"]["layers"][0]["body"][0] if t["model"]["layers"][0]["op"] == "repeat"
     else t["model"]["layers"][0])["drop_path"] = value
    path = os.path.join(OUT, "bad.json")
    json.dump(t, open(path, "w"))
    r = subprocess.run([TRAINC, "check", path], capture_output=True, text=True)
    check(r.returncode == 1 and text in r.stderr, "drop_path %s refused: %s"
          % (what, r.stderr.strip()))
print("drop_path: %d failed" % len(failures))
sys.exit(1 if failures else 0)
