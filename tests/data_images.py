"""trainc data images against Pillow and transformers' image processor.

HF_PYTHON (transformers 4.40.2 over Debian's torch, Pillow from Debian) runs this;
without transformers it exits 77 (a skip). Images made here with Pillow, in two class
folders: JPEG (RGB and gray), PNG (RGB, RGBA, gray, 1-bit, palette, 2-bit palette, gray
+ alpha), at
sizes above and below the model's side, square or not.

- every image's u8 pixels are `Image.open(f).convert("RGB" or "L").resize((S, S),
  BILINEAR)` bit for bit, C x S x S, for a model of 3 channels at 32 and one of 1 at 24
  (the resampling shrinks and enlarges; Pillow's fixed point), each class's last quarter
  of files (by name) in val, the class its folder's name among the labels;
- `--val SRC` reads a folder of its own; `--unlabeled` writes test_x.npy and
  test_files.txt, the files in order; a model without label names takes folders named 0
  .. K-1;
- end to end: a tiny ViTForImageClassification imported, data images, trainc's
  --predict logits equal transformers' on the folder's ViTImageProcessor pixel values of
  the same files (resize on) within 1e-4;
- refused with exit 1, naming the file or folder, nothing written: a folder of no class,
  an image outside a class folder, a file that is no image, an interlaced PNG, a 16-bit
  PNG, a model whose input is not u8 images, a missing --model. The address- and
  UB-sanitized trainc (ASAN_TRAINC) reads the whole folder to the same bytes.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

try:
    import torch
    import transformers
    from PIL import Image
    from transformers import (ConvNextConfig, ConvNextForImageClassification,
                              ConvNextImageProcessor, ViTConfig, ViTForImageClassification,
                              ViTImageProcessor)
except ImportError:
    print("skip data_images: transformers or Pillow is not importable from %s (make deps makes "
          "a venv with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, TRAINC, check, failed, refused, saved, trainc  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "data_images")
rng = np.random.default_rng(0)
transformers.logging.set_verbosity_error()


def picture(h, w, ch):
    """smooth bands and noise, u8 [h, w, ch]"""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(np.sin(x / 7 + c) + np.cos(y / 5 - c)) * 60 + 128 for c in range(ch)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def make_folder(src, classes, sizes):
    """each class folder gets each size in every kind of file; a stray text file"""
    for cls in classes:
        os.makedirs(os.path.join(src, cls), exist_ok=True)
        for k, (h, w) in enumerate(sizes):
            a = picture(h, w, 3)
            p = os.path.join(src, cls, "%02d_" % k)
            Image.fromarray(a, "RGB").save(p + "rgb.jpg", quality=90)
            Image.fromarray(a[..., 0], "L").save(p + "gray.JPEG")
            Image.fromarray(a, "RGB").save(p + "rgb.png")
            Image.fromarray(np.dstack([a, a[..., :1]]), "RGBA").save(p + "rgba.png")
            Image.fromarray(a[..., 0], "L").save(p + "gray.png")
            Image.fromarray(a[..., 0] > 128).save(p + "bits.png")
            Image.fromarray(a, "RGB").convert("P", palette=Image.ADAPTIVE, colors=40).save(p + "pal.png")
            Image.fromarray(np.dstack([a[..., 0], a[..., 1]]), "LA").save(p + "la.png")
            Image.fromarray(a, "RGB").convert("P", palette=Image.ADAPTIVE, colors=4).save(
                p + "pal2bit.png", bits=2)
    open(os.path.join(src, classes[0], "notes.txt"), "w").write("not an image\n")


def model(path, C, S, labels=None, K=2, dtype="u8"):
    y = {"shape": [], "dtype": "i32", "classes": K}
    if labels:
        y["labels"] = labels
    json.dump({"trainc": 1, "model": {
        "name": "m", "inputs": {"x": {"shape": [C, S, S], "dtype": dtype, "scale": 1 / 255}, "y": y},
        "layers": [{"op": "flatten"}, {"op": "linear", "out": K}],
        "loss": {"op": "cross_entropy", "target": "y"}}}, open(path, "w"))


def files_of(src, cls):
    return sorted(f for f in os.listdir(os.path.join(src, cls))
                  if f.lower().endswith((".png", ".jpg", ".jpeg")))


def pillow(path, C, S):
    im = Image.open(path).convert("RGB" if C == 3 else "L").resize((S, S), Image.BILINEAR)
    a = np.array(im)
    return a.transpose(2, 0, 1) if C == 3 else a[None]


def same_pixels(what, x, paths, C, S):
    bad = [p for p, a in zip(paths, x) if not np.array_equal(pillow(p, C, S), a)]
    check(len(x) == len(paths) and not bad, "%s: %d images' pixels are Pillow's convert and "
          "resize bit for bit%s" % (what, len(paths), " (not: %s)" % ", ".join(bad[:3]) if bad else ""))


def labeled(src, classes, C, S):
    """C x S x S: pixels, classes, the split"""
    d = os.path.join(OUT, "out%d" % C)
    spec = os.path.join(OUT, "model%d.json" % C)
    model(spec, C, S, classes)
    r = trainc("data", "images", src, d, "--model", spec, "--val-frac", 0.25)
    tr, va = [], []
    for k, cls in enumerate(classes):
        fs = files_of(src, cls)
        nv = int(0.25 * len(fs))
        tr += [(os.path.join(src, cls, f), k) for f in fs[:len(fs) - nv]]
        va += [(os.path.join(src, cls, f), k) for f in fs[len(fs) - nv:]]
    for part, want in (("train", tr), ("val", va)):
        x, y = np.load("%s/%s_x.npy" % (d, part)), np.load("%s/%s_y.npy" % (d, part))
        check(x.shape == (len(want), C, S, S) and x.dtype == np.uint8 and
              list(y) == [k for _, k in want], "%d channels at %d, %s: [%s] u8, each class's "
              "files in order%s" % (C, S, part, ", ".join(map(str, x.shape)),
                                    ", the last quarter" if part == "val" else ""))
        same_pixels("%d channels at %d, %s" % (C, S, part), x, [p for p, _ in want], C, S)
    check("1 other files left out" in r.stdout, "the stray text file counted: " + r.stdout.strip())
    return d


def other_forms(src, classes):
    """--val SRC, --unlabeled, numbered folders for a model without names"""
    spec = os.path.join(OUT, "model3.json")
    d = os.path.join(OUT, "val_folder")
    trainc("data", "images", src, d, "--model", spec, "--val", src)
    a, b = np.load(d + "/train_x.npy"), np.load(d + "/val_x.npy")
    check(np.array_equal(a, b) and np.array_equal(np.load(d + "/train_y.npy"),
                                                  np.load(d + "/val_y.npy")),
          "--val SRC: the folder's own images and classes (here the same folder: equal arrays)")
    flat = os.path.join(OUT, "flat")
    os.makedirs(flat, exist_ok=True)
    for f in files_of(src, classes[1])[:6]:
        shutil.copy(os.path.join(src, classes[1], f), flat)
    d = os.path.join(OUT, "test")
    trainc("data", "images", flat, d, "--model", spec, "--unlabeled")
    names = open(d + "/test_files.txt").read().split()
    want = [os.path.join(flat, f) for f in sorted(os.listdir(flat))]
    check(names == want and not os.path.exists(d + "/test_y.npy"),
          "--unlabeled: test_x.npy and test_files.txt, the %d files in name order" % len(names))
    same_pixels("--unlabeled", np.load(d + "/test_x.npy"), want, 3, 32)
    numbered = os.path.join(OUT, "numbered")
    for k, cls in enumerate(classes):
        shutil.copytree(os.path.join(src, cls), os.path.join(numbered, str(k)), dirs_exist_ok=True)
    spec_n = os.path.join(OUT, "model_nameless.json")
    model(spec_n, 3, 32)
    d = os.path.join(OUT, "numbered_out")
    trainc("data", "images", numbered, d, "--model", spec_n, "--val-frac", 0)
    n0 = len(files_of(src, classes[0]))
    y = np.load(d + "/train_y.npy")
    check(list(y) == [0] * n0 + [1] * (len(y) - n0) and not os.path.exists(d + "/val_x.npy"),
          "a model without label names: folders 0 and 1 its classes; --val-frac 0 writes no val")


def predicts(name, m, proc, src, classes, export=False):
    """an import of M (with PROC's preprocessor_config.json): --predict over data images'
    rows (the processor beside model.json read by default) = transformers' logits on PROC's
    pixels of the same files; EXPORT: the export's processor makes the same pixels"""
    d = os.path.join(OUT, name)
    proc.save_pretrained(d + "/src")
    r = trainc("import", "hf", d + "/src", "-o", d + "/imp")
    spec = d + "/imp/model.json"
    r2 = trainc("data", "images", src, d + "/imp/data", "--model", spec, "--val-frac", 0)
    check(os.path.exists(d + "/imp/preprocessor_config.json") and
          "preprocessor_config.json:" in r2.stdout,
          "%s: import keeps the processor beside model.json, data images reads it: %s"
          % (name, r.stdout.strip().split("\n")[0]))
    shutil.copy(d + "/imp/data/train_x.npy", d + "/imp/data/test_x.npy")
    json.dump({"trainc": 1, "train": {"data": {"train": {"x": "data/train_x.npy",
                                                         "y": "data/train_y.npy"}},
                                      "batch_size": 16, "precision": "fp32"}},
              open(d + "/imp/eval.json", "w"))
    trainc("run", spec, d + "/imp/eval.json", "--init", d + "/imp/init.safetensors", "--predict",
           d + "/imp/data/test_x.npy", "--threads", 1, "--out", d + "/pred")
    ours = np.load(d + "/pred/predictions.npy")
    paths = [os.path.join(src, c, f) for c in classes for f in files_of(src, c)]
    images = [Image.open(p).convert("RGB") for p in paths]
    px = proc(images, return_tensors="pt")["pixel_values"]
    m.eval()
    with torch.no_grad():
        theirs = m(pixel_values=px).logits.numpy()
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(ours.shape == theirs.shape and worst <= 1e-4, "%s: --predict over data images' rows: "
          "transformers' logits on its %s's pixels of the %d files within %.1e"
          % (name, type(proc).__name__, len(paths), worst))
    if not export:
        return
    trainc("export", "hf", spec, d + "/imp/eval.json", "--weights", d + "/imp/init.safetensors",
           "-o", d + "/exp")
    back = transformers.AutoImageProcessor.from_pretrained(d + "/exp")
    again = back(images[:8], return_tensors="np")["pixel_values"]
    worst = float(np.abs(again - px[:8].numpy()).max())
    check(type(back) is type(proc) and worst <= 1e-6, "%s: the export's preprocessor_config.json "
          "is a %s making the same pixels (within %.1e)" % (name, type(back).__name__, worst))


def with_models(src, classes):
    """a ViT (ViTImageProcessor) and a ConvNeXt (ConvNextImageProcessor: the shorter side,
    crop_pct, bicubic) from image files to transformers' logits; a ConvNeXt at another
    --image-size keeps its processor fitted to it"""
    labels = dict(id2label=dict(enumerate(classes)), label2id={c: k for k, c in enumerate(classes)})
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=16,
                    num_hidden_layers=1, num_attention_heads=2, intermediate_size=24, **labels)
    m = saved(ViTForImageClassification, cfg, OUT + "/vit/src", 0.05, seed=3)
    predicts("vit", m, ViTImageProcessor(size={"height": 32, "width": 32},
             image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]), src, classes)
    cfg = ConvNextConfig(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[8, 16],
                         depths=[1, 1], image_size=32, **labels)
    m = saved(ConvNextForImageClassification, cfg, OUT + "/convnext/src", 0.05, seed=4)
    proc = ConvNextImageProcessor(size={"shortest_edge": 32}, crop_pct=0.875, resample=3)
    predicts("convnext", m, proc, src, classes, export=True)
    trainc("import", "hf", OUT + "/convnext/src", "-o", OUT + "/convnext/at24", "--image-size", 24)
    kept = json.load(open(OUT + "/convnext/at24/preprocessor_config.json"))
    check(kept["size"] == {"shortest_edge": 24} and kept["crop_pct"] == 0.875 and
          kept["resample"] == 3, "a ConvNeXt imported at --image-size 24: its processor's "
          "shortest_edge 24, crop_pct and resample kept")


PROCESSORS = [   # (what, preprocessor_config.json, the model's side)
    ("ConvNeXt's shorter side to int(32 / 0.875), a 32x32 crop, bicubic",
     {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 32},
      "crop_pct": 0.875, "resample": 3}, 32),
    ("ConvNeXt's old spelling: a feature extractor, size 32, crop_pct 0.9, bilinear by default",
     {"feature_extractor_type": "ConvNextFeatureExtractor", "size": 32, "crop_pct": 0.9}, 32),
    ("ConvNeXt from 384 on: a resize to 384x384, no crop",
     {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 384}}, 384),
    ("CLIP's shorter side to 24, then a 32x32 crop (zeros where the image is narrower)",
     {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 24},
      "crop_size": 32}, 32),
    ("BiT's resize to 40x36 (lanczos), a 32x32 crop",
     {"image_processor_type": "BitImageProcessor", "size": {"height": 40, "width": 36},
      "crop_size": {"height": 32, "width": 32}, "resample": 1}, 32),
    ("DeiT's resize to 36x36 (hamming), a 32x32 crop",
     {"image_processor_type": "DeiTImageProcessor", "size": {"height": 36, "width": 36},
      "crop_size": {"height": 32, "width": 32}, "resample": 5}, 32),
    ("SigLIP's resize to 32x32, bicubic by default",
     {"image_processor_type": "SiglipImageProcessor", "size": {"height": 32, "width": 32}}, 32),
    ("ViT's resize to 32x32 with the box filter",
     {"image_processor_type": "ViTImageProcessor", "size": {"height": 32, "width": 32},
      "resample": 4}, 32),
]


def processors(src, classes):
    """--processor: each kind's resize and crop = transformers' image processor's pixels (no
    rescale, no normalization) bit for bit; a processor whose images are not the model's
    refused"""
    flat = os.path.join(OUT, "procs")
    os.makedirs(flat)
    for f in ("00_rgb.jpg", "01_rgb.png", "02_gray.png", "03_rgba.png", "00_pal.png", "02_bits.png"):
        shutil.copy(os.path.join(src, classes[0], f), flat)
    paths = [os.path.join(flat, f) for f in sorted(os.listdir(flat))]
    for k, (what, cfg, S) in enumerate(PROCESSORS):
        d = os.path.join(OUT, "proc%d" % k)
        os.makedirs(d + "/src")
        json.dump(cfg, open(d + "/src/preprocessor_config.json", "w"))
        model(d + "/model.json", 3, S, classes)
        trainc("data", "images", flat, d + "/out", "--model", d + "/model.json", "--processor",
               d + "/src/preprocessor_config.json", "--unlabeled")
        proc = transformers.AutoImageProcessor.from_pretrained(d + "/src")
        theirs = proc([Image.open(p).convert("RGB") for p in paths], do_rescale=False,
                      do_normalize=False, return_tensors="np")["pixel_values"]
        ours = np.load(d + "/out/test_x.npy")
        check(ours.shape == theirs.shape and np.array_equal(ours.astype(np.float32), theirs),
              "%s: transformers' %s pixels of %d files bit for bit" % (what, type(proc).__name__,
                                                                       len(paths)))
    bad = os.path.join(OUT, "proc_bad")
    os.makedirs(bad)
    model(bad + "/model.json", 3, 32, classes)
    for k, (cfg, text) in enumerate((
            ({"image_processor_type": "ViTImageProcessor"}, "it makes 224x224 images; the model"),
            ({"image_processor_type": "CLIPImageProcessor", "do_center_crop": False},
             "CLIPImageProcessor makes images of the files' own proportions"),
            ({"image_processor_type": "DetrImageProcessor"},
             "$.image_processor_type: DetrImageProcessor: trainc resizes and crops as"),
            ({"image_processor_type": "ViTImageProcessor", "resample": 0},
             "$.resample: one of Pillow's filters 1 to 5"),
            ({"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 32},
              "crop_pct": 0.0001}, "resized to a shorter side of 320000 make a side past 65536"))):
        f = "%s/p%d.json" % (bad, k)
        json.dump(cfg, open(f, "w"))
        refused("--processor %s" % json.dumps(cfg), ["data", "images", src, bad + "/o%d" % k,
                "--model", bad + "/model.json", "--processor", f], text, bad + "/o%d" % k)


def interlaced(path):
    """a PNG whose IHDR says Adam7 (Pillow writes none: the flag set by hand)"""
    Image.fromarray(picture(9, 9, 3)).save(path)
    b = bytearray(open(path, "rb").read())
    b[28] = 1   # IHDR's interlace method (the CRC is not checked)
    open(path, "wb").write(bytes(b))


def bad_cases(src, classes):
    spec = os.path.join(OUT, "model3.json")
    bad = os.path.join(OUT, "bad")
    def folder(name, extra):
        p = os.path.join(bad, name)
        shutil.copytree(src, p, dirs_exist_ok=True)
        extra(p)
        return p
    cases = [
        ("a folder of no class", lambda p: os.makedirs(p + "/bird"), "/bird: a folder of no class"),
        ("an image outside a class folder",
         lambda p: shutil.copy(os.path.join(src, classes[0], files_of(src, classes[0])[0]), p + "/x.png"),
         "/x.png: an image outside a class folder"),
        ("a file that is no image", lambda p: open(p + "/%s/z.png" % classes[0], "w").write("text"),
         "/z.png: neither a PNG nor a JPEG"),
        ("an interlaced PNG", lambda p: interlaced(p + "/%s/zz.png" % classes[0]),
         "/zz.png: an interlaced PNG"),
        ("a 16-bit PNG", lambda p: Image.fromarray(np.full((5, 5), 300, np.uint16)).save(
            p + "/%s/zz.png" % classes[0]), "/zz.png: a PNG of 16-bit samples"),
    ]
    for k, (what, extra, text) in enumerate(cases):
        p = folder("src%d" % k, extra)
        refused(what, ["data", "images", p, bad + "/o%d" % k, "--model", spec], text, bad + "/o%d" % k)
    f32 = os.path.join(OUT, "model_f32.json")
    model(f32, 3, 32, classes, dtype="f32")
    refused("a model whose input is f32", ["data", "images", src, bad + "/o8", "--model", f32],
            "$.model.inputs.x: data images writes u8 images", bad + "/o8")
    refused("no --model", ["data", "images", src, bad + "/o9"], "missing --model", bad + "/o9")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
CLASSES = ["cat", "dog"]
SRC = os.path.join(OUT, "src")
make_folder(SRC, CLASSES, [(50, 70), (33, 33), (20, 15), (128, 96)])
d3 = labeled(SRC, CLASSES, 3, 32)
labeled(SRC, CLASSES, 1, 24)
asan = os.environ.get("ASAN_TRAINC")
if asan:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    subprocess.run([os.path.join(ROOT, asan), "data", "images", SRC, OUT + "/asan", "--model",
                    OUT + "/model3.json", "--val-frac", "0.25"], check=True, env=env,
                   capture_output=True)
    check(all(open("%s/%s" % (OUT + "/asan", f), "rb").read() == open("%s/%s" % (d3, f), "rb").read()
              for f in ("train_x.npy", "train_y.npy", "val_x.npy", "val_y.npy")),
          "the sanitized trainc (%s) writes the same arrays" % asan)
other_forms(SRC, CLASSES)
processors(SRC, CLASSES)
with_models(SRC, CLASSES)
bad_cases(SRC, CLASSES)
print("data_images: %s" % ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
