"""The Hugging Face side of examples/vit_finetune/run.sh, both ends of the path.

    hf.py make DIR          a model folder as the hub would give one: a small random
                            ViTForImageClassification for 28x28 grey images in 7x7
                            patches and Fashion-MNIST's 10 classes (their names in
                            id2label), with its ViTImageProcessor (DIR/config.json,
                            DIR/model.safetensors, DIR/preprocessor_config.json)
    hf.py data X Y OUT N    the first N images of X (u8 [n, 28, 28]) as OUT_x.npy
                            [N, 1, 28, 28] and their labels as OUT_y.npy (i32)
    hf.py check DIR X Y ACC loads the exported DIR (model and image processor) in
                            transformers, classifies the images of X (u8 [n, 1, 28, 28]),
                            checks its accuracy against Y equals trainc's ACC (a
                            fraction) within one image, and prints three predictions

Runs with a python that has transformers (HF_PYTHON); exits 77 without it.
"""
import os
import sys

try:
    import numpy as np
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor
except ImportError as e:
    print("skip: %s (make deps makes .venv/hf with transformers; HF_PYTHON names its python)" % e)
    sys.exit(77)

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]
torch.set_num_threads(1)


def make(d):
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    id2label=dict(enumerate(CLASSES)), label2id={c: i for i, c in enumerate(CLASSES)})
    model = ViTForImageClassification(cfg)
    model.save_pretrained(d, safe_serialization=True)
    ViTImageProcessor(size={"height": 28, "width": 28}, image_mean=[0.5], image_std=[0.5]).save_pretrained(d)
    print("%s: ViTForImageClassification, %d parameters, and its image processor"
          % (d, sum(p.numel() for p in model.parameters())))


def data(xs, ys, out, n):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    x = np.load(xs, mmap_mode="r")[:n].reshape(-1, 1, 28, 28)
    np.save(out + "_x.npy", np.ascontiguousarray(x))
    np.save(out + "_y.npy", np.load(ys)[:n].astype(np.int32))


def check(d, xs, ys, acc):
    model = ViTForImageClassification.from_pretrained(d).eval()
    proc = ViTImageProcessor.from_pretrained(d)
    x, y = np.load(xs), np.load(ys)
    pred = []
    with torch.no_grad():
        for b in range(0, len(x), 250):
            imgs = [im.transpose(1, 2, 0) for im in x[b:b + 250]]   # HWC, as PIL gives them
            pix = proc(imgs, do_resize=False, return_tensors="pt")["pixel_values"]
            pred.append(model(pixel_values=pix).logits.argmax(-1).numpy())
    pred = np.concatenate(pred)
    theirs = float((pred == y).mean())
    for i in range(3):
        print("image %d: transformers says %s (label: %s)" % (i, model.config.id2label[int(pred[i])],
                                                             CLASSES[int(y[i])]))
    print("transformers' accuracy on %d images: %.4f; trainc's: %.4f" % (len(y), theirs, acc))
    if abs(theirs - acc) > 1.5 / len(y):
        print("FAIL: the exported model classifies otherwise than trainc's")
        sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "make" and len(sys.argv) == 3:
        make(sys.argv[2])
    elif cmd == "data" and len(sys.argv) == 6:
        data(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif cmd == "check" and len(sys.argv) == 6:
        check(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit(__doc__)
