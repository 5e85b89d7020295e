"""loader.augment: random crop with zero padding and horizontal flip.

augment.py AUGMENT_CHECK OUT_DIR   (tests/augment.sh builds the helper and calls this)

1. The transform: for 200 Fashion-MNIST test images (u8 [1, 28, 28]) and 16 synthetic
   3-channel f32 images, the helper's augmented images (rt_gather_augment, which the
   CPU loader's rows and data.cuh's kernel twin) equal, bit for bit, what PyTorch's
   RandomCrop(28, padding=P) and RandomHorizontalFlip compute at the same draws:
   F.pad with zeros, the [top:top+H, left:left+W] window, then a flip of the last axis.
   The test drives the transform with the drawn offsets, not the RNG.
2. The draws: a function of (seed, epoch, index) alone (the same call twice gives the
   same draws; another epoch or seed other draws); offsets cover [0, 2P] about
   uniformly; flips about half; none without hflip; all zero offsets with P = 0.
"""
import os, subprocess, sys
import numpy as np
import torch
import torch.nn.functional as F

helper, out = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(images, pad, hflip, seed, epoch, tag):
    n, C, H, W = images.shape
    src = os.path.join(out, f"{tag}_src.bin")
    images.tofile(src)
    oi, od = os.path.join(out, f"{tag}_aug.bin"), os.path.join(out, f"{tag}_draws.bin")
    subprocess.run([helper, src, str(n), str(C), str(H), str(W), str(images.itemsize), str(pad),
                    str(int(hflip)), str(seed), str(epoch), oi, od], check=True)
    aug = np.fromfile(oi, dtype=images.dtype).reshape(images.shape)
    draws = np.fromfile(od, dtype=np.int64).reshape(n, 3)
    return aug, draws


def torch_reference(images, pad, draws):
    """torchvision's RandomCrop(size, padding=pad) then RandomHorizontalFlip, at the given
    top/left offsets and flips (their implementation: F.pad with zeros, slice, flip(-1))."""
    t = torch.from_numpy(images.astype(np.float64))
    H, W = images.shape[2], images.shape[3]
    out = []
    for r in range(images.shape[0]):
        top, left, flip = (int(v) for v in draws[r])
        x = F.pad(t[r], (pad, pad, pad, pad), value=0.0)[:, top:top + H, left:left + W]
        out.append(x.flip(-1) if flip else x)
    return torch.stack(out).numpy().astype(images.dtype)


ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)

fashion = np.load(os.path.join(ROOT, "data", "fashion", "test_x.npy"))[:200]
fashion = np.ascontiguousarray(fashion.reshape(200, 1, 28, 28))
rng = np.random.default_rng(3)
colour = rng.standard_normal((16, 3, 9, 7)).astype(np.float32)

for name, imgs, pad, hflip in (("fashion u8 pad 4 flip", fashion, 4, True),
                               ("fashion u8 pad 2 no flip", fashion, 2, False),
                               ("f32 3x9x7 pad 3 flip", colour, 3, True),
                               ("f32 pad 9 (wider than the image)", colour, 9, True)):
    aug, draws = run(imgs, pad, hflip, 1337, 5, "t")
    ref = torch_reference(imgs, pad, draws)
    check(np.array_equal(aug, ref), f"{name}: the transform is torch's RandomCrop + "
          f"RandomHorizontalFlip at the drawn offsets ({int((aug != ref).sum())} values differ)")
    check(draws[:, :2].min() >= 0 and draws[:, :2].max() <= 2 * pad, f"{name}: offsets in [0, {2 * pad}]")
    if not hflip:
        check(draws[:, 2].sum() == 0, f"{name}: no flip without hflip")

_, d1 = run(fashion, 4, True, 1337, 5, "a")
_, d2 = run(fashion, 4, True, 1337, 5, "b")
_, d3 = run(fashion, 4, True, 1337, 6, "c")
_, d4 = run(fashion, 4, True, 1338, 5, "d")
check(np.array_equal(d1, d2), "the same (seed, epoch, index) draws the same")
check((d1 != d3).any(axis=1).mean() > 0.8, "another epoch draws otherwise")
check((d1 != d4).any(axis=1).mean() > 0.8, "another seed draws otherwise")
_, big = run(np.zeros((20000, 1, 1, 1), np.uint8), 4, True, 7, 0, "u")
counts = np.bincount(big[:, 0], minlength=9)
check(counts.min() > 20000 / 9 * 0.9 and counts.max() < 20000 / 9 * 1.1,
      f"top offsets about uniform over [0, 8]: {counts.tolist()}")
check(abs(big[:, 2].mean() - 0.5) < 0.02, f"flips about half: {big[:, 2].mean():.3f}")
check(np.corrcoef(big[:, 0], big[:, 1])[0, 1] ** 2 < 1e-3, "top and left independent")
_, zero = run(fashion[:20], 0, True, 1337, 5, "z")
check(zero[:, :2].max() == 0, "padding 0: no shift")
sys.exit(0 if ok else 1)
