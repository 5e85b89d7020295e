"""The trainer's --tokenizer: --prompt encoded, --sample's output decoded.

Trains a GPT-2-style, a Llama-3-style and a Llama-2-style (SentencePiece BPE) tokenizer
(tests/tokenizer_hf.py's) over the license texts, tokenizes them with `trainc data text --tokenizer`, trains a tiny GPT
over the tokenizer's vocabulary for a few steps with `trainc run`, and samples with
--prompt and --tokenizer: the prompt's ids (printed on stderr) are those of
`tokenizers`' encode (the Llama 3 one's BOS included), the printed text is
`tokenizers`' decode of the sampled ids (printed on stderr too), and a prompt id past
the model's vocabulary is refused.

Run with the venv's python (HF_PYTHON): exits 77 (skipped) without `tokenizers`.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
try:
    from tokenizers import Tokenizer
except ImportError:
    print("skip: the `tokenizers` package is not installed (make deps makes .venv/hf)")
    sys.exit(77)
import tokenizer_hf as th  # noqa: E402

TRAINC = os.environ.get("TRAINC", "build/trainc")
OUT = "build/tests/tokenizer_sample"
PROMPT = "Hello, the Licensor's WORK 2024\n"


def spec(vocab, data):
    return {"trainc": 1, "model": {
        "name": "tok_gpt", "init": "gpt2",
        "inputs": {"x": {"shape": [32], "dtype": "i32"},
                   "y": {"shape": [32], "dtype": "i32", "classes": vocab}},
        "layers": [
            {"op": "embedding", "name": "wte", "vocab": vocab, "dim": 32, "input": "x"},
            {"op": "pos_embedding", "name": "wpe", "max_len": 32},
            {"op": "residual", "body": [{"op": "layernorm", "name": "ln_1"},
                                        {"op": "attention", "name": "attn", "heads": 2}]},
            {"op": "layernorm", "name": "ln_f"},
            {"op": "linear", "name": "lm_head", "tie": "wte", "bias": False}],
        "loss": {"op": "cross_entropy", "target": "y"}},
        "train": {"data": {"train": {"tokens": data + "/train_*.bin"}},
                  "batch_size": 8, "max_steps": 5, "optimizer": {"type": "adamw", "lr": 1e-2},
                  "seed": 7, "log_every": 1, "device": "cpu"}}


def ids_line(stderr, what):
    m = re.search(r"^%s: (\d+) tokens:(.*)$" % what, stderr, re.M)
    if not m:
        sys.exit("FAIL: no '%s:' line on stderr:\n%s" % (what, stderr[-2000:]))
    ids = [int(x) for x in m.group(2).split()]
    assert len(ids) == int(m.group(1))
    return ids


def sp_bytes(tok, ids):
    """What trainc prints for ids of a SentencePiece-style tokenizer: each token's bytes,
    <0xXX> its byte, "▁" a space (tokenizers' decode but for its Strip of the first
    space and its U+FFFD for bytes that are not UTF-8)."""
    out = b""
    for i in ids:
        s = tok.id_to_token(i)
        m = re.fullmatch(r"<0x([0-9A-F]{2})>", s)
        out += bytes([int(m.group(1), 16)]) if m else s.replace("\u2581", " ").encode()
    return out


def stop_at(kind, d, sp, tj, tok, sample):
    """--stop TEXT: the same sample from the trained weights (--eval: the same draws)
    ends before the first id that is TEXT's one token: the first of the sample's ids
    that comes back as itself from its own text, not seen before it. With two --stop
    (a later such id's text first), before the first of either. With --num-samples 2 the
    first sample is that one, the second its own, each ended at the stop, both decoded."""
    ok = [j for j in range(3, len(sample)) if sample[j] not in sample[:j] and
          tok.encode(tok.decode([sample[j]]), add_special_tokens=False).ids == [sample[j]]]
    j = ok[0]
    stop = tok.decode([sample[j]])
    later = [tok.decode([sample[k]]) for k in ok[1:]][:1]
    for stops in ([stop], later + [stop]):
        r = subprocess.run([TRAINC, "run", sp, "--eval", "--init", d + "/run/model.safetensors",
                            "--threads", "1", "--sample", "40", "--prompt", PROMPT, "--tokenizer", tj] +
                           [a for t in stops for a in ("--stop", t)], capture_output=True)
        got, want = r.stdout.decode("utf-8", "replace")[:-1], tok.decode(sample[:j], skip_special_tokens=False)
        if r.returncode != 0 or got != want:   # (no data.val: --eval prints no record)
            sys.exit("FAIL: %s: --stop %r: exit %d, printed %r, want %r" % (kind, stops, r.returncode, got, want))
    assert later, "no second token to stop at"
    # --num-samples 2: the first the one sample's, each ended at its own stop, printed in turn
    r = subprocess.run([TRAINC, "run", sp, "--eval", "--init", d + "/run/model.safetensors", "--threads", "1",
                        "--sample", "40", "--prompt", PROMPT, "--tokenizer", tj, "--stop", stop,
                        "--num-samples", "2"], capture_output=True)
    err = r.stderr.decode("utf-8", "replace")
    one, two = ids_line(err, "sample 1"), ids_line(err, "sample 2")
    want = "".join("--- sample %d of 2 ---\n%s\n" % (k + 1, tok.decode(x, skip_special_tokens=False))
                   for k, x in enumerate((one, two)))
    stop_id = sample[j]
    if (r.returncode != 0 or one != sample[:j] or stop_id in two or two == one or
            r.stdout.decode("utf-8", "replace") != want):
        sys.exit("FAIL: %s: --num-samples 2: exit %d, ids %s and %s, printed %r" % (kind, r.returncode, one, two,
                                                                                 r.stdout))
    r2 = subprocess.run([TRAINC, "run", sp, "--eval", "--sample", "5", "--tokenizer", tj,
                         "--stop", "two words"], capture_output=True, text=True)
    assert r2.returncode == 1 and "not one" in r2.stderr, (r2.returncode, r2.stderr)
    print("ok   %s: --stop %r ends the sample before its token %d (%d ids printed), also as the "
          "second of two (%r first), and each of --num-samples 2 (%d and %d ids); two tokens refused"
          % (kind, stop, j + 1, j, later[0], len(one), len(two)))


def without_data(kind, d, sp, tj, sample):
    """--eval --sample reads no training data (a fresh import samples before it has any),
    and none of data.val's files there means sampling alone: the same sample from the
    trained weights with the data moved away"""
    os.rename(d + "/data", d + "/data_away")
    try:
        r = subprocess.run([TRAINC, "run", sp, "--eval", "--init", d + "/run/model.safetensors",
                            "--threads", "1", "--sample", "40", "--prompt", PROMPT, "--tokenizer", tj,
                            "--set", "data.val.tokens=data/val_*.bin"], capture_output=True)
    finally:
        os.rename(d + "/data_away", d + "/data")
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0 or ids_line(err, "sample") != sample or "sampling alone" not in err:
        sys.exit("FAIL: %s: --eval --sample without data: exit %d\n%s" % (kind, r.returncode, err[-1500:]))
    print("ok   %s: --eval --sample with no data files there: the same %d ids, no validation" %
          (kind, len(sample)))


def prompt_file(kind, d, sp, tj, tok):
    """--prompt-file: three prompts (gpt2: FILE.jsonl with a JSON string holding a newline,
    an object's "prompt" and an empty line; llama3: a text file, a line each, one ending in
    \\r\\n) with --num-samples 2: each prompt's part is its header line, then what --prompt
    with that text prints, byte for byte; its ids on stderr are tokenizers'; the key/value
    cache serves as many tokens as for the three prompts apart, in fewer passes (two
    prompts' four sequences a pass at the spec's batch size). --prompt
    beside it, a bad JSON line and a file without prompts exit 1 before training."""
    prompts = [PROMPT, "Licensor grants", "THE SOFTWARE IS"]
    if kind == "gpt2":
        path = os.path.join(d, "prompts.jsonl")
        body = "%s\n%s\n\n%s\n" % (json.dumps(prompts[0]), json.dumps({"prompt": prompts[1], "completion": "x"}),
                                   json.dumps(prompts[2]))
    else:
        prompts[0] = prompts[0].strip()
        path = os.path.join(d, "prompts.txt")
        body = "%s\n%s\r\n%s" % tuple(prompts)
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
    base = [TRAINC, "run", sp, "--eval", "--init", d + "/run/model.safetensors", "--threads", "1",
            "--sample", "20", "--tokenizer", tj, "--num-samples", "2"]
    r = subprocess.run(base + ["--prompt-file", path], capture_output=True)
    err = r.stderr.decode("utf-8", "replace")
    want, served = b"", [0, 0, 0]
    cache = lambda e: [int(x) for x in re.search(r"sampled (\d+) tokens .*\((\d+) from the key/value cache "
                                                   r"in (\d+) passes", e).groups()]
    for k, p in enumerate(prompts):
        one = subprocess.run(base + ["--prompt", p], capture_output=True)
        want += b"--- prompt %d of 3 ---\n" % (k + 1) + one.stdout
        served = [a + b for a, b in zip(served, cache(one.stderr.decode("utf-8", "replace")))]
        if ids_line(err, "prompt %d" % (k + 1)) != tok.encode(p).ids:
            sys.exit("FAIL: %s: --prompt-file's prompt %d: ids %s, tokenizers' %s" % (
                kind, k + 1, ids_line(err, "prompt %d" % (k + 1)), tok.encode(p).ids))
    if r.returncode != 0 or r.stdout != want or want.count(b"--- sample") != 6:
        sys.exit("FAIL: %s: --prompt-file: exit %d, printed %r, want %r" % (kind, r.returncode, r.stdout, want))
    # each prompt's tokens from a cache of its own, as many as --prompt's
    got = cache(err)
    if got[:2] != served[:2] or served[1] < served[0] // 2 or not got[2] < served[2]:
        sys.exit("FAIL: %s: --prompt-file: %s tokens drawn, from the cache, passes; each prompt alone: %s" % (
            kind, got, served))
    bad = os.path.join(d, "bad.jsonl")
    empty = os.path.join(d, "empty.txt")
    with open(bad, "w") as f:
        f.write('"fine"\n{"completion": "no prompt"}\n')
    with open(empty, "w") as f:
        f.write("\n\n")
    said = []
    for args, words in ((["--prompt-file", path, "--prompt", "x"], "--prompt and --prompt-file"),
                        (["--prompt-file", bad], "line 2"), (["--prompt-file", empty], "no prompt in it")):
        shutil.rmtree(d + "/refused", ignore_errors=True)
        r = subprocess.run([TRAINC, "run", sp, "--out", d + "/refused", "--sample", "5", "--tokenizer", tj] + args,
                           capture_output=True, text=True)
        if r.returncode != 1 or words not in r.stderr or os.path.exists(d + "/refused"):
            sys.exit("FAIL: %s: %s: exit %d, %r" % (kind, args, r.returncode, r.stderr))
        said.append(r.stderr.strip())
    print("ok   %s: --prompt-file (%s) with --num-samples 2: each prompt's samples as --prompt's, its ids "
          "tokenizers', the cache's %d tokens in %d passes (%d apart); refused before training: %s"
          % (kind, os.path.basename(path), got[1], got[2], served[2], " | ".join(said)))


def run(kind, vocab):
    d = os.path.join(OUT, kind)
    os.makedirs(d, exist_ok=True)
    lic = th.license_text()
    tj = os.path.join(d, "tokenizer.json")
    if kind == "sp_llama2":
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(th.sp_trained([c.replace("\n", " ") for c in lic.split("\n\n")], vocab), f,
                      ensure_ascii=False)
    else:
        th.trained(kind, lic.split("\n\n"), vocab).save(tj)
    tok = Tokenizer.from_file(tj)
    text = os.path.join(d, "licenses.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(lic)
    subprocess.run([TRAINC, "data", "text", text, d + "/data", "--tokenizer", tj, "--val-frac", "0"],
                   check=True, capture_output=True)
    V = tok.get_vocab_size()
    sp = os.path.join(d, "spec.json")
    with open(sp, "w") as f:
        json.dump(spec(V, "data"), f)
    cmd = [TRAINC, "run", sp, "--out", d + "/run", "--threads", "1", "--sample", "40",
           "--prompt", PROMPT, "--tokenizer", tj]
    r = subprocess.run(cmd, capture_output=True)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        sys.exit("FAIL: %s: %s exited %d:\n%s" % (kind, " ".join(cmd), r.returncode, err[-2000:]))
    prompt = ids_line(err, "prompt")
    want = tok.encode(PROMPT).ids
    if prompt != want:
        sys.exit("FAIL: %s: the prompt's ids %s, tokenizers' %s" % (kind, prompt, want))
    sample = ids_line(err, "sample")
    if kind == "sp_llama2":   # bytes as they come: no Strip, no U+FFFD
        got, want = r.stdout[:-1], sp_bytes(tok, sample)
        if len(sample) != 40 or got != want:
            sys.exit("FAIL: %s: the sample printed %r, its tokens' bytes are %r" % (kind, got, want))
        print("ok   %s (vocabulary %d): prompt %d ids as tokenizers'; sample %r" %
              (kind, V, len(prompt), got[:60]))
        return
    text_out = r.stdout.decode("utf-8", "replace")
    assert text_out.endswith("\n")
    decoded = tok.decode(sample, skip_special_tokens=False)
    if len(sample) != 40 or text_out[:-1] != decoded:
        sys.exit("FAIL: %s: the sample printed %r, tokenizers decodes its %d ids as %r" %
                 (kind, text_out, len(sample), decoded))
    print("ok   %s (vocabulary %d): prompt %d ids as tokenizers'; sample %r" %
          (kind, V, len(prompt), text_out[:60]))
    stop_at(kind, d, sp, tj, tok, sample)
    without_data(kind, d, sp, tj, sample)
    prompt_file(kind, d, sp, tj, tok)
    # a tokenizer whose ids pass the model's: refused before training
    with open(sp, "w") as f:
        json.dump(spec(200, "data"), f)
    r = subprocess.run([TRAINC, "run", sp, "--out", d + "/run_small", "--sample", "5",
                        "--prompt", "zzzz Licensor", "--tokenizer", tj], capture_output=True,
                       text=True)
    if r.returncode != 1 or "past the model's 200 ids" not in r.stderr or os.path.exists(d + "/run_small"):
        sys.exit("FAIL: %s: a prompt id past the vocabulary: exit %d, %r" % (kind, r.returncode,
                                                                           r.stderr))
    print("ok   %s: a prompt id past the model's vocabulary refused: %s" % (kind, r.stderr.strip()))


shutil.rmtree(OUT, ignore_errors=True)
run("gpt2", 600)
run("llama3", 700)
run("sp_llama2", 700)
