"""A Llama-3.2-1B-shaped Hugging Face checkpoint with random weights, and the check of
its fine-tuned export, for bench/gpu_hf.sh (the device has no hub and perhaps no
transformers: this needs numpy alone to make the folder).

    hf_llama1b.py make DIR TOKENIZER [--tiny]
        DIR/config.json: LlamaForCausalLM exactly as Llama-3.2-1B's (vocabulary 128256,
        d 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, RoPE theta 500000 with
        llama3 scaling, RMSNorm eps 1e-5, tied embeddings), bf16;
        DIR/model.safetensors: its 1,235,814,400 parameters under transformers'
        state_dict names (the tied head left out, as save_pretrained leaves it),
        N(0, 0.02) for the matrices and ones for the norms, from a fixed seed, written
        a tensor at a time (2.5 GB; memory stays at one tensor);
        DIR/tokenizer.json: a copy of TOKENIZER.
        --tiny: the same architecture at d 64, 2 layers, vocabulary 32768 (a dry run).
    hf_llama1b.py check DIR SHARD LOSS T
        loads the exported DIR: with transformers, from_pretrained in bf16 on the GPU
        (the CPU without one) and its mean cross-entropy over SHARD's windows (those
        trainc's --eval reads: at 0, T, 2T, ...) against trainc's --eval LOSS (bf16 on
        both sides, different kernels: within 1% relative); without transformers, the
        safetensors header against config.json (every name transformers loads, its
        shape and dtype), and says that transformers was absent.
Prints one JSON line; exits 1 when a check fails.
"""
import json, os, shutil, struct, sys

import numpy as np

ONE_B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, head_dim=64)
TINY = dict(vocab_size=32768, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def config(shape):
    c = dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False,
             attention_dropout=0.0, mlp_bias=False, hidden_act="silu", initializer_range=0.02,
             max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
             rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"},
             tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
             torch_dtype="bfloat16", use_cache=True, pretraining_tp=1)
    c.update(shape)
    return c


def tensors(c):
    """(name, shape, kind) in transformers' order; kind "w" (random) or "one" (a norm)"""
    D, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (V, D), "w")]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.q_proj.weight", (q, D), "w"), (p + "self_attn.k_proj.weight", (kv, D), "w"),
                (p + "self_attn.v_proj.weight", (kv, D), "w"), (p + "self_attn.o_proj.weight", (D, q), "w"),
                (p + "mlp.gate_proj.weight", (F, D), "w"), (p + "mlp.up_proj.weight", (F, D), "w"),
                (p + "mlp.down_proj.weight", (D, F), "w"),
                (p + "input_layernorm.weight", (D,), "one"), (p + "post_attention_layernorm.weight", (D,), "one")]
    return out + [("model.norm.weight", (D,), "one")]


def bf16(a):
    """float32 -> bf16 bits, round to nearest even"""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def make(d, tok, tiny):
    c = config(TINY if tiny else ONE_B)
    os.makedirs(d, exist_ok=True)
    ts = tensors(c)
    header, off = {}, 0
    for name, shape, _ in ts:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(1234)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape, kind in ts:
            a = np.ones(shape, np.float32) if kind == "one" else rng.standard_normal(shape, np.float32) * 0.02
            f.write(bf16(a).tobytes())
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    shutil.copy(tok, os.path.join(d, "tokenizer.json"))
    n = sum(int(np.prod(s)) for _, s, _ in ts)
    print(json.dumps({"made": d, "parameters": n, "bytes": off}))


def header_check(d):
    c = json.load(open(os.path.join(d, "config.json")))
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    want = {name: list(shape) for name, shape, _ in tensors(dict(c, head_dim=c.get("head_dim") or
                                                                 c["hidden_size"] // c["num_attention_heads"]))}
    if not c.get("tie_word_embeddings"):
        want["lm_head.weight"] = [c["vocab_size"], c["hidden_size"]]
    got = {k: v["shape"] for k, v in h.items() if k != "__metadata__"}
    bad = sorted(set(want) ^ set(got)) + sorted(k for k in want if k in got and want[k] != got[k])
    return bad, c


def check(d, shard, want, T):
    bad, c = header_check(d)
    row = {"check": "export", "dir": d, "tensors_mismatched": bad[:5], "trainc_eval_loss": want}
    try:
        import torch
        import torch.nn.functional as F
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        row.update(transformers=None, why=str(e), ok=not bad)
        print(json.dumps(row))
        sys.exit(0 if not bad else 1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    import transformers
    try:   # a transformers older than 4.43 refuses llama3's rope_scaling, for one
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.bfloat16).to(dev).eval()
    except Exception as e:
        row.update(transformers=transformers.__version__, load_error=str(e)[:300], ok=False)
        print(json.dumps(row))
        sys.exit(1)
    hdr = np.fromfile(shard, dtype="<i4", count=256)
    ids = np.fromfile(shard, dtype={20240520: "<u2", 20240801: "<u4"}[int(hdr[0])], offset=1024)
    ids = torch.from_numpy(ids.astype(np.int64))
    n = (len(ids) - 1) // T
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for w in range(n):
            x = ids[w * T:w * T + T].to(dev)[None]
            y = ids[w * T + 1:w * T + T + 1].to(dev)
            logits = m(input_ids=x).logits[0].float()
            tot += F.cross_entropy(logits, y, reduction="sum").item()
            cnt += T
    loss = tot / cnt
    rel = abs(loss - want) / abs(want)
    row.update(transformers=transformers.__version__, device=dev, windows=n, loss=loss, rel=rel,
               ok=not bad and rel <= 0.01)
    print(json.dumps(row))
    sys.exit(0 if row["ok"] else 1)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["make"] and len(a) >= 3:
        make(a[1], a[2], "--tiny" in a)
    elif a[:1] == ["check"] and len(a) == 5:
        check(a[1], a[2], float(a[3]), int(a[4]))
    else:
        sys.exit(__doc__)
