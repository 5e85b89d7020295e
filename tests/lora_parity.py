"""train.lora against the PyTorch reference of tests/llama_torch.py, which adds each
adapter as PEFT's LoRA layer computes it (base(x) + B(A(x)) * alpha / rank).

A tiny Llama (vocabulary 256, d 64, 2 layers, 4 heads over 2 KV heads, RoPE, SwiGLU,
untied head, T 32), its weights and adapters (B not zero, so that both adapters learn
from the first step) from the same random draw on both sides, trained 30 AdamW steps
with warmup, cosine decay and gradient clipping on the same windows of data/text, fp32,
one thread; every step's loss within 1e-4 relative:
  - all_linear: lora's default targets (every linear layer's and attention projection's
    weight but the head's: the fused qkv and gate_up get one adapter each), rank 4,
    alpha 8, and lora.train the final norm's weight;
  - some: lora.targets "*.qkv.weight,*.down.weight", rank 2, alpha 3;
  - rslora: the attention's output projections and gate_up, rank 4, alpha 2, rslora
    (the factor alpha / sqrt(rank), 1, not alpha / rank).
Then trainc's model.safetensors: every tensor but the trained ones bit for bit the
initial one, the adapters moved. And `--init` of the base weights alone (no adapter in
the file): the first loss is the base model's (B starts at zero). And lora.dropout: in
training it moves the loss, --eval is the identity.

    $PYTHON tests/lora_parity.py
"""
import fnmatch
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref       # noqa: E402  (its tiny Llama)
import llama_torch as lt   # noqa: E402
import run_log         # noqa: E402
import st_check        # noqa: E402

OUT = os.path.join(lt.ROOT, "build", "tests", "lora_parity")
V, T, B, STEPS = llama_ref.V, llama_ref.T, 8, 30
torch.set_num_threads(1)
MODEL = llama_ref.model("lora", {"kv_heads": 2, "bias": False, "rope": {"theta": 10000}},
                        llama_ref.swiglu("silu", 128))
CASES = {
    "all_linear": ({"rank": 4, "alpha": 8, "train": ["norm.weight"]},
                   lambda n: n != "lm_head.weight"),
    "some": ({"rank": 2, "alpha": 3, "targets": ["*.qkv.weight", "*.down.weight"]},
             lambda n: fnmatch.fnmatch(n, "*.qkv.weight") or fnmatch.fnmatch(n, "*.down.weight")),
    "rslora": ({"rank": 4, "alpha": 2, "rslora": True, "targets": ["*.proj.weight", "*.gate_up.weight"]},
               lambda n: fnmatch.fnmatch(n, "*.proj.weight") or fnmatch.fnmatch(n, "*.gate_up.weight")),
}


def trained(name, lora):
    return ".lora_" in name or any(fnmatch.fnmatch(name, p) for p in lora.get("train", []))


def run_case(name, x, y):
    lora, adapts = CASES[name]
    lt.LORA = {"rank": lora["rank"], "alpha": lora["alpha"], "adapts": adapts,
               "scale": lora["alpha"] / (lora["rank"] ** 0.5 if lora.get("rslora") else lora["rank"])}
    P = lt.init_params(MODEL, seed=2)
    init = {n: t.clone() for n, t in P.t.items()}
    sp = {"trainc": 1, "model": MODEL, "train": dict(lt.train_spec(STEPS, B), lora=lora)}
    ours = lt.run_trainc(sp, P.t, os.path.join(OUT, name))
    fwd = lambda xb: lt.logits(MODEL, P, xb)
    ref = lt.train_torch(fwd, [t for n, t in P.t.items() if trained(n, lora)], sp["train"], x, y, V)
    ok = lt.compare("trainc vs reference, lora %s" % name, ours, ref, 1e-4)
    got = st_check.load(os.path.join(OUT, name, "run", "model.safetensors"))
    assert sorted(got) == sorted(init), (sorted(got), sorted(init))
    fixed = [n for n in init if not trained(n, lora)]
    same = [n for n in fixed if np.array_equal(got[n], init[n].numpy())]
    moved = [n for n in init if trained(n, lora) and not np.array_equal(got[n], init[n].numpy())]
    n_adapters = sum(".lora_" in n for n in init)
    good = len(same) == len(fixed) and len(moved) == len(init) - len(fixed)
    print("%s lora %s: %d of %d fixed tensors bit for bit the initial ones, %d of %d trained moved"
          " (%d adapters)" % ("ok  " if good else "FAIL", name, len(same), len(fixed), len(moved),
                              len(init) - len(fixed), n_adapters))
    return ok and good


def base_init(x, y):
    """--init with the base weights alone: the adapters start as a fresh run's (B zero:
    the first loss is the model's without lora; A bit for bit a fresh run's draws)."""
    lt.LORA = None
    P = lt.init_params(MODEL, seed=2)
    with torch.no_grad():
        want = torch.nn.functional.cross_entropy(lt.logits(MODEL, P, x[:B]).reshape(-1, V),
                                                 y[:B].reshape(-1)).item()
    out = os.path.join(OUT, "base_init")
    sp = {"trainc": 1, "model": MODEL, "train": dict(lt.train_spec(1, B), lora={"rank": 4})}
    sp["train"]["optimizer"]["lr"] = 0.0   # the initial values come back
    os.makedirs(out, exist_ok=True)
    ip = os.path.join(out, "init.safetensors")
    st_check.save(ip, {n: t.numpy().astype(np.float32) for n, t in P.t.items()})
    sp_path = os.path.join(out, "spec.json")
    json.dump(sp, open(sp_path, "w"))
    r = subprocess.run([lt.TRAINC, "run", sp_path, "--init", ip, "--out", os.path.join(out, "run"),
                        "--threads", "1", "--quiet"], capture_output=True, text=True)
    got = run_log.losses(os.path.join(out, "run"))[0] if r.returncode == 0 else float("nan")
    said = "LoRA adapter tensors not in it" in r.stderr
    subprocess.run([lt.TRAINC, "run", sp_path, "--out", os.path.join(out, "fresh"), "--threads", "1",
                    "--quiet"], check=True, capture_output=True)
    a, f = (st_check.load(os.path.join(out, k, "model.safetensors")) for k in ("run", "fresh"))
    adapters = [n for n in a if ".lora_" in n]
    same = all(np.array_equal(a[n], f[n]) for n in adapters)
    ok = r.returncode == 0 and abs(got - want) <= 1e-5 * abs(want) and said and same and len(adapters) > 0
    print("%s --init without adapters: first loss %.6f, the base model's %.6f; said so: %s; "
          "the %d adapters a fresh run's bit for bit: %s" % ("ok  " if ok else "FAIL", got, want,
                                                             said, len(adapters), same))
    if not ok:
        print(r.stderr)
    return ok


def dropout_case():
    """lora.dropout 0.5 (on each adapted layer's input, before A): the first training loss
    moves off the one without it, the next 2 steps too, and --eval (no dropout) of the
    same weights gives the loss without it exactly."""
    lt.LORA = {"rank": 4, "alpha": 8, "adapts": lambda n: n != "lm_head.weight"}
    P = lt.init_params(MODEL, seed=2)
    out = {}
    for p in (0, 0.5):
        tr = dict(lt.train_spec(3, B), lora={"rank": 4, "alpha": 8, "dropout": p})
        tr["optimizer"]["lr"] = 0.0   # the same weights all along
        d = os.path.join(OUT, "dropout_%g" % p)
        losses = lt.run_trainc({"trainc": 1, "model": MODEL, "train": tr}, P.t, d)
        r = subprocess.run([lt.TRAINC, "run", os.path.join(d, "spec.json"), "--init",
                            os.path.join(d, "init.safetensors"), "--eval", "--threads", "1",
                            "--set", "data.val.tokens=" + tr["data"]["train"]["tokens"],
                            "--set", "validate.batches=2"], capture_output=True, text=True)
        ev = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["val_loss"]
        out[p] = (losses, ev)
    (l0, e0), (l1, e1) = out[0], out[0.5]
    ok = all(abs(a - b) > 1e-5 * abs(a) for a, b in zip(l0, l1)) and e0 == e1
    print("%s lora dropout 0.5: training losses %s vs %s without it; --eval %.7f, %.7f without it"
          % ("ok  " if ok else "FAIL", " ".join("%.5f" % v for v in l1),
             " ".join("%.5f" % v for v in l0), e1, e0))
    return ok


def main():
    x, y = lt.token_windows(T, STEPS * B)
    ok = True
    for name in CASES:
        ok &= run_case(name, x, y)
    ok &= base_init(x, y)
    ok &= dropout_case()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
