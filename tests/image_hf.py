"""What the Hugging Face tests share (vit_hf, resnet_hf, convnext_hf, bert_hf,
data_classify, wordpiece_hf): the checks' report, trainc's runs, an image classifier's
pixels as trainc computes them, its data and transformers' loss over them, the refusals,
and random models saved off transformers' init."""
import json
import os
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
    print("%s %s" % ("ok  " if cond else "FAIL", what))


def trainc(*args, expect=0):
    r = subprocess.run([TRAINC] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout + r.stderr)
        raise SystemExit("trainc %s: exit %d, expected %d" % (args[0], r.returncode, expect))
    return r


def rel(a, b):
    return abs(a - b) / abs(b)


def pixels(spec, x):
    """the model's pixels as trainc computes them: x * scale + shift in float, each a
    number or one a channel"""
    inp = json.load(open(spec))["model"]["inputs"]["x"]
    ch = lambda v: torch.tensor(np.float32(v)).reshape((-1, 1, 1) if isinstance(v, list) else ())
    t = torch.from_numpy(x).float() * ch(inp.get("scale", 1.0))
    return t + ch(inp["shift"]) if "shift" in inp else t


def eval_loss(spec, train, weights, out):
    """trainc --eval's validation loss"""
    r = trainc("run", spec, train, "--init", weights, "--eval", "--threads", 1, "--out", out)
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]


def processor_agrees(name, folder, spec, x):
    """the folder's image processor (ViTImageProcessor's defaults where it has none) makes
    trainc's pixels of the u8 images"""
    have = os.path.exists(folder + "/preprocessor_config.json")
    from transformers import ViTImageProcessor
    proc = ViTImageProcessor.from_pretrained(folder) if have else ViTImageProcessor()
    imgs = [np.ascontiguousarray(im.transpose(1, 2, 0)) for im in x[:8]]   # HWC
    theirs = proc(imgs, do_resize=False, return_tensors="np")["pixel_values"]
    d = float(np.max(np.abs(theirs - pixels(spec, x[:8]).numpy())))
    check(d <= 1e-6, "%s: %s image processor gives trainc's pixels (largest difference %.1e)"
          % (name, os.path.relpath(folder, os.path.join(ROOT, "build", "tests")) + "'s" if have else "ViTImageProcessor's default", d))


def refused(what, args, expect_text, folder=None):
    """exit 1 with expect_text in the message, and folder not made"""
    r = subprocess.run([TRAINC] + [str(a) for a in args], capture_output=True, text=True)
    good = r.returncode == 1 and expect_text in r.stderr and not (folder and os.path.exists(folder))
    check(good, "refused: %s (%s)" % (what, r.stderr.strip().splitlines()[-1] if r.stderr.strip()
                                      else "exit %d" % r.returncode))


def saved(cls, cfg, src, noise, seed=None):
    """a random CLS(cfg), every parameter moved off transformers' init by NOISE times a
    normal draw (so a tensor put in another's place shows), saved in SRC"""
    if seed is not None:
        torch.manual_seed(seed)
    m = cls(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(noise * torch.randn_like(p))
    m.save_pretrained(src, safe_serialization=True)
    return m


def hf_loss(m, spec, x, y):
    """mean cross-entropy over the images, in batches of 32 (as --eval's)"""
    m.eval()
    losses = []
    with torch.no_grad():
        for b in range(0, len(x), 32):
            logits = m(pixel_values=pixels(spec, x[b:b + 32])).logits.double()
            losses.append(F.cross_entropy(logits, torch.from_numpy(y[b:b + 32]).long()).item())
    return sum(losses) / len(losses)


def specs(d):
    """D/eval.json (every val image, batches of 32) and D/train5.json (5 AdamW steps, fp32):
    the training specs over data()'s arrays"""
    base = {"data": {"train": {"x": "data/train_x.npy", "y": "data/train_y.npy"},
                     "val": {"x": "data/val_x.npy", "y": "data/val_y.npy"}},
            "batch_size": 32, "precision": "fp32", "loader": {"shuffle": False}, "seed": 1}
    json.dump({"trainc": 1, "train": dict(base, epochs=1)}, open(d + "/eval.json", "w"))
    json.dump({"trainc": 1, "train": dict(base, max_steps=5, log_every=1,
                                          optimizer={"type": "adamw", "lr": 1e-3})},
              open(d + "/train5.json", "w"))


def data(d, x, y):
    """the first half of the images for training, the second for validation"""
    os.makedirs(d + "/data", exist_ok=True)
    n = len(x) // 2
    for part, sl in (("train", slice(0, n)), ("val", slice(n, None))):
        np.save("%s/data/%s_x.npy" % (d, part), np.ascontiguousarray(x[sl]))
        np.save("%s/data/%s_y.npy" % (d, part), y[sl].astype(np.int32))
    return x[:n], y[:n], x[n:], y[n:]
