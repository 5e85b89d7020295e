"""trainc import hf and trainc export hf of Dinov2ForImageClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init (the layer scales
apart by channel) so that a tensor put in another's place shows:

- a DINOv2 on Fashion-MNIST's 28x28 images (one channel, 7x7 patches, a gelu MLP,
  layerscale_value 0.5, a BitImageProcessor's mean and std in preprocessor_config.json)
  and one on random 16x16 RGB images (4x4 patches, the SwiGLU MLP, q, k and v without
  bias, 5 classes) are imported; the layers are the layout's (cls_mean before the head);
  trainc's `--eval` validation loss equals transformers' mean cross-entropy over the same
  images within 1e-5 relative; import then export gives back every tensor bit for bit,
  the mask token (which the import leaves out) as zeros; trainc trains 5 steps, exports,
  and from_pretrained's loss of the folder equals trainc's `--eval` within 1e-5;
- imported at --image-size 24 from image_size 32 (a grid of 8x8 positions to 6x6) with
  --interpolate offset: the position table interpolated as transformers 4.40 interpolates
  it at every forward (DINOv2's scale factor), so trainc's --eval on 24x24 images equals
  transformers' on the same images within 1e-5; the export's config says image_size 24
  and loads to the same loss;
- `dinov2_hf.py --newer` (HF_NEW_PYTHON: transformers 4.48.3, which interpolates to the
  size itself, as 4.45 and later do): the same import without --interpolate (size, the
  default) equals that transformers' loss within 1e-5, exported alike; and a
  Dinov2WithRegistersForImageClassification (3 registers, the SwiGLU MLP): its layers
  with register_tokens after the positions, --eval, import then export bit for bit, 5
  steps exported to from_pretrained's loss, as above; two imported at --image-size 24 and
  40 from image_size 32 (the table interpolated as this class does, bicubic with
  antialiasing: shrunk, the filter widened; grown): the table within 1e-5 of its largest
  of transformers' interpolate_pos_encoding, --eval within 1e-5 of transformers' on
  images of that size; its --interpolate offset refused;
- `--labels` over a Dinov2Model (no classifier): the encoder as
  Dinov2ForImageClassification loads it, the new head [K, 2 D];
- drop_path_rate 0.1 (stochastic depth on every branch): each block's two residuals
  import with drop_path 0.1, `--eval` (no drop in evaluation) at transformers' eval loss,
  and the export says drop_path_rate 0.1 again;
- refused with exit 1, naming the key, nothing written: an --image-size that is no
  multiple of patch_size, a drop_path_rate of 1.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

try:
    import transformers
    from transformers import (BitImageProcessor, Dinov2Config, Dinov2ForImageClassification,
                              Dinov2Model)
    from safetensors.torch import load_file
except ImportError:
    print("skip dinov2_hf: transformers is not importable from %s (make deps makes a venv with "
          "it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, check, data, eval_loss, failed, hf_loss, specs,  # noqa: E402
                      refused, rel, saved, trainc)
OUT = os.path.join(ROOT, "build", "tests", "dinov2_hf")
MASK = "dinov2.embeddings.mask_token"
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


def exported(name, spec, eval_spec, weights, folder, xv, yv, cls=None):
    """export WEIGHTS; transformers' loss of the folder equals trainc's --eval"""
    trainc("export", "hf", spec, eval_spec, "--weights", weights, "-o", folder)
    back = (cls or Dinov2ForImageClassification).from_pretrained(folder)
    ours, theirs = eval_loss(spec, eval_spec, weights, folder + "_eval"), hf_loss(back, spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: trained, exported, from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))
    return back


def case(name, cfg, preprocessor, x, y, size=None, interp=(), cls=None):
    d = os.path.join(OUT, name)
    src, imp = d + "/src", d + "/import"
    regs = cls is not None   # (Dinov2WithRegistersForImageClassification)
    mask = "dinov2_with_registers.embeddings.mask_token" if regs else MASK
    m = saved(cls or Dinov2ForImageClassification, cfg, src, 0.05, seed=2)
    if preprocessor:
        preprocessor.save_pretrained(src)
    r = trainc("import", "hf", src, "-o", imp, *(["--image-size", size] if size else []), *interp)
    spec = imp + "/model.json"
    _, _, xv, yv = data(imp, x, y)
    specs(imp)
    if size:
        g0, g = cfg.image_size // cfg.patch_size, size // cfg.patch_size
        said = "the position table interpolated from %dx%d to %dx%d%s" % (
            g0, g0, g, g, " by DINOv2's scale factor" if interp else " antialiased" if regs else "")
        check(said in r.stdout, "%s: import says %s" % (name, said))
    if size and regs:   # the table itself: transformers' interpolation of it at this size
        n = (size // cfg.patch_size) ** 2 + 1
        with torch.no_grad():
            table = m.dinov2_with_registers.embeddings.interpolate_pos_encoding(
                torch.zeros(1, n, cfg.hidden_size), size, size)[0]
        got = load_file(imp + "/init.safetensors")["pos.weight"]
        diff = float((got - table).abs().max() / table.abs().max())
        check(diff <= 1e-5, "%s: the imported position table is transformers' antialiased "
              "interpolation within %.1e of its largest (1e-5)" % (name, diff))
    ops = [l["op"] for l in json.load(open(spec))["model"]["layers"]]
    check(ops == ["conv2d", "tokens", "cls_token", "pos_embedding"] + ["register_tokens"] * regs +
          ["repeat", "layernorm", "cls_mean", "linear"], "%s: model.json's layers %s" % (name, " ".join(ops)))
    ours, theirs = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: imported (%s), trainc --eval %.7f, transformers %.7f "
          "(%.1e)" % (name, r.stdout[r.stdout.index("(") + 1:r.stdout.index(";")], ours, theirs,
                      rel(ours, theirs)))
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/back")
    a, b = load_file(src + "/model.safetensors"), load_file(d + "/back/model.safetensors")
    if not size:
        same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a if k != mask)
        check(same and not b[mask].any(), "%s: import then export gives back the folder's %d "
              "tensors bit for bit, the mask token zeros" % (name, len(a)))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    back = exported(name, spec, imp + "/eval.json", d + "/run5/model.safetensors", d + "/hf", xv, yv, cls)
    if size:
        check(back.config.image_size == size, "%s: the export's image_size is %d (transformers "
              "interpolates nothing)" % (name, back.config.image_size))


def new_head(x):
    """--labels over a Dinov2Model: the encoder, a new head over [the class token, the mean]"""
    d = os.path.join(OUT, "dinov2_model")
    cfg = Dinov2Config(image_size=16, patch_size=4, num_channels=3, hidden_size=16,
                       num_hidden_layers=1, num_attention_heads=2, initializer_range=0.05)
    saved(Dinov2Model, cfg, d + "/src", 0.05, seed=3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--labels", "cat,dog,bird")
    spec = imp + "/model.json"
    _, _, xv, yv = data(imp, x, np.arange(len(x)) % 3)
    specs(imp)
    ours = load_file(imp + "/init.safetensors")
    hf = Dinov2ForImageClassification.from_pretrained(d + "/src", num_labels=3)
    with torch.no_grad():
        hf.classifier.weight.copy_(ours["head.weight"])
        hf.classifier.bias.copy_(ours["head.bias"])
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(hf, spec, xv, yv)
    check(list(ours["head.weight"].shape) == [3, 32] and rel(a, b) <= 1e-5,
          "a Dinov2Model with --labels cat,dog,bird: the new head [3, 32], trainc --eval %.7f, "
          "transformers %.7f (%.1e)" % (a, b, rel(a, b)))


def bad_cases():
    d = os.path.join(OUT, "bad")
    cfg = Dinov2Config(image_size=8, patch_size=4, num_channels=3, hidden_size=8,
                       num_hidden_layers=1, num_attention_heads=2, num_labels=3)
    src = d + "/src"
    saved(Dinov2ForImageClassification, cfg, src, 0.05)
    refused("--image-size 30 with patches of 4", ["import", "hf", src, "-o", d + "/o1",
                                                  "--image-size", 30],
            "--image-size 30: not a multiple of patch_size 4", d + "/o1")
    c = json.load(open(src + "/config.json"))
    shutil.copytree(src, d + "/edited", dirs_exist_ok=True)
    json.dump(dict(c, drop_path_rate=1), open(d + "/edited/config.json", "w"))
    refused("drop_path_rate 1", ["import", "hf", d + "/edited", "-o", d + "/o2"],
            "$.drop_path_rate: 1: a probability in [0, 1) expected", d + "/o2")


def drop_path(x, y):
    """drop_path_rate 0.1: each branch's residual drops with it; evaluation without"""
    d = os.path.join(OUT, "drop_path")
    cfg = Dinov2Config(image_size=16, patch_size=4, num_channels=3, hidden_size=16,
                       num_hidden_layers=2, num_attention_heads=2, num_labels=3,
                       drop_path_rate=0.1)
    m = saved(Dinov2ForImageClassification, cfg, d + "/src", 0.05, seed=5)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp)
    spec = imp + "/model.json"
    body = json.load(open(spec))["model"]["layers"][4]["body"]
    _, _, xv, yv = data(imp, x, y)
    specs(imp)
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/hf")
    back = json.load(open(d + "/hf/config.json"))["drop_path_rate"]
    check([r.get("drop_path") for r in body] == [0.1, 0.1] and rel(a, b) <= 1e-5 and back == 0.1,
          "drop_path_rate 0.1: both branches' residuals drop_path 0.1, --eval %.7f, transformers "
          "%.7f (%.1e), exported as drop_path_rate %g" % (a, b, rel(a, b), back))


NEWER = "--newer" in sys.argv[1:]
if NEWER:
    OUT += "_newer"
    if tuple(int(p) for p in transformers.__version__.split(".")[:2]) < (4, 45):
        print("skip dinov2_hf --newer: transformers %s interpolates by DINOv2's scale factor "
              "(HF_NEW_PYTHON: 4.45 or later)" % transformers.__version__)
        sys.exit(77)
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(4)
SIZE24 = Dinov2Config(image_size=32, patch_size=4, num_channels=3, hidden_size=16,
                      num_hidden_layers=2, num_attention_heads=2, num_labels=4)
if NEWER:
    case("size24", SIZE24, None, rng.integers(0, 256, size=(128, 3, 24, 24)).astype(np.uint8),
         rng.integers(0, 4, size=128), size=24)
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersForImageClassification
    regs_cfg = Dinov2WithRegistersConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=24,
                                         num_hidden_layers=2, num_attention_heads=3, use_swiglu_ffn=True,
                                         num_register_tokens=3, num_labels=5)
    case("registers", regs_cfg, None, rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8),
         rng.integers(0, 5, size=128), cls=Dinov2WithRegistersForImageClassification)
    regs32 = Dinov2WithRegistersConfig(image_size=32, patch_size=4, num_channels=3, hidden_size=16,
                                       num_hidden_layers=2, num_attention_heads=2, num_register_tokens=2,
                                       num_labels=4)
    for side in (24, 40):   # (shrunk: the filter widened; grown)
        case("registers%d" % side, regs32, None,
             rng.integers(0, 256, size=(64, 3, side, side)).astype(np.uint8), rng.integers(0, 4, size=64),
             size=side, cls=Dinov2WithRegistersForImageClassification)
    refused("registers with --interpolate offset", ["import", "hf", os.path.join(OUT, "registers", "src"), "-o",
                                                    os.path.join(OUT, "regs_off"), "--image-size", "24",
                                                    "--interpolate", "offset"],
            "interpolates its position table to the size", os.path.join(OUT, "regs_off"))
    print("dinov2_hf --newer: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                                       transformers.__version__))
    sys.exit(1 if failed else 0)
X = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")
fx, fy = np.array(X[:192]).reshape(192, 1, 28, 28), np.array(Y[:192])
case("fashion", Dinov2Config(image_size=28, patch_size=7, num_channels=1, hidden_size=24,
                             num_hidden_layers=2, num_attention_heads=3, mlp_ratio=2,
                             layerscale_value=0.5, num_labels=10),
     BitImageProcessor(size={"shortest_edge": 28}, crop_size=28, image_mean=[0.5],
                       image_std=[0.5]), fx, fy)
case("swiglu", Dinov2Config(image_size=16, patch_size=4, num_channels=3, hidden_size=24,
                            num_hidden_layers=2, num_attention_heads=3, use_swiglu_ffn=True,
                            qkv_bias=False, num_labels=5),
     None, rng.integers(0, 256, size=(128, 3, 16, 16)).astype(np.uint8),
     rng.integers(0, 5, size=128))
case("size24", SIZE24, None, rng.integers(0, 256, size=(128, 3, 24, 24)).astype(np.uint8),
     rng.integers(0, 4, size=128), size=24, interp=("--interpolate", "offset"))
new_head(rng.integers(0, 256, size=(64, 3, 16, 16)).astype(np.uint8))
drop_path(rng.integers(0, 256, size=(64, 3, 16, 16)).astype(np.uint8), rng.integers(0, 3, size=64))
bad_cases()
print("dinov2_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
