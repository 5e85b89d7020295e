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
3. random_resized_crop: the helper's boxes are those of the draw rt.h describes,
   written here again in Python (its tries, e^ by its series, the central fallback);
   its images equal, bit for bit, Pillow's crop of each box resized to H x W
   (Image.resize, BILINEAR, 8-bit bands) and flipped, for Fashion-MNIST (1 x 28 x 28),
   3-channel 40 x 56 images at other ranges and boxes that never fit (the fallback); over
   20000 draws the areas keep to the scale range, their mean torchvision's (its
   get_params simulated) and the log-ratios about centred.
4. color_jitter: each image, after its crop (or resized crop) and flip, equals Pillow's
   ImageEnhance Brightness, Contrast and Color and torchvision's adjust_hue (Pillow's
   HSV, numpy's uint8 shift) at the helper's drawn order and factors (torchvision's
   ColorJitter on a PIL image), for Fashion-MNIST (L) and 3-channel images (RGB, after
   random_resized_crop too, factors past 1 clipped, hue alone and at its bound 0.5);
   over 6000 draws the factors keep to [max(0, 1 - v), 1 + v] and [-h, h], and the 24
   orders come about evenly.
"""
import math, os, subprocess, sys
import numpy as np
import torch
import torch.nn.functional as F

helper, out = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(images, pad, hflip, seed, epoch, tag, rrc=None, jitter=None):
    n, C, H, W = images.shape
    src = os.path.join(out, f"{tag}_src.bin")
    images.tofile(src)
    oi, od = os.path.join(out, f"{tag}_aug.bin"), os.path.join(out, f"{tag}_draws.bin")
    subprocess.run([helper, src, str(n), str(C), str(H), str(W), str(images.itemsize), str(pad),
                    str(int(hflip)), str(seed), str(epoch), oi, od] +
                   (["rrc"] + [repr(float(v)) for v in rrc] if rrc else []) +
                   (["jitter"] + [repr(float(v)) for v in jitter] if jitter else []), check=True)
    aug = np.fromfile(oi, dtype=images.dtype).reshape(images.shape)
    draws = np.fromfile(od, dtype=np.int64).reshape(n, (5 if rrc else 3) + (8 if jitter else 0))
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

M64 = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def aug_bits(seed, epoch, index):
    z = seed ^ 0x5851F42D4C957F2D
    for v in (epoch, index):
        z = mix64(z ^ ((v * GOLD) & M64))
    return z


def exp_plain(x):
    y, term, total = x / 1024.0, 1.0, 1.0
    for n in range(1, 13):
        term = term * y / n
        total = total + term
    for _ in range(10):
        total = total * total
    return total


def rrc_box(bits, H, W, smin, smax, r0, r1):
    """rt.h's draw: torchvision's RandomResizedCrop.get_params over our bits"""
    lr0, lr1, area = math.log(r0), math.log(r1), float(H) * float(W)
    for t in range(10):
        b1, b2 = mix64(bits ^ (((2 * t + 1) * GOLD) & M64)), mix64(bits ^ (((2 * t + 2) * GOLD) & M64))
        target = area * (smin + (b1 >> 11) * 2.0 ** -53 * (smax - smin))
        ratio = exp_plain(lr0 + (b2 >> 11) * 2.0 ** -53 * (lr1 - lr0))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= W and 0 < h <= H:
            return ((mix64(b1) & 0xFFFFFFFF) % (H - h + 1), (mix64(b2) & 0xFFFFFFFF) % (W - w + 1), h, w)
    h, w, ratio_in = H, W, W / H
    if ratio_in < r0:
        h = round(W / r0)
    elif ratio_in > r1:
        w = round(H * r1)
    return ((H - h) // 2, (W - w) // 2, h, w)


def pillow_reference(images, draws):
    """Pillow: each band's crop of the box resized to H x W (BILINEAR), then flipped"""
    from PIL import Image
    bilinear = getattr(Image, "Resampling", Image).BILINEAR
    n, C, H, W = images.shape
    ref = np.empty_like(images)
    for r in range(n):
        top, left, h, w, flip = (int(v) for v in draws[r])
        for c in range(C):
            im = Image.fromarray(images[r, c]).crop((left, top, left + w, top + h))
            a = np.asarray(im.resize((W, H), bilinear))
            ref[r, c] = a[:, ::-1] if flip else a
    return ref


rgb = np.clip(rng.integers(0, 256, (24, 3, 40, 56)) * 0.5 +
              np.linspace(0, 127, 56)[None, None, None, :], 0, 255).astype(np.uint8)
for name, imgs, hflip, rrc in (("fashion u8, the defaults", fashion, True, (0.08, 1.0, 3 / 4, 4 / 3)),
                               ("3 x 40 x 56 u8, scale (0.3, 0.9), ratio (0.5, 2)", rgb, False, (0.3, 0.9, 0.5, 2.0)),
                               ("fashion u8, boxes that never fit (ratio 2.5 to 3)", fashion[:40], True, (0.95, 1.0, 2.5, 3.0)),
                               ("3 x 40 x 56, never fit (ratio 0.2 to 0.25)", rgb[:8], True, (0.95, 1.0, 0.2, 0.25))):
    n, C, H, W = imgs.shape
    aug, draws = run(imgs, 0, hflip, 1337, 5, "r", rrc)
    want = [rrc_box(aug_bits(1337, 5, r), H, W, *rrc) for r in range(n)]
    same_boxes = [tuple(int(v) for v in d[:4]) for d in draws] == want
    ref = pillow_reference(imgs, draws)
    check(same_boxes and np.array_equal(aug, ref),
          f"random_resized_crop, {name}: boxes as rt.h draws them ({len(set(want))} distinct), the "
          f"images Pillow's crop + resize(BILINEAR) + flip ({int((aug != ref).sum())} values differ)")
_, big = run(np.zeros((20000, 1, 100, 100), np.uint8), 0, True, 7, 0, "v", (0.08, 1.0, 3 / 4, 4 / 3))
share = big[:, 2] * big[:, 3] / 1e4
logr = np.log(big[:, 3] / big[:, 2])
# (0.482: torchvision's get_params simulated with Python's random, 200000 draws; the
# boxes that do not fit are drawn again, so the mean is below 0.54)
check(share.min() > 0.075 and share.max() <= 1.0 and abs(share.mean() - 0.482) < 0.01 and
      abs(logr.mean()) < 0.01, f"20000 draws of 100 x 100: area share in [{share.min():.3f}, "
      f"{share.max():.3f}], mean {share.mean():.3f} (torchvision's 0.482), log-ratio mean "
      f"{logr.mean():.4f}")


def jitter_reference(images, crops, draws, base, jit):
    """Pillow: each image (after the crop and flip the helper also returns without
    jitter) through ImageEnhance's Brightness, Contrast and Color and torchvision's
    adjust_hue (Pillow's HSV, numpy's uint8 shift) in the drawn order and factors (each a
    float: Image.blend's alpha), as torchvision's ColorJitter on a PIL image applies them"""
    from PIL import Image, ImageEnhance

    def hue(im, f):
        if im.mode == "L":
            return im
        h, s, v = im.convert("HSV").split()
        np_h = np.array(h, dtype=np.uint8)
        with np.errstate(over="ignore"):
            np_h += np.uint8(f * 255)
        return Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB")

    enhance = [lambda im, f, e=e: e(im).enhance(f)
               for e in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)]
    ref = np.empty_like(images)
    for r in range(len(images)):
        order = [int(v) for v in draws[r, base:base + 4]]
        f = np.array(draws[r, base + 4:base + 8], np.uint32).view(np.float32)
        C = images.shape[1]
        im = Image.fromarray(crops[r, 0]) if C == 1 else Image.fromarray(crops[r].transpose(1, 2, 0))
        for step in order:
            if jit[step] > 0:
                im = (enhance + [hue])[step](im, float(f[step]))
        a = np.asarray(im)
        ref[r] = a[None] if C == 1 else a.transpose(2, 0, 1)
    return ref


for name, imgs, jit, rrc in (("fashion u8, brightness, contrast and saturation 0.4, hue 0.1", fashion,
                              (0.4, 0.4, 0.4, 0.1), None),
                             ("3 x 40 x 56 u8, 0.8 each and hue 0.5, after random_resized_crop", rgb,
                              (0.8, 0.8, 0.8, 0.5), (0.3, 0.9, 0.5, 2.0)),
                             ("3 x 40 x 56 u8, contrast 1.5 and saturation 2 alone", rgb, (0.0, 1.5, 2.0, 0.0), None),
                             ("3 x 40 x 56 u8, hue 0.3 alone", rgb, (0.0, 0.0, 0.0, 0.3), None)):
    crops, _ = run(imgs, 0 if rrc else 2, True, 1337, 5, "j0", rrc)
    aug, draws = run(imgs, 0 if rrc else 2, True, 1337, 5, "j", rrc, jit)
    base = 5 if rrc else 3
    ref = jitter_reference(imgs, crops, draws, base, jit)
    orders = {tuple(d[base:base + 4]) for d in draws}
    check(np.array_equal(aug, ref), f"color_jitter, {name}: Pillow's ImageEnhance and torchvision's "
          f"adjust_hue in the drawn orders ({len(orders)} of 24) and factors "
          f"({int((aug != ref).sum())} values differ)")
_, big = run(np.zeros((6000, 1, 1, 1), np.uint8), 0, False, 7, 0, "w", None, (0.4, 1.5, 0.0, 0.5))
f = np.array(big[:, 7:11], np.uint32).view(np.float32)
counts = np.bincount([o[0] * 64 + o[1] * 16 + o[2] * 4 + o[3] for o in big[:, 3:7].tolist()], minlength=256)
check(f[:, 0].min() >= 0.6 and f[:, 0].max() <= 1.4 and abs(f[:, 0].mean() - 1) < 0.01 and
      f[:, 1].min() >= 0 and f[:, 1].max() <= 2.5 and abs(f[:, 1].mean() - 1.25) < 0.02 and
      (f[:, 2] == 1).all() and f[:, 3].min() >= -0.5 and f[:, 3].max() <= 0.5 and
      abs(f[:, 3].mean()) < 0.01 and counts[counts > 0].size == 24 and counts.max() < 6000 / 24 * 1.3,
      f"6000 draws: brightness 0.4's factors in [{f[:, 0].min():.3f}, {f[:, 0].max():.3f}], "
      f"contrast 1.5's in [{f[:, 1].min():.3f}, {f[:, 1].max():.3f}] (from 0), saturation off, hue "
      f"0.5's in [{f[:, 3].min():.3f}, {f[:, 3].max():.3f}], the 24 orders {counts[counts > 0].min()} "
      f"to {counts.max()} times")
sys.exit(0 if ok else 1)
