#!/usr/bin/env python3
"""--sample's key/value cache (the decode program, compiler/decode.c) against the window's
pass, for each attention option and the other layers a language model has.

For each variant of gpt_char (2 blocks) a trainer trains 3 steps, then samples 150 tokens
from a 15-byte prompt (prefilled 4 positions a pass, batch_size 4) under
TRAINC_KV_CACHE=check, which computes every token the cache serves by the window's pass
too: the cache must serve the 114 tokens before the window (T 128) slides, and its logits
must be the window's within 1e-5 of the largest logit. Without the check the sampled
bytes must be those of TRAINC_KV_CACHE=0 (the window's pass alone). For two variants,
--num-samples 3 under the check: for each of the 114 tokens the three rows' logits the
window's over the three contexts, the first sample the one sample's, the bytes the same
without the cache; --num-samples 5 past batch_size 4 refused before training. A model
that is not position by position (attention over all positions) has no decode program:
its host.c has no decode(), and the check serves no token.

--fake-gpu=LIB (tests/fake_gpu_kv.sh; LIB: the fake GPU's libraries, tests/fake_gpu/): each
variant is also built for both devices and samples on the fake GPU (the decode program's
kernels, templates/cuda/decode.cuh, in the emulator) under the check: the cache serves
the 114 tokens, its logits the GPU window's within 1e-5 of the largest (bf16-mixed: 2e-2,
the cache holds fp32 keys where the window's pass reads 16-bit ones), and in fp32 the
bytes are the CPU's; the one-token passes after the second are a CUDA graph's launches
(counted in the fake GPU's trace), and with TRAINC_CUDA_GRAPH=0 there are none and the
bytes are the same (the first 40). The GQA variant's three samples together
(--num-samples 3, with the cache) are the CPU's bytes, their tokens' passes a graph's
launches too; where the GPU has no room for their caches (TRAINC_FAKE_GPU_OOM_BYTES), the
window's pass draws them.
"""
import copy, json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINC = os.path.join(ROOT, os.environ.get("TRAINC", "build/trainc"))
FAKE_LIB = ([a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--fake-gpu=")] or [None])[0]
OUT = os.path.join(ROOT, "build", "tests", "kv_cache_gpu" if FAKE_LIB else "kv_cache")
os.makedirs(OUT, exist_ok=True)
LLAMA3 = {"theta": 500000, "scaling": {"rope_type": "llama3", "factor": 32, "low_freq_factor": 1,
                                       "high_freq_factor": 4, "original_max_position_embeddings": 64}}
YARN = {"theta": 10000, "dims": 16, "scaling": {"rope_type": "yarn", "factor": 4,
                                                "original_max_position_embeddings": 32}}
LONG = {"theta": 10000, "scaling": {"rope_type": "longrope", "factor": 4, "original_max_position_embeddings": 64,
                                    "short_factor": [1 + j / 16 for j in range(16)],
                                    "long_factor": [2 + j / 8 for j in range(16)]}}

def precision(s, p): s["train"]["precision"] = p
def moe(s):   # the MLP's residual body: a layernorm and a mixture of experts with a shared one
    s["model"]["layers"][2]["body"][1]["body"] = [
        {"op": "layernorm", "name": "ln_2"},
        {"op": "moe", "name": "moe", "experts": 4, "top_k": 2, "hidden": 64, "shared": 32}]
def scaled_logits(s):   # rmsnorm, squared_relu, and logits that a fused loop writes last
    mlp = s["model"]["layers"][2]["body"][1]["body"]
    mlp[0] = {"op": "rmsnorm", "name": "ln_2"}
    mlp[2] = {"op": "squared_relu"}
    s["model"]["layers"] += [{"op": "tanh"}, {"op": "scale", "by": 30}]

def lora_chunked_head(s):   # adapters on qkv; the rest frozen, an untied head over 1030 ids
    s["model"]["layers"][0]["vocab"] = 1030   # (chunked in the window's programs alone: its
    s["model"]["layers"][-1] = {"op": "linear", "name": "lm_head", "out": 1030, "bias": False}
    s["model"]["inputs"]["y"]["classes"] = 1030   # frozen weight lies elsewhere there)
    s["train"]["lora"] = {"rank": 4, "alpha": 8, "targets": ["*.qkv.weight"]}

# name: (attention options, a change to the rest of the spec or None)
VARIANTS = {
    "gpt": ({}, None),
    "gqa_qknorm_window_llama3": ({"kv_heads": 2, "bias": False, "qk_norm": True, "window": 40, "rope": LLAMA3}, None),
    "softcap_scale_qkvbias_allheads": ({"kv_heads": 1, "bias": "qkv", "qk_norm": "all_heads", "softcap": 20,
                                        "scale": 0.1, "rope": {"theta": 10000}}, None),
    "yarn_partial": ({"rope": YARN, "bias": "proj"}, None),
    "longrope": ({"rope": LONG, "kv_heads": 2}, None),
    "interleave": ({"window": 16, "rope": {"theta": 10000},
                    "interleave": {"every": 2, "window": None, "rope": None}}, None),
    "bf16_mixed": ({"kv_heads": 2, "rope": {"theta": 10000}}, lambda s: precision(s, "bf16-mixed")),
    "moe": ({"kv_heads": 2, "rope": {"theta": 10000}}, moe),
    "scaled_logits": ({}, scaled_logits),
    "lora_chunked_head": ({"kv_heads": 2, "rope": {"theta": 10000}}, lora_chunked_head),
    "full_attention": ({"causal": False}, None),
}


def spec(name, opts, change):
    s = json.load(open(os.path.join(ROOT, "specs", "gpt_char.json")))
    s["model"]["name"] = name
    s["model"]["layers"][2]["count"] = 2
    s["model"]["layers"][2]["body"][0]["body"][1].update(copy.deepcopy(opts))
    for k in ("train", "val"):
        s["train"]["data"][k]["tokens"] = os.path.join(ROOT, "data", "text", k + "_*.bin")
    if change:
        change(s)
    path = os.path.join(OUT, name + ".json")
    json.dump(s, open(path, "w"), indent=1)
    return path


def sample(path, run, env_value, exe=None, more_env=None, n=1, tokens=150, prompts=None,
           prompt="The license is ", extra=()):
    """150 tokens from the prompt by `trainc run` (or exe, a trainer built for both devices,
    on the fake GPU, more_env added to its environment); n > 1: --num-samples n; prompts:
    --prompt-file's (the output whole)"""
    env = dict(os.environ, TRAINC_KV_CACHE=env_value)
    cmd = [TRAINC, "run", path] if not exe else [exe, "--device", "cuda"]
    if exe:
        env.update(LD_LIBRARY_PATH=FAKE_LIB, TRAINC_CACHE_DIR=os.path.join(OUT, "cache"), **(more_env or {}))
    p = subprocess.run(cmd + ["--eval", "--init", os.path.join(run, "model.safetensors"),
                        "--quiet", "--threads", "2", "--sample", str(tokens), "--set", "batch_size=4",
                        "--temperature", "0.9", "--sample-seed", "5"] + (["--num-samples", str(n)] if n > 1 else []) +
                       (["--prompt-file", prompts] if prompts else ["--prompt", prompt]) + list(extra),
                       env=env, capture_output=True)
    if p.returncode != 0:
        sys.exit("FAIL %s: exit %d: %s" % (path, p.returncode, p.stderr.decode()[-2000:]))
    return p.stdout.split(b"\n", 1)[1], p.stderr.decode()


def samples(text):
    """--num-samples' output: the samples, each as one sample's output (its bytes, a newline)"""
    return re.split(rb"--- sample \d+ of \d+ ---\n", text)[1:]


failed = 0
def verdict(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def check_line(name, err):
    """the check's (tokens, worst), or None"""
    m = re.search(r"key/value cache check: (\d+) tokens, the largest difference (\S+) of", err)
    if not m:
        verdict(False, "%s: no check line in: %s" % (name, err[-500:]))
        return None
    return int(m.group(1)), float(m.group(2))


def on_fake_gpu(name, path, run, cpu_text):
    """the variant's trainer for both devices, sampling on the fake GPU"""
    exe = os.path.join(OUT, name + "_both")
    env = dict(os.environ, LD_LIBRARY_PATH=FAKE_LIB, TRAINC_CACHE_DIR=os.path.join(OUT, "cache"))
    subprocess.run([TRAINC, "build", path, "--device", "both", "--arch", "sm_90a", "-o", exe],
                   check=True, capture_output=True, env=env)
    text, err = sample(path, run, "check", exe, {"TRAINC_FAKE_GPU_TRACE": "1"})
    got = check_line(name + " on the fake GPU", err)
    if not got:
        return
    tol = 2e-2 if name == "bf16_mixed" else 1e-5
    verdict(got[0] == 114 and got[1] < tol,
            "%s on the fake GPU: the cache served %d tokens, logits within %.2g of the window's"
            % (name, got[0], got[1]))
    # the 15-byte prompt in 4 passes gives the first token; the 113 after it are one-row
    # passes: the first as always, the second captured (and launched), 112 graph launches
    graphs = err.count("fake GPU: launch graph")
    verdict(graphs == 112, "%s on the fake GPU: %d one-token passes launched as a CUDA graph" % (name, graphs))
    if tol == 1e-5:
        verdict(text == cpu_text, "%s on the fake GPU: the CPU's %d sampled bytes" % (name, len(text)))
    if name == "gqa_qknorm_window_llama3":   # three samples; call by call; over 4 slices of the cache
        several(name, path, run, text, exe, sample(path, run, "1", n=3)[0])   # (the CPU's: sample/kv_cache checks them)
        plain, err = sample(path, run, "1", exe, {"TRAINC_CUDA_GRAPH": "0", "TRAINC_FAKE_GPU_TRACE": "1"},
                            tokens=40)
        verdict(plain == text[:40] + b"\n" and "launch graph" not in err,
                "%s on the fake GPU, TRAINC_CUDA_GRAPH=0: no graph, the same first %d bytes" % (name, len(plain) - 1))
        split, err = sample(path, run, "check", exe, {"TRAINC_DECODE_SPLITS": "4"})
        got = check_line(name + " in slices", err)
        verdict(got and got[1] < 1e-5 and split == text,
                "%s on the fake GPU, TRAINC_DECODE_SPLITS=4: logits within %.2g of the window's, "
                "the same bytes" % (name, got[1] if got else float("nan")))


# --num-samples 3: the prompt's cache copied to three sequences, then a pass of three rows
# (each its own sequence and cache) a token; on the fake GPU the second alone
SEVERAL = ("gpt", "gqa_qknorm_window_llama3")

def several(name, path, run, one, exe=None, cpu=None):
    """three samples together: on the CPU under the check (every row's logits the window's
    over the three contexts), the first the one sample's, the three the same without the
    cache; on the fake GPU (with the cache alone: the window's pass of three rows a token is
    slow there) the CPU's bytes (cpu), a token's passes a CUDA graph's launches. The text."""
    if exe:
        text, err = sample(path, run, "1", exe, {"TRAINC_FAKE_GPU_TRACE": "1"}, n=3)
        graphs = err.count("fake GPU: launch graph")
        verdict(graphs == 112 and text == cpu, "%s on the fake GPU --num-samples 3: the CPU's %d bytes, %d passes "
                "of a token launched as a CUDA graph" % (name, len(text), graphs))
        # no room for the three caches (2 layers, K and V, 2 heads of 32, T 128, fp32): the
        # window's pass each token, the same samples (their first 20 tokens)
        per = 2 * 2 * 2 * 32 * 128 * 4
        cut, err = sample(path, run, "1", exe, {"TRAINC_FAKE_GPU_OOM_BYTES": str(3 * per)}, n=3, tokens=20)
        want = [x[:20] + b"\n" for x in samples(cpu)]
        verdict("no room on the GPU for the key/value cache (0.4 MiB)" in err and samples(cut) == want,
                "%s on the fake GPU --num-samples 3, no room for the caches: the window's pass, the same "
                "first 20 bytes of each" % name)
        # --prompt-file: three prompts of different lengths together (each row at its own
        # place); with --num-samples 2 two prompts, then one, the token's graph captured
        # again for the second group's rows: the CPU's bytes
        pf = os.path.join(OUT, "prompts.txt")
        with open(pf, "w") as f:
            f.write("\n".join(PROMPTS))
        for n in (1, 2):
            gpu, err = sample(path, run, "1", exe, {"TRAINC_FAKE_GPU_TRACE": "1"}, n=n, tokens=20, prompts=pf)
            cpu_pf, _ = sample(path, run, "1", n=n, tokens=20, prompts=pf)
            alone = cpu_pf if n == 1 else alone
            graphs = err.count("fake GPU: launch graph")
            verdict(gpu == cpu_pf and gpu.count(b"--- prompt") == 3 and graphs == (18 if n == 1 else 36),
                    "%s on the fake GPU --prompt-file (3 prompts), --num-samples %d: the CPU's %d bytes, %d "
                    "token passes as a CUDA graph" % (name, n, len(gpu), graphs))
        # room for one sequence's cache, not three: the prompts one at a time, the same bytes
        cut, err = sample(path, run, "1", exe, {"TRAINC_FAKE_GPU_OOM_BYTES": str(3 * per)}, tokens=20, prompts=pf)
        verdict("room on the GPU for 1 of the 3 sequences' key/value caches" in err and cut == alone
                and "no room" not in err,
                "%s on the fake GPU --prompt-file, room for one cache of three: the prompts in turn, the CPU's "
                "%d bytes" % (name, len(cut)))
        return text
    text, err = sample(path, run, "check", n=3)
    got = check_line(name + " --num-samples 3", err)
    if not got:
        return None
    three = samples(text)
    verdict(got[0] == 114 and got[1] < 1e-5 and len(three) == 3 and three[0] == one and three[1] != one,
            "%s --num-samples 3: the cache served %d tokens of each, logits within %.2g of the window's, "
            "the first sample the one sample's" % (name, got[0], got[1]))
    window, _ = sample(path, run, "0", n=3)
    verdict(window == text, "%s --num-samples 3: the same %d bytes without the cache" % (name, len(text)))
    prompt_file(name, path, run)
    # more samples than the batch's rows: exit 1 before training, nothing written
    out = os.path.join(OUT, name + "_five")
    p = subprocess.run([TRAINC, "run", path, "--set", "batch_size=4", "--quiet", "--out", out, "--sample", "5",
                        "--num-samples", "5"], capture_output=True, text=True)
    verdict(p.returncode == 1 and "--num-samples 5: at most the batch size, 4" in p.stderr and not os.path.exists(out),
            "%s --num-samples 5 at batch_size 4: exit 1 before training (%s)" % (name, p.stderr.strip()[-120:]))
    return text


# --prompt-file's prompts drawn together, as many as a pass's rows hold
PROMPTS = ("The license is ", "Copy", "You may not ")

def prompt_file(name, path, run):
    """three prompts of 15, 4 and 12 bytes at batch_size 4: a group of three sequences
    (--num-samples 2: a group of two prompts, then one), each at its own position with a
    cache of its own, 120 tokens each (the first window slides before the second's: the
    window's pass from then on). Under the check every row's logits are the window's over
    the three contexts; each prompt's part is what --prompt with it prints; the same
    without the cache. With --num-samples 2 the bytes 101 and 32 ("e", " ") stop the
    sequences, so that some end before the others (the ended ones leave the passes)."""
    pf = os.path.join(OUT, name + "_prompts.txt")
    with open(pf, "w") as f:
        f.write("\n".join(PROMPTS))
    for n in (1, 2):
        stops = ["--stop", "101", "--stop", "32"] if n == 2 else []
        text, err = sample(path, run, "check", n=n, tokens=120, prompts=pf, extra=stops)
        got = check_line("%s --prompt-file --num-samples %d" % (name, n), err)
        alone = b"".join(b"--- prompt %d of 3 ---\n" % (k + 1) +
                         sample(path, run, "1", n=n, tokens=120, prompt=p, extra=stops)[0]
                         for k, p in enumerate(PROMPTS))
        window, _ = sample(path, run, "0", n=n, tokens=120, prompts=pf, extra=stops)
        verdict(got and got[0] > 0 and got[1] < 1e-5 and text == alone and window == text,
                "%s --prompt-file (3 prompts), --num-samples %d: the cache served %d of the groups' tokens, logits "
                "within %.2g of the window's; each prompt's %d bytes as --prompt's, the same without the cache"
                % (name, n, got[0] if got else -1, got[1] if got else float("nan"), len(text)))


def variant(name, opts, change):
    path = spec(name, opts, change)
    run = os.path.join(OUT, name)
    subprocess.run([TRAINC, "run", path, "--set", "max_steps=3", "--set", "batch_size=4", "--set", "data.val=null",
                    "--threads", "2", "--quiet", "--out", run], check=True, capture_output=True)
    emitted = os.path.join(OUT, name + "_src")
    subprocess.run([TRAINC, "emit", path, "-o", emitted], check=True, capture_output=True)
    has_decode = "static void decode(rt_exec *e)" in open(os.path.join(emitted, "host.c")).read()
    text, err = sample(path, run, "check")
    got = check_line(name, err)
    if not got:
        return
    tokens, worst = got
    if name == "full_attention":
        verdict(not has_decode and tokens == 0, "%s: no decode program, no token from a cache" % name)
        return
    verdict(has_decode and tokens == 114 and worst < 1e-5,
            "%s: the cache served %d tokens, logits within %.2g of the window's" % (name, tokens, worst))
    if FAKE_LIB:   # (the bytes with the cache and without: sample/kv_cache's part)
        on_fake_gpu(name, path, run, text)
        return
    plain, _ = sample(path, run, "1")
    window, _ = sample(path, run, "0")
    verdict(plain == window and text == plain and len(plain) >= 150,
            "%s: the same %d sampled bytes with the cache and without" % (name, len(plain)))
    if name in SEVERAL:
        several(name, path, run, text)


names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(VARIANTS)
for name in names:
    variant(name, *VARIANTS[name])
sys.exit(1 if failed else 0)
