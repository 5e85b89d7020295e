"""Checks of a short DCGAN run (examples/dcgan/run.sh): the files trainc wrote, finite
losses, and that the generator's samples resemble Fashion-MNIST rather than noise.

    python3 check.py OUT REAL.npy [--smoke]

OUT holds run/ (the training run, with --sample 64), step0/ (--eval --sample 64 of the
spec's initial weights: the same latent vectors, the untrained generator) and eval/
(--eval --init run/model.safetensors --sample 64). REAL.npy: the training images, u8
[N, 1, 28, 28]. Prints one line a check; exits 1 at the first that fails.

Whether samples look like clothing is judged against real images with three numbers,
each measured on the generator at step 0 (noise), on 64 real images, and on runs of
this example (examples/dcgan/README.md has the values):

  mean   the correlation of the 64 samples' mean image with the mean training image:
         the average sample has the average garment's silhouette (dark background,
         bright centre)
  match  the median over the samples of the best correlation with any of 2000 real
         images: each sample, not only the average, resembles some real image
  spread the mean distance between two samples over that between two real images: the
         samples differ from one another (a collapsed generator that draws one image
         has a good mean and match and a spread near 0)

--smoke (a few dozen steps) asks only that mean rose well above step 0's.
"""
import json
import math
import struct
import sys

import numpy as np

N_SAMPLES = 64
SMOKE_MEAN_GAIN = 0.2   # smoke: mean at least step 0's + this
FULL_MEAN = 0.9         # full: mean at least this ...
FULL_MATCH = 0.5        # ... match at least this ...
FULL_SPREAD = 0.5       # ... and spread at least this


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def ok(msg):
    print("ok   " + msg)


def records(path):
    """metrics.jsonl's training records (those without an "event")."""
    rs = [json.loads(line) for line in open(path)]
    return [r for r in rs if "event" not in r]


def check_files(out):
    run = out + "/run"
    rs = records(run + "/metrics.jsonl")
    if not rs:
        fail("no training records in %s/metrics.jsonl" % run)
    for r in rs:
        for k in ("d_loss", "g_loss"):
            if k not in r or not math.isfinite(r[k]):
                fail("step %s: %s is %s" % (r.get("step"), k, r.get(k)))
    ok("%d records, d_loss and g_loss finite (last: step %d, d_loss %.4f, g_loss %.4f)"
       % (len(rs), rs[-1]["step"], rs[-1]["d_loss"], rs[-1]["g_loss"]))
    svg = open(run + "/loss.svg").read()
    if "d_loss" not in svg or "g_loss" not in svg:
        fail("loss.svg does not draw d_loss and g_loss")
    ok("loss.svg draws d_loss and g_loss")
    png = open(run + "/samples.png", "rb").read()
    size = struct.unpack(">II", png[16:24])
    want = (2 + 8 * 30, 2 + (N_SAMPLES // 8) * 30)   # 8 a row, 28 x 28 tiles, padding 2
    if png[:8] != b"\x89PNG\r\n\x1a\n" or size != want:
        fail("samples.png: not a %d x %d PNG (%r)" % (want + (size,)))
    ok("samples.png: a %d x %d PNG grid" % want)


def samples(path):
    s = np.load(path)
    if s.shape != (N_SAMPLES, 1, 28, 28) or s.dtype != np.float32:
        fail("%s: %s %s, not float32 [%d, 1, 28, 28]" % (path, s.dtype, s.shape, N_SAMPLES))
    if not np.all(np.isfinite(s)) or np.abs(s).max() > 1:
        fail("%s: values in [%g, %g]; the generator ends with tanh, so [-1, 1]"
             % (path, s.min(), s.max()))
    return s.reshape(N_SAMPLES, -1).astype(np.float64)


def corr(a, b):
    """Pearson correlations of the rows of a with the rows of b."""
    a = a - a.mean(1, keepdims=True)
    b = b - b.mean(1, keepdims=True)
    return (a @ b.T) / np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)).clip(1e-12)


def spread(s):
    d = np.sqrt(((s[:, None] - s[None]) ** 2).sum(-1))
    return d[np.triu_indices(len(s), 1)].mean()


def measure(s, real_mean, ref, real_spread):
    return {"mean": corr(s.mean(0)[None], real_mean[None])[0, 0],
            "match": np.median(corr(s, ref).max(1)),
            "spread": spread(s) / real_spread}


def main():
    out, real_path = sys.argv[1], sys.argv[2]
    smoke = "--smoke" in sys.argv[3:]
    check_files(out)
    trained = samples(out + "/run/samples.npy")
    step0 = samples(out + "/step0/samples.npy")
    if not np.array_equal(trained, samples(out + "/eval/samples.npy")):
        fail("--eval --init run/model.safetensors --sample 64 differs from the run's samples")
    ok("samples.npy float32 [64, 1, 28, 28] in [-1, 1]; --eval --init gives the same")

    real = np.load(real_path).reshape(-1, 784).astype(np.float64) / 127.5 - 1   # as the spec scales
    pick = np.random.default_rng(0).permutation(len(real))
    ref, real64 = real[pick[:2000]], real[pick[2000:2000 + N_SAMPLES]]
    real_mean, real_spread = real.mean(0), spread(real64)
    rows = [("step 0", measure(step0, real_mean, ref, real_spread)),
            ("trained", measure(trained, real_mean, ref, real_spread)),
            ("64 real images", measure(real64, real_mean, ref, real_spread))]
    for name, m in rows:
        print("     %-15s mean %6.3f   match %6.3f   spread %5.2f" % ((name,) + tuple(m.values())))
    m0, m = rows[0][1], rows[1][1]
    if smoke:
        if m["mean"] < m0["mean"] + SMOKE_MEAN_GAIN:
            fail("the mean sample is no closer to the mean image than step 0's (+%g)"
                 % SMOKE_MEAN_GAIN)
        ok("smoke: the mean sample moved towards the mean image (%.3f from %.3f)"
           % (m["mean"], m0["mean"]))
        return
    if m["mean"] < FULL_MEAN:
        fail("mean %.3f < %g: the average sample is not shaped like the average garment"
             % (m["mean"], FULL_MEAN))
    if m["match"] < FULL_MATCH:
        fail("match %.3f < %g: the samples do not resemble real images" % (m["match"], FULL_MATCH))
    if m["spread"] < FULL_SPREAD:
        fail("spread %.3f < %g: the samples are too alike (mode collapse)"
             % (m["spread"], FULL_SPREAD))
    ok("samples resemble Fashion-MNIST: mean >= %g, match >= %g, spread >= %g"
       % (FULL_MEAN, FULL_MATCH, FULL_SPREAD))


if __name__ == "__main__":
    main()
