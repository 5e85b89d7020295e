"""Writes fuzz_hf's seeds into fuzz/corpus/hf/: tiny random-weight Hugging Face
folders (save_pretrained, no hub) flattened as fuzz_hf reads them, config.json, then
"HF|" and model.safetensors, or "HF|" model.safetensors.index.json and each shard
(named s1.safetensors, s2.safetensors, ...). A GPT-2 (tied), a Llama (GQA, untied), a
Mistral with a sliding window, a Qwen2, a Llama with Llama 3's rope_scaling, a Qwen3
config over the Llama's tensors with q_norm and k_norm, a Phi-3 config over them fused,
a SmolLM3 config over them, a Gemma (tied, heads 8 wide over 8 / 2), a Gemma 3 config
over the Gemma's tensors with its four norms a layer and q_norm, k_norm, a Gemma 2 config
over them without q_norm and k_norm (its soft-caps and query_pre_attn_scalar), a Granite
config over the Llama's tensors (its four multipliers), the Llama in bf16 in two
shards, a StarCoder2 (biases, a window, tied), a GPTBigCode (one key/value head),
the Phi-3 config with longrope's rope_scaling (and with Phi-4-mini's partial rope), a StableLM (a partial rope, q, k and v
biased), a Nemotron config over the StarCoder2's tensors renamed (relu2, a partial
rope, norms by 1 + weight), a GPT-NeoX (the branches in parallel, qkv by head), a Phi
(in parallel off one norm, the head biased), a Falcon of the new architecture (key/value
head groups), an OLMo (layernorms without weights), a Cohere (a layernorm without
bias, adjacent rope pairs), a GPT-J (a partial rope of adjacent pairs), a Mixtral (2
experts, top 1), an OLMoE config over its tensors renamed (q and k norms over all
heads, the experts' weights as the router gives them), a Qwen3-MoE config over them
(q and k norms per head), a Qwen2-MoE (2 experts, top 1, a gated shared expert) and a
Granite-MoE config over the Mixtral's tensors stacked (its experts' weights [E, rows,
cols], Granite's factors), a ViTForImageClassification (8x8 images in 4x4 patches) and
a ResNetForImageClassification (bottleneck layers; its counts I64); the text
classifiers of text_seed.

    .venv/hf/bin/python fuzz/seeds_hf.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import (LlamaForSequenceClassification, GemmaConfig, GemmaForCausalLM, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Starcoder2Config,
                          Starcoder2ForCausalLM, GPTBigCodeConfig, GPTBigCodeForCausalLM,
                          StableLmConfig, StableLmForCausalLM, GPTNeoXConfig,
                          GPTNeoXForCausalLM, PhiConfig, PhiForCausalLM, FalconConfig,
                          FalconForCausalLM, OlmoConfig, OlmoForCausalLM, CohereConfig,
                          CohereForCausalLM, GPTJConfig, GPTJForCausalLM, OPTConfig,
                          OPTForCausalLM, GPTNeoConfig, GPTNeoForCausalLM, MixtralConfig,
                          MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, ViTConfig,
                          ViTForImageClassification, ResNetConfig, ResNetForImageClassification,
                          BertConfig, BertForSequenceClassification,
                          BertForTokenClassification, RobertaConfig,
                          RobertaForSequenceClassification, RobertaForMaskedLM,
                          XLMRobertaConfig, XLMRobertaForTokenClassification,
                          DistilBertConfig,
                          DistilBertForSequenceClassification)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "hf")
SEP = b"HF|"


def tensors(model, dtype=torch.float32):
    """the state dict as save_pretrained writes it: a tied head left out"""
    tied = model.config.tie_word_embeddings
    return {n: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).clone()
            for n, t in model.state_dict().items() if not (tied and n == "lm_head.weight")}


def st_bytes(ts):
    path = OUT + "/.tmp.safetensors"
    save_file(ts, path, metadata={"format": "pt"})
    data = open(path, "rb").read()
    os.remove(path)
    assert SEP not in data, "the separator inside a safetensors file: change the seed"
    return data


def config_bytes(model, extra=None):
    cfg = model.config.to_dict()
    cfg.update(extra or {})
    return json.dumps(cfg, indent=1).encode()


def seed(name, parts):
    open(os.path.join(OUT, name), "wb").write(SEP.join(parts))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    small = dict(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_embd=8, n_layer=1, n_head=2,
                                      n_positions=16))
    seed("gpt2", [config_bytes(gpt2), st_bytes(tensors(gpt2))])
    llama = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **small))
    seed("llama", [config_bytes(llama), st_bytes(tensors(llama))])
    mistral = MistralForCausalLM(MistralConfig(sliding_window=4, **small))
    seed("mistral", [config_bytes(mistral), st_bytes(tensors(mistral))])
    qwen2 = Qwen2ForCausalLM(Qwen2Config(**small))
    seed("qwen2", [config_bytes(qwen2), st_bytes(tensors(qwen2))])
    rope = {"rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}}
    seed("llama3_rope", [config_bytes(llama, rope), st_bytes(tensors(llama))])
    qwen3 = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
             "head_dim": 4, "use_sliding_window": False, "sliding_window": None,
             "max_window_layers": 1}
    ts = tensors(llama)
    ts.update({"model.layers.0.self_attn.%s_norm.weight" % c: torch.ones(4) for c in "qk"})
    seed("qwen3", [config_bytes(llama, qwen3), st_bytes(ts)])
    ts = tensors(llama)
    a, m = "model.layers.0.self_attn.", "model.layers.0.mlp."
    ts[a + "qkv_proj.weight"] = torch.cat([ts.pop(a + c + "_proj.weight") for c in "qkv"])
    ts[m + "gate_up_proj.weight"] = torch.cat([ts.pop(m + c + "_proj.weight") for c in ("gate", "up")])
    phi3 = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "sliding_window": 8,
            "original_max_position_embeddings": 16, "embd_pdrop": 0.0}
    seed("phi3", [config_bytes(llama, phi3), st_bytes(ts)])
    phi3_ts = ts
    smol = {"model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"],
            "no_rope_layers": [0], "use_sliding_window": False}
    seed("smollm3", [config_bytes(llama, smol), st_bytes(tensors(llama))])
    gemma = GemmaForCausalLM(GemmaConfig(head_dim=8, hidden_activation="gelu_pytorch_tanh", **small))
    seed("gemma", [config_bytes(gemma), st_bytes(tensors(gemma))])
    ts = tensors(gemma)
    p = "model.layers.0."
    ts[p + "pre_feedforward_layernorm.weight"] = ts[p + "post_attention_layernorm.weight"].clone()
    ts[p + "post_feedforward_layernorm.weight"] = torch.zeros(8)
    ts.update({p + "self_attn.%s_norm.weight" % c: torch.zeros(8) for c in "qk"})
    gemma3 = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
              "query_pre_attn_scalar": 8, "sliding_window": 4, "sliding_window_pattern": 2,
              "rope_local_base_freq": 10000.0, "final_logit_softcapping": None,
              "attn_logit_softcapping": None, "hidden_act": None}
    seed("gemma3", [config_bytes(gemma, gemma3), st_bytes(ts)])
    # Gemma 2: Gemma 3's tensors without q_norm and k_norm, its caps and scalar
    ts2 = {n: t for n, t in ts.items() if "_norm.weight" not in n or "self_attn" not in n}
    gemma2 = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
              "query_pre_attn_scalar": 6, "sliding_window": 4, "attn_logit_softcapping": 50.0,
              "final_logit_softcapping": 30.0, "cache_implementation": "hybrid"}
    seed("gemma2", [config_bytes(gemma, gemma2), st_bytes(ts2)])
    # Granite: Llama's tensors and its four factors
    granite = {"model_type": "granite", "architectures": ["GraniteForCausalLM"],
               "embedding_multiplier": 12.0, "attention_multiplier": 0.015625,
               "residual_multiplier": 0.22, "logits_scaling": 8.0}
    seed("granite", [config_bytes(llama, granite), st_bytes(tensors(llama))])
    # the multimodal checkpoint (Gemma 3 4B's form): the text config nested and sparse,
    # the global layers' rope scaled, the text model under language_model.model., a
    # vision tensor beside it
    text = json.loads(config_bytes(gemma, dict(gemma3, rope_scaling={"rope_type": "linear",
                                                                        "factor": 8.0})))
    for k in ("architectures", "torch_dtype", "transformers_version"):
        text.pop(k, None)
    mm = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
          "text_config": text, "vision_config": {"hidden_size": 8}, "mm_tokens_per_image": 4}
    mts = {"language_model." + n: t for n, t in ts.items()}
    mts["vision_tower.vision_model.post_layernorm.weight"] = torch.zeros(8)
    seed("gemma3_mm", [json.dumps(mm, indent=1).encode(), st_bytes(mts)])
    ts = tensors(llama, torch.bfloat16)
    names = sorted(ts)
    shards = [names[:len(names) // 2], names[len(names) // 2:]]
    index = {"metadata": {"total_size": sum(t.numel() * 2 for t in ts.values())},
             "weight_map": {n: "s%d.safetensors" % (k + 1)
                            for k, part in enumerate(shards) for n in part}}
    seed("llama_bf16_sharded", [config_bytes(llama), json.dumps(index, indent=1).encode()] +
         [st_bytes({n: ts[n] for n in part}) for part in shards])
    starcoder2 = Starcoder2ForCausalLM(Starcoder2Config(sliding_window=4, **small))
    seed("starcoder2", [config_bytes(starcoder2), st_bytes(tensors(starcoder2))])
    torch.manual_seed(1)
    bigcode = GPTBigCodeForCausalLM(GPTBigCodeConfig(vocab_size=16, n_embd=8, n_layer=1, n_head=2,
                                                     n_positions=16))
    seed("gpt_bigcode", [config_bytes(bigcode), st_bytes(tensors(bigcode))])
    # Phi-3's 128k form: longrope's two factor lists (heads 4 wide: 2 each)
    longrope = dict(phi3, max_position_embeddings=64, rope_scaling={
        "type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 9.0]})
    seed("phi3_longrope", [config_bytes(llama, longrope), st_bytes(phi3_ts)])
    # Phi-4-mini's form: half of each head rotated, a factor per rotated pair
    phi4 = dict(longrope, partial_rotary_factor=0.5, rope_scaling={
        "type": "longrope", "short_factor": [1.0], "long_factor": [3.0], "attention_factor": 1.2})
    seed("phi4_mini", [config_bytes(llama, phi4), st_bytes(phi3_ts)])
    torch.manual_seed(2)
    stablelm = StableLmForCausalLM(StableLmConfig(use_qkv_bias=True, partial_rotary_factor=0.5,
                                                  **small))
    seed("stablelm", [config_bytes(stablelm), st_bytes(tensors(stablelm))])
    nemotron = dict(small, model_type="nemotron", architectures=["NemotronForCausalLM"],
                    hidden_act="relu2", partial_rotary_factor=0.5, attention_bias=True,
                    mlp_bias=True, norm_eps=1e-5, tie_word_embeddings=True)
    nts = {n.replace("c_fc", "up_proj").replace("c_proj", "down_proj"): t
           for n, t in tensors(starcoder2).items()}
    seed("nemotron", [json.dumps(nemotron, indent=1).encode(), st_bytes(nts)])
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                                            num_attention_heads=2, intermediate_size=16,
                                            max_position_embeddings=16, rotary_pct=0.5))
    seed("gpt_neox", [config_bytes(neox), st_bytes(tensors(neox))])
    phi = PhiForCausalLM(PhiConfig(intermediate_size=16, **{k: v for k, v in small.items()
                                                              if k != "intermediate_size"}))
    seed("phi", [config_bytes(phi), st_bytes(tensors(phi))])
    falcon = FalconForCausalLM(FalconConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                                            num_attention_heads=2, num_kv_heads=1,
                                            new_decoder_architecture=True,
                                            max_position_embeddings=16))
    seed("falcon", [config_bytes(falcon), st_bytes(tensors(falcon))])
    olmo = OlmoForCausalLM(OlmoConfig(**small))
    seed("olmo", [config_bytes(olmo), st_bytes(tensors(olmo))])
    cohere = CohereForCausalLM(CohereConfig(**small))
    seed("cohere", [config_bytes(cohere), st_bytes(tensors(cohere))])
    # Cohere 2 (transformers 4.48 on): Cohere's tensors, windows, its global layers every
    # second without window and rope
    cohere2 = {"model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"], "head_dim": 4,
               "sliding_window": 4, "sliding_window_pattern": 2, "cache_implementation": "hybrid"}
    seed("cohere2", [config_bytes(cohere, cohere2), st_bytes(tensors(cohere))])
    gptj = GPTJForCausalLM(GPTJConfig(vocab_size=16, n_embd=8, n_layer=1, n_head=2, rotary_dim=2,
                                      n_positions=16))
    seed("gptj", [config_bytes(gptj), st_bytes(tensors(gptj))])
    # OLMo 2 (transformers 4.47 on): Llama's tensors, a norm after each branch and none
    # before it, q_norm and k_norm over all heads
    ts = tensors(llama)
    p = "model.layers.0."
    ts[p + "post_feedforward_layernorm.weight"] = ts.pop(p + "input_layernorm.weight")
    ts[p + "self_attn.q_norm.weight"], ts[p + "self_attn.k_norm.weight"] = torch.ones(8), torch.ones(4)
    olmo2 = {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "rms_norm_eps": 1e-5}
    seed("olmo2", [config_bytes(llama, olmo2), st_bytes(ts)])
    # GLM (transformers 4.46 on): Llama's tensors with q, k and v biased and the MLP's gate
    # and up fused, half of each head rotated
    ts = tensors(llama)
    a, m = "model.layers.0.self_attn.", "model.layers.0.mlp."
    ts[m + "gate_up_proj.weight"] = torch.cat([ts.pop(m + c + "_proj.weight") for c in ("gate", "up")])
    ts.update({a + c + "_proj.bias": torch.zeros(n) for c, n in (("q", 8), ("k", 4), ("v", 4))})
    glm = {"model_type": "glm", "architectures": ["GlmForCausalLM"], "head_dim": 4,
           "partial_rotary_factor": 0.5, "attention_bias": True, "pad_token_id": None}
    seed("glm", [config_bytes(llama, glm), st_bytes(ts)])
    opt = OPTForCausalLM(OPTConfig(vocab_size=16, hidden_size=8, ffn_dim=16, num_hidden_layers=1,
                                   num_attention_heads=2, max_position_embeddings=16,
                                   word_embed_proj_dim=8))
    seed("opt", [config_bytes(opt), st_bytes(tensors(opt))])
    neo = GPTNeoForCausalLM(GPTNeoConfig(vocab_size=16, hidden_size=8, num_layers=2, num_heads=2,
                                         max_position_embeddings=16, window_size=4,
                                         attention_types=[[["global", "local"], 1]]))
    seed("gpt_neo", [config_bytes(neo), st_bytes(tensors(neo))])
    mixtral = MixtralForCausalLM(MixtralConfig(num_local_experts=2, num_experts_per_tok=1, **small))
    seed("mixtral", [config_bytes(mixtral), st_bytes(tensors(mixtral))])
    # OLMoE (transformers 4.45 on): the Mixtral's tensors under Llama's MLP names, q_norm
    # and k_norm over all heads
    ts = {}
    for n, t in tensors(mixtral).items():
        n = n.replace("block_sparse_moe.", "mlp.")
        for a, b in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            n = n.replace("." + a + ".", "." + b + ".")
        ts[n] = t
    p = "model.layers.0.self_attn."
    ts[p + "q_norm.weight"], ts[p + "k_norm.weight"] = torch.ones(8), torch.ones(4)
    olmoe = {"model_type": "olmoe", "architectures": ["OlmoeForCausalLM"], "num_experts": 2,
             "norm_topk_prob": False, "clip_qkv": None}
    cfg = {k: v for k, v in mixtral.config.to_dict().items()
           if k not in ("num_local_experts", "sliding_window")}
    cfg.update(olmoe)
    seed("olmoe", [json.dumps(cfg, indent=1).encode(), st_bytes(ts)])
    # Qwen3-MoE (transformers 4.51 on): the OLMoE's tensors with per-head q and k norms
    for c in "qk":
        ts[p + c + "_norm.weight"] = torch.ones(4)
    cfg.update({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
                "moe_intermediate_size": 16, "head_dim": 4, "rms_norm_eps": 1e-6,
                "decoder_sparse_step": 1, "mlp_only_layers": []})
    del cfg["clip_qkv"]
    seed("qwen3_moe", [json.dumps(cfg, indent=1).encode(), st_bytes(ts)])
    qwen2_moe = Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=2, num_experts_per_tok=1,
                                                   moe_intermediate_size=16,
                                                   shared_expert_intermediate_size=8, **small))
    seed("qwen2_moe", [config_bytes(qwen2_moe), st_bytes(tensors(qwen2_moe))])
    # Granite-MoE (transformers 4.45 on): the Mixtral's experts stacked, Granite's factors
    ts, p = {}, "model.layers.0.block_sparse_moe."
    for n, t in tensors(mixtral).items():
        if ".experts." not in n:
            ts[n.replace(p + "gate.", p + "router.layer.")] = t
    ex = lambda k, w: tensors(mixtral)["%sexperts.%d.%s.weight" % (p, k, w)]
    ts[p + "input_linear.weight"] = torch.stack([torch.cat([ex(k, "w1"), ex(k, "w3")]) for k in range(2)])
    ts[p + "output_linear.weight"] = torch.stack([ex(k, "w2") for k in range(2)])
    cfg = {k: v for k, v in mixtral.config.to_dict().items() if k != "sliding_window"}
    cfg.update({"model_type": "granitemoe", "architectures": ["GraniteMoeForCausalLM"],
                "embedding_multiplier": 12.0, "attention_multiplier": 0.25,
                "residual_multiplier": 0.22, "logits_scaling": 6.0})
    seed("granitemoe", [json.dumps(cfg, indent=1).encode(), st_bytes(ts)])
    vit_seed()
    text_seed()


def vit_seed():
    """ViTForImageClassification (compiler/hf_vit.c) and ResNetForImageClassification
    (compiler/hf_resnet.c), 3 classes"""
    torch.manual_seed(0)
    vit = ViTForImageClassification(ViTConfig(image_size=8, patch_size=4, num_channels=1,
                                              hidden_size=8, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=16,
                                              num_labels=3))
    seed("vit", [config_bytes(vit), st_bytes(tensors(vit))])
    resnet = ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16],
                                                       depths=[1, 1], num_labels=3))
    seed("resnet", [config_bytes(resnet), st_bytes(tensors(resnet))])


def text_seed():
    """BertForSequenceClassification, RobertaForSequenceClassification and
    DistilBertForSequenceClassification (compiler/hf_bert.c), 3 classes; a
    BertForTokenClassification, a RobertaForMaskedLM; a LlamaForSequenceClassification, and
    one of one output (a reward model); an XLMRobertaForTokenClassification"""
    torch.manual_seed(0)
    small = dict(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=16, num_labels=3)
    for name, m in (("bert", BertForSequenceClassification(BertConfig(max_position_embeddings=16,
                                                                        **small))),
                    ("roberta", RobertaForSequenceClassification(RobertaConfig(
                        max_position_embeddings=18, type_vocab_size=1, pad_token_id=1, **small))),
                    ("distilbert", DistilBertForSequenceClassification(DistilBertConfig(
                        vocab_size=16, dim=8, n_layers=1, n_heads=2, hidden_dim=16,
                        max_position_embeddings=16, num_labels=3)))):
        seed(name, [config_bytes(m), st_bytes(tensors(m))])
    tok = BertForTokenClassification(BertConfig(max_position_embeddings=16, **small))
    seed("bert_tokens", [config_bytes(tok), st_bytes(tensors(tok))])
    mlm = RobertaForMaskedLM(RobertaConfig(max_position_embeddings=18, type_vocab_size=1,
                                           pad_token_id=1, **small))
    seed("roberta_mlm", [config_bytes(mlm), st_bytes(tensors(mlm))])
    cls = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16, num_labels=3,
        pad_token_id=0))
    arch = {"architectures": ["LlamaForSequenceClassification"]}   # (as save_pretrained)
    seed("llama_cls", [config_bytes(cls, arch), st_bytes(tensors(cls))])
    reward = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16, num_labels=1,
        pad_token_id=0))
    seed("llama_reward", [config_bytes(reward, arch), st_bytes(tensors(reward))])
    xlmr = XLMRobertaForTokenClassification(XLMRobertaConfig(
        max_position_embeddings=18, type_vocab_size=1, pad_token_id=1, **small))
    seed("xlmr_tokens", [config_bytes(xlmr), st_bytes(tensors(xlmr))])


if __name__ == "__main__":
    main()
