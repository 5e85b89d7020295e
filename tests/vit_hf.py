"""trainc import hf and trainc export hf of ViTForImageClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init (zero biases, unit
norms) so that a tensor put in another's place shows:

- a ViT on Fashion-MNIST's 28x28 images (one channel, 7x7 patches, the exact gelu,
  q, k and v biased, ViTImageProcessor's mean and std 0.5 in preprocessor_config.json),
  and one on random 16x16 RGB images (4x4 patches, q, k and v without bias: the spec's
  bias "proj", the tanh gelu, layer_norm_eps 1e-6, 5 classes, no
  preprocessor_config.json: ViTImageProcessor's defaults) are imported; trainc's `--eval`
  validation loss on the imported weights equals transformers' mean cross-entropy over
  the same images within 1e-5 relative, its pixels (x * scale + shift) being what the
  folder's image processor makes of the u8 images (within 1e-6);
- import then export gives back every tensor of the source folder bit for bit;
- id2label's names become the target's `labels` and come back in the export's config
  (transformers' own LABEL_k are left out);
- trainc trains each 5 steps from the import, exports its model.safetensors, and
  transformers' from_pretrained of the folder computes the loss trainc's --eval gives
  for those weights, within 1e-5; the exported preprocessor_config.json makes trainc's
  pixels; specs/vit_fashion.json (pixels x / 255) likewise after 3 steps from its own
  initial weights;
- a ViT normalized by channel (ImageNet's mean and std, as DeiT's image processors have
  them: the input's scale and shift as lists) imports to transformers' loss, and its
  export writes those means and stds back;
- a DeiTForImageClassification (a ViT whose distillation token follows the class token:
  two cls_token layers; its DeiTImageProcessor's resize and crop kept) likewise: loss
  parity, every tensor back, trained and exported to transformers' loss, a DeiT config
  and processor back; a DeiTForImageClassificationWithTeacher (two heads averaged)
  imports with --labels (its encoder, both heads left out) to the loss of
  DeiTForImageClassification with that head, and without --labels is refused;
- `--labels` over a ViTModel (no classifier, a pooler left out) and over a classifier of
  10 classes given 2: the encoder as ViTForImageClassification loads it from that folder,
  the new head drawn with std initializer_range and a zero bias; with it in transformers'
  model, trainc's --eval loss within 1e-5;
- refused with exit 1, naming the key or layer, nothing written: an image_mean of 2
  numbers for 3 channels, a bare ViTModel without --labels, a config key trainc does not
  know, --seq-len, and export of a vision transformer with a class token pooled by
  token_mean (ViTForImageClassification reads the class token; without one it is a
  SigLIP: tests/clip_hf.py --siglip).
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

try:
    import transformers
    from transformers import (DeiTConfig, DeiTForImageClassification,
                              DeiTForImageClassificationWithTeacher, DeiTImageProcessor, ViTConfig,
                              ViTForImageClassification, ViTImageProcessor)
    from safetensors.torch import load_file
except ImportError:
    print("skip vit_hf: transformers is not importable from %s (make deps makes a venv with "
          "it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, check, data, eval_loss, failed, hf_loss,  # noqa: E402
                      processor_agrees, refused, rel, saved, specs, trainc)
OUT = os.path.join(ROOT, "build", "tests", "vit_hf")
torch.set_num_threads(1)
torch.manual_seed(0)










def make(name, cfg, preprocessor, cls=ViTForImageClassification):
    """a random CLS (ViTForImageClassification) saved in OUT/name/src"""
    m = cls(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    src = os.path.join(OUT, name, "src")
    m.save_pretrained(src, safe_serialization=True)
    if preprocessor:
        preprocessor.save_pretrained(src)
    return m, src


def case(name, cfg, preprocessor, x, y, cls=ViTForImageClassification):
    d = os.path.join(OUT, name)
    m, src = make(name, cfg, preprocessor, cls)
    deit = cls is not ViTForImageClassification
    imp = d + "/import"
    trainc("import", "hf", src, "-o", imp)
    spec = imp + "/model.json"
    _, _, xv, yv = data(imp, x, y)
    specs(imp)
    ops = [l["op"] for l in json.load(open(spec))["model"]["layers"]]
    check(ops == ["conv2d", "tokens"] + ["cls_token"] * (1 + deit) +
          ["pos_embedding", "repeat", "layernorm", "first_token", "linear"],
          "%s: model.json's layers %s" % (name, " ".join(ops)))
    processor_agrees(name, src, spec, xv)
    ours, theirs = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, ours, theirs, rel(ours, theirs)))
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/back")
    a, b = load_file(src + "/model.safetensors"), load_file(d + "/back/model.safetensors")
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    exported(name, spec, imp + "/eval.json", d + "/run5/model.safetensors", d + "/hf", xv, yv)
    back = cls.from_pretrained(d + "/hf")
    pre = json.load(open(d + "/hf/preprocessor_config.json"))
    check(type(back.config) is type(cfg) and pre["image_processor_type"] ==
          (type(preprocessor) if preprocessor else ViTImageProcessor).__name__,
          "%s: the export is a %s, its image processor a %s" % (name, type(back.config).__name__,
                                                               pre["image_processor_type"]))
    a, b = m.config.id2label, back.config.id2label
    check(a == b, "%s: the classes' names (id2label) through import and export: %s" %
          (name, ", ".join(b[k] for k in sorted(b)[:3]) + ", ..."))
    t = json.load(open(imp + "/train5.json"))
    t["train"]["lora"] = {"rank": 4, "alpha": 8, "train": ["head.*"]}
    json.dump(t, open(imp + "/lora5.json", "w"))
    trainc("run", spec, imp + "/lora5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/lora5")
    exported(name + " with LoRA (merged)", spec, imp + "/lora5.json", d + "/lora5/model.safetensors",
             d + "/hf_lora", xv, yv)


def exported(name, spec, eval_spec, weights, folder, xv, yv):
    """export WEIGHTS; transformers' loss of the folder equals trainc's --eval"""
    trainc("export", "hf", spec, eval_spec, "--weights", weights, "-o", folder)
    ours = eval_loss(spec, eval_spec, weights, folder + "_eval")
    theirs = hf_loss(transformers.AutoModelForImageClassification.from_pretrained(folder), spec,
                     xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: trained, exported, from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))
    processor_agrees(name, folder, spec, xv)


def vit_fashion(X, Y):
    """specs/vit_fashion.json from its own initial weights, 3 steps, exported"""
    d = os.path.join(OUT, "vit_fashion")
    os.makedirs(d, exist_ok=True)
    _, _, xv, yv = data(d, X, Y)
    specs(d)
    m = json.load(open(os.path.join(ROOT, "specs", "vit_fashion.json")))["model"]
    spec, run = d + "/model.json", d + "/run3"
    json.dump({"trainc": 1, "model": m}, open(spec, "w"))
    trainc("run", spec, d + "/train5.json", "--set", "max_steps=3", "--threads", 1, "--quiet",
           "--out", run)
    exported("vit_fashion", spec, d + "/eval.json", run + "/model.safetensors", d + "/hf", xv, yv)




def new_head(name, base, cfg, labels, x, cls=ViTForImageClassification):
    """a ViTModel (or a classifier of other classes) imported with --labels: the encoder as
    ViTForImageClassification loads it from that folder, the new head normal(0,
    initializer_range) with a zero bias; with it in transformers' model, the same loss"""
    from transformers import ViTModel
    d = os.path.join(OUT, name)
    src = d + "/src"
    m = saved(base, cfg, src, 0.05, seed=1)
    imp = d + "/import"
    r = trainc("import", "hf", src, "-o", imp, "--labels", labels)
    spec = imp + "/model.json"
    K = json.load(open(spec))["model"]["inputs"]["y"]["classes"]
    y = np.arange(len(x)) % K
    _, _, xv, yv = data(imp, x, y)
    specs(imp)
    ours = load_file(imp + "/init.safetensors")
    hf = cls.from_pretrained(src, num_labels=K, ignore_mismatched_sizes=True)
    with torch.no_grad():
        hf.classifier.weight.copy_(ours["head.weight"])
        hf.classifier.bias.copy_(ours["head.bias"])
    std = float(ours["head.weight"].std())
    check(abs(std / cfg.initializer_range - 1) < 0.25 and not ours["head.bias"].any(),
          "%s: the new head [%d, %d] drawn with std %.4f (initializer_range %g), its bias zero" %
          (name, K, cfg.hidden_size, std, cfg.initializer_range))
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(hf, spec, xv, yv)
    said = r.stdout[r.stdout.index("a new classifier"):r.stdout.index(") ->")]
    check(rel(a, b) <= 1e-5, "%s: %s with --labels %s (%s): trainc --eval %.7f, transformers "
          "%.7f (%.1e)" % (name, base.__name__, labels, said, a, b, rel(a, b)))


def bad_cases():
    d = os.path.join(OUT, "bad")
    cfg = ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=8, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=16, num_labels=3)
    m, src = make("bad/rgb", cfg, ViTImageProcessor(image_mean=[0.485, 0.456],
                                                    image_std=[0.229, 0.224, 0.225]))
    refused("an image_mean of 2 numbers for 3 channels", ["import", "hf", src, "-o", d + "/o1"],
            "$.image_mean: a number or a list of 3 (num_channels) expected", d + "/o1")
    os.remove(src + "/preprocessor_config.json")
    refused("--seq-len with a ViT", ["import", "hf", src, "-o", d + "/o2", "--seq-len", 8],
            "--seq-len with vit (an image model", d + "/o2")
    c = json.load(open(src + "/config.json"))
    for key, value, text in (("architectures", ["ViTModel"], "$.architectures: ViTModel"),
                             ("use_mask_token", True, "$.use_mask_token: a key trainc does not know")):
        shutil.copytree(src, d + "/edited", dirs_exist_ok=True)
        json.dump(dict(c, **{key: value}), open(d + "/edited/config.json", "w"))
        refused("config.json's %s %s" % (key, json.dumps(value)),
                ["import", "hf", d + "/edited", "-o", d + "/o3"], text, d + "/o3")
    spec = json.load(open(os.path.join(ROOT, "specs", "vit_fashion.json")))
    spec["model"]["layers"][-2] = {"op": "token_mean"}   # (a class token, then the mean)
    json.dump({"trainc": 1, "model": spec["model"]}, open(d + "/mean.json", "w"))
    refused("export of a ViT with a class token pooled by token_mean",
            ["export", "hf", d + "/mean.json", os.path.join(OUT, "fashion", "import", "eval.json"),
             "--weights", src + "/model.safetensors", "-o", d + "/o4"],
            "$.model.layers[6]: token_mean where export hf's ViTForImageClassification has "
            "first_token", d + "/o4")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
X = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")
fx, fy = np.array(X[:256]).reshape(256, 1, 28, 28), np.array(Y[:256])
NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
         "Ankle boot"]
case("fashion", ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                          id2label=dict(enumerate(NAMES)), label2id={n: k for k, n in enumerate(NAMES)}),
     ViTImageProcessor(image_mean=[0.5], image_std=[0.5]), fx, fy)
rng = np.random.default_rng(3)
case("rgb", ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=24,
                      num_hidden_layers=2, num_attention_heads=3, intermediate_size=40,
                      num_labels=5, qkv_bias=False, hidden_act="gelu_pytorch_tanh",
                      layer_norm_eps=1e-6),
     None, rng.integers(0, 256, size=(192, 3, 16, 16)).astype(np.uint8),
     rng.integers(0, 5, size=192))
case("imagenet_norm", ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=16,
                                num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                num_labels=4),
     ViTImageProcessor(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
     rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8), rng.integers(0, 4, size=128))
vit_fashion(fx, fy)
from transformers import ViTModel  # noqa: E402
small = dict(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=1,
             num_attention_heads=4, intermediate_size=48, initializer_range=0.05)
transformers.logging.set_verbosity_error()   # (the new heads' "newly initialized" notes)
new_head("vit_model", ViTModel, ViTConfig(**small), "shoe,shirt,bag", fx[:128])
deit_small = DeiTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=24,
                        num_hidden_layers=2, num_attention_heads=3, intermediate_size=40,
                        num_labels=4, initializer_range=0.05)
case("deit", deit_small, DeiTImageProcessor(size={"height": 18, "width": 18},
                                            crop_size={"height": 16, "width": 16},
                                            image_mean=[0.485, 0.456, 0.406],
                                            image_std=[0.229, 0.224, 0.225]),
     rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8), rng.integers(0, 4, size=128),
     DeiTForImageClassification)
new_head("deit_teacher", DeiTForImageClassificationWithTeacher, deit_small, "cat,dog",
         rng.integers(0, 256, size=(64, 3, 16, 16)).astype(np.uint8), DeiTForImageClassification)
refused("DeiTForImageClassificationWithTeacher without --labels",
        ["import", "hf", OUT + "/deit_teacher/src", "-o", OUT + "/deit_teacher/o1"],
        "$.architectures: DeiTForImageClassificationWithTeacher: its logits are the mean of two "
        "heads", OUT + "/deit_teacher/o1")
new_head("vit_relabel", ViTForImageClassification, ViTConfig(**small, num_labels=10), "2",
         fx[:128])
bad_cases()
print("vit_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
