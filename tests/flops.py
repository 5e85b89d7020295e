#!/usr/bin/env python3
"""`trainc check`'s FLOPs a sample count the backward pass the program computes (the
trainer's MFU divides by the same number), checked by differences that hold whatever
each op's own count is:

- mlp_fashion (784 -> 256 -> relu -> 256 -> relu -> 10): the first linear layer's input
  needs no gradient, so its backward is its weight's GEMM alone (2 x 784 x 256, not
  twice that), beside each relu's 2 a value and the other layers' two GEMMs; freezing
  the first layer ('1.*') takes away its GEMM, the relu's backward above it and the
  second layer's input gradient;
- gpt_char (4 blocks, d 128, T 128, a head tied to the embedding of 256 rows):
  freezing the embeddings takes away the tied head's weight GEMM, 2 T d V; training the
  biases alone ('*.weight', BitFit) takes away every weight GEMM, 4 x 24 T d^2 + 2 T d V;
  freezing the first block too takes away that block's whole backward (nothing below
  the first trained layer runs backward), which is what a fifth block adds to the
  backward of the model with 4 (every block the same);
- the forward count never moves;
- a packed row's (the model's `positions`) counts as one sequence and says so.
"""
import json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "flops")
os.makedirs(OUT, exist_ok=True)

failed = 0
def verdict(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok

def check(spec, freeze=None):
    cmd = [TRAINC, "check", spec] + (["--set", "freeze=" + freeze] if freeze else [])
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

def flops(spec, freeze=None):
    """(forward, backward) FLOPs a sample as `trainc check` prints them"""
    out = check(spec, freeze)
    fwd, both = map(int, re.search(r"FLOPs/sample\s+(\d+) forward, (\d+) forward\+backward", out).groups())
    return fwd, both - fwd

def gpt_blocks(n):
    s = json.load(open(os.path.join(ROOT, "specs", "gpt_char.json")))
    s["model"]["layers"][2]["count"] = n
    for k in ("train", "val"):
        s["train"]["data"][k]["tokens"] = os.path.join(ROOT, "data", "text", k + "_*.bin")
    path = os.path.join(OUT, f"gpt_{n}.json")
    json.dump(s, open(path, "w"), indent=1)
    return path

mlp = os.path.join(ROOT, "specs", "mlp_fashion.json")
f0, b0 = flops(mlp)
f1, b1 = flops(mlp, "1.*")
want = 2 * 784 * 256 + 2 * 256 + 4 * 256 * 256 + 2 * 256 + 4 * 256 * 10
verdict(b0 == want, f"mlp_fashion: backward {b0} FLOPs a sample, {want} without the first "
        "layer's input gradient")
want = 2 * 784 * 256 + 2 * 256 + 2 * 256 * 256
verdict(f1 == f0 and b0 - b1 == want, f"mlp_fashion: the first layer frozen takes {b0 - b1} "
        f"from the backward ({want})")

T, D, V = 128, 128, 256
g4, g5 = gpt_blocks(4), gpt_blocks(5)
fa, ba = flops(g4)
fe, be = flops(g4, "wte.weight,wpe.weight")
fb, bb = flops(g4, "*.weight")
fh, bh = flops(g4, "wte.weight,wpe.weight,h.0.*")
_, b5 = flops(g5)
verdict(fe == fa and ba - be == 2 * T * D * V,
        f"gpt_char: the embeddings frozen take {ba - be}, the tied head's weight GEMM")
verdict(fb == fa and ba - bb == 4 * 24 * T * D * D + 2 * T * D * V,
        f"gpt_char: the biases alone trained take {ba - bb}, every weight GEMM")
verdict(fh == fa and be - bh == b5 - ba,
        f"gpt_char: the first block frozen too takes {be - bh}, a block's whole backward ({b5 - ba})")

s = json.load(open(g4))
s["model"]["inputs"]["pos"] = {"shape": [T], "dtype": "i32"}
s["model"]["positions"] = "pos"
s["train"]["data"] = {"train": {k: k + ".npy" for k in s["model"]["inputs"]}}
packed = os.path.join(OUT, "gpt_packed.json")
json.dump(s, open(packed, "w"), indent=1)
s["model"].pop("positions")
del s["model"]["inputs"]["pos"], s["train"]["data"]["train"]["pos"]
plain = os.path.join(OUT, "gpt_plain.json")
json.dump(s, open(plain, "w"), indent=1)
note = "attention counted as one sequence a row: packed rows (pos) compute less"
verdict(flops(packed) == flops(plain) and note in check(packed) and note not in check(plain),
        "gpt_char with packed rows: the plain model's FLOPs, and check says they are at most that")
sys.exit(1 if failed else 0)
