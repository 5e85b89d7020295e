#!/usr/bin/env python3
"""attention's Llama-family options as `trainc check` and a trainer see them: gpt_char
with 2 blocks, its attention given kv_heads 2 of 4 heads, no biases, rope with llama3
scaling, qk_norm and a window of 40 (T 128), against the same model without options:

- the weights file holds exactly SPEC.md's names and shapes (qkv.weight
  [(heads + 2 kv_heads) hd, d], q_norm.weight and k_norm.weight [hd], no biases);
- `trainc check`'s parameter count is their sum;
- its forward FLOPs a sample differ from the plain model's by the qkv GEMM's smaller
  K/V rows (2 T d (heads + 2 kv_heads) hd instead of 2 T d 3d) and the window's pairs
  (4 d (T W - W^2 / 2) instead of the causal 4 d T^2 / 2), and forward+backward by 3x that.
"""
import json, os, re, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
OUT = os.path.join(ROOT, "build", "tests", "attention_opts")
os.makedirs(OUT, exist_ok=True)
T, D, H, KV, W, BLOCKS = 128, 128, 4, 2, 40, 2
HD = D // H
OPTS = {"kv_heads": KV, "bias": False, "qk_norm": True, "window": W,
        "rope": {"theta": 500000, "scaling": {"rope_type": "llama3", "factor": 32, "low_freq_factor": 1,
                                               "high_freq_factor": 4, "original_max_position_embeddings": 64}}}


def spec(name, opts):
    s = json.load(open(os.path.join(ROOT, "specs", "gpt_char.json")))
    s["model"]["name"] = name
    s["model"]["layers"][2]["count"] = BLOCKS
    s["model"]["layers"][2]["body"][0]["body"][1].update(opts)
    for k in ("train", "val"):
        s["train"]["data"][k]["tokens"] = os.path.join(ROOT, "data", "text", k + "_*.bin")
    path = os.path.join(OUT, name + ".json")
    json.dump(s, open(path, "w"), indent=1)
    return path


def check(path):
    out = subprocess.run([TRAINC, "check", path], check=True, capture_output=True, text=True).stdout
    params = int(re.search(r"parameters\s+(\d+)", out).group(1))
    fwd, both = map(int, re.search(r"FLOPs/sample\s+(\d+) forward, (\d+) forward\+backward", out).groups())
    return params, fwd, both


failed = 0
def verdict(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok

opts, plain = spec("gpt_opts", OPTS), spec("gpt_plain", {})
run = os.path.join(OUT, "run")
subprocess.run([TRAINC, "run", opts, "--set", "max_steps=1", "--set", "data.val=null", "--set", "batch_size=2",
                "--threads", "1", "--quiet", "--out", run], check=True, capture_output=True)
w = st_check.load(os.path.join(run, "model.safetensors"))
attn = {k: list(v.shape) for k, v in w.items() if ".attn." in k}
want = {}
for b in range(BLOCKS):
    want.update({f"h.{b}.attn.qkv.weight": [(H + 2 * KV) * HD, D], f"h.{b}.attn.q_norm.weight": [HD],
                 f"h.{b}.attn.k_norm.weight": [HD], f"h.{b}.attn.proj.weight": [D, D]})
verdict(attn == want, "attention's weights are SPEC's names and shapes" + ("" if attn == want else f": {attn}"))
params, fwd, both = check(opts)
verdict(params == sum(v.size for v in w.values()), f"trainc check's {params} parameters are the weights file's")
_, pfwd, pboth = check(plain)
qkv = 2 * T * D * ((H + 2 * KV) * HD - 3 * D)
core = 4 * D * (T * W - W * W / 2) - 4 * T * T * D / 2
verdict(fwd - pfwd == BLOCKS * (qkv + core) and both - pboth == 3 * (fwd - pfwd),
        f"FLOPs a sample: {fwd} forward, {pfwd} without the options (GQA's K/V rows and the window's pairs: "
        f"{BLOCKS * (qkv + core):.0f} apart)")
sys.exit(1 if failed else 0)
