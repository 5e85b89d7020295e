"""The Python side of examples/image_folder/run.sh: the model folder a download would
give, the image folder a user would have, and transformers reading the export back.

    hf.py make DIR            a small random ConvNextV2ForImageClassification for 32x32
                              RGB images and Fashion-MNIST's 10 classes (folder-safe names
                              in id2label), with a ConvNextImageProcessor (ImageNet's mean
                              and std), as save_pretrained writes them
    hf.py images X Y DIR N    the first N images of X (u8 [n, 28, 28]) as PNG files
                              DIR/CLASS/NNNNN.png, CLASS the name of Y's label
    hf.py check DIR IMAGES P  transformers' image-classification pipeline over the folder
                              IMAGES' files (class by class, in name order: data images'
                              order) with the exported model DIR; its labels must be the
                              argmax of trainc's --predict logits P, file for file

Runs with a python that has transformers (HF_PYTHON); exits 77 without it.
"""
import os
import sys

try:
    import numpy as np
    import torch
    from PIL import Image
    from transformers import (ConvNextImageProcessor, ConvNextV2Config,
                              ConvNextV2ForImageClassification, pipeline)
except ImportError as e:
    print("skip: %s (make deps makes .venv/hf with transformers; HF_PYTHON names its python)" % e)
    sys.exit(77)

CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "boot"]
torch.set_num_threads(1)


def make(d):
    torch.manual_seed(0)
    cfg = ConvNextV2Config(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[32, 64],
                           depths=[1, 1], image_size=32, id2label=dict(enumerate(CLASSES)),
                           label2id={c: i for i, c in enumerate(CLASSES)})
    model = ConvNextV2ForImageClassification(cfg)
    model.save_pretrained(d, safe_serialization=True)
    ConvNextImageProcessor(size={"shortest_edge": 32}, image_mean=[0.485, 0.456, 0.406],
                           image_std=[0.229, 0.224, 0.225]).save_pretrained(d)
    print("%s: ConvNextV2ForImageClassification, %d parameters, and its image processor"
          % (d, sum(p.numel() for p in model.parameters())))


def images(xs, ys, d, n):
    x, y = np.load(xs, mmap_mode="r")[:n], np.load(ys)[:n]
    for c in CLASSES:
        os.makedirs(os.path.join(d, c), exist_ok=True)
    for i in range(n):
        Image.fromarray(np.asarray(x[i]).reshape(28, 28), "L").save(
            os.path.join(d, CLASSES[int(y[i])], "%05d.png" % i))
    print("%s: %d PNG files of 28x28, a folder a class" % (d, n))


def check(d, folder, pred):
    files = [os.path.join(folder, c, f) for c in CLASSES
             for f in sorted(os.listdir(os.path.join(folder, c)))]
    ours = np.load(pred).argmax(-1)
    clf = pipeline("image-classification", model=d, device=-1)
    theirs = [clf(f, top_k=1)[0]["label"] for f in files]
    same = sum(CLASSES[int(k)] == t for k, t in zip(ours, theirs))
    for f, t in list(zip(files, theirs))[:3]:
        print("%s: transformers says %s" % (os.path.relpath(f, folder), t))
    print("transformers' pipeline and trainc agree on %d of %d files" % (same, len(files)))
    if same < len(files) - 1:   # (one near tie may fall either way)
        print("FAIL: the exported model classifies otherwise than trainc")
        sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "make" and len(sys.argv) == 3:
        make(sys.argv[2])
    elif cmd == "images" and len(sys.argv) == 6:
        images(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif cmd == "check" and len(sys.argv) == 5:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
