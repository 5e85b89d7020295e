"""--predict FILE.npy (runtime/mode_predict.c) against PyTorch: a few steps of mlp_fashion
and of resnet_fashion_cpu (batchnorm, a projection shortcut: evaluation mode matters),
then each model's predictions for 300 test images equal tests/spec_torch.py's module in
eval mode on the same weights (within 1e-4 of the logits' largest magnitude), and their
loss against the labels (label smoothing included) is what --eval reports on the same
rows. A token model
(gpt_char) predicts [N, T, V] logits whose cross entropy on the windows is --eval's
val_loss. Bad input exits 1 naming the file and writes nothing: a wrong shape, a wrong
dtype, a missing file, a GAN, a language-model head that never holds the logits whole
(llama3_1b's); a SIGINT mid-way exits 130 and leaves no file. Runs trainc run (the JIT)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_torch  # noqa: E402
import st_check    # noqa: E402

TRAINC = os.environ.get("TRAINC", "build/trainc")
OUT = "build/tests/predict"
N = 300


def trainc(*args, ok=True):
    p = subprocess.run([TRAINC, "run", *args], capture_output=True, text=True)
    if (p.returncode == 0) != ok:
        sys.exit("FAIL trainc run %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def eval_json(p):
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


def image_model(name):
    spec_path = "specs/%s.json" % name
    spec = json.load(open(spec_path))
    d = os.path.join(OUT, name)
    x, y = np.load("data/fashion/test_x.npy")[:N], np.load("data/fashion/test_y.npy")[:N]
    np.save(d + "_x.npy", x)
    np.save(d + "_y.npy", y)
    trainc(spec_path, "--set", "max_steps=5", "--set", "data.val=null", "--set", "checkpoint=null",
           "--out", d, "--quiet")
    weights = os.path.join(d, "model.safetensors")
    p = trainc(spec_path, "--init", weights, "--predict", d + "_x.npy", "--out", d + "_pred", "--quiet")
    assert eval_json(p)["rows"] == N, p.stdout
    got = np.load(os.path.join(d + "_pred", "predictions.npy"))
    assert os.listdir(d + "_pred") == ["predictions.npy"], os.listdir(d + "_pred")
    model = spec_torch.build(spec["model"]["layers"], spec["model"]["inputs"]["x"]["shape"])
    w = st_check.load(weights)
    model.load_state_dict({k: torch.from_numpy(np.array(w[k])) for k in model.state_dict()})
    model.eval()
    scale = np.float32(spec["model"]["inputs"]["x"]["scale"])
    with torch.no_grad():
        want = model(torch.from_numpy(x.astype(np.float32) * scale)).numpy()
    assert got.shape == want.shape == (N, 10) and got.dtype == np.float32, (got.shape, want.shape)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-4, err
    # the same weights' --eval on the same rows: the predictions' cross entropy
    ev = eval_json(trainc(spec_path, "--init", weights, "--eval", "--set", "data.val.x=" + d + "_x.npy",
                          "--set", "data.val.y=" + d + "_y.npy", "--set", "validate.batches=null", "--quiet"))
    ce = float(spec_torch.loss_fn(spec["model"])(torch.from_numpy(got).double(), torch.from_numpy(y).long()))
    assert abs(ce - ev["val_loss"]) <= 1e-5 * abs(ev["val_loss"]), (ce, ev)
    print("ok   %s --predict: %d rows of logits within %.1e of PyTorch's eval-mode module; their cross "
          "entropy %.6f is --eval's %.6f" % (name, N, err, ce, ev["val_loss"]))


def token_model():
    d = os.path.join(OUT, "gpt_char")
    spec = "specs/gpt_char.json"
    T = json.load(open(spec))["model"]["inputs"]["x"]["shape"][0]
    raw = open("data/text/val_000000.bin", "rb").read()
    n = int(np.frombuffer(raw[:12], "<i4")[2])
    tok = np.frombuffer(raw[1024:1024 + 2 * n], "<u2").astype(np.int32)
    rows = 8
    x = np.stack([tok[i * T:(i + 1) * T] for i in range(rows)])
    y = np.stack([tok[i * T + 1:(i + 1) * T + 1] for i in range(rows)])
    np.save(d + "_x.npy", x)
    trainc(spec, "--set", "max_steps=3", "--set", "data.val=null", "--set", "checkpoint=null",
           "--out", d, "--quiet")
    p = trainc(spec, "--init", d + "/model.safetensors", "--predict", d + "_x.npy", "--out", d + "_pred",
               "--quiet")
    got = np.load(d + "_pred/predictions.npy")
    assert got.shape == (rows, T, 256), got.shape
    ce = float(torch.nn.functional.cross_entropy(torch.from_numpy(got.reshape(-1, 256)).double(),
                                                 torch.from_numpy(y.reshape(-1)).long()))
    ev = eval_json(trainc(spec, "--init", d + "/model.safetensors", "--eval", "--set", "validate.batches=1",
                          "--set", "batch_size=%d" % rows, "--set", "loader.shuffle=false", "--quiet"))
    assert abs(ce - ev["val_loss"]) <= 1e-5 * abs(ev["val_loss"]), (ce, ev)
    print("ok   gpt_char --predict: [%d, %d, 256] logits, their cross entropy %.6f is --eval's %.6f on "
          "the first %d windows" % (rows, T, ce, ev["val_loss"], rows))


def bad_input():
    d = os.path.join(OUT, "bad")
    os.makedirs(d)
    np.save(d + "/shape.npy", np.zeros((4, 28, 28), np.uint8))
    np.save(d + "/dtype.npy", np.zeros((4, 1, 28, 28), np.float32))
    cases = [("a wrong shape", ["specs/mlp_fashion.json", "--predict", d + "/shape.npy"],
              "shape.npy: error: --predict: per-sample shape [28, 28]"),
             ("a wrong dtype", ["specs/mlp_fashion.json", "--predict", d + "/dtype.npy"],
              "dtype.npy: error: --predict: dtype f32 does not match model input 'x' (u8)"),
             ("a missing file", ["specs/mlp_fashion.json", "--predict", d + "/none.npy"], "none.npy"),
             ("a GAN", ["specs/dcgan_fashion.json", "--predict", d + "/shape.npy"],
              "--predict is for a model with a loss"),
             ("a chunked head", ["specs/llama3_1b.json", "--predict", d + "/shape.npy"],
              "--predict needs the logits whole")]
    for what, args, want in cases:
        out = os.path.join(d, "out")
        p = trainc(*args, "--out", out, ok=False)
        assert p.returncode == 1 and want in p.stderr, (what, p.returncode, p.stderr)
        assert not os.path.exists(out), (what, os.listdir(out))
        print("ok   --predict with %s: exit 1, %s" % (what, p.stderr.strip().splitlines()[-1][:110]))


def interrupted():
    """a SIGINT while the predictions are written: exit 130 at once, no file left (not
    predictions.npy, not its .tmp)"""
    import signal, time
    d = os.path.join(OUT, "resnet_fashion_cpu")   # (image_model's weights)
    out = os.path.join(OUT, "interrupted")
    tmp = os.path.join(out, "predictions.npy.tmp")
    p = subprocess.Popen([TRAINC, "run", "specs/resnet_fashion_cpu.json", "--init", os.path.join(d, "model.safetensors"),
                          "--predict", "data/fashion/test_x.npy", "--out", out, "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not os.path.exists(tmp) and p.poll() is None and time.time() - t0 < 120:
        time.sleep(0.005)
    seen = os.path.exists(tmp)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate()
    left = sorted(os.listdir(out)) if os.path.isdir(out) else []
    assert seen and p.returncode == 130 and left == [], (seen, p.returncode, left, err[-500:])
    print("ok   --predict interrupted while writing: exit 130, %s" % err.strip().splitlines()[-1])


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    image_model("mlp_fashion")
    image_model("resnet_fashion_cpu")
    token_model()
    bad_input()
    interrupted()
    print("predict: all checks passed")


main()
