"""trainc import hf and export hf of ConvNextForImageClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init (the layer scales'
1e-6 too) so that a tensor put in another's place shows:

- a ConvNeXt of 2 stages (widths 8 and 16, 1 and 2 blocks) on 32x32 RGB images
  normalized by channel (ImageNet's mean and std in a ConvNextImageProcessor's
  preprocessor_config.json), and one of 3 stages on Fashion-MNIST's 28x28 images (one
  channel, mean and std 0.5, maps of 7, 3 and 1: the downsamplings' floors), the tanh
  gelu, no layer scale (layer_scale_init_value 0), layer_norm_eps 1e-6, are imported;
  the first again with --image-size 40 (transformers' ConvNeXt takes any size) and
  without preprocessor_config.json (ConvNextImageProcessor's defaults); trainc's `--eval` validation loss equals transformers' over the same images
  within 1e-5 relative, its pixels being what the folder's image processor makes (1e-6);
- import then export gives back every tensor of the folder bit for bit;
- 8 AdamW steps (warm-up, linear decay, weight decay, clipping) from the import, every
  loss within 1e-4 of torch's AdamW on transformers' model over the same batches (all
  but the --image-size case);
- 5 steps trained, exported: from_pretrained's loss equals trainc's --eval within 1e-5,
  the exported preprocessor_config.json makes trainc's pixels, id2label comes back;
- ConvNeXt V2's 8 steps on the fake GPU (the CUDA kernels on the emulator: grn's) within
  1e-5 of the CPU's (with FAKE_GPU_LIB, or its own build of tests/fake_gpu/); V1's
  layer_scale and untokens are generated elementwise kernels, run on the fake GPU by
  tests/random_models.py's ConvNeXt blocks;
- `--labels` over a ConvNextModel: the network as ConvNextForImageClassification loads it
  from that folder, the new head normal(0, initializer_range) with a zero bias; with it in
  transformers' model, trainc's --eval within 1e-5;
- refused with exit 1, naming the key or layer, nothing written: drop_path_rate 0.1,
  num_stages unlike hidden_sizes, a bare ConvNextModel without --labels, images too
  small for the stages, --seq-len, and the export of a ConvNeXt whose blocks' layer
  scales start apart.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

try:
    import transformers
    from transformers import (ConvNextConfig, ConvNextForImageClassification, ConvNextImageProcessor,
                              ConvNextModel, ConvNextV2Config, ConvNextV2ForImageClassification,
                              ConvNextV2Model)
    from safetensors.torch import load_file
except ImportError:
    print("skip convnext_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, check, data, eval_loss, failed, hf_loss, pixels,  # noqa: E402
                      processor_agrees, refused, rel, saved, trainc)
from text_hf import exported_back, fake_gpu_vs_cpu, parity_steps, specs  # noqa: E402
OUT = os.path.join(ROOT, "build", "tests", "convnext_hf")
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()   # (the new heads' "newly initialized" notes)


def classifier(cfg):
    """the classifier's class of CFG's version (V1 or V2)"""
    return ConvNextV2ForImageClassification if cfg.model_type == "convnextv2" \
        else ConvNextForImageClassification


def make(name, cfg, preprocessor):
    """a random ConvNextForImageClassification (or V2's) saved in OUT/name/src"""
    src = os.path.join(OUT, name, "src")
    m = saved(classifier(cfg), cfg, src, 0.05)
    if preprocessor:
        preprocessor.save_pretrained(src)
    return m, src


def train_batches(spec, x, y):
    """train8.json's batches (16 rows in order) as transformers' inputs"""
    return [(pixels(spec, x[b:b + 16]), torch.from_numpy(y[b:b + 16]).long())
            for b in range(0, len(x) - 15, 16)]


def case(name, cfg, preprocessor, x, y, image_size=None, fake_gpu=False, steps=True):
    d = os.path.join(OUT, name)
    m, src = make(name, cfg, preprocessor)
    imp = d + "/import"
    trainc("import", "hf", src, "-o", imp, *(["--image-size", image_size] if image_size else []))
    spec = imp + "/model.json"
    xt, yt, xv, yv = data(imp, x, y)
    specs(imp, ["x", "y"])
    ops = [l["op"] for l in json.load(open(spec))["model"]["layers"]]
    check(ops[:5] == ["conv2d", "tokens", "layernorm", "untokens", "repeat"] and
          ops[-4:] == ["tokens", "token_mean", "layernorm", "linear"],
          "%s: model.json's layers %s" % (name, " ".join(ops)))
    processor_agrees(name, src, spec, xv)
    ours, theirs = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f (%.1e)"
          % (name, ours, theirs, rel(ours, theirs)))
    a, b = exported_back(imp, d)
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit" % (name, len(a)))
    if steps:
        parity_steps(name, imp, d, classifier(cfg).from_pretrained(src),
                     train_batches(spec, xt, yt),
                     lambda m, b: F.cross_entropy(m(pixel_values=b[0]).logits, b[1]))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    exported(name, classifier(cfg), spec, imp + "/eval.json", d + "/run5/model.safetensors",
             d + "/hf", xv, yv)
    a, b = m.config.id2label, classifier(cfg).from_pretrained(d + "/hf").config.id2label
    check(a == b, "%s: the classes' names (id2label) through import and export: %s" %
          (name, ", ".join(b[k] for k in sorted(b)[:3]) + ", ..."))
    if fake_gpu:
        fake_gpu_vs_cpu(name, imp, d, bf16=False)


def exported(name, cls, spec, eval_spec, weights, folder, xv, yv):
    """export WEIGHTS; transformers' loss of the folder (a CLS) equals trainc's --eval"""
    trainc("export", "hf", spec, eval_spec, "--weights", weights, "-o", folder)
    ours = eval_loss(spec, eval_spec, weights, folder + "_eval")
    theirs = hf_loss(cls.from_pretrained(folder), spec, xv, yv)
    check(rel(ours, theirs) <= 1e-5, "%s: trained, exported, from_pretrained's loss %.7f, trainc "
          "--eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))
    processor_agrees(name, folder, spec, xv)


def new_head(name, cfg, labels, x):
    """a ConvNextModel (or V2's) imported with --labels: the network as the classifier
    loads it from that folder, the new head normal(0, initializer_range) with a zero
    bias; with it in transformers' model, the same loss"""
    d = os.path.join(OUT, name)
    src = d + "/src"
    base = ConvNextV2Model if cfg.model_type == "convnextv2" else ConvNextModel
    saved(base, cfg, src, 0.05, seed=1)
    imp = d + "/import"
    r = trainc("import", "hf", src, "-o", imp, "--labels", labels)
    spec = imp + "/model.json"
    K = json.load(open(spec))["model"]["inputs"]["y"]["classes"]
    _, _, xv, yv = data(imp, x, np.arange(len(x)) % K)
    specs(imp, ["x", "y"])
    ours = load_file(imp + "/init.safetensors")
    hf = classifier(cfg).from_pretrained(src, num_labels=K)
    with torch.no_grad():
        hf.classifier.weight.copy_(ours["head.weight"])
        hf.classifier.bias.copy_(ours["head.bias"])
    std = float(ours["head.weight"].std())
    check(abs(std / cfg.initializer_range - 1) < 0.25 and not ours["head.bias"].any(),
          "%s: the new head [%d, %d] drawn with std %.4f (initializer_range %g), its bias zero" %
          (name, K, cfg.hidden_sizes[-1], std, cfg.initializer_range))
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(hf, spec, xv, yv)
    said = r.stdout[r.stdout.index("a new classifier"):r.stdout.index(") ->")]
    check(rel(a, b) <= 1e-5, "%s: %s with --labels %s (%s): trainc --eval %.7f, "
          "transformers %.7f (%.1e)" % (name, base.__name__, labels, said, a, b, rel(a, b)))


def drop_path(small, x, y):
    """drop_path_rate 0.3 over 3 blocks (two stages of 1 and 2): the stages' residuals'
    drop_path [0, 0] and [0.15, 0.3] (transformers' linspace); --eval at transformers'
    eval loss; the export says 0.3 again; a spec whose rates rise otherwise is refused"""
    d = os.path.join(OUT, "drop_path")
    m, src = make("drop_path", ConvNextConfig(**dict(small, drop_path_rate=0.3)), None)
    imp = d + "/imp"
    trainc("import", "hf", src, "-o", imp)
    spec = imp + "/model.json"
    got = [l["body"][0].get("drop_path") for l in json.load(open(spec))["model"]["layers"]
           if l["op"] == "repeat"]
    _, _, xv, yv = data(imp, x, y)
    specs(imp, ["x", "y"])
    a, b = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval0"), \
        hf_loss(m, spec, xv, yv)
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/hf")
    back = json.load(open(d + "/hf/config.json"))["drop_path_rate"]
    check(got == [[0, 0], [0.15, 0.3]] and rel(a, b) <= 1e-5 and back == 0.3,
          "drop_path_rate 0.3: the stages' drop_path %s, --eval %.7f, transformers %.7f (%.1e), "
          "exported as %g" % (got, a, b, rel(a, b), back))
    s = json.load(open(spec))
    s["model"]["layers"][-5]["body"][0]["drop_path"] = [0.1, 0.3]
    json.dump(s, open(d + "/uneven.json", "w"))
    refused("export of drop_path rates other than ConvNeXt's",
            ["export", "hf", d + "/uneven.json", imp + "/eval.json", "--weights",
             imp + "/init.safetensors", "-o", d + "/o1"],
            "a drop_path other than ConvNeXt's, from 0 at the first block", d + "/o1")


def bad_cases(small):
    d = os.path.join(OUT, "bad")
    m, src = make("bad/src", ConvNextConfig(**small), None)
    c = json.load(open(src + "/config.json"))
    for key, value, text in (
            ("drop_path_rate", 1.0, "$.drop_path_rate: 1: a probability in [0, 1) expected"),
            ("num_stages", 3, "$.num_stages: 3 where hidden_sizes and depths list 2 stages"),
            ("architectures", ["ConvNextModel"], "$.architectures: ConvNextModel: no classifier"),
            ("use_grn", True, "$.use_grn: a key trainc does not know for convnext")):
        shutil.copytree(src, d + "/edited", dirs_exist_ok=True)
        json.dump(dict(c, **{key: value}), open(d + "/edited/config.json", "w"))
        refused("config.json's %s %s" % (key, json.dumps(value)),
                ["import", "hf", d + "/edited", "-o", d + "/o1"], text, d + "/o1")
    refused("images too small for the stages", ["import", "hf", src, "-o", d + "/o2",
                                                "--image-size", 7],
            "7x7 images are too small for 2 stages of patches of 4 (8 or more a side)", d + "/o2")
    refused("--seq-len with a ConvNeXt", ["import", "hf", src, "-o", d + "/o3", "--seq-len", 8],
            "--seq-len with convnext (an image model", d + "/o3")
    trainc("import", "hf", src, "-o", d + "/imp")
    spec = json.load(open(d + "/imp/model.json"))
    stage1 = spec["model"]["layers"][9]["body"][0]["body"]
    stage1[6]["init_value"] = 0.5
    json.dump(spec, open(d + "/apart.json", "w"))
    specs(d + "/imp", ["x", "y"])
    refused("export of layer scales that start apart",
            ["export", "hf", d + "/apart.json", d + "/imp/eval.json", "--weights",
             d + "/imp/init.safetensors", "-o", d + "/o4"],
            "$.model.layers[9].body[0].body[6]: a layer_scale's init_value other than the first's",
            d + "/o4")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(5)
IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
rgb = dict(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[8, 16], depths=[1, 2],
           image_size=32, num_labels=5)
case("rgb", ConvNextConfig(**rgb), ConvNextImageProcessor(**IMAGENET),
     rng.integers(0, 256, size=(128, 3, 32, 32)).astype(np.uint8), rng.integers(0, 5, size=128))
case("rgb40", ConvNextConfig(**rgb), None,
     rng.integers(0, 256, size=(64, 3, 40, 40)).astype(np.uint8), rng.integers(0, 5, size=64),
     image_size=40, steps=False)
X = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"), mmap_mode="r")
Y = np.load(os.path.join(ROOT, "data", "fashion", "test_y.npy"), mmap_mode="r")
NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
         "Ankle boot"]
case("fashion", ConvNextConfig(num_channels=1, patch_size=4, num_stages=3, hidden_sizes=[8, 12, 16],
                               depths=[1, 1, 1], image_size=28, hidden_act="gelu_pytorch_tanh",
                               layer_scale_init_value=0.0, layer_norm_eps=1e-6,
                               id2label=dict(enumerate(NAMES)),
                               label2id={n: k for k, n in enumerate(NAMES)}),
     ConvNextImageProcessor(image_mean=[0.5], image_std=[0.5]), np.array(X[:128]).reshape(128, 1, 28, 28), np.array(Y[:128]))
new_head("convnext_model", ConvNextConfig(**dict(rgb, initializer_range=0.05)), "cat,dog,bird",
         rng.integers(0, 256, size=(64, 3, 32, 32)).astype(np.uint8))
# ConvNeXt V2: grn in each block (its weight and bias moved off their zeros by the noise,
# so its norms count), no layer scale
case("v2", ConvNextV2Config(**rgb), ConvNextImageProcessor(**IMAGENET),
     rng.integers(0, 256, size=(128, 3, 32, 32)).astype(np.uint8), rng.integers(0, 5, size=128),
     fake_gpu=True)
case("v2_fashion", ConvNextV2Config(num_channels=1, patch_size=4, num_stages=3,
                                    hidden_sizes=[8, 12, 16], depths=[1, 2, 1], image_size=28,
                                    hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
                                    num_labels=10),
     ConvNextImageProcessor(image_mean=[0.5], image_std=[0.5]), np.array(X[:128]).reshape(128, 1, 28, 28),
     np.array(Y[:128]))
new_head("v2_model", ConvNextV2Config(**dict(rgb, initializer_range=0.05)), "3",
         rng.integers(0, 256, size=(64, 3, 32, 32)).astype(np.uint8))
drop_path(rgb, rng.integers(0, 256, size=(64, 3, 32, 32)).astype(np.uint8),
          rng.integers(0, 5, size=64))
bad_cases(rgb)
print("convnext_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
