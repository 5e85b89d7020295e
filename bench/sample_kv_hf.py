#!/usr/bin/env python3
"""transformers' generate on the CPU for bench/sample_kv.sh: LlamaForCausalLM in
specs/llama_124m.json's shape (random weights, fp32), greedy, with its key/value cache
(use_cache=True, its default), one thread per core given; with K, a batch of K copies of
the prompt. Prints one JSON line: tokens (over the batch), seconds (generate's wall time,
the prompt's prefill included), tokens_per_s.
    python bench/sample_kv_hf.py PROMPT_IDS N THREADS [K]"""
import json, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

prompt, n, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
k = int(sys.argv[4]) if len(sys.argv) > 4 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=50257, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=1024,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
model = LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, 50257, (1, prompt)).repeat(k, 1)
with torch.no_grad():
    model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)   # warm-up
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True)
    dt = time.perf_counter() - t0
got = (out.shape[1] - prompt) * k
print(json.dumps({"tokens": got, "seconds": round(dt, 4), "tokens_per_s": round(got / dt, 2)}))
