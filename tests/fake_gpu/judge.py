"""judge.py KIND CPU GPU [--close TOL] [--frozen P,...]: a training run on the fake GPU
(folder GPU, its start record's device cuda) against another run (CPU) of the same steps.

KIND close: every step's loss and grad_norm within TOL relative (default 1e-5), and
every validation's loss too (its accuracy equal);
same: the records (but their times) and model.safetensors bit-identical; 16: the first
loss within 1e-3 and the last within 2e-2 (a 16-bit run against fp32).
--frozen: the parameters those patterns match (train.freeze's) equal CPU's bit for bit.
Prints what it found; an assertion fails the check."""
import argparse, fnmatch, os, sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
import run_log, st_check

ap = argparse.ArgumentParser()
ap.add_argument("kind", choices=["close", "same", "16"])
ap.add_argument("cpu")
ap.add_argument("gpu")
ap.add_argument("--close", type=float, default=1e-5)
ap.add_argument("--frozen", default="")
a = ap.parse_args()

assert [r for r in run_log.records(a.gpu) if r.get("event") == "start"][-1]["device"] == "cuda"
sa, sb = run_log.steps(a.cpu), run_log.steps(a.gpu)
assert [r["step"] for r in sa] == [r["step"] for r in sb] and len(sa) > 1, (len(sa), len(sb))
rel = lambda x, y: abs(x - y) / max(abs(x), 1e-6)
if a.kind == "close":
    worst = max(rel(x[k], y[k]) for x, y in zip(sa, sb) for k in ("loss", "grad_norm"))
    assert worst <= a.close, "relative difference %.3g" % worst
    said = "%d steps' losses and gradient norms within %.1e" % (len(sa), worst)
    va, vb = ([r for r in run_log.records(run) if "val_loss" in r] for run in (a.cpu, a.gpu))
    assert len(va) == len(vb), (len(va), len(vb))
    if va:
        vw = max(rel(x["val_loss"], y["val_loss"]) for x, y in zip(va, vb))
        assert vw <= a.close and all(x.get("val_acc") == y.get("val_acc") for x, y in zip(va, vb)), \
            "validation: loss %.3g apart, accuracy %s vs %s" % (vw, [x.get("val_acc") for x in va],
                                                                [y.get("val_acc") for y in vb])
        said += "; %d validations' losses within %.1e, accuracies equal" % (len(va), vw)
elif a.kind == "same":
    drop = lambda rs: [{k: v for k, v in r.items() if k not in ("time_s", "samples_per_s", "tokens_per_s")}
                       for r in rs]
    assert drop(sa) == drop(sb), "the records differ"
    assert open(a.cpu + "/model.safetensors", "rb").read() == open(a.gpu + "/model.safetensors", "rb").read()
    said = "%d records and the weights bit-identical" % len(sa)
else:
    f, l = rel(sa[0]["loss"], sb[0]["loss"]), rel(sa[-1]["loss"], sb[-1]["loss"])
    assert f <= 1e-3 and l <= 2e-2, "first loss %.3g, last %.3g apart" % (f, l)
    said = "first loss within %.1e, last within %.1e of fp32" % (f, l)
if a.frozen:
    wa, wb = st_check.load(a.cpu + "/model.safetensors"), st_check.load(a.gpu + "/model.safetensors")
    frozen = [n for n in wa if any(fnmatch.fnmatchcase(n, p) for p in a.frozen.split(","))]
    assert frozen, a.frozen
    for n in frozen:
        assert np.array_equal(wa[n], wb[n]), "%s: frozen, yet not the CPU's" % n
    said += "; %d frozen tensors the CPU's bit for bit" % len(frozen)
print(said)
