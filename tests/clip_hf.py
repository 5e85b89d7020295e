"""trainc import hf and trainc export hf of CLIPForImageClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init so that a tensor put in
another's place shows:

- CLIP's vision tower with a classifier on random 16x16 RGB images (4x4 patches, the
  quick_gelu MLP, a CLIPImageProcessor's mean and std by channel) and one on
  Fashion-MNIST (one channel, 7x7 patches, the tanh gelu, eps 1e-6) are imported as
  conv2d (no bias), tokens, cls_token, pos_embedding, layernorm (pre_layrnorm), the
  blocks, token_mean over the patch tokens (skip 1) and the head; trainc's `--eval`
  validation loss equals transformers' mean cross-entropy within 1e-5 relative; import
  then export gives back every tensor the classifier reads bit for bit (post_layernorm,
  which it does not, as the identity); trainc trains 5 steps, exports, and
  from_pretrained's loss of the folder equals trainc's `--eval` within 1e-5; the
  exported processor is a CLIPImageProcessor;
- a CLIPModel (text and vision towers) with `--labels`: the vision tower alone, the text
  tower, projections and logit scale left out, a new head uniform within 1/sqrt(D) with a
  zero bias; with it in CLIPForImageClassification.from_pretrained of the folder, the
  same loss;
- refused with exit 1, naming the key, nothing written: a CLIPModel without --labels, a
  vision_config key trainc does not know.

`clip_hf.py --siglip` (HF_NEW_PYTHON: transformers 4.48.3; SiglipForImageClassification
averages every token from 4.45 on, 4.40 left the first out): SigLIP's vision tower and
classifier likewise, imported as conv2d, tokens, pos_embedding (no class token), the
blocks (the tanh gelu), layernorm (post_layernorm), token_mean over every token and the
head, its attention-pooling head left out (the export says vision_use_head false): the
loss, every tensor back, 5 steps exported; a SiglipModel with --labels; and a ViT spec
pooled by token_mean (specs/vit_fashion.json's blocks) exports as a SigLIP, to
transformers' loss.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

try:
    import transformers
    from transformers import (AutoModelForImageClassification, CLIPConfig,
                              CLIPForImageClassification, CLIPImageProcessor, CLIPModel)
    from safetensors.torch import load_file
except ImportError:
    print("skip clip_hf: transformers is not importable from %s (make deps makes a venv with "
          "it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, check, data, eval_loss, failed, hf_loss, specs,  # noqa: E402
                      refused, rel, saved, trainc)
OUT = os.path.join(ROOT, "build", "tests", "clip_hf")
POST = "vision_model.post_layernorm."
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            vocab_size=50, max_position_embeddings=8)


SIGLIP = "--siglip" in sys.argv[1:]
LAYERS = (["conv2d", "tokens", "pos_embedding", "repeat", "layernorm", "token_mean", "linear"]
          if SIGLIP else ["conv2d", "tokens", "cls_token", "pos_embedding", "layernorm",
                          "repeat", "token_mean", "linear"])


def case(name, cls, cfg, preprocessor, x, y):
    d = os.path.join(OUT, name)
    src, imp = d + "/src", d + "/import"
    m = saved(cls, cfg, src, 0.05, seed=2)
    if preprocessor:
        preprocessor.save_pretrained(src)
    r = trainc("import", "hf", src, "-o", imp)
    spec = imp + "/model.json"
    _, _, xv, yv = data(imp, x, y)
    specs(imp)
    ops = [l["op"] for l in json.load(open(spec))["model"]["layers"]]
    check(ops == LAYERS, "%s: model.json's layers %s" % (name, " ".join(ops)))
    ours, theirs = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: imported (%s), trainc --eval %.7f, transformers %.7f "
          "(%.1e)" % (name, r.stdout[r.stdout.index("(") + 1:r.stdout.index(";")], ours, theirs,
                      rel(ours, theirs)))
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/back")
    a, b = load_file(src + "/model.safetensors"), load_file(d + "/back/model.safetensors")
    if SIGLIP:   # (the pooling head left out)
        a = {k: t for k, t in a.items() if not k.startswith("vision_model.head.")}
        same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
        check(same, "%s: import then export gives back the folder's %d tensors but the pooling "
              "head's bit for bit" % (name, len(a)))
    else:
        same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a
                                        if not k.startswith(POST))
        ident = torch.equal(b[POST + "weight"], torch.ones_like(a[POST + "weight"])) and \
            not b[POST + "bias"].any()
        check(same and ident, "%s: import then export gives back the folder's %d tensors bit for "
              "bit, post_layernorm as the identity" % (name, len(a)))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    folder = d + "/hf"
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", d + "/run5/model.safetensors",
           "-o", folder)
    back = cls.from_pretrained(folder)
    ours = eval_loss(spec, imp + "/eval.json", d + "/run5/model.safetensors", folder + "_eval")
    theirs = hf_loss(back, spec, xv, yv)
    pre = json.load(open(folder + "/preprocessor_config.json"))["image_processor_type"]
    check(rel(ours, theirs) <= 1e-5 and pre == (type(preprocessor).__name__ if preprocessor
                                                  else "ViTImageProcessor"),
          "%s: trained, exported (a %s), from_pretrained's loss %.7f, trainc --eval %.7f (%.1e)"
          % (name, pre, theirs, ours, rel(ours, theirs)))


def new_head(x, config, model, cls, base):
    """--labels over a CLIPModel (SiglipModel): its vision tower, a new head"""
    d = os.path.join(OUT, "clip_model")
    cfg = config(text_config=TEXT, vision_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=16, patch_size=4))
    saved(model, cfg, d + "/src", 0.05, seed=3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--labels", "cat,dog,bird")
    spec = imp + "/model.json"
    _, _, xv, yv = data(imp, x, np.arange(len(x)) % 3)
    specs(imp)
    ours = load_file(imp + "/init.safetensors")
    hf = cls.from_pretrained(d + "/src", num_labels=3)
    with torch.no_grad():
        hf.classifier.weight.copy_(ours["head.weight"])
        hf.classifier.bias.copy_(ours["head.bias"])
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(hf, spec, xv, yv)
    w = ours["head.weight"]
    check(list(w.shape) == [3, 16] and float(w.abs().max()) <= 0.25 and
          not ours["head.bias"].any() and rel(a, b) <= 1e-5,
          "a %s with --labels cat,dog,bird (%s): the new head [3, 16] within 1/sqrt(16), "
          "its bias zero; trainc --eval %.7f, transformers %.7f (%.1e)"
          % (base, r.stdout[r.stdout.index("left out"):r.stdout.index(";")], a, b, rel(a, b)))
    refused("a %s without --labels" % base, ["import", "hf", d + "/src", "-o", d + "/o1"],
            "$.architectures: %s: no classifier" % base, d + "/o1")
    c = json.load(open(d + "/src/config.json"))
    c["vision_config"]["use_rope"] = True
    shutil.copytree(d + "/src", d + "/edited", dirs_exist_ok=True)
    json.dump(c, open(d + "/edited/config.json", "w"))
    refused("a vision_config key trainc does not know", ["import", "hf", d + "/edited", "-o",
            d + "/o2", "--labels", 3], "$.vision_config.use_rope: a key trainc does not know",
            d + "/o2")


def vit_as_siglip():
    """specs/vit_fashion.json's blocks pooled by token_mean: a SigLIP, to transformers' loss"""
    from transformers import SiglipForImageClassification
    d = os.path.join(OUT, "vit_mean")
    os.makedirs(d, exist_ok=True)
    m = json.load(open(os.path.join(ROOT, "specs", "vit_fashion.json")))["model"]
    ls = m["layers"]
    del ls[2]
    ls[2]["max_len"] = 49
    ls[-2] = {"op": "token_mean"}
    json.dump({"trainc": 1, "model": m}, open(d + "/model.json", "w"))
    X = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")
    Y = np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")
    _, _, xv, yv = data(d, np.array(X[:128]).reshape(128, 1, 28, 28), np.array(Y[:128]))
    specs(d)
    trainc("run", d + "/model.json", d + "/train5.json", "--threads", 1, "--quiet", "--out",
           d + "/run")
    trainc("export", "hf", d + "/model.json", d + "/eval.json", "--weights",
           d + "/run/model.safetensors", "-o", d + "/hf")
    back = AutoModelForImageClassification.from_pretrained(d + "/hf")
    ours = eval_loss(d + "/model.json", d + "/eval.json", d + "/run/model.safetensors", d + "/e")
    theirs = hf_loss(back, d + "/model.json", xv, yv)
    check(type(back) is SiglipForImageClassification and rel(ours, theirs) <= 1e-5,
          "a ViT pooled by token_mean exports as a %s: from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (type(back).__name__, theirs, ours, rel(ours, theirs)))


def siglip():
    from transformers import (SiglipConfig, SiglipForImageClassification, SiglipImageProcessor,
                              SiglipModel)
    rng = np.random.default_rng(7)
    case("siglip_rgb", SiglipForImageClassification, SiglipConfig(text_config=TEXT, vision_config=dict(
            hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
            image_size=16, patch_size=4), num_labels=5),
         SiglipImageProcessor(size={"height": 16, "width": 16}),
         rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8), rng.integers(0, 5, size=128))
    new_head(rng.integers(0, 256, size=(64, 3, 16, 16)).astype(np.uint8), SiglipConfig,
             SiglipModel, SiglipForImageClassification, "SiglipModel")
    vit_as_siglip()


# (each run its own folder: make test runs the two at once, and neither may remove the
# other's)
OUT += "_siglip" if SIGLIP else ""
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
if SIGLIP:
    if tuple(int(p) for p in transformers.__version__.split(".")[:2]) < (4, 45):
        print("skip clip_hf --siglip: transformers %s's SiglipForImageClassification leaves the "
              "first token out of its mean (HF_NEW_PYTHON: 4.45 or later)" % transformers.__version__)
        sys.exit(77)
    siglip()
    print("clip_hf --siglip: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                                      transformers.__version__))
    sys.exit(1 if failed else 0)
rng = np.random.default_rng(6)
case("rgb", CLIPForImageClassification, CLIPConfig(text_config=TEXT, vision_config=dict(
        hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
        image_size=16, patch_size=4), num_labels=5),
     CLIPImageProcessor(size={"shortest_edge": 16}, crop_size=16),
     rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8), rng.integers(0, 5, size=128))
X = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")
case("fashion", CLIPForImageClassification, CLIPConfig(text_config=TEXT, vision_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=28, patch_size=7, num_channels=1, hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6), num_labels=10),
     None, np.array(X[:128]).reshape(128, 1, 28, 28), np.array(Y[:128]))
new_head(rng.integers(0, 256, size=(64, 3, 16, 16)).astype(np.uint8), CLIPConfig, CLIPModel,
         CLIPForImageClassification, "CLIPModel")
print("clip_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
