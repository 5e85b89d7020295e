"""Packed rows (the model's `positions`) against Hugging Face's models on each sequence alone.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this. Each row of T tokens of
data/text is cut into sequences of 1 to 20 tokens (a row a whole sequence too), pos[t]
each token's position in its own, and the target that would predict a sequence's first
token from the one before is -100. trainc trains tests/llama_hf.py's tiny Llama (GQA,
rope, RMSNorm, SwiGLU, untied head) with the input `pos` as the model's `positions`;
transformers' LlamaForCausalLM computes each sequence alone (its positions from 0) and
the loss is the mean over all the targets counted, as trainc's is: 12 AdamW steps with
warm-up, cosine decay and clipping from the same weights, every step's loss within 1e-4
relative. The same with a sliding window of 6 inside the sequences (MistralForCausalLM),
and for GPT2LMHeadModel through `trainc import hf` (its pos_embedding adds each token's
position's row); with `recompute: full` (the replayed attention reads the positions
too: the same bits as `none`). Without `positions` the losses differ by more than 1e-3
(attention across the seams), ten times the tolerance, so the check can fail. --sample
from the trained weights (Llama's, GPT-2's) prints what the spec without positions
prints. A position that is neither 0 nor one more than the one before exits 1 naming
the file, row and element, nothing trained. Token shards with `loader.documents`
(documents from each newline of data/text, the loader filling pos) train as HF's Llama
does on each document alone (the targets as they are), within 1e-4; its --sample
begins the context anew at each newline (a prompt's last document alone prints the same
text), the key/value cache serving again from there.

    $HF_PYTHON tests/packed_parity.py
"""
import copy
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_hf as lh    # noqa: E402  (exits 77 without transformers)
import llama_torch as lt  # noqa: E402
import st_check           # noqa: E402

OUT = os.path.join(lt.ROOT, "build", "tests", "packed_parity")
STEPS, B, T = 12, lh.B, lh.T
NEWLINE = 10   # the token (a byte) that begins each document of documents_case


def packed_positions(n, rng):
    """pos [n, T]: each row cut into sequences of 1 to 20 tokens (every fourth row one
    sequence), each token's position in its own"""
    pos = np.tile(np.arange(T), (n, 1))
    for r in range(n):
        if r % 4 == 3:
            continue
        t = 0
        while t < T:
            k = int(rng.integers(1, 21))
            pos[r, t:t + k] = np.arange(min(k, T - t))
            t += k
    return torch.from_numpy(pos)


def seams(y, pos):
    """y with -100 where the target is the first token of the next sequence"""
    y = y.clone()
    y[:, :-1][pos[:, 1:] == 0] = -100
    return y


def npy(d, **arrays):
    os.makedirs(d, exist_ok=True)
    out = {}
    for k, a in arrays.items():
        out[k] = os.path.join(d, "train_%s.npy" % k)
        np.save(out[k], a.numpy().astype(np.int32))
    return out


def packed_spec(data, window=None, positions=True):
    sp = lh.spec(window=window)
    sp["train"]["max_steps"] = STEPS
    sp["train"]["data"] = {"train": dict(data)}
    sp["model"]["loss"]["ignore_index"] = -100
    if positions:
        sp["model"]["inputs"]["pos"] = {"shape": [T], "dtype": "i32"}
        sp["model"]["positions"] = "pos"
    else:
        del sp["train"]["data"]["train"]["pos"]
    return sp


def hf_packed(m, pos):
    """forward(x) for train_torch: each row's sequences through m alone, the logits of a
    batch [B, T, V] put together; the batches' rows are pos's in order"""
    at = [0]

    def fwd(xb):
        p = pos[at[0]:at[0] + len(xb)]
        at[0] += len(xb)
        rows = []
        for r in range(len(xb)):
            starts = [t for t in range(T) if p[r, t] == 0] + [T]
            rows.append(torch.cat([m(input_ids=xb[r:r + 1, s:e]).logits[0]
                                   for s, e in zip(starts, starts[1:])]))
        return torch.stack(rows)
    return fwd


def case(name, x, y, pos, data, window=None):
    m = lh.hf_model(window=window)
    w = lh.trainc_weights(m, False, False)
    sp = packed_spec(data, window)
    ours = lt.run_trainc(sp, w, os.path.join(OUT, name))
    theirs = lt.train_torch(hf_packed(m, pos), list(m.parameters()), sp["train"], x, y, lh.V)
    ok = lt.compare("trainc packed rows vs HF %s, each sequence alone" % name, ours, theirs, 1e-4)
    return ok, sp, w, ours


def gpt2_case(x, y, pos, data):
    """GPT-2's learned position rows: a random GPT2LMHeadModel (tied head, no dropout)
    through `trainc import hf`, its pos_embedding adding each token's position's row; the
    spec and its weights for sample_same"""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(3)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=lh.V, n_embd=32, n_layer=2, n_head=4, n_positions=T,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    src, imp = os.path.join(OUT, "gpt2_hf"), os.path.join(OUT, "gpt2_import")
    m.save_pretrained(src)
    subprocess.run([lt.TRAINC, "import", "hf", src, "-o", imp, "--seq-len", str(T)],
                   capture_output=True, check=True)
    sp = json.load(open(os.path.join(imp, "model.json")))
    sp["train"] = packed_spec(data)["train"]
    sp["model"]["inputs"]["pos"] = {"shape": [T], "dtype": "i32"}
    sp["model"]["positions"] = "pos"
    w = {k: torch.tensor(v) for k, v in st_check.load(os.path.join(imp, "init.safetensors")).items()}
    ours = lt.run_trainc(sp, w, os.path.join(OUT, "gpt2"))
    theirs = lt.train_torch(hf_packed(m, pos), list(m.parameters()), sp["train"], x, y, lh.V)
    ok = lt.compare("trainc packed rows vs HF gpt2 (position rows), each sequence alone", ours,
                    theirs, 1e-4)
    return ok and full_recompute("gpt2", sp, w, ours), sp


def documents_case(x, y):
    """Token shards with loader.documents: data/text's windows as they are (no target
    ignored), a document beginning at each newline (and at each window's start); the
    loader fills pos, and HF computes each document alone"""
    pos = torch.zeros_like(x)
    for t in range(1, T):
        pos[:, t] = torch.where(x[:, t] == NEWLINE, 0, pos[:, t - 1] + 1)
    m = lh.hf_model()
    w = lh.trainc_weights(m, False, False)
    sp = lh.spec()
    sp["train"]["max_steps"] = STEPS
    sp["train"]["loader"]["documents"] = NEWLINE
    sp["model"]["inputs"]["pos"] = {"shape": [T], "dtype": "i32"}
    sp["model"]["positions"] = "pos"
    ours = lt.run_trainc(sp, w, os.path.join(OUT, "documents"))
    theirs = lt.train_torch(hf_packed(m, pos), list(m.parameters()), sp["train"], x, y, lh.V)
    seams = int((pos[:STEPS * B] == 0).sum()) - STEPS * B
    ok = lt.compare("trainc token shards, a document from each newline (%d seams), vs HF "
                    "llama on each document alone" % seams, ours, theirs, 1e-4)
    return ok and sample_documents(sp)


def cache_served(sample, n=5):
    """how many of the sample's bytes the key/value cache serves: each one drawn while its
    context (n bytes after the prompt's last newline) has not slid since it began"""
    served, slid = 0, False
    for c in sample:
        served += not slid
        if c == NEWLINE:
            n, slid = 0, False
        elif n == T:
            n, slid = n - 1, True
        n += 1
    return served


def sample_documents(sp):
    """--sample from documents_case's weights: a prompt whose last document begins after
    other text prints what that document alone as the prompt prints (the context begins
    anew at each newline, the sample's own too: 80 bytes run past several and past the
    window), by the key/value cache (checked against the window's pass; serving each
    context again from its newline) and without it"""
    weights = os.path.join(OUT, "documents", "run", "model.safetensors")
    path = os.path.join(OUT, "sample_documents.json")
    json.dump(sp, open(path, "w"))
    out, ok = {}, True
    for cache in ("check", "0"):
        for prompt in ("Permission is hereby granted, free of charge,\nThe ", "\nThe "):
            p = subprocess.run([lt.TRAINC, "run", path, "--eval", "--init", weights, "--sample",
                                "80", "--prompt", prompt, "--sample-seed", "5", "--out",
                                os.path.join(OUT, "sample_documents"), "--threads", "1"],
                               capture_output=True, env=dict(os.environ, TRAINC_KV_CACHE=cache),
                               check=True)
            out[cache, prompt] = p.stdout
            if cache == "check":   # the cache's logits against the window's pass, and served
                err = p.stderr.decode()
                worst = re.search(r"cache check: \d+ tokens, the largest difference (\S+) of", err)
                served = re.search(r"\((\d+) from the key/value cache", err)
                ok &= float(worst.group(1)) < 1e-5
                ok &= int(served.group(1)) == cache_served(p.stdout[:-1])
    texts = set(out.values())
    ok &= len(texts) == 1 and out["0", "\nThe "].count(b"\n") >= 2
    print("%s --sample with documents: a prompt's last document alone gives the same %d bytes "
          "(%d newlines), with and without the key/value cache" %
          ("ok  " if ok else "FAIL", len(out["0", "\nThe "]), out["0", "\nThe "].count(b"\n")))
    return ok


def full_recompute(name, sp, w, ours):
    sp = copy.deepcopy(sp)
    sp["train"]["recompute"] = "full"
    again = lt.run_trainc(sp, w, os.path.join(OUT, name + "_full"))
    ok = again == ours
    print("%s %s, recompute full with positions: the same losses bit for bit as none" %
          ("ok  " if ok else "FAIL", name))
    return ok


def without_positions(data, w, ours):
    sp = packed_spec(data, positions=False)
    plain = lt.run_trainc(sp, w, os.path.join(OUT, "plain"))
    worst = max(abs(a - b) / b for a, b in zip(plain, ours))
    ok = worst > 1e-3
    print("%s without positions the losses differ: by %.1e relative at most (%.6f -> %.6f)" %
          ("ok  " if ok else "FAIL", worst, plain[0], plain[-1]))
    return ok


def plain(sp):
    """sp without the positions: the input, the model's key, the data file"""
    sp = copy.deepcopy(sp)
    del sp["model"]["positions"], sp["model"]["inputs"]["pos"], sp["train"]["data"]["train"]["pos"]
    return sp


def sample_same(name, sp):
    """--sample from the packed run NAME's weights: the same text from the spec with
    positions (each context one sequence: positions 0 .. T - 1, and the key/value
    cache without them) as from the spec without"""
    out = {}
    weights = os.path.join(OUT, name, "run", "model.safetensors")
    for kind, spec in (("packed", sp), ("plain", plain(sp))):
        path = os.path.join(OUT, "sample_%s_%s.json" % (name, kind))
        json.dump(spec, open(path, "w"))
        p = subprocess.run([lt.TRAINC, "run", path, "--eval", "--init", weights, "--sample", "40",
                            "--sample-seed", "5", "--out", os.path.join(OUT, "sample_" + kind),
                            "--threads", "1"], capture_output=True, env=dict(
                                os.environ, TRAINC_KV_CACHE="check"), check=True)
        out[kind] = p.stdout
    ok = out["packed"] == out["plain"] and len(out["plain"]) > 0
    print("%s --sample from the packed %s: the plain model's %d bytes" %
          ("ok  " if ok else "FAIL", name, len(out["plain"])))
    return ok


def bad_position(data, pos):
    bad = pos.clone()
    bad[5, 9] = bad[5, 8] + 2   # neither 0 nor one more than the place before's
    d = npy(os.path.join(OUT, "bad_data"), pos=bad)
    sp = packed_spec(dict(data, pos=d["pos"]))
    path = os.path.join(OUT, "bad.json")
    json.dump(sp, open(path, "w"))
    run = os.path.join(OUT, "bad_run")
    p = subprocess.run([lt.TRAINC, "run", path, "--out", run, "--quiet"], capture_output=True,
                       text=True)
    want = ("row 5, element 9: position %d where 0 or one more than the place before's is"
            % bad[5, 9])
    ok = p.returncode == 1 and want in p.stderr
    ok &= not os.path.exists(os.path.join(run, "metrics.jsonl"))
    print("%s a position neither 0 nor one more than the one before: exit %d, %s" %
          ("ok  " if ok else "FAIL", p.returncode, p.stderr.strip().splitlines()[-1:]))
    return ok


def main():
    torch.set_num_threads(1)
    x, y = lt.token_windows(T, STEPS * B)
    pos = packed_positions(STEPS * B, np.random.default_rng(7))
    y = seams(y, pos)
    data = npy(os.path.join(OUT, "data"), x=x, y=y, pos=pos)
    ok, sp, w, ours = case("llama", x, y, pos, data)
    ok &= case("mistral_window6", x, y, pos, data, window=6)[0]
    ok &= full_recompute("llama", sp, w, ours)
    ok &= without_positions(data, w, ours)
    ok &= sample_same("llama", sp)
    good, sp2 = gpt2_case(x, y, pos, data)
    ok &= good and sample_same("gpt2", sp2)
    ok &= bad_position(data, pos)
    ok &= documents_case(*lt.token_windows(T, STEPS * B))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
