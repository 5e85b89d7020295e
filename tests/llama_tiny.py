#!/usr/bin/python3
"""llama_tiny.py: specs/gpt_char.json with a tiny Llama's blocks in place of GPT-2's, the
spec tests/zero.sh, recompute.sh and fake_gpu.sh train: two blocks of rmsnorm and
attention (4 heads), rmsnorm and a SwiGLU MLP (a linear of 2h without bias, glu, a
linear back), then rmsnorm and a bias-free head; data paths as seen from
build/tests/NAME/.

    /usr/bin/python3 tests/llama_tiny.py OUT.json [--llama-attention] [--squared-relu] [--scale]
                                         [--interleave] [--gemma-heads] [--softcap]
                                         [--all-heads-norm] [--moe] [--moe-aux]
                                         [--moe-shared] [--T N]

--llama-attention gives the attention every Llama-family option (kv_heads, no biases,
qk_norm, a window, rope with llama3 scaling); --squared-relu adds a residual MLP
through squared_relu after the blocks; --scale scales the embedding by sqrt(64) as Gemma
does; --interleave gives the attention rope and a window of 8 with the second block
global (no window, another rope theta) as Gemma 3's are; --gemma-heads gives it Gemma 3
1B's heads: 4 of them 256 wide (head_dim) over one key/value head, with qk_norm, and a
scale of their own (0.08 for 1/16, as Gemma 3 27B's query_pre_attn_scalar sets one);
--softcap soft-caps the attention's scores at 2 (Gemma 2's attn_logit_softcapping, small
enough to bend them); --all-heads-norm gives it OLMo 2's qk_norm (one RMSNorm over all
of q's heads, one over all of k's two key/value heads, eps 1e-5); --moe makes the MLP a
mixture of experts (4 of them, each token's top 2, each expert a SwiGLU MLP 64 wide, as
Mixtral's); --moe-aux gives those its load-balancing loss too (aux_loss 0.02);
--moe-shared gives them a shared expert 32 wide gated by a sigmoid (Qwen2-MoE's); --T
sets the inputs' length.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_ATTENTION = {"kv_heads": 2, "bias": False, "qk_norm": True, "window": 40, "rope": {
    "theta": 10000, "scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                "high_freq_factor": 4, "original_max_position_embeddings": 64}}}


INTERLEAVE = {"rope": {"theta": 10000}, "window": 8,
              "interleave": {"every": 2, "window": None, "rope": {"theta": 100}}}
GEMMA_HEADS = {"heads": 4, "kv_heads": 1, "head_dim": 256, "qk_norm": True, "bias": False,
               "scale": 0.08}


def spec(llama_attention=False, squared_relu=False, T=None, scale=False, interleave=False,
         gemma_heads=False, softcap=False, all_heads=False, moe=False, moe_aux=False,
         moe_shared=False):
    s = json.load(open(os.path.join(ROOT, "specs", "gpt_char.json")))
    m = s["model"]
    m["name"] = "llama_tiny"
    if T:
        m["inputs"]["x"]["shape"] = m["inputs"]["y"]["shape"] = [T]
    attn = {"op": "attention", "name": "attn", "heads": 4}
    if llama_attention:
        attn.update(LLAMA_ATTENTION)
    if interleave:
        attn.update(INTERLEAVE)
    if gemma_heads:
        attn.update(GEMMA_HEADS)
    if softcap:
        attn["softcap"] = 2.0
    if all_heads:
        attn.update({"kv_heads": 2, "qk_norm": "all_heads", "eps": 1e-5})
    m["layers"] = [
        {"op": "embedding", "name": "wte", "vocab": 256, "dim": 64, "input": "x"},
        {"op": "repeat", "name": "h", "count": 2, "body": [
            {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_1"}, attn]},
            {"op": "residual", "body": [{"op": "rmsnorm", "name": "ln_2"},
                                        {"op": "linear", "name": "fc", "out": 256, "bias": False},
                                        {"op": "glu"},
                                        {"op": "linear", "name": "proj", "out": 64, "bias": False}]}]}]
    if moe or moe_aux or moe_shared:
        m["layers"][1]["body"][1]["body"][1:] = [
            {"op": "moe", "name": "moe", "experts": 4, "top_k": 2, "hidden": 64}]
        if moe_aux:
            m["layers"][1]["body"][1]["body"][1]["aux_loss"] = 0.02
        if moe_shared:
            m["layers"][1]["body"][1]["body"][1].update(shared=32, shared_gate=True)
    if scale:
        m["layers"].insert(1, {"op": "scale", "by": 8})
    if squared_relu:
        m["layers"].append(
            {"op": "residual", "name": "sq", "body": [
                {"op": "rmsnorm", "name": "ln"}, {"op": "linear", "name": "fc", "out": 96, "bias": False},
                {"op": "squared_relu"}, {"op": "linear", "name": "proj", "out": 64, "bias": False}]})
    m["layers"] += [{"op": "rmsnorm", "name": "ln_f"},
                    {"op": "linear", "name": "lm_head", "out": 256, "bias": False}]
    for k in ("train", "val"):
        s["train"]["data"][k]["tokens"] = s["train"]["data"][k]["tokens"].replace("../data", "../../../data")
    return s


def main():
    args = sys.argv[1:]
    T = int(args[args.index("--T") + 1]) if "--T" in args else None
    s = spec("--llama-attention" in args, "--squared-relu" in args, T, "--scale" in args,
             "--interleave" in args, "--gemma-heads" in args, "--softcap" in args,
             "--all-heads-norm" in args, "--moe" in args, "--moe-aux" in args,
             "--moe-shared" in args)
    json.dump(s, open(args[0], "w"), indent=1)


if __name__ == "__main__":
    main()
