"""Llama-family options that HF's LlamaForCausalLM lacks, step by step against the
PyTorch reference of tests/llama_torch.py (written from SPEC.md; tests/llama_hf.py
checks it against HF where HF has the op).

Seven tiny models (vocabulary 256, d 64, 2 layers, 4 heads, T 32) from the same random
weights on both sides, each trained 40 AdamW steps with warmup, cosine decay and
gradient clipping on the same windows of data/text, fp32, one thread; every step's
loss within 1e-4 relative:
  - options: GQA (2 KV heads), heads 32 wide (head_dim: a core of 128 over d 64),
    attention biases, qk_norm, a window of 8, RoPE with llama3 scaling (factor 8,
    original context 64: one frequency kept, two interpolated, the rest divided),
    SwiGLU, untied;
  - squared_relu_tied: the embedding scaled by sqrt(d) (Gemma's), one KV head, biases,
    a partial RoPE (dims 6 of 16), a squared_relu MLP (4d), a head tied to the embedding, RMSNorm's
    default eps;
  - glu_gelu_window: multi-head (kv_heads left out), heads 12 wide (a core of 48),
    qk_norm without RoPE, a window of 3, a GeGLU MLP (glu act gelu_tanh);
  - gemma3: Gemma 3's layout: the embedding scaled by sqrt(d), a norm after each
    branch as well as before it, one KV head 24 wide, qk_norm, a window of 5 on the
    first layer and none on the second (interleave every 2) with its own RoPE theta,
    the scores scaled by 0.25 rather than 1 / sqrt(24) (Gemma 3 27B's
    query_pre_attn_scalar), GeGLU, tied;
  - gemma2: Gemma 2's layout: Gemma 3's without qk_norm, the attention's scores and the
    logits soft-capped (caps of 0.2 over scores scaled by 4, and 0.5: tight enough to bend
    them at this init), the second layer global;
  - smollm3: SmolLM3's layout: Llama's with the second layer of two without RoPE
    (interleave every 2), tied; RoPE with linear scaling (factor 2); with qk_norm and
    RoPE theta 100 here, so that the positions count from the first step (at 0.02
    init, q k^T is too small for a RoPE dropped to change 40 steps' losses by 1e-4);
  - olmo2: OLMo 2's layout: a norm after each branch and none before it, qk_norm
    "all_heads" (one RMSNorm over all of q's heads, one over all of k's; eps 1e-5) with
    GQA, RoPE theta 100 with yarn scaling (factor 4: the frequencies ramped, cos and sin
    times 0.1 ln 4 + 1), SwiGLU, untied.
Before that, the reference's own consistency: a window of T is no window, llama3
scaling with factor 1 is none, and qk_norm's output has each head's RMS equal to its
weight's.

    $PYTHON tests/llama_ref.py [--reference-only] [NAME...]
"""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt

OUT = os.path.join(lt.ROOT, "build", "tests", "llama_ref")
V, D, L, H, T, B, STEPS = 256, 64, 2, 4, 32, 8, 40
torch.set_num_threads(1)


def model(name, att, mlp, tie=False, norm=None, scale=None, post_norms=False, cap=None,
          pre_norms=True):
    norm = norm or {}
    pre = lambda n: [dict({"op": "rmsnorm", "name": n}, **norm)] if pre_norms else []
    # the logits soft-capped (Gemma 2's final_logit_softcapping): / cap, tanh, * cap
    capped = [{"op": "scale", "by": 1 / cap}, {"op": "tanh"}, {"op": "scale", "by": cap}] if cap else []
    post = lambda n: [dict({"op": "rmsnorm", "name": n}, **norm)] if post_norms else []
    head = {"op": "linear", "name": "lm_head", "out": V, "bias": False}
    if tie:
        head["tie"] = "embed"
    scaled = [{"op": "scale", "by": scale}] if scale else []
    return {
        "name": name,
        "inputs": {"x": {"shape": [T], "dtype": "i32"},
                   "y": {"shape": [T], "dtype": "i32", "classes": V}},
        "layers": [
            {"op": "embedding", "name": "embed", "vocab": V, "dim": D, "input": "x"}] + scaled + [
            {"op": "repeat", "name": "layers", "count": L, "body": [
                {"op": "residual", "body": pre("attn_norm") +
                 [dict({"op": "attention", "name": "attn", "heads": H}, **att)] + post("attn_post_norm")},
                {"op": "residual", "body": pre("mlp_norm") + mlp + post("mlp_post_norm")}]},
            dict({"op": "rmsnorm", "name": "norm"}, **norm),
            head] + capped,
        "loss": {"op": "cross_entropy", "target": "y"}}


def swiglu(act, hidden, bias=False):
    return [{"op": "linear", "name": "gate_up", "out": 2 * hidden, "bias": bias},
            {"op": "glu", "act": act},
            {"op": "linear", "name": "down", "out": D, "bias": bias}]


# yarn: the ramp from pair 0 to pair 5 of 8 (heads 16 wide, theta 100, an original context
# of 64), cos and sin times 0.1 ln 4 + 1
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 64}
MODELS = {
    "options": model("options", {"kv_heads": 2, "bias": True, "qk_norm": True, "window": 8,
                                 "head_dim": 32, "rope": {"theta": 10000, "scaling": SCALING}},
                     swiglu("silu", 128), norm={"eps": 1e-5}),
    "squared_relu_tied": model("squared_relu_tied", {"kv_heads": 1, "bias": True,
                                                     "rope": {"theta": 10000, "dims": 6}},
                               [{"op": "linear", "name": "fc", "out": 4 * D},
                                {"op": "squared_relu"},
                                {"op": "linear", "name": "proj", "out": D}], tie=True,
                               scale=D ** 0.5),
    "glu_gelu_window": model("glu_gelu_window", {"bias": False, "qk_norm": True, "window": 3,
                                                 "head_dim": 12},
                             swiglu("gelu_tanh", 96)),
    "gemma3": model("gemma3", {"kv_heads": 1, "bias": False, "qk_norm": True, "head_dim": 24,
                               "window": 5, "rope": {"theta": 10000}, "scale": 0.25,
                               "interleave": {"every": 2, "window": None, "rope": {"theta": 1000000}}},
                    swiglu("gelu_tanh", 96), tie=True, scale=D ** 0.5, post_norms=True),
    "gemma2": model("gemma2", {"kv_heads": 2, "bias": False, "head_dim": 24, "window": 5,
                               "rope": {"theta": 10000}, "scale": 4.0, "softcap": 0.2,
                               "interleave": {"every": 2, "window": None}},
                    swiglu("gelu_tanh", 96), tie=True, scale=D ** 0.5, post_norms=True, cap=0.5),
    "smollm3": model("smollm3", {"kv_heads": 2, "bias": False, "qk_norm": True,
                                 "rope": {"theta": 100, "scaling": {"rope_type": "linear", "factor": 2}},
                                 "interleave": {"every": 2, "rope": None}},
                     swiglu("silu", 128), tie=True),
    "olmo2": model("olmo2", {"kv_heads": 2, "bias": False, "qk_norm": "all_heads", "eps": 1e-5,
                             "rope": {"theta": 100, "scaling": YARN}},
                   swiglu("silu", 128), norm={"eps": 1e-5}, post_norms=True, pre_norms=False),
}


def reference_checks(x):
    """The reference's options where they must reduce to something simpler."""
    ok = True
    base = MODELS["options"]
    P = lt.init_params(base, seed=3)

    def variant(**att):
        m = copy.deepcopy(base)
        m["layers"][1]["body"][0]["body"][1].update(att)
        with torch.no_grad():
            return lt.logits(m, P, x)
    same = [("window T", variant(window=T), variant(window=None)),
            ("llama3 factor 1", variant(rope={"theta": 10000, "scaling": dict(SCALING, factor=1.0)}),
             variant(rope={"theta": 10000})),
            ("rope dims of the whole head", variant(rope={"theta": 10000, "dims": 32}),
             variant(rope={"theta": 10000}))]
    for what, a, b in same:
        d = (a - b).abs().max().item()
        print("%s reference: %s is the plain op (max |difference| %.1e)" % ("ok  " if d < 1e-6 else "FAIL", what, d))
        ok &= d < 1e-6
    inv = lt.rope_inv_freq({"theta": 10000, "scaling": SCALING}, D // H, T)
    plain = lt.rope_inv_freq({"theta": 10000}, D // H, T)
    r = (plain / inv).tolist()   # 1 (kept), between 1 and 8 (interpolated), 8 (divided)
    kinds = (r[0] == 1, 1 < r[1] < 8 and 1 < r[2] < 8, all(abs(v - 8) < 1e-5 for v in r[3:]))
    print("%s reference: llama3 scaling divides the frequencies by %s" % (
        "ok  " if all(kinds) else "FAIL", " ".join("%.3g" % v for v in r)))
    ok &= all(kinds)
    w = torch.rand(16) + 0.5
    q = lt.rmsnorm(torch.randn(3, 5, 16) * 7, w, 1e-6)
    d = ((q / w).pow(2).mean(-1).sqrt() - 1).abs().max().item()
    print("%s reference: qk_norm's RMS per head is 1 before its weight (%.1e)" % ("ok  " if d < 1e-5 else "FAIL", d))
    return ok and d < 1e-5


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    x, y = lt.token_windows(T, STEPS * B)
    ok = reference_checks(x[:B])
    if "--reference-only" in sys.argv[1:]:
        sys.exit(0 if ok else 1)
    for name in args or MODELS:
        m = MODELS[name]
        sp = {"trainc": 1, "model": m, "train": lt.train_spec(STEPS, B)}
        P = lt.init_params(m, seed=1)
        ours = lt.run_trainc(sp, P.t, os.path.join(OUT, name))
        fwd = lambda xb: lt.logits(m, P, xb)
        ref = lt.train_torch(fwd, list(P.t.values()), sp["train"], x, y, V)
        ok &= lt.compare("trainc vs reference %s" % name, ours, ref, 1e-4)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
