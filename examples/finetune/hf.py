"""The Hugging Face side of examples/finetune/run.sh, both ends of the path.

    hf.py make DIR          a model folder as the hub would give one: a Llama-3-style
                            byte-level BPE tokenizer trained on /usr/share/common-licenses
                            (DIR/tokenizer.json) and a tiny random LlamaForCausalLM over
                            its vocabulary (grouped-query attention, untied head;
                            DIR/config.json, DIR/model.safetensors)
    hf.py check DIR SHARD LOSS PROMPT
                            loads the exported DIR in transformers, checks its mean
                            cross-entropy over SHARD's windows (those trainc's --eval
                            reads: at 0, T, 2T, ... with T = max_position_embeddings)
                            equals LOSS within 1e-5 relative, and samples 40 tokens
                            after PROMPT with model.generate, decoded by the tokenizer
    hf.py peft BASE ADAPTER SHARD LOSS PROMPT
                            the same for PEFT's PeftModel: the model folder BASE with the
                            LoRA adapter folder ADAPTER (trainc export hf --adapter) over it
    hf.py sft TEXT OUT.jsonl
                            prompt-completion examples of TEXT's sentences, TRL's form
                            (trainc data sft's input): "Continue: " and a sentence's first
                            four words, then the rest of it

Runs with a python that has transformers (HF_PYTHON); exits 77 without it.
"""
import glob
import json
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
except ImportError as e:
    print("skip: %s (make deps makes .venv/hf with transformers; HF_PYTHON names its python)" % e)
    sys.exit(77)

# Llama 3's pre-tokenizer split, as its tokenizer.json writes it
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 1024    # ids, the two special tokens included
T = 64          # the context: config.json's max_position_embeddings, import's seq_len
torch.set_num_threads(1)


def tokenizer():
    """Byte-level BPE as Llama 3's: its split pattern, BOS prepended to every encode."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    texts = [open(f, encoding="utf-8", errors="replace").read() for f in files]
    tok.train_from_iterator([p for t in texts for p in t.split("\n\n")], trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def sft(text, out):
    """One example a sentence of six words or more: the prompt its first four, the
    completion the rest (at most 30 words)."""
    words = " ".join(open(text, encoding="utf-8").read().split())
    n = 0
    with open(out, "w") as f:
        for s in words.split(". "):
            w = s.split(" ")
            if len(w) >= 6:
                f.write(json.dumps({"prompt": "Continue: " + " ".join(w[:4]),
                                    "completion": " " + " ".join(w[4:34]) + "."}) + "\n")
                n += 1
    print("%s: %d examples" % (out, n))


def make(d):
    tok = tokenizer()
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=172,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=T, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                      eos_token_id=tok.token_to_id("<|end_of_text|>"))
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(d, safe_serialization=True)
    n = sum(p.numel() for p in m.parameters())
    print("%s: LlamaForCausalLM, %d parameters, vocabulary %d (the tokenizer's), context %d"
          % (d, n, cfg.vocab_size, T))


def shard_tokens(path):
    """A trainc token shard: 256 int32 of header (magic, version, count), then the ids."""
    hdr = np.fromfile(path, dtype="<i4", count=256)
    width = {20240520: "<u2", 20240801: "<u4"}[int(hdr[0])]
    ids = np.fromfile(path, dtype=width, offset=1024)
    assert len(ids) == hdr[2], (path, len(ids), hdr[2])
    return ids.astype(np.int64)


def check(d, shard, want, prompt, adapter=None):
    m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
    where = d
    if adapter:
        from peft import PeftModel
        m = PeftModel.from_pretrained(m, adapter)
        where = "%s with %s" % (d, adapter)
    m.eval()
    t = m.config.max_position_embeddings
    ids = torch.from_numpy(shard_tokens(shard))
    n = (len(ids) - 1) // t
    x = torch.stack([ids[w * t:w * t + t] for w in range(n)])
    y = torch.stack([ids[w * t + 1:w * t + t + 1] for w in range(n)])
    with torch.no_grad():
        logits = m(input_ids=x).logits.double()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    rel = abs(loss - want) / abs(want)
    print("transformers: %s from %s, loss %.7f over %d windows of %d; trainc --eval %.7f "
          "(%.1e relative)" % (type(m).__name__, where, loss, n, t, want, rel))
    if rel > 1e-5:
        sys.exit("FAIL: the losses differ by more than 1e-5 relative")
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    x = tok(prompt, return_tensors="pt")["input_ids"]   # BOS, then the prompt's ids
    torch.manual_seed(0)
    # sampled, as trainc's --sample (top_k 0: from the whole distribution): greedy decoding
    # of a model this briefly trained repeats its likeliest token. The end-of-text id is
    # the tokenizer's: the exported config.json names none, so LlamaConfig's default (2)
    # would stop generation at an ordinary token
    eot = tok.convert_tokens_to_ids("<|end_of_text|>")
    out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=40, do_sample=True,
                     temperature=0.7, top_k=0, eos_token_id=eot, pad_token_id=eot)
    new = out[0, x.shape[1]:]
    print("model.generate, 40 tokens at temperature 0.7, decoded:")
    print(prompt + tok.decode(new))
    if len(new) == 0:
        sys.exit("FAIL: generate gave no tokens")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 4 and sys.argv[1] == "sft":
        sft(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 7 and sys.argv[1] == "peft":
        check(sys.argv[2], sys.argv[4], float(sys.argv[5]), sys.argv[6], adapter=sys.argv[3])
    else:
        sys.exit(__doc__)
