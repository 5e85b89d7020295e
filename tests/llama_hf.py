"""A tiny Llama against Hugging Face transformers' LlamaForCausalLM, step by step.

HF_PYTHON (the venv `make deps` makes, transformers 4.40.2 over Debian's torch) runs
this. A random LlamaForCausalLM (GQA: 4 heads, 2 KV heads; RoPE theta 10000; RMSNorm
eps 1e-5; SwiGLU hidden 128; no biases; untied head; vocabulary 256, d 64, 2 layers,
T 32; eager attention) gives the initial weights, saved under trainc's names
(qkv.weight = HF's q_proj, k_proj, v_proj weights one after the other; the SwiGLU
`linear` before `glu` = gate_proj then up_proj), with the RMSNorm weights moved off 1
so that a misplaced one shows. trainc trains the matching spec and HF trains itself,
40 AdamW steps with warmup, cosine decay and gradient clipping on the same windows of
data/text (byte-level), fp32, one thread: every step's loss within 1e-4 relative.

First the oracle check that tests/llama_ref.py relies on: the SPEC reference of
tests/llama_torch.py, from the same weights, must reproduce HF's logits bit for bit
(and so the first loss), and its 40 training losses to float rounding (1e-6: the
clipping norm sums per-tensor norms, and trainc's qkv and gate_up are one tensor
each where HF has three and two), for this model, for the same with attention
biases and a tied head (HF's attention_bias, tie_word_embeddings), and for a sliding
window of 8 (HF's MistralForCausalLM with sliding_window 7: transformers 4.40 lets a
query see that many positions before itself, SPEC's window counts itself).

Then a mixture of experts: a random MixtralForCausalLM (the same attention, the MLP 4
SwiGLU experts 48 wide, each token's top 2, their weights renormalized) against
trainc's `moe` layer (router.weight = HF's gate, experts.up.weight [E, 2h, d] each
expert's w1 then w3, experts.down.weight [E, d, h] each expert's w2), 40 steps as
above: every step's loss within 1e-4 relative; and with transformers' load-balancing
loss (output_router_logits, router_aux_loss_coef 0.1: trainc's aux_loss), its loss
included; and so with masked prompts (targets -100 before each window's completion:
the loss's ignore_index, which transformers' loss always has). Then a random Qwen2MoeForCausalLM (q, k and v biased; the same experts, their
weights the router's probabilities as they are, and a shared expert 40 wide gated by a
sigmoid: the moe layer's shared and shared_gate, shared.up.weight its gate_proj, up_proj
and shared_expert_gate rows), 40 steps as above.

    $HF_PYTHON tests/llama_hf.py [--oracle-only]
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ignore_parity   # noqa: E402  (masked prompts as .npy data)
import llama_torch as lt

try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM
except ImportError:
    print("skip llama_hf: transformers is not importable from %s (make deps makes a venv "
          "with it; HF_PYTHON names its python)" % sys.executable)
    sys.exit(77)

OUT = os.path.join(lt.ROOT, "build", "tests", "llama_hf")
V, D, L, H, KV, FF, T, B, STEPS = 256, 64, 2, 4, 2, 128, 32, 8, 40
THETA, EPS = 10000.0, 1e-5
EXPERTS, TOP_K, EXPERT_FF, SHARED_FF = 4, 2, 48, 40
torch.set_num_threads(1)


def moe_spec(aux=0.0, shared=0):
    """spec() with Mixtral's MLP: a moe layer in place of gate_up, glu and down; with
    shared, Qwen2-MoE's (q, k and v biased, a gated shared expert, weights unnormalized)."""
    sp = spec(bias="qkv" if shared else False)
    mlp = sp["model"]["layers"][1]["body"][1]["body"]
    mlp[1:] = [{"op": "moe", "name": "moe", "experts": EXPERTS, "top_k": TOP_K, "hidden": EXPERT_FF}]
    if aux:
        mlp[1]["aux_loss"] = aux
    if shared:
        mlp[1].update(shared=shared, shared_gate=True, norm_topk=False)
    return sp


def mixtral_model(seed=0, aux=0.0):
    torch.manual_seed(seed)
    m = MixtralForCausalLM(MixtralConfig(
        vocab_size=V, hidden_size=D, intermediate_size=EXPERT_FF, num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T, rms_norm_eps=EPS,
        rope_theta=THETA, tie_word_embeddings=False, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K, output_router_logits=aux > 0, router_aux_loss_coef=aux,
        attn_implementation="eager"))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn(p.shape))
    return m


def moe_layer_weights(sd, i, moe, names, bias=False):
    """Layer i of an HF mixture's state dict under trainc's names: the attention's as
    Llama's (q, k and v's biases with bias), the router and each expert's gate, up and
    down projections (NAMES) stacked; MOE the HF MLP's prefix."""
    p, q = "model.layers.%d." % i, "layers.%d." % i
    a, e = p + "self_attn.", p + moe
    w = {q + "attn_norm.weight": sd[p + "input_layernorm.weight"],
         q + "attn.proj.weight": sd[a + "o_proj.weight"],
         q + "mlp_norm.weight": sd[p + "post_attention_layernorm.weight"],
         q + "moe.router.weight": sd[e + "gate.weight"]}
    for kind in ("weight", "bias") if bias else ("weight",):
        w[q + "attn.qkv." + kind] = torch.cat([sd[a + c + "_proj." + kind] for c in "qkv"])
    ex = lambda k, n: sd["%sexperts.%d.%s.weight" % (e, k, n)]
    gate, up, down = names
    w[q + "moe.experts.up.weight"] = torch.stack([torch.cat([ex(k, gate), ex(k, up)])
                                                 for k in range(EXPERTS)])
    w[q + "moe.experts.down.weight"] = torch.stack([ex(k, down) for k in range(EXPERTS)])
    return w


def head_weights(sd):
    return {"embed.weight": sd["model.embed_tokens.weight"], "norm.weight": sd["model.norm.weight"],
            "lm_head.weight": sd["lm_head.weight"]}


def mixtral_weights(m):
    """HF's Mixtral state dict under trainc's names: the attention's as Llama's, each
    layer's experts stacked."""
    sd = {n: t.detach().clone() for n, t in m.state_dict().items()}
    w = head_weights(sd)
    for i in range(L):
        w.update(moe_layer_weights(sd, i, "block_sparse_moe.", ("w1", "w3", "w2")))
    return w


def qwen2_moe_model(seed=0):
    torch.manual_seed(seed)
    m = Qwen2MoeForCausalLM(Qwen2MoeConfig(
        vocab_size=V, hidden_size=D, intermediate_size=EXPERT_FF, num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T, rms_norm_eps=EPS,
        rope_theta=THETA, tie_word_embeddings=False, num_experts=EXPERTS,
        num_experts_per_tok=TOP_K, moe_intermediate_size=EXPERT_FF,
        shared_expert_intermediate_size=SHARED_FF, attn_implementation="eager"))
    with torch.no_grad():   # the shared expert and its gate large enough to move the loss
        for n, p in m.named_parameters():
            if "norm" in n or n.endswith(".bias"):
                p.add_(0.1 * torch.randn(p.shape))
            elif "shared_expert" in n:
                p.mul_(30 if "shared_expert_gate" in n else 8)
    return m


def qwen2_moe_weights(m):
    """HF's Qwen2-MoE state dict under trainc's names: Mixtral's mapping under Qwen's
    names, q, k and v's biases, the shared expert's rows with its gate's last."""
    sd = {n: t.detach().clone() for n, t in m.state_dict().items()}
    w = head_weights(sd)
    for i in range(L):
        w.update(moe_layer_weights(sd, i, "mlp.", ("gate_proj", "up_proj", "down_proj"), bias=True))
        e, q = "model.layers.%d.mlp." % i, "layers.%d.moe.shared." % i
        s = e + "shared_expert."
        w[q + "up.weight"] = torch.cat([sd[s + "gate_proj.weight"], sd[s + "up_proj.weight"],
                                        sd[e + "shared_expert_gate.weight"]])
        w[q + "down.weight"] = sd[s + "down_proj.weight"]
    return w


def spec(bias=False, tie=False, window=None):
    """The trainc spec of the HF model (the shape the issue gives for Llama)."""
    att = {"op": "attention", "name": "attn", "heads": H, "kv_heads": KV, "bias": bias,
           "rope": {"theta": THETA}}
    if window:
        att["window"] = window
    head = {"op": "linear", "name": "lm_head", "out": V, "bias": False}
    if tie:
        head["tie"] = "embed"
    model = {
        "name": "llama_hf",
        "inputs": {"x": {"shape": [T], "dtype": "i32"},
                   "y": {"shape": [T], "dtype": "i32", "classes": V}},
        "layers": [
            {"op": "embedding", "name": "embed", "vocab": V, "dim": D, "input": "x"},
            {"op": "repeat", "name": "layers", "count": L, "body": [
                {"op": "residual", "body": [{"op": "rmsnorm", "name": "attn_norm", "eps": EPS}, att]},
                {"op": "residual", "body": [
                    {"op": "rmsnorm", "name": "mlp_norm", "eps": EPS},
                    {"op": "linear", "name": "gate_up", "out": 2 * FF, "bias": False},
                    {"op": "glu", "act": "silu"},
                    {"op": "linear", "name": "down", "out": D, "bias": False}]}]},
            {"op": "rmsnorm", "name": "norm", "eps": EPS},
            head],
        "loss": {"op": "cross_entropy", "target": "y"}}
    return {"trainc": 1, "model": model, "train": lt.train_spec(STEPS, B)}


def hf_model(bias=False, tie=False, window=None, seed=0):
    kw = dict(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=L,
              num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T,
              rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=tie, hidden_act="silu",
              attn_implementation="eager")
    torch.manual_seed(seed)
    if window:
        assert not bias
        # transformers 4.40's mask lets a query see sliding_window keys before itself
        # (diagonal -sliding_window - 1 in _make_causal_mask; flash-attn's window_size
        # alike): W + 1 positions, SPEC's window W + 1
        m = MistralForCausalLM(MistralConfig(sliding_window=window - 1, **kw))
    else:
        m = LlamaForCausalLM(LlamaConfig(attention_bias=bias, **kw))
    assert m.config._attn_implementation == "eager", m.config._attn_implementation
    with torch.no_grad():   # norm weights off 1 and biases off 0, so each one counts
        for n, p in m.named_parameters():
            if "norm" in n or n.endswith(".bias"):
                p.add_(0.1 * torch.randn(p.shape))
    return m


def trainc_weights(m, bias, tie):
    """HF's state dict under trainc's names (fresh tensors)."""
    sd = {n: t.detach().clone() for n, t in m.state_dict().items()}
    w = {"embed.weight": sd["model.embed_tokens.weight"], "norm.weight": sd["model.norm.weight"]}
    if not tie:
        w["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(L):
        p, q = "model.layers.%d." % i, "layers.%d." % i
        a = p + "self_attn."
        w[q + "attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        w[q + "attn.qkv.weight"] = torch.cat([sd[a + "q_proj.weight"], sd[a + "k_proj.weight"],
                                              sd[a + "v_proj.weight"]])
        w[q + "attn.proj.weight"] = sd[a + "o_proj.weight"]
        if bias:
            w[q + "attn.qkv.bias"] = torch.cat([sd[a + "q_proj.bias"], sd[a + "k_proj.bias"],
                                                sd[a + "v_proj.bias"]])
            w[q + "attn.proj.bias"] = sd[a + "o_proj.bias"]
        w[q + "mlp_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        w[q + "gate_up.weight"] = torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        w[q + "down.weight"] = sd[p + "mlp.down_proj.weight"]
    return w


def hf_losses(m, sp, x, y):
    def fwd(xb):
        out = m(input_ids=xb)
        if getattr(m.config, "output_router_logits", False):   # the load-balancing loss
            return out.logits, m.config.router_aux_loss_coef * out.aux_loss
        return out.logits
    return lt.train_torch(fwd, list(m.parameters()), sp["train"], x, y, V)


def ref_losses(sp, w, x, y):
    P = lt.Params()
    P.t = {n: t.clone() for n, t in w.items()}
    return lt.train_torch(lambda xb: lt.logits(sp["model"], P, xb), list(P.t.values()), sp["train"],
                          x, y, V)


def oracle(x, y):
    """The SPEC reference against HF: logits and 40 steps, three variants."""
    ok = True
    for name, kw in [("llama", {}), ("llama bias+tied", {"bias": True, "tie": True}),
                     ("mistral window 8", {"window": 8})]:
        m = hf_model(**kw)
        sp = spec(**kw)
        w = trainc_weights(m, kw.get("bias", False), kw.get("tie", False))
        P = lt.Params()
        P.t = w
        with torch.no_grad():
            a, b = lt.logits(sp["model"], P, x[:B]), m(input_ids=x[:B]).logits
        same = torch.equal(a, b)
        print("%s reference vs HF %s: logits %s (max |difference| %.1e)" % (
            "ok  " if same else "FAIL", name, "bit for bit" if same else "differ", (a - b).abs().max().item()))
        ours, theirs = ref_losses(sp, w, x, y), hf_losses(m, sp, x, y)
        ok &= same and ours[0] == theirs[0]
        ok &= lt.compare("reference vs HF %s" % name, ours, theirs, 1e-6)
    return ok


# optimizer.type muon (tests/llama_torch.py's Muon reference, torch.optim.Muon's update):
# its keys off their defaults, the adamw group's too; then the other lr adjustment,
# without Nesterov, fewer iterations
MUON = [("muon", {"type": "muon", "lr": 0.02, "momentum": 0.9, "weight_decay": 0.05,
                  "adamw": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}}),
        ("muon_rms", {"type": "muon", "lr": 2e-3, "nesterov": False, "ns_steps": 3,
                      "adjust_lr": "match_rms_adamw"})]


def muon(x, y):
    """trainc's muon against the reference over HF's Llama: q, k, v, o and the MLP's
    three projections Muon's, the embedding, norms and head AdamW's"""
    ok = True
    for name, o in MUON:
        m = hf_model()
        sp = spec()
        sp["train"]["optimizer"] = o
        ours = lt.run_trainc(sp, trainc_weights(m, False, False), OUT + "_" + name)
        theirs = lt.train_torch(lambda xb: m(input_ids=xb).logits, list(m.parameters()),
                                sp["train"], x, y, V,
                                opts=lt.muon_optimizers(dict(m.named_parameters()), o))
        ok &= lt.compare("trainc vs HF LlamaForCausalLM, optimizer %s" % json.dumps(o), ours,
                         theirs, 1e-4)
    # trainc check names the split: the reference's Muon matrices (HF's q, k, v apart: 3
    # of trainc's blocks in one qkv tensor) and AdamW's rest
    mu = [p for g in lt.muon_optimizers(dict(m.named_parameters()), o)[0].param_groups
          for p in g["params"]]
    want = "muon on %d hidden matrices (%d parameters), adamw on %d" % (
        4 * L, sum(p.numel() for p in mu), sum(p.numel() for p in m.parameters()) -
        sum(p.numel() for p in mu))
    r = subprocess.run([lt.TRAINC, "check", OUT + "_muon_rms/spec.json"], capture_output=True,
                       text=True)
    got = [l.strip() for l in r.stdout.splitlines() if l.strip().startswith("optimizer")]
    same = got == ["optimizer    " + want]
    print("%s trainc check: %s" % ("ok  " if same else "FAIL", got))
    return ok and same


def main():
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    x, y = lt.token_windows(T, STEPS * B)
    ok = oracle(x, y)
    if "--oracle-only" in sys.argv[1:]:
        sys.exit(0 if ok else 1)
    m = hf_model()
    sp = spec()
    w = trainc_weights(m, False, False)
    ours = lt.run_trainc(sp, w, OUT)
    ok &= lt.compare("trainc vs HF LlamaForCausalLM", ours, hf_losses(m, sp, x, y), 1e-4)
    ok &= muon(x, y)
    m = mixtral_model()
    sp = moe_spec()
    ours = lt.run_trainc(sp, mixtral_weights(m), OUT + "_moe")
    ok &= lt.compare("trainc vs HF MixtralForCausalLM", ours, hf_losses(m, sp, x, y), 1e-4)
    m = mixtral_model(aux=0.1)
    sp = moe_spec(aux=0.1)
    ours = lt.run_trainc(sp, mixtral_weights(m), OUT + "_moe_aux")
    ok &= lt.compare("trainc vs HF MixtralForCausalLM, load-balancing loss", ours,
                     hf_losses(m, sp, x, y), 1e-4)
    # masked prompts (the loss's ignore_index -100, transformers' own), with the
    # load-balancing loss: its weight the whole batch's, the mean over the targets counted
    m = mixtral_model(aux=0.1)
    sp = moe_spec(aux=0.1)
    ym = ignore_parity.mask_prompts(y, np.random.default_rng(4))
    sp["model"]["loss"]["ignore_index"] = -100
    sp["train"]["data"] = {"train": ignore_parity.npy_data(OUT + "_moe_sft", x, ym)}
    ours = lt.run_trainc(sp, mixtral_weights(m), OUT + "_moe_sft")
    ok &= lt.compare("trainc vs HF MixtralForCausalLM, load-balancing loss, masked prompts", ours,
                     hf_losses(m, sp, x, ym), 1e-4)
    m = qwen2_moe_model()
    sp = moe_spec(shared=SHARED_FF)
    ours = lt.run_trainc(sp, qwen2_moe_weights(m), OUT + "_qwen2_moe")
    ok &= lt.compare("trainc vs HF Qwen2MoeForCausalLM, a gated shared expert", ours,
                     hf_losses(m, sp, x, y), 1e-4)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
