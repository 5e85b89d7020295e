"""trainc import hf and export hf of ResNetForImageClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Random-weight models made here with save_pretrained (no hub), tiny,
fp32, CPU, one thread, every tensor moved off transformers' init (the batchnorms'
weights, biases and running statistics too; num_batches_tracked 7):

- a basic ResNet (resnet-18's layers: two 3x3 convs a layer; stages of 8 and 16
  channels, 2 and 1 layers, a projection shortcut where the stride and width change) on
  32x32 RGB images normalized by channel (ImageNet's mean and std, as microsoft/resnet's
  image processors), and a bottleneck one (resnet-50's: 1x1, 3x3, 1x1 at a quarter of
  the width; downsample_in_first_stage and downsample_in_bottleneck) on 40x40 images
  with ViTImageProcessor's defaults (no preprocessor_config.json), are imported with
  --image-size; trainc's `--eval` validation loss (the running statistics) equals
  transformers' eval-mode loss over the same images within 1e-5 relative;
- one training step at lr 0 from the import: the step's loss is transformers' train-mode
  loss on the batch (the batch's statistics) within 1e-5, and the running statistics
  trainc saves are transformers' after that forward (momentum 0.1) within 1e-6,
  num_batches_tracked 8;
- import then export gives back every tensor of the folder bit for bit (the counts I64);
  5 SGD steps from the import, exported: from_pretrained's loss is trainc's --eval within
  1e-5, and the exported image processor makes trainc's pixels;
- `--labels` over a ResNetModel and over a classifier of 10 classes given 4: the network as
  ResNetForImageClassification loads it from that folder, the new classifier uniform
  within 1/sqrt(its inputs); with it in transformers' model, trainc's --eval within 1e-5;
- refused with exit 1, naming the key or layer, nothing written: hidden_act gelu, a bare
  ResNetModel without --labels, --image-size for a ViT (its config's image_size is its side), the export
  of a ResNet whose average pool does not cover the last map, and of weights whose
  num_batches_tracked is F32.
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
    from transformers import ResNetConfig, ResNetForImageClassification, ViTImageProcessor
    from safetensors.torch import load_file, save_file
except ImportError:
    print("skip resnet_hf: transformers is not importable from %s (make deps makes a venv with "
          "it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import (ROOT, check, eval_loss, failed, pixels, processor_agrees, refused,  # noqa: E402
                      rel, saved, trainc)
OUT = os.path.join(ROOT, "build", "tests", "resnet_hf")
torch.set_num_threads(1)
torch.manual_seed(0)










def make(name, cfg, processor):
    m = ResNetForImageClassification(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
        for n, b in m.named_buffers():
            if n.endswith("running_mean"):
                b.copy_(0.1 * torch.randn_like(b))
            elif n.endswith("running_var"):
                b.copy_(1 + 0.2 * torch.rand_like(b))
            elif n.endswith("num_batches_tracked"):
                b.fill_(7)
    src = os.path.join(OUT, name, "src")
    m.save_pretrained(src, safe_serialization=True)
    if processor:
        processor.save_pretrained(src)
    return m, src


def case(name, cfg, processor, S, n=64):
    d = os.path.join(OUT, name)
    m, src = make(name, cfg, processor)
    imp = d + "/import"
    trainc("import", "hf", src, "-o", imp, "--image-size", S)
    spec = imp + "/model.json"
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(n, cfg.num_channels, S, S)).astype(np.uint8)
    y = rng.integers(0, cfg.num_labels, size=n).astype(np.int32)
    os.makedirs(imp + "/data", exist_ok=True)
    for part in ("train", "val"):
        np.save("%s/data/%s_x.npy" % (imp, part), x)
        np.save("%s/data/%s_y.npy" % (imp, part), y)
    base = {"data": {"train": {"x": "data/train_x.npy", "y": "data/train_y.npy"},
                     "val": {"x": "data/val_x.npy", "y": "data/val_y.npy"}},
            "batch_size": 16, "precision": "fp32", "loader": {"shuffle": False}, "seed": 1}
    json.dump({"trainc": 1, "train": dict(base, epochs=1)}, open(imp + "/eval.json", "w"))
    json.dump({"trainc": 1, "train": dict(base, max_steps=1, log_every=1,
                                          optimizer={"type": "sgd", "lr": 0.0})},
              open(imp + "/step.json", "w"))
    ours = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval")
    m.eval()
    with torch.no_grad():
        theirs = sum(F.cross_entropy(m(pixel_values=pixels(spec, x[b:b + 16])).logits.double(),
                                     torch.from_numpy(y[b:b + 16]).long()).item()
                     for b in range(0, n, 16)) / (n // 16)
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers (eval mode) "
          "%.7f (%.1e)" % (name, ours, theirs, rel(ours, theirs)))
    trainc("run", spec, imp + "/step.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/step")
    step = [json.loads(l) for l in open(d + "/step/metrics.jsonl") if '"step"' in l and '"loss"' in l]
    m.train()
    with torch.no_grad():
        loss = F.cross_entropy(m(pixel_values=pixels(spec, x[:16])).logits.double(),
                               torch.from_numpy(y[:16]).long()).item()
    check(rel(step[0]["loss"], loss) <= 1e-5, "%s: a training step's loss %.7f, transformers' "
          "(train mode) %.7f (%.1e)" % (name, step[0]["loss"], loss, rel(step[0]["loss"], loss)))
    w = load_file(d + "/step/model.safetensors")
    hf = dict(m.named_buffers())
    # trainc's names and transformers' sort alike here (stage and layer numbers below 10;
    # norm1, norm2, norm3, then the shortcut's, as layer.0, .1, .2, then shortcut)
    names = {n: h for n, h in zip(sorted(k for k in w if "running" in k or "num_batches" in k),
                                  sorted(k for k in hf))}
    worst = max(float((w[n].double() - hf[h].double()).abs().max()) for n, h in names.items()
                if "running" in n)
    counts = {int(w[n]) for n in w if n.endswith("num_batches_tracked")}
    check(worst <= 1e-6 and counts == {8}, "%s: the running statistics after the step are "
          "transformers' (largest difference %.1e), num_batches_tracked %s" % (name, worst, counts))
    exported(name, m, src, spec, imp, d, x, y)


def exported(name, m, src, spec, imp, d, x, y):
    """import then export gives back the folder; 5 SGD steps from the import, exported,
    compute trainc's --eval loss in transformers"""
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", imp + "/init.safetensors", "-o",
           d + "/back")
    a, b = load_file(src + "/model.safetensors"), load_file(d + "/back/model.safetensors")
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit (the "
          "counts I64)" % (name, len(a)))
    json.dump({"trainc": 1, "train": dict(json.load(open(imp + "/step.json"))["train"], max_steps=5,
                                          optimizer={"type": "sgd", "lr": 0.05, "momentum": 0.9})},
              open(imp + "/train5.json", "w"))
    trainc("run", spec, imp + "/train5.json", "--init", imp + "/init.safetensors", "--threads", 1,
           "--quiet", "--out", d + "/run5")
    trainc("export", "hf", spec, imp + "/eval.json", "--weights", d + "/run5/model.safetensors", "-o",
           d + "/hf")
    ours = eval_loss(spec, imp + "/eval.json", d + "/run5/model.safetensors", d + "/eval5")
    t = ResNetForImageClassification.from_pretrained(d + "/hf").eval()
    with torch.no_grad():
        theirs = sum(F.cross_entropy(t(pixel_values=pixels(spec, x[b:b + 16])).logits.double(),
                                     torch.from_numpy(y[b:b + 16]).long()).item()
                     for b in range(0, len(x), 16)) / (len(x) // 16)
    check(rel(ours, theirs) <= 1e-5, "%s: trained 5 steps, exported, from_pretrained's loss %.7f, "
          "trainc --eval %.7f (%.1e)" % (name, theirs, ours, rel(ours, theirs)))
    processor_agrees(name, d + "/hf", spec, x)




def new_head(name, base, cfg, labels, S=32, n=32):
    """a ResNetModel (or a classifier of other classes) imported with --labels: the network
    as ResNetForImageClassification loads it from that folder, the new classifier uniform
    within 1/sqrt(its inputs) as torch's nn.Linear; with it in transformers' model (eval
    mode), the same loss"""
    d = os.path.join(OUT, name)
    src = d + "/src"
    m = saved(base, cfg, src, 0.05, seed=2)
    imp = d + "/import"
    r = trainc("import", "hf", src, "-o", imp, "--image-size", S, "--labels", labels)
    spec = imp + "/model.json"
    K = json.load(open(spec))["model"]["inputs"]["y"]["classes"]
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, size=(n, cfg.num_channels, S, S)).astype(np.uint8)
    y = (np.arange(n) % K).astype(np.int32)
    os.makedirs(imp + "/data", exist_ok=True)
    for part in ("train", "val"):
        np.save("%s/data/%s_x.npy" % (imp, part), x)
        np.save("%s/data/%s_y.npy" % (imp, part), y)
    json.dump({"trainc": 1, "train": {"data": {p: {"x": "data/%s_x.npy" % p, "y": "data/%s_y.npy" % p}
                                               for p in ("train", "val")},
                                      "batch_size": 16, "precision": "fp32", "epochs": 1}},
              open(imp + "/eval.json", "w"))
    ours = load_file(imp + "/init.safetensors")
    hf = ResNetForImageClassification.from_pretrained(src, num_labels=K, ignore_mismatched_sizes=True)
    w, b = ours["classifier.weight"], ours["classifier.bias"]
    bound = 1 / cfg.hidden_sizes[-1] ** 0.5
    spread = float(w.std()) / (bound / 3 ** 0.5)
    check(float(w.abs().max()) <= bound and float(b.abs().max()) <= bound and 0.75 < spread < 1.25,
          "%s: the new classifier [%d, %d] uniform within 1/sqrt(%d) (its std %.2f of the "
          "uniform's)" % (name, K, cfg.hidden_sizes[-1], cfg.hidden_sizes[-1], spread))
    with torch.no_grad():
        hf.classifier[1].weight.copy_(w)
        hf.classifier[1].bias.copy_(b)
    hf.eval()
    a = eval_loss(spec, imp + "/eval.json", imp + "/init.safetensors", d + "/eval")
    with torch.no_grad():
        t = sum(F.cross_entropy(hf(pixel_values=pixels(spec, x[k:k + 16])).logits.double(),
                                torch.from_numpy(y[k:k + 16]).long()).item()
                for k in range(0, n, 16)) / (n // 16)
    said = r.stdout[r.stdout.index("a new classifier"):r.stdout.index(") ->")]
    check(rel(a, t) <= 1e-5, "%s: %s with --labels %s (%s): trainc --eval %.7f, transformers "
          "%.7f (%.1e)" % (name, base.__name__, labels, said, a, t, rel(a, t)))


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
transformers.logging.set_verbosity_error()   # (the new heads' "newly initialized" notes)
case("basic", ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[2, 1],
                           layer_type="basic", num_labels=5),
     ViTImageProcessor(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]), 32)
case("bottleneck", ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[16, 32], depths=[1, 2],
                                layer_type="bottleneck", downsample_in_first_stage=True,
                                downsample_in_bottleneck=True, num_labels=3), None, 40)
small = dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
             layer_type="basic")
new_head("resnet_model", transformers.ResNetModel, ResNetConfig(**small), "cat,dog")
new_head("resnet_relabel", ResNetForImageClassification, ResNetConfig(**small, num_labels=10), "4")
src = os.path.join(OUT, "basic", "src")
bad = os.path.join(OUT, "bad")
c = json.load(open(src + "/config.json"))
for key, value, text in (("hidden_act", "gelu", "$.hidden_act: \"gelu\": trainc imports a ResNet of relu"),
                         ("architectures", ["ResNetModel"], "$.architectures: ResNetModel")):
    shutil.copytree(src, bad, dirs_exist_ok=True)
    json.dump(dict(c, **{key: value}), open(bad + "/config.json", "w"))
    refused("config.json's %s %s" % (key, json.dumps(value)), ["import", "hf", bad, "-o", bad + "/o"],
            text, bad + "/o")
from transformers import ViTConfig, ViTForImageClassification
ViTForImageClassification(ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=8,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=8)).save_pretrained(OUT + "/vit")
refused("--image-size for a ViT", ["import", "hf", OUT + "/vit", "-o", bad + "/o2", "--image-size", 16],
        "--image-size is for a resnet, a convnext or a dinov2 (its images' side); a vit's is config.json's image_size", bad + "/o2")
spec = json.load(open(os.path.join(OUT, "basic", "import", "model.json")))
spec["model"]["layers"][-3]["kernel"] = 1
json.dump(spec, open(bad + "/pool.json", "w"))
refused("export of a ResNet whose average pool is not over the whole map",
        ["export", "hf", bad + "/pool.json", os.path.join(OUT, "basic", "import", "eval.json"), "--weights",
         os.path.join(OUT, "basic", "import", "init.safetensors"), "-o", bad + "/o3"],
        "an average pool other than over the whole 4x4 map", bad + "/o3")
imp = os.path.join(OUT, "basic", "import")
w = load_file(imp + "/init.safetensors")
w["embedder_norm.num_batches_tracked"] = w["embedder_norm.num_batches_tracked"].float()
save_file(w, bad + "/f32count.safetensors")
refused("export of weights whose count is F32", ["export", "hf", imp + "/model.json", imp + "/eval.json",
                                                  "--weights", bad + "/f32count.safetensors", "-o", bad + "/o4"],
        "tensor 'embedder_norm.num_batches_tracked' is F32 []; the spec's model has I64 []", bad + "/o4")
print("resnet_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
