"""cross_entropy's ignore_index against PyTorch's F.cross_entropy(ignore_index=-100), the
way a supervised fine-tune masks its prompts: the targets of each window's first p
positions (p drawn per window, one window wholly) are -100, so only the completion is
learned.

A tiny Llama (tests/llama_ref.py's: vocabulary 256, d 64, 2 layers, GQA, RoPE, SwiGLU,
T 32) on data/text's windows stored as .npy (x [N, T], y [N, T] with the -100s), its
weights from the same draw on both sides, fp32, one thread, trained with AdamW, warmup,
cosine decay and clipping; every step's loss within 1e-4 relative, then the validation
record (loss and accuracy over the validation windows' targets not ignored) against
PyTorch's on the trained weights:
  - sft: batch 4, accumulate 2 (each micro-batch's mean over its own targets, as
    PyTorch's mean reduction per micro-batch, weighing 1/2);
  - head_ls: vocabulary 1030, so that the head and its loss run a chunk of rows at a time
    (the mean still over the whole batch's targets), label smoothing 0.1.

    $PYTHON tests/ignore_parity.py
    $PYTHON tests/ignore_parity.py --spec NAME DIR   (the case's data and spec in DIR:
                                                      tests/fake_gpu_freeze.sh's)
"""
import copy
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref       # noqa: E402  (its tiny Llama)
import llama_torch as lt   # noqa: E402
import run_log         # noqa: E402

OUT = os.path.join(lt.ROOT, "build", "tests", "ignore_parity")
T, IGNORE = llama_ref.T, -100
torch.set_num_threads(1)
BASE = llama_ref.model("sft", {"kv_heads": 2, "bias": False, "rope": {"theta": 10000}},
                       llama_ref.swiglu("silu", 128))
CASES = {   # name: (vocabulary, batch, accumulate, steps, label smoothing)
    "sft": (256, 4, 2, 20, 0.0),
    "head_ls": (1030, 4, 1, 15, 0.1),
}


def mask_prompts(y, rng):
    """y with each window's targets -100 before its completion (at p, drawn in
    [0, T - 4)); the third window wholly -100."""
    y = y.clone()
    for w in range(len(y)):
        y[w, :T if w == 2 else int(rng.integers(0, T - 4))] = IGNORE
    return y


def masked_windows(n, first, rng):
    """n windows of data/text from window `first` on, their prompts masked."""
    x, y = lt.token_windows(T, first + n)
    return x[first:].clone(), mask_prompts(y[first:], rng)


def npy_data(d, x, y, part="train"):
    """x and y as d/PART_x.npy and d/PART_y.npy (i32): a data entry of a train spec."""
    d = os.path.abspath(d)
    os.makedirs(d, exist_ok=True)
    for k, a in (("x", x), ("y", y)):
        np.save(os.path.join(d, "%s_%s.npy" % (part, k)), a.numpy().astype(np.int32))
    return {"x": os.path.join(d, part + "_x.npy"), "y": os.path.join(d, part + "_y.npy")}


def model_for(V):
    m = copy.deepcopy(BASE)
    m["inputs"]["y"]["classes"] = V
    m["layers"][0]["vocab"] = V
    m["layers"][-1]["out"] = V
    m["loss"]["ignore_index"] = IGNORE
    return m


def torch_validation(model, P, x, y, V, ls):
    with torch.no_grad():
        z = lt.logits(model, P, x).reshape(-1, V)
    t = y.reshape(-1)
    keep = t != IGNORE
    loss = F.cross_entropy(z, t, ignore_index=IGNORE, reduction="sum",
                           label_smoothing=ls).item() / keep.sum().item()
    acc = (z.argmax(-1)[keep] == t[keep]).double().mean().item()
    return loss, acc


def write_case(name, d):
    """The case's data (.npy in d) and spec (d/spec.json, data paths absolute); returns
    the spec, the windows and the validation windows."""
    V, B, k, steps, ls = CASES[name]
    rng = np.random.default_rng(5)
    n = steps * B * k
    x, y = masked_windows(n, 0, rng)
    vx, vy = masked_windows(12, n, rng)
    model = model_for(V)
    if ls:
        model["loss"]["label_smoothing"] = ls
    tr = dict(lt.train_spec(steps, B), accumulate=k, validate={"every_steps": steps})
    tr["data"] = {"train": npy_data(d, x, y), "val": npy_data(d, vx, vy, "val")}
    spec = {"trainc": 1, "model": model, "train": tr}
    json.dump(spec, open(os.path.join(d, "spec.json"), "w"), indent=1)
    return spec, (x, y), (vx, vy)


def run_case(name):
    V, B, k, steps, ls = CASES[name]
    d = os.path.join(OUT, name)
    spec, (x, y), (vx, vy) = write_case(name, d)
    model, tr = spec["model"], spec["train"]
    P = lt.init_params(model, seed=3)
    ours = lt.run_trainc(spec, P.t, d)
    ref = lt.train_torch(lambda xb: lt.logits(model, P, xb), list(P.t.values()), tr, x, y, V, ls)
    ok = lt.compare("trainc vs PyTorch, ignore_index %s" % name, ours, ref, 1e-4)
    val = [r for r in run_log.records(os.path.join(d, "run")) if "val_loss" in r][-1]
    tl, ta = torch_validation(model, P, vx, vy, V, ls)   # (smoothed, as trainc's)
    err = abs(val["val_loss"] - tl) / tl
    good = err <= 1e-4 and abs(val["val_acc"] - ta) <= 1e-9
    print("%s ignore_index %s: validation loss %.6f vs %.6f (%.1e), accuracy %.5f vs %.5f"
          % ("ok  " if good else "FAIL", name, val["val_loss"], tl, err, val["val_acc"], ta))
    return ok and good


def main():
    if sys.argv[1:2] == ["--spec"]:   # --spec NAME DIR: the case's data and spec alone
        write_case(sys.argv[2], sys.argv[3])
        return
    results = [run_case(name) for name in CASES]
    print("ignore_parity: %d of %d cases passed" % (sum(results), len(results)))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
